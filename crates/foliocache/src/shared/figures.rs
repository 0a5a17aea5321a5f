//! The group's figures: each process publishes its reads into its
//! participant in the segment, where `SharedCache::stats` of any process
//! adds them up (docs/design.md, section 13, "The group's figures").

use std::sync::atomic::{AtomicU64, Ordering};

use super::{lock, seg, Inner, SharedFile};

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

/// A file's close publishes the process's reads (`Inner::publish`): a
/// short-lived reader (a `cat` under the interposer) counts in the
/// group's figures though it reads fewer pages than a publication's
/// period.
impl Drop for SharedFile {
    fn drop(&mut self) {
        self.cache.inner.publish();
    }
}
