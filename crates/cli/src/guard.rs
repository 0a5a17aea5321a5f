//! `foliocache run` as its program's guardian (docs/preload.md, "Death";
//! docs/design.md, section 12): it makes the guardian's memory file, runs
//! the program with it (the interposer's cache claims it), forwards the
//! signals sent to it, and once the program is gone, however it ended,
//! writes back what the program left unsaved, then ends as the program
//! did: its exit status, or its fatal signal raised again. Its memory
//! files persist on tmpfs (`crate::recover::Persisted`) until then, so
//! that what the program leaves outlives this process too.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus};

use anyhow::{Context, Result};

/// The interposer's variable naming the guardian's memory file.
const GUARD_VAR: &str = "FOLIOCACHE_PRELOAD_GUARD";

/// The interposer's variable naming the shared cache's memory file.
pub(crate) const SHARED_VAR: &str = "FOLIOCACHE_PRELOAD_SHARED";

/// The interposer's variable that makes that cache one its processes
/// join at their first fork.
pub(crate) const AT_FORK_VAR: &str = "FOLIOCACHE_PRELOAD_SHARED_AT_FORK";

/// The signals forwarded to the program (and `SIGCHLD`, its end).
const WATCHED: [libc::c_int; 7] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGHUP,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGCHLD,
];

/// A signal set of `sigs`.
fn sigset(sigs: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set; sigaddset adds valid
    // signal numbers to it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in sigs {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Blocks `sigs` in this thread (and so in the threads it starts from
/// now on), so that only [`wait_for`] takes them.
pub(crate) fn block(sigs: &[libc::c_int]) {
    let set = sigset(sigs);
    // SAFETY: changes this thread's signal mask.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// `fd`, which the program inherits, moved above the program's soft
/// open-file limit (this process's), where the hard limit leaves room:
/// the number is then never one the program could have opened, and the
/// interposer keeps its own descriptors there too (docs/preload.md,
/// "Open-file limits"). As it is where there is no room.
fn above_open_limit(fd: std::os::fd::OwnedFd) -> std::os::fd::OwnedFd {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return fd;
    };
    let Ok(least) = i32::try_from(soft) else {
        return fd;
    };
    if hard <= soft || setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_err() {
        return fd;
    }
    let moved = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD(least));
    // The program inherits this process's limit: its own again.
    let _ = setrlimit(Resource::RLIMIT_NOFILE, soft, hard);
    match moved {
        // SAFETY: a descriptor `fcntl` just made, owned by nothing else.
        Ok(n) => unsafe { std::os::fd::FromRawFd::from_raw_fd(n) },
        Err(_) => fd,
    }
}

/// Waits for one of `sigs` (blocked by [`block`]) and returns it.
pub(crate) fn wait_for(sigs: &[libc::c_int]) -> libc::c_int {
    let set = sigset(sigs);
    let mut sig = 0;
    // SAFETY: waits for one of the blocked signals of `set`, storing it
    // in `sig`.
    while unsafe { libc::sigwait(&set, &mut sig) } != 0 {}
    sig
}

/// Runs `cmd` (the program under the interposer) as its guardian; ends
/// this process as the program ended. Returns only on an error before the
/// program started.
///
/// The program's processes join a cache of `capacity` bytes at their
/// first fork (docs/preload.md, "Processes"): until one forks, each
/// serves from a cache of its own, which this process guards; from then
/// on they share the group's, which this process holds as [`run_shared`]
/// does, making its pages 2 MiB pages only once a process joined it,
/// and with `metrics` serves its figures from the start.
pub fn run_guarded(
    mut cmd: Command,
    program: &Path,
    (capacity, files): (u64, crate::recover::Persisted),
    metrics: Option<SocketAddr>,
) -> Result<()> {
    let segment = above_open_limit(files.guard_file()?);
    cmd.env(
        GUARD_VAR,
        std::os::fd::AsRawFd::as_raw_fd(&segment).to_string(),
    );
    let cache = files.shared(capacity, true)?;
    cmd.env(AT_FORK_VAR, "1");
    let status = run_in(cmd, program, &cache, true, None, metrics)?;
    // (What it writes, it says on stderr.)
    foliocache::Guardian::write_back(segment.as_fd());
    drop(segment);
    files.end(Some(&cache));
    end_as(status)
}

