//! A scenario's table of ratios and targets: one row per ratio it reports
//! and per target it holds its engines to, each naming its engines by
//! role (`E`: the scenario's own roles, as "the foliocache engine that
//! copies"), its job by name, and its bound. Each scenario keeps its table
//! in a `const TARGETS`; [`judge`] resolves it against the engines that
//! run, in the table's order, into the [`RatioSpec`]s reported and the
//! [`TargetSpec`]s checked.
//!
//! ```text
//! bandwidth(Folio, Memcpy).of(READ_4K).at_least(0.95)
//! ^ figure  ^ engines (roles)  ^ job      ^ bound, held
//! ```

pub use crate::report::JobName;

/// What a row of a table measures, and of which engines (`E`: roles in
/// the table, labels once resolved) and job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Figure<E> {
    /// `numerator / denominator` bandwidth, paired round by round: a ratio
    /// the scenario reports; held, its median over the rounds at least the
    /// bound. Of `job`, or (`None`) of the first job that ran each engine.
    Bandwidth {
        /// The engine above the line.
        numerator: E,
        /// The engine below it.
        denominator: E,
        /// The job whose runs it pairs.
        job: Option<JobName>,
    },
    /// The same ratio of the writes alone (each run's time less its setup,
    /// [`crate::report::Ratio`]'s `writes_alone_per_round`: a memory job of
    /// two foliocache engines): at least the bound in every round.
    WritesAlone {
        /// The engine above the line.
        numerator: E,
        /// The engine below it.
        denominator: E,
    },
    /// Every timeline interval of each of `engine`'s runs of `job` after
    /// the first at least the bound times the run's median interval (per
    /// second where runs last 4 s or more, else per finer interval).
    Flat {
        /// The engine.
        engine: E,
        /// The job.
        job: JobName,
    },
    /// CPU seconds per GiB of `engine` over `than`'s in `job`, median of
    /// the rounds: at most the bound.
    CpuPerGib {
        /// The engine measured.
        engine: E,
        /// The engine it is held against.
        than: E,
        /// The job.
        job: JobName,
    },
    /// CPU microseconds per read of `engine` in `job` less `than`'s,
    /// median of the rounds: at most the bound.
    CpuPerRead {
        /// The engine measured.
        engine: E,
        /// The engine it is held against.
        than: E,
        /// The job.
        job: JobName,
    },
    /// How many percentage points `engine`'s hit ratio in `job` is below
    /// an exact LRU's of its capacity over the same offsets: at most the
    /// bound in every run (above it is better, and met).
    LruGap {
        /// The engine (a foliocache one).
        engine: E,
        /// The job (a zipfian one).
        job: JobName,
    },
    /// `engine`'s read amplification: at most the bound in every run of
    /// every job.
    ReadAmplification {
        /// The engine.
        engine: E,
    },
    /// foliocache `engine`'s memory (`Cache::memory`: arena and
    /// bookkeeping) after every run of every job: at most the bound, in
    /// bytes.
    Memory {
        /// The engine (a foliocache one).
        engine: E,
    },
    /// The hot reader's hit ratio beside `engine` in `job`: at least the
    /// bound in every run.
    HitRatio {
        /// The engine.
        engine: E,
        /// The job (one with a hot reader).
        job: JobName,
    },
}

impl<E> Figure<E> {
    /// Whether the figure is held to at least its bound (else at most).
    pub const fn at_least(&self) -> bool {
        matches!(
            self,
            Figure::Bandwidth { .. }
                | Figure::WritesAlone { .. }
                | Figure::Flat { .. }
                | Figure::HitRatio { .. }
        )
    }

    /// The engine the figure is of: the numerator of a ratio.
    pub fn engine(&self) -> &E {
        match self {
            Figure::Bandwidth { numerator, .. } | Figure::WritesAlone { numerator, .. } => {
                numerator
            }
            Figure::Flat { engine, .. }
            | Figure::CpuPerGib { engine, .. }
            | Figure::CpuPerRead { engine, .. }
            | Figure::LruGap { engine, .. }
            | Figure::ReadAmplification { engine }
            | Figure::Memory { engine }
            | Figure::HitRatio { engine, .. } => engine,
        }
    }

    /// The job the figure is of (`None`: the first job that ran each
    /// engine, or every job).
    #[cfg(test)]
    pub fn job(&self) -> Option<JobName> {
        match self {
            Figure::Bandwidth { job, .. } => *job,
            Figure::Flat { job, .. }
            | Figure::CpuPerGib { job, .. }
            | Figure::CpuPerRead { job, .. }
            | Figure::LruGap { job, .. }
            | Figure::HitRatio { job, .. } => Some(job),
            Figure::WritesAlone { .. }
            | Figure::ReadAmplification { .. }
            | Figure::Memory { .. } => None,
        }
    }

