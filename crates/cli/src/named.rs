//! `foliocache cache`: hosts a named shared cache (`serve`), which the
//! processes of any `foliocache run --cache NAME` (and any program that
//! attaches by name: `FOLIOCACHE_PRELOAD_SHARED=NAME`,
//! `SharedCache::attach_named`) share, or shows one's figures (`stat`).
//! docs/preload.md, "Named caches".

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

use foliocache::{parse_size, SharedCache};

/// Options of `foliocache cache`.
#[derive(Debug, Clone, Args)]
pub struct CacheArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: CacheCommand,
}

/// `foliocache cache`'s subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum CacheCommand {
    /// Hold a shared cache under NAME until SIGTERM, SIGINT or SIGHUP:
    /// every process of a `foliocache run --cache NAME` attaches to it
    /// (one copy of each page for all of them, each write seen by every
    /// other's next read), its flusher writes back what they leave, and
    /// on the way out it writes back everything and removes its socket.
    Serve(ServeArgs),
    /// A named cache's figures: its pages, what it holds, its processes.
    Stat(StatArgs),
}

/// Options of `foliocache cache serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The cache's name (letters, digits, `.`, `_`, `-`: its socket is in
    /// `$XDG_RUNTIME_DIR/foliocache/`, or `/tmp/foliocache-UID/`), or a
    /// socket's path (with a `/`), for a cache other users attach to.
    #[arg(value_name = "NAME")]
    pub name: String,

    /// The cache's memory, e.g. 256M or 4G.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "256M")]
    pub capacity: u64,

    /// Also serve the members of this group (a name or a gid), as
    /// members: they do not map the cache; each file one opens is handed
    /// to the kernel for the whole group, and the kernel checks their
    /// every read and write (docs/preload.md, "Named caches").
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,

    /// Serve the cache's Prometheus metrics (the whole group's:
    /// `foliocache_shared_*`) at http://ADDR/metrics: `PORT` (on
    /// 127.0.0.1) or `HOST:PORT`.
    #[arg(long, value_name = "[HOST:]PORT", value_parser = crate::watch::parse_listen)]
    pub metrics: Option<std::net::SocketAddr>,
}

/// Options of `foliocache cache stat`.
#[derive(Debug, Clone, Args)]
pub struct StatArgs {
    /// The cache's name or socket path, as `serve` was given it.
    #[arg(value_name = "NAME")]
    pub name: String,
}

/// Runs `foliocache cache`.
pub fn run(args: &CacheArgs) -> Result<()> {
    match &args.command {
        CacheCommand::Serve(a) => serve(a),
        CacheCommand::Stat(a) => stat(a),
    }
}

/// A group by name or number.
fn gid_of(group: &str) -> Result<u32> {
    if let Ok(gid) = group.parse::<u32>() {
        if gid == u32::MAX {
            bail!("--group {group}: not a group");
        }
        return Ok(gid);
    }
    match nix::unistd::Group::from_name(group) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => bail!("--group {group}: no such group"),
        Err(e) => bail!("--group {group}: {e}"),
    }
}

/// The signals that stop the host.
const STOP: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

fn serve(args: &ServeArgs) -> Result<()> {
    let group = args.group.as_deref().map(gid_of).transpose()?;
    let bytes = usize::try_from(args.capacity).context("--capacity: too large for this machine")?;
    foliocache::capacity_fits(bytes).context("--capacity")?;
    // Blocked before any thread starts (the host's and the flusher's take
    // this mask), so that only the wait below takes them.
    crate::guard::block(&STOP);
    // What the last host of this name left, killed, is written back
    // first; the cache's file persists on tmpfs (only this user maps it:
    // a group's members hand their files to the kernel instead).
    let owner = foliocache::persist::Owner::Cache(args.name.clone());
    let files = crate::recover::Persisted::start(&owner, args.capacity, "foliocache cache")?;
    let cache = files.shared(args.capacity, false)?;
    let host = cache
        .host(&args.name, group)
        .with_context(|| format!("hosting the cache {}", args.name))?;
    let flusher = cache.start_flusher().context("starting the flusher")?;
    let metrics = args
        .metrics
        .map(|addr| {
            foliocache::metrics::serve_shared(addr, &cache)
                .with_context(|| format!("--metrics {addr}: cannot serve the metrics there"))
        })
        .transpose()?;
    let at = metrics.as_ref().map_or(String::new(), |m| {
        format!(", its metrics at http://{}/metrics", m.local_addr())
    });
    println!(
        "foliocache cache: serving {} ({} pages of 4 KiB) at {}{at}; SIGTERM or ^C stops it",
        args.name,
        cache.pages(),
        host.path().display()
    );
    let sig = crate::guard::wait_for(&STOP);
    drop(host);
    drop(flusher);
    drop(metrics);
    let processes = cache.stats().processes;
    let written = cache.write_back_all().context("writing the cache back")?;
    files.end(Some(&cache));
    eprintln!(
        "foliocache cache: {} stopped by signal {sig}: {written} pages written back; \
         {} processes still attached keep the cache",
        args.name,
        processes.saturating_sub(1)
    );
    Ok(())
}

fn stat(args: &StatArgs) -> Result<()> {
    let cache = SharedCache::attach_named(&args.name)
        .with_context(|| format!("attaching to the cache {}", args.name))?;
    let s = cache.stats();
    println!(
        "cache {}: {} pages ({} MiB, {} MiB in 2 MiB pages), {} cached, {} dirty; \
         {} processes attached; {} evictions, {} recoveries",
        args.name,
        s.pages,
        (s.pages * 4096) >> 20,
        s.huge_bytes >> 20,
        s.cached,
        s.dirty,
        s.processes,
        s.evictions,
        s.recoveries
    );
    println!(
        "reads by every process: {}",
        foliocache::CacheFigures::of_group(&s).reads_line()
    );
    // The group's curve, as the host last published it.
    let curve = cache.hit_ratio_curve().map(
        |c| serde_json::json!({ "hit_ratio_curve": foliocache_fuse::control::curve_json(&c) }),
    );
    match curve.as_ref().and_then(crate::stat::curve_line) {
        Some(line) => println!("the group's {line}"),
        None => println!("the group's predicted hit ratio: not yet published by the host"),
    }
    Ok(())
}
