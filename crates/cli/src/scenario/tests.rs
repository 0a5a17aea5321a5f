//! The plans the command line and the scenarios resolve into.

use clap::Parser;
use foliocache::internals::Insert;

use super::populate::{POPULATE_FOLIO, POPULATE_LARGE, POPULATE_SETTLE, POPULATE_SINGLE};
use super::uncached::DEFAULT_HOT_RATE;
use super::*;
use crate::args::{Cli, Command};
use crate::spec::HotSpec;

/// Every scenario's built-in engine list given as text, by scenario
/// (seqread's and randread's are typed: [`CachedReads::ENGINES`]).
const BUILTIN_ENGINES: [(&str, &[&str]); 6] = [
    ("larger", larger::ENGINES),
    ("larger qd=32", larger::QD_ENGINES),
    ("readahead", readahead::ENGINES),
    ("uncached", uncached::ENGINES),
    ("populate", populate::ENGINES),
    ("write", write::ENGINES),
];

#[test]
fn every_builtin_engine_spec_parses() {
    for (scenario, list) in BUILTIN_ENGINES {
        let engines = builtin_engines(list).unwrap_or_else(|e| panic!("{scenario}: {e}"));
        let labels: Vec<&str> = engines.iter().map(|e| e.label.as_str()).collect();
        assert_eq!(labels, list, "{scenario}");
    }
    // A bad spec in a built-in list is an error, never dropped.
    let e = builtin_engines(&["foliocache", "foliocache[bogus]", "kernel"]).unwrap_err();
    assert!(
        e.starts_with("built-in engine `foliocache[bogus]`: "),
        "{e}"
    );
    assert!(builtin_engines(&["kernal"]).is_err());
}

fn plan_of(args: &[&str]) -> Plan {
    let mut argv = vec!["foliocache", "bench"];
    argv.extend_from_slice(args);
    let Command::Bench(b) = Cli::try_parse_from(argv).unwrap().command else {
        unreachable!("a bench command line")
    };
    plan(&b).unwrap()
}

/// A scenario's ratios: numerator, denominator, target.
fn ratios_of(sc: &Scenario) -> Vec<(&str, &str, Option<f64>)> {
    sc.ratios
        .iter()
        .map(|r| (r.numerator.as_str(), r.denominator.as_str(), r.target))
        .collect()
}

fn labels(j: &JobSpec) -> Vec<&str> {
    j.engines.iter().map(|e| e.label.as_str()).collect()
}

#[test]
fn readahead_is_cold_one_pass_with_direct_at_1mib() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let p = plan_of(&["--scenario", "readahead", "--quick"]);
    assert_eq!(p.repeat, 2);
    assert!(!p.cold, "--cold was not given");
    let sc = &p.scenarios[0];
    assert_eq!(sc.jobs.len(), 2);
    let (a, b) = (&sc.jobs[0], &sc.jobs[1]);
    assert_eq!(
        labels(a),
        ["foliocache", "foliocache[insert=single]", "kernel"]
    );
    assert_eq!(labels(b), ["direct"]);
    for (j, bs) in [(a, 128 << 10), (b, 1 << 20)] {
        assert_eq!(j.bs, bs);
        assert_eq!(j.numjobs, 2 * cpus);
        assert!(!j.shared);
        assert!(j.cold);
        assert!(j.runtime.is_none());
        assert_eq!(j.file_size, 256 << 20);
    }
    let r = ratios_of(sc);
    assert_eq!(
        r,
        [
            ("foliocache", "kernel", Some(1.0)),
            ("foliocache", "direct", Some(0.9)),
            ("foliocache", "foliocache[insert=single]", Some(1.0)),
        ]
    );
    let full = plan_of(&["--scenario", "readahead"]);
    assert_eq!(full.scenarios[0].jobs[0].file_size, 1 << 30);
    // --runtime does not make it time-based; --size sets each file.
    let p = plan_of(&["--scenario", "readahead", "--runtime", "1", "--size", "8M"]);
    assert!(p.scenarios[0].jobs.iter().all(|j| j.runtime.is_none()));
    assert!(p.scenarios[0].jobs.iter().all(|j| j.file_size == 8 << 20));
}

