//! FileBacking on real files under CARGO_TARGET_TMPDIR (ext4 here): O_DIRECT
//! reads and writes checked against std::fs, EOF, vectored IO, bad input,
//! set_len, sync, punch_hole, and the buffered fallback by request.

use crate::common;

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use common::{aligned_from, filled, kernel_cached_pages, random_bytes, TempDir, B};
use foliocache_backing::{
    AlignedBuf, Backing, DataPath, FileBacking, FileOptions, IoBuf, IoBufMut, Misaligned,
    MisalignedKind, BLOCK, MAX_FILE_SIZE,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use test_support::skip_or_fail;

fn rw() -> FileOptions {
    FileOptions::new().write(true).create(true)
}

/// Opens `path` with O_DIRECT, or returns None (after the skip convention)
/// if this filesystem does not take it.
fn open_direct(test: &str, path: &Path, opts: &FileOptions) -> Option<FileBacking> {
    let f = FileBacking::open(path, opts).expect("open");
    if !f.is_direct() {
        skip_or_fail(test, format!("no O_DIRECT here: {}", f.info()));
        return None;
    }
    Some(f)
}

/// A file of `data` written with std, opened read-only with O_DIRECT.
fn direct_file_with(test: &str, dir: &TempDir, data: &[u8]) -> Option<FileBacking> {
    let path = dir.join("data");
    fs::write(&path, data).unwrap();
    open_direct(test, &path, &FileOptions::new())
}

#[test]
fn open_uses_o_direct_and_says_so_in_info() {
    let dir = TempDir::new("info");
    let Some(f) = open_direct("open_uses_o_direct", &dir.join("f"), &rw()) else {
        return;
    };
    assert!(f.kernel_says_direct().unwrap());
    let info = f.info();
    assert_eq!(info.kind, "file");
    assert_eq!(info.data_path, DataPath::Direct);
    assert!(info.is_direct());
    assert_eq!(info.engine, "preadv/pwritev");
    assert!(info.note.contains("bypass the kernel page cache"), "{info}");
    assert!(info
        .to_string()
        .starts_with("file: O_DIRECT via preadv/pwritev: "));
    assert_eq!(f.path(), dir.join("f"));
}

#[test]
fn random_aligned_reads_match_std_fs_read() {
    let dir = TempDir::new("roundtrip");
    // 1 MiB and a partial block: EOF is inside a block.
    let size = (1 << 20) + 1234;
    let data = random_bytes(1, size);
    let Some(f) = direct_file_with("random_aligned_reads", &dir, &data) else {
        return;
    };
    assert_eq!(fs::read(f.path()).unwrap(), data);
    assert_eq!(f.len().unwrap(), size as u64);
    let mut rng = StdRng::seed_from_u64(2);
    let blocks = size.div_ceil(BLOCK) as u64;
    for _ in 0..300 {
        let off_block = rng.gen_range(0..blocks + 3);
        let nbufs = rng.gen_range(1..=4);
        let lens: Vec<usize> = (0..nbufs).map(|_| rng.gen_range(0..=8) * BLOCK).collect();
        let mut mems: Vec<AlignedBuf> = lens.iter().map(|&l| filled(l, 0xEE)).collect();
        let mut bufs: Vec<IoBufMut<'_>> = mems.iter_mut().map(|m| m.io_buf_mut()).collect();
        let offset = off_block * B;
        let n = f.read_blocks(&mut bufs, offset).unwrap();
        drop(bufs);
        let total: usize = lens.iter().sum();
        let avail = (size as u64).saturating_sub(offset) as usize;
        assert_eq!(n, total.min(avail), "offset {offset} lens {lens:?}");
        let got: Vec<u8> = mems.iter().flat_map(|m| m.iter().copied()).collect();
        let start = (offset as usize).min(size);
        assert_eq!(&got[..n], &data[start..start + n], "offset {offset}");
        assert!(
            got[n..].iter().all(|&b| b == 0),
            "bytes past the count are zeroed"
        );
    }
}

#[test]
fn read_crossing_eof_returns_partial_last_block() {
    let dir = TempDir::new("eof-cross");
    let data = random_bytes(3, 3 * BLOCK + 100);
    let Some(f) = direct_file_with("read_crossing_eof", &dir, &data) else {
        return;
    };
    let mut buf = filled(4 * BLOCK, 0xEE);
    let n = f.read_blocks(&mut [buf.io_buf_mut()], 2 * B).unwrap();
    assert_eq!(n, BLOCK + 100);
    assert_eq!(&buf[..n], &data[2 * BLOCK..]);
    assert!(
        buf[n..].iter().all(|&b| b == 0),
        "zeros past EOF, not stale bytes"
    );
}

#[test]
fn read_at_and_past_eof_returns_zero() {
    let dir = TempDir::new("eof-at");
    let data = random_bytes(4, 2 * BLOCK);
    let Some(f) = direct_file_with("read_at_eof", &dir, &data) else {
        return;
    };
    let mut buf = filled(BLOCK, 0xEE);
    assert_eq!(f.read_blocks(&mut [buf.io_buf_mut()], 2 * B).unwrap(), 0);
    assert!(buf.iter().all(|&b| b == 0), "zeroed past EOF");
    buf.fill(0xEE);
    assert_eq!(f.read_blocks(&mut [buf.io_buf_mut()], 100 * B).unwrap(), 0);
    assert!(buf.iter().all(|&b| b == 0), "zeroed past EOF");
}

#[test]
fn read_of_empty_file_and_of_no_buffers_returns_zero() {
    let dir = TempDir::new("eof-empty");
    let Some(f) = direct_file_with("read_of_empty_file", &dir, &[]) else {
        return;
    };
    let mut buf = filled(BLOCK, 0xEE);
    assert_eq!(f.read_blocks(&mut [buf.io_buf_mut()], 0).unwrap(), 0);
    assert_eq!(f.read_blocks(&mut [], 0).unwrap(), 0);
    assert_eq!(
        f.read_blocks(&mut [IoBufMut::new(&mut []).unwrap()], 0)
            .unwrap(),
        0
    );
}

#[test]
fn preadv_fills_several_buffers_in_order() {
    let dir = TempDir::new("preadv");
    let data = random_bytes(5, 7 * BLOCK);
    let Some(f) = direct_file_with("preadv_fills_several", &dir, &data) else {
        return;
    };
    let (mut a, mut b, mut c) = (filled(BLOCK, 1), filled(3 * BLOCK, 2), filled(2 * BLOCK, 3));
    let mut bufs = [a.io_buf_mut(), b.io_buf_mut(), c.io_buf_mut()];
    assert_eq!(f.read_blocks(&mut bufs, B).unwrap(), 6 * BLOCK);
    assert_eq!(&a[..], &data[BLOCK..2 * BLOCK]);
    assert_eq!(&b[..], &data[2 * BLOCK..5 * BLOCK]);
    assert_eq!(&c[..], &data[5 * BLOCK..7 * BLOCK]);
}

#[test]
fn more_buffers_than_iov_max_are_read_and_written() {
    let dir = TempDir::new("iovmax");
    let Some(f) = open_direct("more_buffers_than_iov_max", &dir.join("f"), &rw()) else {
        return;
    };
    const N: usize = 1500; // > IOV_MAX (1024): two system calls each way
    let data = random_bytes(6, N * BLOCK);
    let src = aligned_from(&data);
    let wbufs: Vec<IoBuf<'_>> = src.chunks(BLOCK).map(|c| IoBuf::new(c).unwrap()).collect();
    assert_eq!(f.write_blocks(&wbufs, 0).unwrap(), N * BLOCK);
    let mut dst = filled(N * BLOCK, 0);
    let mut rbufs: Vec<IoBufMut<'_>> = dst
        .chunks_mut(BLOCK)
        .map(|c| IoBufMut::new(c).unwrap())
        .collect();
    assert_eq!(f.read_blocks(&mut rbufs, 0).unwrap(), N * BLOCK);
    drop(rbufs);
    assert!(dst[..] == data[..]);
    assert!(fs::read(f.path()).unwrap() == data);
}

#[test]
fn misaligned_offset_is_rejected_with_a_clear_error() {
    let dir = TempDir::new("misaligned-off");
    let f = FileBacking::open(dir.join("f"), &rw()).unwrap();
    let mut buf = filled(BLOCK, 0);
    let check = |e: io::Error| {
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let m = e
            .get_ref()
            .and_then(|i| i.downcast_ref::<Misaligned>())
            .copied();
        assert_eq!(
            m.map(|m| (m.kind(), m.value())),
            Some((MisalignedKind::Offset, 100))
        );
        let msg = e.to_string();
        assert!(
            msg.contains("file offset 100") && msg.contains("4096"),
            "{msg}"
        );
    };
    check(f.read_blocks(&mut [buf.io_buf_mut()], 100).unwrap_err());
    check(f.write_blocks(&[buf.io_buf()], 100).unwrap_err());
    check(f.punch_hole(100, B).unwrap_err());
    assert_eq!(f.len().unwrap(), 0, "a rejected write wrote nothing");
}

#[test]
fn misaligned_punch_length_is_rejected() {
    let dir = TempDir::new("misaligned-len");
    let f = FileBacking::open(dir.join("f"), &rw()).unwrap();
    let e = f.punch_hole(0, 100).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("length 100"), "{e}");
}

