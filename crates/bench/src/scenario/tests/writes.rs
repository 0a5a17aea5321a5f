//! The write scenarios: memory populated once, and buffered writes with
//! their sync.

use std::time::Duration;

use foliocache::internals::Insert;

use super::*;
use crate::spec::{default_capacity, Rw};
use crate::targets::TargetSpec;
use populate::{POPULATE, POPULATE_FOLIO, POPULATE_LARGE, POPULATE_SETTLE, POPULATE_SINGLE};

#[test]
fn populate_fills_fresh_memory_once_in_2mib_writes() {
    let p = plan_of(&["--scenario", "populate", "--quick"]);
    let sc = only(&p);
    assert_eq!(job_names(sc), [POPULATE]);
    let j = job(sc, POPULATE);
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
    let r = &only(&p).ratios;
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
        TargetSpec {
            figure: Figure::WritesAlone {
                numerator: POPULATE_FOLIO.into(),
                denominator: POPULATE_SINGLE.into(),
            },
            bound: 1.1,
        }
    );
    let size = |args: &[&str]| {
        let p = plan_of(args);
        let j = job(only(&p), POPULATE);
        (j.file_size, j.bs)
    };
    assert_eq!(size(&["--scenario", "populate"]).0, 3 << 30);
    // --size: whole 2 MiB writes (a smaller size is one write).
    assert_eq!(
        size(&["--scenario", "populate", "--size", "5M"]),
        (4 << 20, 2 << 20)
    );
    assert_eq!(
        size(&["--scenario", "populate", "--size", "101k"]),
        (100 << 10, 100 << 10)
    );
}

#[test]
fn write_runs_seq_and_random_writes_with_per_job_ratios() {
    use write::{RANDOM, SEQUENTIAL};
    let p = plan_of(&["--scenario", "write", "--quick"]);
    let sc = only(&p);
    assert_eq!(job_names(sc), [SEQUENTIAL, RANDOM]);
    let jobs: Vec<(Rw, u64, u64, bool)> = sc
        .specs()
        .map(|j| (j.rw, j.bs, j.file_size, j.memory))
        .collect();
    assert_eq!(
        jobs,
        [
            (Rw::Write, 64 << 10, 128 << 20, false),
            (Rw::Randwrite, 4096, 16 << 20, false)
        ]
    );
    for j in sc.specs() {
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
        // A cgroup for the kernel's peak, never a limit the run meets.
        assert_eq!(j.memory_limit, Some(2 * default_capacity(j.file_size)));
    }
    let first = &sc.ratios[0];
    assert_eq!(
        (first.numerator.as_str(), first.denominator.as_str()),
        ("foliocache", "kernel")
    );
    assert_eq!((first.target, first.job), (Some(1.3), Some(SEQUENTIAL)));
    assert!(sc.ratios.iter().any(|r| r.job == Some(RANDOM)
        && r.numerator == "foliocache"
        && r.denominator == "kernel"
        && r.target == Some(1.0)));
    let target = |job, bound| TargetSpec {
        figure: Figure::Bandwidth {
            numerator: "foliocache".into(),
            denominator: "kernel".into(),
            job: Some(job),
        },
        bound,
    };
    assert_eq!(sc.targets, [target(SEQUENTIAL, 1.3), target(RANDOM, 1.0)]);
    let p = plan_of(&["--scenario", "write", "--runtime", "2", "--cold"]);
    assert!(only(&p)
        .specs()
        .all(|j| j.runtime == Some(Duration::from_secs(2)) && j.cold));
    assert_eq!(job(only(&p), SEQUENTIAL).file_size, 1 << 30);
}
