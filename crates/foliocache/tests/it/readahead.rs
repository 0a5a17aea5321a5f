//! Readahead through the public API (the kernel's `page_cache_sync_ra`,
//! `page_cache_async_ra` and `page_cache_ra_order`): the
//! window sequence, large folios, random detection and advice, the marker
//! hand-off, end of file, `File::readahead` and `DontNeed`, windows racing
//! invalidation, concurrent readers under reclaim, IO errors in a window,
//! batched against single insertion, and per-handle state.
//!
//! What the backing is asked to read is logged by
//! [`common::RecordingBacking`] (offset, length and result of every
//! `read_blocks` call). It has no raw fd, so asynchronous windows are read
//! through `read_blocks` on the IO engine's threads and logged as well. An
//! asynchronous window may complete after the read that started it
//! returns: tests wait for its folios to be uptodate and unlocked
//! ([`common::wait_uptodate`], [`common::settled`]) before they look at the
//! log.
//!
//! Figures are exact wherever the algorithm is deterministic (one reader):
//! the windows of the reference's worked example (the kernel's readahead,
//! 32-page windows, over one-page folios), one request per window,
//! folio orders. Multi-threaded tests check what must hold whatever the
//! interleaving: every byte right, nothing left locked, no page read twice,
//! one window per marker.

// The tests drive and count their own threads with std atomics and locks;
// the shim rule (clippy.toml) is for the crate's protocols.
#![allow(clippy::disallowed_types)]

use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use backing::{FaultyBacking, MemBacking};
use foliocache::filemap::FolioFlags;
use foliocache::filemap::{Mapping, MappingEntry};
use foliocache::internals::Insert;
use foliocache::Window;
use foliocache::{Advice, Cache, File, ReadaheadConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common;
use common::{nonzero_bytes, settled, wait_uptodate, RecordingBacking, HANG};
use test_support::cache::TestCache;
use test_support::TempPath;

const PAGE: usize = 4096;
const P: u64 = PAGE as u64;

type Rec = Arc<RecordingBacking<MemBacking>>;
type FaultyRec = Arc<RecordingBacking<FaultyBacking<MemBacking>>>;

/// 2 MiB windows (512 pages), batched: the exact figures of the large-folio
/// tests are worked out for this, so they do not move when the default is
/// tuned.
fn two_mib() -> ReadaheadConfig {
    ReadaheadConfig::new(512, 512)
}

/// A cache of `bytes` with folios up to `max_folio` bytes and readahead
/// `ra`.
fn cache(bytes: usize, max_folio: usize, ra: ReadaheadConfig) -> Cache {
    TestCache::bytes(bytes)
        .max_folio(max_folio)
        .readahead(ra)
        .build()
}

/// 8 MiB of one-page folios with the kernel's readahead: the reference's
/// worked example.
fn kernel_cache() -> Cache {
    cache(8 << 20, PAGE, ReadaheadConfig::kernel())
}

/// 32 MiB, folios up to 2 MiB, [`two_mib`] windows.
fn two_mib_cache() -> Cache {
    cache(32 << 20, 2 << 20, two_mib())
}

/// `data` in memory, read through `c`, with its reads logged.
fn open_rec(c: &Cache, data: &[u8]) -> (File, Rec) {
    let b = Arc::new(RecordingBacking::new(MemBacking::with_data(data.to_vec())));
    (c.open_backing(b.clone()).unwrap(), b)
}

/// As [`open_rec`], with a fault injector between the log and the data.
fn open_faulty(c: &Cache, data: &[u8]) -> (File, FaultyRec) {
    let b = Arc::new(RecordingBacking::new(FaultyBacking::new(
        MemBacking::with_data(data.to_vec()),
    )));
    (c.open_backing(b.clone()).unwrap(), b)
}

/// `len` random nonzero bytes (`seed`) through [`open_rec`]: the bytes,
/// the file, the log.
fn new_rec(c: &Cache, len: usize, seed: u64) -> (Vec<u8>, File, Rec) {
    let data = nonzero_bytes(len, seed);
    let (f, rec) = open_rec(c, &data);
    (data, f, rec)
}

/// `len` random nonzero bytes (`seed`) through [`open_faulty`]: the bytes,
/// the file, the log (and its fault injector).
fn new_faulty(c: &Cache, len: usize, seed: u64) -> (Vec<u8>, File, FaultyRec) {
    let data = nonzero_bytes(len, seed);
    let (f, rec) = open_faulty(c, &data);
    (data, f, rec)
}

/// Reads `len` bytes at `off` and checks them against `data`.
fn read_check(f: &File, data: &[u8], off: u64, len: usize) -> io::Result<usize> {
    let mut buf = vec![0u8; len];
    let n = f.read_at(&mut buf, off)?;
    let want = (data.len() as u64).saturating_sub(off).min(len as u64) as usize;
    assert_eq!(n, want, "read of {len} at {off}: short");
    if buf[..n] != data[off as usize..off as usize + n] {
        let bad = (0..n).find(|&i| buf[i] != data[off as usize + i]).unwrap();
        panic!(
            "read of {len} at {off}: wrong byte at file offset {} (got {:#x}, want {:#x})",
            off as usize + bad,
            buf[bad],
            data[off as usize + bad]
        );
    }
    Ok(n)
}

/// Reads page `p` (4 KiB) and checks it.
fn read_page(f: &File, data: &[u8], p: u64) {
    read_check(f, data, p * P, PAGE).unwrap();
}

/// [`read_page`] of each of `pages`, in order.
fn read_pages(f: &File, data: &[u8], pages: impl IntoIterator<Item = u64>) {
    for p in pages {
        read_page(f, data, p);
    }
}

/// Reads `pages` of `f` one at a time (checking them against `data`): each
/// read after which the window changed (from none at first), as (page
/// read, [`wsm`] of the window after it).
fn window_changes(f: &File, data: &[u8], pages: Range<u64>) -> Vec<(u64, (u64, u64, u64))> {
    let mut changes = Vec::new();
    let mut last = Window::default();
    for p in pages {
        read_page(f, data, p);
        let w = f.readahead_window();
        if w != last {
            changes.push((p, wsm(w)));
            last = w;
        }
    }
    changes
}

/// The reference's worked example: the windows (start, size, marker page)
/// 4 KiB sequential reads from 0 make with the kernel's defaults over
/// one-page folios.
const WORKED_EXAMPLE: [(u64, u64, u64); 8] = [
    (0, 4, 1),
    (4, 8, 4),
    (12, 16, 12),
    (28, 32, 28),
    (60, 32, 60),
    (92, 32, 92),
    (124, 32, 124),
    (156, 32, 156),
];

/// (start, size) of each window of `windows` ([`wsm`]s): the requests of
/// windows read with one request each.
fn spans(windows: &[(u64, u64, u64)]) -> Vec<(u64, u64)> {
    windows
        .iter()
        .map(|&(start, size, _)| (start, size))
        .collect()
}

/// (start, size, marker page) of a window.
fn wsm(w: Window) -> (u64, u64, u64) {
    (w.start, w.size, w.marker())
}

/// The folio at page `i`, if any (panics on a shadow: none of these tests
/// evicts unless it says so).
fn folio_at(m: &Mapping, i: u64) -> Option<foliocache::filemap::FolioRef<'_>> {
    match m.get_entry(i) {
        None => None,
        Some(MappingEntry::Folio(f)) => Some(f),
        Some(MappingEntry::Shadow(s)) => panic!("page {i} holds a shadow ({s:#x})"),
    }
}

