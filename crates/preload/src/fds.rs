//! The calls that make, duplicate and close fds: an fd opened on a
//! regular file under a served directory gets an entry (`state::adopt`),
//! a duplicate shares its source's, a close removes it.

use std::ffi::{c_char, c_int, c_uint, c_ulong};

use crate::limit;
use crate::real::real;
use crate::state::{
    adopt, closing, closing_range, dup_entry, dup_onto, free_own_fd, hand_to_kernel, lookup,
    serving,
};
use crate::through::in_library;

/// The fd an open returned (`again` makes the open again), kept within
/// the program's limit ([`within_limit`]) and adopted if the cache serves
/// its file; one the library itself opened (close-on-exec, as all of its
/// own are: a signal handler's open in the middle of the library's code
/// without `O_CLOEXEC` is left as the kernel made it) goes above the
/// program's limit (`limit::own`).
fn adopted(fd: c_int, flags: c_int, again: impl FnMut() -> c_int) -> c_int {
    if in_library() {
        return if flags & libc::O_CLOEXEC != 0 {
            limit::own(fd)
        } else {
            fd
        };
    }
    let fd = within_limit(fd, 0, flags & libc::O_CLOEXEC != 0, again);
    if fd >= 0 && serving() {
        adopt(fd, flags);
    }
    fd
}

/// `fd`, which the kernel just made for the program (`again` makes it
/// again), as the kernel would have made it under the program's own
/// limit: one past the limit (every lower number was taken) is moved down
/// once a served file whose cache descriptor counts against the limit is
/// handed to the kernel, or else closed, the call failing with `EMFILE`;
/// an `EMFILE` of the kernel's is retried while such files are left.
fn within_limit(
    mut fd: c_int,
    min: c_int,
    cloexec: bool,
    mut again: impl FnMut() -> c_int,
) -> c_int {
    loop {
        if fd >= 0 && !limit::beyond(fd) {
            return fd;
        }
        if fd >= 0 {
            // Every number below the program's limit is taken.
            loop {
                if !free_own_fd() {
                    limit::close_now(fd);
                    return limit::fail(libc::EMFILE);
                }
                if let Some(moved) = limit::move_down(fd, min, cloexec) {
                    return moved;
                }
            }
        }
        // SAFETY: this thread's errno.
        if unsafe { *libc::__errno_location() } != libc::EMFILE || !free_own_fd() {
            return fd;
        }
        fd = again();
    }
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
    // SAFETY: the caller's promise, passed on (each time).
    let call = || unsafe { real!(open: OpenFn)(path, flags, mode) };
    adopted(call(), flags, call)
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
    // SAFETY: the caller's promise, passed on (each time).
    let call = || unsafe { real!(openat: OpenatFn)(dirfd, path, flags, mode) };
    adopted(call(), flags, call)
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
    // SAFETY: the caller's promise, passed on (each time).
    let call = || unsafe {
        real!(__open_2: unsafe extern "C" fn(*const c_char, c_int) -> c_int)(path, flags)
    };
    adopted(call(), flags, call)
}

/// `__openat_2`, `openat` as `_FORTIFY_SOURCE` calls it (no mode).
///
/// # Safety
/// As `openat(2)`: `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's promise, passed on (each time).
    let call = || unsafe {
        real!(__openat_2: unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int)(
            dirfd, path, flags,
        )
    };
    adopted(call(), flags, call)
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

/// `dup(2)`: the new fd within the program's limit ([`within_limit`]).
#[no_mangle]
pub extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: an integer only.
    let call = || unsafe { real!(dup: unsafe extern "C" fn(c_int) -> c_int)(fd) };
    let r = call();
    if in_library() {
        return r;
    }
    duplicated(fd, within_limit(r, 0, false, call))
}

/// Whether `to` is at or past the program's limit, which the kernel's
/// `dup2`/`dup3` refuse (`EBADF`) past `RLIMIT_NOFILE`.
fn past_limit(to: c_int) -> bool {
    !in_library() && limit::beyond(to)
}

/// `dup2(2)`: `to` replaced and its entry with it in one hold of the
/// table (`state::dup_onto`).
#[no_mangle]
pub extern "C" fn dup2(from: c_int, to: c_int) -> c_int {
    if past_limit(to) {
        return limit::fail(libc::EBADF);
    }
    dup_onto(from, to, || {
        // SAFETY: integers only.
        unsafe { real!(dup2: unsafe extern "C" fn(c_int, c_int) -> c_int)(from, to) }
    })
}

/// `dup3(2)`: as [`dup2`].
#[no_mangle]
pub extern "C" fn dup3(from: c_int, to: c_int, flags: c_int) -> c_int {
    if past_limit(to) {
        return limit::fail(libc::EBADF);
    }
    dup_onto(from, to, || {
        // SAFETY: integers only.
        unsafe { real!(dup3: unsafe extern "C" fn(c_int, c_int, c_int) -> c_int)(from, to, flags) }
    })
}

/// The real `fcntl`: variadic in C.
type FcntlFn = unsafe extern "C" fn(c_int, c_int, ...) -> c_int;

/// `fcntl(2)`: `F_DUPFD` and `F_DUPFD_CLOEXEC` duplicate the entry (the
/// new fd within the program's limit, a least number at or past it
/// `EINVAL`, as the kernel's);
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
    // SAFETY: the caller's promise, passed on (each time).
    let call = || unsafe { real!(fcntl: FcntlFn)(fd, cmd, arg) };
    if !matches!(cmd, libc::F_DUPFD | libc::F_DUPFD_CLOEXEC) || in_library() {
        return call();
    }
    // (The kernel reads the argument as an int.)
    let min = arg as c_int;
    if limit::beyond(min) {
        return limit::fail(libc::EINVAL);
    }
    let cloexec = cmd == libc::F_DUPFD_CLOEXEC;
    duplicated(fd, within_limit(call(), min, cloexec, call))
}

crate::aliases! {
    fcntl64 => fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int;
}
