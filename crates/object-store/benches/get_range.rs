//! A cached `get_range` against the floor of the trait: `InMemory`'s
//! `get_range` (a lookup and a slice of a `Bytes`, behind the same boxed
//! future and one-piece stream every `ObjectStore` answers with), and a
//! local file's foliocache hit (`File::read_at` into the caller's buffer).
//!
//! Reproduce: `cargo bench -p foliocache-object-store --bench get_range`
//! (`-- --test`: a smoke run, each once).
//!
//! # Setup
//! An object of 64 MiB, put in an `InMemory` store; a `CachedStore` over
//! another `InMemory` holding the same bytes twice (one object for each
//! workload, each warmed by reading every range its workload reads, so
//! that each is a hit in the folios its own misses made), in a cache of
//! 144 MiB; a local file of the same bytes under `CARGO_TARGET_TMPDIR`,
//! opened in a cache of 80 MiB and read once. A `CachedStore` hit in one
//! folio is lent (`Bytes::from_owner` over an owned pin, no copy); the
//! local file's `read_at` copies into the caller's buffer. Every `get_range` is polled once, with
//! no executor (`now_or_never`): a hit that is not answered on the first
//! poll panics the bench, so it also checks that hits take no async
//! machinery.
//!
//! # Interleaved rounds
//! Criterion measures one contender after another, seconds apart, which
//! on a loaded host compares two loads as much as two stores. So after
//! the groups, each workload's contenders also run in alternation, one
//! round of `RANGES` reads each, [`ROUNDS`] times, and the per-read
//! time's minimum and median over rounds are printed with their ratios
//! (the minimum: the round least disturbed).
//!
//! # Workloads (one criterion group each, every contender in it)
//! - `get_range_4k`: 4 KiB ranges at pseudo-random page offsets:
//!   `CachedStore` against `InMemory`;
//! - `get_range_64k`: 64 KiB ranges at pseudo-random 64 KiB offsets:
//!   `CachedStore` against `foliocache::File::read_at` of a local file
//!   (the contender), and `InMemory` beside them.

use std::hint::black_box;
use std::ops::Range;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use foliocache_object_store::CachedStore;
use futures_util::FutureExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

const SIZE: u64 = 64 << 20;
/// Ranges visited per workload (the same ones, in the same order, for
/// each contender).
const RANGES: u64 = 1024;

/// Rounds of the interleaved comparison (one with criterion's `--test`).
const ROUNDS: usize = 201;

/// Runs `contenders` in alternation, one round each, [`ROUNDS`] times,
/// and prints each one's per-read time (minimum and median over rounds,
/// ns) and its ratio to the first's.
fn interleaved(group: &str, contenders: &mut [(&str, &mut dyn FnMut() -> usize)]) {
    let rounds = match std::env::args().any(|a| a == "--test") {
        true => 1,
        false => ROUNDS,
    };
    let mut times = vec![Vec::with_capacity(rounds); contenders.len()];
    for _ in 0..rounds {
        for (i, (_, f)) in contenders.iter_mut().enumerate() {
            let t = std::time::Instant::now();
            black_box(f());
            times[i].push(t.elapsed().as_nanos() as f64 / RANGES as f64);
        }
    }
    let stat = |t: &mut Vec<f64>| {
        t.sort_by(f64::total_cmp);
        (t[0], t[t.len() / 2])
    };
    let first = stat(&mut times[0]);
    for ((name, _), t) in contenders.iter().zip(&mut times) {
        let (min, med) = stat(t);
        println!(
            "{group} interleaved ({rounds} rounds): {name}: min {min:.0} ns, median {med:.0} ns a read; \
             speed against {}: {:.2}x (min), {:.2}x (median)",
            contenders[0].0,
            first.0 / min,
            first.1 / med,
        );
    }
}

/// `RANGES` ranges of `len` bytes at pseudo-random multiples of `len`.
fn ranges(len: u64) -> Vec<Range<u64>> {
    let slots = SIZE / len;
    (0..RANGES)
        .map(|i| {
            let at = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 17) % slots * len;
            at..at + len
        })
        .collect()
}

/// The bytes of the object.
fn object() -> Vec<u8> {
    (0..SIZE)
        .map(|i| (i.wrapping_mul(0x9E37_79B9) >> 13) as u8)
        .collect()
}

/// Reads `ranges` of `path` from `store`, each `get_range` polled once
/// (a hit is ready at once: one that is not panics); the bytes read.
fn read_all(store: &impl ObjectStore, path: &Path, ranges: &[Range<u64>]) -> usize {
    let mut n = 0;
    for r in ranges {
        let got = store.get_range(path, r.clone()).now_or_never();
        n += black_box(got.expect("a hit is ready").expect("read")).len();
    }
    n
}