/// Runs `cmd` with one cache of `capacity` bytes for all its processes
/// (`foliocache run --shared`: docs/preload.md, "Processes"): the cache's
/// memory file stays here, named to the program by its
/// `/proc/<pid>/fd/<n>` path (every process of the tree, exec'd ones
/// included, attaches to it, whichever fds they close); once the program
/// is gone, what its processes left unsaved is written back. Ends this
/// process as the program ended; returns only on an error before the
/// program started.
///
/// With `state`, the group's cache is warm-started from that state file
/// (loaded in the background while the program starts) and the list of
/// what it holds is saved there once the program is gone and its data
/// written back (`SharedCache::warm_from`,
/// `SharedCache::save_state_unsynced`: not written when unchanged).
///
/// The cache's pages are made 2 MiB pages as the group's use reaches
/// them (`SharedCache::new_deferred`, joined at once), as
/// [`run_guarded`]'s are once its group is joined.
pub fn run_shared(
    cmd: Command,
    program: &Path,
    (capacity, files): (u64, crate::recover::Persisted),
    metrics: Option<SocketAddr>,
    state: Option<&Path>,
) -> Result<()> {
    // Made deferred and joined at once: its pages are made 2 MiB pages
    // as the group's use comes near them (`run_in`'s watcher starts
    // that), so that a short program's launcher neither zeroes the whole
    // capacity nor waits, at its exit, for a collapse of memory the
    // program never used.
    let cache = files.shared(capacity, true)?;
    cache.join();
    let status = run_in(cmd, program, &cache, true, state, metrics)?;
    files.end(Some(&cache));
    end_as(status)
}

/// Runs `cmd` with its processes attached to the cache hosted as `name`
/// (`foliocache run --cache`: docs/preload.md, "Named caches"), as
/// [`run_shared`] runs them in a cache of their own, except that the
/// host's flusher writes back what they leave; this process writes it
/// back only if no process of the cache is left when the program ends
/// (the host gone).
pub fn run_attached(
    cmd: Command,
    program: &Path,
    name: &str,
    metrics: Option<SocketAddr>,
) -> Result<()> {
    let cache = match foliocache::SharedCache::attach_named(name) {
        Ok(cache) => cache,
        Err(e) if foliocache::SharedCache::member_only(&e) => {
            return run_member(cmd, program, name, metrics)
        }
        Err(e) => return Err(e).with_context(|| format!("--cache {name}: attaching")),
    };
    let status = run_in(cmd, program, &cache, false, None, metrics)?;
    end_as(status)
}

/// [`run_attached`] for a user the cache's host serves as a member, not
/// its own (root, or a member of the group it names): no process of the
/// program maps the cache; each hands the files it opens to the kernel
/// for the group (docs/preload.md, "Named caches"), so there is nothing
/// of theirs in the cache to write back, and no figures to serve.
fn run_member(
    mut cmd: Command,
    program: &Path,
    name: &str,
    metrics: Option<SocketAddr>,
) -> Result<()> {
    if let Some(addr) = metrics {
        anyhow::bail!(
            "--cache {name} --metrics {addr}: this user is a member of the cache, not its \
             host's user; the host serves its figures (`foliocache cache serve --metrics`)"
        );
    }
    cmd.env(SHARED_VAR, name);
    end_as(supervise(cmd, program)?)
}

