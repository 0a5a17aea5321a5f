//! The miss-ratio curve of one file (`File::hit_ratio_curve`): the cache's
//! curve restricted to the file's reads. Two files share a cache: a loop
//! over 1.5 C, which no page of survives at 1x and all of at 2x, and a
//! small hot set, which hits at every size; the cache's curve is their
//! mix, each file's is its own.

use foliocache::HitRatioCurve;
use rand::{Rng, SeedableRng};

use super::rules::{file, read_pages};
use test_support::cache::TestCache;

const C: usize = 1024;

fn show(name: &str, c: &HitRatioCurve) -> String {
    let points: Vec<String> = c
        .points
        .iter()
        .map(|p| format!("{}x {:.3}", p.capacity_ratio, p.hit_ratio))
        .collect();
    format!("{name}: {} ({} reads)", points.join(", "), c.accesses)
}

#[test]
fn each_file_has_its_own_curve_beside_the_others() {
    let cache = TestCache::pages(C).max_folio(4096).no_readahead().build();
    let looped = file(&cache, 1, C * 3 / 2);
    let hot = file(&cache, 2, C / 8);
    // Started before any read: the first call returns no access.
    assert_eq!(looped.hit_ratio_curve().accesses, 0);
    assert_eq!(hot.hit_ratio_curve().accesses, 0);
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    // 50 loops: about 150,000 reads, past two of the cache's epochs (at
    // least 65,536 reads each), so the files' windows are the cache's.
    for _ in 0..50 {
        for p in 0..C * 3 / 2 {
            read_pages(&looped, [p], 1);
            read_pages(&hot, [rng.gen_range(0..C / 8)], 2);
        }
    }
    let (l, h, all) = (
        looped.hit_ratio_curve(),
        hot.hit_ratio_curve(),
        cache.hit_ratio_curve(),
    );
    let shown = [show("loop", &l), show("hot", &h), show("cache", &all)].join("; ");
    // The windows start at the cache's epoch ends, which the cache's curve
    // thread may run while this thread reads on: the cache's counts and
    // each file's are read a few reads apart (the sample's queue, `mrc.rs`,
    // "Cost"). So the files' reads add up to the cache's, and the two
    // files' (reads alternate) are equal, to within a thousandth.
    let near = |a: u64, b: u64| a.abs_diff(b) * 1000 <= b;
    assert!(near(l.accesses + h.accesses, all.accesses), "{shown}");
    assert!(near(l.accesses, h.accesses), "{shown}");
    assert!(all.accesses > 65_536, "{shown}");
    let at = |c: &HitRatioCurve, r: f64| c.at(r).unwrap();
    // The loop: nothing at 1x or below, everything at 2x and 4x (its
    // refaults' distances are within a capacity).
    assert!(at(&l, 1.0) < 0.02 && at(&l, 0.25) < 0.02, "{shown}");
    assert!(at(&l, 2.0) > 0.95 && at(&l, 4.0) > 0.95, "{shown}");
    // The hot set: hits at every size, 0.25x too (its pages stay active
    // while the loop passes through the inactive list).
    for r in foliocache::CAPACITY_RATIOS {
        assert!(at(&h, r) > 0.95, "hot set at {r}x: {shown}");
    }
    // The cache's: their mix, half the reads each.
    assert!(
        (at(&all, 1.0) - (at(&l, 1.0) + at(&h, 1.0)) / 2.0).abs() < 0.01,
        "{shown}"
    );
    assert!(at(&all, 2.0) > 0.95, "{shown}");
}

