//! The threads a library starts on its user's behalf, and the hook its
//! user runs first on each ([`ThreadStart`]): an IO engine's completion
//! and pool threads, and the background threads of a cache built on one.
//!
//! A program that must tell the library's threads from its own (an
//! `LD_PRELOAD` interposer that lets the library's own system calls pass
//! through, a profiler naming threads, a process that blocks signals on
//! every thread it did not start) cannot do it from outside: the threads
//! come and go inside the library. tokio's `Builder::on_thread_start` is
//! the shape followed: one function, run first on every thread started,
//! before the thread does any of its work.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::thread::{Builder, JoinHandle};

/// A function run first on every thread a library starts: an IO
/// engine's completion and pool threads, a cache's background threads.
/// None by default.
///
/// A program that must tell the library's threads from its own (an
/// `LD_PRELOAD` interposer that lets the library's own calls pass
/// through, one that blocks signals on threads it did not start) cannot
/// do it from outside: the threads come and go inside the library.
/// tokio's `Builder::on_thread_start` is the shape followed.
///
/// Cheap to clone (an `Arc`). Two hooks are equal when they are clones of
/// one (so configurations holding one still compare).
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use foliocache_backing::ThreadStart;
///
/// let started = Arc::new(AtomicUsize::new(0));
/// let seen = started.clone();
/// let hook = ThreadStart::new(move || {
///     seen.fetch_add(1, Ordering::Relaxed);
/// });
/// let t = hook.spawn("worker".into(), || 7)?;
/// assert_eq!(t.join().unwrap(), 7);
/// assert_eq!(started.load(Ordering::Relaxed), 1);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct ThreadStart(Option<Arc<dyn Fn() + Send + Sync>>);

impl ThreadStart {
    /// A hook that runs `f`. `f` runs on the new thread, before its work;
    /// it should not block for long (an IO engine's threads wait for it
    /// before they complete anything), and a panic in it ends that thread
    /// (a pool then runs with fewer threads; a completion thread's panic
    /// leaves its engine's reads uncompleted), so it should not panic.
    pub fn new(f: impl Fn() + Send + Sync + 'static) -> ThreadStart {
        ThreadStart(Some(Arc::new(f)))
    }

    /// Whether a function is set.
    pub fn is_set(&self) -> bool {
        self.0.is_some()
    }

    /// Runs the hook on this thread (nothing if none is set): for a
    /// thread started otherwise than by [`spawn`](Self::spawn) (a scoped
    /// thread).
    pub fn run(&self) {
        if let Some(f) = &self.0 {
            f();
        }
    }

    /// Starts a thread named `name` that runs the hook, then `f`.
    ///
    /// # Errors
    /// The OS's error when the thread cannot be started
    /// ([`std::thread::Builder::spawn`]).
    pub fn spawn<T, F>(&self, name: String, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let hook = self.clone();
        Builder::new().name(name).spawn(move || {
            hook.run();
            f()
        })
    }
}

impl PartialEq for ThreadStart {
    fn eq(&self, other: &ThreadStart) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for ThreadStart {}

impl fmt::Debug for ThreadStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_set() {
            "ThreadStart(set)"
        } else {
            "ThreadStart(none)"
        })
    }
}
