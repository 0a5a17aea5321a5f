//! The plans the command line and the scenarios resolve into: the
//! reference set and the options that shape it here; each scenario's
//! jobs, ratios and targets in [`reads`], [`uncached_reads`] and
//! [`writes`].

use clap::Parser;

use super::*;
use crate::args::BenchArgs;
use crate::targets::{Figure, Given, JobName, Target};

mod reads;
mod uncached_reads;
mod writes;

/// Every scenario's built-in engine list given as text, by scenario
/// (seqread's and randread's are typed: [`CachedReads::ENGINES`]).
const BUILTIN_ENGINES: [(&str, &[&str]); 7] = [
    ("larger", larger::ENGINES),
    ("larger qd=32", larger::QD_ENGINES),
    ("readahead", readahead::ENGINES),
    ("uncached", uncached::ENGINES),
    ("populate", populate::ENGINES),
    ("write", write::ENGINES),
    ("scaling", scaling::ENGINES),
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

/// `foliocache bench ARGS` (`argv` with the binary's name and `bench`)
/// parsed as the binary parses it.
fn parse(argv: Vec<&str>) -> Result<BenchArgs, clap::Error> {
    #[derive(Parser)]
    struct Bench {
        #[command(flatten)]
        args: BenchArgs,
    }
    Bench::try_parse_from(&argv[1..]).map(|b| b.args)
}

/// The plan of `foliocache bench ARGS`, or why there is none.
fn try_plan(args: &[&str]) -> Result<Plan, String> {
    let mut argv = vec!["foliocache", "bench"];
    argv.extend_from_slice(args);
    plan(&parse(argv).unwrap())
}

fn plan_of(args: &[&str]) -> Plan {
    try_plan(args).unwrap()
}

/// Why `foliocache bench ARGS` does not run.
fn plan_err(args: &[&str]) -> String {
    try_plan(args).unwrap_err()
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

/// The only scenario of `p`.
fn only(p: &Plan) -> &Scenario {
    assert_eq!(p.scenarios.len(), 1);
    &p.scenarios[0]
}

/// The job named `name` of `sc`.
fn job<'a>(sc: &'a Scenario, name: &str) -> &'a JobSpec {
    sc.job(name)
        .unwrap_or_else(|| panic!("{}: no job `{name}`", sc.name))
}

/// The names of `sc`'s jobs, in order.
fn job_names(sc: &Scenario) -> Vec<JobName> {
    sc.jobs.iter().map(|j| j.name).collect()
}

/// A scenario's bandwidth targets of engine `numerator`: (denominator,
/// minimum, job).
fn bandwidth_targets(sc: &Scenario, numerator: &str) -> Vec<(String, f64, Option<JobName>)> {
    sc.targets
        .iter()
        .filter_map(|t| match &t.figure {
            Figure::Bandwidth {
                numerator: n,
                denominator,
                job,
            } if n == numerator => Some((denominator.clone(), t.bound, *job)),
            _ => None,
        })
        .collect()
}

#[test]
fn the_default_run_has_every_scenario_and_only_readahead_uncached_and_populate_are_cold() {
    let p = plan_of(&[]);
    assert!(p.quick);
    let names: Vec<&str> = p.scenarios.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, SCENARIOS);
    for s in &p.scenarios {
        for j in s.specs() {
            let cold = ["readahead", "uncached", "populate"].contains(&s.name.as_str());
            assert_eq!(j.cold, cold, "{}", s.name);
        }
    }
    let p = plan_of(&["--seeds", "--cold"]);
    assert!(p.scenarios.iter().flat_map(Scenario::specs).all(|j| j.cold));
}

/// Holds `sc` (built with its default engines and `--consume`) to its
/// `table`: every job the table names is one of `jobs` (the scenario's,
/// or the benchmarks of a scenario that runs a program), and every row's
/// engines run, so that each bandwidth row is a ratio and each held row a
/// target.
fn check_table<E: Copy + std::fmt::Debug>(sc: &Scenario, table: &[Target<E>], jobs: &[JobName]) {
    for t in table {
        if let Some(j) = t.figure.job() {
            assert!(jobs.contains(&j), "{}: {t:?} names no job", sc.name);
        }
    }
    // Every role played: the rows the scenario's engines resolve.
    let all = crate::targets::judge(
        table,
        |_| Some(String::new()),
        Given {
            consume: true,
            budget: Some(1),
        },
    );
    let (ratios, held) = (all.ratios.len(), all.targets.len());
    assert_eq!(sc.ratios.len(), ratios, "{}: a row left out", sc.name);
    assert_eq!(sc.targets.len(), held, "{}: a target left out", sc.name);
}

