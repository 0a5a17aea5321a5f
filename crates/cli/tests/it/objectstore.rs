//! `foliocache bench --scenario objectstore`, its `memory` job alone
//! (`FOLIOCACHE_OBJSTORE_JOBS=memory`) at a small scale (M = 8 MiB, the
//! point reads' data 32 MiB, two scanned objects of 16 MiB, a remote of
//! 5 ms a request): each foliocache engine's reader ran in a memory
//! cgroup without a limit (every byte it read right, its peak reported),
//! then in one of its bound (its baseline and its cache's configured
//! memory) plus 10 %, with the verdict (OOM-killed or not) reported.
//! Skipped with the reason where no memory cgroup can be made, except
//! under `CI=true`. (The verdict itself is the bench's figure:
//! docs/measurements/2026-11-27-objectstore-3.md.) And its `restart` job
//! alone, the child's tier filled first, at 16 MiB (about 3 s); and
//! its `lsm` job alone at M = 8 MiB.

use std::process::Command;

use serde_json::Value;
use test_support::skip_or_fail;

use crate::bench::notes_of;

/// `foliocache bench --scenario objectstore --quick` at M = `capacity`
/// and a remote of `latency_ms`, with `env` set: the records of `job`.
fn run(capacity: &str, latency_ms: &str, env: &[(&str, &str)], job: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let data = dir.path().join("data");
    let args = [
        "bench",
        "--dir",
        data.to_str().unwrap(),
        "--scenario",
        "objectstore",
        "--quick",
        "--capacity",
        capacity,
        "--remote-latency",
        latency_ms,
        "--repeat",
        "1",
        "--json",
        json.to_str().unwrap(),
    ];
    let out = Command::new(env!("CARGO_BIN_EXE_foliocache"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("running foliocache");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    println!("$ foliocache {}\n{}", args.join(" "), text(&out.stdout));
    assert!(
        out.status.success(),
        "{}:\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    v["scenarios"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["rw"] == job)
        .cloned()
        .collect()
}

#[test]
fn objectstore_readers_stay_within_their_memory_bound() {
    let rs = run(
        "8M",
        "5",
        &[("FOLIOCACHE_OBJSTORE_JOBS", "memory")],
        "memory",
    );
    let engines: Vec<&str> = rs.iter().map(|r| r["engine"].as_str().unwrap()).collect();
    assert_eq!(engines, ["foliocache", "foliocache+disk"], "{rs:#?}");
    for r in &rs {
        let notes = notes_of(r);
        println!("{}: {}", r["engine"], notes.join("; "));
        if let Some(skip) = notes.iter().find(|n| n.starts_with("skipped")) {
            skip_or_fail("objectstore_readers_stay_within_their_memory_bound", skip);
            return;
        }
        let lim = &r["memory_limit"];
        let (limit, peak) = (lim["limit_bytes"].as_u64(), lim["peak_bytes"].as_u64());
        assert!(limit.is_some() && peak.is_some(), "{r:#}");
        assert!(peak <= limit, "{r:#}");
        // The limit is the bound plus 10 %, and the verdict is stated.
        let bound = notes[0]
            .strip_prefix("bound ")
            .and_then(|n| n.split(' ').next()?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no bound: {r:#}"));
        let limit_mib = limit.unwrap() as f64 / f64::from(1 << 20);
        assert!(
            (limit_mib / bound - 1.1).abs() < 0.01,
            "{limit_mib} {bound}"
        );
        assert!(
            notes[0].ends_with("OOM-killed: no") || notes[0].ends_with("OOM-killed: yes"),
            "{r:#}"
        );
        // The run without a limit read all its reads (every byte checked
        // by the reader), and says what it took.
        assert!(
            notes[1].starts_with("without a limit") && notes[1].contains("3000 reads"),
            "{r:#}"
        );
    }
}

/// The `restart` job alone, its child filling the tier first
/// (`FOLIOCACHE_OBJSTORE_FILL=1`, a tier and data of 16 MiB set by
/// `FOLIOCACHE_OBJSTORE_DISK`, M = 8 MiB, a remote of 50 ms a request):
/// the engines with a tier recover it and serve a disk hit after the
/// kill, then read on for a second, every byte checked; foliocache's first read after the restart
/// takes its object's version from the tier's record, not from a HEAD.
#[test]
fn objectstore_restart_serves_a_filled_tier_without_waiting_for_a_head() {
    let env = [
        ("FOLIOCACHE_OBJSTORE_JOBS", "restart"),
        ("FOLIOCACHE_OBJSTORE_DISK", "16M"),
        ("FOLIOCACHE_OBJSTORE_FILL", "1"),
    ];
    let rs = run("8M", "50", &env, "restart");
    let engines: Vec<&str> = rs.iter().map(|r| r["engine"].as_str().unwrap()).collect();
    // (foyer with the bench's `foyer` feature only.)
    assert!(
        engines == ["foliocache+disk"] || engines == ["foliocache+disk", "foyer"],
        "{rs:#?}"
    );
    for r in &rs {
        let notes = notes_of(r);
        println!("{}: {}", r["engine"], notes.join("; "));
        assert!(notes[0].contains("(a disk tier of 16 MiB)"), "{r:#}");
        assert!(!notes[0].contains("first disk hit never"), "{r:#}");
        assert!(
            notes[1].starts_with("in the 1000 ms after its first disk hit"),
            "{r:#}"
        );
        assert!(notes[2].starts_with("the child filled its tier"), "{r:#}");
        if r["engine"] == "foliocache+disk" {
            // (Not timed: the record is what spares the HEAD.)
            let recorded: u64 = notes[3]
                .rsplit("versions from the tier's records: ")
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{r:#}"));
            assert!(recorded >= 1, "{r:#}");
        }
    }
}

/// The `hits` job alone at M = 8 MiB: one record, of `foliocache`, every
/// read a hit (the job fails if the cached store missed once the object
/// was cached, or read a wrong byte), and a note a size with the three
/// readers' rates and the ratios (not timed: the figures are the bench's).
#[test]
fn objectstore_hits_compare_the_store_with_a_local_file_and_the_floor() {
    let rs = run("8M", "5", &[("FOLIOCACHE_OBJSTORE_JOBS", "hits")], "hits");
    assert_eq!(rs.len(), 1, "{rs:#?}");
    let r = &rs[0];
    assert_eq!(r["engine"], "foliocache", "{r:#}");
    assert_eq!(r["hit_ratio"], 1.0, "{r:#}");
    let notes = notes_of(r);
    assert_eq!(notes.len(), 2, "{r:#}");
    for (note, kib) in notes.iter().zip(["4", "64"]) {
        assert!(
            note.starts_with(&format!("hits {kib} KiB: CachedStore::get_range ")),
            "{note}"
        );
        assert!(
            note.contains("store / local file ") && note.contains("InMemory / local file "),
            "{note}"
        );
    }
}

/// The `mount` job alone with `--quick` (an object of 32 MiB, 2 rounds):
/// one record, of `foliocache`, every pass a re-read of what the warm-up
/// read (the job fails on a wrong byte), and a note a read size with the
/// three contenders' rates by round and their ratios to ext4 (not timed:
/// the figures are the bench's). Skipped where FUSE cannot run, except
/// under `CI=true`.
#[test]
fn objectstore_mount_rereads_through_the_object_mount_against_ext4() {
    let test = "objectstore_mount_rereads_through_the_object_mount_against_ext4";
    if !test_support::available(test, "FUSE", foliocache_fuse::unavailable()) {
        return;
    }
    let rs = run("8M", "5", &[("FOLIOCACHE_OBJSTORE_JOBS", "mount")], "mount");
    assert_eq!(rs.len(), 1, "{rs:#?}");
    let r = &rs[0];
    assert_eq!(r["engine"], "foliocache", "{r:#}");
    let notes = notes_of(r);
    assert_eq!(notes.len(), 2, "{r:#}");
    for (note, read) in notes.iter().zip(["1 MiB sequential", "4 KiB random"]) {
        assert!(
            note.starts_with(&format!("mount {read}, warm, 32 MiB: ext4 MiB/s by round ")),
            "{note}"
        );
        for c in ["; mount MiB/s ", "; mount-direct MiB/s ", "(median "] {
            assert!(note.contains(c), "{note}");
        }
    }
}

/// The `cold` job alone at its quick size (an 8 MiB object, one round, a
/// remote of 5 ms): one record, of `foliocache`, with a note per link
/// (100 MB/s, 1 GB/s) giving the bare link's, the mount's and the mount
/// with a tier's first byte and rate (the job fails on a wrong byte; the
/// figures are the bench's, not checked), and each mount's requests: one
/// HEAD at most before the bytes (the figures say how many). Skipped
/// where FUSE cannot run, except under `CI=true`.
#[test]
fn objectstore_cold_reads_through_the_mount_against_the_bare_link() {
    let test = "objectstore_cold_reads_through_the_mount_against_the_bare_link";
    if !test_support::available(test, "FUSE", foliocache_fuse::unavailable()) {
        return;
    }
    let rs = run("8M", "5", &[("FOLIOCACHE_OBJSTORE_JOBS", "cold")], "cold");
    assert_eq!(rs.len(), 1, "{rs:#?}");
    let r = &rs[0];
    assert_eq!(r["engine"], "foliocache", "{r:#}");
    let notes = notes_of(r);
    assert_eq!(notes.len(), 2, "{r:#}");
    for (note, mbs) in notes.iter().zip(["100", "1000"]) {
        assert!(
            note.starts_with(&format!("cold, 8 MiB at {mbs} MB/s and 5 ms: link: ")),
            "{note}"
        );
        for c in [
            " mount: first byte ms ",
            " mount+tier: first byte ms ",
            "the link's",
        ] {
            assert!(note.contains(c), "{note}");
        }
    }
}

/// The `lsm` job alone at M = 8 MiB and a remote of 1 ms: one record, of
/// `foliocache+disk`, whose notes say the compactions of files kept until
/// read made no GET (the job fails on a wrong byte) and the burst at
/// twice the tier's write bandwidth dropped no chunk (the hit ratios and
/// the rates are the bench's figures, not checked).
#[test]
fn objectstore_lsm_keeps_compaction_inputs_and_drops_no_write() {
    let rs = run("8M", "1", &[("FOLIOCACHE_OBJSTORE_JOBS", "lsm")], "lsm");
    assert_eq!(rs.len(), 1, "{rs:#?}");
    let r = &rs[0];
    assert_eq!(r["engine"], "foliocache+disk", "{r:#}");
    let notes = notes_of(r);
    assert_eq!(notes.len(), 2, "{r:#}");
    assert!(
        notes[0].contains("compaction GETs with the hints 0 of 44 reads"),
        "{}",
        notes[0]
    );
    assert!(notes[1].starts_with("lsm burst: "), "{}", notes[1]);
    assert!(notes[1].contains(", 0 dropped (target 0)"), "{}", notes[1]);
}
