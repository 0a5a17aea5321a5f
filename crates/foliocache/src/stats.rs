//! The cache's counters (`Cache::stats`): sharded where readers bump
//! them on every hit or miss, so that a hit writes nothing another thread
//! reads; plain atomics for gauges and for what only writeback, truncation
//! or pressure moves.

use crate::mrc::{self, Exact, HitRatioCurve, Mrc, AGE_BINS};
use crate::sync::{AtomicU64, Ordering, StatU64};
use std::sync::Arc;

/// A counter that readers bump without sharing a cache line: one padded
/// slot per shard, a thread always on the same shard, summed on demand
/// (a hit writes nothing other threads read). The counters a miss bumps
/// (IO, windows, evictions, refaults) are sharded too: as plain atomics,
/// packed in two lines, they moved between the CPUs of concurrent readers
/// on every miss.
///
/// A thread owns its shard alone while at most [`OWNED_SHARDS`] threads
/// count at once (see [`shard::Shard`]): it then adds with a load and a store,
/// not a read-modify-write, whose lock (on x86) would wait for the
/// thread's earlier stores, the bytes the read before copied out among
/// them, on every hit. Threads beyond those share the last
/// [`SHARED_SHARDS`] slots with atomic adds.
pub(crate) struct ShardedCounter {
    shards: Box<[Padded]>,
}

#[repr(align(128))]
#[derive(Default)]
struct Padded(StatU64);

/// Shards a thread can own alone (one bit each of [`OWNED`]).
const OWNED_SHARDS: usize = 32;

/// Shards the threads past those share.
const SHARED_SHARDS: usize = 4;

// (Process-wide std atomics even under loom: they only hand out shards and
// order nothing the models check; a loom atomic cannot be a static.)
#[allow(clippy::disallowed_types)]
mod shard {
    use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

    use super::{OWNED_SHARDS, SHARED_SHARDS};

    /// The owned shards taken, one bit each.
    static OWNED: AtomicU32 = AtomicU32::new(0);
    /// Spreads the sharing threads over the shared shards.
    static NEXT_SHARED: AtomicUsize = AtomicUsize::new(0);

    /// A thread's shard, for every [`ShardedCounter`](super::ShardedCounter)
    /// of every cache: an owned one (its bit in [`OWNED`], given back when
    /// the thread exits, acquire and release, so the next owner's loads
    /// see the last one's stores), or a shared one.
    pub(super) struct Shard {
        pub(super) index: usize,
        pub(super) owned: bool,
    }

    impl Shard {
        fn claim() -> Shard {
            let mut taken = OWNED.load(Ordering::Relaxed);
            loop {
                let free = !taken;
                if free == 0 {
                    let i = NEXT_SHARED.fetch_add(1, Ordering::Relaxed) % SHARED_SHARDS;
                    return Shard {
                        index: OWNED_SHARDS + i,
                        owned: false,
                    };
                }
                let bit = free.trailing_zeros();
                match OWNED.compare_exchange_weak(
                    taken,
                    taken | 1 << bit,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        return Shard {
                            index: bit as usize,
                            owned: true,
                        }
                    }
                    Err(now) => taken = now,
                }
            }
        }
    }

    impl Drop for Shard {
        fn drop(&mut self) {
            if self.owned {
                OWNED.fetch_and(!(1 << self.index), Ordering::Release);
            }
        }
    }

    thread_local! {
        static SHARD: Shard = Shard::claim();
    }

    /// This thread's shard and whether it owns it; a shared one while the
    /// thread's locals are being torn down.
    #[inline]
    pub(super) fn current() -> (usize, bool) {
        SHARD
            .try_with(|s| (s.index, s.owned))
            .unwrap_or((OWNED_SHARDS, false))
    }
}

/// One `T` a shard, owned and shared.
fn per_shard<T: Default>() -> Box<[T]> {
    (0..OWNED_SHARDS + SHARED_SHARDS)
        .map(|_| T::default())
        .collect()
}

impl Default for ShardedCounter {
    fn default() -> Self {
        ShardedCounter {
            shards: per_shard(),
        }
    }
}

