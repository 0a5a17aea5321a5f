//! XArray against lock-wrapped `BTreeMap`/`HashMap` baselines, in the same
//! criterion groups, on 2^20 (~1M) entries at indices `0..2^20`.
//!
//! Groups:
//! - `load_seq`, `load_random`: one iteration = a batch of 1024 lookups
//!   (sequential, or from a precomputed random permutation of all indices;
//!   consecutive iterations walk on through the order, wrapping around).
//!   `xarray_load_ref` borrows under one pinned guard per batch
//!   (`guard.repin()` between batches); `xarray_load_arc` is `load` on an
//!   `XArray<Arc<u64>>` (pin + refcount up/down per lookup);
//!   `xarray_load_static` is `load` on `&'static u64` items (pin per lookup,
//!   no refcount). Baselines take a read lock per lookup; `hashmap_nolock`
//!   is the floor.
//! - `iterate`: one iteration = a full pass over all 2^20 entries.
//! - `store512`: one iteration = 512 contiguous stores at `2^21..2^21+512`
//!   into an array (or map) already holding the 2^20 read entries.
//!   `overwrite/*`: the 512 indices are populated and every iteration
//!   alternates between two item sets, so every store replaces an entry.
//!   `insert/*`: the 512 indices are erased in untimed setup
//!   (`iter_batched`, one setup per iteration), so the xarray must build its
//!   nodes again (10 of them) inside the timing; the cursor variant calls
//!   `reserve_nodes(10)` *inside* the timing, before taking the lock, and
//!   keeps the `NeedNodes` retry loop as a fallback.
//! - `concurrent_load`: one iteration = 1024 random `load_ref`s (or
//!   read-locked `HashMap::get`s) in total, split over 1 or 2 reader threads,
//!   while a writer thread stores and erases 4096 indices at `2^22..` (a
//!   region no reader touches). Threads are started per criterion sample
//!   (`iter_custom`); the clock runs from a barrier until the last reader is
//!   done. `writer_busy`: the writer loops flat out (on a 2-core machine this
//!   is 3 runnable threads on 2 cores with 2 readers). `writer_paced`: the
//!   writer sleeps 50 us after every 16 operations. `no_writer`: readers
//!   only, to show what the machine itself scales to.
//!
//! Criterion reports time per iteration and, via `Throughput::Elements`, the
//! per-entry rate.

use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, BatchSize, BenchmarkGroup, Criterion, Throughput};
use foliocache_xarray::{Cursor, Entry, EntryRef, Error, XArray};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

/// Entries in the read fixture: indices `0..N`.
const N: usize = 1 << 20;
/// Lookups per iteration of the load benchmarks; one pin per batch.
const BATCH: usize = 1024;
/// Stores per iteration of `store512`.
const RUN: usize = 512;
/// Where `store512` stores: an empty region of the array.
const STORE_BASE: u64 = 1 << 21;
/// Nodes a fresh 512-entry run at `STORE_BASE` needs (shift 12, shift 6, 8 leaves).
const RUN_NODES: usize = 10;
/// Where the concurrent writer stores and erases.
const WRITER_BASE: u64 = 1 << 22;
/// Indices the concurrent writer cycles through.
const WRITER_SPAN: u64 = 4096;

/// The command that reproduces these numbers.
const REPRODUCE: &str = "cargo bench -p foliocache-xarray --bench xarray";

/// `N` leaked `u64`s, 8-byte aligned: the `&'static u64` items.
fn values() -> &'static [u64] {
    static V: OnceLock<&'static [u64]> = OnceLock::new();
    V.get_or_init(|| Box::leak((0..2 * N as u64).collect::<Vec<_>>().into_boxed_slice()))
}

