//! Handles: what C holds instead of pointers. A table maps each live
//! handle to its object, as the kernel's file table maps descriptors, so
//! that a handle used after it was closed, closed twice, never opened, or
//! of the wrong kind is an `EBADF` and never a dangling pointer.
//!
//! Handles are never reused: one counter numbers the handles of every
//! table, so a stale handle cannot name a newer object, and a cache's
//! handle passed as a file's names no file. A lookup clones the object's
//! `Arc` out of the table, so a call runs on its object even if another
//! thread closes the handle meanwhile; the object goes when the last call
//! using it returns. Tables are sharded by handle, each shard behind its
//! own lock, held only for a map operation (never while an object drops:
//! a file's drop writes its dirty data back).
//!
//! Handles belong to the process that made them. A child of `fork()` has
//! a copy of the tables but not the caches' threads, and a file's writes
//! or close there would write the parent's file behind its back (its
//! size as cached at the fork, its dirty data twice): every handle
//! records the process that made it, and any use from another process is
//! an `EBADF` that says so. The current process is known without a system
//! call: a `pthread_atfork` handler updates it in each child. The tables'
//! locks are taken around each fork, so that the child finds none held.

use std::any::Any;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use crate::error::{Error, Result};

/// Shards of a table: calls on different handles take different locks.
const SHARDS: usize = 16;

/// The next handle to give out, in any table (handles start at 1).
static NEXT_HANDLE: AtomicI64 = AtomicI64::new(1);

/// This process's id, set when the first handle is made and in each
/// child of `fork()` by [`after_fork_in_child`] (0 before the first
/// handle).
static PID: AtomicI32 = AtomicI32::new(0);

/// This process's id, from [`PID`].
fn this_process() -> i32 {
    match PID.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: `getpid` has no preconditions.
            let pid = unsafe { libc::getpid() };
            PID.store(pid, Ordering::Relaxed);
            pid
        }
        pid => pid,
    }
}

