//! Crash points of the shared cache's protocols (docs/design.md, section
//! 13, "How it is tested"): with the `internals` feature, each step of a
//! lock's acquisition, a page's load, a write, a truncation, a writeback
//! and the index's changes calls [`point`], which counts it and ends the
//! process (`_exit`) at the step [`die_at`] named, so a test can kill a
//! process at every step of a run and check what it leaves. Without the
//! feature, [`point`] is nothing.

#[cfg(feature = "internals")]
mod on {
    use std::sync::atomic::{AtomicU64, Ordering};

    static DIE_AT: AtomicU64 = AtomicU64::new(0);
    static STEP: AtomicU64 = AtomicU64::new(0);

    /// This process ends (`_exit(0)`) at its `n`th crash point from now;
    /// 0: never.
    pub fn die_at(n: u64) {
        STEP.store(0, Ordering::Relaxed);
        DIE_AT.store(n, Ordering::Relaxed);
    }

    /// The crash points passed since [`die_at`].
    pub fn steps() -> u64 {
        STEP.load(Ordering::Relaxed)
    }

    /// A crash point.
    #[inline]
    pub(crate) fn point() {
        let at = DIE_AT.load(Ordering::Relaxed);
        if at != 0 && STEP.fetch_add(1, Ordering::Relaxed) + 1 == at {
            // SAFETY: ends the process at once, as a kill would: no
            // destructor, no exit handler, nothing flushed.
            unsafe { libc::_exit(0) };
        }
    }
}

#[cfg(feature = "internals")]
pub use on::{die_at, steps};

#[cfg(feature = "internals")]
pub(crate) use on::point;

/// A crash point: nothing without the `internals` feature.
#[cfg(not(feature = "internals"))]
#[inline(always)]
pub(crate) fn point() {}