#[test]
fn readahead_with_given_engines() {
    let p = plan_of(&[
        "--scenario",
        "readahead",
        "--engine",
        "foliocache[io=threads]",
        "--engine",
        "kernel",
    ]);
    let sc = &p.scenarios[0];
    assert_eq!(sc.jobs.len(), 1, "no direct, no 1 MiB job");
    assert_eq!(sc.ratios.len(), 1);
    assert_eq!(sc.ratios[0].numerator, "foliocache[io=threads]");
    assert_eq!(sc.ratios[0].target, None);
    let p = plan_of(&["--scenario", "readahead", "--engine", "direct"]);
    assert_eq!(p.scenarios[0].jobs.len(), 1);
    assert_eq!(p.scenarios[0].jobs[0].bs, 1 << 20);
    assert!(p.scenarios[0].ratios.is_empty());
}

#[test]
fn the_default_run_has_every_scenario_and_only_readahead_uncached_and_populate_are_cold() {
    let p = plan_of(&[]);
    assert!(p.quick);
    let names: Vec<&str> = p.scenarios.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, SCENARIOS);
    for s in &p.scenarios {
        for j in &s.jobs {
            let cold = ["readahead", "uncached", "populate"].contains(&s.name.as_str());
            assert_eq!(j.cold, cold, "{}", s.name);
        }
    }
    let p = plan_of(&["--seeds", "--cold"]);
    assert!(p.scenarios.iter().flat_map(|s| &s.jobs).all(|j| j.cold));
}

#[test]
fn uncached_streams_4c_through_c_alone_then_beside_a_hot_c_over_4() {
    let p = plan_of(&["--scenario", "uncached", "--quick"]);
    let sc = &p.scenarios[0];
    assert!(sc.detailed);
    assert_eq!(sc.jobs.len(), 2);
    let c = 256 << 20;
    for (i, j) in sc.jobs.iter().enumerate() {
        assert_eq!(
            labels(j),
            ["foliocache", "foliocache[dontcache]", "kernel", "dontcache"]
        );
        assert_eq!((j.rw, j.bs, j.numjobs), (Rw::Read, 64 << 10, 1));
        assert_eq!(j.file_size, 4 * c);
        assert_eq!((j.capacity, j.memory_limit), (Some(c), Some(c)));
        assert!(j.cold && j.runtime.is_none());
        assert_eq!(j.interval(), Duration::from_millis(50));
        let hot = (i == 1).then_some(HotSpec {
            file_size: c / 4,
            bs: 4096,
            rate: DEFAULT_HOT_RATE,
        });
        assert_eq!(j.hot, hot);
    }
    assert!(
        sc.jobs[1]
            .title()
            .ends_with(&format!("+ hot randread 4KiB at {DEFAULT_HOT_RATE}/s")),
        "{}",
        sc.jobs[1].title()
    );
    let r = ratios_of(sc);
    assert_eq!(
        r,
        [
            ("foliocache[dontcache]", "foliocache", Some(1.0)),
            ("foliocache[dontcache]", "dontcache", Some(1.0)),
            ("foliocache[dontcache]", "kernel", None),
            ("foliocache", "kernel", None),
            ("dontcache", "kernel", None),
        ]
    );
    assert_eq!(sc.targets.len(), 5);
    assert!(matches!(&sc.targets[0], TargetSpec::Flat { job: 0, min, .. } if *min == 0.8));
    assert!(matches!(&sc.targets[4], TargetSpec::HitRatio { job: 1, min, .. } if *min == 0.99));
    // Full size; --capacity sets C; --size sets the stream and C to a
    // quarter of it.
    let full = plan_of(&["--scenario", "uncached"]);
    assert_eq!(full.scenarios[0].jobs[0].file_size, 4 << 30);
    let p = plan_of(&["--scenario", "uncached", "--capacity", "16M"]);
    let j = &p.scenarios[0].jobs[1];
    assert_eq!((j.file_size, j.capacity), (64 << 20, Some(16 << 20)));
    assert_eq!(j.hot.map(|h| h.file_size), Some(4 << 20));
    let p = plan_of(&["--scenario", "uncached", "--size", "8M"]);
    let j = &p.scenarios[0].jobs[0];
    assert_eq!((j.file_size, j.memory_limit), (8 << 20, Some(2 << 20)));
}

