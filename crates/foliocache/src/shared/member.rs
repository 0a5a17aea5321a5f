//! The members of a named cache (docs/design.md, section 13, "Named
//! caches: who may attach"): a process of another user than the host's
//! that the host serves (root, or a member of the group it names) is
//! never passed the memory file, since a process that maps the segment
//! can change every page of it and read every byte. It hands each file
//! it opens over instead ([`SharedCache::hand_over_named`]): it passes
//! its descriptor (`SCM_RIGHTS`), and the host, which maps the cache,
//! marks the file the kernel's for the whole group (as a fork that keeps
//! a mapping does, [`SharedCache::handed_to_kernel_by_many`]) and writes
//! back what the group holds unsaved of it, so that the member's reads
//! and writes through the kernel see the group's and the group's the
//! member's. What a member's request may change is what its
//! own descriptor could: a cut (`O_TRUNC`) is the kernel's `ftruncate`
//! on the member's descriptor, and the group's pages of a file are only
//! ever written by processes of the host's user.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rustix::fs::OFlags;
use rustix::net::SendFlags;

use super::named::{self, TIMEOUT, YES};
use super::SharedCache;

/// What a host says to a member instead of passing the memory file.
pub(super) const MEMBER: &[u8] = b"member\n";
/// A member's request: the file of the descriptor it passes is to be the
/// kernel's for the group.
const HAND: &[u8] = b"hand\n";
/// As [`HAND`], for a file the member's open cut to length 0
/// (`O_TRUNC`): the host cuts it again through the member's descriptor
/// after writing back what the group held of it, so that no page of the
/// group's lands past the cut.
const CUT: &[u8] = b"cut\n";
/// The most members' requests a host answers at once (each on a thread
/// of its own, so that one that never sends holds no one else up); more
/// are told to try again.
const MEMBERS_AT_ONCE: usize = 16;

/// [`SharedCache::attach_named`]'s error for a process the host serves
/// as a member ([`SharedCache::member_only`]).
#[derive(Debug)]
struct MemberOnly(String);

impl std::fmt::Display for MemberOnly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MemberOnly {}

/// The error of an attach by a member of the cache hosted at `path`.
pub(super) fn member_only(path: &std::path::Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        MemberOnly(format!(
            "{}: this process is not of the host's user: it may use the cache as a member \
             (its files handed to the kernel, SharedCache::hand_over_named), not map it",
            path.display()
        )),
    )
}

fn refused(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, what.to_owned())
}