    /// The figure of the engines `label` gives for its roles; `None` where
    /// one of them does not run.
    fn resolve<F>(&self, label: impl Fn(&E) -> Option<F>) -> Option<Figure<F>> {
        Some(match self {
            Figure::Bandwidth {
                numerator,
                denominator,
                job,
            } => Figure::Bandwidth {
                numerator: label(numerator)?,
                denominator: label(denominator)?,
                job: *job,
            },
            Figure::WritesAlone {
                numerator,
                denominator,
            } => Figure::WritesAlone {
                numerator: label(numerator)?,
                denominator: label(denominator)?,
            },
            Figure::Flat { engine, job } => Figure::Flat {
                engine: label(engine)?,
                job,
            },
            Figure::CpuPerGib { engine, than, job } => Figure::CpuPerGib {
                engine: label(engine)?,
                than: label(than)?,
                job,
            },
            Figure::CpuPerRead { engine, than, job } => Figure::CpuPerRead {
                engine: label(engine)?,
                than: label(than)?,
                job,
            },
            Figure::LruGap { engine, job } => Figure::LruGap {
                engine: label(engine)?,
                job,
            },
            Figure::ReadAmplification { engine } => Figure::ReadAmplification {
                engine: label(engine)?,
            },
            Figure::Memory { engine } => Figure::Memory {
                engine: label(engine)?,
            },
            Figure::HitRatio { engine, job } => Figure::HitRatio {
                engine: label(engine)?,
                job,
            },
        })
    }
}

/// A row's bound, and whether it is held.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    /// No bound: a ratio reported for what it tells.
    None,
    /// Held: the figure at least this (at most, for a figure that must be
    /// low: [`Figure::at_least`]), and a ratio shows it as its target.
    Held(f64),
    /// Shown beside the ratio as its target, not checked.
    Shown(f64),
    /// Held with `--consume`; without it, a ratio reported for what it
    /// tells.
    HeldWithConsume(f64),
    /// Held at most to the scenario's memory budget ([`Given::budget`]).
    Budget,
}

/// A row of a scenario's table: a figure of its engines and jobs, and its
/// bound.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Target<E> {
    /// What is measured, of which engines and job.
    pub figure: Figure<E>,
    /// Its bound.
    pub bound: Bound,
}

/// A row of `figure` with no bound yet.
const fn row<E: Copy>(figure: Figure<E>) -> Target<E> {
    Target {
        figure,
        bound: Bound::None,
    }
}

/// `numerator / denominator` bandwidth, of the first job that ran each
/// ([`Target::of`] names one).
pub const fn bandwidth<E: Copy>(numerator: E, denominator: E) -> Target<E> {
    row(Figure::Bandwidth {
        numerator,
        denominator,
        job: None,
    })
}

/// [`Figure::WritesAlone`].
pub const fn writes_alone<E: Copy>(numerator: E, denominator: E) -> Target<E> {
    row(Figure::WritesAlone {
        numerator,
        denominator,
    })
}

/// [`Figure::Flat`].
pub const fn flat<E: Copy>(engine: E, job: JobName) -> Target<E> {
    row(Figure::Flat { engine, job })
}

/// [`Figure::CpuPerGib`].
pub const fn cpu_per_gib<E: Copy>(engine: E, than: E, job: JobName) -> Target<E> {
    row(Figure::CpuPerGib { engine, than, job })
}

/// [`Figure::CpuPerRead`].
pub const fn cpu_per_read<E: Copy>(engine: E, than: E, job: JobName) -> Target<E> {
    row(Figure::CpuPerRead { engine, than, job })
}

/// [`Figure::LruGap`].
pub const fn lru_gap<E: Copy>(engine: E, job: JobName) -> Target<E> {
    row(Figure::LruGap { engine, job })
}

/// [`Figure::ReadAmplification`].
pub const fn read_amplification<E: Copy>(engine: E) -> Target<E> {
    row(Figure::ReadAmplification { engine })
}

/// [`Figure::Memory`].
pub const fn memory<E: Copy>(engine: E) -> Target<E> {
    row(Figure::Memory { engine })
}

/// [`Figure::HitRatio`].
pub const fn hit_ratio<E: Copy>(engine: E, job: JobName) -> Target<E> {
    row(Figure::HitRatio { engine, job })
}

