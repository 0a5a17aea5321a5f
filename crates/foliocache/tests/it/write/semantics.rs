//! The precise semantics of the write API (issue 7), one property per test:
//! partial-folio writes, writes past EOF, `set_len` and `punch_hole` (with
//! the data in every state: uncached, cached clean, dirty, written back),
//! the figures (`cachestat`, `CacheStats`), permissions and limits,
//! uncached writes (`WriteFlags::DONTCACHE`, the kernel's `RWF_DONTCACHE`:
//! folios the write created go once written back, folios already cached
//! stay), the `OpenOptions` flags, and memfiles.
//!
//! Files are real files on the target's filesystem, checked with `std::fs`
//! after a sync, or memory backings checked with `MemBacking::contents`.

use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use backing::{FaultyBacking, MemBacking};
use foliocache::{Cache, File, WriteFlags};

use crate::common::write as wcommon;
use test_support::cache::TestCache;
use test_support::TempPath;
use wcommon::{assert_same, disk, nonzero_bytes, open_rw, read_all, read_vec, Model, P, PAGE};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// The state the data of a range is in when an operation hits it.
#[derive(Clone, Copy, Debug)]
enum State {
    /// Only on disk.
    Uncached,
    /// Read into the cache, clean.
    Cached,
    /// Overwritten in the cache (same bytes as the model), not written back.
    Dirty,
    /// Overwritten, then written back by `sync_data`: cached and clean.
    WrittenBack,
}

const STATES: [State; 4] = [
    State::Uncached,
    State::Cached,
    State::Dirty,
    State::WrittenBack,
];

/// Puts the whole of `f` (whose contents are `model`) in `state`.
fn put_in_state(f: &File, model: &Model, state: State) {
    match state {
        State::Uncached => {}
        State::Cached => {
            assert_same("caching read", &read_all(f), &model.data);
        }
        State::Dirty | State::WrittenBack => {
            f.write_all_at(&model.data, 0).unwrap();
            let cs = f.cachestat(0, 0).unwrap();
            assert!(
                cs.dirty > 0,
                "{state:?}: a write leaves dirty pages: {cs:?}"
            );
            if let State::WrittenBack = state {
                f.sync_data().unwrap();
                let cs = f.cachestat(0, 0).unwrap();
                assert_eq!(cs.dirty, 0, "{state:?}: {cs:?}");
            }
        }
    }
}

// ---- partial folios and EOF -----------------------------------------------------

#[test]
fn a_write_across_new_and_cached_small_folios_lands_every_byte_in_place() {
    // A write's copy is one per run of folios adjacent in the arena: new
    // folios of one batch are, cached ones scattered among them are not
    // (every third page read first, so the batch's folios fill the gaps
    // around them). Offsets inside pages at both ends, and a piece longer
    // than the cache's piece size, check the runs' edges.
    for max_folio in [PAGE, 16 * KIB] {
        let data = nonzero_bytes(3 * MIB, 7);
        let tmp = TempPath::with_data("runs", &data);
        let c = TestCache::new()
            .capacity(8 * MIB)
            .max_folio(max_folio)
            .no_readahead()
            .build();
        let f = open_rw(&c, &tmp.path);
        let mut model = Model { data };
        for page in (0..model.data.len() / PAGE).step_by(3) {
            let off = (page * PAGE) as u64;
            assert_same(
                "caching read",
                &read_vec(&f, off, 1).unwrap(),
                model.read(off, 1),
            );
        }
        for (off, len) in [(100, 2 * MIB + 5000), (PAGE as u64 * 7 + 1, 300 * KIB)] {
            let buf = nonzero_bytes(len, off ^ 0x5a);
            f.write_all_at(&buf, off).unwrap();
            model.write(off, &buf);
            assert_same("read after the write", &read_all(&f), &model.data);
        }
        f.sync_all().unwrap();
        assert_same("the file after sync", &disk(&tmp.path), &model.data);
    }
}

#[test]
fn a_partial_folio_write_reads_the_rest_of_the_folio_first() {
    for max_folio in [PAGE, 64 * KIB] {
        let data = nonzero_bytes(256 * KIB, 1);
        let tmp = TempPath::with_data("partial", &data);
        let c = TestCache::new()
            .capacity(4 * MIB)
            .max_folio(max_folio)
            .no_readahead()
            .build();
        let f = open_rw(&c, &tmp.path);
        let mut model = Model { data };
        // 10 bytes in the middle of an uncached page of a large folio's range.
        let off = 64 * KIB as u64 + 5 * P + 1000;
        f.write_all_at(b"0123456789", off).unwrap();
        model.write(off, b"0123456789");
        let what = format!("max folio {max_folio}");
        // The whole page and the whole (large) folio around it.
        let page = off / P * P;
        assert_same(
            &format!("{what}: the page written in"),
            &read_vec(&f, page, PAGE).unwrap(),
            model.read(page, PAGE),
        );
        let fstart = off / max_folio as u64 * max_folio as u64;
        assert_same(
            &format!("{what}: the folio written in"),
            &read_vec(&f, fstart, max_folio).unwrap(),
            model.read(fstart, max_folio),
        );
        f.sync_data().unwrap();
        assert_same(
            &format!("{what}: on disk after sync"),
            &disk(&tmp.path),
            &model.data,
        );
        // Evicted and read again from disk.
        c.shrink(u64::MAX);
        assert_same(
            &format!("{what}: after eviction"),
            &read_all(&f),
            &model.data,
        );
    }
}