impl ShardedCounter {
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.add_get(n);
    }

    /// [`add`](Self::add), returning this thread's shard's count after it
    /// (for a caller that does something every so many: the shard's count
    /// passes each multiple as the thread counts).
    #[inline]
    pub(crate) fn add_get(&self, n: u64) -> u64 {
        let (i, owned) = shard::current();
        bump(&self.shards[i].0, owned, n)
    }

    /// Takes `n` off (a gauge: one shard may go below zero, wrapping; the
    /// sum does not).
    #[inline]
    pub(crate) fn sub(&self, n: u64) {
        self.add(n.wrapping_neg());
    }

    /// The shards' sum, wrapping as [`sub`](Self::sub) does. A snapshot:
    /// concurrent adds may be counted or not.
    pub(crate) fn sum(&self) -> u64 {
        self.shards
            .iter()
            .fold(0u64, |a, p| a.wrapping_add(p.0.load(Ordering::Relaxed)))
    }
}

/// The cache's counters: sharded where readers bump them on every hit or
/// miss, plain atomics for gauges (added to and taken from) and for what
/// only writeback, truncation or pressure moves.
/// Counters that only count are [`StatU64`]s, outside the loom models;
/// the two gauges that writeback and reclaim decide on are the shim's.
#[derive(Default)]
pub(crate) struct Stats {
    /// Folio lookups by reads that found the data cached (page lookups,
    /// not bytes: a read of 4 KiB and one of a 2 MiB folio count one).
    pub(crate) hits: ShardedCounter,
    pub(crate) misses: ShardedCounter,
    /// Bytes reads returned (every read: hit, miss, or part of each).
    pub(crate) read_bytes: ShardedCounter,
    /// Bytes of folios read from the backing (a miss's, readahead's),
    /// counted whole at the first read that copies from each
    /// (`FolioFlags::FRESH`): of [`read_bytes`](Self::read_bytes), what
    /// the device gave rather than memory. Readahead no read reached is
    /// in `io_bytes` only.
    pub(crate) first_read_bytes: ShardedCounter,
    /// The counts the miss-ratio curve rests on (`mrc.rs`), the cache's
    /// own, kept as a file's are: the same two in pages (each page a read
    /// covers, and each page of a folio read from the backing at its first
    /// read, whole, cut at the file's end), the hits by age and the
    /// refaults a larger cache would have hit.
    curve: FileCounts,
    pub(crate) folios: ShardedCounter,
    pub(crate) pages: ShardedCounter,
    pub(crate) evictions: ShardedCounter,
    pub(crate) io_reads: ShardedCounter,
    pub(crate) io_bytes: ShardedCounter,
    pub(crate) refaults: ShardedCounter,
    pub(crate) activations: ShardedCounter,
    pub(crate) dropbehind_drops: StatU64,
    pub(crate) dirty_pages: AtomicU64,
    pub(crate) writeback_pages: AtomicU64,
    pub(crate) io_writes: StatU64,
    pub(crate) io_write_bytes: StatU64,
    pub(crate) writeback_errors: StatU64,
    pub(crate) throttled: StatU64,
    pub(crate) readahead_windows: ShardedCounter,
    pub(crate) pressure_shrinks: StatU64,
    pub(crate) pin_copies: StatU64,
    /// Bytes of the folios owned pins hold now (`filemap::pin::OwnedPin`),
    /// a gauge: a folio counted whole, once per pin.
    pub(crate) lent_bytes: StatU64,
    /// How long a read that missed waited for its data.
    pub(crate) miss_latency: LatencyHist,
    /// How long a `sync_data`/`sync_all` of a file took.
    pub(crate) sync_latency: LatencyHist,
    /// How long a writer over the dirty limit was held (`writeback::throttle`).
    pub(crate) throttle_latency: LatencyHist,
    /// Reads from backings that failed (the backing's error, or a short
    /// read mid-file).
    pub(crate) read_errors: StatU64,
    /// The miss-ratio curve's sample (`mrc.rs`).
    pub(crate) mrc: Mrc,
}

