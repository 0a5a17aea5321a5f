//! A memory limit for the kernel engines: a child memory cgroup the whole
//! process runs in while a kernel engine is measured, so the page cache
//! those runs bring in is held to the same size as foliocache's cache.
//!
//! ```text
//!   <memory controller mount><this process's cgroup>/            (parent)
//!       foliocache-bench-<pid>-<n>/    limit C  <- the process, during a run
//! ```
//!
//! Why the whole process and not a worker thread: the kernel charges a
//! page-cache page to the memory cgroup of the mm's *owner* (the
//! thread-group leader), not of the thread that reads it in
//! (`get_mem_cgroup_from_mm` in mm/memcontrol.c): on cgroup v1, moving one
//! thread into a limited cgroup limits nothing. So [`MemCgroup::enter`]
//! moves the process (`cgroup.procs`) and [`Entered`]'s drop moves it back.
//! While it is inside, memory the process newly faults in (a buffer, a
//! thread's stack) counts against the limit too; the page cache is what
//! fills it. The kernel's readahead in flight is charged too and cannot
//! be reclaimed until its reads complete, so a readahead window too large
//! for the limit is turned off for the run (`run::fit_readahead`).
//!
//! cgroup v2 (`memory.max`) is used where its memory controller is
//! available to this process's cgroup. The controller can be enabled for
//! a child only in a cgroup that holds no process (cgroup v2's
//! no-internal-process rule; the root is exempt). Where this process's
//! cgroup holds processes (a login shell's, a container's), the bench
//! first moves itself into a leaf of a cgroup of its own, made beside its
//! cgroup (in the parent, whose memory controller is enabled below it, as
//! it gives this cgroup one), the way `systemd-run` and container
//! runtimes do, and makes the runs' cgroups there:
//!
//! ```text
//!   <mount><parent of this process's cgroup>/
//!       <this process's cgroup>/          the shell and others stay here
//!       foliocache-bench-<pid>/           +memory below; no process
//!           main/                         the bench between runs
//!           foliocache-bench-<pid>-<n>/   limit C  <- the bench, during a run
//! ```
//!
//! The bench stays in `main/` until it exits; the next bench removes the
//! empty cgroups of one that no longer runs. Otherwise cgroup v1
//! (`memory.limit_in_bytes`); otherwise none, with the reason, which the
//! report prints. Each run gets a cgroup of its own (so its peak usage is
//! its own), emptied and removed after the run; cgroups a killed bench
//! left behind are removed when the next one starts.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// The prefix of the cgroups this module makes.
const PREFIX: &str = "foliocache-bench-";

/// Which cgroup interface limits memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The unified hierarchy: `memory.max`, `cgroup.procs`.
    V2,
    /// The legacy memory controller: `memory.limit_in_bytes`,
    /// `cgroup.procs`.
    V1,
}

impl Version {
    /// `cgroup v2` or `cgroup v1`.
    pub fn name(self) -> &'static str {
        match self {
            Version::V2 => "cgroup v2",
            Version::V1 => "cgroup v1",
        }
    }

    fn limit_file(self) -> &'static str {
        match self {
            Version::V2 => "memory.max",
            Version::V1 => "memory.limit_in_bytes",
        }
    }

    fn peak_file(self) -> &'static str {
        match self {
            Version::V2 => "memory.peak",
            Version::V1 => "memory.max_usage_in_bytes",
        }
    }
}

/// Where memory cgroups can be made for this process, found once.
#[derive(Debug, Clone)]
pub enum Availability {
    /// Children of `parent` (this process's own cgroup) can be made and
    /// limited.
    Available {
        /// The interface.
        version: Version,
        /// Where the runs' cgroups are made: the process's cgroup, or the
        /// cgroup of its own it moved into.
        parent: PathBuf,
        /// Where the process lives between runs (`parent`, or the leaf
        /// `parent/main` where it moved).
        home: PathBuf,
        /// Whether the parent's `cgroup.subtree_control` must get
        /// `+memory` first (v2).
        enable_subtree: bool,
    },
    /// No limit can be set: why.
    Unavailable(String),
}

impl Availability {
    /// An available cgroup's version, parent, home and whether it enables
    /// the controller below the parent; why not, when unavailable.
    fn fields(&self) -> Result<(Version, PathBuf, PathBuf, bool), &str> {
        match self {
            Availability::Available {
                version,
                parent,
                home,
                enable_subtree,
            } => Ok((*version, parent.clone(), home.clone(), *enable_subtree)),
            Availability::Unavailable(why) => Err(why),
        }
    }

