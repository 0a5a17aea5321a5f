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
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::args::BenchArgs;
use crate::cgroup::{Availability, MemCgroup};
use crate::data::{DataSet, FileModel, FILE_SEED};
use crate::disk;
use crate::engine::{EngineKind, EngineSpec, Engines, Prepared, RunMode};
use crate::hot::{self, HotFile, MissProbe};
use crate::job::{self, Measured, RunOptions};
use crate::report::{
    self, FineTimeline, FolioFigures, Host, HotFigures, Latency, MemoryLimit, Ratio, Report,
    Residency, RunRecord, ScenarioReport, Summary, TargetCheck,
};
use crate::scenario::{self, JobSpec, Plan, RatioSpec, Scenario, TargetSpec};

const GIB: f64 = (1u64 << 30) as f64;

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
    let mut cgroups: Option<Availability> = None;
    for sc in &plan.scenarios {
        let mut sc = sc.clone();
        // Every job's files and capacity, made before the first run.
        let mut setups = Vec::with_capacity(sc.jobs.len());
        for job in &sc.jobs {
            // A memory job (populate) has no data files.
            let files = if job.memory {
                Vec::new()
            } else {
                data.files(job.file_size, job.nfiles())?
            };
            let capacity = job
                .capacity
                .or(plan.capacity)
                .unwrap_or_else(|| scenario::default_capacity(job.file_size * job.nfiles() as u64));
            let hot = match job.hot {
                Some(h) => data.files(h.file_size, 1)?.into_iter().next(),
                None => None,
            };
            setups.push((files, capacity, hot));
        }
        let mut notes = Vec::new();
        if let Some(n) = drop_unavailable_fuse(&mut sc)? {
            out!("note: {n}");
            notes.push(n);
        }
        if args.engines.is_empty() {
            let first = setups.iter().find_map(|s| s.0.first()).cloned();
            if let Some(n) = first.and_then(|f| drop_unsupported_dontcache(&mut sc, &f)) {
                out!("note: {n}");
                notes.push(n);
            }
        }
        let limit = sc.jobs.iter().find_map(|j| j.memory_limit);
        let memory_limit = limit.map(|l| {
            let avail = cgroups.get_or_insert_with(Availability::probe);
            let status = scenario_limit(avail, l);
            if status.limit_bytes.is_none() {
                notes.push(format!(
                    "the engines other than foliocache ran WITHOUT a memory limit of {} ({}): \
                     their page cache could grow past the cache foliocache had",
                    report::fmt_size_approx(l),
                    status.reason.as_deref().unwrap_or("no mechanism")
                ));
            }
            out!(
                "{}: memory limit of the engines other than foliocache: {}",
                sc.name,
                report::fmt_limit(&status)
            );
            status
        });
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
                let (files, capacity, hot_file) = &setups[j];
                round_seed += 1;
                let ctx = RunCtx {
                    plan,
                    job,
                    files,
                    hot_file: hot_file.as_ref(),
                    cgroups: cgroups.as_ref(),
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
        let summary = summarise(&sc.ratios, &runs).map(|mut s| {
            s.targets = check_targets(&sc.targets, &s.ratios, &runs);
            s
        });
        let results: Vec<RunRecord> = runs.into_iter().flat_map(best_of).collect();
        let rep = ScenarioReport {
            name: sc.name.clone(),
            description: sc.description.clone(),
            results,
            summary,
            memory_limit,
            notes,
            detailed: sc.detailed,
        };
        out!("{}", report::table(&rep, plan.repeat));
        reports.push(rep);
    }
    engines.clear()?;

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
    let find = |label: &str, job: Option<usize>| {
        let pool: &[Vec<Vec<RunRecord>>] = match job {
            Some(j) => runs.get(j..=j).unwrap_or(&[]),
            None => runs,
        };
        pool.iter()
            .flatten()
            .find(|rs| rs.first().is_some_and(|r| r.engine == label))
    };
    let ratios = specs
        .iter()
        .filter_map(|s| {
            let (num, den) = (find(&s.numerator, s.job)?, find(&s.denominator, s.job)?);
            let best = |rs: &[RunRecord]| rs.iter().map(|r| r.bw_bytes).fold(0.0, f64::max);
            let per_round: Vec<f64> = num
                .iter()
                .zip(den)
                .filter(|(_, d)| d.bw_bytes > 0.0)
                .map(|(n, d)| n.bw_bytes / d.bw_bytes)
                .collect();
            let median = median_of(&per_round);
            // A memory job's writes without their setup (the cache's build),
            // for two foliocache engines (whose setups are alike).
            let writes_bw = |r: &RunRecord| {
                r.foliocache.as_ref()?;
                let t = r.seconds - r.setup_s?;
                (t > 0.0).then(|| r.bytes as f64 / t)
            };
            let writes_alone: Option<Vec<f64>> = num
                .iter()
                .zip(den)
                .map(|(n, d)| Some(writes_bw(n)? / writes_bw(d)?))
                .collect::<Option<Vec<f64>>>()
                .filter(|w| !w.is_empty());
            let writes_alone_median = writes_alone.as_deref().map(median_of);
            let b = best(den);
            let of_job = s.job.and_then(|_| num.first()).map_or(String::new(), |r| {
                format!(" ({} {})", r.rw, report::fmt_size(r.bs))
            });
            Some(Ratio {
                name: format!("{} / {}{of_job}", s.numerator, s.denominator),
                job: s.job.and_then(|_| num.first()).map(|r| r.rw.to_string()),
                numerator: s.numerator.clone(),
                denominator: s.denominator.clone(),
                best: if b > 0.0 { best(num) / b } else { f64::NAN },
                per_round,
                median_per_round: median,
                target: s.target,
                writes_alone_per_round: writes_alone,
                writes_alone_median,
            })
        })
        .collect();
    Some(Summary {
        ratios,
        targets: Vec::new(),
    })
}