/// The story: the sample's key of a page was its mapping's address and
/// the page, and a file opened after another closed is often given the
/// closed one's address. A pass over 20,000 files through a mount, each
/// read once, then showed the new files' reads as re-reads of the old
/// ones' pages: the curve predicted 52-69 % hits at 2x where a cache twice
/// the size had 2.5-14 %. Each mapping's key is now a number no other
/// mapping has had (`mrc::mapping_key`).
#[test]
fn files_read_once_and_closed_predict_no_hits_at_any_size() {
    let cache = TestCache::pages(C).max_folio(4096).no_readahead().build();
    // 2,000 files of 8 pages, each opened, read once and closed: 16 C of
    // first reads, in one epoch.
    for i in 0..2000usize {
        let f = file(&cache, i as u8, 8);
        read_pages(&f, 0..8, i as u8);
    }
    let curve = cache.hit_ratio_curve();
    let shown = show("pass", &curve);
    assert_eq!(curve.accesses, 16_000, "{shown}");
    for p in curve.points {
        let h = p.known().unwrap_or_else(|| panic!("not known: {shown}"));
        assert!(h < 0.02, "{}x: {shown}", p.capacity_ratio);
    }
}

/// Random 64 KiB reads (aligned) of a file of 2 C through a cache of
/// `pages` pages, readahead and folio sizes as the cache sets them: the
/// share of the bytes read over the second half that came from memory
/// (`CacheStats::memory_bytes`), and the curve at the end.
fn pool_run(pages: usize, file_pages: usize, reads: u64) -> (f64, HitRatioCurve) {
    let cache = TestCache::pages(pages).build();
    let f = file(&cache, 3, file_pages);
    let mut buf = vec![0u8; 16 * 4096];
    let mut before = cache.stats();
    for i in 0..reads {
        if i == reads / 2 {
            before = cache.stats();
        }
        let block = rand::rngs::StdRng::seed_from_u64(i).gen_range(0..file_pages as u64 / 16);
        f.read_exact_at(&mut buf, block * 16 * 4096).unwrap();
    }
    let s = cache.stats();
    let read = s.read_bytes - before.read_bytes;
    let memory = s.memory_bytes() - before.memory_bytes();
    (memory as f64 / read as f64, cache.hit_ratio_curve())
}

/// The story: a forked pool of 8 workers read random 64 KiB ranges of a
/// file of 2 C, and the curve was flat below 1x (0.5x predicted 81.4 %,
/// as 1x; 61.7 % measured at half the memory). A read showed the sample
/// only its first page: one key for every 16 pages the cache held, so
/// the simulations, sized in pages, held 16 times the reads they should
/// have and lost nothing at 0.25x or 0.5x. Each page a read covers is
/// now a key, and the points below 1x fall as the measured ones do.
#[test]
fn reads_of_many_pages_are_not_flat_below_1x() {
    let c = 4096;
    let (_, curve) = pool_run(c, 2 * c, 24_000);
    let shown = show("pool", &curve);
    let at = |r: f64| {
        curve
            .at(r)
            .unwrap_or_else(|| panic!("{r}x not known: {shown}"))
    };
    assert!(at(0.25) < at(1.0) - 0.2, "{shown}");
    assert!(at(0.5) < at(1.0) - 0.1, "{shown}");
}

/// The story, continued: with every page a key, the pool's points below
/// 1x were still 8 and 15 points above the hit ratio a cache of 0.25x
/// and 0.5x had. The curve's hits were page lookups, and a lookup that
/// found a folio readahead had brought in (the read's neighbours, when
/// the pages before it were cached) was a hit, which the simulations
/// (no readahead) could not lose. The curve is now of bytes from memory
/// (`CacheStats::memory_bytes`), readahead's pages a miss where first
/// read: each point below 1x within 2 points of the cache of that size.
#[test]
fn the_pools_points_below_1x_are_what_a_smaller_cache_has() {
    let c = 4096;
    let reads = 24_000;
    let (one, curve) = pool_run(c, 2 * c, reads);
    let shown = show("pool", &curve);
    for (r, pages) in [(0.25, c / 4), (0.5, c / 2)] {
        let (measured, _) = pool_run(pages, 2 * c, reads);
        let predicted = curve
            .at(r)
            .unwrap_or_else(|| panic!("{r}x not known: {shown}"));
        assert!(
            (predicted - measured).abs() <= 0.02,
            "{r}x predicted {predicted:.3}, measured {measured:.3} (1x {one:.3}): {shown}"
        );
    }
}
