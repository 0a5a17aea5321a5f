//! Memory files that outlive every process of a group, as the kernel's
//! page cache outlives every process (docs/design.md, section 12,
//! "Persisted segments").
//!
//! A launcher (`foliocache run`, a named cache's host) makes its memory
//! files, the guardian's segment and the group's cache, as files in a
//! directory of the user's on tmpfs ([`dir`]: `/dev/shm/foliocache-UID`,
//! mode 0700) instead of `memfd_create`: each file of one launch is named
//! by its stem (the launcher's pid and start time), `STEM.run` says whose
//! files they are (the directories served, or a named cache), `STEM.guard`
//! is the guardian's segment, `STEM.group` the group's cache; each is
//! mode 0600. A clean end removes them ([`Run::remove`]); a reboot loses
//! them, as it loses the kernel's page cache. What a launch killed with
//! its program leaves is found by the next one ([`leftovers`]) and written
//! back before it serves (`foliocache recover`, docs/operating.md).
//!
//! Who is alive is told by `flock`: the launcher holds `STEM.run` locked
//! while it lives, and the guardian's segment is locked through the
//! descriptor its program inherits, so a segment a live program still
//! writes is never taken for a leftover.
//!
//! Each page's file is checked at recovery to be the one it belonged to
//! (`file_version`): device and inode, and the inode's generation where
//! the filesystem gives it (`FS_IOC_GETVERSION`), else its birth time.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, Mode, OFlags};

/// Where the directories of each user's files are: tmpfs on every Linux.
const BASE: &str = "/dev/shm";

/// [`BASE`] with its links resolved (`/dev/shm` is a link to `/run/shm`
/// on some systems), as `/proc/self/fd` names the files in it.
fn base() -> PathBuf {
    std::fs::canonicalize(BASE).unwrap_or_else(|_| PathBuf::from(BASE))
}
/// The first line of a `.run` file.
const MAGIC: &[u8] = b"foliocache-persisted 1\n";
/// tmpfs's `f_type`.
const TMPFS_MAGIC: i64 = 0x0102_1994;
/// The guardian's segment's extension.
pub(crate) const GUARD: &str = "guard";
/// The group's cache's extension.
pub(crate) const GROUP: &str = "group";
/// The extension of the file that says whose files they are.
const RUN: &str = "run";

/// Whose files a launch's are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// `foliocache run`'s: the directories it serves (canonical).
    Dirs(Vec<PathBuf>),
    /// The host's of the named cache of this name (or socket path).
    Cache(String),
}

impl Owner {
    fn encode(&self) -> io::Result<Vec<u8>> {
        let mut out = MAGIC.to_vec();
        let mut line = |kind: &[u8], v: &[u8]| {
            if v.contains(&b'\n') || v.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a persisted file's owner with a newline or empty",
                ));
            }
            out.extend_from_slice(kind);
            out.extend_from_slice(v);
            out.push(b'\n');
            Ok(())
        };
        match self {
            Owner::Dirs(dirs) => {
                for d in dirs {
                    line(b"dir ", d.as_os_str().as_bytes())?;
                }
            }
            Owner::Cache(name) => line(b"cache ", name.as_bytes())?,
        }
        Ok(out)
    }

    fn decode(bytes: &[u8]) -> Option<Owner> {
        let rest = bytes.strip_prefix(MAGIC)?;
        let mut dirs = Vec::new();
        for line in rest.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            if let Some(d) = line.strip_prefix(b"dir ") {
                dirs.push(PathBuf::from(OsStr::from_bytes(d)));
            } else if let Some(n) = line.strip_prefix(b"cache ") {
                return Some(Owner::Cache(String::from_utf8(n.to_vec()).ok()?));
            } else {
                return None;
            }
        }
        (!dirs.is_empty()).then_some(Owner::Dirs(dirs))
    }

    /// Whether a launch of `self`'s writes back what a launch of `left`'s
    /// left before it serves: two sets of directories of which one holds a
    /// directory of the other's (or the same); a named cache of the same
    /// name; a named cache's leftovers for directories always (its
    /// programs may have served any); never directories' for a named
    /// cache (`foliocache run` writes them back).
    pub fn recovers(&self, left: &Owner) -> bool {
        match (self, left) {
            (Owner::Dirs(a), Owner::Dirs(b)) => a
                .iter()
                .any(|x| b.iter().any(|y| x.starts_with(y) || y.starts_with(x))),
            (Owner::Cache(a), Owner::Cache(b)) => a == b,
            (Owner::Dirs(_), Owner::Cache(_)) => true,
            (Owner::Cache(_), Owner::Dirs(_)) => false,
        }
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::Dirs(dirs) => {
                let dirs: Vec<_> = dirs.iter().map(|d| d.display().to_string()).collect();
                write!(f, "foliocache run --dir {}", dirs.join(" --dir "))
            }
            Owner::Cache(name) => write!(f, "the named cache {name}"),
        }
    }
}

