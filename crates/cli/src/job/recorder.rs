//! What a job thread's loop records as it goes ([`Recorder`]): the
//! histogram, the bytes and operations, the timeline, and the events
//! (progress published, the stop flag, the deadline) that the fast path
//! of every operation checks with one compare; and what the loop shares
//! with the coordinator ([`Shared`], [`Slot`]) and hands back
//! ([`ThreadOut`]).

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use super::RunOptions;
use crate::clock::Clock;
use crate::data::Generator;
use crate::hist::Histogram;

/// How often a thread publishes its progress and looks at the stop flag.
const TICK: Duration = Duration::from_millis(100);

/// How often a paced thread ([`Shared::pace`]) looks at its schedule: at
/// 1 GiB/s, a millisecond is 16 reads of 64 KiB.
const PACE_TICK: Duration = Duration::from_millis(1);

/// A thread's published progress, alone on its cache lines.
#[repr(align(128))]
#[derive(Default)]
pub(super) struct Slot(pub(super) AtomicU64);

/// What one thread's loop needs besides its IO.
pub(super) struct Shared<'a> {
    pub(super) barrier: &'a Barrier,
    pub(super) stop: &'a AtomicBool,
    pub(super) runtime: Option<Duration>,
    pub(super) max_ops: u64,
    pub(super) opts: RunOptions,
    pub(super) ticks_per_sec: f64,
    /// The timeline's interval (a second, or a fraction of one).
    pub(super) interval: Duration,
    /// Each thread's pace in bytes per second ([`JobSpec::pace`] shared
    /// among the threads), if the job is paced.
    ///
    /// [`JobSpec::pace`]: crate::spec::JobSpec::pace
    pub(super) pace: Option<f64>,
    /// Where the threads add the bytes they have done as they publish
    /// them, for a watcher beside the job (the hot reader following a
    /// paced stream), if any.
    pub(super) progress: Option<&'a AtomicU64>,
}

/// One thread's figures.
pub(super) struct ThreadOut {
    pub(super) bytes: u64,
    pub(super) ops: u64,
    pub(super) hist: Histogram,
    /// Clock ticks from `start` to `end`.
    pub(super) ticks: u64,
    /// Bytes completed in each full timeline interval since `start`.
    pub(super) timeline: Vec<u64>,
    pub(super) start: Instant,
    pub(super) end: Instant,
    pub(super) written: Vec<bool>,
}

/// A thread's state in its loop besides its IO and its [`Recorder`].
pub(super) struct LoopState<'a> {
    /// The histogram, made before the barrier; the loop takes it.
    pub(super) hist: Option<Histogram>,
    pub(super) gen: Generator,
    pub(super) written: Vec<bool>,
    pub(super) slot: &'a Slot,
    pub(super) sh: &'a Shared<'a>,
}

/// A loop's figures as it goes, and its events: what every loop
/// ([`super::loops`]) does per completed operation
/// ([`Recorder::done`]) and at the end ([`Recorder::finish`]).
///
/// The fast path per completion: one histogram increment, two additions,
/// one compare against the next event. Events (every [`TICK`], and the
/// deadline) take the slow path ([`Recorder::event`]): `Instant` for real
/// time, publish progress, look at the stop flag, close finished
/// intervals of the timeline. Events fall on the timeline's interval
/// boundaries too, so an interval holds the bytes of its own time (give or
/// take one operation), not of the tick that noticed its end.
pub(super) struct Recorder<'s, C: Clock> {
    hist: Histogram,
    bytes: u64,
    pub(super) ops: u64,
    /// Bytes per operation.
    bs: u64,
    timeline: Vec<u64>,
    start: Instant,
    pub(super) t_start: u64,
    deadline: Option<Instant>,
    next_bin: Instant,
    interval: Duration,
    /// The clock's time of the next event.
    event: u64,
    bin_base: u64,
    rate: f64,
    /// Bytes added to [`Shared::progress`] so far.
    published: u64,
    slot: &'s Slot,
    sh: &'s Shared<'s>,
    clock: PhantomData<C>,
}

