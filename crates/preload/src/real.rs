//! The C library's own definitions of the functions this library
//! interposes: found with `dlsym(RTLD_NEXT, name)` on first use, once per
//! function, and called when a call passes through.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The address of the next definition of `name` after this library's (the
/// C library's), or the process's end with a message if there is none: a
/// call could only jump to nothing.
pub(crate) fn resolve(name: &CStr) -> usize {
    // SAFETY: `name` is NUL-terminated; `RTLD_NEXT` is a valid handle for
    // a call made from a loaded object. `dlsym` only reads the name.
    let p: *mut c_void = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if p.is_null() {
        let msg = b"foliocache-preload: no next definition of an interposed function: ";
        write_stderr(msg);
        write_stderr(name.to_bytes());
        write_stderr(b"\n");
        // SAFETY: `abort` has no preconditions.
        unsafe { libc::abort() }
    }
    p as usize
}

/// Writes to fd 2 with the system call itself (no library state: usable
/// from anywhere, even before the library is ready).
pub(crate) fn write_stderr(bytes: &[u8]) {
    // SAFETY: fd 2 is an integer, borrowed for the call only; a closed
    // fd 2 is an error, ignored.
    let stderr = unsafe { rustix::fd::BorrowedFd::borrow_raw(2) };
    let _ = rustix::io::write(stderr, bytes);
}

/// A lazily resolved function address (0 until first use).
pub(crate) struct Lazy {
    addr: AtomicUsize,
    name: &'static CStr,
}

impl Lazy {
    /// The function `name`, resolved on first use.
    pub(crate) const fn new(name: &'static CStr) -> Lazy {
        Lazy {
            addr: AtomicUsize::new(0),
            name,
        }
    }

    /// The function's address (resolving it the first time: two threads
    /// may both resolve it, to the same address).
    pub(crate) fn addr(&self) -> usize {
        match self.addr.load(Ordering::Relaxed) {
            0 => {
                let a = resolve(self.name);
                self.addr.store(a, Ordering::Relaxed);
                a
            }
            a => a,
        }
    }
}

/// The real `$name`, as a function pointer of type `$ty`:
/// `real!(read: unsafe extern "C" fn(c_int, *mut c_void, usize) -> isize)`.
macro_rules! real {
    ($name:ident : $ty:ty) => {{
        static F: $crate::real::Lazy = $crate::real::Lazy::new(
            // SAFETY: the literal ends with its only NUL.
            unsafe {
                ::std::ffi::CStr::from_bytes_with_nul_unchecked(
                    concat!(stringify!($name), "\0").as_bytes(),
                )
            },
        );
        let addr = F.addr();
        // SAFETY: `addr` is the non-null address of the C library's
        // function of this name, whose C prototype `$ty` spells.
        #[allow(unused_unsafe)]
        let f = unsafe { ::std::mem::transmute::<usize, $ty>(addr) };
        f
    }};
}
pub(crate) use real;