/// Pages of `first..=last` that hold a folio carrying the readahead marker.
fn markers(m: &Mapping, first: u64, last: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut i = first;
    while i <= last {
        match folio_at(m, i) {
            Some(f) => {
                if f.test(FolioFlags::READAHEAD) {
                    out.push(f.index());
                }
                i = f.index() + f.nr_pages();
            }
            None => i += 1,
        }
    }
    out
}

/// Waits until every folio of `first..=last` is held by the cache alone
/// (an engine may drop its reference just after it unlocks), so that
/// invalidation may take it.
fn wait_unreferenced(m: &Mapping, first: u64, last: u64) {
    let deadline = Instant::now() + HANG;
    let mut i = first;
    while i <= last {
        match folio_at(m, i) {
            Some(f) => {
                // The cache's 2^order references and ours.
                if f.refcount() as u64 == f.nr_pages() + 1 && !f.is_locked() {
                    i = f.index() + f.nr_pages();
                } else {
                    assert!(Instant::now() < deadline, "still in use: {f:?}");
                    drop(f);
                    thread::sleep(Duration::from_micros(200));
                }
            }
            None => i += 1,
        }
    }
}

/// `File::readahead` of pages `0..pages`, then waits until they are all
/// uptodate and held by the cache alone ([`wait_unreferenced`]).
fn read_ahead_idle(f: &File, pages: u64) {
    f.readahead(0, pages * P).unwrap();
    wait_uptodate(f.mapping(), 0, pages - 1);
    wait_unreferenced(f.mapping(), 0, pages - 1);
}

/// Aborts the test binary if the test is not done in `secs` seconds: a
/// hang fails loudly instead of stalling the run.
struct Watchdog(Arc<AtomicBool>);