/// [`read_all`] with `then` of each range and its bytes (a bound's extra
/// work) in place of their length.
fn read_with(
    store: &impl ObjectStore,
    path: &Path,
    ranges: &[Range<u64>],
    then: impl Fn(&Range<u64>, Bytes) -> usize,
) -> usize {
    let mut n = 0;
    for r in ranges {
        let got = store.get_range(path, r.clone()).now_or_never();
        n += black_box(then(r, got.expect("a hit is ready").expect("read")));
    }
    n
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let data = object();
    let path = Path::from("bench/object");
    // The object again, for the 64 KiB workload's own folios.
    let path_64k = Path::from("bench/object-64k");
    let memory = InMemory::new();
    let cache = foliocache::Cache::builder()
        .capacity((2 * SIZE + SIZE / 4) as usize)
        .build()
        .expect("cache");
    let cached = CachedStore::new(InMemory::new(), cache);
    rt.block_on(async {
        memory.put(&path, data.clone().into()).await.expect("put");
        for (p, len) in [(&path, 4096), (&path_64k, 64 << 10)] {
            let inner = cached.inner();
            inner.put(p, data.clone().into()).await.expect("put");
            for r in ranges(len) {
                cached.get_range(p, r).await.expect("warm");
            }
        }
    });
    let mut g = c.benchmark_group("get_range_4k");
    g.throughput(Throughput::Bytes(4096 * RANGES));
    let small = ranges(4096);
    g.bench_function("InMemory", |b| b.iter(|| read_all(&memory, &path, &small)));
    g.bench_function("CachedStore", |b| {
        b.iter(|| read_all(&cached, &path, &small))
    });
    g.finish();

    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let file_path = dir.join("objstore-bench-get-range");
    std::fs::write(&file_path, &data).expect("write the local file");
    // The bounds: the same 4 KiB pages of a local file read at random
    // (no readahead: 4 KiB folios, as the store's random misses make).
    let lend_cache = foliocache::Cache::builder()
        .capacity((SIZE / 4) as usize)
        .build()
        .expect("cache");
    let lend_file = lend_cache.open(&file_path).expect("open");
    lend_file
        .advise(0, SIZE, foliocache::Advice::Random)
        .expect("advise");
    let mut page = vec![0u8; 4096];
    for r in &small {
        lend_file.read_at(&mut page, r.start).expect("warm");
    }
    let lend = |r: &Range<u64>| {
        let pin = lend_file.pin_cached_owned(r.start, 4096).expect("cached");
        Bytes::from_owner(pin)
    };
    let copy = |r: &Range<u64>| {
        let pin = lend_file.pin_cached(r.start, 4096).expect("cached");
        Bytes::copy_from_slice(&pin)
    };
    interleaved(
        "get_range_4k",
        &mut [
            ("InMemory", &mut || read_all(&memory, &path, &small)),
            ("CachedStore", &mut || read_all(&cached, &path, &small)),
            ("InMemory + a lend (the floor lending)", &mut || {
                read_with(&memory, &path, &small, |r, b| b.len() + lend(r).len())
            }),
            ("InMemory + a copy (the floor copying)", &mut || {
                read_with(&memory, &path, &small, |_, b| {
                    Bytes::copy_from_slice(&b).len()
                })
            }),
            ("the lend alone", &mut || {
                small.iter().map(|r| black_box(lend(r)).len()).sum()
            }),
            ("a pin and a copy alone", &mut || {
                small.iter().map(|r| black_box(copy(r)).len()).sum()
            }),
        ],
    );
    let file_cache = foliocache::Cache::builder()
        .capacity((SIZE + SIZE / 4) as usize)
        .build()
        .expect("cache");
    let file = file_cache.open(&file_path).expect("open");
    let large = ranges(64 << 10);
    let mut buf = vec![0u8; 64 << 10];
    for r in &large {
        file.read_at(&mut buf, r.start).expect("warm");
    }
    let mut g = c.benchmark_group("get_range_64k");
    g.throughput(Throughput::Bytes((64 << 10) * RANGES));
    g.bench_function("File::read_at", |b| {
        b.iter(|| {
            let mut n = 0;
            for r in &large {
                n += file.read_at(black_box(&mut buf), r.start).expect("read");
            }
            n
        })
    });
    g.bench_function("InMemory", |b| b.iter(|| read_all(&memory, &path, &large)));
    g.bench_function("CachedStore", |b| {
        b.iter(|| read_all(&cached, &path_64k, &large))
    });
    g.finish();
    let mut read_file = || {
        let mut n = 0;
        for r in &large {
            n += file.read_at(black_box(&mut buf), r.start).expect("read");
        }
        n
    };
    interleaved(
        "get_range_64k",
        &mut [
            ("File::read_at", &mut read_file),
            ("InMemory", &mut || read_all(&memory, &path, &large)),
            ("CachedStore", &mut || read_all(&cached, &path_64k, &large)),
        ],
    );
    let _ = std::fs::remove_file(&file_path);
}

criterion_group!(benches, bench);
criterion_main!(benches);