/// [`run_shared`], [`run_attached`] and [`run_guarded`]'s group: `own` if
/// this process holds the cache (it runs the flusher and writes back at
/// the end, and with `state` warm-starts the cache from it and saves it
/// then; a cache made deferred, `SharedCache::new_deferred`, is made 2
/// MiB pages once a process joins it); with `metrics`, it serves the
/// group's figures there while the program runs (the program's processes
/// serve none of their own). Returns how the program ended.
fn run_in(
    mut cmd: Command,
    program: &Path,
    cache: &foliocache::SharedCache,
    own: bool,
    state: Option<&Path>,
    metrics: Option<SocketAddr>,
) -> Result<ExitStatus> {
    cmd.env(
        SHARED_VAR,
        format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            std::os::fd::AsRawFd::as_raw_fd(&cache.memory_file())
        ),
    );
    // The flusher thread starts with the signals `supervise` waits for
    // blocked, as this thread has them from here on, so that none is
    // delivered to it.
    block(&WATCHED);
    if let Some(warning) = state.and_then(|s| cache.warm_from(s).warning) {
        eprintln!("{warning}");
    }
    let flusher = own
        .then(|| cache.start_flusher())
        .transpose()
        .context("starting the shared cache's flusher")?;
    let metrics = metrics
        .map(|addr| {
            foliocache::metrics::serve_shared(addr, cache)
                .with_context(|| format!("--metrics {addr}: cannot serve the metrics there"))
        })
        .transpose()?;
    let ended = std::sync::atomic::AtomicBool::new(false);
    let status = std::thread::scope(|scope| {
        let watcher = own.then(|| scope.spawn(|| huge_pages_once_joined(cache, &ended)));
        let status = supervise(cmd, program);
        ended.store(true, std::sync::atomic::Ordering::Release);
        if let Some(w) = watcher {
            w.thread().unpark();
        }
        status
    })?;
    drop(metrics);
    drop(flusher);
    report(cache);
    // A group no process joined (made deferred, its program never forked)
    // holds nothing to write back: a short program pays no walk of its
    // slots (each a page of the memory file, faulted in by the walk).
    if cache.joined() && (own || cache.stats().processes == 0) {
        match cache.write_back_all() {
            Ok(0) => {}
            Ok(n) => eprintln!(
                "foliocache run: {n} pages the program's processes left unsaved, written back"
            ),
            Err(e) => eprintln!("foliocache run: writing back what the program left: {e}"),
        }
    }
    if let Some(state) = state {
        // Unsynced, as the interposer's exit saves: the command waits for
        // this save, and the list is a hint (docs/warm.md).
        if let Err(e) = cache.save_state_unsynced(state) {
            eprintln!(
                "foliocache run: saving the state file {}: {e}",
                state.display()
            );
        }
    }
    Ok(status)
}

/// With the interposer's `FOLIOCACHE_PRELOAD_STATS` set, the group's
/// figures once the program is gone, on stderr: every process's reads,
/// as each last published them (at its exit, `_exit` included, or every
/// so many reads: a process killed by a signal is in them up to its last
/// publication), the same figures `--metrics` serves.
fn report(cache: &foliocache::SharedCache) {
    if std::env::var_os("FOLIOCACHE_PRELOAD_STATS").is_none_or(|v| v.is_empty()) {
        return;
    }
    if !cache.joined() {
        // No process joined the group: each served from a cache of its
        // own, and said so in its line.
        return;
    }
    let s = cache.stats();
    eprintln!(
        "foliocache run: the group's shared cache ({} pages cached, {} dirty): reads by every \
         process: {}",
        s.cached,
        s.dirty,
        foliocache::CacheFigures::of_group(&s).reads_line()
    );
}

/// How often [`huge_pages_once_joined`] looks.
const JOINED_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// Makes the cache's pages 2 MiB pages once a process of the group joined
/// it (a cache made by `SharedCache::new` is joined from the start, and
/// its collapse started already: this returns at once), or returns when
/// the program has `ended` (the launcher wakes it then: `unpark`).
fn huge_pages_once_joined(cache: &foliocache::SharedCache, ended: &std::sync::atomic::AtomicBool) {
    while !ended.load(std::sync::atomic::Ordering::Acquire) {
        if cache.joined() {
            cache.start_huge_pages();
            return;
        }
        std::thread::park_timeout(JOINED_POLL);
    }
}

