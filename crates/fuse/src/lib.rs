//! foliocache-fuse: a directory served through a foliocache page cache
//! over FUSE, so that unmodified programs run on the cache.
//!
//! The problem: most programs will never link foliocache. A FUSE mount
//! puts the cache under any of them (cp, tar, fio, a database): the tree
//! under a backing directory appears at a mount point; metadata
//! operations pass through to the backing, file data goes through one
//! [`foliocache::Cache`] (opened `O_DIRECT` underneath), and every file is
//! opened toward the kernel with `FOPEN_DIRECT_IO` so that the kernel's
//! page cache does not keep a second copy.
//!
//! Concepts:
//! - [`FolioFs`] ([`fs`]): the FUSE operations.
//! - the inode table ([`inode`]): each node the kernel knows is reached
//!   by an `O_PATH` descriptor of its backing inode, opened by
//!   one-component `openat(.., O_NOFOLLOW)` from its parent's; every
//!   operation starts from such a descriptor, so nothing outside the
//!   backing directory is ever opened (symlinks are read back as text,
//!   never followed by the server). The descriptors are bounded
//!   (`fds.rs`): unused ones close and reopen from the parent by name, so
//!   a million files need no million descriptors.
//! - the control file ([`control`]): `.foliocache-control` at the mount
//!   root, where `foliocache stat` reads the cache's figures as JSON.
//! - [`NullFs`] ([`null`]): the crossing alone (files of zeros, no
//!   cache), the ceiling of any FUSE server, measured beside the mount.
//! - `ObjectFs` (module `objects`, feature `object-store`, on by
//!   default): an object store's tree (`file://`, `s3://`, `gs://`,
//!   `az://`), read-only, its bytes through the object-store crate's
//!   `CachedStore` over a cache of its own (and its disk tier), the
//!   kernel keeping a version's pages across opens; `serve_objects`
//!   mounts it.
//! - [`serve`]: mount, serve with several threads until unmounted, SIGINT,
//!   SIGTERM or SIGHUP, write every dirty folio back, unmount.
//! - warm restarts (`warm.rs`): with [`MountOptions::state`], the cache's
//!   list of cached ranges is loaded at start and saved periodically and
//!   at unmount, so a remount starts warm.
//! - a named shared cache ([`MountOptions::cache_name`], [`foliocache::AnyFile`]):
//!   instead of a cache of its own, the server attaches to a cache that
//!   `foliocache cache serve` hosts and serves the files from its pages
//!   (`SharedFile`s), so programs attached to it (`foliocache run
//!   --cache`) read and write the same pages at library speed while
//!   programs that are not go through the mount: one copy of each page,
//!   each write seen by the other side's next read. The kernel then keeps
//!   no entry or attribute past its request (the group changes names and
//!   sizes behind the server); warm restarts, `dontcache` and metrics
//!   are the own cache's and are refused. Limits: a shared mapping
//!   (`mmap`) of a file through the mount is a copy in the kernel's page
//!   cache, which sees the group's writes only where the kernel drops it
//!   (a write or truncation through the mount); file times move at
//!   writeback for the group's writes; the control file has no per-file
//!   figures.
//!
//! Locking: the inode table, the handle table and each control session
//! are behind their own `parking_lot` mutex, held only for a table
//! operation (never across IO or a reply); a node's kept cache handle is
//! behind its own mutex, taken after the table's is released. The
//! cache's locks are its own (see foliocache).
//!
//! Durability: as with the kernel's page cache, data written through the
//! mount stays dirty in the cache after `close` until the flusher, `fsync`
//! or the unmount writes it back; a killed server (SIGKILL) loses what was
//! not synced. File times are the backing's, except that a write through
//! the mount moves mtime and ctime at once (the server keeps the write's
//! time while the backing's, moved only at writeback, is older); a
//! `setattr` of the times writes the file back first and then sets them,
//! so `touch -d` and `cp -p` keep theirs.
//!
//! Memory maps: the files are direct IO toward the kernel, which maps
//! them shared only with `FUSE_DIRECT_IO_ALLOW_MMAP` (Linux 6.6 and
//! later; asked for at init, reported by [`FolioFs::shared_mmap`] and the
//! control file). The mapped pages then live in the kernel's page cache,
//! a second copy kept coherent by the kernel: it writes a mapping's dirty
//! pages back through the server (so into the cache) before every direct
//! read or write of their range, at `msync` and when the mapping goes,
//! and drops the mapped pages a direct write, a truncate, a hole punch or
//! a zeroed range covers (before it sends the write: a fault racing the
//! write could in principle bring back the old bytes; not seen on 6.18,
//! see docs/design.md section 11). On older kernels a shared mapping fails
//! with `ENODEV` (logged at mount); private ones work everywhere.
//!
//! `fallocate`: hole punching, preallocation (with and without
//! `KEEP_SIZE`) and `ZERO_RANGE` reach the backing with the cache kept
//! coherent; the kernel's FUSE client refuses `COLLAPSE_RANGE` and
//! `INSERT_RANGE` itself (`EOPNOTSUPP`).
//!
//! Limits, known:
//! - `mknod` makes FIFOs and sockets; devices are refused (`EPERM`);
//! - a directory is read whole at `opendir` (its listing is a snapshot);
//! - `st_ino` through the mount is the server's node id (stable while the
//!   kernel knows the file), and readdir's `d_ino` is the same for nodes
//!   it knows, the backing's inode number otherwise;
//! - as root, a node made for a request is given the requester's owner by
//!   name just after it is made (a file by its descriptor).
//!
//! When not to use it: a program that can link foliocache gets the same
//! cache without the FUSE crossing (two context switches and a copy per
//! request).
#![deny(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "object-store")]
mod cloud_env;
pub mod control;
pub mod errno;
mod fds;
pub mod fs;
pub mod inode;
pub mod null;
#[cfg(feature = "object-store")]
pub mod objects;
mod warm;

