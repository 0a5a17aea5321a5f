//! One engine's run of a job, in three steps: [`setup`] makes the engine
//! ready (its files or memory, its memory cgroup, the hot reader's file),
//! [`measure`] runs the job inside the cgroup with the hot reader beside
//! it, and [`record`] turns what was measured into a [`RunRecord`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context, Result};

use crate::cgroup::{Availability, MemCgroup};
use crate::data::FileModel;
use crate::disk::{self, DeviceReads};
use crate::engine::{Engines, FolioBefore, Prepared, RunMode, Setup};
use crate::hot::{self, HotFile, MissProbe};
use crate::job::{self, Measured, RunOptions};
use crate::report::{
    self, CacheFigures, FolioFigures, HugeMapped, MemoryFigures, MemoryLimit, Residency, RunRecord,
};
use crate::scenario::Plan;
use crate::spec::{EngineKind, EngineSpec, JobSpec};
use crate::units::fmt_size_approx;

mod figures;
mod per_read;

/// The read amplification above which an mmap run under a memory limit
/// gets a note saying why.
const MMAP_COLLAPSE: f64 = 2.0;

/// What one engine run needs to know.
pub struct RunCtx<'a> {
    /// The invocation's plan.
    pub plan: &'a Plan,
    /// The job.
    pub job: &'a JobSpec,
    /// The job's data files.
    pub files: &'a [PathBuf],
    /// The hot reader's file, for a job with one.
    pub hot_file: Option<&'a PathBuf>,
    /// How memory can be limited, for a job that limits it.
    pub cgroups: Option<&'a Availability>,
    /// Cold or warm, and foliocache's capacity.
    pub mode: RunMode,
    /// The seed of what a write job writes.
    pub write_seed: u64,
}

/// Runs the job once on the engine `spec`: [`setup`], [`measure`],
/// [`record`].
///
/// # Errors
/// Any step's error.
pub fn run_one(
    engines: &mut Engines,
    models: &mut HashMap<(PathBuf, u64), FileModel>,
    spec: &EngineSpec,
    ctx: &RunCtx<'_>,
) -> Result<RunRecord> {
    let mut staged = setup(engines, spec, ctx)?;
    let measured = measure(engines, &mut staged, ctx)?;
    record(engines, models, staged, measured, ctx)
}

/// The hot reader's file, opened through the engine's cache.
struct HotOpen<'a> {
    file: HotFile,
    path: &'a Path,
    probe: MissProbe,
}

/// An engine made ready for its measured run: what [`setup`] hands to
/// [`measure`] and [`record`].
struct Staged<'a> {
    spec: &'a EngineSpec,
    prepared: Prepared,
    setup: Setup,
    opts: RunOptions,
    /// The engine reads through the kernel's page cache (not foliocache's,
    /// not the fuse server's).
    page_cache: bool,
    /// The memory cgroup of this run, for an engine on the kernel's page
    /// cache in a job with a memory limit, where the machine has one.
    limit: Option<MemCgroup>,
    hot: Option<HotOpen<'a>>,
}

/// A hot reader's measured figures, before they become
/// [`HotFigures`](crate::report::HotFigures).
struct HotRun {
    ready: hot::Ready,
    reads: u64,
    misses: u64,
    seconds: f64,
}

/// What [`measure`] hands to [`record`].
struct Measurement {
    m: Measured,
    hot: Option<HotRun>,
    device: Option<DeviceReads>,
    /// A foliocache engine's write run: the most bytes cached during it.
    peak_cached: Option<u64>,
}

