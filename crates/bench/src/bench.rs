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

use anyhow::{bail, Context, Result};

use crate::args::BenchArgs;
use crate::cgroup::Availability;
use crate::data::{DataSet, FileModel, FILE_SEED};
use crate::engine::{Engines, RunMode};
use crate::report::{self, Host, MemoryLimit, Report, RunRecord, ScenarioReport};
use crate::run::{self};
use crate::scenario::{self, Plan, Program, Scenario};
use crate::spec::{default_capacity, EngineKind, JobSpec};
use crate::targets::{self, JobRuns};
use crate::units::fmt_size_approx;

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

/// The data directory: `--dir`, or a temporary one (removed at the end
/// unless `--keep`), traversable but not listable by other users, so
/// that a program the bench runs as another user (the programs
/// scenario's PostgreSQL) reaches its own directory in it.
fn data_dir(args: &BenchArgs) -> Result<(Option<tempfile::TempDir>, DataSet)> {
    Ok(match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            (None, DataSet::new(d.clone(), !args.keep).reuse(args.keep))
        }
        None => {
            use std::os::unix::fs::PermissionsExt;
            let t = tempfile::Builder::new()
                .prefix("foliocache-bench-")
                .tempdir()
                .context("creating a temporary directory (set TMPDIR or use --dir)")?;
            let p = t.path().to_path_buf();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o711))
                .with_context(|| format!("opening {} to other users", p.display()))?;
            (Some(t), DataSet::new(p, false))
        }
    })
}

