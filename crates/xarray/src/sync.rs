//! Every atomic, lock and epoch primitive the crate uses, in one place, so the
//! `loom` model checker can replace them with one cfg (crossbeam-epoch's
//! `primitive` module does the same).
#![allow(unsafe_code)]

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// Called in a reader's wait for a writer's short multi-slot update.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// The writers' lock.
#[cfg(not(loom))]
pub(crate) type Mutex<T> = parking_lot::Mutex<T>;
#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

#[cfg(loom)]
pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;
#[cfg(loom)]
impl<T> Mutex<T> {
    pub(crate) fn new(t: T) -> Self {
        Mutex(loom::sync::Mutex::new(t))
    }
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap()
    }
}

/// A pinned epoch: memory retired while any guard that was pinned before the
/// retirement is alive is not freed.
#[cfg(not(loom))]
pub(crate) struct Guard(crossbeam_epoch::Guard);

#[cfg(not(loom))]
impl Guard {
    #[inline]
    pub(crate) fn pin() -> Self {
        Guard(crossbeam_epoch::pin())
    }

    /// Runs `f` once no reader pinned now can still be running.
    ///
    /// # Safety
    /// `f` may run on any thread, at any later time; whatever it touches must
    /// allow that (it owns what it frees, and nothing else refers to it).
    #[inline]
    pub(crate) unsafe fn defer<F: FnOnce()>(&self, f: F) {
        // SAFETY: forwarded to the caller.
        unsafe { self.0.defer_unchecked(f) }
    }

    /// Lets the epoch advance and pins again: everything borrowed before is
    /// invalid after.
    pub(crate) fn repin(&mut self) {
        self.0.repin();
    }
}

/// Under loom, reclamation is not modelled: retired memory is leaked, which
/// keeps every reader's view valid and lets loom check the publication
/// protocol (orderings and what a reader can observe) on its own.
#[cfg(loom)]
pub(crate) struct Guard;

#[cfg(loom)]
impl Guard {
    pub(crate) fn pin() -> Self {
        Guard
    }
    /// # Safety
    /// See the non-loom version.
    pub(crate) unsafe fn defer<F: FnOnce()>(&self, f: F) {
        std::mem::forget(f);
    }
    pub(crate) fn repin(&mut self) {}
}