/// The shared read fixture: the same `N` entries in every structure.
struct Fixture {
    xa: XArray<&'static u64>,
    xa_arc: XArray<Arc<u64>>,
    btree: RwLock<BTreeMap<u64, &'static u64>>,
    hash: RwLock<HashMap<u64, &'static u64>>,
    hash_nolock: HashMap<u64, &'static u64>,
    seq: Vec<u64>,
    perm: Vec<u64>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let v = values();
        let xa = XArray::new();
        let xa_arc = XArray::new();
        let mut btree = BTreeMap::new();
        let mut hash = HashMap::new();
        for (i, r) in (0..).zip(&v[..N]) {
            xa.store(i, Entry::Item(r)).unwrap();
            xa_arc.store(i, Entry::Item(Arc::new(i))).unwrap();
            btree.insert(i, r);
            hash.insert(i, r);
        }
        let seq: Vec<u64> = (0..N as u64).collect();
        let mut perm = seq.clone();
        perm.shuffle(&mut StdRng::seed_from_u64(0x5eed));
        Fixture {
            xa,
            xa_arc,
            btree: RwLock::new(btree),
            hash_nolock: hash.clone(),
            hash: RwLock::new(hash),
            seq,
            perm,
        }
    })
}

fn configure(g: &mut BenchmarkGroup<'_, WallTime>) {
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10);
}

/// The next batch of `order`, wrapping around.
#[inline]
fn next_batch<'a>(order: &'a [u64], pos: &mut usize) -> &'a [u64] {
    let b = &order[*pos..*pos + BATCH];
    *pos = (*pos + BATCH) % order.len();
    b
}

#[inline]
fn addr(r: &u64) -> usize {
    r as *const u64 as usize
}

fn xa_load_ref_batch(
    xa: &XArray<&'static u64>,
    batch: &[u64],
    guard: &foliocache_xarray::ReadGuard,
) -> usize {
    let mut acc = 0usize;
    for &i in batch {
        if let Some(EntryRef::Item(r)) = xa.load_ref(black_box(i), guard) {
            acc ^= addr(r);
        }
    }
    acc
}

fn hash_locked_batch(m: &RwLock<HashMap<u64, &'static u64>>, batch: &[u64]) -> usize {
    let mut acc = 0usize;
    for &i in batch {
        if let Some(r) = m.read().unwrap().get(&black_box(i)).copied() {
            acc ^= addr(r);
        }
    }
    acc
}

fn loads(c: &mut Criterion, name: &str, order: fn(&'static Fixture) -> &'static [u64]) {
    let f = fixture();
    let order = order(f);
    let mut g = c.benchmark_group(name);
    configure(&mut g);
    g.throughput(Throughput::Elements(BATCH as u64));

    g.bench_function("xarray_load_ref", |b| {
        let mut pos = 0;
        let mut guard = f.xa.pin();
        b.iter(|| {
            guard.repin();
            xa_load_ref_batch(&f.xa, next_batch(order, &mut pos), &guard)
        })
    });
    g.bench_function("xarray_load_arc", |b| {
        let mut pos = 0;
        b.iter(|| {
            let mut acc = 0usize;
            for &i in next_batch(order, &mut pos) {
                if let Some(Entry::Item(a)) = f.xa_arc.load(black_box(i)) {
                    acc ^= Arc::as_ptr(&a) as usize;
                }
            }
            acc
        })
    });
    g.bench_function("xarray_load_static", |b| {
        let mut pos = 0;
        b.iter(|| {
            let mut acc = 0usize;
            for &i in next_batch(order, &mut pos) {
                if let Some(Entry::Item(r)) = f.xa.load(black_box(i)) {
                    acc ^= addr(r);
                }
            }
            acc
        })
    });
    g.bench_function("rwlock_btreemap", |b| {
        let mut pos = 0;
        b.iter(|| {
            let mut acc = 0usize;
            for &i in next_batch(order, &mut pos) {
                if let Some(r) = f.btree.read().unwrap().get(&black_box(i)).copied() {
                    acc ^= addr(r);
                }
            }
            acc
        })
    });
    g.bench_function("rwlock_hashmap", |b| {
        let mut pos = 0;
        b.iter(|| hash_locked_batch(&f.hash, next_batch(order, &mut pos)))
    });
    g.bench_function("hashmap_nolock", |b| {
        let mut pos = 0;
        b.iter(|| {
            let mut acc = 0usize;
            for &i in next_batch(order, &mut pos) {
                if let Some(r) = f.hash_nolock.get(&black_box(i)).copied() {
                    acc ^= addr(r);
                }
            }
            acc
        })
    });
    g.finish();
}

fn load_seq(c: &mut Criterion) {
    loads(c, "load_seq", |f| &f.seq);
}

fn load_random(c: &mut Criterion) {
    loads(c, "load_random", |f| &f.perm);
}

fn iterate(c: &mut Criterion) {
    let f = fixture();
    let mut g = c.benchmark_group("iterate");
    configure(&mut g);
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("xarray_iter_ref", |b| {
        b.iter(|| {
            let guard = f.xa.pin();
            let mut acc = 0usize;
            for (i, e) in f.xa.iter_ref(.., &guard).unwrap() {
                if let EntryRef::Item(r) = e {
                    acc ^= addr(r) ^ i as usize;
                }
            }
            acc
        })
    });
    g.bench_function("xarray_iter_arc", |b| {
        b.iter(|| {
            let mut acc = 0usize;
            for (i, e) in f.xa_arc.iter(..).unwrap() {
                if let Entry::Item(a) = e {
                    acc ^= Arc::as_ptr(&a) as usize ^ i as usize;
                }
            }
            acc
        })
    });
    g.bench_function("rwlock_btreemap", |b| {
        b.iter(|| {
            let m = f.btree.read().unwrap();
            let mut acc = 0usize;
            for (&i, &r) in m.iter() {
                acc ^= addr(r) ^ i as usize;
            }
            acc
        })
    });
    g.bench_function("rwlock_hashmap", |b| {
        b.iter(|| {
            let m = f.hash.read().unwrap();
            let mut acc = 0usize;
            for (&i, &r) in m.iter() {
                acc ^= addr(r) ^ i as usize;
            }
            acc
        })
    });
    g.finish();
}

/// Item set `k` (0 or 1) for the 512-store run: distinct addresses per set.
fn run_items(k: usize) -> &'static [u64] {
    &values()[N + k * RUN..N + (k + 1) * RUN]
}

