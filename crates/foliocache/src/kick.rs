//! A background thread's wake-up: a flag and a condition variable. Plain
//! `parking_lot` ones: the cache's background threads (the flusher, the
//! arena's populater) do not run under loom.

use std::time::Duration;

/// Wakes one background thread ([`kick`](Kick::kick)), which sleeps in
/// [`wait`](Kick::wait) between rounds of its work.
#[derive(Default)]
#[allow(clippy::disallowed_types)]
pub(crate) struct Kick {
    kicked: parking_lot::Mutex<bool>,
    cv: parking_lot::Condvar,
}

impl Kick {
    /// Asks the thread to work now. Never blocks for long (callers may
    /// hold the LRU or the arena lock): a kick that finds the flag busy
    /// only notifies, and the thread's wait times out at worst.
    pub(crate) fn kick(&self) {
        if let Some(mut k) = self.kicked.try_lock() {
            *k = true;
        }
        self.cv.notify_one();
    }

    /// Like [`kick`](Self::kick), but waits for the flag's lock, so the
    /// kick is never lost to a thread between its check and its sleep:
    /// for the owner's drop (no lock held), after which the thread must
    /// notice at once that the owner is gone.
    pub(crate) fn kick_surely(&self) {
        *self.kicked.lock() = true;
        self.cv.notify_one();
    }

    /// Sleeps until kicked or for `timeout`, clears the kick, and returns
    /// whether there was one.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let mut k = self.kicked.lock();
        if !*k {
            self.cv.wait_for(&mut k, timeout);
        }
        std::mem::take(&mut *k)
    }
}