#[test]
fn hot_rate_paces_the_hot_reader_and_needs_one() {
    let rate = |p: &Plan| p.scenarios[0].jobs[1].hot.map(|h| h.rate);
    let p = plan_of(&["--scenario", "uncached", "--hot-rate", "1000"]);
    assert_eq!(rate(&p), Some(1000));
    assert!(p.scenarios[0].description.contains("1000 reads/s"));
    let p = plan_of(&["--scenario", "uncached", "--hot-rate", "0"]);
    assert_eq!(rate(&p), Some(0));
    assert!(p.scenarios[0].jobs[1]
        .title()
        .ends_with("hot randread 4KiB"));
    assert!(p.scenarios[0].description.contains("as fast as it can"));
    // The seeds include uncached; a scenario without a hot reader, or a
    // custom job, does not take it.
    plan_of(&["--seeds", "--hot-rate", "10"]);
    for argv in [
        &["--scenario", "seqread", "--hot-rate", "10"][..],
        &["--rw", "read", "--hot-rate", "10"],
    ] {
        let mut a = vec!["foliocache", "bench"];
        a.extend_from_slice(argv);
        let Command::Bench(b) = Cli::try_parse_from(a).unwrap().command else {
            unreachable!("a bench command line")
        };
        assert!(plan(&b).unwrap_err().contains("--hot-rate"), "{argv:?}");
    }
}

#[test]
fn uncached_targets_follow_the_engines_given() {
    let p = plan_of(&[
        "--scenario",
        "uncached",
        "--engine",
        "foliocache[dontcache,ra=kernel]",
        "--engine",
        "kernel",
    ]);
    let sc = &p.scenarios[0];
    assert_eq!(sc.ratios.len(), 1, "only over kernel");
    let kinds: Vec<&str> = sc
        .targets
        .iter()
        .map(|t| match t {
            TargetSpec::Flat { .. } => "flat",
            TargetSpec::Bandwidth { .. } => "bw",
            TargetSpec::WritesAlone { .. } => "writes",
            TargetSpec::CpuPerGib { .. } => "cpu",
            TargetSpec::HitRatio { .. } => "hits",
            TargetSpec::CpuPerRead { .. }
            | TargetSpec::LruGap { .. }
            | TargetSpec::ReadAmplification { .. }
            | TargetSpec::Memory { .. } => "per read",
        })
        .collect();
    assert_eq!(
        kinds,
        ["flat", "hits"],
        "no cached or dontcache engine to beat"
    );
    let p = plan_of(&["--scenario", "uncached", "--engine", "kernel"]);
    assert!(p.scenarios[0].targets.is_empty());
}

