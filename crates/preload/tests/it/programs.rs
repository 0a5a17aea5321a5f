//! Real programs under the library: sqlite3 builds, queries and checks a
//! database; fio writes and verifies with crc32c. Each is skipped, with
//! the reason printed, when not installed (failed under `CI=true`).

use std::path::Path;
use std::process::Command;

use crate::support::{checked, preloaded};

/// Whether `program` runs; if not, skips (or fails under CI) saying so.
fn installed(program: &str, test: &str) -> bool {
    let ok = Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        let reason = format!("{program} is not installed");
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{test}: {reason} (CI=true)");
        }
        println!("skipping {test}: {reason}");
    }
    ok
}

/// The SQL that builds the database: a table of 20,000 rows in 20
/// transactions, an index, updates and deletes.
fn build_sql(journal: &str) -> String {
    let mut sql = format!("PRAGMA journal_mode={journal};\nCREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v TEXT);\n");
    for batch in 0..20 {
        sql.push_str("BEGIN;\n");
        let first = batch * 1000;
        sql.push_str(&format!(
            "WITH RECURSIVE n(i) AS (SELECT {first} UNION ALL SELECT i + 1 FROM n WHERE i < {last}) \
             INSERT INTO t(id, k, v) SELECT i, (i * 7919) % 10007, printf('row-%08d-%s', i, hex(randomblob(20))) FROM n;\n",
            last = first + 999
        ));
        sql.push_str("COMMIT;\n");
    }
    sql.push_str("CREATE INDEX t_k ON t(k);\nUPDATE t SET k = k + 1 WHERE id % 3 = 0;\nDELETE FROM t WHERE id % 10 = 0;\n");
    sql
}

/// What the checks print: the rows, a sum, and `PRAGMA integrity_check`.
const QUERY: &str = "SELECT count(*), sum(k) FROM t; SELECT count(*) FROM t WHERE k BETWEEN 100 AND 200; PRAGMA integrity_check;";

fn sqlite(cmd: &mut Command, db: &Path, sql: &str) -> String {
    let out = checked(cmd.arg(db).arg(sql));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn sqlite3_builds_and_checks_a_database() {
    if !installed("sqlite3", "sqlite3_builds_and_checks_a_database") {
        return;
    }
    for journal in ["delete", "wal"] {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let db = dir.path().join("test.db");
        sqlite(
            &mut preloaded("sqlite3", dir.path()),
            &db,
            &build_sql(journal),
        );
        let through = sqlite(&mut preloaded("sqlite3", dir.path()), &db, QUERY);
        // The same answers from the kernel alone, on the files left behind.
        let plain = sqlite(&mut Command::new("sqlite3"), &db, QUERY);
        assert_eq!(through, plain, "{journal}");
        let lines: Vec<&str> = plain.lines().collect();
        assert_eq!(lines.len(), 3, "{journal}: {plain}");
        assert!(lines[0].starts_with("18000|"), "{journal}: {plain}");
        assert_eq!(lines[2], "ok", "{journal}");
    }
}

/// A fio job writing two files at random with crc32c verify headers, in
/// two threads (fio's processes would be children of `fork`, which pass
/// through), then verifying them (or, with `--verify_only`, verifying
/// only).
fn fio(mut cmd: Command, dir: &Path, extra: &str) -> String {
    cmd.args([
        "--name=verify",
        "--ioengine=psync",
        "--rw=randwrite",
        "--bs=4k",
        "--size=32m",
        "--numjobs=2",
        "--thread",
        "--verify=crc32c",
        "--verify_fatal=1",
        extra,
    ])
    .arg(format!("--directory={}", dir.display()));
    String::from_utf8_lossy(&checked(&mut cmd).stdout).into_owned()
}

#[test]
fn fio_verifies_crc32c() {
    if !installed("fio", "fio_verifies_crc32c") {
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let text = fio(preloaded("fio", dir.path()), dir.path(), "--do_verify=1");
    assert!(!text.contains("verify: bad"), "{text}");
    // The files verify through the kernel too, after the run.
    fio(Command::new("fio"), dir.path(), "--verify_only");
}