/// Whether `fs` is a tmpfs (`f_type`'s width differs between targets).
#[allow(clippy::unnecessary_cast)]
fn is_tmpfs(fs: &rustix::fs::StatFs) -> bool {
    fs.f_type as i64 == TMPFS_MAGIC
}

/// This user's directory of persisted files, `/dev/shm/foliocache-UID`,
/// made (mode 0700) if missing. Refused where `/dev/shm` is not tmpfs (a
/// file there could outlive a reboot, after which the files it would write
/// back may have changed), or where the directory is not this user's alone.
///
/// # Errors
/// The reason, with the path.
pub fn dir() -> io::Result<PathBuf> {
    let uid = rustix::process::geteuid().as_raw();
    let dir = base().join(format!("foliocache-{uid}"));
    let refused = |why: &str| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{}: {why}", dir.display()),
        )
    };
    let fs = rustix::fs::statfs(BASE).map_err(|e| refused(&format!("statfs: {e}")))?;
    if !is_tmpfs(&fs) {
        return Err(refused("not on tmpfs"));
    }
    match rustix::fs::mkdir(&dir, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(refused(&format!("mkdir: {e}"))),
    }
    let st = std::fs::symlink_metadata(&dir)?;
    if !st.is_dir() || st.uid() != uid || st.mode() & 0o077 != 0 {
        return Err(refused("not a directory of this user's alone (mode 0700)"));
    }
    Ok(dir)
}

/// The files of one launch, made by [`Run::create`]; the launcher holds
/// `STEM.run` locked while it lives.
#[derive(Debug)]
pub struct Run {
    dir: PathBuf,
    stem: String,
    _lock: File,
}

impl Run {
    /// Says whose the launch's files are (`STEM.run`, locked by this
    /// process until [`remove`](Self::remove) or its death).
    ///
    /// # Errors
    /// No directory ([`dir`]), or the file could not be made.
    pub fn create(owner: &Owner) -> io::Result<Run> {
        let dir = dir()?;
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let stem = format!("{}-{since:x}", std::process::id());
        // Written under a name no scan reads, locked, then renamed: a scan
        // never finds it unlocked while this process lives.
        let tmp = dir.join(format!(".{stem}.tmp"));
        let mut f = create_file(&tmp, true)?;
        let f = (|| {
            rustix::fs::flock(&f, FlockOperation::LockExclusive)?;
            f.write_all(&owner.encode()?)?;
            std::fs::rename(&tmp, dir.join(format!("{stem}.{RUN}")))?;
            Ok::<_, io::Error>(f)
        })()
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })?;
        Ok(Run {
            dir,
            stem,
            _lock: f,
        })
    }

    fn path(&self, ext: &str) -> PathBuf {
        self.dir.join(format!("{}.{ext}", self.stem))
    }

    /// The guardian's segment, `STEM.guard`: as
    /// [`Guardian::memory_file`](crate::Guardian::memory_file) makes it
    /// (inherited across `exec`, its header page allocated), locked while
    /// any process holds this descriptor.
    ///
    /// # Errors
    /// The file could not be made.
    pub fn guard_file(&self) -> io::Result<OwnedFd> {
        let f: OwnedFd = create_file(&self.path(GUARD), false)?.into();
        rustix::fs::flock(&f, FlockOperation::LockExclusive)?;
        rustix::fs::fallocate(
            &f,
            rustix::fs::FallocateFlags::empty(),
            0,
            super::segment::PAGE,
        )?;
        Ok(f)
    }

    /// The group's cache's file, `STEM.group`, empty (close-on-exec).
    pub(crate) fn group_file(&self) -> io::Result<OwnedFd> {
        Ok(create_file(&self.path(GROUP), true)?.into())
    }

    /// Removes the launch's files (the segments first, `STEM.run` last):
    /// its data is saved.
    pub fn remove(self) {
        for ext in [GUARD, GROUP, RUN] {
            let _ = std::fs::remove_file(self.path(ext));
        }
    }
}

