//! A writer process killed in the middle of a transaction, after some
//! commits: the database reopened through the VFS rolls the hot journal
//! back, passes `PRAGMA integrity_check`, and holds exactly the committed
//! rows.

use rusqlite::params;
use test_support::kill_mid_write;

use crate::common::{integrity, open, Db};

const CRASH_ENV: &str = "FOLIOCACHE_SQLITE_CRASH_DB";
/// Rows per committed transaction.
const PER_TX: i64 = 2_000;

/// Not a test of its own: run in a child process by
/// [`a_writer_killed_mid_transaction_leaves_a_whole_database`], it
/// commits three transactions (`COMMITTED n` after each), then updates
/// and inserts in a fourth (beyond the 4 MiB cache and SQLite's 512 KiB,
/// so that changed pages reach the database file before the commit, with
/// their originals in the journal), prints `WRITING`, and goes on writing
/// until killed. In the normal run it has nothing to do.
#[test]
fn child_commits_then_writes_forever() {
    let Ok(path) = std::env::var(CRASH_ENV) else {
        return;
    };
    let c = open(std::path::Path::new(&path));
    c.execute_batch(
        "PRAGMA cache_size = -512;
         CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);
         CREATE INDEX tv ON t(v);",
    )
    .unwrap();
    for n in 1..=3i64 {
        let tx = c.unchecked_transaction().unwrap();
        for k in (n - 1) * PER_TX..n * PER_TX {
            tx.execute(
                "INSERT INTO t VALUES (?1, ?2)",
                params![k, format!("{k:0>300}")],
            )
            .unwrap();
        }
        tx.commit().unwrap();
        println!("COMMITTED {n}");
    }
    let _tx = c.unchecked_transaction().unwrap();
    c.execute("UPDATE t SET v = 'torn ' || v", []).unwrap();
    let mut k = 3 * PER_TX;
    loop {
        c.execute(
            "INSERT INTO t VALUES (?1, ?2)",
            params![k, format!("{k:1>300}")],
        )
        .unwrap();
        k += 1;
        if k == 3 * PER_TX + 20_000 {
            println!("WRITING");
        }
    }
}

#[test]
fn a_writer_killed_mid_transaction_leaves_a_whole_database() {
    let db = Db::new("sqlite-crash");
    let committed = kill_mid_write(
        module_path!(),
        "child_commits_then_writes_forever",
        CRASH_ENV,
        db.path(),
    );
    assert_eq!(committed, 3, "the child committed three transactions first");
    let mut journal = db.path().as_os_str().to_owned();
    journal.push("-journal");
    assert!(
        std::path::Path::new(&journal).exists(),
        "the killed transaction left a hot journal"
    );

    let c = open(db.path());
    assert_eq!(integrity(&c), "ok", "integrity after the crash");
    let n: i64 = c
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 3 * PER_TX, "the committed rows, no more");
    let torn: i64 = c
        .query_row("SELECT count(*) FROM t WHERE v LIKE 'torn%'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(torn, 0, "no row of the killed transaction's update");
}
