//! `File::collapse_range` and `File::insert_range` (`shift.rs`): the data
//! moves on the backing and in what the cache serves, dirty data included;
//! bad ranges, read-only handles and memory files are refused with nothing
//! changed; a failing writeback or backing leaves the file as it was.

use std::io::ErrorKind;
use std::sync::Arc;

use backing::{Backing, BackingInfo, FaultyBacking, IoBuf, IoBufMut, MemBacking, Op};
use foliocache::filemap::{FgpFlags, FolioFlags};
use foliocache::File;

use crate::common::write::{
    assert_same, disk, nonzero_bytes, open_rw, read_all, wait_until, Model,
};
use test_support::cache::TestCache;
use test_support::TempPath;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const B: u64 = 4096;

/// A cache of `bytes` with folios up to `max_folio` bytes, to finish
/// building.
fn cache(bytes: u64, max_folio: u64) -> TestCache {
    TestCache::bytes(bytes as usize).max_folio(max_folio as usize)
}

/// Shifts `f` and the model the same way; the call must succeed.
fn shift(f: &File, m: &mut Model, insert: bool, off: u64, len: u64) {
    let r = if insert {
        f.insert_range(off, len)
    } else {
        f.collapse_range(off, len)
    };
    r.unwrap_or_else(|e| panic!("shift (insert {insert}) of {len} at {off}: {e}"));
    assert!(
        m.shift(insert, off, len),
        "the model refuses what the file did"
    );
    assert_eq!(f.len(), m.len(), "len() after the shift");
}

#[test]
fn a_collapse_inside_a_large_clean_folio_moves_the_data_behind_it() {
    // One aligned 1 MiB write makes large folios; synced, they are clean
    // and stay cached across the collapse point.
    let tmp = TempPath::with_data("shift-large", &[]);
    let c = cache(16 * MIB, 2 * MIB).build();
    let f = open_rw(&c, &tmp.path);
    let mut m = Model::default();
    let data = nonzero_bytes(MIB as usize, 1);
    f.write_all_at(&data, 0).unwrap();
    m.write(0, &data);
    f.sync_all().unwrap();
    assert_eq!(f.cachestat(0, MIB).unwrap().cached, MIB / B);
    shift(&f, &mut m, false, 8 * KIB, B);
    assert_same("read after a collapse at 8 KiB", &read_all(&f), &m.data);
    shift(&f, &mut m, true, 12 * KIB, 3 * B);
    assert_same("read after an insert at 12 KiB", &read_all(&f), &m.data);
    assert_same("the backing file", &disk(&tmp.path), &m.data);
}

#[test]
fn dirty_data_on_both_sides_is_written_and_moved() {
    let tmp = TempPath::with_data("shift-dirty", &nonzero_bytes(3 * MIB as usize, 2));
    // No background writeback: what is dirty stays so until the shift.
    let c = cache(32 * MIB, 256 * KIB).quiet().build();
    let f = open_rw(&c, &tmp.path);
    let mut m = Model {
        data: disk(&tmp.path),
    };
    // Cache part of it, dirty bits before, across and after the shifts
    // (unaligned, one extending the file).
    let _ = read_all(&f);
    for (off, len, seed) in [
        (5000, 70_000, 3),
        (1_000_000, 9, 4),
        (2 * MIB - 7, 200_000, 5),
        (3 * MIB + 100, 5000, 6),
    ] {
        let buf = nonzero_bytes(len, seed);
        f.write_all_at(&buf, off).unwrap();
        m.write(off, &buf);
    }
    assert!(c.stats().dirty_bytes > 0);
    shift(&f, &mut m, false, 64 * KIB, 100 * B);
    assert_same("after a collapse", &read_all(&f), &m.data);
    shift(&f, &mut m, true, 2 * MIB, 17 * B);
    assert_same("after an insert", &read_all(&f), &m.data);
    // The holes read as zeros through the cache and on the backing.
    let buf = nonzero_bytes(300, 7);
    f.write_all_at(&buf, 2 * MIB + 5).unwrap();
    m.write(2 * MIB + 5, &buf);
    f.sync_all().unwrap();
    assert_same("the backing file after sync", &disk(&tmp.path), &m.data);
    drop(f);
    // A new cache reads what the backing holds.
    let f = open_rw(&cache(8 * MIB, 64 * KIB).build(), &tmp.path);
    assert_same("through a new cache", &read_all(&f), &m.data);
}