impl Watchdog {
    fn new(name: &'static str, limit: Duration) -> Watchdog {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        thread::spawn(move || {
            let start = Instant::now();
            while start.elapsed() < limit {
                if d.load(Ordering::Relaxed) {
                    return;
                }
                thread::sleep(Duration::from_millis(20));
            }
            eprintln!("{name}: no progress after {limit:?}: a hang; aborting");
            std::process::abort();
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------------------
// The window sequence (`get_init_ra_size`, `get_next_ra_size`, and the
// large folios of `page_cache_ra_order`).

/// 4 KiB sequential reads from 0 with the kernel's defaults over order-0
/// folios: the windows are the reference's worked example, each launched
/// by the read that reaches the previous window's marker, and each is read
/// with exactly one request.
#[test]
fn kernel_windows_follow_the_worked_example() {
    let c = kernel_cache();
    let (data, f, rec) = new_rec(&c, 256 * PAGE, 1);
    assert_eq!(f.readahead_window(), Window::default());
    let (pages, windows): (Vec<u64>, Vec<_>) =
        window_changes(&f, &data, 0..128).into_iter().unzip();
    assert_eq!(windows, WORKED_EXAMPLE, "the windows");
    // Page 0 starts the first window, each marker the next.
    assert_eq!(
        pages,
        [0, 1, 4, 12, 28, 60, 92, 124],
        "the reads that changed it"
    );
    // The last window (156..188) may still be in flight.
    wait_uptodate(f.mapping(), 0, 187);
    let log = rec.log();
    assert!(log.iter().all(|r| r.result == Ok(r.len)), "{log:?}");
    assert_eq!(rec.page_runs(), spans(&windows), "one request per window");
    // Nothing was read past the last window.
    assert!(folio_at(f.mapping(), 188).is_none());
    // Every marker reached was cleared; the last window's is still there.
    assert_eq!(markers(f.mapping(), 0, 255), [156]);
    assert_eq!(
        settled(f.mapping(), 0, 255).len(),
        188,
        "188 order-0 folios"
    );
}

/// 2 MiB windows, folios up to 2 MiB: a 2 MiB read at a
/// 2 MiB boundary makes one 2 MiB folio, read with one request, and the
/// window it starts is the next 2 MiB as one folio.
#[test]
fn two_mib_reads_make_two_mib_folios() {
    let c = two_mib_cache();
    let (data, f, rec) = new_rec(&c, 16 << 20, 2);
    for i in 0..4u64 {
        read_check(&f, &data, i << 21, 2 << 20).unwrap();
        let folio = folio_at(f.mapping(), i * 512).expect("the read's folio");
        assert_eq!((folio.index(), folio.order()), (i * 512, 9), "{folio:?}");
        assert_eq!(
            wsm(f.readahead_window()),
            ((i + 1) * 512, 512, (i + 1) * 512),
            "after read {i}"
        );
    }
    wait_uptodate(f.mapping(), 0, 5 * 512 - 1);
    assert_eq!(
        settled(f.mapping(), 0, 4095),
        [(0, 9), (512, 9), (1024, 9), (1536, 9), (2048, 9)]
    );
    assert_eq!(
        rec.page_runs(),
        [(0, 512), (512, 512), (1024, 512), (1536, 512), (2048, 512)]
    );
}

/// 2 MiB windows, 4 KiB sequential reads: the first window is order 0,
/// and each asynchronous window's folios are larger (order + 2), up to
/// 2 MiB; each async window's end is rounded down to its order's
/// alignment (as `page_cache_async_ra` does), and each position uses the
/// largest folio its alignment and the window's end allow
/// (`page_cache_ra_order`).
#[test]
fn async_windows_grow_their_folio_order() {
    let c = two_mib_cache();
    let (data, f, rec) = new_rec(&c, 4 << 20, 3);
    let changes = window_changes(&f, &data, 0..1024);
    // With m = 512: sizes ramp 4, 16, 64, 128, 256, 512 (`get_next_ra_size`), less what
    // the alignment of the window's end takes: e.g. the third window,
    // order 4, 64 pages from 20, ends at 84, rounded down to 80.
    assert_eq!(
        changes,
        [
            (0, (0, 4, 1)),
            (1, (4, 16, 4)),
            (4, (20, 60, 20)),
            (20, (80, 112, 80)),
            (80, (192, 64, 192)),
            (192, (256, 128, 256)),
            (256, (384, 128, 384)),
            (384, (512, 256, 512)),
            (512, (768, 256, 768)),
            // Past end of file: planned, nothing built.
            (768, (1024, 512, 1024)),
        ],
        "(page read, window after it)"
    );
    let layout = settled(f.mapping(), 0, 1023);
    assert_eq!(
        layout,
        [
            // Sync window: order 0.
            (0, 0),
            (1, 0),
            (2, 0),
            (3, 0),
            // Order 2.
            (4, 2),
            (8, 2),
            (12, 2),
            (16, 2),
            // Order 4, smaller where 20 and 24 are not 16-aligned.
            (20, 2),
            (24, 3),
            (32, 4),
            (48, 4),
            (64, 4),
            // Order 6.
            (80, 4),
            (96, 5),
            (128, 6),
            // Order 8, capped at log2 of the window's size.
            (192, 6),
            (256, 7),
            (384, 7),
            (512, 8),
            (768, 8)
        ],
        "(index, order) of every folio"
    );
    // One request per window, the last (past end of file) not built.
    let windows: Vec<_> = changes[..changes.len() - 1].iter().map(|c| c.1).collect();
    assert_eq!(rec.page_runs(), spans(&windows), "one request per window");
}

/// A file's windows are capped at an eighth of the cache (not below the
/// kernel's 32 pages): the configuration a file reports is the capped one,
/// and a sequential stream's windows never exceed it.
#[test]
fn windows_are_capped_at_an_eighth_of_the_cache() {
    for (capacity, cap) in [(1usize << 20, 32u64), (4 << 20, 128), (64 << 20, 2048)] {
        let c = cache(capacity, 64 << 10, ReadaheadConfig::default());
        let (data, f, _rec) = new_rec(&c, 2 << 20, 24);
        let cfg = f.readahead_config();
        assert_eq!((cfg.max_pages, cfg.io_pages), (cap, cap), "{capacity}");
        let mut biggest = 0;
        for p in 0..512 {
            read_page(&f, &data, p);
            biggest = biggest.max(f.readahead_window().size);
        }
        assert!(biggest <= cap, "{capacity}: a window of {biggest} pages");
        if cap < 512 {
            assert_eq!(biggest, cap, "{capacity}: the stream reached the cap");
        }
        // set_readahead caps too.
        f.set_readahead(ReadaheadConfig::default());
        assert_eq!(f.readahead_config().max_pages, cap);
        c.wait_io_idle();
    }
}

// ---------------------------------------------------------------------------
// Random detection and advice (`page_cache_sync_ra`, `POSIX_FADV_RANDOM`).

/// Reads at scattered offsets (not page 0, not following the previous
/// read, no cached pages before them) read exactly their request and leave
/// the window alone; a read that continues the previous one starts a
/// window.
#[test]
fn scattered_reads_read_only_their_request() {
    let c = kernel_cache();
    let (data, f, rec) = new_rec(&c, 2048 * PAGE, 4);
    let mut want = Vec::new();
    for p in [1000u64, 37, 1500, 600, 1999] {
        read_page(&f, &data, p);
        want.push((p, 1));
        assert_eq!(rec.page_runs(), sorted(&want), "after reading page {p}");
        assert_eq!(f.readahead_window(), Window::default(), "state untouched");
    }
    // 10000 bytes from 100 bytes into page 800: pages 800..=802, one request.
    read_check(&f, &data, 800 * P + 100, 10_000).unwrap();
    want.push((800, 3));
    assert_eq!(rec.page_runs(), sorted(&want));
    assert_eq!(f.readahead_window(), Window::default());
    for p in [999, 1001, 36, 38, 799, 803] {
        assert!(
            folio_at(f.mapping(), p).is_none(),
            "page {p} was read ahead"
        );
    }
    // The next read continues that one: a window from 803 (4.3 step 3).
    read_page(&f, &data, 803);
    assert_eq!(wsm(f.readahead_window()), (803, 4, 804));
    wait_uptodate(f.mapping(), 803, 806);
    want.push((803, 4));
    assert_eq!(rec.page_runs(), sorted(&want));
}

fn sorted(v: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}

/// `Advice::Random`: every miss reads exactly its request (capped at the
/// maximum window, 32 pages here), sequential or not, and no window is
/// built; `Advice::Normal` turns readahead back on.
#[test]
fn random_advice_reads_exactly_the_request() {
    let c = kernel_cache();
    let (data, f, rec) = new_rec(&c, 512 * PAGE, 5);
    f.advise(0, 0, Advice::Random).unwrap();
    read_pages(&f, &data, 0..8);
    assert_eq!(
        rec.page_runs(),
        (0..8).map(|p| (p, 1)).collect::<Vec<_>>(),
        "one page per 4 KiB read, from page 0 and sequential as they are"
    );
    assert_eq!(f.readahead_window(), Window::default());
    rec.clear();
    read_check(&f, &data, 20 * P, 16 * PAGE).unwrap();
    assert_eq!(rec.page_runs(), [(20, 16)]);
    rec.clear();
    // 64 pages: two requests of the 32-page cap.
    read_check(&f, &data, 100 * P, 64 * PAGE).unwrap();
    assert_eq!(rec.page_runs(), [(100, 32), (132, 32)]);
    assert!(folio_at(f.mapping(), 164).is_none());
    assert_eq!(f.readahead_window(), Window::default());
    rec.clear();
    f.advise(0, 0, Advice::Normal).unwrap();
    read_page(&f, &data, 164);
    assert_eq!(wsm(f.readahead_window()), (164, 4, 165));
    wait_uptodate(f.mapping(), 164, 167);
    assert_eq!(rec.page_runs(), [(164, 4)]);
}

/// `Advice::Sequential` doubles the largest window (64 pages here);
/// `Advice::Normal` brings it back to 32 for the next stream.
#[test]
fn sequential_advice_doubles_the_window_and_normal_restores_it() {
    let c = kernel_cache();
    let (data, f, rec) = new_rec(&c, 512 * PAGE, 6);
    // The windows reading pages 0..=upto one at a time makes.
    let windows = |upto: u64| -> Vec<_> {
        let changes = window_changes(&f, &data, 0..upto + 1);
        changes.into_iter().map(|(_, w)| w).collect()
    };
    f.advise(0, 0, Advice::Sequential).unwrap();
    let doubled = windows(200);
    // The worked example's ramp to 32 pages, then windows of 64.
    let want: Vec<_> = WORKED_EXAMPLE[..4]
        .iter()
        .copied()
        .chain((0..4).map(|k| (60 + 64 * k, 64, 60 + 64 * k)))
        .collect();
    assert_eq!(doubled, want);
    wait_uptodate(f.mapping(), 0, 315);
    assert_eq!(rec.page_runs(), spans(&doubled));
    f.advise(0, 0, Advice::Normal).unwrap();
    wait_unreferenced(f.mapping(), 0, 511);
    f.advise(0, 0, Advice::DontNeed).unwrap();
    assert_eq!(f.mapping().nr_folios(), 0);
    assert_eq!(windows(100), WORKED_EXAMPLE[..7]);
}

// ---------------------------------------------------------------------------
// The marker hand-off (`page_cache_async_ra`).

/// Eight threads read the marker page at once: exactly one starts the next
/// window (one request each), the marker is cleared, and the new window's
/// marker is set; then the same at that marker. Repeated on fresh files so
/// the threads really meet.
#[test]
fn one_reader_of_many_starts_the_next_window() {
    const THREADS: usize = 8;
    let _w = Watchdog::new("one_reader_of_many_starts_the_next_window", 4 * HANG);
    let c = kernel_cache();
    for round in 0..100 {
        let data = Arc::new(nonzero_bytes(64 * PAGE, 100 + round));
        let (f, rec) = open_rec(&c, &data);
        read_page(&f, &data, 0);
        assert_eq!(rec.page_runs(), [(0, 4)]);
        for (marker, runs, window) in [
            (1u64, vec![(0, 4), (4, 8)], (4, 8, 4)),
            (4, vec![(0, 4), (4, 8), (12, 16)], (12, 16, 12)),
        ] {
            let barrier = Barrier::new(THREADS);
            thread::scope(|s| {
                for _ in 0..THREADS {
                    s.spawn(|| {
                        barrier.wait();
                        read_page(&f, &data, marker);
                    });
                }
            });
            assert_eq!(wsm(f.readahead_window()), window, "round {round}");
            wait_uptodate(f.mapping(), 0, window.0 + window.1 - 1);
            assert_eq!(
                rec.page_runs(),
                runs,
                "round {round}, marker {marker}: one window per marker"
            );
            let m = folio_at(f.mapping(), marker).unwrap();
            assert!(!m.test(FolioFlags::READAHEAD), "marker not cleared: {m:?}");
            assert_eq!(markers(f.mapping(), 0, 63), [window.2]);
        }
    }
}

/// Readers of one handle going through a file sequentially at the same
/// time: no page is read twice, every byte is right, every marker they
/// passed is cleared, nothing is left locked.
#[test]
fn concurrent_sequential_readers_read_each_page_once() {
    const THREADS: usize = 6;
    let _w = Watchdog::new(
        "concurrent_sequential_readers_read_each_page_once",
        3 * HANG,
    );
    let c = kernel_cache();
    for round in 0..10 {
        let (data, f, rec) = new_rec(&c, 1024 * PAGE, 200 + round);
        let barrier = Barrier::new(THREADS);
        thread::scope(|s| {
            for t in 0..THREADS {
                let (f, data, barrier) = (&f, &data, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let len = [PAGE, 3 * PAGE, 5000][t % 3];
                    let mut off = 0;
                    while off < data.len() as u64 {
                        off += read_check(f, data, off, len).unwrap() as u64;
                    }
                });
            }
        });
        let layout = settled(f.mapping(), 0, 1023);
        assert_eq!(layout.len(), 1024, "every page was read");
        let runs = rec.page_runs();
        let mut next = 0;
        for &(p, n) in &runs {
            assert!(p >= next, "page {p} read twice: {runs:?}");
            next = p + n;
        }
        assert_eq!(next, 1024, "{runs:?}");
        assert!(rec.log().iter().all(|r| r.result.is_ok()));
    }
}

// ---------------------------------------------------------------------------
// End of file: no window reads or marks a folio past it.

/// A file of 10 pages and 100 bytes: windows stop at page 10, no folio and
/// no marker lies past it, the last read returns exactly the 100 bytes and
/// writes nothing past them into the caller's buffer.
#[test]
fn windows_stop_at_end_of_file() {
    let c = kernel_cache();
    let size = 10 * PAGE + 100;
    let (data, f, rec) = new_rec(&c, size, 7);
    read_pages(&f, &data, 0..10);
    let mut buf = vec![0xeeu8; PAGE];
    assert_eq!(f.read_at(&mut buf, 10 * P).unwrap(), 100);
    assert_eq!(&buf[..100], &data[10 * PAGE..]);
    assert!(
        buf[100..].iter().all(|&b| b == 0xee),
        "bytes past EOF written"
    );
    assert_eq!(f.read_at(&mut buf, 10 * P + 100).unwrap(), 0);
    assert_eq!(f.read_at(&mut buf, 11 * P).unwrap(), 0);
    // The window (4, 8) reaches EOF, so it got no marker (as `page_cache_ra_order` leaves one out) and no
    // window after it was planned.
    assert_eq!(wsm(f.readahead_window()), (4, 8, 4));
    let layout = settled(f.mapping(), 0, 63);
    assert_eq!(layout, (0..=10).map(|i| (i, 0)).collect::<Vec<_>>());
    assert_eq!(markers(f.mapping(), 0, 63), Vec::<u64>::new());
    let log = rec.log();
    assert_eq!(rec.page_runs(), [(0, 4), (4, 7)], "{log:?}");
    let last = log.iter().find(|r| r.offset == 4 * P).unwrap();
    assert_eq!(last.result, Ok(6 * P + 100));
    // A whole-file read into a larger buffer.
    let mut buf = vec![0xeeu8; 64 * PAGE];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), size);
    assert_eq!(&buf[..size], &data[..]);
    assert!(buf[size..].iter().all(|&b| b == 0xee));
}

