//! What a launch leaves when every process of it dies, its launcher's
//! included: its memory files persist on tmpfs (`foliocache::persist`,
//! docs/design.md section 12), and are written back by `foliocache
//! recover [DIR]`, by the next `foliocache run` on the same directories
//! before its program starts, and by a named cache's host before it
//! serves (docs/operating.md, "After a crash").
//!
//! This module makes a launch's persisted files ([`Persisted`]) and
//! writes back the leftovers of others ([`recover`]).

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use foliocache::persist::{self, Owner, Run};
use foliocache::{Guardian, SharedCache};

/// Options of `foliocache recover`.
#[derive(Debug, Clone, Args)]
pub struct RecoverArgs {
    /// Write back only what launches on this directory (or one holding it,
    /// or one inside it) left; without it, everything this user's launches
    /// left.
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// What [`recover`] wrote back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Launches whose files were found.
    pub launches: u64,
    /// Bytes the guardians' segments held unsaved, written.
    pub bytes: u64,
    /// Pages the groups' caches held unsaved, written.
    pub pages: u64,
    /// Files skipped (each said on stderr): gone, replaced, or a write
    /// that failed.
    pub skipped: u64,
}

/// Runs `foliocache recover`.
pub fn run(args: &RecoverArgs) -> Result<()> {
    let owner = args
        .dir
        .as_ref()
        .map(|d| {
            d.canonicalize()
                .with_context(|| format!("{}", d.display()))
                .map(|d| Owner::Dirs(vec![d]))
        })
        .transpose()?;
    let dir = persist::dir().context("the directory of persisted launches")?;
    let r = recover(owner.as_ref(), "foliocache recover")?;
    println!(
        "foliocache recover: {} launches left files in {}: {} bytes and {} pages written back, \
         {} files skipped",
        r.launches,
        dir.display(),
        r.bytes,
        r.pages,
        r.skipped
    );
    Ok(())
}

/// Writes back what the launches whose files no live process holds left
/// (`persist::leftovers`): each launch's that `owner` recovers
/// (`Owner::recovers`: overlapping directories, the same named cache), or
/// every one without it (nothing where this user has no directory of
/// persisted files: `persist::dir`). The guardian's segment is written back as its
/// guardian would have, the group's cache by attaching to it (coherent
/// with any process of the group still attached); a launch's files are
/// removed once written back, unless a process is still attached to its
/// group's cache. `who` begins each line on stderr.
///
/// # Errors
/// The directory could not be read.
pub fn recover(owner: Option<&Owner>, who: &str) -> Result<Recovered> {
    let mut done = Recovered::default();
    if persist::dir().is_err() {
        // No directory: no launch could leave files (`Persisted::start`).
        return Ok(done);
    }
    let left = persist::leftovers().context("listing the persisted launches")?;
    for l in left
        .into_iter()
        .filter(|l| owner.is_none_or(|o| o.recovers(&l.owner)))
    {
        done.launches += 1;
        eprintln!("{who}: writing back what {} left ({})", l.owner, l.files());
        if let Some(fd) = l.guard()? {
            let w = Guardian::write_back(fd.as_fd());
            done.bytes += w.bytes;
            done.skipped += w.skipped;
        }
        let kept = match l.group()? {
            Some(fd) => recover_group(fd, &l.files(), who, &mut done),
            None => false,
        };
        if !kept {
            l.remove();
        }
    }
    Ok(done)
}

/// Writes back the group's cache in `fd`; `true` if its file must stay (a
/// process of the group is still attached, or it could not be read).
fn recover_group(fd: OwnedFd, files: &str, who: &str, done: &mut Recovered) -> bool {
    let cache = match SharedCache::attach(fd) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{who}: {files}: {e}; left there");
            return true;
        }
    };
    match cache.write_back_all() {
        Ok(n) => done.pages += n,
        Err(e) => {
            done.skipped += 1;
            eprintln!("{who}: {e}");
        }
    }
    let others = cache.stats().processes.saturating_sub(1);
    if others > 0 {
        eprintln!("{who}: {files}: {others} processes still attached; left there");
    }
    others > 0
}

