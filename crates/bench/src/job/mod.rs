//! The measured run: `numjobs` threads, each looping over reads or writes
//! of `bs` bytes on its engine, timed per operation.
//!
//! ```text
//!   coordinator                 thread 0..numjobs
//!   spawn ───────────────────>  buffer (aligned + --buf-offset, touched), offsets
//!   barrier.wait() <────────>   barrier.wait()
//!   getrusage, progress bar     loop { off = next(); io(buf, off); t = clock();
//!     (polls each thread's             hist[t - prev]; prev = t;
//!      published byte count)           every 100 ms: publish bytes, stop?, timeline }
//!   join, getrusage             return bytes, ops, histogram, timeline, start/end
//! ```
//!
//! Timing: one clock read per operation ([`crate::clock`]: the TSC, or
//! `Instant::now()`; the report states what a read costs;
//! `docs/measurements/2026-11-22-clock.md` why each was chosen). An operation's latency is the
//! time between the end of the previous operation and the end of this one, so it includes the loop's
//! own few nanoseconds (the next offset, the histogram increment) and
//! nothing else; every engine runs the very same loop, monomorphised for
//! its IO call, with one buffer per thread and no allocation.
//! Bandwidth is bytes over the wall time from the first thread's start to
//! the last thread's end, and for a write job on files the final sync
//! after it (`fsync`, `msync`, `File::sync_all`: written data counts once
//! it is durable). CPU time is `getrusage(RUSAGE_SELF)` around the
//! run (the threads of one engine run together, engines one after another).
//!
//! Files: [`offsets`] (where each operation goes), [`recorder`] (what a
//! thread records per operation and shares with the coordinator),
//! [`loops`] (the loops, one compiled per engine IO type), and here the
//! coordinator ([`run`]) and the run's figures ([`Measured`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::clock::ClockKind;
use crate::engine::Prepared;
use crate::hist::Histogram;
use crate::spec::JobSpec;
use crate::sys;
use crate::units::fmt_bw;

mod loops;
mod offsets;
mod recorder;

pub(crate) use offsets::Offsets;
use recorder::{Shared, Slot, ThreadOut};

/// A partial last second shorter than this is left out of the timeline
/// when there are full seconds (its bytes still count in the totals).
const MIN_TAIL: f64 = 0.1;

/// How one engine's run is done, beyond the job.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    /// Check every block read (or, for writes, write checkable content).
    pub verify: bool,
    /// Bytes past a page boundary where each thread's buffer starts.
    pub buf_offset: usize,
    /// `--consume`: every read's bytes are summed (`crate::consume`).
    pub consume: bool,
    /// The seed of the content a verifying write run writes.
    pub write_seed: u64,
    /// The clock that times operations (resolved: `Tsc` or `Instant`).
    pub clock: ClockKind,
}

/// A run's figures.
#[derive(Debug)]
pub struct Measured {
    /// Bytes read or written.
    pub bytes: u64,
    /// Operations done.
    pub ops: u64,
    /// Wall time, first thread's start to last thread's end, and for a
    /// write job on files the final sync after it ([`Measured::sync_s`]).
    pub seconds: f64,
    /// The final sync of a write job on files, timed from the last
    /// thread's end (in `seconds`).
    pub sync_s: Option<f64>,
    /// Latencies of every operation of every thread, in clock ticks.
    pub hist: Histogram,
    /// Nanoseconds per tick of the histogram's clock, measured over the
    /// run.
    pub ns_per_tick: f64,
    /// Bytes per second for each second of the run.
    pub timeline: Vec<f64>,
    /// Bytes per second for each full interval of the job's finer
    /// timeline ([`JobSpec::bins_per_second`] above 1; empty otherwise).
    pub fine_timeline: Vec<f64>,
    /// User CPU seconds of the process during the run.
    pub cpu_user: f64,
    /// System CPU seconds of the process during the run.
    pub cpu_sys: f64,
    /// For a verifying write run: which blocks of each file were written.
    pub written: Vec<Vec<bool>>,
    /// Operations done by each thread, in thread order.
    pub thread_ops: Vec<u64>,
}

