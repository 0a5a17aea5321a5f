//! The miss-ratio curve: the hit ratio the cache would have had at other
//! sizes (0.25x, 0.5x, 2x and 4x its capacity) over a recent window of
//! reads, beside the one it had (`Cache::hit_ratio_curve`).
//!
//! The problem: how big should the cache be? A larger cache turns into
//! hits exactly the misses whose folio was evicted a little too soon, and
//! the eviction shadows (`workingset.rs`) already say how soon: a refault
//! at distance `d` (pages evicted or activated since the folio left) would
//! have been a hit in a cache `d` pages larger. A smaller cache loses the
//! hits on folios that were deep in the LRU, which the cache cannot afford
//! to ask on every hit. And shadows run out: the shadow budget keeps only
//! the newest, so a miss past them says nothing.
//!
//! So three sources, each where it is exact or cheap:
//!
//! ```text
//!   predicted(r) for r > 1 = measured + max(shadow gain(r), sampled gain(r))
//!   predicted(1)            = measured  (hits / reads in the window, in
//!                                        pages: see "What a hit is")
//!   predicted(r) for r < 1 = measured - (hits x lost(r) - found(r)) / reads
//!
//!   shadow gain(r):  refaults at distance <= (r - 1) x capacity, over reads
//!   sampled gain(r): the cache's misses x the share of the stack's sampled
//!                    misses at LRU stack distance < r x capacity, over reads
//!   lost(r):         sum over ages a of  hits(a) / hits
//!                                      x sim lost(r, a) / sim hits(C, a)
//!   hits(a):         the cache's hits at age a (exact: every hit's bin)
//!   sim hits(C, a):  sampled reads at age a that a miniature cache of
//!                    C x the rate pages, run with the cache's policy over
//!                    the sampled keys, hit; sim lost(r, a): of those, the
//!                    ones the one of r C x the rate pages missed
//!   found(r):        sampled reads the one of r C hit and C's missed, / rate
//! ```
//!
//! **What a hit is.** The curve is of what `CacheStats::memory_bytes`
//! counts: the share of what reads returned that came from memory,
//! counted in pages (each page a read covers, as the sample shows it:
//! `Stats::count_hit`'s pages). A folio read from below counts as a
//! miss, all its pages, at the first read that copies from it
//! (`FolioFlags::FRESH`), a page readahead brought in included: the
//! simulations have no readahead, so such a page is a miss to them too.
//! (Counted as hits, as `CacheStats::hits` counts page lookups,
//! readahead's pages made a pool of random 64 KiB reads look 8 and 15
//! points better at 0.25x and 0.5x than a cache of that size was:
//! docs/metrics.md.)
//!
//! **The sample** is SHARDS (Waldspurger et al., "Efficient MRC
//! Construction with SHARDS", FAST 2015): a read's key (its mapping's
//! number, never reused: [`mapping_key`]; and the page) is hashed, and only keys whose hash falls under a threshold are kept: 1 in
//! 16 to 1 in 64, the lowest rate that gives the smallest simulation
//! `MINI_PAGES` pages (what matters for the noise is how many keys are
//! drawn, not their share). The draw is stratified (`key_hash`): each
//! aligned run of 64 pages of a file gives the sample exactly its share
//! of pages (4 at 1 in 16), each page still drawn with the rate's
//! probability, so the count of keys drawn from a range read whole is
//! exact rather than binomial: the noise that is left is how the keys
//! drawn differ from their neighbours.
//!
//! **Below 1x: miniature simulations** (`mini.rs`; Waldspurger et al.,
//! ATC 2017): three caches of 0.25, 0.5 and 1 C times the rate pages,
//! run with the cache's own policy (two lists, activation on a second
//! read, refault activation) over the sampled keys: a cache's hits at
//! `r C` scale down to a simulation's at `r C x rate`. The cache's lists
//! are not an LRU, and an LRU's figures missed the cache's below 1x
//! however large the sample (docs/design.md, "How big should the cache
//! be", links the measurements).
//!
//! **The draw of keys is the noise, and the hits' ages take it out.**
//! The simulations are exact on the keys drawn; which keys are drawn is
//! not: the hits a smaller cache loses are those of keys read a little
//! too seldom, and at 1 in 16 a zipf's band of such keys is a few
//! hundred keys, whose draw alone moves the lost hits by points
//! (the measurements, before and after the ages, are linked from
//! docs/design.md). But whether a hit is lost turns on how long
//! ago its folio was read, and the cache can count that for every hit:
//! a clock ticks once an eighth of the capacity in reads (`Mrc::now`,
//! on the gate's line), each folio keeps the tick of its last read in
//! its descriptor's padding (`Folio::touch`: written only when the tick
//! moved), and each hit counts into its age's bin (`age_bin`: two an
//! octave; sharded, `stats::AgeCounts`). The sample's keys keep their
//! last tick too, so each sampled read has the same age; the
//! simulations then say only which share of the hits of each age a
//! smaller cache loses, and the cache's own counts say how many hits
//! each age has (post-stratification: the share within an age hardly
//! depends on which keys were drawn; a hot key drawn or not moves the
//! young ages, where nothing is lost). A bin without a sampled hit
//! joins the next older that has one.
//!
//! **Above 1x, past the shadows:** an exact LRU stack over a sub-sample
//! (1 in 2^`STACK_SHIFT`, or the rate if lower: `Stack`, each key's last
//! access time and a Fenwick tree counting the keys last seen at each
//! time), so a sampled read's stack distance is the sampled keys seen
//! since its key's last read, scaled by the rate. When it holds more keys
//! than its bound (half a key per page of capacity), its threshold halves
//! and the keys above it go (SHARDS's fixed-size variant), each sample
//! weighted by the inverse of the rate it was taken at. The sample says
//! only which share of its misses a larger cache would have hit; the
//! cache's own count of misses says how many there were (a ratio: a draw
//! of keys that read more or less than their share moves both its
//! counts, not the share).
//!
//! **A clock** (the group's cache, `Mrc::set_capacity_clock`;
//! `shared/curve.rs`): the simulations run the clock's policy (one list,
//! a page marked by a read passed over once), and three more, of 1, 2
//! and 4 C, give the gains above 1x in place of the stack's: an LRU's
//! distances miss the pages the clock's second chance keeps (a hot set
//! beside a stream of pages read once). Its gains are the cache's misses
//! times the share of the 1 C simulation's misses the larger one hit, as
//! the stack's are. Its hits are aged as a private cache's are, by a clock
//! in the group's segment ([`Mrc::take_ticked`]; `shared/curve.rs`).
//!
//! **The shadows** are exact where they exist: every refault is counted
//! (on the miss path, under the LRU lock it already holds). Where they ran
//! out (the trimmer took them, or the clock's activations stretched the
//! distances) they count too few gains; the stack counts the same gains
//! from every key's history, noisier. The curve takes the larger.
//!
//! **Unknown points.** A miss on a key's first read since the cache was
//! made is a miss at every size from the cold start, but a cache of
//! `r C` that had been running would have hit it if the key's previous
//! read was within `r C` distinct keys. The stack settles it where it
//! can: if it had seen `r C` distinct keys (scaled) before the read, it
//! is a miss at `r C` (the key was not among them); otherwise the key
//! waits (`State::pending`, in order of first read) until it is `r C`
//! deep unread (a miss: the read leaves the point's bound) or read again
//! (it stays in the bound until it leaves the window). A point's bound
//! is those reads' share, scaled as the gains are; over [`KNOWN_BOUND`]
//! the point is not known ([`CurvePoint::known`]). So the far points are
//! unknown while the window holds the warm-up, and known at the end of a
//! pass over data read once.
//!
//! **The window** is two epochs: an epoch ends after about 16 times the
//! capacity in pages read (the cache's counters, read every 64 sampled
//! reads), and the curve covers the
//! epoch in progress and the one before, so it follows a change of
//! workload within two epochs and never covers less than one.
//!
//! **Cost.** A hit hashes its key (two multiplies) and compares it with the
//! threshold, a load of a line written once a tick; loads its folio's
//! stamp (a line it reads anyway), storing the tick when it moved, and
//! counts its age's bin in its shard. One read in 16 to 64 queues its
//! key ([`Mrc::push`], `mrc/queue.rs`: a bounded queue of 2,048 slots,
//! one compare-and-swap and three stores, no lock, no wait) and moves
//! the clock when it ends a tick: the clock counts the reads pushed, and
//! a queued read is simulated at its push's tick, so a hit's age and a
//! sampled read's age are read by the same clock however late the
//! simulations run. The simulations run in batches off the hits' path:
//! the cache's curve thread (`foliocache-curve`, `cache.rs`) takes the
//! queue every 20 ms, every 1 ms while an eighth of it fills between two
//! looks, once a second while nothing is sampled; a curve asked for takes it first (so a curve read after the
//! reads counts every one of them); a read that finds the queue half
//! full takes it if the estimator's lock is free (`try_lock`: a thread
//! reading faster than the curve thread runs, or a loaded host); a read
//! that finds it full and the lock busy is dropped and counted (a gap in
//! the sample's stream, as a busy lock's skip was before the queue).
//! Taking a queued read is what a sampled read did before: its key
//! looked up once in the simulations' map and moved in each, and, if in
//! the stack's sub-sample, the stack updated, O(log n); and every 64 the
//! cache's counters summed for the epoch's end (so an epoch ends at the
//! counts of its drain, a queue behind the reads at most). The cost per
//! read, on and off the hits' path, is measured by `cargo bench -p
//! foliocache --bench mrc` (docs/measurements/ holds the figures).
//! Memory: the simulations' slots and map, about 18 bytes a page of
//! capacity at 1 in 16; the stack at most half a key per page, about 30
//! bytes each; the keys unsettled (first read before the stack had seen
//! 4 C), at most 4 C at the stack's rate of 1 in 64 or less, about 25
//! bytes each; the ages' bins, 9 KiB; the queue, 48 KiB: about 1.2 % of
//! a capacity of 16 MiB, 0.6 % at 64 MiB, less above (docs/design.md).

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::sync::{Arc, Weak};

