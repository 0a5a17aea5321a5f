//! A group joined at the first process made ([`ENV_SHARED_AT_FORK`]:
//! `foliocache run` without `--shared`). A program of one process keeps a
//! cache of its own (the in-process cache's hits, its reclaim under
//! memory pressure); the first time it makes another process (a `fork`,
//! `posix_spawn`, `system`, `popen`) it joins the group's cache, before
//! the child exists, and so is every process that starts after that: a
//! forked worker, an `exec`'d program, a spawned one.
//!
//! Joining: the group is marked joined in the cache's header
//! (`SharedCache::join`), so that a program started from now on attaches
//! at once; every description this process serves from its own cache
//! moves to the group's: with the table held (no call can start on it),
//! its file's dirty data is written back, the file opened in the group's
//! cache and the pages its own cache holds copied in (the group starts
//! with what the process read), and a description of that file, with the
//! same position, access and flags, takes the old one's place at each of
//! its fds. A description a call is using at that moment (another thread's),
//! or whose file the group holds in the kernel, is handed to the kernel
//! instead (written back, its fds plain for the rest of the process) and
//! marked the kernel's in the group, as a mapping's file is
//! (docs/preload.md, "A hand-over is the group's"), so that no process
//! serves it while this one's fds write it through the kernel. What else
//! its own cache holds unsaved is written back, and its memory given back
//! (`Cache::release`): the pages of files it no longer has open are not
//! moved. Its later opens are the group's.

use std::collections::BTreeSet;
use std::ffi::c_int;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fc::{CachedFile, SharedCache};
use parking_lot::Mutex;

use super::{
    built_cache, config, drop_inside, group_file, hand_to_kernel, inside, key_bucket, mark_group,
    open_shared, passing_through, proc_path, shared_cache, warn, write_back_all, Desc, TABLE,
};

/// Set once this process is in its group ([`ENV_SHARED_AT_FORK`]).
///
/// [`ENV_SHARED_AT_FORK`]: super::ENV_SHARED_AT_FORK
pub(super) static JOINED: AtomicBool = AtomicBool::new(false);

/// A thread publishes its process's own cache's reads in the group's
/// figures at its first read and every this many after
/// ([`after_own_read`]).
const PUBLISH_READS: u32 = 1024;