use std::io;
use std::path::{Path, PathBuf};
use std::thread;

use foliocache::{Cache, SharedCache};
use fuser::{BackgroundSession, Config, MountOption, Session, SessionACL};
use nix::sys::signal::{SigSet, Signal};

pub use control::{CONTROL_INO, CONTROL_NAME};
pub use fs::FolioFs;
pub use null::{spawn_null, NullFs};
#[cfg(feature = "object-store")]
pub use objects::{serve_objects, spawn_objects, store_for_url, ObjectFs, ObjectOptions};

/// The IO engine's threads of an object mount's cache
/// ([`MountOptions::build_object_cache`]): a stream's prefetch has up to
/// this many GETs of 2 MiB in flight (64 MiB; the store's budget of GET
/// bytes, an eighth of the cache, bounds it too).
pub const OBJECT_IO_THREADS: usize = 32;

/// How a mount is made: the cache's size and the mount's options.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct MountOptions {
    /// The cache's capacity in bytes.
    pub capacity: usize,
    /// The largest folio the cache makes (`None`: its default).
    pub max_folio: Option<usize>,
    /// Every read and write uncached (`DONTCACHE`).
    pub dontcache: bool,
    /// Let users other than the mounting one use the mount (FUSE's
    /// `allow_other`; as a non-root user it needs `user_allow_other` in
    /// /etc/fuse.conf).
    pub allow_other: bool,
    /// Threads serving requests (at least 1).
    pub threads: usize,
    /// Where [`serve`] serves the cache's Prometheus metrics at `/metrics`
    /// while mounted (`None`: nowhere; [`FolioFs::cache`] gives an embedding
    /// program the cache to register itself).
    pub metrics: Option<std::net::SocketAddr>,
    /// The state file of warm restarts (`None`: none): loaded in the
    /// background at start, saved periodically and at unmount.
    pub state: Option<std::path::PathBuf>,
    /// The most descriptors the server keeps open for the nodes the kernel
    /// knows (half for their `O_PATH` descriptors, half for cached files;
    /// the least is 16 each). `None`: the open-file limit (its soft
    /// limit, raised to the hard one at start) less 256 kept for the rest.
    /// More than that is refused (`InvalidInput`) when the file system is
    /// made: opens would fail with `EMFILE` before the budgets were met.
    pub max_open: Option<usize>,
    /// Serve through the named shared cache of this name or socket path
    /// (hosted by `foliocache cache serve`, attached to by
    /// [`SharedCache::attach_named`]) instead of a cache of the mount's
    /// own: programs attached to it share the mount's pages. `capacity`
    /// and `max_folio` are then unused; `dontcache`, `metrics` and
    /// `state`, which are the own cache's, must be off.
    pub cache_name: Option<String>,
}