/// Large folios at end of file: 3 MiB and 100 bytes read in 1 MiB reads.
/// Every folio lies within the pages holding data (the last one is cut down
/// to order 0), no request reaches past the last page, bytes are right.
#[test]
fn large_folio_windows_stop_at_end_of_file() {
    let c = two_mib_cache();
    let size = (3 << 20) + 100;
    let (data, f, rec) = new_rec(&c, size, 8);
    for i in 0..4u64 {
        let n = read_check(&f, &data, i << 20, 1 << 20).unwrap();
        assert_eq!(n, if i < 3 { 1 << 20 } else { 100 });
    }
    let layout = settled(f.mapping(), 0, 2047);
    assert_eq!(layout, [(0, 8), (256, 8), (512, 8), (768, 0)]);
    for i in 769..2048 {
        assert!(folio_at(f.mapping(), i).is_none(), "a folio at {i}");
    }
    assert_eq!(rec.page_runs(), [(0, 512), (512, 257)]);
    for r in rec.log() {
        assert!(
            r.offset + r.len <= 769 * P,
            "request past the last page: {r:?}"
        );
    }
    assert_eq!(markers(f.mapping(), 0, 2047), Vec::<u64>::new());
    // Read again (hits): still right, no IO.
    let n = rec.reads();
    let mut buf = vec![0u8; size + PAGE];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), size);
    assert_eq!(&buf[..size], &data[..]);
    assert_eq!(rec.reads(), n);
}

