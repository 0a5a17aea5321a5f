//! The table of intercepted fds: an entry per fd the cache serves (its
//! open file description's part, shared by duplicates), sharded by fd
//! number, with a bit per fd read without a lock.

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::through::holding;

/// Shards of the fd table.
const SHARDS: usize = 16;

/// The fds the table can hold: those numbered this or more are never
/// served (Linux's default ceiling of `RLIMIT_NOFILE`, `fs.nr_open`).
pub(crate) const MAX_FDS: usize = 1 << 20;

/// The intercepted fds, sharded by number. A shard's lock is held only
/// for a map operation (and the real call that closes or replaces the
/// fd), never across a call into the cache.
pub(crate) struct Table<T> {
    pub(crate) shards: [RwLock<BTreeMap<c_int, Arc<T>>>; SHARDS],
    /// Entries in all shards: 0 lets every call pass through unlocked.
    pub(crate) count: AtomicUsize,
    /// One bit an fd, set while it has an entry (changed under its
    /// shard's lock): a call on an fd whose bit is clear passes through
    /// with no lock taken and no allocation, as async-signal-safe as
    /// the C library's call.
    marks: [AtomicU64; MAX_FDS / 64],
}

impl<T> Table<T> {
    /// An empty table.
    pub(crate) const fn new() -> Table<T> {
        Table {
            shards: [const { RwLock::new(BTreeMap::new()) }; SHARDS],
            count: AtomicUsize::new(0),
            marks: [const { AtomicU64::new(0) }; MAX_FDS / 64],
        }
    }

    fn shard(&self, fd: c_int) -> &RwLock<BTreeMap<c_int, Arc<T>>> {
        &self.shards[fd.unsigned_abs() as usize % SHARDS]
    }

    /// Whether `fd` has an entry, read with no lock.
    pub(crate) fn marked(&self, fd: c_int) -> bool {
        let Ok(n) = usize::try_from(fd) else {
            return false;
        };
        n < MAX_FDS && self.marks[n / 64].load(Ordering::Acquire) & (1 << (n % 64)) != 0
    }

    /// Whether any fd in `first..=last` has an entry, read with no lock.
    pub(crate) fn any_marked(&self, first: c_int, last: c_int) -> bool {
        let (Ok(first), Ok(last)) = (usize::try_from(first), usize::try_from(last)) else {
            return false;
        };
        if first >= MAX_FDS || first > last {
            return false;
        }
        let last = last.min(MAX_FDS - 1);
        (first / 64..=last / 64).any(|w| {
            let lo = if w == first / 64 { first % 64 } else { 0 };
            let hi = if w == last / 64 { last % 64 } else { 63 };
            let mask = (u64::MAX >> (63 - hi)) & (u64::MAX << lo);
            self.marks[w].load(Ordering::Acquire) & mask != 0
        })
    }

    /// Sets or clears `fd`'s bit (under its shard's lock; `fd` is below
    /// [`MAX_FDS`], see [`servable`]).
    fn mark(&self, fd: c_int, on: bool) {
        let n = fd as usize;
        if n >= MAX_FDS {
            return;
        }
        let bit = 1u64 << (n % 64);
        if on {
            self.marks[n / 64].fetch_or(bit, Ordering::AcqRel);
        } else {
            self.marks[n / 64].fetch_and(!bit, Ordering::AcqRel);
        }
    }

    pub(crate) fn get(&self, fd: c_int) -> Option<Arc<T>> {
        if !self.marked(fd) {
            return None;
        }
        holding(|| self.shard(fd).read().get(&fd).cloned())
    }

    /// Sets `fd`'s entry (`None`: removes it); returns the one it had.
    pub(crate) fn set(&self, fd: c_int, desc: Option<Arc<T>>) -> Option<Arc<T>> {
        self.set_around(fd, desc, || (0, true)).1
    }

    /// Runs `call`, a real call that closes `fd` or puts another file on
    /// it, with `fd`'s shard locked, and sets `fd`'s entry to `desc` in
    /// the same hold when `call` says so (its result, and whether it
    /// changed the fd): no other thread finds an entry for an fd that no
    /// longer holds its file, nor loses the fresh entry of a file opened
    /// on the number meanwhile. Returns the result and the entry `fd`
    /// had.
    pub(crate) fn set_around(
        &self,
        fd: c_int,
        desc: Option<Arc<T>>,
        call: impl FnOnce() -> (c_int, bool),
    ) -> (c_int, Option<Arc<T>>) {
        holding(|| {
            let mut shard = self.shard(fd).write();
            let (r, changed) = call();
            if !changed {
                return (r, None);
            }
            let old = match desc {
                Some(d) => {
                    self.mark(fd, true);
                    let old = shard.insert(fd, d);
                    if old.is_none() {
                        self.count.fetch_add(1, Ordering::AcqRel);
                    }
                    old
                }
                None => {
                    self.mark(fd, false);
                    shard.remove(&fd)
                }
            };
            if old.is_some() && !shard.contains_key(&fd) {
                self.count.fetch_sub(1, Ordering::AcqRel);
            }
            (r, old)
        })
    }

