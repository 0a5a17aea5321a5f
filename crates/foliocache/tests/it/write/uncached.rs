//! Uncached writes (`WriteFlags::DONTCACHE`, the kernel's
//! `RWF_DONTCACHE`): the write returns once copied, its writeback started
//! (not waited for); the folios the write created go once written back,
//! leaving no shadow, unless a reader took them meanwhile; folios cached
//! before stay, and so do the other dirty pages of a large folio it wrote
//! into; a write larger than the cache succeeds, and a long stream holds
//! about the writeback in flight; a sync makes it durable; a cached write
//! after it is cached; the flags behave as the read flags do.

use std::sync::Arc;
use std::time::{Duration, Instant};

use backing::{FaultyBacking, MemBacking};
use foliocache::WriteFlags;

use crate::common::write as wcommon;
use test_support::cache::TestCache;
use test_support::TempPath;
use wcommon::{
    assert_same, disk, nonzero_bytes, open_rw, read_all, read_vec, wait_until, Model, P, PAGE,
};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

#[test]
fn dontcache_write_leaves_nothing_new() {
    let c = TestCache::bytes(8 << 20).build();
    let p = TempPath::new("dontcache-nothing-new");
    let f = open_rw(&c, &p.path);
    f.write_at_flags(&[5u8; 1 << 20], 0, WriteFlags::DONTCACHE)
        .unwrap();
    // No sync: the writeback the write started drops the folios.
    wait_until("the folios to go", || {
        f.cachestat(0, 0).unwrap().cached == 0
    });
    assert_eq!(std::fs::read(&p).unwrap(), vec![5u8; 1 << 20]);
}

#[test]
fn an_uncached_write_leaves_none_of_the_folios_it_created_cached() {
    for max_folio in [PAGE, 64 * KIB] {
        let old = nonzero_bytes(32 * PAGE, 15);
        let tmp = TempPath::with_data("dontcache-new", &old);
        let c = TestCache::bytes(4 * MIB)
            .max_folio(max_folio)
            .no_readahead()
            .build();
        let f = open_rw(&c, &tmp.path);
        let what = format!("max folio {max_folio}");
        // Over existing (uncached) data, partly unaligned, and past EOF.
        let buf = nonzero_bytes(40 * PAGE + 123, 16);
        let off = 10 * P + 7;
        let n = f.write_at_flags(&buf, off, WriteFlags::DONTCACHE).unwrap();
        assert_eq!(n, buf.len());
        wait_until(&what, || f.cachestat(0, 0).unwrap().cached == 0);
        let cs = f.cachestat(0, 0).unwrap();
        assert_eq!(
            cs.cached, 0,
            "{what}: no folio the write created stays: {cs:?}"
        );
        assert_eq!(cs.evicted, 0, "{what}: and no shadow either: {cs:?}");
        let s = c.stats();
        assert_eq!(
            (s.folios, s.dirty_bytes, s.writeback_bytes),
            (0, 0, 0),
            "{what}: {s:?}"
        );
        let mut model = Model { data: old };
        model.write(off, &buf);
        assert_eq!(f.len(), model.len(), "{what}");
        // The data was written, not dropped.
        assert_same(&format!("{what}: read back"), &read_all(&f), &model.data);
        f.sync_all().unwrap();
        assert_same(&format!("{what}: on disk"), &disk(&tmp.path), &model.data);
    }
}

#[test]
fn an_uncached_write_keeps_the_folios_that_were_cached_before() {
    let old = nonzero_bytes(32 * PAGE, 17);
    let tmp = TempPath::with_data("dontcache-old", &old);
    let c = TestCache::bytes(4 * MIB)
        .max_folio(PAGE)
        .no_readahead()
        .build();
    let f = open_rw(&c, &tmp.path);
    // Pages 0..8 cached clean, 8..10 cached dirty.
    assert_eq!(read_vec(&f, 0, 8 * PAGE).unwrap(), &old[..8 * PAGE]);
    let dirty = nonzero_bytes(2 * PAGE, 18);
    f.write_all_at(&dirty, 8 * P).unwrap();
    assert_eq!(f.cachestat(0, 0).unwrap().cached, 10);
    // Uncached write over pages 4..16: 4..10 were cached, 10..16 are new.
    let buf = nonzero_bytes(12 * PAGE, 19);
    f.write_at_flags(&buf, 4 * P, WriteFlags::DONTCACHE)
        .unwrap();
    // The whole written range is written back by the writeback the write
    // started, the pages that stay cached included.
    wait_until("the written range written back", || {
        let cs = f.cachestat(4 * P, 12 * P).unwrap();
        (cs.dirty, cs.writeback) == (0, 0) && f.cachestat(10 * P, 6 * P).unwrap().cached == 0
    });
    let cs = f.cachestat(0, 10 * P).unwrap();
    assert_eq!(cs.cached, 10, "pages cached before stay cached: {cs:?}");
    let cs = f.cachestat(10 * P, 6 * P).unwrap();
    assert_eq!(cs.cached, 0, "pages the write created are dropped: {cs:?}");
    assert_same(
        "the written range on disk, before any sync",
        &disk(&tmp.path)[4 * PAGE..16 * PAGE],
        &buf,
    );
    let mut model = Model { data: old };
    model.write(8 * P, &dirty);
    model.write(4 * P, &buf);
    assert_same("read back", &read_all(&f), &model.data);
    f.sync_all().unwrap();
    assert_same("on disk", &disk(&tmp.path), &model.data);
}

