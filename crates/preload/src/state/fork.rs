//! A `fork` and a process started (`posix_spawn`, `system`): the data
//! written back and the positions set first, and in a group the table's
//! locks held across the fork, so that the child keeps serving
//! (docs/preload.md, "Processes").

use super::*;

/// Writes back and syncs every dirty byte and sets the kernel's position
/// of every fd to the program's: the state a child of `fork`, or the
/// program `posix_spawn` or `system` starts, sees.
pub(crate) fn write_back_all() {
    if passing_through() {
        return;
    }
    inside((), || {
        let descs = TABLE.descs();
        for (fd, d) in &descs {
            sync_position(*fd, d);
        }
        if let Some(cache) = built_cache() {
            if let Err(e) = cache.sync_all() {
                warn(&format!("writing back: {e}"));
            }
        }
        // The group's files this process has open (the whole file,
        // whoever wrote it): what a program outside the group sees.
        for (_, d) in descs.iter().filter(|(_, d)| d.file.private().is_none()) {
            if let Err(e) = writing_back(d.key, || d.file.sync_data()) {
                warn(&format!("writing back {}: {e}", file_name(d.key)));
            }
        }
        Ok(())
    });
}

/// Before `fork`. In a group sharing a cache ([`in_group`]) the child
/// keeps serving: every description becomes one whose position is the
/// kernel's ([`Desc::at_position`]), set to the program's now, and the
/// table's locks are taken until the fork is done ([`fork_locks`]), so
/// that the child finds none held by a thread that did not follow it.
///
/// Otherwise the child passes through: a child could write through any
/// fd it inherits, so every file with a description open for writing is
/// handed to the kernel for good (the parent's fds of it are plain from
/// then on, and a write or close by the child is one on the shared open
/// file description, as without the library); the rest is written back
/// with the positions set ([`write_back_all`]).
pub(crate) fn prepare_fork() {
    if passing_through() {
        return;
    }
    join::group();
    if in_group() {
        // Its reads so far published: the child's count from here.
        if let Some(sc) = group_cache() {
            inside((), || {
                sc.publish_figures();
                Ok(())
            });
        }
        inside((), || {
            for (fd, d) in &TABLE.descs() {
                let pos = d.pos.lock();
                if !d.kernel_pos.load(Ordering::Relaxed) {
                    set_kernel_position(*fd, *pos);
                    d.kernel_pos.store(true, Ordering::Relaxed);
                }
            }
            Ok(())
        });
        mark_inherited();
        fork_locks(true);
        return;
    }
    let writable = inside(Vec::new(), || {
        let descs = TABLE.descs();
        Ok(descs
            .iter()
            .filter(|(_, d)| d.writable)
            .map(|(_, d)| d.key)
            .collect::<Vec<_>>())
    });
    for key in writable {
        hand_to_kernel(key);
    }
    write_back_all();
}

/// The descriptions whose position locks [`fork_locks`] holds.
pub(super) static FORKING: Mutex<Vec<Arc<Desc>>> = Mutex::new(Vec::new());
/// Set while [`fork_locks`] holds the locks (in the child too, a copy).
pub(super) static FORK_LOCKED: AtomicBool = AtomicBool::new(false);

/// Takes (`true`, before a fork in a group) or lets go of (after it, in
/// the parent and in the child) the table's locks: its shards, the
/// positions of its descriptions, and the hand-over records, in one order.
/// Inside the library meanwhile (the child's first calls wait for
/// nothing).
pub(super) fn fork_locks(take: bool) {
    if take {
        holding(|| {
            let mut forking = FORKING.lock();
            for shard in &TABLE.shards {
                std::mem::forget(shard.write());
            }
            let mut locked = std::collections::BTreeSet::new();
            for shard in &TABLE.shards {
                // SAFETY: held (write) by this thread just above.
                let map = unsafe { &*shard.data_ptr() };
                for d in map.values() {
                    // Once per description: duplicated fds share one.
                    if !locked.insert(Arc::as_ptr(d)) {
                        continue;
                    }
                    std::mem::forget(d.pos.lock());
                    forking.push(d.clone());
                }
            }
            std::mem::forget(HANDED.lock());
            std::mem::forget(STREAM_FDS.lock());
            std::mem::forget(forking);
            FORK_LOCKED.store(true, Ordering::Relaxed);
        });
        return;
    }
    // SAFETY: each lock below was taken by this thread (the one that
    // forked, the only one in a child) in the `take` call before the
    // fork, its guard forgotten; each is let go once.
    unsafe {
        STREAM_FDS.force_unlock();
        HANDED.force_unlock();
        let forking = &mut *FORKING.data_ptr();
        for d in forking.drain(..) {
            d.pos.force_unlock();
        }
        for shard in &TABLE.shards {
            shard.force_unlock_write();
        }
        FORKING.force_unlock();
    }
}

/// After a fork, in the parent and in the child: the locks
/// [`prepare_fork`] took are let go. Returns whether the process keeps
/// serving (in a group), else the child is to pass through.
pub(crate) fn after_fork() -> bool {
    if FORK_LOCKED.swap(false, Ordering::Relaxed) {
        fork_locks(false);
    }
    !crate::through::off_for_good() && in_group()
}

/// Before a fork in a group: the files this process holds in the kernel
/// (mappings, streams, plain fds, which the child inherits) are marked
/// held by many, before the child exists, so that they stay the kernel's
/// for the group when this process is gone.
pub(super) fn mark_inherited() {
    let Some(sc) = group_cache() else {
        return;
    };
    inside((), || {
        let keys: Vec<(u64, u64)> = HANDED.lock().keys().copied().collect();
        for key in keys {
            sc.handed_to_kernel_by_many(key.0, key.1);
        }
        Ok(())
    });
}
