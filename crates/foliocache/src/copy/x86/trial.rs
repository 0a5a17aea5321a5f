//! The scattered classes' choice, made by timing random hits themselves.
//!
//! A random reader's 4 KiB hit copies from a place no stream led to, and
//! which routine copies it fastest is decided by how the copy overlaps the
//! hit around it (the lookup before, the next hit after), not by the copy
//! alone: copies timed alone, scattered over memory as large as a cache's
//! and each between a locked pair, put the routines within a few per cent
//! of one another, either way round from one process to the next, while
//! the hits ranked them by 5-20 % on one host (`docs/bench.md`, "Random
//! hits: a class of their own"). So the hits are what is timed: until a
//! scattered class is decided, each thread copies its random hits of that
//! class in blocks of [`BLOCK`] hits, a routine per block in turn, and
//! times each block from its first hit to the first hit after it (one
//! clock reading per block): what a block took is its hits and everything
//! the thread did between them, the same work whichever routine copied.
//! Once every candidate has [`SAMPLES`] blocks, the class goes to the
//! routine whose median block was fastest; one within [`TIE`] of it yields
//! to the earlier in `ROUTINES` (`movsb` first). Blocks that took a miss,
//! a preemption or another thread's burst are outliers the medians
//! ignore. A few thousand hits decide (a few milliseconds of random
//! reads); until then each class copies with its routines in turn, all of
//! them correct. `FOLIOCACHE_COPY` forces a routine, and no trial runs.
//! Under loom and Miri, and off x86-64, there is no trial (nor routines).

use std::cell::Cell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::Instant;

use super::{CopyFn, Routine, PLAIN, R, RANDOM_CLASS, ROUTINES, SHARED};

/// Hits per timed block: enough that one clock reading per block costs
/// nothing beside them, few enough that host noise (which moves on a scale
/// of milliseconds) hits the routines alike.
const BLOCK: u32 = 64;

/// Blocks timed per candidate routine before a class is decided.
pub(super) const SAMPLES: usize = 24;

/// A routine whose median block is this close to the fastest's (as a
/// fraction) counts as fast as it, and the earlier in `ROUTINES` wins.
pub(super) const TIE: f64 = 0.03;

/// The trial of one scattered class.
struct Trial {
    /// Blocks timed so far, by `ROUTINES` index.
    blocks: [AtomicU32; R],
    /// The first [`SAMPLES`] blocks' time per hit, in picoseconds (0: a slot
    /// taken and not yet written), by `ROUTINES` index.
    ps: [[AtomicU32; SAMPLES]; R],
    /// Set by the one thread that decides.
    deciding: AtomicBool,
    /// What was decided: the routine, and each candidate's median time
    /// per hit in nanoseconds.
    decided: OnceLock<(Routine, [Option<f64>; R])>,
}

impl Trial {
    const fn new() -> Trial {
        Trial {
            blocks: [const { AtomicU32::new(0) }; R],
            ps: [const { [const { AtomicU32::new(0) }; SAMPLES] }; R],
            deciding: AtomicBool::new(false),
            decided: OnceLock::new(),
        }
    }
}

/// The two scattered classes' trials (aligned, then 16 bytes off).
static TRIALS: [Trial; 2] = [Trial::new(), Trial::new()];

/// The routines a trial times: those that may copy shared bytes, bar
/// `stream` (its stores bypass the caches that hold a reader's buffer).
fn candidates() -> &'static [Routine] {
    static CANDIDATES: OnceLock<Vec<Routine>> = OnceLock::new();
    CANDIDATES.get_or_init(|| {
        ROUTINES
            .into_iter()
            .filter(|r| r.available() && r.shared() && *r != Routine::Stream)
            .collect()
    })
}

/// A thread's block under way.
#[derive(Clone, Copy)]
struct Block {
    /// The scattered class it times (0 or 1).
    class: usize,
    /// Its hits so far.
    hits: u32,
    /// The blocks this thread has begun: the candidate of the next one.
    turn: usize,
    /// Its routine's index in [`candidates`].
    routine: usize,
    /// When its first hit began (`None`: no block under way).
    start: Option<Instant>,
}

