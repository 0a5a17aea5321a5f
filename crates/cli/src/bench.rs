//! `foliocache bench`: runs a [`Plan`] (scenarios of jobs, each job on a
//! list of engines), prints a block per run and a table per scenario, and
//! writes the JSON and the plot.
//!
//! Engines of one job run one after another, never together; with
//! `--repeat N` (default 2 for full scenarios) the list runs N times in
//! alternating order (A B C, C B A, ...) and each engine's best run is
//! kept, every run's bandwidth listed beside it, so the noise of this
//! shared machine is visible.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::args::BenchArgs;
use crate::data::{DataSet, FileModel, FILE_SEED};
use crate::engine::{sync_files, EngineKind, EngineSpec, Engines, RunMode};
use crate::job::{self, RunOptions};
use crate::report::{
    self, FolioFigures, Host, Latency, Report, Residency, RunRecord, ScenarioReport,
};
use crate::scenario::{self, JobSpec, Plan};

/// Why a bench did not complete.
#[derive(Debug)]
pub enum Failure {
    /// The command line cannot run: exit code 2 and the usage line.
    Usage(String),
    /// The run failed: exit code 1.
    Run(anyhow::Error),
}

/// Prints a line to stdout, ignoring a closed pipe.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

/// Runs `foliocache bench` with `args`; `argv` is the whole command line
/// (for the line that reproduces the run).
///
/// # Errors
/// [`Failure::Usage`] for options that cannot run together,
/// [`Failure::Run`] for anything that fails while running.
pub fn run(args: &BenchArgs, argv: &[String]) -> Result<(), Failure> {
    let plan = scenario::plan(args).map_err(Failure::Usage)?;
    run_plan(args, &plan, argv).map_err(Failure::Run)
}

/// foliocache's default capacity: 1.25x the data, in whole 2 MiB.
fn default_capacity(data: u64) -> u64 {
    const GRAIN: u64 = 2 << 20;
    (data + data / 4).div_ceil(GRAIN) * GRAIN
}

