//! FaultyBacking: every rule, its counters, and that it is deterministic.

use crate::common;

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{aligned_from, filled, random_bytes, TempDir, B};
use foliocache_backing::{
    Backing, DataPath, FaultyBacking, FileBacking, FileOptions, MemBacking, Op, BLOCK,
};

fn faulty(blocks: usize) -> (FaultyBacking<MemBacking>, Vec<u8>) {
    let data = random_bytes(blocks as u64, blocks * BLOCK);
    (
        FaultyBacking::new(MemBacking::with_data(data.clone())),
        data,
    )
}

fn read(b: &dyn Backing, block: u64, blocks: usize) -> io::Result<Vec<u8>> {
    let mut buf = filled(blocks * BLOCK, 0xEE);
    let n = b.read_blocks(&mut [buf.io_buf_mut()], block * B)?;
    Ok(buf[..n].to_vec())
}

fn write(b: &dyn Backing, block: u64, byte: u8) -> io::Result<usize> {
    b.write_blocks(&[filled(BLOCK, byte).io_buf()], block * B)
}

fn errno(r: io::Result<impl std::fmt::Debug>) -> i32 {
    r.unwrap_err().raw_os_error().expect("an errno")
}

#[test]
fn without_rules_every_call_passes_through_and_is_counted() {
    let (f, data) = faulty(4);
    assert_eq!(read(&f, 1, 2).unwrap(), &data[BLOCK..3 * BLOCK]);
    write(&f, 4, 1).unwrap();
    f.set_len(5 * B).unwrap();
    f.sync_data().unwrap();
    f.sync_all().unwrap();
    f.punch_hole(0, B).unwrap();
    assert_eq!(f.len().unwrap(), 5 * B);
    let s = f.stats();
    let counts = (
        s.reads,
        s.writes,
        s.syncs,
        s.set_lens,
        s.punch_holes,
        s.len_calls,
    );
    assert_eq!(counts, (1, 1, 2, 1, 1, 1));
    assert_eq!((s.bytes_read, s.bytes_written), (2 * B, B));
    assert_eq!((s.injected_errors, s.short_reads), (0, 0));
    f.reset_stats();
    assert_eq!(f.stats(), foliocache_backing::FaultStats::default());
}

#[test]
fn fail_nth_read_fails_exactly_that_read_once() {
    let (f, _) = faulty(2);
    f.fail_nth_read(3, libc::EIO);
    assert!(read(&f, 0, 1).is_ok());
    assert!(read(&f, 0, 1).is_ok());
    assert_eq!(errno(read(&f, 0, 1)), libc::EIO);
    assert!(read(&f, 0, 1).is_ok(), "one-shot");
    let s = f.stats();
    assert_eq!((s.reads, s.injected_errors, s.bytes_read), (4, 1, 3 * B));
}

#[test]
fn fail_nth_write_fails_and_writes_nothing() {
    let (f, data) = faulty(2);
    f.fail_nth_write(1, libc::EROFS);
    assert_eq!(errno(write(&f, 0, 9)), libc::EROFS);
    assert_eq!(f.inner().contents().unwrap(), data, "inner untouched");
    write(&f, 0, 9).unwrap();
    assert_eq!(f.stats().bytes_written, B);
}

#[test]
fn fail_nth_sync_counts_sync_data_and_sync_all_together() {
    let (f, _) = faulty(1);
    f.fail_nth_sync(2, libc::EIO);
    f.sync_data().unwrap();
    assert_eq!(errno(f.sync_all()), libc::EIO);
    f.sync_all().unwrap();
    f.fail_nth_sync(1, libc::ENOSPC);
    assert_eq!(errno(f.sync_data()), libc::ENOSPC);
}

#[test]
fn fail_nth_covers_set_len_punch_hole_and_len() {
    let (f, _) = faulty(2);
    f.fail_nth(Op::SetLen, 1, libc::EFBIG);
    assert_eq!(errno(f.set_len(1)), libc::EFBIG);
    assert_eq!(
        f.inner().len().unwrap(),
        2 * B,
        "the failed set_len did nothing"
    );
    f.fail_nth(Op::PunchHole, 1, libc::EOPNOTSUPP);
    assert_eq!(errno(f.punch_hole(0, B)), libc::EOPNOTSUPP);
    f.fail_nth(Op::Len, 1, libc::EBADF);
    assert_eq!(errno(f.len()), libc::EBADF);
    assert!(f.is_empty().is_ok());
    assert_eq!(f.stats().injected_errors, 3);
}

#[test]
fn counting_starts_when_the_rule_is_set_and_zero_means_next() {
    let (f, _) = faulty(1);
    for _ in 0..5 {
        read(&f, 0, 1).unwrap();
    }
    f.fail_nth_read(0, libc::EIO);
    assert_eq!(errno(read(&f, 0, 1)), libc::EIO);
}

