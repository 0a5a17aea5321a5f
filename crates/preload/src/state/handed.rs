//! Files the process holds in the kernel, not the cache: mapped, streamed
//! through stdio, opened while a stream was, or held so by another
//! process of its group (docs/preload.md, "Handing a file to the kernel",
//! and "A hand-over is the group's").

use super::*;

/// Why a file is the kernel's, not the cache's.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Handed {
    /// For the rest of the process: it was mapped, its `O_APPEND` changed,
    /// a stream was opened on it while the cache served it, or it was
    /// opened while a stream was (that fd is the kernel's, untracked).
    ForGood,
    /// While this many streams are open on it (opened when the cache
    /// served no fd of it): served again after their `fclose`.
    Streams(usize),
}

/// The files handed to the kernel.
pub(super) static HANDED: Mutex<BTreeMap<(u64, u64), Handed>> = Mutex::new(BTreeMap::new());
/// The fd of each stream holding a [`Handed::Streams`] count, and its file.
pub(super) static STREAM_FDS: Mutex<BTreeMap<c_int, (u64, u64)>> = Mutex::new(BTreeMap::new());

/// Whether `key` is the kernel's now; an open refused for a stream's sake
/// makes it so for good (the fd it returns is plain).
pub(super) fn handed_on_open(key: (u64, u64)) -> bool {
    let mut handed = HANDED.lock();
    match handed.get_mut(&key) {
        None => false,
        Some(h) => {
            *h = Handed::ForGood;
            true
        }
    }
}

/// A stream just opened on `fd`: its file, if under a served directory,
/// is the kernel's while the stream is open (stdio reads and writes with
/// the C library's internal calls), or for good if the cache served it,
/// written back first.
pub(crate) fn hand_stream(fd: c_int) {
    if let Some(d) = lookup(fd) {
        hand_to_kernel(d.key);
        return;
    }
    if !serving() {
        return;
    }
    let Some(key) = inside(None, || Ok(served_key(fd))) else {
        return;
    };
    if desc_of(key).is_some() {
        hand_to_kernel(key);
        return;
    }
    {
        let mut handed = HANDED.lock();
        let h = handed.entry(key).or_insert(Handed::Streams(0));
        if let Handed::Streams(n) = h {
            *n += 1;
            STREAM_FDS.lock().insert(fd, key);
        }
    }
    // The stream writes behind the group's other processes too.
    inside((), || {
        mark_group(key, &proc_path(fd));
        Ok(())
    });
}

/// Whether `fd` closes at an `exec`.
pub(super) fn close_on_exec(fd: c_int) -> bool {
    // SAFETY: `fd` is open (a served one), borrowed for the call.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    rustix::io::fcntl_getfd(fd).is_ok_and(|f| f.contains(rustix::io::FdFlags::CLOEXEC))
}

/// In a group, marks the file `key` (open at `path`) handed to the kernel
/// for every process of it (`SharedFile::handed_elsewhere`), giving it a
/// slot in the cache if it had none, so that no process serves it while
/// a mapping or stream of this process may write it through the kernel.
/// Inside the library.
pub(super) fn mark_group(key: (u64, u64), path: &Path) {
    if !in_group() {
        return;
    }
    let Some(sc) = shared_cache() else {
        // A member's is handed over through the cache's host.
        super::member::hand_at(path);
        return;
    };
    // Marked first: a process writing it meanwhile hands it over at its
    // next call, writing back what it wrote.
    let marked = sc.handed_to_kernel(key.0, key.1);
    if marked && sc.unsaved_len(key.0, key.1).is_none() {
        return;
    }
    // No slot yet (a handle gives it one), or the group holds unsaved
    // data of the file, which the kernel is to have before this process
    // reads or writes it there.
    let handed = open_shared(sc, path).and_then(|f| {
        f.hand_to_kernel()?;
        if sc.unsaved_len(key.0, key.1).is_some() {
            f.change_file(|_| Ok(()))?;
        }
        Ok(())
    });
    match handed {
        // No slot to mark, and none holding data of the file: the
        // group has nothing of it the kernel lacks.
        Err(e) if SharedCache::out_of_slots(&e) && sc.unsaved_len(key.0, key.1).is_none() => {}
        Err(e) => warn(&format!(
            "{}: handing it to the kernel for the group: {e}",
            file_name(key)
        )),
        Ok(()) => {}
    }
}

/// Tries of [`writing_back`] while the file's slot keeps moving.
const TRIES: usize = 8;

/// Runs `write_back`, a writeback of the file `key` served by the group:
/// one that fails for want of a slot (`SharedCache::out_of_slots`: every
/// slot holds unsaved data or a file held in the kernel, or the file's
/// slot moved each time it looked) is tried again while the group holds
/// data of the file unsaved, and is done once it holds none (a file the
/// table has no slot for has none: its slot was taken back clean). So a
/// file the group cannot serve for want of a slot is handed to the kernel
/// whole, and its close succeeds, as the kernel's would.
pub(crate) fn writing_back(
    key: (u64, u64),
    write_back: impl Fn() -> io::Result<()>,
) -> io::Result<()> {
    let mut last = None;
    for _ in 0..TRIES {
        match write_back() {
            Err(e) if SharedCache::out_of_slots(&e) => {
                let unsaved = group_cache().and_then(|sc| sc.unsaved_len(key.0, key.1));
                if unsaved.is_none() {
                    return Ok(());
                }
                last = Some(e);
            }
            r => return r,
        }
    }
    Err(last.unwrap_or_else(|| err(libc::EIO)))
}

/// The size of the file `d` serves, as the cache holds it; `None` where
/// the kernel's is the one to give: the file is handed to the kernel
/// first if the group cannot serve it for want of a slot, and any other
/// error leaves the kernel's size, never a made-up one.
pub(crate) fn served_len(d: &Desc) -> Option<u64> {
    let mut unslotted = false;
    let len = inside(None, || match d.file.len() {
        Ok(n) => Ok(Some(n)),
        Err(e) => {
            unslotted = SharedCache::out_of_slots(&e);
            Ok(None)
        }
    });
    if unslotted {
        hand_to_kernel(d.key);
    }
    len
}

/// `mmap` of an fd the cache does not serve: in a group, a file under a
/// served directory is marked the kernel's for every process of it
/// ([`mark_group`]): the mapping writes behind them.
pub(crate) fn mapping_plain(fd: c_int) {
    if !in_group() || passing_through() {
        return;
    }
    inside((), || {
        if let Some(key) = served_key(fd) {
            mark_group(key, &proc_path(fd));
        }
        Ok(())
    });
}

/// The stream on `fd` is about to be closed (`fclose`, `freopen`): its
/// record goes now, while the fd is still open, so that a stream another
/// thread opens on the number once it is free keeps its own. Returns the
/// file, for [`release_stream`] after the real call.
pub(crate) fn take_stream(fd: c_int) -> Option<(u64, u64)> {
    if fd < 0 {
        return None;
    }
    STREAM_FDS.lock().remove(&fd)
}

/// A stream on the file `key` ([`take_stream`]'s) was closed: the file's
/// count goes down, and the cache serves it again when none is left.
pub(crate) fn release_stream(key: Option<(u64, u64)>) {
    let Some(key) = key else {
        return;
    };
    let mut handed = HANDED.lock();
    if let Some(Handed::Streams(n)) = handed.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            handed.remove(&key);
        }
    }
}
