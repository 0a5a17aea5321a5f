//! `File::read_many`: batches of reads whose misses are read together.
//!
//! What must hold (`docs/design.md`, "Batched reads"):
//! - every request gets what `read_at` would give it: the file's bytes,
//!   short only at end of file, 0 past it, whatever the batch (overlapping
//!   requests, any order, a cache smaller than the batch);
//! - a failing backing read fails exactly the requests that need its bytes;
//!   the others get theirs, and the cache is consistent afterwards;
//! - concurrent readers of the same folios read each page once (no double
//!   IO), and `read_many` racing `set_len` and `read_at` never hangs and
//!   never returns bytes other than the file's or the zeros a truncate left.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use backing::{FaultyBacking, MemBacking};
use foliocache::{Cache, File, ReadQueue, ReadReq};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{assert_at_rest, RecordingBacking};
use test_support::cache::TestCache;
use test_support::{nonzero_bytes, TempPath};

const P: u64 = 4096;

/// A file of 64 pages and a bit of nonzero bytes (`seed`) at `tmp`,
/// opened through a cache of half its size: the bytes, the path, the
/// cache, the file.
fn larger_than_the_cache(tmp: &str, seed: u64) -> (Vec<u8>, TempPath, Cache, File) {
    let data = nonzero_bytes(64 * P as usize + 1234, seed);
    let tmp = TempPath::with_data(tmp, &data);
    let c = TestCache::bytes(32 * P as usize)
        .max_folio(16 * P as usize)
        .build();
    let f = c.open(&tmp.path).unwrap();
    (data, tmp, c, f)
}

/// A cache of `bytes` with folios up to `max_folio` bytes and no readahead:
/// the IO is the requests' own.
fn cache(bytes: usize, max_folio: usize) -> Cache {
    TestCache::bytes(bytes)
        .max_folio(max_folio)
        .no_readahead()
        .build()
}

/// A file of `pages` pages of nonzero bytes (`seed`) on a memory backing
/// that records its reads, in a 1 MiB cache with folios up to `max_folio`
/// bytes and no readahead: the bytes, the cache, the backing, the file.
fn recorded(
    pages: u64,
    seed: u64,
    max_folio: usize,
) -> (Vec<u8>, Cache, Arc<RecordingBacking<MemBacking>>, File) {
    let data = nonzero_bytes((pages * P) as usize, seed);
    let c = cache(1 << 20, max_folio);
    let b = Arc::new(RecordingBacking::new(MemBacking::with_data(data.clone())));
    let f = c.open_backing(b.clone()).unwrap();
    (data, c, b, f)
}

/// The backing read `pages` pages, each once (it read `pages` in all and the
/// cache counted as many misses).
#[track_caller]
fn assert_read_once(c: &Cache, b: &RecordingBacking<MemBacking>, pages: u64) {
    let read: u64 = b.page_runs().iter().map(|&(_, n)| n).sum();
    assert_eq!(read, pages, "{:?}", b.page_runs());
    assert_eq!(c.stats().misses, pages);
}

/// One `read_many` of `reqs` gives each request what `read_at` would.
#[track_caller]
fn assert_reads(f: &File, reqs: &[(u64, usize)], data: &[u8]) {
    for (r, &(off, len)) in run(f, reqs).into_iter().zip(reqs) {
        assert_eq!(r.unwrap(), expect(data, off, len), "at {off}");
    }
}

/// What `read_at` gives for `len` bytes at `off` of `data`.
fn expect(data: &[u8], off: u64, len: usize) -> &[u8] {
    let from = (off as usize).min(data.len());
    let to = off.saturating_add(len as u64).min(data.len() as u64) as usize;
    &data[from..to.max(from)]
}