/// Makes `path`, mode 0600, failing if it exists (or is a link).
fn create_file(path: &Path, cloexec: bool) -> io::Result<File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    // The umask could have taken bits the launcher needs.
    rustix::fs::fchmod(&f, Mode::from_raw_mode(0o600))?;
    if !cloexec {
        // (std opens with O_CLOEXEC.)
        rustix::io::fcntl_setfd(&f, rustix::io::FdFlags::empty())?;
    }
    Ok(f)
}

/// A launch's files that no live process holds: its launcher and its
/// program killed, or ended before removing them.
#[derive(Debug)]
pub struct Leftover {
    /// Whose files they are.
    pub owner: Owner,
    dir: PathBuf,
    stem: String,
    _lock: File,
    /// The directory's recovery lock, held while any leftover of one scan
    /// lives.
    _scan: std::sync::Arc<File>,
}

impl Leftover {
    /// The guardian's segment, if the launch made one.
    ///
    /// # Errors
    /// It could not be opened.
    pub fn guard(&self) -> io::Result<Option<OwnedFd>> {
        self.open(GUARD)
    }

    /// The group's cache's file, if the launch made one.
    ///
    /// # Errors
    /// It could not be opened.
    pub fn group(&self) -> io::Result<Option<OwnedFd>> {
        self.open(GROUP)
    }

    fn open(&self, ext: &str) -> io::Result<Option<OwnedFd>> {
        let path = self.dir.join(format!("{}.{ext}", self.stem));
        match rustix::fs::open(
            &path,
            OFlags::RDWR | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Some(fd)),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        }
    }

    /// Where its files are (for messages): `DIR/STEM.*`.
    pub fn files(&self) -> String {
        format!("{}/{}.*", self.dir.display(), self.stem)
    }

    /// Removes its files: their data is saved.
    pub fn remove(self) {
        for ext in [GUARD, GROUP, RUN] {
            let _ = std::fs::remove_file(self.dir.join(format!("{}.{ext}", self.stem)));
        }
    }
}