#[test]
fn populate_fills_fresh_memory_once_in_2mib_writes() {
    let p = plan_of(&["--scenario", "populate", "--quick"]);
    let sc = &p.scenarios[0];
    assert_eq!(sc.jobs.len(), 1);
    let j = &sc.jobs[0];
    assert_eq!(
        labels(j),
        [
            POPULATE_FOLIO,
            POPULATE_SINGLE,
            POPULATE_LARGE,
            "anon",
            "anon[thp]",
            "kernel"
        ]
    );
    // The two that the grab target compares differ only in the insert
    // mode; the large-folio row only in the folio size.
    let e = &j.engines;
    assert_eq!((e[0].folio.huge, e[0].folio.max_folio), (false, Some(4096)));
    assert_eq!(e[0].folio.populate, foliocache::Populate::Eager);
    assert_eq!(e[0].folio.grab, Insert::Batched);
    let mut single = e[1].folio.clone();
    single.grab = Insert::Batched;
    assert_eq!(single, e[0].folio);
    let mut large = e[2].folio.clone();
    large.max_folio = Some(4096);
    assert_eq!(large, e[0].folio);
    assert_eq!((j.rw, j.bs, j.numjobs), (Rw::Write, 2 << 20, 1));
    assert_eq!(j.file_size, 1 << 30);
    assert_eq!(j.capacity, Some(1 << 30), "no more arena than the data");
    assert!(j.memory && j.cold && j.runtime.is_none());
    assert_eq!(j.settle, Some(POPULATE_SETTLE));
    let r = ratios_of(sc);
    assert_eq!(
        r,
        [
            (POPULATE_FOLIO, "anon", Some(1.0 / 1.05)),
            (POPULATE_FOLIO, POPULATE_SINGLE, Some(1.0)),
            (POPULATE_LARGE, "anon", None),
            (POPULATE_FOLIO, POPULATE_LARGE, None),
            (POPULATE_FOLIO, "anon[thp]", None),
            (POPULATE_FOLIO, "kernel", None),
            ("kernel", "anon", None),
        ]
    );
    // Engines given by their options in another order are found.
    let p = plan_of(&[
        "--scenario",
        "populate",
        "--engine",
        "foliocache[grab=single,folio=4k,huge=off]",
        "--engine",
        "foliocache[folio=4k,huge=off]",
    ]);
    let r = &p.scenarios[0].ratios;
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0].numerator.as_str(), r[0].denominator.as_str()),
        (
            "foliocache[folio=4k,huge=off]",
            "foliocache[grab=single,folio=4k,huge=off]"
        )
    );
    // Against anon on time; against one folio at a time on whole runs
    // (median) and on the writes alone (every round).
    assert_eq!(sc.targets.len(), 3);
    assert_eq!(
        sc.targets[2],
        TargetSpec::WritesAlone {
            numerator: POPULATE_FOLIO.into(),
            denominator: POPULATE_SINGLE.into(),
            min: 1.1,
        }
    );
    assert_eq!(
        plan_of(&["--scenario", "populate"]).scenarios[0].jobs[0].file_size,
        3 << 30
    );
    // --size: whole 2 MiB writes (a smaller size is one write).
    let j = &plan_of(&["--scenario", "populate", "--size", "5M"]).scenarios[0].jobs[0];
    assert_eq!((j.file_size, j.bs), (4 << 20, 2 << 20));
    let j = &plan_of(&["--scenario", "populate", "--size", "101k"]).scenarios[0].jobs[0];
    assert_eq!((j.file_size, j.bs), (100 << 10, 100 << 10));
}

