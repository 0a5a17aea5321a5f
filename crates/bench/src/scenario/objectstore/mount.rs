//! The `mount` job of the `objectstore` scenario: warm re-reads through
//! the object mount (`foliocache_fuse::ObjectFs`, served in this
//! process) against the same bytes in a file of the data directory's
//! filesystem with the kernel's page cache warm (issue 88's "1 MiB
//! sequential reads at least 0.95x ext4, 4 KiB random reads at least
//! 0.8x").
//!
//! One object of [`OBJECT`] bytes on the scenario's remote, and a file of
//! the same bytes. Three contenders, each read whole once first (the
//! mounts' caches and the kernel's pages filled): `ext4` (the file),
//! `mount` (the object through the mount, `--kernel-cache on`: the kernel
//! keeps the file's pages across opens) and `mount-direct`
//! (`--kernel-cache off`: every read a request, served from the cache).
//! Each round reads each contender in turn, in an order that rotates from
//! round to round: [`PASSES`] passes, each opening the file, reading it
//! (1 MiB `pread`s from the start to the end, or as many 4 KiB `pread`s
//! at random aligned offsets as it has 4 KiB blocks) and closing it; a
//! contender's figure is its passes after the first. Every read's first
//! word is checked against the object's. The mounts trust metadata for a
//! minute, so no open of the rounds revalidates (a revalidation is a
//! listing page and a HEAD at the remote's latency).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use foliocache_fuse::{spawn_objects, MountOptions, ObjectFs, ObjectOptions};
use object_store::path::Path;
use object_store::ObjectStore;

use super::remote::Remote;
use super::{object_bytes, word, ObjectBench, MOUNT};
use crate::report::{median, RunJob, RunRecord};
use crate::scenario::rounds::scatter;

/// The object's index for [`object_bytes`] (none of the others').
pub(super) const OBJ: u32 = u32::MAX - 1;
/// Passes of a contender in a round; the first is not counted.
const PASSES: usize = 5;
/// One random read in this many is checked (every sequential one is).
const CHECK_EVERY: u64 = 64;
/// The contenders, in the first round's order.
const CONTENDERS: [&str; 3] = ["ext4", "mount", "mount-direct"];
/// The reads: (name, size, sequential).
const READS: [(&str, u64, bool); 2] = [
    ("1 MiB sequential", 1 << 20, true),
    ("4 KiB random", 4 << 10, false),
];

/// An object mount served in this process, unmounted when dropped.
struct Mounted {
    _session: fuser::BackgroundSession,
    dir: tempfile::TempDir,
}

/// The remote under `remote` (each request waiting `latency`) mounted at
/// a new directory under `root` with a cache of `capacity` bytes, the
/// kernel's page cache kept across opens or not.
fn mount(
    remote: &FsPath,
    root: &FsPath,
    (capacity, latency): (u64, Duration),
    kernel_cache: bool,
) -> Result<Mounted> {
    let store: Arc<dyn ObjectStore> = Remote::new(remote, latency)?.store;
    let cache = foliocache::Cache::builder()
        .capacity(capacity as usize)
        .build()?;
    let mut opts = ObjectOptions::default();
    opts.ttl = Duration::from_secs(60);
    opts.kernel_cache = kernel_cache;
    let fs = ObjectFs::new(store, Path::default(), cache, &opts)?;
    let dir = tempfile::Builder::new()
        .prefix("foliocache-objectstore-mnt-")
        .tempdir_in(root)?;
    let session = spawn_objects(
        fs,
        "objectstore-bench",
        dir.path(),
        &MountOptions::new(capacity as usize),
    )
    .with_context(|| format!("objectstore mount: mounting at {}", dir.path().display()))?;
    Ok(Mounted {
        _session: session,
        dir,
    })
}

/// Writes the object's bytes to `path`, a MiB at a time.
pub(super) fn write_object(path: &FsPath, size: u64) -> Result<()> {
    let mut f = File::create(path)?;
    for at in (0..size).step_by(1 << 20) {
        f.write_all(&object_bytes(OBJ, at..(at + (1 << 20)).min(size)))?;
    }
    Ok(())
}

/// One pass over `path` of `size` bytes: opened, read in `len`-byte
/// `pread`s (sequentially, or as many at random `len`-aligned offsets as
/// it has blocks), closed; its bytes and seconds.
fn pass(path: &FsPath, size: u64, len: u64, seq: bool, buf: &mut [u8]) -> Result<(u64, f64)> {
    let t = Instant::now();
    let f = File::open(path).with_context(|| format!("objectstore mount: {}", path.display()))?;
    let blocks = size / len;
    let mut bytes = 0;
    for i in 0..blocks {
        let at = if seq {
            i * len
        } else {
            (scatter(i) % blocks) * len
        };
        let n = f.read_at(&mut buf[..len as usize], at)?;
        ensure!(
            n as u64 == len,
            "objectstore mount: {n} bytes at {at} of {}",
            path.display()
        );
        if (seq || i % CHECK_EVERY == 0) && buf[..8] != word(OBJ, at) {
            anyhow::bail!(
                "objectstore mount: not the object's bytes at {at} of {}",
                path.display()
            );
        }
        bytes += len;
    }
    drop(f);
    Ok((bytes, t.elapsed().as_secs_f64()))
}