#[test]
fn every_table_names_its_scenarios_jobs_and_engines() {
    let mut args: Vec<&str> = crate::args::all_scenarios()
        .into_iter()
        .flat_map(|s| ["--scenario", s])
        .collect();
    args.push("--consume");
    let p = plan_of(&args);
    let sc = |name: &str| p.scenarios.iter().find(|s| s.name == name).unwrap();
    check_table(sc("seqread"), seqread::TARGETS, &job_names(sc("seqread")));
    check_table(
        sc("randread"),
        randread::TARGETS,
        &job_names(sc("randread")),
    );
    check_table(
        sc("uncached"),
        uncached::TARGETS,
        &job_names(sc("uncached")),
    );
    check_table(
        sc("populate"),
        populate::TARGETS,
        &job_names(sc("populate")),
    );
    check_table(sc("write"), write::TARGETS, &job_names(sc("write")));
    check_table(sc("larger"), larger::TARGETS, &job_names(sc("larger")));
    check_table(
        sc("programs"),
        programs::TARGETS,
        &[
            &programs::BENCHMARKS[..],
            &[programs::larger::LARGER, programs::larger::LARGER_ALIGNED],
            &[programs::pgbench::SELECT, programs::pgbench::TPCB],
            &[
                programs::pgbench_larger::SELECT_3X,
                programs::pgbench_larger::TPCB_3X,
                programs::pgbench_larger::SELECT_10X,
                programs::pgbench_larger::TPCB_10X,
            ],
            &[programs::pool::POOL],
        ]
        .concat(),
    );
    // scaling's rows repeat for each thread count, each of that count's
    // job.
    let scaling = sc("scaling");
    let counts =
        scaling::thread_counts(std::thread::available_parallelism().map_or(1, |n| n.get()));
    let jobs = job_names(scaling);
    assert_eq!(jobs.len(), 4 * counts.len());
    assert_eq!(scaling.ratios.len(), scaling::TARGETS.len() * counts.len());
    assert_eq!(scaling.targets.len(), counts.len());
    assert!(scaling
        .ratios
        .iter()
        .all(|r| r.job.is_some_and(|j| jobs.contains(&j))));
    check_table(sc("redb"), redb::TARGETS, redb::DB.jobs.as_flattened());
    check_table(
        sc("sqlite"),
        sqlite::TARGETS,
        sqlite::DB.jobs.as_flattened(),
    );
    // readahead's table gives the targets its ratios show.
    let ra = sc("readahead");
    let shown: Vec<Option<f64>> = ra.ratios.iter().map(|r| r.target).collect();
    assert_eq!(shown, [Some(1.0), Some(0.9), Some(1.0)]);
    assert!(ra.targets.is_empty());
}

#[test]
fn memory_engines_only_where_they_apply() {
    assert!(plan_err(&["--rw", "write", "--engine", "anon"]).contains("only populates memory"));
    assert!(plan_err(&["--scenario", "populate", "--engine", "direct"])
        .contains("does not populate memory"));
    // qd=N engines only read.
    for e in ["foliocache[qd=32]", "direct[qd=8]"] {
        assert!(plan_err(&["--rw", "randwrite", "--engine", e]).contains("only read"));
    }
    assert!(
        plan_err(&["--scenario", "populate", "--engine", "foliocache[qd=4]"]).contains("only read")
    );
    // grab= is a write's insert mode: any write job takes it.
    let p = plan_of(&["--rw", "write", "--engine", "foliocache[grab=single]"]);
    let custom = |p: &Plan| labels(job(only(p), custom::CUSTOM)).join(" ");
    assert_eq!(
        job(only(&p), custom::CUSTOM).engines[0].folio.grab,
        foliocache::internals::Insert::Single
    );
    // The custom job's default engines leave anon out, and memcpy out of
    // writes; memcpy asked for a write is refused.
    assert_eq!(
        custom(&plan_of(&["--rw", "write"])),
        "foliocache kernel direct dontcache mmap"
    );
    assert_eq!(
        custom(&plan_of(&["--rw", "randread"])),
        "foliocache kernel direct dontcache mmap memcpy"
    );
    assert!(plan_err(&["--rw", "write", "--engine", "memcpy"]).contains("read jobs only"));
}

