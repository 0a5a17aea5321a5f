//! Whether an open database's sidecar files exist: its rollback journal
//! (`<db>-journal`) and its WAL (`<db>-wal`), so that the checks SQLite
//! makes at the start of every read transaction cost no system call.
//!
//! # Why
//! Each time a connection takes its SHARED lock, SQLite's pager asks the
//! VFS whether the journal exists (`hasHotJournal`: a journal left by a
//! writer that died must be rolled back before anyone reads) and whether
//! a WAL does (`pagerOpenWalIfPresent`): two `xAccess` calls, each a
//! `stat` of a missing file through the `unix` VFS. With the database in
//! foliocache's cache they were the only system calls of a read
//! transaction, and a large part of a short one.
//!
//! # Why the answers can be kept
//! While any connection of this process has a database open through the
//! VFS, the process holds the database's `flock` (see `lock.rs`): no other
//! process opens it through this VFS, so none creates or removes its
//! sidecars. Every connection of this process creates a sidecar through
//! the VFS's `xOpen` and removes it through its `xDelete`, and each tells
//! this table after its system call ([`Sidecars::created`],
//! [`Sidecars::deleted`]). So once the filesystem has answered for a
//! sidecar, the table knows the answer until the database's lock table
//! ([`Inode`]) goes with its last connection; the next open asks the
//! filesystem again (another process may have run in between, and may
//! have died leaving a hot journal). A process or a connection opening
//! the database through another VFS meanwhile is outside the VFS's
//! contract (the crate documentation's locking section), as it already is
//! for the locks.
//!
//! What is not known is asked of the filesystem: before any check, after
//! a create or delete that failed (the file may or may not be there), and
//! for a file opened to be deleted at close (`SQLITE_OPEN_DELETEONCLOSE`:
//! the base VFS removes it itself). A check's answer is kept only if no
//! create or delete of that sidecar came between the check and its
//! recording (a version number): a check that raced a create cannot
//! leave a stale "missing" behind it, which would hide a hot journal.
//!
//! Names are matched as SQLite makes them: the database's name as `xOpen`
//! got it, with `-journal` or `-wal` appended. Any other name (a
//! super-journal, a temporary file, a database not open) goes to the
//! filesystem.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::lock::Inode;

/// The suffixes of the sidecars tracked, in the order of `Entry::known`.
const SUFFIXES: [&[u8]; 2] = [b"-journal", b"-wal"];

/// What the table says of a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Whether it exists, known without a system call.
    Known(bool),
    /// Not known: ask the filesystem, and give its answer to
    /// [`Sidecars::learned`] with this token (`None`: not a sidecar the
    /// table tracks, nothing to record).
    Ask(Option<Token>),
}

/// A check's place in a sidecar's history: its answer is recorded only
/// if nothing changed the sidecar since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token {
    version: u64,
}

/// One database name's sidecars.
#[derive(Debug)]
struct Entry {
    /// The database's lock table: the answers hold while it lives (the
    /// process holds the `flock`).
    inode: Weak<Inode>,
    /// Per suffix: exists, is missing, or not known.
    known: [Option<bool>; 2],
    /// Per suffix: bumped at every create or delete.
    version: [u64; 2],
}

/// The sidecars of the databases open through one VFS, by database name.
#[derive(Debug, Default)]
pub(crate) struct Sidecars {
    names: Mutex<HashMap<Vec<u8>, Entry>>,
}

/// `name` as a database's name and the index of its sidecar suffix.
fn split(name: &[u8]) -> Option<(&[u8], usize)> {
    SUFFIXES
        .iter()
        .enumerate()
        .find_map(|(i, s)| Some((name.strip_suffix(*s)?, i)))
        .filter(|(db, _)| !db.is_empty())
}

impl Sidecars {
    fn names(&self) -> MutexGuard<'_, HashMap<Vec<u8>, Entry>> {
        self.names.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The database `db` was opened by a connection, under the lock table
    /// `inode`: its sidecars are tracked while `inode` lives. A first
    /// open (or the first since the last connection closed) knows
    /// nothing yet.
    pub(crate) fn opened(&self, db: &[u8], inode: &Arc<Inode>) {
        let mut names = self.names();
        names.retain(|_, e| e.inode.strong_count() > 0);
        let same = names
            .get(db)
            .and_then(|e| e.inode.upgrade())
            .is_some_and(|i| Arc::ptr_eq(&i, inode));
        if !same {
            names.insert(
                db.to_vec(),
                Entry {
                    inode: Arc::downgrade(inode),
                    known: [None; 2],
                    version: [0; 2],
                },
            );
        }
    }

    /// Runs `f` on the entry and suffix of sidecar `name`, if its
    /// database is open.
    fn with<R>(&self, name: &[u8], f: impl FnOnce(&mut Entry, usize) -> R) -> Option<R> {
        let (db, i) = split(name)?;
        let mut names = self.names();
        let e = names.get_mut(db)?;
        if e.inode.strong_count() == 0 {
            names.remove(db);
            return None;
        }
        Some(f(e, i))
    }

