//! The crate's system calls that std does not wrap, through `rustix`'s safe
//! functions: each takes a borrowed fd (the fd itself is owned by a
//! [`std::fs::File`], an `OwnedFd` underneath, which closes it on drop) and
//! turns the errno into an [`io::Error`] with the same raw OS error.
//!
//! Calls that std already wraps safely (open, fstat, ftruncate, fsync,
//! fdatasync) are used through std and are not here.

use std::io::{self, IoSlice, IoSliceMut};
use std::num::NonZeroU64;
use std::os::fd::BorrowedFd;

use rustix::fs::{AtFlags, FallocateFlags, OFlags, StatxFlags};
use rustix::io::Errno;

use crate::buf::{IoBuf, IoBufMut};

/// The most iovecs one `preadv`/`pwritev` takes (`UIO_MAXIOV` on Linux).
pub(crate) const IOV_MAX: usize = 1024;

/// Iovecs kept on the stack; longer lists go to the heap.
const STACK_IOVS: usize = 16;

/// Calls `f` on the iovecs `segs` yields (at most [`IOV_MAX`] of them),
/// using a stack array when they are few (`empty` fills its unused slots).
fn with_iovecs<S, R>(
    segs: impl Iterator<Item = S>,
    count_hint: usize,
    empty: impl Fn() -> S,
    f: impl FnOnce(&mut [S]) -> R,
) -> R {
    let segs = segs.take(IOV_MAX);
    if count_hint <= STACK_IOVS {
        let mut arr: [S; STACK_IOVS] = std::array::from_fn(|_| empty());
        let mut n = 0;
        for (slot, iov) in arr.iter_mut().zip(segs) {
            *slot = iov;
            n += 1;
        }
        f(&mut arr[..n])
    } else {
        let mut v: Vec<S> = segs.collect();
        f(&mut v)
    }
}

/// Where the bytes after the first `skip` of buffers with lengths `lens`
/// start: (index of the buffer, offset inside it).
pub(crate) fn locate(lens: impl Iterator<Item = usize>, mut skip: usize) -> (usize, usize) {
    let mut first = 0;
    for len in lens {
        if skip < len {
            break;
        }
        skip -= len;
        first += 1;
    }
    (first, skip)
}

/// The bytes of `bufs` after the first `skip`, as slices reborrowed from the
/// `&mut` borrows (the kernel writes into them), empty ones left out; and
/// how many buffers that is at most.
fn segments_mut<'b, 'a>(
    bufs: &'b mut [IoBufMut<'a>],
    skip: usize,
) -> (impl Iterator<Item = &'b mut [u8]> + use<'b, 'a>, usize) {
    let (first, skip) = locate(bufs.iter().map(|b| b.len()), skip);
    let rest = &mut bufs[first..];
    let count = rest.len();
    let it = rest.iter_mut().enumerate().filter_map(move |(i, b)| {
        let off = if i == 0 { skip } else { 0 };
        let s: &mut [u8] = &mut b[off..];
        (!s.is_empty()).then_some(s)
    });
    (it, count)
}

/// The bytes of `bufs` after the first `skip`, as slices, empty ones left
/// out; and how many buffers that is at most.
fn segments<'b, 'a>(
    bufs: &'b [IoBuf<'a>],
    skip: usize,
) -> (impl Iterator<Item = &'b [u8]> + use<'b, 'a>, usize) {
    let (first, skip) = locate(bufs.iter().map(|b| b.len()), skip);
    let rest = &bufs[first..];
    let count = rest.len();
    let it = rest.iter().enumerate().filter_map(move |(i, b)| {
        let off = if i == 0 { skip } else { 0 };
        let s: &[u8] = &b[off..];
        (!s.is_empty()).then_some(s)
    });
    (it, count)
}

/// Retries `f` while it fails with EINTR.
fn retry_eintr<T>(mut f: impl FnMut() -> Result<T, Errno>) -> io::Result<T> {
    loop {
        match f() {
            Err(Errno::INTR) => continue,
            r => return r.map_err(io::Error::from),
        }
    }
}