#[test]
fn memory_limit_limits_a_custom_job_only() {
    let limit = |args: &[&str]| job(only(&plan_of(args)), custom::CUSTOM).memory_limit;
    assert_eq!(
        limit(&["--rw", "randread", "--memory-limit", "64M"]),
        Some(64 << 20)
    );
    assert_eq!(limit(&["--rw", "randread"]), None);
    let bad = |args: &[&str]| {
        let mut argv = vec!["foliocache", "bench"];
        argv.extend_from_slice(args);
        match parse(argv) {
            Err(_) => true,
            Ok(b) => plan(&b).is_err(),
        }
    };
    assert!(bad(&["--memory-limit", "64M"]), "no custom job");
    assert!(bad(&["--scenario", "larger", "--memory-limit", "64M"]));
    assert!(bad(&["--rw", "read", "--memory-limit", "64k"]), "too small");
    assert!(bad(&["--rw", "read", "--memory-limit", "lots"]));
}

/// The `programs` scenario's `db_bench` settings.
fn db_bench(sc: &Scenario) -> &programs::DbBench {
    match sc.programs.as_ref() {
        Some(Program::DbBench(db)) => db,
        other => panic!("not db_bench's settings: {other:?}"),
    }
}

#[test]
fn redb_runs_two_sizes_under_one_limit_with_the_issues_targets() {
    let p = plan_of(&["--scenario", "redb", "--quick"]);
    let sc = only(&p);
    assert_eq!(sc.name, "redb");
    assert!(sc.jobs.is_empty());
    let Some(Program::Embedded(_, rb)) = &sc.programs else {
        panic!("not redb's settings: {:?}", sc.programs);
    };
    assert_eq!(rb.limit, 32 << 20);
    // A quarter of M in raw entries (174 bytes each), and 4x M.
    assert_eq!(rb.n, [(8 << 20) / 174, (128 << 20) / 174]);
    let held = bandwidth_targets(sc, redb::FOLIO);
    let t = |job: &str, den: &str| {
        held.iter()
            .find(|(d, _, j)| *j == Some(job) && d == den)
            .map(|t| t.1)
    };
    assert_eq!(t("random reads, 4x", redb::FILE_BETTER), Some(1.15));
    assert_eq!(t("random reads, 4x", redb::FILE_DIRECT), Some(2.0));
    assert_eq!(t("random reads, fits", redb::FILE_BETTER), Some(0.9));
    assert_eq!(t("bulk load, 4x", redb::FILE_BETTER), Some(1.0));
    assert_eq!(t("individual writes, fits", redb::FILE_BETTER), Some(1.0));
    let p = plan_of(&["--scenario", "redb", "--capacity", "64M", "--size", "100M"]);
    let Some(Program::Embedded(_, rb)) = &only(&p).programs else {
        panic!("not redb's settings");
    };
    assert_eq!((rb.limit, rb.n[1]), (64 << 20, (100 << 20) / 174));
    assert!(plan_err(&["--scenario", "redb", "--capacity", "1M"]).contains("too small"));
    assert!(plan_err(&["--scenario", "redb", "--engine", "kernel"]).contains("does not apply"));
}

#[test]
fn sqlite_runs_the_mix_two_sizes_with_the_issues_targets() {
    let p = plan_of(&["--scenario", "sqlite", "--quick"]);
    let sc = only(&p);
    let Some(Program::Embedded(_, sb)) = &sc.programs else {
        panic!("not sqlite's settings: {:?}", sc.programs);
    };
    assert_eq!(sb.limit, 32 << 20);
    assert_eq!(sb.n, [(8 << 20) / 116, (128 << 20) / 116]);
    let held = bandwidth_targets(sc, sqlite::FOLIO);
    let bound = |job: &str| {
        held.iter()
            .find(|(d, _, j)| *j == Some(job) && d == sqlite::UNIX)
            .map(|t| t.1)
    };
    // Total time at most 0.9x and 1.0x unix's: bandwidth 1/0.9 and 1.
    assert_eq!(bound("mix, fits"), Some(1.0 / 0.9));
    assert_eq!(bound("mix, 4x"), Some(1.0));
    assert_eq!(sc.targets.len(), 2);
    // Not in the reference set.
    let p = plan_of(&["--seeds"]);
    assert!(p.scenarios.iter().all(|s| s.programs.is_none()));
}

