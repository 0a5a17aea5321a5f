//! `foliocache bench --scenario programs`: RocksDB's `db_bench` on the
//! data directory, through a FUSE mount and under the interposer, its
//! table, ratios, targets and JSON; and without `db_bench`, a line saying
//! it skipped. The run skips (with the reason) where `db_bench` or FUSE
//! is missing, and fails under `CI=true`.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use serde_json::Value;
use test_support::skip_or_fail;

use crate::bench::{bench_json_and_text, notes_of};
use crate::launch::build_library;

const BENCHMARKS: [&str; 4] = ["fillseq", "readseq", "readrandom", "readrandom-restart"];
const WAYS: [&str; 3] = ["ext4", "mount", "interposer"];

/// True if `program` is on `PATH`.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

#[test]
fn programs_scenario_runs_db_bench_three_ways() {
    let test = "programs_scenario_runs_db_bench_three_ways";
    if !on_path("db_bench") {
        return skip_or_fail(test, "no db_bench on PATH (apt-get install rocksdb-tools)");
    }
    if !on_path("fusermount3") {
        return skip_or_fail(test, "no fusermount3 on PATH (apt-get install fuse3)");
    }
    if let Some(why) = foliocache_fuse::unavailable() {
        return skip_or_fail(test, why);
    }
    build_library();
    let dir = tempfile::tempdir().unwrap();
    // Traversable by PostgreSQL's user (the pgbench job runs the server
    // as `postgres` when the tests run as root).
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let pgbench = std::path::Path::new("/usr/lib/postgresql").is_dir();
    if !pgbench && test_support::under_ci() {
        panic!("{test}: no PostgreSQL (apt-get install postgresql): every job runs under CI=true");
    }
    // 9,709 keys: a few seconds a way.
    let (v, out) = bench_json_and_text(
        dir.path(),
        &["--scenario", "programs", "--quick", "--size", "2M"],
    );
    let keys = (2u64 << 20) / 216;
    // The table: a group of rows per benchmark, one per way.
    assert!(
        out.contains("== programs: A real program: RocksDB's db_bench"),
        "{out}"
    );
    for b in BENCHMARKS {
        let at = out
            .find(&format!("\n{b} bs=216B j=1 "))
            .unwrap_or_else(|| panic!("no {b} rows:\n{out}"));
        let rows: Vec<&str> = out[at + 1..].lines().take(3).collect();
        for (row, way) in rows.iter().zip(WAYS) {
            assert!(row.split_whitespace().any(|w| w == way), "{b}: {row}");
        }
        for way in ["interposer", "mount"] {
            let ratio = format!("   {way} / ext4 ({b} 216B) ");
            assert!(out.contains(&ratio), "no `{ratio}`:\n{out}");
        }
        let target = format!(" interposer bandwidth / ext4 ({b} 216B): at least ");
        let line = out
            .lines()
            .find(|l| l.contains(&target))
            .unwrap_or_else(|| panic!("no target `{target}`:\n{out}"));
        assert!(
            line.contains("[met]") || line.contains("[NOT MET]"),
            "{line}"
        );
    }
    // Each way's round lines, two rounds.
    for way in WAYS {
        for round in 1..=2 {
            let says = format!("{way}: programs (round {round} of 2): fillseq ");
            assert!(out.contains(&says), "no `{says}`:\n{out}");
        }
    }

    // The JSON: a record per benchmark and way, the best of 2 rounds.
    let sc = &v["scenarios"][0];
    assert_eq!(sc["name"], "programs");
    let rs = sc["results"].as_array().unwrap();
    // Then the database larger than memory, three ways, where a memory
    // cgroup can be made.
    let pg = if pgbench { 4 } else { 0 };
    let cgroup = !out.contains("programs: readrandom-larger left out: no memory cgroup: ");
    let lg = if cgroup { 3 } else { 0 };
    // Then the forked pool, five ways (no ext4 without a cgroup), where
    // python3 is.
    let pool = if on_path("python3") {
        4 + usize::from(cgroup)
    } else {
        0
    };
    // Then PostgreSQL larger than its memory, three ways, where both are.
    let pgl = if pgbench && cgroup { 6 } else { 0 };
    assert_eq!(rs.len(), 12 + lg + pg + pgl + pool, "{rs:#?}");
    check_larger(&rs[12..12 + lg]);
    check_pgbench_larger(&rs[12 + lg + pg..12 + lg + pg + pgl]);
    check_pool(&rs[12 + lg + pg + pgl..]);
    if pgbench {
        check_pgbench(&rs[12 + lg..12 + lg + pg]);
    } else {
        assert!(
            out.contains("programs: pgbench-select and pgbench-tpcb left out: "),
            "{out}"
        );
    }
    for (i, r) in rs[..12].iter().enumerate() {
        let (b, way) = (BENCHMARKS[i / 3], WAYS[i % 3]);
        assert_eq!(
            (r["rw"].as_str(), r["engine"].as_str()),
            (Some(b), Some(way))
        );
        assert_eq!(r["bs"], 216);
        // The restart case reads 30% of the keys at random.
        let ops = if b == "readrandom-restart" {
            keys * 3 / 10
        } else {
            keys
        };
        assert_eq!(r["ops"], ops, "{r:#}");
        assert_eq!(r["file_size"], keys * 216);
        let iops = r["iops"].as_f64().unwrap();
        assert!(iops > 0.0, "{r:#}");
        assert!((r["bw_bytes"].as_f64().unwrap() - iops * 216.0).abs() < 1.0);
        assert_eq!(r["repeats_bw_bytes"].as_array().unwrap().len(), 2);
        assert!(r["lat_ns"]["p50"].as_u64().unwrap() > 0, "{r:#}");
        assert!(r["cpu_s_per_gib"].is_null(), "not measured: {r:#}");
        let ratio = r["ratio_to_kernel"].as_f64().unwrap();
        if way == "ext4" {
            assert_eq!(ratio, 1.0);
            assert!(r["capacity"].is_null());
        } else {
            assert_eq!(r["capacity"], (4 * keys * 216).div_ceil(1 << 20) << 20);
        }
        let notes = notes_of(r);
        // The restart case's pass is db_bench's readrandom.
        let program_b = b.trim_end_matches("-restart");
        assert!(
            notes[0].starts_with(&format!("db_bench: {program_b} ")),
            "{notes:?}"
        );
        if b.starts_with("readrandom") {
            assert!(
                notes[0].ends_with(&format!("({ops} of {ops} found)")),
                "{notes:?}"
            );
        }
        if b == "readrandom-restart" && way == "interposer" {
            // Its reads loaded the list its fill saved.
            assert!(
                notes.iter().any(|n| n.contains("warm start: ")),
                "{notes:?}"
            );
        }
        if way == "interposer" {
            assert!(
                notes.iter().any(|n| n.contains(" opens served; ")),
                "{notes:?}"
            );
        }
        if way == "mount" {
            assert!(
                notes.iter().any(|n| n.contains("the mount's cache: ")),
                "{notes:?}"
            );
        }
    }
    let ratios = sc["summary"]["ratios"].as_array().unwrap();
    // The pool's ratios and targets (checked in `check_pool`'s job) apart.
    let (pool_names, names): (Vec<&str>, Vec<&str>) = ratios
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .partition(|n| n.contains("(pool "));
    assert_eq!(pool_names.is_empty(), pool == 0, "{pool_names:?}");
    let larger = cgroup;
    let mut want: Vec<String> = BENCHMARKS
        .iter()
        .flat_map(|b| ["interposer", "mount"].map(|w| format!("{w} / ext4 ({b} 216B)")))
        .collect();
    if larger {
        want.extend(
            ["interposer / ext4", "interposer / direct", "direct / ext4"]
                .map(|w| format!("{w} (readrandom-larger 216B)")),
        );
    }
    if pgbench {
        want.extend(["select", "tpcb"].map(|b| format!("shared / ext4 (pgbench-{b} 8KiB)")));
    }
    if pgl > 0 {
        want.extend(["select", "tpcb"].into_iter().flat_map(|b| {
            ["25", "75"].map(|e| format!("interposer / ext4-{e} (pgbench-{b}-3x 8KiB)"))
        }));
    }
    assert_eq!(names, want);
    for r in ratios {
        assert_eq!(r["per_round"].as_array().unwrap().len(), 2, "{r:#}");
    }
    let targets = sc["summary"]["targets"].as_array().unwrap();
    let got: Vec<(&str, f64)> = targets
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap(),
                t["threshold"].as_f64().unwrap(),
            )
        })
        .filter(|(n, _)| !n.contains("(pool "))
        .collect();
    let mut want = vec![
        ("interposer bandwidth / ext4 (fillseq 216B)", 0.9),
        ("interposer bandwidth / ext4 (readseq 216B)", 1.0),
        ("interposer bandwidth / ext4 (readrandom 216B)", 1.3),
        ("interposer bandwidth / ext4 (readrandom-restart 216B)", 0.9),
    ];
    if larger {
        want.extend([
            ("interposer bandwidth / ext4 (readrandom-larger 216B)", 1.1),
            (
                "interposer bandwidth / direct (readrandom-larger 216B)",
                1.0,
            ),
        ]);
    }
    if pgbench {
        want.extend([
            ("shared bandwidth / ext4 (pgbench-select 8KiB)", 1.2),
            ("shared bandwidth / ext4 (pgbench-tpcb 8KiB)", 1.0),
        ]);
    }
    if pgl > 0 {
        want.extend([
            (
                "interposer bandwidth / ext4-25 (pgbench-select-3x 8KiB)",
                1.2,
            ),
            (
                "interposer bandwidth / ext4-75 (pgbench-select-3x 8KiB)",
                1.2,
            ),
            ("interposer bandwidth / ext4-25 (pgbench-tpcb-3x 8KiB)", 1.0),
            ("interposer bandwidth / ext4-75 (pgbench-tpcb-3x 8KiB)", 1.0),
            // The 10x database runs without --quick only: not checked.
            ("interposer bandwidth / ext4-25", 1.2),
            ("interposer bandwidth / ext4-75", 1.2),
            ("interposer bandwidth / ext4-25", 1.0),
            ("interposer bandwidth / ext4-75", 1.0),
        ]);
    }
    assert_eq!(got, want);
    // (The 10x database's, not checked with --quick, apart.)
    let unrun = |t: &&Value| {
        let n = t["name"].as_str().unwrap();
        n.starts_with("interposer bandwidth / ext4-") && !n.contains('(')
    };
    for t in targets.iter().filter(|t| !unrun(t)) {
        assert!(t["met"].is_boolean(), "{t:#}");
        assert_eq!(t["per_run"].as_array().unwrap().len(), 2, "{t:#}");
    }
    // Nothing left behind: the databases and the mount are gone.
    let left: Vec<_> = std::fs::read_dir(dir.path().join("data"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// The database larger than memory's records (none where it was left
/// out): a way each, two threads reading 10,000 keys each in the measured
/// pass, in a memory cgroup of 96 MiB, the caches at 56 MiB (`direct`:
/// the limit less RocksDB's heap) and 59 MiB (`interposer`: the same and
/// the small block cache its program keeps).
fn check_larger(rs: &[Value]) {
    let ways = ["ext4", "direct", "interposer"];
    for (r, way) in rs.iter().zip(ways) {
        assert_eq!(
            (r["rw"].as_str(), r["engine"].as_str()),
            (Some("readrandom-larger"), Some(way))
        );
        assert_eq!((&r["numjobs"], &r["ops"]), (&2.into(), &20_000.into()));
        assert_eq!(r["file_size"], 900_000 * 216);
        assert_eq!(r["memory_limit"]["limit_bytes"], 96 << 20, "{r:#}");
        let capacity = match way {
            "direct" => Value::from(56 << 20),
            "interposer" => Value::from(59 << 20),
            _ => Value::Null,
        };
        assert_eq!(r["capacity"], capacity, "{r:#}");
        let notes = notes_of(r);
        assert!(notes[0].starts_with("db_bench: readrandom "), "{notes:?}");
        assert!(notes[0].ends_with("(10000 of 10000 found)"), "{notes:?}");
        if way == "interposer" {
            assert!(
                notes.iter().any(|n| n.contains(" opens served; ")),
                "{notes:?}"
            );
        }
    }
}

/// PostgreSQL larger than its memory's records: `pgbench -S` and TPC-B
/// at `-s 16` in a memory cgroup of 128 MiB, three ways, each record
/// with its cgroup's figures, the bytes read per transaction and the OOM
/// killer's kills (none).
fn check_pgbench_larger(rs: &[Value]) {
    let ways = ["ext4-25", "ext4-75", "interposer"];
    let jobs = ["pgbench-select-3x", "pgbench-tpcb-3x"];
    for (i, r) in rs.iter().enumerate() {
        let (job, way) = (jobs[i / 3], ways[i % 3]);
        assert_eq!(
            (r["rw"].as_str(), r["engine"].as_str()),
            (Some(job), Some(way))
        );
        assert!(r["ops"].as_u64().unwrap() > 0, "{r:#}");
        // The database about twice the limit.
        assert!(r["file_size"].as_u64().unwrap() > 200 << 20, "{r:#}");
        let m = &r["memory_limit"];
        assert_eq!(m["limit_bytes"], 128 << 20, "{r:#}");
        assert!(m["peak_bytes"].as_u64().unwrap() > 16 << 20, "{r:#}");
        assert!(m["limit_hits"].is_u64(), "{r:#}");
        let capacity = if way == "interposer" {
            Value::from(43 << 20)
        } else {
            Value::Null
        };
        assert_eq!(r["capacity"], capacity, "{r:#}");
        let notes = notes_of(r);
        assert!(notes[0].starts_with("pgbench: "), "{notes:?}");
        let reads = "reads: the server's processes read from storage ";
        assert!(notes[1].starts_with(reads), "{notes:?}");
        assert!(notes[1].contains(" per transaction"), "{notes:?}");
        assert_eq!(notes[2], "the cgroup's OOM kills: 0", "{notes:?}");
    }
}

/// The forked pool's records: 4,096 reads of 64 KiB of a 128 MiB file by
/// 8 processes (1 for `private`), each way at 64 MiB, the ext4 way in a
/// memory cgroup of that size.
fn check_pool(rs: &[Value]) {
    let ways = ["interposer", "shared", "private", "mount", "ext4"];
    for (r, way) in rs.iter().zip(ways) {
        assert_eq!(
            (r["rw"].as_str(), r["engine"].as_str()),
            (Some("pool"), Some(way))
        );
        let procs = if way == "private" { 1 } else { 8 };
        assert_eq!((&r["numjobs"], &r["ops"]), (&procs.into(), &4096.into()));
        assert_eq!(
            (&r["bs"], &r["file_size"]),
            (&(64 << 10).into(), &(128 << 20).into())
        );
        assert!(r["iops"].as_f64().unwrap() > 0.0, "{r:#}");
        if way == "ext4" {
            assert_eq!(r["memory_limit"]["limit_bytes"], 64 << 20, "{r:#}");
        } else {
            assert_eq!(r["capacity"], 64 << 20, "{r:#}");
        }
    }
}

/// PostgreSQL's records: `pgbench -S` and TPC-B, on ext4 and under
/// `foliocache run --shared`, 2 clients, transactions counted.
fn check_pgbench(rs: &[Value]) {
    let want = [
        ("pgbench-select", "ext4"),
        ("pgbench-select", "shared"),
        ("pgbench-tpcb", "ext4"),
        ("pgbench-tpcb", "shared"),
    ];
    let got: Vec<(&str, &str)> = rs
        .iter()
        .map(|r| (r["rw"].as_str().unwrap(), r["engine"].as_str().unwrap()))
        .collect();
    assert_eq!(got, want);
    for r in rs {
        assert_eq!(
            (&r["bs"], &r["numjobs"]),
            (&8192.into(), &2.into()),
            "{r:#}"
        );
        assert!(r["ops"].as_u64().unwrap() > 0, "{r:#}");
        assert!(r["iops"].as_f64().unwrap() > 0.0, "{r:#}");
        assert!(r["file_size"].as_u64().unwrap() > 1 << 20, "{r:#}");
        assert!(r["lat_ns"]["mean"].as_f64().unwrap() > 0.0, "{r:#}");
        let notes = notes_of(r);
        assert!(notes[0].starts_with("pgbench: "), "{notes:?}");
    }
}

#[test]
fn programs_scenario_without_db_bench_says_so_and_skips() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let out = Command::new(env!("CARGO_BIN_EXE_foliocache"))
        .args(["bench", "--scenario", "programs", "--quick", "--json"])
        .arg(&json)
        .arg("--dir")
        .arg(dir.path().join("data"))
        .env("PATH", dir.path())
        .output()
        .expect("running foliocache");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = "programs: skipped: db_bench is not on PATH (apt-get install rocksdb-tools)";
    assert!(text.contains(line), "{text}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let sc = &v["scenarios"][0];
    assert_eq!(sc["name"], "programs");
    assert!(sc["results"].as_array().unwrap().is_empty());
    assert!(sc["summary"].is_null());
    assert!(sc["notes"][0].as_str().unwrap().starts_with(line));
}
