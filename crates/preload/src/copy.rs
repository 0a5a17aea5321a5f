//! Calls that move data between fds, or change a file, inside the kernel:
//! for a file the cache serves they would bypass it (and the cache would
//! then write its stale view back). `copy_file_range` and `sendfile` copy
//! through the cache instead (refusing what the kernel refuses); `splice`
//! hands a served file to the kernel first; a reflink (`FICLONE`, `FICLONERANGE`, `FIDEDUPERANGE`) touching
//! a served file is refused with `EOPNOTSUPP`, which makes `cp` copy;
//! `truncate` by path goes through the cache when it serves the file.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void};
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use fc::{CachedFile, ReadFlags};
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

    /// Where the side reads or writes now: the offset given, else the
    /// position (the description's, or the kernel's).
    ///
    /// # Safety
    /// `offset` is NULL or valid for reads.
    unsafe fn start(&self) -> io::Result<u64> {
        // SAFETY: the caller's promise.
        if let Some(at) = unsafe { self.at() }? {
            return Ok(at);
        }
        match &self.desc {
            Some(d) => d.at_position(self.fd, |p| Ok((p, p))),
            // (A pipe or socket: not a side these calls take.)
            None => kernel_offset(self.fd, 0, libc::SEEK_CUR).map_err(|e| {
                if e.raw_os_error() == Some(libc::ESPIPE) {
                    err(libc::EINVAL)
                } else {
                    e
                }
            }),
        }
    }

    /// Sets where the side reads on: the offset given, else the position.
    ///
    /// # Safety
    /// `offset` is NULL or valid for writes.
    unsafe fn set(&self, to: u64) -> io::Result<()> {
        if !self.offset.is_null() {
            // SAFETY: the caller's promise.
            unsafe { *self.offset = to as loff_t };
            return Ok(());
        }
        match &self.desc {
            Some(d) => d.at_position(self.fd, |_| Ok(((), to)))?,
            None => {
                kernel_offset(self.fd, to as off_t, libc::SEEK_SET)?;
            }
        }
        Ok(())
    }

    /// The file's device, inode and size (the cache's size when served).
    fn file(&self) -> io::Result<((u64, u64), u64)> {
        // SAFETY: an fd, borrowed for the call (an fd closed meanwhile is
        // the error `fstat` gives).
        let st = rustix::fs::fstat(unsafe { BorrowedFd::borrow_raw(self.fd) })?;
        let size = match &self.desc {
            Some(d) => d.file.len()?,
            None => st.st_size as u64,
        };
        Ok(((st.st_dev, st.st_ino), size))
    }

    /// Reads into the `len` bytes at `p` from `at`, once, moving nothing:
    /// the count read.
    ///
    /// # Safety
    /// `p` is valid for writes of `len` bytes.
    unsafe fn read_at(&self, p: *mut u8, len: usize, at: u64) -> io::Result<usize> {
        let v = [iovec {
            iov_base: p.cast(),
            iov_len: len,
        }];
        // SAFETY: the caller's promise.
        unsafe {
            match &self.desc {
                Some(d) => read_iov(self.fd, d, &v, Some(at), ReadFlags::NONE),
                None => kernel(real!(pread: Pread)(self.fd, p.cast(), len, at as off_t)),
            }
        }
    }

    /// Writes from the `len` bytes at `p`, once, at the offset (moved on)
    /// or the position: the count written.
    ///
    /// # Safety
    /// `offset` is NULL or valid for reads and writes; `p` is valid for
    /// reads of `len` bytes.
    unsafe fn write(&self, p: *const u8, len: usize) -> io::Result<usize> {
        // SAFETY: the caller's promise.
        let at = unsafe { self.at() }?;
        let v = [iovec {
            iov_base: p.cast_mut().cast(),
            iov_len: len,
        }];
        // SAFETY: the caller's promise, for `p`.
        let n = unsafe {
            match (&self.desc, at) {
                (Some(d), _) => write_iov(self.fd, d, &v, at, WriteHow::default())?,
                (None, Some(at)) => {
                    kernel(real!(pwrite: Pwrite)(self.fd, p.cast(), len, at as off_t))?
                }
                (None, None) => kernel(real!(write: Write)(self.fd, p.cast(), len))?,
            }
        };
        if let Some(at) = at {
            // SAFETY: the caller's promise.
            unsafe { self.set(at + n as u64) }?;
        }
        Ok(n)
    }
}