/// This user's leftovers ([`Leftover`]), each locked by this process
/// until dropped or removed: a launch whose launcher or program lives is
/// not one. Scans wait for each other: another scan's leftovers are
/// written back (and gone) before this one lists. A file this version cannot read is said on stderr and left.
///
/// # Errors
/// No directory ([`dir`]) or it cannot be read.
pub fn leftovers() -> io::Result<Vec<Leftover>> {
    let dir = dir()?;
    // One scan at a time, until its leftovers are written back and gone:
    // a `.run` another scan holds locked would look alive, and a launch
    // must not serve files another's recovery is still writing.
    let scan = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.join(".recover.lock"))?;
    rustix::fs::flock(&scan, FlockOperation::LockExclusive)?;
    let scan = std::sync::Arc::new(scan);
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        let (Some(stem), Some(ext)) = (path.file_stem(), path.extension()) else {
            continue;
        };
        let stem = stem.to_string_lossy().into_owned();
        if ext == "tmp" {
            // A launcher killed while making its `.run`: nothing else made.
            if let Ok(f) = std::fs::File::open(&path) {
                if rustix::fs::flock(&f, FlockOperation::NonBlockingLockExclusive).is_ok() {
                    let _ = std::fs::remove_file(&path);
                }
            }
            continue;
        }
        if ext != RUN {
            continue;
        }
        let Ok(mut f) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        else {
            continue;
        };
        if rustix::fs::flock(&f, FlockOperation::NonBlockingLockExclusive).is_err() {
            continue;
        }
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)?;
        let Some(owner) = Owner::decode(&bytes) else {
            eprintln!(
                "foliocache: {}: not a persisted launch's file this version reads; left there",
                path.display()
            );
            continue;
        };
        let left = Leftover {
            owner,
            dir: dir.clone(),
            stem,
            _lock: f,
            _scan: scan.clone(),
        };
        // The guardian's segment is locked while its program (or a
        // process it passed the descriptor to) lives.
        if let Ok(Some(g)) = left.guard() {
            if rustix::fs::flock(&g, FlockOperation::NonBlockingLockShared).is_err() {
                continue;
            }
        }
        out.push(left);
    }
    Ok(out)
}

/// Whether `fd` is a persisted launch's file of extension `ext`: a regular
/// file of mode 0600 on tmpfs, in its owner's directory ([`dir`]), named
/// so. A cache checks it before it lays out or maps a segment in a file
/// it was handed that is not a sealed memory file.
pub(crate) fn is_persisted(fd: BorrowedFd<'_>, ext: &str) -> bool {
    let Ok(st) = rustix::fs::fstat(fd) else {
        return false;
    };
    let regular = st.st_mode & libc::S_IFMT == libc::S_IFREG;
    if !regular || st.st_mode & 0o7777 != 0o600 {
        return false;
    }
    if !rustix::fs::fstatfs(fd).is_ok_and(|fs| is_tmpfs(&fs)) {
        return false;
    }
    let Ok(link) = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())) else {
        return false;
    };
    let want = base().join(format!("foliocache-{}", st.st_uid));
    link.parent() == Some(want.as_path()) && link.extension() == Some(OsStr::new(ext))
}

/// The file's generation, as far as its filesystem tells it: the inode's
/// generation (`FS_IOC_GETVERSION`: ext2/3/4, btrfs, among others), else
/// its birth time (`statx`), else 0 (unknown: device and inode alone tell
/// the file). Two files that had one device and inode number one after
/// the other differ in it. A system call or two, no allocation: the
/// guardian's recovery calls it in a child with only system calls safe.
pub(crate) fn file_version(fd: BorrowedFd<'_>) -> u64 {
    /// `FS_IOC_GETVERSION`: `_IOR('v', 1, long)`.
    const FS_IOC_GETVERSION: rustix::ioctl::Opcode =
        rustix::ioctl::opcode::read::<libc::c_long>(b'v', 1);
    // (rustix's system call, not the C library's `ioctl`, which an
    // interposer defines: foliocache's own would serve it.)
    // SAFETY: the opcode is `FS_IOC_GETVERSION`, whose argument is a
    // `long` the kernel writes.
    let got = unsafe {
        rustix::ioctl::ioctl(
            fd,
            rustix::ioctl::Getter::<FS_IOC_GETVERSION, libc::c_long>::new(),
        )
    };
    if let Ok(generation) = got {
        return 1 << 63 | (generation as u64 & 0xffff_ffff);
    }
    match rustix::fs::statx(
        fd,
        c"",
        rustix::fs::AtFlags::EMPTY_PATH,
        rustix::fs::StatxFlags::BTIME,
    ) {
        Ok(x) if x.stx_mask & libc::STATX_BTIME != 0 => {
            let t = x.stx_btime;
            1 << 62 | ((t.tv_sec as u64) << 30 ^ u64::from(t.tv_nsec)) & ((1 << 62) - 1)
        }
        _ => 0,
    }
}

