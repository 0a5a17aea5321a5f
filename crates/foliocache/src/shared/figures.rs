//! The group's figures: each process publishes its reads into its
//! participant in the segment, where `SharedCache::stats` of any process
//! adds them up (docs/design.md, section 13, "The group's figures").

use std::sync::atomic::{AtomicU64, Ordering};

use super::{lock, seg, Inner, SharedCache};
use crate::mrc::AGE_BINS;

/// What a shared cache holds and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharedStats {
    /// Pages the cache holds at most.
    pub pages: u64,
    /// Pages holding file data now.
    pub cached: u64,
    /// Of those, written and not yet written back.
    pub dirty: u64,
    /// Pages reused for other data, by the whole group.
    pub evictions: u64,
    /// Locks taken over from a process that died holding them.
    pub recoveries: u64,
    /// Processes attached now.
    pub processes: u64,
    /// Reads of this process served from the cache, in page lookups (a
    /// page readahead loaded counts as a hit when a read finds it; for
    /// bytes, see [`memory_bytes`](Self::memory_bytes)).
    pub hits: u64,
    /// Pages this process's reads loaded for the bytes they asked for
    /// (pages read ahead past them are not counted; a later read that
    /// finds one counts a hit).
    pub misses: u64,
    /// Bytes this process's reads returned.
    pub read_bytes: u64,
    /// Of those, what came from the files rather than memory: the bytes
    /// of each page read from its file for a read (the page a miss
    /// loaded, cut at the end of the file; a page readahead loaded, whole,
    /// at its first read).
    pub first_read_bytes: u64,
    /// Bytes this process read from files into the cache: misses,
    /// readahead (read or not), and the pages partial writes filled.
    pub loaded_bytes: u64,
    /// Reads served from the cache by every process of the group, this
    /// one's and those gone included, in pages: each process publishes
    /// its count every 1,024 hits of a thread of its, and at each call of
    /// `stats`, so another's latest few are not in it yet.
    pub group_hits: u64,
    /// Pages loaded for reads (as [`misses`](Self::misses)), by every process of the group
    /// (published every 64 misses of a thread, and at `stats`).
    pub group_misses: u64,
    /// [`read_bytes`](Self::read_bytes) of every process of the group,
    /// published as [`group_hits`](Self::group_hits) is.
    pub group_read_bytes: u64,
    /// [`first_read_bytes`](Self::first_read_bytes) of every process of
    /// the group, likewise.
    pub group_first_read_bytes: u64,
    /// [`loaded_bytes`](Self::loaded_bytes) of every process of the
    /// group, likewise.
    pub group_loaded_bytes: u64,
    /// Bytes of the pages that 2 MiB pages map (the creator's collapse,
    /// so far).
    pub huge_bytes: u64,
}

impl SharedStats {
    /// Bytes this process's reads got from memory:
    /// [`read_bytes`](Self::read_bytes) less
    /// [`first_read_bytes`](Self::first_read_bytes) (readahead counts where
    /// it was read, not as a hit).
    pub fn memory_bytes(&self) -> u64 {
        self.read_bytes.saturating_sub(self.first_read_bytes)
    }

    /// [`memory_bytes`](Self::memory_bytes) of every process of the group.
    pub fn group_memory_bytes(&self) -> u64 {
        self.group_read_bytes
            .saturating_sub(self.group_first_read_bytes)
    }
}

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
    part: [AtomicU64; COUNTS],
    own: [AtomicU64; COUNTS],
    /// This process's counts at its last publication.
    last: [AtomicU64; COUNTS],
}

/// The figures a process publishes: hits, misses, bytes read, of them
/// first read from the files, bytes loaded.
const FIGURES: usize = 5;

/// The counts a process publishes: its [`FIGURES`], then its hits by
/// their age's bin (the group's curve's: `curve.rs`).
const COUNTS: usize = FIGURES + AGE_BINS;

/// A participant's published counts, in [`COUNTS`]' order.
fn part_counts(part: &seg::Part) -> [&AtomicU64; COUNTS] {
    let figures = [
        &part.hits,
        &part.misses,
        &part.read_bytes,
        &part.first_read_bytes,
        &part.loaded_bytes,
    ];
    std::array::from_fn(|k| match k {
        0..FIGURES => figures[k],
        _ => &part.aged[k - FIGURES],
    })
}