#[test]
fn ranges_past_the_largest_file_size_are_rejected_without_panic() {
    let dir = TempDir::new("huge");
    let f = FileBacking::open(dir.join("f"), &rw()).unwrap();
    let mut buf = filled(BLOCK, 0);
    let last = MAX_FILE_SIZE / B * B; // aligned, but a block there ends past the max
    for off in [last, u64::MAX / B * B] {
        let e = f.read_blocks(&mut [buf.io_buf_mut()], off).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("largest file size"), "{e}");
        let e = f.write_blocks(&[buf.io_buf()], off).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        let e = f.punch_hole(off, B).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    }
    let e = f.set_len(u64::MAX).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
}

#[test]
fn write_blocks_lands_on_disk_and_extends_to_the_block_end() {
    let dir = TempDir::new("write");
    let Some(f) = open_direct("write_blocks_lands", &dir.join("f"), &rw()) else {
        return;
    };
    let d1 = random_bytes(7, 2 * BLOCK);
    let d2 = random_bytes(8, BLOCK);
    let (a, b) = (aligned_from(&d1), aligned_from(&d2));
    assert_eq!(
        f.write_blocks(&[a.io_buf(), b.io_buf()], 3 * B).unwrap(),
        3 * BLOCK
    );
    assert_eq!(f.len().unwrap(), 6 * B);
    let disk = fs::read(f.path()).unwrap();
    assert!(
        disk[..3 * BLOCK].iter().all(|&x| x == 0),
        "the gap is a hole"
    );
    assert_eq!(&disk[3 * BLOCK..5 * BLOCK], &d1[..]);
    assert_eq!(&disk[5 * BLOCK..], &d2[..]);
    // Overwrite in the middle, read back through O_DIRECT.
    let d3 = random_bytes(9, BLOCK);
    f.write_blocks(&[aligned_from(&d3).io_buf()], 4 * B)
        .unwrap();
    let mut back = filled(BLOCK, 0);
    f.read_blocks(&mut [back.io_buf_mut()], 4 * B).unwrap();
    assert_eq!(&back[..], &d3[..]);
}

