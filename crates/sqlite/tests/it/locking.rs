//! Several connections of one process on one database: SQLite's locks
//! through the VFS's lock table; and a second process kept out.

use std::process::Command;

use rusqlite::{params, ErrorCode};
use test_support::test_path;

use crate::common::{integrity, open, Db};

#[test]
fn a_reader_holds_off_a_writers_commit_until_it_ends() {
    let db = Db::new("lock-reader");
    let w = db.open();
    let r = db.open();
    w.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .unwrap();
    w.busy_timeout(std::time::Duration::ZERO).unwrap();
    // The reader's transaction holds SHARED.
    r.execute_batch("BEGIN").unwrap();
    let n: i64 = r
        .query_row("SELECT count(*) FROM t", [], |q| q.get(0))
        .unwrap();
    assert_eq!(n, 1);
    // The writer reserves and writes, but cannot commit (EXCLUSIVE).
    w.execute_batch("BEGIN; INSERT INTO t VALUES (2);").unwrap();
    let e = w
        .execute_batch("COMMIT")
        .expect_err("commit under a reader");
    assert_eq!(e.sqlite_error_code(), Some(ErrorCode::DatabaseBusy), "{e}");
    // A second writer cannot reserve.
    let w2 = db.open();
    w2.busy_timeout(std::time::Duration::ZERO).unwrap();
    let e = w2
        .execute_batch("BEGIN IMMEDIATE")
        .expect_err("a second writer");
    assert_eq!(e.sqlite_error_code(), Some(ErrorCode::DatabaseBusy), "{e}");
    // The reader still sees its snapshot, then ends; the commit goes through.
    let n: i64 = r
        .query_row("SELECT count(*) FROM t", [], |q| q.get(0))
        .unwrap();
    assert_eq!(n, 1, "the reader's snapshot");
    r.execute_batch("COMMIT").unwrap();
    w.execute_batch("COMMIT").unwrap();
    let n: i64 = r
        .query_row("SELECT count(*) FROM t", [], |q| q.get(0))
        .unwrap();
    assert_eq!(n, 2, "the commit, seen by the reader's next transaction");
}

#[test]
fn writers_on_four_threads_lose_no_row() {
    let db = Db::new("lock-threads");
    db.open()
        .execute_batch("CREATE TABLE t(k INTEGER PRIMARY KEY, who INTEGER)")
        .unwrap();
    std::thread::scope(|s| {
        for who in 0..4i64 {
            let path = db.path().to_path_buf();
            s.spawn(move || {
                let c = open(&path);
                // No fsync per commit: the test is about the locks.
                c.execute_batch("PRAGMA synchronous = OFF").unwrap();
                for i in 0..200i64 {
                    // IMMEDIATE: take RESERVED at BEGIN, so that the busy
                    // handler retries instead of a deadlock between two
                    // readers upgrading.
                    let tx = c
                        .transaction_with_behavior_unchecked(
                            rusqlite::TransactionBehavior::Immediate,
                        )
                        .unwrap();
                    tx.execute(
                        "INSERT INTO t VALUES (?1, ?2)",
                        params![who * 1000 + i, who],
                    )
                    .unwrap();
                    let _: i64 = tx
                        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                        .unwrap();
                    tx.commit().unwrap();
                }
            });
        }
    });
    let c = db.open();
    let n: i64 = c
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 800);
    assert_eq!(integrity(&c), "ok");
}

trait UncheckedImmediate {
    fn transaction_with_behavior_unchecked(
        &self,
        b: rusqlite::TransactionBehavior,
    ) -> rusqlite::Result<rusqlite::Transaction<'_>>;
}

impl UncheckedImmediate for rusqlite::Connection {
    fn transaction_with_behavior_unchecked(
        &self,
        b: rusqlite::TransactionBehavior,
    ) -> rusqlite::Result<rusqlite::Transaction<'_>> {
        rusqlite::Transaction::new_unchecked(self, b)
    }
}

const OTHER_ENV: &str = "FOLIOCACHE_SQLITE_OTHER_PROCESS_DB";

/// Not a test of its own: run in a child process by
/// [`a_second_process_is_refused_while_one_has_the_database_open`], it
/// tries to read the database and prints what happened. In the normal run
/// it has nothing to do.
#[test]
fn child_tries_to_open() {
    let Ok(path) = std::env::var(OTHER_ENV) else {
        return;
    };
    crate::common::cache();
    let r = rusqlite::Connection::open_with_flags_and_vfs(
        &path,
        rusqlite::OpenFlags::default(),
        crate::common::VFS,
    )
    .and_then(|c| c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0)));
    match r {
        Ok(n) => println!("OPENED {n}"),
        Err(e) => println!("REFUSED {:?}: {e}", e.sqlite_error_code()),
    }
}

#[test]
fn a_second_process_is_refused_while_one_has_the_database_open() {
    let db = Db::new("lock-process");
    let run_child = || {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                test_path(module_path!(), "child_tries_to_open").as_str(),
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(OTHER_ENV, db.path())
            .output()
            .expect("re-running the test binary");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let c = db.open();
    c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .unwrap();
    let out = run_child();
    assert!(
        out.contains("REFUSED Some(DatabaseBusy)"),
        "the second process while the first has it open:\n{out}"
    );
    drop(c);
    let out = run_child();
    assert!(
        out.contains("OPENED 1"),
        "the second process once it is closed:\n{out}"
    );
}