#[test]
fn write_runs_seq_and_random_writes_with_per_job_ratios() {
    let p = plan_of(&["--scenario", "write", "--quick"]);
    let sc = &p.scenarios[0];
    let jobs: Vec<(Rw, u64, u64, bool)> = sc
        .jobs
        .iter()
        .map(|j| (j.rw, j.bs, j.file_size, j.memory))
        .collect();
    assert_eq!(
        jobs,
        [
            (Rw::Write, 64 << 10, 128 << 20, false),
            (Rw::Randwrite, 4096, 16 << 20, false)
        ]
    );
    for j in &sc.jobs {
        assert_eq!(
            labels(j),
            [
                "foliocache",
                "foliocache[dontcache]",
                "kernel",
                "direct",
                "dontcache"
            ]
        );
        assert!(j.runtime.is_none() && !j.cold && j.settle.is_none());
    }
    let first = &sc.ratios[0];
    assert_eq!(
        (first.numerator.as_str(), first.denominator.as_str()),
        ("foliocache", "kernel")
    );
    assert_eq!((first.target, first.job), (Some(1.3), Some(0)));
    assert!(sc.ratios.iter().any(|r| r.job == Some(1)
        && r.numerator == "foliocache"
        && r.denominator == "kernel"
        && r.target == Some(1.0)));
    let target = |job, min| TargetSpec::Bandwidth {
        numerator: "foliocache".into(),
        denominator: "kernel".into(),
        job: Some(job),
        min,
    };
    assert_eq!(sc.targets, [target(0, 1.3), target(1, 1.0)]);
    let p = plan_of(&["--scenario", "write", "--runtime", "2", "--cold"]);
    assert!(p.scenarios[0]
        .jobs
        .iter()
        .all(|j| j.runtime == Some(Duration::from_secs(2)) && j.cold));
    assert_eq!(p.scenarios[0].jobs[0].file_size, 1 << 30);
}

#[test]
fn memory_engines_only_where_they_apply() {
    let err = |argv: &[&str]| {
        let mut a = vec!["foliocache", "bench"];
        a.extend_from_slice(argv);
        let Command::Bench(b) = Cli::try_parse_from(a).unwrap().command else {
            unreachable!("a bench command line")
        };
        plan(&b).unwrap_err()
    };
    assert!(err(&["--rw", "write", "--engine", "anon"]).contains("only populates memory"));
    assert!(
        err(&["--scenario", "populate", "--engine", "direct"]).contains("does not populate memory")
    );
    // qd=N engines only read.
    for e in ["foliocache[qd=32]", "direct[qd=8]"] {
        assert!(err(&["--rw", "randwrite", "--engine", e]).contains("only read"));
    }
    assert!(err(&["--scenario", "populate", "--engine", "foliocache[qd=4]"]).contains("only read"));
    // grab= is a write's insert mode: any write job takes it.
    let p = plan_of(&["--rw", "write", "--engine", "foliocache[grab=single]"]);
    assert_eq!(p.scenarios[0].jobs[0].engines[0].folio.grab, Insert::Single);
    // The custom job's default engines leave anon out, and memcpy out of
    // writes; memcpy asked for a write is refused.
    let p = plan_of(&["--rw", "write"]);
    assert_eq!(
        labels(&p.scenarios[0].jobs[0]),
        ["foliocache", "kernel", "direct", "dontcache", "mmap"]
    );
    let p = plan_of(&["--rw", "randread"]);
    assert_eq!(
        labels(&p.scenarios[0].jobs[0]),
        [
            "foliocache",
            "kernel",
            "direct",
            "dontcache",
            "mmap",
            "memcpy"
        ]
    );
    assert!(err(&["--rw", "write", "--engine", "memcpy"]).contains("read jobs only"));
}

/// A scenario's bandwidth targets of engine `numerator`: (denominator,
/// minimum, job).
fn bandwidth_targets(sc: &Scenario, numerator: &str) -> Vec<(String, f64, Option<usize>)> {
    sc.targets
        .iter()
        .filter_map(|t| match t {
            TargetSpec::Bandwidth {
                numerator: n,
                denominator,
                min,
                job,
            } if n == numerator => Some((denominator.clone(), *min, *job)),
            _ => None,
        })
        .collect()
}