#[test]
fn a_write_past_eof_inside_the_last_folio_extends_and_the_gap_reads_zeros() {
    let data = nonzero_bytes(5000, 2);
    for cached_first in [false, true] {
        let tmp = TempPath::with_data("past-eof", &data);
        let c = TestCache::new().capacity(MIB).max_folio(64 * KIB).build();
        let f = open_rw(&c, &tmp.path);
        if cached_first {
            // The last folio is cached, its bytes past EOF zero.
            assert_eq!(read_all(&f), data);
        }
        let buf = nonzero_bytes(100, 3);
        f.write_all_at(&buf, 6000).unwrap();
        assert_eq!(f.len(), 6100, "cached first: {cached_first}");
        let mut model = Model { data: data.clone() };
        model.write(6000, &buf);
        let what = format!("cached first: {cached_first}");
        assert!(
            read_vec(&f, 5000, 1000).unwrap().iter().all(|&b| b == 0),
            "{what}: the gap [5000, 6000) reads as zeros"
        );
        assert_same(&what, &read_all(&f), &model.data);
        f.sync_data().unwrap();
        assert_same(&format!("{what}: on disk"), &disk(&tmp.path), &model.data);
    }
}

#[test]
fn a_write_folios_past_eof_extends_and_the_whole_gap_reads_zeros() {
    let data = nonzero_bytes(5000, 4);
    let tmp = TempPath::with_data("far-eof", &data);
    let c = TestCache::new()
        .capacity(512 * KIB)
        .max_folio(64 * KIB)
        .build();
    let f = open_rw(&c, &tmp.path);
    let far = 10 * MIB as u64 + 123;
    let buf = nonzero_bytes(7000, 5);
    f.write_all_at(&buf, far).unwrap();
    assert_eq!(f.len(), far + 7000);
    // The gap is bigger than the cache: read it in pieces.
    let mut off = 5000u64;
    while off < far {
        let n = (far - off).min(300 * KIB as u64) as usize;
        let got = read_vec(&f, off, n).unwrap();
        assert_eq!(got.len(), n);
        if let Some(i) = got.iter().position(|&b| b != 0) {
            panic!(
                "byte {} of the gap is {:#x}, not zero",
                off + i as u64,
                got[i]
            );
        }
        off += n as u64;
    }
    assert_eq!(read_vec(&f, far, 7000).unwrap(), buf);
    assert_eq!(read_vec(&f, 0, 5000).unwrap(), data);
    f.sync_all().unwrap();
    let mut model = Model { data };
    model.write(far, &buf);
    assert_same("on disk", &disk(&tmp.path), &model.data);
}

#[test]
fn a_read_past_the_new_eof_returns_zero_bytes_and_at_eof_is_short() {
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let tmp = TempPath::new("short");
    let f = open_rw(&c, &tmp.path);
    assert_eq!(f.len(), 0);
    f.write_all_at(&[7u8; 3000], 1000).unwrap();
    assert_eq!(f.len(), 4000);
    let mut buf = vec![0xAAu8; 8192];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 4000);
    assert!(buf[..1000].iter().all(|&b| b == 0));
    assert!(buf[1000..4000].iter().all(|&b| b == 7));
    assert_eq!(f.read_at(&mut buf, 4000).unwrap(), 0);
    assert_eq!(f.read_at(&mut buf, 1 << 30).unwrap(), 0);
}

// ---- set_len ------------------------------------------------------------------------

#[test]
fn set_len_shrink_then_grow_reads_zeros_past_the_old_end_in_every_state() {
    for max_folio in [PAGE, 64 * KIB] {
        for state in STATES {
            let data = nonzero_bytes(3 * PAGE + 100 + 64 * KIB, 6);
            let tmp = TempPath::with_data("shrink-grow", &data);
            let c = TestCache::new()
                .capacity(4 * MIB)
                .max_folio(max_folio)
                .build();
            let f = open_rw(&c, &tmp.path);
            let mut model = Model { data };
            put_in_state(&f, &model, state);
            let what = format!("{state:?}, max folio {max_folio}");
            // Shrink into the middle of a page (and of a large folio).
            f.set_len(5000).unwrap();
            model.set_len(5000);
            assert_eq!(f.len(), 5000, "{what}");
            assert_same(&format!("{what}: after shrink"), &read_all(&f), &model.data);
            // Grow past the old end: everything past 5000 reads as zeros.
            let grown = 4 * P + 100 + 64 * KIB as u64;
            f.set_len(grown).unwrap();
            model.set_len(grown);
            assert_eq!(f.len(), grown, "{what}");
            let got = read_all(&f);
            if let Some(i) = got[5000..].iter().position(|&b| b != 0) {
                panic!(
                    "{what}: stale byte {:#x} at {} after shrink to 5000 and grow",
                    got[5000 + i],
                    5000 + i
                );
            }
            assert_same(&format!("{what}: after grow"), &got, &model.data);
            f.sync_all().unwrap();
            assert_same(&format!("{what}: on disk"), &disk(&tmp.path), &model.data);
            // And from disk again, not from the cache.
            drop(f);
            let c2 = TestCache::new()
                .capacity(4 * MIB)
                .max_folio(max_folio)
                .build();
            let f2 = open_rw(&c2, &tmp.path);
            assert_same(&format!("{what}: reopened"), &read_all(&f2), &model.data);
        }
    }
}

#[test]
fn set_len_shrink_of_a_memory_backing_truncates_it() {
    let data = nonzero_bytes(40_000, 7);
    let b = Arc::new(FaultyBacking::new(MemBacking::with_data(data.clone())));
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let f = c.open_backing(b.clone()).unwrap();
    assert!(f.is_writable(), "open_backing files are writable");
    f.write_all_at(&[1u8; 1000], 30_000).unwrap();
    f.set_len(12_345).unwrap();
    f.sync_all().unwrap();
    assert_same(
        "backing after shrink",
        &b.inner().contents().unwrap(),
        &data[..12_345],
    );
}

// ---- punch_hole ----------------------------------------------------------------------

