//! Real threads on one file in a small cache, for a bounded time:
//! writers rewriting their own regions with versioned patterns (some
//! uncached), readers checking every byte they get against the versions
//! that could be there, a thread calling `set_len` and `punch_hole` on its
//! own regions (checked exactly: nobody else touches them), and a thread
//! syncing in a loop. A watchdog fails the test if the threads do not all
//! finish soon after the time is up (a deadlock); at the end, after a sync,
//! the backing file must hold exactly the last version of every region.
//!
//! Region boundaries are not page-aligned, so neighbours share folios.
//!
//! Beside it, smaller races, each checked byte by byte: writers and a
//! reader sharing a cache smaller than their working set (nobody may fail
//! for want of a folio); writers racing to create the same folios while an
//! evictor opens gaps; and chaos on one range, after which the cache, the
//! disk and a new cache must agree. (The races on a file's size are in
//! `write::size`, those on a memfile in `write::memfile`, those opening and
//! closing one path in `write::visible::handles`.)
//!
//! Runs 2 s per test; `FOLIOCACHE_STRESS_SECS` makes it longer.

// The tests drive and count their own threads with std atomics and locks;
// the shim rule (clippy.toml) is for the crate's protocols.
#![allow(clippy::disallowed_types)]

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use foliocache::{Cache, File, WriteFlags};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::write as wcommon;
use test_support::cache::TestCache;
use test_support::TempPath;
use wcommon::{assert_same, disk, open_rw, pat, read_all, stress_secs, Model, HANG};

const KIB: usize = 1024;

/// Writer regions.
const REGIONS: usize = 12;
/// Bytes per writer region (not a multiple of a page).
const RS: u64 = 50_000;
/// The setter's punch region: [PUNCH, PUNCH + RS).
const PUNCH: u64 = REGIONS as u64 * RS;
/// The setter's tail region: [TAIL, TAIL + TAIL_MAX), the file ends in it.
const TAIL: u64 = PUNCH + RS;
const TAIL_MAX: u64 = 100_000;

fn region_bytes(r: usize, v: u64) -> Vec<u8> {
    (0..RS).map(|o| pat(r, v, o)).collect()
}

struct Shared {
    file: File,
    cache: Cache,
    path: PathBuf,
    stop: AtomicBool,
    /// Per region: the version a writer has started writing / finished.
    started: Vec<AtomicU64>,
    done: Vec<AtomicU64>,
    /// Per thread: operations so far (for the watchdog's report).
    progress: Vec<AtomicU64>,
    dontcache: bool,
}

/// Writer `w` owns the regions `r % writers == w`.
fn writer(s: &Shared, me: usize, w: usize, writers: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mine: Vec<usize> = (0..REGIONS).filter(|r| r % writers == w).collect();
    while !s.stop.load(SeqCst) {
        let r = mine[rng.gen_range(0..mine.len())];
        let v = s.started[r].load(SeqCst) + 1;
        s.started[r].store(v, SeqCst);
        let bytes = region_bytes(r, v);
        let base = r as u64 * RS;
        let flags = if s.dontcache && rng.gen_bool(0.3) {
            WriteFlags::DONTCACHE
        } else {
            WriteFlags::NONE
        };
        // Whole, or in two pieces split anywhere.
        let cut = if rng.gen_bool(0.5) {
            RS as usize
        } else {
            rng.gen_range(1..RS as usize)
        };
        for (off, piece) in [(0, &bytes[..cut]), (cut, &bytes[cut..])] {
            if piece.is_empty() {
                continue;
            }
            let n = s
                .file
                .write_at_flags(piece, base + off as u64, flags)
                .unwrap_or_else(|e| panic!("writer {w}: region {r} v{v} at +{off}: {e}"));
            assert_eq!(n, piece.len(), "write_at is never short");
        }
        s.done[r].store(v, SeqCst);
        s.progress[me].fetch_add(1, SeqCst);
    }
}