fn run_plan(args: &BenchArgs, plan: &Plan, argv: &[String]) -> Result<()> {
    let t0 = Instant::now();
    let host = Host::this();
    let command = reproduce(argv);
    let (tmp, data) = data_dir(args)?;
    out!("foliocache bench: reproduce with `{command}`");
    let overhead = crate::clock::overhead_ns(plan.clock);
    out!(
        "clock: {} (timing costs {overhead:.0} ns per operation, in every engine's figures)",
        plan.clock.name()
    );
    out!(
        "host: {} CPUs ({}), Linux {}; foliocache's copy: {}; data in {}{}{}{}",
        host.cpus,
        host.cpu,
        host.kernel,
        host.copy,
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

    let mut bench = Bench {
        plan,
        data,
        engines: Engines::default(),
        models: HashMap::new(),
        round_seed: 0,
        cgroups: None,
    };
    let mut reports = Vec::new();
    for sc in &plan.scenarios {
        let rep = bench.scenario(args, sc.clone())?;
        out!("{}", report::table(&rep, plan.repeat));
        reports.push(rep);
    }
    bench.engines.clear()?;

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
    drop(bench);
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

/// What the runs of a plan's scenarios share.
struct Bench<'a> {
    plan: &'a Plan,
    data: DataSet,
    engines: Engines,
    /// What the write runs wrote into each file, for `--verify`.
    models: HashMap<(PathBuf, u64), FileModel>,
    /// Runs so far (each write run writes data of its own).
    round_seed: u64,
    /// How memory can be limited, probed at the first scenario that
    /// limits it.
    cgroups: Option<Availability>,
}

/// A job's files and foliocache's capacity, made before its first run.
struct JobFiles {
    files: Vec<PathBuf>,
    capacity: u64,
    hot: Option<PathBuf>,
}

impl Bench<'_> {
    /// Runs a scenario: its files, the engines that cannot run here left
    /// out with a note, its memory limit, then its rounds (or, for a
    /// scenario running a program itself, its rounds by
    /// [`scenario::programs::run`] or
    /// [`Embedded::run`](scenario::embedded::Embedded::run)).
    fn scenario(&mut self, args: &BenchArgs, sc: Scenario) -> Result<ScenarioReport> {
        let Some(program) = &sc.programs else {
            return self.job_scenario(args, sc);
        };
        let mut notes = Vec::new();
        let say = |line: &str| out!("{line}");
        let (dir, repeat) = (self.data.dir(), self.plan.repeat);
        let (runs, baseline, memory_limit) = match program {
            Program::DbBench(db) => {
                let avail = self.cgroups.get_or_insert_with(Availability::probe);
                let runs = scenario::programs::run(db, dir, avail, repeat, &mut notes, &say)?;
                (runs, scenario::programs::EXT4, None)
            }
            Program::Embedded(db, eb) => {
                let avail = self.cgroups.get_or_insert_with(Availability::probe);
                let runs = db.run(eb, dir, repeat, avail, &mut notes, &say)?;
                let limit = MemoryLimit::of_scenario(avail, eb.limit);
                (Some(runs), db.baseline, Some(limit))
            }
            Program::Kills(k) => {
                scenario::crash::run(k, dir, &mut notes, &say)?;
                (None, "", None)
            }
            Program::ObjectStore(ob) => (
                Some(scenario::objectstore::run(
                    ob, dir, repeat, &mut notes, &say,
                )?),
                scenario::objectstore::PARTS,
                None,
            ),
            Program::Advisor(a) => {
                scenario::advisor::run(a, dir, &mut notes, &say)?;
                (None, "", None)
            }
            Program::Policy(a) => {
                scenario::policy::run(a, dir, &mut notes, &say)?;
                (None, "", None)
            }
            Program::Scans(a) => {
                let avail = self.cgroups.get_or_insert_with(Availability::probe);
                scenario::scans::run(a, &mut self.data, avail, repeat, &mut notes, &say)?;
                (None, "", None)
            }
        };
        let summary = runs
            .as_ref()
            .and_then(|r| targets::evaluate(&sc.ratios, &sc.targets, r));
        Ok(ScenarioReport {
            name: sc.name,
            description: sc.description,
            results: runs
                .into_iter()
                .flatten()
                .flat_map(|r| best_of(r.engines, baseline))
                .collect(),
            summary,
            memory_limit,
            notes,
            detailed: sc.detailed,
        })
    }

    /// [`Bench::scenario`] of a scenario of jobs.
    fn job_scenario(&mut self, args: &BenchArgs, mut sc: Scenario) -> Result<ScenarioReport> {
        let setups = sc
            .specs()
            .map(|job| self.job_files(job))
            .collect::<Result<Vec<_>>>()?;
        let mut notes = Vec::new();
        if let Some(n) = drop_unavailable_fuse(&mut sc)? {
            out!("note: {n}");
            notes.push(n);
        }
        if args.engines.is_empty() {
            let first = setups.iter().find_map(|s| s.files.first()).cloned();
            if let Some(n) = first.and_then(|f| drop_unsupported_dontcache(&mut sc, &f)) {
                out!("note: {n}");
                notes.push(n);
            }
        }
        let memory_limit = self.memory_limit(&sc, &mut notes);
        let runs = self.rounds(&sc, &setups)?;
        let summary = targets::evaluate(&sc.ratios, &sc.targets, &runs);
        Ok(ScenarioReport {
            name: sc.name,
            description: sc.description,
            results: runs
                .into_iter()
                .flat_map(|r| best_of(r.engines, EngineKind::Kernel.name()))
                .collect(),
            summary,
            memory_limit,
            notes,
            detailed: sc.detailed,
        })
    }

    /// A job's files (none for a memory job), its hot reader's, and
    /// foliocache's capacity for it.
    fn job_files(&mut self, job: &JobSpec) -> Result<JobFiles> {
        let files = if job.memory {
            Vec::new()
        } else {
            self.data
                .files(job.file_size, job.nfiles(), job.rw.is_write())?
        };
        let capacity = job
            .capacity
            .or(self.plan.capacity)
            .unwrap_or_else(|| default_capacity(job.file_size * job.nfiles() as u64));
        let hot = match job.hot {
            Some(h) => self.data.files(h.file_size, 1, false)?.into_iter().next(),
            None => None,
        };
        Ok(JobFiles {
            files,
            capacity,
            hot,
        })
    }

    /// The scenario's memory limit, if it sets one, as the machine allows
    /// it; a note if it does not.
    fn memory_limit(&mut self, sc: &Scenario, notes: &mut Vec<String>) -> Option<MemoryLimit> {
        let l = sc.specs().find_map(|j| j.memory_limit)?;
        let avail = self.cgroups.get_or_insert_with(Availability::probe);
        let status = MemoryLimit::of_scenario(avail, l);
        if status.limit_bytes.is_none() {
            notes.push(format!(
                "the engines other than foliocache ran WITHOUT a memory limit of {} ({}): \
                 their page cache could grow past the cache foliocache had",
                fmt_size_approx(l),
                status.reason.as_deref().unwrap_or("no mechanism")
            ));
        }
        out!(
            "{}: memory limit of the engines other than foliocache: {}",
            sc.name,
            report::fmt_limit(&status)
        );
        Some(status)
    }

    /// Every round's runs of each job, by engine. Each round runs every
    /// engine of every job, the order reversed from one round to the
    /// next, so engines compared across jobs (readahead's direct at 1 MiB)
    /// run minutes apart at most.
    fn rounds(&mut self, sc: &Scenario, setups: &[JobFiles]) -> Result<Vec<JobRuns>> {
        let plan = self.plan;
        let pairs: Vec<(usize, usize)> = sc
            .specs()
            .enumerate()
            .flat_map(|(j, job)| (0..job.engines.len()).map(move |e| (j, e)))
            .collect();
        let mut runs: Vec<JobRuns> = sc
            .jobs
            .iter()
            .map(|j| JobRuns {
                job: j.name,
                engines: vec![Vec::new(); j.spec.engines.len()],
            })
            .collect();
        for round in 0..plan.repeat {
            let mut order = pairs.clone();
            if round % 2 == 1 {
                order.reverse();
            }
            for (j, e) in order {
                let (job, setup) = (&sc.jobs[j].spec, &setups[j]);
                self.round_seed += 1;
                let ctx = run::RunCtx {
                    plan,
                    job,
                    files: &setup.files,
                    hot_file: setup.hot.as_ref(),
                    cgroups: self.cgroups.as_ref(),
                    mode: RunMode {
                        cold: job.cold,
                        capacity: setup.capacity,
                        consume: plan.consume,
                    },
                    write_seed: FILE_SEED ^ self.round_seed.wrapping_mul(0xd6e8_feb8_6659_fd93),
                };
                let spec = &job.engines[e];
                let rec = run::run_one(&mut self.engines, &mut self.models, spec, &ctx)
                    .with_context(|| format!("{}: {} on {}", sc.name, job.title(), spec.label))?;
                let which = (plan.repeat > 1).then_some((round + 1, plan.repeat));
                out!("{}", report::block(&rec, &sc.name, which));
                runs[j].engines[e].push(rec);
            }
        }
        Ok(runs)
    }
}

