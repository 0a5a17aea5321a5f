//! The VFS the tests use and the databases they make.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rusqlite::{Connection, OpenFlags};
use test_support::TempPath;

/// The VFS's name in this test process.
pub const VFS: &str = "foliocache-test";

/// The cache behind [`VFS`]: 4 MiB, smaller than the larger databases the
/// tests make, so reads miss and writes are written back under pressure.
pub fn cache() -> &'static foliocache::Cache {
    static CACHE: OnceLock<foliocache::Cache> = OnceLock::new();
    CACHE.get_or_init(|| {
        let c = foliocache::Cache::builder()
            .capacity(4 << 20)
            .build()
            .expect("a cache of 4 MiB");
        foliocache_sqlite::register(VFS, &c).expect("registering the VFS");
        c
    })
}

/// A database path that does not exist yet; the database and its journal
/// are removed when it drops.
pub struct Db {
    tmp: TempPath,
}

impl Db {
    pub fn new(tag: &str) -> Db {
        Db {
            tmp: TempPath::new(tag),
        }
    }

    pub fn path(&self) -> &Path {
        &self.tmp.path
    }

    /// A connection to it through the VFS.
    pub fn open(&self) -> Connection {
        open(self.path())
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let mut j: PathBuf = self.tmp.path.clone().into_os_string().into();
        j.as_mut_os_string().push("-journal");
        let _ = std::fs::remove_file(j);
    }
}

/// A connection to `path` through the VFS, with a busy timeout.
pub fn open(path: &Path) -> Connection {
    cache();
    let c = Connection::open_with_flags_and_vfs(path, OpenFlags::default(), VFS)
        .unwrap_or_else(|e| panic!("opening {} through the VFS: {e}", path.display()));
    c.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    c
}

/// `PRAGMA integrity_check`'s answer.
pub fn integrity(c: &Connection) -> String {
    c.query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check")
}