thread_local! {
    static BLOCK_NOW: Cell<Block> = const {
        Cell::new(Block { class: 0, hits: 0, turn: 0, routine: 0, start: None })
    };
}

/// The routine for this thread's next random hit of scattered class
/// `class` (0 or 1) while it is on trial: its block's, after timing the
/// block that this hit ends, if it ends one.
fn next_routine(class: usize) -> Routine {
    let cands = candidates();
    let mut b = BLOCK_NOW.get();
    let begin = |b: &mut Block, now: Instant| {
        b.class = class;
        b.hits = 0;
        b.routine = b.turn % cands.len();
        b.turn = b.turn.wrapping_add(1);
        b.start = Some(now);
    };
    match b.start {
        Some(start) if b.class == class && b.hits == BLOCK => {
            let now = Instant::now();
            let ps = now.duration_since(start).as_nanos() * 1000 / u128::from(BLOCK);
            submit(
                class,
                cands[b.routine],
                u32::try_from(ps).unwrap_or(u32::MAX),
            );
            begin(&mut b, now);
        }
        Some(_) if b.class == class => {}
        // A block of the other class (or none) under way: begin anew.
        _ => begin(&mut b, Instant::now()),
    }
    b.hits += 1;
    BLOCK_NOW.set(b);
    cands[b.routine]
}

/// Records a block of `class` copied by `r` that took `ps` picoseconds a
/// hit; decides the class once every candidate has [`SAMPLES`] blocks (one
/// thread does).
fn submit(class: usize, r: Routine, ps: u32) {
    let t = &TRIALS[class];
    let i = index_of(r);
    let n = t.blocks[i].fetch_add(1, Relaxed) as usize;
    if n < SAMPLES {
        t.ps[i][n].store(ps.max(1), Relaxed);
    }
    let done = candidates()
        .iter()
        .all(|&c| t.blocks[index_of(c)].load(Relaxed) as usize >= SAMPLES);
    if n + 1 < SAMPLES || !done || t.deciding.swap(true, Relaxed) {
        return;
    }
    let samples: [Vec<u32>; R] = std::array::from_fn(|i| {
        t.ps[i]
            .iter()
            .map(|p| p.load(Relaxed))
            .filter(|&p| p > 0)
            .collect()
    });
    let (pick, medians) = choose(&samples, candidates());
    set_class(RANDOM_CLASS + class, pick);
    let _ = t.decided.set((pick, medians));
}

/// `r`'s index in `ROUTINES`.
fn index_of(r: Routine) -> usize {
    ROUTINES.iter().position(|&x| x == r).unwrap_or(0)
}

/// The routine a trial chooses from `ps`, each routine's block times (by
/// `ROUTINES` index), among `cands`: the fastest median, or the earliest
/// in `ROUTINES` within [`TIE`] of it; and the medians, in nanoseconds.
pub(super) fn choose(ps: &[Vec<u32>; R], cands: &[Routine]) -> (Routine, [Option<f64>; R]) {
    let medians: [Option<f64>; R] = std::array::from_fn(|i| {
        if !cands.contains(&ROUTINES[i]) || ps[i].is_empty() {
            return None;
        }
        let mut v = ps[i].clone();
        v.sort_unstable();
        Some(f64::from(v[v.len() / 2]) / 1000.0)
    });
    (super::fastest(&medians, TIE, |_| true), medians)
}

/// Makes `r` class `c`'s routine in both tables (the plain one only names
/// it: plain copies are never of a scattered class), ending its trial.
fn set_class(c: usize, r: Routine) {
    for table in [&SHARED, &PLAIN] {
        let _ = table.fetch_update(Relaxed, Relaxed, |t| {
            Some(t & !(0xff << (8 * c)) | (r as u64) << (8 * c))
        });
    }
}