/// A reader beside the job that follows its bytes (the hot reader beside
/// a paced stream, `crate::hot::Follow`), and that the job's threads wait
/// for: a thread more than `slack` reads ahead of it sleeps until the
/// reader has caught up, so that every read the reader owes is read at
/// its place in the stream, whatever the reader's misses cost it, rather
/// than dropped while the stream runs on.
#[derive(Debug, Clone, Copy)]
pub struct Tether<'a> {
    /// Where the threads add the bytes they have done as they go (every
    /// millisecond in a paced job, else every tick or timeline interval).
    pub streamed: &'a AtomicU64,
    /// The reads the reader has done.
    pub reads: &'a AtomicU64,
    /// The job's bytes per read.
    pub every: u64,
    /// The reads the job may be ahead of the reader.
    pub slack: u64,
}

/// Runs `job` on a prepared engine and measures it (`&mut`: each thread
/// that writes a mapping gets its own, see
/// [`Engine::threads`](crate::engine::Engine::threads)). Given a
/// `tether`, the threads publish their bytes to it and keep within its
/// slack of its reader.
///
/// # Errors
/// Fewer files or mappings than threads (an engine not prepared for the
/// job), or the first IO or verification error of any thread (the others
/// stop at their next tick).
pub fn run(
    engine: &mut Prepared,
    job: &JobSpec,
    opts: RunOptions,
    label: &str,
    tether: Option<Tether<'_>>,
) -> Result<Measured> {
    let n = job.numjobs;
    let barrier = Barrier::new(n + 1);
    let stop = AtomicBool::new(false);
    let slots: Vec<Slot> = (0..n).map(|_| Slot::default()).collect();
    let blocks = job.nblocks();
    let shared = Shared {
        barrier: &barrier,
        stop: &stop,
        runtime: job.runtime,
        max_ops: if job.runtime.is_some() {
            u64::MAX
        } else {
            blocks
        },
        opts,
        ticks_per_sec: opts.clock.ticks_per_sec(),
        interval: job.interval(),
        pace: job.pace.map(|p| p as f64 / n.max(1) as f64),
        tether,
    };
    let ios = engine.threads(n, job.shared);
    if ios.len() != n {
        bail!("{n} job threads but only {} files or mappings", ios.len());
    }
    let (outs, cpu0) = thread::scope(|s| -> Result<_> {
        let mut handles = Vec::with_capacity(n);
        for ((j, slot), io) in slots.iter().enumerate().zip(ios) {
            let offs = Offsets::of_thread(job, j);
            let op = (job.rw.is_write(), job.bs);
            handles.push(loops::spawn(s, io, op, offs, &shared, slot));
        }
        barrier.wait();
        let cpu0 = sys::cpu_times();
        watch(&handles, &slots, job, label);
        let mut outs = Vec::with_capacity(n);
        for (j, h) in handles.into_iter().enumerate() {
            let out = h
                .join()
                .map_err(|_| anyhow!("job thread {j} panicked"))?
                .with_context(|| format!("{label}: job thread {j}"))?;
            outs.push(out);
        }
        Ok((outs, cpu0))
    })?;
    // A write job's figures include making its data durable.
    let sync = if job.rw.is_write() && !job.memory {
        let t = Instant::now();
        engine
            .sync()
            .with_context(|| format!("{label}: the sync after the writes"))?;
        Some(t.elapsed())
    } else {
        None
    };
    let cpu1 = sys::cpu_times();
    Ok(merge(outs, job, cpu0, cpu1, sync))
}

