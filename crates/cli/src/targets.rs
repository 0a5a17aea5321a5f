//! A scenario's targets and ratios: what it asks of its engines
//! ([`TargetSpec`], [`RatioSpec`]) and how the runs are held against it
//! ([`summarise`], [`check_targets`]). The targets and why each is set
//! are in `docs/bench.md`.

use crate::report::{self, Flatness, Ratio, RunRecord, Summary, TargetCheck};
use crate::units::{fmt_ratio, fmt_size};

mod per_read;

/// A target a scenario checks, by engine label and job index.
#[derive(Debug, Clone, PartialEq)]
pub enum TargetSpec {
    /// Every timeline interval of each of `engine`'s runs of job `job`
    /// after the first is at least `min` times the run's median interval
    /// (per second where runs last 4 s or more, else per finer interval).
    Flat {
        /// The job.
        job: usize,
        /// The engine.
        engine: String,
        /// The least fraction of the median.
        min: f64,
    },
    /// The bandwidth ratio of the scenario's ratio `numerator /
    /// denominator`, median of the rounds, is at least `min`.
    Bandwidth {
        /// The engine above the line.
        numerator: String,
        /// The engine below it.
        denominator: String,
        /// The job of the ratio ([`RatioSpec::job`]).
        job: Option<usize>,
        /// The least ratio.
        min: f64,
    },
    /// The ratio of the writes alone (each run's time less its setup: a
    /// memory job of two foliocache engines, [`Ratio`]'s
    /// `writes_alone_per_round`) of `numerator / denominator` is at least
    /// `min` in every round.
    WritesAlone {
        /// The engine above the line.
        numerator: String,
        /// The engine below it.
        denominator: String,
        /// The least ratio, of every round.
        min: f64,
    },
    /// CPU seconds per GiB of `engine` over `than`'s in job `job`, median
    /// of the rounds, is at most `max`.
    CpuPerGib {
        /// The job.
        job: usize,
        /// The engine measured.
        engine: String,
        /// The engine it is held against.
        than: String,
        /// The largest ratio.
        max: f64,
    },
    /// CPU microseconds per read of `engine` in job `job`, less `than`'s,
    /// median of the rounds, is at most `plus_us`.
    CpuPerRead {
        /// The job.
        job: usize,
        /// The engine measured.
        engine: String,
        /// The engine it is held against.
        than: String,
        /// The most microseconds more.
        plus_us: f64,
    },
    /// `engine`'s hit ratio in job `job` is at most `max_points`
    /// percentage points below an exact LRU's of its capacity over the
    /// same offsets, in every run (above it is better, and met).
    LruGap {
        /// The job (a zipfian one).
        job: usize,
        /// The engine (a foliocache one).
        engine: String,
        /// The most points below.
        max_points: f64,
    },
    /// `engine`'s read amplification is at most `max` in every run of
    /// every job.
    ReadAmplification {
        /// The engine.
        engine: String,
        /// The most device bytes per byte delivered.
        max: f64,
    },
    /// foliocache `engine`'s memory (`Cache::memory`: arena and
    /// bookkeeping) is at most `max_bytes` after every run.
    Memory {
        /// The engine (a foliocache one).
        engine: String,
        /// The budget.
        max_bytes: u64,
    },
    /// The hot reader's hit ratio beside `engine` in job `job` is at least
    /// `min` in every run.
    HitRatio {
        /// The job (one with a hot reader).
        job: usize,
        /// The engine.
        engine: String,
        /// The least hit ratio.
        min: f64,
    },
}

/// A bandwidth ratio a scenario reports: `numerator / denominator`, by
/// engine label.
#[derive(Debug, Clone, PartialEq)]
pub struct RatioSpec {
    /// The engine above the line.
    pub numerator: String,
    /// The engine below it.
    pub denominator: String,
    /// The ratio the issue asks for, if any.
    pub target: Option<f64>,
    /// The job whose runs it pairs (for a scenario whose jobs run the
    /// same engines); `None`: the first job that ran each engine.
    pub job: Option<usize>,
}

/// A scenario's ratios and targets, as the scenario builds them from the
/// labels of the engines it found (`None`: not in its engine list).
#[derive(Debug, Default)]
pub struct Judged {
    /// The ratios to report.
    pub ratios: Vec<RatioSpec>,
    /// The targets to check.
    pub targets: Vec<TargetSpec>,
}