impl MountOptions {
    /// Options for a cache of `capacity` bytes: cached IO, the mounting
    /// user only, one serving thread per CPU (2 at least, 8 at most).
    pub fn new(capacity: usize) -> MountOptions {
        let cpus = thread::available_parallelism().map_or(2, |n| n.get());
        MountOptions {
            capacity,
            max_folio: None,
            dontcache: false,
            allow_other: false,
            threads: cpus.clamp(2, 8),
            metrics: None,
            state: None,
            max_open: None,
            cache_name: None,
        }
    }

    /// The cache these options ask for.
    ///
    /// # Errors
    /// [`foliocache::CacheBuilder::build`]'s (a capacity too small, no
    /// memory).
    pub fn build_cache(&self) -> io::Result<Cache> {
        self.cache_builder().build()
    }

    /// The cache these options ask for, for a mount of an object store:
    /// its IO engine with [`OBJECT_IO_THREADS`] threads, each a GET of a
    /// stream's prefetch in flight (a GET holds its thread until its last
    /// byte), so that a stream keeps the link full where its latency
    /// times its bandwidth is many windows (docs/object-store.md, "Cold
    /// reads").
    ///
    /// # Errors
    /// As [`build_cache`](Self::build_cache).
    pub fn build_object_cache(&self) -> io::Result<Cache> {
        let mut io = backing::aio::IoEngineConfig::new();
        io.threads = OBJECT_IO_THREADS;
        self.cache_builder().io_engine(io).build()
    }

    fn cache_builder(&self) -> foliocache::CacheBuilder {
        let mut b = Cache::builder().capacity(self.capacity);
        if let Some(m) = self.max_folio {
            b = b.max_folio_size(m);
        }
        b
    }

    /// The file system these options ask for over `backing_dir` (a
    /// canonical directory): its cache built, or the named cache attached
    /// to; warm restarts started.
    ///
    /// # Errors
    /// [`build_cache`](Self::build_cache)'s, or attaching's
    /// ([`SharedCache::attach_named`]); `InvalidInput` for a named cache
    /// with `dontcache`, `metrics` or `state`; the directory's.
    pub fn build_fs(&self, backing_dir: &Path) -> io::Result<FolioFs> {
        let Some(name) = &self.cache_name else {
            let cache = self.build_cache()?;
            let mut fs = FolioFs::with_max_open(backing_dir, cache, self.dontcache, self.max_open)?;
            if let Some(path) = &self.state {
                fs.warm_restarts(path)?;
            }
            return Ok(fs);
        };
        let own = [
            (self.dontcache, "dontcache"),
            (self.metrics.is_some(), "metrics"),
            (self.state.is_some(), "a state file (warm restarts)"),
        ];
        if let Some((_, what)) = own.iter().find(|(set, _)| *set) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{what}: for a mount's own cache only, not a named cache ({name})"),
            ));
        }
        let cache = SharedCache::attach_named(name)
            .map_err(|e| io::Error::new(e.kind(), format!("attaching to the cache {name}: {e}")))?;
        FolioFs::with_shared(backing_dir, cache, name, self.max_open)
    }

    /// fuser's configuration for these options: `default_permissions`
    /// (the kernel checks permissions from the attributes), `nosuid`,
    /// `nodev`, `allow_other` only if asked, several serving threads each
    /// with its own cloned `/dev/fuse` descriptor.
    pub fn fuser_config(&self, backing_dir: &Path) -> Config {
        self.config_named(&backing_dir.display().to_string())
    }

    /// fuser's configuration for a mount of `source` (a directory, a URL),
    /// as [`fuser_config`](Self::fuser_config).
    fn config_named(&self, source: &str) -> Config {
        let mut c = Config::default();
        c.mount_options = vec![
            // Mount options are comma-separated: keep the name plain.
            MountOption::FSName(
                format!("foliocache:{source}")
                    .chars()
                    .map(|c| {
                        if c == ',' || c.is_whitespace() || c == '\\' {
                            '_'
                        } else {
                            c
                        }
                    })
                    .collect(),
            ),
            MountOption::Subtype("foliocache".into()),
            MountOption::DefaultPermissions,
            MountOption::NoSuid,
            MountOption::NoDev,
        ];
        c.acl = if self.allow_other {
            SessionACL::All
        } else {
            SessionACL::Owner
        };
        c.n_threads = Some(self.threads.max(1));
        c.clone_fd = true;
        c
    }
}

