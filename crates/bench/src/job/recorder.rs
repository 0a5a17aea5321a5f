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

use super::{RunOptions, Tether};
use crate::clock::Clock;
use crate::data::Generator;
use crate::hist::Histogram;

/// How often a thread publishes its progress and looks at the stop flag.
const TICK: Duration = Duration::from_millis(100);

/// How often a paced thread ([`Shared::pace`]) looks at its schedule: at
/// 1 GiB/s, a millisecond is 16 reads of 64 KiB.
const PACE_TICK: Duration = Duration::from_millis(1);

/// How long a thread waits for its [`Tether`]'s reader to read at all
/// before it lets it go (a reader that failed or ended).
const READER_GONE: Duration = Duration::from_secs(2);

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
    /// The reader beside the job that follows its bytes (the hot reader
    /// beside a paced stream), if any: the threads add their bytes to its
    /// count as they publish them, and wait for it.
    pub(super) tether: Option<Tether<'a>>,
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
    /// Bytes added to the tether's count so far.
    published: u64,
    /// The tether's reader stopped reading: no longer waited for.
    loose: bool,
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
            loose: false,
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
        if self.wait_for_reader() {
            (real, now) = (Instant::now(), C::now());
        }
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
    /// tether's count where the job has one.
    fn publish(&mut self) {
        self.slot.0.store(self.bytes, Ordering::Relaxed);
        if let Some(t) = self.sh.tether {
            t.streamed
                .fetch_add(self.bytes - self.published, Ordering::Relaxed);
            self.published = self.bytes;
        }
    }

    /// Sleeps while the job is more than the tether's slack ahead of its
    /// reader (until `stop`, or the reader has read nothing for
    /// [`READER_GONE`], when it is let go for the rest of the run); true
    /// if it slept.
    fn wait_for_reader(&mut self) -> bool {
        let Some(t) = self.sh.tether.filter(|_| !self.loose) else {
            return false;
        };
        let (mut last, mut since, mut slept) = (u64::MAX, Instant::now(), false);
        while !self.sh.stop.load(Ordering::Relaxed) {
            let reads = t.reads.load(Ordering::Relaxed);
            if owed_reads(t.streamed.load(Ordering::Relaxed), t.every) <= reads + t.slack {
                break;
            }
            if reads != last {
                (last, since) = (reads, Instant::now());
            } else if since.elapsed() >= READER_GONE {
                self.loose = true;
                break;
            }
            std::thread::sleep(PACE_TICK);
            slept = true;
        }
        slept
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

/// The reads a reader reading once per `every` bytes owes once the job
/// has done `streamed` (its read 0 is due at once).
fn owed_reads(streamed: u64, every: u64) -> u64 {
    streamed / every.max(1) + 1
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
    use crate::clock::Mono;

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

    /// A paced loop of 64 KiB operations tethered to a reader that reads
    /// once per 256 KiB, slowly: the reader, at each of its reads, never
    /// finds the loop more than the slack ahead of it, and the loop ends
    /// having done all its bytes.
    #[test]
    fn a_tethered_loop_waits_for_its_reader() {
        const EVERY: u64 = 256 << 10;
        const SLACK: u64 = 4;
        const OPS: u64 = 400;
        let barrier = Barrier::new(1);
        let stop = AtomicBool::new(false);
        let (streamed, reads) = (AtomicU64::new(0), AtomicU64::new(0));
        let sh = Shared {
            barrier: &barrier,
            stop: &stop,
            runtime: None,
            max_ops: OPS,
            opts: RunOptions {
                verify: false,
                buf_offset: 0,
                consume: false,
                write_seed: 0,
                clock: crate::clock::ClockKind::Instant,
            },
            ticks_per_sec: 1e9,
            interval: Duration::from_secs(1),
            // Far faster than the reader: the tether holds it back.
            pace: Some(64.0 * f64::from(1u32 << 30)),
            tether: Some(Tether {
                streamed: &streamed,
                reads: &reads,
                every: EVERY,
                slack: SLACK,
            }),
        };
        let slot = Slot::default();
        let mut st = LoopState {
            hist: Some(Histogram::new()),
            gen: Generator::new(0),
            written: Vec::new(),
            slot: &slot,
            sh: &sh,
        };
        let worst = std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut worst = 0;
                while !stop.load(Ordering::Relaxed) {
                    let done = reads.load(Ordering::Relaxed);
                    let owed = owed_reads(streamed.load(Ordering::Relaxed), EVERY);
                    worst = worst.max(owed.saturating_sub(done));
                    if owed > done {
                        std::thread::sleep(Duration::from_millis(2));
                        reads.store(done + 1, Ordering::Relaxed);
                    } else {
                        std::thread::sleep(Duration::from_micros(50));
                    }
                }
                worst
            });
            let mut r = Recorder::<Mono>::start(&mut st, 64 << 10);
            for _ in 0..OPS {
                // At most 4 operations (one read's bytes) between two
                // of the loop's looks, a millisecond apart.
                std::thread::sleep(Duration::from_micros(250));
                r.done(Mono::now(), 1, 1);
            }
            let out = r.finish();
            assert_eq!(out.bytes, OPS * (64 << 10));
            stop.store(true, Ordering::Relaxed);
            reader.join().unwrap()
        });
        // The loop publishes at most a millisecond of bytes (one read's)
        // past its look, and the reader may look between the two.
        assert!(
            worst <= SLACK + 2,
            "the loop ran {worst} reads ahead of its reader (slack {SLACK})"
        );
        assert!(
            reads.load(Ordering::Relaxed) >= OPS * (64 << 10) / EVERY - SLACK - 2,
            "the reader read along the whole stream"
        );
    }
}
