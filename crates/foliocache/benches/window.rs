//! Inserting a readahead window (after the proposed
//! `filemap_add_folio_range`, one index lock hold per window): `batched`,
//! every folio of the window allocated first (`Mapping::new_folios`, one
//! hold of the allocator's lock) and inserted with one
//! `Mapping::add_folio_range` (one hold of the index lock, one of the LRU
//! lock), against `single`, one `new_folio` and one `add_folio` per folio
//! (the kernel's readahead loop, one `filemap_add_folio` a folio), side by
//! side in one run. Windows of 32 and 512 one-page folios, and the 8 MiB
//! window of four 2 MiB folios that readahead builds once its folio order
//! has ramped up, from 1 thread and from 2 threads inserting disjoint
//! windows of one file at once.
//!
//! Reproduce: `cargo bench -p foliocache --bench window` (`-- --test` is a
//! smoke run).
//!
//! Only the insertion is timed (allocation included, as readahead pays it);
//! the folios are then unlocked and removed again (`Mapping::invalidate`)
//! outside the timing. The arena is populated lazily: folio memory is never
//! touched here. At the end the bench prints the time per folio of each
//! variant and the ratio single / batched, from this run.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use backing::MemBacking;
use criterion::{BenchmarkGroup, Throughput};
use foliocache::filemap::{LockedFolio, Mapping};
use foliocache::{Cache, File, Populate};

mod common;

const PAGE: u64 = 4096;
/// Windows per thread per timed iteration.
const WINDOWS: u64 = 8;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Variant {
    Batched,
    Single,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Batched => "batched",
            Variant::Single => "single",
        }
    }
}

/// A window: `n` folios of `2^order` pages each.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct Shape {
    n: u64,
    order: u32,
}

impl Shape {
    const ALL: [Shape; 3] = [
        Shape { n: 32, order: 0 },
        Shape { n: 512, order: 0 },
        Shape { n: 4, order: 9 },
    ];

    fn pages(self) -> u64 {
        self.n << self.order
    }

    fn name(self) -> String {
        format!("{}x{}k", self.n, 4 << self.order)
    }
}

/// Inserts one window at `start`; returns the folios (locked, in the
/// mapping).
fn insert(m: &Mapping, v: Variant, start: u64, w: Shape) -> Vec<LockedFolio<'_>> {
    let n = w.n;
    match v {
        Variant::Batched => {
            let mut folios = Vec::with_capacity(n as usize);
            let got = m.new_folios(w.order, n as usize, &mut folios);
            assert_eq!(got as u64, n, "the whole window's memory at once");
            let done = m.add_folio_range(&folios, start).expect("add_folio_range");
            assert_eq!(done as u64, n, "the whole window went in");
            folios
        }
        Variant::Single => (0..n)
            .map(|i| {
                let f = m.new_folio(w.order).expect("new_folio");
                m.add_folio(&f, start + (i << w.order)).expect("add_folio");
                f
            })
            .collect(),
    }
}

/// Times `WINDOWS` windows of shape `w` inserted by each of `threads`
/// threads (thread `t` at its own range), then removes them (untimed).
/// Returns the longest thread's time.
fn round(file: &File, v: Variant, w: Shape, threads: u64) -> Duration {
    let n = w.pages();
    let m = file.mapping();
    let barrier = Barrier::new(threads as usize);
    let times: Vec<Duration> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    let base = t * WINDOWS * n;
                    let mut held = Vec::with_capacity((WINDOWS * w.n) as usize);
                    barrier.wait();
                    let start = Instant::now();
                    for i in 0..WINDOWS {
                        held.extend(insert(m, v, base + i * n, w));
                    }
                    let took = start.elapsed();
                    for f in held {
                        f.unlock();
                    }
                    took
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let total = threads * WINDOWS * n;
    let dropped = m.invalidate(0, total);
    assert_eq!(dropped, total, "every folio inserted was removed again");
    times.into_iter().max().unwrap_or_default()
}

/// Time and folios inserted per (threads, window, variant), for the
/// summary.
type Means = common::Means<(u64, Shape, Variant)>;

fn bench(g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>, file: &File, means: &Means) {
    for threads in [1u64, 2] {
        for w in Shape::ALL {
            g.throughput(Throughput::Elements(threads * WINDOWS * w.n));
            for v in [Variant::Batched, Variant::Single] {
                let id = format!("{}/{}/{threads}thr", v.name(), w.name());
                g.bench_function(id, |b| {
                    b.iter_custom(|iters| {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            total += round(file, v, w, threads);
                        }
                        // Per folio of one thread (the threads run at once).
                        common::record(means, (threads, w, v), total, iters * WINDOWS * w.n);
                        total
                    })
                });
            }
        }
    }
}

fn main() {
    let mut c = common::criterion("window");
    let pages = 2 * WINDOWS * Shape::ALL.iter().map(|w| w.pages()).max().unwrap_or(1);
    let cache = Cache::builder()
        .capacity((pages * PAGE) as usize)
        .populate(Populate::Lazy)
        .build()
        .expect("cache");
    let file = cache
        .open_backing(MemBacking::with_data(vec![0u8; (pages * PAGE) as usize]))
        .expect("open");
    let means = Means::default();
    let mut g = c.benchmark_group("window_insert");
    bench(&mut g, &file, &means);
    g.finish();
    c.final_summary();

    let means = means.into_inner();
    eprintln!("\nns per folio inserted (each thread's), and single / batched:");
    eprintln!(
        "{:<8} {:>7} {:>9} {:>9} {:>7}",
        "threads", "window", "batched", "single", "ratio"
    );
    for threads in [1u64, 2] {
        for w in Shape::ALL {
            let ns = |v| common::mean_ns(&means, &(threads, w, v));
            let (b, s) = (ns(Variant::Batched), ns(Variant::Single));
            eprintln!(
                "{threads:<8} {:>7} {:>9} {:>9} {:>7}",
                w.name(),
                common::ns_text(b),
                common::ns_text(s),
                common::ratio_text(b, s)
            );
        }
    }
}
