//! `foliocache mount` and `foliocache stat`: the FUSE mount
//! (`foliocache-fuse`) and its figures.
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
//! `stat MOUNTPOINT [FILE...]` reads the running mount's control file
//! (`MOUNTPOINT/.foliocache-control`, see `foliocache_fuse::control`):
//! the cache's figures and cachestat of each FILE, printed as text, or
//! with `--json` as the JSON the server gave.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use foliocache_fuse::{MountOptions, CONTROL_NAME};

use crate::state_path::StateArgs;
use foliocache::parse_size;

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
    #[arg(long, value_name = "on|off", value_parser = crate::mount_object::parse_on_off,
          requires = "object_store")]
    pub kernel_cache: Option<bool>,
    /// With --object-store: a disk tier for the objects' bytes, a file
    /// opened O_DIRECT (made if missing), reopened warm by the next mount.
    #[arg(long, value_name = "FILE", requires_all = ["object_store", "disk_tier_size"])]
    pub disk_tier: Option<PathBuf>,
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

/// Options of `foliocache stat`.
#[derive(Debug, Clone, Args)]
pub struct StatArgs {
    /// A running `foliocache mount`'s mount point.
    pub mountpoint: PathBuf,
    /// Files under the mount point to show cachestat figures for.
    pub files: Vec<PathBuf>,
    /// Print the server's JSON as it is.
    #[arg(long)]
    pub json: bool,
    /// Print a line of rates every second (`--watch=SECS`, or
    /// `--interval SECS`: every SECS seconds), as `vmstat` does, until
    /// interrupted or `--count` lines.
    #[arg(long, value_name = "SECS", num_args = 0..=1, require_equals = true,
          value_parser = crate::watch::parse_interval, conflicts_with = "json")]
    pub watch: Option<Option<Duration>>,
    /// With `--watch`: the seconds between lines (default 1).
    #[arg(long, value_name = "SECS", value_parser = crate::watch::parse_interval,
          requires = "watch")]
    pub interval: Option<Duration>,
    /// With `--watch`: stop after this many lines.
    #[arg(long, value_name = "N", requires = "watch")]
    pub count: Option<u64>,
}

impl StatArgs {
    /// With `--watch`, the mount point and the interval; `None` without.
    /// The forms from before `--watch` took its value only after `=`
    /// still work: `--watch SECS MOUNTPOINT` and `MOUNTPOINT --watch SECS`,
    /// parsed as a mount point and a file, are read as they were meant
    /// where SECS is an interval and names no file.
    ///
    /// # Errors
    /// Two intervals, or files with `--watch`.
    fn watch_plan(&self) -> Result<Option<(PathBuf, Duration)>> {
        let Some(watch) = self.watch else {
            return Ok(None);
        };
        let secs = |p: &Path| {
            p.to_str()
                .filter(|_| !p.exists())
                .and_then(|s| crate::watch::parse_interval(s).ok())
        };
        let (mnt, legacy) = match (watch, self.interval, self.files.as_slice()) {
            (_, _, []) => (self.mountpoint.clone(), None),
            (None, None, [f]) => match (secs(&self.mountpoint), secs(f)) {
                (Some(i), _) => (f.clone(), Some(i)),
                (None, Some(i)) => (self.mountpoint.clone(), Some(i)),
                (None, None) => bail!("--watch shows the whole cache: it takes no FILE"),
            },
            _ => bail!("--watch shows the whole cache: it takes no FILE"),
        };
        let interval = match (watch, self.interval) {
            (Some(_), Some(_)) => bail!("--watch=SECS and --interval both give the interval"),
            (w, i) => w.or(i).or(legacy).unwrap_or(Duration::from_secs(1)),
        };
        Ok(Some((mnt, interval)))
    }
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
    crate::mount_object::check_objects(a)?;
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
        return crate::mount_object::serve_objects(a, url, mountpoint, &opts, ready);
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

/// Runs `foliocache stat`.
pub fn stat(a: &StatArgs) -> Result<()> {
    if let Some((mnt, interval)) = a.watch_plan()? {
        let mnt = mnt
            .canonicalize()
            .with_context(|| format!("{}", mnt.display()))?;
        let mut out = std::io::stdout().lock();
        return crate::watch::watch(&mnt, interval, a.count, &mut out);
    }
    let mnt = a
        .mountpoint
        .canonicalize()
        .with_context(|| format!("{}", a.mountpoint.display()))?;
    let mut request = String::new();
    for f in &a.files {
        request.push_str(&relative(&mnt, f)?);
        request.push('\n');
    }
    let answer = query(&mnt, &request)?;
    if a.json {
        print!("{answer}");
        return Ok(());
    }
    let v: serde_json::Value = serde_json::from_str(&answer).context("the server's answer")?;
    print_text(&v);
    Ok(())
}

/// The mount's answer (JSON) to `request` (file paths relative to the
/// mount root, a line each; empty for the cache's figures alone), through
/// its control file.
pub(crate) fn query(mnt: &Path, request: &str) -> Result<String> {
    let control = mnt.join(CONTROL_NAME);
    // Opened for writing only to send a request: an object store's mount
    // is read-only, and answers the figures without one.
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(!request.is_empty())
        .open(&control);
    let mut file = match opened {
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => bail!(
            "{} is a read-only mount (an object store's), which keeps no figures per file: \
             `foliocache stat {}` shows the cache's",
            mnt.display(),
            mnt.display()
        ),
        r => r.with_context(|| {
            format!(
                "opening {} (is a `foliocache mount` running there?)",
                control.display()
            )
        })?,
    };
    if !request.is_empty() {
        file.write_all(request.as_bytes())?;
        // The answer is read from offset 0 (the write moved the offset).
        file.seek(SeekFrom::Start(0))?;
    }
    let mut answer = String::new();
    file.read_to_string(&mut answer)?;
    Ok(answer)
}

/// `f` as a path relative to the mount root (the file must be under it).
fn relative(mnt: &Path, f: &Path) -> Result<String> {
    // Canonicalize the parent only: the file itself may be a symlink,
    // whose own cachestat the server refuses rather than follows.
    let abs = if f.is_absolute() {
        f.to_path_buf()
    } else {
        std::env::current_dir()?.join(f)
    };
    let parent = abs
        .parent()
        .ok_or_else(|| anyhow!("{}: not a file", f.display()))?
        .canonicalize()
        .with_context(|| format!("{}", f.display()))?;
    let name = abs
        .file_name()
        .ok_or_else(|| anyhow!("{}: not a file", f.display()))?;
    let full = parent.join(name);
    let rel = full
        .strip_prefix(mnt)
        .map_err(|_| anyhow!("{} is not under the mount {}", f.display(), mnt.display()))?;
    rel.to_str()
        .map(String::from)
        .ok_or_else(|| anyhow!("{}: not UTF-8", f.display()))
}

/// How the mount's files can be memory-mapped: shared and private where
/// the kernel granted `FUSE_DIRECT_IO_ALLOW_MMAP` at init, private only
/// where it did not (docs/design.md, "Memory maps").
fn mmap_mode(v: &serde_json::Value) -> &'static str {
    match v["shared_mmap"].as_bool() {
        Some(true) => "shared and private",
        Some(false) => "private only (the kernel lacks FUSE_DIRECT_IO_ALLOW_MMAP)",
        None => "?",
    }
}

