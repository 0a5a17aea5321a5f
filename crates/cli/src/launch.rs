//! `foliocache run`: runs a program under `libfoliocache_preload.so`, so
//! its file calls on the given directories are served by a foliocache
//! inside it (docs/preload.md). The library is found next to this binary
//! (`target/release/` after `cargo build --release -p foliocache-preload`);
//! the launcher sets `LD_PRELOAD` and the library's variables and
//! executes the program in its place.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::state_path::StateArgs;
use foliocache::parse_size;

/// The library's file name.
const LIBRARY: &str = "libfoliocache_preload.so";

/// The library's variable naming the warm-restart state file.
const STATE_VAR: &str = "FOLIOCACHE_PRELOAD_STATE";

/// The library's variable that turns its guardian off.
const GUARDIAN_VAR: &str = "FOLIOCACHE_PRELOAD_GUARDIAN";

/// The shared cache's capacity when `--capacity` gives none: the
/// library's own default.
const SHARED_DEFAULT: u64 = 256 << 20;

/// The library's variable naming the address of its metrics.
const METRICS_VAR: &str = "FOLIOCACHE_PRELOAD_METRICS";

/// Options of `foliocache run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The cache's memory, e.g. 256M or 1G (default: the library's, 256 MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub capacity: Option<u64>,

    /// A directory whose files the cache serves (repeatable).
    #[arg(long = "dir", value_name = "DIR", required = true)]
    pub dirs: Vec<PathBuf>,

    /// Warm restarts: the state file (`--state`, `--no-state`).
    #[command(flatten)]
    pub state: StateArgs,

    /// Serve the cache's Prometheus metrics at http://ADDR/metrics from the
    /// program's process (with `--shared` or `--cache`: the group's, from
    /// `foliocache run` itself): `PORT` (on 127.0.0.1) or `HOST:PORT`.
    #[arg(long, value_name = "[HOST:]PORT", value_parser = crate::watch::parse_listen)]
    pub metrics: Option<std::net::SocketAddr>,

    /// Run the program without a guardian: `foliocache run` executes it in
    /// its place, and what it leaves unsaved if it dies (SIGKILL, abort,
    /// a fatal signal, `_exit`, the OOM killer) is lost. By default
    /// `foliocache run` stays as the program's guardian and writes it back.
    #[arg(long)]
    pub no_guardian: bool,

    /// One cache for all the program's processes (docs/preload.md,
    /// "Processes"): its forked children keep serving from it, the programs
    /// they execute attach to it, and a write by one is seen by every
    /// other's next read. `foliocache run` holds it and writes back what
    /// they leave unsaved once the program is gone.
    #[arg(long, conflicts_with = "no_guardian")]
    pub shared: bool,

    /// As `--shared`, in the cache a `foliocache cache serve NAME` hosts
    /// (docs/preload.md, "Named caches"): every program run with it, and
    /// every other process attached, shares one cache.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["no_guardian", "shared", "capacity"])]
    pub cache: Option<String>,

    /// The program to run and its arguments, after `--`.
    #[arg(value_name = "PROGRAM", required = true, last = true)]
    pub command: Vec<OsString>,
}

/// Where the library is looked for, relative to the directory of the
/// `foliocache` binary: beside it (a development build: `cargo build
/// --release` puts both in target/release), then where scripts/install.sh
/// puts it (`PREFIX/bin/foliocache`, `PREFIX/lib/foliocache/`).
const SEARCH: [&str; 2] = ["", "../lib/foliocache"];

/// `libfoliocache_preload.so` for the binary `exe` (see [`SEARCH`]), or an
/// error saying where it was looked for and what to build.
pub fn library_for(exe: &Path) -> Result<PathBuf> {
    let dir = exe
        .parent()
        .context("the foliocache binary has no directory")?;
    let candidates: Vec<PathBuf> = SEARCH.iter().map(|d| dir.join(d).join(LIBRARY)).collect();
    if let Some(lib) = candidates.iter().find(|l| l.is_file()) {
        return Ok(lib.clone());
    }
    let looked: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
    bail!(
        "{LIBRARY} is in none of {}: build it with `cargo build --release` at the \
         workspace's root (or `-p foliocache-preload` in the profile this binary was \
         built with), or install both with scripts/install.sh",
        looked.join(", ")
    )
}