use crate::sync::{Mutex, Ordering, StatU16, StatU64};

mod key;
mod mini;
mod queue;
mod stack;
pub(crate) use key::{file_key, key_hash, key_hashes, mapping_key};
pub(crate) use stack::{KeyHasher, Stack};

use mini::Minis;
use queue::Queue;
/// The slots of the queue of sampled reads (`Mrc::push`).
// (No curve thread under loom.)
#[cfg_attr(loom, allow(dead_code))]
pub(crate) const QUEUE_ENTRIES: u64 = queue::ENTRIES;

/// The capacity ratios of the curve's points.
pub const CAPACITY_RATIOS: [f64; 5] = [0.25, 0.5, 1.0, 2.0, 4.0];

/// The ratios simulated (up to 1), and those the stack is asked about
/// (above 1: gained misses).
const UP_TO_ONE: [f64; mini::SIMS] = [0.25, 0.5, 1.0];
const LARGER: [f64; 2] = [2.0, 4.0];

/// The stack's sampling rate to start at: 1 in 2^`STACK_SHIFT` keys, or
/// the simulations' rate if lower.
const STACK_SHIFT: u32 = 6;

/// The simulations' highest rate: 1 in 2^`MIN_SHIFT` keys (what a read
/// costs bounds it).
const MIN_SHIFT: u32 = 4;

/// The pages the smallest simulation (0.25x) is given at least, where the
/// highest rate allows: the rate is the lowest that gives it these.
const MINI_PAGES: u64 = 64;

/// An epoch's reads, in capacities.
const EPOCH_CAPACITIES: u64 = 16;

/// The fewest reads an epoch counts (a tiny cache's curve still covers a
/// sample worth the name).
const MIN_EPOCH: u64 = 1 << 16;

/// A tick of the clock that ages hits lasts this share of the capacity
/// in reads (sampled reads, scaled): fine enough that the ages which a
/// smaller cache's losses turn on fall in bins of their own, coarse
/// enough that the clock's line is written rarely.
const TICK_CAPACITY_SHARE: u64 = 8;

/// Sampled reads between two looks at the cache's read count.
const EPOCH_CHECK: u64 = 64;

/// The fewest keys the sample may hold before its rate halves.
const MIN_KEYS: usize = 1024;

