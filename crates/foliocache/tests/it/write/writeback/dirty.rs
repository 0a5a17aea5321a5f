//! Dirty data and its writeback: what `cachestat` and `CacheStats` count
//! as dirty, and when that drops (a sync, a cut, a punch); what a
//! writeback writes (one IO per run of dirty pages, only the dirty pages
//! of a large folio); the dirty limit (a writer past it is throttled, not
//! failed, and never runs far past it; small writes into large folios are
//! not throttled below it); the background flusher (above its threshold,
//! and within its interval below it); and reclaim and `DontNeed`, which
//! never drop dirty data.

use std::sync::Arc;

use backing::{FaultyBacking, MemBacking};

use crate::common::write as wcommon;
use test_support::cache::TestCache;
use test_support::TempPath;
use wcommon::{assert_same, disk, nonzero_bytes, open_rw, read_all, Model, P, PAGE};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

#[test]
fn cachestat_and_stats_count_dirty_pages_and_drop_to_zero_after_sync() {
    let tmp = TempPath::new("figures");
    // No background flushing below the capacity: the counts stay put.
    let c = TestCache::bytes(4 * MIB).max_folio(PAGE).quiet().build();
    let f = open_rw(&c, &tmp.path);
    let before = c.stats();
    f.write_all_at(&nonzero_bytes(10 * PAGE, 10), 0).unwrap();
    let cs = f.cachestat(0, 0).unwrap();
    assert_eq!(cs.cached, 10, "{cs:?}");
    assert_eq!(cs.dirty, 10, "{cs:?}");
    assert!(cs.dirty <= cs.cached && cs.writeback <= cs.cached, "{cs:?}");
    let s = c.stats();
    assert_eq!(s.dirty_bytes, 10 * P, "{s:?}");
    f.sync_data().unwrap();
    let cs = f.cachestat(0, 0).unwrap();
    assert_eq!((cs.dirty, cs.writeback), (0, 0), "{cs:?}");
    assert_eq!(cs.cached, 10, "written data stays cached: {cs:?}");
    let s = c.stats();
    assert_eq!(s.dirty_bytes, 0, "{s:?}");
    assert_eq!(s.writeback_bytes, 0, "{s:?}");
    assert!(s.io_writes > before.io_writes, "{s:?}");
    assert!(s.io_write_bytes >= before.io_write_bytes + 10 * P, "{s:?}");
    // Cache-wide sync on a clean cache writes nothing more.
    c.sync_all().unwrap();
    assert_eq!(c.stats().io_writes, s.io_writes);
}

#[test]
fn dropping_dirty_folios_by_set_len_or_punch_uncounts_them() {
    let c = TestCache::bytes(4 * MIB).max_folio(PAGE).quiet().build();
    let b = Arc::new(FaultyBacking::new(MemBacking::new()));
    let f = c.open_backing(b.clone()).unwrap();
    f.write_all_at(&nonzero_bytes(20 * PAGE, 35), 0).unwrap();
    assert_eq!(c.stats().dirty_bytes, 20 * P);
    f.punch_hole(4 * P, 4 * P).unwrap();
    assert_eq!(c.stats().dirty_bytes, 16 * P, "4 dirty pages punched");
    assert_eq!(f.cachestat(0, 0).unwrap().dirty, 16);
    f.set_len(10 * P).unwrap();
    assert_eq!(c.stats().dirty_bytes, 6 * P, "pages 10..20 cut");
    f.set_len(0).unwrap();
    let s = c.stats();
    assert_eq!((s.dirty_bytes, s.folios), (0, 0), "{s:?}");
    f.sync_all().unwrap();
    assert_eq!(b.stats().writes, 0, "nothing was left to write");
}

