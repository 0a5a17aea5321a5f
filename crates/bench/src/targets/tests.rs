//! Ratios paired round by round, targets checked over every round, and a
//! table resolved against the engines that run.

use super::*;
use crate::report::{self, Perf, RunJob};

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

/// The runs of job `job`, `engines[engine][round]`.
fn job(job: JobName, engines: Vec<Vec<RunRecord>>) -> JobRuns {
    JobRuns { job, engines }
}

#[test]
fn summary_ratios_pair_runs_of_a_round_across_jobs() {
    // Job a: foliocache and kernel; job b: direct. Two rounds.
    let runs = vec![
        job(
            "a",
            vec![
                vec![rec("foliocache", 200.0), rec("foliocache", 100.0)],
                vec![rec("kernel", 100.0), rec("kernel", 100.0)],
            ],
        ),
        job("b", vec![vec![rec("direct", 400.0), rec("direct", 100.0)]]),
    ];
    let spec = |n: &str, d: &str, t, job| RatioSpec {
        numerator: n.into(),
        denominator: d.into(),
        target: t,
        job,
    };
    let s = summarise(
        &[
            spec("foliocache", "kernel", Some(1.0), None),
            spec("foliocache", "direct", Some(0.9), None),
            spec("foliocache", "mmap", None, None),
            spec("foliocache", "direct", None, Some("a")),
        ],
        &runs,
    )
    .unwrap();
    assert_eq!(
        s.ratios.len(),
        2,
        "a ratio of an engine not run, or not in its job, is left out"
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
    const TABLE: &[Target<&str>] = &[
        bandwidth("batched", "single").at_least(1.0),
        writes_alone("batched", "single").at_least(1.1),
    ];
    let Judged { ratios, targets } = judge(TABLE, |e| Some(e.to_string()), Given::default());
    // Writes alone: 0.5 s against 0.6 (1.2x), 0.5 against 0.55 (1.1x),
    // 0.5 against 0.52 (1.04x); whole runs swing with the setup.
    let runs = |single_writes: [f64; 3]| {
        vec![job(
            "populate",
            vec![
                vec![
                    mem("batched", 1.5, Some(1.0)),
                    mem("batched", 1.0, Some(0.5)),
                    mem("batched", 2.5, Some(2.0)),
                ],
                single_writes
                    .iter()
                    .map(|w| mem("single", 1.0 + w, Some(1.0)))
                    .collect(),
            ],
        )]
    };
    let writes = |s: &Summary| s.targets[1].clone();
    let s = evaluate(&ratios, &targets, &runs([0.6, 0.55, 0.52])).unwrap();
    let c = writes(&s);
    assert_eq!(c.met, Some(false), "{c:?}");
    assert!(
        (c.value.unwrap() - 0.5f64.recip() * 0.52).abs() < 1e-9,
        "{c:?}"
    );
    assert_eq!(c.per_run.len(), 3);
    let s = evaluate(&ratios, &targets, &runs([0.6, 0.56, 0.58])).unwrap();
    assert_eq!(writes(&s).met, Some(true), "{:?}", writes(&s));
    // A run whose setup was not timed apart: not checked.
    let mut r = runs([0.6, 0.56, 0.58]);
    r[0].engines[1][0].timing.setup_s = None;
    let s = evaluate(&ratios, &targets, &r).unwrap();
    assert_eq!(writes(&s).met, None, "{:?}", writes(&s));
    assert!(writes(&s).detail.starts_with("not checked"));
}

#[test]
fn a_table_resolves_in_its_order_to_the_engines_that_run() {
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Role {
        Folio,
        Kernel,
        Pin,
    }
    const TABLE: &[Target<Role>] = &[
        flat(Role::Folio, "alone").at_least(0.8),
        bandwidth(Role::Folio, Role::Kernel).of("big").at_least(1.1),
        bandwidth(Role::Pin, Role::Kernel).of("big").at_least(1.2),
        bandwidth(Role::Kernel, Role::Folio).shown(0.5),
        bandwidth(Role::Folio, Role::Pin).at_least_with_consume(2.0),
        cpu_per_read(Role::Folio, Role::Kernel, "big").at_most(1.0),
        memory(Role::Folio).within_budget(),
        bandwidth(Role::Kernel, Role::Pin),
    ];
    let label = |r| match r {
        Role::Folio => Some("foliocache".to_string()),
        Role::Kernel => Some("kernel".to_string()),
        Role::Pin => None,
    };
    let j = judge(
        TABLE,
        label,
        Given {
            consume: true,
            budget: Some(64),
        },
    );
    let ratios: Vec<(&str, &str, Option<f64>, Option<JobName>)> = j
        .ratios
        .iter()
        .map(|r| (&*r.numerator, &*r.denominator, r.target, r.job))
        .collect();
    // No pin: its rows are left out; a shown bound is a ratio's target
    // only.
    assert_eq!(
        ratios,
        [
            ("foliocache", "kernel", Some(1.1), Some("big")),
            ("kernel", "foliocache", Some(0.5), None),
        ]
    );
    let targets: Vec<(Option<JobName>, bool, f64)> = j
        .targets
        .iter()
        .map(|t| (t.figure.job(), t.figure.at_least(), t.bound))
        .collect();
    assert_eq!(
        targets,
        [
            (Some("alone"), true, 0.8),
            (Some("big"), true, 1.1),
            (Some("big"), false, 1.0),
            (None, false, 64.0),
        ]
    );
    // Without --consume a bound held with it is no bound.
    let label = |r| Some(format!("{r:?}"));
    let j = judge(TABLE, label, Given::default());
    let pin = j
        .ratios
        .iter()
        .find(|r| r.numerator == "Folio" && r.denominator == "Pin");
    assert_eq!(pin.map(|r| r.target), Some(None));
    assert!(!j.targets.iter().any(|t| t.bound == 2.0));
    // Without a budget, no memory target.
    assert!(!j
        .targets
        .iter()
        .any(|t| matches!(t.figure, Figure::Memory { .. })));
}