/// The widest [`CurvePoint::bound`] of a point reported as known
/// ([`CurvePoint::known`], [`HitRatioCurve::at`]): one point of hit
/// ratio.
pub const KNOWN_BOUND: f64 = 0.01;

/// The index of the 1x point in [`CAPACITY_RATIOS`].
const ONE: usize = 2;

/// One point of a [`HitRatioCurve`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CurvePoint {
    /// The cache's size, as a multiple of its capacity (0.25, 0.5, 1, 2, 4).
    pub capacity_ratio: f64,
    /// The hit ratio (0 to 1) the cache would have had at that size over
    /// the window; at 1, the one it had. In bytes: the share of the bytes
    /// reads returned that came from memory (`CacheStats::memory_bytes`
    /// over `read_bytes`), a page readahead brought in counted as a miss
    /// where a read first found it, not as a hit. Read it through
    /// [`known`](Self::known), which says when the window cannot tell it
    /// yet.
    pub hit_ratio: f64,
    /// How far the hit ratio at this size may lie above `hit_ratio`
    /// (0 to 1): the share of the window's reads that missed on their
    /// key's first read while fewer distinct keys than this size holds
    /// had been read since the cache was made, and whose next read has
    /// not yet come nor moved past this size. Such a read is a miss at
    /// every size from a cold start, but whether it would have been a
    /// hit in a cache of this size that was warm, the window cannot say
    /// until the key is read again (or has not been within this size);
    /// so the bound is high while the cache warms up and falls once the
    /// first reads leave the window (at most two epochs). 0 at 1x (the
    /// ratio measured); 1 while the window holds no read.
    pub bound: f64,
}

impl CurvePoint {
    /// The hit ratio at this size, or `None` while it is not yet known:
    /// its [`bound`](Self::bound) is over [`KNOWN_BOUND`].
    pub fn known(&self) -> Option<f64> {
        (self.bound <= KNOWN_BOUND).then_some(self.hit_ratio)
    }
}

/// The predicted hit ratios of a cache at 0.25x, 0.5x, 1x, 2x and 4x its
/// capacity over a recent window of reads, from
/// [`Cache::hit_ratio_curve`](crate::Cache::hit_ratio_curve).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HitRatioCurve {
    /// One point per ratio of [`CAPACITY_RATIOS`], in that order; each
    /// hit ratio is 0, and not known, when the window holds no read.
    pub points: [CurvePoint; 5],
    /// Page reads in the window: each page a read covered, once a read.
    pub accesses: u64,
    /// Reads in the window the sample saw: the share of hits each age
    /// loses below 1x, and the gains above past the shadows, rest on
    /// these.
    pub sampled: u64,
}

impl HitRatioCurve {
    /// No access yet: every point's ratio set, every hit ratio 0 and
    /// not known.
    fn empty() -> HitRatioCurve {
        let mut curve = HitRatioCurve::default();
        for (p, r) in curve.points.iter_mut().zip(CAPACITY_RATIOS) {
            p.capacity_ratio = r;
            p.bound = 1.0;
        }
        curve
    }

    /// The predicted hit ratio at `capacity_ratio` (one of
    /// [`CAPACITY_RATIOS`]) once known ([`CurvePoint::known`]); `None`
    /// for another ratio, or while the window cannot tell it yet.
    pub fn at(&self, capacity_ratio: f64) -> Option<f64> {
        self.points
            .iter()
            .find(|p| p.capacity_ratio == capacity_ratio)
            .and_then(CurvePoint::known)
    }
}

/// A read at tick `now` of the thing whose stamp is `stamp` (a folio's:
/// `Folio::touch`): the ticks since its last read (wrapping), the stamp
/// moved to `now`. Stores only when the tick moved since, so the hits of
/// a hot folio within a tick write nothing.
#[inline]
pub(crate) fn touch(stamp: &StatU16, now: u16) -> u16 {
    let last = stamp.load(Ordering::Relaxed);
    if last != now {
        stamp.store(now, Ordering::Relaxed);
    }
    now.wrapping_sub(last)
}

/// Sampled reads a tick of the clock that ages hits lasts, for a cache
/// of `pages` pages sampled at 1 in 2^`shift`: an eighth of the capacity
/// in reads (`TICK_CAPACITY_SHARE`), at least one. The group's processes
/// move their clock by it (`shared/curve.rs`), as `Mrc::push` does.
pub(crate) fn tick_len(pages: u64, shift: u32) -> u64 {
    ((pages / TICK_CAPACITY_SHARE) >> shift).max(1)
}

/// The simulations' rate for a capacity of `pages` pages: 1 in 2^the
/// result, the lowest that gives the 0.25x simulation `MINI_PAGES` pages,
/// within 1 in 16 and 1 in 64.
pub(crate) fn rate_shift(pages: u64) -> u32 {
    let room = (pages / 4 / MINI_PAGES).max(1);
    room.ilog2().clamp(MIN_SHIFT, STACK_SHIFT)
}

/// The exact counts the cache keeps itself, cumulative, in pages read
/// (each page a read covers, as the sample shows it): pages that came
/// from memory (`hits`) and from below (`misses`), refaults' pages whose
/// distance a 2x and a 4x cache would have turned into hits, and the hits
/// by their age's bin ([`age_bin`]). `hits` wraps: a folio read from
/// below counts all its pages at its first read, before the reads of its
/// other pages, so it may fall for a while; a window's difference of it
/// is right once taken as signed ([`window_count`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Exact {
    pub(crate) hits: u64,
    pub(crate) misses: u64,
    pub(crate) refault_gains: [u64; 2],
    pub(crate) aged: [u64; AGE_BINS],
}

impl Exact {
    /// The counts from the pages reads covered (`read_pages`) and, of
    /// those, the pages of folios read from below counted at their first
    /// read (`first_read_pages`): the curve is of the share of what reads
    /// returned that came from memory, as `CacheStats::memory_bytes`
    /// counts it, readahead's pages counted where they were read. (A page
    /// lookup that found a folio readahead brought in is a hit in
    /// `CacheStats::hits`; the simulations, which have no readahead, miss
    /// it: docs/metrics.md, the pool.)
    pub(crate) fn of_pages(
        read_pages: u64,
        first_read_pages: u64,
        refault_gains: [u64; 2],
        aged: [u64; AGE_BINS],
    ) -> Exact {
        Exact {
            hits: read_pages.wrapping_sub(first_read_pages),
            misses: first_read_pages,
            refault_gains,
            aged,
        }
    }
}

