//! redb's own cycle on the backend: create, insert, commit, read, reopen,
//! abort, integrity, and the file lock that keeps a second writer out.

use foliocache_redb::FolioBackend;
use redb::{Database, ReadableDatabase, ReadableTableMetadata, TableDefinition};
use test_support::cache::TestCache;
use test_support::TempPath;

const MIB: usize = 1 << 20;
const TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("t");

fn value(i: u64) -> Vec<u8> {
    format!("value {i:>20} {}", "x".repeat((i % 97) as usize)).into_bytes()
}

fn open(cache: &foliocache::Cache, path: &std::path::Path) -> Database {
    Database::builder()
        .set_cache_size(256 << 10)
        .create_with_backend(FolioBackend::open(cache, path).unwrap())
        .unwrap()
}

#[test]
fn create_insert_commit_reopen() {
    let tmp = TempPath::new("redb-cycle");
    // The cache is a quarter of the data: reads miss, writes are written
    // back under pressure.
    let n = 20_000u64;
    {
        let c = TestCache::bytes(MIB).build();
        let db = open(&c, &tmp.path);
        for batch in 0..4 {
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_table(TABLE).unwrap();
                for i in (batch * n / 4)..((batch + 1) * n / 4) {
                    t.insert(i, value(i).as_slice()).unwrap();
                }
            }
            tx.commit().unwrap();
        }
        let rx = db.begin_read().unwrap();
        let t = rx.open_table(TABLE).unwrap();
        assert_eq!(t.len().unwrap(), n);
        assert_eq!(
            t.get(1234).unwrap().unwrap().value(),
            value(1234).as_slice()
        );
    }
    let c = TestCache::bytes(MIB).build();
    let mut db = open(&c, &tmp.path);
    assert!(db.check_integrity().unwrap(), "integrity after reopen");
    let rx = db.begin_read().unwrap();
    let t = rx.open_table(TABLE).unwrap();
    assert_eq!(t.len().unwrap(), n, "entries after reopen");
    for (k, v) in t.range(100..200).unwrap().map(Result::unwrap) {
        assert_eq!(
            v.value(),
            value(k.value()).as_slice(),
            "entry {}",
            k.value()
        );
    }
}

#[test]
fn an_aborted_transaction_leaves_nothing() {
    let c = TestCache::bytes(MIB).build();
    let db = Database::builder()
        .create_with_backend(FolioBackend::from_file(c.memfile("db", 0).unwrap()))
        .unwrap();
    let tx = db.begin_write().unwrap();
    tx.open_table(TABLE)
        .unwrap()
        .insert(1, b"one".as_slice())
        .unwrap();
    tx.commit().unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(TABLE).unwrap();
        t.insert(2, b"two".as_slice()).unwrap();
        t.remove(1).unwrap();
    }
    tx.abort().unwrap();
    let rx = db.begin_read().unwrap();
    let t = rx.open_table(TABLE).unwrap();
    assert_eq!(t.get(1).unwrap().unwrap().value(), b"one");
    assert!(t.get(2).unwrap().is_none(), "the aborted insert");
}

#[test]
fn a_second_open_of_an_open_database_is_refused() {
    let tmp = TempPath::new("redb-lock");
    let c = TestCache::bytes(MIB).build();
    let db = open(&c, &tmp.path);
    let e = FolioBackend::open(&c, &tmp.path).expect_err("a second backend on the file");
    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
    // redb's own FileBackend is refused too (its lock is also flock).
    assert!(
        Database::create(&tmp.path).is_err(),
        "redb's own open of a file the backend holds"
    );
    drop(db);
    // Closed: the lock is gone.
    let _db = open(&c, &tmp.path);
}