/// Checks that `backing_dir` is a directory and `mountpoint` is not inside
/// it (the server would then look into its own mount); a dead mount left
/// at `mountpoint` by a killed server is unmounted.
fn check_paths(backing_dir: &Path, mountpoint: &Path) -> io::Result<(PathBuf, PathBuf)> {
    let b = backing_dir.canonicalize()?;
    let m = check_mountpoint(mountpoint)?;
    if !b.is_dir() {
        return Err(nix::errno::Errno::ENOTDIR.into());
    }
    if m.starts_with(&b) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the mount point {} is inside the backing directory {}: choose one outside it",
                m.display(),
                b.display()
            ),
        ));
    }
    Ok((b, m))
}

/// `mountpoint`, canonical, a dead mount left there by a killed server
/// unmounted first.
fn check_mountpoint(mountpoint: &Path) -> io::Result<PathBuf> {
    // A server killed without unmounting leaves its mount behind, dead:
    // every operation on it fails with ENOTCONN (a stat may still succeed
    // from attributes the kernel cached; opening it as a directory asks
    // the server). Take it away, so that a restart serves the backing.
    let dead = |p: &Path| {
        let e = match std::fs::read_dir(p) {
            Ok(_) => return false,
            Err(e) => e,
        };
        e.raw_os_error() == Some(nix::errno::Errno::ENOTCONN as i32)
    };
    if dead(mountpoint) {
        log::warn!(
            "foliocache-fuse: {} is a dead mount (its server was killed): unmounting it",
            mountpoint.display()
        );
        lazy_unmount(mountpoint);
    }
    mountpoint.canonicalize()
}

/// Mounts `backing_dir` at `mountpoint` and returns the session, not yet
/// serving ([`Session::run`] serves it in this thread).
///
/// # Errors
/// A bad path (`backing_dir` not a directory, `mountpoint` missing or
/// inside `backing_dir`), the cache's build error, or the mount's
/// (no `/dev/fuse`, no `fusermount3`, not permitted).
pub fn session(
    backing_dir: &Path,
    mountpoint: &Path,
    opts: &MountOptions,
) -> io::Result<Session<FolioFs>> {
    let (b, m) = check_paths(backing_dir, mountpoint)?;
    let fs = opts.build_fs(&b)?;
    Session::new(fs, &m, &opts.fuser_config(&b))
}

/// Mounts and serves in background threads (for tests and programs that
/// embed the mount). Dropping the returned session, or
/// [`BackgroundSession::umount_and_join`], unmounts; the filesystem then
/// writes every dirty folio back.
///
/// # Errors
/// As [`session`].
pub fn spawn(
    backing_dir: &Path,
    mountpoint: &Path,
    opts: &MountOptions,
) -> io::Result<BackgroundSession> {
    session(backing_dir, mountpoint, opts)?.spawn()
}

/// Why a mount cannot be made here, or `None`: no `/dev/fuse`, or not
/// root (who mounts with no helper) and no `fusermount3` on `PATH`
/// (Debian's fuse3). For tests and benchmarks that skip or leave FUSE out
/// with a reason.
pub fn unavailable() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse".into());
    }
    let root = nix::unistd::geteuid().is_root();
    let helper = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").exists()));
    if !root && !helper {
        return Some("not root and no fusermount3 on PATH (apt-get install fuse3)".into());
    }
    None
}

/// Unmounts `mountpoint` lazily (detached: it goes once no process uses
/// it), as root with `umount2(MNT_DETACH)`, else with `fusermount3 -u -z`.
fn lazy_unmount(mountpoint: &Path) {
    if nix::mount::umount2(mountpoint, nix::mount::MntFlags::MNT_DETACH).is_ok() {
        return;
    }
    let _ = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg("-z")
        .arg(mountpoint)
        .status();
}