/// The median of `xs` (NaN if empty).
fn median_of(xs: &[f64]) -> f64 {
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The scenario's memory limit as the report states it.
fn scenario_limit(avail: &Availability, limit: u64) -> MemoryLimit {
    match avail {
        Availability::Available {
            version, parent, ..
        } => MemoryLimit {
            mechanism: version.name(),
            limit_bytes: Some(limit),
            cgroup: Some(parent.display().to_string()),
            peak_bytes: None,
            limit_hits: None,
            reason: None,
        },
        Availability::Unavailable(why) => MemoryLimit {
            mechanism: "none",
            limit_bytes: None,
            cgroup: None,
            peak_bytes: None,
            limit_hits: None,
            reason: Some(why.clone()),
        },
    }
}

/// Where the kernel or the filesystem lacks `RWF_DONTCACHE`, takes the
/// `dontcache` engine out of a scenario's default engine list (an engine
/// asked for by name fails instead, with the reason); the note saying so.
fn drop_unsupported_dontcache(sc: &mut Scenario, file: &std::path::Path) -> Option<String> {
    let has = |sc: &Scenario| {
        sc.jobs
            .iter()
            .any(|j| j.engines.iter().any(|e| e.kind == EngineKind::Dontcache))
    };
    if !has(sc) {
        return None;
    }
    let probe = std::fs::File::open(file)
        .map_err(anyhow::Error::from)
        .and_then(|f| crate::engine::probe_dontcache(&f));
    let why = probe.err()?;
    for j in &mut sc.jobs {
        j.engines.retain(|e| e.kind != EngineKind::Dontcache);
    }
    sc.jobs.retain(|j| !j.engines.is_empty());
    Some(format!(
        "{}: the dontcache engine is left out: {why:#}",
        sc.name
    ))
}

/// Where FUSE cannot run (no `/dev/fuse`, or no way to mount), takes
/// the `fuse` engine out of a scenario (named or by default); the note
/// saying so.
///
/// # Errors
/// The scenario has nothing left to run.
fn drop_unavailable_fuse(sc: &mut Scenario) -> Result<Option<String>> {
    let has = sc
        .jobs
        .iter()
        .any(|j| j.engines.iter().any(|e| e.kind.fuse()));
    if !has {
        return Ok(None);
    }
    let Some(why) = foliocache_fuse::unavailable() else {
        return Ok(None);
    };
    for j in &mut sc.jobs {
        j.engines.retain(|e| !e.kind.fuse());
    }
    sc.jobs.retain(|j| !j.engines.is_empty());
    if sc.jobs.is_empty() {
        bail!(
            "{}: the fuse engines cannot run here ({why}) and no other engine is left",
            sc.name
        );
    }
    Ok(Some(format!(
        "{}: the fuse engines are left out: FUSE is unavailable here: {why}",
        sc.name
    )))
}

/// The runs of engine `label` in job `job`.
fn runs_of<'a>(runs: &'a [Vec<Vec<RunRecord>>], job: usize, label: &str) -> &'a [RunRecord] {
    runs.get(job)
        .and_then(|j| {
            j.iter()
                .find(|rs| rs.first().is_some_and(|r| r.engine == label))
        })
        .map_or(&[], Vec::as_slice)
}

