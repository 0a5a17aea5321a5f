//! Uncached writes (`WriteFlags::DONTCACHE`, the kernel's
//! `RWF_DONTCACHE`): the folios the write created go once written back,
//! leaving no shadow; folios cached before stay, and so do the other dirty
//! pages of a large folio it wrote into; a write larger than the cache
//! succeeds; a cached write after it is cached; the flags behave as the
//! read flags do.

use std::sync::Arc;

use backing::{FaultyBacking, MemBacking};
use foliocache::WriteFlags;

use crate::common::write as wcommon;
use test_support::cache::TestCache;
use test_support::TempPath;
use wcommon::{assert_same, disk, nonzero_bytes, open_rw, read_all, read_vec, Model, P, PAGE};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

#[test]
fn dontcache_write_leaves_nothing_new() {
    let c = TestCache::bytes(8 << 20).build();
    let p = TempPath::new("dontcache-nothing-new");
    let f = open_rw(&c, &p.path);
    f.write_at_flags(&[5u8; 1 << 20], 0, WriteFlags::DONTCACHE)
        .unwrap();
    assert_eq!(f.cachestat(0, 0).unwrap().cached, 0);
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
    let cs = f.cachestat(0, 10 * P).unwrap();
    assert_eq!(cs.cached, 10, "pages cached before stay cached: {cs:?}");
    let cs = f.cachestat(10 * P, 6 * P).unwrap();
    assert_eq!(cs.cached, 0, "pages the write created are dropped: {cs:?}");
    // The whole written range was written back before the call returned,
    // the pages that stay cached included.
    let cs = f.cachestat(4 * P, 12 * P).unwrap();
    assert_eq!((cs.dirty, cs.writeback), (0, 0), "{cs:?}");
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
        assert_eq!(f.cachestat(0, 0).unwrap().cached, 0, "{what}");
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
    assert_eq!(f.cachestat(0, 0).unwrap().cached, 0);
    f.write_all_at(&[4u8; 4 * PAGE], 0).unwrap();
    assert_eq!(f.cachestat(0, 0).unwrap().cached, 4, "a plain write caches");
    assert_eq!(read_all(&f), vec![4u8; 4 * PAGE]);
    f.sync_all().unwrap();
    assert_eq!(f.cachestat(0, 0).unwrap().cached, 4, "and sync keeps it");
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
