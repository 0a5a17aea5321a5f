//! How a thread copies its sequential small hits, chosen by timing them.
//!
//! A hit of a few KiB that continues where the thread's previous read of
//! the file ended is the stream every sequential reader makes, and the
//! fastest way to copy it differs between hosts in ways a calibration at
//! build time does not see (`docs/bench.md`, "Sequential hits, tuned per
//! thread"): on the Intel host there, sequential 4 KiB hits ran at 9.1-9.3
//! GiB/s with the AVX-512 loop, 10.4-11.5 with the AVX2 loop, 13.7-14.5
//! with the AVX-512 loop and a prefetch of the next two reads' bytes, and
//! 9.8-10.2 with the AVX2 loop and that prefetch, while the calibration's
//! own runs put the routines within a few percent of each other and found
//! nothing in the prefetch; and an earlier host lost a third of its
//! throughput to prefetching the next page. So each thread tries, on its
//! own hits, four *arms*: the calibration's routine for the copy's class or
//! its runner-up ([`crate::copy::copy_from_shared_alt`]), each with and
//! without a prefetch of the [`AHEAD`] next reads' bytes of the folio; and
//! keeps the fastest.
//!
//! The schedule: an *exploration* gives each arm [`TURNS`] turns of
//! [`TURN`] hits, round-robin; a turn's hits after its first [`WARM`]
//! (which still feel the previous arm) are timed whole, from the read's
//! start to the drop of its reference, and the arm's score is its best turn's time per byte
//! (the best, so a turn that an interrupt or a page fault lands in does not
//! count). The thread then copies with the best arm for [`EXPLOIT`] hits,
//! and explores again (the data, the other threads and the host change).
//! An arm other than the default (the calibration's routine, no prefetch)
//! wins only if it is [`MARGIN`] faster, so noise keeps the default.
//!
//! The cost: reading the clock twice per timed hit, on 384 hits of every
//! exploration in about 262,000 hits; and the slower arms' turns. Every arm
//! copies the same bytes: the routines are the shared functions' own, and a
//! prefetch changes no memory.

use std::cell::Cell;
use std::time::Instant;

/// Sequential hits of up to this many bytes are tuned; longer copies keep
/// the hardware's prefetchers busy on their own.
pub(crate) const MAX: usize = 4096;

/// How many of a hit's own lengths an arm with `ahead` prefetches past its
/// end: the next two reads of the stream (on the Intel host of
/// `docs/bench.md`, 4 KiB reads ran 11.5 GiB/s with 8 KiB ahead, 10.6 with
/// 4 KiB, 10.7 with 16 KiB).
pub(crate) const AHEAD: usize = 2;

/// Hits per turn of an arm while exploring.
const TURN: u32 = 64;

/// Hits at the start of a turn left untimed.
const WARM: u32 = 4;

/// Turns per arm per exploration.
const TURNS: u32 = 8;

/// Hits copied with the chosen arm before the next exploration.
const EXPLOIT: u32 = 1 << 18;

/// How much faster (a fraction of its time) than the default an arm must
/// be to be chosen.
const MARGIN: f64 = 0.03;

/// One way to copy a sequential hit.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Arm {
    /// With the calibration's runner-up routine instead of its choice.
    pub alt: bool,
    /// With a prefetch of the next two reads' bytes (`AHEAD`).
    pub ahead: bool,
}

/// The arms, the default first.
const ARMS: [Arm; 4] = [
    Arm {
        alt: false,
        ahead: false,
    },
    Arm {
        alt: false,
        ahead: true,
    },
    Arm {
        alt: true,
        ahead: false,
    },
    Arm {
        alt: true,
        ahead: true,
    },
];

/// A thread's tuning state.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tuner {
    exploring: bool,
    /// The arm in use (an index into [`ARMS`]).
    arm: usize,
    /// Hits left in this turn, or before the next exploration.
    left: u32,
    /// Full rounds of turns done in this exploration.
    round: u32,
    /// This turn's timed nanoseconds and bytes.
    ns: u64,
    bytes: u64,
    /// Each arm's best turn in this exploration, in nanoseconds per byte.
    best: [f64; 4],
    /// Forced by a test: no tuning.
    forced: bool,
}

impl Tuner {
    /// A thread's first state: exploring, the default arm's turn first.
    pub(crate) const fn new() -> Tuner {
        Tuner {
            exploring: true,
            arm: 0,
            left: TURN,
            round: 0,
            ns: 0,
            bytes: 0,
            best: [f64::INFINITY; 4],
            forced: false,
        }
    }

    /// The arm for the next hit, and whether to time it.
    pub(crate) fn next(&self) -> (Arm, bool) {
        (ARMS[self.arm], self.exploring && self.left <= TURN - WARM)
    }

    /// Counts a hit of `bytes` bytes, which took `ns` if it was timed.
    pub(crate) fn done(&mut self, ns: Option<u64>, bytes: usize) {
        if self.forced {
            return;
        }
        if let Some(ns) = ns {
            self.ns += ns;
            self.bytes += bytes as u64;
        }
        self.left -= 1;
        if self.left > 0 {
            return;
        }
        if !self.exploring {
            *self = Tuner::new();
            return;
        }
        if self.bytes > 0 {
            let per = self.ns as f64 / self.bytes as f64;
            self.best[self.arm] = self.best[self.arm].min(per);
        }
        (self.ns, self.bytes) = (0, 0);
        self.arm += 1;
        if self.arm == ARMS.len() {
            self.arm = 0;
            self.round += 1;
        }
        self.left = TURN;
        if self.round == TURNS {
            self.exploring = false;
            self.arm = pick(&self.best);
            self.left = EXPLOIT;
        }
    }