impl SharedCache {
    /// Whether `e` is [`attach_named`](Self::attach_named)'s error for a
    /// process of another user than the host's that the host serves (root,
    /// or a member of its group): such a process does not map the cache,
    /// which would let it change pages of files it may not write, and
    /// hands each file it opens to the kernel instead
    /// ([`hand_over_named`](Self::hand_over_named)).
    pub fn member_only(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|e| e.is::<MemberOnly>())
    }

    /// For a process the cache hosted under `name` serves as a member
    /// ([`member_only`](Self::member_only)): hands the file of `file`, a
    /// descriptor open for reading or writing, to the kernel for the
    /// cache's whole group. The host writes back what the group holds
    /// unsaved of the file, and every process of the
    /// group serves it through the kernel from its next call on, while
    /// the cache holds the file; so this process's reads and writes of it
    /// through the kernel see the group's and are seen by it. With `cut`
    /// (the process's open cut the file, `O_TRUNC`), the host cuts it
    /// again through `file` after that writeback, so that nothing the
    /// group held lands past the cut; `file` must then be open for
    /// writing.
    ///
    /// # Errors
    /// No cache served under `name`, a host this process does not trust,
    /// a process the host does not serve or serves as its own user (that
    /// one attaches, [`attach_named`](Self::attach_named)), or the host's
    /// reason for refusing the request (a descriptor opened with
    /// `O_PATH`, a cut the descriptor may not make, a writeback that
    /// failed).
    pub fn hand_over_named(name: &str, file: BorrowedFd<'_>, cut: bool) -> io::Result<()> {
        let (conn, path) = named::connect(name)?;
        let (said, memfd) = named::receive(&conn)?;
        drop(memfd);
        if said == YES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: this process is of the host's user: it attaches the cache",
                    path.display()
                ),
            ));
        }
        if said != MEMBER {
            return Err(named::answer_error(&path, &said));
        }
        named::send_with_fd(&conn, if cut { CUT } else { HAND }, file)?;
        // The host writes back before it answers: a file's writeback may
        // take longer than a greeting.
        conn.set_read_timeout(None)?;
        let (said, _) = named::receive(&conn)?;
        match said.as_slice() {
            YES => Ok(()),
            _ => Err(named::answer_error(&path, &said)),
        }
    }

    /// The host's side of a member's connection: says it is a member, and
    /// answers its one request, if it makes one, on a thread of its own.
    pub(super) fn serve_member(&self, conn: UnixStream, busy: &Arc<AtomicUsize>) -> io::Result<()> {
        if busy.fetch_add(1, Ordering::AcqRel) >= MEMBERS_AT_ONCE {
            busy.fetch_sub(1, Ordering::AcqRel);
            return named::say_no(&conn, "the host is busy with other members; try again\n");
        }
        let (cache, count) = (self.clone(), busy.clone());
        let spawned = std::thread::Builder::new()
            .name("foliocache-member".into())
            .spawn(move || {
                // (A member gone before the answer is nothing to the host.)
                let _ = cache.answer_member(&conn);
                count.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            // (The closure was dropped unrun: the count is this one's.)
            busy.fetch_sub(1, Ordering::AcqRel);
            return Err(io::Error::other("no thread for a member"));
        }
        Ok(())
    }

    fn answer_member(&self, conn: &UnixStream) -> io::Result<()> {
        rustix::net::send(conn, MEMBER, SendFlags::NOSIGNAL)?;
        conn.set_read_timeout(Some(TIMEOUT))?;
        let (said, fd) = named::receive(conn)?;
        // A member that only asked (an attach) sends nothing more.
        let Some(fd) = fd else { return Ok(()) };
        match self.hand_for_member(&said, fd) {
            Ok(()) => rustix::net::send(conn, YES, SendFlags::NOSIGNAL).map(drop)?,
            Err(e) => named::say_no(conn, &format!("{e}\n"))?,
        }
        Ok(())
    }

    /// A member's request `said` on its descriptor `fd`: the file marked
    /// the kernel's for the group and what the group holds unsaved of it
    /// written back; with [`CUT`], the file cut through `fd` after that
    /// writeback.
    fn hand_for_member(&self, said: &[u8], fd: OwnedFd) -> io::Result<()> {
        let cut = match said {
            HAND => false,
            CUT => true,
            _ => return Err(refused("not a member's request")),
        };
        let flags = rustix::fs::fcntl_getfl(&fd)?;
        let st = rustix::fs::fstat(&fd)?;
        if flags.contains(OFlags::PATH)
            || rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile
        {
            return Err(refused(
                "a regular file's descriptor opened for reading or writing",
            ));
        }
        let f = match self.open(File::from(fd.try_clone()?)) {
            Ok(f) => f,
            // No slot for the file: the group holds nothing of it, and
            // the kernel's copy is the whole file.
            Err(e) if SharedCache::out_of_slots(&e) => return Ok(()),
            Err(e) => return Err(e),
        };
        let (dev, ino) = (f.dev, f.ino);
        // Marked first: a process of the group writing it meanwhile hands
        // it over at its next call, writing back what it wrote.
        self.handed_to_kernel_by_many(dev, ino);
        // The cut is the kernel's on the member's own description: its
        // access mode and the file's flags decide, as for the member.
        let cut_it = || -> io::Result<()> {
            if cut {
                rustix::fs::ftruncate(&fd, 0)?;
            }
            Ok(())
        };
        if self.unsaved_len(dev, ino).is_none() && !cut {
            return Ok(());
        }
        // The group's unsaved pages (its processes, of the host's user,
        // wrote them) are written back through a descriptor of the host's
        // own, never the member's, whose description may append
        // (`O_APPEND`) wherever a write asks.
        let own = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        match own {
            Ok(own) => self.open(own)?.change_file(|_| cut_it()),
            Err(e) if self.unsaved_len(dev, ino).is_some() => Err(refused(&format!(
                "the group holds unsaved data of the file, and its host may not write it: {e}"
            ))),
            Err(_) => cut_it(),
        }
    }
}
