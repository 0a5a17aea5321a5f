//! `foliocache mount`: the FUSE mount (`foliocache-fuse`).
//!
//! `mount BACKING_DIR MOUNTPOINT --capacity SIZE` serves BACKING_DIR at
//! MOUNTPOINT through one cache; `mount --object-store URL MOUNTPOINT
//! --capacity SIZE` serves an object store's objects there, read-only
//! (`foliocache_fuse::ObjectFs`, docs/object-store.md "The mount"). With `--foreground` it serves in this
//! process until unmounted (`foliocache umount MOUNTPOINT`) or sent
//! SIGINT, SIGTERM or SIGHUP; without, it starts itself again with
//! `--foreground` in a new process group (stdin and stdout closed, stderr
//! kept: see [`server_stderr`]), waits until the mount is up, and exits 0
//! (1 if the server failed before mounting, with its error). Either way
//! every dirty folio is written back at unmount. The server logs on
//! stderr (under systemd, the journal: `mounted::log_to_stderr`). A live
//! foliocache mount at MOUNTPOINT is refused, not stacked on
//! (`mounted::refuse_stacked`).
//!
//! `foliocache stat` reads a running mount's figures ([`crate::stat`]).

/// An object store's mount: its options checked, its server started, its
/// `stat` lines.
pub(crate) mod object;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use foliocache_fuse::MountOptions;

use foliocache::parse_size;
use foliocache_bench::state_path::StateArgs;

/// The line a `--foreground` server prints on stdout once mounted, for a
/// background start to wait on.
const READY: &str = "foliocache-mount-ready";