#[test]
fn cached_reads_hold_foliocache_to_the_copy_limits() {
    let p = plan_of(&["--scenario", "seqread", "--scenario", "randread", "--quick"]);
    let bandwidth = |sc: &Scenario| bandwidth_targets(sc, "foliocache");
    let t = |d: &str, min: f64, job: usize| (d.to_string(), min, Some(job));
    let (seq, rand) = (&p.scenarios[0], &p.scenarios[1]);
    for j in seq.jobs.iter().chain(&rand.jobs) {
        assert_eq!(labels(j)[..4], ["foliocache", "kernel", "mmap", "memcpy"]);
    }
    assert_eq!(
        bandwidth(seq),
        [
            t("memcpy", 0.95, 0),
            t("mmap", 1.0, 0),
            t("memcpy", 0.95, 1)
        ]
    );
    assert_eq!(bandwidth(rand), [t("memcpy", 0.95, 0), t("mmap", 1.0, 0)]);
    // Engines given without memcpy: no ratio to it, and no target.
    let p = plan_of(&[
        "--scenario",
        "randread",
        "--engine",
        "foliocache",
        "--engine",
        "mmap",
    ]);
    assert_eq!(bandwidth(&p.scenarios[0]), [t("mmap", 1.0, 0)]);
}

#[test]
fn consume_adds_the_pin_engine_and_holds_it_to_mmap() {
    let pin_targets = |sc: &Scenario| bandwidth_targets(sc, "foliocache[pin]");
    let p = plan_of(&["--scenario", "seqread", "--scenario", "randread", "--quick"]);
    for sc in &p.scenarios {
        assert!(!labels(&sc.jobs[0]).contains(&"foliocache[pin]"));
        assert!(!labels(&sc.jobs[0]).contains(&"memcpy[inplace]"));
        assert!(pin_targets(sc).is_empty());
    }
    let p = plan_of(&[
        "--scenario",
        "seqread",
        "--scenario",
        "randread",
        "--quick",
        "--consume",
    ]);
    assert!(p.consume);
    for sc in &p.scenarios {
        assert_eq!(
            labels(&sc.jobs[0]),
            [
                "foliocache",
                "foliocache[pin]",
                "kernel",
                "mmap",
                "memcpy",
                "memcpy[inplace]"
            ]
        );
        // The pin beside zero copy's limit, in every job, with no target;
        // foliocache's copy is still held to the copying memcpy.
        let r = ratios_of(sc);
        assert!(
            r.contains(&("foliocache[pin]", "memcpy[inplace]", None)),
            "{r:?}"
        );
        assert!(r.contains(&("foliocache", "memcpy", Some(0.95))), "{r:?}");
        assert!(!r
            .iter()
            .any(|&(n, d, _)| n == "foliocache" && d == "memcpy[inplace]"));
        // At 4 KiB (job 0), where mmap runs in the scenario's ratios.
        assert_eq!(pin_targets(sc), [("mmap".to_string(), 1.2, Some(0))]);
        // foliocache's own targets are still the copy's, not the pin's.
        assert!(sc.targets.iter().any(|t| matches!(t,
            TargetSpec::Bandwidth { numerator, denominator, .. }
                if numerator == "foliocache" && denominator == "memcpy")));
    }
}

#[test]
fn uncached_refuses_a_tiny_cache() {
    let mut argv = vec![
        "foliocache",
        "bench",
        "--scenario",
        "uncached",
        "--capacity",
        "512k",
    ];
    let Command::Bench(b) = Cli::try_parse_from(&argv).unwrap().command else {
        unreachable!("a bench command line")
    };
    let e = plan(&b).unwrap_err();
    assert!(e.contains("too small: at least 1MiB"), "{e}");
    argv.truncate(4);
    argv.extend(["--size", "1M"]);
    let Command::Bench(b) = Cli::try_parse_from(&argv).unwrap().command else {
        unreachable!("a bench command line")
    };
    assert!(plan(&b).unwrap_err().contains("too small"));
}

