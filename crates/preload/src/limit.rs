//! The program's limit on open files (`RLIMIT_NOFILE`) stays the
//! program's: the cache's own descriptors (one a file it serves, one a
//! slot of the group's, its rings and memory files) live above it, so a
//! program opens as many files as the kernel would give it, and gets
//! `EMFILE` where the kernel would (docs/preload.md, "Open-file limits").
//!
//! - The program's limit (soft and hard) is kept here and is what
//!   `getrlimit`, `setrlimit`, `prlimit`, `sysconf(_SC_OPEN_MAX)` and
//!   `getdtablesize` show and change; the kernel's soft limit is raised to
//!   the hard one, where that is higher, and the room between is the
//!   cache's: every descriptor the library makes is moved there
//!   ([`own`], [`backing::place_descriptor`]).
//! - A descriptor the program gets at or past its own soft limit (every
//!   lower number taken) is one the kernel would have refused: it is
//!   closed and the call fails with `EMFILE` (`fds.rs`), after the
//!   library handed to the kernel any served file whose own descriptor it
//!   could not move out of the program's range.
//! - Before an `exec` (and around `posix_spawn`, `system`, `popen`) the
//!   kernel's soft limit is the program's again, so the program started
//!   inherits the program's limit, not the raised one.
//!
//! With no room (the soft limit at the hard one, which only a privileged
//! process may raise) nothing moves: the cache's descriptors count against
//! the program's limit, and an `open` that fails with `EMFILE` while the
//! cache holds some of its own hands served files to the kernel and is
//! made again.

use std::ffi::c_int;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::real::real;

/// The program's soft limit; `u64::MAX` until the library took it (no
/// descriptor is then refused).
static SOFT: AtomicU64 = AtomicU64::new(u64::MAX);
/// The program's hard limit.
static HARD: AtomicU64 = AtomicU64::new(u64::MAX);

/// `RLIMIT_NOFILE` as the C library's calls take it.
const NOFILE: libc::__rlimit_resource_t = libc::RLIMIT_NOFILE as libc::__rlimit_resource_t;

/// The C library's `prlimit` on this process (`new` set where given; the
/// limit before returned), with its `errno` on failure.
fn real_prlimit(new: Option<libc::rlimit>) -> Result<libc::rlimit, c_int> {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let new_ptr = new.as_ref().map_or(std::ptr::null(), std::ptr::from_ref);
    // SAFETY: `new_ptr` is null or points at a limit; `old` is writable.
    let r = unsafe {
        real!(prlimit: unsafe extern "C" fn(libc::pid_t, libc::__rlimit_resource_t, *const libc::rlimit, *mut libc::rlimit) -> c_int)(
            0, NOFILE, new_ptr, &mut old,
        )
    };
    if r == 0 {
        Ok(old)
    } else {
        // SAFETY: this thread's errno.
        Err(unsafe { *libc::__errno_location() })
    }
}

/// The kernel's soft limit for the program's `(soft, hard)`: the hard
/// one, the room above the program's soft limit the cache's.
fn kernel_soft(soft: u64, hard: u64) -> u64 {
    soft.max(hard)
}

/// Takes the program's limit (the library's constructor, when it serves
/// directories) and raises the kernel's soft limit to the hard one, the
/// cache's room above the program's.
pub(crate) fn take() {
    let Ok(now) = real_prlimit(None) else {
        return;
    };
    let (soft, hard) = (now.rlim_cur, now.rlim_max);
    HARD.store(hard, Ordering::Release);
    SOFT.store(soft, Ordering::Release);
    raise(soft, hard);
}

/// Sets the kernel's soft limit to [`kernel_soft`] of the program's, and
/// the floor of the cache's descriptors to the program's soft limit where
/// that leaves room.
fn raise(soft: u64, hard: u64) {
    let room = hard > soft
        && real_prlimit(Some(libc::rlimit {
            rlim_cur: kernel_soft(soft, hard),
            rlim_max: hard,
        }))
        .is_ok();
    let floor = if room {
        c_int::try_from(soft).unwrap_or(0)
    } else {
        0
    };
    backing::set_descriptor_floor(floor);
}

