//! The disk tier's curve: the hit ratio, the GETs and the bytes fetched
//! from the store that the tier would have had at 0.25x, 0.5x, 1x, 2x and
//! 4x its slots over the reads since it was opened
//! ([`DiskTier::hit_ratio_curve`](super::DiskTier::hit_ratio_curve)).
//!
//! # How
//! The tier's unit is the chunk, and what a user pays for is a GET: a
//! read that misses in memory asks the tier for the chunks of its range
//! (`RemoteBacking::read_range`, crate::cached::remote), in order,
//! stopping at the first it does not hold; a range held whole costs no
//! GET, any other one GET (of the range, of its whole chunks when one is
//! admitted, or of its read-around window). So the estimator replays,
//! for each such request, the tier's own policy in five miniature tiers
//! (Waldspurger et al., "Cache Modeling and Optimization using Miniature
//! Simulations", ATC 2017):
//!
//! ```text
//!   lookup: the chunks of the range in order, until one is missing;
//!           a chunk found is marked used now (a read-once read's: the
//!           set's first to go, as `DiskTier::get_with`)
//!   miss:   the request costs a GET; the chunks go in as the tier puts
//!           them: a point read's window's all when it is the third miss
//!           there (each simulation counts its own misses, as the read
//!           counts the tier's: `RemoteBacking::point_reads_near`), else
//!           each chunk one of whose pages missed before within the
//!           ghosts' window (`DiskTier::admit`)
//!   put:    the slot of its key, else an empty one, else the set's least
//!           recently used (16 ways, as the tier's sets)
//!   writes through the store (`DiskTier::put`, `put_kept`): put in each
//! ```
//!
//! over a sample of the chunks (SHARDS's spatial sampling: a chunk is in
//! it when the top bits of its key, a 128-bit hash, are zero; 1 in 2^k,
//! the highest rate that keeps the 4x tier within [`MAX_SIM_SLOTS`]
//! slots), each miniature tier `r x slots x rate` slots and its ghosts
//! scaled alike. A tier of up to 2,048 slots (128 MiB) is simulated
//! whole.
//!
//! # The figures
//! Each point is the measured figure moved by what the simulations say
//! the size changes, so that 1x is what the tier had, and what the
//! simulations get wrong alike at every size (the sets' placement of
//! other keys, a range whose chunks outside the sample the sample does
//! not see) cancels:
//!
//! ```text
//!   hit ratio(r) = measured + sim hit ratio(r) - sim hit ratio(1)
//!   GETs(r)      = measured GETs  x sim requests missed(r) / at 1
//!   bytes(r)     = measured bytes x sim bytes missed(r) / at 1
//! ```
//!
//! where a request the simulation missed costs the bytes of the GET it
//! made, or, if the real tier held it, its range's. The measured GETs
//! and bytes are those of the reads that asked the tier, counted here.
//!
//! # What it does not model
//! The time a read-around window's chunks take to reach the tier (they
//! are written in the background: a read meanwhile misses; the
//! simulations put them at once), the read-around counts of windows
//! whose chunks are not all in the sample (a sampled miss counts one, as
//! if the window's other misses were not there), a tier reopened warm (the
//! simulations start empty: the points below 1x count as misses what the
//! reopened tier served), the records and the kept-until-read marks.
//!
//! # Cost
//! A request with no sampled chunk costs a compare per chunk; one with
//! one takes the estimator's lock and scans a set of each simulation:
//! beside the 68 KiB read of a slot (a tier hit) or a GET, both on the
//! same path, a small share (the bench's `advisor` scenario prints it).
//! Memory: at most [`MAX_SIM_SLOTS`] x 7.75 / 4 slots of 16 bytes and as
//! many ghosts, about 2 MiB at the bound.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::{Ghosts, MAX_GHOSTS, WAYS};
use crate::window::NearMisses;

/// The capacity ratios of the points: the memory tier's curve's
/// (`foliocache::CAPACITY_RATIOS`), so both tiers' points line up.
pub const TIER_RATIOS: [f64; 5] = foliocache::CAPACITY_RATIOS;

/// The index of the 1x point.
const ONE: usize = 2;

/// The most slots the largest (4x) simulation has: the sampling rate is
/// the highest power of two share that keeps it within.
pub const MAX_SIM_SLOTS: u64 = 8192;

/// One point of a [`TierCurve`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TierPoint {
    /// The tier's size, as a multiple of its size now.
    pub capacity_ratio: f64,
    /// The share of what the tier was asked for that it would have
    /// served at that size: for the memory tier, of the bytes reads
    /// returned, the share that came from memory (the cache's curve,
    /// `foliocache::HitRatioCurve`); for the disk tier, of the 64 KiB
    /// chunks looked up, the share found.
    pub hit_ratio: f64,
    /// Whether the point is known (the memory tier's curve reports a
    /// point it cannot tell yet: `foliocache::CurvePoint::known`); the
    /// disk tier's are, unless its curve is off
    /// ([`DiskTier::with_curve`](super::DiskTier::with_curve): then only
    /// 1x, what it had).
    pub known: bool,
    /// The ranged GETs the store would have sent at that size over the
    /// window (1x: those it sent); `None` where the tier's size does not
    /// decide them alone (the memory tier of a store with a disk tier:
    /// its misses go to the tier, whose curve says the GETs).
    pub remote_gets: Option<f64>,
    /// The bytes those GETs would have fetched.
    pub remote_bytes: Option<f64>,
}