/// Makes the engine ready: the pause of a memory job, the engine's files
/// or memory (warmed or dropped), its memory cgroup, the kernel's
/// readahead held within the cgroup ([`fit_readahead`]), and the hot
/// reader's file opened through the engine's cache.
fn setup<'a>(engines: &mut Engines, spec: &'a EngineSpec, ctx: &RunCtx<'a>) -> Result<Staged<'a>> {
    let (job, plan) = (ctx.job, ctx.plan);
    if let Some(pause) = job.settle {
        // The memory the last run freed goes back to the host meanwhile.
        std::thread::sleep(pause);
    }
    let (prepared, mut setup) = engines.prepare(spec, job, ctx.files, ctx.mode)?;
    let opts = RunOptions {
        // fuse-null's files are zeros, not the generator's data.
        verify: plan.verify && spec.kind != EngineKind::FuseNull,
        buf_offset: plan.buf_offset,
        consume: plan.consume,
        write_seed: ctx.write_seed,
        clock: plan.clock,
    };
    let folio = spec.kind == EngineKind::Foliocache;
    // The fuse engine's data is not in the kernel's page cache (direct IO
    // through the mount) but in its server's foliocache.
    let page_cache = !folio && !spec.kind.fuse();
    let limit = match (job.memory_limit, ctx.cgroups) {
        (Some(l), Some(avail @ Availability::Available { .. })) if page_cache => Some(
            MemCgroup::create(avail, l)
                .with_context(|| format!("{}: a memory cgroup of {}", spec.label, l))?,
        ),
        _ => None,
    };
    if let Some(cg) = &limit {
        if let Some(note) = fit_readahead(&prepared, ctx.files, cg.limit())? {
            setup.notes.push(note);
        }
    }
    // The hot file through the engine's cache: foliocache's (which the
    // cgroup does not concern), or the kernel's, dropped now and warmed
    // inside the cgroup by `measure`.
    let hot = match (job.hot, ctx.hot_file) {
        (Some(h), Some(path)) => {
            let file = if folio {
                HotFile::Folio(engines.open_folio(&spec.label, path)?)
            } else {
                crate::engine::drop_files(std::slice::from_ref(path))?;
                HotFile::Kernel(
                    std::fs::File::open(path)
                        .with_context(|| format!("opening {}", path.display()))?,
                )
            };
            let probe = hot::probe(&file, h.bs)?;
            Some(HotOpen { file, path, probe })
        }
        _ => None,
    };
    Ok(Staged {
        spec,
        prepared,
        setup,
        opts,
        page_cache,
        limit,
        hot,
    })
}

/// Keeps the kernel's readahead within a memory cgroup of `limit` bytes.
///
/// The kernel reads ahead of a sequential reader in windows of up to the
/// device's `read_ahead_kb`, and a window's folios are charged to the
/// cgroup when they are added (`page_cache_ra_unbounded`) and stay locked
/// until their read completes, where reclaim cannot take them. With up to
/// two windows in flight, a window of more than a quarter of the limit
/// can leave a charge (the synchronous read's folio in
/// `filemap_create_folio`, an xarray node) with nothing to reclaim, and
/// the memory cgroup's OOM killer then kills the bench. So where the
/// window does not fit, the engine's files are read without readahead
/// (`POSIX_FADV_RANDOM`, `MADV_RANDOM` for a mapping: each read reads
/// what it asks for), and a note says so. At the sizes the scenarios run by default the window fits and
/// nothing changes. `docs/bench.md` has the details.
///
/// Returns the note, if the readahead was turned off.
///
/// # Errors
/// `posix_fadvise` failed.
fn fit_readahead(prepared: &Prepared, files: &[PathBuf], limit: u64) -> Result<Option<String>> {
    let Some(window) = files.first().and_then(|f| disk::readahead_bytes(f)) else {
        return Ok(None);
    };
    if window.saturating_mul(4) <= limit {
        return Ok(None);
    }
    let how = if prepared.advise_random().context("posix_fadvise(RANDOM)")? {
        "so the engine read without readahead (POSIX_FADV_RANDOM; MADV_RANDOM for a mapping)"
    } else {
        "and this engine's readahead could not be turned off"
    };
    Ok(Some(format!(
        "the device's readahead window ({}) is more than a quarter of the memory limit ({}): \
         readahead in flight could leave the cgroup nothing to reclaim, {how}",
        fmt_size_approx(window),
        fmt_size_approx(limit)
    )))
}