/// A count over a window: `now` less `start` (cumulative, wrapping), none
/// if it fell.
fn window_count(now: u64, start: u64) -> u64 {
    (now.wrapping_sub(start) as i64).max(0) as u64
}

/// The bins of a hit's age: two an octave of ticks, up to the stamp's
/// 2^16.
pub(crate) const AGE_BINS: usize = 32;

/// The bin of an age of `ticks` ticks of the clock (`Mrc::now`): two
/// bins an octave of `1 + ticks` (the octave's lower and upper half,
/// split at its square root of two), the last open.
#[inline]
pub(crate) fn age_bin(ticks: u16) -> usize {
    let v = u64::from(ticks) + 1;
    let k = v.ilog2();
    let upper = usize::from(v * v >= 1 << (2 * k + 1));
    (2 * k as usize + upper).min(AGE_BINS - 1)
}

/// The sample's counts, cumulative, each sample weighted by the inverse
/// of its rate.
#[derive(Debug, Clone, Copy, Default)]
struct Sampled {
    /// Reads the simulation of C hit, by their age's bin.
    at_c: [f64; AGE_BINS],
    /// ... of those, the ones the simulations of 0.25 C and 0.5 C missed.
    lost: [[f64; AGE_BINS]; 2],
    /// Reads the simulations of 0.25 C and 0.5 C hit and that of C
    /// missed.
    found: [f64; 2],
    /// A clock's (`Mrc::set_capacity_clock`): reads its simulation of C
    /// missed, and those its simulations of 2 C and 4 C hit of them.
    above_missed: f64,
    above: [f64; 2],
    /// Misses of the stack's sample, and those at a stack distance under
    /// 2 C and 4 C.
    missed: f64,
    gained: [f64; 2],
    /// Of the stack's misses, those on a key's first read that are not
    /// yet known to be misses at each point's size, by the point's index
    /// (`State::unseen_first_read`; 1x: none).
    unseen: [f64; 5],
    /// Reads sampled (unweighted).
    count: u64,
}

/// What one sampled read adds to the counts (`State::record`).
#[derive(Debug, Clone, Copy, Default)]
struct Read {
    /// The inverse of the simulations' rate.
    weight: f64,
    /// Whether the simulations of 0.25, 0.5 and 1 C hit it.
    hits: [bool; mini::SIMS],
    /// Its age's bin, if its key was read before.
    bin: Option<usize>,
    /// A miss of the stack's sample (its weight), and whether a cache of
    /// 2 C and 4 C would have hit it (the same).
    missed: f64,
    gained: [f64; 2],
    /// A clock's simulation of C missed it (its weight), and those of 2 C
    /// and 4 C hit it (the same).
    above_missed: f64,
    above: [f64; 2],
    /// A first read of its key not known to miss at each point's size
    /// (its weight), and earlier such reads found to miss there since
    /// (`expired`: counted in the cache's window only, the file of the
    /// read that found them being another's).
    unseen: [f64; 5],
    expired: [f64; 5],
}

impl Sampled {
    fn add(&mut self, r: &Read) {
        let w = r.weight;
        let at_c = r.hits[2];
        if let (true, Some(b)) = (at_c, r.bin) {
            self.at_c[b] += w;
        }
        for i in 0..2 {
            match (at_c, r.hits[i], r.bin) {
                (true, false, Some(b)) => self.lost[i][b] += w,
                (false, true, _) => self.found[i] += w,
                _ => {}
            }
            self.gained[i] += r.gained[i];
        }
        self.missed += r.missed;
        self.above_missed += r.above_missed;
        for i in 0..2 {
            self.above[i] += r.above[i];
        }
        for i in 0..CAPACITY_RATIOS.len() {
            self.unseen[i] += r.unseen[i] - r.expired[i];
        }
        self.count += 1;
    }

    fn minus(&self, o: &Sampled) -> Sampled {
        let sub = |a: &[f64; AGE_BINS], b: &[f64; AGE_BINS]| std::array::from_fn(|j| a[j] - b[j]);
        Sampled {
            at_c: sub(&self.at_c, &o.at_c),
            lost: [
                sub(&self.lost[0], &o.lost[0]),
                sub(&self.lost[1], &o.lost[1]),
            ],
            found: [self.found[0] - o.found[0], self.found[1] - o.found[1]],
            missed: self.missed - o.missed,
            gained: [self.gained[0] - o.gained[0], self.gained[1] - o.gained[1]],
            above_missed: self.above_missed - o.above_missed,
            above: [self.above[0] - o.above[0], self.above[1] - o.above[1]],
            unseen: std::array::from_fn(|i| self.unseen[i] - o.unseen[i]),
            count: self.count - o.count,
        }
    }
}

/// Both counts at one moment (an epoch's start).
#[derive(Debug, Clone, Copy, Default)]
struct Snapshot {
    exact: Exact,
    sampled: Sampled,
}

/// A file's own exact counts (its reads that hit and missed, its
/// refaults' gains: `stats::FileCounts`), which its curve rests on.
pub(crate) trait ExactCounts: Send + Sync {
    /// The counts now, cumulative.
    fn exact(&self) -> Exact;
}

/// The counts a curve is drawn from, the cache's or a file's: the
/// sample's now, and where the previous epoch and the one in progress
/// started.
#[derive(Default)]
struct Window {
    now: Sampled,
    prev_start: Snapshot,
    start: Snapshot,
}

impl Window {
    /// A window opening at `exact`, nothing sampled yet.
    fn opening(exact: Exact) -> Window {
        let start = Snapshot {
            exact,
            sampled: Sampled::default(),
        };
        Window {
            now: Sampled::default(),
            prev_start: start,
            start,
        }
    }

    /// Ends the epoch in progress at `exact`: the window now covers the
    /// one just ended and the next.
    fn end_epoch(&mut self, exact: Exact) {
        self.prev_start = self.start;
        self.start = Snapshot {
            exact,
            sampled: self.now,
        };
    }