/// Checks a scenario's targets against its runs (every round's, not only
/// the best) and its ratios.
fn check_targets(
    specs: &[TargetSpec],
    ratios: &[Ratio],
    runs: &[Vec<Vec<RunRecord>>],
) -> Vec<TargetCheck> {
    specs
        .iter()
        .map(|t| {
            let mut c = match t {
                TargetSpec::Flat { job, engine, min } => {
                    target_flat(runs_of(runs, *job, engine), engine, *min)
                }
                TargetSpec::Bandwidth {
                    numerator,
                    denominator,
                    job,
                    min,
                } => {
                    let rw = job.and_then(|j| runs.get(j)?.first()?.first().map(|r| r.rw));
                    target_bandwidth(ratios, numerator, denominator, rw, *min)
                }
                TargetSpec::CpuPerGib {
                    job,
                    engine,
                    than,
                    max,
                } => target_cpu(
                    runs_of(runs, *job, engine),
                    runs_of(runs, *job, than),
                    engine,
                    than,
                    *max,
                ),
                TargetSpec::HitRatio { job, engine, min } => {
                    let others: Vec<&[RunRecord]> = runs
                        .get(*job)
                        .map(|j| {
                            j.iter()
                                .map(Vec::as_slice)
                                .filter(|rs| rs.first().is_some_and(|r| &r.engine != engine))
                                .collect()
                        })
                        .unwrap_or_default();
                    target_hits(runs_of(runs, *job, engine), &others, engine, *min)
                }
            };
            c.caveat = ignored_dontcache(runs, t);
            c
        })
        .collect()
}

fn check(name: String, comparison: &'static str, threshold: f64) -> TargetCheck {
    TargetCheck {
        name,
        met: None,
        value: None,
        comparison,
        threshold,
        per_run: Vec::new(),
        detail: String::new(),
        caveat: None,
    }
}

/// A ratio with as many decimals as it needs, up to 3: `1.0x`, `1.1x`,
/// `0.952x`.
pub(crate) fn fmt_ratio(x: f64) -> String {
    for d in 1..3 {
        let t = format!("{x:.d$}");
        if (t.parse::<f64>().unwrap_or(f64::NAN) - x).abs() < 1e-9 {
            return format!("{t}x");
        }
    }
    format!("{x:.3}x")
}

fn fmt_runs(v: &[f64], f: impl Fn(f64) -> String) -> String {
    v.iter().map(|&x| f(x)).collect::<Vec<_>>().join(" ")
}

fn target_flat(runs: &[RunRecord], engine: &str, min: f64) -> TargetCheck {
    let mut c = check(format!("{engine} flat throughput"), ">=", min);
    if runs.is_empty() {
        c.detail = format!("not checked: {engine} did not run");
        return c;
    }
    let flats: Vec<Option<report::Flatness>> = runs.iter().map(report::flatness).collect();
    if flats.iter().any(Option::is_none) {
        c.detail = format!(
            "not checked: a run of {:.2} s has fewer than 3 timeline intervals after its first",
            runs.iter().map(|r| r.seconds).fold(f64::INFINITY, f64::min)
        );
        return c;
    }
    let flats: Vec<report::Flatness> = flats.into_iter().flatten().collect();
    c.per_run = flats.iter().map(|f| f.worst).collect();
    let worst = c.per_run.iter().copied().fold(f64::INFINITY, f64::min);
    c.value = Some(worst);
    c.met = Some(worst >= min);
    // Each run is judged at its own interval (the same for runs of about
    // the same length); the text names them.
    let grains: Vec<f64> = flats.iter().map(|f| f.interval_s).collect();
    let unit = |g: f64| {
        if g >= 1.0 {
            "second".to_string()
        } else {
            format!("{:.0} ms", g * 1e3)
        }
    };
    let mut names: Vec<String> = grains.iter().map(|&g| unit(g)).collect();
    names.dedup();
    c.detail = format!(
        "every {} after the first at least {min:.1}x the median: worst {worst:.2}x (runs: {})",
        names.join(" or "),
        fmt_runs(&c.per_run, |x| format!("{x:.2}x")),
    );
    if grains.iter().any(|&g| g < 1.0) {
        c.detail.push_str(
            "; runs too short for whole seconds are judged at the coarsest interval that gives \
             5 after the first",
        );
    }
    c
}