/// Stores `items` at `base..` through one cursor in one lock hold (more
/// holds only if the pool runs short), pre-reserving `prealloc` nodes.
fn cursor_run(xa: &XArray<&'static u64>, base: u64, items: &'static [u64], prealloc: usize) {
    let mut cur = Cursor::new(xa, base);
    if prealloc > 0 {
        cur.reserve_nodes(prealloc).unwrap();
    }
    let mut next = 0usize;
    loop {
        let mut g = xa.lock();
        let mut need = None;
        while next < items.len() {
            cur.set_index(base + next as u64);
            match cur.store(&mut g, Some(Entry::Item(&items[next]))) {
                Ok(old) => {
                    black_box(old);
                    next += 1;
                }
                Err(Error::NeedNodes { nodes }) => {
                    need = Some(nodes);
                    break;
                }
                Err(e) => panic!("cursor store: {e}"),
            }
        }
        drop(g);
        match need {
            Some(n) => cur.reserve_nodes(n).unwrap(),
            None => break,
        }
    }
}

fn store512(c: &mut Criterion) {
    let v = values();
    let xa: XArray<&'static u64> = XArray::new();
    let mut bt = BTreeMap::new();
    let mut hm = HashMap::new();
    for (i, r) in (0..).zip(&v[..N]) {
        xa.store(i, Entry::Item(r)).unwrap();
        bt.insert(i, r);
        hm.insert(i, r);
    }
    let bt = Mutex::new(bt);
    let hm = Mutex::new(hm);
    let populate = || {
        for (j, r) in run_items(0).iter().enumerate() {
            let i = STORE_BASE + j as u64;
            xa.store(i, Entry::Item(r)).unwrap();
            bt.lock().unwrap().insert(i, r);
            hm.lock().unwrap().insert(i, r);
        }
    };
    // Sanity: a fresh cursor run really needs RUN_NODES nodes.
    let before = xa.node_count();
    cursor_run(&xa, STORE_BASE, run_items(0), 0);
    assert_eq!(xa.node_count() - before, RUN_NODES);
    populate();

    let mut g = c.benchmark_group("store512");
    configure(&mut g);
    g.throughput(Throughput::Elements(RUN as u64));

    // Every store replaces an entry: alternate between two item sets.
    g.bench_function("overwrite/xarray_store", |b| {
        let mut k = 0;
        b.iter(|| {
            k ^= 1;
            for (j, r) in run_items(k).iter().enumerate() {
                black_box(xa.store(STORE_BASE + j as u64, Entry::Item(r)).unwrap());
            }
        })
    });
    g.bench_function("overwrite/xarray_cursor", |b| {
        let mut k = 0;
        b.iter(|| {
            k ^= 1;
            cursor_run(&xa, STORE_BASE, run_items(k), 0);
        })
    });
    g.bench_function("overwrite/mutex_btreemap", |b| {
        let mut k = 0;
        b.iter(|| {
            k ^= 1;
            for (j, r) in run_items(k).iter().enumerate() {
                black_box(bt.lock().unwrap().insert(STORE_BASE + j as u64, r));
            }
        })
    });
    g.bench_function("overwrite/mutex_hashmap", |b| {
        let mut k = 0;
        b.iter(|| {
            k ^= 1;
            for (j, r) in run_items(k).iter().enumerate() {
                black_box(hm.lock().unwrap().insert(STORE_BASE + j as u64, r));
            }
        })
    });

    // Every store fills an empty index: the run is erased in untimed setup.
    let erase_xa = || {
        for j in 0..RUN as u64 {
            xa.erase(STORE_BASE + j);
        }
    };
    g.bench_function("insert/xarray_store", |b| {
        b.iter_batched(
            erase_xa,
            |()| {
                for (j, r) in run_items(0).iter().enumerate() {
                    black_box(xa.store(STORE_BASE + j as u64, Entry::Item(r)).unwrap());
                }
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("insert/xarray_cursor", |b| {
        b.iter_batched(
            erase_xa,
            |()| cursor_run(&xa, STORE_BASE, run_items(0), RUN_NODES),
            BatchSize::PerIteration,
        )
    });
    g.bench_function("insert/mutex_btreemap", |b| {
        b.iter_batched(
            || {
                let mut m = bt.lock().unwrap();
                for j in 0..RUN as u64 {
                    m.remove(&(STORE_BASE + j));
                }
            },
            |()| {
                for (j, r) in run_items(0).iter().enumerate() {
                    black_box(bt.lock().unwrap().insert(STORE_BASE + j as u64, r));
                }
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("insert/mutex_hashmap", |b| {
        b.iter_batched(
            || {
                let mut m = hm.lock().unwrap();
                for j in 0..RUN as u64 {
                    m.remove(&(STORE_BASE + j));
                }
            },
            |()| {
                for (j, r) in run_items(0).iter().enumerate() {
                    black_box(hm.lock().unwrap().insert(STORE_BASE + j as u64, r));
                }
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

/// Runs `iters` batches split over `readers` threads while `writer` loops
/// until told to stop; returns the wall time from the start barrier until
/// the last reader finished.
fn run_concurrent(
    readers: usize,
    iters: u64,
    reader: &(dyn Fn(usize, u64) -> usize + Sync),
    writer: &(dyn Fn(&AtomicBool) + Sync),
) -> Duration {
    let stop = AtomicBool::new(false);
    let start = Barrier::new(readers + 2);
    let done = Barrier::new(readers + 1);
    std::thread::scope(|s| {
        let w = s.spawn(|| {
            start.wait();
            writer(&stop);
        });
        for t in 0..readers {
            let (start, done) = (&start, &done);
            let share = iters / readers as u64 + u64::from((t as u64) < iters % readers as u64);
            s.spawn(move || {
                start.wait();
                black_box(reader(t, share));
                done.wait();
            });
        }
        start.wait();
        let t0 = Instant::now();
        done.wait();
        let elapsed = t0.elapsed();
        stop.store(true, Ordering::Relaxed);
        w.join().unwrap();
        elapsed
    })
}

/// Writer pacing: `None` flat out, `Some(d)` sleeps `d` after every 16 ops.
fn pace(ops: &mut u32, pause: Option<Duration>) {
    if let Some(d) = pause {
        *ops += 1;
        if (*ops).is_multiple_of(16) {
            std::thread::sleep(d);
        }
    }
}

/// The concurrent writer on the xarray: stores then erases `WRITER_SPAN`
/// indices far from the readers, until told to stop.
fn xa_write_loop(f: &Fixture, v: &'static [u64], stop: &AtomicBool, pause: Option<Duration>) {
    let mut ops = 0;
    while !stop.load(Ordering::Relaxed) {
        for j in 0..WRITER_SPAN {
            f.xa.store(WRITER_BASE + j, Entry::Item(&v[j as usize]))
                .unwrap();
            pace(&mut ops, pause);
        }
        for j in 0..WRITER_SPAN {
            f.xa.erase(WRITER_BASE + j);
            pace(&mut ops, pause);
        }
    }
}

/// The same writer on the `RwLock<HashMap>` baseline.
fn hash_write_loop(f: &Fixture, v: &'static [u64], stop: &AtomicBool, pause: Option<Duration>) {
    let mut ops = 0;
    while !stop.load(Ordering::Relaxed) {
        for j in 0..WRITER_SPAN {
            f.hash
                .write()
                .unwrap()
                .insert(WRITER_BASE + j, &v[j as usize]);
            pace(&mut ops, pause);
        }
        for j in 0..WRITER_SPAN {
            f.hash.write().unwrap().remove(&(WRITER_BASE + j));
            pace(&mut ops, pause);
        }
    }
}

fn concurrent_load(c: &mut Criterion) {
    let f = fixture();
    let v = values();
    let mut g = c.benchmark_group("concurrent_load");
    configure(&mut g);
    g.throughput(Throughput::Elements(BATCH as u64));

    // Each reader starts at its own place in the random permutation.
    let xa_reader = |t: usize, batches: u64| {
        let mut pos = (t * N / 2) % N;
        let mut guard = f.xa.pin();
        let mut acc = 0usize;
        for _ in 0..batches {
            guard.repin();
            acc ^= xa_load_ref_batch(&f.xa, next_batch(&f.perm, &mut pos), &guard);
        }
        acc
    };
    let hash_reader = |t: usize, batches: u64| {
        let mut pos = (t * N / 2) % N;
        let mut acc = 0usize;
        for _ in 0..batches {
            acc ^= hash_locked_batch(&f.hash, next_batch(&f.perm, &mut pos));
        }
        acc
    };
    let xa_writer = |stop: &AtomicBool, pause: Option<Duration>| xa_write_loop(f, v, stop, pause);
    let hash_writer =
        |stop: &AtomicBool, pause: Option<Duration>| hash_write_loop(f, v, stop, pause);

    // `None`: no writer at all (what the machine itself scales to).
    for (wname, pause) in [
        ("writer_busy", Some(None)),
        ("writer_paced", Some(Some(Duration::from_micros(50)))),
        ("no_writer", None),
    ] {
        for readers in [1, 2] {
            g.bench_function(format!("xarray_load_ref/{wname}/{readers}r"), |b| {
                b.iter_custom(|iters| {
                    run_concurrent(readers, iters, &xa_reader, &|s| {
                        if let Some(p) = pause {
                            xa_writer(s, p)
                        }
                    })
                })
            });
            g.bench_function(format!("rwlock_hashmap/{wname}/{readers}r"), |b| {
                b.iter_custom(|iters| {
                    run_concurrent(readers, iters, &hash_reader, &|s| {
                        if let Some(p) = pause {
                            hash_writer(s, p)
                        }
                    })
                })
            });
        }
    }
    g.finish();
}

criterion_group!(
    benches,
    load_seq,
    load_random,
    iterate,
    store512,
    concurrent_load
);

/// CPU time this thread has run, in ns (the scheduler's own account).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Loads done and reader CPU time used by `readers` threads in `run`, while
/// `writer` runs (or not).
fn scaling_run(
    readers: usize,
    run: Duration,
    reader: &(dyn Fn(usize, u64) -> usize + Sync),
    writer: Option<&(dyn Fn(&AtomicBool) + Sync)>,
) -> (u64, u64, Duration) {
    let stop = AtomicBool::new(false);
    let start = Barrier::new(readers + 2);
    std::thread::scope(|s| {
        let w = s.spawn(|| {
            start.wait();
            if let Some(w) = writer {
                w(&stop);
            }
        });
        let rs: Vec<_> = (0..readers)
            .map(|t| {
                let (start, stop) = (&start, &stop);
                s.spawn(move || {
                    start.wait();
                    let cpu0 = thread_cpu_ns();
                    let mut batches = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        black_box(reader(t + 2 * batches as usize, 1));
                        batches += 1;
                    }
                    (batches * BATCH as u64, thread_cpu_ns() - cpu0)
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        std::thread::sleep(run);
        stop.store(true, Ordering::Relaxed);
        let (mut loads, mut cpu) = (0, 0);
        for r in rs {
            let (l, c) = r.join().unwrap();
            loads += l;
            cpu += c;
        }
        let wall = t0.elapsed();
        w.join().unwrap();
        (loads, cpu, wall)
    })
}

/// Reader scaling, 1 vs 2 readers, in wall-clock loads/s and in loads per
/// reader CPU-second. On a 2-core machine a busy writer plus 2 readers is 3
/// runnable threads on 2 cores, so the wall-clock ratio is capped near 1.33x
/// there by the machine, not the tree; loads per reader CPU-second show
/// whether readers slow each other (or are slowed by the writer) at all.
fn scaling_report() {
    let f = fixture();
    let v = values();
    let run = Duration::from_millis(1500);
    let xa_reader = |seed: usize, _: u64| {
        let mut pos = (seed.wrapping_mul(7919) * BATCH) % N;
        let guard = f.xa.pin();
        xa_load_ref_batch(&f.xa, next_batch(&f.perm, &mut pos), &guard)
    };
    let hash_reader = |seed: usize, _: u64| {
        let mut pos = (seed.wrapping_mul(7919) * BATCH) % N;
        hash_locked_batch(&f.hash, next_batch(&f.perm, &mut pos))
    };
    let xa_writer = |stop: &AtomicBool, pause: Option<Duration>| xa_write_loop(f, v, stop, pause);
    let hash_writer =
        |stop: &AtomicBool, pause: Option<Duration>| hash_write_loop(f, v, stop, pause);
    eprintln!("\nreader scaling (1 vs 2 readers, {run:?} each, random loads over 2^20 entries):");
    eprintln!(
        "  {:<16} {:<13} {:>12} {:>12} {:>9} {:>14} {:>14} {:>9}",
        "structure",
        "writer",
        "1r Mload/s",
        "2r Mload/s",
        "2r/1r",
        "1r M/cpu-s",
        "2r M/cpu-s",
        "per-cpu"
    );
    let paced = Some(Duration::from_micros(50));
    for (name, reader, which) in [
        (
            "xarray load_ref",
            &xa_reader as &(dyn Fn(usize, u64) -> usize + Sync),
            0,
        ),
        ("rwlock hashmap", &hash_reader, 1),
    ] {
        for (wname, pause) in [("none", None), ("paced", Some(paced)), ("busy", Some(None))] {
            let w_xa = |s: &AtomicBool| xa_writer(s, pause.flatten());
            let w_hm = |s: &AtomicBool| hash_writer(s, pause.flatten());
            let writer: Option<&(dyn Fn(&AtomicBool) + Sync)> = match (pause, which) {
                (None, _) => None,
                (Some(_), 0) => Some(&w_xa),
                (Some(_), _) => Some(&w_hm),
            };
            let (l1, c1, t1) = scaling_run(1, run, reader, writer);
            let (l2, c2, t2) = scaling_run(2, run, reader, writer);
            let rate = |l: u64, t: Duration| l as f64 / t.as_secs_f64() / 1e6;
            let per_cpu = |l: u64, c: u64| l as f64 / (c.max(1) as f64 / 1e9) / 1e6;
            eprintln!(
                "  {:<16} {:<13} {:>12.1} {:>12.1} {:>8.2}x {:>14.1} {:>14.1} {:>8.2}x",
                name,
                wname,
                rate(l1, t1),
                rate(l2, t2),
                rate(l2, t2) / rate(l1, t1),
                per_cpu(l1, c1),
                per_cpu(l2, c2),
                per_cpu(l2, c2) / per_cpu(l1, c1),
            );
        }
    }
}

fn main() {
    eprintln!(
        "xarray benchmarks; reproduce with:\n  {REPRODUCE}\n  (smoke test: append `-- --test`; \
         reader scaling only: `-- scaling`)"
    );
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|a| a == "--test" || a == "--list");
    let filter = args
        .iter()
        .find(|a| !a.starts_with('-') && a.as_str() != "scaling");
    let only_scaling = args.iter().any(|a| a == "scaling");
    if !only_scaling {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
    if !smoke && (only_scaling || filter.is_none_or(|f| "concurrent_load".contains(f.as_str()))) {
        scaling_report();
    }
}
