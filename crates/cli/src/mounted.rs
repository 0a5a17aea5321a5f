//! The operator's side of `foliocache mount`: what is mounted where (from
//! `/proc/self/mountinfo`), the refusal to stack a second mount on a live
//! one, `foliocache umount`, and the server's log on stderr.
//!
//! A foliocache mount is a FUSE mount whose source is
//! `foliocache:BACKING_DIR` and whose subtype is `foliocache`
//! (`foliocache_fuse::MountOptions::fuser_config`): its type reads
//! `fuse.foliocache` where the subtype is kept (`fusermount3`), `fuse`
//! where it is not (fuser's own `mount(2)` as root).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::Args;

/// The mount type of a foliocache mount in `/proc/self/mountinfo` where
/// its subtype is kept.
const FSTYPE: &str = "fuse.foliocache";

/// The prefix of a foliocache mount's source.
const SOURCE_PREFIX: &str = "foliocache:";

/// Options of `foliocache umount`.
#[derive(Debug, Clone, Args)]
pub struct UmountArgs {
    /// A running `foliocache mount`'s mount point.
    pub mountpoint: PathBuf,
    /// Detach the mount now even if it is busy; the kernel ends it once the
    /// last file on it is closed (`fusermount3 -u -z`, `umount -l`).
    #[arg(long)]
    pub lazy: bool,
}

/// One line of `/proc/self/mountinfo`, the fields we need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// Where it is mounted (octal escapes undone).
    pub mountpoint: PathBuf,
    /// Its type, `fuse.foliocache` for ours.
    pub fstype: String,
    /// Its source, `foliocache:BACKING_DIR` for ours.
    pub source: String,
}

impl MountEntry {
    /// True for a foliocache mount.
    pub fn is_foliocache(&self) -> bool {
        self.fstype == FSTYPE || (self.fstype == "fuse" && self.source.starts_with(SOURCE_PREFIX))
    }
}

/// A field of mountinfo with the kernel's octal escapes (`\040` for a
/// space, `mangle` in fs/proc_namespace.c) undone.
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mounts in the text of `/proc/self/mountinfo`, in its order (a mount
/// stacked on another comes after it).
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mountpoint = left.split(' ').nth(4)?;
            let mut r = right.split(' ');
            Some(MountEntry {
                mountpoint: PathBuf::from(unescape(mountpoint)),
                fstype: r.next()?.to_string(),
                source: unescape(r.next()?),
            })
        })
        .collect()
}

/// The topmost mount at `path` (absolute), if any.
fn mount_at(path: &Path) -> Result<Option<MountEntry>> {
    let text =
        std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    Ok(parse_mountinfo(&text)
        .into_iter()
        .rev()
        .find(|m| m.mountpoint == path))
}

/// `path` made absolute and canonical, or, where it cannot be resolved (a
/// dead FUSE mount answers ENOTCONN), its parent's canonical path joined
/// with its name.
fn absolute(path: &Path) -> Result<PathBuf> {
    if let Ok(p) = path.canonicalize() {
        return Ok(p);
    }
    let abs = std::env::current_dir()?.join(path);
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => Ok(parent
            .canonicalize()
            .with_context(|| path.display().to_string())?
            .join(name)),
        _ => Ok(abs),
    }
}

/// Refuses to mount at `mountpoint` where a live foliocache mount already
/// is: a second would stack on it silently, hiding the first. A dead one
/// (its server killed: ENOTCONN) is left to the server, which takes it
/// away (`foliocache_fuse::serve`).
pub fn refuse_stacked(mountpoint: &Path) -> Result<()> {
    let Ok(path) = absolute(mountpoint) else {
        return Ok(()); // The server reports a bad path.
    };
    let Some(m) = mount_at(&path)? else {
        return Ok(());
    };
    let dead = matches!(std::fs::read_dir(&path),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN));
    if m.is_foliocache() && !dead {
        bail!(
            "{} already has a foliocache mount (of {}): unmount it first \
             (`foliocache umount {}`)",
            path.display(),
            m.source.strip_prefix(SOURCE_PREFIX).unwrap_or(&m.source),
            path.display()
        );
    }
    Ok(())
}

