//! A process a named cache's host serves as a member, not of its user
//! (root, or a member of the group it names: docs/preload.md, "Named
//! caches"): it does not map the cache, which would let it change pages
//! of files it may not write. Every file is the kernel's in it; each it
//! opens under a served directory is handed over to the kernel for the
//! whole group first (`SharedCache::hand_over_named`: what the group holds
//! unsaved of it written back, and every process of the group serving it
//! through the kernel from then on), so that its reads and writes see the
//! group's and the group's see its.

use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

use super::*;

/// Set when the host said this process is a member (at its attach,
/// [`shared_cache`]).
pub(super) static MEMBER: AtomicBool = AtomicBool::new(false);

/// Whether the process is in a group whose cache it uses as a member
/// (attaching it now, if it was not yet).
pub(super) fn member() -> bool {
    in_group() && shared_cache().is_none() && MEMBER.load(Ordering::Acquire)
}

/// Hands the file of `fd` (open, under a served directory) to the kernel
/// for the group; `cut` for an open that cut it (`O_TRUNC`, open for
/// writing). A failure is said on stderr: the fd is the kernel's anyway.
pub(super) fn hand(fd: c_int, cut: bool) {
    let Some(name) = config().shared.as_ref().and_then(|p| p.to_str()) else {
        return;
    };
    // SAFETY: `fd` is open (the caller's), borrowed for the call.
    let file = unsafe { BorrowedFd::borrow_raw(fd) };
    if let Err(e) = SharedCache::hand_over_named(name, file, cut) {
        warn(&format!(
            "fd {fd}: handing the file to the kernel for the group: {e}"
        ));
    }
}

/// In a member, hands the file at `path`, if it is a regular one under a
/// served directory, to the kernel for the group: before a call changes
/// it by its path (`truncate`, a stream's open, which may cut it), so that
/// what the group holds unsaved of it lands before the change, never
/// after; and after a stream's open (the file may be new). Opened for the
/// purpose with this process's own rights: a file it may neither read nor
/// write, it cannot change either.
pub(super) fn hand_at(path: &Path) {
    if !member() {
        return;
    }
    let regular = rustix::fs::stat(path).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
    });
    if !regular {
        return;
    }
    let open = |read: bool| {
        std::fs::OpenOptions::new()
            .read(read)
            .write(!read)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
    };
    let Ok(file) = open(true).or_else(|_| open(false)) else {
        return;
    };
    if served_key(file.as_raw_fd()).is_some() {
        hand(file.as_raw_fd(), false);
    }
}
