//! The `cold` job of the `objectstore` scenario: an object read cold
//! through the object mount against the bare link it comes over (issue
//! 88's "first byte of an object at most the store's latency plus 1 ms; a
//! cold sequential read at least 0.9x the injected link at 100 MB/s and
//! at 1 GB/s").
//!
//! One object of [`ObjectBench::cold_object`] bytes in a directory, served
//! as `file://DIR` slowed by the mount's own test options
//! (`ObjectOptions::store_latency` and `store_bandwidth`, the CLI's
//! `--store-latency` and `--store-bandwidth`: object_store's
//! `LocalFileSystem` behind `Throttled::link`, every request after the
//! scenario's latency, the GETs sharing one link of [`LINKS`] bytes a
//! second). Three contenders, interleaved, their order rotating from
//! round to round, at each link:
//! - `link`: the bound: one ranged GET of the whole object, streamed,
//!   through a `Throttled::link` of its own over the same directory (no
//!   mount, no cache): its first piece's time and its last's;
//! - `mount`: a fresh mount of the URL (an empty cache: nothing of the
//!   object in memory, the kernel's page cache or a tier), the object's
//!   name looked up (`stat`: a listing of the root, not timed), then
//!   opened and read: the first 4 KiB `pread` is the first byte's time,
//!   then 1 MiB `pread`s to the end, every read's first word checked;
//! - `mount+tier`: the same with an empty disk tier of the object's size.
//!
//! A figure is the median of the rounds; the notes give each round's and
//! the GETs and HEADs each mount sent.

use std::os::unix::fs::FileExt;
use std::path::Path as FsPath;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use foliocache_fuse::{spawn_objects, MountOptions, ObjectFs, ObjectOptions};
use foliocache_object_store::{DiskTier, Throttled};
use futures_util::StreamExt;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore};

use super::mount::{write_object, OBJ};
use super::{word, ObjectBench, COLD};
use crate::report::median;
use crate::report::{RunJob, RunRecord};

/// The links' bandwidths, bytes a second.
const LINKS: [u64; 2] = [100_000_000, 1_000_000_000];
/// The contenders, in the first round's order.
const CONTENDERS: [&str; 3] = ["link", "mount", "mount+tier"];
/// The first read through the mount.
const FIRST: usize = 4 << 10;

/// One cold read: seconds to the first byte and to the last; the GETs
/// and HEADs it sent (a mount's; the bare link's is one GET).
#[derive(Clone, Copy, Default)]
struct Cold {
    first: f64,
    whole: f64,
    gets: u64,
    heads: u64,
}

/// The bare link: one GET of `0..size` of the object in `remote`,
/// streamed through a link of `bw` bytes a second after `latency`.
fn bare(remote: &FsPath, size: u64, latency: Duration, bw: u64) -> Result<Cold> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let store = Throttled::link(LocalFileSystem::new_with_prefix(remote)?, latency, bw);
    rt.block_on(async {
        let t = Instant::now();
        let opts = GetOptions {
            range: Some(GetRange::Bounded(0..size)),
            ..GetOptions::default()
        };
        let mut body = store
            .get_opts(&Path::from("object"), opts)
            .await?
            .into_stream();
        let (mut first, mut got) = (None, 0u64);
        while let Some(piece) = body.next().await {
            let piece = piece?;
            if first.is_none() {
                first = Some(t.elapsed().as_secs_f64());
                ensure!(piece[..8] == word(OBJ, 0), "cold: the link's first bytes");
            }
            got += piece.len() as u64;
        }
        ensure!(got == size, "cold: the link gave {got} of {size} bytes");
        Ok(Cold {
            first: first.unwrap_or(f64::NAN),
            whole: t.elapsed().as_secs_f64(),
            gets: 1,
            heads: 0,
        })
    })
}