/// Reads random ranges of the writers' regions and checks every byte is
/// from a version that could be there: at least the one finished before
/// the read started, at most the one started before it ended.
fn reader(s: &Shared, me: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut buf = vec![0u8; 3 * RS as usize];
    let mut skipped = 0u64;
    while !s.stop.load(SeqCst) {
        let start = rng.gen_range(0..PUNCH);
        let len = rng.gen_range(1..=(PUNCH - start).min(2 * RS + 7)) as usize;
        let (r0, r1) = (
            (start / RS) as usize,
            ((start + len as u64 - 1) / RS) as usize,
        );
        let lo: Vec<u64> = (r0..=r1).map(|r| s.done[r].load(SeqCst)).collect();
        let n = s
            .file
            .read_at(&mut buf[..len], start)
            .unwrap_or_else(|e| panic!("reader {me}: read {len} at {start}: {e}"));
        let hi: Vec<u64> = (r0..=r1).map(|r| s.started[r].load(SeqCst)).collect();
        assert_eq!(
            n, len,
            "reader {me}: the writers' regions are always inside the file"
        );
        for (i, &b) in buf[..len].iter().enumerate() {
            let pos = start + i as u64;
            let r = (pos / RS) as usize;
            let (l, h) = (lo[r - r0], hi[r - r0]);
            if h - l > 64 {
                skipped += 1;
                break;
            }
            let o = pos % RS;
            if !(l..=h).any(|v| pat(r, v, o) == b) {
                panic!(
                    "reader {me}: byte {pos} (region {r} +{o}) is {b:#04x}, from no version in \
                     {l}..={h} (read of {len} at {start})"
                );
            }
        }
        s.progress[me].fetch_add(1, SeqCst);
    }
    let _ = skipped;
}

/// Owns the punch region and the tail: punches, writes, sets the length,
/// and checks both regions exactly after every step.
fn setter(s: &Shared, me: usize, seed: u64, punch: &mut Model, tail: &mut Model) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut step = 0u64;
    while !s.stop.load(SeqCst) {
        step += 1;
        let what = format!("setter step {step}");
        match rng.gen_range(0..5) {
            0 => {
                let off = rng.gen_range(0..RS);
                let len = rng.gen_range(1..=RS - off);
                s.file
                    .punch_hole(PUNCH + off, len)
                    .unwrap_or_else(|e| panic!("{what}: punch {off}+{len}: {e}"));
                punch.punch(off, len);
            }
            1 => {
                let off = rng.gen_range(0..RS);
                let len = rng.gen_range(1..=RS - off) as usize;
                let buf: Vec<u8> = (0..len).map(|_| rng.gen_range(1..=255u8)).collect();
                s.file.write_all_at(&buf, PUNCH + off).unwrap();
                punch.write(off, &buf);
            }
            2 => {
                let len = rng.gen_range(0..=TAIL_MAX);
                s.file
                    .set_len(TAIL + len)
                    .unwrap_or_else(|e| panic!("{what}: set_len {}: {e}", TAIL + len));
                tail.set_len(len);
            }
            3 => {
                let off = rng.gen_range(0..TAIL_MAX);
                let len = rng.gen_range(1..=(TAIL_MAX - off).min(30_000)) as usize;
                let buf: Vec<u8> = (0..len).map(|_| rng.gen_range(1..=255u8)).collect();
                s.file.write_all_at(&buf, TAIL + off).unwrap();
                tail.write(off, &buf);
            }
            _ => {
                let off = rng.gen_range(0..TAIL_MAX);
                let len = rng.gen_range(1..=TAIL_MAX - off);
                s.file.punch_hole(TAIL + off, len).unwrap();
                tail.punch(off, len);
            }
        }
        assert_eq!(s.file.len(), TAIL + tail.len(), "{what}: len()");
        let got = wcommon::read_vec(&s.file, PUNCH, RS as usize).unwrap();
        assert_same(&format!("{what}: punch region"), &got, &punch.data);
        let got = wcommon::read_vec(&s.file, TAIL, TAIL_MAX as usize).unwrap();
        assert_same(&format!("{what}: tail region"), &got, &tail.data);
        s.progress[me].fetch_add(1, SeqCst);
    }
}

fn syncer(s: &Shared, me: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !s.stop.load(SeqCst) {
        match rng.gen_range(0..3) {
            0 => s
                .file
                .sync_data()
                .unwrap_or_else(|e| panic!("sync_data: {e}")),
            1 => s
                .file
                .sync_all()
                .unwrap_or_else(|e| panic!("sync_all: {e}")),
            _ => s
                .cache
                .sync_all()
                .unwrap_or_else(|e| panic!("Cache::sync_all: {e}")),
        }
        s.progress[me].fetch_add(1, SeqCst);
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..5)));
    }
}