/// One `preadv` of the bytes of `bufs` after the first `skip`, from file
/// offset `offset` (at most [`IOV_MAX`] buffers per call; EINTR retried).
/// Returns the byte count the kernel reported, 0 at EOF.
pub(crate) fn preadv(
    fd: BorrowedFd<'_>,
    bufs: &mut [IoBufMut<'_>],
    skip: usize,
    offset: u64,
) -> io::Result<usize> {
    let off = check_off(offset)?;
    let (segs, count) = segments_mut(bufs, skip);
    with_iovecs(
        segs.map(IoSliceMut::new),
        count,
        || IoSliceMut::new(&mut []),
        |iov| {
            if iov.is_empty() {
                return Ok(0);
            }
            retry_eintr(|| rustix::io::preadv(fd, iov, off))
        },
    )
}

/// One `pwritev` of the bytes of `bufs` after the first `skip`, at file
/// offset `offset` (at most [`IOV_MAX`] buffers per call; EINTR retried).
/// Returns the byte count the kernel reported.
pub(crate) fn pwritev(
    fd: BorrowedFd<'_>,
    bufs: &[IoBuf<'_>],
    skip: usize,
    offset: u64,
) -> io::Result<usize> {
    let off = check_off(offset)?;
    let (segs, count) = segments(bufs, skip);
    with_iovecs(
        segs.map(IoSlice::new),
        count,
        || IoSlice::new(&[]),
        |iov| {
            if iov.is_empty() {
                return Ok(0);
            }
            retry_eintr(|| rustix::io::pwritev(fd, iov, off))
        },
    )
}

/// `fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)` over
/// `[offset, offset + len)`; EINTR retried.
pub(crate) fn punch_hole(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    let (off, l) = (check_off(offset)?, check_off(len)?);
    let mode = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
    retry_eintr(|| rustix::fs::fallocate(fd, mode, off, l))
}

/// `fallocate(FALLOC_FL_KEEP_SIZE)` over `[offset, offset + len)`: the
/// blocks reserved, the size kept; EINTR retried.
pub(crate) fn allocate(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    let (off, l) = (check_off(offset)?, check_off(len)?);
    retry_eintr(|| rustix::fs::fallocate(fd, FallocateFlags::KEEP_SIZE, off, l))
}

/// `fallocate(FALLOC_FL_INSERT_RANGE)` or
/// `fallocate(FALLOC_FL_COLLAPSE_RANGE)` over `[offset, offset + len)`;
/// EINTR retried.
pub(crate) fn shift_range(
    fd: BorrowedFd<'_>,
    shift: crate::Shift,
    offset: u64,
    len: u64,
) -> io::Result<()> {
    let (off, l) = (check_off(offset)?, check_off(len)?);
    let mode = match shift {
        crate::Shift::Insert => FallocateFlags::INSERT_RANGE,
        crate::Shift::Collapse => FallocateFlags::COLLAPSE_RANGE,
    };
    retry_eintr(|| rustix::fs::fallocate(fd, mode, off, l))
}

/// `posix_fadvise(POSIX_FADV_DONTNEED)` over `[offset, offset + len)`
/// (`len == 0` means "to the end of the file"): the kernel starts writeback
/// of dirty pages there and drops the clean ones from its page cache.
pub(crate) fn fadvise_dontneed(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    let (off, l) = (check_off(offset)?, check_off(len)?);
    rustix::fs::fadvise(fd, off, NonZeroU64::new(l), rustix::fs::Advice::DontNeed)?;
    Ok(())
}

/// Direct IO alignment that the filesystem reports for the file
/// (`statx(STATX_DIOALIGN)`, Linux 6.1+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DioAlign {
    /// Required alignment of buffer addresses (0: direct IO unsupported).
    pub(crate) mem: u32,
    /// Required alignment of file offsets and lengths (0: unsupported).
    pub(crate) offset: u32,
}

/// Asks the kernel for the file's direct IO alignment; `Ok(None)` when the
/// kernel or the filesystem does not say.
pub(crate) fn dio_align(fd: BorrowedFd<'_>) -> io::Result<Option<DioAlign>> {
    // An empty path with AT_EMPTY_PATH means "the fd itself".
    let stx = match rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, StatxFlags::DIOALIGN) {
        Ok(stx) => stx,
        Err(Errno::NOSYS | Errno::INVAL | Errno::PERM) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if stx.stx_mask & StatxFlags::DIOALIGN.bits() == 0 {
        return Ok(None);
    }
    Ok(Some(DioAlign {
        mem: stx.stx_dio_mem_align,
        offset: stx.stx_dio_offset_align,
    }))
}

/// The file's size (`statx(STATX_SIZE)`; `fstat` where statx is missing).
///
/// Only the size is asked for: a `statx` or `fstat` that asks for the
/// change times marks them as seen (the kernel's multigrain timestamps,
/// 6.13+), so that the next write takes a fine-grained time and dirties
/// the inode, whose block the next `fdatasync` then writes: a sync that
/// asks for the size would pay an extra metadata write at every commit.
pub(crate) fn file_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    match rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, StatxFlags::SIZE) {
        Ok(stx) if stx.stx_mask & StatxFlags::SIZE.bits() != 0 => Ok(stx.stx_size),
        Ok(_) | Err(Errno::NOSYS | Errno::INVAL | Errno::PERM) => {
            Ok(rustix::fs::fstat(fd)?.st_size as u64)
        }
        Err(e) => Err(e.into()),
    }
}