/// Runs the job: inside the memory cgroup (if any), warms the hot file,
/// then measures the job with the hot reader beside it, counting the
/// device's reads over the run.
fn measure(engines: &Engines, s: &mut Staged<'_>, ctx: &RunCtx<'_>) -> Result<Measurement> {
    let job = ctx.job;
    let entered = s.limit.as_ref().map(MemCgroup::enter).transpose()?;
    let ready = match &s.hot {
        Some(h) => {
            let (cached_pages, pages) = hot::warm(&h.file, h.path, job.hot.map_or(4096, |h| h.bs))?;
            if cached_pages < pages {
                s.setup.notes.push(format!(
                    "warning: the hot file has {cached_pages} of {pages} pages cached after warming"
                ));
            }
            Some(hot::Ready {
                cached_pages,
                pages,
                probe: h.probe,
            })
        }
        None => None,
    };
    if let (true, Some(before)) = (ready.is_some(), s.setup.folio_before.as_mut()) {
        // The figures of the run, not of warming the hot file.
        if let Some(now) = engines.folio_stats(&s.spec.label) {
            before.stats = now;
        }
    }
    let disk = ctx.files.first().and_then(|f| disk::stat_path(f));
    let before = disk.as_deref().and_then(disk::Snapshot::take);
    let hot_arg = s.hot.as_ref().zip(ready).map(|(h, r)| (&h.file, r));
    let cache = engines
        .folio_cache(&s.spec.label)
        .filter(|_| job.rw.is_write());
    let (measured, peak_cached) = peak_cached(cache, || {
        run_beside(&mut s.prepared, job, s.opts, &s.spec.label, hot_arg)
    });
    drop(entered);
    let (m, hot) = measured?;
    Ok(Measurement {
        m,
        hot,
        device: before.and_then(|b| b.since()),
        peak_cached,
    })
}

/// Runs `run` with, given a cache, a thread beside it that reads the
/// cache's bytes cached every millisecond: returns what `run` did and the
/// most it saw (the kernel's counterpart is its cgroup's peak).
fn peak_cached<T>(cache: Option<foliocache::Cache>, run: impl FnOnce() -> T) -> (T, Option<u64>) {
    let Some(cache) = cache else {
        return (run(), None);
    };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut peak = 0;
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(cache.stats().bytes_cached);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            peak
        });
        let r = run();
        stop.store(true, Ordering::Relaxed);
        let peak = sampler.join().ok();
        (r, peak)
    })
}

/// Runs the job on a prepared engine, with the hot reader beside it if
/// `hot` is given: the reader starts first and stops when the job ends;
/// its reads and misses are counted over the job's run.
fn run_beside(
    prepared: &mut Prepared,
    job: &JobSpec,
    opts: RunOptions,
    label: &str,
    hot: Option<(&HotFile, hot::Ready)>,
) -> Result<(Measured, Option<HotRun>)> {
    let (Some((file, ready)), Some(spec)) = (hot, job.hot) else {
        return Ok((job::run(prepared, job, opts, label, None)?, None));
    };
    let stop = AtomicBool::new(false);
    let counters = hot::Counters::default();
    // Beside a paced stream the reader follows the stream's bytes: its
    // rate at the pace, per byte (`uncached::BESIDE_PACE`), and the stream
    // waits for a reader its misses slowed, so that every engine's reader
    // reads at the same places in the stream.
    let streamed = AtomicU64::new(0);
    let follow = job.pace.filter(|_| spec.rate > 0).map(|pace| hot::Follow {
        streamed: &streamed,
        every: (pace / spec.rate).max(1),
    });
    let tether = follow.map(|f| job::Tether {
        streamed: f.streamed,
        reads: counters.reads(),
        every: f.every,
        slack: hot::max_owed(spec) / 2,
    });
    std::thread::scope(|s| {
        let h = s.spawn(|| hot::run(file, spec, ready.probe, &stop, &counters, follow));
        hot::wait_started(&counters, || h.is_finished());
        let (r0, m0) = counters.get();
        let t = Instant::now();
        let m = job::run(prepared, job, opts, label, tether);
        let (r1, m1) = counters.get();
        let seconds = t.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        let joined = h.join();
        let m = m?;
        joined
            .map_err(|_| anyhow::anyhow!("the hot reader panicked"))?
            .context("the hot reader")?;
        Ok((
            m,
            Some(HotRun {
                ready,
                reads: r1 - r0,
                misses: m1 - m0,
                seconds,
            }),
        ))
    })
}

