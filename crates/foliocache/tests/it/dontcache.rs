//! Uncached reads and the figures that show them (the kernel's
//! `RWF_DONTCACHE` reads, `folio_end_dropbehind`, and `cachestat`; see
//! `docs/design.md` on readahead, reclaim and writeback):
//! `ReadFlags::DONTCACHE` drops the folios a read creates once it has read
//! them through to their end (or to end of file), leaving no shadow; what
//! was cached before stays; readahead windows an uncached read starts are
//! dropbehind too; a cached user claims a dropbehind folio; a folio locked
//! by someone else is kept; an uncached read marks nothing accessed.
//! Around it: the per-handle defaults (`set_default_flags`,
//! `Advice::NoReuse`), `Advice::DontNeed`, `ReadFlags::NOWAIT`, and
//! `File::cachestat`'s counting rules.
//!
//! Every step is checked through `File::cachestat` and `Cache::stats`, and
//! every byte read against the backing's data. Reads are logged by
//! [`common::RecordingBacking`] where the test counts IO.
//!
//! Most caches have no readahead: a miss creates the largest aligned folio
//! (up to the cache's largest) inside the request's pages, so the folios a
//! read creates are known exactly. Those with the kernel's readahead
//! (32-page windows) and folios up to 2 MiB make the window [0, 32) of a
//! 64 KiB read at 0 as two order-4 folios, the second carrying the marker.

use std::io;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use backing::MemBacking;
use foliocache::filemap::FolioFlags;
use foliocache::filemap::{FgpFlags, LockedFolio, Mapping, MappingEntry};
use foliocache::{Advice, Cache, CacheStat, CacheStats, File, ReadFlags, ReadaheadConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common;
use common::{nonzero_bytes, settled, RecordingBacking};
use test_support::cache::TestCache;

const PAGE: usize = 4096;
const P: u64 = PAGE as u64;
const KIB: u64 = 1024;
const MIB: usize = 1 << 20;

/// How long a read that must not wait may take before the test calls it a
/// hang (and releases what it holds so the test can fail, not stall).
const BLOCKED: Duration = Duration::from_secs(5);

type Rec = Arc<RecordingBacking<MemBacking>>;

/// A cache of `bytes` with folios up to `max_folio` bytes and no
/// readahead: a miss makes known folios (see above).
fn cache(bytes: usize, max_folio: usize) -> Cache {
    TestCache::bytes(bytes)
        .max_folio(max_folio)
        .no_readahead()
        .build()
}

/// A cache of `bytes` with folios up to `max_folio` bytes and the kernel's
/// readahead.
fn ra_cache(bytes: usize, max_folio: usize) -> Cache {
    TestCache::bytes(bytes)
        .max_folio(max_folio)
        .readahead(ReadaheadConfig::kernel())
        .build()
}

/// `len` random nonzero bytes (`seed`) through [`open`]: the bytes, the
/// file, the log.
fn new_file(c: &Cache, len: usize, seed: u64) -> (Vec<u8>, File, Rec) {
    let data = nonzero_bytes(len, seed);
    let (f, b) = open(c, &data);
    (data, f, b)
}

/// The usual setup: [`new_file`] in an 8 MiB [`cache`] of folios up to
/// 64 KiB. The cache, the bytes, the file, the log.
fn file_64k(len: usize, seed: u64) -> (Cache, Vec<u8>, File, Rec) {
    let c = cache(8 * MIB, 64 * KIB as usize);
    let (data, f, b) = new_file(&c, len, seed);
    (c, data, f, b)
}

/// `data` in memory, read through `c`, its reads logged.
fn open(c: &Cache, data: &[u8]) -> (File, Rec) {
    let b = Arc::new(RecordingBacking::new(MemBacking::with_data(data.to_vec())));
    (c.open_backing(b.clone()).unwrap(), b)
}

/// Reads `len` bytes at `off` with `flags`, checks the count and every byte
/// against `data`, and returns the count.
fn read_flags(f: &File, data: &[u8], off: u64, len: usize, flags: ReadFlags) -> usize {
    let mut buf = vec![0u8; len];
    let n = f
        .read_at_flags(&mut buf, off, flags)
        .unwrap_or_else(|e| panic!("{flags:?} read of {len} at {off}: {e}"));
    check_bytes(data, off, len, &buf, n);
    n
}

/// An uncached read, checked.
fn uread(f: &File, data: &[u8], off: u64, len: usize) -> usize {
    read_flags(f, data, off, len, ReadFlags::DONTCACHE)
}

/// A plain (cached) read, checked.
fn cread(f: &File, data: &[u8], off: u64, len: usize) -> usize {
    read_flags(f, data, off, len, ReadFlags::NONE)
}

/// `buf[..n]` must be `data[off..]`, `n` the whole request up to EOF.
fn check_bytes(data: &[u8], off: u64, len: usize, buf: &[u8], n: usize) {
    let want = (data.len() as u64).saturating_sub(off).min(len as u64) as usize;
    assert_eq!(n, want, "read of {len} at {off}: byte count");
    let off = off as usize;
    if buf[..n] != data[off..off + n] {
        let bad = (0..n).find(|&i| buf[i] != data[off + i]).unwrap();
        panic!(
            "read of {len} at {off}: wrong byte at file offset {} (got {:#x}, want {:#x})",
            off + bad,
            buf[bad],
            data[off + bad]
        );
    }
}

/// A new dropbehind folio of order `order` at page `index`, locked (what
/// an uncached read's lookup creates), to be read.
fn lock_dropbehind(m: &Mapping, index: u64, order: u32) -> LockedFolio<'_> {
    m.lock_folio(index, (FgpFlags::CREAT | FgpFlags::DONTCACHE).order(order))
        .unwrap()
}

fn cs(f: &File, off: u64, len: u64) -> CacheStat {
    f.cachestat(off, len).unwrap()
}

/// (cached, evicted) pages of `len` bytes at `off`.
fn ce(f: &File, off: u64, len: u64) -> (u64, u64) {
    let s = cs(f, off, len);
    (s.cached, s.evicted)
}

/// The folio's (first page, pages, flags) at page `i`; `None` for a hole
/// or a shadow.
fn folio_at(f: &File, i: u64) -> Option<(u64, u64, FolioFlags)> {
    match f.mapping().get_entry(i) {
        Some(MappingEntry::Folio(r)) => Some((r.index(), r.nr_pages(), r.flags())),
        _ => None,
    }
}

/// The flags of the folio at page `i`, which must be there.
fn flags_at(f: &File, i: u64) -> FolioFlags {
    folio_at(f, i)
        .unwrap_or_else(|| panic!("no folio at page {i}: {:?}", f.mapping().get_entry(i)))
        .2
}

fn is_shadow(f: &File, i: u64) -> bool {
    matches!(f.mapping().get_entry(i), Some(MappingEntry::Shadow(_)))
}

/// The folios of pages `first..last` as (first page, pages, flags).
fn folios_in(f: &File, first: u64, last: u64) -> Vec<(u64, u64, FolioFlags)> {
    let mut out = Vec::new();
    let mut i = first;
    while i < last {
        match folio_at(f, i) {
            Some(x) => {
                i = x.0 + x.1;
                out.push(x);
            }
            None => i += 1,
        }
    }
    out
}

/// The pages the backing was asked for since its log was cleared, each
/// once, in order; panics on a page read twice.
fn pages_read_once(b: &Rec) -> Vec<u64> {
    let mut pages: Vec<u64> = b
        .log()
        .iter()
        .flat_map(|r| {
            let (p, n) = r.pages();
            p..p + n.max(1)
        })
        .collect();
    pages.sort_unstable();
    for w in pages.windows(2) {
        assert_ne!(w[0], w[1], "page {} read from the backing twice", w[0]);
    }
    pages
}