/// A tier's curve: [`DiskTier::hit_ratio_curve`](super::DiskTier::hit_ratio_curve),
/// or [`CachedStore::tier_curves`](crate::CachedStore::tier_curves)'s.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TierCurve {
    /// One point per ratio of [`TIER_RATIOS`], in that order.
    pub points: [TierPoint; 5],
    /// What the window counted: the memory tier's page reads, the disk
    /// tier's chunk lookups.
    pub accesses: u64,
    /// Of those, the ones the simulations ran (the sample).
    pub sampled: u64,
}

impl TierCurve {
    /// The point at `ratio` (one of [`TIER_RATIOS`]), if there is one.
    pub fn at(&self, ratio: f64) -> Option<&TierPoint> {
        self.points.iter().find(|p| p.capacity_ratio == ratio)
    }
}

/// What one request to the tier was and cost (`RemoteBacking::read_range`).
pub(crate) struct Request<'a> {
    /// The chunks of its range, in order: key, and the pages (bit `i`:
    /// bytes `[i * 4096, (i + 1) * 4096)` of the chunk) it asked.
    pub(crate) chunks: &'a [(u128, u16)],
    /// Whether a chunk found is marked used (not a read-once read).
    pub(crate) promote: bool,
    /// With read-around on, for a point read (not sequential, small
    /// beside the window): its window, whose misses the simulations count
    /// as the tier's read does (`RemoteBacking::point_reads_near`).
    pub(crate) point: Option<Point<'a>>,
    /// The GETs it sent, and their bytes.
    pub(crate) gets: u64,
    pub(crate) bytes: u64,
    /// Its range's length: what a GET of it fetches.
    pub(crate) len: u64,
}

/// A point read's read-around window ([`Request::point`]).
pub(crate) struct Point<'a> {
    /// The window's name (the key of its first chunk).
    pub(crate) id: u128,
    /// Its chunks (numbers in the object).
    pub(crate) chunks: std::ops::Range<u64>,
    /// The key of a chunk of the object.
    pub(crate) key: &'a dyn Fn(u64) -> u128,
    /// The misses in a window before the next fetches it whole.
    pub(crate) after: u32,
}

/// The estimator of one tier.
pub(crate) struct Estimator {
    /// Sample 1 chunk in 2^`shift`.
    shift: u32,
    /// Off (`DiskTier::with_curve`): no request is simulated.
    on: bool,
    state: Mutex<[Mini; 5]>,
    /// The GETs and bytes of every request (sampled or not).
    gets: AtomicU64,
    bytes: AtomicU64,
}

/// One miniature tier, and what it counted.
struct Mini {
    ways: u64,
    sets: u64,
    /// The key held by each slot (0: none).
    tags: Vec<u64>,
    used: Vec<u64>,
    clock: u64,
    ghosts: Ghosts,
    ghost_cap: usize,
    /// Misses by read-around window ([`Point`]), counted as the tier's
    /// read counts them (per object there, per simulation here).
    near: NearMisses<u128>,
    lookups: u64,
    hits: u64,
    missed: u64,
    missed_bytes: u64,
}

impl Mini {
    fn new(slots: u64, ghost_cap: usize) -> Mini {
        let ways = slots.clamp(1, WAYS);
        let sets = (slots / ways).max(1);
        Mini {
            ways,
            sets,
            tags: vec![0; (ways * sets) as usize],
            used: vec![0; (ways * sets) as usize],
            clock: 1,
            ghosts: Ghosts::default(),
            ghost_cap: ghost_cap.max(1),
            near: NearMisses::default(),
            lookups: 0,
            hits: 0,
            missed: 0,
            missed_bytes: 0,
        }
    }