fn stress(tag: &str, capacity: usize, max_folio: usize, writers: usize, dontcache: bool) {
    // The initial file: version 0 of every region, then the setter's.
    let mut initial = Vec::new();
    for r in 0..REGIONS {
        initial.extend(region_bytes(r, 0));
    }
    let mut punch = Model {
        data: (0..RS).map(|o| pat(100, 0, o)).collect(),
    };
    let mut tail = Model {
        data: (0..TAIL_MAX).map(|o| pat(101, 0, o)).collect(),
    };
    initial.extend(&punch.data);
    initial.extend(&tail.data);
    let tmp = TempPath::with_data(tag, &initial);
    let c = TestCache::bytes(capacity).max_folio(max_folio).build();
    let f = open_rw(&c, &tmp.path);
    let readers = 2;
    let threads = writers + readers + 2;
    let s = Arc::new(Shared {
        file: f,
        cache: c,
        path: tmp.path.clone(),
        stop: AtomicBool::new(false),
        started: (0..REGIONS).map(|_| AtomicU64::new(0)).collect(),
        done: (0..REGIONS).map(|_| AtomicU64::new(0)).collect(),
        progress: (0..threads).map(|_| AtomicU64::new(0)).collect(),
        dontcache,
    });
    let (tx, rx) = mpsc::channel::<usize>();
    /// Says "finished" when dropped, panicking or not.
    struct Done(usize, mpsc::Sender<usize>);
    impl Drop for Done {
        fn drop(&mut self) {
            let _ = self.1.send(self.0);
        }
    }
    let mut handles = Vec::new();
    let setter_handle;
    {
        let spawn = |me: usize, body: Box<dyn FnOnce(&Shared) + Send>| {
            let s = s.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                let _done = Done(me, tx);
                body(&s);
            })
        };
        for w in 0..writers {
            handles.push(spawn(
                w,
                Box::new(move |s| writer(s, w, w, writers, 10 + w as u64)),
            ));
        }
        for i in 0..readers {
            let me = writers + i;
            handles.push(spawn(me, Box::new(move |s| reader(s, me, 20 + i as u64))));
        }
        let me = writers + readers;
        handles.push(spawn(me, Box::new(move |s| syncer(s, me, 30))));
        let me = writers + readers + 1;
        let s2 = s.clone();
        let tx2 = tx.clone();
        setter_handle = std::thread::spawn(move || {
            let _done = Done(me, tx2);
            setter(&s2, me, 40, &mut punch, &mut tail);
            (punch, tail)
        });
    }
    drop(tx);
    // The watchdog: stop after the run time, then every thread must end
    // within HANG.
    let run = stress_secs();
    let mut finished = vec![false; threads];
    let mut early = None;
    if let Ok(id) = rx.recv_timeout(run) {
        // A thread ended before the stop: it panicked.
        finished[id] = true;
        early = Some(id);
    }
    s.stop.store(true, SeqCst);
    let deadline = Instant::now() + HANG;
    while finished.iter().any(|f| !f) {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(id) => finished[id] = true,
            Err(_) => {
                let stuck: Vec<_> = (0..threads).filter(|&i| !finished[i]).collect();
                let prog: Vec<_> = s.progress.iter().map(|p| p.load(SeqCst)).collect();
                panic!(
                    "{tag}: threads {stuck:?} still running {HANG:?} after the stop (a \
                     deadlock?); ops per thread {prog:?} (writers, readers, syncer, setter)"
                );
            }
        }
    }
    for h in handles {
        if let Err(p) = h.join() {
            std::panic::resume_unwind(p);
        }
    }
    let (punch, tail) = match setter_handle.join() {
        Ok(v) => v,
        Err(p) => std::panic::resume_unwind(p),
    };
    if let Some(id) = early {
        panic!("{tag}: thread {id} ended before the stop without a panic");
    }
    let prog: Vec<_> = s.progress.iter().map(|p| p.load(SeqCst)).collect();
    assert!(
        prog.iter().all(|&p| p > 0),
        "{tag}: a thread made no progress: {prog:?}"
    );
    eprintln!("{tag}: {run:?}, ops per thread {prog:?} (writers, readers, syncer, setter)");

    // The final contents, in the cache and on disk after a sync.
    let mut want = Vec::new();
    for r in 0..REGIONS {
        want.extend(region_bytes(r, s.done[r].load(SeqCst)));
    }
    want.extend(&punch.data);
    want.extend(&tail.data);
    assert_same(
        &format!("{tag}: cache at the end"),
        &read_all(&s.file),
        &want,
    );
    s.file.sync_all().unwrap();
    assert_same(&format!("{tag}: backing at the end"), &disk(&s.path), &want);
    s.cache.shrink(u64::MAX);
    assert_same(
        &format!("{tag}: read again after eviction"),
        &read_all(&s.file),
        &want,
    );
    let st = s.cache.stats();
    assert_eq!(st.dirty_bytes, 0, "{st:?}");
    // The disk's view of one region, by pread, for good measure.
    let mut one = vec![0u8; RS as usize];
    fs::File::open(&s.path)
        .unwrap()
        .read_exact_at(&mut one, 3 * RS)
        .unwrap();
    assert_eq!(one, region_bytes(3, s.done[3].load(SeqCst)));
}