    /// Whether `name` exists, if known.
    pub(crate) fn exists(&self, name: &[u8]) -> Lookup {
        self.with(name, |e, i| match e.known[i] {
            Some(b) => Lookup::Known(b),
            None => Lookup::Ask(Some(Token {
                version: e.version[i],
            })),
        })
        .unwrap_or(Lookup::Ask(None))
    }

    /// The filesystem's answer for `name`, asked with `token`: kept unless
    /// a create or delete came since.
    pub(crate) fn learned(&self, name: &[u8], token: Token, exists: bool) {
        self.with(name, |e, i| {
            if e.version[i] == token.version {
                e.known[i] = Some(exists);
            }
        });
    }

    /// Sets what is known of `name` after a create or delete.
    fn changed(&self, name: &[u8], now: Option<bool>) {
        self.with(name, |e, i| {
            e.known[i] = now;
            e.version[i] += 1;
        });
    }

    /// `name` was opened (created or found): it exists until deleted.
    pub(crate) fn created(&self, name: &[u8]) {
        self.changed(name, Some(true));
    }

    /// `name` was deleted, or found missing by a delete.
    pub(crate) fn deleted(&self, name: &[u8]) {
        self.changed(name, Some(false));
    }

    /// A create or delete of `name` failed, or it will go without a
    /// delete (deleted on close): whether it exists is asked again.
    pub(crate) fn unknown(&self, name: &[u8]) {
        self.changed(name, None);
    }
}

#[cfg(test)]
mod tests {
    use super::{split, Lookup, Sidecars};
    use crate::lock::Inode;
    use std::sync::Arc;

    fn ask(s: &Sidecars, name: &[u8]) -> super::Token {
        match s.exists(name) {
            Lookup::Ask(Some(t)) => t,
            other => panic!("{other:?} for {:?}", String::from_utf8_lossy(name)),
        }
    }

    #[test]
    fn names_split_on_the_tracked_suffixes_only() {
        assert_eq!(split(b"/d/a.db-journal"), Some((&b"/d/a.db"[..], 0)));
        assert_eq!(split(b"/d/a.db-wal"), Some((&b"/d/a.db"[..], 1)));
        assert_eq!(split(b"/d/a.db-mj0123"), None);
        assert_eq!(split(b"-wal"), None);
        assert_eq!(split(b"/d/a.db"), None);
    }

    #[test]
    fn an_answer_is_kept_while_the_database_is_open() {
        let s = Sidecars::default();
        let i = Arc::new(Inode::unlocked());
        assert_eq!(s.exists(b"/a-journal"), Lookup::Ask(None), "not open");
        s.opened(b"/a", &i);
        let t = ask(&s, b"/a-journal");
        s.learned(b"/a-journal", t, false);
        assert_eq!(s.exists(b"/a-journal"), Lookup::Known(false));
        // The WAL is its own entry.
        let t = ask(&s, b"/a-wal");
        s.learned(b"/a-wal", t, false);
        s.created(b"/a-journal");
        assert_eq!(s.exists(b"/a-journal"), Lookup::Known(true));
        s.deleted(b"/a-journal");
        assert_eq!(s.exists(b"/a-journal"), Lookup::Known(false));
        assert_eq!(s.exists(b"/a-wal"), Lookup::Known(false));
        // Another database's names are not this one's.
        assert_eq!(s.exists(b"/b-journal"), Lookup::Ask(None));
    }

    #[test]
    fn a_check_that_raced_a_create_or_delete_is_not_kept() {
        let s = Sidecars::default();
        let i = Arc::new(Inode::unlocked());
        s.opened(b"/a", &i);
        // The check saw no journal; a connection created it before the
        // answer was recorded: the answer is stale.
        let t = ask(&s, b"/a-journal");
        s.created(b"/a-journal");
        s.learned(b"/a-journal", t, false);
        assert_eq!(s.exists(b"/a-journal"), Lookup::Known(true));
        // A failed create or delete: not known; a check made before
        // another one failed is not kept either.
        s.unknown(b"/a-journal");
        let t = ask(&s, b"/a-journal");
        s.unknown(b"/a-journal");
        s.learned(b"/a-journal", t, false);
        let t = ask(&s, b"/a-journal");
        s.learned(b"/a-journal", t, true);
        assert_eq!(s.exists(b"/a-journal"), Lookup::Known(true));
    }

    #[test]
    fn nothing_is_known_once_the_last_connection_closed() {
        let s = Sidecars::default();
        let i = Arc::new(Inode::unlocked());
        s.opened(b"/a", &i);
        s.created(b"/a-journal");
        // A second connection to the same lock table keeps what is known.
        s.opened(b"/a", &i);
        assert_eq!(s.exists(b"/a-journal"), Lookup::Known(true));
        drop(i);
        // Another process may have run since: ask.
        assert_eq!(s.exists(b"/a-journal"), Lookup::Ask(None));
        let j = Arc::new(Inode::unlocked());
        s.opened(b"/a", &j);
        let _ = ask(&s, b"/a-journal");
    }
}