/// The larger-than-memory job's full run at equal memory: the block cache
/// 3/4 of the limit, the interposer's capacity that and the small block
/// cache, 1/32.
#[test]
fn the_full_larger_jobs_memory_is_split_at_three_quarters() {
    let full = crate::scenario::programs::larger::Larger::new(false);
    assert_eq!(
        (full.block_cache(), full.capacity(), full.small_cache()),
        (192 << 20, 200 << 20, 8 << 20)
    );
}

type Targets = Vec<(String, f64, Option<JobName>)>;

/// The interposer's targets of `sc` (the programs scenario) split: those
/// against PostgreSQL's two ext4 ways larger than memory, and the rest.
fn pgbench_larger_targets(sc: &Scenario) -> (Targets, Targets) {
    use programs::pgbench_larger::{EXT4_25, EXT4_75};
    bandwidth_targets(sc, "interposer")
        .into_iter()
        .partition(|(d, _, _)| d == EXT4_25 || d == EXT4_75)
}

/// PostgreSQL larger than its memory is judged against ext4 with
/// `shared_buffers` at a quarter and at three quarters, each apart.
#[test]
fn programs_judges_pgbench_larger_against_both_ext4_ways() {
    use programs::pgbench_larger::{EXT4_25, EXT4_75, SELECT_10X, SELECT_3X, TPCB_10X, TPCB_3X};
    let p = plan_of(&["--scenario", "programs", "--quick"]);
    let (pgl, _) = pgbench_larger_targets(only(&p));
    let t = |e: &str, min, j| (e.to_string(), min, Some(j));
    assert_eq!(
        pgl,
        [
            t(EXT4_25, 1.2, SELECT_3X),
            t(EXT4_75, 1.2, SELECT_3X),
            t(EXT4_25, 1.0, TPCB_3X),
            t(EXT4_75, 1.0, TPCB_3X),
            t(EXT4_25, 1.2, SELECT_10X),
            t(EXT4_75, 1.2, SELECT_10X),
            t(EXT4_25, 1.0, TPCB_10X),
            t(EXT4_75, 1.0, TPCB_10X),
        ]
    );
}

#[test]
fn programs_fills_and_reads_keys_three_ways_with_the_issues_targets() {
    use programs::{larger::LARGER, pool::POOL, FILLSEQ, READRANDOM, READSEQ, RESTART};
    let p = plan_of(&["--scenario", "programs", "--quick"]);
    let sc = only(&p);
    assert_eq!(sc.name, "programs");
    assert!(sc.jobs.is_empty());
    let db = db_bench(sc);
    assert_eq!(db.keys, 200_000);
    // 4x the raw data (200,000 x 216 bytes), in whole MiB.
    assert_eq!(db.capacity, 165 << 20);
    assert!(
        sc.targets
            .iter()
            .all(|t| matches!(t.figure, Figure::Bandwidth { .. })),
        "{:?}",
        sc.targets
    );
    let i = |j, min| ("ext4".to_string(), min, Some(j));
    let (pgl, others) = pgbench_larger_targets(sc);
    assert_eq!(pgl.len(), 8);
    assert_eq!(
        others,
        [
            i(FILLSEQ, 0.9),
            i(READSEQ, 1.0),
            i(READRANDOM, 1.3),
            i(RESTART, 0.9),
            // The database larger than memory: against ext4 and RocksDB's
            // block cache over direct reads, at equal memory.
            i(LARGER, 1.1),
            ("direct".to_string(), 1.0, Some(LARGER)),
            i(POOL, 1.0),
            ("private".to_string(), 0.9, Some(POOL)),
        ]
    );
    // PostgreSQL's, under `foliocache run --shared`.
    let pg = |j, min| ("ext4".to_string(), min, Some(j));
    assert_eq!(
        bandwidth_targets(sc, programs::pgbench::SHARED),
        [
            pg(programs::pgbench::SELECT, 1.2),
            pg(programs::pgbench::TPCB, 1.0)
        ]
    );
    assert_eq!(sc.targets.len(), 18);
    assert_eq!(sc.ratios.len(), 28);
    assert!(sc.description.contains("pgbench -S"), "{}", sc.description);
    let lg = &db.larger;
    assert_eq!((lg.keys, lg.limit, lg.reads), (900_000, 96 << 20, 10_000));
    // Blocks aligned to pages only in the full run.
    assert!(!lg.aligned);
    // Equal memory: the block cache the limit less RocksDB's heap (3/4 of
    // it in the full run), the interposer's capacity that and the small
    // block cache, 1/32.
    assert_eq!(
        (lg.block_cache(), lg.capacity(), lg.small_cache()),
        (56 << 20, 59 << 20, 3 << 20)
    );
    assert!(
        sc.description.contains("readrandom-larger"),
        "{}",
        sc.description
    );
    // The restart case reads 30% of the keys in order, then as many at
    // random, in a new process.
    assert_eq!(db.restart_reads(), 60_000);
    assert!(
        sc.description.contains("60000 keys in order"),
        "{}",
        sc.description
    );
    assert!(sc
        .ratios
        .iter()
        .any(|r| r.numerator == "mount" && r.job == Some(READRANDOM) && r.target.is_none()));
    // --size sets the keys, --capacity the caches; the full run has 1M keys.
    let p = plan_of(&[
        "--scenario",
        "programs",
        "--size",
        "2M",
        "--capacity",
        "64M",
    ]);
    let db = db_bench(only(&p));
    assert_eq!((db.keys, db.capacity), ((2 << 20) / 216, 64 << 20));
    let p = plan_of(&["--scenario", "programs"]);
    let db = db_bench(only(&p));
    assert_eq!(db.keys, 1_000_000);
    // The issue's: 4M keys in 256 MiB, a block cache of 192 MiB against a
    // capacity of 200 MiB.
    let lg = &db.larger;
    assert_eq!((lg.keys, lg.limit), (4_000_000, 256 << 20));
    assert_eq!((lg.block_cache(), lg.capacity()), (192 << 20, 200 << 20));
    assert!(lg.aligned);
    // Not in the reference set.
    let p = plan_of(&["--seeds"]);
    assert!(p.scenarios.iter().all(|s| s.programs.is_none()));
}