// ---------------------------------------------------------------------------
// readahead(2), WillNeed, DontNeed.

/// `File::readahead` reads the range (skipping the page already cached),
/// each page once, and reads of the range afterwards do no IO;
/// `Advice::WillNeed` does the same.
#[test]
fn readahead_fills_the_range_and_reads_then_do_no_io() {
    let c = two_mib_cache();
    let (data, f, rec) = new_rec(&c, 4 << 20, 9);
    read_page(&f, &data, 300);
    assert_eq!(rec.page_runs(), [(300, 1)]);
    // Bytes 1 MiB + 100 .. 3 MiB + 100: pages 256..=768.
    f.readahead((1 << 20) + 100, 2 << 20).unwrap();
    // The reads wait for the IO in flight; they must not add any.
    read_check(&f, &data, (1 << 20) + 100, 2 << 20).unwrap();
    wait_uptodate(f.mapping(), 256, 768);
    let runs = rec.page_runs();
    let mut pages = vec![0u32; 1024];
    for &(p, n) in &runs {
        for i in p..p + n {
            pages[i as usize] += 1;
        }
    }
    for (i, &n) in pages.iter().enumerate() {
        let want = u32::from((256..=768).contains(&i) || i == 300);
        assert_eq!(n, want, "page {i} read {n} times: {runs:?}");
    }
    assert!(runs.len() <= 4, "few requests: {runs:?}");
    // Nothing outside the range was brought in.
    assert!(folio_at(f.mapping(), 255).is_none());
    assert!(folio_at(f.mapping(), 769).is_none());
    let n = rec.reads();
    read_check(&f, &data, 256 * P, 513 * PAGE).unwrap();
    assert_eq!(rec.reads(), n);

    // WillNeed, on a fresh file: 64 KiB from 0 is one order-4 folio, one
    // request; the read after it is a hit.
    let (g, rec) = open_rec(&c, &data);
    g.advise(0, 16 * P, Advice::WillNeed).unwrap();
    read_check(&g, &data, 0, 16 * PAGE).unwrap();
    assert_eq!(settled(g.mapping(), 0, 1023), [(0, 4)]);
    assert_eq!(rec.page_runs(), [(0, 16)]);
}

/// `Advice::DontNeed` drops the clean, unused folios lying wholly in the
/// (page-rounded inward) range, leaves no shadows, and keeps a folio a
/// reader holds and folios straddling the range's edges.
#[test]
fn dontneed_drops_unused_folios_inside_the_range() {
    let c = kernel_cache();
    let (data, f, _rec) = new_rec(&c, 64 * PAGE, 10);
    let m = f.mapping();
    read_ahead_idle(&f, 32);
    let held = folio_at(m, 5).unwrap();
    // Bytes 2p+10 .. 10p+10: whole pages 3..10.
    f.advise(2 * P + 10, 8 * P, Advice::DontNeed).unwrap();
    for i in 0..32 {
        let kept = !(3..10).contains(&i) || i == 5;
        match m.get_entry(i) {
            Some(MappingEntry::Folio(_)) => assert!(kept, "page {i} not dropped"),
            None => assert!(!kept, "page {i} dropped"),
            Some(MappingEntry::Shadow(_)) => panic!("page {i}: a shadow"),
        }
    }
    assert_eq!(m.nr_shadows(), 0);
    assert_eq!(m.nr_folios(), 32 - 6);
    drop(held);
    read_check(&f, &data, 0, 32 * PAGE).unwrap();
    wait_unreferenced(m, 0, 63);
    f.advise(0, 0, Advice::DontNeed).unwrap();
    assert_eq!((m.nr_folios(), m.nr_shadows()), (0, 0));

    // Large folios: only the one wholly inside goes.
    let c = cache(8 << 20, 16 * PAGE, ReadaheadConfig::default());
    let (f, _rec) = open_rec(&c, &data);
    let m = f.mapping();
    read_ahead_idle(&f, 64);
    assert_eq!(settled(m, 0, 63), [(0, 4), (16, 4), (32, 4), (48, 4)]);
    f.advise(8 * P, 32 * P, Advice::DontNeed).unwrap();
    assert_eq!(settled(m, 0, 63), [(0, 4), (32, 4), (48, 4)]);
    assert_eq!(m.nr_shadows(), 0);
    read_check(&f, &data, 0, 64 * PAGE).unwrap();
}

