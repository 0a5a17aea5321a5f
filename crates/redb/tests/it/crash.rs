//! A writer process killed in the middle of a transaction (after some
//! durable commits): the database reopened through the cache passes
//! redb's integrity check, and every committed entry is there.

use foliocache_redb::FolioBackend;
use redb::{Database, ReadableDatabase, ReadableTableMetadata, TableDefinition};
use test_support::cache::TestCache;
use test_support::{kill_mid_write, TempPath};

const MIB: usize = 1 << 20;
const TABLE: TableDefinition<u64, u64> = TableDefinition::new("t");
const CRASH_ENV: &str = "FOLIOCACHE_REDB_CRASH_FILE";
/// Entries per committed transaction.
const PER_TX: u64 = 2_000;
/// Entries the uncommitted transaction writes before the parent kills it:
/// some 10 MiB of pages, ten times the cache.
const SPILL: u64 = 200_000;

/// Not a test of its own: run in a child process by
/// [`a_writer_killed_mid_transaction_leaves_a_whole_database`], it commits
/// transactions of `PER_TX` entries, printing `COMMITTED n` after each,
/// and after the third starts a large one that it never commits, printing
/// `WRITING` once it has written `SPILL` entries (more than redb's and the
/// cache's memory hold, so uncommitted pages reach the file): the parent
/// kills it there. In the normal run it has nothing to do.
#[test]
fn child_commits_then_writes_forever() {
    let Ok(path) = std::env::var(CRASH_ENV) else {
        return;
    };
    let c = TestCache::bytes(MIB).build();
    let db = Database::builder()
        .set_cache_size(128 << 10)
        .create_with_backend(FolioBackend::open(&c, &path).unwrap())
        .unwrap();
    for n in 1..=3u64 {
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_table(TABLE).unwrap();
            for i in (n - 1) * PER_TX..n * PER_TX {
                t.insert(i, i * 7).unwrap();
            }
        }
        tx.commit().unwrap();
        println!("COMMITTED {n}");
    }
    let tx = db.begin_write().unwrap();
    let mut t = tx.open_table(TABLE).unwrap();
    // Overwrites the committed entries and adds more, spilling dirty pages
    // to the file through the small caches, until killed.
    for i in 0.. {
        t.insert(i % SPILL, u64::MAX - i).unwrap();
        if i == SPILL {
            println!("WRITING");
        }
    }
}

#[test]
fn a_writer_killed_mid_transaction_leaves_a_whole_database() {
    let tmp = TempPath::new("redb-crash");
    let committed = kill_mid_write(
        module_path!(),
        "child_commits_then_writes_forever",
        CRASH_ENV,
        &tmp.path,
    );
    assert_eq!(committed, 3, "the child committed three transactions first");

    let c = TestCache::bytes(MIB).build();
    let mut db = Database::builder()
        .create_with_backend(FolioBackend::open(&c, &tmp.path).unwrap())
        .unwrap();
    assert!(db.check_integrity().unwrap(), "integrity after the crash");
    let rx = db.begin_read().unwrap();
    let t = rx.open_table(TABLE).unwrap();
    assert_eq!(
        t.len().unwrap(),
        3 * PER_TX,
        "the committed entries, no more"
    );
    for i in 0..3 * PER_TX {
        assert_eq!(t.get(i).unwrap().unwrap().value(), i * 7, "entry {i}");
    }
}