/// The program's soft limit, as the kernel's `rlimit(RLIMIT_NOFILE)`.
pub(crate) fn soft() -> u64 {
    SOFT.load(Ordering::Acquire)
}

/// Whether `fd`, which the kernel just gave the program, is at or past
/// the program's soft limit: a number the kernel would not have given it.
pub(crate) fn beyond(fd: c_int) -> bool {
    u64::try_from(fd).is_ok_and(|n| n >= soft())
}

/// Whether the cache's descriptors can live above the program's limit.
pub(crate) fn has_room() -> bool {
    backing::descriptor_floor() > 0
}

/// A descriptor the library itself just opened (its own `open`s pass
/// through the interposed ones): moved above the program's limit, where
/// there is room, close-on-exec as all of the library's are. Returns the
/// number it has now.
pub(crate) fn own(fd: c_int) -> c_int {
    if fd < 0 || !has_room() {
        return fd;
    }
    // SAFETY: `fd` was just opened by the library, which owns it; taken
    // here and given back as a number.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    std::os::fd::IntoRawFd::into_raw_fd(backing::place_descriptor(owned))
}

/// The program's descriptor `fd`, which it got past its limit, moved to
/// the lowest free number from `min` on (with its close-on-exec flag) if
/// that is below the limit: the old number closed, the new one returned.
/// `None`, with nothing changed, if no number below the limit is free.
pub(crate) fn move_down(fd: c_int, min: c_int, cloexec: bool) -> Option<c_int> {
    // SAFETY: the program's new descriptor, open, borrowed for the calls.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let moved = rustix::io::fcntl_dupfd_cloexec(borrowed, min).ok()?;
    if beyond(moved.as_raw_fd()) {
        return None;
    }
    if !cloexec {
        rustix::io::fcntl_setfd(&moved, rustix::io::FdFlags::empty()).ok()?;
    }
    close_now(fd);
    Some(std::os::fd::IntoRawFd::into_raw_fd(moved))
}

/// Closes `fd`, a descriptor the kernel made for the program that the
/// program does not get.
pub(crate) fn close_now(fd: c_int) {
    // SAFETY: the caller's: `fd` is open, and nothing else uses it.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
}

/// Before an `exec`, or a `posix_spawn`, `system` or `popen`: the kernel's
/// soft limit is the program's again, which the new program inherits
/// (the cache's descriptors above it stay open).
pub(crate) fn lower() {
    let soft = soft();
    if soft != u64::MAX && has_room() {
        let _ = real_prlimit(Some(libc::rlimit {
            rlim_cur: soft,
            rlim_max: HARD.load(Ordering::Acquire),
        }));
    }
}

/// After a `posix_spawn`, `system` or `popen` returned: the room raised
/// again.
pub(crate) fn lift() {
    let soft = soft();
    if soft != u64::MAX && has_room() {
        raise(soft, HARD.load(Ordering::Acquire));
    }
}

/// Sets the program's limit as `setrlimit(RLIMIT_NOFILE)` would: `EINVAL`
/// for a soft limit above the hard one; the kernel checks the hard limit
/// (`EPERM` to raise it without the privilege, or past `fs.nr_open`).
fn set(new: libc::rlimit) -> Result<(), c_int> {
    if new.rlim_cur > new.rlim_max {
        return Err(libc::EINVAL);
    }
    real_prlimit(Some(libc::rlimit {
        rlim_cur: kernel_soft(new.rlim_cur, new.rlim_max),
        rlim_max: new.rlim_max,
    }))?;
    HARD.store(new.rlim_max, Ordering::Release);
    SOFT.store(new.rlim_cur, Ordering::Release);
    raise(new.rlim_cur, new.rlim_max);
    Ok(())
}

/// The program's limit, as `getrlimit(RLIMIT_NOFILE)` gives it.
fn get() -> libc::rlimit {
    libc::rlimit {
        rlim_cur: soft(),
        rlim_max: HARD.load(Ordering::Acquire),
    }
}