impl Stats {
    /// Counts a hit that returned `bytes` over `pages` pages (0 and 0
    /// where the read counts them itself, [`read_done`](Self::read_done)),
    /// and for the miss-ratio curve its age in ticks since its folio's
    /// last read (`Folio::touch`), the cache's and its file's if kept
    /// (`file`): one lookup of the thread's shard for every count. No age
    /// (`None`) for a folio read for the first time since the backing
    /// filled it (`FolioFlags::FRESH`: readahead's): its bytes came from
    /// below, and the curve counts them as a miss (`mrc.rs`).
    #[inline]
    pub(crate) fn count_hit(
        &self,
        age: Option<u16>,
        (bytes, pages): (u64, u64),
        file: Option<&FileCounts>,
    ) {
        let (i, owned) = shard::current();
        bump(&self.hits.shards[i].0, owned, 1);
        bump(&self.read_bytes.shards[i].0, owned, bytes);
        bump(&self.curve.read_pages.shards[i].0, owned, pages);
        // (No age while the estimator is off: `Mrc::threshold`.)
        let age = age.filter(|_| self.mrc.threshold() != 0);
        if let Some(age) = age {
            self.curve.aged.add_at(i, owned, age);
        }
        if let Some(f) = file {
            bump(&f.read_pages.shards[i].0, owned, pages);
            if let Some(age) = age {
                f.aged.add_at(i, owned, age);
            }
        }
    }

    /// Counts `bytes` over `pages` pages a read returned that no
    /// [`count_hit`](Self::count_hit) counted (a miss's, a read of several
    /// folios), the cache's and its file's if kept (`file`).
    pub(crate) fn read_done(&self, (bytes, pages): (u64, u64), file: Option<&FileCounts>) {
        self.read_bytes.add(bytes);
        self.curve.read_pages.add(pages);
        if let Some(f) = file {
            f.read_pages.add(pages);
        }
    }

    /// Counts `bytes` over `pages` pages of a folio read from the backing,
    /// at the first read that copies from it (`Mapping::first_read`), the
    /// cache's and its file's if kept (`file`).
    pub(crate) fn first_read(&self, (bytes, pages): (u64, u64), file: Option<&FileCounts>) {
        self.first_read_bytes.add(bytes);
        self.curve.first_read_pages.add(pages);
        if let Some(f) = file {
            f.first_read_pages.add(pages);
        }
    }

    /// Shows a read of pages `first..=last` of the mapping whose sample
    /// key is `id` (`mrc::mapping_key`) to the miss-ratio curve's sample,
    /// each page a key (the sample's sizes are in pages: a read of 16
    /// pages shown as one key made a cache look 16 times its size to the
    /// simulations): a hash and a compare a page, and a push on the
    /// estimator's queue if the page is sampled (`mrc.rs`, "Cost"); and
    /// for the file's own curve if kept (`file`).
    /// `hit`: the pages came from memory (not from the backing for this
    /// read, nor readahead's read for the first time).
    #[inline]
    pub(crate) fn observe_read(
        &self,
        id: u64,
        (first, last): (u64, u64),
        hit: bool,
        file: Option<&FileCounts>,
    ) {
        let threshold = self.mrc.threshold();
        if threshold == 0 {
            return;
        }
        mrc::key_hashes(id, first, last, |h| {
            if h < threshold {
                self.mrc
                    .push(h, hit, file.map(mrc::file_id), || self.exact());
            }
        });
    }

    /// Counts a refault of a folio of `pages` pages at `distance`
    /// (`workingset_refault`'s) toward the sizes that would have hit it,
    /// the cache's and its file's if that file's curve is kept: a cache
    /// `r` times as large holds `(r - 1)` capacities more (`mrc.rs`). In
    /// pages, as the curve counts reads.
    pub(crate) fn refault_distance(&self, distance: u64, pages: u64, file: Option<&FileCounts>) {
        let capacity = self.mrc.capacity();
        for (i, within) in [capacity, 3 * capacity].into_iter().enumerate() {
            if distance <= within {
                self.curve.refault_gains[i].add(pages);
                if let Some(f) = file {
                    f.refault_gains[i].add(pages);
                }
            }
        }
    }

