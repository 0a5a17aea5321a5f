//! Every system call of the crate that needs `unsafe`, each wrapped in a safe
//! function that takes a borrowed fd (the fd itself is owned by a
//! [`std::fs::File`], an `OwnedFd` underneath, which closes it on drop) and
//! turns `-1`/errno into [`io::Error`].
//!
//! Calls that std already wraps safely (open, fstat, ftruncate, fsync,
//! fdatasync) are used through std and are not here.

use std::ffi::c_int;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::buf::{IoBuf, IoBufMut};

/// The most iovecs one `preadv`/`pwritev` takes (`UIO_MAXIOV` on Linux).
pub(crate) const IOV_MAX: usize = 1024;

/// Iovecs kept on the stack; longer lists go to the heap.
const STACK_IOVS: usize = 16;

const EMPTY_IOV: libc::iovec = libc::iovec {
    iov_base: std::ptr::null_mut(),
    iov_len: 0,
};

/// Calls `f` on the iovecs for the byte ranges `segs` yields (at most
/// [`IOV_MAX`] of them), using a stack array when they are few.
fn with_iovecs<R>(
    segs: impl Iterator<Item = (*mut u8, usize)>,
    count_hint: usize,
    f: impl FnOnce(&[libc::iovec]) -> R,
) -> R {
    let segs = segs.take(IOV_MAX).map(|(p, l)| libc::iovec {
        iov_base: p.cast(),
        iov_len: l,
    });
    if count_hint <= STACK_IOVS {
        let mut arr = [EMPTY_IOV; STACK_IOVS];
        let mut n = 0;
        for (slot, iov) in arr.iter_mut().zip(segs) {
            *slot = iov;
            n += 1;
        }
        f(&arr[..n])
    } else {
        let v: Vec<libc::iovec> = segs.collect();
        f(&v)
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

/// The byte ranges of `bufs` after the first `skip` bytes, as (pointer,
/// length) pairs derived from the `&mut` borrows (the kernel writes through
/// them), empty ones left out; and how many buffers that is at most.
fn segments_mut<'b, 'a>(
    bufs: &'b mut [IoBufMut<'a>],
    skip: usize,
) -> (impl Iterator<Item = (*mut u8, usize)> + use<'b, 'a>, usize) {
    let (first, skip) = locate(bufs.iter().map(|b| b.len()), skip);
    let rest = &mut bufs[first..];
    let count = rest.len();
    let it = rest.iter_mut().enumerate().filter_map(move |(i, b)| {
        let off = if i == 0 { skip } else { 0 };
        let s: &mut [u8] = &mut b[off..];
        (!s.is_empty()).then_some((s.as_mut_ptr(), s.len()))
    });
    (it, count)
}

/// The byte ranges of `bufs` after the first `skip` bytes, as (pointer,
/// length) pairs; the pointers are `*mut` only because `struct iovec` says
/// so: pwritev reads through them. Empty ranges left out.
fn segments<'b, 'a>(
    bufs: &'b [IoBuf<'a>],
    skip: usize,
) -> (impl Iterator<Item = (*mut u8, usize)> + use<'b, 'a>, usize) {
    let (first, skip) = locate(bufs.iter().map(|b| b.len()), skip);
    let rest = &bufs[first..];
    let count = rest.len();
    let it = rest.iter().enumerate().filter_map(move |(i, b)| {
        let off = if i == 0 { skip } else { 0 };
        let s: &[u8] = &b[off..];
        (!s.is_empty()).then_some((s.as_ptr().cast_mut(), s.len()))
    });
    (it, count)
}