fn target_bandwidth(
    ratios: &[Ratio],
    num: &str,
    den: &str,
    rw: Option<&str>,
    min: f64,
) -> TargetCheck {
    let of = rw.map_or(String::new(), |w| format!(" ({w})"));
    let mut c = check(format!("{num} bandwidth / {den}{of}"), ">=", min);
    let Some(r) = ratios
        .iter()
        .find(|r| r.numerator == num && r.denominator == den && r.job.as_deref() == rw)
    else {
        c.detail = format!("not checked: {num} or {den} did not run");
        return c;
    };
    c.per_run = r.per_round.clone();
    c.value = Some(r.median_per_round);
    c.met = Some(r.median_per_round >= min);
    c.detail = format!(
        "at least {}, median of the rounds {:.2}x (rounds: {}; best runs {:.2}x)",
        fmt_ratio(min),
        r.median_per_round,
        fmt_runs(&r.per_round, |x| format!("{x:.2}x")),
        r.best
    );
    c
}

fn target_cpu(
    runs: &[RunRecord],
    than: &[RunRecord],
    engine: &str,
    other: &str,
    max: f64,
) -> TargetCheck {
    let mut c = check(format!("{engine} CPU s/GiB / {other}'s"), "<=", max);
    if runs.is_empty() || than.is_empty() {
        c.detail = format!("not checked: {engine} or {other} did not run");
        return c;
    }
    c.per_run = runs
        .iter()
        .zip(than)
        .filter(|(_, t)| t.cpu_s_per_gib > 0.0)
        .map(|(r, t)| r.cpu_s_per_gib / t.cpu_s_per_gib)
        .collect();
    if c.per_run.is_empty() {
        c.detail = format!("not checked: {other} used no measurable CPU");
        return c;
    }
    let med = report::median(&c.per_run);
    c.value = Some(med);
    c.met = Some(med <= max);
    let per = |rs: &[RunRecord]| {
        fmt_runs(
            &rs.iter().map(|r| r.cpu_s_per_gib).collect::<Vec<_>>(),
            |x| format!("{x:.3}"),
        )
    };
    c.detail = format!(
        "at most {max:.1}x, median of the rounds {med:.2}x ({engine} {} s/GiB, {other} {} s/GiB)",
        per(runs),
        per(than)
    );
    c
}

