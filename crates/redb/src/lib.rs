//! redb on foliocache: a [`redb::StorageBackend`] over a foliocache
//! [`File`].
//!
//! # The problem
//! redb keeps its own page cache (`Builder::set_cache_size`, 1 GiB by
//! default: a striped LRU of page copies and a write buffer) over a
//! `FileBackend`, which reads and writes with `pread`/`pwrite`. Every page
//! it holds is then cached twice, once by redb and once by the kernel, and
//! the memory the database takes is whatever the kernel lets the page cache
//! grow to. Users who open the file with `O_DIRECT` instead, for a bound on
//! memory, lose the kernel's write-behind: commits stall in `pwrite` while
//! redb flushes.
//!
//! [`FolioBackend`] puts foliocache under redb: the data is cached once,
//! in a cache of a capacity the program chooses, reads that hit cost a
//! lookup and a copy with no system call, and writes are written back
//! behind the commit (a commit's `sync_data` writes back and `fdatasync`s,
//! so durability is redb's as over a file). Give redb a small cache of its
//! own (`set_cache_size`, a few MiB for its write buffer) and foliocache
//! the memory.
//!
//! # Concepts
//! - [`FolioBackend::open`] opens (or creates) a database file through a
//!   [`Cache`] and takes an exclusive advisory lock (`flock`) on it, held
//!   until redb closes the backend: a second open of the same file, from
//!   this process or another, fails with `WouldBlock`, as redb's own
//!   `FileBackend` refuses a second writer.
//! - [`FolioBackend::from_file`] wraps a [`File`] already open (a memory
//!   file, a file opened with other options): no lock; the caller makes
//!   sure nothing else writes the file.
//! - The backend implements none of redb's byte-range lock methods: redb
//!   then runs in its `ExclusiveWriter` concurrency mode (one process owns
//!   the database), which the file lock enforces.
//!
//! # redb's contract, and how it is kept
//! | method | contract | here |
//! |---|---|---|
//! | `len` | the storage's length | [`File::len`], the cache's size (writes past the end and `set_len` change it at once) |
//! | `read` | fails if `offset + len` is past the end | checked against `len` first: `UnexpectedEof`; else [`File::read_exact_at`] |
//! | `set_len` | new bytes read as zeros | [`File::set_len`]: growth is a hole that reads as zeros |
//! | `write` | writes all of `data` | [`File::write_all_at`] (a dirty folio in the cache; written back later) |
//! | `sync_data` | all written data durable | [`File::sync_data`]: writes back every dirty folio, then `fdatasync`; a writeback error met earlier by the flusher is reported here |
//! | `close` | releases the locks | drops the file lock; the last handle's drop writes the dirty data back |
//!
//! # Locking
//! The backend holds no lock of its own: each method is one call of
//! [`File`], which takes the cache's locks as `foliocache`'s crate
//! documentation orders them. redb calls it from any thread.
//!
//! # Example
//! ```
//! use redb::{Database, ReadableDatabase, TableDefinition};
//! const TABLE: TableDefinition<&str, u64> = TableDefinition::new("t");
//!
//! let cache = foliocache::Cache::builder().capacity(16 << 20).build()?;
//! let file = cache.memfile("db", 0)?;
//! let db = Database::builder()
//!     .set_cache_size(1 << 20)
//!     .create_with_backend(foliocache_redb::FolioBackend::from_file(file))?;
//! let tx = db.begin_write()?;
//! tx.open_table(TABLE)?.insert("answer", 42)?;
//! tx.commit()?;
//! let rx = db.begin_read()?;
//! assert_eq!(rx.open_table(TABLE)?.get("answer")?.unwrap().value(), 42);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # When not to use it
//! - Several processes sharing one database (redb's `MultiProcess`
//!   concurrency modes): foliocache is coherent within one process only.
//! - A database that fits in redb's own cache and is read far more than
//!   written: redb's cache of decoded pages then serves every read, and a
//!   second cache under it only costs memory.

#![deny(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Mutex;

use foliocache::{Cache, File};
use redb::StorageBackend;

/// A redb [`StorageBackend`] over a foliocache [`File`]: see the crate
/// documentation.
pub struct FolioBackend {
    file: File,
    /// The `flock`ed descriptor that keeps a second open out, until
    /// [`close`](StorageBackend::close) (`None` for
    /// [`from_file`](Self::from_file), and after close).
    lock: Mutex<Option<std::fs::File>>,
}

impl FolioBackend {
    /// Opens (creating it if missing) the database file at `path` through
    /// `cache`, for reading and writing, and locks it exclusively
    /// (`flock`) until redb closes the backend.
    ///
    /// # Errors
    /// `WouldBlock` if the file is locked already (another backend, in
    /// this process or another, or redb's own `FileBackend`, has it open);
    /// the OS error of opening it.
    pub fn open(cache: &Cache, path: impl AsRef<Path>) -> io::Result<FolioBackend> {
        let path = path.as_ref();
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "{} is open already (locked by another database handle): close it first",
                        path.display()
                    ),
                ))
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
        let file = cache.open_options().read(true).write(true).open(path)?;
        Ok(FolioBackend {
            file,
            lock: Mutex::new(Some(lock)),
        })
    }

    /// A backend over `file`, which must be writable, without a lock: the
    /// caller keeps other writers away from the file.
    pub fn from_file(file: File) -> FolioBackend {
        FolioBackend {
            file,
            lock: Mutex::new(None),
        }
    }

    /// The file underneath.
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl fmt::Debug for FolioBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FolioBackend")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl StorageBackend for FolioBackend {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.len())
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let len = self.file.len();
        match offset.checked_add(out.len() as u64) {
            Some(end) if end <= len => self.file.read_exact_at(out, offset),
            _ => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "read of {} bytes at {offset} past the end of the storage ({len} bytes)",
                    out.len()
                ),
            )),
        }
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }

    fn close(&self) -> io::Result<()> {
        // Dropping the descriptor releases its flock.
        let lock = self.lock.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(lock);
        Ok(())
    }
}