impl Judged {
    /// Reports the ratio `n / d` of job `job` (`None`: of the first job
    /// that ran each) where both engines run, with the target the issue
    /// sets for it, if any.
    pub fn ratio(
        &mut self,
        n: &Option<String>,
        d: &Option<String>,
        target: Option<f64>,
        job: Option<usize>,
    ) {
        if let (Some(n), Some(d)) = (n, d) {
            self.ratios.push(RatioSpec {
                numerator: n.clone(),
                denominator: d.clone(),
                target,
                job,
            });
        }
    }

    /// [`Judged::ratio`], and with a target also checks it: a
    /// [`TargetSpec::Bandwidth`] of at least `target`.
    pub fn judged(
        &mut self,
        n: &Option<String>,
        d: &Option<String>,
        target: Option<f64>,
        job: Option<usize>,
    ) {
        self.ratio(n, d, target, job);
        if let (Some(n), Some(d), Some(min)) = (n, d, target) {
            self.targets.push(TargetSpec::Bandwidth {
                numerator: n.clone(),
                denominator: d.clone(),
                job,
                min,
            });
        }
    }
}

/// A scenario's summary: its ratios ([`RatioSpec`]) and its targets
/// ([`TargetSpec`]) checked against its runs, `runs[job][engine]` holding
/// every round's run of an engine; `None` for a scenario without ratios.
pub fn evaluate(
    ratios: &[RatioSpec],
    targets: &[TargetSpec],
    runs: &[Vec<Vec<RunRecord>>],
) -> Option<Summary> {
    summarise(ratios, runs).map(|mut s| {
        s.targets = check_targets(targets, &s.ratios, runs);
        s
    })
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
            let best = |rs: &[RunRecord]| rs.iter().map(|r| r.perf.bw_bytes).fold(0.0, f64::max);
            let per_round: Vec<f64> = num
                .iter()
                .zip(den)
                .filter(|(_, d)| d.perf.bw_bytes > 0.0)
                .map(|(n, d)| n.perf.bw_bytes / d.perf.bw_bytes)
                .collect();
            let median = report::median(&per_round);
            // A memory job's writes without their setup (the cache's build),
            // for two foliocache engines (whose setups are alike).
            let writes_bw = |r: &RunRecord| {
                r.cache.foliocache.as_ref()?;
                let t = r.perf.seconds - r.timing.setup_s?;
                (t > 0.0).then(|| r.perf.bytes as f64 / t)
            };
            let writes_alone: Option<Vec<f64>> = num
                .iter()
                .zip(den)
                .map(|(n, d)| Some(writes_bw(n)? / writes_bw(d)?))
                .collect::<Option<Vec<f64>>>()
                .filter(|w| !w.is_empty());
            let writes_alone_median = writes_alone.as_deref().map(report::median);
            let b = best(den);
            let of_job = s.job.and_then(|_| num.first()).map_or(String::new(), |r| {
                format!(
                    " ({} {}{})",
                    r.job.rw,
                    fmt_size(r.job.bs),
                    report::dist_of(r)
                )
            });
            Some(Ratio {
                name: format!("{} / {}{of_job}", s.numerator, s.denominator),
                job: s
                    .job
                    .and_then(|_| num.first())
                    .map(|r| r.job.rw.to_string()),
                job_index: s.job,
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

/// The runs of engine `label` in job `job`.
fn runs_of<'a>(runs: &'a [Vec<Vec<RunRecord>>], job: usize, label: &str) -> &'a [RunRecord] {
    runs.get(job)
        .and_then(|j| {
            j.iter()
                .find(|rs| rs.first().is_some_and(|r| r.engine == label))
        })
        .map_or(&[], Vec::as_slice)
}

/// The runs of engine `label` in every job.
fn all_runs_of<'a>(runs: &'a [Vec<Vec<RunRecord>>], label: &str) -> Vec<&'a RunRecord> {
    runs.iter()
        .flatten()
        .flatten()
        .filter(|r| r.engine == label)
        .collect()
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
                    let of = job
                        .and_then(|j| runs.get(j)?.first()?.first())
                        .map(report::job_of_ratio);
                    target_bandwidth(ratios, numerator, denominator, *job, of, *min)
                }
                TargetSpec::WritesAlone {
                    numerator,
                    denominator,
                    min,
                } => target_writes_alone(ratios, numerator, denominator, *min),
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
                TargetSpec::CpuPerRead {
                    job,
                    engine,
                    than,
                    plus_us,
                } => per_read::cpu(
                    runs_of(runs, *job, engine),
                    runs_of(runs, *job, than),
                    engine,
                    than,
                    *plus_us,
                ),
                TargetSpec::LruGap {
                    job,
                    engine,
                    max_points,
                } => per_read::lru_gap(runs_of(runs, *job, engine), engine, *max_points),
                TargetSpec::ReadAmplification { engine, max } => {
                    per_read::amplification(&all_runs_of(runs, engine), engine, *max)
                }
                TargetSpec::Memory { engine, max_bytes } => {
                    per_read::memory(&all_runs_of(runs, engine), engine, *max_bytes)
                }
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

