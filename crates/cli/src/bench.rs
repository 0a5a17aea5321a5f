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
use crate::disk;
use crate::engine::{sync_files, EngineKind, EngineSpec, Engines, RunMode};
use crate::job::{self, RunOptions};
use crate::report::{
    self, FolioFigures, Host, Latency, Ratio, Report, Residency, RunRecord, ScenarioReport, Summary,
};
use crate::scenario::{self, JobSpec, Plan, RatioSpec};

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
        // Every job's files and capacity, made before the first run.
        let mut setups = Vec::with_capacity(sc.jobs.len());
        for job in &sc.jobs {
            let files = data.files(job.file_size, job.nfiles())?;
            let capacity = plan
                .capacity
                .unwrap_or_else(|| scenario::default_capacity(job.file_size * job.nfiles() as u64));
            setups.push((files, capacity));
        }
        // Each round runs every engine of every job, the order reversed
        // from one round to the next, so engines compared across jobs
        // (readahead's direct at 1 MiB) run minutes apart at most.
        let pairs: Vec<(usize, usize)> = sc
            .jobs
            .iter()
            .enumerate()
            .flat_map(|(j, job)| (0..job.engines.len()).map(move |e| (j, e)))
            .collect();
        let mut runs: Vec<Vec<Vec<RunRecord>>> = sc
            .jobs
            .iter()
            .map(|j| vec![Vec::new(); j.engines.len()])
            .collect();
        for round in 0..plan.repeat {
            let mut order = pairs.clone();
            if round % 2 == 1 {
                order.reverse();
            }
            for (j, e) in order {
                let job = &sc.jobs[j];
                let (files, capacity) = &setups[j];
                round_seed += 1;
                let ctx = RunCtx {
                    plan,
                    job,
                    files,
                    mode: RunMode {
                        cold: job.cold,
                        capacity: *capacity,
                    },
                    write_seed: FILE_SEED ^ round_seed.wrapping_mul(0xd6e8_feb8_6659_fd93),
                };
                let rec = run_one(&mut engines, &mut models, &job.engines[e], &ctx).with_context(
                    || format!("{}: {} on {}", sc.name, job.title(), job.engines[e].label),
                )?;
                let which = (plan.repeat > 1).then_some((round + 1, plan.repeat));
                out!("{}", report::block(&rec, &sc.name, which));
                runs[j][e].push(rec);
            }
        }
        let summary = summarise(&sc.ratios, &runs);
        let results: Vec<RunRecord> = runs.into_iter().flat_map(best_of).collect();
        let rep = ScenarioReport {
            name: sc.name.clone(),
            description: sc.description.clone(),
            results,
            summary,
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

/// The scenario's ratios: of the best runs, and of the runs of each round
/// (made seconds apart, so the disk's minute-to-minute swings cancel);
/// `None` for a scenario without ratios. A ratio whose engines did not
/// both run is left out.
fn summarise(specs: &[RatioSpec], runs: &[Vec<Vec<RunRecord>>]) -> Option<Summary> {
    if specs.is_empty() {
        return None;
    }
    let find = |label: &str| {
        runs.iter()
            .flatten()
            .find(|rs| rs.first().is_some_and(|r| r.engine == label))
    };
    let ratios = specs
        .iter()
        .filter_map(|s| {
            let (num, den) = (find(&s.numerator)?, find(&s.denominator)?);
            let best = |rs: &[RunRecord]| rs.iter().map(|r| r.bw_bytes).fold(0.0, f64::max);
            let per_round: Vec<f64> = num
                .iter()
                .zip(den)
                .filter(|(_, d)| d.bw_bytes > 0.0)
                .map(|(n, d)| n.bw_bytes / d.bw_bytes)
                .collect();
            let mut sorted = per_round.clone();
            sorted.sort_by(f64::total_cmp);
            let median = match sorted.len() {
                0 => f64::NAN,
                n if n % 2 == 1 => sorted[n / 2],
                n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
            };
            let b = best(den);
            Some(Ratio {
                name: format!("{} / {}", s.numerator, s.denominator),
                numerator: s.numerator.clone(),
                denominator: s.denominator.clone(),
                best: if b > 0.0 { best(num) / b } else { f64::NAN },
                per_round,
                median_per_round: median,
                target: s.target,
            })
        })
        .collect();
    Some(Summary { ratios })
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
    let disk = ctx.files.first().and_then(|f| disk::stat_path(f));
    let before = disk.as_deref().and_then(disk::Snapshot::take);
    let m = job::run(&prepared, job, opts, &spec.label)?;
    let device = before.and_then(|b| b.since());
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
                io_engine: before.io_engine,
                readahead: report::Readahead {
                    max_pages: before.readahead.max_pages,
                    io_pages: before.readahead.io_pages,
                    insert: match before.readahead.insert {
                        foliocache::Insert::Batched => "batched",
                        foliocache::Insert::Single => "single",
                    },
                },
            })
        }
        _ => None,
    };
    if ctx.mode.cold {
        // The next run of this engine builds a new cache anyway.
        engines.release(&spec.label);
    }
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
        device,
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
        use scenario::default_capacity;
        assert_eq!(default_capacity(512 << 20), 640 << 20);
        assert_eq!(default_capacity(1 << 30), 1280 << 20);
        assert_eq!(default_capacity(1 << 20), 2 << 20);
    }

    fn rec(engine: &str, bw: f64) -> RunRecord {
        RunRecord {
            engine: engine.into(),
            rw: "read",
            bs: 4096,
            numjobs: 1,
            shared: false,
            file_size: 4096,
            bytes: 0,
            ops: 0,
            seconds: 1.0,
            bw_bytes: bw,
            iops: 0.0,
            lat_ns: Latency {
                p50: 0,
                p75: 0,
                p99: 0,
                mean: 0.0,
                max: 0,
            },
            cpu_s: report::Cpu {
                user: 0.0,
                sys: 0.0,
            },
            capacity: None,
            timeline_bw_bytes: Vec::new(),
            ratio_to_kernel: None,
            runtime_s: None,
            buf_offset: 0,
            cold: true,
            repeats_bw_bytes: Vec::new(),
            foliocache: None,
            page_cache: None,
            device: None,
            notes: Vec::new(),
        }
    }

    #[test]
    fn summary_ratios_pair_runs_of_a_round_across_jobs() {
        // Job 0: foliocache and kernel; job 1: direct. Two rounds.
        let runs = vec![
            vec![
                vec![rec("foliocache", 200.0), rec("foliocache", 100.0)],
                vec![rec("kernel", 100.0), rec("kernel", 100.0)],
            ],
            vec![vec![rec("direct", 400.0), rec("direct", 100.0)]],
        ];
        let spec = |n: &str, d: &str, t| RatioSpec {
            numerator: n.into(),
            denominator: d.into(),
            target: t,
        };
        let s = summarise(
            &[
                spec("foliocache", "kernel", Some(1.0)),
                spec("foliocache", "direct", Some(0.9)),
                spec("foliocache", "mmap", None),
            ],
            &runs,
        )
        .unwrap();
        assert_eq!(
            s.ratios.len(),
            2,
            "a ratio of an engine not run is left out"
        );
        let k = &s.ratios[0];
        assert_eq!(k.name, "foliocache / kernel");
        assert_eq!(k.best, 2.0);
        assert_eq!(k.per_round, [2.0, 1.0]);
        assert_eq!(k.median_per_round, 1.5);
        assert_eq!(k.target, Some(1.0));
        let d = &s.ratios[1];
        assert_eq!(d.best, 0.5);
        assert_eq!(d.per_round, [0.5, 1.0]);
        assert!(summarise(&[], &runs).is_none());
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