/// Runs `reqs` (offset, length) through `read_many` and returns each
/// request's bytes or error.
fn run(f: &File, reqs: &[(u64, usize)]) -> Vec<std::io::Result<Vec<u8>>> {
    let mut bufs: Vec<Vec<u8>> = reqs.iter().map(|&(_, n)| vec![0u8; n]).collect();
    let mut rr: Vec<ReadReq<'_>> = reqs
        .iter()
        .zip(bufs.iter_mut())
        .map(|(&(off, _), b)| ReadReq::new(off, b))
        .collect();
    f.read_many(&mut rr).unwrap();
    let results: Vec<_> = rr
        .into_iter()
        .map(|r| r.result.expect("completed"))
        .collect();
    results
        .into_iter()
        .zip(bufs)
        .map(|(r, mut b)| {
            r.map(|n| {
                b.truncate(n);
                b
            })
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random batches against the file's bytes, through O_DIRECT and the
    /// IO engine, in a cache smaller than the file.
    #[test]
    fn batches_read_the_files_bytes(
        seed in any::<u64>(),
        batches in prop::collection::vec(
            prop::collection::vec((0u64..70 * P, 0usize..20_000), 1..40), 1..4),
    ) {
        let (data, _tmp, c, f) = larger_than_the_cache("read-many-model", seed);
        for batch in &batches {
            for (r, &(off, len)) in run(&f, batch).into_iter().zip(batch) {
                let got = r.unwrap();
                prop_assert_eq!(&got[..], expect(&data, off, len), "at {} len {}", off, len);
            }
        }
        assert_at_rest(&c);
    }
}

/// Runs `reqs` through a [`ReadQueue`] `depth` deep: `depth` pushed, then
/// one pushed for every one popped. Each pop must complete the oldest
/// read, at the offset it was queued at.
fn run_queued(f: &File, reqs: &[(u64, usize)], depth: usize) -> Vec<std::io::Result<Vec<u8>>> {
    let mut q: ReadQueue<'_> = f.read_queue();
    let mut next = reqs.iter();
    let mut out = Vec::new();
    for &(off, len) in next.by_ref().take(depth) {
        q.push(off, len);
    }
    for &(off, len) in reqs {
        let mut buf = vec![0u8; len];
        let done = q.pop(&mut buf).expect("a read is queued");
        assert_eq!(done.offset, off, "oldest first");
        out.push(done.result.map(|n| {
            buf.truncate(n);
            buf
        }));
        if let Some(&(o, l)) = next.next() {
            q.push(o, l);
        }
    }
    assert!(q.is_empty() && q.pop(&mut []).is_none());
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random streams of reads through a queue of random depth against
    /// the file's bytes, in a cache smaller than the file.
    #[test]
    fn queued_reads_read_the_files_bytes(
        seed in any::<u64>(),
        depth in 1usize..40,
        reqs in prop::collection::vec((0u64..70 * P, 0usize..20_000), 1..80),
    ) {
        let (data, _tmp, c, f) = larger_than_the_cache("read-queue-model", seed);
        for (r, &(off, len)) in run_queued(&f, &reqs, depth).into_iter().zip(&reqs) {
            let got = r.unwrap();
            prop_assert_eq!(&got[..], expect(&data, off, len), "at {} len {}", off, len);
        }
        assert_at_rest(&c);
    }
}

/// A queue starts each read when it is pushed: with 32 queued, all 32
/// misses are read before the first is taken, each page once; taking
/// them makes no more IO, and a buffer too short for the oldest read is
/// refused without taking it.
#[test]
fn a_queue_starts_reads_when_pushed_and_reads_each_page_once() {
    let (data, c, b, f) = recorded(256, 3, 1 << 20);
    let mut q = f.read_queue();
    for i in 0..32u64 {
        q.push((i * 7 % 256) * P, P as usize);
    }
    // The same page again: no second read.
    q.push(0, P as usize);
    assert_eq!(q.len(), 33);
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.page_runs().iter().map(|&(_, n)| n).sum::<u64>() < 32 {
        assert!(
            Instant::now() < deadline,
            "the pushed reads did not start: {:?}",
            b.page_runs()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut short = [0u8; 100];
    let refused = q.pop(&mut short).unwrap();
    assert_eq!(refused.offset, 0);
    assert_eq!(
        refused.result.unwrap_err().kind(),
        std::io::ErrorKind::InvalidInput
    );
    assert_eq!(q.len(), 33, "a refused pop takes nothing");
    let mut buf = vec![0u8; P as usize];
    for i in 0..33u64 {
        let done = q.pop(&mut buf).unwrap();
        let off = if i < 32 { (i * 7 % 256) * P } else { 0 };
        assert_eq!(done.offset, off);
        assert_eq!(done.result.unwrap(), P as usize);
        assert_eq!(&buf[..], expect(&data, off, P as usize));
    }
    assert_read_once(&c, &b, 32);
    assert_at_rest(&c);
}

/// A batch of misses is read with one IO per run of contiguous pages, each
/// page once, and hits make no IO.
#[test]
fn misses_are_read_once_and_hits_not_at_all() {
    let (data, c, b, f) = recorded(256, 1, 1 << 20);
    let reqs: Vec<(u64, usize)> = (0..32).map(|i| ((i * 7 % 256) * P, P as usize)).collect();
    assert_reads(&f, &reqs, &data);
    assert_read_once(&c, &b, 32);
    b.clear();
    assert_reads(&f, &reqs, &data);
    assert_eq!(b.reads(), 0);
}

/// Past end of file, empty buffers, overlapping requests, duplicates.
#[test]
fn edge_requests() {
    let data = nonzero_bytes(10 * P as usize + 100, 2);
    let tmp = TempPath::with_data("read-many-edges", &data);
    let c = TestCache::bytes(1 << 20).max_folio(1 << 16).build();
    let f = c.open(&tmp.path).unwrap();
    let reqs = [
        (10 * P, 4096),
        (10 * P + 100, 10),
        (20 * P, 10),
        (0, 0),
        (3 * P + 5, 3 * P as usize),
        (3 * P + 5, 3 * P as usize),
        (4 * P, 100),
        (u64::MAX - 5, 10),
    ];
    assert_reads(&f, &reqs, &data);
    assert_at_rest(&c);
}

/// A read failing for some pages fails exactly the requests that need
/// them; the others succeed, and once the fault is gone all do.
#[test]
fn a_failed_read_fails_only_the_requests_that_need_it() {
    let data = nonzero_bytes(128 * P as usize, 3);
    let c = cache(1 << 20, 1 << 16);
    let b = Arc::new(FaultyBacking::new(MemBacking::with_data(data.clone())));
    let f = c.open_backing(b.clone()).unwrap();
    b.fail_reads_in(40 * P, 8 * P, libc_eio());
    let reqs: Vec<(u64, usize)> = (0..64).map(|i| (i * 2 * P + 17, 6000)).collect();
    for (r, &(off, len)) in run(&f, &reqs).into_iter().zip(&reqs) {
        let needs = off < 48 * P && off + len as u64 > 40 * P;
        match r {
            Ok(got) => {
                assert!(!needs, "request at {off} needs a failed page but read");
                assert_eq!(got, expect(&data, off, len));
            }
            Err(e) => {
                assert!(needs, "request at {off} failed: {e}");
                assert_eq!(e.raw_os_error(), Some(libc_eio()));
            }
        }
    }
    assert_at_rest(&c);
    b.clear_read_ranges();
    assert_reads(&f, &reqs, &data);
    assert_at_rest(&c);
}

fn libc_eio() -> i32 {
    5
}

/// Threads reading the same pages with `read_many` and `read_at` at once
/// read each page from the backing once.
#[test]
fn concurrent_readers_share_the_io() {
    let data = nonzero_bytes(512 * P as usize, 4);
    let c = cache(4 << 20, 1 << 16);
    let b = Arc::new(RecordingBacking::new(FaultyBacking::new(
        MemBacking::with_data(data.clone()),
    )));
    b.inner().set_read_latency(Duration::from_millis(2));
    let f = c.open_backing(b.clone()).unwrap();
    let reqs: Vec<(u64, usize)> = (0..64).map(|i| ((i * 13 % 512) * P, P as usize)).collect();
    let bar = Arc::new(Barrier::new(4));
    std::thread::scope(|s| {
        for t in 0..4 {
            let (f, bar, reqs, data) = (f.clone(), bar.clone(), &reqs, &data);
            s.spawn(move || {
                bar.wait();
                if t % 2 == 0 {
                    for (r, &(off, len)) in run(&f, reqs).into_iter().zip(reqs) {
                        assert_eq!(r.unwrap(), expect(data, off, len));
                    }
                } else {
                    for &(off, len) in reqs.iter().rev() {
                        let mut buf = vec![0u8; len];
                        let n = f.read_at(&mut buf, off).unwrap();
                        assert_eq!(&buf[..n], expect(data, off, len));
                    }
                }
            });
        }
    });
    let mut runs = b.page_runs();
    let all = runs.len();
    runs.dedup();
    assert_eq!(runs.len(), all, "a page was read twice: {runs:?}");
    assert_at_rest(&c);
}

/// `read_many` racing `set_len` (shrink and grow back) and `read_at`:
/// no hang, and every byte returned is the file's or a zero a truncate
/// left.
#[test]
fn read_many_races_truncate() {
    let data = nonzero_bytes(256 * P as usize, 5);
    let tmp = TempPath::with_data("read-many-truncate", &data);
    let c = TestCache::bytes(512 * 1024).max_folio(1 << 16).build();
    let f = c
        .open_options()
        .read(true)
        .write(true)
        .open(&tmp.path)
        .unwrap();
    let stop = Instant::now() + Duration::from_millis(1500);
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let (f, data) = (f.clone(), &data);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(t);
                while Instant::now() < stop {
                    let reqs: Vec<(u64, usize)> = (0..16)
                        .map(|_| (rng.gen_range(0..260 * P), rng.gen_range(1..3 * P as usize)))
                        .collect();
                    for (r, &(off, _)) in run(&f, &reqs).into_iter().zip(&reqs) {
                        let got = r.unwrap();
                        for (i, &byte) in got.iter().enumerate() {
                            let at = off as usize + i;
                            assert!(byte == 0 || byte == data[at], "byte {at}: {byte}");
                        }
                    }
                }
            });
        }
        let f = f.clone();
        s.spawn(move || {
            let mut rng = StdRng::seed_from_u64(99);
            while Instant::now() < stop {
                f.set_len(rng.gen_range(0..256 * P)).unwrap();
                std::thread::sleep(Duration::from_millis(3));
                f.set_len(256 * P).unwrap();
                let mut buf = vec![0u8; 5000];
                let _ = f.read_at(&mut buf, rng.gen_range(0..256 * P)).unwrap();
            }
        });
    });
    assert_at_rest(&c);
}