#[test]
fn larger_reads_4m_at_random_under_a_budget_of_m() {
    let p = plan_of(&["--scenario", "larger", "--quick"]);
    assert_eq!(p.repeat, 2, "engines interleaved and repeated");
    let sc = &p.scenarios[0];
    assert_eq!(sc.name, "larger");
    let m = 256u64 << 20;
    let cap = larger::folio_capacity(m);
    assert!(cap < m && cap >= m - m / 32 && cap % 4096 == 0, "{cap}");
    let shape: Vec<(String, usize)> = sc.jobs.iter().map(|j| (j.dist.name(), j.numjobs)).collect();
    assert_eq!(
        shape,
        [
            ("uniform".to_string(), 2),
            ("uniform".to_string(), 8),
            ("zipf 0.99".to_string(), 2),
            ("zipf 0.99".to_string(), 8),
            ("uniform".to_string(), 1)
        ]
    );
    let (threaded, qd) = sc.jobs.split_at(4);
    assert_eq!(
        labels(&qd[0]),
        ["foliocache[qd=32]", "direct[qd=32]", "foliocache"]
    );
    assert_eq!(
        qd[0].engines.iter().map(|e| e.qd).collect::<Vec<_>>(),
        [Some(32), Some(32), None]
    );
    for j in threaded {
        assert_eq!(labels(j), ["foliocache", "kernel", "direct", "mmap"]);
    }
    for j in &sc.jobs {
        assert_eq!((j.rw, j.bs, j.file_size), (Rw::Randread, 4096, 4 * m));
        assert!(j.shared && j.cold);
        assert_eq!(j.capacity, Some(cap));
        assert_eq!(j.memory_limit, Some(m));
        assert_eq!(j.runtime, Some(Duration::from_secs(4)));
    }
    let bw: Vec<(&str, &str, Option<usize>, f64)> = sc
        .targets
        .iter()
        .filter_map(|t| match t {
            TargetSpec::Bandwidth {
                numerator,
                denominator,
                job,
                min,
            } => Some((numerator.as_str(), denominator.as_str(), *job, *min)),
            _ => None,
        })
        .collect();
    assert_eq!(
        bw,
        [
            ("foliocache", "kernel", Some(1), 1.1),
            ("foliocache", "direct", Some(1), 1.0),
            ("foliocache", "kernel", Some(2), 1.5),
            ("foliocache[qd=32]", "direct[qd=32]", Some(4), 0.9),
            ("foliocache[qd=32]", "foliocache", Some(4), 3.0),
        ]
    );
    assert!(sc.targets.contains(&TargetSpec::CpuPerRead {
        job: 1,
        engine: "foliocache".into(),
        than: "direct".into(),
        plus_us: 1.0
    }));
    assert!(sc.targets.contains(&TargetSpec::LruGap {
        job: 2,
        engine: "foliocache".into(),
        max_points: 2.0
    }));
    assert!(sc.targets.contains(&TargetSpec::Memory {
        engine: "foliocache".into(),
        max_bytes: m
    }));
    // Every threaded job's foliocache over kernel and direct is reported,
    // and the queue-depth job's two ratios.
    assert_eq!(sc.ratios.len(), 10);
    // Engines given on the command line replace the built-in ones: no
    // queue-depth job then.
    let p = plan_of(&["--scenario", "larger", "--quick", "--engine", "kernel"]);
    assert_eq!(p.scenarios[0].jobs.len(), 4);
    // --capacity sets M, --size the file; the full run has M = 1 GiB.
    let p = plan_of(&["--scenario", "larger", "--capacity", "2M", "--size", "16M"]);
    let j = &p.scenarios[0].jobs[0];
    assert_eq!((j.memory_limit, j.file_size), (Some(2 << 20), 16 << 20));
    assert_eq!(j.runtime, Some(Duration::from_secs(10)));
    let p = plan_of(&["--scenario", "larger"]);
    assert_eq!(p.scenarios[0].jobs[0].file_size, 4 << 30);
    // Not in the reference set.
    let p = plan_of(&["--seeds"]);
    assert!(p.scenarios.iter().all(|s| s.name != "larger"));
}