#[test]
fn bad_ranges_are_refused_and_change_nothing() {
    let tmp = TempPath::with_data("shift-bad", &nonzero_bytes(64 * KIB as usize, 8));
    let c = cache(4 * MIB, 64 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    let mut m = Model {
        data: disk(&tmp.path),
    };
    let buf = nonzero_bytes(10, 9);
    f.write_all_at(&buf, 20_000).unwrap();
    m.write(20_000, &buf);
    let size = m.len();
    for (insert, off, len, why) in [
        (false, 100, B, "an unaligned offset"),
        (false, B, 100, "an unaligned length"),
        (false, B, 0, "an empty range"),
        (false, size - B, B, "a collapse that reaches end of file"),
        (false, 0, size, "a collapse of the whole file"),
        (false, size, B, "a collapse past end of file"),
        (true, size, B, "an insert at end of file"),
        (true, size + B, B, "an insert past end of file"),
        (true, B, 0, "an empty insert"),
    ] {
        let r = if insert {
            f.insert_range(off, len)
        } else {
            f.collapse_range(off, len)
        };
        let e = r.expect_err(why);
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{why}: {e}");
        assert_eq!(f.len(), size, "{why}: len()");
        assert_same(why, &read_all(&f), &m.data);
    }
    // Still dirty (a refused shift writes nothing back), then durable.
    assert!(c.stats().dirty_bytes > 0, "a refused shift wrote back");
    f.sync_all().unwrap();
    assert_same("the backing file", &disk(&tmp.path), &m.data);
    // An insert past the largest file size.
    let e = f.insert_range(0, u64::MAX / B * B).unwrap_err();
    assert!(
        e.raw_os_error() == Some(libc::EFBIG) || e.kind() == ErrorKind::InvalidInput,
        "{e}"
    );
}

#[test]
fn read_only_handles_and_memory_files_are_refused() {
    let tmp = TempPath::with_data("shift-ro", &nonzero_bytes(64 * KIB as usize, 10));
    let c = cache(4 * MIB, 64 * KIB).build();
    let ro = c.open(&tmp.path).unwrap();
    assert_eq!(
        ro.collapse_range(0, B).unwrap_err().kind(),
        ErrorKind::PermissionDenied
    );
    assert_eq!(
        ro.insert_range(0, B).unwrap_err().kind(),
        ErrorKind::PermissionDenied
    );
    let mem = c.memfile("shift-mem", 64 * KIB).unwrap();
    mem.write_all_at(&[1; 100], 0).unwrap();
    for e in [
        mem.collapse_range(0, B).unwrap_err(),
        mem.insert_range(0, B).unwrap_err(),
    ] {
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    }
    assert_eq!(mem.len(), 64 * KIB);
}

/// A shift through a cache over a fault-injecting memory backing, with
/// some of the file dirty.
fn faulty_file() -> (
    foliocache::Cache,
    File,
    Arc<FaultyBacking<MemBacking>>,
    Model,
) {
    let c = cache(8 * MIB, 64 * KIB).quiet().build();
    let b = Arc::new(FaultyBacking::new(MemBacking::new()));
    let f = c.open_backing(b.clone()).unwrap();
    let mut m = Model::default();
    let data = nonzero_bytes(MIB as usize, 11);
    f.write_all_at(&data, 0).unwrap();
    m.write(0, &data);
    f.sync_all().unwrap();
    let buf = nonzero_bytes(5000, 12);
    f.write_all_at(&buf, 300_000).unwrap();
    m.write(300_000, &buf);
    (c, f, b, m)
}

#[test]
fn a_failing_backing_shift_leaves_the_file_as_it_was() {
    let (_c, f, b, mut m) = faulty_file();
    b.fail_nth(Op::ShiftRange, 1, libc::EIO);
    let e = f.collapse_range(64 * KIB, 4 * B).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    assert_same("after the failed collapse", &read_all(&f), &m.data);
    assert_same("the backing", &b.inner().contents().unwrap(), &m.data);
    // The next one goes through, and the backing agrees.
    shift(&f, &mut m, false, 64 * KIB, 4 * B);
    assert_same("after the collapse", &read_all(&f), &m.data);
    f.sync_all().unwrap();
    assert_same("the backing after", &b.inner().contents().unwrap(), &m.data);
}

/// A memory backing whose `collapse_range` moves the data and then
/// reports a failure: a filesystem should not, and the cache must not
/// count on it.
struct MovesThenFails(MemBacking);

impl Backing for MovesThenFails {
    fn len(&self) -> std::io::Result<u64> {
        self.0.len()
    }
    fn read_blocks(&self, bufs: &mut [IoBufMut<'_>], offset: u64) -> std::io::Result<usize> {
        self.0.read_blocks(bufs, offset)
    }
    fn write_blocks(&self, bufs: &[IoBuf<'_>], offset: u64) -> std::io::Result<usize> {
        self.0.write_blocks(bufs, offset)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn sync_all(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn punch_hole(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.0.punch_hole(offset, len)
    }
    fn collapse_range(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.0.collapse_range(offset, len)?;
        Err(std::io::Error::from_raw_os_error(libc::EIO))
    }
    fn info(&self) -> BackingInfo {
        self.0.info()
    }
}

#[test]
fn after_a_backing_error_the_cache_serves_what_the_backing_holds() {
    let c = cache(8 * MIB, 64 * KIB).build();
    let b = Arc::new(MovesThenFails(MemBacking::new()));
    let f = c.open_backing(b.clone()).unwrap();
    let mut m = Model::default();
    let data = nonzero_bytes(MIB as usize, 13);
    f.write_all_at(&data, 0).unwrap();
    m.write(0, &data);
    let _ = read_all(&f);
    let e = f.collapse_range(100 * KIB, 5 * B).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    // The backing moved the data: so does what the cache serves.
    assert!(m.shift(false, 100 * KIB, 5 * B));
    assert_eq!(f.len(), m.len());
    assert_same("after the failed collapse", &read_all(&f), &m.data);
    // (What is dirty before the offset stayed so.)
    f.sync_all().unwrap();
    assert_same("the backing", &b.0.contents().unwrap(), &m.data);
}

#[test]
fn a_failing_writeback_stops_the_shift_before_anything_moves() {
    let (_c, f, b, m) = faulty_file();
    b.fail_nth(Op::Write, 1, libc::ENOSPC);
    let e = f.insert_range(128 * KIB, B).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    assert_eq!(b.stats().shifts, 0, "the backing was asked to move data");
    assert_same("after the failed insert", &read_all(&f), &m.data);
    // The data is still there, dirty, and a sync writes it. (The first
    // sync reports the failed writeback once more, as the kernel's errseq
    // does to every descriptor that has not seen it; the data is retried.)
    if let Err(e) = f.sync_all() {
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
        f.sync_all().unwrap();
    }
    assert_same(
        "the backing after a sync",
        &b.inner().contents().unwrap(),
        &m.data,
    );
}

/// Page `i` of the stress file: the number `i + 1` in every 8-byte word
/// (0 is a hole).
fn tagged_pages(n: u64) -> Vec<u8> {
    (0..n)
        .flat_map(|i| std::iter::repeat_n(i + 1, B as usize / 8))
        .flat_map(u64::to_le_bytes)
        .collect()
}

/// The distinct tags a page read from the stress file holds, in order.
fn tags_of(page: &[u8]) -> Vec<u64> {
    let mut tags: Vec<u64> = page
        .chunks(8)
        .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
        .collect();
    tags.sort_unstable();
    tags.dedup();
    tags
}

#[test]
fn a_read_in_flight_when_a_shift_starts_ends_before_the_data_moves() {
    // The last page's read is in flight when the shift starts: its folio
    // is in the mapping, locked, not filled (the filemap's view of a
    // readahead IO on the engine). An earlier folio held locked stops the
    // shift where it waits for it; then the read ends, and a reader copies
    // the page. It must get the page from before the shift (its tag) or
    // after it (nothing past a collapse's end; an insert's page before
    // it), never zeros: the shift drops the folios, waiting for reads in
    // flight, before the backing moves (`shift.rs`). Dropped after the
    // move, the read ended after it and filled the folio from past the
    // backing's new end, and the reader copied zeros.
    const PAGES: u64 = 16;
    let (k, held, last) = (4, 6, PAGES - 1);
    for insert in [false, true] {
        let c = cache(8 * MIB, B).build();
        let f = c
            .open_backing(MemBacking::with_data(tagged_pages(PAGES)))
            .unwrap();
        let m = f.mapping();
        let mut model = Model {
            data: tagged_pages(PAGES),
        };
        let hold = m
            .lock_folio(held, FgpFlags::CREAT | FgpFlags::LOCK)
            .unwrap();
        let in_flight = m
            .lock_folio(last, FgpFlags::CREAT | FgpFlags::LOCK)
            .unwrap();
        let page = std::thread::scope(|s| {
            let shifter = s.spawn(|| {
                if insert {
                    f.insert_range(k * B, B)
                } else {
                    f.collapse_range(k * B, B)
                }
            });
            wait_until("the shift to wait for the held folio", || {
                hold.test(FolioFlags::WAITERS)
            });
            drop(m.read_folio(in_flight).unwrap());
            let mut buf = vec![0u8; B as usize];
            let n = f.read_at(&mut buf, last * B).unwrap();
            drop(m.read_folio(hold).unwrap());
            shifter.join().unwrap().unwrap();
            buf.truncate(n);
            buf
        });
        let before = &tagged_pages(PAGES)[(last * B) as usize..];
        let after: &[u8] = if insert {
            &tagged_pages(PAGES)[((last - 1) * B) as usize..(last * B) as usize]
        } else {
            &[]
        };
        assert!(
            page == before || page == after,
            "insert {insert}: page {last} read beside the shift is neither before \
             nor after it (tags {:?})",
            page.chunks(8).take(2).collect::<Vec<_>>()
        );
        assert!(model.shift(insert, k * B, B));
        assert_same(
            &format!("insert {insert}: after"),
            &read_all(&f),
            &model.data,
        );
    }
}

#[test]
fn reads_beside_shifts_see_each_page_before_or_after() {
    // One thread collapses a block out and inserts it back (a hole, then
    // its page written again), over and over at random places, and checks
    // the whole file after each round; two threads read pages and 64 KiB
    // runs meanwhile. Page `i` holds its tag `i + 1`; while block `k <= i`
    // is out, the next page's tag `i + 2`; while `i == k` is a hole, zeros,
    // or zeros and its tag while its page is written back into the hole (a
    // read beside a write may see both). A page is never another's, never
    // stale from a place the data left.
    use std::sync::atomic::Ordering::SeqCst;
    const PAGES: u64 = 256;
    let tmp = TempPath::with_data("shift-stress", &tagged_pages(PAGES));
    let c = cache(8 * MIB, 64 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    // The shifter's round (odd while a block is out or a hole is open) and
    // where; a reader that saw one round throughout knows which pages may
    // be moved or zero.
    #[allow(clippy::disallowed_types)] // a test's counters, no protocol
    let (round, hole) = (
        std::sync::atomic::AtomicU64::new(0),
        std::sync::atomic::AtomicU64::new(0),
    );
    let rounds = if cfg!(debug_assertions) { 40 } else { 300 };
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (f, round, hole) = (f.reopen(), &round, &hole);
            s.spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ t;
                let mut buf = vec![0u8; 64 * KIB as usize];
                let mut reads = 0u64;
                loop {
                    let r0 = round.load(SeqCst);
                    if r0 == u64::MAX && reads >= 100 {
                        break;
                    }
                    let k = hole.load(SeqCst);
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let first = x % PAGES;
                    let len = if x & 1 == 0 { B } else { 64 * KIB };
                    let got = f.read_at(&mut buf[..len as usize], first * B).unwrap();
                    // One round throughout: the hole and the moved pages are
                    // where `k` says.
                    let known = round.load(SeqCst) == r0 && r0 != u64::MAX;
                    for (j, page) in buf[..got - got % B as usize].chunks(B as usize).enumerate() {
                        let i = first + j as u64;
                        let tags = tags_of(page);
                        let moved = !known || (r0 % 2 == 1 && i >= k);
                        let open = !known || (r0 % 2 == 1 && i == k);
                        let ok = match tags[..] {
                            [t] => t == i + 1 || (moved && t == i + 2) || (open && t == 0),
                            [0, t] => open && t == i + 1,
                            _ => false,
                        };
                        assert!(
                            ok,
                            "page {i}: tags {tags:?} (round {r0}, block {k}, known {known})"
                        );
                    }
                    reads += 1;
                }
            });
        }
        let mut x = 12345u64;
        let want = tagged_pages(PAGES);
        for n in 0..rounds {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = x % (PAGES - 1);
            hole.store(k, SeqCst);
            round.store(2 * n + 1, SeqCst);
            f.collapse_range(k * B, B).unwrap();
            f.insert_range(k * B, B).unwrap();
            f.write_all_at(&want[(k * B) as usize..((k + 1) * B) as usize], k * B)
                .unwrap();
            round.store(2 * n + 2, SeqCst);
            assert_same(&format!("round {n}, block {k}"), &read_all(&f), &want);
        }
        round.store(u64::MAX, SeqCst);
    });
    f.sync_all().unwrap();
    assert_same("the backing file", &disk(&tmp.path), &tagged_pages(PAGES));
}

#[test]
fn a_read_across_a_collapse_and_an_insert_never_serves_the_zeros_past_the_shorter_end() {
    // The end of a small file over a memory backing (shifts take no
    // syscall, so a reader is often overtaken by both): one thread
    // collapses the last block but one out and inserts it back, over and
    // over; readers read the last two pages. A read that gathered its
    // folios while the file was a block shorter may hold a folio filled
    // then (zeros past that end) and, the insert done, see the longer size
    // again: it must look again (`shift.rs`), never serve those zeros as
    // the last page. (Six readers on a few cores: a reader preempted
    // between its lookup and its second load of the size is the race;
    // without the look-again this failed about one run in six.) The last page is always its own; the one before it
    // is its own, its successor's (the block out), a hole or a hole
    // being written.
    #[allow(clippy::disallowed_types)] // a test's flag, no protocol
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    const PAGES: u64 = 16;
    let (k, last) = (PAGES - 2, PAGES - 1);
    let c = cache(8 * MIB, 64 * KIB).build();
    let f = c
        .open_backing(MemBacking::with_data(tagged_pages(PAGES)))
        .unwrap();
    let want = tagged_pages(PAGES);
    let page_k = &want[(k * B) as usize..(last * B) as usize];
    #[allow(clippy::disallowed_types)] // as above
    let done = AtomicBool::new(false);
    let rounds = if cfg!(debug_assertions) { 300 } else { 6000 };
    std::thread::scope(|s| {
        for t in 0..6u64 {
            let (f, done) = (f.reopen(), &done);
            s.spawn(move || {
                let mut buf = vec![0u8; 2 * B as usize];
                let mut reads = 0u64;
                while !done.load(SeqCst) || reads < 100 {
                    let at = if (reads + t).is_multiple_of(2) {
                        k
                    } else {
                        last
                    };
                    let got = f.read_at(&mut buf, at * B).unwrap();
                    for (j, page) in buf[..got - got % B as usize].chunks(B as usize).enumerate() {
                        let i = at + j as u64;
                        let tags = tags_of(page);
                        let ok = match tags[..] {
                            [t] if i == last => t == i + 1,
                            [t] => t == i + 1 || t == i + 2 || t == 0,
                            [0, t] => i == k && t == i + 1,
                            _ => false,
                        };
                        assert!(ok, "page {i}: tags {tags:?} (read {reads} at page {at})");
                    }
                    reads += 1;
                }
            });
        }
        for _ in 0..rounds {
            f.collapse_range(k * B, B).unwrap();
            f.insert_range(k * B, B).unwrap();
            f.write_all_at(page_k, k * B).unwrap();
        }
        done.store(true, SeqCst);
    });
    assert_same("the file", &read_all(&f), &want);
}
