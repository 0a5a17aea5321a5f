//! Every atomic and lock the crate uses, in one place, so the `loom` model
//! checker can replace them with one cfg (as `xarray::sync` does for the
//! index). Built normally, these are `std`'s atomics and `parking_lot`'s
//! mutex; under `RUSTFLAGS="--cfg loom"` they are loom's (see
//! `tests/loom.rs`).
//!
//! Two things stay outside: the folio lock's sleeping, which parks in
//! `parking_lot_core` normally and becomes a `yield_now` loop under loom
//! (in `folio.rs`, next to the code it replaces), and the static that
//! hands out statistics shards (a loom atomic cannot live in a static; it
//! only picks a shard and orders nothing).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// Called in a lockless reader's retry loop (a folio being removed under
/// it). Under loom a yield, so the model lets the remover run.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// The crate's mutex: `parking_lot`'s (no poisoning, `lock()` returns the
/// guard).
#[cfg(not(loom))]
pub(crate) type Mutex<T> = parking_lot::Mutex<T>;

/// Under loom: loom's mutex with `parking_lot`'s interface.
#[cfg(loom)]
pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(loom)]
impl<T> Mutex<T> {
    pub(crate) fn new(t: T) -> Self {
        Mutex(loom::sync::Mutex::new(t))
    }

    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        // Nothing in this crate panics holding a lock; a poisoned lock
        // means the model already failed.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn try_lock(&self) -> Option<loom::sync::MutexGuard<'_, T>> {
        self.0.try_lock().ok()
    }
}