/// Options of `foliocache mount`.
#[derive(Debug, Clone, Args)]
#[command(
    override_usage = "foliocache mount [OPTIONS] --capacity <SIZE> <BACKING_DIR> <MOUNTPOINT>\n       \
                            foliocache mount [OPTIONS] --object-store <URL> --capacity <SIZE> <MOUNTPOINT>"
)]
pub struct MountArgs {
    /// The directory whose tree is served (with --object-store, give the
    /// MOUNTPOINT alone).
    #[arg(value_name = "BACKING_DIR")]
    pub backing_dir: PathBuf,
    /// Where it appears (an empty directory outside BACKING_DIR).
    #[arg(value_name = "MOUNTPOINT")]
    pub mountpoint: Option<PathBuf>,
    /// Serve an object store's objects, read-only, instead of a directory:
    /// `file:///DIR`, `s3://BUCKET/PREFIX`, `gs://BUCKET/PREFIX` or
    /// `az://CONTAINER/PREFIX` (configured by the AWS_*, GOOGLE_* and
    /// AZURE_* environment variables and the AWS profile's files). Usage:
    /// `foliocache mount --object-store URL MOUNTPOINT --capacity SIZE`.
    #[arg(long, value_name = "URL")]
    pub object_store: Option<String>,
    /// With --object-store: how long names, sizes, listings and object
    /// versions are trusted before the store is asked again (seconds,
    /// default 1; 0: ask every time).
    #[arg(long, value_name = "SECS", value_parser = parse_ttl, requires = "object_store")]
    pub metadata_ttl: Option<Duration>,
    /// With --object-store: whether the kernel keeps a file's pages across
    /// opens while its object's version is unchanged (`on`, the default:
    /// warm re-reads at the kernel's speed, in memory outside --capacity
    /// that the kernel reclaims as any file's), or not (`off`: every read
    /// goes to the server, the cache keeping the one copy).
    #[arg(long, value_name = "on|off", value_parser = object::parse_on_off,
          requires = "object_store")]
    pub kernel_cache: Option<bool>,
    /// With --object-store: a disk tier for the objects' bytes, a file
    /// opened O_DIRECT (made if missing), reopened warm by the next mount.
    #[arg(long, value_name = "FILE", requires_all = ["object_store", "disk_tier_size"])]
    pub disk_tier: Option<PathBuf>,
    /// With --object-store, for testing against a slow store: each request
    /// to the store waits this many milliseconds first (its first-byte
    /// latency; S3's is 100 to 200 for large objects). Listings are not
    /// slowed.
    #[arg(long, value_name = "MS", requires = "object_store")]
    pub store_latency: Option<u64>,
    /// With --object-store, for testing: the store's GETs come through one
    /// link of this many bytes a second (e.g. 100M, 1G) that every GET in
    /// flight shares.
    #[arg(long, value_name = "BYTES", value_parser = parse_capacity, requires = "object_store")]
    pub store_bandwidth: Option<u64>,
    /// The disk tier's size, e.g. 8G.
    #[arg(long, value_name = "SIZE", value_parser = parse_capacity, requires = "disk_tier")]
    pub disk_tier_size: Option<u64>,
    /// The cache's size, e.g. 1G, 512M (the mount's own cache; not with
    /// --cache).
    #[arg(long, value_name = "SIZE", value_parser = parse_capacity,
          required_unless_present = "cache")]
    pub capacity: Option<u64>,
    /// Serve through the named shared cache NAME (a name or a socket's
    /// path, hosted by `foliocache cache serve NAME`) instead of a cache of
    /// the mount's own: programs attached to it (`foliocache run --cache
    /// NAME`) share the mount's pages, each side's writes seen by the
    /// other's next read.
    #[arg(long, value_name = "NAME")]
    pub cache: Option<String>,
    /// Every read and write uncached (RWF_DONTCACHE-like drop-behind).
    #[arg(long)]
    pub dontcache: bool,
    /// The largest folio the cache makes, e.g. 64k, 2M.
    #[arg(long, value_name = "SIZE", value_parser = parse_capacity)]
    pub max_folio: Option<u64>,
    /// Serve in this process until unmounted (default: in the background).
    #[arg(long)]
    pub foreground: bool,
    /// Let other users use the mount (needs `user_allow_other` in
    /// /etc/fuse.conf unless root).
    #[arg(long)]
    pub allow_other: bool,
    /// Threads serving requests (default: one per CPU, 2 to 8).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub threads: Option<u16>,
    /// Serve the cache's Prometheus metrics at http://ADDR/metrics while
    /// mounted: `PORT` (on 127.0.0.1) or `HOST:PORT`.
    #[arg(long, value_name = "[HOST:]PORT", value_parser = crate::watch::parse_listen)]
    pub metrics: Option<std::net::SocketAddr>,
    /// The most descriptors the server keeps open for the files and
    /// directories the kernel knows (half for the nodes, half for cached
    /// files; unused ones close and reopen when needed). Default: the
    /// open-file limit, raised to its hard limit, less 256.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(32..))]
    pub max_open: Option<u64>,
    /// Warm restarts: the state file (`--state`, `--no-state`).
    #[command(flatten)]
    pub state: StateArgs,
}

/// A time-to-live in seconds, 0 to a day.
fn parse_ttl(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(secs) if (0.0..=86_400.0).contains(&secs) => Ok(Duration::from_secs_f64(secs)),
        _ => Err(format!("`{s}`: not a number of seconds from 0 to 86400")),
    }
}

fn parse_capacity(s: &str) -> Result<u64, String> {
    match parse_size(s)? {
        0 => Err(format!("`{s}`: must be more than 0 bytes")),
        n if usize::try_from(n).is_err() => Err(format!("`{s}`: too large for this machine")),
        n => Ok(n),
    }
}

/// With `--cache`, refuses the options of a mount's own cache, saying
/// why.
fn check_named(a: &MountArgs) -> Result<()> {
    let Some(name) = &a.cache else {
        return Ok(());
    };
    if a.capacity.is_some() {
        bail!(
            "--capacity sizes a mount's own cache: the named cache {name} has the size its \
             host gave it (`foliocache cache serve {name} --capacity SIZE`); leave --capacity out \
             with --cache"
        );
    }
    let own = [
        (a.dontcache, "--dontcache"),
        (a.max_folio.is_some(), "--max-folio"),
        (a.metrics.is_some(), "--metrics"),
        (a.state.state.is_some(), "--state (warm restarts)"),
    ];
    if let Some((_, opt)) = own.iter().find(|(set, _)| *set) {
        bail!(
            "{opt} is for a mount's own cache, not the named cache {name} (whose pages live \
             while its host does; `foliocache cache stat {name}` shows its figures): leave it \
             out with --cache"
        );
    }
    Ok(())
}