    /// The cache's own counts the curve rests on.
    fn exact(&self) -> Exact {
        mrc::ExactCounts::exact(&self.curve)
    }

    /// The miss-ratio curve now (`Cache::hit_ratio_curve`).
    pub(crate) fn hit_ratio_curve(&self) -> HitRatioCurve {
        self.mrc.curve(|| self.exact())
    }

    /// The curve of the file whose counts are `counts`
    /// (`File::hit_ratio_curve`).
    pub(crate) fn file_hit_ratio_curve(&self, counts: &FileCounts) -> HitRatioCurve {
        self.mrc.file_curve(counts, || self.exact())
    }

    /// Runs the sampled reads queued so far through the curve's
    /// simulations (the cache's curve thread, `spawn_curve`); returns how
    /// many.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn drain_curve(&self) -> u64 {
        self.mrc.drain(|| self.exact())
    }
}

/// The bytes of a read of one page ([`Probe::read`]'s hits).
#[cfg(feature = "internals")]
const PAGE_BYTES: u64 = 4096;

/// The estimator as a hit meets it (its folio's stamp touched, then
/// `Stats::observe_read`): for the benches (`internals`).
#[cfg(feature = "internals")]
pub struct Probe {
    stats: Stats,
    /// A stamp a page of four times the capacity (the bench's keys).
    stamps: Box<[crate::sync::StatU16]>,
}

#[cfg(feature = "internals")]
impl Probe {
    /// An estimator for a cache of `pages` pages.
    pub fn new(pages: u64) -> Probe {
        let stats = Stats::default();
        stats.mrc.set_capacity(pages);
        Probe {
            stats,
            stamps: (0..4 * pages.max(1))
                .map(|_| crate::sync::StatU16::new(0))
                .collect(),
        }
    }

    /// What a read of page `index` of the mapping keyed `id` costs the
    /// estimator:
    /// the stamp's touch, the hit's age counted, the key's hash and the
    /// gate, and the sample's work if it is in it.
    #[inline]
    pub fn read(&self, id: u64, index: u64, hit: bool) {
        let stamp = &self.stamps[(index % self.stamps.len() as u64) as usize];
        let age = mrc::touch(stamp, self.stats.mrc.now());
        if hit {
            self.stats.count_hit(Some(age), (PAGE_BYTES, 1), None);
        } else {
            self.stats.read_done((PAGE_BYTES, 1), None);
            self.stats.first_read((PAGE_BYTES, 1), None);
        }
        self.stats.observe_read(id, (index, index), hit, None);
    }
}

/// A file's own counts for its miss-ratio curve, kept from the first
/// time its curve is asked for (`File::hit_ratio_curve`): the pages its
/// reads covered and, of those, the pages first read after the backing
/// filled their folio (as the cache's), its hits by age, and its
/// refaults a cache 2x and 4x as large would have turned into hits.
/// Sharded, as the cache's: every read of the file counts.
#[derive(Default)]
pub(crate) struct FileCounts {
    read_pages: ShardedCounter,
    first_read_pages: ShardedCounter,
    refault_gains: [ShardedCounter; 2],
    aged: AgeCounts,
}

impl FileCounts {
    /// Counts for a file whose curve starts now, known to the cache's
    /// estimator.
    pub(crate) fn tracked(stats: &Stats) -> Arc<FileCounts> {
        let counts = Arc::new(FileCounts::default());
        stats.mrc.track(&counts);
        counts
    }
}

impl mrc::ExactCounts for FileCounts {
    fn exact(&self) -> Exact {
        Exact::of_pages(
            self.read_pages.sum(),
            self.first_read_pages.sum(),
            [self.refault_gains[0].sum(), self.refault_gains[1].sum()],
            self.aged.sums(),
        )
    }
}

/// Adds `n` to the slot `c` of this thread's shard, which it owns alone
/// or not (`shard::current`); the slot's count after.
#[inline]
fn bump(c: &StatU64, owned: bool, n: u64) -> u64 {
    if owned {
        // Only this thread writes this slot.
        let v = c.load(Ordering::Relaxed).wrapping_add(n);
        c.store(v, Ordering::Relaxed);
        v
    } else {
        c.fetch_add(n, Ordering::Relaxed).wrapping_add(n)
    }
}

