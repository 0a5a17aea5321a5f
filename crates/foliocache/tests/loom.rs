//! Loom models of the cache's concurrency protocols: the speculative
//! lookup against removal (`filemap_get_entry` against
//! `filemap_remove_folio`), readers racing to fill
//! one folio, with and without a failing read, readahead's marker and
//! completions, an uncached read's drop at its end against another
//! reader (`folio_end_dropbehind`), a write against reclaim (a dirty folio is
//! never evicted), the folio lock against reclaim, writeback against
//! truncation and hole punching, a write against the writeback of its
//! folio, a pin of a folio's bytes against a write or truncation of
//! them, an async read's waker handed to the folio lock while the
//! read's completion unlocks it, and an async job's end (a sync's, a
//! throttled writer's) against the tasks waiting for it.
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p foliocache --release --test loom`
//!
//! Under loom every atomic and lock of foliocache and xarray is loom's (see
//! `src/sync.rs` of both crates; the file locks `inode_lock`,
//! `invalidate_lock` and `wb_lock` too), the folio lock's sleep models the
//! parking lot's queue (a sleeper wakes only on a wake-up counted by an
//! `unlock` after it validated, so a lost wake-up hangs the model, which
//! loom reports as too many branches), and xarray's epoch reclamation is a
//! leak. The folio descriptors, the
//! arena, the LRU and reclaim are the real ones; so is the read path. The
//! backings (`MemBacking`, `FaultyBacking`) keep std locks: loom never
//! switches threads inside them, as they make no loom operation.
//!
//! Each model is two threads over a tiny cache (1 to 2 pages) and 1-page
//! files. After the threads finish, the model checks what is left: every
//! cached folio unlocked, uptodate and holding exactly the cache's
//! reference (plus the checker's own), the statistics agreeing with the
//! arena, and, once the files are dropped, every page back in the arena
//! (a reference leaked or dropped twice anywhere shows up there).
#![cfg(loom)]

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use backing::{Backing, BackingInfo, FaultyBacking, IoBuf, IoBufMut, MemBacking};
use foliocache::filemap::FolioFlags;
use foliocache::filemap::{FgpFlags, Mapping, MappingEntry};
use foliocache::{Cache, File, ReadaheadConfig};
use loom::thread;
use test_support::cache::TestCache;

const PAGE: usize = 4096;

/// Runs a model with a small preemption bound and reports how long it took.
/// `FOLIOCACHE_LOOM_BOUND` overrides the bound for a deeper search.
fn model<F>(name: &str, bound: usize, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let start = Instant::now();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let bound = std::env::var("FOLIOCACHE_LOOM_BOUND")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(bound);
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(bound);
    b.max_branches = 100_000;
    b.check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        f()
    });
    eprintln!(
        "loom model {name} (bound {bound}): {} executions in {:.2?}",
        runs.load(Ordering::Relaxed),
        start.elapsed()
    );
}

/// Runs `first` and `second` on two loom threads. The first is spawned
/// (and joined) first: as in xarray's models, put the thread that removes
/// or writes there, so loom's first execution runs it before the other and
/// then backtracks into it from the other's later loads (loom issues #166
/// and #392: a load that came before the writer's accesses can be forgotten
/// and its races never explored).
fn race<A, B>(
    first: impl FnOnce() -> A + Send + 'static,
    second: impl FnOnce() -> B + Send + 'static,
) -> (A, B)
where
    A: Send + 'static,
    B: Send + 'static,
{
    let a = thread::spawn(first);
    let b = thread::spawn(second);
    (a.join().unwrap(), b.join().unwrap())
}

/// The bytes of a 1-page file tagged `tag`.
fn data(tag: u8) -> Vec<u8> {
    (0..PAGE)
        .map(|i| (i as u8).wrapping_mul(31) ^ tag)
        .collect()
}

/// A cache of `pages` pages without readahead: models (a) to (c) are about
/// the lookup, eviction and fill of one folio, and a miss there reads
/// just that folio (as it did before readahead; with readahead on, a
/// failed window read is retried by its reader, which (c) does not model,
/// and the windows' extra steps multiply (a)'s states). Readahead has its
/// own models, (d) and (e).
fn cache(pages: usize) -> Cache {
    TestCache::pages(pages).no_readahead().build()
}

fn mem_file(cache: &Cache, tag: u8) -> File {
    cache
        .open_backing(MemBacking::with_data(data(tag)))
        .unwrap()
}

/// The identity a folio of `m` records (`Folio::mapping`).
fn id(m: &Mapping) -> usize {
    m as *const Mapping as usize
}

/// Reads the whole page and checks the bytes; a reader that raced out of
/// memory (every page of the tiny cache in use) reports that instead.
fn read_page(file: &File, tag: u8) -> io::Result<()> {
    let mut buf = vec![0u8; PAGE];
    let n = file.read_at(&mut buf, 0)?;
    assert_eq!(n, PAGE, "short read");
    assert!(buf == data(tag), "read of file {tag} returned wrong bytes");
    Ok(())
}

fn is_oom(r: &io::Result<()>) -> bool {
    matches!(r, Err(e) if e.kind() == io::ErrorKind::OutOfMemory)
}

/// Checks what a finished model left in `file`'s page 0: false if no folio
/// is there (a hole or a shadow), else that the folio is this mapping's, at index 0, uptodate,
/// unlocked, with no waiter or error flag, and holds exactly the cache's
/// reference besides the one this lookup took. Returns whether one is cached.
fn check_settled(file: &File) -> bool {
    let m = file.mapping();
    match m.get_entry(0) {
        // Evicted: the slot keeps the folio's shadow (or, before any
        // eviction, nothing was ever there).
        None | Some(MappingEntry::Shadow(_)) => false,
        Some(MappingEntry::Folio(f)) => {
            assert_eq!(f.mapping(), id(m), "{f:?}");
            assert_eq!(f.index(), 0, "{f:?}");
            assert_eq!(f.refcount(), 2, "cache's reference + ours: {f:?}");
            let flags = f.flags();
            assert!(flags.contains(FolioFlags::UPTODATE), "{f:?}");
            assert!(
                !flags.intersects(
                    FolioFlags::LOCKED
                        | FolioFlags::WAITERS
                        | FolioFlags::ASYNC_WAITERS
                        | FolioFlags::ERROR
                ),
                "{f:?}"
            );
            true
        }
    }
}

/// Checks the files' indexes, the statistics and the arena agree (every
/// folio here is one page); returns how many folios are cached. Run it
/// before [`check_settled`]: a freed folio left in an index would make that
/// lookup spin.
fn check_accounting(cache: &Cache, files: &[&File]) -> u64 {
    let cached: u64 = files.iter().map(|f| f.mapping().nr_folios()).sum();
    let s = cache.stats();
    assert_eq!(
        s.folios, cached,
        "the indexes and the cache disagree: {s:?}"
    );
    assert_eq!(s.bytes_cached, cached * PAGE as u64, "{s:?}");
    assert_eq!(
        s.free_bytes + s.bytes_cached,
        s.capacity_bytes,
        "a page is neither free nor cached (a leaked or lost reference): {s:?}"
    );
    cached
}

/// Drops `files` (the last handles) and checks every page went back.
fn check_closed(cache: &Cache, files: Vec<File>) {
    drop(files);
    let s = cache.stats();
    assert_eq!(s.folios, 0, "{s:?}");
    assert_eq!(
        s.free_bytes, s.capacity_bytes,
        "pages still allocated after every file closed: {s:?}"
    );
}

/// The checks a lookup makes on a folio it holds: its own mapping and
/// index, and a count that includes the cache's references and its own
/// (a folio that is freed, or being freed, has 0).
fn check_held(f: &foliocache::filemap::Folio, m: &Mapping) {
    assert_eq!(f.mapping(), id(m), "got another mapping's folio: {f:?}");
    assert_eq!(f.index(), 0, "got another index's folio: {f:?}");
    assert!(
        f.refcount() >= 2,
        "holding a folio with no cache reference: {f:?}"
    );
    assert!(f.test(FolioFlags::UPTODATE), "{f:?}");
}

// ---------------------------------------------------------------------------
// (a) Speculative lookup against removal.
//
// A cache of one page holds file A's page 0. One thread reads file B, which
// needs that page: reclaim freezes A's folio, removes it from A's index and
// frees it, and B's read takes the same page and descriptor for B's folio
// (so a lookup of A that loaded the pointer before the removal lands its
// speculative get on B's folio). The other thread looks A's page 0 up.

/// Sets up (a): a one-page cache holding A's page 0.
fn one_page_cache_holding_a() -> (Cache, File, File) {
    let c = cache(1);
    let a = mem_file(&c, 0xa);
    let b = mem_file(&c, 0xb);
    read_page(&a, 0xa).unwrap();
    assert_eq!(c.stats().folios, 1);
    (c, a, b)
}

/// The end of (a): B's read either evicted A (and B is cached) or ran out
/// of memory because the lookup held A; then the accounting.
fn finish_a(c: Cache, a: File, b: File, evict: io::Result<()>) {
    assert!(evict.is_ok() || is_oom(&evict), "{evict:?}");
    assert!(
        check_accounting(&c, &[&a, &b]) <= 1,
        "two folios in one page"
    );
    let a_cached = check_settled(&a);
    let b_cached = check_settled(&b);
    assert_eq!(b_cached, evict.is_ok());
    assert_eq!(c.stats().evictions, u64::from(!a_cached));
    check_closed(&c, vec![a, b]);
}

#[test]
fn a_get_entry_races_eviction() {
    model("a_get_entry_races_eviction", 3, || {
        let (c, a, b) = one_page_cache_holding_a();
        let (evict, found) = race(
            {
                let b = b.clone();
                move || read_page(&b, 0xb)
            },
            {
                let a = a.clone();
                move || match a.mapping().get_entry(0) {
                    // A was evicted first: its shadow, never a folio.
                    None | Some(MappingEntry::Shadow(_)) => false,
                    Some(MappingEntry::Folio(f)) => {
                        check_held(&f, a.mapping());
                        true
                    }
                }
            },
        );
        if found {
            // Held across B's read, or looked up before it evicted A.
            assert!(evict.is_ok() || is_oom(&evict));
        }
        finish_a(c, a, b, evict);
    });
}

#[test]
fn a_get_folio_locked_races_eviction() {
    // The locking lookup: take a reference, lock, re-check the mapping.
    model("a_get_folio_locked_races_eviction", 3, || {
        let (c, a, b) = one_page_cache_holding_a();
        let (evict, _) = race(
            {
                let b = b.clone();
                move || read_page(&b, 0xb)
            },
            {
                let a = a.clone();
                move || match a
                    .mapping()
                    .lock_folio(0, FgpFlags::LOCK | FgpFlags::ACCESSED)
                {
                    Err(e) => assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}"),
                    Ok(f) => {
                        assert!(f.is_locked());
                        check_held(&f, a.mapping());
                        f.unlock();
                    }
                }
            },
        );
        finish_a(c, a, b, evict);
    });
}

#[test]
fn a_read_races_eviction_of_the_same_page() {
    // Both threads read through the cache: A's reader may find its folio,
    // find it gone and fill a new one (evicting B's), or run out of memory;
    // it never copies another file's bytes.
    //
    // Bound 2 in CI (25 515 executions, 14 s); bound 3 is 419 516 executions
    // in 229 s and passed (2026-11-29): FOLIOCACHE_LOOM_BOUND=3 searches
    // deeper.
    model("a_read_races_eviction_of_the_same_page", 2, || {
        let (c, a, b) = one_page_cache_holding_a();
        let (evict, read) = race_reads(&a, &b);
        assert!(evict.is_ok() || is_oom(&evict), "{evict:?}");
        assert!(read.is_ok() || is_oom(&read), "{read:?}");
        assert!(
            check_accounting(&c, &[&a, &b]) <= 1,
            "two folios in one page"
        );
        check_settled(&a);
        check_settled(&b);
        check_closed(&c, vec![a, b]);
    });
}

/// B's page 0 and A's page 0 read at once, on two threads: (B's result,
/// A's result).
fn race_reads(a: &File, b: &File) -> (io::Result<()>, io::Result<()>) {
    race(
        {
            let b = b.clone();
            move || read_page(&b, 0xb)
        },
        {
            let a = a.clone();
            move || read_page(&a, 0xa)
        },
    )
}

#[test]
fn a_file_close_races_eviction() {
    // Closing A (its mapping drops and removes its folios) while B's read
    // evicts A's folio and reuses its page and descriptor for B's. The
    // close found A's folio in A's index before the eviction and must not
    // take it off the LRU, uncount it and free it once it is B's: that left
    // a freed folio in B's index (found by this model; `lru_detach` now
    // checks the folio's mapping under the LRU lock).
    model("a_file_close_races_eviction", 3, || {
        let (c, a, b) = one_page_cache_holding_a();
        let (_, evict) = race(move || drop(a), {
            let b = b.clone();
            move || read_page(&b, 0xb)
        });
        // Out of memory when A's folio was off the LRU, not yet freed.
        assert!(evict.is_ok() || is_oom(&evict), "{evict:?}");
        assert_eq!(check_accounting(&c, &[&b]), u64::from(evict.is_ok()));
        assert_eq!(check_settled(&b), evict.is_ok());
        check_closed(&c, vec![b]);
    });
}

// ---------------------------------------------------------------------------
// (b) Two readers racing to fill the same folio: one creates and reads it,
// the other finds it (or loses the insert) and sleeps on its lock.

#[test]
fn b_two_readers_fill_one_folio_with_one_io() {
    // Bound 2 in CI (170 862 executions, 31 s); bound 3 is 1 300 642
    // executions in 442 s and passed (2026-11-29), the longest model of this
    // file: FOLIOCACHE_LOOM_BOUND=3 searches deeper.
    model("b_two_readers_fill_one_folio_with_one_io", 2, || {
        let c = cache(2);
        let f = mem_file(&c, 0x5);
        let (r1, r2) = race(
            {
                let f = f.clone();
                move || read_page(&f, 0x5)
            },
            {
                let f = f.clone();
                move || read_page(&f, 0x5)
            },
        );
        r1.unwrap();
        r2.unwrap();
        let s = c.stats();
        assert_eq!(s.io_reads, 1, "the second reader issued its own IO: {s:?}");
        assert_eq!(s.misses, 1, "{s:?}");
        assert_eq!(check_accounting(&c, &[&f]), 1);
        assert!(check_settled(&f));
        check_closed(&c, vec![f]);
    });
}

// ---------------------------------------------------------------------------
// (f) Uncached reads at their end (`folio_end_dropbehind`): the uncached reader drops
// the folio it created, without waiting for its lock, while another reader
// uses it. Two uncached readers leave nothing cached and no shadow; against
// a cached reader, a folio left cached is never still dropbehind (the
// cached reader claimed it, or made it), and every byte copied is right
// whether the folio was dropped under the other reader or not.
//
// Bound 1 in CI (207 487 and 581 478 executions, the step's longest
// models; 81 405 and 139 010 when first written): the uncached path
// (trylock, removal, the LRU lock, a second fill after a drop) makes long
// executions. At bound 2 both passed too, with 2.6 and 3.8 million
// executions in 13 and 15 minutes when first written
// (`FOLIOCACHE_LOOM_BOUND=2 cargo test ... --test loom -- f_`).

/// Reads page 0 with `flags`, checking the bytes.
fn read_page_flags(file: &File, tag: u8, flags: foliocache::ReadFlags) -> io::Result<()> {
    let mut buf = vec![0u8; PAGE];
    let n = file.read_at_flags(&mut buf, 0, flags)?;
    assert_eq!(n, PAGE, "short read");
    assert!(buf == data(tag), "read of file {tag} returned wrong bytes");
    Ok(())
}

#[test]
fn f_uncached_read_races_a_cached_read() {
    model("f_uncached_read_races_a_cached_read", 1, || {
        let c = cache(2);
        let f = mem_file(&c, 0x6);
        let (r1, r2) = race(
            {
                let f = f.clone();
                move || read_page_flags(&f, 0x6, foliocache::ReadFlags::DONTCACHE)
            },
            {
                let f = f.clone();
                move || read_page(&f, 0x6)
            },
        );
        r1.unwrap();
        r2.unwrap();
        let cached = check_accounting(&c, &[&f]);
        assert_eq!(cached, u64::from(check_settled(&f)));
        if let Some(MappingEntry::Folio(r)) = f.mapping().get_entry(0) {
            assert!(
                !r.test(FolioFlags::DROPBEHIND),
                "left cached dropbehind: {r:?}"
            );
        }
        assert!(c.stats().dropbehind_drops <= 1);
        check_closed(&c, vec![f]);
    });
}

#[test]
fn f_two_uncached_readers_leave_nothing_cached() {
    model("f_two_uncached_readers_leave_nothing_cached", 1, || {
        let c = cache(2);
        let f = mem_file(&c, 0x7);
        let (r1, r2) = race(
            {
                let f = f.clone();
                move || read_page_flags(&f, 0x7, foliocache::ReadFlags::DONTCACHE)
            },
            {
                let f = f.clone();
                move || read_page_flags(&f, 0x7, foliocache::ReadFlags::DONTCACHE)
            },
        );
        r1.unwrap();
        r2.unwrap();
        assert_eq!(check_accounting(&c, &[&f]), 0, "{:?}", c.stats());
        assert!(
            f.mapping().get_entry(0).is_none(),
            "a shadow or a folio is left"
        );
        check_closed(&c, vec![f]);
    });
}

// ---------------------------------------------------------------------------
// (c) A reader racing a read that fails: the first backing read fails. Its
// reader gets the error and the folio leaves the index; the other reader,
// asleep on the folio's lock or arriving later, finds it gone and fills a
// new one with the second (good) read.

#[test]
fn c_reader_races_a_failing_read() {
    // Bound 2 since readahead landed: the readahead state's lock on every
    // miss took this model from bound 3 to 720 000 executions (two minutes
    // here); bound 2 is 96 000 (17 s). FOLIOCACHE_LOOM_BOUND=3 searches
    // deeper.
    model("c_reader_races_a_failing_read", 2, || {
        let c = cache(2);
        let faulty = Arc::new(FaultyBacking::new(MemBacking::with_data(data(0xc))));
        faulty.fail_nth_read(1, libc::EIO);
        let f = c.open_backing(faulty.clone()).unwrap();
        let (r1, r2) = race(
            {
                let f = f.clone();
                move || read_page(&f, 0xc)
            },
            {
                let f = f.clone();
                move || read_page(&f, 0xc)
            },
        );
        let failed = [&r1, &r2]
            .iter()
            .filter(|r| match r {
                Ok(()) => false,
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
                    true
                }
            })
            .count();
        // Only the reader whose IO failed sees the error: the other retried
        // (the failed folio left the index) instead of inheriting it.
        let fs = faulty.stats();
        assert_eq!(fs.injected_errors, 1, "{fs:?}");
        assert_eq!(failed, 1, "a reader inherited the error: {r1:?} {r2:?}");
        assert_eq!(fs.reads, 2, "one failed read, one good: {fs:?}");
        assert_eq!(check_accounting(&c, &[&f]), 1);
        assert!(check_settled(&f));
        // A later read is a hit with the right bytes and no IO.
        let io = c.stats().io_reads;
        read_page(&f, 0xc).unwrap();
        assert_eq!(c.stats().io_reads, io);
        assert_eq!(faulty.stats().reads, 2);
        check_closed(&c, vec![f]);
    });
}

// ---------------------------------------------------------------------------
// Readahead (`page_cache_async_ra`). Under loom the cache has no IO engine:
// a window's runs are read on the thread that built it (see
// `Cache::io_engine_name`), so these models cover the hand-off of the
// marker, the insertion of windows and the completion of a window's folios
// against readers waiting on their locks; the engine's own threads are
// covered by the real-thread tests in tests/it/readahead.rs.
//
// A small readahead configuration keeps the windows to one or two folios:
// with a maximum of 4 pages, a 4 KiB read at page 0 starts the window
// (0, 2) with its marker on page 1 (init_size(1, 4) = 2, async tail 1);
// reaching page 1 starts (2, 2), cut to page 2 by the end of a 3-page file.

/// Windows of at most `max` pages, one-page folios, a cache of `pages`.
fn ra_cache(pages: usize, max: u64) -> Cache {
    TestCache::pages(pages)
        .max_folio(PAGE)
        .readahead(ReadaheadConfig::new(max, max))
        .build()
}

/// The bytes of an `n`-page file tagged `tag` (each page distinct).
fn pages_data(n: usize, tag: u8) -> Vec<u8> {
    (0..n * PAGE)
        .map(|i| (i as u8).wrapping_mul(31) ^ tag ^ ((i / PAGE) as u8).wrapping_mul(97))
        .collect()
}

/// Reads page `p` of a file of `data` and checks its bytes.
fn read_page_of(file: &File, data: &[u8], p: usize) -> io::Result<()> {
    let mut buf = vec![0u8; PAGE];
    let n = file.read_at(&mut buf, (p * PAGE) as u64)?;
    assert_eq!(n, PAGE, "short read of page {p}");
    assert!(
        buf == data[p * PAGE..(p + 1) * PAGE],
        "page {p}: wrong bytes"
    );
    Ok(())
}

/// Checks the folio at page `p` of `file` after a model: this mapping's,
/// one page at `p`, uptodate, unlocked, no waiters or error, held by the
/// cache and this lookup only. Returns its flags, or `None` if no folio.
fn settled_at(file: &File, p: u64) -> Option<FolioFlags> {
    let m = file.mapping();
    match m.get_entry(p) {
        None | Some(MappingEntry::Shadow(_)) => None,
        Some(MappingEntry::Folio(f)) => {
            assert_eq!((f.mapping(), f.index(), f.order()), (id(m), p, 0), "{f:?}");
            assert_eq!(f.refcount(), 2, "cache's reference + ours: {f:?}");
            let flags = f.flags();
            assert!(flags.contains(FolioFlags::UPTODATE), "{f:?}");
            assert!(
                !flags.intersects(FolioFlags::LOCKED | FolioFlags::WAITERS | FolioFlags::ERROR),
                "{f:?}"
            );
            Some(flags)
        }
    }
}

#[test]
fn d_marker_hand_off_starts_one_window() {
    // Two readers reach the marker folio (page 1) at once: exactly one
    // clears it and starts the next window (one more IO, the window state
    // moved once); both copy the right bytes; the new window reaches end of
    // file, so its folio carries no marker; nothing is left
    // locked.
    model("d_marker_hand_off_starts_one_window", 3, || {
        let c = ra_cache(3, 4);
        let data = pages_data(3, 0xd);
        let f = c.open_backing(MemBacking::with_data(data.clone())).unwrap();
        read_page_of(&f, &data, 0).unwrap();
        assert_eq!(c.stats().io_reads, 1, "the window (0, 2) in one read");
        assert!(settled_at(&f, 1).unwrap().contains(FolioFlags::READAHEAD));
        let data = Arc::new(data);
        let (r1, r2) = race(
            {
                let (f, data) = (f.clone(), data.clone());
                move || read_page_of(&f, &data, 1)
            },
            {
                let (f, data) = (f.clone(), data.clone());
                move || read_page_of(&f, &data, 1)
            },
        );
        r1.unwrap();
        r2.unwrap();
        let s = c.stats();
        assert_eq!(s.io_reads, 2, "one window per marker: {s:?}");
        let w = f.readahead_window();
        assert_eq!((w.start, w.size, w.async_size), (2, 2, 2), "moved once");
        assert_eq!(check_accounting(&c, &[&f]), 3);
        let m1 = settled_at(&f, 1).expect("page 1 cached");
        assert!(!m1.contains(FolioFlags::READAHEAD), "marker not cleared");
        let m2 = settled_at(&f, 2).expect("the new window's folio");
        assert!(!m2.contains(FolioFlags::READAHEAD), "no marker at EOF");
        check_closed(&c, vec![f]);
    });
}

/// How (e)'s first thread starts the window (0, 2).
#[derive(Clone, Copy)]
enum Starter {
    /// A 4 KiB read of page 0: a synchronous window, read by this reader.
    ReadAt,
    /// `File::readahead` of pages 0 and 1 (the window's read is the IO
    /// engine's under real threads; here it runs on this thread).
    Readahead,
}

/// (e): the first thread starts the window (0, 2); the other reads page 1,
/// which that window covers. Whichever way they interleave, page 1's
/// reader either reads it itself before the window is inserted (the window
/// then skips it), or finds the window's folio locked and sleeps on it
/// until the window's read completes it. With `fail_first`, the first
/// backing read fails: the folios it was for leave the index unlocked,
/// their sleepers wake, find them gone and retry; only `EIO` may reach a
/// reader, never wrong bytes or a hang.
fn e_model(starter: Starter, fail_first: bool) {
    // Windows of at most 2 pages: the window at 0 is (0, 2) with its
    // marker on page 1, and after a failed read the maximum is 0 (no more
    // windows), which keeps the retries short. 4 pages of cache: the window
    // and a reader's own folio fit without evicting either, and
    // `File::readahead` may use half the cache, 2 pages.
    let c = ra_cache(4, 2);
    let data = pages_data(2, 0xe);
    let faulty = Arc::new(FaultyBacking::new(MemBacking::with_data(data.clone())));
    if fail_first {
        faulty.fail_nth_read(1, libc::EIO);
    }
    let f = c.open_backing(faulty.clone()).unwrap();
    let data = Arc::new(data);
    let (r0, r1) = race(
        {
            let (f, data) = (f.clone(), data.clone());
            move || match starter {
                Starter::ReadAt => read_page_of(&f, &data, 0),
                Starter::Readahead => f.readahead(0, 2 * PAGE as u64),
            }
        },
        {
            let (f, data) = (f.clone(), data.clone());
            move || read_page_of(&f, &data, 1)
        },
    );
    for r in [&r0, &r1] {
        if let Err(e) = r {
            assert!(fail_first, "{e}");
            assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
        }
    }
    let fs = faulty.stats();
    assert_eq!(fs.injected_errors, u64::from(fail_first), "{fs:?}");
    // Without a failure each page is read once: the waiter issued no IO.
    if !fail_first {
        assert_eq!(fs.bytes_read, 2 * PAGE as u64, "a page read twice: {fs:?}");
        assert!(fs.reads <= 2, "{fs:?}");
    }
    assert!(check_accounting(&c, &[&f]) <= 2);
    if r1.is_ok() {
        assert!(settled_at(&f, 1).is_some(), "page 1 read but not cached");
    }
    if r0.is_ok() && matches!(starter, Starter::ReadAt) {
        assert!(settled_at(&f, 0).is_some(), "page 0 read but not cached");
    }
    settled_at(&f, 0);
    // Afterwards every page reads right (from the cache or again).
    read_page_of(&f, &data, 0).unwrap();
    read_page_of(&f, &data, 1).unwrap();
    check_closed(&c, vec![f]);
}

#[test]
fn e_window_completion_wakes_its_waiters() {
    // Bound 2 (15 000 executions; bound 3 is 105 000, 20 s more) keeps
    // the file within two minutes; FOLIOCACHE_LOOM_BOUND=3 searches deeper.
    model("e_window_completion_wakes_its_waiters", 2, || {
        e_model(Starter::ReadAt, false)
    });
}

#[test]
fn e_failed_window_wakes_its_waiters_to_retry() {
    // Bound 2: the failure's removal and the retries make this the largest
    // model (about 220 000 executions, a minute here; bound 3 runs for
    // many minutes). FOLIOCACHE_LOOM_BOUND=3 searches deeper.
    model("e_failed_window_wakes_its_waiters_to_retry", 2, || {
        e_model(Starter::Readahead, true)
    });
}

// ---------------------------------------------------------------------------
// (g) A write against reclaim (dirty folios are written back before they
// can go).
//
// A one-page cache holds file A's page 0, clean. One thread overwrites that
// page; the other reads file B, whose folio needs the cache's only page, so
// reclaim takes A's folio if it can. Reclaim tests the dirty flag before it
// locks a folio and again under the lock; a writer sets it under the lock.
// Whatever the order, a write that returned is never lost: A reads the new
// bytes afterwards, and once the files close, A's backing holds them.

#[test]
fn g_write_races_reclaim() {
    model("g_write_races_reclaim", 2, || {
        let c = cache(1);
        let mem = Arc::new(MemBacking::with_data(data(0xa)));
        let a = c.open_backing(mem.clone()).unwrap();
        let b = mem_file(&c, 0xb);
        read_page(&a, 0xa).unwrap();
        let new = data(0x5);
        let (w, r) = race(
            {
                let a = a.clone();
                let new = new.clone();
                move || a.write_at(&new, 0).map(|_| ())
            },
            {
                let b = b.clone();
                move || read_page(&b, 0xb)
            },
        );
        assert!(w.is_ok() || is_oom(&w), "{w:?}");
        assert!(r.is_ok() || is_oom(&r), "{r:?}");
        check_accounting(&c, &[&a, &b]);
        let s = c.stats();
        let dirty = a.mapping().dirty_bytes() + b.mapping().dirty_bytes();
        assert_eq!(s.dirty_bytes, dirty, "{s:?}");
        if w.is_ok() {
            // The new bytes, from the cache (the dirty folio cannot have
            // been evicted) or, if B's read held the page, after B's folio
            // goes.
            let mut buf = vec![0u8; PAGE];
            if let Err(e) = a.read_at(&mut buf, 0) {
                panic!("reading A back: {e}");
            }
            assert!(buf == new, "a write that returned was lost");
        }
        drop(b);
        drop(a);
        // A's last handle wrote its dirty data back as it closed.
        let want = if w.is_ok() { new } else { data(0xa) };
        assert!(
            mem.contents().unwrap() == want,
            "the backing lost the write"
        );
        let s = c.stats();
        assert_eq!(s.free_bytes, s.capacity_bytes, "{s:?}");
    });
}

// ---------------------------------------------------------------------------
// (h) The folio lock against reclaim (a concurrency property a model can
// check). Reclaim takes an LRU folio only if it can trylock it and then
// freeze its count at the cache's references; it skips a folio that a
// reader or writer holds locked (or holds at all), and a thread sleeping on
// the lock while reclaim holds it briefly must be woken by reclaim's
// unlock. Under loom the folio lock's sleep models the parking lot's queue
// (`Folio::sleep_while_locked`): a wake-up lost leaves the sleeper asleep
// and the model fails. (a)'s `a_get_folio_locked_races_eviction` is the
// other half: a thread locking a folio that reclaim is removing.

/// Sets up (h1): an empty one-page cache and two one-page files; A's first
/// backing read fails when `fail_a`.
fn h_setup(fail_a: bool) -> (Cache, Arc<FaultyBacking<MemBacking>>, File, File) {
    let c = cache(1);
    let faulty = Arc::new(FaultyBacking::new(MemBacking::with_data(data(0xa))));
    if fail_a {
        faulty.fail_nth_read(1, libc::EIO);
    }
    let a = c.open_backing(faulty.clone()).unwrap();
    let b = mem_file(&c, 0xb);
    (c, faulty, a, b)
}

/// (h1): A and B are read at once into a one-page cache. Whichever reader
/// gets the page holds its folio locked while it fills it, then referenced
/// while it copies out; the other reader's allocation reclaims, meets that
/// folio locked or held, and must skip it (and run out of memory) rather
/// than evict it under the filler; once the folio is unlocked and
/// unreferenced it may evict it. With `fail_a`, A's fill fails and A's
/// reader removes its locked folio (off the LRU too) while B's reclaim may
/// be scanning the list. Every byte copied is the file's own.
fn h1_model(fail_a: bool) {
    let (c, faulty, a, b) = h_setup(fail_a);
    let (rb, ra) = race_reads(&a, &b);
    assert!(rb.is_ok() || is_oom(&rb), "{rb:?}");
    match &ra {
        Err(e) if fail_a && !is_oom(&ra) => {
            assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}")
        }
        r => assert!(r.is_ok() || is_oom(r), "{r:?}"),
    }
    // One of them had the page (the first to allocate, or the one whose
    // reclaim came after the other's folio went unused).
    assert!(rb.is_ok() || ra.is_ok() || fail_a, "{rb:?} {ra:?}");
    assert!(
        check_accounting(&c, &[&a, &b]) <= 1,
        "two folios in one page"
    );
    let a_cached = check_settled(&a);
    let b_cached = check_settled(&b);
    // A folio is left only by a reader that filled it.
    assert!(!a_cached || ra.is_ok(), "{ra:?}");
    assert!(!b_cached || rb.is_ok(), "{rb:?}");
    if fail_a {
        // A's reader failed its read (its folio left the index) or never
        // had a page to read into.
        assert!(ra.is_err() && !a_cached, "{ra:?}");
        assert!(faulty.stats().injected_errors <= 1);
    }
    check_closed(&c, vec![a, b]);
}

#[test]
fn h_reclaim_skips_a_folio_locked_for_its_fill() {
    model("h_reclaim_skips_a_folio_locked_for_its_fill", 2, || {
        h1_model(false)
    });
}

#[test]
fn h_reclaim_races_a_failed_fill_leaving_the_lru() {
    model("h_reclaim_races_a_failed_fill_leaving_the_lru", 2, || {
        h1_model(true)
    });
}

/// (h2): truncation locks A's cached folio to zero its tail (a shrink to
/// half a page) while B's read reclaims for the cache's only page: the
/// truncation holds a reference and the lock, so reclaim skips the folio
/// (B runs out of memory) or evicted it before (truncation then finds a
/// shadow and zeroes nothing it does not own). Afterwards A reads its first
/// half and then end of file, and B's bytes are B's.
#[test]
fn h_truncate_holds_the_lock_against_reclaim() {
    model("h_truncate_holds_the_lock_against_reclaim", 2, || {
        let (c, a, b) = one_page_cache_holding_a();
        let half = (PAGE / 2) as u64;
        let (rb, t) = race(
            {
                let b = b.clone();
                move || read_page(&b, 0xb)
            },
            {
                let a = a.clone();
                move || a.set_len(half)
            },
        );
        t.unwrap();
        assert!(rb.is_ok() || is_oom(&rb), "{rb:?}");
        assert!(
            check_accounting(&c, &[&a, &b]) <= 1,
            "two folios in one page"
        );
        check_settled(&a);
        check_settled(&b);
        let mut buf = vec![0u8; PAGE];
        match a.read_at(&mut buf, 0) {
            Ok(n) => {
                assert_eq!(n, PAGE / 2, "A reads to its new end");
                assert!(buf[..PAGE / 2] == data(0xa)[..PAGE / 2], "A's bytes");
            }
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::OutOfMemory, "{e}"),
        }
        if rb.is_ok() {
            read_page(&b, 0xb).unwrap();
        }
        check_closed(&c, vec![a, b]);
    });
}

/// (h3): truncation to 0 removes A's cached folio while B's read reclaims
/// for the cache's only page. Reclaim may have isolated the folio (off the
/// lists, with a reference) and then fail to lock it, which truncation
/// holds: it puts the folio back on the inactive list if it is still A's.
/// The removal takes it out of A under the LRU lock, so the putback either
/// comes first (and the removal takes it off the list again) or finds it
/// gone: a folio that left its file is never left on a list, where the
/// next reclaim would follow its cleared mapping, and never freed there.
#[test]
fn h_truncate_to_zero_races_reclaim_putting_the_folio_back() {
    model(
        "h_truncate_to_zero_races_reclaim_putting_the_folio_back",
        2,
        || {
            let (c, a, b) = one_page_cache_holding_a();
            let (t, rb) = race(
                {
                    let a = a.clone();
                    move || a.set_len(0)
                },
                {
                    let b = b.clone();
                    move || read_page(&b, 0xb)
                },
            );
            t.unwrap();
            assert!(rb.is_ok() || is_oom(&rb), "{rb:?}");
            c.check_lru().unwrap();
            assert_eq!(a.mapping().nr_folios(), 0, "A was cut to nothing");
            check_accounting(&c, &[&a, &b]);
            check_settled(&b);
            // Whatever is on the lists can be reclaimed.
            c.shrink(u64::MAX);
            c.check_lru().unwrap();
            check_closed(&c, vec![a, b]);
        },
    );
}

// ---------------------------------------------------------------------------
// (i) Writeback completion against truncation (`truncate_inode_pages_range`
// waits for writeback). A's page 0
// is dirty in the cache (new bytes over the backing's old ones). One thread
// writes A back (the flusher's `Mapping::writeback`, or `sync_data`); the
// other shrinks A (`set_len`) or punches a hole in it. Truncation holds
// `wb_lock` while it changes the backing and removes the folios, and waits
// for the folio lock that writeback holds through its IO; writeback reads
// the size under `wb_lock` and writes nothing past it for good (a last
// block past the size is cut back before it returns). Whatever the order:
// no folio is left locked or under writeback, the dirty counts return to
// zero, and the backing, as soon as both have returned, is what the two
// operations one after the other would have left (both orders give the
// same bytes here): nothing past the new end, and a later extension reads
// zeros there from the cache and from the backing.

/// A memory backing whose changes and reads loom sees: each is a loom
/// operation on one atomic before it happens. `MemBacking`'s own lock is a
/// std one, which loom does not see: a write to it and a test's look at it
/// afterwards would be independent to loom, which would then never run the
/// look before the write (its reduction assumes they commute), however the
/// threads raced in fact.
struct Seen {
    mem: MemBacking,
    ops: loom::sync::atomic::AtomicUsize,
}

impl Seen {
    fn with_data(data: Vec<u8>) -> Seen {
        Seen {
            mem: MemBacking::with_data(data),
            ops: loom::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn change(&self) {
        self.ops.fetch_add(1, Ordering::SeqCst);
    }

    fn look(&self) {
        self.ops.load(Ordering::SeqCst);
    }

    /// The backing's bytes now.
    fn contents(&self) -> Vec<u8> {
        self.look();
        self.mem.contents().unwrap()
    }
}

impl Backing for Seen {
    fn len(&self) -> io::Result<u64> {
        self.look();
        self.mem.len()
    }
    fn read_blocks(&self, bufs: &mut [IoBufMut<'_>], offset: u64) -> io::Result<usize> {
        self.look();
        self.mem.read_blocks(bufs, offset)
    }
    fn write_blocks(&self, bufs: &[IoBuf<'_>], offset: u64) -> io::Result<usize> {
        self.change();
        self.mem.write_blocks(bufs, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.change();
        self.mem.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.mem.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.mem.sync_all()
    }
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        self.change();
        self.mem.punch_hole(offset, len)
    }
    fn info(&self) -> BackingInfo {
        self.mem.info()
    }
}

/// A one-page file over `mem` (old bytes `data(0xa)`) with page 0 written
/// to `data(0x5)` in a two-page cache, dirty.
fn dirty_file() -> (Cache, Arc<Seen>, File) {
    let c = cache(2);
    let mem = Arc::new(Seen::with_data(data(0xa)));
    let a = c.open_backing(mem.clone()).unwrap();
    a.write_all_at(&data(0x5), 0).unwrap();
    assert_eq!(a.mapping().dirty_bytes(), PAGE as u64);
    (c, mem, a)
}

/// The checks after (i)'s race: nothing locked, under writeback or
/// dirty-counted wrongly; the cache's and the mapping's dirty counts agree.
fn check_wb_settled(c: &Cache, a: &File) {
    if let Some(MappingEntry::Folio(f)) = a.mapping().get_entry(0) {
        let flags = f.flags();
        assert!(
            !flags.intersects(FolioFlags::LOCKED | FolioFlags::WAITERS | FolioFlags::WRITEBACK),
            "left locked or under writeback: {f:?}"
        );
        assert_eq!(
            flags.contains(FolioFlags::DIRTY),
            a.mapping().dirty_bytes() > 0,
            "{f:?}"
        );
    } else {
        assert_eq!(a.mapping().dirty_bytes(), 0, "dirty bytes of no folio");
    }
    let s = c.stats();
    assert_eq!(s.dirty_bytes, a.mapping().dirty_bytes(), "{s:?}");
    assert_eq!(s.writeback_bytes, 0, "{s:?}");
}

/// (i1): writeback (`sync`: through `sync_data`, else the flusher's
/// `writeback`) races `set_len(to)` with `to` below one page.
fn i1_model(to: u64, sync: bool) {
    let (c, mem, a) = dirty_file();
    let (t, w) = race(
        {
            let a = a.clone();
            move || a.set_len(to)
        },
        {
            let a = a.clone();
            move || {
                if sync {
                    a.sync_data()
                } else {
                    a.mapping().writeback(0, u64::MAX)
                }
            }
        },
    );
    t.unwrap();
    w.unwrap();
    check_wb_settled(&c, &a);
    let to = to as usize;
    let want = data(0x5)[..to].to_vec();
    // Both have returned: the backing is cut at the new size already (the
    // truncation cut it, and a writeback after it cut its last block back).
    // If the writeback came first the folio's data is there; if the
    // truncation came first and writeback found nothing left to write, the
    // dirty data is still in the cache (to == 0: nothing at all).
    let backing = mem.contents();
    assert!(
        backing.len() == to,
        "the backing holds {} bytes past the new size {to}",
        backing.len().saturating_sub(to)
    );
    if a.mapping().dirty_bytes() == 0 {
        assert!(backing == want, "the backing's bytes are not the file's");
    }
    // Extending again: the cut part reads as zeros, from the cache and, once
    // written back, from the backing.
    a.set_len(PAGE as u64).unwrap();
    let mut buf = vec![0u8; PAGE];
    assert_eq!(a.read_at(&mut buf, 0).unwrap(), PAGE);
    let mut full = want.clone();
    full.resize(PAGE, 0);
    assert!(buf == full, "stale bytes past the truncation point");
    a.sync_data().unwrap();
    assert!(mem.contents() == full, "the backing after sync");
    check_wb_settled(&c, &a);
    assert_eq!(c.stats().dirty_bytes, 0);
    check_closed(&c, vec![a]);
}

#[test]
fn i_writeback_races_truncate_to_half_a_page() {
    model("i_writeback_races_truncate_to_half_a_page", 3, || {
        i1_model((PAGE / 2) as u64, false)
    });
}

#[test]
fn i_sync_races_truncate_to_zero() {
    model("i_sync_races_truncate_to_zero", 3, || i1_model(0, true));
}

/// (i2): writeback races `punch_hole` over the whole dirty page of a
/// two-page file: whatever the order, the page reads as zeros afterwards
/// and, as soon as both returned, the backing holds zeros there (the punch
/// removed the folio after writeback wrote it, or before writeback could
/// find it) and page 1's bytes untouched.
#[test]
fn i_writeback_races_punch_hole() {
    model("i_writeback_races_punch_hole", 3, || {
        let c = cache(2);
        let old = pages_data(2, 0xa);
        let mem = Arc::new(Seen::with_data(old.clone()));
        let a = c.open_backing(mem.clone()).unwrap();
        a.write_all_at(&data(0x5), 0).unwrap();
        let (p, w) = race(
            {
                let a = a.clone();
                move || a.punch_hole(0, PAGE as u64)
            },
            {
                let a = a.clone();
                move || a.mapping().writeback(0, u64::MAX)
            },
        );
        p.unwrap();
        w.unwrap();
        check_wb_settled(&c, &a);
        assert_eq!(a.mapping().dirty_bytes(), 0, "the punched folio went");
        let mut want = vec![0u8; PAGE];
        want.extend_from_slice(&old[PAGE..]);
        assert!(
            mem.contents() == want,
            "the backing holds the punched page's written bytes"
        );
        let mut buf = vec![0u8; PAGE];
        assert_eq!(a.read_at(&mut buf, 0).unwrap(), PAGE);
        assert!(buf == vec![0u8; PAGE], "the hole reads as zeros");
        check_closed(&c, vec![a]);
    });
}

// ---------------------------------------------------------------------------
// (j) A write against the writeback of the folio it writes (the kernel's
// stable pages, `folio_wait_stable`): the writer waits for the folio lock that
// writeback holds through its IO, so the IO carries one version of the page
// whole, and a write that lands after writeback took the folio clean leaves
// it dirty again (flag, index mark, page bit and counts), so the next sync
// writes it. Afterwards a sync makes the backing hold the last write.

#[test]
fn j_write_redirties_a_folio_under_writeback() {
    model("j_write_redirties_a_folio_under_writeback", 2, || {
        let (c, mem, a) = dirty_file();
        let (w, wb) = race(
            {
                let a = a.clone();
                move || a.write_all_at(&data(0x6), 0)
            },
            {
                let a = a.clone();
                move || a.mapping().writeback(0, u64::MAX)
            },
        );
        w.unwrap();
        wb.unwrap();
        check_wb_settled(&c, &a);
        // The backing holds one version whole: the old, the first write
        // or the second, never a mix.
        let now = mem.contents();
        assert!(
            now == data(0xa) || now == data(0x5) || now == data(0x6),
            "the backing holds a torn page"
        );
        // Written back already, or still dirty in the cache.
        assert!(
            now == data(0x6) || a.mapping().dirty_bytes() == PAGE as u64,
            "the second write is neither in the backing nor dirty"
        );
        a.sync_data().unwrap();
        assert!(mem.contents() == data(0x6), "the last write lost");
        check_wb_settled(&c, &a);
        check_closed(&c, vec![a]);
    });
}

// ---------------------------------------------------------------------------
// (k) The last handle's close against the flusher. `Cache::sync_all` walks
// the live mappings as the flusher does, holding each (an `Arc`) while it
// writes it back; the last `File` of a dirty file closes meanwhile and
// writes its dirty data back itself. A close that returns has seen the
// data reach the backing, whoever wrote it (its writeback waits for one in
// flight: `wb_lock` is taken even when nothing is left dirty); the mapping
// goes with whichever thread drops it last, and every page comes back.

#[test]
fn k_close_races_the_flusher() {
    model("k_close_races_the_flusher", 3, || {
        let (c, mem, a) = dirty_file();
        // (The writer first: see `race`.)
        let (synced, closed) = race(
            {
                let c = c.clone();
                move || c.sync_all()
            },
            {
                let mem = mem.clone();
                move || {
                    drop(a);
                    mem.contents()
                }
            },
        );
        synced.unwrap();
        assert!(
            closed == data(0x5),
            "the close returned before its data reached the backing"
        );
        assert!(mem.contents() == data(0x5));
        let s = c.stats();
        assert_eq!((s.dirty_bytes, s.writeback_bytes), (0, 0), "{s:?}");
        assert_eq!(s.folios, 0, "the closed file's folios stayed: {s:?}");
        assert_eq!(s.free_bytes, s.capacity_bytes, "{s:?}");
    });
}

// ---------------------------------------------------------------------------
// (l) A pin against a write of its folio, and against truncation (the
// protocol of `pin.rs`). A pin counts itself, fences, and backs off a
// locked folio; a writer, holding the lock, fences and reads the count, and
// copies a pinned folio instead of writing it (swapping the copy into the
// index). Whatever the interleaving: the pin's bytes are all old or all new
// and do not change while it lives (it reads them twice, around a loom
// yield, a point where the writer may run whole), a write that returned is
// what the file reads afterwards and what its backing gets, and every page
// comes back once the pin and the files go (the copied-from folio freed by
// its last pin). The cache has two pages: room for the copy.

/// One page of `tag` cached in a two-page cache, through a writable file.
fn pin_setup() -> (Cache, Arc<MemBacking>, File) {
    let c = cache(2);
    let mem = Arc::new(MemBacking::with_data(data(0xa)));
    let a = c.open_backing(mem.clone()).unwrap();
    read_page(&a, 0xa).unwrap();
    (c, mem, a)
}

/// Pins the page and checks its bytes are one version whole, and stay so.
fn pin_and_check(a: &File, old: &[u8], new: &[u8]) {
    let p = a.pin(0, PAGE).unwrap();
    let first = p.to_vec();
    assert!(first == old || first == new, "a pin of torn bytes");
    thread::yield_now();
    assert!(p[..] == first[..], "pinned bytes changed under the pin");
}

#[test]
fn l_pin_races_a_write_of_its_folio() {
    model("l_pin_races_a_write_of_its_folio", 2, || {
        let (c, mem, a) = pin_setup();
        let (old, new) = (data(0xa), data(0x5));
        let (w, ()) = race(
            {
                let (a, new) = (a.clone(), new.clone());
                move || a.write_at(&new, 0).map(|_| ())
            },
            {
                let (a, old, new) = (a.clone(), old.clone(), new.clone());
                move || pin_and_check(&a, &old, &new)
            },
        );
        w.unwrap();
        let mut buf = vec![0u8; PAGE];
        a.read_exact_at(&mut buf, 0).unwrap();
        assert!(buf == new, "the write is what the file reads");
        assert!(c.stats().pin_copies <= 1);
        drop(a);
        assert!(mem.contents().unwrap() == new, "the backing lost the write");
        let s = c.stats();
        assert_eq!(s.folios, 0, "{s:?}");
        assert_eq!(s.free_bytes, s.capacity_bytes, "a page leaked: {s:?}");
    });
}

#[test]
fn l_pin_races_truncation_of_its_folio() {
    model("l_pin_races_truncation_of_its_folio", 2, || {
        let (c, _mem, a) = pin_setup();
        let old = data(0xa);
        let mut cut = old.clone();
        cut[100..].fill(0);
        let (t, ()) = race(
            {
                let a = a.clone();
                move || a.set_len(100)
            },
            {
                let (a, old, cut) = (a.clone(), old.clone(), cut.clone());
                move || {
                    // A pin after the cut has 100 bytes: compare those.
                    let p = a.pin(0, PAGE).unwrap();
                    let first = p.to_vec();
                    thread::yield_now();
                    assert!(p[..] == first[..], "pinned bytes changed under the pin");
                    let whole = first.len() == PAGE;
                    if whole {
                        assert!(first == old || first == cut, "a pin of torn bytes");
                    } else {
                        assert!(first[..] == old[..100], "{} bytes", first.len());
                    }
                }
            },
        );
        t.unwrap();
        a.set_len(PAGE as u64).unwrap();
        let mut buf = vec![0u8; PAGE];
        a.read_exact_at(&mut buf, 0).unwrap();
        assert!(buf == cut, "the cut part reads as zeros");
        drop(a);
        let s = c.stats();
        assert_eq!(s.free_bytes, s.capacity_bytes, "a page leaked: {s:?}");
    });
}

// ---------------------------------------------------------------------------
// (w) The async wait's waker handoff (`Folio::wait_unlocked_async`, the read
// futures' wait): a task queues its waker on a locked folio while the
// read's completion fills and unlocks it. The waker is never lost (a task
// that saw the folio locked is woken: the waiter below yields until its
// waker is woken, so a lost wake-up never ends the execution, which loom
// reports as too many branches) and woken at
// most once. The table queues its own clone of the waker (a `Waker` keeps
// its task alive), so a wake that races the future's drop wakes a live
// task, never a freed one; once both sides are done no clone is left
// queued (a dropped future took its waker back, or the unlock took it).
// The same for an async job's end (`future/job.rs`: a sync's, a throttled
// writer's, a `set_len`'s, run on the writeback pool) against a task
// polling for it: the first model failed when the end took the wakers
// and set the result in two holds of its lock (a task registered between
// them is never woken).

/// A waker counting its wakes with a loom atomic.
struct CountWakes(loom::sync::atomic::AtomicUsize);

impl std::task::Wake for CountWakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, loom::sync::atomic::Ordering::SeqCst);
    }
}

/// A 1-page file whose folio is inserted locked and not uptodate (a read
/// in flight), and its lock.
fn w_setup() -> (Cache, File) {
    let c = cache(2);
    let f = mem_file(&c, 0x7);
    (c, f)
}

#[test]
fn w_a_task_waiting_on_a_folio_is_woken_by_its_fill() {
    model(
        "w_a_task_waiting_on_a_folio_is_woken_by_its_fill",
        3,
        || {
            let (c, f) = w_setup();
            let locked = f.mapping().lock_folio(0, FgpFlags::CREAT).unwrap();
            let waiter = thread::spawn({
                let f = f.clone();
                move || {
                    use std::future::Future;
                    use std::task::{Context, Poll, Waker};
                    let r = f.mapping().get_folio(0, FgpFlags::empty()).unwrap();
                    let count = Arc::new(CountWakes(loom::sync::atomic::AtomicUsize::new(0)));
                    let waker = Waker::from(count.clone());
                    let mut fut = std::pin::pin!(r.wait_unlocked_async());
                    while fut.as_mut().poll(&mut Context::from_waker(&waker)) == Poll::Pending {
                        while count.0.load(loom::sync::atomic::Ordering::SeqCst) == 0 {
                            thread::yield_now();
                        }
                        count.0.store(0, loom::sync::atomic::Ordering::SeqCst);
                    }
                    assert!(!r.is_locked());
                    assert!(r.test(FolioFlags::UPTODATE), "woken before the fill");
                }
            });
            f.mapping().read_folio(locked).unwrap();
            waiter.join().unwrap();
            read_page(&f, 0x7).unwrap();
            assert!(check_settled(&f));
            check_closed(&c, vec![f]);
        },
    );
}

#[test]
fn w_a_dropped_wait_is_woken_at_most_once_and_leaves_no_waker() {
    model(
        "w_a_dropped_wait_is_woken_at_most_once_and_leaves_no_waker",
        3,
        || {
            use std::future::Future;
            use std::task::{Context, Poll, Waker};
            let (c, f) = w_setup();
            let locked = f.mapping().lock_folio(0, FgpFlags::CREAT).unwrap();
            let count = Arc::new(CountWakes(loom::sync::atomic::AtomicUsize::new(0)));
            let waiter = thread::spawn({
                let (f, count) = (f.clone(), count.clone());
                move || {
                    let r = f.mapping().get_folio(0, FgpFlags::empty()).unwrap();
                    let waker = Waker::from(count.clone());
                    let mut fut = std::pin::pin!(r.wait_unlocked_async());
                    fut.as_mut().poll(&mut Context::from_waker(&waker))
                }
            });
            f.mapping().read_folio(locked).unwrap();
            let first = waiter.join().unwrap();
            let wakes = count.0.load(loom::sync::atomic::Ordering::SeqCst);
            assert!(wakes <= 1, "woken {wakes} times");
            if first == Poll::Ready(()) {
                assert_eq!(wakes, 0, "a ready wait registered a waker");
            }
            assert_eq!(Arc::strong_count(&count), 1, "a waker left queued");
            assert!(check_settled(&f));
            check_closed(&c, vec![f]);
        },
    );
}

/// A task waiting on an async job (`future/job.rs`: a sync's, a throttled
/// writer's, a `set_len`'s) races the job's end on the pool: it is woken
/// exactly once if it saw `Pending`, never if it saw the result, and no
/// waker stays queued.
#[test]
fn w_a_task_waiting_on_an_async_job_is_woken_once_by_its_end() {
    model(
        "w_a_task_waiting_on_an_async_job_is_woken_once_by_its_end",
        3,
        || {
            use foliocache::internals::{AsyncDone, AsyncWait};
            use std::task::{Context, Waker};
            let done = AsyncDone::new();
            let job = thread::spawn({
                let done = done.clone();
                move || done.complete(&Ok(()))
            });
            let count = Arc::new(CountWakes(loom::sync::atomic::AtomicUsize::new(0)));
            let waker = Waker::from(count.clone());
            let mut w = AsyncWait::new(done.clone());
            let first = w.poll(&mut Context::from_waker(&waker));
            if first.is_pending() {
                while count.0.load(loom::sync::atomic::Ordering::SeqCst) == 0 {
                    thread::yield_now();
                }
                assert!(w.poll(&mut Context::from_waker(&waker)).is_ready());
            }
            job.join().unwrap();
            let wakes = count.0.load(loom::sync::atomic::Ordering::SeqCst);
            assert_eq!(
                wakes,
                usize::from(first.is_pending()),
                "woken {wakes} times"
            );
            assert_eq!(done.waiting(), 0);
        },
    );
}

/// A wait on an async job dropped while the job ends: woken at most once,
/// and its waker gone (taken back by the drop or taken by the end).
#[test]
fn w_a_dropped_wait_on_an_async_job_leaves_no_waker() {
    model(
        "w_a_dropped_wait_on_an_async_job_leaves_no_waker",
        3,
        || {
            use foliocache::internals::{AsyncDone, AsyncWait};
            use std::task::{Context, Waker};
            let done = AsyncDone::new();
            let count = Arc::new(CountWakes(loom::sync::atomic::AtomicUsize::new(0)));
            let waiter = thread::spawn({
                let (done, count) = (done.clone(), count.clone());
                move || {
                    let waker = Waker::from(count);
                    let mut w = AsyncWait::new(done);
                    let _ = w.poll(&mut Context::from_waker(&waker));
                }
            });
            done.complete(&Ok(()));
            waiter.join().unwrap();
            assert!(count.0.load(loom::sync::atomic::Ordering::SeqCst) <= 1);
            assert_eq!(done.waiting(), 0);
            assert_eq!(Arc::strong_count(&count), 1, "a waker left queued");
        },
    );
}