/// The hit ratio the mount's cache predicts at `capacity_ratio` times its
/// capacity (`Cache::hit_ratio_curve`), from `cache.hit_ratio_curve` of
/// its answer (`{"points": [[ratio, hit ratio], ...], "accesses": n}`);
/// `None` where the answer has none.
pub fn predicted(c: &serde_json::Value, capacity_ratio: f64) -> Option<f64> {
    c["hit_ratio_curve"]["points"]
        .as_array()?
        .iter()
        .find(|p| p[0].as_f64() == Some(capacity_ratio))?[1]
        .as_f64()
}

/// `stat`'s line of the predicted hit ratios at other sizes, or `None`
/// where the mount's answer has no curve.
fn curve_line(c: &serde_json::Value) -> Option<String> {
    let at = |r: f64| predicted(c, r).map(|h| format!("{r}x {:.1} %", h * 100.0));
    let cells: Option<Vec<String>> = [0.25, 0.5, 1.0, 2.0, 4.0].into_iter().map(at).collect();
    Some(format!(
        "predicted hit ratio at capacity: {} (over the last {} reads)",
        cells?.join(", "),
        c["hit_ratio_curve"]["accesses"].as_u64().unwrap_or(0)
    ))
}

fn print_text(v: &serde_json::Value) {
    let c = &v["cache"];
    let n = |k: &str| c[k].as_u64().unwrap_or(0);
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    if let Some(name) = v["shared"]["name"].as_str() {
        println!(
            "named cache {name}: {:.1} MiB of {:.1} MiB cached, {:.1} MiB dirty; {} processes \
             attached; {} evictions, {} recoveries  [mmap: {}]",
            mib(n("bytes_cached")),
            mib(n("capacity_bytes")),
            mib(n("dirty_bytes")),
            n("processes"),
            n("evictions"),
            n("recoveries"),
            mmap_mode(v),
        );
        println!(
            "reads by the server: {} hits, {} misses, hit ratio {:.1} %",
            n("hits"),
            n("misses"),
            c["hit_ratio"].as_f64().unwrap_or(0.0) * 100.0,
        );
        print_files(v);
        return;
    }
    println!(
        "cache: {:.1} MiB of {:.1} MiB cached ({} folios), {:.1} MiB dirty, {:.1} MiB under writeback  [io: {}{}; mmap: {}]",
        mib(n("bytes_cached")),
        mib(n("capacity_bytes")),
        n("folios"),
        mib(n("dirty_bytes")),
        mib(n("writeback_bytes")),
        v["io_engine"].as_str().unwrap_or("?"),
        if v["dontcache"].as_bool() == Some(true) { ", dontcache" } else { "" },
        mmap_mode(v),
    );
    match crate::mount_object::reads_line(&v["object_store"]) {
        Some(line) => println!("{line}"),
        None => {
            println!(
                "reads: {} hits, {} misses, hit ratio {:.1} %; {} backing reads ({:.1} MiB)",
                n("hits"),
                n("misses"),
                c["hit_ratio"].as_f64().unwrap_or(0.0) * 100.0,
                n("io_reads"),
                mib(n("io_bytes")),
            );
            if let Some(line) = curve_line(c) {
                println!("{line}");
            }
        }
    }
    println!(
        "reclaim: {} evictions, {} refaults, {} activations, {} shadows, {} dropbehind drops",
        n("evictions"),
        n("refaults"),
        n("activations"),
        n("shadows"),
        n("dropbehind_drops"),
    );
    println!(
        "writeback: {} writes ({:.1} MiB), {} errors, {} throttled writers",
        n("io_writes"),
        mib(n("io_write_bytes")),
        n("writeback_errors"),
        n("throttled"),
    );
    if let Some(line) = warm_line(&v["warm"]) {
        println!("{line}");
    }
    if let Some(line) = crate::mount_object::object_store_line(&v["object_store"]) {
        println!("{line}");
    }
    print_files(v);
}