/// The C prototypes of the kernel-side calls a copy makes.
type Pread = unsafe extern "C" fn(c_int, *mut c_void, usize, off_t) -> isize;
type Write = unsafe extern "C" fn(c_int, *const c_void, usize) -> isize;
type Pwrite = unsafe extern "C" fn(c_int, *const c_void, usize, off_t) -> isize;

/// A system call's count, or its error.
fn kernel(r: isize) -> io::Result<usize> {
    usize::try_from(r).map_err(|_| io::Error::last_os_error())
}

/// The real `lseek` of a kernel fd.
fn kernel_offset(fd: c_int, offset: off_t, whence: c_int) -> io::Result<u64> {
    // SAFETY: integers only.
    let r = unsafe {
        real!(lseek: unsafe extern "C" fn(c_int, off_t, c_int) -> off_t)(fd, offset, whence)
    };
    u64::try_from(r).map_err(|_| io::Error::last_os_error())
}

/// Writes all of `buf` to `dst`: the bytes written, and the error that
/// stopped it short, if one did.
///
/// # Safety
/// `dst`'s offset is NULL or valid for reads and writes.
unsafe fn write_all(dst: &Side, buf: &[u8]) -> (usize, Option<io::Error>) {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: the caller's promise; `buf` is valid for reads of its
        // length, and only read.
        match unsafe { dst.write(buf[done..].as_ptr(), buf.len() - done) } {
            Ok(0) => return (done, Some(err(libc::EIO))),
            Ok(n) => done += n,
            Err(e) => return (done, Some(e)),
        }
    }
    (done, None)
}