impl<'s, C: Clock> Recorder<'s, C> {
    /// Starts the clock: the loop's first operation (of `bs` bytes, as
    /// every one) comes next. Takes the histogram `st` made before the
    /// barrier.
    pub(super) fn start(st: &mut LoopState<'s>, bs: u64) -> Self {
        let sh = st.sh;
        let hist = st.hist.take().unwrap_or_default();
        let interval = sh.interval;
        let per_sec = (Duration::from_secs(1).as_nanos() / interval.as_nanos().max(1)) as usize;
        let secs = sh.runtime.map_or(60, |d| d.as_secs() as usize + 2);
        let timeline = Vec::with_capacity(secs * per_sec.max(1));
        let rate = sh.ticks_per_sec;
        let start = Instant::now();
        let t_start = C::now();
        let first = sh
            .runtime
            .map_or(TICK, |d| d.min(TICK))
            .min(interval)
            .min(sh.pace.map_or(TICK, |_| PACE_TICK));
        Recorder {
            hist,
            bytes: 0,
            ops: 0,
            bs,
            timeline,
            start,
            t_start,
            deadline: sh.runtime.map(|d| start + d),
            next_bin: start + interval,
            interval,
            event: t_start + (first.as_secs_f64() * rate) as u64,
            bin_base: 0,
            rate,
            published: 0,
            slot: st.slot,
            sh,
            clock: PhantomData,
        }
    }

    /// Counts `n` operations that completed at `now` (clock ticks), each
    /// of `latency` ticks; true when the loop is to stop (the deadline
    /// passed, or another thread failed).
    #[inline(always)]
    pub(super) fn done(&mut self, now: u64, latency: u64, n: u64) -> bool {
        if n == 1 {
            self.hist.record(latency);
        } else {
            self.hist.record_n(latency, n);
        }
        self.bytes += n * self.bs;
        self.ops += n;
        now >= self.event && self.event(now)
    }

    /// The slow path of [`done`](Self::done): an event. A paced loop
    /// that is ahead of its schedule sleeps here until it is on it.
    #[inline(never)]
    fn event(&mut self, now: u64) -> bool {
        let mut real = Instant::now();
        if self.deadline.is_some_and(|d| real >= d) {
            return true;
        }
        let mut now = now;
        if let Some(ahead) = self.ahead(real) {
            std::thread::sleep(ahead);
            (real, now) = (Instant::now(), C::now());
        }
        self.publish();
        if self.sh.stop.load(Ordering::Relaxed) {
            return true;
        }
        while real >= self.next_bin {
            self.timeline.push(self.bytes - self.bin_base);
            self.bin_base = self.bytes;
            self.next_bin += self.interval;
        }
        let until = self
            .deadline
            .map_or(TICK, |d| d.saturating_duration_since(real).min(TICK))
            .min(self.next_bin.saturating_duration_since(real))
            .min(self.sh.pace.map_or(TICK, |_| PACE_TICK));
        self.event = now + (until.as_secs_f64() * self.rate) as u64;
        false
    }

    /// Publishes the bytes done: in the thread's slot, and added to the
    /// job's progress counter where it has one.
    fn publish(&mut self) {
        self.slot.0.store(self.bytes, Ordering::Relaxed);
        if let Some(p) = self.sh.progress {
            p.fetch_add(self.bytes - self.published, Ordering::Relaxed);
            self.published = self.bytes;
        }
    }

    /// How far a paced loop is ahead of its schedule at `real`; `None`
    /// if it is not paced or not ahead.
    fn ahead(&self, real: Instant) -> Option<Duration> {
        ahead_of(self.start, self.bytes, self.sh.pace?, real)
    }

    /// The thread's figures, the clock stopped now.
    pub(super) fn finish(mut self) -> ThreadOut {
        let t_end = C::now();
        let end = Instant::now();
        // Intervals the loop crossed without an event (a stall) still count.
        while end >= self.next_bin {
            self.timeline.push(self.bytes - self.bin_base);
            self.bin_base = self.bytes;
            self.next_bin += self.interval;
        }
        self.publish();
        ThreadOut {
            bytes: self.bytes,
            ops: self.ops,
            hist: self.hist,
            ticks: t_end.wrapping_sub(self.t_start),
            timeline: self.timeline,
            start: self.start,
            end,
            written: Vec::new(),
        }
    }
}

/// How far a loop that started at `start` and has done `bytes` at `pace`
/// bytes per second is ahead of its schedule at `real` (its bytes are due
/// at `start + bytes / pace`); `None` if it is not ahead.
fn ahead_of(start: Instant, bytes: u64, pace: f64, real: Instant) -> Option<Duration> {
    let due = start + Duration::from_secs_f64(bytes as f64 / pace);
    due.checked_duration_since(real).filter(|d| !d.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paced_loop_waits_until_its_bytes_are_due() {
        let t0 = Instant::now();
        let gib = f64::from(1u32 << 30);
        // 256 MiB at 1 GiB/s are due at 250 ms.
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(
            ahead_of(t0, 256 << 20, gib, at(100)),
            Some(Duration::from_millis(150))
        );
        assert_eq!(ahead_of(t0, 256 << 20, gib, at(250)), None, "on time");
        assert_eq!(ahead_of(t0, 256 << 20, gib, at(400)), None, "behind");
        assert_eq!(ahead_of(t0, 0, gib, t0), None, "nothing done yet");
    }
}
