//! Errors as C sees them: an `errno` value, and a message kept per thread
//! for `fc_last_error`. Every exported function runs its body through
//! [`call`], which turns an error, or a panic, into the function's failure
//! value with `errno` set.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::io;
use std::panic::{self, AssertUnwindSafe};

/// An error on its way to C: the `errno` value and the message.
#[derive(Debug)]
pub(crate) struct Error {
    /// The `errno` value the call sets.
    pub(crate) errno: i32,
    /// What `fc_last_error` returns afterwards.
    pub(crate) message: String,
}

impl Error {
    /// An error with this `errno` value and message.
    pub(crate) fn new(errno: i32, message: impl Into<String>) -> Self {
        Error {
            errno,
            message: message.into(),
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::new(errno_of(&e), e.to_string())
    }
}

/// What a call returns: a value, or an error for C.
pub(crate) type Result<T> = std::result::Result<T, Error>;

/// The `errno` value of an `io::Error` (the library's own mapping).
pub(crate) use backing::errno_of;

thread_local! {
    /// The message of this thread's last failed call (empty before one).
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `e` as this thread's last error: sets `errno` and the message.
fn record(e: Error) {
    // A message cannot hold a NUL in C: those bytes become spaces.
    let bytes: Vec<u8> = e
        .message
        .into_bytes()
        .into_iter()
        .map(|b| if b == 0 { b' ' } else { b })
        .collect();
    let message = CString::new(bytes).unwrap_or_default();
    // (During the thread's exit the message may be gone already: then only
    // errno tells.)
    let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = message);
    // SAFETY: `__errno_location` returns the address of this thread's
    // errno, valid for the thread's life and written only by this thread.
    unsafe { *libc::__errno_location() = e.errno };
}

/// The message of this thread's last failed call: a pointer valid until
/// the thread's next failed call, or its exit.
pub(crate) fn last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|last| last.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// Runs an exported function's body: its value, or `fail` with `errno`
/// and the message set when it returns an error or panics (a panic is
/// caught here, never unwinds into C, and is reported as `EIO`).
pub(crate) fn call<T>(fail: T, body: impl FnOnce() -> Result<T>) -> T {
    match panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            record(e);
            fail
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            record(Error::new(
                libc::EIO,
                format!("foliocache: internal error (a panic): {what}"),
            ));
            fail
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn errno() -> i32 {
        io::Error::last_os_error().raw_os_error().unwrap()
    }

    fn last_message() -> String {
        // SAFETY: `last_error` returns a NUL-terminated string of this
        // thread's, unchanged until its next failed call.
        unsafe { CStr::from_ptr(last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn failure_sets_errno_and_message() {
        let r = call(-1, || Err(Error::new(libc::EBADF, "no such\0handle")));
        assert_eq!(r, -1);
        assert_eq!(errno(), libc::EBADF);
        assert_eq!(last_message(), "no such handle");
        // A success leaves both as they were.
        assert_eq!(call(-1, || Ok(7)), 7);
        assert_eq!(errno(), libc::EBADF);
        assert_eq!(last_message(), "no such handle");
    }

    #[test]
    fn a_panic_is_caught_as_eio() {
        let r: i64 = call(-1, || panic!("boom {}", 42));
        assert_eq!(r, -1);
        assert_eq!(errno(), libc::EIO);
        assert!(last_message().contains("boom 42"), "{}", last_message());
    }
}
