//! Named shared caches (docs/design.md, section 13, "Named caches"): a process
//! holding a [`SharedCache`] hosts it at a unix socket
//! ([`SharedCache::host`]), and any process whose user may attaches to it
//! by name ([`SharedCache::attach_named`]): the host checks the peer's
//! credentials (`SO_PEERCRED`, `SO_PEERGROUPS`) and passes the cache's
//! memory file (`SCM_RIGHTS`); nothing else crosses the socket.
//!
//! Who may attach: the host's own user alone. A process that maps the
//! segment can read every cached byte and change every page, so no process
//! of another user ever gets the memory file (mode 0600): root and, where
//! the host names one, the members of a group are served as members
//! (`member.rs`: their files are handed to the kernel for the group, not
//! mapped). The host decides before it sends anything; a refused peer
//! gets a line saying why and no descriptor.
//!
//! Where a name lives: `$XDG_RUNTIME_DIR/foliocache/NAME`, or
//! `/tmp/foliocache-UID/NAME` without one, in a directory of the user's
//! own that no one else may write (a directory that is anything else is
//! refused). A name with a `/` is the socket's path itself, for a cache
//! other users attach to (the user's runtime directory is theirs alone):
//! there the client trusts the socket file's owner as the host.
//!
//! The client trusts the host as much as the files: a host could hand it
//! a cache of wrong bytes. So a client attaches only to a host of its own
//! user, root, or (for a path) the socket's owner: a socket another user
//! put in a shared directory under a name cannot pass for the user's.

use std::io::{self, Read};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use super::member::{member_only, MEMBER};
use super::SharedCache;

/// The longest a name is.
const NAME_MAX: usize = 64;
/// What a host says before the memory file, to a peer it serves (and to
/// a member whose request it granted).
pub(super) const YES: &[u8] = b"ok\n";
/// What a host says first to a peer it refuses (the reason follows).
pub(super) const NO: &[u8] = b"refused: ";
/// The longest a client waits for the host's answer, and a host for a
/// peer to take it.
pub(super) const TIMEOUT: Duration = Duration::from_secs(5);

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what)
}

/// The directory a user's cache names live in.
fn names_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir.join("foliocache"),
        _ => PathBuf::from(format!(
            "/tmp/foliocache-{}",
            rustix::process::geteuid().as_raw()
        )),
    }
}

/// Whether `name` names a socket by its path (it has a `/`) rather than
/// in the user's directory of names.
fn is_path(name: &str) -> bool {
    name.contains('/')
}

/// [`SharedCache::socket_path`].
fn socket_path(name: &str) -> io::Result<PathBuf> {
    if is_path(name) {
        if name.ends_with('/') {
            return Err(invalid(format!(
                "cache {name:?}: a socket's path ends with a file name"
            )));
        }
        return Ok(PathBuf::from(name));
    }
    let good = !name.is_empty()
        && name.len() <= NAME_MAX
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if !good {
        return Err(invalid(format!(
            "cache name {name:?}: 1 to {NAME_MAX} letters, digits, `.`, `_` or `-`, \
             not starting with `.` (or a socket's path, with a `/`)"
        )));
    }
    Ok(names_dir().join(name))
}

/// Makes the user's directory of names if it is missing, and refuses one
/// that is not a directory of this user's that no one else may write.
fn make_names_dir(dir: &Path) -> io::Result<()> {
    if let Some(parent) = dir.parent() {
        if !parent.exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such directory", parent.display()),
            ));
        }
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(annotate(e, dir, "making")),
    }
    let meta = std::fs::symlink_metadata(dir)?;
    let me = rustix::process::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: not a directory of uid {me}'s that only it may write; \
                 refusing to keep cache names there",
                dir.display()
            ),
        ));
    }
    Ok(())
}

fn annotate(e: io::Error, path: &Path, doing: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{doing} {}: {e}", path.display()))
}