/// Waits for the threads, drawing a progress bar on a terminal for a run
/// longer than a second.
fn watch<T>(
    handles: &[thread::ScopedJoinHandle<'_, T>],
    slots: &[Slot],
    job: &JobSpec,
    label: &str,
) {
    let t0 = Instant::now();
    let total_bytes = job.nblocks() * job.bs * job.numjobs as u64;
    let mut bar: Option<ProgressBar> = None;
    while !handles.iter().all(|h| h.is_finished()) {
        thread::sleep(Duration::from_millis(20));
        let elapsed = t0.elapsed();
        let long = job.runtime.map_or(elapsed >= Duration::from_secs(1), |r| {
            r >= Duration::from_secs(1)
        });
        if !long {
            continue;
        }
        let bytes: u64 = slots.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
        let b = bar.get_or_insert_with(|| {
            let (len, tmpl) = match job.runtime {
                Some(r) => (r.as_millis() as u64, "{prefix} [{bar:30}] {elapsed}/{msg}"),
                None => (total_bytes, "{prefix} [{bar:30}] {percent:>3}% {msg}"),
            };
            let style = ProgressStyle::with_template(tmpl)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
            let b = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr())
                .with_style(style);
            b.set_prefix(format!("{label:>12} {}", job.title()));
            b
        });
        let secs = elapsed.as_secs_f64();
        match job.runtime {
            Some(r) => {
                b.set_position(elapsed.as_millis() as u64);
                b.set_message(format!(
                    "{:.0}s {}",
                    r.as_secs_f64(),
                    fmt_bw(bytes as f64 / secs)
                ));
            }
            None => {
                b.set_position(bytes);
                b.set_message(fmt_bw(bytes as f64 / secs));
            }
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}

fn merge(
    outs: Vec<ThreadOut>,
    job: &JobSpec,
    cpu0: (Duration, Duration),
    cpu1: (Duration, Duration),
    sync: Option<Duration>,
) -> Measured {
    let start = outs.iter().map(|o| o.start).min();
    let end = outs.iter().map(|o| o.end).max();
    let loop_seconds = match (start, end) {
        (Some(s), Some(e)) => e.duration_since(s).as_secs_f64(),
        _ => 0.0,
    };
    let sync_s = sync.map(|d| d.as_secs_f64());
    let seconds = loop_seconds + sync_s.unwrap_or(0.0);
    let mut hist = Histogram::new();
    let mut per_bin: Vec<u64> = Vec::new();
    let (mut bytes, mut ops) = (0, 0);
    let (mut ns, mut ticks) = (0.0, 0.0);
    let mut written: Vec<Vec<bool>> = vec![Vec::new(); job.nfiles()];
    let thread_ops: Vec<u64> = outs.iter().map(|o| o.ops).collect();
    for (j, o) in outs.into_iter().enumerate() {
        bytes += o.bytes;
        ops += o.ops;
        ns += o.end.duration_since(o.start).as_nanos() as f64;
        ticks += o.ticks as f64;
        hist.merge(&o.hist);
        if per_bin.len() < o.timeline.len() {
            per_bin.resize(o.timeline.len(), 0);
        }
        for (a, b) in per_bin.iter_mut().zip(&o.timeline) {
            *a += b;
        }
        let f = if job.shared { 0 } else { j };
        if written[f].is_empty() {
            written[f] = o.written;
        } else {
            for (a, b) in written[f].iter_mut().zip(o.written) {
                *a |= b;
            }
        }
    }
    // Whole seconds from whole intervals; the finer timeline as it is.
    let k = job.bins_per_second.max(1) as usize;
    let per_sec: Vec<u64> = per_bin.chunks_exact(k).map(|c| c.iter().sum()).collect();
    let fine_timeline = if k > 1 {
        let secs = job.interval().as_secs_f64();
        per_bin.iter().map(|&b| b as f64 / secs).collect()
    } else {
        Vec::new()
    };
    let full = per_sec.len();
    let mut timeline: Vec<f64> = per_sec.iter().map(|&b| b as f64).collect();
    // The timeline covers the IO; a final sync is in `seconds` only.
    let tail_secs = loop_seconds - full as f64;
    let tail_bytes = bytes - per_sec.iter().sum::<u64>();
    if tail_secs > 0.0 && (full == 0 || tail_secs >= MIN_TAIL) {
        timeline.push(tail_bytes as f64 / tail_secs);
    } else if full == 0 {
        timeline.push(0.0);
    }
    Measured {
        bytes,
        ops,
        seconds,
        sync_s,
        hist,
        ns_per_tick: if ticks > 0.0 { ns / ticks } else { 1.0 },
        timeline,
        fine_timeline,
        cpu_user: cpu1.0.saturating_sub(cpu0.0).as_secs_f64(),
        cpu_sys: cpu1.1.saturating_sub(cpu0.1).as_secs_f64(),
        written,
        thread_ops,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue-depth or async engine's job on a small file: a pass counts
    /// every read once, in the histogram too, and `--verify` checks every
    /// block; a time-based run stops with reads in flight.
    #[test]
    fn qd_engines_count_and_verify_every_read() {
        use crate::data::DataSet;
        use crate::engine::{Engines, RunMode};
        use crate::spec::{EngineSpec, Rw};

        let dir = tempfile::tempdir().unwrap();
        let mut data = DataSet::new(dir.path().to_path_buf(), true);
        let (size, bs) = (4u64 << 20, 4096u64);
        let files = data.files(size, 1, false).unwrap();
        let mut engines = Engines::default();
        let opts = RunOptions {
            verify: true,
            buf_offset: 0,
            consume: false,
            write_seed: 0,
            clock: ClockKind::Instant,
        };
        let mode = RunMode {
            cold: true,
            capacity: 2 * size,
            consume: false,
        };
        for (text, runtime) in [
            ("foliocache[qd=32]", None),
            ("foliocache[qd=5]", None),
            ("direct[qd=32]", None),
            ("direct[qd=1]", None),
            ("direct[qd=32]", Some(Duration::from_millis(200))),
            ("foliocache[qd=32]", Some(Duration::from_millis(200))),
            ("foliocache[async]", None),
            ("foliocache[async,tasks=32]", None),
            (
                "foliocache[async,tasks=32]",
                Some(Duration::from_millis(200)),
            ),
            ("tokio-fs[tasks=8]", None),
            ("tokio-fs[tasks=8]", Some(Duration::from_millis(200))),
        ] {
            let spec = EngineSpec::parse(text).unwrap();
            let job = JobSpec {
                runtime,
                cold: true,
                ..JobSpec::new(Rw::Randread, bs, size, vec![spec.clone()])
            };
            let mut prepared = match engines.prepare(&spec, &job, &files, mode) {
                Ok((p, _)) => p,
                Err(e) if spec.kind == crate::spec::EngineKind::Direct => {
                    return test_support::skip_or_fail(
                        "qd_engines_count_and_verify_every_read",
                        format!("{e:#}"),
                    );
                }
                Err(e) => panic!("{text}: {e:#}"),
            };
            let m = match run(&mut prepared, &job, opts, &spec.label, None) {
                Err(e) if spec.kind == crate::spec::EngineKind::Direct => {
                    // io_uring may be disabled here (EPERM, ENOSYS).
                    return test_support::skip_or_fail(
                        "qd_engines_count_and_verify_every_read",
                        format!("{e:#}"),
                    );
                }
                r => r.unwrap(),
            };
            if runtime.is_none() {
                assert_eq!(m.ops, size / bs, "{text}: one pass");
            } else {
                assert!(m.ops > 0, "{text}");
            }
            assert_eq!(m.bytes, m.ops * bs, "{text}");
            assert_eq!(m.hist.len(), m.ops, "{text}");
            assert_eq!(m.thread_ops, [m.ops], "{text}");
        }
        engines.clear().unwrap();
    }
}