/// The hot hit ratio beside `engine` (the target), with the ratios beside
/// the job's `others` (its other engines, the cached streams among them:
/// what an uncached stream spares) in the detail, for information.
fn target_hits(runs: &[RunRecord], others: &[&[RunRecord]], engine: &str, min: f64) -> TargetCheck {
    let mut c = check(format!("hot hit ratio beside {engine}"), ">=", min);
    let ratios: Vec<Option<f64>> = runs
        .iter()
        .map(|r| r.hot.as_ref().and_then(|h| h.hit_ratio))
        .collect();
    if ratios.is_empty() || ratios.iter().any(Option::is_none) {
        c.detail = format!("not checked: {engine} did not run beside the hot reader, or its misses could not be told");
        return c;
    }
    c.per_run = ratios.into_iter().flatten().collect();
    let worst = c.per_run.iter().copied().fold(f64::INFINITY, f64::min);
    c.value = Some(worst);
    c.met = Some(worst >= min);
    let how = runs
        .first()
        .and_then(|r| r.hot.as_ref())
        .map_or(String::new(), |h| h.miss_detection.clone());
    let rate = runs
        .first()
        .and_then(|r| r.hot.as_ref())
        .map_or(0, |h| h.rate_limit_per_s);
    let rate = if rate == 0 {
        "unpaced".to_string()
    } else {
        format!("{rate} reads/s")
    };
    c.detail = format!(
        "at least {:.0}% in every run: worst {:.2}% (runs: {}; misses told by {how}; hot \
         reader {rate})",
        min * 100.0,
        worst * 100.0,
        fmt_runs(&c.per_run, |x| format!("{:.2}%", x * 100.0))
    );
    let beside: Vec<String> = others
        .iter()
        .filter_map(|rs| {
            let name = &rs.first()?.engine;
            let v: Vec<f64> = rs
                .iter()
                .filter_map(|r| r.hot.as_ref()?.hit_ratio)
                .collect();
            (!v.is_empty())
                .then(|| format!("{name} {}", fmt_runs(&v, |x| format!("{:.2}%", x * 100.0))))
        })
        .collect();
    if !beside.is_empty() {
        c.detail += &format!(
            "; for information, beside the other streams: {}",
            beside.join(", ")
        );
    }
    c
}

/// A caveat for a target about a foliocache engine with `dontcache`
/// whose runs dropped nothing behind: the library ignored the flag.
fn ignored_dontcache(runs: &[Vec<Vec<RunRecord>>], t: &TargetSpec) -> Option<String> {
    let engine = match t {
        TargetSpec::Flat { engine, .. }
        | TargetSpec::CpuPerGib { engine, .. }
        | TargetSpec::HitRatio { engine, .. } => engine,
        TargetSpec::Bandwidth { numerator, .. } => numerator,
    };
    let folio: Vec<&RunRecord> = runs
        .iter()
        .flatten()
        .flatten()
        .filter(|r| &r.engine == engine)
        .filter(|r| {
            r.foliocache
                .as_ref()
                .is_some_and(|f| f.read_flags == "DONTCACHE")
        })
        .collect();
    (!folio.is_empty() && folio.iter().all(|r| report::dontcache_ignored(r))).then(|| {
        format!(
            "{engine} dropped no folio behind its reads in any run, yet evicted or kept what it \
             read: the library does not act on ReadFlags::DONTCACHE yet, so these are figures \
             of cached reads"
        )
    })
}

/// What one engine run needs to know.
struct RunCtx<'a> {
    plan: &'a Plan,
    job: &'a JobSpec,
    files: &'a [PathBuf],
    /// The hot reader's file, for a job with one.
    hot_file: Option<&'a PathBuf>,
    /// How memory can be limited, for a job that limits it.
    cgroups: Option<&'a Availability>,
    mode: RunMode,
    write_seed: u64,
}

/// A hot reader's measured figures, before they become [`HotFigures`].
struct HotRun {
    ready: hot::Ready,
    reads: u64,
    misses: u64,
    seconds: f64,
}

