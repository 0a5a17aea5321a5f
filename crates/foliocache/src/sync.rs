//! Every atomic and lock the crate uses, in one place, so the `loom` model
//! checker can replace them with one cfg (as `xarray::sync` does for the
//! index). Built normally, these are `std`'s atomics and `parking_lot`'s
//! mutex; under `RUSTFLAGS="--cfg loom"` they are loom's (see
//! `tests/loom.rs`).
//!
//! Two things stay outside: the folio lock's sleeping, which parks in
//! `parking_lot_core` normally and under loom becomes a model of its queue
//! (a wake-up count, waited on by yielding; in `folio.rs`, next to the
//! code it replaces), and the static that
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

/// The crate's reader-writer lock: `parking_lot`'s. The file locks
/// (`inode_lock`, `invalidate_lock`) are these, so that the models can
/// race truncation against writeback and writers (a `parking_lot` lock
/// that a loom thread blocked on would hang the model: loom runs its
/// threads on one OS thread).
#[cfg(not(loom))]
pub(crate) type RwLock<T> = parking_lot::RwLock<T>;
#[cfg(not(loom))]
pub(crate) type RwLockReadGuard<'a, T> = parking_lot::RwLockReadGuard<'a, T>;
#[cfg(not(loom))]
pub(crate) type RwLockWriteGuard<'a, T> = parking_lot::RwLockWriteGuard<'a, T>;

/// Under loom: loom's reader-writer lock with `parking_lot`'s interface.
#[cfg(loom)]
pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);
#[cfg(loom)]
pub(crate) type RwLockReadGuard<'a, T> = loom::sync::RwLockReadGuard<'a, T>;
#[cfg(loom)]
pub(crate) type RwLockWriteGuard<'a, T> = loom::sync::RwLockWriteGuard<'a, T>;

#[cfg(loom)]
impl<T> RwLock<T> {
    pub(crate) fn new(t: T) -> Self {
        RwLock(loom::sync::RwLock::new(t))
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, T> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
        self.0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
