//! The group's hit-ratio curve (`SharedCache::hit_ratio_curve`): every
//! process's reads, one estimator in the process that made the cache,
//! its points against the hit ratios caches of those sizes had.

use super::*;
use foliocache::HitRatioCurve;

/// Pages of the cache whose curve is checked.
const C: u64 = 4096;

/// Reads of each of the 4 workers of a phase.
const READS: u64 = 24_000;

/// The group's share of bytes from memory over a second phase of 4
/// forked workers reading 4 KiB pages of a file of 4 C (a third of the
/// reads in a hot eighth of it), after a first phase that warmed it, in
/// a cache of `pages` pages; and the group's curve at the end.
fn group_run(t: &TempPath, pages: u64) -> (f64, Option<HitRatioCurve>) {
    let cache = SharedCache::new(pages * 4096).unwrap();
    let phase = |seed: u64| {
        let kids: Vec<_> = (0..4u64)
            .map(|w| {
                let c = cache.clone();
                let path = t.path.clone();
                fork(move || {
                    let f = open(&c, &path, false);
                    let mut rng = rand::rngs::StdRng::seed_from_u64(seed * 16 + w);
                    let mut buf = [0u8; 4096];
                    for _ in 0..READS {
                        let page = if rng.gen_range(0..3) == 0 {
                            rng.gen_range(0..C / 2)
                        } else {
                            rng.gen_range(0..4 * C)
                        };
                        if f.read_at(&mut buf, page * 4096).unwrap() != 4096 {
                            return false;
                        }
                    }
                    true
                })
            })
            .collect();
        for k in kids {
            assert_eq!(wait(k), 0);
        }
    };
    phase(1);
    let before = cache.stats();
    phase(2);
    let after = cache.stats();
    let read = after.group_read_bytes - before.group_read_bytes;
    let memory = after.group_memory_bytes() - before.group_memory_bytes();
    (memory as f64 / read as f64, cache.hit_ratio_curve())
}

/// The story: under `foliocache run` a forked program's only cache is
/// the group's, and it had no curve: `cache stat`, the metrics and `stat
/// --watch` showed none. Each process now samples its reads into a ring
/// in the segment, the process that made the cache feeds them to one
/// estimator (simulations of the group's clock, at 2x and 4x too: an
/// LRU stack there said 0.624 at 2x where 0.651 was measured) and
/// publishes the curve there. Four forked workers' reads: each point
/// within 3 points of the share a cache of that size had (the bench's
/// `--scenario advisor` checks 2 over longer runs).
#[test]
fn the_groups_curve_is_every_processes_reads_at_every_size() {
    let t = TempPath::new("shared-group-curve");
    let file = std::fs::File::create(&t.path).unwrap();
    file.set_len(4 * C * 4096).unwrap();
    drop(file);
    let (at_c, curve) = group_run(&t, C);
    let curve = curve.expect("the group's curve, published");
    let shown = format!("{curve:?}");
    assert!(curve.sampled > 0, "{shown}");
    assert!(curve.accesses >= 4 * READS, "{shown}");
    let mut seen = vec![format!("1x: measured {at_c:.3}")];
    for (r, pages) in [(0.5, C / 2), (2.0, 2 * C)] {
        let (measured, _) = group_run(&t, pages);
        let predicted = curve
            .at(r)
            .unwrap_or_else(|| panic!("{r}x not known: {shown}"));
        seen.push(format!(
            "{r}x: predicted {predicted:.3} measured {measured:.3}"
        ));
        assert!(
            (predicted - measured).abs() < 0.03,
            "{r}x: {seen:?}, {shown}"
        );
    }
    let one = curve.at(1.0).expect("1x");
    assert!((one - at_c).abs() < 0.03, "{seen:?}, {shown}");
    eprintln!("{seen:?}");
}

/// A process that did not make the cache reads the curve its maker
/// published: the same figures, and none before the first publication.
#[test]
fn another_process_reads_the_published_curve() {
    let t = TempPath::new("shared-group-curve-other");
    let cache = SharedCache::new(256 * 4096).unwrap();
    let f = open(&cache, &t.path, false);
    f.write_at(&vec![5u8; 64 * 4096], 0).unwrap();
    let mut buf = [0u8; 4096];
    for i in 0..20_000u64 {
        f.read_at(&mut buf, (i % 64) * 4096).unwrap();
    }
    let mine = cache.hit_ratio_curve().expect("published");
    assert!(mine.at(1.0).is_some_and(|h| h > 0.99), "{mine:?}");
    let other = SharedCache::attach(rustix::io::dup(cache.memory_file()).unwrap()).unwrap();
    let kid = fork(move || other.hit_ratio_curve() == Some(mine));
    assert_eq!(wait(kid), 0);
}