    /// Finds how to limit this process's memory: cgroup v2 with its memory
    /// controller, else cgroup v1's memory controller, else none (with the
    /// reasons). Removes cgroups that dead bench processes left behind.
    pub fn probe() -> Availability {
        let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mut reasons = Vec::new();
        match probe_v2(&mounts, &own).and_then(|p| p.settle(std::process::id())) {
            Ok(a) => return cleaned(a),
            Err(e) => reasons.push(format!("cgroup v2: {e}")),
        }
        match probe_v1(&mounts, &own) {
            Ok(a) => return cleaned(a),
            Err(e) => reasons.push(format!("cgroup v1: {e}")),
        }
        Availability::Unavailable(reasons.join("; "))
    }
}

fn cleaned(a: Availability) -> Availability {
    if let Availability::Available { parent, .. } = &a {
        remove_stale(parent);
        // A cgroup of its own (see the module documentation) sits beside
        // those of earlier benches.
        if let Some(up) = parent.parent().filter(|_| is_own(parent)) {
            remove_stale(up);
        }
    }
    a
}

/// Whether `dir` is a bench's cgroup of its own
/// (`foliocache-bench-<pid>`).
fn is_own(dir: &Path) -> bool {
    dir.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix(PREFIX))
        .is_some_and(|rest| rest.parse::<u32>().is_ok())
}

/// What the cgroup v2 probe found: where to make the runs' cgroups, or
/// that the process must first move into a cgroup of its own.
#[derive(Debug, PartialEq)]
enum V2Plan {
    /// Runs' cgroups go in `parent` (the process's cgroup).
    Here {
        parent: PathBuf,
        enable_subtree: bool,
    },
    /// The process's cgroup holds processes: make a cgroup of its own in
    /// `beside` (the parent of the process's cgroup) and move into it.
    Own { beside: PathBuf },
}

impl V2Plan {
    /// The availability the plan gives; for [`V2Plan::Own`], after making
    /// `beside/foliocache-bench-<pid>/main` and moving process `pid` into
    /// it.
    fn settle(self, pid: u32) -> Result<Availability, String> {
        match self {
            V2Plan::Here {
                parent,
                enable_subtree,
            } => Ok(Availability::Available {
                version: Version::V2,
                home: parent.clone(),
                parent,
                enable_subtree,
            }),
            V2Plan::Own { beside } => {
                let own = beside.join(format!("{PREFIX}{pid}"));
                let home = own.join("main");
                for d in [&own, &home] {
                    match fs::create_dir(d) {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                        Err(e) => return Err(format!("making {}: {e}", d.display())),
                    }
                }
                fs::write(home.join("cgroup.procs"), pid.to_string()).map_err(|e| {
                    format!(
                        "moving the bench into a cgroup of its own, {}: {e}",
                        home.display()
                    )
                })?;
                Ok(Availability::Available {
                    version: Version::V2,
                    parent: own,
                    home,
                    enable_subtree: true,
                })
            }
        }
    }
}

fn probe_v2(mounts: &str, own: &str) -> Result<V2Plan, String> {
    let mount = mounts
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() >= 3 && f[2] == "cgroup2")
        .map(|f| PathBuf::from(f[1]))
        .ok_or("not mounted")?;
    let rel = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("this process has no cgroup v2 path")?;
    let parent = join(&mount, rel);
    let controllers = fs::read_to_string(parent.join("cgroup.controllers"))
        .map_err(|e| format!("{}: {e}", parent.join("cgroup.controllers").display()))?;
    if !controllers.split_whitespace().any(|c| c == "memory") {
        return Err(format!(
            "no memory controller for {} (cgroup.controllers: `{}`)",
            parent.display(),
            controllers.trim()
        ));
    }
    let subtree = fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
    let enabled = subtree.split_whitespace().any(|c| c == "memory");
    let is_root = rel.trim_end_matches('/').is_empty();
    if !enabled && !is_root {
        let procs = fs::read_to_string(parent.join("cgroup.procs")).unwrap_or_default();
        if procs.lines().count() > 0 {
            // The controller cannot be enabled below it; its parent gave
            // it the controller (`cgroup.controllers` lists what the
            // parent enabled), so a cgroup made there has it.
            let beside = parent
                .parent()
                .map(Path::to_path_buf)
                .ok_or_else(|| format!("{} has no parent", parent.display()))?;
            writable(&beside).map_err(|e| {
                format!(
                    "{} holds processes, so the memory controller cannot be enabled below \
                     it, and {e} for a cgroup of the bench's own (run the bench in a cgroup \
                     of its own)",
                    parent.display()
                )
            })?;
            return Ok(V2Plan::Own { beside });
        }
    }
    writable(&parent)?;
    Ok(V2Plan::Here {
        parent,
        enable_subtree: !enabled,
    })
}