/// Hits counted by their age's bin (`mrc::age_bin`), sharded as a
/// [`ShardedCounter`] is: each shard's bins side by side on lines of its
/// own (256 bytes a shard).
pub(crate) struct AgeCounts {
    shards: Box<[AgeShard]>,
}

#[repr(align(128))]
#[derive(Default)]
struct AgeShard([StatU64; AGE_BINS]);

impl Default for AgeCounts {
    fn default() -> Self {
        AgeCounts {
            shards: per_shard(),
        }
    }
}

impl AgeCounts {
    /// Counts a hit of age `ticks` in shard `i` (`shard::current`).
    #[inline]
    fn add_at(&self, i: usize, owned: bool, ticks: u16) {
        bump(&self.shards[i].0[mrc::age_bin(ticks)], owned, 1);
    }

    /// Counts a hit of age `ticks` in this thread's shard (the group's
    /// hits: `shared/read.rs`).
    #[inline]
    pub(crate) fn add(&self, ticks: u16) {
        let (i, owned) = shard::current();
        self.add_at(i, owned, ticks);
    }

    /// Each bin's sum over the shards, wrapping (a snapshot, as
    /// [`ShardedCounter::sum`]'s).
    pub(crate) fn sums(&self) -> [u64; AGE_BINS] {
        std::array::from_fn(|b| {
            self.shards
                .iter()
                .fold(0u64, |a, s| a.wrapping_add(s.0[b].load(Ordering::Relaxed)))
        })
    }
}

/// Upper bounds of [`Latencies`]' buckets: powers of two of nanoseconds,
/// from 2^10 (about 1 us) to 2^34 (about 17 s); a last bucket holds the
/// rest.
const FIRST_BOUND_LOG2: u32 = 10;
/// Buckets of a [`Latencies`], the open last one included.
pub const LATENCY_BUCKETS: usize = 26;

/// A latency histogram the cache records into (a miss's wait, a sync):
/// one counter a power-of-two bucket, with the count and the sum. Plain
/// atomics: what it times costs an IO, so the adds are not worth sharding.
#[derive(Default)]
pub(crate) struct LatencyHist {
    buckets: [StatU64; LATENCY_BUCKETS],
    sum_ns: StatU64,
}

impl LatencyHist {
    /// Counts one wait of `d`.
    pub(crate) fn record(&self, d: std::time::Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // Bucket i holds (2^(9+i), 2^(10+i)] ns; 0 holds up to 2^10.
        let log2 = 64 - ns.saturating_sub(1).leading_zeros();
        let i = (log2.saturating_sub(FIRST_BOUND_LOG2) as usize).min(LATENCY_BUCKETS - 1);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// A timer that records into this histogram when dropped (every way
    /// out of a wait is counted).
    pub(crate) fn timer(&self) -> LatencyTimer<'_> {
        LatencyTimer {
            hist: self,
            start: std::time::Instant::now(),
        }
    }

    /// The counts now (each bucket read once: a snapshot that concurrent
    /// records may be partly in).
    pub(crate) fn snapshot(&self) -> Latencies {
        let counts: [u64; LATENCY_BUCKETS] =
            std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed));
        Latencies {
            count: counts.iter().sum(),
            sum: std::time::Duration::from_nanos(self.sum_ns.load(Ordering::Relaxed)),
            counts,
        }
    }
}

/// Records the time from its creation into its histogram when dropped.
pub(crate) struct LatencyTimer<'h> {
    hist: &'h LatencyHist,
    start: std::time::Instant,
}

impl Drop for LatencyTimer<'_> {
    fn drop(&mut self) {
        self.hist.record(self.start.elapsed());
    }
}