/// Mounts `backing_dir` at `mountpoint` and serves it in this thread until
/// it is unmounted (`fusermount3 -u`, `umount`) or the process gets
/// SIGINT, SIGTERM or SIGHUP, which unmount it (lazily if it is busy).
/// Every dirty folio is then written back ([`Cache::sync_all`]; with a
/// named cache, each file the kernel knows through the server's
/// descriptor, then what the group left dirty,
/// [`SharedCache::write_back_all`]) before this returns. `ready` is
/// called once the mount is up.
///
/// The three signals are blocked in the calling thread (and so in every
/// thread it starts from then on) and taken by a thread of their own:
/// call this before starting other threads.
///
/// # Errors
/// As [`session`]; the session's error; the writeback's at unmount.
pub fn serve(
    backing_dir: &Path,
    mountpoint: &Path,
    opts: &MountOptions,
    ready: impl FnOnce(),
) -> io::Result<()> {
    let signals = block_unmount_signals()?;
    let (b, m) = check_paths(backing_dir, mountpoint)?;
    let fs = opts.build_fs(&b)?;
    // Served until this returns (the mount ended).
    let _metrics = match (opts.metrics, fs.cache()) {
        (Some(addr), Some(cache)) => {
            let mut registry = prometheus_client::registry::Registry::default();
            foliocache::metrics::register(cache, &mut registry);
            Some(foliocache::metrics::serve(addr, registry)?)
        }
        _ => None,
    };
    let sync_error = fs.sync_error();
    let session = Session::new(fs, &m, &opts.fuser_config(&b))?;
    run_until_unmounted(session, &m, signals, ready)?;
    let failed = sync_error.lock().take();
    match failed {
        Some(e) => Err(io::Error::other(format!(
            "writing dirty data back at unmount failed: {e}"
        ))),
        None => Ok(()),
    }
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread (and so in
/// every thread it starts from then on), for [`run_until_unmounted`] to
/// take them.
fn block_unmount_signals() -> io::Result<SigSet> {
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGINT);
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGHUP);
    signals.thread_block().map_err(io::Error::from)?;
    Ok(signals)
}

/// Serves `session`, mounted at `m`, until it is unmounted or one of
/// `signals` (blocked by [`block_unmount_signals`]) comes, which unmounts
/// it (lazily if it is busy); `ready` is called first. The session runs
/// in fuser's background threads and this thread waits for it.
///
/// The unmount happens once: fuser unmounts again when its mount handle
/// is dropped, and its test of whether the connection still lives reads
/// the kernel's `POLLERR` (`fuse_dev_poll`: the connection is gone) as
/// "mounted", so after `fusermount3 -u` it unmounted the path a second
/// time ("Failed to umount filesystem: Invalid argument", or worse, a
/// new mount made there since). When the kernel ended the session, that
/// handle is kept, not dropped (a descriptor of a dead connection until
/// the process exits); after any other end it is dropped, unmounting.
fn run_until_unmounted<F: fuser::Filesystem>(
    session: Session<F>,
    m: &Path,
    signals: SigSet,
    ready: impl FnOnce(),
) -> io::Result<()> {
    {
        let m = m.to_path_buf();
        thread::Builder::new()
            .name("foliocache-signals".into())
            .spawn(move || {
                if let Ok(sig) = signals.wait() {
                    log::info!("foliocache-fuse: {sig}: unmounting {}", m.display());
                    if nix::mount::umount(&m).is_err() {
                        lazy_unmount(&m);
                    }
                }
            })?;
    }
    let mut background = std::mem::ManuallyDrop::new(session.spawn()?);
    ready();
    // The session's thread, joined here; a finished one in its place.
    let served = std::mem::replace(&mut background.guard, thread::spawn(|| Ok(())));
    let ended = served
        .join()
        .map_err(|_| io::Error::other("the FUSE session's thread panicked"))?;
    match ended {
        Ok(()) => Ok(()),
        // The kernel ends the device's reads with ECONNABORTED rather than
        // ENODEV when the connection was aborted and the server asked for
        // abort errors (`fuse_dev_do_read`). The mount is over either way,
        // and `destroy` has run (the writeback at unmount): its outcome is
        // the answer. (Seen once in CI as the end of a lazy unmount after
        // SIGTERM: the server exited 1, "Software caused connection abort".)
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ECONNABORTED as i32) => {
            log::info!(
                "foliocache-fuse: the connection to {} was aborted",
                m.display()
            );
            Ok(())
        }
        Err(e) => {
            // Dropped: fuser unmounts what may still be mounted.
            drop(std::mem::ManuallyDrop::into_inner(background));
            Err(e)
        }
    }
}
