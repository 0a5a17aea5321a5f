//! The file's size and its holes: a write past end of file extends it and
//! the gap reads as zeros; `set_len` shrinks (zeroing the cut part of the
//! last folio) and grows, and `punch_hole` zeroes exactly its range, with
//! the data in every state (uncached, cached clean, dirty, written back);
//! the largest file (`i64::MAX`, and the filesystem's own limit, as the
//! kernel reports it); and, with real threads, readers racing shrink,
//! punch and rewrite (no stale version), writes and reads in a hole while
//! a sync extends the backing (no error).
//!
//! Files are real files on the target's filesystem, checked with `std::fs`
//! after a sync, or memory backings checked with `MemBacking::contents`.
//! The races run 2 s each; `FOLIOCACHE_STRESS_SECS` makes them longer.

// The tests drive and count their own threads with std atomics and locks;
// the shim rule (clippy.toml) is for the crate's protocols.
#![allow(clippy::disallowed_types)]

use std::io::ErrorKind;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use backing::{FaultyBacking, MemBacking};
use foliocache::filemap::FgpFlags;
use foliocache::{Cache, File, WriteFlags};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::write as wcommon;
use test_support::cache::TestCache;
use test_support::TempPath;
use wcommon::{
    assert_same, disk, nonzero_bytes, open_rw, pat, read_all, read_vec, stress_secs, Model, HANG,
    P, PAGE,
};

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

#[test]
fn partial_write_reads_the_rest_and_shrink_zeroes() {
    let c = TestCache::bytes(8 << 20).build();
    let p = TempPath::new("partial-shrink");
    std::fs::write(&p, vec![b'x'; 20000]).unwrap();
    let f = c.open_options().read(true).write(true).open(&p).unwrap();
    f.write_at(b"hello", 5000).unwrap();
    f.set_len(5002).unwrap();
    f.set_len(9000).unwrap();
    let mut back = vec![0u8; 9000];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back[..5000].iter().all(|&b| b == b'x'));
    assert_eq!(&back[5000..5002], b"he");
    assert!(
        back[5002..].iter().all(|&b| b == 0),
        "stale bytes past the old end"
    );
    f.sync_data().unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), back);
}

#[test]
fn punch_hole_zeroes_exactly() {
    let c = TestCache::bytes(8 << 20).build();
    let p = TempPath::new("punch-exact");
    std::fs::write(&p, vec![b'y'; 40000]).unwrap();
    let f = c.open_options().read(true).write(true).open(&p).unwrap();
    f.punch_hole(1000, 20000).unwrap();
    let mut back = vec![0u8; 40000];
    f.read_exact_at(&mut back, 0).unwrap();
    let mut want = vec![b'y'; 40000];
    want[1000..21000].fill(0);
    assert_eq!(back, want);
    f.sync_all().unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), want);
}

