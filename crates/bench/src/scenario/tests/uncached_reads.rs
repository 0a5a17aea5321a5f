//! The uncached scenario: a stream of 4C through a cache of C, alone and
//! beside a hot reader, and the targets it holds the uncached engine to.

use std::time::Duration;

use super::*;
use crate::spec::{HotSpec, Rw};
use crate::targets::TargetSpec;
use uncached::{ALONE, BESIDE, BESIDE_PACE, DEFAULT_HOT_RATE};

#[test]
fn uncached_streams_4c_through_c_alone_then_beside_a_hot_c_over_4() {
    let p = plan_of(&["--scenario", "uncached", "--quick"]);
    let sc = only(&p);
    assert!(sc.detailed);
    assert_eq!(job_names(sc), [ALONE, BESIDE]);
    let c = 256 << 20;
    let hot = HotSpec {
        file_size: c / 4,
        bs: 4096,
        rate: DEFAULT_HOT_RATE,
    };
    for (name, hot, pace) in [(ALONE, None, None), (BESIDE, Some(hot), Some(BESIDE_PACE))] {
        let j = job(sc, name);
        assert_eq!(
            labels(j),
            ["foliocache", "foliocache[dontcache]", "kernel", "dontcache"]
        );
        assert_eq!((j.rw, j.bs, j.numjobs), (Rw::Read, 64 << 10, 1));
        assert_eq!(j.file_size, 4 * c);
        assert_eq!((j.capacity, j.memory_limit), (Some(c), Some(c)));
        assert!(j.cold && j.runtime.is_none());
        assert_eq!(j.interval(), Duration::from_millis(50));
        assert_eq!(j.hot, hot);
        assert_eq!(
            j.pace, pace,
            "{name}: equal stream bytes beside the hot reader"
        );
    }
    assert!(
        sc.description.contains("paced to 1GiB/s"),
        "{}",
        sc.description
    );
    let title = job(sc, BESIDE).title();
    assert!(
        title.ends_with(&format!("+ hot randread 4KiB at {DEFAULT_HOT_RATE}/s")),
        "{title}"
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
    let uncached = || "foliocache[dontcache]".to_string();
    assert_eq!(sc.targets.len(), 5);
    assert_eq!(
        sc.targets[0],
        TargetSpec {
            figure: Figure::Flat {
                engine: uncached(),
                job: ALONE
            },
            bound: 0.8
        }
    );
    assert_eq!(
        sc.targets[4],
        TargetSpec {
            figure: Figure::HitRatio {
                engine: uncached(),
                job: BESIDE
            },
            bound: 0.99
        }
    );
    // Full size; --capacity sets C; --size sets the stream and C to a
    // quarter of it.
    let full = plan_of(&["--scenario", "uncached"]);
    assert_eq!(job(only(&full), ALONE).file_size, 4 << 30);
    let p = plan_of(&["--scenario", "uncached", "--capacity", "16M"]);
    let j = job(only(&p), BESIDE);
    assert_eq!((j.file_size, j.capacity), (64 << 20, Some(16 << 20)));
    assert_eq!(j.hot.map(|h| h.file_size), Some(4 << 20));
    let p = plan_of(&["--scenario", "uncached", "--size", "8M"]);
    let j = job(only(&p), ALONE);
    assert_eq!((j.file_size, j.memory_limit), (8 << 20, Some(2 << 20)));
}

#[test]
fn hot_rate_paces_the_hot_reader_and_needs_one() {
    let rate = |p: &Plan| job(only(p), BESIDE).hot.map(|h| h.rate);
    let p = plan_of(&["--scenario", "uncached", "--hot-rate", "1000"]);
    assert_eq!(rate(&p), Some(1000));
    assert!(only(&p).description.contains("1000 reads/s"));
    let p = plan_of(&["--scenario", "uncached", "--hot-rate", "0"]);
    assert_eq!(rate(&p), Some(0));
    assert!(job(only(&p), BESIDE).title().ends_with("hot randread 4KiB"));
    assert!(only(&p).description.contains("as fast as it can"));
    // The seeds include uncached; a scenario without a hot reader, or a
    // custom job, does not take it.
    plan_of(&["--seeds", "--hot-rate", "10"]);
    for argv in [
        &["--scenario", "seqread", "--hot-rate", "10"][..],
        &["--rw", "read", "--hot-rate", "10"],
    ] {
        assert!(plan_err(argv).contains("--hot-rate"), "{argv:?}");
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
    let sc = only(&p);
    assert_eq!(sc.ratios.len(), 1, "only over kernel");
    let kinds: Vec<&str> = sc
        .targets
        .iter()
        .map(|t| match t.figure {
            Figure::Flat { .. } => "flat",
            Figure::Bandwidth { .. } => "bw",
            Figure::WritesAlone { .. } => "writes",
            Figure::CpuPerGib { .. } => "cpu",
            Figure::HitRatio { .. } => "hits",
            Figure::CpuPerRead { .. }
            | Figure::LruGap { .. }
            | Figure::ReadAmplification { .. }
            | Figure::Memory { .. } => "per read",
        })
        .collect();
    assert_eq!(
        kinds,
        ["flat", "hits"],
        "no cached or dontcache engine to beat"
    );
    let p = plan_of(&["--scenario", "uncached", "--engine", "kernel"]);
    assert!(only(&p).targets.is_empty());
}

#[test]
fn uncached_refuses_a_tiny_cache() {
    let e = plan_err(&["--scenario", "uncached", "--capacity", "512k"]);
    assert!(e.contains("too small: at least 1MiB"), "{e}");
    assert!(plan_err(&["--scenario", "uncached", "--size", "1M"]).contains("too small"));
}