pub(crate) fn check(name: String, comparison: &'static str, threshold: f64) -> TargetCheck {
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

pub(crate) fn fmt_runs(v: &[f64], f: impl Fn(f64) -> String) -> String {
    v.iter().map(|&x| f(x)).collect::<Vec<_>>().join(" ")
}

fn target_flat(runs: &[RunRecord], engine: &str, min: f64) -> TargetCheck {
    let mut c = check(format!("{engine} flat throughput"), ">=", min);
    if runs.is_empty() {
        c.detail = format!("not checked: {engine} did not run");
        return c;
    }
    let flats: Vec<Option<Flatness>> = runs.iter().map(report::flatness).collect();
    if flats.iter().any(Option::is_none) {
        c.detail = format!(
            "not checked: a run of {:.2} s has fewer than 3 timeline intervals after its first",
            runs.iter()
                .map(|r| r.perf.seconds)
                .fold(f64::INFINITY, f64::min)
        );
        return c;
    }
    let flats: Vec<Flatness> = flats.into_iter().flatten().collect();
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
    job: Option<usize>,
    of: Option<String>,
    min: f64,
) -> TargetCheck {
    let of = of.map_or(String::new(), |w| format!(" ({w})"));
    let mut c = check(format!("{num} bandwidth / {den}{of}"), ">=", min);
    let Some(r) = ratio_of(ratios, num, den, job) else {
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

/// The scenario's ratio `num / den` of job `job` (`None`: of the first
/// job that ran each engine).
fn ratio_of<'r>(
    ratios: &'r [Ratio],
    num: &str,
    den: &str,
    job: Option<usize>,
) -> Option<&'r Ratio> {
    ratios
        .iter()
        .find(|r| r.numerator == num && r.denominator == den && r.job_index == job)
}

/// [`TargetSpec::WritesAlone`]: the least round's ratio of the writes
/// alone, from the scenario's ratio of the same engines.
fn target_writes_alone(ratios: &[Ratio], num: &str, den: &str, min: f64) -> TargetCheck {
    let mut c = check(
        format!("{num} / {den}, the writes alone, every round"),
        ">=",
        min,
    );
    let Some(rounds) =
        ratio_of(ratios, num, den, None).and_then(|r| r.writes_alone_per_round.as_ref())
    else {
        c.detail = format!(
            "not checked: {num} or {den} did not run, or a run's setup was not timed apart"
        );
        return c;
    };
    let least = rounds.iter().copied().fold(f64::INFINITY, f64::min);
    c.per_run = rounds.clone();
    c.value = Some(least);
    c.met = Some(least >= min);
    c.detail = format!(
        "at least {} in every round, least {least:.2}x (rounds: {})",
        fmt_ratio(min),
        fmt_runs(rounds, |x| format!("{x:.2}x"))
    );
    c
}

/// Holds `engine`'s runs against `other`'s round by round: `f` of each
/// pair (a round where it gives nothing left out) into `c.per_run`, their
/// median into `c.value`, met if at most `c.threshold`. `None`, with the
/// reason in `c.detail`, where there is nothing to hold.
pub(crate) fn paired_median(
    c: &mut TargetCheck,
    runs: &[RunRecord],
    than: &[RunRecord],
    engine: &str,
    other: &str,
    f: impl Fn(&RunRecord, &RunRecord) -> Option<f64>,
) -> Option<f64> {
    if runs.is_empty() || than.is_empty() {
        c.detail = format!("not checked: {engine} or {other} did not run");
        return None;
    }
    c.per_run = runs.iter().zip(than).filter_map(|(r, t)| f(r, t)).collect();
    if c.per_run.is_empty() {
        c.detail = format!("not checked: {other} used no measurable CPU");
        return None;
    }
    let med = report::median(&c.per_run);
    c.value = Some(med);
    c.met = Some(med <= c.threshold);
    Some(med)
}

/// `figure` of each run, to `digits` decimals, space separated.
pub(crate) fn fmt_figures(
    rs: &[RunRecord],
    figure: fn(&RunRecord) -> f64,
    digits: usize,
) -> String {
    fmt_runs(&rs.iter().map(figure).collect::<Vec<_>>(), |x| {
        format!("{x:.digits$}")
    })
}

fn target_cpu(
    runs: &[RunRecord],
    than: &[RunRecord],
    engine: &str,
    other: &str,
    max: f64,
) -> TargetCheck {
    let mut c = check(format!("{engine} CPU s/GiB / {other}'s"), "<=", max);
    let Some(med) = paired_median(&mut c, runs, than, engine, other, |r, t| {
        (t.perf.cpu_s_per_gib > 0.0).then(|| r.perf.cpu_s_per_gib / t.perf.cpu_s_per_gib)
    }) else {
        return c;
    };
    let per = |rs| fmt_figures(rs, |r| r.perf.cpu_s_per_gib, 3);
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
        | TargetSpec::HitRatio { engine, .. }
        | TargetSpec::CpuPerRead { engine, .. }
        | TargetSpec::LruGap { engine, .. }
        | TargetSpec::ReadAmplification { engine, .. }
        | TargetSpec::Memory { engine, .. } => engine,
        TargetSpec::Bandwidth { numerator, .. } | TargetSpec::WritesAlone { numerator, .. } => {
            numerator
        }
    };
    let folio: Vec<&RunRecord> = runs
        .iter()
        .flatten()
        .flatten()
        .filter(|r| &r.engine == engine)
        .filter(|r| {
            r.cache
                .foliocache
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Perf, RunJob};

    fn rec(engine: &str, bw: f64) -> RunRecord {
        RunRecord {
            engine: engine.into(),
            job: RunJob {
                rw: "read",
                bs: 4096,
                numjobs: 1,
                file_size: 4096,
                cold: true,
                ..RunJob::default()
            },
            perf: Perf {
                seconds: 1.0,
                bw_bytes: bw,
                ..Perf::default()
            },
            ..RunRecord::default()
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

    /// A memory run of 1 GiB in `seconds`, `setup` of them the cache's build.
    fn mem(engine: &str, seconds: f64, setup: Option<f64>) -> RunRecord {
        let mut r = rec(engine, (1u64 << 30) as f64 / seconds);
        r.perf.bytes = 1 << 30;
        r.perf.seconds = seconds;
        r.timing.setup_s = setup;
        r.cache.foliocache = Some(report::FolioFigures::default());
        r
    }

    #[test]
    fn writes_alone_target_holds_every_round_not_the_median() {
        let spec = RatioSpec {
            numerator: "batched".into(),
            denominator: "single".into(),
            target: Some(1.0),
            job: None,
        };
        let target = TargetSpec::WritesAlone {
            numerator: "batched".into(),
            denominator: "single".into(),
            min: 1.1,
        };
        // Writes alone: 0.5 s against 0.6 (1.2x), 0.5 against 0.55 (1.1x),
        // 0.5 against 0.52 (1.04x); whole runs swing with the setup.
        let runs = |single_writes: [f64; 3]| {
            vec![vec![
                vec![
                    mem("batched", 1.5, Some(1.0)),
                    mem("batched", 1.0, Some(0.5)),
                    mem("batched", 2.5, Some(2.0)),
                ],
                single_writes
                    .iter()
                    .map(|w| mem("single", 1.0 + w, Some(1.0)))
                    .collect(),
            ]]
        };
        let (specs, targets) = ([spec], [target]);
        let s = evaluate(&specs, &targets, &runs([0.6, 0.55, 0.52])).unwrap();
        let c = &s.targets[0];
        assert_eq!(c.met, Some(false), "{c:?}");
        assert!(
            (c.value.unwrap() - 0.5f64.recip() * 0.52).abs() < 1e-9,
            "{c:?}"
        );
        assert_eq!(c.per_run.len(), 3);
        let s = evaluate(&specs, &targets, &runs([0.6, 0.56, 0.58])).unwrap();
        assert_eq!(s.targets[0].met, Some(true), "{:?}", s.targets[0]);
        // A run whose setup was not timed apart: not checked.
        let mut r = runs([0.6, 0.56, 0.58]);
        r[0][1][0].timing.setup_s = None;
        let s = evaluate(&specs, &targets, &r).unwrap();
        assert_eq!(s.targets[0].met, None, "{:?}", s.targets[0]);
        assert!(s.targets[0].detail.starts_with("not checked"));
    }
}