const ACCESS: FolioFlags = FolioFlags::REFERENCED
    .union(FolioFlags::ACTIVE)
    .union(FolioFlags::ACTIVATE);

/// Runs `f` on a new thread and waits up to [`BLOCKED`] for it; on a
/// timeout runs `release` (so the thread can finish) and panics with `what`.
fn within<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
    release: impl FnOnce(),
) -> T {
    let (tx, rx) = mpsc::channel();
    let h = thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(BLOCKED) {
        Ok(v) => {
            h.join().unwrap();
            v
        }
        Err(_) => {
            release();
            let _ = h.join();
            panic!("{what}: still blocked after {BLOCKED:?}");
        }
    }
}

/// `stats` taken after `before`: the growth of the counters.
fn grew(before: &CacheStats, after: &CacheStats) -> (u64, u64, u64, u64) {
    (
        after.dropbehind_drops - before.dropbehind_drops,
        after.misses - before.misses,
        after.io_reads - before.io_reads,
        after.io_bytes - before.io_bytes,
    )
}

// ---------------------------------------------------------------------------
// DONTCACHE: what a read creates goes once read through; no shadow.

/// Reads of many shapes on a fresh file each: aligned, unaligned, within a
/// page, across folios, to EOF and past it. Each returns the backing's
/// bytes, reads each page it needs from the backing once, creates one folio
/// per miss, and drops every one it read through to its end (or EOF): only
/// the folio holding the last byte stays, and only when the read ends
/// inside it short of EOF. No shadow anywhere.
#[test]
fn uncached_reads_return_the_right_bytes_and_drop_what_they_read_through() {
    let c = cache(8 * MIB, 64 * KIB as usize);
    let size = 300 * KIB as usize + 123;
    let data = nonzero_bytes(size, 1);
    let s = size as u64;
    let cases: &[(u64, usize)] = &[
        (0, PAGE),
        (0, 64 * KIB as usize),
        (0, 4 * PAGE - 1),
        (100, 10),
        (4000, 200),
        (5000, 70_000),
        (3 * P, 5 * PAGE),
        (12_345, 3 * 65_536 + 7),
        (64 * KIB, 64 * KIB as usize),
        (s - 5000, 5000),
        (s - 100, 1000),
        (s - 123, 123),
        (s - 124, 1),
        (0, size),
        (1, size + 50),
    ];
    for &(off, len) in cases {
        let what = format!("uncached read of {len} at {off}");
        let (f, b) = open(&c, &data);
        let before = c.stats();
        let n = uread(&f, &data, off, len);
        let after = c.stats();
        let end = off + n as u64;
        let (first, last) = (off / P, (end - 1) / P);
        let (drops, misses, ios, io_bytes) = grew(&before, &after);
        // The backing was asked for exactly the pages the read covers.
        let read = pages_read_once(&b);
        assert_eq!(
            read,
            (first..=last).collect::<Vec<_>>(),
            "{what}: pages read"
        );
        assert_eq!(ios, misses, "{what}: one IO per folio created");
        assert!(io_bytes >= n as u64, "{what}: io_bytes {io_bytes} < {n}");
        let keeps_last = !end.is_multiple_of(P) && end < s;
        assert_eq!(
            drops,
            misses - keeps_last as u64,
            "{what}: every folio created but the one holding the last byte \
             (kept: {keeps_last}) is dropped"
        );
        assert!(misses > 0, "{what}: a cold read misses");
        let all = cs(&f, 0, 0);
        assert_eq!(all.evicted, 0, "{what}: no shadow left: {all:?}");
        if keeps_last {
            let (start, pages, flags) =
                folio_at(&f, last).unwrap_or_else(|| panic!("{what}: last folio dropped"));
            assert_eq!(start + pages - 1, last, "{what}: the read's last folio");
            assert_eq!(all.cached, pages, "{what}: only that folio stays: {all:?}");
            assert!(flags.contains(FolioFlags::DROPBEHIND | FolioFlags::UPTODATE));
            assert!(
                !flags.intersects(ACCESS),
                "{what}: marked accessed: {flags:?}"
            );
            assert_eq!(after.bytes_cached, pages * P, "{what}");
        } else {
            assert_eq!(all.cached, 0, "{what}: {all:?}");
            assert_eq!(after.bytes_cached, 0, "{what}");
            assert_eq!(after.folios, 0, "{what}");
        }
        drop(f);
    }
    assert_eq!(c.stats().bytes_cached, 0);
    assert_eq!(c.stats().free_bytes, c.stats().capacity_bytes, "no leak");
}

/// Random reads over one file: each returns the right bytes and leaves at
/// most the folio holding its last byte; reading the rest of that folio
/// (uncached, without IO) drops it, and nothing is left.
#[test]
fn a_random_sweep_of_uncached_reads_leaves_nothing_cached() {
    let c = cache(8 * MIB, 64 * KIB as usize);
    let size = MIB + 777;
    let (data, f, _b) = new_file(&c, size, 2);
    let mut rng = StdRng::seed_from_u64(3);
    for round in 0..300 {
        let off = rng.gen_range(0..size as u64 + 100);
        let len = match rng.gen_range(0..4) {
            0 => rng.gen_range(1..64),
            1 => rng.gen_range(1..3 * PAGE),
            2 => rng.gen_range(1..300 * KIB as usize),
            _ => PAGE << rng.gen_range(0..6),
        };
        let before = c.stats();
        let n = uread(&f, &data, off, len);
        if n == 0 {
            assert!(off >= size as u64, "round {round}: 0 bytes at {off}");
            continue;
        }
        let end = off + n as u64;
        let last = (end - 1) / P;
        let left = cs(&f, 0, 0);
        assert_eq!(left.evicted, 0, "round {round}: a shadow: {left:?}");
        if left.cached > 0 {
            let (start, pages, flags) = folio_at(&f, last).unwrap_or_else(|| {
                panic!("round {round}: {left:?} cached, but not the last folio")
            });
            assert_eq!(
                left.cached, pages,
                "round {round}: more than the last folio"
            );
            assert!(
                !end.is_multiple_of(P) && end < size as u64,
                "round {round}: kept {start}+{pages}"
            );
            assert!(
                flags.contains(FolioFlags::DROPBEHIND),
                "round {round}: {flags:?}"
            );
            // The rest of it, with no IO.
            let rest = ((start + pages) * P).min(size as u64) - end;
            let ios = c.stats().io_reads;
            uread(&f, &data, end, rest as usize);
            assert_eq!(
                c.stats().io_reads,
                ios,
                "round {round}: the rest was cached"
            );
            assert_eq!(ce(&f, 0, 0), (0, 0), "round {round}: read through, dropped");
        }
        let after = c.stats();
        assert_eq!(after.bytes_cached, 0, "round {round}");
        assert_eq!(
            after.dropbehind_drops - before.dropbehind_drops,
            after.misses - before.misses,
            "round {round}: every folio created was dropped"
        );
    }
}

/// A folio that stops short of EOF only because the file does (a 4-page
/// folio over a 10000-byte file) goes when a read reaches EOF.
#[test]
fn an_uncached_read_to_eof_drops_a_folio_straddling_it() {
    let c = cache(4 * MIB, 64 * KIB as usize);
    let (data, f, _b) = new_file(&c, 10_000, 4);
    let m = f.mapping();
    let g = lock_dropbehind(m, 0, 2);
    assert_eq!((g.index(), g.nr_pages()), (0, 4));
    let g = m.read_folio(g).unwrap();
    drop(g);
    assert_eq!(ce(&f, 0, 0), (4, 0));
    let before = c.stats();
    uread(&f, &data, 0, 5000);
    assert_eq!(ce(&f, 0, 0), (4, 0), "read to 5000 of 10000: kept");
    uread(&f, &data, 5000, 5000);
    assert_eq!(ce(&f, 0, 0), (0, 0), "read to EOF: dropped");
    let after = c.stats();
    assert_eq!(grew(&before, &after).0, 1);
    assert_eq!(grew(&before, &after).2, 0, "no IO");
    assert_eq!(after.bytes_cached, 0);
}