/// A contender's rate over [`PASSES`] passes but the first, in bytes/s.
fn rate(path: &FsPath, size: u64, len: u64, seq: bool, buf: &mut [u8]) -> Result<f64> {
    let (mut bytes, mut seconds) = (0, 0.0);
    for p in 0..PASSES {
        let (b, s) = pass(path, size, len, seq, buf)?;
        if p > 0 {
            bytes += b;
            seconds += s;
        }
    }
    Ok(bytes as f64 / seconds.max(1e-9))
}

/// Runs the job in `root` (FUSE available: `foliocache_fuse::unavailable`
/// says `None`): its record (the mount's 1 MiB figures; every
/// contender's rounds and ratios in its notes).
///
/// # Errors
/// The object could not be written, a mount or a read failed, or a read
/// was wrong.
pub fn run(b: &ObjectBench, root: &FsPath) -> Result<RunRecord> {
    let size = b.mount_object;
    let remote = root.join("mount-remote");
    std::fs::create_dir_all(&remote)?;
    write_object(&remote.join("object"), size)?;
    let local = root.join("mount-ext4");
    write_object(&local, size)?;
    let capacity = size + size / 4;
    let on = mount(&remote, root, (capacity, b.latency), true)?;
    let off = mount(&remote, root, (capacity, b.latency), false)?;
    let paths: [PathBuf; 3] = [
        local.clone(),
        on.dir.path().join("object"),
        off.dir.path().join("object"),
    ];
    let mut buf = vec![0u8; 1 << 20];
    for p in &paths {
        // Warm: the kernel's pages (ext4, the mount), the cache (the
        // mounts).
        pass(p, size, 1 << 20, true, &mut buf)?;
    }
    // rates[read][contender][round], bytes/s.
    let rounds = b.mount_rounds;
    let mut rates = vec![vec![Vec::new(); CONTENDERS.len()]; READS.len()];
    for round in 0..rounds {
        for (r, &(_, len, seq)) in READS.iter().enumerate() {
            for k in 0..CONTENDERS.len() {
                let c = (k + round) % CONTENDERS.len();
                rates[r][c].push(rate(&paths[c], size, len, seq, &mut buf)?);
            }
        }
    }
    drop((on, off));
    let _ = std::fs::remove_dir_all(&remote);
    let _ = std::fs::remove_file(&local);
    Ok(record(&rates, size))
}

/// The job's record: the mount's median 1 MiB rate; each read's rounds
/// and per-round ratios to ext4 in its notes.
fn record(rates: &[Vec<Vec<f64>>], size: u64) -> RunRecord {
    let mut r = RunRecord {
        engine: super::FOLIO.to_string(),
        ..RunRecord::default()
    };
    r.job = RunJob {
        rw: MOUNT,
        bs: READS[0].1,
        numjobs: 1,
        dist: Some("sequential".into()),
        ..RunJob::default()
    };
    let bw = median(&rates[0][1]);
    r.perf.bytes = size * (PASSES as u64 - 1) * rates[0][1].len() as u64;
    r.perf.seconds = r.perf.bytes as f64 / bw;
    r.perf.bw_bytes = bw;
    r.perf.iops = bw / READS[0].1 as f64;
    r.perf.cpu_us_per_op = f64::NAN;
    r.perf.cpu_s_per_gib = f64::NAN;
    r.cache.hit_ratio = Some(1.0);
    r.cache.hit_ratio_from = Some("every pass after the warm-up (the object read whole first)");
    let mib = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{:.0}", x / f64::from(1 << 20)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    for (i, (name, _, _)) in READS.iter().enumerate() {
        let ext4 = &rates[i][0];
        let mut line = format!(
            "mount {name}, warm, {} MiB: ext4 MiB/s by round {}",
            size >> 20,
            mib(ext4)
        );
        for (c, label) in CONTENDERS.iter().enumerate().skip(1) {
            let ratios: Vec<f64> = rates[i][c].iter().zip(ext4).map(|(x, e)| x / e).collect();
            let each = ratios
                .iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(" ");
            line.push_str(&format!(
                "; {label} MiB/s {}, / ext4 {each} (median {:.2})",
                mib(&rates[i][c]),
                median(&ratios)
            ));
        }
        r.notes.push(line);
    }
    r
}
