//! A member of a named cache's group, a process of another user that the
//! host serves, gets no way to change the cache (docs/design.md, section
//! 13, "Named caches: who may attach"): it tries every way to a
//! descriptor or a mapping of the memory file and scribbles over whatever
//! it gets, while the owner writes and reads a file only the owner may
//! write; the owner reads, and the disk gets, only the owner's bytes. Its
//! requests change only what its own descriptor could.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixStream;

use foliocache::SharedCache;

use super::named::root;
use super::{fork, open};

/// The cache's group, which the member has among its groups.
const GROUP: u32 = 43_211;
/// The member's user and group (`nobody`).
const NOBODY: u32 = 65_534;
const PAGE: usize = 4096;
/// What the member writes wherever it can.
const SCRIBBLE: u8 = 0xEE;

/// Makes this (forked) process `nobody`, with the cache's group.
fn become_member() -> bool {
    let groups = [GROUP];
    // SAFETY: plain system calls changing this child's credentials.
    unsafe {
        libc::setgroups(1, groups.as_ptr()) == 0
            && libc::setgid(NOBODY) == 0
            && libc::setuid(NOBODY) == 0
    }
}

/// Writes [`SCRIBBLE`] over the file of `fd` every way a descriptor
/// allows: `write(2)` at each page, a new shared writable mapping, a
/// read-only mapping made writable (`mprotect`). Returns how many of them
/// got through.
fn scribble(fd: &OwnedFd) -> usize {
    let len = rustix::fs::fstat(fd)
        .map_or(0, |s| s.st_size as usize)
        .max(PAGE);
    let junk = [SCRIBBLE; PAGE];
    let wrote = (0..len)
        .step_by(PAGE)
        .filter(|&at| rustix::io::pwrite(fd, &junk, at as u64).is_ok())
        .count();
    let mut through = usize::from(wrote > 0);
    let (read, write) = (libc::PROT_READ, libc::PROT_READ | libc::PROT_WRITE);
    for (prot, then) in [(write, None), (read, Some(write))] {
        // SAFETY: a new mapping of the file, touched only here and
        // unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            continue;
        }
        // SAFETY: the mapping just made, `len` bytes.
        let writable = then.is_none_or(|w| unsafe { libc::mprotect(p, len, w) } == 0);
        if writable {
            // SAFETY: the mapping is writable now and `len` bytes long.
            unsafe { std::ptr::write_bytes(p.cast::<u8>(), SCRIBBLE, len) };
            through += 1;
        }
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(p, len) };
    }
    through
}

/// Every way to the memory file a member might try, scribbling over
/// whatever it gets; how many got anything.
fn try_every_way(name: &str, host: u32, memfd: i32) -> usize {
    let mut breaches = 0;
    // By name.
    match SharedCache::attach_named(name) {
        Ok(c) => breaches += 1 + scribble(&c.memory_file().try_clone_to_owned().unwrap()),
        Err(e) => assert!(SharedCache::member_only(&e), "{e}"),
    }
    // The socket by hand: whatever the host says, no descriptor.
    let conn = UnixStream::connect(name).unwrap();
    let mut buf = [0u8; 64];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = rustix::net::RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        &conn,
        &mut [std::io::IoSliceMut::new(&mut buf)],
        &mut control,
        rustix::net::RecvFlags::empty(),
    );
    assert!(got.is_ok_and(|g| &buf[..g.bytes] == b"member\n"));
    for msg in control.drain() {
        if let rustix::net::RecvAncillaryMessage::ScmRights(fds) = msg {
            for fd in fds {
                breaches += 1 + scribble(&fd);
            }
        }
    }
    // The host's own descriptor through /proc, and its memory.
    for write in [true, false] {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .open(format!("/proc/{host}/fd/{memfd}"));
        if let Ok(f) = f {
            breaches += 1 + scribble(&f.into());
        }
    }
    let mem = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{host}/mem"));
    breaches + usize::from(mem.is_ok())
}