/// Folios cached before an uncached read (by plain reads) stay cached after
/// it, flags untouched by it; the folios it created around them go
/// (an uncached read drops only the folios it created).
#[test]
fn folios_cached_before_an_uncached_read_stay_cached() {
    let (c, data, f, b) = file_64k(256 * KIB as usize, 5);
    cread(&f, &data, 0, 64 * KIB as usize); // order 4 at 0
    cread(&f, &data, 20 * P, PAGE); // order 0 at 20
    assert_eq!(ce(&f, 0, 0), (17, 0));
    b.clear();
    let before = c.stats();
    // Pages 0..40: 16..20 and 21..40 are created and dropped.
    uread(&f, &data, 0, 160 * KIB as usize);
    let after = c.stats();
    let (drops, misses, _, _) = grew(&before, &after);
    assert_eq!(
        pages_read_once(&b),
        (16..20).chain(21..40).collect::<Vec<_>>(),
        "only the missing pages are read"
    );
    assert_eq!(drops, misses, "what it created went");
    assert_eq!(
        ce(&f, 0, 64 * KIB),
        (16, 0),
        "pre-cached order-4 folio stays"
    );
    assert_eq!(
        ce(&f, 64 * KIB, 96 * KIB),
        (1, 0),
        "pre-cached page 20 stays"
    );
    assert_eq!(ce(&f, 0, 0), (17, 0));
    assert_eq!(after.bytes_cached, 17 * P);
    for i in [0, 20] {
        assert!(
            !flags_at(&f, i).contains(FolioFlags::DROPBEHIND),
            "page {i}: {:?}",
            flags_at(&f, i)
        );
    }
    // And again, uncached over the same range: all hits now for 0..16 and
    // 20, the rest created again and dropped again.
    uread(&f, &data, 0, 160 * KIB as usize);
    assert_eq!(ce(&f, 0, 0), (17, 0));
}

/// An uncached read over eviction shadows consumes them and leaves none
/// (an uncached read over a shadow removes it), counts the refaults, and activates nothing even where a
/// cached read of the same shadows does (the refault test passes): a
/// dropbehind folio never goes to the active list.
#[test]
fn an_uncached_read_over_shadows_consumes_them_and_activates_nothing() {
    let c = cache(8 * MIB, 64 * KIB as usize);
    // `a` is read twice: active, 16 pages. `b` read once, then evicted.
    let da = nonzero_bytes(64 * KIB as usize, 6);
    let db = nonzero_bytes(256 * KIB as usize, 7);
    let (a, _) = open(&c, &da);
    let (bf, _) = open(&c, &db);
    cread(&a, &da, 0, 64 * KIB as usize);
    cread(&a, &da, 0, 64 * KIB as usize);
    assert!(
        flags_at(&a, 0).contains(FolioFlags::ACTIVE),
        "{:?}",
        flags_at(&a, 0)
    );
    cread(&bf, &db, 0, 64 * KIB as usize);
    assert_eq!(c.shrink(64 * KIB), 64 * KIB);
    let st = cs(&bf, 0, 64 * KIB);
    assert_eq!(
        (st.cached, st.evicted),
        (0, 16),
        "b's folio evicted: {st:?}"
    );
    assert_eq!(st.recently_evicted, 16, "{st:?}: distance 16 <= active 16");
    assert_eq!(ce(&a, 0, 0), (16, 0), "a (active) stays");

    // Uncached, within the order-4 shadow: an order-0 folio splits it, and
    // stays (read to byte 100 of 4096) without being activated.
    let before = c.stats();
    uread(&bf, &db, 0, 100);
    let after = c.stats();
    assert_eq!(after.refaults - before.refaults, 1, "a refault is counted");
    assert_eq!(
        after.activations, before.activations,
        "but nothing activated"
    );
    let fl = flags_at(&bf, 0);
    assert!(!fl.intersects(ACCESS), "dropbehind refault: {fl:?}");
    assert_eq!(
        ce(&bf, 0, 64 * KIB),
        (1, 15),
        "the shadow's other pages stay"
    );
    // Read through: dropped; its page holds nothing now.
    uread(&bf, &db, 100, PAGE - 100);
    assert_eq!(ce(&bf, 0, 64 * KIB), (0, 15));
    assert!(bf.mapping().get_entry(0).is_none(), "no shadow at page 0");
    assert!(is_shadow(&bf, 1) && is_shadow(&bf, 15));

    // The control: a cached read over the same shadow activates.
    let before = c.stats();
    cread(&bf, &db, 8 * P, 100);
    let after = c.stats();
    assert_eq!(after.refaults - before.refaults, 1);
    assert_eq!(
        after.activations - before.activations,
        1,
        "control: refault activates"
    );
    assert!(flags_at(&bf, 8).contains(FolioFlags::ACTIVE));

    // Uncached over all of b's shadows: none left, nothing activated.
    let before = c.stats();
    uread(&bf, &db, 0, db.len());
    let after = c.stats();
    assert_eq!(after.activations, before.activations);
    assert!(after.refaults > before.refaults, "{after:?}");
    assert_eq!(
        ce(&bf, 0, 0),
        (1, 0),
        "only the cached (active) page 8 left"
    );
}

// ---------------------------------------------------------------------------
// Large folios read in pieces; streams.

/// A dropbehind order-4 folio read in 5000-byte uncached pieces stays until
/// the piece that reaches its end, then goes; no piece does IO or marks it.
#[test]
fn a_large_folio_read_in_pieces_stays_until_its_last_piece() {
    let (c, data, f, _b) = file_64k(256 * KIB as usize, 8);
    let m = f.mapping();
    let g = lock_dropbehind(m, 16, 4);
    assert_eq!((g.index(), g.nr_pages()), (16, 16));
    assert!(g.test(FolioFlags::DROPBEHIND));
    let g = m.read_folio(g).unwrap();
    drop(g);
    assert_eq!(ce(&f, 64 * KIB, 64 * KIB), (16, 0));
    let before = c.stats();
    let (start, end) = (64 * KIB, 128 * KIB);
    let mut pos = start;
    while pos < end {
        let n = uread(&f, &data, pos, 5000.min((end - pos) as usize));
        pos += n as u64;
        let now = c.stats();
        if pos < end {
            assert_eq!(
                ce(&f, start, end - start),
                (16, 0),
                "after a piece to {pos}"
            );
            assert_eq!(now.dropbehind_drops, before.dropbehind_drops, "to {pos}");
            let fl = flags_at(&f, 16);
            assert!(fl.contains(FolioFlags::DROPBEHIND), "to {pos}: {fl:?}");
            assert!(!fl.intersects(ACCESS), "to {pos}: {fl:?}");
        } else {
            assert_eq!(ce(&f, 0, 0), (0, 0), "the last piece dropped it");
            assert_eq!(now.dropbehind_drops - before.dropbehind_drops, 1);
            assert_eq!(now.bytes_cached, 0);
        }
        assert_eq!(now.io_reads, before.io_reads, "no IO: it was cached");
    }
}

