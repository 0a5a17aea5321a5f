//! Micro-benchmarks of the folio arena against the system allocator (glibc
//! `aligned_alloc`/`free` through `std::alloc`) as the baseline: one block
//! of order 0 (4 KiB) and of order 9 (2 MiB), and a readahead window of 32
//! pages taken with one `alloc_bulk` against 32 single calls.
//!
//! And a cache's build (`cache_build`): its time and, printed beside it,
//! the resident memory it adds, for 64 MiB and 16 GiB with the default
//! `Populate::Lazy` and for 64 MiB with `Populate::Eager` (16 GiB eager
//! would fault 16 GiB in per iteration).
//!
//! Reproduce: `cargo bench -p foliocache --bench arena`.
//!
//! The arena is built with `Populate::Lazy`: alloc and free never touch the
//! memory; the first block handed out in each 2 MiB chunk faults the chunk
//! in, once, before the measurements (see the arena tests for its cost).

use std::alloc::{alloc, dealloc, Layout};
use std::hint::black_box;

use criterion::Criterion;
use foliocache::internals::arena::{Arena, PageId, Populate, PAGE_SIZE};
use foliocache::Cache;

fn std_alloc_free(layout: Layout) {
    // SAFETY: layout has a non-zero size; the block is freed with the same
    // layout right away and never dereferenced.
    unsafe {
        let p = alloc(layout);
        assert!(!p.is_null());
        dealloc(black_box(p), layout);
    }
}

fn bench(c: &mut Criterion) {
    let arena = Arena::new(64 << 20, Populate::Lazy).expect("arena");
    // A little fragmentation, as a running cache has: hold every other
    // order-0 page of the first 2 MiB.
    let mut held = Vec::new();
    arena.alloc_bulk(0, 512, &mut held);
    let mut keep = Vec::new();
    for (i, page) in held.into_iter().enumerate() {
        if i % 2 == 0 {
            keep.push(page);
        } else {
            arena.free(page, 0).unwrap();
        }
    }

    for order in [0u32, 9] {
        let mut g = c.benchmark_group(format!("alloc_free_order{order}"));
        g.bench_function("arena", |b| {
            b.iter(|| {
                let page = arena.alloc(black_box(order)).unwrap();
                arena.free(black_box(page), order).unwrap();
            })
        });
        let layout = Layout::from_size_align(PAGE_SIZE << order, PAGE_SIZE << order).unwrap();
        g.bench_function("std_alloc", |b| b.iter(|| std_alloc_free(layout)));
        g.finish();
    }

    let mut g = c.benchmark_group("window32_order0");
    let mut window: Vec<PageId> = Vec::with_capacity(32);
    g.bench_function("arena_alloc_bulk", |b| {
        b.iter(|| {
            assert_eq!(arena.alloc_bulk(0, 32, &mut window), 32);
            for page in window.drain(..) {
                arena.free(page, 0).unwrap();
            }
        })
    });
    g.bench_function("arena_32_allocs", |b| {
        b.iter(|| {
            for _ in 0..32 {
                window.push(arena.alloc(0).unwrap());
            }
            for page in window.drain(..) {
                arena.free(page, 0).unwrap();
            }
        })
    });
    let layout = Layout::from_size_align(PAGE_SIZE, PAGE_SIZE).unwrap();
    let mut ptrs = Vec::with_capacity(32);
    g.bench_function("std_alloc", |b| {
        b.iter(|| {
            for _ in 0..32 {
                // SAFETY: non-zero size; freed below with the same layout.
                ptrs.push(unsafe { alloc(layout) });
            }
            for p in ptrs.drain(..) {
                // SAFETY: allocated above with this layout, freed once.
                unsafe { dealloc(black_box(p), layout) };
            }
        })
    });
    g.finish();

    for page in keep {
        arena.free(page, 0).unwrap();
    }
}

/// Resident memory of the process, from `/proc/self/statm`.
fn rss() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .unwrap_or(0)
        * PAGE_SIZE
}

fn bench_build(c: &mut Criterion) {
    let mut g = c.benchmark_group("cache_build");
    g.sample_size(10);
    for (name, capacity, populate) in [
        ("lazy_64MiB", 64usize << 20, Populate::Lazy),
        ("lazy_16GiB", 16 << 30, Populate::Lazy),
        ("eager_64MiB", 64 << 20, Populate::Eager),
    ] {
        let build = || {
            Cache::builder()
                .capacity(capacity)
                .populate(populate)
                .build()
        };
        let before = rss();
        let start = std::time::Instant::now();
        let cache = match build() {
            Ok(cache) => cache,
            Err(e) => {
                eprintln!("cache_build/{name}: skipped: {e}");
                continue;
            }
        };
        eprintln!(
            "cache_build/{name}: built in {:.2} ms, resident memory +{:.1} MiB",
            start.elapsed().as_secs_f64() * 1e3,
            rss().saturating_sub(before) as f64 / (1 << 20) as f64
        );
        drop(cache);
        g.bench_function(name, |b| b.iter(|| black_box(build().expect("cache"))));
    }
    g.finish();
}

fn main() {
    eprintln!("reproduce: cargo bench -p foliocache --bench arena");
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    bench_build(&mut c);
    c.final_summary();
}