/// Copies up to `len` bytes from `src` to `dst` through a buffer; stops
/// at end of file. Returns the bytes copied (an error after some bytes
/// ends the copy early, as the kernel's does). The source is read at
/// explicit offsets and moved on, at the end, by the bytes written only.
///
/// # Safety
/// The sides' offsets are NULL or valid for reads and writes.
unsafe fn copy(src: &Side, dst: &Side, len: usize) -> io::Result<usize> {
    // SAFETY: the caller's promise.
    let start = unsafe { src.start() }?;
    let mut buf = vec![0u8; len.min(1 << 20)];
    let mut done = 0;
    let mut failed = None;
    while done < len {
        let want = (len - done).min(buf.len());
        // SAFETY: `buf` holds `want` bytes.
        let n = match unsafe { src.read_at(buf.as_mut_ptr(), want, start + done as u64) } {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
        // SAFETY: the caller's promise; `buf` holds `n` bytes read.
        let (written, e) = unsafe { write_all(dst, &buf[..n]) };
        done += written;
        if e.is_some() {
            failed = e;
            break;
        }
    }
    // SAFETY: the caller's promise.
    unsafe { src.set(start + done as u64) }?;
    match failed {
        Some(e) if done == 0 => Err(e),
        _ => Ok(done),
    }
}

/// `copy_file_range`'s refusals, as the kernel's: nonzero flags, and
/// ranges that overlap in one file (`EINVAL`); the length is first cut
/// at the source's end, as the kernel cuts it.
///
/// # Safety
/// The sides' offsets are NULL or valid for reads.
unsafe fn check_ranges(src: &Side, dst: &Side, len: usize, flags: c_uint) -> io::Result<()> {
    if flags != 0 {
        return Err(err(libc::EINVAL));
    }
    let (key_in, size_in) = src.file()?;
    let (key_out, _) = dst.file()?;
    if key_in != key_out {
        return Ok(());
    }
    // SAFETY: the caller's promise.
    let (pos_in, pos_out) = unsafe { (src.start()?, dst.start()?) };
    let count = size_in.saturating_sub(pos_in).min(len as u64);
    if count > 0 && pos_out < pos_in + count && pos_in < pos_out + count {
        return Err(err(libc::EINVAL));
    }
    Ok(())
}

/// A copy between two fds, through the cache when it serves either
/// (`check` first, on the sides); `pass` otherwise.
///
/// # Safety
/// The offsets are NULL or valid for reads and writes.
unsafe fn copy_or(
    fd_in: c_int,
    off_in: *mut loff_t,
    fd_out: c_int,
    off_out: *mut loff_t,
    len: usize,
    check: impl FnOnce(&Side, &Side) -> io::Result<()>,
    pass: impl FnOnce() -> isize,
) -> isize {
    let (src, dst) = (Side::new(fd_in, off_in), Side::new(fd_out, off_out));
    if src.desc.is_none() && dst.desc.is_none() {
        return pass();
    }
    let mut unslotted = false;
    let r = inside(-1, || {
        // The check too: it reads a served side's size, which fails for
        // want of a slot as a copy does (then the kernel checks and copies).
        check(&src, &dst)
            // SAFETY: the caller's promise; the count is at most `len`,
            // which a buffer bounds by `isize::MAX`.
            .and_then(|()| unsafe { copy(&src, &dst, len) })
            .map(|n| n as isize)
            .inspect_err(|e| unslotted = fc::SharedCache::out_of_slots(e))
    });
    if !unslotted {
        return r;
    }
    // A side the group's cache cannot serve for want of a slot (nothing
    // copied): both files are handed to the kernel, which copies.
    let keys: Vec<(u64, u64)> = [src.desc, dst.desc]
        .into_iter()
        .flatten()
        .map(|d| d.key)
        .collect();
    for key in keys {
        hand_to_kernel(key);
    }
    pass()
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
            // (The offsets: the caller's promise, as for the copy.)
            |src, dst| check_ranges(src, dst, len, flags),
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
            |_, _| Ok(()),
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

/// `FS_IOC_SETFLAGS`: `_IOW('f', 2, long)` (`chattr`'s call).
const FS_IOC_SETFLAGS: c_ulong = 0x4008_6602;
/// `FS_IOC32_SETFLAGS`: `_IOW('f', 2, int)`.
const FS_IOC32_SETFLAGS: c_ulong = 0x4004_6602;
/// `FS_IOC_FSSETXATTR`: `_IOW('X', 32, struct fsxattr)`.
const FS_IOC_FSSETXATTR: c_ulong = 0x401c_5820;

/// The real `ioctl`: variadic in C.
type IoctlFn = unsafe extern "C" fn(c_int, c_ulong, ...) -> c_int;

/// `ioctl(2)`: a reflink or deduplication whose destination or source the
/// cache serves is `EOPNOTSUPP` (the kernel would share blocks the cache
/// has not written back, or change a file under it); a change of a served
/// file's inode flags hands it to the kernel first; anything else passes
/// through. (Variadic in C: as `fcntl`.)
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
    // An inode's flags (immutable, append-only: `chattr`) bind every
    // later write through the kernel, a writeback's included, where the
    // kernel's own writeback of pages dirtied before goes on: the file is
    // written back and handed to the kernel first, so that the writes
    // this process makes from now on meet the flags as on ext4.
    if matches!(
        request,
        FS_IOC_SETFLAGS | FS_IOC32_SETFLAGS | FS_IOC_FSSETXATTR
    ) {
        if let Some(d) = lookup(fd) {
            hand_to_kernel(d.key);
        }
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