/// The same with a folio an uncached readahead window made: the marker
/// folio of the window [0, 32) that a 64 KiB uncached read at 0 starts.
/// Read 4 KiB at a time, it stays until its last page is read.
#[test]
fn a_readahead_folio_read_in_pieces_stays_until_its_last_piece() {
    let c = ra_cache(16 * MIB, 2 * MIB);
    let (data, f, _b) = new_file(&c, MIB, 9);
    uread(&f, &data, 0, 64 * KIB as usize);
    c.wait_io_idle();
    assert_eq!(ce(&f, 0, 64 * KIB), (0, 0), "what the read covered is gone");
    let (start, pages, fl) = folio_at(&f, 16).expect("the window's second half is cached");
    assert_eq!(
        (start, pages),
        (16, 16),
        "an order-4 folio (window [0, 32) in two)"
    );
    assert!(
        fl.contains(FolioFlags::DROPBEHIND | FolioFlags::UPTODATE | FolioFlags::READAHEAD),
        "{fl:?}"
    );
    assert!(!fl.intersects(ACCESS), "{fl:?}");
    assert_eq!(c.stats().bytes_cached, 16 * P, "only it: {:?}", c.stats());
    let drops = c.stats().dropbehind_drops;
    for p in 16..32 {
        uread(&f, &data, p * P, PAGE);
        let cached = cs(&f, 16 * P, 16 * P).cached;
        if p < 31 {
            assert_eq!(cached, 16, "after page {p}");
            assert_eq!(c.stats().dropbehind_drops, drops, "after page {p}");
        } else {
            assert_eq!(cached, 0, "after its last page");
            assert_eq!(c.stats().dropbehind_drops, drops + 1);
        }
    }
    assert_eq!(cs(&f, 0, 128 * KIB).evicted, 0);
}

/// 64 KiB uncached reads through a 4 MiB file with readahead on: every
/// byte right, each page read from the backing once (io_bytes is the file's
/// size), nothing behind the reader stays, the footprint stays within a
/// few windows, and at the end nothing is cached and no shadow is left.
#[test]
fn an_uncached_stream_reads_each_byte_once_and_leaves_nothing() {
    let c = ra_cache(16 * MIB, 2 * MIB);
    let size = 4 * MIB + 1234;
    let (data, f, b) = new_file(&c, size, 10);
    let before = c.stats();
    let chunk = 64 * KIB;
    // Folios are at most one window (32 pages) and aligned to their size.
    let fmax = 128 * KIB;
    let mut pos = 0u64;
    let mut peak = 0;
    while pos < size as u64 {
        pos += uread(&f, &data, pos, chunk as usize) as u64;
        let behind = pos / fmax * fmax;
        if behind > 0 {
            assert_eq!(cs(&f, 0, behind).cached, 0, "behind the reader at {pos}");
        }
        let st = c.stats();
        peak = peak.max(st.bytes_cached);
        assert_eq!(cs(&f, 0, 0).evicted, 0, "no shadow at {pos}");
    }
    c.wait_io_idle();
    let after = c.stats();
    assert!(
        peak <= 4 * fmax,
        "footprint peaked at {peak} bytes (bound: 4 windows, {})",
        4 * fmax
    );
    assert_eq!(ce(&f, 0, 0), (0, 0), "all read through, all dropped");
    assert_eq!(after.bytes_cached, 0);
    let pages = pages_read_once(&b);
    let npages = (size as u64).div_ceil(P);
    assert_eq!(
        pages,
        (0..npages).collect::<Vec<_>>(),
        "every page read once"
    );
    assert_eq!(after.io_bytes - before.io_bytes, size as u64, "io_bytes");
    assert_eq!(after.evictions, before.evictions, "nothing needed reclaim");
    assert!(after.dropbehind_drops > before.dropbehind_drops);
}

// ---------------------------------------------------------------------------
// Readahead windows, claims, locks, references.

/// An uncached read's readahead windows (sync and async) are dropbehind;
/// an uncached reader reading through them drops them; a cached read of a
/// page of such a window claims its folio (our improvement on the kernel:
/// a cached lookup clears dropbehind): it stays after an uncached read of it; and the
/// window that cached read starts is not dropbehind.
#[test]
fn readahead_windows_of_uncached_reads_are_dropbehind_until_a_cached_read_claims_them() {
    let c = ra_cache(16 * MIB, 2 * MIB);
    let (data, f, _b) = new_file(&c, MIB, 11);
    uread(&f, &data, 0, 64 * KIB as usize);
    c.wait_io_idle();
    assert_eq!(ce(&f, 0, 64 * KIB), (0, 0));
    assert_eq!(ce(&f, 64 * KIB, 64 * KIB), (16, 0), "sync window ahead");
    assert!(flags_at(&f, 16).contains(FolioFlags::DROPBEHIND));

    // Reading through the marker folio starts the async window [32, 64):
    // dropbehind too.
    uread(&f, &data, 64 * KIB, 64 * KIB as usize);
    c.wait_io_idle();
    assert_eq!(ce(&f, 0, 128 * KIB), (0, 0), "read through, gone");
    let win = folios_in(&f, 32, 64);
    assert!(!win.is_empty(), "the async window [32, 64) was read");
    assert_eq!(cs(&f, 128 * KIB, 128 * KIB).cached, 32, "{win:?}");
    for &(i, n, fl) in &win {
        assert!(fl.contains(FolioFlags::DROPBEHIND), "{i}+{n}: {fl:?}");
        assert!(!fl.intersects(ACCESS), "{i}+{n}: {fl:?}");
    }
    assert_eq!(c.stats().bytes_cached, 32 * P);

    // A cached read of page 40 claims its folio.
    cread(&f, &data, 40 * P, PAGE);
    let (claimed, claimed_pages, fl) = folio_at(&f, 40).unwrap();
    assert!(!fl.contains(FolioFlags::DROPBEHIND), "claimed: {fl:?}");
    assert!(
        fl.contains(FolioFlags::REFERENCED),
        "a cached read marks it: {fl:?}"
    );
    let dropbehind_left: u64 = folios_in(&f, 32, 64)
        .iter()
        .filter(|x| x.2.contains(FolioFlags::DROPBEHIND))
        .count() as u64;
    // An uncached read through all of [32, 64): the claimed folio stays,
    // any other of the window goes.
    let before = c.stats();
    uread(&f, &data, 128 * KIB, 128 * KIB as usize);
    let after = c.stats();
    assert_eq!(
        after.dropbehind_drops - before.dropbehind_drops,
        dropbehind_left,
        "the unclaimed folios of the window"
    );
    assert_eq!(
        ce(&f, 128 * KIB, 128 * KIB),
        (claimed_pages, 0),
        "only the claimed folio {claimed}+{claimed_pages} stays"
    );
    assert!(!flags_at(&f, 40).contains(FolioFlags::DROPBEHIND));

    // The window the cached read started at the marker is a cached one.
    c.wait_io_idle();
    let next = folios_in(&f, 64, 256);
    assert!(!next.is_empty(), "the cached read's window was read");
    for &(i, n, fl) in &next {
        assert!(
            !fl.contains(FolioFlags::DROPBEHIND),
            "{i}+{n} from a cached read's window: {fl:?}"
        );
    }
}

/// A cached lookup claims a dropbehind folio, through `Mapping::get_folio`:
/// a lookup with `DONTCACHE`
/// leaves a dropbehind folio so (and it goes after an uncached read); one
/// without claims it (it stays).
#[test]
fn a_plain_get_folio_claims_a_dropbehind_folio_and_a_dontcache_one_does_not() {
    let (c, data, f, _b) = file_64k(256 * KIB as usize, 12);
    let m = f.mapping();
    for at in [0u64, 16] {
        m.read_folio(lock_dropbehind(m, at, 4)).unwrap();
    }
    drop(m.get_folio(3, FgpFlags::DONTCACHE).unwrap());
    assert!(
        flags_at(&f, 0).contains(FolioFlags::DROPBEHIND),
        "DONTCACHE lookup"
    );
    drop(m.get_folio(17, FgpFlags::default()).unwrap());
    assert!(
        !flags_at(&f, 16).contains(FolioFlags::DROPBEHIND),
        "plain lookup"
    );
    let before = c.stats();
    uread(&f, &data, 0, 128 * KIB as usize);
    assert_eq!(c.stats().dropbehind_drops - before.dropbehind_drops, 1);
    assert_eq!(ce(&f, 0, 64 * KIB), (0, 0), "the unclaimed one went");
    assert_eq!(ce(&f, 64 * KIB, 64 * KIB), (16, 0), "the claimed one stays");
}