#[test]
fn write_to_a_read_only_file_fails_and_changes_nothing() {
    let dir = TempDir::new("write-ro");
    let path = dir.join("f");
    let data = random_bytes(10, BLOCK);
    fs::write(&path, &data).unwrap();
    let f = FileBacking::open(&path, &FileOptions::new()).unwrap();
    let e = f.write_blocks(&[filled(BLOCK, 1).io_buf()], 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{e}");
    assert_eq!(fs::read(&path).unwrap(), data);
}

#[test]
fn set_len_shrinks_and_grows_with_zeros() {
    let dir = TempDir::new("setlen");
    let Some(f) = open_direct("set_len", &dir.join("f"), &rw()) else {
        return;
    };
    let data = random_bytes(11, 4 * BLOCK);
    f.write_blocks(&[aligned_from(&data).io_buf()], 0).unwrap();
    f.set_len(B + 10).unwrap();
    assert_eq!(f.len().unwrap(), B + 10);
    assert_eq!(fs::metadata(f.path()).unwrap().len(), B + 10);
    f.set_len(3 * B).unwrap();
    let mut buf = filled(4 * BLOCK, 0xEE);
    assert_eq!(
        f.read_blocks(&mut [buf.io_buf_mut()], 0).unwrap(),
        3 * BLOCK
    );
    assert!(buf[3 * BLOCK..].iter().all(|&b| b == 0));
    assert_eq!(&buf[..BLOCK + 10], &data[..BLOCK + 10]);
    assert!(
        buf[BLOCK + 10..3 * BLOCK].iter().all(|&b| b == 0),
        "regrown part reads zeros"
    );
    assert!(f.is_empty().is_ok_and(|e| !e));
    f.set_len(0).unwrap();
    assert!(f.is_empty().unwrap());
}

#[test]
fn sync_data_and_sync_all_succeed() {
    let dir = TempDir::new("sync");
    let f = FileBacking::open(dir.join("f"), &rw()).unwrap();
    f.write_blocks(&[filled(BLOCK, 3).io_buf()], 0).unwrap();
    f.sync_data().unwrap();
    f.sync_all().unwrap();
}

#[test]
fn punch_hole_reads_zeros_keeps_size_and_frees_blocks() {
    let dir = TempDir::new("punch");
    let Some(f) = open_direct("punch_hole", &dir.join("f"), &rw()) else {
        return;
    };
    let data = random_bytes(12, 8 * BLOCK);
    f.write_blocks(&[aligned_from(&data).io_buf()], 0).unwrap();
    f.sync_all().unwrap();
    let before = fs::metadata(f.path()).unwrap().blocks();
    match f.punch_hole(2 * B, 4 * B) {
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
            return skip_or_fail("punch_hole", "this filesystem cannot punch holes");
        }
        r => r.unwrap(),
    }
    assert_eq!(f.len().unwrap(), 8 * B, "KEEP_SIZE");
    let after = fs::metadata(f.path()).unwrap().blocks();
    assert!(
        after < before,
        "blocks freed: {before} -> {after} (512-byte units)"
    );
    let mut buf = filled(8 * BLOCK, 0xEE);
    assert_eq!(
        f.read_blocks(&mut [buf.io_buf_mut()], 0).unwrap(),
        8 * BLOCK
    );
    assert_eq!(&buf[..2 * BLOCK], &data[..2 * BLOCK]);
    assert!(buf[2 * BLOCK..6 * BLOCK].iter().all(|&b| b == 0));
    assert_eq!(&buf[6 * BLOCK..], &data[6 * BLOCK..]);
    // Past EOF, and of length 0: fine, size unchanged.
    f.punch_hole(6 * B, 10 * B).unwrap();
    f.punch_hole(B, 0).unwrap();
    assert_eq!(f.len().unwrap(), 8 * B);
}

