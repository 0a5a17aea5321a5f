//! `foliocache stat`: a running mount's figures, read from its control
//! file (`MOUNTPOINT/.foliocache-control`, see `foliocache_fuse::control`):
//! the cache's figures and cachestat of each FILE, printed as text, or
//! with `--json` as the JSON the server gave; `--watch` prints a line of
//! rates at intervals ([`crate::watch`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;

use crate::control::{predicted, query};

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

/// `stat`'s line of the predicted hit ratios at other sizes (a point not
/// yet known says so), or `None` where the mount's answer has no curve.
pub(crate) fn curve_line(c: &serde_json::Value) -> Option<String> {
    c["hit_ratio_curve"]["points"].as_array()?;
    let at = |r: f64| match predicted(c, r) {
        Some(h) => format!("{r}x {:.1} %", h * 100.0),
        None => format!("{r}x not yet known"),
    };
    let cells: Vec<String> = [0.25, 0.5, 1.0, 2.0, 4.0].into_iter().map(at).collect();
    Some(format!(
        "predicted hit ratio (bytes from memory) at capacity: {} (over the last {} page reads)",
        cells.join(", "),
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
            "reads by every process: {}",
            c["reads_line"].as_str().unwrap_or("?")
        );
        if let Some(line) = curve_line(c) {
            println!("the group's {line}");
        }
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
    match crate::mount::object::reads_line(&v["object_store"]) {
        Some(line) => {
            println!("{line}");
            for line in crate::mount::object::tier_lines(&v["object_store"]) {
                println!("{line}");
            }
        }
        None => {
            println!(
                "reads: {}; {} backing reads",
                c["reads_line"].as_str().unwrap_or("?"),
                n("io_reads"),
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
    if let Some(line) = crate::mount::object::object_store_line(&v["object_store"]) {
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
        assert!(line.contains("last 1000 page reads"), "{line}");
        // A point not yet known is `null`: said so, not a number.
        let warming = serde_json::json!({"hit_ratio_curve": {
            "points": [[0.25, 0.1], [0.5, 0.2], [1.0, 0.5], [2.0, null], [4.0, null]],
            "accesses": 10,
        }});
        assert_eq!(predicted(&warming, 2.0), None);
        let line = curve_line(&warming).unwrap();
        assert!(
            line.contains("1x 50.0 %, 2x not yet known, 4x not yet known"),
            "{line}"
        );
        assert_eq!(curve_line(&serde_json::json!({})), None);
        assert_eq!(curve_line(&serde_json::json!({"hits": 1})), None);
    }
}