/// A cache hosted at a socket ([`SharedCache::host`]): while it lives,
/// processes that may attach to the cache by its name; dropped, it stops
/// answering and removes its socket (the cache itself lives on in every
/// process attached).
pub struct Host {
    path: PathBuf,
    /// The socket's inode, so that a drop removes only its own socket.
    ino: (u64, u64),
    listener: Arc<UnixListener>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Host {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Whom a host serves besides its own user and root.
#[derive(Clone, Copy)]
struct Access {
    owner: u32,
    group: Option<u32>,
}

impl SharedCache {
    /// The socket of the cache named `name`: a name (up to 64 letters,
    /// digits, `.`, `_` and `-`, not starting with `.`) in the user's
    /// directory of names (`$XDG_RUNTIME_DIR/foliocache`, or
    /// `/tmp/foliocache-UID`), or, with a `/`, the path itself, for a
    /// cache other users attach to.
    ///
    /// # Errors
    /// A name that is neither.
    pub fn socket_path(name: &str) -> io::Result<PathBuf> {
        socket_path(name)
    }

    /// Hosts this cache under `name` ([`SharedCache::socket_path`]): a thread of this
    /// process answers each process that connects, passing the memory
    /// file to those of this user; root and the members of `group` (a
    /// gid) where one is given are served as members (their files handed
    /// to the kernel for the group, [`SharedCache::hand_over_named`],
    /// never the memory file), and the others get a line saying why. The
    /// memory file's mode becomes 0600; the socket's 0600, or 0660 with
    /// the group as its group. The threads take the calling thread's
    /// signal mask.
    ///
    /// A socket left by a host that is gone is replaced; one that still
    /// answers is not.
    ///
    /// # Errors
    /// A bad name, a directory of names that is not the user's alone, a
    /// cache of that name served already, a group this process may not
    /// give the files, or the socket could not be made.
    pub fn host(&self, name: &str, group: Option<u32>) -> io::Result<Host> {
        let path = socket_path(name)?;
        if !is_path(name) {
            make_names_dir(path.parent().unwrap_or(Path::new("/")))?;
        }
        if std::fs::symlink_metadata(&path).is_ok() {
            match UnixStream::connect(&path) {
                Ok(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!("a cache is served at {} already", path.display()),
                    ))
                }
                Err(_) if is_socket(&path) => std::fs::remove_file(&path)
                    .map_err(|e| annotate(e, &path, "removing the stale socket"))?,
                Err(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!("{}: exists and is not a socket", path.display()),
                    ))
                }
            }
        }
        // No process of another user maps the cache (`member.rs`).
        rustix::fs::fchmod(self.inner.seg.fd(), rustix::fs::Mode::from_raw_mode(0o600))?;
        let mode = if group.is_some() { 0o660 } else { 0o600 };
        let listener = UnixListener::bind(&path).map_err(|e| annotate(e, &path, "binding"))?;
        let set_mode = || -> io::Result<()> {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
            if let Some(g) = group {
                std::os::unix::fs::chown(&path, None, Some(g)).map_err(|e| {
                    invalid(format!(
                        "giving the socket to group {g}: {e} (a group of this user's)"
                    ))
                })?;
            }
            Ok(())
        };
        let meta = set_mode()
            .and_then(|()| std::fs::symlink_metadata(&path))
            .inspect_err(|_| {
                let _ = std::fs::remove_file(&path);
            })?;
        // Registered now, so that the group counts the host among its
        // processes while it lives (a launcher that finds no one else
        // writes back: `foliocache run --cache`).
        self.inner.me.id(&self.inner.seg)?;
        let listener = Arc::new(listener);
        let stop = Arc::new(AtomicBool::new(false));
        let access = Access {
            owner: rustix::process::geteuid().as_raw(),
            group,
        };
        let (cache, l, s) = (self.clone(), listener.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("foliocache-host".into())
            .spawn(move || cache.answer(&l, &s, access))?;
        Ok(Host {
            path,
            ino: (meta.dev(), meta.ino()),
            listener,
            stop,
            thread: Some(thread),
        })
    }

    /// Answers each peer that connects until `stop` is set.
    fn answer(&self, listener: &UnixListener, stop: &AtomicBool, access: Access) {
        let members = Arc::new(AtomicUsize::new(0));
        loop {
            let conn = listener.accept();
            if stop.load(Ordering::Acquire) {
                return;
            }
            match conn {
                // (A peer gone before the answer is nothing to this host.)
                Ok((conn, _)) => {
                    let _ = self.answer_one(conn, access, &members);
                }
                // Out of descriptors, say: a breath before the next.
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    fn answer_one(
        &self,
        conn: UnixStream,
        access: Access,
        members: &Arc<AtomicUsize>,
    ) -> io::Result<()> {
        conn.set_write_timeout(Some(TIMEOUT))?;
        let peer = rustix::net::sockopt::socket_peercred(&conn)?;
        let uid = peer.uid.as_raw();
        let member = uid != access.owner
            && (uid == 0
                || access
                    .group
                    .is_some_and(|g| peer.gid.as_raw() == g || peer_groups(&conn).contains(&g)));
        if member {
            return self.serve_member(conn, members);
        }
        if uid != access.owner {
            let why = match access.group {
                Some(g) => format!(
                    "uid {uid} is not the cache's owner ({}) nor in its group {g}\n",
                    access.owner
                ),
                None => format!("uid {uid} is not the cache's owner ({})\n", access.owner),
            };
            return say_no(&conn, &why);
        }
        send_with_fd(&conn, YES, self.inner.seg.fd())
    }

    /// Attaches to the cache hosted under `name` ([`SharedCache::socket_path`];
    /// [`SharedCache::host`]): connects, checks that the host is this
    /// user, root or (for a path) the socket's owner, and maps the memory
    /// file the host passes, as [`SharedCache::attach`] does.
    ///
    /// # Errors
    /// A bad name, no cache served under it, a host this process does not
    /// trust, a refusal (the host's reason), a process the host serves as
    /// a member, not of its user ([`SharedCache::member_only`]), or a
    /// memory file that is not a shared cache.
    pub fn attach_named(name: &str) -> io::Result<SharedCache> {
        let (conn, path) = connect(name)?;
        let (said, fd) = receive(&conn)?;
        match fd {
            Some(fd) if said == YES => SharedCache::attach(fd),
            None if said == MEMBER => Err(member_only(&path)),
            _ => Err(answer_error(&path, &said)),
        }
    }
}

/// Connects to the host of the cache `name`, checking that it is this
/// user, root or (for a path) the socket's owner.
pub(super) fn connect(name: &str) -> io::Result<(UnixStream, PathBuf)> {
    let path = socket_path(name)?;
    let conn = UnixStream::connect(&path).map_err(|e| refused_or_absent(&path, e))?;
    conn.set_read_timeout(Some(TIMEOUT))?;
    let host = rustix::net::sockopt::socket_peercred(&conn)?.uid.as_raw();
    let me = rustix::process::geteuid().as_raw();
    let owner = is_path(name)
        .then(|| std::fs::metadata(&path).ok().map(|m| m.uid()))
        .flatten();
    if host != me && host != 0 && Some(host) != owner {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: served by uid {host}, neither this user ({me}), root, nor the socket's owner",
                path.display()
            ),
        ));
    }
    Ok((conn, path))
}