#[test]
fn open_errors_are_reported() {
    let dir = TempDir::new("open-err");
    let e = FileBacking::open(dir.join("missing"), &FileOptions::new()).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    let path = dir.join("f");
    FileBacking::open(&path, &FileOptions::new().write(true).create_new(true)).unwrap();
    let e = FileBacking::open(&path, &FileOptions::new().write(true).create_new(true)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    let e = FileBacking::open(dir.join("g"), &FileOptions::new().create(true)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "create needs write");
    let e = FileBacking::open(&path, &FileOptions::new().read(false)).unwrap_err();
    assert_eq!(
        e.kind(),
        io::ErrorKind::InvalidInput,
        "neither read nor write"
    );
}

#[test]
fn truncate_and_mode_are_applied() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("trunc");
    let path = dir.join("f");
    let f = FileBacking::open(&path, &rw().mode(0o600)).unwrap();
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    f.write_blocks(&[filled(BLOCK, 1).io_buf()], 0).unwrap();
    drop(f);
    let f = FileBacking::open(&path, &rw().truncate(true)).unwrap();
    assert_eq!(f.len().unwrap(), 0);
}

#[test]
fn force_buffered_falls_back_and_says_so() {
    let dir = TempDir::new("buffered");
    let path = dir.join("f");
    let f = FileBacking::open(&path, &rw().force_buffered(true)).unwrap();
    assert!(!f.is_direct());
    assert!(!f.kernel_says_direct().unwrap());
    let info = f.info();
    assert_eq!(info.data_path, DataPath::BufferedDontneed);
    assert!(!info.is_direct());
    assert!(info.note.contains("force_buffered"), "{info}");
    assert!(info.note.contains("POSIX_FADV_DONTNEED"), "{info}");
    // Same semantics as the direct path.
    let data = random_bytes(13, 5 * BLOCK);
    f.write_blocks(&[aligned_from(&data).io_buf()], 0).unwrap();
    f.set_len(4 * B + 7).unwrap();
    let mut a = filled(2 * BLOCK, 0xEE);
    let mut b = filled(4 * BLOCK, 0xEE);
    let n = f
        .read_blocks(&mut [a.io_buf_mut(), b.io_buf_mut()], B)
        .unwrap();
    assert_eq!(n, 3 * BLOCK + 7);
    assert_eq!(&a[..], &data[BLOCK..3 * BLOCK]);
    assert_eq!(&b[..BLOCK + 7], &data[3 * BLOCK..4 * BLOCK + 7]);
    assert!(b[BLOCK + 7..].iter().all(|&x| x == 0), "zeroed past EOF");
    f.sync_data().unwrap();
    f.punch_hole(0, B).unwrap();
    let disk = fs::read(&path).unwrap();
    assert!(disk[..BLOCK].iter().all(|&x| x == 0));
    assert_eq!(&disk[BLOCK..], &data[BLOCK..4 * BLOCK + 7]);
}