impl<E: Copy> Target<E> {
    /// The ratio of `job`'s runs (a bandwidth row only: a table that says
    /// otherwise does not compile).
    pub const fn of(mut self, job: JobName) -> Self {
        match &mut self.figure {
            Figure::Bandwidth { job: j, .. } => *j = Some(job),
            _ => panic!("only a bandwidth row is of a job it is given"),
        }
        self
    }

    /// Held to at least `bound` (a figure that must be high).
    pub const fn at_least(self, bound: f64) -> Self {
        let fits = self.figure.at_least();
        self.bounded(Bound::Held(bound), fits)
    }

    /// Held to at most `bound` (a figure that must be low).
    pub const fn at_most(self, bound: f64) -> Self {
        let fits = !self.figure.at_least();
        self.bounded(Bound::Held(bound), fits)
    }

    /// At most the scenario's memory budget (a figure that must be low).
    pub const fn within_budget(self) -> Self {
        let fits = !self.figure.at_least();
        self.bounded(Bound::Budget, fits)
    }

    /// `bound` shown beside the ratio, not checked (a bandwidth row).
    pub const fn shown(self, bound: f64) -> Self {
        let fits = matches!(self.figure, Figure::Bandwidth { .. });
        self.bounded(Bound::Shown(bound), fits)
    }

    /// Held to at least `bound` with `--consume` (a bandwidth row).
    pub const fn at_least_with_consume(self, bound: f64) -> Self {
        let fits = matches!(self.figure, Figure::Bandwidth { .. });
        self.bounded(Bound::HeldWithConsume(bound), fits)
    }

    /// The row with `bound`, which `fits` its figure (a table that gives a
    /// figure a bound it does not take does not compile).
    const fn bounded(mut self, bound: Bound, fits: bool) -> Self {
        assert!(fits, "a bound this row's figure does not take");
        self.bound = bound;
        self
    }
}

/// A bandwidth ratio a scenario reports: `numerator / denominator`, by
/// engine label.
#[derive(Debug, Clone, PartialEq)]
pub struct RatioSpec {
    /// The engine above the line.
    pub numerator: String,
    /// The engine below it.
    pub denominator: String,
    /// The bound it is held or shown against, if any.
    pub target: Option<f64>,
    /// The job whose runs it pairs; `None`: the first job that ran each
    /// engine.
    pub job: Option<JobName>,
}

/// A target a scenario checks: a figure of its engines, by label, and its
/// bound.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetSpec {
    /// What is measured, of which engines and job.
    pub figure: Figure<String>,
    /// At least this, or at most ([`Figure::at_least`]).
    pub bound: f64,
}

/// What a table's bounds depend on beyond the table.
#[derive(Debug, Clone, Copy, Default)]
pub struct Given {
    /// `--consume` ([`Bound::HeldWithConsume`]).
    pub consume: bool,
    /// The scenario's memory budget, in bytes ([`Bound::Budget`]).
    pub budget: Option<u64>,
}

/// A scenario's ratios and targets, resolved to the engines that run.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Judged {
    /// The ratios to report, in the table's order.
    pub ratios: Vec<RatioSpec>,
    /// The targets to check, in the table's order.
    pub targets: Vec<TargetSpec>,
}

/// Resolves a scenario's `table` against its engines: `label` gives the
/// label of the engine playing a role (`None`: none does, and the rows of
/// that role are left out). Every bandwidth row is a ratio reported, with
/// its bound as its target where it is held or shown; every held row a
/// target checked.
pub fn judge<E: Copy>(
    table: &[Target<E>],
    label: impl Fn(E) -> Option<String>,
    given: Given,
) -> Judged {
    let mut judged = Judged::default();
    for t in table {
        let Some(figure) = t.figure.resolve(|e| label(*e)) else {
            continue;
        };
        let (shown, held) = match t.bound {
            Bound::None => (None, None),
            Bound::Held(b) => (Some(b), Some(b)),
            Bound::Shown(b) => (Some(b), None),
            Bound::HeldWithConsume(b) if given.consume => (Some(b), Some(b)),
            Bound::HeldWithConsume(_) => (None, None),
            Bound::Budget => (None, given.budget.map(|b| b as f64)),
        };
        if let Figure::Bandwidth {
            numerator,
            denominator,
            job,
        } = &figure
        {
            judged.ratios.push(RatioSpec {
                numerator: numerator.clone(),
                denominator: denominator.clone(),
                target: shown,
                job: *job,
            });
        }
        if let Some(bound) = held {
            judged.targets.push(TargetSpec { figure, bound });
        }
    }
    judged
}