fn probe_v1(mounts: &str, own: &str) -> Result<Availability, String> {
    let mount = mounts
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() >= 4 && f[2] == "cgroup" && f[3].split(',').any(|o| o == "memory"))
        .map(|f| PathBuf::from(f[1]))
        .ok_or("no memory controller mounted")?;
    let rel = own
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
            ctrl.split(',').any(|c| c == "memory").then_some(path)
        })
        .ok_or("this process has no memory cgroup")?;
    let parent = join(&mount, rel);
    if !parent.join("memory.limit_in_bytes").exists() {
        return Err(format!("{} has no memory.limit_in_bytes", parent.display()));
    }
    writable(&parent)?;
    Ok(Availability::Available {
        version: Version::V1,
        home: parent.clone(),
        parent,
        enable_subtree: false,
    })
}

/// `mount` + `rel` (`rel` absolute within the hierarchy).
fn join(mount: &Path, rel: &str) -> PathBuf {
    mount.join(rel.trim().trim_start_matches('/'))
}

/// Whether a child cgroup can be made in `dir` (by making and removing
/// one).
fn writable(dir: &Path) -> Result<(), String> {
    let probe = dir.join(format!("{PREFIX}{}-probe", std::process::id()));
    match fs::create_dir(&probe) {
        Ok(()) => {
            let _ = fs::remove_dir(&probe);
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Err(format!(
            "cannot make a cgroup in {}: permission denied (run as root)",
            dir.display()
        )),
        Err(e) => Err(format!("cannot make a cgroup in {}: {e}", dir.display())),
    }
}

/// Removes the cgroups of bench processes that no longer run.
fn remove_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or("");
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            // A cgroup of its own holds `main` and maybe a run's: those
            // first (a cgroup goes only once it has no child).
            if let Ok(children) = fs::read_dir(e.path()) {
                for c in children.flatten().filter(|c| c.path().is_dir()) {
                    let _ = fs::remove_dir(c.path());
                }
            }
            let _ = fs::remove_dir(e.path());
        }
    }
}

/// A memory cgroup limited to a size, removed at drop.
#[derive(Debug)]
pub struct MemCgroup {
    dir: PathBuf,
    parent: PathBuf,
    /// Where the process goes back to after a run.
    home: PathBuf,
    version: Version,
    limit: u64,
    /// `+memory` was written to the parent's subtree control (and is taken
    /// back at drop).
    enabled_subtree: bool,
}

/// The facts of a cgroup after a run.
#[derive(Debug, Clone)]
pub struct Usage {
    /// The highest memory usage the cgroup saw.
    pub peak_bytes: Option<u64>,
    /// Times usage hit the limit (v1 `memory.failcnt`, v2 `memory.events`
    /// `max`).
    pub limit_hits: Option<u64>,
    /// Processes of the cgroup its OOM killer killed (v1
    /// `memory.oom_control`'s, v2 `memory.events`' `oom_kill`).
    pub oom_kills: Option<u64>,
}

