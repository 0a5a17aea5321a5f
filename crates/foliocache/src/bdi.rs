//! A cache's writeback control (the kernel's `backing_dev_info` and its
//! `bdi_writeback`): the flusher's wake-up, the pool of threads a
//! writeback run's writes go through side by side, and the dirty
//! thresholds as the builder set them. `writeback.rs` runs writeback with
//! them; reclaim and allocation only wake the flusher.

use std::sync::Arc;

use backing::ThreadStart;

use crate::kick::Kick;
use crate::wbpool::WbPool;

/// See the [module documentation](self).
pub(crate) struct Bdi {
    /// The background writeback thread's wake-up.
    flusher: Arc<Kick>,
    /// Reclaim met dirty folios it could not take: the flusher's next
    /// round writes back everything dirty, whatever the thresholds say
    /// (the kernel's `wakeup_flusher_threads(WB_REASON_VMSCAN)`). A std
    /// atomic: the flusher does not run under loom.
    #[allow(clippy::disallowed_types)]
    reclaim_wants: std::sync::atomic::AtomicBool,
    /// The threads that carry a writeback run's writes side by side
    /// (started with the cache, joined when it goes).
    pool: WbPool,
    /// Dirty pages above which writers are throttled, if the builder set
    /// it (else a share of the budget: `writeback::dirty_limit`).
    limit_set: Option<u64>,
    /// Dirty pages above which the flusher writes back, if the builder set
    /// it (else half the limit: `writeback::dirty_background`).
    #[cfg_attr(loom, allow(dead_code))]
    background_set: Option<u64>,
}

impl Bdi {
    /// The control of a new cache: its pool started (run inline under
    /// loom, whose models do not run the pool's threads), the thresholds
    /// in pages; the pool's threads run `on_start` first.
    pub(crate) fn new(
        limit_set: Option<u64>,
        background_set: Option<u64>,
        #[cfg_attr(loom, allow(unused_variables))] on_start: &ThreadStart,
    ) -> Bdi {
        Bdi {
            flusher: Arc::new(Kick::default()),
            reclaim_wants: Default::default(),
            #[cfg(not(loom))]
            pool: WbPool::new(crate::wbpool::WB_WORKERS, on_start),
            #[cfg(loom)]
            pool: WbPool::inline(),
            limit_set,
            background_set,
        }
    }

    /// Wakes the flusher (never blocks for long: see [`Kick::kick`]).
    pub(crate) fn kick(&self) {
        self.flusher.kick();
    }

    /// Wakes the flusher for reclaim, which met dirty folios: its next
    /// round writes back everything dirty, even under the background
    /// threshold (a few dirty pages in large folios can hold all of a
    /// small cache's memory).
    pub(crate) fn kick_for_reclaim(&self) {
        self.reclaim_wants
            .store(true, std::sync::atomic::Ordering::Release);
        self.kick();
    }

    /// Whether reclaim asked for writeback since the last call (which
    /// clears the request).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn take_reclaim_wants(&self) -> bool {
        self.reclaim_wants
            .swap(false, std::sync::atomic::Ordering::AcqRel)
    }

    /// Wakes the flusher so that it cannot miss it (the cache's drop).
    pub(crate) fn kick_surely(&self) {
        self.flusher.kick_surely();
    }

    /// The flusher's wake-up, for the flusher thread to sleep on.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn flusher(&self) -> Arc<Kick> {
        self.flusher.clone()
    }

    /// The writeback pool.
    pub(crate) fn pool(&self) -> &WbPool {
        &self.pool
    }

    /// The dirty limit the builder set, in pages.
    pub(crate) fn limit_set(&self) -> Option<u64> {
        self.limit_set
    }

    /// The background threshold the builder set, in pages.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn background_set(&self) -> Option<u64> {
        self.background_set
    }
}