/// Whether a file of generation `now` ([`file_version`]) may be the one
/// recorded with `recorded`: equal, or either unknown.
pub(crate) fn same_version(recorded: u64, now: u64) -> bool {
    recorded == 0 || now == 0 || recorded == now
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn owners_round_trip_and_recover_overlapping_directories() {
        let a = Owner::Dirs(vec!["/srv/a".into(), "/srv/b".into()]);
        assert_eq!(Owner::decode(&a.encode().unwrap()), Some(a.clone()));
        let c = Owner::Cache("db".into());
        assert_eq!(Owner::decode(&c.encode().unwrap()), Some(c.clone()));
        assert!(a.recovers(&Owner::Dirs(vec!["/srv/a/x".into()])));
        assert!(a.recovers(&Owner::Dirs(vec!["/srv".into()])));
        assert!(!a.recovers(&Owner::Dirs(vec!["/srv/ab".into()])));
        assert!(a.recovers(&c) && !c.recovers(&a));
        assert!(c.recovers(&c) && !c.recovers(&Owner::Cache("other".into())));
        assert!(Owner::Dirs(vec!["/a\nb".into()]).encode().is_err());
        assert_eq!(Owner::decode(b"something else\n"), None);
    }

    #[test]
    fn a_launch_s_files_are_0600_its_own_and_no_leftover_while_it_lives() {
        let Ok(dir) = dir() else { return };
        let owner = Owner::Dirs(vec![format!("/nonexistent/{}", std::process::id()).into()]);
        let run = Run::create(&owner).unwrap();
        let guard = run.guard_file().unwrap();
        let group = run.group_file().unwrap();
        for fd in [guard.as_fd(), group.as_fd()] {
            let st = rustix::fs::fstat(fd).unwrap();
            assert_eq!(st.st_mode & 0o7777, 0o600);
            assert_eq!(st.st_uid, rustix::process::geteuid().as_raw());
        }
        assert!(is_persisted(guard.as_fd(), GUARD));
        assert!(is_persisted(group.as_fd(), GROUP));
        assert!(!is_persisted(group.as_fd(), GUARD));
        // A file of mode 0600 named so, but not in the user's directory;
        // one in it of another mode.
        let stray = base().join(format!("stray-{}.{GROUP}", std::process::id()));
        let f = create_file(&stray, true).unwrap();
        let stray_is = is_persisted(f.as_fd(), GROUP);
        std::fs::remove_file(&stray).unwrap();
        assert!(!stray_is);
        let loose = dir.join(format!("loose-{}.{GROUP}", std::process::id()));
        let f = create_file(&loose, true).unwrap();
        rustix::fs::fchmod(&f, Mode::from_raw_mode(0o644)).unwrap();
        assert!(!is_persisted(f.as_fd(), GROUP));
        std::fs::remove_file(&loose).unwrap();
        // The guard file is inherited across exec; the group's is not.
        assert!(rustix::io::fcntl_getfd(&guard).unwrap().is_empty());
        assert!(!rustix::io::fcntl_getfd(&group).unwrap().is_empty());
        // Locked by this process (another open file description of it).
        assert!(leftovers().unwrap().iter().all(|l| l.owner != owner));
        let stem = run.stem.clone();
        run.remove();
        assert!(std::fs::read_dir(&dir).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(&stem)));
    }

    #[test]
    fn a_replaced_file_has_another_generation_where_the_filesystem_tells() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let a = File::create(&p).unwrap();
        let va = file_version(a.as_fd());
        assert_eq!(va, file_version(File::open(&p).unwrap().as_fd()));
        drop(a);
        std::fs::remove_file(&p).unwrap();
        let b = File::create(&p).unwrap();
        let vb = file_version(b.as_fd());
        // An inode generation differs; a birth time may not, within the
        // clock's tick.
        if va >> 63 == 1 && vb >> 63 == 1 {
            assert_ne!(va, vb);
        }
        assert!(same_version(0, vb) && same_version(va, va));
    }
}