/// The directories of `--dir`, canonical: each must be a directory whose
/// path has no `:` (the library's variable lists them `:`-separated).
fn canonical_dirs(args: &RunArgs) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for dir in &args.dirs {
        let canonical = dir
            .canonicalize()
            .with_context(|| format!("--dir {}", dir.display()))?;
        if !canonical.is_dir() {
            bail!("--dir {}: not a directory", dir.display());
        }
        if canonical.as_os_str().as_encoded_bytes().contains(&b':') {
            bail!(
                "--dir {}: a path with `:` cannot be passed on",
                canonical.display()
            );
        }
        out.push(canonical);
    }
    Ok(out)
}

/// The variables the program runs with: `LD_PRELOAD` with the library
/// first (before any the environment had), the directories (canonical,
/// `:`-separated), the capacity and the warm-restart state file.
fn environment(args: &RunArgs, lib: &Path) -> Result<Vec<(&'static str, OsString)>> {
    let mut preload = OsString::from(lib);
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let canonical_dirs = canonical_dirs(args)?;
    let dirs = std::env::join_paths(&canonical_dirs).context("--dir")?;
    let mut env = vec![("LD_PRELOAD", preload), ("FOLIOCACHE_PRELOAD_DIRS", dirs)];
    if let Some(bytes) = args.capacity {
        env.push(("FOLIOCACHE_PRELOAD_CAPACITY", bytes.to_string().into()));
    }
    if let Some(state) = args.state.resolve(&canonical_dirs)? {
        env.push((STATE_VAR, state.into()));
    }
    if let Some(addr) = args.metrics {
        env.push((METRICS_VAR, addr.to_string().into()));
    }
    Ok(env)
}

/// A command that runs `args.command` under the library beside this
/// binary, with the library's variables set (and no capacity inherited
/// from the environment when `args` gives none); not started. The bench's
/// `programs` scenario starts `db_bench` with it, `foliocache run` executes
/// it in its place.
///
/// # Errors
/// No library beside this binary (what to build), a directory that
/// cannot be passed on, or no program.
pub fn preloaded(args: &RunArgs) -> Result<Command> {
    let exe = std::env::current_exe().context("locating the foliocache binary")?;
    let lib = library_for(&exe)?;
    let env = environment(args, &lib)?;
    let (program, rest) = args.command.split_first().context("no program to run")?;
    let mut cmd = Command::new(program);
    cmd.args(rest).envs(env.iter().cloned());
    if args.capacity.is_none() {
        cmd.env_remove("FOLIOCACHE_PRELOAD_CAPACITY");
    }
    // What the options leave unset is not inherited either.
    for var in [STATE_VAR, METRICS_VAR] {
        if env.iter().all(|(n, _)| *n != var) {
            cmd.env_remove(var);
        }
    }
    Ok(cmd)
}

/// Refuses, before the program starts, what its cache would refuse
/// where `foliocache mount` refuses it: a capacity above the memory this
/// process may use (checked as `CacheBuilder::build` checks it:
/// [`foliocache::capacity_fits`]) and a metrics address that cannot be
/// bound (bound here, then let go for the program's library to bind).
/// Left to the library, both would leave the program running uncached or
/// unwatched, with a warning among its own output.
fn preflight(args: &RunArgs) -> Result<()> {
    if let Some(bytes) = args.capacity.filter(|&b| b > 0) {
        let bytes = usize::try_from(bytes).context("--capacity: too large for this machine")?;
        foliocache::capacity_fits(bytes).context("--capacity")?;
    }
    if let Some(addr) = args.metrics {
        std::net::TcpListener::bind(addr)
            .with_context(|| format!("--metrics {addr}: cannot serve the metrics there"))?;
    }
    Ok(())
}