#[test]
fn an_uncached_write_larger_than_the_cache_succeeds_and_leaves_nothing_cached() {
    // A plain write of this size goes through (the cache writes back as it
    // fills); an uncached one must too, and its footprint is the IO in
    // flight, not the whole write (as `balance_dirty_pages` throttles in the
    // kernel).
    for max_folio in [PAGE, 64 * KIB] {
        let b = Arc::new(FaultyBacking::new(MemBacking::new()));
        let c = TestCache::bytes(MIB).max_folio(max_folio).build();
        let f = c.open_backing(b.clone()).unwrap();
        let data = nonzero_bytes(2 * MIB + 7, 28);
        let what = format!("2 MiB uncached write into a 1 MiB cache, max folio {max_folio}");
        let n = f
            .write_at_flags(&data, 0, WriteFlags::DONTCACHE)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(n, data.len(), "{what}");
        wait_until(&what, || f.cachestat(0, 0).unwrap().cached == 0);
        assert_same(&what, &read_all(&f), &data);
        f.sync_data().unwrap();
        assert_same(
            &format!("{what}: backing"),
            &b.inner().contents().unwrap(),
            &data,
        );
    }
}

#[test]
fn an_uncached_write_into_a_large_folio_leaves_its_other_dirty_pages_dirty() {
    // One 2 MiB folio, page 10 dirty; an uncached write to page 500 writes
    // back its own range: page 10 must still be written by the next sync.
    let old = nonzero_bytes(2 * MIB, 44);
    let b = Arc::new(FaultyBacking::new(MemBacking::with_data(old.clone())));
    let c = TestCache::bytes(8 * MIB).max_folio(2 * MIB).quiet().build();
    let f = c.open_backing(b.clone()).unwrap();
    assert_eq!(read_all(&f), old);
    let mut model = Model { data: old };
    let a = nonzero_bytes(PAGE, 45);
    f.write_all_at(&a, 10 * P).unwrap();
    model.write(10 * P, &a);
    let u = nonzero_bytes(100, 46);
    f.write_at_flags(&u, 500 * P + 7, WriteFlags::DONTCACHE)
        .unwrap();
    model.write(500 * P + 7, &u);
    wait_until("the uncached write's page written back", || {
        b.inner().contents().unwrap()[500 * PAGE..501 * PAGE] == model.data[500 * PAGE..501 * PAGE]
    });
    let backing_now = b.inner().contents().unwrap();
    assert_same(
        "the uncached write's page went to the backing",
        &backing_now[500 * PAGE..501 * PAGE],
        &model.data[500 * PAGE..501 * PAGE],
    );
    assert!(
        f.cachestat(10 * P, P).unwrap().dirty == 1 || backing_now[10 * PAGE..11 * PAGE] == a[..],
        "page 10 is neither dirty nor written"
    );
    assert_same("cache", &read_all(&f), &model.data);
    f.sync_data().unwrap();
    assert_same(
        "backing after sync",
        &b.inner().contents().unwrap(),
        &model.data,
    );
}

#[test]
fn a_cached_write_after_an_uncached_one_is_cached() {
    let tmp = TempPath::new("dontcache-then-cached");
    let c = TestCache::bytes(4 * MIB)
        .max_folio(PAGE)
        .no_readahead()
        .build();
    let f = open_rw(&c, &tmp.path);
    f.write_at_flags(&[3u8; 4 * PAGE], 0, WriteFlags::DONTCACHE)
        .unwrap();
    wait_until("the uncached folios to go", || {
        f.cachestat(0, 0).unwrap().cached == 0
    });
    f.write_all_at(&[4u8; 4 * PAGE], 0).unwrap();
    assert_eq!(f.cachestat(0, 0).unwrap().cached, 4, "a plain write caches");
    assert_eq!(read_all(&f), vec![4u8; 4 * PAGE]);
    f.sync_all().unwrap();
    assert_eq!(f.cachestat(0, 0).unwrap().cached, 4, "and sync keeps it");
}

/// A quiet cache of `bytes` (folios up to 64 KiB) and a file on a memory
/// backing whose every write takes `latency`.
fn slow_backing(
    bytes: usize,
    latency: Duration,
) -> (
    foliocache::Cache,
    foliocache::File,
    Arc<FaultyBacking<MemBacking>>,
) {
    let b = Arc::new(FaultyBacking::new(MemBacking::new()));
    let c = TestCache::bytes(bytes).max_folio(64 * KIB).quiet().build();
    let f = c.open_backing(b.clone()).unwrap();
    b.set_write_latency(latency);
    (c, f, b)
}