#[test]
fn a_write_past_eof_inside_the_last_folio_extends_and_the_gap_reads_zeros() {
    let data = nonzero_bytes(5000, 2);
    for cached_first in [false, true] {
        let tmp = TempPath::with_data("past-eof", &data);
        let c = TestCache::bytes(MIB).max_folio(64 * KIB).build();
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
    let c = TestCache::bytes(512 * KIB).max_folio(64 * KIB).build();
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
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
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

/// A backing whose `set_len` cuts, says so (`cut`), and returns only once
/// `go` is set: the moment between the backing's cut and the rest of a
/// shrink, held.
struct CutThenWait {
    data: MemBacking,
    cut: AtomicBool,
    go: AtomicBool,
}

impl backing::Backing for CutThenWait {
    fn len(&self) -> std::io::Result<u64> {
        self.data.len()
    }
    fn read_blocks(
        &self,
        bufs: &mut [backing::IoBufMut<'_>],
        offset: u64,
    ) -> std::io::Result<usize> {
        self.data.read_blocks(bufs, offset)
    }
    fn write_blocks(&self, bufs: &[backing::IoBuf<'_>], offset: u64) -> std::io::Result<usize> {
        self.data.write_blocks(bufs, offset)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.data.set_len(len)?;
        self.cut.store(true, SeqCst);
        wcommon::wait_until("the test to let the cut return", || self.go.load(SeqCst));
        Ok(())
    }
    fn sync_data(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn sync_all(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn punch_hole(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.data.punch_hole(offset, len)
    }
    fn info(&self) -> backing::BackingInfo {
        self.data.info()
    }
}

#[test]
fn a_read_in_flight_past_a_shrink_ends_at_the_new_size_not_in_zeros() {
    // The last page's read is in flight (its folio in the mapping, locked,
    // not filled: readahead's IO on the engine) when `set_len` cuts the
    // file to 4 pages. The read ends after the backing's cut, so it fills
    // the folio with zeros (past the backing's end); a reader then asks
    // for the page. It must get the page as before the shrink or nothing
    // (end of file), never zeros: the shrink sets the size before the
    // backing is cut, as `truncate_setsize` does, and a hit reads the size
    // again once its folio is uptodate. Cut first, the old size still
    // showed while the cut was under way, and the reader copied zeros.
    const PAGES: u64 = 8;
    let page = PAGE as u64;
    let data = nonzero_bytes((PAGES * page) as usize, 21);
    let c = TestCache::bytes(8 * MIB).max_folio(PAGE).build();
    let b = Arc::new(CutThenWait {
        data: MemBacking::with_data(data.clone()),
        cut: AtomicBool::new(false),
        go: AtomicBool::new(false),
    });
    let f = c.open_backing(b.clone()).unwrap();
    let m = f.mapping();
    let last = PAGES - 1;
    let in_flight = m
        .lock_folio(last, FgpFlags::CREAT | FgpFlags::LOCK)
        .unwrap();
    let got = std::thread::scope(|s| {
        let shrink = s.spawn(|| f.set_len(4 * page));
        wcommon::wait_until("the backing's cut", || b.cut.load(SeqCst));
        drop(m.read_folio(in_flight).unwrap());
        let mut buf = vec![0u8; PAGE];
        let n = f.read_at(&mut buf, last * page).unwrap();
        b.go.store(true, SeqCst);
        shrink.join().unwrap().unwrap();
        buf.truncate(n);
        buf
    });
    let before = &data[(last * page) as usize..];
    assert!(
        got.is_empty() || got == before,
        "page {last} read beside the shrink: {} bytes, neither the page nor end of file \
         (zeros: {})",
        got.len(),
        got.iter().all(|&x| x == 0)
    );
    assert_eq!(f.len(), 4 * page);
    assert_same(
        "after the shrink",
        &read_all(&f),
        &data[..(4 * page) as usize],
    );
}

#[test]
fn an_empty_write_changes_nothing_even_past_eof() {
    let tmp = TempPath::with_data("empty-write", b"hello");
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
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
fn a_write_a_tebibyte_out_makes_a_sparse_file_of_that_size() {
    use std::os::unix::fs::FileExt;
    let tmp = TempPath::new("sparse-tib");
    let c = TestCache::bytes(MIB).max_folio(64 * KIB).build();
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
fn set_len_shrink_then_grow_reads_zeros_past_the_old_end_in_every_state() {
    for max_folio in [PAGE, 64 * KIB] {
        for state in STATES {
            let data = nonzero_bytes(3 * PAGE + 100 + 64 * KIB, 6);
            let tmp = TempPath::with_data("shrink-grow", &data);
            let c = TestCache::bytes(4 * MIB).max_folio(max_folio).build();
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
            let c2 = TestCache::bytes(4 * MIB).max_folio(max_folio).build();
            let f2 = open_rw(&c2, &tmp.path);
            assert_same(&format!("{what}: reopened"), &read_all(&f2), &model.data);
        }
    }
}

#[test]
fn set_len_shrink_of_a_memory_backing_truncates_it() {
    let data = nonzero_bytes(40_000, 7);
    let b = Arc::new(FaultyBacking::new(MemBacking::with_data(data.clone())));
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
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
                let c = TestCache::bytes(4 * MIB).max_folio(max_folio).build();
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
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
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
    let c = TestCache::bytes(4 * MIB)
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

#[test]
fn a_write_ending_past_i64_max_is_file_too_large_and_changes_nothing() {
    let tmp = TempPath::new("too-large");
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
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
fn set_len_past_i64_max_fails_and_keeps_the_size() {
    let tmp = TempPath::with_data("set-len-max", b"hello");
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
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

/// A write its filesystem could never hold fails when it is made, with
/// the error the kernel gives a plain `pwrite` at the same place (`EFBIG`
/// past the largest file: 16 TiB on ext4 with 4 KiB blocks), and changes
/// nothing; a write the filesystem holds, far past end of file, is taken.
#[test]
fn a_write_past_the_filesystems_largest_file_fails_at_once_as_the_kernels() {
    use std::os::unix::fs::FileExt;
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
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

/// One thread rewrites a region wholly (version `v`), shrinks it, punches
/// holes in it, in a loop; readers read it all the time. A byte a reader
/// gets is zero (a hole, or past a shrink) or from a version that could
/// be there: never from a version older than the last whole rewrite that
/// finished before the read began, never garbage. A syncer and an evictor
/// run beside them.
#[test]
fn readers_racing_shrink_punch_and_rewrite_see_no_stale_version() {
    const SIZE: u64 = 300_000;
    const R: usize = 7; // the region's id in `pat`
    let tmp = TempPath::new("race-shrink");
    let c = TestCache::bytes(512 * KIB).max_folio(16 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    f.write_all_at(&(0..SIZE).map(|o| pat(R, 0, o)).collect::<Vec<u8>>(), 0)
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicU64::new(0));
    let full_done = Arc::new(AtomicU64::new(0));
    let run = stress_secs();
    let setter = {
        let (f, stop, started, full_done) =
            (f.clone(), stop.clone(), started.clone(), full_done.clone());
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(50);
            let mut v = 0u64;
            while !stop.load(SeqCst) {
                match rng.gen_range(0..3) {
                    0 => {
                        v += 1;
                        started.store(v, SeqCst);
                        let bytes: Vec<u8> = (0..SIZE).map(|o| pat(R, v, o)).collect();
                        f.write_all_at(&bytes, 0).unwrap();
                        full_done.store(v, SeqCst);
                    }
                    1 => f.set_len(rng.gen_range(0..=SIZE)).unwrap(),
                    _ => {
                        let off = rng.gen_range(0..SIZE);
                        f.punch_hole(off, rng.gen_range(1..=SIZE - off)).unwrap();
                    }
                }
            }
            v
        })
    };
    let readers: Vec<_> = (0..2u64)
        .map(|i| {
            let (f, stop, started, full_done) =
                (f.clone(), stop.clone(), started.clone(), full_done.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(60 + i);
                let mut buf = vec![0u8; SIZE as usize];
                let mut reads = 0u64;
                while !stop.load(SeqCst) {
                    let off = rng.gen_range(0..SIZE);
                    let len = rng.gen_range(1..=SIZE - off) as usize;
                    let lo = full_done.load(SeqCst);
                    let n = f.read_at(&mut buf[..len], off).unwrap();
                    let hi = started.load(SeqCst);
                    for (k, &b) in buf[..n].iter().enumerate() {
                        let o = off + k as u64;
                        if b != 0 && !(lo..=hi).any(|v| pat(R, v, o) == b) {
                            panic!(
                                "reader {i}: byte {o} is {b:#04x}: not zero and from no \
                                 version in {lo}..={hi}"
                            );
                        }
                    }
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let helper = {
        let (f, c, stop) = (f.clone(), c.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(SeqCst) {
                if i.is_multiple_of(2) {
                    f.sync_data().unwrap();
                } else {
                    c.shrink(64 * KIB as u64);
                }
                i += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    std::thread::sleep(run);
    stop.store(true, SeqCst);
    let joined = wcommon::within(HANG, "the racing threads to stop", move || {
        let v = setter.join();
        let r: Vec<_> = readers.into_iter().map(|h| h.join()).collect();
        let h = helper.join();
        (v, r, h)
    });
    let (v, r, h) = joined;
    let v = v.unwrap_or_else(|p| std::panic::resume_unwind(p));
    let reads: Vec<u64> = r
        .into_iter()
        .map(|x| x.unwrap_or_else(|p| std::panic::resume_unwind(p)))
        .collect();
    h.unwrap_or_else(|p| std::panic::resume_unwind(p));
    eprintln!("race-shrink: {v} rewrites, reads {reads:?}");
    // The end state agrees between the cache and the disk.
    let cached = read_all(&f);
    f.sync_all().unwrap();
    assert_same("race-shrink: disk vs cache", &disk(&tmp.path), &cached);
}

/// The file is grown in the cache (dirty data far past the backing's end)
/// and a syncer keeps writing that back, which extends the backing. A
/// write or a read in the hole between the backing's old end and the far
/// data reads a block the backing does not have yet (zeros): it must not
/// fail because the backing grew between the read and the look at its
/// length.
#[test]
fn partial_writes_and_reads_in_a_hole_while_a_sync_extends_the_backing_do_not_fail() {
    // Without readahead (the reader's own read) and with it (windows read
    // by the IO engine).
    hole_race(
        TestCache::bytes(4 << 20)
            .max_folio(4096)
            .no_readahead()
            .build(),
        stress_secs(),
    );
    hole_race(
        TestCache::bytes(4 << 20).max_folio(4096).build(),
        stress_secs(),
    );
}

fn hole_race(c: Cache, run: Duration) {
    let tmp = TempPath::new("hole-race");
    let f = open_rw(&c, &tmp.path);
    let stop = Arc::new(AtomicBool::new(false));
    let syncer = {
        let (f, stop) = (f.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(SeqCst) {
                f.sync_data().unwrap();
            }
        })
    };
    let start = Instant::now();
    let (mut write_errors, mut read_errors, mut first) = (0, 0, None);
    let mut rounds = 0u64;
    while start.elapsed() < run {
        f.set_len(0).unwrap();
        f.write_all_at(&[1u8; 4096], 1 << 20).unwrap();
        for k in 0..8u64 {
            let at = k * 131_072;
            if let Err(e) = f.write_at(b"0123456789", at + 100) {
                write_errors += 1;
                first.get_or_insert(format!("round {rounds}: write of 10 at {}: {e}", at + 100));
            }
            let mut buf = [0xAAu8; 10];
            match f.read_at(&mut buf, at + 65_536) {
                Ok(n) => assert_eq!(&buf[..n], &[0u8; 10][..n], "a hole reads as zeros"),
                Err(e) => {
                    read_errors += 1;
                    first.get_or_insert(format!("round {rounds}: read at {}: {e}", at + 65_536));
                }
            }
        }
        rounds += 1;
    }
    stop.store(true, SeqCst);
    wcommon::within(HANG, "the syncer to stop", move || syncer.join())
        .unwrap_or_else(|p| std::panic::resume_unwind(p));
    assert_eq!(
        (write_errors, read_errors),
        (0, 0),
        "{rounds} rounds; failed writes and reads; the first: {first:?}"
    );
}