fn reproduce(argv: &[String]) -> String {
    let quoted: Vec<String> = argv
        .iter()
        .skip(1)
        .map(|a| {
            if a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_=./,:+".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect();
    format!("cargo run --release -- {}", quoted.join(" "))
}

fn run_plan(args: &BenchArgs, plan: &Plan, argv: &[String]) -> Result<()> {
    let t0 = Instant::now();
    let host = Host::this();
    let command = reproduce(argv);
    // The data directory: --dir, or a temporary one (removed at the end
    // unless --keep).
    let (tmp, mut data) = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            (None, DataSet::new(d.clone(), !args.keep))
        }
        None => {
            let t = tempfile::Builder::new()
                .prefix("foliocache-bench-")
                .tempdir()
                .context("creating a temporary directory (set TMPDIR or use --dir)")?;
            let p = t.path().to_path_buf();
            (Some(t), DataSet::new(p, false))
        }
    };
    out!("foliocache bench: reproduce with `{command}`");
    let overhead = crate::clock::overhead_ns(plan.clock);
    out!(
        "clock: {} (timing costs {overhead:.0} ns per operation, in every engine's figures)",
        plan.clock.name()
    );
    out!(
        "host: {} CPUs, Linux {}; data in {}{}{}{}",
        host.cpus,
        host.kernel,
        data.dir().display(),
        if plan.quick { "; quick" } else { "" },
        if plan.cold { "; cold caches" } else { "" },
        if plan.verify {
            "; VERIFYING (figures include the checks, not comparable)"
        } else {
            ""
        }
    );
    out!("");

    let mut engines = Engines::default();
    let mut models: HashMap<(PathBuf, u64), FileModel> = HashMap::new();
    let mut reports = Vec::new();
    let mut round_seed = 0u64;
    for sc in &plan.scenarios {
        let mut results = Vec::new();
        for job in &sc.jobs {
            let files = data.files(job.file_size, job.nfiles())?;
            let capacity = plan
                .capacity
                .unwrap_or_else(|| default_capacity(job.file_size * job.nfiles() as u64));
            let n = job.engines.len();
            let mut runs: Vec<Vec<RunRecord>> = vec![Vec::new(); n];
            for round in 0..plan.repeat {
                let order: Vec<usize> = if round % 2 == 0 {
                    (0..n).collect()
                } else {
                    (0..n).rev().collect()
                };
                for i in order {
                    round_seed += 1;
                    let ctx = RunCtx {
                        plan,
                        job,
                        files: &files,
                        mode: RunMode {
                            cold: plan.cold,
                            capacity,
                        },
                        write_seed: FILE_SEED ^ round_seed.wrapping_mul(0xd6e8_feb8_6659_fd93),
                    };
                    let rec = run_one(&mut engines, &mut models, &job.engines[i], &ctx)
                        .with_context(|| {
                            format!("{}: {} on {}", sc.name, job.title(), job.engines[i].label)
                        })?;
                    let which = (plan.repeat > 1).then_some((round + 1, plan.repeat));
                    out!("{}", report::block(&rec, &sc.name, which));
                    runs[i].push(rec);
                }
            }
            results.extend(best_of(runs));
        }
        let rep = ScenarioReport {
            name: sc.name.clone(),
            description: sc.description.clone(),
            results,
        };
        out!("{}", report::table(&rep, plan.repeat));
        reports.push(rep);
    }
    engines.clear();

    if reports.len() > 1 {
        out!("== summary");
        for rep in &reports {
            out!("{}", report::table(rep, plan.repeat));
        }
    }
    let report = Report {
        version: 1,
        command,
        host,
        quick: plan.quick,
        cold: plan.cold,
        verify: plan.verify,
        repeat: plan.repeat,
        clock: plan.clock.name(),
        timing_overhead_ns: overhead,
        selection: "best bandwidth among the repeats",
        scenarios: reports,
    };
    if let Some(p) = &args.json {
        report::write_json(&report, p)?;
        out!("json: {}", p.display());
    }
    if let Some(p) = &args.plot {
        crate::plot::draw(p, &report.scenarios)?;
        out!("plot: {}", p.display());
    }
    drop(data);
    if let Some(t) = tmp {
        if args.keep {
            out!("data kept in {}", t.keep().display());
        } else {
            t.close().context("removing the temporary data directory")?;
        }
    }
    out!("total time {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}

/// Each engine's best run, with every run's bandwidth and the ratio to
/// `kernel`.
fn best_of(runs: Vec<Vec<RunRecord>>) -> Vec<RunRecord> {
    let mut best: Vec<RunRecord> = runs
        .into_iter()
        .filter_map(|rs| {
            let bws: Vec<f64> = rs.iter().map(|r| r.bw_bytes).collect();
            let mut b = rs
                .into_iter()
                .max_by(|a, b| a.bw_bytes.total_cmp(&b.bw_bytes))?;
            b.repeats_bw_bytes = bws;
            Some(b)
        })
        .collect();
    let kernel = best
        .iter()
        .find(|r| r.engine == EngineKind::Kernel.name())
        .map(|r| r.bw_bytes)
        .filter(|&k| k > 0.0);
    for r in &mut best {
        r.ratio_to_kernel = kernel.map(|k| r.bw_bytes / k);
    }
    best
}

/// What one engine run needs to know.
struct RunCtx<'a> {
    plan: &'a Plan,
    job: &'a JobSpec,
    files: &'a [PathBuf],
    mode: RunMode,
    write_seed: u64,
}

fn run_one(
    engines: &mut Engines,
    models: &mut HashMap<(PathBuf, u64), FileModel>,
    spec: &EngineSpec,
    ctx: &RunCtx<'_>,
) -> Result<RunRecord> {
    let (job, plan) = (ctx.job, ctx.plan);
    let (prepared, setup) = engines.prepare(spec, job, ctx.files, ctx.mode)?;
    let opts = RunOptions {
        verify: plan.verify,
        buf_offset: plan.buf_offset,
        write_seed: ctx.write_seed,
        clock: plan.clock,
    };
    let m = job::run(&prepared, job, opts, &spec.label)?;
    drop(prepared);
    let mut notes = setup.notes;
    let mut capacity = None;
    let foliocache = match (setup.folio_before, engines.folio_stats(&spec.label)) {
        (Some(before), Some(after)) => {
            let b = &before.stats;
            capacity = Some(after.capacity_bytes);
            let io_reads = after.io_reads - b.io_reads;
            if !ctx.mode.cold {
                if io_reads == 0 {
                    notes.push(format!(
                        "foliocache did no IO during the run (io_reads unchanged at {}): every read was a hit",
                        after.io_reads
                    ));
                } else {
                    notes.push(format!(
                        "warning: foliocache did {io_reads} IOs during the run: not a fully cached figure \
                         (capacity {} for {} of data)",
                        report::fmt_size_approx(after.capacity_bytes),
                        report::fmt_size_approx(job.file_size * job.nfiles() as u64)
                    ));
                }
            }
            Some(FolioFigures {
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
                bytes_cached: after.bytes_cached,
                backing: before.backing_note,
                backing_direct: before.backing_direct,
            })
        }
        _ => None,
    };
    if job.rw.is_write() {
        let t = sync_files(ctx.files)?;
        notes.push(format!(
            "fdatasync after the run: {:.2} s (not measured)",
            t.as_secs_f64()
        ));
        if plan.verify {
            for (path, written) in ctx.files.iter().zip(&m.written) {
                let model = models
                    .entry((path.clone(), job.bs))
                    .or_insert_with(|| FileModel::new(job.file_size, job.bs));
                model.record(written, ctx.write_seed);
                model.check(path)?;
            }
            notes.push("verify: the files read back hold exactly what was written".into());
        }
    }
    if plan.verify && !job.rw.is_write() {
        notes.push("verify: every block read matched the generator".into());
    }
    let secs = m.seconds.max(1e-9);
    let ns = |ticks: f64| (ticks * m.ns_per_tick).round() as u64;
    // How much of the CPU the threads had: a cached engine's threads
    // never wait, so less than all of it means other work ran here.
    let busy = (m.cpu_user + m.cpu_sys) / (secs * job.numjobs as f64);
    notes.push(format!(
        "threads were on CPU {:.0}% of the run",
        busy * 100.0
    ));
    if !ctx.mode.cold && spec.kind.cached() && busy < 0.9 {
        notes.push(
            "warning: the threads had less than 90% of their CPUs: other work ran on this \
             machine during the run (a noisy figure)"
                .into(),
        );
    }
    Ok(RunRecord {
        engine: spec.label.clone(),
        rw: job.rw.name(),
        bs: job.bs,
        numjobs: job.numjobs,
        shared: job.shared,
        file_size: job.file_size,
        bytes: m.bytes,
        ops: m.ops,
        seconds: m.seconds,
        bw_bytes: m.bytes as f64 / secs,
        iops: m.ops as f64 / secs,
        lat_ns: Latency {
            p50: ns(m.hist.percentile(0.50) as f64),
            p75: ns(m.hist.percentile(0.75) as f64),
            p99: ns(m.hist.percentile(0.99) as f64),
            mean: m.hist.mean() * m.ns_per_tick,
            max: ns(m.hist.max() as f64),
        },
        cpu_s: report::Cpu {
            user: m.cpu_user,
            sys: m.cpu_sys,
        },
        capacity,
        timeline_bw_bytes: m.timeline,
        ratio_to_kernel: None,
        runtime_s: job.runtime.map(|d| d.as_secs_f64()),
        buf_offset: plan.buf_offset,
        cold: ctx.mode.cold,
        repeats_bw_bytes: Vec::new(),
        foliocache,
        page_cache: setup.residency.map(|(r, p, when)| Residency {
            resident_pages: r,
            pages: p,
            when,
        }),
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_a_quarter_more_in_2mib() {
        assert_eq!(default_capacity(512 << 20), 640 << 20);
        assert_eq!(default_capacity(1 << 30), 1280 << 20);
        assert_eq!(default_capacity(1 << 20), 2 << 20);
    }

    #[test]
    fn reproduce_quotes_what_needs_it() {
        let argv: Vec<String> = [
            "foliocache",
            "bench",
            "--engine",
            "foliocache[populate=lazy]",
            "--dir",
            "a b",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            reproduce(&argv),
            "cargo run --release -- bench --engine 'foliocache[populate=lazy]' --dir 'a b'"
        );
    }
}