impl MountArgs {
    /// The directory served (`None` with --object-store) and the mount
    /// point: with --object-store the one path given is the mount point.
    ///
    /// # Errors
    /// A mount point missing, or a directory given with --object-store.
    fn paths(&self) -> Result<(Option<&Path>, &Path)> {
        match (&self.object_store, &self.mountpoint) {
            (None, Some(m)) => Ok((Some(&self.backing_dir), m)),
            (None, None) => bail!("give the MOUNTPOINT after {}", self.backing_dir.display()),
            (Some(_), None) => Ok((None, &self.backing_dir)),
            (Some(url), Some(_)) => bail!(
                "--object-store {url} is served at the one path given, its MOUNTPOINT: give \
                 no BACKING_DIR"
            ),
        }
    }
}

/// Says the mount is up, to a background start waiting on stdout.
pub(crate) fn ready() {
    println!("{READY}");
    let _ = std::io::stdout().flush();
}

/// Runs `foliocache mount`.
pub fn mount(a: &MountArgs) -> Result<()> {
    check_named(a)?;
    object::check_objects(a)?;
    let (backing_dir, mountpoint) = a.paths()?;
    crate::mounted::refuse_stacked(mountpoint)?;
    if !a.foreground {
        return start_background();
    }
    crate::mounted::log_to_stderr();
    let mut opts = MountOptions::new(usize::try_from(a.capacity.unwrap_or(0))?);
    opts.cache_name.clone_from(&a.cache);
    opts.dontcache = a.dontcache;
    opts.allow_other = a.allow_other;
    opts.max_folio = a.max_folio.map(usize::try_from).transpose()?;
    if let Some(t) = a.threads {
        opts.threads = usize::from(t);
    }
    opts.metrics = a.metrics;
    opts.max_open = a.max_open.map(usize::try_from).transpose()?;
    let Some(backing_dir) = backing_dir else {
        let url = a.object_store.as_deref().unwrap_or_default();
        return object::serve_objects(a, url, mountpoint, &opts, ready);
    };
    let backing = backing_dir
        .canonicalize()
        .with_context(|| format!("{}", backing_dir.display()))?;
    if a.cache.is_none() {
        opts.state = a.state.resolve(&[backing])?;
    }
    foliocache_fuse::serve(backing_dir, mountpoint, &opts, ready).with_context(|| {
        format!(
            "serving {} at {}",
            backing_dir.display(),
            mountpoint.display()
        )
    })
}

/// Starts this command again with `--foreground` in its own process
/// group and waits for it to say the mount is up.
fn start_background() -> Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("finding this program")?;
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    args.push("--foreground".into());
    let mut child = Command::new(exe)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(server_stderr())
        .process_group(0)
        .spawn()
        .context("starting the mount server")?;
    let out = child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("no pipe from the mount server"))?;
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line)?;
    if line.trim() == READY {
        // The server keeps running; its stdout pipe closes with us.
        return Ok(());
    }
    // The server printed its error on stderr.
    let status = child.wait()?;
    bail!("the mount server stopped before mounting ({status})")
}

/// Where the background server's messages go: this command's stderr (a
/// terminal, a file, or under systemd the journal, `JOURNAL_STREAM`
/// naming it), except a pipe or another socket: a daemon keeping it open
/// would keep whoever reads it (a shell's `2>&1 | ...`) waiting for as
/// long as the mount lives. There the messages are dropped, and this says
/// so.
fn server_stderr() -> Stdio {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let Ok(meta) = std::fs::metadata("/proc/self/fd/2") else {
        return Stdio::inherit();
    };
    let ft = meta.file_type();
    let journal = std::env::var("JOURNAL_STREAM")
        .is_ok_and(|j| j == format!("{}:{}", meta.dev(), meta.ino()));
    if !(ft.is_fifo() || ft.is_socket()) || journal {
        return Stdio::inherit();
    }
    eprintln!(
        "foliocache: stderr is a pipe, which the mount server would hold open: its \
         messages are dropped (redirect stderr to a file, or use --foreground, to keep them)"
    );
    Stdio::null()
}