    /// The arm chosen, or `None` while exploring.
    pub(crate) fn chosen(&self) -> Option<Arm> {
        (!self.exploring).then_some(ARMS[self.arm])
    }
}

/// The arm of the lowest score, if it beats the default's by [`MARGIN`];
/// else the default.
fn pick(best: &[f64; 4]) -> usize {
    let (i, b) = best
        .iter()
        .copied()
        .enumerate()
        .fold((0, best[0]), |m, (i, b)| if b < m.1 { (i, b) } else { m });
    if b < best[0] * (1.0 - MARGIN) {
        i
    } else {
        0
    }
}

thread_local! {
    static TUNER: Cell<Tuner> = const { Cell::new(Tuner::new()) };
}

/// A clock reading at the start of a read, if this thread's tuning times
/// its next sequential hit: the whole read is timed (lookup, copy and the
/// reference's drop), because a prefetch ahead pays off outside the copy
/// too (the drop's locked instruction waits for fewer loads).
#[inline]
pub(crate) fn start() -> Option<Instant> {
    TUNER.with(|c| c.get().next().1).then(Instant::now)
}

/// The arm for this thread's next sequential hit.
#[inline]
pub(crate) fn arm() -> Arm {
    TUNER.with(|c| c.get().next().0)
}

/// Counts a sequential hit of `bytes` bytes, timed from `start` (the
/// [`start`] of its read) if that is `Some`.
#[inline]
pub(crate) fn done(start: Option<Instant>, bytes: usize) {
    let ns = start.map(|s| s.elapsed().as_nanos() as u64);
    TUNER.with(|c| {
        let mut t = c.get();
        t.done(ns, bytes);
        c.set(t);
    });
}

/// This thread's chosen arm, `None` while it explores (for tests and
/// reports).
pub fn chosen() -> Option<Arm> {
    TUNER.with(|c| c.get().chosen())
}

/// Makes this thread copy its sequential hits with `arm` from now on, with
/// no tuning (`None`: tune again, from the start). For tests that check
/// every arm's bytes.
pub fn force(arm: Option<Arm>) {
    let t = match arm {
        Some(arm) => Tuner {
            exploring: false,
            arm: ARMS.iter().position(|a| *a == arm).unwrap_or(0),
            left: EXPLOIT,
            forced: true,
            ..Tuner::new()
        },
        None => Tuner::new(),
    };
    TUNER.with(|c| c.set(t));
}

/// Every arm, the default first (for tests).
pub fn arms() -> [Arm; 4] {
    ARMS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drives a tuner through one exploration in which arm `i`'s hits take
    /// `ns[i]` each; returns the arm it chose.
    fn explore(t: &mut Tuner, ns: [u64; 4]) -> Option<Arm> {
        for _ in 0..TURNS * TURN * 4 {
            let (arm, timed) = t.next();
            let i = ARMS.iter().position(|a| *a == arm).unwrap();
            t.done(timed.then_some(ns[i]), 4096);
        }
        t.chosen()
    }

    #[test]
    fn picks_the_fastest_arm_and_keeps_it_until_the_next_exploration() {
        let mut t = Tuner::new();
        assert_eq!(t.chosen(), None);
        assert_eq!(explore(&mut t, [400, 390, 420, 300]), Some(ARMS[3]));
        for _ in 0..EXPLOIT - 1 {
            assert_eq!(t.next(), (ARMS[3], false));
            t.done(None, 4096);
        }
        t.done(None, 4096);
        assert_eq!(t.chosen(), None, "explores again");
        assert_eq!(explore(&mut t, [300, 390, 420, 400]), Some(ARMS[0]));
    }

    #[test]
    fn noise_keeps_the_default() {
        let mut t = Tuner::new();
        assert_eq!(explore(&mut t, [400, 395, 399, 390]), Some(ARMS[0]));
    }

    #[test]
    fn an_arm_scores_its_best_turn() {
        // Arm 1 has one slow turn (an interrupt) and is otherwise fastest.
        let mut t = Tuner::new();
        let mut turn = 0;
        for _ in 0..TURNS * TURN * 4 {
            let (arm, timed) = t.next();
            let i = ARMS.iter().position(|a| *a == arm).unwrap();
            if i == 1 && t.left == 1 {
                turn += 1;
            }
            let ns = match i {
                1 if turn == 0 => 100_000,
                1 => 300,
                _ => 400,
            };
            t.done(timed.then_some(ns), 4096);
        }
        assert_eq!(t.chosen(), Some(ARMS[1]));
    }

    #[test]
    fn only_the_turns_after_their_warm_up_are_timed() {
        let t = Tuner::new();
        let mut t2 = t;
        let mut timed = 0;
        for _ in 0..TURN {
            timed += u32::from(t2.next().1);
            t2.done(Some(1), 1);
        }
        assert_eq!(timed, TURN - WARM);
        assert_eq!(t2.next().0, ARMS[1]);
    }

    #[test]
    fn a_forced_arm_stays() {
        force(Some(ARMS[2]));
        for _ in 0..3 * EXPLOIT {
            assert_eq!(arm(), ARMS[2]);
            done(start(), 4096);
        }
        assert_eq!(chosen(), Some(ARMS[2]));
        force(None);
        assert_eq!(chosen(), None);
    }
}
