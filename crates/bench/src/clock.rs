//! The clock the measured loop reads once per operation.
//!
//! Two sources, both read the same way by every engine's loop:
//! - `tsc`: the CPU's time-stamp counter (`rdtsc`, the cheaper read), used
//!   where the kernel itself trusts it (its clocksource is `tsc`, so the
//!   counter is invariant and synchronised across CPUs), as fio does;
//! - `instant`: `std::time::Instant` (`clock_gettime` in the vDSO),
//!   everywhere else or on request (`--clock instant`).
//!
//! Ticks become nanoseconds by a factor measured over each run against
//! `Instant` (which also times the run itself, the deadline and the
//! per-second timeline), so no frequency is assumed. (Kept over the
//! `quanta` crate, whose raw read is the same `rdtsc` behind a dispatch on
//! its clock source, and whose calibration is what `ticks_per_sec` does.)

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use clap::ValueEnum;

use crate::hist::Histogram;

/// Which clock times operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClockKind {
    /// `tsc` where the kernel's clocksource is the TSC, else `instant`.
    Auto,
    /// The CPU's time-stamp counter (x86_64 only).
    Tsc,
    /// `std::time::Instant`.
    Instant,
}

impl ClockKind {
    /// Resolves `Auto`, and `Tsc` where there is no TSC, to the clock used.
    pub fn resolve(self) -> ClockKind {
        let tsc_ok = cfg!(target_arch = "x86_64");
        match self {
            ClockKind::Auto if tsc_ok && kernel_uses_tsc() => ClockKind::Tsc,
            ClockKind::Auto => ClockKind::Instant,
            ClockKind::Tsc if !tsc_ok => ClockKind::Instant,
            k => k,
        }
    }

    /// The name printed and written to JSON.
    pub fn name(self) -> &'static str {
        match self {
            ClockKind::Auto => "auto",
            ClockKind::Tsc => "tsc",
            ClockKind::Instant => "instant",
        }
    }

    /// Clock ticks per second, estimated once (50 ms against `Instant`).
    pub fn ticks_per_sec(self) -> f64 {
        match self {
            ClockKind::Tsc => {
                static RATE: OnceLock<f64> = OnceLock::new();
                *RATE.get_or_init(|| {
                    let (i0, t0) = (Instant::now(), Tsc::now());
                    std::thread::sleep(Duration::from_millis(50));
                    let (i1, t1) = (Instant::now(), Tsc::now());
                    t1.wrapping_sub(t0) as f64 / i1.duration_since(i0).as_secs_f64()
                })
            }
            _ => 1e9,
        }
    }
}

fn kernel_uses_tsc() -> bool {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .is_ok_and(|s| s.trim() == "tsc")
}

/// A clock the loop is generic over.
pub trait Clock {
    /// The time now, in ticks.
    fn now() -> u64;
}

/// The time-stamp counter.
pub struct Tsc;

impl Clock for Tsc {
    #[inline(always)]
    fn now() -> u64 {
        #[cfg(target_arch = "x86_64")]
        {
            crate::sys::rdtsc()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Mono::now()
        }
    }
}

/// Nanoseconds since the first reading, from `Instant`.
pub struct Mono;

impl Clock for Mono {
    #[inline(always)]
    fn now() -> u64 {
        static BASE: OnceLock<Instant> = OnceLock::new();
        BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// What timing costs per operation, in ns: a clock read and a histogram
/// update, as the loop does them (every engine's figures include it).
pub fn overhead_ns(kind: ClockKind) -> f64 {
    fn run<C: Clock>() -> (u64, Duration) {
        const N: u64 = 1_000_000;
        let mut h = Histogram::new();
        let t = Instant::now();
        let mut prev = C::now();
        for _ in 0..N {
            let now = C::now();
            h.record(now.wrapping_sub(prev));
            prev = now;
        }
        std::hint::black_box(&h);
        (N, t.elapsed())
    }
    // The best of three: this is a cost, not a noise measurement.
    (0..3)
        .map(|_| {
            let (n, d) = match kind {
                ClockKind::Tsc => run::<Tsc>(),
                _ => run::<Mono>(),
            };
            d.as_nanos() as f64 / n as f64
        })
        .fold(f64::INFINITY, f64::min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_advance() {
        for k in [ClockKind::Tsc, ClockKind::Instant] {
            let k = k.resolve();
            let a = match k {
                ClockKind::Tsc => Tsc::now(),
                _ => Mono::now(),
            };
            std::thread::sleep(Duration::from_millis(2));
            let b = match k {
                ClockKind::Tsc => Tsc::now(),
                _ => Mono::now(),
            };
            assert!(b > a, "{k:?}");
            assert!(k.ticks_per_sec() > 1e6);
        }
    }

    #[test]
    fn overhead_is_small() {
        assert!(overhead_ns(ClockKind::Auto.resolve()) < 10_000.0);
    }
}