#[test]
fn punch_hole_at_unaligned_offsets_zeroes_exactly_the_range_in_every_state() {
    let size = 200 * KIB + 77;
    let holes: [(u64, u64); 6] = [
        (1000, 10),                  // inside one page
        (4000, 200),                 // across a page boundary
        (5000, 70_000),              // across large folios
        (65_536 - 1, 2),             // across a 64 KiB folio boundary
        (8 * P, 16 * P),             // aligned whole pages
        (size as u64 - 300, 10_000), // across EOF: the size stays
    ];
    for max_folio in [PAGE, 64 * KIB] {
        for state in STATES {
            for &(off, len) in &holes {
                let data = nonzero_bytes(size, off ^ len);
                let tmp = TempPath::with_data("punch", &data);
                let c = TestCache::new()
                    .capacity(4 * MIB)
                    .max_folio(max_folio)
                    .build();
                let f = open_rw(&c, &tmp.path);
                let mut model = Model { data };
                put_in_state(&f, &model, state);
                let what = format!("punch ({off}, {len}), {state:?}, max folio {max_folio}");
                f.punch_hole(off, len).unwrap();
                model.punch(off, len);
                assert_eq!(f.len(), size as u64, "{what}: the size is kept");
                assert_same(&what, &read_all(&f), &model.data);
                f.sync_data().unwrap();
                assert_same(&format!("{what}: on disk"), &disk(&tmp.path), &model.data);
                c.shrink(u64::MAX);
                assert_same(
                    &format!("{what}: evicted, read again"),
                    &read_all(&f),
                    &model.data,
                );
            }
        }
    }
}

#[test]
fn punch_hole_past_eof_changes_nothing() {
    let data = nonzero_bytes(10_000, 8);
    let tmp = TempPath::with_data("punch-past", &data);
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    f.punch_hole(10_000, 1 << 20).unwrap();
    f.punch_hole(1 << 30, 5).unwrap();
    assert_eq!(f.len(), 10_000);
    assert_eq!(read_all(&f), data);
    f.sync_all().unwrap();
    assert_same("on disk", &disk(&tmp.path), &data);
}

#[test]
fn punch_hole_drops_the_cached_folios_inside_the_range() {
    let data = nonzero_bytes(64 * PAGE, 9);
    let tmp = TempPath::with_data("punch-drop", &data);
    let c = TestCache::new()
        .capacity(4 * MIB)
        .max_folio(PAGE)
        .no_readahead()
        .build();
    let f = open_rw(&c, &tmp.path);
    assert_eq!(read_all(&f), data);
    assert_eq!(f.cachestat(0, 0).unwrap().cached, 64);
    // Pages 9..=19 wholly inside; 8 and 20 partly.
    f.punch_hole(8 * P + 1, 12 * P).unwrap();
    let cs = f.cachestat(9 * P, 11 * P).unwrap();
    assert_eq!(
        cs.cached, 0,
        "pages wholly inside the hole are dropped: {cs:?}"
    );
    assert_eq!(cs.evicted, 0, "and leave no shadow: {cs:?}");
}

// ---- figures ------------------------------------------------------------------------

