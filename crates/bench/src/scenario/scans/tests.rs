//! The `scans` job's summary and fixed-rate bookkeeping.

use super::*;

/// A phase of `reads` of which `misses`, over `secs`, each read
/// taking `us` microseconds.
fn phase((reads, misses, secs, us): (u64, u64, f64, u64)) -> Phase {
    let mut hist = Histogram::new();
    hist.record_n(us * 1000, reads);
    Phase {
        reads,
        misses,
        owed: 0,
        hist,
        secs,
    }
}

fn run_of(solo: (u64, u64, f64, u64), beside: (u64, u64, f64, u64)) -> RunFigures {
    let mode = ModeFigures {
        solo: phase(solo),
        beside: phase(beside),
        ..ModeFigures::default()
    };
    RunFigures {
        back: mode.clone(),
        fixed: mode,
    }
}

#[test]
fn the_summary_judges_each_ratio_against_its_target_and_the_bound() {
    // foliocache keeps its hits, reads 2x the kernel's rate and its
    // p99 grows 1.5x; the kernel loses half its hits; the bound's p99
    // grows 2x.
    let folio = vec![run_of((1000, 0, 1.0, 10), (2000, 20, 1.0, 15))];
    let kernel = vec![run_of((1000, 0, 1.0, 10), (1000, 500, 1.0, 100))];
    let bound = vec![run_of((1000, 0, 1.0, 10), (1000, 0, 1.0, 20))];
    let lines = summary(&folio, &kernel, &bound);
    assert!(
        lines[0].contains("fixed rate: foliocache 0.990x (kernel 0.50x) (target >= 0.95x: met)"),
        "{lines:?}"
    );
    assert!(
        lines[1].contains("2.00x") && lines[1].ends_with(": met)"),
        "{lines:?}"
    );
    assert!(
        lines[2].contains("foliocache 1.50x (kernel ")
            && lines[2].contains("(target <= 1.2x: not met)")
            && lines[2].contains("2.00x: the target is below it, foliocache 0.75x the bound"),
        "{lines:?}"
    );
    // Without the kernel and the bound: no line or clause of theirs.
    let lines = summary(&folio, &[], &[]);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(!lines.concat().contains("kernel"), "{lines:?}");
    assert!(!lines.concat().contains("bound"), "{lines:?}");
}

#[test]
fn a_fixed_rate_phase_counts_the_reads_still_owed_from_when_they_were_due() {
    let pace = Pace::Fixed { period_ns: 1e6 };
    let t0 = Instant::now();
    let mut p = Phase::default();
    // 2 reads issued; at 10.5 ms, reads 2..=10 were due and not
    // started: 9 owed, waiting 8.5 ms down to 0.5 ms.
    p.close(pace, t0, 2, t0 + Duration::from_micros(10_500));
    assert_eq!(p.owed, 9);
    assert_eq!(p.hist.max(), 8_500_000);
    assert!((p.secs - 0.0105).abs() < 1e-9, "{}", p.secs);
    // Back to back, nothing is owed.
    let mut p = Phase::default();
    p.close(Pace::BackToBack, t0, 2, t0 + Duration::from_millis(10));
    assert_eq!(p.owed, 0);
}
