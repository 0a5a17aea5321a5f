//! SQLite's file locks between the connections of one process: a lock
//! table per database file (device, inode), as the `unix` VFS keeps one
//! (`unixInodeInfo`) under its POSIX locks.
//!
//! # The levels
//! ```text
//!   NONE ──> SHARED ──> RESERVED ──> (PENDING) ──> EXCLUSIVE
//!   readers:  any number hold SHARED
//!   writer:   one connection at a time holds RESERVED, PENDING or EXCLUSIVE
//! ```
//! - SHARED is refused (BUSY) while a writer holds PENDING or EXCLUSIVE:
//!   a writer waiting for the readers to go keeps new ones out.
//! - RESERVED is refused while another connection is the writer.
//! - EXCLUSIVE first takes PENDING (refused if another connection is the
//!   writer), then is granted once no other connection holds SHARED; if
//!   readers remain, the call fails with BUSY and leaves the connection at
//!   PENDING, as the `unix` VFS does, so that SQLite retries from there.
//!
//! Between processes, the table's [`Inode`] holds an exclusive `flock` on
//! the file (see [`Inode::new`]): one process at a time has the database
//! open through this VFS.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// A lock level of SQLite's (`SQLITE_LOCK_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    /// No lock.
    None,
    /// Reading.
    Shared,
    /// About to write: one writer, readers still welcome.
    Reserved,
    /// Waiting for the readers to go: no new ones.
    Pending,
    /// Writing the database file: no readers.
    Exclusive,
}

impl Level {
    /// The level of SQLite's `SQLITE_LOCK_*` number, if it is one.
    pub(crate) fn from_raw(raw: i32) -> Option<Level> {
        Some(match raw {
            0 => Level::None,
            1 => Level::Shared,
            2 => Level::Reserved,
            3 => Level::Pending,
            4 => Level::Exclusive,
            _ => return None,
        })
    }
}

/// A lock request that another connection's lock refuses (SQLite's
/// `SQLITE_BUSY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Busy;

/// The lock state of one database file, shared by every connection of the
/// process that has it open.
#[derive(Debug, Default)]
struct State {
    /// Connections holding SHARED or more.
    readers: u32,
    /// The connection holding RESERVED, PENDING or EXCLUSIVE, and which.
    writer: Option<(u64, Level)>,
}

/// One database file's lock table, and the `flock` that keeps other
/// processes out while any connection of this one has the file open.
#[derive(Debug)]
pub(crate) struct Inode {
    state: Mutex<State>,
    /// Held (`flock(LOCK_EX)`) for the `Inode`'s life; `None` in the lock
    /// table's own tests.
    _flock: Option<std::fs::File>,
}

