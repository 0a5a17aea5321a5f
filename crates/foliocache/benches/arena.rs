//! Micro-benchmarks of the folio arena against the system allocator (glibc
//! `aligned_alloc`/`free` through `std::alloc`) as the baseline: one block
//! of order 0 (4 KiB) and of order 9 (2 MiB), and a readahead window of 32
//! pages taken with one `alloc_bulk` against 32 single calls.
//!
//! Reproduce: `cargo bench -p foliocache --bench arena`.
//!
//! The arena is built with `Populate::Lazy`: alloc and free never touch the
//! memory, so no populate cost is paid here (see the arena tests for it).

use std::alloc::{alloc, dealloc, Layout};
use std::hint::black_box;

use criterion::Criterion;
use foliocache::internals::arena::{Arena, PageId, Populate, PAGE_SIZE};

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

fn main() {
    eprintln!("reproduce: cargo bench -p foliocache --bench arena");
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