thread_local! {
    /// The shard locks a fork's `prepare` handler took, which its parent
    /// and child handlers release: they run in the forking thread, and
    /// the child's one thread is a copy of it.
    static FORK_GUARDS: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

/// The parent's fork handler: releases the tables' locks.
extern "C" fn after_fork_in_parent() {
    // (During the thread's exit the guards are gone already.)
    let _ = FORK_GUARDS.try_with(|g| g.borrow_mut().clear());
}

/// Whether this process is a child of `fork()` made after this library
/// made a cache (set by [`after_fork_in_child`]).
static FORKED: AtomicBool = AtomicBool::new(false);

/// The child's fork handler: records its pid and that it is a child, and
/// releases the tables' locks (a futex word each: no other lock is needed
/// to release them).
extern "C" fn after_fork_in_child() {
    // SAFETY: `getpid` has no preconditions.
    PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    FORKED.store(true, Ordering::Relaxed);
    after_fork_in_parent();
}

/// `EPERM` in a child of `fork()` made after this library made a cache:
/// the parent's cache threads may have held locks of the library's
/// (parking_lot's, the allocator's of the arena) at the fork, which stay
/// held in the child, so a cache made there could hang. POSIX allows a
/// child of a multithreaded process only async-signal-safe calls until it
/// execs; the parent's handles are refused anyway ([`Table::get`]).
pub(crate) fn check_not_forked() -> Result<()> {
    if FORKED.load(Ordering::Relaxed) {
        return Err(Error::new(
            libc::EPERM,
            format!(
                "foliocache: process {} is a child of fork() made after its parent made a cache: \
                 it cannot make caches (exec, or make them before any cache is made)",
                this_process()
            ),
        ));
    }
    Ok(())
}

/// Registers the fork handlers, once: `prepare`, which locks every table
/// ([`Table::lock_for_fork`]) so that no other thread holds a table's lock
/// when the child is made (the child would wait for it forever), and this
/// module's parent and child handlers. `ENOMEM` if they cannot be
/// registered (then no cache is made, since a child could not be told from
/// its parent).
pub(crate) fn at_fork(prepare: extern "C" fn()) -> Result<()> {
    static REGISTERED: OnceLock<i32> = OnceLock::new();
    let r = *REGISTERED.get_or_init(|| {
        this_process();
        // SAFETY: the handlers are functions of this library, which is
        // never unloaded while its handles live (glibc's `pthread_atfork`
        // also forgets the handlers of a library when it is unloaded).
        unsafe {
            libc::pthread_atfork(
                Some(prepare),
                Some(after_fork_in_parent),
                Some(after_fork_in_child),
            )
        }
    });
    if r != 0 {
        return Err(Error::new(
            r,
            "foliocache: cannot register the fork handlers (pthread_atfork)",
        ));
    }
    Ok(())
}

/// An object of a table and the process that made its handle.
struct Entry<T> {
    pid: i32,
    object: Arc<T>,
}

/// A table of live handles to objects of one kind.
pub(crate) struct Table<T> {
    /// What the objects are, for messages ("cache", "file").
    what: &'static str,
    shards: [RwLock<BTreeMap<i64, Entry<T>>>; SHARDS],
}

impl<T> Table<T> {
    /// An empty table of `what`s.
    pub(crate) const fn new(what: &'static str) -> Self {
        Table {
            what,
            shards: [const { RwLock::new(BTreeMap::new()) }; SHARDS],
        }
    }

    fn shard(&self, handle: i64) -> &RwLock<BTreeMap<i64, Entry<T>>> {
        &self.shards[handle.unsigned_abs() as usize % SHARDS]
    }

    fn bad(&self, handle: i64) -> Error {
        Error::new(
            libc::EBADF,
            format!(
                "foliocache: {handle} is not an open {} handle (closed, or never opened)",
                self.what
            ),
        )
    }

    /// `EBADF` for a handle of process `pid` used in this one, its child.
    fn forked(&self, handle: i64, pid: i32) -> Error {
        Error::new(
            libc::EBADF,
            format!(
                "foliocache: {} handle {handle} belongs to process {pid}: a child of fork() \
                 cannot use its parent's handles (open its own)",
                self.what
            ),
        )
    }

    /// The entry of `handle` found in the table, if it is this process's.
    fn live<'a>(&self, handle: i64, entry: Option<&'a Entry<T>>) -> Result<&'a Entry<T>> {
        match entry {
            None => Err(self.bad(handle)),
            Some(e) if e.pid != PID.load(Ordering::Relaxed) => Err(self.forked(handle, e.pid)),
            Some(e) => Ok(e),
        }
    }

    /// Before a fork (the `prepare` handler of [`at_fork`]): takes the
    /// lock of every shard, in order, until the fork's parent and child
    /// handlers release them.
    pub(crate) fn lock_for_fork(&'static self)
    where
        T: 'static,
    {
        for shard in &self.shards {
            let guard = shard.write().unwrap_or_else(PoisonError::into_inner);
            let _ = FORK_GUARDS.try_with(|g| g.borrow_mut().push(Box::new(guard)));
        }
    }

    /// Adds `object` to the table and returns its new handle (`EMFILE`
    /// once every handle has been given out).
    pub(crate) fn insert(&self, object: T) -> Result<i64> {
        let pid = this_process();
        // Past `i64::MAX` the counter wraps to negative handles: refused
        // (2^63 handles later, which no process reaches).
        let handle = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
        if handle <= 0 {
            return Err(Error::new(libc::EMFILE, "foliocache: out of handles"));
        }
        self.shard(handle)
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                handle,
                Entry {
                    pid,
                    object: Arc::new(object),
                },
            );
        Ok(handle)
    }

    /// The object of `handle` (`EBADF` if it names none in this table, or
    /// one of another process).
    pub(crate) fn get(&self, handle: i64) -> Result<Arc<T>> {
        let shard = self
            .shard(handle)
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(self.live(handle, shard.get(&handle))?.object.clone())
    }

    /// Takes `handle` out of the table and returns its object, to drop
    /// once the table's lock is released (`EBADF` if it names none, or one
    /// of another process: that stays, never dropped in this one).
    pub(crate) fn remove(&self, handle: i64) -> Result<Arc<T>> {
        let mut shard = self
            .shard(handle)
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        self.live(handle, shard.get(&handle))?;
        let entry = shard.remove(&handle).ok_or_else(|| self.bad(handle))?;
        Ok(entry.object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn insert_get_remove() {
        let t = Table::new("thing");
        let a = t.insert(10).unwrap();
        let b = t.insert(20).unwrap();
        assert!(a > 0 && b > a);
        assert_eq!(*t.get(a).unwrap(), 10);
        assert_eq!(*t.get(b).unwrap(), 20);
        assert_eq!(*t.remove(a).unwrap(), 10);
        let e = t.get(a).unwrap_err();
        assert_eq!(e.errno, libc::EBADF);
        assert!(e.message.contains("thing"), "{}", e.message);
        assert_eq!(t.remove(a).unwrap_err().errno, libc::EBADF);
        assert_eq!(*t.get(b).unwrap(), 20);
    }

    #[test]
    fn bad_handles_are_ebadf() {
        let t: Table<u8> = Table::new("thing");
        for h in [0, -1, i64::MIN, i64::MAX, 12345] {
            assert_eq!(t.get(h).unwrap_err().errno, libc::EBADF);
            assert_eq!(t.remove(h).unwrap_err().errno, libc::EBADF);
        }
    }

    #[test]
    fn handles_are_never_reused_across_tables() {
        let caches = Table::new("cache");
        let files = Table::new("file");
        let c = caches.insert(1).unwrap();
        caches.remove(c).unwrap();
        let f = files.insert(2).unwrap();
        assert_ne!(c, f);
        assert_eq!(caches.get(f).unwrap_err().errno, libc::EBADF);
        assert_eq!(files.get(c).unwrap_err().errno, libc::EBADF);
    }

    /// Counts its drops.
    struct Tracked<'a>(&'a AtomicUsize);

    impl Drop for Tracked<'_> {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn an_object_outlives_its_handle_while_in_use() {
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        let t = Table::new("thing");
        let h = t.insert(Tracked(&DROPS)).unwrap();
        let in_use = t.get(h).unwrap();
        drop(t.remove(h).unwrap());
        assert_eq!(DROPS.load(Ordering::Relaxed), 0);
        drop(in_use);
        assert_eq!(DROPS.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn concurrent_use_and_close() {
        let t = Table::new("thing");
        let handles: Vec<i64> = (0..64).map(|i| t.insert(i).unwrap()).collect();
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for &h in &handles {
                        match t.get(h) {
                            Ok(v) => assert!(*v < 64),
                            Err(e) => assert_eq!(e.errno, libc::EBADF),
                        }
                    }
                });
            }
            s.spawn(|| {
                for &h in &handles {
                    t.remove(h).unwrap();
                }
            });
        });
        for &h in &handles {
            assert_eq!(t.get(h).unwrap_err().errno, libc::EBADF);
        }
    }
}