/// Writes `data` to `path` and leaves none of it in the kernel's page cache.
fn cold_file(path: &Path, data: &[u8]) {
    fs::write(path, data).unwrap();
    // A buffered FileBacking's sync drops the whole file after writeback.
    let f = FileBacking::open(path, &FileOptions::new().force_buffered(true)).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn reads_leave_no_pages_in_the_kernel_cache_direct_or_buffered() {
    let dir = TempDir::new("nocache");
    let path = dir.join("f");
    let data = random_bytes(14, 64 * BLOCK);
    cold_file(&path, &data);
    if kernel_cached_pages(&path) != 0 {
        return skip_or_fail(
            "reads_leave_no_pages",
            "the kernel kept pages despite DONTNEED",
        );
    }
    let mut buf = filled(64 * BLOCK, 0);
    for opts in [FileOptions::new(), FileOptions::new().force_buffered(true)] {
        let f = FileBacking::open(&path, &opts).unwrap();
        assert_eq!(
            f.read_blocks(&mut [buf.io_buf_mut()], 0).unwrap(),
            64 * BLOCK
        );
        assert!(buf[..] == data[..]);
        assert_eq!(
            kernel_cached_pages(&path),
            0,
            "after a read with {}",
            f.info()
        );
    }
    // The probe works: a plain buffered read does leave pages behind.
    assert_eq!(fs::read(&path).unwrap().len(), data.len());
    assert!(
        kernel_cached_pages(&path) > 0,
        "mincore sees a plain read's pages"
    );
}

#[test]
fn buffered_writes_leave_no_pages_in_the_kernel_cache_after_sync() {
    let dir = TempDir::new("nocache-w");
    let path = dir.join("f");
    let f = FileBacking::open(&path, &rw().force_buffered(true)).unwrap();
    let data = random_bytes(15, 32 * BLOCK);
    f.write_blocks(&[aligned_from(&data).io_buf()], 0).unwrap();
    f.sync_data().unwrap();
    assert_eq!(kernel_cached_pages(&path), 0);
    assert!(fs::read(&path).unwrap() == data);
}

#[test]
fn concurrent_disjoint_writes_and_reads() {
    let dir = TempDir::new("threads");
    let f = Arc::new(FileBacking::open(dir.join("f"), &rw()).unwrap());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let f = Arc::clone(&f);
            std::thread::spawn(move || {
                for i in 0..64u64 {
                    let block = i * 4 + t;
                    let data = random_bytes(block, BLOCK);
                    f.write_blocks(&[aligned_from(&data).io_buf()], block * B)
                        .unwrap();
                    let mut back = filled(BLOCK, 0);
                    f.read_blocks(&mut [back.io_buf_mut()], block * B).unwrap();
                    assert!(back[..] == data[..], "block {block}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let disk = fs::read(f.path()).unwrap();
    for block in 0..256u64 {
        let b = block as usize;
        assert!(disk[b * BLOCK..(b + 1) * BLOCK] == random_bytes(block, BLOCK)[..]);
    }
}

#[test]
fn usable_as_a_trait_object() {
    let dir = TempDir::new("dyn");
    let b: Arc<dyn Backing> = Arc::new(FileBacking::open(dir.join("f"), &rw()).unwrap());
    let boxed: Box<dyn Backing> = Box::new(Arc::clone(&b));
    boxed.write_blocks(&[filled(BLOCK, 9).io_buf()], 0).unwrap();
    assert_eq!(b.len().unwrap(), B);
    assert_eq!(boxed.info().kind, "file");
}

/// `check_size` answers as the filesystem does (the kernel's own `pwrite`
/// at the same place is the reference) and changes nothing: not the data,
/// not the size, not the blocks allocated.
#[test]
fn check_size_answers_as_the_filesystem_and_changes_nothing() {
    use std::os::unix::fs::FileExt;
    let dir = TempDir::new("check-size");
    let path = dir.join("f");
    let data = vec![7u8; 2 * B as usize];
    fs::write(&path, &data).unwrap();
    let f = FileBacking::open(&path, &rw()).expect("open");
    let plain = fs::File::create(dir.join("plain")).unwrap();
    let blocks = fs::metadata(&path).unwrap().blocks();
    assert!(f.check_size(B).is_ok(), "smaller than the file");
    for size in [1u64 << 30, 1 << 44, 17 << 40, 1 << 50, i64::MAX as u64] {
        let want = plain
            .write_at(b"z", size - 1)
            .map(|_| ())
            .map_err(|e| e.raw_os_error());
        let got = f.check_size(size).map_err(|e| e.raw_os_error());
        assert_eq!(got, want, "a file of {size} bytes");
        // Twice: the second may answer from what the first found.
        assert_eq!(f.check_size(size).map_err(|e| e.raw_os_error()), want);
    }
    assert_eq!(
        f.check_size(i64::MAX as u64 + 1)
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EFBIG)
    );
    let meta = fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), data.len() as u64, "the size is unchanged");
    assert_eq!(meta.blocks(), blocks, "nothing allocated or freed");
    assert!(fs::read(&path).unwrap() == data, "the data is unchanged");
}

#[test]
fn only_regular_files_open_and_a_fifo_does_not_block() {
    let dir = TempDir::new("only_regular");
    // A directory: EISDIR, read-only (which open(2) itself allows).
    let e = FileBacking::open(dir.join("."), &FileOptions::new()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EISDIR), "{e}");
    // A FIFO with no writer: open(2) would wait for one; refused at once,
    // read-only and read-write.
    let fifo = dir.join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that lives across the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for opts in [FileOptions::new(), FileOptions::new().write(true)] {
        let e = FileBacking::open(&fifo, &opts).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("a FIFO"), "{e}");
    }
    // A regular file opens without O_NONBLOCK left on it.
    let f = FileBacking::open(dir.join("data"), &rw()).unwrap();
    // SAFETY: F_GETFL on an fd the backing owns, alive across the call.
    let fl = unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(f.file()), libc::F_GETFL) };
    assert_eq!(fl & libc::O_NONBLOCK, 0);
}