/// A dropbehind folio whose lock another thread holds when an uncached
/// read ends with it: the read still copies it (it is uptodate; no
/// waiting), the drop is skipped (trylock fails), and it stays cached and
/// dropbehind; the next uncached read through it, unlocked, drops it.
#[test]
fn a_dropbehind_folio_locked_by_another_thread_is_read_and_kept() {
    let c = cache(8 * MIB, 64 * KIB as usize);
    let data = Arc::new(nonzero_bytes(256 * KIB as usize, 13));
    let (f, _b) = open(&c, &data);
    let m = f.mapping();
    m.read_folio(lock_dropbehind(m, 0, 4)).unwrap();

    let (locked_tx, locked_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let holder = {
        let f = f.clone();
        thread::spawn(move || {
            let g = f
                .mapping()
                .lock_folio(0, FgpFlags::LOCK | FgpFlags::DONTCACHE)
                .unwrap();
            locked_tx.send(()).unwrap();
            let _ = release_rx.recv();
            g.unlock();
        })
    };
    locked_rx.recv().unwrap();
    assert!(flags_at(&f, 0).contains(FolioFlags::LOCKED | FolioFlags::DROPBEHIND));
    let before = c.stats();
    let (rf, rd) = (f.clone(), data.clone());
    within(
        "an uncached read of a locked, uptodate folio",
        move || uread(&rf, &rd, 0, 64 * KIB as usize),
        || {
            let _ = release_tx.send(());
        },
    );
    let after = c.stats();
    assert_eq!(
        after.dropbehind_drops, before.dropbehind_drops,
        "not dropped"
    );
    assert_eq!(ce(&f, 0, 64 * KIB), (16, 0), "kept while locked");
    assert!(
        flags_at(&f, 0).contains(FolioFlags::DROPBEHIND),
        "still dropbehind"
    );
    assert_eq!(after.io_reads, before.io_reads);
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    uread(&f, &data, 0, 64 * KIB as usize);
    assert_eq!(
        ce(&f, 0, 0),
        (0, 0),
        "unlocked: the next uncached read drops it"
    );
    assert_eq!(c.stats().dropbehind_drops - before.dropbehind_drops, 1);
}

/// A reference someone else holds does not keep a dropbehind folio cached:
/// the uncached read removes it from the index (cachestat and
/// bytes_cached say 0); its memory goes back when the reference is dropped.
#[test]
fn an_extra_reference_keeps_a_detached_folio_not_a_cached_one() {
    let c = cache(8 * MIB, 64 * KIB as usize);
    let cap = c.stats().capacity_bytes;
    let (data, f, _b) = new_file(&c, 256 * KIB as usize, 14);
    let m = f.mapping();
    m.read_folio(lock_dropbehind(m, 0, 4)).unwrap();
    let Some(MappingEntry::Folio(held)) = m.get_entry(5) else {
        panic!("no folio at 5")
    };
    uread(&f, &data, 0, 64 * KIB as usize);
    assert_eq!(ce(&f, 0, 0), (0, 0), "removed from the index");
    let st = c.stats();
    assert_eq!(st.bytes_cached, 0);
    assert_eq!(st.dropbehind_drops, 1);
    assert_eq!(st.free_bytes, cap - 64 * KIB, "the held folio's memory");
    assert_eq!(held.mapping(), 0, "detached");
    drop(held);
    assert_eq!(
        c.stats().free_bytes,
        cap,
        "given back with the last reference"
    );
}

/// An uncached read never marks the folios it creates
/// accessed, however often it reads them; the control, plain reads of a
/// folio in the same cache, sets REFERENCED and then activates it.
#[test]
fn uncached_reads_never_mark_the_folios_they_create_accessed() {
    let (c, data, f, _b) = file_64k(256 * KIB as usize, 15);
    let activations = c.stats().activations;
    // Each read ends inside page 0: the folio stays to be looked at.
    for (off, len) in [(0, 100), (0, 100), (200, 10), (50, 3000), (0, 100)] {
        uread(&f, &data, off, len);
        let fl = flags_at(&f, 0);
        assert!(!fl.intersects(ACCESS), "after {len} at {off}: {fl:?}");
        assert!(fl.contains(FolioFlags::DROPBEHIND));
    }
    // A large folio made by an uncached read of 15 pages and 100 bytes
    // (order 4 at 16, not read to its end), then read again elsewhere.
    uread(&f, &data, 64 * KIB, 15 * PAGE + 100);
    assert_eq!(folio_at(&f, 31).map(|x| (x.0, x.1)), Some((16, 16)));
    uread(&f, &data, 20 * P, 100);
    uread(&f, &data, 18 * P, 100);
    let fl = flags_at(&f, 16);
    assert!(!fl.intersects(ACCESS), "order-4 folio: {fl:?}");
    assert!(fl.contains(FolioFlags::DROPBEHIND), "{fl:?}");
    assert_eq!(c.stats().activations, activations);
    // Control: plain reads of page 40 (not continuing the previous read).
    cread(&f, &data, 40 * P, 100);
    let fl = flags_at(&f, 40);
    assert!(
        fl.contains(FolioFlags::REFERENCED) && !fl.contains(FolioFlags::ACTIVE),
        "{fl:?}"
    );
    cread(&f, &data, 40 * P, 100);
    assert!(
        flags_at(&f, 40).contains(FolioFlags::ACTIVE),
        "second access"
    );
    assert_eq!(c.stats().activations, activations + 1);
}

// ---------------------------------------------------------------------------
// Per-handle defaults: set_default_flags, reopen, Advice::NoReuse.

/// `set_default_flags(DONTCACHE)` makes plain reads uncached through the
/// handle and its clones (they share it); a `reopen`ed handle has its own
/// defaults, starting empty, and changing either side leaves the other.
#[test]
fn default_flags_apply_to_the_handle_and_its_clones_not_to_a_reopened_one() {
    let (c, data, f, _b) = file_64k(512 * KIB as usize, 16);
    let w = 64 * KIB;
    let ws = w as usize;
    assert_eq!(f.default_flags(), ReadFlags::NONE);
    f.set_default_flags(ReadFlags::DONTCACHE);
    assert_eq!(f.default_flags(), ReadFlags::DONTCACHE);
    let g = f.clone();
    assert_eq!(
        g.default_flags(),
        ReadFlags::DONTCACHE,
        "a clone shares them"
    );
    let mut drops = c.stats().dropbehind_drops;
    cread(&f, &data, 0, ws);
    assert_eq!(ce(&f, 0, w), (0, 0), "plain read_at through f is uncached");
    assert_eq!(c.stats().dropbehind_drops, drops + 1);
    drops += 1;
    cread(&g, &data, w, ws);
    assert_eq!(ce(&f, w, w), (0, 0), "and through its clone");
    assert_eq!(c.stats().dropbehind_drops, drops + 1);

    let r = f.reopen();
    assert_eq!(r.default_flags(), ReadFlags::NONE, "reopen: own defaults");
    cread(&r, &data, 2 * w, ws);
    assert_eq!(ce(&f, 2 * w, w), (16, 0), "a reopened handle reads cached");

    r.set_default_flags(ReadFlags::DONTCACHE);
    f.set_default_flags(ReadFlags::NONE);
    assert_eq!(g.default_flags(), ReadFlags::NONE, "clone follows f");
    assert_eq!(r.default_flags(), ReadFlags::DONTCACHE, "r keeps its own");
    cread(&g, &data, 3 * w, ws);
    assert_eq!(ce(&f, 3 * w, w), (16, 0), "defaults cleared: cached");
    cread(&r, &data, 4 * w, ws);
    assert_eq!(ce(&f, 4 * w, w), (0, 0), "r is uncached now");
    // The call's flags add to the defaults; NONE does not turn them off.
    read_flags(&r, &data, 5 * w, ws, ReadFlags::NONE);
    assert_eq!(ce(&f, 5 * w, w), (0, 0));
    // And DONTCACHE on a call of a cached handle is uncached for that call.
    read_flags(&g, &data, 6 * w, ws, ReadFlags::DONTCACHE);
    assert_eq!(ce(&f, 6 * w, w), (0, 0));
    assert_eq!(ce(&f, 0, 0), (32, 0));
}

/// `Advice::NoReuse` makes later reads through the handle and its clones
/// uncached (not a reopened handle's), survives `set_default_flags`, and
/// `Advice::Normal` cancels it.
#[test]
fn noreuse_advice_makes_reads_uncached_until_normal() {
    let (c, data, f, _b) = file_64k(512 * KIB as usize, 17);
    let w = 64 * KIB;
    let ws = w as usize;
    let r = f.reopen();
    f.advise(0, 0, Advice::NoReuse).unwrap();
    assert_eq!(f.default_flags(), ReadFlags::NONE, "not a default flag");
    let drops = c.stats().dropbehind_drops;
    cread(&f, &data, 0, ws);
    assert_eq!(ce(&f, 0, w), (0, 0), "NoReuse: uncached");
    cread(&f.clone(), &data, w, ws);
    assert_eq!(ce(&f, w, w), (0, 0), "through a clone too");
    assert_eq!(c.stats().dropbehind_drops, drops + 2);
    cread(&r, &data, 2 * w, ws);
    assert_eq!(
        ce(&f, 2 * w, w),
        (16, 0),
        "a reopened handle is not advised"
    );
    f.set_default_flags(ReadFlags::NONE);
    cread(&f, &data, 3 * w, ws);
    assert_eq!(ce(&f, 3 * w, w), (0, 0), "set_default_flags keeps NoReuse");
    f.advise(0, 0, Advice::Normal).unwrap();
    cread(&f, &data, 4 * w, ws);
    assert_eq!(ce(&f, 4 * w, w), (16, 0), "Normal cancels it");
    assert_eq!(ce(&f, 0, 0), (32, 0));
}

// ---------------------------------------------------------------------------
// Advice::DontNeed.

/// `DontNeed` drops the clean, unused folios lying wholly in the range's
/// whole pages and the shadows there, leaving none (cachestat evicted 0 in
/// the range); shadows and folios outside it, a folio only partly inside
/// it, and a folio someone holds stay. No eviction, no dropbehind drop is
/// counted.
#[test]
fn dontneed_drops_clean_unused_folios_and_shadows_in_range_only() {
    let c = cache(8 * MIB, 16 * KIB as usize);
    let (data, f, _b) = new_file(&c, 256 * KIB as usize, 18);
    for i in 0..16 {
        cread(&f, &data, i * 16 * KIB, 16 * KIB as usize);
    }
    assert_eq!(ce(&f, 0, 0), (64, 0));
    // The oldest four order-2 folios (pages 0..16) go, leaving shadows.
    assert_eq!(c.shrink(64 * KIB), 64 * KIB);
    assert_eq!(ce(&f, 0, 64 * KIB), (0, 16));
    assert_eq!(ce(&f, 0, 0), (48, 16));
    let before = c.stats();

    // Pages 8..40: shadows 8..16 and folios 16..40.
    f.advise(8 * P, 32 * P, Advice::DontNeed).unwrap();
    assert_eq!(ce(&f, 8 * P, 32 * P), (0, 0), "range emptied, no shadow");
    assert_eq!(ce(&f, 0, 8 * P), (0, 8), "shadows before it stay");
    assert_eq!(ce(&f, 40 * P, 24 * P), (24, 0), "folios after it stay");
    let st = c.stats();
    assert_eq!(st.bytes_cached, 24 * P);
    assert_eq!(st.evictions, before.evictions, "not an eviction");
    assert_eq!(st.dropbehind_drops, before.dropbehind_drops);

    // An unaligned range covers whole pages 41..48: of the folios at 40 and
    // 44, only 44 lies wholly inside.
    f.advise(40 * P + 1, 8 * P, Advice::DontNeed).unwrap();
    assert_eq!(ce(&f, 40 * P, 4 * P), (4, 0), "partly covered: stays");
    assert_eq!(ce(&f, 44 * P, 4 * P), (0, 0));
    assert_eq!(ce(&f, 48 * P, 4 * P), (4, 0), "after the range");

    // A held folio stays.
    let Some(MappingEntry::Folio(held)) = f.mapping().get_entry(49) else {
        panic!("no folio at 49")
    };
    f.advise(48 * P, 4 * P, Advice::DontNeed).unwrap();
    assert_eq!(ce(&f, 48 * P, 4 * P), (4, 0), "in use: stays");
    drop(held);
    f.advise(48 * P, 4 * P, Advice::DontNeed).unwrap();
    assert_eq!(ce(&f, 48 * P, 4 * P), (0, 0), "unused now: dropped");

    // Pages 2..8: the shadow 0..4 straddles the start and stays; 4..8 goes.
    f.advise(2 * P, 6 * P, Advice::DontNeed).unwrap();
    assert_eq!(ce(&f, 0, 4 * P), (0, 4), "straddling shadow stays");
    assert_eq!(ce(&f, 4 * P, 4 * P), (0, 0));
    assert!(is_shadow(&f, 0) && is_shadow(&f, 3));
    // The data still reads right, wherever it comes from.
    cread(&f, &data, 0, data.len());
}

/// `posix_fadvise(fd, 0, st_size, POSIX_FADV_DONTNEED)`, the usual way to
/// drop a whole file, drops its partial last page too: the kernel keeps
/// the last page of the range when the range ends mid-page, except when it
/// ends at end of file (mm/fadvise.c, "mm/fadvise: discard partial page if
/// endbyte is also EOF"). `len == 0` (to the end) drops it as well.
#[test]
fn dontneed_to_end_of_file_drops_the_partial_last_page() {
    let c = cache(8 * MIB, PAGE);
    let (data, f, _b) = new_file(&c, 10_000, 19);
    cread(&f, &data, 0, data.len());
    assert_eq!(ce(&f, 0, 0), (3, 0));
    f.advise(0, data.len() as u64, Advice::DontNeed).unwrap();
    assert_eq!(
        ce(&f, 0, 0),
        (0, 0),
        "DontNeed over [0, size) of a 10000-byte file (pages 0..=2)"
    );
    cread(&f, &data, 0, data.len());
    f.advise(0, 0, Advice::DontNeed).unwrap();
    assert_eq!(ce(&f, 0, 0), (0, 0), "len 0: to the end");
    assert_eq!(c.stats().bytes_cached, 0);
}

// ---------------------------------------------------------------------------
// NOWAIT.

fn would_block(f: &File, off: u64, len: usize, flags: ReadFlags) {
    let mut buf = vec![0u8; len];
    match f.read_at_flags(&mut buf, off, flags) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        other => panic!("{flags:?} read of {len} at {off}: want WouldBlock, got {other:?}"),
    }
}

