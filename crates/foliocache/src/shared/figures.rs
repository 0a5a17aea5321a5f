//! The group's figures: each process publishes its reads into its
//! participant in the segment, where `SharedCache::stats` of any process
//! adds them up (docs/design.md, section 13, "The group's figures").

use std::sync::atomic::{AtomicU64, Ordering};

use super::{lock, seg, Inner, SharedCache, SharedStats};

/// A process's reads as published in its participant ([`Inner::publish`]):
/// the participant's counts when this process took it, and this process's
/// own counts then: those it last published before (a forked child's
/// counters and this record start as its parent's, so the child counts
/// from its parent's last publication on; 0 for a process's first).
/// Atomics, no lock: a child forked while another thread published must
/// not find it held. Threads publishing at once may store bases a few
/// reads apart; the participant's counts only grow (`fetch_max`).
pub(super) struct Published {
    /// `forks << 32 | participant` the bases are for; `u64::MAX` before
    /// the first.
    holder: AtomicU64,
    part: [AtomicU64; 2],
    own: [AtomicU64; 2],
    /// This process's counts at its last publication.
    last: [AtomicU64; 2],
}

impl Default for Published {
    fn default() -> Published {
        Published {
            holder: AtomicU64::new(u64::MAX),
            part: Default::default(),
            own: Default::default(),
            last: Default::default(),
        }
    }
}

/// A thread publishes its process's reads at every this many hits of its
/// own, and at every [`PUBLISH_MISSES`] misses.
pub(super) const PUBLISH_HITS: u64 = 1024;
/// See [`PUBLISH_HITS`].
pub(super) const PUBLISH_MISSES: u64 = 64;

impl Inner {
    /// Writes this process's hits and misses to its participant, where
    /// [`SharedCache::stats`] of any process adds them up: the
    /// participant's counts from before this process took it, plus what
    /// this process counted since. A process that never registered (one
    /// that only looks at the figures: `foliocache cache stat`) counted
    /// nothing and takes no participant for it; one that counted has one
    /// (a miss registers).
    pub(super) fn publish(&self) {
        let Some(id) = self.me.registered() else {
            return;
        };
        // A number is `generation << 10 | participant`.
        let Some(part) = self.seg.part(id & (seg::PARTS - 1)) else {
            return;
        };
        let own = [self.hits.sum(), self.misses.sum()];
        let counts = [&part.hits, &part.misses];
        let holder = (lock::forks() & 0xffff_ffff) << 32 | u64::from(id);
        let p = &self.published;
        if p.holder.load(Ordering::Acquire) != holder {
            for ((base, count), (own_base, last)) in
                p.part.iter().zip(counts).zip(p.own.iter().zip(&p.last))
            {
                base.store(count.load(Ordering::Relaxed), Ordering::Relaxed);
                own_base.store(last.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            p.holder.store(holder, Ordering::Release);
        }
        for k in 0..2 {
            let since = own[k].wrapping_sub(p.own[k].load(Ordering::Relaxed));
            let now = p.part[k].load(Ordering::Relaxed).wrapping_add(since);
            counts[k].fetch_max(now, Ordering::Relaxed);
            p.last[k].fetch_max(own[k], Ordering::Relaxed);
        }
    }
}

impl SharedCache {
    /// What the cache holds and did.
    pub fn stats(&self) -> SharedStats {
        let seg = &self.inner.seg;
        let h = seg.header();
        let mut cached = 0;
        for p in 0..seg.pages {
            let used = seg
                .desc(p)
                .is_some_and(|d| d.flags.load(Ordering::Relaxed) & seg::F_USED != 0);
            cached += u64::from(used);
        }
        self.inner.publish();
        let (mut processes, mut group_hits, mut group_misses) = (0, 0u64, 0u64);
        for part in (0..seg::PARTS).filter_map(|i| seg.part(i)) {
            processes += u64::from(lock::lives(part));
            group_hits = group_hits.wrapping_add(part.hits.load(Ordering::Relaxed));
            group_misses = group_misses.wrapping_add(part.misses.load(Ordering::Relaxed));
        }
        SharedStats {
            pages: seg.pages,
            cached,
            dirty: h.dirty.load(Ordering::Relaxed),
            evictions: h.evictions.load(Ordering::Relaxed),
            recoveries: h.recoveries.load(Ordering::Relaxed),
            processes,
            hits: self.inner.hits.sum(),
            misses: self.inner.misses.sum(),
            group_hits,
            group_misses,
            huge_bytes: h.huge_bytes.load(Ordering::Relaxed),
        }
    }

    /// A handle that does not keep the cache alive (a metrics collector's).
    #[cfg(feature = "prometheus")]
    pub(crate) fn downgrade(&self) -> std::sync::Weak<Inner> {
        std::sync::Arc::downgrade(&self.inner)
    }

    /// The cache behind a [`downgrade`](Self::downgrade)d handle, while
    /// any process-local handle of it lives.
    #[cfg(feature = "prometheus")]
    pub(crate) fn upgrade(weak: &std::sync::Weak<Inner>) -> Option<SharedCache> {
        weak.upgrade().map(|inner| SharedCache { inner })
    }
}
