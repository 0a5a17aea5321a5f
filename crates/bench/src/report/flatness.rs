//! How flat a run's throughput was over time ([`flatness`]), and the
//! median the figures of several runs are judged by ([`median`]).

use super::RunRecord;

/// How flat a run's throughput was: its worst interval after the first
/// over the median of those intervals.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Flatness {
    /// The worst interval's bandwidth over the median's.
    pub worst: f64,
    /// The interval used, in seconds.
    pub interval_s: f64,
    /// Intervals looked at (after the first).
    pub intervals: usize,
}

/// Intervals after the first that a flatness figure wants.
const FLAT_INTERVALS: usize = 5;
/// The fewest it makes do with (at the finest interval).
const FLAT_MIN_INTERVALS: usize = 3;
/// The intervals flatness is judged at, coarsest first, in seconds.
const FLAT_GRAINS: [f64; 5] = [1.0, 0.5, 0.25, 0.1, 0.05];

/// The flatness of `r`'s throughput, judged per second where the run is
/// long enough, else at the coarsest of 500, 250, 100 or 50 ms (whole
/// intervals of its finer timeline) that gives [`FLAT_INTERVALS`]
/// intervals after the first: the coarser, the less a figure depends on
/// how the engine's reads complete in steps (foliocache's in readahead
/// windows of 8 MiB: at 50 ms, a step is several percent of an
/// interval). `None` with fewer than 3 intervals after the first even at
/// the finest (too short a run to tell).
pub fn flatness(r: &RunRecord) -> Option<Flatness> {
    let full_secs = r.perf.seconds.floor() as usize;
    let whole_secs = &r.timing.timeline_bw_bytes[..full_secs.min(r.timing.timeline_bw_bytes.len())];
    let (fine, step): (&[f64], f64) = match &r.timing.fine_timeline {
        Some(t) => (&t.bw_bytes, t.interval_s),
        None => (whole_secs, 1.0),
    };
    let mut finest = None;
    for grain in FLAT_GRAINS {
        let m = (grain / step).round() as usize;
        if m == 0 || ((m as f64) * step - grain).abs() > 1e-9 {
            continue;
        }
        let series: Vec<f64> = fine
            .chunks_exact(m)
            .map(|c| c.iter().sum::<f64>() / m as f64)
            .collect();
        let after = series.get(1..).unwrap_or(&[]).to_vec();
        if after.len() >= FLAT_INTERVALS {
            return Some(flat_of(&after, grain));
        }
        finest = Some((after, grain));
    }
    match finest {
        Some((after, grain)) if after.len() >= FLAT_MIN_INTERVALS => Some(flat_of(&after, grain)),
        _ => None,
    }
}

fn flat_of(after: &[f64], interval_s: f64) -> Flatness {
    let med = median(after);
    let worst = after.iter().copied().fold(f64::INFINITY, f64::min);
    Flatness {
        worst: if med > 0.0 { worst / med } else { 0.0 },
        interval_s,
        intervals: after.len(),
    }
}

/// The median of `v` (NaN when empty).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{FineTimeline, RunJob, Timing};

    fn record(seconds: f64, fine: &[f64]) -> RunRecord {
        let mut r = RunRecord {
            engine: "e".into(),
            job: RunJob {
                rw: "read",
                bs: 4096,
                numjobs: 1,
                shared: true,
                file_size: 4096,
                cold: true,
                ..RunJob::default()
            },
            timing: Timing {
                fine_timeline: Some(FineTimeline {
                    interval_s: 0.05,
                    bw_bytes: fine.to_vec(),
                }),
                ..Timing::default()
            },
            ..RunRecord::default()
        };
        r.perf.seconds = seconds;
        r
    }

    #[test]
    fn flatness_takes_the_coarsest_interval_with_five_after_the_first() {
        // 30 intervals of 50 ms: 250 ms gives 6 (5 after the first).
        let mut fine = vec![10.0; 30];
        fine[7] = 2.0; // one bad 50 ms interval, inside the 2nd 250 ms
        let f = flatness(&record(1.5, &fine)).unwrap();
        assert_eq!((f.interval_s, f.intervals), (0.25, 5));
        assert!((f.worst - 0.84).abs() < 1e-9, "{f:?}");
        // 8 intervals: only 50 ms gives 5 after the first.
        let f = flatness(&record(0.4, &[1.0, 5.0, 4.0, 5.0, 5.0, 5.0, 5.0, 5.0])).unwrap();
        assert_eq!((f.interval_s, f.intervals), (0.05, 7));
        assert!((f.worst - 0.8).abs() < 1e-9);
        // 4: 3 after the first at 50 ms, the least it judges; 3: none.
        assert_eq!(flatness(&record(0.2, &[1.0; 4])).unwrap().intervals, 3);
        assert!(flatness(&record(0.15, &[1.0; 3])).is_none());
        // Long runs are judged per second.
        let f = flatness(&record(6.2, &[3.0; 124])).unwrap();
        assert_eq!((f.interval_s, f.intervals, f.worst), (1.0, 5, 1.0));
    }
}