    /// Removes the entries `pick` chooses; returns them.
    pub(crate) fn take(&self, pick: impl FnMut(c_int, &T) -> bool) -> Vec<(c_int, Arc<T>)> {
        self.take_around(pick, || 0).1
    }

    /// Runs `call`, a real call that closes fds, with every shard locked
    /// (in order: no other holder takes two), then, unless it failed,
    /// removes the entries `pick` chooses in the same hold, as
    /// [`Table::set_around`] does for one fd. Returns the result and the
    /// entries removed.
    pub(crate) fn take_around(
        &self,
        mut pick: impl FnMut(c_int, &T) -> bool,
        call: impl FnOnce() -> c_int,
    ) -> (c_int, Vec<(c_int, Arc<T>)>) {
        holding(|| {
            let mut shards: Vec<_> = self.shards.iter().map(RwLock::write).collect();
            let r = call();
            let mut taken = Vec::new();
            if r < 0 {
                return (r, taken);
            }
            for shard in &mut shards {
                let fds: Vec<c_int> = shard
                    .iter()
                    .filter(|(&fd, d)| pick(fd, d))
                    .map(|(&fd, _)| fd)
                    .collect();
                for fd in fds {
                    if let Some(d) = shard.remove(&fd) {
                        self.mark(fd, false);
                        self.count.fetch_sub(1, Ordering::AcqRel);
                        taken.push((fd, d));
                    }
                }
            }
            (r, taken)
        })
    }

    /// Replaces entries with every shard held, so that no lookup runs
    /// meanwhile and no call can start on an entry: `swap` is called once
    /// for each entry (at the first of its fds), with the number of the
    /// table's fds that share it, and the new entry it returns, if any,
    /// replaces it at every one of them. Returns the entries replaced (to
    /// be dropped once the shards are let go).
    pub(crate) fn swap_all(
        &self,
        mut swap: impl FnMut(c_int, &Arc<T>, usize) -> Option<Arc<T>>,
    ) -> Vec<Arc<T>> {
        holding(|| {
            let mut shards: Vec<_> = self.shards.iter().map(RwLock::write).collect();
            let mut fds_of: BTreeMap<*const T, usize> = BTreeMap::new();
            for shard in &shards {
                for d in shard.values() {
                    *fds_of.entry(Arc::as_ptr(d)).or_default() += 1;
                }
            }
            let mut new_of: BTreeMap<*const T, Option<Arc<T>>> = BTreeMap::new();
            let mut old = Vec::new();
            for shard in &mut shards {
                for (&fd, d) in shard.iter_mut() {
                    let p = Arc::as_ptr(d);
                    let new = new_of
                        .entry(p)
                        .or_insert_with(|| swap(fd, d, fds_of.get(&p).copied().unwrap_or(1)))
                        .clone();
                    if let Some(new) = new {
                        old.push(std::mem::replace(d, new));
                    }
                }
            }
            old
        })
    }

    /// Every entry, one fd for each description (called inside the
    /// library only).
    pub(crate) fn descs(&self) -> Vec<(c_int, Arc<T>)> {
        let mut all: Vec<(c_int, Arc<T>)> = Vec::new();
        if self.count.load(Ordering::Acquire) == 0 {
            return all;
        }
        for shard in &self.shards {
            for (&fd, d) in shard.read().iter() {
                if !all.iter().any(|(_, e)| Arc::ptr_eq(e, d)) {
                    all.push((fd, d.clone()));
                }
            }
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_found_in_ranges() {
        let t = Table::<()>::new();
        assert!(!t.any_marked(0, c_int::MAX));
        for fd in [0, 63, 64, 130, (MAX_FDS - 1) as c_int] {
            t.mark(fd, true);
            assert!(t.marked(fd) && !t.marked(fd + 1));
            assert!(t.any_marked(fd, fd) && t.any_marked(0, c_int::MAX));
            assert!(t.any_marked((fd - 70).max(0), fd));
            assert!(!t.any_marked(fd + 1, c_int::MAX));
            assert!(fd == 0 || !t.any_marked(0, fd - 1));
            t.mark(fd, false);
            assert!(!t.marked(fd) && !t.any_marked(0, c_int::MAX));
        }
        assert!(!t.marked(-1) && !t.marked(MAX_FDS as c_int) && !t.any_marked(5, 4));
    }
}