/// Runs the program under the library, as its guardian
/// (`crate::guard`), or with `--no-guardian` executes it in its place;
/// returns only on an error.
pub fn run(args: &RunArgs) -> Result<()> {
    let mut cmd = preloaded(args)?;
    preflight(args)?;
    let program = args.command.first().map_or(Path::new(""), Path::new);
    // Set below where it applies; never inherited.
    cmd.env_remove(crate::guard::AT_FORK_VAR);
    if args.cache.is_some() || args.shared {
        // The group's figures are served by this process, which holds
        // the cache, not by each of the program's.
        cmd.env_remove(METRICS_VAR);
    }
    // What an earlier launch on these directories left, killed with its
    // program, is written back before this one serves them.
    let owner = foliocache::persist::Owner::Dirs(canonical_dirs(args)?);
    let capacity = args.capacity.filter(|&c| c > 0).unwrap_or(SHARED_DEFAULT);
    let guarded = args.cache.is_none() && !args.no_guardian;
    let files = crate::recover::before_run(&owner, capacity, guarded)?;
    if let Some(name) = &args.cache {
        return crate::guard::run_attached(cmd, program, name, args.metrics);
    }
    match files {
        Some(files) if args.shared => {
            // The group's warm restarts are the launcher's, which holds
            // the cache: it loads the state file and saves it at the end.
            let state = cmd
                .get_envs()
                .find(|(k, _)| *k == STATE_VAR)
                .and_then(|(_, v)| v.map(PathBuf::from));
            cmd.env_remove(STATE_VAR);
            let state = state.as_deref();
            return crate::guard::run_shared(cmd, program, (capacity, files), args.metrics, state);
        }
        Some(files) => {
            // The program's processes join one cache at their first fork,
            // unless each serves its own figures (`--metrics`: the
            // program's process serves its own cache's).
            let group = args.metrics.is_none().then_some(capacity);
            return crate::guard::run_guarded(cmd, program, group, files);
        }
        None => {}
    }
    cmd.env_remove(crate::guard::SHARED_VAR);
    cmd.env(GUARDIAN_VAR, "off");
    let e = cmd.exec();
    Err(e).with_context(|| format!("running {}", program.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(dirs: Vec<PathBuf>, capacity: Option<u64>) -> RunArgs {
        RunArgs {
            capacity,
            dirs,
            state: StateArgs {
                state: None,
                no_state: true,
            },
            metrics: None,
            no_guardian: false,
            shared: false,
            cache: None,
            command: vec!["true".into()],
        }
    }

    #[test]
    fn the_library_is_found_beside_the_binary_or_where_install_puts_it() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        let exe = bin.join("foliocache");
        std::fs::create_dir_all(&bin).unwrap();
        let e = library_for(&exe).unwrap_err().to_string();
        assert!(
            e.contains("cargo build --release") && e.contains("scripts/install.sh"),
            "{e}"
        );
        // Installed: PREFIX/bin/foliocache, PREFIX/lib/foliocache/.
        let installed = dir.path().join("lib/foliocache");
        std::fs::create_dir_all(&installed).unwrap();
        std::fs::write(installed.join(LIBRARY), b"").unwrap();
        let found = library_for(&exe).unwrap();
        assert_eq!(found.canonicalize().unwrap(), installed.join(LIBRARY));
        // A development build: beside the binary, found first.
        std::fs::write(bin.join(LIBRARY), b"").unwrap();
        assert_eq!(library_for(&exe).unwrap(), bin.join(LIBRARY));
    }

    #[test]
    fn the_environment_names_canonical_dirs_and_the_capacity() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let relative = a.path().join("..").join(a.path().file_name().unwrap());
        let env = environment(
            &args(vec![relative, b.path().into()], Some(1 << 20)),
            Path::new("/lib/x.so"),
        )
        .unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        assert!(get("LD_PRELOAD")
            .unwrap()
            .to_string_lossy()
            .starts_with("/lib/x.so"));
        let want = format!(
            "{}:{}",
            a.path().canonicalize().unwrap().display(),
            b.path().canonicalize().unwrap().display()
        );
        assert_eq!(
            get("FOLIOCACHE_PRELOAD_DIRS").unwrap(),
            OsString::from(want)
        );
        assert_eq!(get("FOLIOCACHE_PRELOAD_CAPACITY").unwrap(), "1048576");
        let env = environment(&args(vec![b.path().into()], None), Path::new("/x.so")).unwrap();
        assert!(env.iter().all(|(n, _)| *n != "FOLIOCACHE_PRELOAD_CAPACITY"));
    }

    #[test]
    fn the_state_file_is_passed_on_unless_turned_off() {
        let a = tempfile::tempdir().unwrap();
        let mut run = args(vec![a.path().into()], None);
        let env = environment(&run, Path::new("/x.so")).unwrap();
        assert!(env.iter().all(|(n, _)| *n != STATE_VAR), "--no-state");
        run.state = StateArgs {
            state: Some(a.path().join("s.state")),
            no_state: false,
        };
        let env = environment(&run, Path::new("/x.so")).unwrap();
        let state = env.iter().find(|(n, _)| *n == STATE_VAR).map(|(_, v)| v);
        assert_eq!(state, Some(&a.path().join("s.state").into_os_string()));
    }

    #[test]
    fn a_missing_or_plain_file_dir_is_an_error() {
        let a = tempfile::tempdir().unwrap();
        let file = a.path().join("f");
        std::fs::write(&file, b"").unwrap();
        for bad in [a.path().join("missing"), file] {
            let e = environment(&args(vec![bad.clone()], None), Path::new("/x.so")).unwrap_err();
            assert!(
                format!("{e:#}").contains(&bad.display().to_string()),
                "{e:#}"
            );
        }
    }
}
