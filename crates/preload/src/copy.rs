//! Calls that move data between fds, or change a file, inside the kernel:
//! for a file the cache serves they would bypass it (and the cache would
//! then write its stale view back). `copy_file_range` and `sendfile` copy
//! through the cache instead; `splice` hands a served file to the kernel
//! first; a reflink (`FICLONE`, `FICLONERANGE`, `FIDEDUPERANGE`) touching
//! a served file is refused with `EOPNOTSUPP`, which makes `cp` copy;
//! `truncate` by path goes through the cache when it serves the file.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void};
use std::io;
use std::sync::Arc;

use fc::ReadFlags;
use libc::{iovec, loff_t, off_t};

use crate::io::{read_iov, write_iov, WriteHow};
use crate::real::real;
use crate::state::{err, hand_to_kernel, inside, lookup, truncate_served, Desc};

/// One side of a copy: a served description or a kernel fd, and the
/// offset to use (advanced as the copy goes), or the position when none.
struct Side {
    desc: Option<Arc<Desc>>,
    fd: c_int,
    offset: *mut loff_t,
}

impl Side {
    fn new(fd: c_int, offset: *mut loff_t) -> Side {
        Side {
            desc: lookup(fd),
            fd,
            offset,
        }
    }

    /// The offset, if one was given.
    ///
    /// # Safety
    /// `offset` is NULL or valid for reads.
    unsafe fn at(&self) -> io::Result<Option<u64>> {
        if self.offset.is_null() {
            return Ok(None);
        }
        // SAFETY: the caller's promise.
        let at = unsafe { *self.offset };
        u64::try_from(at).map(Some).map_err(|_| err(libc::EINVAL))
    }

    /// Moves the given offset on by `n`.
    ///
    /// # Safety
    /// `offset` is NULL or valid for writes.
    unsafe fn advance(&self, n: usize) {
        if !self.offset.is_null() {
            // SAFETY: the caller's promise.
            unsafe { *self.offset += n as loff_t };
        }
    }

    /// Reads into (`write`: writes from) the `len` bytes at `p`, once:
    /// the count done.
    ///
    /// # Safety
    /// `offset` is NULL or valid for reads and writes; `p` is valid for
    /// writes (`write`: reads) of `len` bytes.
    unsafe fn io(&self, p: *mut u8, len: usize, write: bool) -> io::Result<usize> {
        // SAFETY: the caller's promise.
        let at = unsafe { self.at() }?;
        let v = [iovec {
            iov_base: p.cast(),
            iov_len: len,
        }];
        // SAFETY: the caller's promise, for `p`.
        let n = unsafe {
            match (&self.desc, write, at) {
                (Some(d), false, _) => read_iov(d, &v, at, ReadFlags::NONE)?,
                (Some(d), true, _) => write_iov(d, &v, at, WriteHow::default())?,
                (None, false, Some(at)) => {
                    kernel(real!(pread: Pread)(self.fd, p.cast(), len, at as off_t))?
                }
                (None, false, None) => kernel(real!(read: Read)(self.fd, p.cast(), len))?,
                (None, true, Some(at)) => {
                    kernel(real!(pwrite: Pwrite)(self.fd, p.cast(), len, at as off_t))?
                }
                (None, true, None) => kernel(real!(write: Write)(self.fd, p.cast(), len))?,
            }
        };
        // SAFETY: the caller's promise.
        unsafe { self.advance(n) };
        Ok(n)
    }
}

/// The C prototypes of the kernel-side calls a copy makes.
type Read = unsafe extern "C" fn(c_int, *mut c_void, usize) -> isize;
type Pread = unsafe extern "C" fn(c_int, *mut c_void, usize, off_t) -> isize;
type Write = unsafe extern "C" fn(c_int, *const c_void, usize) -> isize;
type Pwrite = unsafe extern "C" fn(c_int, *const c_void, usize, off_t) -> isize;

/// A system call's count, or its error.
fn kernel(r: isize) -> io::Result<usize> {
    usize::try_from(r).map_err(|_| io::Error::last_os_error())
}

/// Writes all of `buf` to `dst`.
///
/// # Safety
/// `dst`'s offset is NULL or valid for reads and writes.
unsafe fn write_all(dst: &Side, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: the caller's promise; `buf` is valid for reads of its
        // length, and only read.
        match unsafe { dst.io(buf.as_ptr().cast_mut(), buf.len(), true) }? {
            0 => return Err(err(libc::EIO)),
            n => buf = &buf[n..],
        }
    }
    Ok(())
}