/// The forked pool: a file twice the memory every way gets, against the
/// kernel in a cgroup and the private cache (one process).
#[test]
fn programs_pool_reads_a_file_twice_the_memory() {
    let p = plan_of(&["--scenario", "programs", "--quick"]);
    let sc = only(&p);
    let pool = &db_bench(sc).pool;
    assert_eq!(
        (pool.file, pool.capacity, pool.reads),
        (128 << 20, 64 << 20, 4096)
    );
    assert!(
        sc.description.contains("multiprocessing"),
        "{}",
        sc.description
    );
    let ratio = |num: &str, den: &str| {
        sc.ratios.iter().any(|r| {
            r.numerator == num && r.denominator == den && r.job == Some(programs::pool::POOL)
        })
    };
    assert!(ratio("interposer", "private") && ratio("shared", "ext4"));
}

#[test]
fn programs_refuses_engines_and_too_few_keys() {
    for (args, want) in [
        (&["--engine", "kernel"][..], "--engine does not apply"),
        (&["--size", "100k"][..], "at least 1000"),
    ] {
        let e = plan_err(&[&["--scenario", "programs"][..], args].concat());
        assert!(e.contains(want), "{e}");
    }
}

#[test]
fn crash_kills_a_writer_four_ways_by_name_only() {
    let kills = |args: &[&str]| match &only(&plan_of(args)).programs {
        Some(Program::Kills(k)) => (k.kills, k.trials),
        other => panic!("not the crash scenario's settings: {other:?}"),
    };
    assert_eq!(kills(&["--scenario", "crash"]), (1000, 1000));
    assert_eq!(kills(&["--scenario", "crash", "--quick"]), (100, 3));
    assert_eq!(kills(&["--scenario", "crash", "--trials", "5"]), (5, 5));
    // The group trials alone, as a long run of them is made.
    let alone = ["--scenario", "crash", "--kills", "0", "--trials", "7"];
    assert_eq!(kills(&alone), (0, 7));
    assert_eq!(kills(&["--scenario", "crash", "--kills", "3"]), (3, 1000));
    let e = plan_err(&["--scenario", "crash", "--engine", "kernel"]);
    assert!(e.contains("--engine does not apply"), "{e}");
    let labels: Vec<&str> = crate::scenario::crash::WAYS
        .iter()
        .map(|w| w.label())
        .collect();
    assert_eq!(
        labels,
        [
            "ext4",
            "foliocache run",
            "run killed too, then recover",
            "foliocache run --no-guardian"
        ]
    );
    // Not in the reference set.
    let p = plan_of(&["--seeds"]);
    assert!(p.scenarios.iter().all(|s| s.name != "crash"));
}