#[test]
fn cachestat_and_stats_count_dirty_pages_and_drop_to_zero_after_sync() {
    let tmp = TempPath::new("figures");
    // No background flushing below the capacity: the counts stay put.
    let c = TestCache::new()
        .capacity(4 * MIB)
        .max_folio(PAGE)
        .quiet()
        .build();
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
fn sync_writes_a_contiguous_dirty_run_as_one_io_and_separate_runs_as_separate_ios() {
    let b = Arc::new(FaultyBacking::new(MemBacking::new()));
    let c = TestCache::new()
        .capacity(4 * MIB)
        .max_folio(PAGE)
        .quiet()
        .build();
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
fn dirty_folios_are_written_back_before_reclaim_evicts_them() {
    let other = nonzero_bytes(4 * MIB, 12);
    let other_tmp = TempPath::with_data("pressure-other", &other);
    let tmp = TempPath::new("pressure-dirty");
    let c = TestCache::new().capacity(MIB).max_folio(64 * KIB).build();
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

// ---- permissions and limits -------------------------------------------------------

#[test]
fn a_file_opened_read_only_refuses_writes() {
    let data = nonzero_bytes(10_000, 14);
    let tmp = TempPath::with_data("ro", &data);
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    for f in [
        c.open(&tmp.path).unwrap(),
        c.open_options().read(true).open(&tmp.path).unwrap(),
    ] {
        assert!(!f.is_writable());
        let e = f.write_at(b"x", 0).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
        let e = f
            .write_at_flags(b"x", 0, WriteFlags::DONTCACHE)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
        assert!(f.set_len(0).is_err(), "set_len on a read-only file");
        assert!(
            f.punch_hole(0, 100).is_err(),
            "punch_hole on a read-only file"
        );
        assert_eq!(f.len(), 10_000);
        assert_eq!(read_all(&f), data);
    }
    assert_eq!(disk(&tmp.path), data);
}

#[test]
fn a_write_ending_past_i64_max_is_file_too_large_and_changes_nothing() {
    let tmp = TempPath::new("too-large");
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    f.write_all_at(b"abc", 0).unwrap();
    let max = i64::MAX as u64;
    for (off, len) in [
        (max, 1usize),
        (max - 1, 2),
        (u64::MAX - 1, 10),
        (1 << 63, 1),
    ] {
        let e = f.write_at(&vec![1u8; len], off).unwrap_err();
        assert_eq!(
            e.kind(),
            ErrorKind::FileTooLarge,
            "write of {len} at {off}: {e}"
        );
    }
    assert_eq!(f.len(), 3);
    assert_eq!(read_all(&f), b"abc");
    let s = c.stats();
    assert_eq!(s.dirty_bytes, P, "only the first page is dirty: {s:?}");
}

#[test]
fn a_memfile_takes_a_write_ending_exactly_at_i64_max() {
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let f = c.memfile("edge", 0).unwrap();
    let last = i64::MAX as u64 - 1;
    f.write_all_at(b"z", last).unwrap();
    assert_eq!(f.len(), i64::MAX as u64);
    assert_eq!(read_vec(&f, last - 2, 10).unwrap(), b"\0\0z");
    assert_eq!(
        f.write_at(b"z", last + 1).unwrap_err().kind(),
        ErrorKind::FileTooLarge
    );
    f.set_len(0).unwrap();
    assert_eq!(c.stats().folios, 0, "set_len(0) frees the memfile's folio");
}

/// A write its filesystem could never hold fails when it is made, with
/// the error the kernel gives a plain `pwrite` at the same place (`EFBIG`
/// past the largest file: 16 TiB on ext4 with 4 KiB blocks), and changes
/// nothing; a write the filesystem holds, far past end of file, is taken.
#[test]
fn a_write_past_the_filesystems_largest_file_fails_at_once_as_the_kernels() {
    use std::os::unix::fs::FileExt;
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let tmp = TempPath::with_data("efbig", b"data");
    let plain = TempPath::new("efbig-plain");
    let kernel = std::fs::File::create(&plain.path).unwrap();
    let f = open_rw(&c, &tmp.path);
    for at in [i64::MAX as u64 - 1, 1 << 50, 17 << 40] {
        let want = kernel.write_at(b"z", at).map_err(|e| e.raw_os_error());
        let got = f.write_at(b"z", at).map_err(|e| e.raw_os_error());
        assert_eq!(got, want, "a 1-byte write at {at}");
        if got.is_err() {
            assert_eq!(f.len(), 4, "a refused write leaves the size");
            assert_eq!(c.stats().dirty_bytes, 0, "a refused write dirties nothing");
        }
    }
    // One the filesystem holds (ext4: 1 GiB is far below its limit).
    let at = 1u64 << 30;
    kernel
        .write_at(b"z", at)
        .expect("the kernel takes a write at 1 GiB");
    f.write_all_at(b"z", at).unwrap();
    f.sync_all().unwrap();
    assert_eq!(std::fs::metadata(&tmp.path).unwrap().len(), at + 1);
    assert_eq!(read_vec(&f, 0, 4).unwrap(), b"data");
}

// ---- uncached writes --------------------------------------------------------------

#[test]
fn an_uncached_write_leaves_none_of_the_folios_it_created_cached() {
    for max_folio in [PAGE, 64 * KIB] {
        let old = nonzero_bytes(32 * PAGE, 15);
        let tmp = TempPath::with_data("dontcache-new", &old);
        let c = TestCache::new()
            .capacity(4 * MIB)
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
    let c = TestCache::new()
        .capacity(4 * MIB)
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
        let c = TestCache::new().capacity(MIB).max_folio(max_folio).build();
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
fn a_plain_write_larger_than_the_cache_succeeds() {
    for max_folio in [PAGE, 64 * KIB] {
        let b = Arc::new(FaultyBacking::new(MemBacking::new()));
        let c = TestCache::new().capacity(MIB).max_folio(max_folio).build();
        let f = c.open_backing(b.clone()).unwrap();
        let data = nonzero_bytes(3 * MIB + 7, 29);
        f.write_all_at(&data, 0).unwrap();
        assert_same("read back", &read_all(&f), &data);
        f.sync_data().unwrap();
        assert_same("backing", &b.inner().contents().unwrap(), &data);
    }
}

#[test]
fn a_cached_write_after_an_uncached_one_is_cached() {
    let tmp = TempPath::new("dontcache-then-cached");
    let c = TestCache::new()
        .capacity(4 * MIB)
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

// ---- OpenOptions -----------------------------------------------------------------

#[test]
fn append_writes_at_the_end_whatever_the_offset() {
    let data = nonzero_bytes(5000, 20);
    let tmp = TempPath::with_data("append", &data);
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let f = c
        .open_options()
        .read(true)
        .append(true)
        .open(&tmp.path)
        .unwrap();
    assert!(f.is_writable(), "append implies write");
    let mut model = Model { data };
    for (i, off) in [0u64, 100, 1 << 20].into_iter().enumerate() {
        let buf = nonzero_bytes(3000 + i, 21 + i as u64);
        assert_eq!(f.write_at(&buf, off).unwrap(), buf.len());
        let end = model.len();
        model.write(end, &buf);
        assert_eq!(f.len(), model.len(), "append {i} at offset {off}");
    }
    assert_same("appended", &read_all(&f), &model.data);
    f.sync_all().unwrap();
    assert_same("on disk", &disk(&tmp.path), &model.data);
}

#[test]
fn create_new_on_an_existing_path_fails_already_exists() {
    let tmp = TempPath::with_data("create-new", b"hello");
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let e = c
        .open_options()
        .write(true)
        .create_new(true)
        .open(&tmp.path)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    assert_eq!(disk(&tmp.path), b"hello", "nothing was touched");
    // On a new path it creates an empty file.
    let fresh = TempPath::new("create-new-fresh");
    let f = c
        .open_options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&fresh.path)
        .unwrap();
    assert_eq!(f.len(), 0);
    assert!(fresh.path.exists());
}

#[test]
fn without_create_a_missing_path_is_not_found() {
    let tmp = TempPath::new("missing");
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let e = c
        .open_options()
        .read(true)
        .write(true)
        .open(&tmp.path)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(!tmp.path.exists());
}

#[test]
fn truncate_empties_an_existing_file() {
    let tmp = TempPath::with_data("truncate", &nonzero_bytes(50_000, 22));
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let f = c
        .open_options()
        .read(true)
        .write(true)
        .truncate(true)
        .open(&tmp.path)
        .unwrap();
    assert_eq!(f.len(), 0);
    assert_eq!(read_vec(&f, 0, 100).unwrap(), b"");
    assert_eq!(disk(&tmp.path).len(), 0, "O_TRUNC empties the file at open");
    f.write_all_at(b"new", 10).unwrap();
    f.sync_all().unwrap();
    assert_eq!(disk(&tmp.path), b"\0\0\0\0\0\0\0\0\0\0new");
}

#[test]
fn mode_sets_the_permissions_of_a_created_file() {
    let tmp = TempPath::new("mode");
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let _f = c
        .open_options()
        .write(true)
        .create(true)
        .mode(0o600)
        .open(&tmp.path)
        .unwrap();
    let mode = std::fs::metadata(&tmp.path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn a_file_opened_write_only_is_writable() {
    let tmp = TempPath::new("wronly");
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let f = c
        .open_options()
        .write(true)
        .create(true)
        .open(&tmp.path)
        .unwrap();
    assert!(f.is_writable());
    f.write_all_at(b"abc", 0).unwrap();
    f.sync_all().unwrap();
    assert_eq!(disk(&tmp.path), b"abc");
}

// ---- memfiles ------------------------------------------------------------------------

#[test]
fn a_memfile_hole_reads_zeros_and_allocates_nothing() {
    let c = TestCache::new().capacity(MIB).max_folio(64 * KIB).build();
    let f = c.memfile("holes", 64 * MIB as u64).unwrap();
    assert!(f.is_memfile());
    assert_eq!(f.len(), 64 * MIB as u64);
    let before = c.stats();
    let mut buf = vec![0xAAu8; MIB];
    for i in 0..64u64 {
        assert_eq!(f.read_at(&mut buf, i * MIB as u64).unwrap(), MIB);
        assert!(
            buf.iter().all(|&b| b == 0),
            "MiB {i} of the hole is not zero"
        );
        buf.fill(0xAA);
    }
    let s = c.stats();
    assert_eq!(
        s.folios, before.folios,
        "reading a hole allocates no folio: {s:?}"
    );
    assert_eq!(s.bytes_cached, before.bytes_cached, "{s:?}");
    assert_eq!(f.cachestat(0, 0).unwrap().cached, 0);
}

#[test]
fn memfile_data_is_never_evicted_by_read_pressure() {
    let other = nonzero_bytes(4 * MIB, 23);
    let tmp = TempPath::with_data("memfile-pressure", &other);
    let c = TestCache::new().capacity(MIB).max_folio(64 * KIB).build();
    let m = c.memfile("keep", 0).unwrap();
    let data = nonzero_bytes(256 * KIB + 17, 24);
    m.write_all_at(&data, 0).unwrap();
    let pages = m.cachestat(0, 0).unwrap().cached;
    let g = c.open(&tmp.path).unwrap();
    for _ in 0..3 {
        assert_same("the other file", &read_all(&g), &other);
    }
    c.shrink(u64::MAX);
    assert_eq!(
        m.cachestat(0, 0).unwrap().cached,
        pages,
        "memfile pages are never reclaimed"
    );
    assert_same("memfile after pressure", &read_all(&m), &data);
}

#[test]
fn writing_more_than_the_capacity_to_a_memfile_fails_storage_full_and_the_cache_recovers() {
    let c = TestCache::new().capacity(MIB).max_folio(64 * KIB).build();
    let m = c.memfile("full", 0).unwrap();
    let chunk = nonzero_bytes(64 * KIB, 25);
    let mut written = 0u64;
    let err = loop {
        match m.write_at(&chunk, written) {
            Ok(n) => {
                assert_eq!(n, chunk.len());
                written += n as u64;
                assert!(
                    written <= MIB as u64,
                    "wrote {written} bytes into a 1 MiB cache"
                );
            }
            Err(e) => break e,
        }
    };
    assert_eq!(err.kind(), ErrorKind::StorageFull, "{err}");
    assert!(written >= MIB as u64 / 2, "only {written} bytes fit");
    // What was acknowledged is there.
    for i in 0..written / chunk.len() as u64 {
        assert_eq!(
            read_vec(&m, i * chunk.len() as u64, chunk.len()).unwrap(),
            chunk,
            "chunk {i}"
        );
    }
    // Another file can still be read once the memfile gives memory back.
    m.punch_hole(0, written / 2).unwrap();
    let data = nonzero_bytes(300 * KIB, 26);
    let tmp = TempPath::with_data("after-full", &data);
    let g = c.open(&tmp.path).unwrap();
    assert_same("another file after StorageFull", &read_all(&g), &data);
    // And the memfile takes writes again.
    m.write_all_at(&chunk, 0).unwrap();
    assert_eq!(read_vec(&m, 0, chunk.len()).unwrap(), chunk);
}

#[test]
fn memfile_set_len_and_punch_hole_free_memory_and_read_zeros() {
    let c = TestCache::new()
        .capacity(4 * MIB)
        .max_folio(64 * KIB)
        .build();
    let m = c.memfile("shrink", 0).unwrap();
    let data = nonzero_bytes(MIB + 999, 27);
    m.write_all_at(&data, 0).unwrap();
    let full = c.stats().bytes_cached;
    assert!(full >= MIB as u64, "{full}");
    // Punch whole large folios and some partial pages.
    m.punch_hole(100, 512 * KIB as u64).unwrap();
    let mut model = Model { data };
    model.punch(100, 512 * KIB as u64);
    assert_same("after punch", &read_all(&m), &model.data);
    assert!(
        c.stats().bytes_cached <= full - 448 * KIB as u64,
        "punching 512 KiB frees the folios inside: {:?}",
        c.stats()
    );
    m.set_len(5000).unwrap();
    model.set_len(5000);
    m.set_len(200_000).unwrap();
    model.set_len(200_000);
    assert_same("after shrink and grow", &read_all(&m), &model.data);
    assert!(
        c.stats().bytes_cached <= 64 * KIB as u64,
        "shrinking to 5000 frees everything past the first folio: {:?}",
        c.stats()
    );
}

#[test]
fn a_memfile_is_separate_from_other_memfiles_of_the_same_name() {
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let a = c.memfile("same", 0).unwrap();
    let b = c.memfile("same", 0).unwrap();
    a.write_all_at(b"aaaa", 0).unwrap();
    assert_eq!(b.len(), 0, "a memfile is not found by name");
    assert_eq!(read_all(&a), b"aaaa");
}

#[test]
fn memfile_clones_and_reopened_handles_share_the_data() {
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let a = c.memfile("shared", 0).unwrap();
    let b = a.clone();
    let r = a.reopen();
    a.write_all_at(b"xyz", 5).unwrap();
    assert_eq!(read_all(&b), b"\0\0\0\0\0xyz");
    assert_eq!(read_all(&r), b"\0\0\0\0\0xyz");
    drop(a);
    r.write_all_at(b"!", 0).unwrap();
    assert_eq!(read_all(&b), b"!\0\0\0\0xyz");
}

#[test]
fn a_memfile_sync_succeeds_and_writes_nothing() {
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let m = c.memfile("sync", 0).unwrap();
    m.write_all_at(&[9u8; 3 * PAGE], 0).unwrap();
    let before = c.stats();
    m.sync_data().unwrap();
    m.sync_all().unwrap();
    c.sync_all().unwrap();
    let s = c.stats();
    assert_eq!(
        s.io_writes, before.io_writes,
        "a memfile has nowhere to write: {s:?}"
    );
    assert_eq!(read_all(&m), vec![9u8; 3 * PAGE]);
}

fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<File>();
    is::<Cache>();
}

// ---- edges -------------------------------------------------------------------------

#[test]
fn an_empty_write_changes_nothing_even_past_eof() {
    let tmp = TempPath::with_data("empty-write", b"hello");
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    assert_eq!(f.write_at(&[], 1 << 20).unwrap(), 0);
    assert_eq!(f.write_at_flags(&[], 3, WriteFlags::DONTCACHE).unwrap(), 0);
    assert_eq!(f.len(), 5, "an empty write does not extend the file");
    assert_eq!(c.stats().dirty_bytes, 0);
    f.punch_hole(1, 0).unwrap();
    assert_eq!(read_all(&f), b"hello", "an empty punch changes nothing");
    f.sync_all().unwrap();
    assert_eq!(disk(&tmp.path), b"hello");
}

#[test]
fn set_len_past_i64_max_fails_and_keeps_the_size() {
    let tmp = TempPath::with_data("set-len-max", b"hello");
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    assert!(f.set_len(i64::MAX as u64 + 1).is_err());
    assert!(f.set_len(u64::MAX).is_err());
    assert_eq!(f.len(), 5);
    assert!(
        f.punch_hole(u64::MAX - 1, 10).is_err(),
        "an overflowing range"
    );
    assert_eq!(read_all(&f), b"hello");
}

#[test]
fn a_read_only_handle_can_sync() {
    let tmp = TempPath::with_data("ro-sync", b"hello");
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let f = c.open(&tmp.path).unwrap();
    f.sync_data().unwrap();
    f.sync_all().unwrap();
    c.sync_all().unwrap();
}

#[test]
fn concurrent_appends_each_land_whole_at_a_distinct_offset() {
    const REC: usize = 1000;
    const PER: usize = 200;
    let tmp = TempPath::new("append-mt");
    let c = TestCache::new()
        .capacity(512 * KIB)
        .max_folio(16 * KIB)
        .build();
    let f = c
        .open_options()
        .read(true)
        .append(true)
        .create(true)
        .open(&tmp.path)
        .unwrap();
    let threads: Vec<_> = (1..=4u8)
        .map(|t| {
            let f = f.clone();
            std::thread::spawn(move || {
                for i in 0..PER {
                    // Every byte of a record says who wrote it.
                    let rec = vec![t.wrapping_mul(16) | (i % 16) as u8; REC];
                    assert_eq!(f.write_at(&rec, 0).unwrap(), REC);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(f.len(), (4 * PER * REC) as u64);
    let check = |what: &str, all: &[u8]| {
        let mut per_thread = [0usize; 5];
        for (k, rec) in all.chunks(REC).enumerate() {
            assert!(
                rec.iter().all(|&b| b == rec[0]),
                "{what}: record {k} at {} is torn",
                k * REC
            );
            let t = (rec[0] / 16) as usize;
            assert!(
                (1..=4).contains(&t),
                "{what}: record {k} has byte {:#x}",
                rec[0]
            );
            per_thread[t] += 1;
        }
        assert_eq!(&per_thread[1..], &[PER; 4], "{what}: records per thread");
    };
    check("cache", &read_all(&f));
    f.sync_all().unwrap();
    check("disk", &disk(&tmp.path));
}

// ---- several handles on one path ------------------------------------------------

#[test]
fn two_opens_of_one_path_in_one_cache_see_each_others_writes() {
    let data = nonzero_bytes(100_000, 30);
    let tmp = TempPath::with_data("two-opens", &data);
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    // A read-only handle first, with the data cached.
    let r = c.open(&tmp.path).unwrap();
    assert_eq!(read_all(&r), data);
    let w = open_rw(&c, &tmp.path);
    let mut model = Model { data };
    w.write_all_at(b"written through w", 5000).unwrap();
    model.write(5000, b"written through w");
    w.write_all_at(b"tail", 100_000).unwrap();
    model.write(100_000, b"tail");
    assert_eq!(
        r.len(),
        model.len(),
        "the read-only handle sees the new size"
    );
    assert_same(
        "the read-only handle sees the writes",
        &read_all(&r),
        &model.data,
    );
    assert!(!r.is_writable(), "and stays read-only");
    assert_eq!(
        r.write_at(b"x", 0).unwrap_err().kind(),
        ErrorKind::PermissionDenied
    );
    // A second writable open shares it too.
    let w2 = open_rw(&c, &tmp.path);
    w2.write_all_at(b"w2", 0).unwrap();
    model.write(0, b"w2");
    assert_same("w sees w2's write", &read_all(&w), &model.data);
    w2.set_len(50_000).unwrap();
    model.set_len(50_000);
    assert_eq!(w.len(), 50_000);
    assert_eq!(r.len(), 50_000);
    drop(w);
    drop(w2);
    // The read-only handle keeps the file open (and its dirty data cached,
    // as the kernel keeps a closed fd's dirty pages); a sync through it
    // writes the file, as fsync on an O_RDONLY fd does.
    r.sync_all().unwrap();
    assert_same(
        "on disk after the writers closed",
        &disk(&tmp.path),
        &model.data,
    );
    assert_same("r at the end", &read_all(&r), &model.data);
}

#[test]
fn an_open_with_truncate_empties_the_file_for_handles_already_open() {
    let data = nonzero_bytes(30_000, 31);
    let tmp = TempPath::with_data("trunc-shared", &data);
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    assert_eq!(read_all(&f), data);
    f.write_all_at(b"dirty", 10).unwrap();
    let _t = c
        .open_options()
        .write(true)
        .truncate(true)
        .open(&tmp.path)
        .unwrap();
    assert_eq!(f.len(), 0, "O_TRUNC through another open empties the file");
    assert_eq!(read_vec(&f, 0, 100).unwrap(), b"");
    f.write_all_at(b"x", 3).unwrap();
    f.sync_all().unwrap();
    assert_eq!(disk(&tmp.path), b"\0\0\0x", "no stale byte comes back");
}

// ---- dirty limits ----------------------------------------------------------------

#[test]
fn a_writer_never_runs_far_past_the_dirty_limit() {
    let limit = 128 * KIB;
    let c = TestCache::new()
        .capacity(4 * MIB)
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
fn the_flusher_writes_back_above_the_background_threshold_without_a_sync() {
    let background = 64 * KIB;
    let c = TestCache::new()
        .capacity(4 * MIB)
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
    assert!(b.stats().writes > 0, "the flusher wrote");
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
    let c = TestCache::new()
        .capacity(4 * MIB)
        .max_folio(16 * KIB)
        .build();
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
fn open_options_refuse_the_combinations_std_refuses() {
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let existing = TempPath::with_data("opts", b"keep");
    let fresh = TempPath::new("opts-fresh");
    // As std::fs::OpenOptions: no access mode; create or truncate without
    // write access.
    let cases: [(&str, foliocache::OpenOptions); 4] = [
        ("nothing set", c.open_options()),
        ("create without write", {
            let mut o = c.open_options();
            o.read(true).create(true);
            o
        }),
        ("create_new without write", {
            let mut o = c.open_options();
            o.read(true).create_new(true);
            o
        }),
        ("truncate without write", {
            let mut o = c.open_options();
            o.read(true).truncate(true);
            o
        }),
    ];
    for (what, o) in cases {
        let std_err = {
            let mut s = std::fs::OpenOptions::new();
            match what {
                "nothing set" => {}
                "create without write" => {
                    s.read(true).create(true);
                }
                "create_new without write" => {
                    s.read(true).create_new(true);
                }
                _ => {
                    s.read(true).truncate(true);
                }
            }
            s.open(&existing.path).unwrap_err().kind()
        };
        for p in [&existing.path, &fresh.path] {
            let e = o.open(p).unwrap_err();
            assert_eq!(e.kind(), std_err, "{what} on {}: {e}", p.display());
        }
    }
    assert_eq!(disk(&existing.path), b"keep");
    assert!(!fresh.path.exists());
}

#[test]
fn dropping_dirty_folios_by_set_len_or_punch_uncounts_them() {
    let c = TestCache::new()
        .capacity(4 * MIB)
        .max_folio(PAGE)
        .quiet()
        .build();
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
fn memfile_data_does_not_throttle_writers_of_other_files() {
    // A memfile's data can never be written back: it must not count
    // against the dirty limit, or every other writer would wait on it.
    let c = TestCache::new()
        .capacity(4 * MIB)
        .max_folio(64 * KIB)
        .build(); // dirty limit 2 MiB
    let m = c.memfile("big", 0).unwrap();
    m.write_all_at(&nonzero_bytes(3 * MIB, 36), 0).unwrap();
    let tmp = TempPath::new("beside-memfile");
    let f = open_rw(&c, &tmp.path);
    let data = nonzero_bytes(256 * KIB, 37);
    let start = std::time::Instant::now();
    let g = f.clone();
    let d = data.clone();
    wcommon::within(
        std::time::Duration::from_secs(10),
        "a write beside a large memfile",
        move || {
            for (i, piece) in d.chunks(16 * KIB).enumerate() {
                g.write_all_at(piece, (i * 16 * KIB) as u64).unwrap();
            }
        },
    );
    assert!(
        start.elapsed() < std::time::Duration::from_secs(5),
        "256 KiB took {:?} beside a 3 MiB memfile",
        start.elapsed()
    );
    f.sync_all().unwrap();
    assert_same("file beside a memfile", &disk(&tmp.path), &data);
    assert_same("the memfile", &read_all(&m), &nonzero_bytes(3 * MIB, 36));
}

#[test]
fn nothing_that_drops_clean_folios_drops_memfile_data() {
    // A memfile's folios are its only copy: uncached reads and writes,
    // DontNeed, NoReuse, shrink and reclaim must all leave them.
    use foliocache::{Advice, ReadFlags};
    let c = TestCache::new()
        .capacity(2 * MIB)
        .max_folio(16 * KIB)
        .build();
    let m = c.memfile("only-copy", 0).unwrap();
    let data = nonzero_bytes(300 * KIB, 38);
    m.write_at_flags(&data, 0, WriteFlags::DONTCACHE).unwrap();
    assert_same("after an uncached write", &read_all(&m), &data);
    let mut buf = vec![0u8; data.len()];
    assert_eq!(
        m.read_at_flags(&mut buf, 0, ReadFlags::DONTCACHE).unwrap(),
        data.len()
    );
    assert_same("an uncached read", &buf, &data);
    m.advise(0, 0, Advice::DontNeed).unwrap();
    assert_same("after DontNeed", &read_all(&m), &data);
    m.advise(0, 0, Advice::NoReuse).unwrap();
    assert_same("after NoReuse (read once)", &read_all(&m), &data);
    assert_same("after NoReuse (read twice)", &read_all(&m), &data);
    c.shrink(u64::MAX);
    assert_same("after shrink", &read_all(&m), &data);
    let pages = m.cachestat(0, 0).unwrap().cached;
    assert_eq!(pages, 75, "300 KiB stays in 75 pages");
}

#[test]
fn dont_need_keeps_dirty_folios_and_drops_clean_ones() {
    use foliocache::Advice;
    let old = nonzero_bytes(32 * PAGE, 39);
    let tmp = TempPath::with_data("dontneed-dirty", &old);
    let c = TestCache::new()
        .capacity(4 * MIB)
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

#[test]
fn a_large_folio_written_in_a_few_places_writes_back_only_those_pages() {
    let old = nonzero_bytes(2 * MIB, 41);
    let b = Arc::new(FaultyBacking::new(MemBacking::with_data(old.clone())));
    let c = TestCache::new()
        .capacity(8 * MIB)
        .max_folio(2 * MIB)
        .quiet()
        .build();
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
fn writes_through_a_buffered_fallback_backing_reach_the_file() {
    // Where a filesystem refuses O_DIRECT the backing falls back to
    // buffered IO; forced here, the write path must give the same file.
    use backing::{FileBacking, FileOptions};
    let old = nonzero_bytes(100_000, 42);
    let tmp = TempPath::with_data("buffered", &old);
    let inner = FileBacking::open(
        &tmp.path,
        &FileOptions::new()
            .read(true)
            .write(true)
            .force_buffered(true),
    )
    .unwrap();
    assert!(!inner.is_direct());
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let f = c.open_backing(inner).unwrap();
    let mut model = Model { data: old };
    let a = nonzero_bytes(70_001, 43);
    f.write_all_at(&a, 12_345).unwrap();
    model.write(12_345, &a);
    f.write_all_at(b"end", 150_000).unwrap();
    model.write(150_000, b"end");
    f.punch_hole(20_000, 30_000).unwrap();
    model.punch(20_000, 30_000);
    f.sync_data().unwrap();
    assert_same("buffered backing after sync", &disk(&tmp.path), &model.data);
    f.set_len(99_999).unwrap();
    model.set_len(99_999);
    f.sync_all().unwrap();
    assert_same("after set_len", &disk(&tmp.path), &model.data);
    c.shrink(u64::MAX);
    assert_same("read back", &read_all(&f), &model.data);
}

#[test]
fn a_path_replaced_on_disk_opens_the_new_file_not_the_open_one() {
    // Opens share a file by its identity (device, inode), not its name.
    let tmp = TempPath::with_data("replaced", b"old file");
    let c = TestCache::new().capacity(MIB).max_folio(16 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    f.write_all_at(b"OLD", 0).unwrap(); // dirty in the cache
    std::fs::remove_file(&tmp.path).unwrap();
    std::fs::write(&tmp.path, b"new file!").unwrap();
    let g = open_rw(&c, &tmp.path);
    assert_eq!(read_all(&g), b"new file!", "the new file, not the open one");
    assert_eq!(read_all(&f), b"OLD file", "the open one keeps its data");
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(
        disk(&tmp.path),
        b"new file!",
        "the old file's writeback went to the old inode"
    );
    // A rename keeps the identity: an open of the new name shares.
    let renamed = TempPath::new("renamed");
    std::fs::rename(&tmp.path, &renamed.path).unwrap();
    g.write_all_at(b"NEW", 0).unwrap();
    let h = open_rw(&c, &renamed.path);
    assert_eq!(
        read_all(&h),
        b"NEW file!",
        "a renamed open file is the same file"
    );
}

#[test]
fn an_uncached_write_into_a_large_folio_leaves_its_other_dirty_pages_dirty() {
    // One 2 MiB folio, page 10 dirty; an uncached write to page 500 writes
    // back its own range: page 10 must still be written by the next sync.
    let old = nonzero_bytes(2 * MIB, 44);
    let b = Arc::new(FaultyBacking::new(MemBacking::with_data(old.clone())));
    let c = TestCache::new()
        .capacity(8 * MIB)
        .max_folio(2 * MIB)
        .quiet()
        .build();
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
fn a_write_a_tebibyte_out_makes_a_sparse_file_of_that_size() {
    use std::os::unix::fs::FileExt;
    let tmp = TempPath::new("sparse-tib");
    let c = TestCache::new().capacity(MIB).max_folio(64 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    let far = (1u64 << 40) - 3;
    f.write_all_at(b"0123456789", far).unwrap();
    assert_eq!(f.len(), far + 10);
    assert_eq!(
        read_vec(&f, far - 5, 100).unwrap(),
        b"\0\0\0\0\x000123456789"
    );
    assert_eq!(read_vec(&f, 1 << 39, 16).unwrap(), vec![0u8; 16]);
    f.sync_all().unwrap();
    let d = std::fs::File::open(&tmp.path).unwrap();
    assert_eq!(d.metadata().unwrap().len(), far + 10);
    let mut buf = [0xAAu8; 15];
    d.read_exact_at(&mut buf, far - 5).unwrap();
    assert_eq!(&buf, b"\0\0\0\0\x000123456789");
    f.set_len(0).unwrap();
    f.sync_all().unwrap();
    assert_eq!(d.metadata().unwrap().len(), 0);
}

#[test]
fn small_writes_into_large_folios_are_not_throttled_below_the_dirty_limit() {
    // 32 writes of 4 KiB into one 2 MiB folio make 128 KiB dirty, under a
    // 256 KiB limit: nobody waits (a count of whole folios would say 64 MiB).
    let old = nonzero_bytes(2 * MIB, 47);
    let b = Arc::new(FaultyBacking::new(MemBacking::with_data(old.clone())));
    let c = TestCache::new()
        .capacity(8 * MIB)
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