/// What a member's requests may do: its own file handed over, an `O_PATH`
/// descriptor refused, a cut through a descriptor that may not cut
/// refused (the kernel's `ftruncate` on it); the owner's file it cannot
/// open at all.
fn requests(name: &str, owner: &std::path::Path, own: &std::path::Path) -> bool {
    let path_only = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(owner)
        .unwrap();
    let reading = std::fs::File::open(own).unwrap();
    let writing = std::fs::OpenOptions::new().write(true).open(own).unwrap();
    SharedCache::hand_over_named(name, path_only.as_fd(), false).is_err()
        && SharedCache::hand_over_named(name, reading.as_fd(), true).is_err()
        && SharedCache::hand_over_named(name, reading.as_fd(), false).is_ok()
        && SharedCache::hand_over_named(name, writing.as_fd(), true).is_ok()
        && std::fs::File::open(owner)
            .is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
}

#[test]
fn a_member_of_the_group_changes_no_byte_of_the_owners_files() {
    if !root("member: credentials") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let name = dir.path().join("cache.sock").to_str().unwrap().to_owned();
    let owner = dir.path().join("owner");
    let own = dir.path().join("member");
    for (path, uid) in [(&owner, 0), (&own, NOBODY)] {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .unwrap();
        std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
    }
    std::fs::write(&own, b"the member's own").unwrap();
    // The member is forked before the cache exists: it inherits nothing
    // of it, and waits for the host's pid and memory file's number.
    let (mut tell, mut hear) = UnixStream::pair().unwrap();
    let (n, o, m) = (name.clone(), owner.clone(), own.clone());
    let member = fork(move || {
        let mut said = [0u8; 8];
        hear.read_exact(&mut said).unwrap();
        let host = u32::from_ne_bytes(said[..4].try_into().unwrap());
        let memfd = i32::from_ne_bytes(said[4..].try_into().unwrap());
        become_member() && try_every_way(&n, host, memfd) == 0 && requests(&n, &o, &m)
    });

    let cache = SharedCache::new(64 * PAGE as u64).unwrap();
    let host = cache.host(&name, Some(GROUP)).unwrap();
    let f = open(&cache, &owner, false);
    // A page written back (clean in the cache) and one dirty.
    let mut model = vec![b'c'; PAGE];
    model.extend_from_slice(&[b'd'; PAGE]);
    f.write_at(&model[..PAGE], 0).unwrap();
    f.sync_data().unwrap();
    f.write_at(&model[PAGE..], PAGE as u64).unwrap();
    let mut said = std::process::id().to_ne_bytes().to_vec();
    said.extend_from_slice(&cache.memory_file().as_raw_fd().to_ne_bytes());
    tell.write_all(&said).unwrap();
    // The owner writes and reads while the member tries.
    let mut status = 0;
    let mut round = 0u8;
    loop {
        model.truncate(2 * PAGE);
        model.extend_from_slice(&[round; PAGE]);
        f.write_at(&model[2 * PAGE..], 2 * PAGE as u64).unwrap();
        let mut buf = vec![0; 3 * PAGE];
        assert_eq!(f.read_at(&mut buf, 0).unwrap(), 3 * PAGE);
        assert!(
            buf == model,
            "round {round}: the owner read bytes not its own"
        );
        // SAFETY: polls our own child.
        if unsafe { libc::waitpid(member, &mut status, libc::WNOHANG) } == member {
            break;
        }
        round = round.wrapping_add(1);
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the member: {status:#x}"
    );
    f.sync_data().unwrap();
    assert!(
        std::fs::read(&owner).unwrap() == model,
        "the disk got bytes not the owner's"
    );
    // The member's file, handed over and cut through its own descriptor,
    // is the kernel's for the group.
    assert_eq!(std::fs::read(&own).unwrap(), b"");
    drop(host);
}