/// Turns a measured run into its record: the engine's files closed and
/// its cgroup removed (its peak read first), the cache's and the hot
/// reader's figures, the written data checked with `--verify`, and the
/// notes.
fn record(
    engines: &mut Engines,
    models: &mut HashMap<(PathBuf, u64), FileModel>,
    s: Staged<'_>,
    measured: Measurement,
    ctx: &RunCtx<'_>,
) -> Result<RunRecord> {
    let (job, spec) = (ctx.job, s.spec);
    let peak_cached = measured.peak_cached;
    let Measurement { m, hot, device, .. } = measured;
    drop(s.prepared);
    drop(s.hot);
    let mut notes = s.setup.notes;
    let memory_limit = cgroup_figures(job, s.limit.as_ref(), s.page_cache, ctx.cgroups);
    // Removes the cgroup (and the page cache charged to it).
    drop(s.limit);
    let hot = hot.map(|h| figures::hot(&h, job, m.bytes));
    if hot.is_some() {
        notes.push(
            "the hot reader ran beside the job: its CPU time is in the run's CPU figures".into(),
        );
    }
    if let (Some(b), Some(a)) = (s.setup.fuse_before, engines.fuse_figures()) {
        let io_reads = a.io_reads.saturating_sub(b.io_reads);
        notes.push(format!(
            "fuse: the server's cache during the run: {} hits, {} misses, {io_reads} backing reads{}",
            a.hits.saturating_sub(b.hits),
            a.misses.saturating_sub(b.misses),
            if !ctx.mode.cold && !job.rw.is_write() && io_reads > 0 {
                " (warning: not a fully cached figure)"
            } else {
                ""
            }
        ));
    }
    let (mut foliocache, capacity) = match (s.setup.folio_before, engines.folio_stats(&spec.label))
    {
        (Some(before), Some(after)) => (
            Some(folio_figures(&before, &after, spec, ctx, &mut notes)),
            Some(after.capacity_bytes),
        ),
        _ => (None, None),
    };
    if let (Some(f), Some(mem)) = (foliocache.as_mut(), engines.folio_memory(&spec.label)) {
        f.memory_bytes = mem.total_bytes();
        f.overhead_bytes = mem.overhead_bytes();
        f.peak_cached_bytes = peak_cached;
    }
    if ctx.mode.cold {
        // The next run of this engine builds a new cache anyway.
        engines.release(&spec.label);
    }
    let setup_s = s.setup.setup_time.map(|d| d.as_secs_f64());
    if let Some(pause) = job.settle {
        notes.push(format!(
            "started {:.1} s after the last run's memory was freed (fresh memory)",
            pause.as_secs_f64()
        ));
    }
    verify(models, &m, s.opts.verify, ctx, &mut notes)?;
    let per_read = per_read::figures(
        &m,
        job,
        s.page_cache,
        foliocache.as_ref(),
        device.as_ref(),
        capacity,
    );
    notes.extend(figures::mmap_collapse(spec, job, &per_read));
    // A memory job's setup is part of its time.
    let seconds = m.seconds + setup_s.unwrap_or(0.0);
    cpu_notes(&m, seconds.max(1e-9), spec, ctx, &mut notes);
    let mut rec = RunRecord {
        engine: spec.label.clone(),
        cache: CacheFigures {
            foliocache,
            device,
            page_cache: s.setup.residency.map(|(r, p, when)| Residency {
                resident_pages: r,
                pages: p,
                when,
            }),
            ..per_read
        },
        memory: MemoryFigures {
            capacity,
            huge_mapped: s
                .setup
                .huge_mapped
                .map(|(huge_bytes, bytes)| HugeMapped { huge_bytes, bytes }),
            memory_limit,
        },
        hot,
        notes,
        ..figures::measured(m, job, ctx, seconds, setup_s)
    };
    rec.notes.extend(figures::dontcache_ignored(&rec));
    Ok(rec)
}

/// How much of the CPU the threads had over `secs`: a cached engine's
/// threads never wait, so less than all of it means other work ran here.
fn cpu_notes(
    m: &Measured,
    secs: f64,
    spec: &EngineSpec,
    ctx: &RunCtx<'_>,
    notes: &mut Vec<String>,
) {
    let busy = (m.cpu_user + m.cpu_sys) / (secs * ctx.job.numjobs as f64);
    notes.push(format!(
        "threads were on CPU {:.0}% of the run",
        busy * 100.0
    ));
    if !ctx.mode.cold && spec.cached() && busy < 0.9 {
        notes.push(
            "warning: the threads had less than 90% of their CPUs: other work ran on this \
             machine during the run (a noisy figure)"
                .into(),
        );
    }
}

/// The memory limit a run of a page-cache engine ran under: its cgroup's
/// figures, or the scenario's (none, with the reason) where there was no
/// cgroup; `None` for a job without a limit or an engine it does not
/// concern.
fn cgroup_figures(
    job: &JobSpec,
    cg: Option<&MemCgroup>,
    page_cache: bool,
    avail: Option<&Availability>,
) -> Option<MemoryLimit> {
    match (job.memory_limit, cg) {
        (Some(_), Some(cg)) => Some(MemoryLimit::of_run(cg)),
        (Some(l), None) if page_cache => avail.map(|a| MemoryLimit::of_scenario(a, l)),
        _ => None,
    }
}