/// Copies a random hit of scattered class `class` (0 or 1) while the
/// class is on trial: with its block's routine (see the module docs).
///
/// # Safety
/// As `copy_from_shared`: `src` valid for reads of `len` bytes that only
/// the shared functions write meanwhile, `dst` for writes of `len` bytes
/// that nothing else accesses, the two disjoint.
#[inline(never)]
pub(super) unsafe fn copy(class: usize, src: *const u8, dst: *mut u8, len: usize) {
    let f: CopyFn = next_routine(class).func();
    // SAFETY: the caller's contract; every candidate may copy shared bytes
    // and is available on this CPU.
    unsafe { f(src, dst, len) };
}

/// The calibration report's account of scattered class `class`: the
/// trial's medians and choice, or how far it has got.
pub(super) fn report(class: usize) -> String {
    let t = &TRIALS[class];
    let mut out = String::new();
    match t.decided.get() {
        Some((pick, medians)) => {
            for (i, r) in ROUTINES.iter().enumerate() {
                if let Some(ns) = medians[i] {
                    let _ = write!(out, " {} {ns:.0} ns/hit", r.name());
                }
            }
            let _ = write!(
                out,
                "; chosen {} (median of {SAMPLES} blocks of {BLOCK} random hits each)",
                pick.name()
            );
        }
        None => {
            let blocks: u32 = t.blocks.iter().map(|b| b.load(Relaxed)).sum();
            let _ = write!(
                out,
                " on trial: {blocks} blocks of {BLOCK} random hits timed of {} needed",
                SAMPLES * candidates().len()
            );
        }
    }
    out
}

/// Whether scattered class `class` (0 or 1) has been decided.
#[cfg(test)]
pub(super) fn decided(class: usize) -> bool {
    TRIALS[class].decided.get().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(v: &[u32]) -> Vec<u32> {
        v.to_vec()
    }

    #[test]
    fn the_fastest_median_wins_and_a_tie_goes_to_the_earlier_routine() {
        let all = [Routine::Movsb, Routine::Avx2, Routine::Avx512];
        let mut ps: [Vec<u32>; R] = Default::default();
        // movsb's median 400 ns, avx2's 300 (one outlier each way), avx512's 310.
        ps[0] = times(&[390_000, 400_000, 2_000_000, 410_000, 395_000]);
        ps[2] = times(&[300_000, 290_000, 9_000_000, 305_000, 1]);
        ps[3] = times(&[310_000, 309_000, 311_000]);
        let (pick, medians) = choose(&ps, &all);
        // avx512 is within 3 % of avx2 but later in `ROUTINES`: avx2.
        assert_eq!(pick, Routine::Avx2);
        assert_eq!(medians[0], Some(400.0));
        assert_eq!(medians[2], Some(300.0));
        assert_eq!(medians[1], None, "memcpy is no candidate");
        // movsb within the tie: movsb.
        ps[0] = times(&[305_000, 306_000, 307_000]);
        assert_eq!(choose(&ps, &all).0, Routine::Movsb);
        // A routine that is not a candidate is never chosen, however fast.
        ps[1] = times(&[1000, 1000, 1000]);
        assert_eq!(choose(&ps, &all).0, Routine::Movsb);
        // Nothing timed: movsb.
        let none: [Vec<u32>; R] = Default::default();
        assert_eq!(choose(&none, &all).0, Routine::Movsb);
    }

    #[test]
    fn a_thread_times_blocks_of_one_class_in_turn() {
        let cands = candidates();
        // A fresh thread: its blocks cycle through the candidates, a block
        // per BLOCK hits, and a hit of the other class restarts the block.
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            for _ in 0..BLOCK as usize * cands.len() {
                let r = next_routine(0);
                if seen.last() != Some(&r) {
                    seen.push(r);
                }
            }
            assert_eq!(seen, cands, "one block per candidate, in order");
            let before = BLOCK_NOW.get();
            let _ = next_routine(1);
            let after = BLOCK_NOW.get();
            assert_eq!(after.class, 1);
            assert_eq!(after.hits, 1);
            assert_eq!(after.turn, before.turn + 1);
        })
        .join()
        .unwrap();
    }
}