/// `Advice::DontNeed` over pages whose folios were evicted earlier removes
/// their shadows too, as the kernel's `invalidate_mapping_pages` does for a
/// file (`clear_shadow_entries`: invalidation leaves no shadows in its
/// range). Otherwise a read after `DontNeed` is
/// taken for a refault of data the program said it no longer needs.
#[test]
fn dontneed_clears_eviction_shadows_in_the_range() {
    let c = kernel_cache();
    let (_, f, _rec) = new_rec(&c, 64 * PAGE, 11);
    let m = f.mapping();
    read_ahead_idle(&f, 16);
    c.shrink(u64::MAX);
    assert_eq!((m.nr_folios(), m.nr_shadows()), (0, 16));
    f.advise(0, 8 * P, Advice::DontNeed).unwrap();
    for i in 0..8 {
        assert!(
            m.get_entry(i).is_none(),
            "page {i} keeps its shadow after DontNeed: {:?}",
            m.get_entry(i)
        );
    }
    assert_eq!(m.nr_shadows(), 8, "the shadows outside the range stay");
}

// ---------------------------------------------------------------------------
// Races with invalidation; concurrent readers under reclaim.

/// Readers going through a file (sequentially, so windows are in flight
/// all the time) while another thread invalidates ranges of it and all of
/// it: every byte right, no hang, nothing left locked.
#[test]
fn windows_race_invalidation() {
    let _w = Watchdog::new("windows_race_invalidation", 3 * HANG);
    for insert in [Insert::Batched, Insert::Single] {
        let c = cache(
            8 << 20,
            16 * PAGE,
            ReadaheadConfig::default().with_insert(insert),
        );
        let data = Arc::new(nonzero_bytes(4 << 20, 12));
        let faulty = Arc::new(FaultyBacking::new(MemBacking::with_data(data.to_vec())));
        faulty.set_read_latency(Duration::from_micros(20));
        let f = c.open_backing(faulty).unwrap();
        let stop = AtomicBool::new(false);
        thread::scope(|s| {
            let readers: Vec<_> = (0..3usize)
                .map(|t| {
                    let (f, data) = (&f, &data);
                    s.spawn(move || {
                        let len = [PAGE, 16 * PAGE, 5000][t];
                        for pass in 0..3u64 {
                            let mut off = ((t as u64 * 300 + pass * 7) % 1024) * P;
                            while off < data.len() as u64 {
                                off += read_check(f, data, off, len).unwrap() as u64;
                            }
                        }
                    })
                })
                .collect();
            let (f, stop) = (&f, &stop);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(13);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if n.is_multiple_of(4) {
                        f.mapping().invalidate(0, u64::MAX);
                    } else {
                        let off = rng.gen_range(0..4u64 << 20);
                        let len = rng.gen_range(1..1u64 << 20);
                        f.advise(off, len, Advice::DontNeed).unwrap();
                    }
                    n += 1;
                    thread::yield_now();
                }
            });
            for r in readers {
                r.join().unwrap();
            }
            stop.store(true, Ordering::Relaxed);
        });
        settled(f.mapping(), 0, 1023);
        read_check(&f, &data, 0, 4 << 20).unwrap();
    }
}

/// The reader that reaches a marker does not wait for the window it
/// starts (issue 5: asynchronous readahead): with reads taking 300 ms,
/// reading the marker page returns at once, and the first read inside the
/// new window waits for it (one request, not its own).
#[test]
fn the_marker_reader_does_not_wait_for_the_async_window() {
    const LATENCY: Duration = Duration::from_millis(300);
    let c = kernel_cache();
    let (data, f, rec) = new_faulty(&c, 64 * PAGE, 22);
    rec.inner().set_read_latency(LATENCY);
    let t = Instant::now();
    read_page(&f, &data, 0);
    assert!(t.elapsed() >= LATENCY, "the sync window was read");
    let t = Instant::now();
    read_page(&f, &data, 1);
    let marker_read = t.elapsed();
    assert_eq!(wsm(f.readahead_window()), (4, 8, 4));
    assert!(
        marker_read < LATENCY / 2,
        "the marker's reader waited {marker_read:?} for the window it started"
    );
    read_pages(&f, &data, [2, 3]);
    let t = Instant::now();
    read_page(&f, &data, 4);
    assert!(
        t.elapsed() >= LATENCY / 4,
        "page 4 came before its window's IO"
    );
    // Page 4 was the next marker: its window (12, 16) left too, in
    // parallel, and may be done already.
    assert_eq!(rec.page_runs()[..2], [(0, 4), (4, 8)]);
    c.wait_io_idle();
    assert_eq!(rec.page_runs(), [(0, 4), (4, 8), (12, 16)]);
}

/// A file closed while its windows are in flight: the reads complete, its
/// folios go back to the arena, nothing is left in the cache.
#[test]
fn closing_a_file_with_windows_in_flight_gives_its_folios_back() {
    let c = cache(8 << 20, 64 << 10, ReadaheadConfig::default());
    for round in 0..20u64 {
        let (data, f, rec) = new_faulty(&c, 2 << 20, 23 + round);
        rec.inner().set_read_latency(Duration::from_millis(2));
        read_check(&f, &data, 0, 5000).unwrap();
        f.readahead(1 << 20, 1 << 20).unwrap();
        if round % 2 == 0 {
            read_check(&f, &data, 16 * P, PAGE).unwrap();
        }
        drop(f);
        c.wait_io_idle();
        let s = c.stats();
        assert_eq!((s.folios, s.bytes_cached), (0, 0), "round {round}: {s:?}");
        assert_eq!(s.free_bytes, s.capacity_bytes, "round {round}: {s:?}");
    }
}

