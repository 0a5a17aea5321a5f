//! The stat family: the kernel's answer, with the size of a file the
//! cache serves replaced by the cache's (which counts data not yet
//! written back).

use std::ffi::{c_char, c_int, c_uint};

use crate::real::real;
use crate::state::{cached_size, lookup, served_len};

/// A stat buffer whose size the cache may correct.
trait Sized64 {
    /// Device and inode.
    fn key(&self) -> (u64, u64);
    /// Sets the size, if the buffer holds one.
    fn set_size(&mut self, size: u64);
}

impl Sized64 for libc::stat {
    fn key(&self) -> (u64, u64) {
        (self.st_dev, self.st_ino)
    }
    fn set_size(&mut self, size: u64) {
        self.st_size = size as libc::off_t;
    }
}

impl Sized64 for libc::statx {
    fn key(&self) -> (u64, u64) {
        (
            libc::makedev(self.stx_dev_major, self.stx_dev_minor),
            self.stx_ino,
        )
    }
    fn set_size(&mut self, size: u64) {
        if self.stx_mask & libc::STATX_SIZE != 0 {
            self.stx_size = size;
        }
    }
}

/// After a successful stat into `buf` (`r == 0`): the cache's size if it
/// serves the file (by fd when `fd` is one it serves, else by device and
/// inode).
///
/// # Safety
/// When `r == 0`, `buf` points to the filled buffer, not otherwise
/// accessed during the call.
unsafe fn corrected<S: Sized64>(r: c_int, fd: Option<c_int>, buf: *mut S) -> c_int {
    if r != 0 || buf.is_null() {
        return r;
    }
    // SAFETY: the caller's promise.
    let st = unsafe { &mut *buf };
    let size = match fd.and_then(lookup) {
        Some(d) => served_len(&d),
        None => cached_size(st.key()),
    };
    if let Some(size) = size {
        st.set_size(size);
    }
    r
}

/// `fstat(2)`.
///
/// # Safety
/// As `fstat(2)`: `buf` is valid for writes of a `struct stat`.
#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    // SAFETY: the caller's promise, passed on.
    let r = unsafe { real!(fstat: unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int)(fd, buf) };
    // SAFETY: filled when 0.
    unsafe { corrected(r, Some(fd), buf) }
}

/// `stat(2)`.
///
/// # Safety
/// As `stat(2)`: `path` is a NUL-terminated string, `buf` valid for writes
/// of a `struct stat`.
#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: the caller's promise, passed on.
    let r = unsafe {
        real!(stat: unsafe extern "C" fn(*const c_char, *mut libc::stat) -> c_int)(path, buf)
    };
    // SAFETY: filled when 0.
    unsafe { corrected(r, None, buf) }
}

/// `lstat(2)`.
///
/// # Safety
/// As `lstat(2)`: `path` is a NUL-terminated string, `buf` valid for
/// writes of a `struct stat`.
#[no_mangle]
pub unsafe extern "C" fn lstat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: the caller's promise, passed on.
    let r = unsafe {
        real!(lstat: unsafe extern "C" fn(*const c_char, *mut libc::stat) -> c_int)(path, buf)
    };
    // SAFETY: filled when 0.
    unsafe { corrected(r, None, buf) }
}

/// `fstatat(2)` (`newfstatat`).
///
/// # Safety
/// As `fstatat(2)`: `path` is a NUL-terminated string, `buf` valid for
/// writes of a `struct stat`.
#[no_mangle]
pub unsafe extern "C" fn fstatat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's promise, passed on.
    let r = unsafe {
        real!(fstatat: unsafe extern "C" fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int)(
            dirfd, path, buf, flags,
        )
    };
    // SAFETY: filled when 0.
    unsafe { corrected(r, None, buf) }
}

/// `statx(2)`.
///
/// # Safety
/// As `statx(2)`: `path` is a NUL-terminated string, `buf` valid for
/// writes of a `struct statx`.
#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    buf: *mut libc::statx,
) -> c_int {
    // SAFETY: the caller's promise, passed on.
    let r = unsafe {
        real!(statx: unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int)(
            dirfd, path, flags, mask, buf,
        )
    };
    // SAFETY: filled when 0.
    unsafe { corrected(r, None, buf) }
}

crate::aliases! {
    fstat64 => fstat(fd: c_int, buf: *mut libc::stat) -> c_int;
    stat64 => stat(path: *const c_char, buf: *mut libc::stat) -> c_int;
    lstat64 => lstat(path: *const c_char, buf: *mut libc::stat) -> c_int;
    fstatat64 => fstatat(dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int;
}

/// Defines the stat functions of glibc before 2.33 (`__fxstat64` and
/// family: a program linked against an older glibc calls them, and
/// glibc keeps them as compatibility symbols) as the current ones: `old
/// => name(args);`. The version argument is ignored: on the supported
/// targets every version glibc accepts fills the one `struct stat`.
macro_rules! versioned {
    ($($old:ident => $name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        #[doc = concat!("`", stringify!($old), "`: [`", stringify!($name), "`], the version ignored.")]
        ///
        /// # Safety
        #[doc = concat!("As [`", stringify!($name), "`].")]
        #[no_mangle]
        pub unsafe extern "C" fn $old(_ver: c_int, $($arg: $ty),*) -> c_int {
            // SAFETY: the caller's promise, passed on.
            unsafe { $name($($arg),*) }
        }
    )*};
}

versioned! {
    __fxstat => fstat(fd: c_int, buf: *mut libc::stat);
    __fxstat64 => fstat(fd: c_int, buf: *mut libc::stat);
    __xstat => stat(path: *const c_char, buf: *mut libc::stat);
    __xstat64 => stat(path: *const c_char, buf: *mut libc::stat);
    __lxstat => lstat(path: *const c_char, buf: *mut libc::stat);
    __lxstat64 => lstat(path: *const c_char, buf: *mut libc::stat);
    __fxstatat => fstatat(dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int);
    __fxstatat64 => fstatat(dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int);
}
