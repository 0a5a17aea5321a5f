//! Real programs through the mount: `sqlite3` building, changing and
//! querying a database and checking it (`PRAGMA integrity_check`), with
//! and without memory mapping (`PRAGMA mmap_size`, a WAL's shared-memory
//! index); RocksDB's `db_bench` (fillseq, then readseq and readrandom
//! verifying every block's checksum, then both again through mmap
//! reads). Each skips with the reason printed when the program is missing
//! (`apt-get install sqlite3 rocksdb-tools`), and fails under `CI=true`.

use std::fs;
use std::path::Path;
use std::process::Command;

use foliocache_fuse::MountOptions;
use test_support::{run_checked, skip_or_fail};

use crate::mount::{fuse_ok, Mounted};

/// True if FUSE is here and `program` is on `PATH` (from Debian's
/// `package`); otherwise prints why the test skips (a failure under CI).
pub(crate) fn ready(test: &str, program: &str, package: &str) -> bool {
    if !fuse_ok(test) {
        return false;
    }
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).exists()));
    if !found {
        skip_or_fail(
            test,
            format!("no {program} on PATH (apt-get install {package})"),
        );
    }
    found
}

/// Runs `cmd` (a panic with its output unless it exits 0): its stdout.
pub(crate) fn stdout_of(cmd: &mut Command) -> String {
    String::from_utf8_lossy(&run_checked(cmd).stdout).into_owned()
}

/// Rows the script leaves: ids 1..=20000 less the multiples of 11.
const ROWS: u64 = 20_000 - 20_000 / 11;

/// The sum of the blobs' lengths the script leaves: 200 bytes for the
/// multiples of 7 it rewrote, 300 for the others.
fn blob_bytes() -> u64 {
    (1..=20_000u64)
        .filter(|i| i % 11 != 0)
        .map(|i| if i % 7 == 0 { 200 } else { 300 })
        .sum()
}

/// Runs `sql` with `sqlite3` on the database `db`.
fn sqlite(db: &Path, sql: &str) -> String {
    stdout_of(
        Command::new("sqlite3")
            .arg("-batch")
            .arg("-bail")
            .arg(db)
            .arg(sql),
    )
}

/// Builds a database through the mount, changes and queries it, checks
/// it, and checks it again from a second process and, after unmount, on
/// the backing. `setup` starts every session (journal mode, mmap size).
fn sqlite_through_the_mount(test: &str, setup: &str) {
    if !ready(test, "sqlite3", "sqlite3") {
        return;
    }
    // A cache smaller than the database's churn, so reclaim runs.
    let mut m = Mounted::with(MountOptions::new(8 << 20));
    let db = m.p("t.db");
    let build = format!(
        "{setup}
         CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v BLOB);
         CREATE INDEX t_k ON t(k);
         WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000)
           INSERT INTO t SELECT x, hex(randomblob(8)), randomblob(300) FROM c;
         UPDATE t SET v = randomblob(200) WHERE id % 7 = 0;
         DELETE FROM t WHERE id % 11 = 0;
         SELECT count(*), sum(length(v)) FROM t;
         PRAGMA integrity_check;"
    );
    let want = format!("{ROWS}|{}\nok\n", blob_bytes());
    assert!(
        sqlite(&db, &build).ends_with(&want),
        "{test}: build and query"
    );
    let check = format!(
        "{setup}
         SELECT count(*), sum(length(v)) FROM t;
         SELECT count(*) FROM t INDEXED BY t_k WHERE k > '';
         PRAGMA integrity_check;"
    );
    let again = format!("{ROWS}|{}\n{ROWS}\nok\n", blob_bytes());
    assert!(
        sqlite(&db, &check).ends_with(&again),
        "{test}: a second process"
    );
    m.unmount();
    let on_backing = sqlite(&m.backing.join("t.db"), &check.replace(setup, ""));
    assert!(on_backing.ends_with(&again), "{test}: the backing");
}

#[test]
fn sqlite_builds_and_checks_a_database_through_the_mount() {
    sqlite_through_the_mount(
        "sqlite_builds_and_checks_a_database_through_the_mount",
        "PRAGMA journal_mode = DELETE;",
    );
}

/// The same with every read of the database through a shared mapping
/// (`mmap_size`) and a write-ahead log, whose index is a shared mapping
/// of the `-shm` file on the mount.
#[test]
fn sqlite_with_mmap_and_wal_through_the_mount() {
    sqlite_through_the_mount(
        "sqlite_with_mmap_and_wal_through_the_mount",
        "PRAGMA mmap_size = 268435456; PRAGMA journal_mode = WAL;",
    );
}

#[test]
fn db_bench_fills_and_reads_back_with_checksums() {
    let test = "db_bench_fills_and_reads_back_with_checksums";
    if !ready(test, "db_bench", "rocksdb-tools") {
        return;
    }
    let m = Mounted::with(MountOptions::new(16 << 20));
    let db = m.p("db");
    fs::create_dir(&db).expect("mkdir");
    const NUM: u64 = 100_000;
    let run = |benchmarks: &str, extra: &[&str]| {
        stdout_of(
            Command::new("db_bench")
                .arg(format!("--db={}", db.display()))
                .arg(format!("--benchmarks={benchmarks}"))
                .arg(format!("--num={NUM}"))
                .args(["--verify_checksum=1", "--threads=1", "--progress_reports=0"])
                .args(extra),
        )
    };
    run("fillseq", &[]);
    for extra in [&[][..], &["--mmap_read=1"][..]] {
        let mut args = vec!["--use_existing_db=1"];
        args.extend_from_slice(extra);
        let out = run("readseq,readrandom", &args);
        assert!(
            out.contains(&format!("({NUM} of {NUM} found)")),
            "readrandom found every key {extra:?}:\n{out}"
        );
        assert!(out.contains("readseq"), "{out}");
    }
}