/// Each engine's best run, with every run's bandwidth and the ratio to
/// the engine labelled `baseline` (`kernel`).
fn best_of(runs: Vec<Vec<RunRecord>>, baseline: &str) -> Vec<RunRecord> {
    let mut best: Vec<RunRecord> = runs
        .into_iter()
        .filter_map(|rs| {
            let bws: Vec<f64> = rs.iter().map(|r| r.perf.bw_bytes).collect();
            let mut b = rs
                .into_iter()
                .max_by(|a, b| a.perf.bw_bytes.total_cmp(&b.perf.bw_bytes))?;
            b.best.repeats_bw_bytes = bws;
            Some(b)
        })
        .collect();
    let kernel = best
        .iter()
        .find(|r| r.engine == baseline)
        .map(|r| r.perf.bw_bytes)
        .filter(|&k| k > 0.0);
    for r in &mut best {
        r.best.ratio_to_kernel = kernel.map(|k| r.perf.bw_bytes / k);
    }
    best
}

/// Where the kernel or the filesystem lacks `RWF_DONTCACHE`, takes the
/// `dontcache` engine out of a scenario's default engine list (an engine
/// asked for by name fails instead, with the reason); the note saying so.
fn drop_unsupported_dontcache(sc: &mut Scenario, file: &std::path::Path) -> Option<String> {
    let has = |sc: &Scenario| {
        sc.specs()
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
        j.spec.engines.retain(|e| e.kind != EngineKind::Dontcache);
    }
    sc.jobs.retain(|j| !j.spec.engines.is_empty());
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
    let has = sc.specs().any(|j| j.engines.iter().any(|e| e.kind.fuse()));
    if !has {
        return Ok(None);
    }
    let Some(why) = foliocache_fuse::unavailable() else {
        return Ok(None);
    };
    for j in &mut sc.jobs {
        j.spec.engines.retain(|e| !e.kind.fuse());
    }
    sc.jobs.retain(|j| !j.spec.engines.is_empty());
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

#[cfg(test)]
mod tests {
    use super::*;

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
