//! Real programs under the library: sqlite3 builds, queries and checks a
//! database; fio writes and verifies with crc32c. Each is skipped, with
//! the reason printed, when not installed (failed under `CI=true`).

use std::path::Path;
use std::process::Command;

use crate::support::{checked, preloaded};
use test_support::Tmpfs;

/// Whether `program` runs; if not, skips (or fails under CI) saying so.
fn installed(program: &str, test: &str) -> bool {
    let ok = Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        test_support::skip_or_fail(test, format!("{program} is not installed"));
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

/// Runs sqlite3 on `db`: its output, and its stderr.
fn sqlite(cmd: &mut Command, db: &Path, sql: &str) -> (String, String) {
    let out = checked(cmd.arg(db).arg(sql));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (text(&out.stdout), text(&out.stderr))
}

/// The number before `what` in the library's figures line.
fn figure(stderr: &str, what: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("foliocache-preload: pid"))
        .unwrap_or_else(|| panic!("no figures in {stderr:?}"));
    let before = line.split(what).next().expect("a split");
    let n = before.trim_end().rsplit([' ', '(']).next().expect("a word");
    n.parse()
        .unwrap_or_else(|_| panic!("no {what} in {line:?}"))
}

#[test]
fn sqlite3_builds_and_checks_a_database() {
    if !installed("sqlite3", "sqlite3_builds_and_checks_a_database") {
        return;
    }
    for journal in ["delete", "wal"] {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let db = dir.path().join("test.db");
        // With the figures line, to check the cache served the files.
        let with_stats = || {
            let mut cmd = preloaded("sqlite3", dir.path());
            cmd.env("FOLIOCACHE_PRELOAD_STATS", "1");
            cmd
        };
        let (_, err) = sqlite(&mut with_stats(), &db, &build_sql(journal));
        assert!(figure(&err, "opens served") >= 2, "{err}");
        assert!(figure(&err, "writes") > 0, "{err}");
        let (through, err) = sqlite(&mut with_stats(), &db, QUERY);
        assert!(figure(&err, "hits") > 0, "{err}");
        // The same answers from the kernel alone, on the files left behind.
        let (plain, _) = sqlite(&mut Command::new("sqlite3"), &db, QUERY);
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
fn fio(mut cmd: Command, dir: &Path, extra: &str) -> (String, String) {
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
    .arg(format!("--directory={}", dir.display()))
    // (fio saves its verify state files in its working directory.)
    .current_dir(dir);
    let out = checked(&mut cmd);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (text(&out.stdout), text(&out.stderr))
}

#[test]
fn fio_verifies_crc32c() {
    if !installed("fio", "fio_verifies_crc32c") {
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut cmd = preloaded("fio", dir.path());
    cmd.env("FOLIOCACHE_PRELOAD_STATS", "1");
    let (text, err) = fio(cmd, dir.path(), "--do_verify=1");
    assert!(!text.contains("verify: bad"), "{text}");
    // Both files were served, written back and read.
    assert!(figure(&err, "opens served") >= 2, "{err}");
    assert!(figure(&err, "writes") > 0, "{err}");
    assert!(figure(&err, "hits") + figure(&err, "misses") > 0, "{err}");
    // The files verify through the kernel too, after the run.
    fio(Command::new("fio"), dir.path(), "--verify_only");
}

/// On a full filesystem (a tmpfs of 1 MiB), `cp` of a 3 MB file fails as
/// it does without the library, at the write that does not fit: a write
/// that extends a file reserves its space on the filesystem
/// (`fallocate`), as ext4's delayed allocation does at `write(2)`. (Before
/// the reservation, the data was cached at `write` and only the `close`
/// that wrote it back failed: cp said "failed to close".) What cp wrote
/// before is in the file, and no space stays reserved past it.
#[test]
fn cp_onto_a_full_filesystem_fails() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let Some(full) = Tmpfs::mount(
        &dir.path().join("full"),
        "1m",
        "cp_onto_a_full_filesystem_fails",
    ) else {
        return;
    };
    let big = dir.path().join("big");
    let data: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i * 31 + i / 4096) as u8)
        .collect();
    std::fs::write(&big, &data).expect("the source");
    let dest = full.path.join("x");
    let plain = Command::new("cp")
        .arg(&big)
        .arg(&dest)
        .output()
        .expect("cp");
    assert!(
        !plain.status.success(),
        "cp alone fills the tmpfs and fails"
    );
    std::fs::remove_file(&dest).expect("the partial copy");
    let out = preloaded("cp", &full.path)
        .arg(&big)
        .arg(&dest)
        .output()
        .expect("cp under the library");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "cp exited 0 under the library: {err}"
    );
    assert!(err.contains("No space left on device"), "{err}");
    assert!(
        !err.contains("close"),
        "the close failed, not the write: {err}"
    );
    let copied = std::fs::read(&dest).expect("the partial copy");
    assert!(!copied.is_empty() && data.starts_with(&copied));
    let blocks = std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(&dest).unwrap());
    assert!(
        blocks * 512 <= (copied.len() as u64).next_multiple_of(4096),
        "{blocks} blocks still allocated for {} bytes",
        copied.len()
    );
}

/// A process that ends with `_exit` (Python's `os._exit`, as every
/// `multiprocessing` worker ends) printed no line of figures: only the
/// exit handlers printed it. Its own cache's line, in bytes: the file's
/// 10,000 bytes read once, all from the file (its folio counted as read
/// from below at its first read), none from memory.
#[test]
fn a_process_that_ends_with_exit_prints_its_line_in_bytes() {
    // (Not `python3` by the PATH, which may be a shell script that forks
    // and executes others: a version manager's shim.)
    let python = "/usr/bin/python3";
    if !installed(
        python,
        "a_process_that_ends_with_exit_prints_its_line_in_bytes",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    std::fs::write(&f, vec![7u8; 10_000]).unwrap();
    let out = checked(
        preloaded(python, dir.path())
            .args([
                "-c",
                "import os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\n\
                 assert len(os.read(fd, 20000)) == 10000\nos._exit(0)",
            ])
            .arg(&f)
            .env("FOLIOCACHE_PRELOAD_STATS", "1"),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.starts_with("foliocache-preload: pid "))
        .unwrap_or_else(|| panic!("no line: {err}"));
    assert!(
        line.contains(
            ": 1 opens served; from its own cache: 10000 bytes read: 0 from memory (0.0 %), "
        ),
        "{line}"
    );
    assert!(
        line.contains(" read from the files (readahead included); "),
        "{line}"
    );
    assert_eq!(err.matches("opens served").count(), 1, "once: {err}");
}
