//! The calls that make, duplicate and close fds: an fd opened on a
//! regular file under a served directory gets an entry (`state::adopt`),
//! a duplicate shares its source's, a close removes it.

use std::ffi::{c_char, c_int, c_uint, c_ulong};

use crate::real::real;
use crate::state::{
    adopt, closing, closing_range, dup_entry, dup_onto, hand_to_kernel, lookup, serving,
};

/// The fd an open returned, adopted if the cache serves its file.
fn adopted(fd: c_int, flags: c_int) -> c_int {
    if fd >= 0 && serving() {
        adopt(fd, flags);
    }
    fd
}

/// The real `open`, `openat`: variadic in C.
type OpenFn = unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int;
type OpenatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int;

/// `open(2)`. (Variadic in C: `mode` is read where the C calling
/// convention of the supported targets puts the third argument, and only
/// meaningful with `O_CREAT` or `O_TMPFILE`, as for the kernel.)
///
/// # Safety
/// As `open(2)`: `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's promise, passed on.
    adopted(unsafe { real!(open: OpenFn)(path, flags, mode) }, flags)
}

/// `openat(2)` (variadic in C: as [`open`]).
///
/// # Safety
/// As `openat(2)`: `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: the caller's promise, passed on.
    adopted(
        unsafe { real!(openat: OpenatFn)(dirfd, path, flags, mode) },
        flags,
    )
}

/// `creat(2)`.
///
/// # Safety
/// As `creat(2)`: `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: libc::mode_t) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { open(path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode) }
}

/// `__open_2`, `open` as `_FORTIFY_SOURCE` calls it (no mode).
///
/// # Safety
/// As `open(2)`: `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's promise, passed on.
    let fd = unsafe {
        real!(__open_2: unsafe extern "C" fn(*const c_char, c_int) -> c_int)(path, flags)
    };
    adopted(fd, flags)
}

/// `__openat_2`, `openat` as `_FORTIFY_SOURCE` calls it (no mode).
///
/// # Safety
/// As `openat(2)`: `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's promise, passed on.
    let fd = unsafe {
        real!(__openat_2: unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int)(
            dirfd, path, flags,
        )
    };
    adopted(fd, flags)
}

crate::aliases! {
    open64 => open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
    openat64 => openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
    creat64 => creat(path: *const c_char, mode: libc::mode_t) -> c_int;
    __open64_2 => __open_2(path: *const c_char, flags: c_int) -> c_int;
    __openat64_2 => __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int;
}

/// `close(2)`: the fd closed and its entry removed in one hold of the
/// table (`state::closing`). The file is written back when its last fd
/// goes.
#[no_mangle]
pub extern "C" fn close(fd: c_int) -> c_int {
    // SAFETY: an integer only.
    closing(fd, || unsafe {
        real!(close: unsafe extern "C" fn(c_int) -> c_int)(fd)
    })
}

/// `close_range(2)`: as [`close`] for each fd closed (`CLOSE_RANGE_CLOEXEC`
/// closes none).
#[no_mangle]
pub extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    // SAFETY: integers only.
    let call = || unsafe {
        real!(close_range: unsafe extern "C" fn(c_uint, c_uint, c_int) -> c_int)(first, last, flags)
    };
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int != 0 {
        return call();
    }
    let clamp = |n: c_uint| c_int::try_from(n).unwrap_or(c_int::MAX);
    closing_range(clamp(first), clamp(last), call)
}

/// `closefrom(3)`: as [`close`] for each fd closed.
#[no_mangle]
pub extern "C" fn closefrom(lowfd: c_int) {
    closing_range(lowfd.max(0), c_int::MAX, || {
        // SAFETY: an integer only.
        unsafe { real!(closefrom: unsafe extern "C" fn(c_int))(lowfd) };
        0
    });
}

/// After a duplication of `from` returned `to`, a number that was free:
/// `to` shares the entry of `from`, or has none.
fn duplicated(from: c_int, to: c_int) -> c_int {
    dup_entry(from, to);
    to
}

/// `dup(2)`.
#[no_mangle]
pub extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: an integer only.
    duplicated(fd, unsafe {
        real!(dup: unsafe extern "C" fn(c_int) -> c_int)(fd)
    })
}

/// `dup2(2)`: `to` replaced and its entry with it in one hold of the
/// table (`state::dup_onto`).
#[no_mangle]
pub extern "C" fn dup2(from: c_int, to: c_int) -> c_int {
    dup_onto(from, to, || {
        // SAFETY: integers only.
        unsafe { real!(dup2: unsafe extern "C" fn(c_int, c_int) -> c_int)(from, to) }
    })
}

/// `dup3(2)`: as [`dup2`].
#[no_mangle]
pub extern "C" fn dup3(from: c_int, to: c_int, flags: c_int) -> c_int {
    dup_onto(from, to, || {
        // SAFETY: integers only.
        unsafe { real!(dup3: unsafe extern "C" fn(c_int, c_int, c_int) -> c_int)(from, to, flags) }
    })
}

/// The real `fcntl`: variadic in C.
type FcntlFn = unsafe extern "C" fn(c_int, c_int, ...) -> c_int;

/// `fcntl(2)`: `F_DUPFD` and `F_DUPFD_CLOEXEC` duplicate the entry;
/// `F_SETFL` changing `O_APPEND` of a served fd hands its file to the
/// kernel first; everything else is the kernel's, on the real fd.
/// (Variadic in C: `arg` is read where the C calling convention of the
/// supported targets puts the third argument, an integer or a pointer,
/// and passed on as it came.)
///
/// # Safety
/// As `fcntl(2)`: `arg` is what `cmd` expects.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    if cmd == libc::F_SETFL {
        if let Some(d) = lookup(fd) {
            if (arg as c_int & libc::O_APPEND != 0) != d.append {
                hand_to_kernel(d.key);
            }
        }
    }
    // SAFETY: the caller's promise, passed on.
    let r = unsafe { real!(fcntl: FcntlFn)(fd, cmd, arg) };
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => duplicated(fd, r),
        _ => r,
    }
}

crate::aliases! {
    fcntl64 => fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int;
}
