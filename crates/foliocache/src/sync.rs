//! Every atomic and lock the crate's protocols use, in one place, so the
//! `loom` model checker can replace them with one cfg (as `xarray::sync`
//! does for the index). Built normally, these are `std`'s atomics and
//! `parking_lot`'s locks; under `RUSTFLAGS="--cfg loom"` they are loom's
//! (see `tests/loom.rs`). They are the shim's own types, not aliases, so
//! that clippy's `disallowed-types` rule (the crate's `clippy.toml`) can
//! refuse a `std` or `parking_lot` lock or atomic anywhere else: one that
//! must stay outside loom's view is allowed where it is declared, with the
//! reason there.
//!
//! Two things stay outside: the folio lock's sleeping, which parks in
//! `parking_lot_core` normally and under loom becomes a model of its queue
//! (a wake-up count, waited on by yielding; in `folio.rs`, next to the
//! code it replaces), and the static that
//! hands out statistics shards (a loom atomic cannot live in a static; it
//! only picks a shard and orders nothing).

// The one place the disallowed types are named for the shim.
#![allow(clippy::disallowed_types)]

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, Ordering};

/// The read-modify-write operations of an atomic integer of the shim
/// (`v`, ordering), and with `cas:` its compare-exchanges, each passed to
/// the atomic inside.
macro_rules! atomic_ops {
    ($int:ty; cas: $($op:ident),*) => {
        $(
            #[inline]
            pub(crate) fn $op(
                &self,
                current: $int,
                new: $int,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$int, $int> {
                self.0.$op(current, new, success, failure)
            }
        )*
    };
    ($int:ty; $($op:ident),*) => {
        $(
            #[inline]
            pub(crate) fn $op(&self, v: $int, o: Ordering) -> $int {
                self.0.$op(v, o)
            }
        )*
    };
}

/// An atomic integer of the shim: `std`'s, or loom's under `--cfg loom`,
/// with the operations the crate uses.
macro_rules! atomic_int {
    ($(#[$doc:meta])* $name:ident, $int:ty) => {
        $(#[$doc])*
        #[repr(transparent)]
        pub(crate) struct $name(
            #[cfg(not(loom))] std::sync::atomic::$name,
            #[cfg(loom)] loom::sync::atomic::$name,
        );

        #[allow(dead_code)]
        impl $name {
            #[cfg(not(loom))]
            #[inline]
            pub(crate) const fn new(v: $int) -> Self {
                $name(std::sync::atomic::$name::new(v))
            }
            #[cfg(loom)]
            pub(crate) fn new(v: $int) -> Self {
                $name(loom::sync::atomic::$name::new(v))
            }
            #[inline]
            pub(crate) fn load(&self, o: Ordering) -> $int {
                self.0.load(o)
            }
            #[inline]
            pub(crate) fn store(&self, v: $int, o: Ordering) {
                self.0.store(v, o)
            }
            atomic_ops!($int; swap, fetch_add, fetch_sub, fetch_or, fetch_and);
            atomic_ops!($int; cas: compare_exchange, compare_exchange_weak);
        }

        impl Default for $name {
            fn default() -> Self {
                $name::new(0)
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

atomic_int!(
    /// The shim's `AtomicU8`.
    AtomicU8,
    u8
);
atomic_int!(
    /// The shim's `AtomicU32`.
    AtomicU32,
    u32
);
atomic_int!(
    /// The shim's `AtomicU64`.
    AtomicU64,
    u64
);
atomic_int!(
    /// The shim's `AtomicUsize`.
    AtomicUsize,
    usize
);

/// A statistics counter: `std`'s `AtomicU64`, even under loom. The
/// counters that only count (hits, misses, IO, evictions, writeback
/// errors) order nothing, and no protocol waits on them; as loom atomics,
/// each update was one more scheduling point in every model, multiplying
/// the interleavings explored without adding a behaviour. The gauges that
/// decide (dirty pages, pages under writeback) stay loom's.
pub(crate) type StatU64 = std::sync::atomic::AtomicU64;

/// A 16-bit statistic, as [`StatU64`]: a folio's stamp and the clock it
/// is of (the miss-ratio curve's ages, `mrc.rs`), which order nothing.
pub(crate) type StatU16 = std::sync::atomic::AtomicU16;

/// Called in a lockless reader's retry loop (a folio being removed under
/// it). Under loom a yield, so the model lets the remover run.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// The guard of the crate's [`Mutex`].
#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

/// The guard of the crate's [`Mutex`] under loom.
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

/// The crate's mutex: `parking_lot`'s (no poisoning, `lock()` returns the
/// guard).
#[cfg(not(loom))]
#[derive(Default)]
pub(crate) struct Mutex<T>(parking_lot::Mutex<T>);

#[cfg(not(loom))]
impl<T> Mutex<T> {
    #[inline]
    pub(crate) const fn new(t: T) -> Self {
        Mutex(parking_lot::Mutex::new(t))
    }

    #[inline]
    pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'_, T> {
        self.0.lock()
    }

    #[inline]
    pub(crate) fn try_lock(&self) -> Option<parking_lot::MutexGuard<'_, T>> {
        self.0.try_lock()
    }
}

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

/// A mutex that hands itself to its waiters in the order they came
/// (`parking_lot`'s `FairMutex`: every unlock with a waiter passes the
/// lock to the first one, so no later arrival takes it first). A waiter
/// waits for the holds of those ahead of it, and no longer: the lock of a
/// file's writeback (`FileWb::lock`), held for one batch at a time, so a
/// throttled writer waits for the batches queued before it, not for
/// whoever keeps coming back. Under loom, loom's mutex (loom explores
/// every order anyway).
#[cfg(not(loom))]
#[derive(Default)]
pub(crate) struct FairMutex<T>(parking_lot::FairMutex<T>);

#[cfg(not(loom))]
impl<T> FairMutex<T> {
    #[inline]
    pub(crate) const fn new(t: T) -> Self {
        FairMutex(parking_lot::FairMutex::new(t))
    }

    #[inline]
    pub(crate) fn lock(&self) -> FairMutexGuard<'_, T> {
        self.0.lock()
    }
}

/// The guard of a [`FairMutex`].
#[cfg(not(loom))]
pub(crate) type FairMutexGuard<'a, T> = parking_lot::FairMutexGuard<'a, T>;

/// Under loom: the crate's [`Mutex`] (loom's).
#[cfg(loom)]
pub(crate) type FairMutex<T> = Mutex<T>;

/// Under loom: the guard of the crate's [`Mutex`].
#[cfg(loom)]
pub(crate) type FairMutexGuard<'a, T> = MutexGuard<'a, T>;

/// The crate's reader-writer lock: `parking_lot`'s. The file locks
/// (`inode_lock`, `invalidate_lock`) are these, so that the models can
/// race truncation against writeback and writers (a `parking_lot` lock
/// that a loom thread blocked on would hang the model: loom runs its
/// threads on one OS thread).
#[cfg(not(loom))]
pub(crate) struct RwLock<T>(parking_lot::RwLock<T>);
#[cfg(not(loom))]
pub(crate) type RwLockReadGuard<'a, T> = parking_lot::RwLockReadGuard<'a, T>;
#[cfg(not(loom))]
pub(crate) type RwLockWriteGuard<'a, T> = parking_lot::RwLockWriteGuard<'a, T>;

#[cfg(not(loom))]
impl<T> RwLock<T> {
    #[inline]
    pub(crate) const fn new(t: T) -> Self {
        RwLock(parking_lot::RwLock::new(t))
    }

    #[inline]
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, T> {
        self.0.read()
    }

    #[inline]
    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
        self.0.write()
    }
}

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