#[test]
fn a_new_countdown_replaces_the_old_one_and_clear_nth_removes_it() {
    let (f, _) = faulty(1);
    f.fail_nth_read(1, libc::EIO);
    f.fail_nth_read(2, libc::EAGAIN);
    read(&f, 0, 1).unwrap();
    assert_eq!(errno(read(&f, 0, 1)), libc::EAGAIN);
    f.fail_nth_read(1, libc::EIO);
    f.clear_nth(Op::Read);
    read(&f, 0, 1).unwrap();
    // Countdowns of other ops are separate.
    f.fail_nth_write(1, libc::EIO);
    read(&f, 0, 1).unwrap();
    assert!(write(&f, 0, 1).is_err());
}

#[test]
fn fail_from_nth_keeps_failing_until_cleared() {
    let (f, _) = faulty(1);
    f.fail_from_nth(Op::Write, 2, libc::EIO);
    write(&f, 0, 1).unwrap();
    for _ in 0..3 {
        assert_eq!(errno(write(&f, 0, 1)), libc::EIO);
    }
    f.clear_nth(Op::Write);
    write(&f, 0, 1).unwrap();
    assert_eq!(f.stats().injected_errors, 3);
}

#[test]
fn reads_overlapping_a_bad_range_fail_until_cleared() {
    let (f, data) = faulty(8);
    f.fail_reads_in(3 * B + 100, 10, libc::EIO); // inside block 3
    assert_eq!(errno(read(&f, 3, 1)), libc::EIO);
    assert_eq!(errno(read(&f, 0, 8)), libc::EIO, "a read covering it");
    assert_eq!(errno(read(&f, 3, 1)), libc::EIO, "every time");
    assert_eq!(
        read(&f, 0, 3).unwrap(),
        &data[..3 * BLOCK],
        "ends right before"
    );
    assert_eq!(
        read(&f, 4, 2).unwrap(),
        &data[4 * BLOCK..6 * BLOCK],
        "starts after"
    );
    f.fail_reads_in(6 * B, B, libc::ENODATA);
    assert_eq!(errno(read(&f, 5, 2)), libc::ENODATA);
    write(&f, 3, 1).unwrap(); // writes are not affected
    f.clear_read_ranges();
    assert!(read(&f, 0, 8).is_ok());
    assert!(read(&f, 100, 1).is_ok(), "past EOF too");
}

#[test]
fn bad_range_covers_the_requested_range_even_past_eof() {
    let (f, _) = faulty(1);
    f.fail_reads_in(10 * B, B, libc::EIO);
    assert_eq!(errno(read(&f, 10, 1)), libc::EIO);
}

#[test]
fn writes_overlapping_a_bad_range_fail_and_write_nothing() {
    let (f, data) = faulty(4);
    f.fail_writes_in(2 * B, B, libc::EIO);
    let e = f.write_blocks(&[filled(4 * BLOCK, 1).io_buf()], 0);
    assert_eq!(errno(e), libc::EIO);
    assert_eq!(f.inner().contents().unwrap(), data);
    write(&f, 1, 1).unwrap();
    write(&f, 3, 1).unwrap();
    f.clear_write_ranges();
    write(&f, 2, 1).unwrap();
}

#[test]
fn short_read_returns_fewer_bytes_than_available_once() {
    let (f, data) = faulty(8);
    f.short_read_nth(2, 100);
    assert_eq!(read(&f, 0, 4).unwrap().len(), 4 * BLOCK);
    let mut a = filled(BLOCK, 0xEE);
    let mut b = filled(BLOCK, 0xEE);
    let n = f
        .read_blocks(&mut [a.io_buf_mut(), b.io_buf_mut()], 2 * B)
        .unwrap();
    assert_eq!(n, 100, "short, though 6 blocks are available");
    assert_eq!(&a[..100], &data[2 * BLOCK..2 * BLOCK + 100]);
    assert!(a[100..].iter().all(|&x| x == 0xEE), "rest untouched");
    assert!(b.iter().all(|&x| x == 0xEE), "rest untouched");
    assert_eq!(read(&f, 0, 4).unwrap().len(), 4 * BLOCK, "one-shot");
    let s = f.stats();
    assert_eq!((s.short_reads, s.bytes_read), (1, 8 * B + 100));
}

#[test]
fn short_read_spanning_buffers_and_of_zero_bytes() {
    let (f, data) = faulty(4);
    f.short_read_nth(1, BLOCK + 10);
    let mut a = filled(BLOCK, 0xEE);
    let mut b = filled(2 * BLOCK, 0xEE);
    let n = f
        .read_blocks(&mut [a.io_buf_mut(), b.io_buf_mut()], 0)
        .unwrap();
    assert_eq!(n, BLOCK + 10);
    assert_eq!(&a[..], &data[..BLOCK]);
    assert_eq!(&b[..10], &data[BLOCK..BLOCK + 10]);
    assert!(b[10..].iter().all(|&x| x == 0xEE));
    // A spurious EOF.
    f.short_read_nth(1, 0);
    assert_eq!(read(&f, 0, 1).unwrap().len(), 0);
}

#[test]
fn short_read_does_not_lengthen_a_read_that_is_already_short() {
    let (f, data) = faulty(1);
    f.short_read_nth(1, 3 * BLOCK);
    assert_eq!(read(&f, 0, 4).unwrap(), data, "EOF came first");
    assert_eq!(f.stats().short_reads, 0);
    assert_eq!(read(&f, 0, 1).unwrap().len(), BLOCK, "the rule was spent");
}

