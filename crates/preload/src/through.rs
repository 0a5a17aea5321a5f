//! What passes through: the marker a thread carries while it runs the
//! library's own code (every interposed call it makes then goes to the C
//! library), the switch that turns the library off for good, and the
//! mapping of the library's errors to `errno`.

use std::cell::Cell;
use std::ffi::c_int;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::real::write_stderr;

thread_local! {
    /// Set while this thread runs the library's own code: every
    /// interposed call it makes then passes through.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Set for good in a child of `fork` and once the process exits or
/// executes another program: every call passes through.
static PASSTHROUGH: AtomicBool = AtomicBool::new(false);

/// Whether this thread is inside the library (or the library is off).
pub(crate) fn passing_through() -> bool {
    PASSTHROUGH.load(Ordering::Relaxed) || INSIDE.with(Cell::get)
}

/// Whether this thread runs the library's own code now (a call it makes
/// is the library's, not the program's).
pub(crate) fn in_library() -> bool {
    INSIDE.with(Cell::get)
}

/// Whether the library is off for the rest of the process.
pub(crate) fn off_for_good() -> bool {
    PASSTHROUGH.load(Ordering::Relaxed)
}

/// Turns the library off for the rest of the process.
pub(crate) fn pass_through_for_good() {
    PASSTHROUGH.store(true, Ordering::Relaxed);
}

/// Run first on every thread the cache starts (its flusher, writeback
/// pool, pressure watcher, IO engine: `CacheBuilder::on_thread_start`):
/// every call the thread makes passes through for good, and it blocks
/// the signals a program may catch, so that none of the program's signal
/// handlers runs there (a handler's write on a served fd would pass
/// through to the kernel behind the cache's back). The signals a fault
/// raises (`SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE`, `SIGTRAP`, `SIGSYS`)
/// stay unblocked: blocked, they would kill the process at once.
pub(crate) fn on_cache_thread() {
    INSIDE.with(|i| i.set(true));
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: `sigfillset` initializes the set it is given; `sigdelset`
    // and `pthread_sigmask` read an initialized set (a null old set is
    // allowed) and change this thread's mask only.
    unsafe {
        libc::sigfillset(set.as_mut_ptr());
        for sig in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGILL,
            libc::SIGFPE,
            libc::SIGTRAP,
            libc::SIGSYS,
        ] {
            libc::sigdelset(set.as_mut_ptr(), sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut());
    }
}

/// Runs `f`, which takes locks of the library's state, with every
/// interposed call of this thread passing through meanwhile: a signal
/// handler that interrupts it (and closes the fd number the kernel just
/// freed, say) never waits for a lock its own thread holds.
pub(crate) fn holding<T>(f: impl FnOnce() -> T) -> T {
    let was = INSIDE.with(|i| i.replace(true));
    let r = f();
    INSIDE.with(|i| i.set(was));
    r
}

/// Runs `f` as the library's own code (its calls pass through), catching
/// a panic, which is reported as `EIO`. The thread's `errno` is that of
/// the error `f` returns, else left as it was.
pub(crate) fn inside<T>(fail: T, f: impl FnOnce() -> io::Result<T>) -> T {
    let was = INSIDE.with(|i| i.replace(true));
    // SAFETY: `__errno_location` returns this thread's errno, valid for the
    // thread's life.
    let saved = unsafe { *libc::__errno_location() };
    let r = panic::catch_unwind(AssertUnwindSafe(f));
    INSIDE.with(|i| i.set(was));
    let errno = match r {
        Ok(Ok(v)) => {
            // SAFETY: as above.
            unsafe { *libc::__errno_location() = saved };
            return v;
        }
        Ok(Err(e)) => errno_of(&e),
        Err(_) => {
            write_stderr(b"foliocache-preload: internal error (a panic), reported as EIO\n");
            libc::EIO
        }
    };
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    fail
}

/// The `errno` value of an error: the library's mapping
/// ([`backing::errno_of`]), but `EBADF` for a write on a handle opened
/// read-only (`PermissionDenied` without an OS error), as `write(2)` on
/// such an fd gives.
pub(crate) fn errno_of(e: &io::Error) -> c_int {
    if e.raw_os_error().is_none() && e.kind() == io::ErrorKind::PermissionDenied {
        return libc::EBADF;
    }
    backing::errno_of(e)
}

/// An error with this `errno` value.
pub(crate) fn err(errno: c_int) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_keep_their_errno_or_map_by_kind() {
        assert_eq!(errno_of(&err(libc::ENOSPC)), libc::ENOSPC);
        use io::ErrorKind as K;
        for (kind, errno) in [
            (K::InvalidInput, libc::EINVAL),
            (K::PermissionDenied, libc::EBADF),
            (K::FileTooLarge, libc::EFBIG),
            (K::WouldBlock, libc::EAGAIN),
            (K::Other, libc::EIO),
        ] {
            assert_eq!(errno_of(&io::Error::new(kind, "x")), errno, "{kind:?}");
        }
    }

    #[test]
    fn inside_sets_errno_on_failure_only_and_catches_panics() {
        // SAFETY: this thread's errno.
        let errno = || unsafe { *libc::__errno_location() };
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = 0 };
        assert_eq!(inside(-1, || Ok(5)), 5);
        assert_eq!(errno(), 0);
        assert_eq!(inside(-1, || Err(err(libc::EBADF))), -1);
        assert_eq!(errno(), libc::EBADF);
        assert_eq!(inside(-1, || -> io::Result<i32> { panic!("a bug") }), -1);
        assert_eq!(errno(), libc::EIO);
        // Inside, every call passes through; outside again, not.
        assert!(inside(false, || Ok(passing_through())));
        assert!(!passing_through());
    }

    /// The cache's threads: every call passes through, even after the
    /// library's own code returns (`inside` restores the marker it
    /// found), and no signal a program catches is delivered there.
    #[test]
    fn a_cache_thread_passes_through_and_takes_no_signals() {
        let (through, blocked) = std::thread::spawn(|| {
            on_cache_thread();
            inside((), || Ok(()));
            let mut now = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
            // SAFETY: `pthread_sigmask` with no new set writes this
            // thread's mask into `now`, which `sigismember` then reads.
            let blocked = unsafe {
                libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), now.as_mut_ptr());
                [libc::SIGUSR1, libc::SIGTERM, libc::SIGALRM, libc::SIGSEGV]
                    .map(|sig| libc::sigismember(now.as_ptr(), sig) == 1)
            };
            (passing_through(), blocked)
        })
        .join()
        .unwrap();
        assert!(through);
        assert_eq!(blocked, [true, true, true, false]);
        assert!(!passing_through());
    }
}