/// Runs the job on a prepared engine, with the hot reader beside it if
/// `hot` is given: the reader starts first and stops when the job ends;
/// its reads and misses are counted over the job's run.
fn measure(
    prepared: &mut Prepared,
    job: &JobSpec,
    opts: RunOptions,
    label: &str,
    hot: Option<(&HotFile, hot::Ready)>,
) -> Result<(Measured, Option<HotRun>)> {
    let (Some((file, ready)), Some(spec)) = (hot, job.hot) else {
        return Ok((job::run(prepared, job, opts, label)?, None));
    };
    let stop = AtomicBool::new(false);
    let counters = hot::Counters::default();
    std::thread::scope(|s| {
        let h = s.spawn(|| hot::run(file, spec, ready.probe, &stop, &counters));
        hot::wait_started(&counters, || h.is_finished());
        let (r0, m0) = counters.get();
        let t = Instant::now();
        let m = job::run(prepared, job, opts, label);
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

fn run_one(
    engines: &mut Engines,
    models: &mut HashMap<(PathBuf, u64), FileModel>,
    spec: &EngineSpec,
    ctx: &RunCtx<'_>,
) -> Result<RunRecord> {
    let (job, plan) = (ctx.job, ctx.plan);
    if let Some(pause) = job.settle {
        // The memory the last run freed goes back to the host meanwhile.
        std::thread::sleep(pause);
    }
    let (mut prepared, mut setup) = engines.prepare(spec, job, ctx.files, ctx.mode)?;
    // fuse-null's files are zeros, not the generator's data.
    let verify = plan.verify && spec.kind != EngineKind::FuseNull;
    let opts = RunOptions {
        verify,
        buf_offset: plan.buf_offset,
        write_seed: ctx.write_seed,
        clock: plan.clock,
    };
    let folio = spec.kind == EngineKind::Foliocache;
    // The fuse engine's data is not in the kernel's page cache (direct IO
    // through the mount) but in its server's foliocache.
    let page_cache = !folio && !spec.kind.fuse();
    // The memory limit: a cgroup of this run's own for an engine on the
    // kernel's page cache.
    let limit = match (job.memory_limit, ctx.cgroups) {
        (Some(l), Some(avail @ Availability::Available { .. })) if page_cache => Some(
            MemCgroup::create(avail, l)
                .with_context(|| format!("{}: a memory cgroup of {}", spec.label, l))?,
        ),
        _ => None,
    };
    // The hot file through the engine's cache: foliocache's (which the
    // cgroup does not concern), or the kernel's, dropped now and warmed
    // below inside the cgroup.
    let hot_file = match (job.hot, ctx.hot_file) {
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
            Some((file, path, probe))
        }
        _ => None,
    };
    let entered = limit.as_ref().map(MemCgroup::enter).transpose()?;
    let ready = match &hot_file {
        Some((file, path, probe)) => {
            let (cached_pages, pages) = hot::warm(file, path, job.hot.map_or(4096, |h| h.bs))?;
            if cached_pages < pages {
                setup.notes.push(format!(
                    "warning: the hot file has {cached_pages} of {pages} pages cached after warming"
                ));
            }
            Some(hot::Ready {
                cached_pages,
                pages,
                probe: *probe,
            })
        }
        None => None,
    };
    if let (true, Some(before)) = (ready.is_some(), setup.folio_before.as_mut()) {
        // The figures of the run, not of warming the hot file.
        if let Some(now) = engines.folio_stats(&spec.label) {
            before.stats = now;
        }
    }
    let disk = ctx.files.first().and_then(|f| disk::stat_path(f));
    let before = disk.as_deref().and_then(disk::Snapshot::take);
    let hot_arg = hot_file.as_ref().zip(ready).map(|((f, _, _), r)| (f, r));
    let measured = measure(&mut prepared, job, opts, &spec.label, hot_arg);
    drop(entered);
    let (m, hot_run) = measured?;
    let device = before.and_then(|b| b.since());
    drop(prepared);
    drop(hot_file);
    let mut notes = setup.notes;
    let memory_limit = match (job.memory_limit, &limit) {
        (Some(_), Some(cg)) => {
            let u = cg.usage();
            Some(MemoryLimit {
                mechanism: cg.version().name(),
                limit_bytes: Some(cg.limit()),
                cgroup: Some(cg.path().display().to_string()),
                peak_bytes: u.peak_bytes,
                limit_hits: u.limit_hits,
                reason: None,
            })
        }
        (Some(l), None) if page_cache => ctx.cgroups.map(|a| scenario_limit(a, l)),
        _ => None,
    };
    // Removes the cgroup (and the page cache charged to it).
    drop(limit);
    let hot = hot_run.map(|h| HotFigures {
        file_size: job.hot.map_or(0, |s| s.file_size),
        bs: job.hot.map_or(0, |s| s.bs),
        warm_cached_pages: h.ready.cached_pages,
        pages: h.ready.pages,
        reads: h.reads,
        misses: h.misses,
        hit_ratio: (h.ready.probe != MissProbe::Unavailable && h.reads > 0)
            .then(|| (h.reads - h.misses) as f64 / h.reads as f64),
        reads_per_s: if h.seconds > 0.0 {
            h.reads as f64 / h.seconds
        } else {
            0.0
        },
        miss_detection: h.ready.probe.describe().to_string(),
        rate_limit_per_s: job.hot.map_or(0, |s| s.rate),
    });
    if hot.is_some() {
        notes.push(
            "the hot reader ran beside the job: its CPU time is in the run's CPU figures".into(),
        );
    }
    if let (Some(b), Some(a)) = (setup.fuse_before, engines.fuse_figures()) {
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
    let mut capacity = None;
    let foliocache = match (setup.folio_before, engines.folio_stats(&spec.label)) {
        (Some(before), Some(after)) => {
            let b = &before.stats;
            capacity = Some(after.capacity_bytes);
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
                read_flags: if spec.folio.dontcache {
                    "DONTCACHE"
                } else {
                    "none"
                },
                write_insert: match spec.folio.grab {
                    foliocache::internals::Insert::Batched => "grab_folios",
                    foliocache::internals::Insert::Single => "grab_folios_single",
                },
                huge_pages: spec.folio.huge,
                write_flags: if spec.folio.dontcache {
                    "DONTCACHE"
                } else {
                    "none"
                },
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
                backing: before.backing_note,
                backing_direct: before.backing_direct,
                io_engine: before.io_engine,
                readahead: report::Readahead {
                    max_pages: before.readahead.max_pages,
                    io_pages: before.readahead.io_pages,
                    insert: match before.readahead.insert() {
                        foliocache::internals::Insert::Batched => "batched",
                        foliocache::internals::Insert::Single => "single",
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
    let setup_s = setup.setup_time.map(|d| d.as_secs_f64());
    if let Some(pause) = job.settle {
        notes.push(format!(
            "started {:.1} s after the last run's memory was freed (fresh memory)",
            pause.as_secs_f64()
        ));
    }
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
    if verify && !job.rw.is_write() {
        notes.push("verify: every block read matched the generator".into());
    } else if plan.verify && !job.rw.is_write() {
        notes.push("verify: not done: fuse-null serves zeros".into());
    }
    // A memory job's setup is part of its time.
    let seconds = m.seconds + setup_s.unwrap_or(0.0);
    let secs = seconds.max(1e-9);
    let ns = |ticks: f64| (ticks * m.ns_per_tick).round() as u64;
    // How much of the CPU the threads had: a cached engine's threads
    // never wait, so less than all of it means other work ran here.
    let busy = (m.cpu_user + m.cpu_sys) / (secs * job.numjobs as f64);
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
    let mut rec = RunRecord {
        engine: spec.label.clone(),
        rw: job.rw.name(),
        bs: job.bs,
        numjobs: job.numjobs,
        shared: job.shared,
        file_size: job.file_size,
        bytes: m.bytes,
        ops: m.ops,
        seconds,
        sync_s: m.sync_s,
        setup_s,
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
        cpu_s_per_gib: if m.bytes > 0 {
            (m.cpu_user + m.cpu_sys) / (m.bytes as f64 / GIB)
        } else {
            0.0
        },
        capacity,
        timeline_bw_bytes: m.timeline,
        fine_timeline: (job.bins_per_second > 1).then(|| FineTimeline {
            interval_s: job.interval().as_secs_f64(),
            bw_bytes: m.fine_timeline,
        }),
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
        memory_limit,
        hot,
        notes,
    };
    if report::dontcache_ignored(&rec) {
        let f = rec
            .foliocache
            .as_ref()
            .map_or((0, 0), |f| (f.evictions, f.bytes_cached));
        rec.notes.push(format!(
            "warning: no folio was dropped behind these DONTCACHE reads (dropbehind_drops \
             unchanged), yet {} folios were evicted and {} is cached at the end: the library \
             does not act on ReadFlags::DONTCACHE yet, so these are cached reads",
            f.0,
            report::fmt_size_approx(f.1)
        ));
    }
    Ok(rec)
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
            sync_s: None,
            setup_s: None,
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
            cpu_s_per_gib: 0.0,
            capacity: None,
            timeline_bw_bytes: Vec::new(),
            fine_timeline: None,
            ratio_to_kernel: None,
            runtime_s: None,
            buf_offset: 0,
            cold: true,
            repeats_bw_bytes: Vec::new(),
            foliocache: None,
            page_cache: None,
            device: None,
            memory_limit: None,
            hot: None,
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
            job: None,
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