#[test]
fn read_and_write_latency_are_added_and_can_be_turned_off() {
    let (f, _) = faulty(1);
    let d = Duration::from_millis(30);
    f.set_read_latency(d);
    let t = Instant::now();
    read(&f, 0, 1).unwrap();
    assert!(t.elapsed() >= d, "read took {:?}", t.elapsed());
    f.set_write_latency(d);
    let t = Instant::now();
    write(&f, 0, 1).unwrap();
    assert!(t.elapsed() >= d, "write took {:?}", t.elapsed());
    f.set_read_latency(Duration::ZERO);
    f.set_write_latency(Duration::ZERO);
    let t = Instant::now();
    for _ in 0..10 {
        read(&f, 0, 1).unwrap();
        write(&f, 0, 1).unwrap();
    }
    assert!(t.elapsed() < d * 10, "latency off");
}

#[test]
fn writes_past_the_space_limit_write_what_fits_then_fail_enospc() {
    let f = FaultyBacking::new(MemBacking::new());
    f.set_space_limit(Some(3 * B + 100));
    let data = random_bytes(7, 5 * BLOCK);
    let src = aligned_from(&data);
    let (a, rest) = src.io_buf().split_at(2 * BLOCK).unwrap();
    let e = f.write_blocks(&[a, rest], B);
    assert_eq!(errno(e), libc::ENOSPC);
    // Blocks 1 and 2 fit below 3 * B + 100; block 3 would not.
    assert_eq!(f.inner().len().unwrap(), 3 * B);
    assert_eq!(&f.inner().contents().unwrap()[BLOCK..], &data[..2 * BLOCK]);
    let s = f.stats();
    assert_eq!((s.bytes_written, s.injected_errors), (2 * B, 1));
    // Entirely below the limit: fine. Entirely above: nothing written.
    write(&f, 0, 1).unwrap();
    assert_eq!(errno(write(&f, 10, 1)), libc::ENOSPC);
    assert_eq!(f.inner().len().unwrap(), 3 * B);
    f.set_len(100 * B).unwrap(); // holes take no space
    f.set_space_limit(None);
    write(&f, 10, 1).unwrap();
}

#[test]
fn clear_removes_every_rule_but_keeps_counters() {
    let (f, _) = faulty(2);
    f.fail_nth_read(1, libc::EIO);
    f.fail_from_nth(Op::Sync, 1, libc::EIO);
    f.fail_reads_in(0, B, libc::EIO);
    f.fail_writes_in(0, B, libc::EIO);
    f.short_read_nth(1, 0);
    f.set_read_latency(Duration::from_secs(5));
    f.set_space_limit(Some(0));
    f.clear();
    assert_eq!(read(&f, 0, 2).unwrap().len(), 2 * BLOCK);
    write(&f, 0, 1).unwrap();
    f.sync_all().unwrap();
    assert_eq!(f.stats().reads, 1);
}

#[test]
fn invalid_input_fails_without_ticking_countdowns() {
    let (f, _) = faulty(1);
    f.fail_nth_read(1, libc::EIO);
    f.fail_nth(Op::PunchHole, 1, libc::EIO);
    let mut buf = filled(BLOCK, 0);
    let e = f.read_blocks(&mut [buf.io_buf_mut()], 5).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert_eq!(
        f.punch_hole(3, B).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    assert_eq!(
        errno(read(&f, 0, 1)),
        libc::EIO,
        "the countdown is still armed"
    );
    assert_eq!(errno(f.punch_hole(0, B)), libc::EIO);
}

#[test]
fn exactly_one_of_many_concurrent_reads_fails() {
    let (f, _) = faulty(4);
    let f = Arc::new(f);
    f.fail_nth_read(37, libc::EIO);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let f = Arc::clone(&f);
            std::thread::spawn(move || (0..25).filter(|_| read(&*f, 0, 4).is_err()).count())
        })
        .collect();
    let failed: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(failed, 1);
    assert_eq!(f.stats().reads, 100);
}

#[test]
fn wraps_a_real_file_and_says_so_in_info() {
    let dir = TempDir::new("faulty-file");
    let inner =
        FileBacking::open(dir.join("f"), &FileOptions::new().write(true).create(true)).unwrap();
    let direct = inner.is_direct();
    let f = FaultyBacking::new(inner);
    write(&f, 0, 7).unwrap();
    f.fail_nth_read(1, libc::EIO);
    assert_eq!(errno(read(&f, 0, 1)), libc::EIO);
    assert_eq!(read(&f, 0, 1).unwrap(), vec![7; BLOCK]);
    let info = f.info();
    assert_eq!(info.kind, "faulty");
    assert_eq!(info.engine, "preadv/pwritev");
    assert_eq!(info.data_path == DataPath::Direct, direct);
    assert!(
        info.note.starts_with("fault injection over file: "),
        "{info}"
    );
    let inner = f.into_inner();
    assert_eq!(inner.len().unwrap(), B);
}