#[test]
fn writers_readers_truncate_punch_and_sync_on_one_file_small_folios() {
    stress("stress-4k", 512 * KIB, 16 * KIB, 2, false);
}

#[test]
fn writers_readers_truncate_punch_and_sync_on_one_file_large_folios_some_uncached() {
    stress("stress-64k", 1024 * KIB, 64 * KIB, 3, true);
}

#[test]
fn writers_readers_truncate_punch_and_sync_in_one_2_mib_folio() {
    // The whole file fits one 2 MiB folio: every thread works in it at
    // once, and its pages are dirty and clean independently.
    stress("stress-2m", 8192 * KIB, 2048 * KIB, 3, true);
}

/// Two writers rewriting 200 KB each in a 256 KiB cache, and a reader
/// reading one byte elsewhere: the writers need more than the cache
/// between them, so they write back and evict each other's data all the
/// time. Everyone must wait their turn; nobody may fail. (The kernel locks
/// one folio at a time in a buffered write; a write here locks as much of
/// its range as it can grab at once.)
#[test]
fn concurrent_writes_in_a_small_cache_make_no_read_or_write_fail() {
    let tmp = TempPath::with_data("small-cache", &wcommon::nonzero_bytes(1 << 20, 1));
    let c = TestCache::bytes(256 * KIB).max_folio(64 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    let stop = Arc::new(AtomicBool::new(false));
    let run = stress_secs();
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let (f, stop) = (f.clone(), stop.clone());
            std::thread::spawn(move || {
                let buf = wcommon::nonzero_bytes(200_000, w);
                let mut n = 0u64;
                while !stop.load(SeqCst) {
                    f.write_all_at(&buf, w * 400_000 + 1000)
                        .unwrap_or_else(|e| panic!("writer {w}, write {n}: {e}"));
                    n += 1;
                }
                n
            })
        })
        .collect();
    let reader = {
        let (f, stop) = (f.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut b = [0u8; 1];
            let mut n = 0u64;
            while !stop.load(SeqCst) {
                f.read_at(&mut b, 900_000)
                    .unwrap_or_else(|e| panic!("reader, read {n}: {e}"));
                n += 1;
            }
            n
        })
    };
    std::thread::sleep(run);
    stop.store(true, SeqCst);
    let r = wcommon::within(HANG, "the reader to stop", move || reader.join());
    let w: Vec<_> = writers.into_iter().map(|h| h.join()).collect();
    let reads = r.unwrap_or_else(|p| std::panic::resume_unwind(p));
    let writes: Vec<u64> = w
        .into_iter()
        .map(|r| r.unwrap_or_else(|p| std::panic::resume_unwind(p)))
        .collect();
    eprintln!("small cache: {reads} reads, writes {writes:?} in {run:?}");
}

