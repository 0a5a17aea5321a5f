//! SQLite through the VFS: what a program does with a database.

use rusqlite::params;

use crate::common::{integrity, Db};

fn fill(c: &rusqlite::Connection, from: i64, to: i64) {
    let tx = c.unchecked_transaction().unwrap();
    {
        let mut st = tx.prepare("INSERT INTO t(k, v) VALUES (?1, ?2)").unwrap();
        for k in from..to {
            st.execute(params![
                k,
                format!("value {k} {}", "x".repeat((k % 200) as usize))
            ])
            .unwrap();
        }
    }
    tx.commit().unwrap();
}

fn count(c: &rusqlite::Connection) -> i64 {
    c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn create_insert_reopen() {
    let db = Db::new("sql-create");
    {
        let c = db.open();
        c.execute_batch("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT)")
            .unwrap();
        fill(&c, 0, 1000);
        assert_eq!(count(&c), 1000);
    }
    let c = db.open();
    assert_eq!(count(&c), 1000, "rows after reopen");
    let v: String = c
        .query_row("SELECT v FROM t WHERE k = 7", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, format!("value 7 {}", "x".repeat(7)));
    assert_eq!(integrity(&c), "ok");
}

#[test]
fn a_rolled_back_transaction_leaves_nothing() {
    let db = Db::new("sql-rollback");
    let c = db.open();
    c.execute_batch("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT)")
        .unwrap();
    fill(&c, 0, 100);
    {
        let tx = c.unchecked_transaction().unwrap();
        tx.execute("DELETE FROM t WHERE k < 50", []).unwrap();
        tx.execute("INSERT INTO t(k, v) VALUES (1000, 'new')", [])
            .unwrap();
        tx.execute("UPDATE t SET v = 'changed'", []).unwrap();
        tx.rollback().unwrap();
    }
    assert_eq!(count(&c), 100);
    let changed: i64 = c
        .query_row(
            "SELECT count(*) FROM t WHERE v = 'changed' OR k = 1000",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(changed, 0, "rows of the rolled back transaction");
    assert_eq!(integrity(&c), "ok");
}

#[test]
fn a_database_larger_than_the_cache_is_whole() {
    // Some 16 MiB of rows and an index, four times the cache: reads miss,
    // writes are written back under pressure, the journal goes through
    // the cache too.
    let db = Db::new("sql-large");
    let c = db.open();
    c.execute_batch(
        "PRAGMA cache_size = -512;
         CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);
         CREATE INDEX tv ON t(v);",
    )
    .unwrap();
    for i in 0..8 {
        fill(&c, i * 10_000, (i + 1) * 10_000);
    }
    c.execute("UPDATE t SET v = v || 'u' WHERE k % 3 = 0", [])
        .unwrap();
    c.execute("DELETE FROM t WHERE k % 7 = 0", []).unwrap();
    let want = (0..80_000).filter(|k| k % 7 != 0).count() as i64;
    assert_eq!(count(&c), want);
    assert_eq!(integrity(&c), "ok");
    drop(c);
    let c = db.open();
    assert_eq!(count(&c), want, "rows after reopen");
    let u: i64 = c
        .query_row("SELECT count(*) FROM t WHERE v LIKE '%u'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        u,
        (0..80_000).filter(|k| k % 3 == 0 && k % 7 != 0).count() as i64
    );
}

#[test]
fn memory_mapped_reads_see_every_commit() {
    // With mmap_size set SQLite reads pages through xFetch (pins); a
    // second connection's writes must show in the first's next reads,
    // and the first's pins must not stop them.
    let db = Db::new("sql-mmap");
    let a = db.open();
    let b = db.open();
    a.execute_batch("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT)")
        .unwrap();
    fill(&a, 0, 5_000);
    let size: i64 = a
        .query_row("PRAGMA mmap_size = 268435456", [], |r| r.get(0))
        .unwrap();
    assert_eq!(size, 268_435_456, "the VFS takes the mmap size");
    for round in 0..5 {
        b.execute(
            "UPDATE t SET v = ?1 WHERE k % 10 = ?2",
            params![format!("r{round}"), round],
        )
        .unwrap();
        let n: i64 = a
            .query_row(
                "SELECT count(*) FROM t WHERE v = ?1",
                params![format!("r{round}")],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 500, "round {round}: the other connection's update");
    }
    assert_eq!(integrity(&a), "ok");
}

#[test]
fn journal_mode_wal_is_refused_with_a_clear_error() {
    let db = Db::new("sql-wal");
    let c = db.open();
    c.execute_batch("CREATE TABLE t(x)").unwrap();
    let e = c
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0))
        .expect_err("WAL through the VFS");
    assert!(
        e.to_string().contains("does not support WAL"),
        "the error: {e}"
    );
    let mode: String = c
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete", "still in rollback mode");
    for m in ["truncate", "persist", "delete"] {
        let got: String = c
            .query_row(&format!("PRAGMA journal_mode = {m}"), [], |r| r.get(0))
            .unwrap();
        assert_eq!(got, m);
        c.execute("INSERT INTO t VALUES (?1)", [m]).unwrap();
    }
    assert_eq!(integrity(&c), "ok");
}

#[test]
fn registering_a_name_twice_is_an_error() {
    crate::common::cache();
    let e = foliocache_sqlite::register(crate::common::VFS, crate::common::cache())
        .expect_err("a second VFS of the same name");
    assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
    let e = foliocache_sqlite::register("bad\0name", crate::common::cache()).expect_err("a NUL");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn unregister_refuses_while_files_are_open_then_frees_the_name() {
    let cache = foliocache::Cache::builder()
        .capacity(1 << 20)
        .build()
        .unwrap();
    foliocache_sqlite::register("foliocache-unregister", &cache).unwrap();
    let db = Db::new("sql-unregister");
    let c = rusqlite::Connection::open_with_flags_and_vfs(
        db.path(),
        rusqlite::OpenFlags::default(),
        "foliocache-unregister",
    )
    .unwrap();
    c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .unwrap();
    let e = foliocache_sqlite::unregister("foliocache-unregister").expect_err("a file is open");
    assert_eq!(e.kind(), std::io::ErrorKind::ResourceBusy);
    drop(c);
    foliocache_sqlite::unregister("foliocache-unregister").unwrap();
    let e = rusqlite::Connection::open_with_flags_and_vfs(
        db.path(),
        rusqlite::OpenFlags::default(),
        "foliocache-unregister",
    )
    .expect_err("the VFS is gone");
    assert!(e.to_string().contains("no such vfs"), "{e}");
    let e = foliocache_sqlite::unregister("foliocache-unregister").expect_err("twice");
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    // The name is free again.
    foliocache_sqlite::register("foliocache-unregister", &cache).unwrap();
    foliocache_sqlite::unregister("foliocache-unregister").unwrap();
}