/// A fresh mount of `remote` under `root` (a tier at `tier` if given),
/// the object read cold through it.
fn through_mount(
    b: &ObjectBench,
    (remote, root): (&FsPath, &FsPath),
    bw: u64,
    tier: Option<&FsPath>,
) -> Result<Cold> {
    let size = b.cold_object;
    let mut opts = ObjectOptions::default();
    opts.ttl = Duration::from_secs(60);
    opts.store_latency = b.latency;
    opts.store_bandwidth = bw;
    if let Some(t) = tier {
        let _ = std::fs::remove_file(t);
        opts.disk_tier = Some(Arc::new(DiskTier::open(t, size)?));
    }
    let capacity = size + size / 4;
    let mount_opts = MountOptions::new(capacity as usize);
    let cache = mount_opts.build_object_cache()?;
    let url = format!("file://{}", remote.display());
    let fs = ObjectFs::for_url(&url, [], cache, &opts)?;
    let store = fs.store().clone();
    let dir = tempfile::Builder::new()
        .prefix("foliocache-cold-mnt-")
        .tempdir_in(root)?;
    let session = spawn_objects(fs, &url, dir.path(), &mount_opts)
        .with_context(|| format!("cold: mounting at {}", dir.path().display()))?;
    let path = dir.path().join("object");
    // The lookup (a listing of the root), not timed.
    ensure!(
        std::fs::metadata(&path)?.len() == size,
        "cold: the object's size"
    );
    let before = store.stats();
    let t = Instant::now();
    let f = std::fs::File::open(&path)?;
    let mut buf = vec![0u8; 1 << 20];
    let n = f.read_at(&mut buf[..FIRST], 0)?;
    let first = t.elapsed().as_secs_f64();
    ensure!(
        n == FIRST && buf[..8] == word(OBJ, 0),
        "cold: the first read"
    );
    let mut at = FIRST as u64;
    while at < size {
        let n = f.read_at(&mut buf, at)?;
        ensure!(n > 0, "cold: {at} of {size} bytes");
        ensure!(
            n < 8 || buf[..8] == word(OBJ, at),
            "cold: not the object's bytes at {at}"
        );
        at += n as u64;
    }
    let whole = t.elapsed().as_secs_f64();
    let after = store.stats();
    drop((f, session));
    if let Some(t) = tier {
        let _ = std::fs::remove_file(t);
    }
    Ok(Cold {
        first,
        whole,
        gets: after.remote_gets - before.remote_gets,
        heads: after.remote_heads - before.remote_heads,
    })
}

/// Runs the job in `root` (FUSE available): its record (the mount's
/// median rate at the last link; every figure in its notes).
///
/// # Errors
/// The object could not be written, a mount or a read failed, or a read
/// was wrong.
pub fn run(b: &ObjectBench, root: &FsPath) -> Result<RunRecord> {
    let size = b.cold_object;
    let remote = root.join("cold-remote");
    std::fs::create_dir_all(&remote)?;
    write_object(&remote.join("object"), size)?;
    let tier = root.join("cold-tier");
    let mut notes = Vec::new();
    let mut last = 0.0;
    for bw in LINKS {
        // runs[contender][round]
        let mut runs = vec![Vec::new(); CONTENDERS.len()];
        for round in 0..b.cold_rounds {
            for k in 0..CONTENDERS.len() {
                let c = (k + round) % CONTENDERS.len();
                let r = match c {
                    0 => bare(&remote, size, b.latency, bw)?,
                    1 => through_mount(b, (&remote, root), bw, None)?,
                    _ => through_mount(b, (&remote, root), bw, Some(&tier))?,
                };
                runs[c].push(r);
            }
        }
        let rate = |r: &Cold| size as f64 / r.whole;
        let link = median(&runs[0].iter().map(rate).collect::<Vec<_>>());
        let mut line = format!(
            "cold, {} MiB at {} MB/s and {} ms:",
            size >> 20,
            bw / 1_000_000,
            b.latency.as_millis()
        );
        for (c, label) in CONTENDERS.iter().enumerate() {
            let firsts: Vec<f64> = runs[c].iter().map(|r| r.first * 1e3).collect();
            let rates: Vec<f64> = runs[c].iter().map(rate).collect();
            let ratios: Vec<f64> = runs[c]
                .iter()
                .zip(&runs[0])
                .map(|(x, l)| l.whole / x.whole)
                .collect();
            let each = |v: &[f64], p: usize| {
                v.iter()
                    .map(|x| format!("{x:.p$}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            line.push_str(&format!(
                " {label}: first byte ms {} (median {:.1}), MB/s {} (median {:.0}, {:.2}x the link's \
                 {:.0}, {:.2}x the nominal), / link by round {}, GETs {}, HEADs {};",
                each(&firsts, 1),
                median(&firsts),
                each(&rates.iter().map(|x| x / 1e6).collect::<Vec<_>>(), 0),
                median(&rates) / 1e6,
                median(&rates) / link,
                link / 1e6,
                median(&rates) / bw as f64,
                each(&ratios, 2),
                runs[c].iter().map(|r| r.gets.to_string()).collect::<Vec<_>>().join(" "),
                runs[c].iter().map(|r| r.heads.to_string()).collect::<Vec<_>>().join(" "),
            ));
            if c == 1 {
                last = median(&rates);
            }
        }
        notes.push(line.trim_end_matches(';').to_string());
    }
    let _ = std::fs::remove_dir_all(&remote);
    let mut r = RunRecord {
        engine: super::FOLIO.to_string(),
        notes,
        ..RunRecord::default()
    };
    r.job = RunJob {
        rw: COLD,
        bs: 1 << 20,
        numjobs: 1,
        dist: Some("sequential".into()),
        ..RunJob::default()
    };
    r.perf.bytes = size;
    r.perf.seconds = size as f64 / last;
    r.perf.bw_bytes = last;
    r.perf.iops = last / f64::from(1 << 20);
    r.perf.cpu_us_per_op = f64::NAN;
    r.perf.cpu_s_per_gib = f64::NAN;
    r.cache.hit_ratio = Some(0.0);
    r.cache.hit_ratio_from = Some("cold: every byte from the store");
    Ok(r)
}