/// Runs `foliocache umount`: unmounts a foliocache mount with
/// `fusermount3 -u` (as root, `umount` where fusermount3 is missing). The
/// server then writes its dirty data back and exits.
pub fn umount(a: &UmountArgs) -> Result<()> {
    let path = absolute(&a.mountpoint)?;
    let Some(m) = mount_at(&path)? else {
        bail!("{}: not mounted", path.display());
    };
    if !m.is_foliocache() {
        bail!(
            "{}: not a foliocache mount (a {} mount of {}); not unmounted",
            path.display(),
            m.fstype,
            m.source
        );
    }
    let mut fusermount = Command::new("fusermount3");
    fusermount.arg(if a.lazy { "-uz" } else { "-u" }).arg(&path);
    let out = match fusermount.output() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && nix::unistd::geteuid().is_root() => {
            let mut umount = Command::new("umount");
            if a.lazy {
                umount.arg("-l");
            }
            umount.arg(&path).output().context("running umount")?
        }
        r => r.context("running fusermount3 (from the fuse3 package)")?,
    };
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr);
    if said.contains("busy") {
        bail!(
            "{} is busy: a process has a file open or its working directory there \
             (`fuser -vm {}` lists them); close them and try again, or detach it now \
             with `foliocache umount --lazy`",
            path.display(),
            path.display()
        );
    }
    bail!("unmounting {} failed: {}", path.display(), said.trim())
}

/// The server's log: `log` records (the FUSE server's) as lines on stderr,
/// where an operator looks; under systemd (`JOURNAL_STREAM` set) each line
/// opens with its syslog priority (`<4>`), which the journal reads as the
/// line's level (sd-daemon(3)).
struct StderrLog {
    journal: bool,
}

impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Info
    }

    fn log(&self, r: &log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let prefix = match (self.journal, r.level()) {
            (false, _) => "",
            (true, log::Level::Error) => "<3>",
            (true, log::Level::Warn) => "<4>",
            (true, _) => "<6>",
        };
        // A closed stderr loses the line; the server goes on.
        let _ = writeln!(std::io::stderr().lock(), "{prefix}{}", r.args());
    }

    fn flush(&self) {}
}

/// Sends the server's `log` records to stderr ([`StderrLog`]).
pub fn log_to_stderr() {
    static LOG: std::sync::OnceLock<StderrLog> = std::sync::OnceLock::new();
    let logger = LOG.get_or_init(|| StderrLog {
        journal: std::env::var_os("JOURNAL_STREAM").is_some(),
    });
    if log::set_logger(logger).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
90 22 0:50 / /tmp/a\\040b rw,nosuid,nodev,relatime shared:60 - fuse.foliocache foliocache:/data/x\\040y rw,user_id=0,group_id=0
91 90 0:51 / /tmp/a\\040b rw,nosuid,nodev,relatime shared:61 - fuse.sshfs host:/ rw
92 22 0:52 / /mnt/c rw,nosuid,nodev,relatime - fuse foliocache:/data/c rw,user_id=0
93 22 0:53 / /mnt/d rw,nosuid,nodev,relatime - fuse other:/data/d rw,user_id=0
";

    #[test]
    fn mountinfo_is_parsed_with_escapes_undone() {
        let m = parse_mountinfo(INFO);
        assert_eq!(m.len(), 5);
        // Without its subtype (mounted by fuser as root), by its source.
        assert!(m[3].is_foliocache());
        assert!(!m[4].is_foliocache());
        assert_eq!(m[0].mountpoint, Path::new("/"));
        assert!(!m[0].is_foliocache());
        assert_eq!(m[1].mountpoint, Path::new("/tmp/a b"));
        assert_eq!(m[1].source, "foliocache:/data/x y");
        assert!(m[1].is_foliocache());
        // The last at a path is the one on top.
        let top = m
            .iter()
            .rev()
            .find(|e| e.mountpoint == Path::new("/tmp/a b"));
        assert_eq!(top.map(|e| e.fstype.as_str()), Some("fuse.sshfs"));
        assert!(parse_mountinfo("garbage\n").is_empty());
    }

    #[test]
    fn an_escape_needs_three_octal_digits() {
        assert_eq!(unescape("a\\134b"), "a\\b");
        assert_eq!(unescape("a\\9b\\"), "a\\9b\\");
    }
}
