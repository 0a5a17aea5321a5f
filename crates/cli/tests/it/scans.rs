//! `foliocache bench --scenario scans --quick`: the hot reader's figures
//! per contender, mode and round, and the targets' ratios, each judged,
//! the p99's beside the bound's.

use crate::bench::bench_json_and_text;

#[test]
fn the_scans_scenario_reports_each_contender_and_judges_the_targets() {
    let dir = tempfile::tempdir().unwrap();
    let (_, text) = bench_json_and_text(
        dir.path(),
        &["--scenario", "scans", "--quick", "--capacity", "8M"],
    );
    for who in ["foliocache", "bound"] {
        assert!(
            text.contains(&format!("round 1 {who:<10} back to back: solo: hit ")),
            "{who}:\n{text}"
        );
        assert!(
            text.contains(&format!("round 1 {who:<10} fixed rate ")),
            "{who}:\n{text}"
        );
    }
    // The fixed-rate lines give the three percentiles, solo and beside.
    let fixed = text
        .lines()
        .find(|l| l.contains("round 1 foliocache fixed rate "))
        .unwrap();
    assert_eq!(fixed.matches("p50/p99/p99.9 ").count(), 2, "{fixed}");
    let kernel = text.contains("round 1 kernel");
    assert!(
        kernel || text.contains("note: the kernel is left out"),
        "{text}"
    );
    for line in [
        "hot hit ratio beside the scans / solo, fixed rate: foliocache",
        "hot p99 beside the scans / solo, fixed rate: foliocache",
        "; the bound (beside 4 threads burning CPU) ",
        "hot p99 beside the scans / solo, back to back: foliocache",
    ] {
        assert!(text.contains(line), "{line}:\n{text}");
    }
    assert_eq!(
        text.contains("hot reads/s beside the scans, foliocache / kernel, back to back"),
        kernel,
        "{text}"
    );
}