/// A NOWAIT read whose first byte is not cached fails with WouldBlock and
/// issues no IO (with readahead on or off, uncached or not); one that
/// starts in cached data returns the cached prefix only; a fully cached
/// one succeeds; none of them does IO.
#[test]
fn nowait_reads_return_cached_data_only_and_start_no_io() {
    for ra in [false, true] {
        let c = if ra {
            ra_cache(8 * MIB, 2 * MIB)
        } else {
            cache(8 * MIB, 64 * KIB as usize)
        };
        let (data, f, b) = new_file(&c, 256 * KIB as usize, 20);
        let nw = ReadFlags::NOWAIT;
        would_block(&f, 0, PAGE, nw);
        would_block(&f, 1000, 100, nw | ReadFlags::DONTCACHE);
        would_block(&f, 200 * KIB, 64 * KIB as usize, nw);
        c.wait_io_idle();
        let st = c.stats();
        assert_eq!((st.io_reads, st.misses), (0, 0), "ra {ra}: no IO: {st:?}");
        assert_eq!(b.reads(), 0, "ra {ra}");
        assert_eq!(ce(&f, 0, 0), (0, 0), "ra {ra}: nothing inserted");

        // Cache [0, 16 KiB) with readahead off for this handle's reads.
        let g = f.reopen();
        g.set_readahead(ReadaheadConfig::disabled());
        cread(&g, &data, 0, 16 * KIB as usize);
        assert_eq!(ce(&f, 0, 0), (4, 0), "ra {ra}");
        let ios = c.stats().io_reads;
        // Starts cached, runs into uncached data: the cached prefix.
        assert_eq!(
            read_flags_n(&f, &data, 100, 64 * KIB as usize, nw),
            16 * KIB as usize - 100
        );
        assert_eq!(
            read_flags_n(&f, &data, 0, 64 * KIB as usize, nw),
            16 * KIB as usize
        );
        // Fully cached.
        assert_eq!(read_flags(&f, &data, PAGE as u64, 2 * PAGE, nw), 2 * PAGE);
        assert_eq!(read_flags(&f, &data, 5, 10, nw | ReadFlags::DONTCACHE), 10);
        c.wait_io_idle();
        assert_eq!(c.stats().io_reads, ios, "ra {ra}: NOWAIT reads did no IO");
        assert_eq!(ce(&f, 0, 0), (4, 0), "ra {ra}: nothing added");
    }
}