impl Inode {
    /// The table of the file at `path`, with its `flock` taken.
    ///
    /// # Errors
    /// `WouldBlock` when another process holds the file's `flock` (has the
    /// database open through this VFS); the OS error of opening it.
    pub(crate) fn new(path: &Path) -> io::Result<Inode> {
        let f = std::fs::OpenOptions::new().read(true).open(path)?;
        match f.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "{} is open through the foliocache VFS in another process",
                        path.display()
                    ),
                ))
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
        Ok(Inode {
            state: Mutex::default(),
            _flock: Some(f),
        })
    }

    /// A table with no `flock`, for tests of the levels alone.
    #[cfg(test)]
    pub(crate) fn unlocked() -> Inode {
        Inode {
            state: Mutex::default(),
            _flock: None,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Raises connection `conn`'s lock from `held` to `want` (SQLite's
    /// `xLock`: `want` is SHARED, RESERVED or EXCLUSIVE, and above
    /// `held`). Returns the level the connection holds afterwards: `want`,
    /// or, refused, `held` (or PENDING, on the way to EXCLUSIVE) with
    /// [`Busy`].
    pub(crate) fn lock(&self, conn: u64, held: Level, want: Level) -> (Level, Result<(), Busy>) {
        if want <= held {
            return (held, Ok(()));
        }
        let mut s = self.state();
        let other_writer = s.writer.filter(|&(c, _)| c != conn);
        match want {
            Level::None => (held, Ok(())),
            Level::Shared => {
                if other_writer.is_some_and(|(_, l)| l >= Level::Pending) {
                    return (held, Err(Busy));
                }
                s.readers += 1;
                (Level::Shared, Ok(()))
            }
            Level::Reserved => {
                if held < Level::Shared || other_writer.is_some() {
                    return (held, Err(Busy));
                }
                s.writer = Some((conn, Level::Reserved));
                (Level::Reserved, Ok(()))
            }
            Level::Pending | Level::Exclusive => {
                if held < Level::Shared || other_writer.is_some() {
                    return (held, Err(Busy));
                }
                s.writer = Some((conn, Level::Pending));
                // This connection is one of the readers.
                if s.readers > 1 {
                    return (Level::Pending, Err(Busy));
                }
                s.writer = Some((conn, want));
                (want, Ok(()))
            }
        }
    }

    /// Lowers connection `conn`'s lock from `held` to `to` (SQLite's
    /// `xUnlock`: `to` is SHARED or NONE). Returns the new level.
    pub(crate) fn unlock(&self, conn: u64, held: Level, to: Level) -> Level {
        if to >= held {
            return held;
        }
        let mut s = self.state();
        if held >= Level::Reserved && s.writer.is_some_and(|(c, _)| c == conn) {
            s.writer = None;
        }
        if to == Level::None && held >= Level::Shared {
            s.readers = s.readers.saturating_sub(1);
        }
        to
    }

    /// Whether any connection holds RESERVED or more (SQLite's
    /// `xCheckReservedLock`).
    pub(crate) fn reserved(&self) -> bool {
        self.state().writer.is_some()
    }
}

/// The process's lock tables, one per open database file, keyed by
/// (device, inode): a file open under two names shares one table.
#[derive(Debug, Default)]
pub(crate) struct Inodes {
    open: Mutex<HashMap<(u64, u64), Weak<Inode>>>,
}

impl Inodes {
    /// The table of the file at `path` (device and inode `key`), made if
    /// no connection has it open.
    ///
    /// # Errors
    /// As [`Inode::new`].
    pub(crate) fn get(&self, key: (u64, u64), path: &Path) -> io::Result<Arc<Inode>> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = open.get(&key).and_then(Weak::upgrade) {
            return Ok(i);
        }
        open.retain(|_, w| w.strong_count() > 0);
        let i = Arc::new(Inode::new(path)?);
        open.insert(key, Arc::downgrade(&i));
        Ok(i)
    }
}

#[cfg(test)]
mod tests {
    use super::{Busy, Inode, Level::*};

    #[test]
    fn readers_share() {
        let i = Inode::unlocked();
        assert_eq!(i.lock(1, None, Shared), (Shared, Ok(())));
        assert_eq!(i.lock(2, None, Shared), (Shared, Ok(())));
        assert!(!i.reserved());
    }

    #[test]
    fn one_writer_reserves_and_readers_stay() {
        let i = Inode::unlocked();
        let _ = i.lock(1, None, Shared);
        let _ = i.lock(2, None, Shared);
        assert_eq!(i.lock(1, Shared, Reserved), (Reserved, Ok(())));
        assert!(i.reserved());
        assert_eq!(
            i.lock(2, Shared, Reserved),
            (Shared, Err(Busy)),
            "a second writer"
        );
        assert_eq!(
            i.lock(3, None, Shared),
            (Shared, Ok(())),
            "a reader beside RESERVED"
        );
    }

    #[test]
    fn exclusive_waits_at_pending_for_readers_and_keeps_new_ones_out() {
        let i = Inode::unlocked();
        let _ = i.lock(1, None, Shared);
        let _ = i.lock(2, None, Shared);
        let _ = i.lock(1, Shared, Reserved);
        assert_eq!(i.lock(1, Reserved, Exclusive), (Pending, Err(Busy)));
        assert_eq!(
            i.lock(3, None, Shared),
            (None, Err(Busy)),
            "no new reader at PENDING"
        );
        assert_eq!(i.unlock(2, Shared, None), None);
        assert_eq!(i.lock(1, Pending, Exclusive), (Exclusive, Ok(())));
        assert_eq!(
            i.lock(3, None, Shared),
            (None, Err(Busy)),
            "no reader at EXCLUSIVE"
        );
        assert_eq!(i.unlock(1, Exclusive, Shared), Shared);
        assert!(!i.reserved());
        assert_eq!(i.lock(3, None, Shared), (Shared, Ok(())));
    }

    #[test]
    fn unlock_to_none_releases_the_reader() {
        let i = Inode::unlocked();
        let _ = i.lock(1, None, Shared);
        let _ = i.lock(1, Shared, Exclusive);
        assert_eq!(i.unlock(1, Exclusive, None), None);
        let _ = i.lock(2, None, Shared);
        assert_eq!(
            i.lock(2, Shared, Exclusive),
            (Exclusive, Ok(())),
            "no reader left"
        );
    }
}
