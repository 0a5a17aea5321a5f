//! Every lock and atomic the crate uses, in one place, so a model checker
//! (loom, shuttle) can replace them with one cfg, as in `xarray::sync`.
//!
//! Locks here never poison: no code of this crate panics while holding one,
//! and if a caller's panic unwinds through a lock anyway the protected state
//! is still consistent (every update is a single assignment or completes
//! before the guard drops), so the guard is taken back instead of panicking.

pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::PoisonError;
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `m`, ignoring poison (see the module docs).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Takes `l` for reading, ignoring poison.
pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

/// Takes `l` for writing, ignoring poison.
pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `cv` with `guard`, ignoring poison.
pub(crate) fn wait<'a, T>(cv: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(guard).unwrap_or_else(PoisonError::into_inner)
}

/// Adds `n` to a statistics counter (relaxed: counters order nothing).
pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}