/// A NOWAIT read of `len` at `off` that may stop short: checks the bytes it
/// returned and returns the count.
fn read_flags_n(f: &File, data: &[u8], off: u64, len: usize, flags: ReadFlags) -> usize {
    let mut buf = vec![0u8; len];
    let n = f.read_at_flags(&mut buf, off, flags).unwrap();
    let o = off as usize;
    assert!(n > 0 && n <= len);
    assert!(
        buf[..n] == data[o..o + n],
        "{flags:?} {len} at {off}: bytes"
    );
    n
}

/// A NOWAIT read of a folio still being read (locked, not uptodate) fails
/// with WouldBlock instead of waiting for it.
#[test]
fn nowait_read_of_a_folio_being_read_would_block_without_waiting() {
    let c = cache(8 * MIB, 64 * KIB as usize);
    let data = Arc::new(nonzero_bytes(256 * KIB as usize, 21));
    let (f, _b) = open(&c, &data);
    let m = f.mapping();
    let g = m.lock_folio(0, FgpFlags::CREAT.order(4)).unwrap();
    assert!(g.is_locked() && !g.test(FolioFlags::UPTODATE));
    let rf = f.clone();
    // (The guard, until one of the two below reads the folio.)
    let g = std::cell::Cell::new(Some(g));
    let fill = || {
        if let Some(g) = g.take() {
            m.read_folio(g).unwrap();
        }
    };
    within(
        "a NOWAIT read of a locked, not uptodate folio",
        move || would_block(&rf, 100, 100, ReadFlags::NOWAIT),
        // Let a waiting reader through: make the folio uptodate.
        fill,
    );
    fill();
    assert_eq!(read_flags(&f, &data, 100, 100, ReadFlags::NOWAIT), 100);
}

// ---------------------------------------------------------------------------
// cachestat (the kernel's `cachestat(2)`).

/// `len == 0` means to the end of the index; a range past the cached data
/// counts nothing; an unaligned range counts every page it touches.
#[test]
fn cachestat_len_zero_means_to_the_end() {
    let c = cache(8 * MIB, PAGE);
    let (data, f, _b) = new_file(&c, 256 * KIB as usize + 5, 22);
    cread(&f, &data, 0, data.len());
    assert_eq!(ce(&f, 0, 0), (65, 0));
    assert_eq!(ce(&f, 64 * KIB, 0), (49, 0));
    assert_eq!(ce(&f, 64 * KIB + 1, 0), (49, 0));
    assert_eq!(ce(&f, 256 * KIB, 0), (1, 0), "the partial last page");
    assert_eq!(ce(&f, 260 * KIB, 0), (0, 0));
    assert_eq!(ce(&f, u64::MAX, 0), (0, 0));
    assert_eq!(ce(&f, 4095, 2), (2, 0), "bytes 4095 and 4096: two pages");
    assert_eq!(ce(&f, 4096, 4096), (1, 0));
    assert_eq!(ce(&f, 0, u64::MAX), (65, 0), "no overflow: the whole file");
    assert_eq!(cs(&f, 0, 0).dirty, 0);
    assert_eq!(cs(&f, 0, 0).writeback, 0);
}

/// A large folio, and a large shadow, straddling the range's edges count
/// only their pages inside it.
#[test]
fn cachestat_counts_only_the_pages_of_a_large_entry_inside_the_range() {
    let (c, data, f, _b) = file_64k(256 * KIB as usize, 23);
    cread(&f, &data, 64 * KIB, 64 * KIB as usize); // order 4 at 16
    assert_eq!(folio_at(&f, 20).map(|x| (x.0, x.1)), Some((16, 16)));
    let cases: &[(u64, u64, u64)] = &[
        (19 * P, 2 * P, 2),
        (19 * P + 1, 1, 1),
        (16 * P - 1, 2, 1),
        (12 * P, 8 * P, 4),
        (30 * P, 10 * P, 2),
        (31 * P + 4095, 1, 1),
        (32 * P, 1, 0),
        (0, 256 * KIB, 16),
        (17 * P + 100, 14 * P, 15),
    ];
    for &(off, len, want) in cases {
        assert_eq!(ce(&f, off, len), (want, 0), "folio: {len} bytes at {off}");
    }
    assert_eq!(c.shrink(u64::MAX), 64 * KIB);
    for &(off, len, want) in cases {
        let s = cs(&f, off, len);
        assert_eq!((s.cached, s.evicted), (0, want), "shadow: {len} at {off}");
        assert!(s.recently_evicted <= s.evicted, "{s:?}");
    }
}