/// One mixed workload: `threads` threads over `files`, the even ones
/// reading sequentially (each from its own file, in its own request size,
/// moving to the next file at the end), the odd ones at random offsets of
/// random files; every byte is checked.
fn mixed_readers(files: &[(File, Arc<Vec<u8>>)], threads: usize, reads: usize, seed: u64) {
    thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed + t as u64);
                let sequential = t % 2 == 0;
                let len = [PAGE, 5000, 16 * PAGE, 128 << 10][t % 4];
                let mut fi = t % files.len();
                let mut off = (t as u64 * 777 * P) % files[fi].1.len() as u64;
                for _ in 0..reads {
                    if sequential {
                        if off >= files[fi].1.len() as u64 {
                            fi = (fi + 1) % files.len();
                            off = 0;
                        }
                    } else {
                        fi = rng.gen_range(0..files.len());
                        off = rng.gen_range(0..files[fi].1.len() as u64);
                    }
                    let (f, data) = &files[fi];
                    let n = read_check(f, data, off, len).unwrap_or_else(|e| {
                        panic!("thread {t}: read of {len} at {off} failed: {e}")
                    });
                    off += n as u64;
                }
            });
        }
    });
}

/// Eight threads, sequential and random, on one 16 MiB file through a
/// 2 MiB cache (reclaim all the time; eight threads' windows of up to an
/// eighth of the cache each are more than is free, so insertion often
/// falls back to one folio at a time): every byte right.
#[test]
fn concurrent_readers_of_one_file_under_reclaim() {
    let _w = Watchdog::new("concurrent_readers_of_one_file_under_reclaim", 3 * HANG);
    for cfg in [
        ReadaheadConfig::default(),
        ReadaheadConfig::kernel().with_insert(Insert::Single),
    ] {
        let c = cache(2 << 20, 64 << 10, cfg);
        let data = Arc::new(nonzero_bytes(16 << 20, 14));
        let f = c
            .open_backing(MemBacking::with_data(data.to_vec()))
            .unwrap();
        mixed_readers(&[(f.clone(), data)], 8, 600, 15);
        assert!(c.stats().evictions > 0, "{:?}", c.stats());
        settled(f.mapping(), 0, 4095);
        common::assert_accounted(&c);
    }
}

/// Eight threads over four O_DIRECT files (the real IO path) of 4 MiB
/// through a 4 MiB cache: every byte right.
#[test]
fn concurrent_readers_of_several_files_under_reclaim() {
    let _w = Watchdog::new(
        "concurrent_readers_of_several_files_under_reclaim",
        3 * HANG,
    );
    let c = cache(4 << 20, 256 << 10, ReadaheadConfig::default());
    let mut tmps = Vec::new();
    let mut files = Vec::new();
    for i in 0..4 {
        // Sizes not a multiple of the page, for the EOF paths.
        let data = Arc::new(nonzero_bytes((4 << 20) - 1000 * i, 16 + i as u64));
        let tmp = TempPath::with_data("readahead-several", &data);
        files.push((c.open(&tmp.path).unwrap(), data));
        tmps.push(tmp);
    }
    mixed_readers(&files, 8, 400, 17);
    assert!(c.stats().evictions > 0, "{:?}", c.stats());
    for (f, _) in &files {
        settled(f.mapping(), 0, 1023);
    }
    common::assert_accounted(&c);
}

// ---------------------------------------------------------------------------
// IO errors in a window (4.5: only the reads that need the bytes fail; the
// file's maximum window is quartered).

const EBADMSG: i32 = libc::EBADMSG;

/// A bad page (40) inside a future window (28..60): the window's read
/// fails, its folios leave the cache unlocked, the file's maximum window
/// drops from 32 to 8 pages, reads of every other page succeed, reads that
/// need page 40 fail with the injected errno until the fault is cleared.
#[test]
fn a_failing_window_fails_only_the_reads_that_need_it() {
    let c = kernel_cache();
    let (data, f, rec) = new_faulty(&c, 128 * PAGE, 18);
    let m = f.mapping();
    rec.inner().fail_reads_in(40 * P, P, EBADMSG);
    read_pages(&f, &data, 0..28);
    assert_eq!(wsm(f.readahead_window()), (28, 32, 28));
    // The window 28..60 was started at page 12 and fails.
    let deadline = Instant::now() + HANG;
    while !rec.log().iter().any(|r| r.offset == 28 * P) {
        assert!(Instant::now() < deadline, "window 28..60 never read");
        thread::sleep(Duration::from_micros(200));
    }
    let failed = *rec.log().iter().find(|r| r.offset == 28 * P).unwrap();
    assert_eq!((failed.len, failed.result), (32 * P, Err(EBADMSG)));
    // Its folios leave the cache (no uptodate folio is left behind).
    let deadline = Instant::now() + HANG;
    while (28..60).any(|i| folio_at(m, i).is_some()) {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            (28..60).map(|i| folio_at(m, i)).collect::<Vec<_>>()
        );
        thread::sleep(Duration::from_micros(200));
    }
    // The window's completion quarters the maximum after it unlocked the
    // folios; `wait_io_idle` waits for the whole completion.
    c.wait_io_idle();
    // The stream goes on with windows of at most 32 / 4 pages. The first
    // comes from the miss at 28, and which rule of 4.3 makes it depends on
    // whether the reads of 13..27 were one-folio hits, which leave
    // `prev_pos` alone, or found a folio of the window 12..28 still being
    // completed and took the batch path, which sets it:
    // - continuing the previous read (step 3): init_size(1, 8) = 2 pages
    //   (it would be 4 with the maximum still 32);
    // - not (step 4): the 8 cached pages before it, the most it looks
    //   back, give min(8 + 1, 8) = 8 pages with an async tail of 1 (it
    //   would be 32 with the maximum still 32).
    let changes = window_changes(&f, &data, 28..40);
    let windows: Vec<_> = changes.into_iter().map(|(_, w)| w).collect();
    assert!(
        windows[0] == (28, 2, 29) || windows[0] == (28, 8, 35),
        "{windows:?}"
    );
    assert!(windows.iter().all(|w| w.1 <= 8), "{windows:?}");
    // Page 40 fails, with the injected errno, every time it is needed.
    let mut buf = vec![0u8; 3 * PAGE];
    for _ in 0..2 {
        let e = f.read_at(&mut buf[..PAGE], 40 * P).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(EBADMSG), "{e}");
    }
    let e = f.read_exact_at(&mut buf, 39 * P).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(EBADMSG), "{e}");
    read_pages(&f, &data, 41..128);
    read_pages(&f, &data, 0..40);
    // Every failed request asked for page 40.
    for r in rec.log() {
        if r.result.is_err() {
            assert!(r.offset <= 40 * P && r.offset + r.len > 40 * P, "{r:?}");
        }
    }
    // Nothing left locked, no error flag on a cached folio, no folio at 40.
    settled(m, 0, 127);
    assert!(folio_at(m, 40).is_none());
    rec.inner().clear_read_ranges();
    read_page(&f, &data, 40);
    read_check(&f, &data, 0, 128 * PAGE).unwrap();
}