    /// The curve over the window, given the exact counts now, for a cache
    /// of `c` pages whose own window is `cache` (its simulations give the
    /// share of hits of each age that a smaller cache loses).
    fn curve(&self, cache: &Window, c: u64, exact: Exact) -> HitRatioCurve {
        compute(self, cache, c, exact)
    }
}

/// A file whose own curve was asked for (`File::hit_ratio_curve`).
struct Tracked {
    /// Gone with the file's mapping: the entry goes at the next epoch.
    counts: Weak<dyn ExactCounts>,
    window: Window,
}

/// The threshold a hit compares its key's hash with, and the clock that
/// ages hits, alone on their lines: read on every read, the threshold
/// written when the cache is made, the clock once a tick.
#[repr(align(128))]
struct Gate {
    threshold: StatU64,
    clock: StatU16,
    /// Sampled reads a tick lasts (`State::tick_len`, for the pushes).
    tick_len: StatU64,
}

/// The hit bit of a queued read's word (`Mrc::push`): a sampled key's
/// hash is under `u64::MAX >> MIN_SHIFT`.
const QUEUED_HIT: u64 = 1 << 63;

/// The estimator: the sample's gate, the queue of sampled reads not yet
/// simulated, and behind a lock, its stack and counts.
pub(crate) struct Mrc {
    gate: Gate,
    /// The capacity in pages, for the refault test's figures (set once).
    pages: StatU64,
    queue: Queue,
    /// Sampled reads dropped: the queue was full and its drain busy.
    dropped: StatU64,
    state: Mutex<State>,
}

struct State {
    /// The capacity in pages the ratios are of (0: none yet, nothing sampled).
    capacity: u64,
    /// The simulations' rate is 1 in 2^`shift` (fixed), the stack's 1 in
    /// 2^`stack_shift` (halving as it fills).
    shift: u32,
    stack_shift: u32,
    /// The most keys the stack holds before its rate halves.
    max_keys: usize,
    /// Reads an epoch counts.
    epoch_len: u64,
    /// Sampled reads a tick of the clock lasts (the clock is the window's
    /// count of sampled reads over it).
    tick_len: u64,
    stack: Stack,
    /// The stack's keys whose first read missed while the stack had seen
    /// fewer distinct keys than some point's size, with those points
    /// (bits by index), in the order of their first reads: what keeps
    /// those points unknown (`State::unseen_first_read`).
    pending: HashMap<u64, u8, BuildHasherDefault<KeyHasher>>,
    pending_order: VecDeque<u64>,
    minis: Minis,
    /// The simulations run a clock (`Mrc::set_capacity_clock`), not the
    /// two lists.
    clock: bool,
    /// A clock's simulations of 1, 2 and 4 C: its gains above 1x (the
    /// stack's are an LRU's).
    larger: Option<Minis>,
    /// On the heap: its counts by age are 3 KiB, which the cache's
    /// construction would otherwise carry on the stack (a loom model's
    /// threads have 32 KiB).
    window: Box<Window>,
    /// The files whose own curves are kept, by their counts' address.
    files: HashMap<usize, Tracked>,
}

impl Default for Mrc {
    fn default() -> Self {
        Mrc {
            gate: Gate {
                threshold: StatU64::new(0),
                clock: StatU16::new(0),
                tick_len: StatU64::new(1),
            },
            pages: StatU64::new(0),
            queue: Queue::default(),
            dropped: StatU64::new(0),
            state: Mutex::new(State {
                capacity: 0,
                shift: STACK_SHIFT,
                stack_shift: STACK_SHIFT,
                max_keys: MIN_KEYS,
                epoch_len: MIN_EPOCH,
                tick_len: 1,
                stack: Stack::default(),
                pending: HashMap::default(),
                pending_order: VecDeque::new(),
                minis: Minis::new([1; mini::SIMS], false),
                clock: false,
                larger: None,
                window: Box::default(),
                files: HashMap::new(),
            }),
        }
    }
}

impl Mrc {
    /// Sets the capacity the curve's ratios are of, with the rate (the
    /// lowest that gives the 0.25x simulation `MINI_PAGES` pages, within
    /// 1 in 16 and 1 in 64), the stack's bound (half a key a page) and
    /// the epoch's length from it, and opens the gate. Called once, when
    /// the cache is made.
    pub(crate) fn set_capacity(&self, pages: u64) {
        let shift = rate_shift(pages);
        self.configure(
            pages,
            [shift, shift.max(STACK_SHIFT)],
            (pages as usize / 2).max(MIN_KEYS),
            (pages * EPOCH_CAPACITIES).max(MIN_EPOCH),
        );
    }

    /// [`set_capacity`](Self::set_capacity) with the rates (1 in
    /// 2^`shifts[0]` for the simulations, 1 in 2^`shifts[1]` for the
    /// stack, no higher), the stack's bound and the epoch's reads given.
    pub(crate) fn configure(&self, pages: u64, shifts: [u32; 2], max_keys: usize, epoch_len: u64) {
        let mut st = self.state.lock();
        let shift = shifts[0];
        st.capacity = pages;
        st.shift = shift;
        st.stack_shift = shifts[1].max(shift);
        st.minis = Minis::new(
            UP_TO_ONE.map(|r| (r * (pages >> shift) as f64).round() as u32),
            st.clock,
        );
        st.larger = st.clock.then(|| {
            Minis::new(
                [1.0, LARGER[0], LARGER[1]].map(|r| (r * (pages >> shift) as f64).round() as u32),
                true,
            )
        });
        st.max_keys = max_keys;
        st.epoch_len = epoch_len;
        self.pages.store(pages, Ordering::Relaxed);
        st.tick_len = tick_len(pages, shift);
        self.gate.tick_len.store(st.tick_len, Ordering::Relaxed);
        self.gate.threshold.store(
            if pages == 0 { 0 } else { u64::MAX >> shift },
            Ordering::Relaxed,
        );
    }

    /// [`set_capacity`](Self::set_capacity) for a cache that reclaims by
    /// a clock (one list, a page read since the hand passed is passed
    /// over once: the group's cache, `shared/index.rs`'s `victim`): the
    /// simulations below 1x run that policy.
    pub(crate) fn set_capacity_clock(&self, pages: u64) {
        self.state.lock().clock = true;
        self.set_capacity(pages);
    }