/// The error of a host's answer `said` that is not the one expected: its
/// refusal's reason, or an answer no host gives.
pub(super) fn answer_error(path: &Path, said: &[u8]) -> io::Error {
    match said.strip_prefix(NO) {
        Some(why) => io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(why).trim_end()
            ),
        ),
        None => io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a foliocache host's answer", path.display()),
        ),
    }
}

/// Says `said` to the peer at `conn`, passing `fd` with it (`SCM_RIGHTS`).
pub(super) fn send_with_fd(conn: &UnixStream, said: &[u8], fd: BorrowedFd<'_>) -> io::Result<()> {
    let fds = [fd];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    control.push(SendAncillaryMessage::ScmRights(&fds));
    rustix::net::sendmsg(
        conn,
        &[io::IoSlice::new(said)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    Ok(())
}

/// Refuses the peer at `conn`, saying `why` (a line).
pub(super) fn say_no(conn: &UnixStream, why: &str) -> io::Result<()> {
    let mut line = NO.to_vec();
    line.extend_from_slice(why.as_bytes());
    rustix::net::send(conn, &line, SendFlags::NOSIGNAL)?;
    Ok(())
}

/// What the peer said and the one descriptor it passed, if any (any
/// others are closed).
pub(super) fn receive(conn: &UnixStream) -> io::Result<(Vec<u8>, Option<OwnedFd>)> {
    let mut buf = [0u8; 256];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        conn,
        &mut [io::IoSliceMut::new(&mut buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fd = None;
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = msg {
            for f in fds {
                // The first is kept; any other is dropped, so closed.
                fd.get_or_insert(f);
            }
        }
    }
    let mut said = buf[..got.bytes].to_vec();
    // A refusal's line may come in more than one piece.
    if said.starts_with(NO) && !said.ends_with(b"\n") {
        let mut rest = Vec::new();
        let _ = conn.take(256).read_to_end(&mut rest);
        said.extend_from_slice(&rest);
    }
    Ok((said, fd))
}

/// The error of a connection to the socket at `path` that failed with
/// `e`: a socket this process may not connect to (its mode: the host
/// serves only its user, or the group it named) is said so, with its
/// owner, group and mode; any other failure is no cache served there.
fn refused_or_absent(path: &Path, e: io::Error) -> io::Error {
    let msg = match std::fs::metadata(path) {
        Ok(m) if e.kind() == io::ErrorKind::PermissionDenied => format!(
            "the cache at {} refuses this process ({e}): its socket is uid {}'s, group {}, \
             mode {:o}: its host (`foliocache cache serve --group`) names the group that may \
             attach",
            path.display(),
            m.uid(),
            m.gid(),
            m.mode() & 0o777
        ),
        _ => format!(
            "no cache served at {} ({e}): `foliocache cache serve` hosts one",
            path.display()
        ),
    };
    io::Error::new(e.kind(), msg)
}

/// The peer's supplementary groups (`SO_PEERGROUPS`); none if the kernel
/// does not say.
fn peer_groups(conn: &UnixStream) -> Vec<u32> {
    let mut groups = vec![0u32; 256];
    let mut len = (groups.len() * 4) as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `groups`, a
    // buffer of that many bytes, and stores the length it wrote in `len`.
    let r = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERGROUPS,
            groups.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Vec::new();
    }
    groups.truncate(len as usize / 4);
    groups
}

fn is_socket(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

impl Drop for Host {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the thread's `accept` (it returns an error once the
        // socket is shut down).
        let _ = rustix::net::shutdown(self.listener.as_fd(), rustix::net::Shutdown::Both);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.ino) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").field("path", &self.path).finish()
    }
}
