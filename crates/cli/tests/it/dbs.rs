//! `foliocache bench --scenario redb` and `--scenario sqlite` at a small
//! scale (M = 16 MiB, the larger data 24 MiB, one round): every
//! configuration ran each workload at both sizes in its own process under
//! the memory limit, or was reported killed or failed with the reason;
//! foliocache's configurations completed every workload; the ratios and
//! the targets are reported.

use serde_json::Value;

use crate::bench::{bench_json_and_text, notes_of};

/// The scenario's records, checked: `configs` in order for each of
/// `jobs`, each with figures or a note saying why it has none; every
/// record of `folio` configurations with figures.
fn check_records<'a>(
    sc: &'a Value,
    jobs: &[&str],
    configs: &[&str],
    folio: &[&str],
) -> Vec<&'a Value> {
    let rs: Vec<&Value> = sc["results"].as_array().unwrap().iter().collect();
    assert_eq!(rs.len(), jobs.len() * configs.len(), "{rs:#?}");
    for (i, r) in rs.iter().enumerate() {
        let (job, config) = (jobs[i / configs.len()], configs[i % configs.len()]);
        assert_eq!(
            (r["rw"].as_str(), r["engine"].as_str()),
            (Some(job), Some(config))
        );
        let ops = r["ops"].as_u64().unwrap();
        let notes = notes_of(r);
        assert!(
            ops > 0
                || notes.iter().any(|n| ["killed", "failed", "not run"]
                    .iter()
                    .any(|w| n.contains(w))),
            "{job} {config}: no figures and no reason: {r:#}"
        );
        // Each workload that ran says what it moved to and from the device
        // (the mix is a sum of them, not run itself).
        if ops > 0 && !job.starts_with("mix") {
            assert!(
                notes
                    .iter()
                    .any(|n| n.contains("storage IO in this workload")),
                "{job} {config}: no storage IO: {r:#}"
            );
        }
        if folio.contains(&config) {
            assert!(ops > 0, "{job} {config}: {r:#}");
            assert!(r["capacity"].as_u64().unwrap() < 16 << 20, "{r:#}");
        }
    }
    rs
}

/// `foliocache bench --scenario NAME` at the small scale, one round: its
/// JSON (checked to be the scenario's) and what it printed.
fn small_run(name: &str) -> (Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--scenario",
        name,
        "--quick",
        "--capacity",
        "16M",
        "--size",
        "24M",
        "--repeat",
        "1",
    ];
    let (v, out) = bench_json_and_text(dir.path(), &args);
    assert_eq!(v["scenarios"][0]["name"], name);
    (v, out)
}

/// The line of the target `target` in `out`, judged met or not.
fn assert_target_judged(out: &str, target: &str) {
    let line = out
        .lines()
        .find(|l| l.contains(target))
        .unwrap_or_else(|| panic!("no `{target}`:\n{out}"));
    assert!(
        line.contains("[met]") || line.contains("[NOT MET]"),
        "{line}"
    );
}

#[test]
fn redb_scenario_runs_every_configuration_under_the_limit() {
    let (v, out) = small_run("redb");
    let sc = &v["scenarios"][0];
    let jobs: Vec<String> = ["fits", "4x"]
        .iter()
        .flat_map(|s| {
            [
                "bulk load",
                "individual writes",
                "random reads",
                "range reads",
                "4-thread reads",
                "removals",
            ]
            .map(|w| format!("{w}, {s}"))
        })
        .collect();
    let jobs: Vec<&str> = jobs.iter().map(String::as_str).collect();
    let configs = [
        "file[cache=1/2]",
        "file[cache=3/4]",
        "file[direct]",
        "foliocache",
        "memory[bound]",
        "direct[bound]",
        "file (better)",
    ];
    let rs = check_records(sc, &jobs, &configs, &["foliocache"]);
    for r in &rs {
        let (job, config) = (r["rw"].as_str().unwrap(), r["engine"].as_str().unwrap());
        // The reads found every entry.
        if config == "foliocache" && job.contains("random reads") {
            assert!(notes_of(r)[0].starts_with("20000 of 20000 found"), "{r:#}");
        }
        // Every buffered FileBackend configuration completes within M (one
        // malloc arena per child: with glibc's arena per thread, redb's
        // heap outgrew M and the OOM killer ended them).
        if config.starts_with("file[cache") {
            assert!(r["ops"].as_u64().unwrap() > 0, "{job} {config}: {r:#}");
        }
        // Data larger than M: every configuration reads its lookups'
        // misses from the device, and the note says how much per lookup.
        if job == "random reads, 4x" && r["ops"].as_u64().unwrap() > 0 {
            let per_op: f64 = notes_of(r)
                .iter()
                .find_map(|n| {
                    let (_, rest) = n.split_once(" MiB read (")?;
                    rest.split_once(" KiB per operation")?.0.parse().ok()
                })
                .unwrap_or_else(|| panic!("{job} {config}: no KiB per operation: {r:#}"));
            assert!(per_op > 0.0, "{job} {config}: {r:#}");
        }
        // The bounds run where the data fits, unlimited.
        if config.ends_with("[bound]") {
            assert_eq!(
                r["ops"].as_u64().unwrap() > 0,
                job.ends_with("fits"),
                "{r:#}"
            );
        }
    }
    for line in [
        "foliocache / file (better) (random reads, 4x 174B)",
        "foliocache / file[direct] (random reads, 4x 174B)",
    ] {
        assert!(out.contains(line), "no `{line}`:\n{out}");
    }
    assert_target_judged(
        &out,
        "foliocache bandwidth / file (better) (random reads, 4x 174B): at least 1.15x",
    );
}

#[test]
fn sqlite_scenario_runs_the_mix_through_both_vfs_under_the_limit() {
    let (v, out) = small_run("sqlite");
    let sc = &v["scenarios"][0];
    let jobs: Vec<String> = ["fits", "4x"]
        .iter()
        .flat_map(|s| {
            ["inserts", "lookups", "scans", "updates", "deletes", "mix"]
                .map(|w| format!("{w}, {s}"))
        })
        .collect();
    let jobs: Vec<&str> = jobs.iter().map(String::as_str).collect();
    let configs = ["unix", "foliocache", "foliocache[mmap]"];
    let rs = check_records(sc, &jobs, &configs, &["foliocache", "foliocache[mmap]"]);
    // The mix is the sum of its parts.
    for c in configs {
        for size in ["fits", "4x"] {
            let of = |w: &str| {
                rs.iter()
                    .find(|r| r["engine"] == c && r["rw"] == format!("{w}, {size}"))
                    .unwrap()
            };
            let parts: u64 = ["inserts", "lookups", "scans", "updates", "deletes"]
                .iter()
                .map(|w| of(w)["ops"].as_u64().unwrap())
                .sum();
            assert_eq!(of("mix")["ops"].as_u64().unwrap(), parts, "{c} {size}");
        }
    }
    assert_target_judged(
        &out,
        "foliocache bandwidth / unix (mix, fits 116B): at least 1.111x",
    );
}
