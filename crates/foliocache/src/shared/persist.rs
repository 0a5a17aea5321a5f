//! A group's cache in a persisted launch's file (`persist::Run`): its
//! unsaved pages outlive every process of the group, the launcher's
//! included, until the next launch on its directories (or `foliocache
//! recover`) writes them back (docs/design.md, section 13, "Persisted
//! segments").

use std::io;

use super::seg::{Seg, PAGE};
use super::SharedCache;
use crate::guardian::persist::Run;

impl SharedCache {
    /// As [`new`](SharedCache::new), in the launch `run`'s file for the
    /// group (`STEM.group`, mode 0600 on tmpfs) instead of a memory file:
    /// what the group leaves unsaved when every process of it dies stays
    /// there for [`write_back_all`](Self::write_back_all) by the next
    /// process that [`attach`](Self::attach)es to the file. tmpfs cannot
    /// seal a file: a process of the user could shrink it under the group
    /// (as it could kill the group).
    ///
    /// # Errors
    /// The file could not be made or sized.
    pub fn new_persisted(run: &Run, capacity: u64) -> io::Result<SharedCache> {
        let cache = SharedCache::made(Seg::create_in(run.group_file()?, capacity / PAGE)?);
        cache.join();
        cache.collapse_in_background();
        Ok(cache)
    }

    /// As [`new_deferred`](SharedCache::new_deferred), in the launch
    /// `run`'s file for the group, as [`new_persisted`](Self::new_persisted).
    ///
    /// # Errors
    /// The file could not be made or sized.
    pub fn new_deferred_persisted(run: &Run, capacity: u64) -> io::Result<SharedCache> {
        Ok(SharedCache::made(Seg::create_in(
            run.group_file()?,
            capacity / PAGE,
        )?))
    }
}