/// Retries `f` while it fails with EINTR; maps `-1` to the thread's errno.
fn retry_eintr(mut f: impl FnMut() -> isize) -> io::Result<usize> {
    loop {
        let r = f();
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
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
    let off = to_off(offset)?;
    let (segs, count) = segments_mut(bufs, skip);
    with_iovecs(segs, count, |iov| {
        if iov.is_empty() {
            return Ok(0);
        }
        retry_eintr(|| {
            // SAFETY: every iovec describes a live range of one of `bufs`,
            // which are exclusive (`&mut`) borrows held for this whole call,
            // so the kernel may write `iov_len` bytes at each `iov_base`;
            // `iov.len() <= IOV_MAX` fits a c_int; `fd` is a borrowed, open fd.
            unsafe { libc::preadv(fd.as_raw_fd(), iov.as_ptr(), iov.len() as c_int, off) }
        })
    })
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
    let off = to_off(offset)?;
    let (segs, count) = segments(bufs, skip);
    with_iovecs(segs, count, |iov| {
        if iov.is_empty() {
            return Ok(0);
        }
        retry_eintr(|| {
            // SAFETY: every iovec describes a live range of one of `bufs`,
            // shared borrows held for this whole call; pwritev only reads
            // them (the `*mut` in iovec is the C type, not a write);
            // `iov.len() <= IOV_MAX` fits a c_int; `fd` is open.
            unsafe { libc::pwritev(fd.as_raw_fd(), iov.as_ptr(), iov.len() as c_int, off) }
        })
    })
}

/// `fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)` over
/// `[offset, offset + len)`; EINTR retried.
pub(crate) fn punch_hole(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    let (off, l) = (to_off(offset)?, to_off(len)?);
    retry_eintr(|| {
        // SAFETY: fallocate takes only integers; `fd` is a borrowed, open fd.
        let r = unsafe {
            libc::fallocate(
                fd.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off,
                l,
            )
        };
        r as isize
    })
    .map(drop)
}

/// `posix_fadvise(POSIX_FADV_DONTNEED)` over `[offset, offset + len)`
/// (`len == 0` means "to the end of the file"): the kernel starts writeback
/// of dirty pages there and drops the clean ones from its page cache.
pub(crate) fn fadvise_dontneed(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    let (off, l) = (to_off(offset)?, to_off(len)?);
    // SAFETY: posix_fadvise takes only integers; `fd` is a borrowed, open fd.
    let r = unsafe { libc::posix_fadvise(fd.as_raw_fd(), off, l, libc::POSIX_FADV_DONTNEED) };
    // posix_fadvise returns the error number instead of setting errno.
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
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
    let mut stx = MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: the path is a NUL-terminated empty string, which with
    // AT_EMPTY_PATH means "the fd itself"; `stx` points to writable memory of
    // the size of `struct statx`; `fd` is a borrowed, open fd.
    let r = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            stx.as_mut_ptr(),
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOSYS) | Some(libc::EINVAL) | Some(libc::EPERM) => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: statx succeeded and filled the struct; it was zeroed before, and
    // all-zero bytes are a valid `statx` (it is plain integers).
    let stx = unsafe { stx.assume_init() };
    if stx.stx_mask & libc::STATX_DIOALIGN == 0 {
        return Ok(None);
    }
    Ok(Some(DioAlign {
        mem: stx.stx_dio_mem_align,
        offset: stx.stx_dio_offset_align,
    }))
}

/// Clears `O_DIRECT` on an open file description (fcntl F_GETFL/F_SETFL), so
/// later IO on it goes through the kernel page cache.
pub(crate) fn clear_o_direct(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: F_GETFL takes no argument and only reads the fd's flags.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: F_SETFL takes an int of flags; `fd` is a borrowed, open fd.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & !libc::O_DIRECT) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `O_DIRECT` is set on the open file description.
pub(crate) fn has_o_direct(fd: BorrowedFd<'_>) -> io::Result<bool> {
    // SAFETY: F_GETFL takes no argument and only reads the fd's flags.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(flags & libc::O_DIRECT != 0)
}

/// A file offset or length as `off_t`, or InvalidInput past `i64::MAX`.
fn to_off(v: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(v).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("file offset or length {v} is past the largest file offset (i64::MAX)"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::AlignedBuf;
    use crate::BLOCK;

    #[test]
    fn segments_skip_whole_buffers_and_into_one() {
        let mut a = AlignedBuf::zeroed(BLOCK).unwrap();
        let mut b = AlignedBuf::zeroed(2 * BLOCK).unwrap();
        let (pa, pb) = (a.as_ptr() as usize, b.as_ptr() as usize);
        let mut bufs = [a.io_buf_mut(), b.io_buf_mut()];
        let got = |bufs: &mut [IoBufMut<'_>], skip| {
            let (it, _) = segments_mut(bufs, skip);
            it.map(|(p, l)| (p as usize, l)).collect::<Vec<_>>()
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
    fn iovecs_are_capped_at_iov_max() {
        let segs = (0..IOV_MAX + 5).map(|i| (i as *mut u8, 1));
        assert_eq!(with_iovecs(segs, IOV_MAX + 5, |iov| iov.len()), IOV_MAX);
        let segs = (0..3).map(|i| (i as *mut u8, 1));
        assert_eq!(with_iovecs(segs, 3, |iov| iov.len()), 3);
    }
}