/// The story (issue 69): `WriteFlags::DONTCACHE` wrote the range back
/// before the write returned, so an uncached writer waited for the device
/// at every write (0.19x the kernel's `RWF_DONTCACHE` for 64 KiB writes).
/// The kernel's write only starts its writeback; a sync makes it durable.
#[test]
fn an_uncached_write_returns_before_its_writeback_and_a_sync_makes_it_durable() {
    let latency = Duration::from_millis(400);
    let (c, f, b) = slow_backing(8 * MIB, latency);
    let data = nonzero_bytes(256 * KIB + 100, 50);
    let t = Instant::now();
    let n = f.write_at_flags(&data, 0, WriteFlags::DONTCACHE).unwrap();
    let took = t.elapsed();
    assert_eq!(n, data.len());
    assert!(
        took < latency,
        "the write returned after {took:?}: it waited for its writeback"
    );
    f.sync_data().unwrap();
    assert_same("backing after sync", &b.inner().contents().unwrap(), &data);
    // The sync waited for the writeback the write started, whose end
    // dropped the folios.
    assert_eq!(f.cachestat(0, 0).unwrap().cached, 0);
    assert_eq!(c.stats().dirty_bytes, 0);
}

#[test]
fn a_cached_read_during_an_uncached_writes_writeback_keeps_its_folios() {
    // `folio_end_dropbehind`: a folio a cached reader took while its
    // writeback was in flight is no longer dropbehind, and stays.
    let old = nonzero_bytes(16 * PAGE, 51);
    let b = Arc::new(FaultyBacking::new(MemBacking::with_data(old)));
    let c = TestCache::bytes(4 * MIB)
        .max_folio(PAGE)
        .no_readahead()
        .quiet()
        .build();
    let f = c.open_backing(b.clone()).unwrap();
    b.set_write_latency(Duration::from_millis(300));
    let buf = nonzero_bytes(8 * PAGE, 52);
    f.write_at_flags(&buf, 0, WriteFlags::DONTCACHE).unwrap();
    let reads = b.stats().reads;
    assert_eq!(read_vec(&f, 0, 4 * PAGE).unwrap(), &buf[..4 * PAGE]);
    assert_eq!(b.stats().reads, reads, "the read hit the written folios");
    f.sync_data().unwrap();
    let cs = f.cachestat(0, 4 * P).unwrap();
    assert_eq!(cs.cached, 4, "the folios the reader took stay: {cs:?}");
    let cs = f.cachestat(4 * P, 4 * P).unwrap();
    assert_eq!(cs.cached, 0, "the others went with their writeback: {cs:?}");
    assert_eq!(&b.inner().contents().unwrap()[..8 * PAGE], &buf[..]);
}

#[test]
fn a_long_uncached_stream_holds_about_the_writeback_in_flight() {
    // 48 MiB of 64 KiB uncached writes into a 64 MiB cache whose backing
    // takes 20 ms a write: the writer outruns the writeback, and waits
    // for it once the pages kicked and in flight pass the bound, so the
    // cache holds about the bound, not the stream.
    let ahead = foliocache::internals::UNCACHED_AHEAD_PAGES as usize * PAGE;
    let (c, f, b) = slow_backing(64 * MIB, Duration::from_millis(20));
    let chunk = nonzero_bytes(64 * KIB, 53);
    let total = 48 * MIB;
    let mut peak = 0;
    for k in 0..total / chunk.len() {
        f.write_at_flags(&chunk, (k * chunk.len()) as u64, WriteFlags::DONTCACHE)
            .unwrap();
        peak = peak.max(c.stats().bytes_cached as usize);
    }
    // The bound, what the writer queued past it before it waited (a
    // write), and a span the job took as the writer passed it.
    let most = 2 * ahead + 2 * chunk.len();
    assert!(
        peak <= most,
        "the cache held {peak} bytes of a {total}-byte stream (at most {most})"
    );
    f.sync_data().unwrap();
    assert_eq!(f.cachestat(0, 0).unwrap().cached, 0);
    let disk = b.inner().contents().unwrap();
    assert_eq!(disk.len(), total);
    assert!(disk.chunks(chunk.len()).all(|c| c == &chunk[..]));
}

#[test]
fn write_flags_behave_like_read_flags() {
    assert_eq!(WriteFlags::NONE.bits(), 0);
    assert!(WriteFlags::DONTCACHE.contains(WriteFlags::DONTCACHE));
    assert!(!WriteFlags::NONE.contains(WriteFlags::DONTCACHE));
    assert_eq!(
        WriteFlags::from_bits(WriteFlags::DONTCACHE.bits()),
        Some(WriteFlags::DONTCACHE)
    );
    assert_eq!(
        WriteFlags::from_bits(1 << 31),
        None,
        "unknown bits are refused"
    );
    assert_eq!(
        WriteFlags::NONE | WriteFlags::DONTCACHE,
        WriteFlags::DONTCACHE
    );
}