/// Clears `O_DIRECT` on an open file description (fcntl F_GETFL/F_SETFL), so
/// later IO on it goes through the kernel page cache.
pub(crate) fn clear_o_direct(fd: BorrowedFd<'_>) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(fd)?;
    rustix::fs::fcntl_setfl(fd, flags - OFlags::DIRECT)?;
    Ok(())
}

/// Refuses what is not a regular file (a directory is `EISDIR`; a FIFO,
/// a socket or a device `InvalidInput`: the cache holds a file's bytes by
/// offset, with its size from `fstat`), and clears the `O_NONBLOCK` the
/// open was made with (so that a FIFO could not block it): on a regular
/// file it would make io_uring fail reads with `EAGAIN` instead of
/// waiting for them.
pub(crate) fn only_regular(fd: BorrowedFd<'_>, path: &std::path::Path) -> io::Result<()> {
    let mode = rustix::fs::FileType::from_raw_mode(rustix::fs::fstat(fd)?.st_mode);
    let what = match mode {
        rustix::fs::FileType::RegularFile => {
            let flags = rustix::fs::fcntl_getfl(fd)?;
            rustix::fs::fcntl_setfl(fd, flags - OFlags::NONBLOCK)?;
            return Ok(());
        }
        rustix::fs::FileType::Directory => {
            return Err(io::Error::from_raw_os_error(Errno::ISDIR.raw_os_error()))
        }
        rustix::fs::FileType::Fifo => "a FIFO",
        rustix::fs::FileType::Socket => "a socket",
        rustix::fs::FileType::BlockDevice => "a block device",
        _ => "a character device",
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} is {what}: only regular files are cached",
            path.display()
        ),
    ))
}

/// Whether `O_DIRECT` is set on the open file description.
pub(crate) fn has_o_direct(fd: BorrowedFd<'_>) -> io::Result<bool> {
    Ok(rustix::fs::fcntl_getfl(fd)?.contains(OFlags::DIRECT))
}

/// A file offset or length that fits `off_t`, or InvalidInput past
/// `i64::MAX` (which the kernel would refuse, or for `u64::MAX`, take as
/// "the file's current offset").
fn check_off(v: u64) -> io::Result<u64> {
    if i64::try_from(v).is_ok() {
        return Ok(v);
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("file offset or length {v} is past the largest file offset (i64::MAX)"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::AlignedBuf;
    use crate::BLOCK;
    use std::os::fd::AsFd;

    #[test]
    fn segments_skip_whole_buffers_and_into_one() {
        let mut a = AlignedBuf::zeroed(BLOCK).unwrap();
        let mut b = AlignedBuf::zeroed(2 * BLOCK).unwrap();
        let (pa, pb) = (a.as_ptr() as usize, b.as_ptr() as usize);
        let mut bufs = [a.io_buf_mut(), b.io_buf_mut()];
        let got = |bufs: &mut [IoBufMut<'_>], skip| {
            let (it, _) = segments_mut(bufs, skip);
            it.map(|s| (s.as_ptr() as usize, s.len()))
                .collect::<Vec<_>>()
        };
        assert_eq!(got(&mut bufs, 0), vec![(pa, BLOCK), (pb, 2 * BLOCK)]);
        assert_eq!(got(&mut bufs, BLOCK), vec![(pb, 2 * BLOCK)]);
        assert_eq!(
            got(&mut bufs, BLOCK + 100),
            vec![(pb + 100, 2 * BLOCK - 100)]
        );
        assert_eq!(got(&mut bufs, 3 * BLOCK), vec![]);
        assert_eq!(got(&mut bufs, 10 * BLOCK), vec![]);
    }

    #[test]
    fn the_size_asked_alone_is_the_files() {
        let path = std::env::temp_dir().join(format!("backing-sys-size-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        for len in [0, 1, 4095, 1 << 20, 5, (1 << 40) + 3] {
            f.set_len(len).unwrap();
            assert_eq!(file_size(f.as_fd()).unwrap(), len);
        }
        drop(f);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn iovecs_are_capped_at_iov_max() {
        let segs = 0..IOV_MAX + 5;
        assert_eq!(
            with_iovecs(segs, IOV_MAX + 5, || 0, |iov| iov.len()),
            IOV_MAX
        );
        let segs = 0..3;
        assert_eq!(with_iovecs(segs, 3, || 0, |iov| iov.len()), 3);
    }
}