/// A latency histogram of a [`Cache`](crate::Cache), from
/// [`Cache::stats`](crate::Cache::stats): how many waits took how long, in
/// power-of-two buckets (about 1 us, 2 us, 4 us, ... 17 s, and longer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Latencies {
    /// Waits counted.
    pub count: u64,
    /// Their total time.
    pub sum: std::time::Duration,
    /// Waits per bucket (not cumulative); bucket `i` is bounded above by
    /// [`Latencies::bound`]`(i)`.
    pub counts: [u64; LATENCY_BUCKETS],
}

impl Latencies {
    /// Bucket `i`'s upper bound (inclusive); `None` for the last, open one
    /// (and past the end).
    pub fn bound(i: usize) -> Option<std::time::Duration> {
        (i + 1 < LATENCY_BUCKETS)
            .then(|| std::time::Duration::from_nanos(1 << (FIRST_BOUND_LOG2 + i as u32)))
    }

    /// The buckets as `(upper bound, waits at or under it)`, cumulative, as
    /// Prometheus histograms give them; the last bound is `None` (+Inf).
    pub fn cumulative(&self) -> impl Iterator<Item = (Option<std::time::Duration>, u64)> + '_ {
        self.counts.iter().enumerate().scan(0u64, |acc, (i, &n)| {
            *acc += n;
            Some((Latencies::bound(i), *acc))
        })
    }

    /// An estimate of quantile `q` (0.0 to 1.0): the upper bound of the
    /// bucket it falls in (`None` when nothing was counted, or when it
    /// falls in the open last bucket).
    pub fn quantile(&self, q: f64) -> Option<std::time::Duration> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        self.cumulative()
            .find(|&(_, n)| n >= rank)
            .and_then(|(b, _)| b)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn sharded_counts_are_exact_with_more_threads_than_owned_shards() {
        // More threads than shards to own, in waves, so shards are owned,
        // given back at exit and owned again, and some threads share; each
        // wave starts together, so owners and sharers overlap.
        let c = ShardedCounter::default();
        // Long enough that threads overlap on both CPUs (at 200k a thread
        // finished within its time slice and a broken ownership passed).
        const PER: u64 = if cfg!(debug_assertions) {
            200_000
        } else {
            5_000_000
        };
        const WAVES: usize = 3;
        let per_wave = OWNED_SHARDS + SHARED_SHARDS;
        for wave in 0..WAVES {
            let start = std::sync::Barrier::new(per_wave);
            std::thread::scope(|s| {
                for t in 0..per_wave {
                    let (c, start) = (&c, &start);
                    s.spawn(move || {
                        start.wait();
                        for i in 0..PER {
                            c.add(1);
                            if (i as usize + t + wave).is_multiple_of(7) {
                                c.sub(1);
                                c.add(1);
                            }
                        }
                    });
                }
            });
        }
        assert_eq!(c.sum(), (WAVES * per_wave) as u64 * PER);
    }

    #[test]
    fn latencies_land_in_the_bucket_bounded_by_the_next_power_of_two() {
        use std::time::Duration;
        let h = LatencyHist::default();
        for ns in [1, 1024, 1025, 2048, 1 << 20, u64::MAX] {
            h.record(Duration::from_nanos(ns));
        }
        h.record(Duration::from_secs(1 << 40));
        let l = h.snapshot();
        assert_eq!(l.count, 7);
        let mut want = [0u64; LATENCY_BUCKETS];
        want[0] = 2; // 1 ns and 1024 ns: at most 2^10
        want[1] = 2; // 1025 and 2048: at most 2^11
        want[10] = 1; // 2^20
        want[LATENCY_BUCKETS - 1] = 2; // past 2^34
        assert_eq!(l.counts, want);
        assert_eq!(Latencies::bound(0), Some(Duration::from_nanos(1024)));
        assert_eq!(Latencies::bound(LATENCY_BUCKETS - 1), None);
        let cum: Vec<u64> = l.cumulative().map(|(_, n)| n).collect();
        assert_eq!(cum.last(), Some(&7));
        assert!(cum.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(l.quantile(0.25), Some(Duration::from_nanos(1024)));
        assert_eq!(l.quantile(0.5), Some(Duration::from_nanos(2048)));
        assert_eq!(l.quantile(1.0), None);
        assert_eq!(LatencyHist::default().snapshot().quantile(0.5), None);
    }
}