/// Four threads write small pieces at random offsets of one range at once
/// (so they race to create the same folios), while another evicts all the
/// time (so gaps keep opening) and two read. Every write must succeed; at the end every
/// byte some write covered holds one of the writers' bytes, and the rest
/// are zero.
#[test]
fn writers_racing_to_create_the_same_folios_never_fail() {
    const SPAN: u64 = 1 << 20;
    let tmp = TempPath::new("race-create");
    let c = TestCache::bytes(512 * KIB).max_folio(16 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    f.set_len(SPAN).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let run = stress_secs();
    let writers: Vec<_> = (0..4u8)
        .map(|t| {
            let (f, stop) = (f.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(70 + t as u64);
                let mut covered = vec![false; SPAN as usize];
                let mut n = 0u64;
                while !stop.load(SeqCst) {
                    let off = rng.gen_range(0..SPAN - 1);
                    let len = rng.gen_range(1..=(SPAN - off).min(20_000)) as usize;
                    f.write_all_at(&vec![t + 1; len], off)
                        .unwrap_or_else(|e| panic!("writer {t}, write {n} ({len} at {off}): {e}"));
                    covered[off as usize..off as usize + len].fill(true);
                    n += 1;
                }
                covered
            })
        })
        .collect();
    let evictor = {
        let (c, stop) = (c.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(SeqCst) {
                c.shrink(u64::MAX);
                std::thread::yield_now();
            }
        })
    };
    // Readers create folios too (misses, readahead windows).
    let readers: Vec<_> = (0..2u64)
        .map(|i| {
            let (f, stop) = (f.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(80 + i);
                let mut buf = vec![0u8; 64 * KIB];
                while !stop.load(SeqCst) {
                    let off = rng.gen_range(0..SPAN);
                    let len = rng.gen_range(1..=buf.len());
                    let n = f.read_at(&mut buf[..len], off).unwrap();
                    if let Some(b) = buf[..n].iter().find(|&&b| b > 4) {
                        panic!("reader {i}: byte {b:#x} no writer wrote");
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(run);
    stop.store(true, SeqCst);
    let (covered, ev, rd) = wcommon::within(HANG, "the racing threads to stop", move || {
        let w: Vec<_> = writers.into_iter().map(|h| h.join()).collect();
        let r: Vec<_> = readers.into_iter().map(|h| h.join()).collect();
        (w, evictor.join(), r)
    });
    ev.unwrap_or_else(|p| std::panic::resume_unwind(p));
    for r in rd {
        r.unwrap_or_else(|p| std::panic::resume_unwind(p));
    }
    let mut any = vec![false; SPAN as usize];
    for w in covered {
        let w = w.unwrap_or_else(|p| std::panic::resume_unwind(p));
        for (a, b) in any.iter_mut().zip(w) {
            *a |= b;
        }
    }
    f.sync_all().unwrap();
    for (what, got) in [("cache", read_all(&f)), ("disk", disk(&tmp.path))] {
        assert_eq!(got.len() as u64, SPAN, "{what}");
        for (i, (&b, &cov)) in got.iter().zip(&any).enumerate() {
            if cov {
                assert!(
                    (1..=4).contains(&b),
                    "{what}: byte {i} was written but is {b:#x}"
                );
            } else {
                assert_eq!(b, 0, "{what}: byte {i} was never written but is {b:#x}");
            }
        }
    }
}

/// Four threads do anything to one range at once: writes (some uncached),
/// set_len, punches, reads, syncs, evictions. No model can say what the
/// bytes are, but once they stop and a sync returns, the cache, the disk,
/// and a new cache reading the disk must agree byte for byte.
#[test]
fn chaos_on_one_range_ends_with_the_cache_and_the_disk_agreeing() {
    for (cap, folio) in [(256 * KIB, 16 * KIB), (1024 * KIB, 64 * KIB)] {
        const SPAN: u64 = 512 * 1024;
        let tmp = TempPath::new("chaos");
        let c = TestCache::bytes(cap).max_folio(folio).build();
        let f = open_rw(&c, &tmp.path);
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let (f, c, stop) = (f.clone(), c.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut rng = StdRng::seed_from_u64(100 + t);
                    let mut buf = vec![0u8; 64 * KIB];
                    while !stop.load(SeqCst) {
                        let off = rng.gen_range(0..SPAN);
                        let len = rng.gen_range(1..=(SPAN - off).min(40_000));
                        match rng.gen_range(0..10) {
                            0..=3 => {
                                let v = rng.gen_range(1..=255u8);
                                let flags = if rng.gen_bool(0.3) {
                                    WriteFlags::DONTCACHE
                                } else {
                                    WriteFlags::NONE
                                };
                                let n = f
                                    .write_at_flags(&vec![v; len as usize], off, flags)
                                    .unwrap_or_else(|e| panic!("thread {t}: write: {e}"));
                                assert_eq!(n, len as usize);
                            }
                            4 => f.set_len(off).unwrap(),
                            5 => f.punch_hole(off, len).unwrap(),
                            6 | 7 => {
                                let n = (len as usize).min(buf.len());
                                f.read_at(&mut buf[..n], off)
                                    .unwrap_or_else(|e| panic!("thread {t}: read: {e}"));
                            }
                            8 => f.sync_data().unwrap(),
                            _ => {
                                c.shrink(64 * KIB as u64);
                            }
                        }
                    }
                })
            })
            .collect();
        std::thread::sleep(stress_secs() / 2);
        stop.store(true, SeqCst);
        wcommon::within(HANG, "the chaos threads to stop", move || {
            for t in threads {
                if let Err(p) = t.join() {
                    std::panic::resume_unwind(p);
                }
            }
        });
        let what = format!("capacity {cap}, max folio {folio}");
        c.check_lru().unwrap_or_else(|e| panic!("{what}: {e}"));
        let cached = read_all(&f);
        f.sync_all().unwrap();
        assert_same(&format!("{what}: disk vs cache"), &disk(&tmp.path), &cached);
        c.shrink(u64::MAX);
        c.check_lru().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_same(
            &format!("{what}: cache after eviction"),
            &read_all(&f),
            &cached,
        );
        // A new cache over the same path: the same file.
        let fresh = TestCache::bytes(cap).max_folio(folio).build();
        let g = fresh.open(&tmp.path).unwrap();
        assert_same(&format!("{what}: a new cache"), &read_all(&g), &cached);
    }
}
