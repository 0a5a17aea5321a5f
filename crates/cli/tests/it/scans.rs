//! `foliocache bench --scenario scans --quick`: the hot reader's figures
//! per contender and round, and the targets' ratios, each judged.

use crate::bench::bench_json_and_text;

#[test]
fn the_scans_scenario_reports_each_contender_and_judges_the_targets() {
    let dir = tempfile::tempdir().unwrap();
    let (_, text) = bench_json_and_text(
        dir.path(),
        &["--scenario", "scans", "--quick", "--capacity", "8M"],
    );
    assert!(text.contains("round 1 foliocache solo: hit "), "{text}");
    let kernel = text.contains("round 1 kernel");
    assert!(
        kernel || text.contains("note: the kernel is left out"),
        "{text}"
    );
    for line in [
        "hot hit ratio beside the scans / solo: foliocache",
        "hot p99 beside the scans / solo: foliocache",
    ] {
        assert!(text.contains(line), "{line}:\n{text}");
    }
    assert_eq!(
        text.contains("hot reads/s beside the scans, foliocache / kernel"),
        kernel,
        "{text}"
    );
}