/// Pages of the file the skewed trace reads: 8 C, as the advisor's fio
/// rows.
const SKEWED_PAGES: u64 = 8 * C;

/// Reads of the skewed trace: under one epoch of the group's curve
/// (65,536 reads at C), so that its window is the whole trace and a
/// cache of each size measured over the whole trace is its truth.
const SKEWED_READS: usize = 60_000;

/// A zipf of exponent 1.1 over the pages of a file of [`SKEWED_PAGES`]
/// (fio's `zipf:1.1`, drawn by the inverse of its CDF), its ranks spread
/// over the file (rank `r` at page `r x 2654435761 mod pages`), so that
/// a stratum of 64 pages holds pages of unlike heat.
fn skewed_trace() -> Vec<u64> {
    let mut cdf = Vec::with_capacity(SKEWED_PAGES as usize);
    let mut sum = 0.0;
    for i in 1..=SKEWED_PAGES {
        sum += 1.0 / (i as f64).powf(1.1);
        cdf.push(sum);
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(85);
    (0..SKEWED_READS)
        .map(|_| {
            let u = rng.gen::<f64>() * sum;
            let rank = cdf.partition_point(|&c| c < u) as u64;
            rank * 2_654_435_761 % SKEWED_PAGES
        })
        .collect()
}

/// The trace read by one process through a group's cache of `pages`
/// pages over the sparse file at `path`: its share of bytes from memory
/// and its curve.
fn skewed_run(path: &std::path::Path, pages: u64, trace: &[u64]) -> (f64, HitRatioCurve) {
    let cache = SharedCache::new(pages * 4096).unwrap();
    let f = open(&cache, path, false);
    let mut buf = [0u8; 4096];
    for &p in trace {
        assert_eq!(f.read_at(&mut buf, p * 4096).unwrap(), 4096);
    }
    let s = cache.stats();
    let curve = cache.hit_ratio_curve().expect("the group's curve");
    let measured = s.group_memory_bytes() as f64 / s.group_read_bytes as f64;
    (measured, curve)
}

/// The story: the group's points below 1x were off by which pages the
/// sample drew (the keys are the file's device and inode and the page,
/// so one file draws the same pages every run, its copy others): on
/// fio's `zipf:1.1` under `foliocache run`, 0.25x read 0.529 on one copy
/// of a file and 0.741 on another where 0.736 was measured. A smaller
/// cache's losses turn on how long ago a page was read, which the
/// group's pages did not keep; each page's descriptor now keeps the tick
/// of its last read, each process counts its hits by age, and the curve
/// weights its simulations' losses by those (as the private cache's).
/// Eight files of the same bytes (eight draws of pages) read the same
/// skewed trace: each one's 0.25x and 0.5x within 2 points of what
/// caches of those sizes had over the same reads (0.8 at worst when
/// written; with the curve's share of hits lost taken over all ages, as
/// before, 0.25x read 0.551 to 0.792 over the eight where 0.722 was
/// measured: 17 points at worst).
#[test]
fn whichever_pages_the_group_draws_its_points_below_1x_hold() {
    let trace = skewed_trace();
    let paths: Vec<TempPath> = (0..8)
        .map(|k| {
            let t = TempPath::new(&format!("shared-group-draw-{k}"));
            std::fs::File::create(&t.path)
                .unwrap()
                .set_len(SKEWED_PAGES * 4096)
                .unwrap();
            t
        })
        .collect();
    let truth = [C / 4, C / 2].map(|pages| skewed_run(&paths[0].path, pages, &trace).0);
    let mut seen = Vec::new();
    let mut worst = 0.0f64;
    for t in &paths {
        let (at_c, curve) = skewed_run(&t.path, C, &trace);
        assert_eq!(curve.accesses, SKEWED_READS as u64, "one window: {curve:?}");
        assert!((curve.points[2].hit_ratio - at_c).abs() < 1e-3, "{curve:?}");
        for (i, measured) in truth.iter().enumerate() {
            // (From a cold start, as the caches measured: the point's
            // bound, what a warm cache might have had more, is not asked.)
            let p = curve.points[i];
            let predicted = p.hit_ratio;
            worst = worst.max((predicted - measured).abs());
            seen.push(format!(
                "{}x {predicted:.3}/{measured:.3}",
                p.capacity_ratio
            ));
        }
    }
    eprintln!("worst {worst:.3}: {seen:?}");
    assert!(worst <= 0.02, "worst {worst:.3}: {seen:?}");
}