#[test]
fn sync_writes_a_contiguous_dirty_run_as_one_io_and_separate_runs_as_separate_ios() {
    let b = Arc::new(FaultyBacking::new(MemBacking::new()));
    let c = TestCache::bytes(4 * MIB).max_folio(PAGE).quiet().build();
    let f = c.open_backing(b.clone()).unwrap();
    f.write_all_at(&nonzero_bytes(40 * PAGE, 11), 0).unwrap();
    f.sync_data().unwrap();
    assert_eq!(b.stats().writes, 1, "40 contiguous dirty pages: one write");
    b.reset_stats();
    // Two runs with a clean page between them.
    f.write_all_at(&[1u8; 3 * PAGE], 2 * P).unwrap();
    f.write_all_at(&[2u8; 2 * PAGE], 6 * P).unwrap();
    f.sync_data().unwrap();
    assert_eq!(b.stats().writes, 2, "two dirty runs: two writes");
    // A sync with nothing dirty writes nothing.
    b.reset_stats();
    f.sync_data().unwrap();
    assert_eq!(b.stats().writes, 0);
}

#[test]
fn a_large_folio_written_in_two_places_writes_back_only_those_pages() {
    let c = TestCache::bytes(16 << 20).build();
    let p = TempPath::new("large-folio-two-places");
    std::fs::write(&p, vec![b'q'; 4 << 20]).unwrap();
    let f = c.open_options().read(true).write(true).open(&p).unwrap();
    // Cached in large folios by a read.
    let mut all = vec![0u8; 4 << 20];
    f.read_exact_at(&mut all, 0).unwrap();
    let before = c.stats();
    f.write_at(b"hello", 100_000).unwrap(); // page 24
    f.write_at(&[b'w'; 8192], 1 << 20).unwrap(); // pages 256..258
    f.write_at(b"!", (1 << 20) + 8192).unwrap(); // page 258: joins them
    f.sync_data().unwrap();
    let s = c.stats();
    assert_eq!(s.io_write_bytes - before.io_write_bytes, 4 * 4096, "{s:?}");
    assert_eq!(
        s.io_writes - before.io_writes,
        2,
        "two runs of dirty pages: {s:?}"
    );
    let disk = std::fs::read(&p).unwrap();
    let mut want = vec![b'q'; 4 << 20];
    want[100_000..100_005].copy_from_slice(b"hello");
    want[1 << 20..(1 << 20) + 8192].fill(b'w');
    want[(1 << 20) + 8192] = b'!';
    assert!(disk == want);
}

#[test]
fn a_large_folio_written_in_a_few_places_writes_back_only_those_pages() {
    let old = nonzero_bytes(2 * MIB, 41);
    let b = Arc::new(FaultyBacking::new(MemBacking::with_data(old.clone())));
    let c = TestCache::bytes(8 * MIB).max_folio(2 * MIB).quiet().build();
    let f = c.open_backing(b.clone()).unwrap();
    assert_eq!(read_all(&f), old);
    b.reset_stats();
    let mut model = Model { data: old };
    // Pages 3, 100 and 101 (one run across them), 400 (at its last byte).
    for off in [3 * P + 7, 100 * P + 4090, 401 * P - 1] {
        f.write_all_at(b"0123456789", off).unwrap();
        model.write(off, b"0123456789");
    }
    // Dirty counts are of the pages written, not the whole folio.
    assert_eq!(c.stats().dirty_bytes, 5 * P, "pages 3, 100, 101, 400, 401");
    f.sync_data().unwrap();
    assert_eq!(c.stats().dirty_bytes, 0);
    let s = b.stats();
    assert_eq!(s.writes, 3, "three dirty runs: pages 3, 100-101, 400-401");
    assert!(
        s.bytes_written <= 6 * P,
        "wrote {} bytes for 6 dirty pages of a 2 MiB folio",
        s.bytes_written
    );
    assert_same("backing", &b.inner().contents().unwrap(), &model.data);
    assert_same("cache", &read_all(&f), &model.data);
    // A second sync writes nothing: the pages are clean again.
    b.reset_stats();
    f.sync_data().unwrap();
    assert_eq!(b.stats().writes, 0);
}