/// Starts `cmd`, forwards the signals sent to this process to it, and
/// returns how it ended, once it and every process it left behind have
/// ended: this process is their subreaper (`PR_SET_CHILD_SUBREAPER`), so
/// a descendant orphaned by its parent's exit (a server that daemonizes:
/// `pg_ctl start`, a double fork and `setsid`) becomes its child, and it
/// waits for the last of them, keeping the group's cache, its flusher and
/// the guardian while any of them lives (docs/preload.md, "Death").
/// After the program itself ended, a signal is forwarded to each of
/// those left.
fn supervise(mut cmd: Command, program: &Path) -> Result<ExitStatus> {
    // Blocked from now on, so that each waits in the queue for the loop
    // below; unblocked in the program before it starts (a child inherits
    // its parent's mask).
    let watched = sigset(&WATCHED);
    // SAFETY: changes this thread's signal mask (any other thread of the
    // process, the shared cache's flusher, started with them blocked).
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &watched, std::ptr::null_mut()) };
    // SAFETY: integer arguments; changes only this process's attribute.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error()).context("becoming the program's subreaper");
    }
    // SAFETY: runs in the forked child before `exec`, where it only calls
    // pthread_sigmask, which is async-signal-safe, on a set copied in.
    // (A child does not inherit the subreaper attribute.)
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &watched, std::ptr::null_mut());
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("running {}", program.display()))?;
    let pid = child.id() as libc::pid_t;
    let mut status = None;
    while !reap(pid, &mut status)? {
        // SAFETY: an all-zero siginfo_t is a valid value (plain integers).
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waits for one of the blocked signals of `watched`,
        // filling `info`.
        let sig = unsafe { libc::sigwaitinfo(&watched, &mut info) };
        // A signal the kernel sent to the whole process group (a
        // terminal's ^C) reached the program too; one sent to this
        // process alone (`kill`, a service manager's stop) is forwarded.
        if sig > 0 && sig != libc::SIGCHLD && info.si_code != libc::SI_KERNEL {
            match status {
                // SAFETY: sends a signal to our own child.
                None => _ = unsafe { libc::kill(pid, sig) },
                Some(_) => forward_to_children(sig),
            }
        }
    }
    status.context("the program's end was not seen")
}

/// Reaps every child of this process that ended (the program's status,
/// pid `program`, kept in `status`); whether none is left.
fn reap(program: libc::pid_t, status: &mut Option<ExitStatus>) -> Result<bool> {
    loop {
        let mut raw = 0;
        // SAFETY: waits for any child without blocking, `raw` written.
        match unsafe { libc::waitpid(-1, &mut raw, libc::WNOHANG) } {
            0 => return Ok(false),
            -1 => {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::ECHILD) => return Ok(true),
                    Some(libc::EINTR) => {}
                    _ => return Err(e).context("waiting for the program"),
                }
            }
            pid if pid == program => *status = Some(ExitStatus::from_raw(raw)),
            _ => {}
        }
    }
}

/// Sends `sig` to every child of this process (the processes the program
/// left, adopted as their subreaper), found in
/// `/proc/self/task/*/children`.
fn forward_to_children(sig: libc::c_int) {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return;
    };
    for task in tasks.flatten() {
        let Ok(children) = std::fs::read_to_string(task.path().join("children")) else {
            continue;
        };
        for pid in children.split_whitespace().filter_map(|p| p.parse().ok()) {
            // SAFETY: sends a signal to a child of this process.
            unsafe { libc::kill(pid, sig) };
        }
    }
}

/// Ends this process as the program ended: its exit code, or its signal.
fn end_as(status: ExitStatus) -> ! {
    if let Some(code) = status.code() {
        std::process::exit(code);
    }
    let sig = status.signal().unwrap_or(libc::SIGKILL);
    // SAFETY: the default action for `sig`, unblocked, then the signal
    // raised: this process ends by it, as the program did (a core dump
    // aside: the program dumped its own).
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let one = sigset(&[sig]);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
        libc::raise(sig);
    }
    // A signal whose default is not to end (none of the fatal ones).
    std::process::exit(128 + sig)
}