thread_local! {
    /// The reads this thread served from its process's own cache.
    static OWN_READS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// After a read served from this process's own cache: in a group joined
/// at fork, the cache's reads are published in the group's figures
/// ([`publish_own_reads`]) at this thread's first and every
/// [`PUBLISH_READS`]th.
pub(crate) fn after_own_read() {
    if !config().at_fork || JOINED.load(Ordering::Relaxed) {
        return;
    }
    let n = OWN_READS.with(|c| {
        let n = c.get().wrapping_add(1);
        c.set(n);
        n
    });
    if n % PUBLISH_READS == 1 {
        publish_own_reads();
    }
}

/// In a group joined at fork (`foliocache run` without `--shared`), the
/// reads this process's own cache served so far, counted in the group's
/// figures as this process's (`SharedCache::count_reads_elsewhere`), so
/// that the figures `foliocache run --metrics` serves are every
/// process's reads, those before the first fork included. At the first
/// read and every [`PUBLISH_READS`] of a thread, at each close of a file,
/// at the join and at the end.
pub(crate) fn publish_own_reads() {
    // (Once joined its own cache serves no more: the join counted it. A
    // child of `fork` never has one: it is born joined.)
    // (Called inside the library too: from a read, a close.)
    if !config().at_fork || JOINED.load(Ordering::Acquire) || crate::through::off_for_good() {
        return;
    }
    inside((), || {
        let (Some(sc), Some(cache)) = (shared_cache(), built_cache()) else {
            return Ok(());
        };
        let s = cache.stats();
        // (Every participant a live process's: the group's figures lack
        // this one's reads, as they would a process's past the limit.)
        let _ = sc.count_reads_elsewhere(fc::ReadCounts {
            hits: s.hits,
            misses: s.misses,
            read_bytes: s.read_bytes,
            first_read_bytes: s.first_read_bytes,
            loaded_bytes: s.io_bytes,
        });
        Ok(())
    });
}

/// At start: in the group at once if a process of it joined it already.
pub(super) fn if_joined(cache: Option<&SharedCache>) {
    if cache.is_some_and(SharedCache::joined) {
        JOINED.store(true, Ordering::Release);
    }
}

/// Before this process makes another: joins the group, if it is one to
/// be joined at fork and this process is not in it yet (the module's
/// documentation). Not joined (said on stderr) if the group's cache
/// cannot be attached: the child then passes through, as without a group.
pub(super) fn group() {
    if !config().at_fork || JOINED.load(Ordering::Acquire) || passing_through() {
        return;
    }
    let Some(sc) = inside(None, || Ok(shared_cache())) else {
        return;
    };
    // What its own cache served, in the group's figures before it goes.
    publish_own_reads();
    sc.join();
    // From here on an open is the group's; an open racing with this that
    // made a private file hands it over itself (`adopt`).
    JOINED.store(true, Ordering::Release);
    let mut refused = Vec::new();
    let old = inside(Vec::new(), || {
        Ok(TABLE.swap_all(|fd, d, fds| {
            // (Only a description of this process's own cache moves.)
            d.file.private()?;
            // A call on it holds a handle of its own: moved under the
            // call, what the call writes would be lost to the group.
            let moved = if Arc::strong_count(d) > fds {
                None
            } else {
                moved(sc, fd, d)
            };
            if moved.is_none() {
                refused.push((fd, d.key));
            }
            moved
        }))
    });
    drop_inside(old);
    let mut keys = BTreeSet::new();
    for (fd, key) in refused {
        if keys.insert(key) {
            hand_over(fd, key);
        }
    }
    if let Some(cache) = built_cache() {
        inside((), || {
            // What it holds unsaved of files it no longer has open goes
            // to the files (no sync: the group reads them), and its pages
            // are the group's now, or the file's: one copy.
            if let Err(e) = cache.release() {
                warn(&format!("joining the group: writing back: {e}"));
            }
            Ok(())
        });
    }
}

/// Description `d`, open at `fd` and served from this process's own
/// cache, as one of the group's cache: its file written back, then
/// opened there. `None` (said on stderr) if either fails, or if the group
/// holds the file in the kernel (another process's mapping, say).
fn moved(sc: &SharedCache, fd: c_int, d: &Desc) -> Option<Arc<Desc>> {
    let opened = d.file.write_back().and_then(|()| {
        let file = group_file(open_shared(sc, &proc_path(fd))?, d.append && d.writable);
        if file.handed_elsewhere() && !file.take_back_from_kernel().unwrap_or(false) {
            return Ok(None);
        }
        if let (Some(own), Some(shared)) = (d.file.private(), file.shared()) {
            // What this process read, the group starts with.
            sc.prepare_fill(own.mapping().cachestat(0, u64::MAX).cached);
            own.mapping()
                .cached_pages(|at, bytes| shared.file().cache_clean(at, bytes).map(drop))?;
        }
        Ok(Some(file))
    });
    let file = match opened {
        Ok(Some(f)) => f,
        Ok(None) => return None,
        // No slot for it in the group's table: the kernel's, as any file
        // past a limit of the group's (written back above).
        Err(e) if SharedCache::out_of_slots(&e) => return None,
        Err(e) => {
            warn(&format!(
                "fd {fd}: joining the group: {e}; the file is handed to the kernel"
            ));
            return None;
        }
    };
    key_bucket(d.key).fetch_add(1, Ordering::AcqRel);
    Some(Arc::new(Desc {
        file: ManuallyDrop::new(file),
        key: d.key,
        pos: Mutex::new(*d.pos.lock()),
        kernel_pos: AtomicBool::new(d.kernel_pos.load(Ordering::Relaxed)),
        readable: d.readable,
        writable: d.writable,
        append: d.append,
        sync_writes: d.sync_writes,
    }))
}

/// The file `key`, open at `fd` and served from this process's own
/// cache, handed to the kernel for the rest of the process and marked the
/// kernel's for the group.
pub(super) fn hand_over(fd: c_int, key: (u64, u64)) {
    hand_to_kernel(key);
    inside((), || {
        mark_group(key, &proc_path(fd));
        Ok(())
    });
}

/// Before `posix_spawn`, `system` or `popen`: the group joined (as before
/// a `fork`), then every byte written back and the positions set, so that
/// a program started outside the library sees them too.
pub(crate) fn spawning() {
    if !passing_through() {
        group();
    }
    write_back_all();
}