    /// The capacity in pages the ratios are of.
    pub(crate) fn capacity(&self) -> u64 {
        self.pages.load(Ordering::Relaxed)
    }

    /// The gate: a read of a key whose hash is under it is in the sample;
    /// one load of a line no read writes. 0 (none is) while the estimator
    /// is off (`CacheBuilder::hit_ratio_curve`), and under loom (the
    /// sample's lock would only add interleavings to the models of the
    /// read path).
    #[inline]
    pub(crate) fn threshold(&self) -> u64 {
        if cfg!(loom) {
            0
        } else {
            self.gate.threshold.load(Ordering::Relaxed)
        }
    }

    /// Whether a read of the key hashed `h` is in the sample.
    #[cfg(test)]
    pub(crate) fn sampled(&self, h: u64) -> bool {
        h < self.threshold()
    }

    /// The clock's tick now: it moves once every `tick_len` sampled reads,
    /// about an eighth of the capacity in reads, wrapping at 2^16. A
    /// folio's stamp is the tick of its last read (`Folio::touch`): the
    /// ticks since are its read's age, binned (`age_bin`).
    #[inline]
    pub(crate) fn now(&self) -> u16 {
        self.gate.clock.load(Ordering::Relaxed)
    }

    /// Counts a sampled read (its key's hash `h`, whether it hit) into the
    /// stack and the counts, and into those of its file if the file's
    /// curve is kept (`file`: [`file_id`]); `exact` gives the cache's own
    /// counts when an epoch ends. The clock moves with the reads counted.
    /// Skips the read if another thread holds the lock. The tests' way
    /// in; a cache's reads are queued ([`push`](Self::push)), the
    /// group's ticked ([`take_ticked`](Self::take_ticked)).
    #[cfg(test)]
    pub(crate) fn sample(
        &self,
        h: u64,
        hit: bool,
        exact: impl FnOnce() -> Exact,
        file: Option<usize>,
    ) {
        let Some(mut st) = self.state.try_lock() else {
            return;
        };
        if let Some(count) = st.take(h, hit, self.now(), exact, file) {
            if count % st.tick_len == 0 {
                // The sampled reads so far, in ticks (wrapping at 2^16;
                // the only writer: under the lock).
                self.gate
                    .clock
                    .store((count / st.tick_len) as u16, Ordering::Relaxed);
            }
        }
    }

    /// Counts sampled reads `(hash, hit, tick)` in order, each at the
    /// tick its pusher's clock had (the group's ring, `shared/curve.rs`:
    /// each process ages its hits by a clock in the segment that the
    /// ring's position moves, as [`push`](Self::push)'s position moves
    /// this one's), waiting for the estimator's lock (never on a read's
    /// path). A hash not in the sample is left out.
    pub(crate) fn take_ticked(
        &self,
        reads: impl IntoIterator<Item = (u64, bool, u16)>,
        exact: impl Fn() -> Exact,
    ) {
        let mut st = self.state.lock();
        for (h, hit, now) in reads {
            st.take(h, hit, now, &exact, None);
        }
    }

    /// Queues a sampled read (its key's hash `h`, whether it hit, its
    /// file's [`file_id`] if the file's curve is kept) for the estimator,
    /// and moves the clock when the read ends a tick: a claim and three
    /// stores, no lock, no wait. The simulations take the queue in
    /// batches ([`drain`](Self::drain)): the cache's curve thread, a
    /// curve asked for, or this read when the queue is half full and the
    /// estimator's lock free (`try_lock`). With the queue full and the
    /// lock busy, the read is dropped and counted (`dropped`).
    #[cold]
    #[inline(never)]
    pub(crate) fn push(&self, h: u64, hit: bool, file: Option<usize>, exact: impl Fn() -> Exact) {
        // (A cache's rate is at most 1 in 16, `rate_shift`: the top bit
        // of a sampled key's hash is free.)
        debug_assert_eq!(h & QUEUED_HIT, 0, "a sampled hash under 2^60");
        let word = h | if hit { QUEUED_HIT } else { 0 };
        let file = file.unwrap_or(0) as u64;
        let pos = match self.queue.push(word, file) {
            Some(pos) => pos,
            None => {
                let again = self.state.try_lock().and_then(|mut st| {
                    self.take_queued(&mut st, &exact);
                    self.queue.push(word, file)
                });
                let Some(pos) = again else {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    return;
                };
                pos
            }
        };
        let tick_len = self.gate.tick_len.load(Ordering::Relaxed);
        if (pos + 1) % tick_len == 0 {
            // Reads pushed so far, in ticks (wrapping at 2^16).
            self.gate
                .clock
                .store(((pos + 1) / tick_len) as u16, Ordering::Relaxed);
        }
        if self.queue.len() >= queue::ENTRIES / 2 {
            if let Some(mut st) = self.state.try_lock() {
                self.take_queued(&mut st, &exact);
            }
        }
    }