/// foliocache's figures over the run, from its statistics `before` and
/// `after` it; a warm read run that did IO gets a warning in `notes`.
fn folio_figures(
    before: &FolioBefore,
    after: &foliocache::CacheStats,
    spec: &EngineSpec,
    ctx: &RunCtx<'_>,
    notes: &mut Vec<String>,
) -> FolioFigures {
    let (b, job) = (&before.stats, ctx.job);
    let io_reads = after.io_reads - b.io_reads;
    if !ctx.mode.cold && !job.rw.is_write() {
        if io_reads == 0 {
            notes.push(format!(
                "foliocache did no IO during the run (io_reads unchanged at {}): every read was a hit",
                after.io_reads
            ));
        } else {
            notes.push(format!(
                "warning: foliocache did {io_reads} IOs during the run: not a fully cached figure \
                 (capacity {} for {} of data)",
                fmt_size_approx(after.capacity_bytes),
                fmt_size_approx(job.file_size * job.nfiles() as u64)
            ));
        }
    }
    let insert = |i: foliocache::internals::Insert, batched, single| match i {
        foliocache::internals::Insert::Batched => batched,
        foliocache::internals::Insert::Single => single,
    };
    let flags = if spec.folio.dontcache {
        "DONTCACHE"
    } else {
        "none"
    };
    FolioFigures {
        populate: match before.populate {
            foliocache::Populate::Eager => "eager",
            foliocache::Populate::Lazy => "lazy",
        },
        populate_s: after.populate_time.as_secs_f64(),
        warm_s: before.warm.map(|w| w.as_secs_f64()),
        max_folio_bytes: before.max_folio,
        io_reads,
        io_bytes: after.io_bytes - b.io_bytes,
        hits: after.hits - b.hits,
        misses: after.misses - b.misses,
        evictions: after.evictions - b.evictions,
        read_flags: flags,
        write_insert: insert(spec.folio.grab, "grab_folios", "grab_folios_single"),
        huge_pages: spec.folio.huge,
        write_flags: flags,
        io_writes: after.io_writes - b.io_writes,
        io_write_bytes: after.io_write_bytes - b.io_write_bytes,
        throttled: after.throttled - b.throttled,
        writeback_errors: after.writeback_errors - b.writeback_errors,
        dirty_bytes: after.dirty_bytes,
        refaults: after.refaults - b.refaults,
        activations: after.activations - b.activations,
        dropbehind_drops: after.dropbehind_drops - b.dropbehind_drops,
        shadows: after.shadows,
        shadow_bytes: after.shadow_bytes,
        bytes_cached: after.bytes_cached,
        // Filled in by `record`, from the sampler beside a write run.
        peak_cached_bytes: None,
        backing: before.backing_note.clone(),
        backing_direct: before.backing_direct,
        io_engine: before.io_engine.clone(),
        readahead: report::Readahead {
            max_pages: before.readahead.max_pages,
            io_pages: before.readahead.io_pages,
            insert: insert(before.readahead.insert(), "batched", "single"),
        },
        // Filled in by `record`, from `Cache::memory`.
        memory_bytes: 0,
        overhead_bytes: 0,
    }
}

/// `--verify`'s checks and notes: a write job's files read back and held
/// against what every run wrote; a read job's blocks were checked as they
/// were read (`verified`: by this run).
///
/// # Errors
/// A file does not hold what was written.
fn verify(
    models: &mut HashMap<(PathBuf, u64), FileModel>,
    m: &Measured,
    verified: bool,
    ctx: &RunCtx<'_>,
    notes: &mut Vec<String>,
) -> Result<()> {
    let (job, plan) = (ctx.job, ctx.plan);
    if plan.verify && job.memory {
        notes.push("verify: not done: the data lives in memory only".into());
    } else if job.rw.is_write() && plan.verify {
        for (path, written) in ctx.files.iter().zip(&m.written) {
            let model = models
                .entry((path.clone(), job.bs))
                .or_insert_with(|| FileModel::new(job.file_size, job.bs));
            model.record(written, ctx.write_seed);
            model.check(path)?;
        }
        notes.push("verify: the files read back hold exactly what was written".into());
    }
    if verified && !job.rw.is_write() {
        notes.push("verify: every block read matched the generator".into());
    } else if plan.verify && !job.rw.is_write() {
        notes.push("verify: not done: fuse-null serves zeros".into());
    }
    Ok(())
}