#[test]
fn larger_refuses_a_tiny_budget() {
    let Command::Bench(b) = Cli::try_parse_from([
        "foliocache",
        "bench",
        "--scenario",
        "larger",
        "--capacity",
        "64k",
    ])
    .unwrap()
    .command
    else {
        unreachable!("a bench command line")
    };
    let e = plan(&b).unwrap_err();
    assert!(e.contains("too small"), "{e}");
}

#[test]
fn memory_limit_limits_a_custom_job_only() {
    let p = plan_of(&["--rw", "randread", "--memory-limit", "64M"]);
    assert_eq!(p.scenarios[0].jobs[0].memory_limit, Some(64 << 20));
    let p = plan_of(&["--rw", "randread"]);
    assert_eq!(p.scenarios[0].jobs[0].memory_limit, None);
    let bad = |args: &[&str]| {
        let mut argv = vec!["foliocache", "bench"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv) {
            Err(_) => true,
            Ok(c) => {
                let Command::Bench(b) = c.command else {
                    return false;
                };
                plan(&b).is_err()
            }
        }
    };
    assert!(bad(&["--memory-limit", "64M"]), "no custom job");
    assert!(bad(&["--scenario", "larger", "--memory-limit", "64M"]));
    assert!(bad(&["--rw", "read", "--memory-limit", "64k"]), "too small");
    assert!(bad(&["--rw", "read", "--memory-limit", "lots"]));
}

#[test]
fn programs_fills_and_reads_keys_three_ways_with_the_issues_targets() {
    let p = plan_of(&["--scenario", "programs", "--quick"]);
    let sc = &p.scenarios[0];
    assert_eq!(sc.name, "programs");
    assert!(sc.jobs.is_empty());
    let db = sc.programs.as_ref().expect("db_bench's settings");
    assert_eq!(db.keys, 200_000);
    // 4x the raw data (200,000 x 216 bytes), in whole MiB.
    assert_eq!(db.capacity, 165 << 20);
    let targets: Vec<(String, String, Option<usize>, f64)> = sc
        .targets
        .iter()
        .map(|t| match t {
            TargetSpec::Bandwidth {
                numerator,
                denominator,
                job,
                min,
            } => (numerator.clone(), denominator.clone(), *job, *min),
            other => panic!("{other:?}"),
        })
        .collect();
    let i = |j, min| ("interposer".to_string(), "ext4".to_string(), Some(j), min);
    assert_eq!(targets, [i(0, 0.9), i(1, 1.0), i(2, 1.3)]);
    assert_eq!(sc.ratios.len(), 6);
    assert!(sc
        .ratios
        .iter()
        .any(|r| r.numerator == "mount" && r.job == Some(2) && r.target.is_none()));
    // --size sets the keys, --capacity the caches; the full run has 1M keys.
    let p = plan_of(&[
        "--scenario",
        "programs",
        "--size",
        "2M",
        "--capacity",
        "64M",
    ]);
    let db = p.scenarios[0].programs.as_ref().unwrap();
    assert_eq!((db.keys, db.capacity), ((2 << 20) / 216, 64 << 20));
    let p = plan_of(&["--scenario", "programs"]);
    assert_eq!(p.scenarios[0].programs.as_ref().unwrap().keys, 1_000_000);
    // Not in the reference set.
    let p = plan_of(&["--seeds"]);
    assert!(p.scenarios.iter().all(|s| s.programs.is_none()));
}

#[test]
fn programs_refuses_engines_and_too_few_keys() {
    for (args, want) in [
        (&["--engine", "kernel"][..], "--engine does not apply"),
        (&["--size", "100k"][..], "at least 1000"),
    ] {
        let mut argv = vec!["foliocache", "bench", "--scenario", "programs"];
        argv.extend_from_slice(args);
        let Command::Bench(b) = Cli::try_parse_from(argv).unwrap().command else {
            unreachable!("a bench command line")
        };
        let e = plan(&b).unwrap_err();
        assert!(e.contains(want), "{e}");
    }
}