impl Default for Published {
    fn default() -> Published {
        Published {
            holder: AtomicU64::new(u64::MAX),
            part: std::array::from_fn(|_| AtomicU64::new(0)),
            own: std::array::from_fn(|_| AtomicU64::new(0)),
            last: std::array::from_fn(|_| AtomicU64::new(0)),
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
    /// this process counted since. A process that counted nothing since
    /// its last publication (one that only looks at the figures:
    /// `foliocache cache stat`; a forked child that has not read yet)
    /// takes no participant for it; one that counted takes one if it has
    /// none (a forked child whose reads were all hits).
    pub(super) fn publish(&self) {
        let figures = [
            self.hits.sum(),
            self.misses.sum(),
            self.read_bytes.sum(),
            self.first_read_bytes.sum(),
            self.loaded_bytes.sum(),
        ];
        let aged = self.aged.sums();
        let own: [u64; COUNTS] = std::array::from_fn(|k| match k {
            0..FIGURES => figures[k],
            _ => aged[k - FIGURES],
        });
        let id = match self.me.registered() {
            Some(id) => id,
            None => {
                let last = &self.published.last;
                if own
                    .iter()
                    .zip(last)
                    .all(|(o, l)| *o == l.load(Ordering::Relaxed))
                {
                    return;
                }
                match self.me.id(&self.seg) {
                    Ok(id) => id,
                    Err(_) => return,
                }
            }
        };
        // A number is `generation << 10 | participant`.
        let Some(part) = self.seg.part(id & (seg::PARTS - 1)) else {
            return;
        };
        let counts = part_counts(part);
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
        for k in 0..COUNTS {
            if own[k] == p.last[k].load(Ordering::Relaxed) {
                // Nothing new (most of the age bins): nothing to write.
                continue;
            }
            let since = own[k].wrapping_sub(p.own[k].load(Ordering::Relaxed));
            let now = p.part[k].load(Ordering::Relaxed).wrapping_add(since);
            counts[k].fetch_max(now, Ordering::Relaxed);
            p.last[k].fetch_max(own[k], Ordering::Relaxed);
        }
    }
}

/// A process's reads in another cache, for the group's figures
/// ([`SharedCache::count_reads_elsewhere`]): totals so far, as that cache
/// counts them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadCounts {
    /// Lookups that found the data cached.
    pub hits: u64,
    /// Lookups that loaded it.
    pub misses: u64,
    /// Bytes the reads returned.
    pub read_bytes: u64,
    /// Of those, bytes that came from the files for the read
    /// (`CacheStats::first_read_bytes`).
    pub first_read_bytes: u64,
    /// Bytes read from the files into that cache.
    pub loaded_bytes: u64,
}

impl SharedCache {
    /// Counts in the group's figures, as this process's, the reads
    /// another cache of this process served: a process of a group it
    /// joins at its first fork serves from a cache of its own until then
    /// (`foliocache run`; docs/preload.md, "Processes"), and the group's
    /// figures (`foliocache run --metrics`) are every process's reads.
    /// `totals` are that cache's counts so far: what they grew by since
    /// the last call is added to this process's counts, which are
    /// published at once. This process takes a participant if it has
    /// none.
    ///
    /// # Errors
    /// When this process cannot take a participant (every one is a live
    /// process's): nothing is counted.
    pub fn count_reads_elsewhere(&self, totals: ReadCounts) -> std::io::Result<()> {
        let i = &self.inner;
        i.me.id(&i.seg)?;
        let counts = [
            (&i.hits, totals.hits),
            (&i.misses, totals.misses),
            (&i.read_bytes, totals.read_bytes),
            (&i.first_read_bytes, totals.first_read_bytes),
            (&i.loaded_bytes, totals.loaded_bytes),
        ];
        for ((counter, now), last) in counts.into_iter().zip(&i.elsewhere) {
            let before = last.swap(now, Ordering::Relaxed);
            counter.add(now.wrapping_sub(before));
        }
        i.publish();
        Ok(())
    }

    /// What the cache holds and did.
    pub fn stats(&self) -> SharedStats {
        let seg = &self.inner.seg;
        let h = seg.header();
        let mut cached = 0;
        for p in seg.descs_in_use() {
            let used = seg
                .desc(p)
                .is_some_and(|d| d.flags.load(Ordering::Relaxed) & seg::F_USED != 0);
            cached += u64::from(used);
        }
        self.inner.publish();
        let mut processes = 0;
        let mut group = [0u64; FIGURES];
        for part in (0..seg::PARTS).filter_map(|i| seg.part(i)) {
            processes += u64::from(lock::lives(part));
            for (sum, c) in group.iter_mut().zip(part_counts(part)) {
                *sum = sum.wrapping_add(c.load(Ordering::Relaxed));
            }
        }
        let i = &self.inner;
        SharedStats {
            pages: seg.pages,
            cached,
            dirty: h.dirty.load(Ordering::Relaxed),
            evictions: h.evictions.load(Ordering::Relaxed),
            recoveries: h.recoveries.load(Ordering::Relaxed),
            processes,
            hits: i.hits.sum(),
            misses: i.misses.sum(),
            read_bytes: i.read_bytes.sum(),
            first_read_bytes: i.first_read_bytes.sum(),
            loaded_bytes: i.loaded_bytes.sum(),
            group_hits: group[0],
            group_misses: group[1],
            group_read_bytes: group[2],
            group_first_read_bytes: group[3],
            group_loaded_bytes: group[4],
            huge_bytes: h.huge_bytes.load(Ordering::Relaxed),
        }
    }

    /// Publishes this process's reads in the group's figures now, as
    /// every 1,024 hits and 64 misses of a thread do and as
    /// [`stats`](Self::stats) does, without counting the pages: for a
    /// process about to end without closing its files (`_exit`), so that
    /// the group's figures hold all it read, and for one about to fork,
    /// so that its child starts from a publication of its own. Atomic
    /// stores, and no lock; a process that read since its last
    /// publication and has no participant yet takes one first (a read of
    /// `/proc/self/stat`).
    pub fn publish_figures(&self) {
        self.inner.publish();
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