    /// Runs the queued reads through the simulations (waiting for the
    /// lock: never on a read's path); returns how many.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn drain(&self, exact: impl Fn() -> Exact) -> u64 {
        let mut st = self.state.lock();
        self.take_queued(&mut st, &exact)
    }

    /// Sampled reads dropped so far (the queue full, its drain busy):
    /// `CacheStats::curve_samples_dropped`.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Holds the estimator's lock, as a drain in progress does, until the
    /// guard goes (a test's way to find the queue's drain busy).
    #[cfg(test)]
    pub(crate) fn hold_drain(&self) -> impl Sized + '_ {
        self.state.lock()
    }

    /// The queued reads, in order, each at the tick of its push (its
    /// position in ticks: the clock its hit's age was read by).
    fn take_queued(&self, st: &mut State, exact: &impl Fn() -> Exact) -> u64 {
        let tick_len = st.tick_len;
        self.queue.take(|pos, word, file| {
            let now = (pos / tick_len) as u16;
            let file = (file != 0).then_some(file as usize);
            st.take(word & !QUEUED_HIT, word & QUEUED_HIT != 0, now, exact, file);
        })
    }

    /// Starts keeping the curve of the file whose counts are `counts`
    /// (its window starts now, and grows to the cache's two epochs).
    pub(crate) fn track<C: ExactCounts + 'static>(&self, counts: &Arc<C>) {
        let window = Window::opening(counts.exact());
        let weak: Weak<dyn ExactCounts> = Arc::downgrade(counts) as Weak<dyn ExactCounts>;
        self.state
            .lock()
            .files
            .entry(file_id(&**counts))
            .or_insert(Tracked {
                counts: weak,
                window,
            });
    }

    /// The curve of the file whose counts are `counts` over its window
    /// (see [`curve`](Self::curve)): the hit ratios its reads would have
    /// had in a cache of each size, beside the other files' reads as they
    /// were. Empty (no access) if not kept.
    pub(crate) fn file_curve<C: ExactCounts>(
        &self,
        counts: &C,
        exact: impl Fn() -> Exact,
    ) -> HitRatioCurve {
        let mut st = self.state.lock();
        self.take_queued(&mut st, &exact);
        st.files
            .get(&file_id(counts))
            .map_or_else(HitRatioCurve::empty, |t| {
                t.window.curve(&st.window, st.capacity, counts.exact())
            })
    }

    /// The curve over the window, given the cache's own counts now (read
    /// under the estimator's lock, so that no epoch ends between them and
    /// the window's start).
    pub(crate) fn curve(&self, exact: impl Fn() -> Exact) -> HitRatioCurve {
        let mut st = self.state.lock();
        self.take_queued(&mut st, &exact);
        st.window.curve(&st.window, st.capacity, exact())
    }
}

/// The identity of a file's counts in the estimator: their address (kept
/// from reuse while the estimator holds them weakly).
pub(crate) fn file_id<C>(counts: &C) -> usize {
    counts as *const C as usize
}

/// The curve over window `own` (the cache's or a file's) given its exact
/// counts now, for a cache of `c` pages whose own window is `cache`.
fn compute(own: &Window, cache: &Window, c: u64, exact: Exact) -> HitRatioCurve {
    let base = &own.prev_start;
    let s = own.now.minus(&base.sampled);
    let all = cache.now.minus(&cache.prev_start.sampled);
    let hits = window_count(exact.hits, base.exact.hits);
    let misses = window_count(exact.misses, base.exact.misses);
    let reads = hits.wrapping_add(misses);
    let mut curve = HitRatioCurve {
        accesses: reads,
        sampled: s.count,
        ..HitRatioCurve::empty()
    };
    if reads == 0 || c == 0 {
        return curve;
    }
    let measured = hits as f64 / reads as f64;
    for (i, p) in curve.points.iter_mut().enumerate() {
        // The first reads whose reuse the window has not seen, as the
        // gains are: the cache's misses times their share of the
        // sample's.
        p.bound = match i {
            ONE => 0.0,
            _ => (sampled_gain(s.unseen[i].max(0.0), s.missed, misses) / reads as f64).min(1.0),
        };
    }
    let aged: [f64; AGE_BINS] =
        std::array::from_fn(|b| exact.aged[b].wrapping_sub(base.exact.aged[b]) as f64);
    for i in 0..2 {
        // Below 1x: the hits the smaller cache loses, the window's hits
        // times the share its simulations lose at their ages, less the
        // reads it hits that C missed, over the reads.
        let lost = lost_share(&aged, &all.at_c, &all.lost[i]) * hits as f64 - s.found[i];
        curve.points[i].hit_ratio = (measured - lost.max(0.0) / reads as f64).clamp(0.0, 1.0);
        // Above: the gains of the shadows or of the stack, the larger.
        let shadow = exact.refault_gains[i].wrapping_sub(base.exact.refault_gains[i]);
        // (A clock's: its simulations above 1x, where the stack, an LRU,
        // misses what the clock's second chance keeps.)
        let sampled = if s.above_missed > 0.0 {
            sampled_gain(s.above[i], s.above_missed, misses)
        } else {
            sampled_gain(s.gained[i], s.missed, misses)
        };
        let gain = (shadow as f64).max(sampled);
        let gain = gain / reads as f64;
        curve.points[3 + i].hit_ratio = (measured + gain).clamp(0.0, 1.0);
    }
    curve.points[2].hit_ratio = measured;
    curve
}

/// The misses a larger cache would have hit, from the stack's sample:
/// the cache's `misses` (exact) times the share of the sample's (`missed`)
/// that it would have hit (`gained`), a ratio whose key-draw noise the
/// two share. Nothing where the sample missed nothing.
fn sampled_gain(gained: f64, missed: f64, misses: u64) -> f64 {
    if missed > 0.0 {
        misses as f64 * gained / missed
    } else {
        0.0
    }
}

/// The share of the cache's hits a smaller cache would have lost,
/// post-stratified by age: the cache's hits in each bin of age (`aged`,
/// exact) times the share of the simulation of C's hits in that bin
/// (`at_c`) that the smaller one lost (`lost`). A bin the sample has no
/// hit in joins the next that has (the oldest join the last). With no
/// hit binned, the sample's share over all ages.
fn lost_share(aged: &[f64; AGE_BINS], at_c: &[f64; AGE_BINS], lost: &[f64; AGE_BINS]) -> f64 {
    let total: f64 = aged.iter().sum();
    if total <= 0.0 {
        let hit: f64 = at_c.iter().sum();
        return if hit > 0.0 {
            lost.iter().sum::<f64>() / hit
        } else {
            0.0
        };
    }
    let (mut sum, mut pending, mut share) = (0.0, 0.0, 0.0);
    let (mut group_lost, mut group_hit) = (0.0, 0.0);
    for b in 0..AGE_BINS {
        pending += aged[b];
        group_lost += lost[b];
        group_hit += at_c[b];
        if group_hit > 0.0 {
            share = group_lost / group_hit;
            sum += pending * share;
            (pending, group_lost, group_hit) = (0.0, 0.0, 0.0);
        }
    }
    (sum + pending * share) / total
}

