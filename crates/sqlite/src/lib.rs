//! SQLite on foliocache: a VFS (SQLite's operating-system layer) that reads
//! and writes database files through a foliocache [`Cache`].
//!
//! # The problem
//! SQLite keeps only about 2 MiB of pages itself by default (`PRAGMA
//! cache_size`) and leans on the operating system's page cache for the
//! rest: each page it does not hold is a `pread` that the kernel serves
//! from its cache, with no bound on the memory the kernel gives it. The
//! foliocache VFS makes foliocache that cache: a page SQLite asks for is
//! a lookup and a copy with no system call, in a cache of the capacity the
//! program chooses; with `PRAGMA mmap_size` set, a page is not even
//! copied: SQLite reads it in place, pinned in the cache (`xFetch`, see
//! below).
//!
//! # Concepts
//! - [`register`] adds a VFS of a given name over a cache; open a database
//!   with it by name (`sqlite3_open_v2`'s `zVfs`, rusqlite's
//!   `Connection::open_with_flags_and_vfs`, a `vfs=` URI parameter), or
//!   make it SQLite's default ([`register_default`]).
//! - The database file goes through the cache (`O_DIRECT` underneath);
//!   its rollback journal, temporary files, statement journals and
//!   super-journals go to SQLite's default VFS (`unix`), whose methods
//!   they then use unchanged (a journal is written once per transaction
//!   and deleted at commit: a cache would only hold it, and cost each
//!   transaction an open through the cache and a writeback).
//! - `xSync` of the database is [`File::sync_data`]: every dirty page
//!   written back, then `fdatasync`; the journal's is the `unix` VFS's
//!   (with its directory `fsync`ed at its first sync). SQLite's
//!   durability is unchanged.
//! - `xFetch`/`xUnfetch` (SQLite's memory-mapped reads, used when `PRAGMA
//!   mmap_size` is above zero) are [`File::pin`]s: SQLite gets a pointer
//!   to the cached page and keeps the pin until it gives the pointer back.
//!   A pin is a snapshot of the page, so a write of it meanwhile goes to a
//!   copy and never changes what SQLite is reading. The `fetch` module's
//!   documentation has the ownership argument (a pin borrows its file;
//!   the VFS keeps both, and drops the pins first).
//!
//! # Locking
//! Within one process, every connection's locks on one database file go
//! through one lock table (per device and inode, as the `unix` VFS's
//! `unixInodeInfo`): SHARED for any number of readers, one connection at
//! a time RESERVED, PENDING or EXCLUSIVE, with SQLite's rules (no new
//! reader once a writer waits at PENDING; EXCLUSIVE once the other
//! readers have gone). A connection refused gets `SQLITE_BUSY`, and
//! SQLite's busy handler (`PRAGMA busy_timeout`) retries as with `unix`.
//!
//! Between processes: foliocache's cache is private to a process, so two
//! processes must never write one database through it. The VFS enforces
//! this for itself: the first connection of a process to open a database
//! takes an exclusive `flock` on the file, held while any of the
//! process's connections has it open; a second process opening it through
//! this VFS gets `SQLITE_BUSY`. A process using another VFS (the
//! `sqlite3` shell, which locks with `fcntl`) is **not** kept out: it must
//! not open the database while a process has it open through foliocache.
//! A process that dies releases its `flock` with its descriptors; the
//! next open rolls back a hot journal as usual.
//!
//! Rust-side locks: the lock table's mutex (per file), the pins' mutex
//! (per open file) and the sidecar table's (per VFS) are leaves, held for
//! a few instructions, never across IO; foliocache's own locks are taken
//! inside its calls.
//!
//! # A read transaction makes no system call
//! SQLite checks for the database's journal and WAL at the start of every
//! read transaction (`xAccess`). The VFS answers from what it knows of
//! them while the database is open (the process holds its `flock`, and
//! every create and delete of them goes through the VFS): the filesystem
//! is asked once per open, not once per transaction. docs/sqlite.md has
//! the argument.
//!
//! # WAL
//! WAL needs shared memory between the connections (`xShmMap` and
//! friends), which this VFS does not provide. `PRAGMA journal_mode=WAL`
//! fails with an error that says so (and SQLite would not enter WAL mode
//! on a VFS without shared memory in any case); the rollback journal modes
//! (DELETE, the default; TRUNCATE; PERSIST) work. A database already in
//! WAL mode (made by another VFS) cannot be opened through this one.
//!
//! # Example
//! ```
//! let cache = foliocache::Cache::builder().capacity(16 << 20).build()?;
//! foliocache_sqlite::register("foliocache-doc", &cache)?;
//! let dir = std::env::temp_dir().join(format!("fc-sqlite-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let conn = rusqlite::Connection::open_with_flags_and_vfs(
//!     dir.join("doc.db"),
//!     rusqlite::OpenFlags::default(),
//!     c"foliocache-doc",
//! )?;
//! conn.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (42);")?;
//! let x: i64 = conn.query_row("SELECT x FROM t", [], |r| r.get(0))?;
//! assert_eq!(x, 42);
//! # drop(conn);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Why directly over SQLite's C API
//! The VFS is written over `libsqlite3-sys` (through `rusqlite::ffi`),
//! not the `sqlite-plugin` crate: that crate generates its bindings with
//! `bindgen` at build time, which needs libclang on every machine that
//! builds it, and its `Vfs` trait hides the choice made here of handing
//! temporary files to the default VFS in the same file object. The C side
//! is one module (`vfs.rs`) of thin functions over safe parts (the lock
//! table, the pins), each unsafe block with its reason. rusqlite links
//! the system's libsqlite3 (Debian's `libsqlite3-dev`): no SQLite build.
//!
//! # When not to use it
//! - Several processes sharing a database (see Locking), or WAL mode.
//! - A database that fits in SQLite's own page cache (`PRAGMA
//!   cache_size`) and is read far more than written: SQLite's cache then
//!   serves every read.

#![deny(unsafe_code)]
#![warn(missing_docs)]

use std::io;

use foliocache::Cache;

// Unsafe: a pin's borrow of its file, kept beside the file for SQLite.
#[allow(unsafe_code)]
mod fetch;
mod lock;
mod sidecar;
// Unsafe: SQLite's C VFS interface.
#[allow(unsafe_code)]
mod vfs;

#[cfg(doc)]
use foliocache::File;

/// Registers a SQLite VFS named `name` whose database files go through
/// `cache` (a clone of it is kept until [`unregister`]).
///
/// # Errors
/// `AlreadyExists` if SQLite has a VFS of that name; `InvalidInput` for a
/// name with a NUL byte; an error if SQLite fails to initialise or to
/// register it.
pub fn register(name: &str, cache: &Cache) -> io::Result<()> {
    vfs::register(name, cache.clone(), false)
}

/// [`register`], and makes the VFS SQLite's default: connections opened
/// without naming a VFS use it.
///
/// # Errors
/// As [`register`].
pub fn register_default(name: &str, cache: &Cache) -> io::Result<()> {
    vfs::register(name, cache.clone(), true)
}

/// Unregisters the VFS named `name` (made by [`register`]) and drops its
/// clone of the cache, so that the cache's memory goes once the caller's
/// clones do; the name can be registered again. A few hundred bytes of the
/// VFS's tables stay allocated: a connection closed late may still call
/// them (an open through them fails).
///
/// # Errors
/// `NotFound` if no VFS of that name was registered here;
/// `ResourceBusy` while any of its files is open (close its connections
/// first).
pub fn unregister(name: &str) -> io::Result<()> {
    vfs::unregister(name)
}