/// Copies up to `len` bytes from `src` to `dst` through a buffer; stops
/// at end of file. Returns the bytes copied (an error after some bytes
/// ends the copy early, as the kernel's does).
///
/// # Safety
/// The sides' offsets are NULL or valid for reads and writes.
unsafe fn copy(src: &Side, dst: &Side, len: usize) -> io::Result<usize> {
    let mut buf = vec![0u8; len.min(1 << 20)];
    let mut done = 0;
    while done < len {
        let want = (len - done).min(buf.len());
        // SAFETY: the caller's promise; `buf` holds `want` bytes.
        let n = match unsafe { src.io(buf.as_mut_ptr(), want, false) } {
            Ok(0) => break,
            Ok(n) => n,
            Err(_) if done > 0 => break,
            Err(e) => return Err(e),
        };
        // SAFETY: the caller's promise; `buf` holds `n` bytes read.
        match unsafe { write_all(dst, &buf[..n]) } {
            Ok(()) => done += n,
            Err(_) if done > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// A copy between two fds, through the cache when it serves either;
/// `pass` otherwise.
///
/// # Safety
/// The offsets are NULL or valid for reads and writes.
unsafe fn copy_or(
    fd_in: c_int,
    off_in: *mut loff_t,
    fd_out: c_int,
    off_out: *mut loff_t,
    len: usize,
    pass: impl FnOnce() -> isize,
) -> isize {
    let (src, dst) = (Side::new(fd_in, off_in), Side::new(fd_out, off_out));
    if src.desc.is_none() && dst.desc.is_none() {
        return pass();
    }
    // SAFETY: the caller's promise; the count is at most `len`, which a
    // buffer bounds by `isize::MAX`.
    inside(-1, || unsafe { copy(&src, &dst, len) }.map(|n| n as isize))
}

/// `copy_file_range(2)`: through the cache when it serves either fd.
///
/// # Safety
/// As `copy_file_range(2)`: `off_in` and `off_out` are NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut loff_t,
    fd_out: c_int,
    off_out: *mut loff_t,
    len: usize,
    flags: c_uint,
) -> isize {
    // SAFETY: the caller's promise, passed on.
    unsafe {
        copy_or(
            fd_in,
            off_in,
            fd_out,
            off_out,
            len.min(isize::MAX as usize),
            || {
                real!(copy_file_range: unsafe extern "C" fn(c_int, *mut loff_t, c_int, *mut loff_t, usize, c_uint) -> isize)(
                    fd_in, off_in, fd_out, off_out, len, flags,
                )
            },
        )
    }
}

/// `sendfile(2)`: through the cache when it serves either fd.
///
/// # Safety
/// As `sendfile(2)`: `offset` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn sendfile(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut off_t,
    count: usize,
) -> isize {
    // SAFETY: the caller's promise, passed on.
    unsafe {
        copy_or(
            in_fd,
            offset,
            out_fd,
            std::ptr::null_mut(),
            count.min(isize::MAX as usize),
            || {
                real!(sendfile: unsafe extern "C" fn(c_int, c_int, *mut off_t, usize) -> isize)(
                    out_fd, in_fd, offset, count,
                )
            },
        )
    }
}

/// Hands the files of the served fds among `fds` to the kernel.
fn hand_served(fds: [c_int; 2]) {
    for fd in fds {
        if let Some(d) = lookup(fd) {
            hand_to_kernel(d.key);
        }
    }
}

crate::after! { hand_served([fd_in, fd_out]) =>
    /// `splice(2)`: a served file on either side is handed to the kernel
    /// first.
    ///
    /// # Safety
    /// As `splice(2)`.
    fn splice(fd_in: c_int, off_in: *mut loff_t, fd_out: c_int, off_out: *mut loff_t, len: usize, flags: c_uint) -> isize;
}

/// `FICLONE`: `_IOW(0x94, 9, int)`.
const FICLONE: c_ulong = 0x4004_9409;
/// `FICLONERANGE`: `_IOW(0x94, 13, struct file_clone_range)`, whose first
/// field is the source fd (an `s64`).
const FICLONERANGE: c_ulong = 0x4020_940d;
/// `FIDEDUPERANGE`: `_IOWR(0x94, 54, struct file_dedupe_range)`.
const FIDEDUPERANGE: c_ulong = 0xc018_9436;

/// The real `ioctl`: variadic in C.
type IoctlFn = unsafe extern "C" fn(c_int, c_ulong, ...) -> c_int;

/// `ioctl(2)`: a reflink or deduplication whose destination or source the
/// cache serves is `EOPNOTSUPP` (the kernel would share blocks the cache
/// has not written back, or change a file under it); anything else
/// passes through. (Variadic in C: as `fcntl`.)
///
/// # Safety
/// As `ioctl(2)`: `arg` is what `request` expects.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: c_ulong) -> c_int {
    let source = match request {
        FICLONE => Some(arg as c_int),
        // SAFETY: the caller's promise: `arg` points to the struct.
        FICLONERANGE if arg != 0 => Some(unsafe { *(arg as *const i64) } as c_int),
        _ => None,
    };
    let touches = matches!(request, FICLONE | FICLONERANGE | FIDEDUPERANGE)
        && (lookup(fd).is_some() || source.and_then(lookup).is_some());
    if touches {
        return inside(-1, || Err(err(libc::EOPNOTSUPP)));
    }
    // SAFETY: the caller's promise, passed on.
    unsafe { real!(ioctl: IoctlFn)(fd, request, arg) }
}

/// `truncate(2)`: through the cache when it serves the file.
///
/// # Safety
/// As `truncate(2)`: `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn truncate(path: *const c_char, length: off_t) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { truncate_served(path, length) } {
        Some(r) => r,
        // SAFETY: the caller's promise, passed on.
        None => unsafe {
            real!(truncate: unsafe extern "C" fn(*const c_char, off_t) -> c_int)(path, length)
        },
    }
}

crate::aliases! {
    truncate64 => truncate(path: *const c_char, length: off_t) -> c_int;
    sendfile64 => sendfile(out_fd: c_int, in_fd: c_int, offset: *mut off_t, count: usize) -> isize;
}