impl State {
    /// Counts sampled read `h` (`hit`, at tick `now`, of file `file`)
    /// into the stack and the counts ([`Mrc::sample`]), halves the
    /// stack's rate when it is over its bound, and ends the epoch when
    /// the cache's own counts (`exact`) say it is over. Returns the
    /// sampled reads counted so far, unless the read is no longer in the
    /// sample.
    fn take(
        &mut self,
        h: u64,
        hit: bool,
        now: u16,
        exact: impl FnOnce() -> Exact,
        file: Option<usize>,
    ) -> Option<u64> {
        if self.capacity == 0 || h > u64::MAX >> self.shift {
            // Raced with the gate's closing: not in the sample.
            return None;
        }
        let read = self.record(h, hit, now);
        self.window.now.add(&read);
        if let Some(t) = file.and_then(|id| self.files.get_mut(&id)) {
            t.window.now.add(&Read {
                expired: [0.0; 5],
                ..read
            });
        }
        if self.stack.keys() > self.max_keys {
            self.stack_shift += 1;
            let threshold = u64::MAX >> self.stack_shift;
            self.stack.retain_below(threshold);
            self.pending.retain(|h, _| *h <= threshold);
            self.pending_order.retain(|h| *h <= threshold);
        }
        // Whether the epoch is over, by the cache's own counts (the
        // sample's, scaled, are off by the share of hot keys it holds),
        // asked once every `EPOCH_CHECK` sampled reads: a sum over the
        // counters' shards.
        let count = self.window.now.count;
        if count.is_multiple_of(EPOCH_CHECK) {
            let exact = exact();
            let reads = |e: &Exact| e.hits.wrapping_add(e.misses);
            if reads(&exact).wrapping_sub(reads(&self.window.start.exact)) >= self.epoch_len {
                self.window.end_epoch(exact);
                // The files' epochs end with the cache's; a file whose
                // mapping is gone leaves.
                self.files.retain(|_, t| match t.counts.upgrade() {
                    Some(counts) => {
                        t.window.end_epoch(counts.exact());
                        true
                    }
                    None => false,
                });
            }
        }
        Some(count)
    }

    /// One sampled read: the simulations below 1x read it (their hits,
    /// scaled by the rate, are the hits a cache of that size would have
    /// had); if the stack samples it too, its stack distance, scaled by
    /// the stack's rate, says which larger sizes would have turned the
    /// cache's miss into a hit. A key new to the stack has no distance:
    /// no size hits it. `now`: the clock's tick, which ages the key's
    /// read. Returns what the read adds to the counts.
    fn record(&mut self, h: u64, hit: bool, now: u16) -> Read {
        let (hits, age) = self.minis.access(h, now);
        let mut read = Read {
            weight: (1u64 << self.shift) as f64,
            hits,
            bin: age.map(age_bin),
            ..Read::default()
        };
        if let Some(larger) = &mut self.larger {
            let (hits, _) = larger.access(h, now);
            if !hits[0] {
                read.above_missed = read.weight;
                for i in 0..2 {
                    if hits[i + 1] {
                        read.above[i] = read.weight;
                    }
                }
            }
        }
        if h > u64::MAX >> self.stack_shift {
            return read;
        }
        let w = (1u64 << self.stack_shift) as f64;
        let c = self.capacity as f64;
        let seen = self.stack.keys() as f64 * w;
        let d = self.stack.access(h).map(|d| d as f64 * w);
        if !hit {
            read.missed = w;
            for (gained, r) in read.gained.iter_mut().zip(LARGER) {
                if d.is_some_and(|d| d < r * c) {
                    *gained = w;
                }
            }
        }
        self.unseen_first_read(h, hit, d, seen, &mut read);
        read
    }

    /// Which points the stack's read of key `h` (at stack distance `d`,
    /// scaled; `None` on the key's first read since the cache was made,
    /// when `seen` distinct keys had been, scaled) leaves unknown, and
    /// which it makes known, into `read`.
    ///
    /// A first read that missed is a miss at every size from the cold
    /// start the window may hold; warm, a cache of `r C` would have hit
    /// it if the key's previous read was within `r C` distinct keys.
    /// Where `seen` is at least `r C`, no such previous read could be
    /// (the stack has seen the key since none of them), so the miss at
    /// `r C` is known; below, the point does not know it until the key
    /// has gone `r C` distinct keys unread (a miss there: the read
    /// expires from the point's bound) or is read again within them (it
    /// stays in the bound until it leaves the window: the warm-up's
    /// misses the point would have to be raised by).
    fn unseen_first_read(&mut self, h: u64, hit: bool, d: Option<f64>, seen: f64, read: &mut Read) {
        let w = (1u64 << self.stack_shift) as f64;
        let c = self.capacity as f64;
        match d {
            None if !hit => {
                let mask = short_of(seen, c);
                if mask != 0 {
                    self.pending.insert(h, mask);
                    self.pending_order.push_back(h);
                    for_bits(mask, |i| read.unseen[i] = w);
                }
            }
            None => {}
            Some(d) => {
                // Read again: at the sizes it went past, its first read
                // is known to miss.
                if let Some(mask) = self.pending.remove(&h) {
                    for_bits(mask & !short_of(d, c), |i| read.expired[i] += w);
                }
            }
        }
        // The oldest first reads not read since, deepest in the stack
        // first: each is known to miss at the sizes its depth passed.
        while let Some(&front) = self.pending_order.front() {
            let (Some(&mask), Some(depth)) = (self.pending.get(&front), self.stack.depth(front))
            else {
                self.pending.remove(&front);
                self.pending_order.pop_front();
                continue;
            };
            let left = mask & short_of(depth as f64 * w, c);
            for_bits(mask & !left, |i| read.expired[i] += w);
            if left != 0 {
                self.pending.insert(front, left);
                break;
            }
            self.pending.remove(&front);
            self.pending_order.pop_front();
        }
    }
}

/// The points (bits by their index in [`CAPACITY_RATIOS`]; never 1x)
/// whose size `r C` is over `x` pages, for a capacity of `c` pages.
fn short_of(x: f64, c: f64) -> u8 {
    CAPACITY_RATIOS
        .iter()
        .enumerate()
        .filter(|&(i, &r)| i != ONE && x < r * c)
        .fold(0, |m, (i, _)| m | 1 << i)
}

/// Calls `f` with the index of each bit set in `mask`.
fn for_bits(mask: u8, mut f: impl FnMut(usize)) {
    for i in 0..CAPACITY_RATIOS.len() {
        if mask & 1 << i != 0 {
            f(i);
        }
    }
}

#[cfg(test)]
mod tests;