/// On a mix of large folios, shadows (some split), dropbehind folios and
/// holes, cachestat over random ranges equals a page-by-page count of
/// what the index holds, and cached + evicted never exceeds the range's
/// pages.
#[test]
fn cachestat_matches_the_index_page_by_page() {
    let c = cache(8 * MIB, 64 * KIB as usize);
    let size = MIB + 100;
    let (data, f, _b) = new_file(&c, size, 24);
    let mut rng = StdRng::seed_from_u64(25);
    for _ in 0..40 {
        let off = rng.gen_range(0..size as u64);
        cread(&f, &data, off, rng.gen_range(1..100 * KIB as usize));
    }
    c.shrink(256 * KIB);
    for _ in 0..20 {
        let off = rng.gen_range(0..size as u64);
        cread(&f, &data, off, rng.gen_range(1..40 * KIB as usize));
        let off = rng.gen_range(0..size as u64);
        uread(&f, &data, off, rng.gen_range(1..40 * KIB as usize));
    }
    let off = rng.gen_range(0..size as u64);
    f.advise(off, 100 * KIB, Advice::DontNeed).unwrap();
    let npages = (size as u64).div_ceil(P);
    let model: Vec<(bool, bool)> = (0..npages + 4)
        .map(|i| match f.mapping().get_entry(i) {
            Some(MappingEntry::Folio(_)) => (true, false),
            Some(MappingEntry::Shadow(_)) => (false, true),
            None => (false, false),
        })
        .collect();
    let (mc, me) = (
        model.iter().filter(|x| x.0).count() as u64,
        model.iter().filter(|x| x.1).count() as u64,
    );
    assert!(
        mc > 0 && me > 0,
        "the mix has folios ({mc}) and shadows ({me})"
    );
    assert_eq!(c.stats().bytes_cached, mc * P);
    for round in 0..500 {
        let off = rng.gen_range(0..(npages + 2) * P);
        let len = if round % 10 == 0 {
            0
        } else {
            rng.gen_range(1..300 * KIB)
        };
        let first = off / P;
        let last = if len == 0 {
            npages + 3
        } else {
            ((off + len - 1) / P).min(npages + 3)
        };
        let (wc, we) = (first..=last).fold((0, 0), |(c, e), i| {
            let (ic, ie) = model[i as usize];
            (c + ic as u64, e + ie as u64)
        });
        let s = cs(&f, off, len);
        assert_eq!((s.cached, s.evicted), (wc, we), "{len} bytes at {off}");
        if len > 0 {
            let pages = (off + len - 1) / P - first + 1;
            assert!(s.cached + s.evicted <= pages, "{s:?} over {pages} pages");
        }
        assert!(s.recently_evicted <= s.evicted, "{s:?}");
    }
}

/// After reading more than the cache holds, evicted > 0, recently_evicted
/// <= evicted, cached * 4096 = bytes_cached, cached + evicted <= the
/// file's pages; after `shrink`, every cached page became evicted.
#[test]
fn cachestat_after_evictions_counts_shadows() {
    // A shadow budget that holds the shadows of the whole 4 MiB file (16
    // nodes of 64), so that no shadow is trimmed and the evicted count
    // can only grow.
    let c = TestCache::bytes(MIB)
        .max_folio(64 * KIB as usize)
        .no_readahead()
        .shadow_budget(16 * xarray::NODE_SIZE)
        .build();
    let (data, f, _b) = new_file(&c, 4 * MIB, 26);
    for i in 0..64 {
        cread(&f, &data, i * 64 * KIB, 64 * KIB as usize);
    }
    let st = c.stats();
    let s = cs(&f, 0, 0);
    assert!(st.evictions > 0, "{st:?}");
    assert!(s.evicted > 0, "{s:?}");
    assert!(s.recently_evicted <= s.evicted, "{s:?}");
    assert_eq!(s.cached * P, st.bytes_cached, "{s:?} {st:?}");
    assert!(s.cached + s.evicted <= 1024, "{s:?}");
    assert!(s.cached > 0, "{s:?}");
    c.shrink(u64::MAX);
    let t = cs(&f, 0, 0);
    assert_eq!(t.cached, 0, "{t:?}");
    assert!(t.evicted >= s.evicted, "{s:?} then {t:?}");
    assert!(t.evicted <= 1024);
    assert_eq!(c.stats().bytes_cached, 0);
}

/// `offset + len` overflowing u64 is InvalidInput; `len == 0` at any
/// offset is fine.
#[test]
fn cachestat_rejects_an_overflowing_range() {
    let c = cache(4 * MIB, PAGE);
    let (data, f, _b) = new_file(&c, 64 * KIB as usize, 27);
    cread(&f, &data, 0, data.len());
    for (off, len) in [
        (u64::MAX, 1),
        (u64::MAX - 4095, 4097),
        (1, u64::MAX),
        (u64::MAX, u64::MAX),
    ] {
        match f.cachestat(off, len) {
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{len} at {off}: {e}"),
            Ok(s) => panic!("{len} at {off}: want InvalidInput, got {s:?}"),
        }
    }
    assert_eq!(cs(&f, u64::MAX, 0), CacheStat::default());
    assert_eq!(cs(&f, u64::MAX - 4096, 4096), CacheStat::default());
    assert_eq!(ce(&f, 0, u64::MAX), (16, 0));
}

// ---------------------------------------------------------------------------
// Stress.

/// Threads reading two files concurrently, uncached and cached, at random
/// offsets and lengths (and one uncached sequential stream), in a cache
/// smaller than the files: every byte right. Afterwards the cache is
/// consistent: bytes_cached is the sum of the files' cachestat pages, its
/// folio count their folios, free + cached is the capacity (nothing
/// leaked), no folio is left locked or not uptodate, and it still reads
/// right.
#[test]
fn concurrent_cached_and_uncached_readers_see_the_right_bytes() {
    let c = ra_cache(4 * MIB, 256 * KIB as usize);
    let datas = [
        Arc::new(nonzero_bytes(2 * MIB, 28)),
        Arc::new(nonzero_bytes(3 * MIB + 777, 29)),
    ];
    let files: Vec<File> = datas.iter().map(|d| open(&c, d).0).collect();
    let mut handles = Vec::new();
    for t in 0..4u64 {
        let files: Vec<File> = files
            .iter()
            .map(|f| if t % 2 == 0 { f.clone() } else { f.reopen() })
            .collect();
        let datas = datas.clone();
        handles.push(thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(100 + t);
            for _ in 0..300 {
                let k = rng.gen_range(0..2);
                let (f, d) = (&files[k], &datas[k]);
                let off = rng.gen_range(0..d.len() as u64);
                let len = rng.gen_range(1..192 * KIB as usize);
                let flags = if rng.gen_bool(0.5) {
                    ReadFlags::DONTCACHE
                } else {
                    ReadFlags::NONE
                };
                read_flags(f, d, off, len, flags);
            }
        }));
    }
    {
        let f = files[1].reopen();
        let d = datas[1].clone();
        handles.push(thread::spawn(move || {
            for _ in 0..2 {
                let mut pos = 0;
                while pos < d.len() as u64 {
                    pos += uread(&f, &d, pos, 64 * KIB as usize) as u64;
                }
            }
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    c.wait_io_idle();
    let st = c.stats();
    let cached: u64 = files.iter().map(|f| cs(f, 0, 0).cached).sum();
    let folios: u64 = files.iter().map(|f| f.mapping().nr_folios()).sum();
    assert_eq!(
        st.bytes_cached,
        cached * P,
        "bytes_cached vs cachestat: {st:?}"
    );
    assert_eq!(st.folios, folios, "folios vs the mappings' counts");
    assert_eq!(
        st.free_bytes + st.bytes_cached,
        st.capacity_bytes,
        "free + cached = capacity: {st:?}"
    );
    for f in &files {
        let npages = f.len().div_ceil(P);
        let s = cs(f, 0, 0);
        assert!(s.cached + s.evicted <= npages, "{s:?}");
        settled(f.mapping(), 0, npages - 1);
    }
    for (f, d) in files.iter().zip(&datas) {
        for off in (0..d.len() as u64).step_by(128 * KIB as usize) {
            cread(f, d, off, 128 * KIB as usize);
        }
    }
    c.wait_io_idle();
    c.shrink(u64::MAX);
    let st = c.stats();
    assert_eq!(st.bytes_cached, 0, "{st:?}");
    assert_eq!(st.free_bytes, st.capacity_bytes, "{st:?}");
}
