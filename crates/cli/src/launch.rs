//! `foliocache run`: runs a program under `libfoliocache_preload.so`, so
//! its file calls on the given directories are served by a foliocache
//! inside it (docs/preload.md). The library is found next to this binary
//! (`target/release/` after `cargo build --release -p foliocache-preload`);
//! the launcher (`foliocache_bench::preload`) sets `LD_PRELOAD` and the
//! library's variables, and this runs the program as its guardian or
//! executes it in its place.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;

use foliocache::parse_size;
use foliocache_bench::preload::{preloaded, Preload, METRICS_VAR, STATE_VAR};
use foliocache_bench::state_path::StateArgs;

/// The library's variable that turns its guardian off.
const GUARDIAN_VAR: &str = "FOLIOCACHE_PRELOAD_GUARDIAN";

/// The shared cache's capacity when `--capacity` gives none: the
/// library's own default.
const SHARED_DEFAULT: u64 = 256 << 20;

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

    /// Serve the group's cache's Prometheus metrics at
    /// http://ADDR/metrics from `foliocache run` itself, from the start
    /// of the run to its end, changing nothing else: `PORT` (on
    /// 127.0.0.1) or `HOST:PORT`. Without `--shared`, the processes are
    /// in the group's figures from the program's first fork on (until
    /// then the program's process serves from a cache of its own).
    /// Refused with `--no-guardian`, which leaves no launcher to serve
    /// them.
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

impl RunArgs {
    /// The program and the library's settings these options give.
    fn preload(&self) -> Preload {
        Preload {
            capacity: self.capacity,
            dirs: self.dirs.clone(),
            state: self.state.clone(),
            metrics: self.metrics,
            command: self.command.clone(),
        }
    }
}

/// Refuses, before the program starts, what its cache would refuse
/// where `foliocache mount` refuses it: a capacity above the memory this
/// process may use (checked as `CacheBuilder::build` checks it:
/// [`foliocache::capacity_fits`]); a metrics address that cannot be
/// bound (bound here, then let go for this process to bind once the
/// cache is made); and `--metrics` with `--no-guardian`, where no
/// launcher stays to serve them. Left to the run, each would leave the
/// program running uncached or unwatched, with a warning among its own
/// output.
fn preflight(args: &RunArgs) -> Result<()> {
    if let Some(bytes) = args.capacity.filter(|&b| b > 0) {
        let bytes = usize::try_from(bytes).context("--capacity: too large for this machine")?;
        foliocache::capacity_fits(bytes).context("--capacity")?;
    }
    if args.metrics.is_some() && args.no_guardian {
        anyhow::bail!(
            "--metrics with --no-guardian: the metrics are served by `foliocache run`, which \
             --no-guardian replaces by the program (nothing would serve the figures of the \
             cache its processes share); run without --no-guardian, or set \
             FOLIOCACHE_PRELOAD_METRICS for the program's own cache (docs/metrics.md)"
        );
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
    preflight(args)?;
    let mut cmd = preloaded(&args.preload())?;
    let program = args.command.first().map_or(Path::new(""), Path::new);
    // Set below where it applies; never inherited.
    cmd.env_remove(crate::guard::AT_FORK_VAR);
    // The group's figures are served by this process, which holds the
    // cache, not by each of the program's.
    cmd.env_remove(METRICS_VAR);
    // What an earlier launch on these directories left, killed with its
    // program, is written back before this one serves them (`preloaded`
    // checked each is a directory).
    let dirs = args
        .dirs
        .iter()
        .map(|d| d.canonicalize())
        .collect::<Result<_, _>>();
    let owner = foliocache::persist::Owner::Dirs(dirs.context("--dir")?);
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
            // The program's processes join one cache at their first fork.
            return crate::guard::run_guarded(cmd, program, (capacity, files), args.metrics);
        }
        None => {}
    }
    cmd.env_remove(crate::guard::SHARED_VAR);
    cmd.env(GUARDIAN_VAR, "off");
    let e = cmd.exec();
    Err(e).with_context(|| format!("running {}", program.display()))
}