    /// The slots of `key`'s set: picked as the tier picks it
    /// (`DiskTier::set`), so that a simulation of all the chunks places
    /// them as a tier of its size would.
    fn set(&self, key: u128) -> std::ops::Range<usize> {
        let first = ((key >> 64) as u64 % self.sets) * self.ways;
        first as usize..(first + self.ways) as usize
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Whether it holds `k`; if so, marked used (or first to go).
    fn lookup(&mut self, key: u128, promote: bool) -> bool {
        self.lookups += 1;
        let k = sim_key(key);
        let Some(s) = self.set(key).find(|&s| self.tags[s] == k) else {
            return false;
        };
        self.hits += 1;
        self.used[s] = if promote { self.tick() } else { 0 };
        true
    }

    /// Puts `k`: its slot, an empty one, or the set's least recent.
    fn put(&mut self, key: u128) {
        let (k, set) = (sim_key(key), self.set(key));
        let s = set
            .clone()
            .find(|&s| self.tags[s] == k)
            .or_else(|| set.clone().find(|&s| self.tags[s] == 0))
            .or_else(|| set.min_by_key(|&s| self.used[s]))
            .expect("a set has a slot");
        self.tags[s] = k;
        self.used[s] = self.tick();
    }

    /// `DiskTier::admit` over these ghosts.
    fn admit(&mut self, key: u128, pages: u16) -> bool {
        self.ghosts.admit(key, pages, self.ghost_cap)
    }
}

/// A chunk's tag in the simulations: its key's low 64 bits, never 0.
fn sim_key(key: u128) -> u64 {
    (key as u64).max(1)
}

impl Estimator {
    /// The estimator of a tier of `slots` slots.
    pub(crate) fn new(slots: u64) -> Estimator {
        let mut shift = 0;
        while (4 * slots) >> shift > MAX_SIM_SLOTS {
            shift += 1;
        }
        let minis = TIER_RATIOS.map(|r| {
            let sized = (r * slots as f64).round().max(1.0);
            let ghosts = (sized as usize).clamp(64, MAX_GHOSTS) >> shift;
            Mini::new(((sized as u64) >> shift).max(1), ghosts)
        });
        Estimator {
            shift,
            on: true,
            state: Mutex::new(minis),
            gets: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    /// Turns the simulations on or off (on when made).
    pub(crate) fn set_on(&mut self, on: bool) {
        self.on = on;
    }

    /// Whether chunk `key` is in the sample.
    #[inline]
    fn sampled(&self, key: u128) -> bool {
        self.shift == 0 || (key >> 96) as u32 >> (32 - self.shift) == 0
    }

    /// Counts request `r` and runs it through the simulations if a chunk
    /// of it is in the sample.
    pub(crate) fn request(&self, r: &Request<'_>) {
        self.gets.fetch_add(r.gets, Ordering::Relaxed);
        self.bytes.fetch_add(r.bytes, Ordering::Relaxed);
        if !self.on || !r.chunks.iter().any(|c| self.sampled(c.0)) {
            return;
        }
        let chunks = r.chunks.iter().filter(|c| self.sampled(c.0));
        let cost = if r.gets > 0 { r.bytes } else { r.len };
        let mut minis = self.state.lock();
        for m in minis.iter_mut() {
            if chunks.clone().all(|c| m.lookup(c.0, r.promote)) {
                continue;
            }
            m.missed += 1;
            m.missed_bytes += cost;
            match r.point.as_ref().filter(|p| m.near.count(p.id) > p.after) {
                // The window fetched whole, all its chunks put.
                Some(p) => {
                    for key in p.chunks.clone().map(p.key) {
                        if self.sampled(key) {
                            m.put(key);
                        }
                    }
                }
                None => {
                    for &(key, pages) in chunks.clone() {
                        if m.admit(key, pages) {
                            m.put(key);
                        }
                    }
                }
            }
        }
    }

    /// A chunk written through the store ([`DiskTier::put`](super::DiskTier::put)):
    /// put in each simulation.
    pub(crate) fn written(&self, key: u128) {
        if self.on && self.sampled(key) {
            for m in self.state.lock().iter_mut() {
                m.put(key);
            }
        }
    }

    /// The curve, given the tier's measured chunk lookups found (`hits`)
    /// and not (`misses`).
    pub(crate) fn curve(&self, hits: u64, misses: u64) -> TierCurve {
        let minis = self.state.lock();
        let (gets, bytes) = (
            self.gets.load(Ordering::Relaxed) as f64,
            self.bytes.load(Ordering::Relaxed) as f64,
        );
        let ratio = |m: &Mini| m.hits as f64 / m.lookups.max(1) as f64;
        let measured = hits as f64 / (hits + misses).max(1) as f64;
        let one = &minis[ONE];
        let weight = f64::from(1u32 << self.shift);
        // Measured x the simulations' ratio to 1x; where 1x missed
        // nothing, what they missed beyond it, scaled by the rate.
        let scale = |at: f64, base: f64, measured: f64| {
            if base > 0.0 {
                measured * at / base
            } else {
                measured + at * weight
            }
        };
        let mut points = [TierPoint::default(); 5];
        for ((p, m), r) in points.iter_mut().zip(minis.iter()).zip(TIER_RATIOS) {
            *p = TierPoint {
                capacity_ratio: r,
                hit_ratio: (measured + ratio(m) - ratio(one)).clamp(0.0, 1.0),
                known: self.on || r == 1.0,
                remote_gets: Some(scale(m.missed as f64, one.missed as f64, gets)),
                remote_bytes: Some(scale(m.missed_bytes as f64, one.missed_bytes as f64, bytes)),
            };
        }
        points[ONE].hit_ratio = measured;
        TierCurve {
            points,
            accesses: hits + misses,
            sampled: one.lookups,
        }
    }
}
