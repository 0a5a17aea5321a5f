//! The read scenarios: readahead's cold passes, the cached reads held to
//! a copy's limits, and reads larger than memory.

use std::time::Duration;

use super::*;
use crate::spec::Rw;
use crate::targets::TargetSpec;

#[test]
fn readahead_is_cold_one_pass_with_direct_at_1mib() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let p = plan_of(&["--scenario", "readahead", "--quick"]);
    assert_eq!(p.repeat, 2);
    assert!(!p.cold, "--cold was not given");
    let sc = only(&p);
    assert_eq!(job_names(sc), [readahead::READS, readahead::DIRECT]);
    let (a, b) = (job(sc, readahead::READS), job(sc, readahead::DIRECT));
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
    assert_eq!(job(only(&full), readahead::READS).file_size, 1 << 30);
    // --runtime does not make it time-based; --size sets each file.
    let p = plan_of(&["--scenario", "readahead", "--runtime", "1", "--size", "8M"]);
    assert!(only(&p).specs().all(|j| j.runtime.is_none()));
    assert!(only(&p).specs().all(|j| j.file_size == 8 << 20));
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
    let sc = only(&p);
    assert_eq!(job_names(sc), [readahead::READS], "no direct, no 1 MiB job");
    assert_eq!(sc.ratios.len(), 1);
    assert_eq!(sc.ratios[0].numerator, "foliocache[io=threads]");
    assert_eq!(sc.ratios[0].target, None);
    let p = plan_of(&["--scenario", "readahead", "--engine", "direct"]);
    assert_eq!(job_names(only(&p)), [readahead::DIRECT]);
    assert_eq!(job(only(&p), readahead::DIRECT).bs, 1 << 20);
    assert!(only(&p).ratios.is_empty());
}

/// The 4 KiB job of a cached-read scenario (seqread or randread).
fn small(sc: &Scenario) -> JobName {
    if sc.name == "seqread" {
        seqread::READ_4K
    } else {
        randread::RANDREAD_4K
    }
}

#[test]
fn cached_reads_hold_foliocache_to_the_copy_limits() {
    use seqread::{READ_4K, READ_64K};
    let p = plan_of(&["--scenario", "seqread", "--scenario", "randread", "--quick"]);
    let bandwidth = |sc: &Scenario| bandwidth_targets(sc, "foliocache");
    let t = |d: &str, min: f64, job| (d.to_string(), min, Some(job));
    let (seq, rand) = (&p.scenarios[0], &p.scenarios[1]);
    for j in seq.specs().chain(rand.specs()) {
        assert_eq!(labels(j)[..4], ["foliocache", "kernel", "mmap", "memcpy"]);
    }
    assert_eq!(
        bandwidth(seq),
        [
            t("memcpy", 0.95, READ_4K),
            t("mmap", 1.0, READ_4K),
            t("memcpy", 0.95, READ_64K)
        ]
    );
    let r4k = randread::RANDREAD_4K;
    assert_eq!(
        bandwidth(rand),
        [t("memcpy", 0.95, r4k), t("mmap", 1.0, r4k)]
    );
    // Engines given without memcpy: no ratio to it, and no target.
    let p = plan_of(&[
        "--scenario",
        "randread",
        "--engine",
        "foliocache",
        "--engine",
        "mmap",
    ]);
    assert_eq!(bandwidth(only(&p)), [t("mmap", 1.0, r4k)]);
}

#[test]
fn consume_adds_the_pin_engine_and_holds_it_to_mmap() {
    let pin_targets = |sc: &Scenario| bandwidth_targets(sc, "foliocache[pin]");
    let p = plan_of(&["--scenario", "seqread", "--scenario", "randread", "--quick"]);
    for sc in &p.scenarios {
        assert!(!labels(job(sc, small(sc))).contains(&"foliocache[pin]"));
        assert!(!labels(job(sc, small(sc))).contains(&"memcpy[inplace]"));
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
            labels(job(sc, small(sc))),
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
        // At 4 KiB, where mmap runs in the scenario's ratios.
        assert_eq!(
            pin_targets(sc),
            [("mmap".to_string(), 1.2, Some(small(sc)))]
        );
        // foliocache's own targets are still the copy's, not the pin's.
        assert!(sc.targets.iter().any(|t| matches!(&t.figure,
            Figure::Bandwidth { numerator, denominator, .. }
                if numerator == "foliocache" && denominator == "memcpy")));
    }
}

