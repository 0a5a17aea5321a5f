//! The guardian: what the cache's process leaves unsaved when it dies is
//! written back by a second process, as the kernel's flusher writes back
//! what a killed writer left in the page cache (docs/design.md, section
//! 12).
//!
//! - [`segment`]: the shared memory file holding the arena, the file
//!   slots, each page's owner and the unsaved bits;
//! - [`recover`]: the writeback a guardian runs once the process is gone;
//! - [`child`]: the guardian child of a program with no launcher;
//! - [`raw`]: the system calls the child makes by the instruction itself;
//! - [`persist`]: memory files that outlive every process of a group,
//!   the guardian's segment's and the group's cache's.
//!
//! A cache built with a guardian ([`CacheBuilder::guardian`]) keeps a
//! [`Guard`]: the segment, its slot allocator, and the child if it
//! spawned one.
//!
//! [`CacheBuilder::guardian`]: crate::CacheBuilder::guardian

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

pub use recover::WrittenBack;

pub(crate) mod child;
pub mod persist;
pub(crate) mod raw;
pub(crate) mod recover;
pub(crate) mod segment;

use segment::Segment;

/// Who writes back what the process leaves unsaved when it dies
/// ([`CacheBuilder::guardian`](crate::CacheBuilder::guardian)): the
/// kernel's page cache keeps a killed writer's data; a cache with a
/// guardian does too.
#[derive(Debug, Clone, Default)]
pub enum Guardian {
    /// No one: what the process leaves unsaved when it dies (`SIGKILL`,
    /// `abort`, a fatal signal, `_exit`, the OOM killer) is lost. The
    /// default.
    #[default]
    Off,
    /// A child process the cache starts when it is built, which sleeps
    /// until the process dies, then writes back what it left unsaved. The
    /// cache's memory is then a shared memory file (2 MiB pages only where
    /// the kernel's `shmem_enabled` allows), which a child of `fork` does
    /// not inherit: a forked child must not use the parent's cache.
    Child,
    /// The process that made this memory file and passed it down (a
    /// launcher, as `foliocache run`) guards the segment the cache lays out
    /// in it. A file that is not a guardian's memory file (made with the
    /// name `foliocache-guardian`, or a persisted launch's segment:
    /// [`persist::Run::guard_file`]), or that another live process claimed,
    /// is refused: the build fails.
    Segment(std::sync::Arc<OwnedFd>),
}

impl Guardian {
    /// A guardian's memory file for a launcher to pass down (as
    /// `foliocache run` does): made with the name a cache checks for,
    /// inherited across `exec` (no `O_CLOEXEC`), with the header page a
    /// claim needs. The launcher passes its number to the program (the
    /// interposer's `FOLIOCACHE_PRELOAD_GUARD`), whose cache claims it
    /// ([`Guardian::Segment`]), and once the program is gone calls
    /// [`write_back`](Self::write_back) on it.
    ///
    /// # Errors
    /// The OS error of `memfd_create` or `fallocate`.
    pub fn memory_file() -> io::Result<OwnedFd> {
        let fd = rustix::fs::memfd_create(segment::NAME, rustix::fs::MemfdFlags::empty())?;
        rustix::fs::fallocate(&fd, rustix::fs::FallocateFlags::empty(), 0, segment::PAGE)?;
        Ok(fd)
    }

    /// Writes back what the segment in the memory file `segment` holds
    /// unsaved: each page to its file, each file's size set (docs/design.md,
    /// section 12, "Recovery"). Run once the process that claimed it is
    /// gone (after a clean exit nothing is unsaved). Says on stderr what it
    /// wrote and what it skipped.
    pub fn write_back(segment: BorrowedFd<'_>) -> WrittenBack {
        child::recover_from(segment)
    }
}

/// The file slots' allocator: slot 0 is never handed out.
struct Slots {
    free: Vec<u32>,
    next: u32,
}

/// A cache's guardian state.
pub(crate) struct Guard {
    seg: Segment,
    slots: crate::sync::Mutex<Slots>,
    /// The child, when the cache started one: held for its drop, after
    /// the cache wrote everything back, which tells it to end without
    /// writing.
    _child: Option<child::Child>,
}

impl Guard {
    /// The guard of an arena of `pages` pages, as `how` says; `None` for
    /// [`Guardian::Off`].
    pub(crate) fn new(how: Guardian, pages: u64) -> io::Result<Option<Guard>> {
        let (seg, child) = match how {
            Guardian::Off => return Ok(None),
            Guardian::Child => {
                let seg = Segment::create(pages)?;
                let child = child::spawn(seg.fd())?;
                (seg, Some(child))
            }
            Guardian::Segment(fd) => {
                check_memfd(&fd)?;
                (Segment::claim(fd.try_clone()?, pages)?, None)
            }
        };
        Ok(Some(Guard {
            seg,
            slots: crate::sync::Mutex::new(Slots {
                free: Vec::new(),
                next: 1,
            }),
            _child: child,
        }))
    }

    /// The segment.
    pub(crate) fn segment(&self) -> &Segment {
        &self.seg
    }

    /// A slot for the file `id` (device, inode, generation:
    /// [`persist::file_version`]) of `size` bytes at `path`, or `None` when
    /// every slot is taken or the path is too long for one (the file's
    /// unsaved data is then not guarded).
    pub(crate) fn take_slot(&self, id: (u64, u64, u64), size: u64, path: &[u8]) -> Option<u32> {
        let slot = {
            let mut s = self.slots.lock();
            match s.free.pop() {
                Some(slot) => slot,
                None if u64::from(s.next) < self.seg.slots() => {
                    s.next += 1;
                    s.next - 1
                }
                None => return None,
            }
        };
        if self.seg.fill_slot(slot, id, size, path) {
            Some(slot)
        } else {
            self.slots.lock().free.push(slot);
            None
        }
    }

    /// Gives back a slot whose file has nothing unsaved.
    pub(crate) fn free_slot(&self, slot: u32) {
        self.seg.free_slot(slot);
        self.slots.lock().free.push(slot);
    }
}

/// Checks that `fd` is a guardian's memory file (its name in
/// `/proc/self/fd`), or a persisted launch's segment.
fn check_memfd(fd: &OwnedFd) -> io::Result<()> {
    if persist::is_persisted(fd.as_fd(), persist::GUARD) {
        return Ok(());
    }
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    let want = format!("/memfd:{}", segment::NAME);
    if link
        .as_os_str()
        .as_encoded_bytes()
        .starts_with(want.as_bytes())
    {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "fd {} is {link:?}, not a guardian's memory file",
                fd.as_raw_fd()
            ),
        ))
    }
}

#[cfg(test)]
mod tests;