#[test]
fn a_write_larger_than_the_cache_is_throttled_not_failed() {
    let c = TestCache::bytes(8 << 20).dirty_limit(2 << 20).build();
    let p = TempPath::new("throttled");
    let f = open_rw(&c, &p.path);
    let data: Vec<u8> = (0..(40u32 << 20))
        .map(|i| (i >> 12) as u8 ^ i as u8)
        .collect();
    f.write_all_at(&data, 0).unwrap();
    let s = c.stats();
    assert!(s.throttled > 0, "{s:?}");
    // The limit plus one piece of the write at most.
    assert!(
        s.dirty_bytes <= (2 << 20) + 4 * foliocache::internals::WRITE_CHUNK_PAGES * 4096,
        "{s:?}"
    );
    f.sync_all().unwrap();
    assert!(std::fs::read(&p).unwrap() == data);
}

#[test]
fn a_plain_write_larger_than_the_cache_succeeds() {
    for max_folio in [PAGE, 64 * KIB] {
        let b = Arc::new(FaultyBacking::new(MemBacking::new()));
        let c = TestCache::bytes(MIB).max_folio(max_folio).build();
        let f = c.open_backing(b.clone()).unwrap();
        let data = nonzero_bytes(3 * MIB + 7, 29);
        f.write_all_at(&data, 0).unwrap();
        assert_same("read back", &read_all(&f), &data);
        f.sync_data().unwrap();
        assert_same("backing", &b.inner().contents().unwrap(), &data);
    }
}

#[test]
fn a_writer_never_runs_far_past_the_dirty_limit() {
    let limit = 128 * KIB;
    let c = TestCache::bytes(4 * MIB)
        .max_folio(16 * KIB)
        .dirty_limit(limit)
        .dirty_background(limit / 2)
        .build();
    let b = Arc::new(FaultyBacking::new(MemBacking::new()));
    // Slow writeback, so the flusher alone cannot keep up.
    b.set_write_latency(std::time::Duration::from_millis(2));
    let f = c.open_backing(b.clone()).unwrap();
    let piece = nonzero_bytes(16 * KIB, 32);
    let mut worst = 0;
    for i in 0..128u64 {
        f.write_all_at(&piece, i * piece.len() as u64).unwrap();
        worst = worst.max(c.stats().dirty_bytes);
    }
    let s = c.stats();
    assert!(
        s.throttled > 0,
        "2 MiB through a 128 KiB dirty limit throttles: {s:?}"
    );
    assert!(
        worst <= (limit + piece.len() + 16 * KIB) as u64,
        "dirty bytes reached {worst} with a limit of {limit} and 16 KiB writes"
    );
    f.sync_data().unwrap();
    assert_eq!(b.inner().contents().unwrap().len(), 2 * MIB);
}

#[test]
fn small_writes_into_large_folios_are_not_throttled_below_the_dirty_limit() {
    // 32 writes of 4 KiB into one 2 MiB folio make 128 KiB dirty, under a
    // 256 KiB limit: nobody waits (a count of whole folios would say 64 MiB).
    let old = nonzero_bytes(2 * MIB, 47);
    let b = Arc::new(FaultyBacking::new(MemBacking::with_data(old.clone())));
    let c = TestCache::bytes(8 * MIB)
        .max_folio(2 * MIB)
        .dirty_limit(256 * KIB)
        .dirty_background(256 * KIB)
        .build();
    let f = c.open_backing(b.clone()).unwrap();
    assert_eq!(read_all(&f), old);
    let mut model = Model { data: old };
    for i in 0..32u64 {
        let d = nonzero_bytes(PAGE, 100 + i);
        let off = (i * 37 % 512) * P;
        f.write_all_at(&d, off).unwrap();
        model.write(off, &d);
    }
    let s = c.stats();
    assert_eq!(s.throttled, 0, "{s:?}");
    assert!(s.dirty_bytes <= 32 * P, "{s:?}");
    f.sync_data().unwrap();
    assert_same("backing", &b.inner().contents().unwrap(), &model.data);
}