#[test]
fn larger_reads_4m_at_random_under_a_budget_of_m() {
    use larger::{QD, UNIFORM_2, UNIFORM_8, ZIPF_2, ZIPF_8};
    let p = plan_of(&["--scenario", "larger", "--quick"]);
    assert_eq!(p.repeat, 2, "engines interleaved and repeated");
    let sc = only(&p);
    assert_eq!(sc.name, "larger");
    let m = 256u64 << 20;
    let cap = larger::folio_capacity(m);
    assert!(
        cap < m && cap >= m - m / 32 && cap.is_multiple_of(4096),
        "{cap}"
    );
    let threaded = [UNIFORM_2, UNIFORM_8, ZIPF_2, ZIPF_8];
    assert_eq!(job_names(sc), [&threaded[..], &[QD]].concat());
    let shape: Vec<(String, usize)> = sc.specs().map(|j| (j.dist.name(), j.numjobs)).collect();
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
    let qd = job(sc, QD);
    assert_eq!(
        labels(qd),
        ["foliocache[qd=32]", "direct[qd=32]", "foliocache"]
    );
    assert_eq!(
        qd.engines.iter().map(|e| e.qd).collect::<Vec<_>>(),
        [Some(32), Some(32), None]
    );
    for name in threaded {
        assert_eq!(
            labels(job(sc, name)),
            ["foliocache", "kernel", "direct", "mmap"]
        );
    }
    for j in sc.specs() {
        assert_eq!((j.rw, j.bs, j.file_size), (Rw::Randread, 4096, 4 * m));
        assert!(j.shared && j.cold);
        assert_eq!(j.capacity, Some(cap));
        assert_eq!(j.memory_limit, Some(m));
        assert_eq!(j.runtime, Some(Duration::from_secs(4)));
    }
    larger_targets(sc, m);
    // Every threaded job's foliocache over kernel and direct is reported,
    // and the queue-depth job's two ratios.
    assert_eq!(sc.ratios.len(), 10);
    // Engines given on the command line replace the built-in ones: no
    // queue-depth job then.
    let p = plan_of(&["--scenario", "larger", "--quick", "--engine", "kernel"]);
    assert_eq!(job_names(only(&p)), threaded);
    // --capacity sets M, --size the file; the full run has M = 1 GiB.
    let p = plan_of(&["--scenario", "larger", "--capacity", "2M", "--size", "16M"]);
    let j = job(only(&p), UNIFORM_2);
    assert_eq!((j.memory_limit, j.file_size), (Some(2 << 20), 16 << 20));
    assert_eq!(j.runtime, Some(Duration::from_secs(10)));
    let p = plan_of(&["--scenario", "larger"]);
    assert_eq!(job(only(&p), UNIFORM_2).file_size, 4 << 30);
    // Not in the reference set.
    let p = plan_of(&["--seeds"]);
    assert!(p.scenarios.iter().all(|s| s.name != "larger"));
}

/// The larger scenario's targets, with a budget of `m`.
fn larger_targets(sc: &Scenario, m: u64) {
    use larger::{QD, UNIFORM_8, ZIPF_2};
    let bw: Vec<(&str, &str, Option<JobName>, f64)> = sc
        .targets
        .iter()
        .filter_map(|t| match &t.figure {
            Figure::Bandwidth {
                numerator,
                denominator,
                job,
            } => Some((numerator.as_str(), denominator.as_str(), *job, t.bound)),
            _ => None,
        })
        .collect();
    assert_eq!(
        bw,
        [
            ("foliocache", "kernel", Some(UNIFORM_8), 1.1),
            ("foliocache", "direct", Some(UNIFORM_8), 1.0),
            ("foliocache", "kernel", Some(ZIPF_2), 1.5),
            ("foliocache[qd=32]", "direct[qd=32]", Some(QD), 0.9),
            ("foliocache[qd=32]", "foliocache", Some(QD), 3.0),
        ]
    );
    let folio = || "foliocache".to_string();
    let held = |figure, bound| TargetSpec { figure, bound };
    for want in [
        held(
            Figure::CpuPerRead {
                engine: folio(),
                than: "direct".into(),
                job: UNIFORM_8,
            },
            1.0,
        ),
        held(
            Figure::LruGap {
                engine: folio(),
                job: ZIPF_2,
            },
            2.0,
        ),
        held(Figure::ReadAmplification { engine: folio() }, 1.05),
        held(Figure::Memory { engine: folio() }, m as f64),
    ] {
        assert!(sc.targets.contains(&want), "{want:?}");
    }
}

#[test]
fn larger_refuses_a_tiny_budget() {
    let e = plan_err(&["--scenario", "larger", "--capacity", "64k"]);
    assert!(e.contains("too small"), "{e}");
}