impl MemCgroup {
    /// Makes a child cgroup limited to `limit` bytes.
    ///
    /// # Errors
    /// `avail` is [`Availability::Unavailable`], or making or limiting the
    /// cgroup failed.
    pub fn create(avail: &Availability, limit: u64) -> Result<MemCgroup> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let (version, parent, home, enable_subtree) = avail
            .fields()
            .map_err(|why| anyhow::anyhow!("no memory cgroup: {why}"))?;
        let mut enabled_subtree = false;
        if enable_subtree {
            write(&parent.join("cgroup.subtree_control"), "+memory")?;
            enabled_subtree = true;
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!("{PREFIX}{}-{n}", std::process::id()));
        fs::create_dir(&dir).with_context(|| format!("making the cgroup {}", dir.display()))?;
        let cg = MemCgroup {
            dir,
            parent,
            home,
            version,
            limit,
            enabled_subtree,
        };
        write(&cg.dir.join(version.limit_file()), &limit.to_string())?;
        Ok(cg)
    }

    /// The cgroup's directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The limit, in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The interface.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Sets the limit to `limit` bytes.
    ///
    /// # Errors
    /// Writing the limit file (v1 refuses a limit under the usage it
    /// cannot reclaim).
    pub fn set_limit(&mut self, limit: u64) -> Result<()> {
        write(
            &self.dir.join(self.version.limit_file()),
            &limit.to_string(),
        )?;
        self.limit = limit;
        Ok(())
    }

    /// The cgroup's usage now (v1 `memory.usage_in_bytes`, v2
    /// `memory.current`).
    pub fn current(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.usage_in_bytes",
            Version::V2 => "memory.current",
        };
        self.read_u64(file)
    }

    fn read_u64(&self, file: &str) -> Option<u64> {
        fs::read_to_string(self.dir.join(file))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    }

    /// The value of `key` in the `key value` lines of `file`.
    fn keyed(&self, file: &str, key: &str) -> Option<u64> {
        fs::read_to_string(self.dir.join(file)).ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
                .and_then(|v| v.trim().parse().ok())
        })
    }

    /// Moves this process into the cgroup until the guard drops, and
    /// checks that it is there.
    ///
    /// # Errors
    /// Writing `cgroup.procs`, or the process is not in the cgroup after
    /// it.
    pub fn enter(&self) -> Result<Entered<'_>> {
        let pid = std::process::id().to_string();
        write(&self.dir.join("cgroup.procs"), &pid)?;
        let guard = Entered { cg: self };
        let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let name = self
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        let inside = name.is_some_and(|n| {
            own.lines().any(|l| {
                let path = l.rsplit(':').next().unwrap_or("");
                let memory = match self.version {
                    Version::V2 => l.starts_with("0::"),
                    Version::V1 => l
                        .split(':')
                        .nth(1)
                        .is_some_and(|c| c.split(',').any(|c| c == "memory")),
                };
                memory && path.trim_end().ends_with(&n)
            })
        });
        if !inside {
            bail!(
                "moved the process into {} but /proc/self/cgroup does not show it there",
                self.dir.display()
            );
        }
        Ok(guard)
    }

    /// The cgroup's peak usage, limit hits and OOM kills so far.
    pub fn usage(&self) -> Usage {
        let (limit_hits, oom_kills) = match self.version {
            Version::V1 => (
                self.read_u64("memory.failcnt"),
                self.keyed("memory.oom_control", "oom_kill"),
            ),
            Version::V2 => (
                self.keyed("memory.events", "max"),
                self.keyed("memory.events", "oom_kill"),
            ),
        };
        Usage {
            peak_bytes: self.read_u64(self.version.peak_file()),
            limit_hits,
            oom_kills,
        }
    }

    /// Kills (SIGKILL) every process in the cgroup: a run that outlived
    /// its deadline, and whatever it started. Returns how many it killed.
    pub fn kill_all(&self) -> usize {
        let procs = fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        procs
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .filter(|&p| p != std::process::id() as i32)
            .filter(|&p| {
                let pid = nix::unistd::Pid::from_raw(p);
                nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).is_ok()
            })
            .count()
    }

    /// Moves every task left in the cgroup to its home, drops the page
    /// cache charged to it and removes it.
    fn remove(&mut self) -> io::Result<()> {
        if let Ok(procs) = fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in procs.split_whitespace() {
                let _ = fs::write(self.home.join("cgroup.procs"), pid);
            }
        }
        let _ = match self.version {
            Version::V1 => fs::write(self.dir.join("memory.force_empty"), "0"),
            Version::V2 => fs::write(self.dir.join("memory.reclaim"), self.limit.to_string()),
        };
        let mut last = Ok(());
        for _ in 0..50 {
            last = fs::remove_dir(&self.dir);
            if last.is_ok() || !self.dir.exists() {
                last = Ok(());
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.enabled_subtree {
            let _ = fs::write(self.parent.join("cgroup.subtree_control"), "-memory");
        }
        last
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            eprintln!(
                "warning: could not remove the cgroup {}: {e} (remove it by hand with rmdir)",
                self.dir.display()
            );
        }
    }
}

/// The process inside a [`MemCgroup`]; moves it back home (where it was
/// before) at drop.
#[derive(Debug)]
pub struct Entered<'a> {
    cg: &'a MemCgroup,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let pid = std::process::id().to_string();
        if let Err(e) = fs::write(self.cg.home.join("cgroup.procs"), &pid) {
            eprintln!(
                "warning: could not move the process back to {}: {e}",
                self.cg.home.display()
            );
        }
    }
}

fn write(path: &Path, value: &str) -> Result<()> {
    fs::write(path, value).with_context(|| format!("writing `{value}` to {}", path.display()))
}

#[cfg(test)]
mod tests;