/// The same under concurrency: four readers go through the file while
/// page 40 is bad. Each one's read of page 40 fails with the injected
/// errno, every other read succeeds, nobody hangs.
#[test]
fn concurrent_readers_fail_only_on_the_bad_page() {
    let _w = Watchdog::new("concurrent_readers_fail_only_on_the_bad_page", 3 * HANG);
    for round in 0..5 {
        let c = kernel_cache();
        let (data, f, rec) = new_faulty(&c, 128 * PAGE, 19 + round);
        rec.inner().fail_reads_in(40 * P, P, EBADMSG);
        rec.inner().set_read_latency(Duration::from_micros(50));
        let barrier = Barrier::new(4);
        thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    barrier.wait();
                    for p in 0..128 {
                        let r = read_check(&f, &data, p * P, PAGE);
                        if p == 40 {
                            let e = r.unwrap_err();
                            assert_eq!(e.raw_os_error(), Some(EBADMSG), "{e}");
                        } else {
                            r.unwrap_or_else(|e| panic!("page {p}: {e}"));
                        }
                    }
                });
            }
        });
        settled(f.mapping(), 0, 127);
        rec.inner().clear_read_ranges();
        read_check(&f, &data, 0, 128 * PAGE).unwrap();
    }
}

// ---------------------------------------------------------------------------
// Batched and single insertion build the same cache.

/// The same script of reads on two caches, one inserting windows in a
/// batch (`add_folio_range`), the other one folio at a time: the same
/// folios (index and order), the same requests, the same bytes.
#[test]
fn batched_and_single_insertion_build_the_same_folios() {
    let data = nonzero_bytes(8 << 20, 20);
    let run = |insert: Insert| {
        let c = cache(
            32 << 20,
            2 << 20,
            ReadaheadConfig::default().with_insert(insert),
        );
        assert_eq!(
            c.open_backing(MemBacking::new())
                .unwrap()
                .readahead_config()
                .insert(),
            insert
        );
        let (f, rec) = open_rec(&c, &data);
        read_pages(&f, &data, 0..300);
        let mut off = 4 << 20;
        while off < 5 << 20 {
            off += read_check(&f, &data, off, 64 << 10).unwrap() as u64;
        }
        read_pages(&f, &data, [1800, 1500, 1501, 1502, 1503, 1700, 299, 1504]);
        f.readahead(6 << 20, 512 << 10).unwrap();
        read_check(&f, &data, (6 << 20) + 12345, 100_000).unwrap();
        let layout = settled(f.mapping(), 0, 2047);
        (layout, rec.page_runs())
    };
    let (batched, batched_io) = run(Insert::Batched);
    let (single, single_io) = run(Insert::Single);
    assert_eq!(batched, single, "folio layouts differ");
    assert_eq!(batched_io, single_io, "requests differ");
    assert!(batched.iter().any(|&(_, o)| o >= 5), "{batched:?}");
}

// ---------------------------------------------------------------------------
// Per-handle state: clones share it, reopen and set_readahead do not.

#[test]
fn reopened_handles_have_their_own_readahead_state() {
    let c = kernel_cache();
    let (data, f, rec) = new_rec(&c, 512 * PAGE, 21);
    read_pages(&f, &data, 0..=4);
    assert_eq!(wsm(f.readahead_window()), (12, 16, 12));
    let clone = f.clone();
    assert_eq!(clone.readahead_window(), f.readahead_window());
    let g = f.reopen();
    assert_eq!(g.readahead_window(), Window::default());
    assert_eq!(g.readahead_config(), ReadaheadConfig::kernel());
    // g's own stream: its first reads look random to it, the next one
    // continues its previous read.
    read_pages(&g, &data, [100, 200]);
    assert_eq!(g.readahead_window(), Window::default());
    read_page(&g, &data, 201);
    assert_eq!(wsm(g.readahead_window()), (201, 4, 202));
    assert_eq!(wsm(f.readahead_window()), (12, 16, 12), "f's state moved");
    // Readahead off on g only.
    g.set_readahead(ReadaheadConfig::disabled());
    assert_eq!(g.readahead_config(), ReadaheadConfig::disabled());
    assert_eq!(g.readahead_window(), Window::default());
    assert_eq!(f.readahead_config(), ReadaheadConfig::kernel());
    wait_uptodate(f.mapping(), 0, 27);
    wait_uptodate(g.mapping(), 201, 204);
    rec.clear();
    read_pages(&g, &data, [300, 301]);
    assert_eq!(rec.page_runs(), [(300, 1), (301, 1)]);
    // f's stream goes on where it was.
    read_pages(&f, &data, 5..=12);
    assert_eq!(wsm(f.readahead_window()), (28, 32, 28));
    // set_readahead on f is seen by its clone, and starts over.
    let single = ReadaheadConfig::kernel().with_insert(Insert::Single);
    f.set_readahead(single);
    assert_eq!(clone.readahead_config(), single);
    assert_eq!(clone.readahead_window(), Window::default());
    assert_eq!(g.readahead_config(), ReadaheadConfig::disabled());
}