/// `foliocache run`'s start on the directories of `owner`: writes back
/// what earlier launches on them left, then, for a launch that `guards`
/// its program, makes its persisted files, for caches of `capacity`
/// bytes (the guardian's segment and the group's cache).
///
/// # Errors
/// The leftovers could not be written back.
pub fn before_run(owner: &Owner, capacity: u64, guards: bool) -> Result<Option<Persisted>> {
    if guards {
        // The guardian's segment and the group's cache, their metadata
        // with them.
        let bytes = capacity.saturating_mul(9) / 4;
        return Persisted::start(owner, bytes, "foliocache run").map(Some);
    }
    recover(Some(owner), "foliocache run")?;
    Ok(None)
}

/// The bytes free to this user in a filesystem (the types' widths differ
/// between targets).
#[allow(clippy::unnecessary_cast)]
fn free_bytes(s: &nix::sys::statvfs::Statvfs) -> u64 {
    (s.blocks_available() as u64).saturating_mul(s.fragment_size() as u64)
}

/// A launch's memory files: persisted ones ([`Run`]) where this user's
/// directory on tmpfs has room, else memory files as before (what the
/// group leaves when every process of it dies is then lost, as one line
/// says).
pub struct Persisted(Option<Run>);

impl Persisted {
    /// Writes back what earlier launches `owner` recovers left, then
    /// makes this launch's files, for caches of about `bytes` in all.
    /// `who` begins each line on stderr.
    ///
    /// # Errors
    /// The leftovers could not be written back.
    pub fn start(owner: &Owner, bytes: u64, who: &str) -> Result<Persisted> {
        let dir = match persist::dir() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("{who}: {e}: what the group leaves unsaved dies with it");
                return Ok(Persisted(None));
            }
        };
        recover(Some(owner), who)?;
        let room = nix::sys::statvfs::statvfs(&dir).map_or(0, |s| free_bytes(&s));
        if room < bytes {
            eprintln!(
                "{who}: {}: {room} bytes free, {bytes} wanted: what the group leaves unsaved \
                 dies with it",
                dir.display()
            );
            return Ok(Persisted(None));
        }
        match Run::create(owner) {
            Ok(run) => Ok(Persisted(Some(run))),
            Err(e) => {
                eprintln!("{who}: {e}: what the group leaves unsaved dies with it");
                Ok(Persisted(None))
            }
        }
    }

    /// The guardian's memory file for the program.
    ///
    /// # Errors
    /// Neither file could be made.
    pub fn guard_file(&self) -> Result<OwnedFd> {
        match &self.0 {
            Some(run) => run
                .guard_file()
                .context("making the guardian's segment's file (`--no-guardian` runs without one)"),
            None => Guardian::memory_file()
                .context("making the guardian's memory file (`--no-guardian` runs without one)"),
        }
    }

    /// The group's cache of `capacity` bytes, made `deferred` or not
    /// (`SharedCache::new_deferred`).
    ///
    /// # Errors
    /// The cache could not be made.
    pub fn shared(&self, capacity: u64, deferred: bool) -> Result<SharedCache> {
        let made = match (&self.0, deferred) {
            (Some(run), true) => SharedCache::new_deferred_persisted(run, capacity),
            (Some(run), false) => SharedCache::new_persisted(run, capacity),
            (None, true) => SharedCache::new_deferred(capacity),
            (None, false) => SharedCache::new(capacity),
        };
        made.context("making the group's cache")
    }

    /// The launch ended and wrote back what it held: its files go, unless
    /// a process is still attached to `cache` (its file stays, for the
    /// next launch to write back what it leaves).
    pub fn end(self, cache: Option<&SharedCache>) {
        let Some(run) = self.0 else { return };
        // A group no process joined holds nothing (`SharedCache::joined`).
        if cache.is_none_or(|c| !c.joined() || c.stats().processes <= 1) {
            run.remove();
        }
    }
}