/// The descriptors' line and each file's cachestat (or error) line.
fn print_files(v: &serde_json::Value) {
    let d = &v["descriptors"];
    if d.is_object() {
        let n = |k: &str| d[k].as_u64().unwrap_or(0);
        println!(
            "descriptors: {} of {} for files and directories, {} of {} for cached files",
            n("paths"),
            n("paths_budget"),
            n("files"),
            n("files_budget"),
        );
    }
    if let Some(files) = v["files"].as_array() {
        for f in files {
            let path = f["path"].as_str().unwrap_or("?");
            if let Some(e) = f["error"].as_str() {
                println!("{path}: error: {e}");
                continue;
            }
            let p = |k: &str| f[k].as_u64().unwrap_or(0);
            println!(
                "{path}: cached {} pages, dirty {}, writeback {}, evicted {}, recently evicted {}",
                p("cached"),
                p("dirty"),
                p("writeback"),
                p("evicted"),
                p("recently_evicted"),
            );
        }
    }
}

/// The warm start's progress, from the control file's `"warm"` object
/// (`None` when no state file was loaded).
fn warm_line(w: &serde_json::Value) -> Option<String> {
    if w["started"].as_bool() != Some(true) {
        return None;
    }
    let n = |k: &str| w[k].as_u64().unwrap_or(0);
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let state = if w["stopped_at_capacity"].as_bool() == Some(true) {
        "stopped at the capacity"
    } else if w["done"].as_bool() == Some(true) {
        "done"
    } else {
        "loading"
    };
    Some(format!(
        "warm start ({state}): {} of {} ranges, {:.1} of {:.1} MiB loaded; {} files loaded, {} skipped (changed or gone)",
        n("ranges_loaded"),
        n("ranges"),
        mib(n("bytes_loaded")),
        mib(n("bytes")),
        n("files_loaded"),
        n("files_skipped"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warm_line_shows_progress_and_skips() {
        let w = serde_json::json!({
            "started": true, "done": false, "stopped_at_capacity": false,
            "ranges": 10, "ranges_loaded": 4, "bytes": 4u64 << 20, "bytes_loaded": 1u64 << 20,
            "files": 3, "files_loaded": 2, "files_skipped": 1,
        });
        let line = warm_line(&w).unwrap();
        assert!(
            line.contains("(loading): 4 of 10 ranges, 1.0 of 4.0 MiB"),
            "{line}"
        );
        assert!(line.contains("2 files loaded, 1 skipped"), "{line}");
        assert_eq!(warm_line(&serde_json::json!({"started": false})), None);
    }

    #[test]
    fn the_curve_line_shows_each_size_or_nothing() {
        let c = serde_json::json!({"hit_ratio_curve": {
            "points": [[0.25, 0.1], [0.5, 0.2], [1.0, 0.5], [2.0, 0.75], [4.0, 0.9]],
            "accesses": 1000,
        }});
        assert_eq!(predicted(&c, 2.0), Some(0.75));
        let line = curve_line(&c).unwrap();
        assert!(
            line.contains("0.25x 10.0 %, 0.5x 20.0 %, 1x 50.0 %, 2x 75.0 %, 4x 90.0 %"),
            "{line}"
        );
        assert!(line.contains("last 1000 reads"), "{line}");
        assert_eq!(curve_line(&serde_json::json!({"hits": 1})), None);
    }
}