#[test]
fn the_flusher_writes_back_above_the_background_threshold_without_a_sync() {
    let background = 64 * KIB;
    let c = TestCache::bytes(4 * MIB)
        .max_folio(16 * KIB)
        .dirty_limit(4 * MIB)
        .dirty_background(background)
        .build();
    let b = Arc::new(FaultyBacking::new(MemBacking::new()));
    let f = c.open_backing(b.clone()).unwrap();
    let data = nonzero_bytes(512 * KIB, 33);
    f.write_all_at(&data, 0).unwrap();
    wcommon::wait_until("the flusher to get under the background threshold", || {
        c.stats().dirty_bytes <= background as u64
    });
    // (Pages stop counting as dirty when their writeback starts, before
    // the backing has them.)
    wcommon::wait_until("the flusher's writes to land", || b.stats().writes > 0);
    let s = c.stats();
    assert_eq!(
        s.throttled, 0,
        "nobody was throttled below the limit: {s:?}"
    );
    // What was written is right (the rest comes with the sync).
    let got = b.inner().contents().unwrap();
    assert!(
        got.len() as u64 >= 512 * KIB as u64 - background as u64,
        "{}",
        got.len()
    );
    assert_same("written by the flusher", &got, &data[..got.len()]);
}

#[test]
fn dirty_data_below_the_background_threshold_is_written_within_the_flush_interval() {
    let c = TestCache::bytes(4 * MIB).max_folio(16 * KIB).build();
    let b = Arc::new(FaultyBacking::new(MemBacking::new()));
    let f = c.open_backing(b.clone()).unwrap();
    let data = nonzero_bytes(10_000, 34);
    f.write_all_at(&data, 0).unwrap();
    // FLUSH_INTERVAL is 5 s; allow for a slow machine.
    let start = std::time::Instant::now();
    while c.stats().dirty_bytes > 0 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(15),
            "10 KB stayed dirty for 15 s: {:?}",
            c.stats()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let got = b.inner().contents().unwrap();
    assert_same("written by the periodic flush", &got[..data.len()], &data);
}

#[test]
fn dirty_folios_are_written_back_before_reclaim_evicts_them() {
    let other = nonzero_bytes(4 * MIB, 12);
    let other_tmp = TempPath::with_data("pressure-other", &other);
    let tmp = TempPath::new("pressure-dirty");
    let c = TestCache::bytes(MIB).max_folio(64 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    let data = nonzero_bytes(600 * KIB + 5, 13);
    f.write_all_at(&data, 0).unwrap();
    let g = c.open(&other_tmp.path).unwrap();
    for _ in 0..2 {
        assert_same("the other file", &read_all(&g), &other);
    }
    assert_same("dirty data after pressure", &read_all(&f), &data);
    f.sync_all().unwrap();
    assert_same("on disk", &disk(&tmp.path), &data);
}

#[test]
fn dont_need_keeps_dirty_folios_and_drops_clean_ones() {
    use foliocache::Advice;
    let old = nonzero_bytes(32 * PAGE, 39);
    let tmp = TempPath::with_data("dontneed-dirty", &old);
    let c = TestCache::bytes(4 * MIB)
        .max_folio(PAGE)
        .no_readahead()
        .build();
    let f = open_rw(&c, &tmp.path);
    assert_eq!(read_all(&f), old);
    let dirty = nonzero_bytes(8 * PAGE, 40);
    f.write_all_at(&dirty, 8 * P).unwrap();
    f.advise(0, 0, Advice::DontNeed).unwrap();
    let cs = f.cachestat(0, 0).unwrap();
    assert_eq!(
        (cs.cached, cs.dirty),
        (8, 8),
        "only the dirty pages stay: {cs:?}"
    );
    let mut model = Model { data: old };
    model.write(8 * P, &dirty);
    assert_same("after DontNeed", &read_all(&f), &model.data);
    f.sync_all().unwrap();
    assert_same("on disk", &disk(&tmp.path), &model.data);
}