/// Whether a call on `resource` of process `pid` is the program's open-
/// file limit, kept here (once taken).
fn ours(pid: libc::pid_t, resource: libc::__rlimit_resource_t) -> bool {
    resource == NOFILE
        && soft() != u64::MAX
        && (pid == 0 || u32::try_from(pid).is_ok_and(|p| p == std::process::id()))
}

/// `-1` with `errno` set: a call's failure.
pub(crate) fn fail(errno: c_int) -> c_int {
    // SAFETY: this thread's errno.
    unsafe { *libc::__errno_location() = errno };
    -1
}

/// `prlimit(2)`: the program's open-file limit for this process (read
/// into `old` if given, then set from `new` if given); any other limit or
/// process the kernel's.
///
/// # Safety
/// As `prlimit(2)`: `new` and `old` are null or point at limits.
#[no_mangle]
pub unsafe extern "C" fn prlimit(
    pid: libc::pid_t,
    resource: libc::__rlimit_resource_t,
    new: *const libc::rlimit,
    old: *mut libc::rlimit,
) -> c_int {
    if !ours(pid, resource) {
        // SAFETY: the caller's promise, passed on.
        return unsafe {
            real!(prlimit: unsafe extern "C" fn(libc::pid_t, libc::__rlimit_resource_t, *const libc::rlimit, *mut libc::rlimit) -> c_int)(
                pid, resource, new, old,
            )
        };
    }
    let before = get();
    // SAFETY: the caller's promise: null or a limit.
    if let Some(new) = unsafe { new.as_ref() } {
        if let Err(errno) = set(*new) {
            return fail(errno);
        }
    }
    // SAFETY: the caller's promise: null or writable.
    if let Some(old) = unsafe { old.as_mut() } {
        *old = before;
    }
    0
}

/// `getrlimit(2)`: as [`prlimit`] on this process.
///
/// # Safety
/// As `getrlimit(2)`: `limit` points at a writable limit.
#[no_mangle]
pub unsafe extern "C" fn getrlimit(
    resource: libc::__rlimit_resource_t,
    limit: *mut libc::rlimit,
) -> c_int {
    if limit.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: the caller's promise, passed on.
    unsafe { prlimit(0, resource, std::ptr::null(), limit) }
}

/// `setrlimit(2)`: as [`prlimit`] on this process.
///
/// # Safety
/// As `setrlimit(2)`: `limit` points at a limit.
#[no_mangle]
pub unsafe extern "C" fn setrlimit(
    resource: libc::__rlimit_resource_t,
    limit: *const libc::rlimit,
) -> c_int {
    if limit.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: the caller's promise, passed on.
    unsafe { prlimit(0, resource, limit, std::ptr::null_mut()) }
}

crate::aliases! {
    prlimit64 => prlimit(pid: libc::pid_t, resource: libc::__rlimit_resource_t, new: *const libc::rlimit, old: *mut libc::rlimit) -> c_int;
    getrlimit64 => getrlimit(resource: libc::__rlimit_resource_t, limit: *mut libc::rlimit) -> c_int;
    setrlimit64 => setrlimit(resource: libc::__rlimit_resource_t, limit: *const libc::rlimit) -> c_int;
}

/// `sysconf(3)`: `_SC_OPEN_MAX` is the program's soft limit (the C
/// library reads the kernel's); every other name the C library's.
#[no_mangle]
pub extern "C" fn sysconf(name: c_int) -> libc::c_long {
    let soft = soft();
    if name == libc::_SC_OPEN_MAX && soft != u64::MAX {
        return libc::c_long::try_from(soft).unwrap_or(libc::c_long::MAX);
    }
    // SAFETY: an integer only.
    unsafe { real!(sysconf: unsafe extern "C" fn(c_int) -> libc::c_long)(name) }
}

/// `getdtablesize(3)`: the program's soft limit.
#[no_mangle]
pub extern "C" fn getdtablesize() -> c_int {
    let soft = soft();
    if soft != u64::MAX {
        return c_int::try_from(soft).unwrap_or(c_int::MAX);
    }
    // SAFETY: no arguments.
    unsafe { real!(getdtablesize: unsafe extern "C" fn() -> c_int)() }
}
