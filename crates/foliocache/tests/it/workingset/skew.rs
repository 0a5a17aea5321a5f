//! The replacement policy under skew, the database case: a hot set read
//! over and over while cold pages, each read once, stream past. Like the
//! scan tests of `rules.rs`, each test builds a trace, runs it through a
//! cache, and sets the hit ratio beside what an exact LRU of the same
//! capacity gets on the same trace (replayed here, in the test).
//!
//! What keeps the hot set: a page read twice while inactive is activated
//! (`folio_mark_accessed`), the active list is refilled only when the
//! inactive list is the shorter (`inactive_is_low`), and a page read
//! once leaves from the inactive tail. Cold misses therefore cycle
//! through the inactive list and never push an active page out, where an
//! LRU gives every cold page a full lap of the cache.

use std::collections::{BTreeMap, HashMap};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::rules::{file, read_pages};
use foliocache::{Cache, File};
use test_support::cache::TestCache;

const PAGE: usize = 4096;
const CAPACITY: usize = 1024;

/// An exact LRU of `capacity` keys: `access` says whether `key` was cached.
struct Lru {
    capacity: usize,
    last_use: HashMap<(u8, usize), u64>,
    by_use: BTreeMap<u64, (u8, usize)>,
    clock: u64,
}

impl Lru {
    fn new(capacity: usize) -> Lru {
        Lru {
            capacity,
            last_use: HashMap::new(),
            by_use: BTreeMap::new(),
            clock: 0,
        }
    }

    fn access(&mut self, key: (u8, usize)) -> bool {
        self.clock += 1;
        let hit = match self.last_use.insert(key, self.clock) {
            Some(t) => {
                self.by_use.remove(&t);
                true
            }
            None => false,
        };
        self.by_use.insert(self.clock, key);
        if self.by_use.len() > self.capacity {
            if let Some((_, old)) = self.by_use.pop_first() {
                self.last_use.remove(&old);
            }
        }
        hit
    }
}

/// Reads page `page` of `f` (tag `tag`, as `rules::file` made it), and
/// says whether the cache had it (its hit counter moved).
fn read_counting(cache: &Cache, f: &File, page: usize, tag: u8) -> bool {
    let hits = cache.stats().hits;
    read_pages(f, [page], tag);
    cache.stats().hits > hits
}

/// A hot set of 400 pages (0.39x the cache), read twice in order, then
/// read at random for a fifth of 20,000 reads while the other four fifths
/// are cold pages, each read once per lap of an 8,000-page file (so
/// never a hit for any cache of 1,024 pages). The hot pages stay cached:
/// every hot read after warming hits, and the whole hot set is cached at
/// the end. An LRU keeps a hot page only while fewer than 1,024 other
/// pages pass between two of its reads: under half of them here.
#[test]
fn a_hot_set_stays_cached_while_cold_misses_stream_past() {
    let (hot_pages, cold_pages) = (400, 8000);
    let cache = TestCache::pages(CAPACITY)
        .max_folio(PAGE)
        .no_readahead()
        .build();
    let hot = file(&cache, 1, hot_pages);
    let cold = file(&cache, 2, cold_pages);
    let mut lru = Lru::new(CAPACITY);
    for _ in 0..2 {
        read_pages(&hot, 0..hot_pages, 1);
        (0..hot_pages).for_each(|p| {
            lru.access((1, p));
        });
    }
    let mut rng = StdRng::seed_from_u64(18);
    let (mut next_cold, mut hot_reads) = (0, 0);
    let (mut hot_hits, mut lru_hot_hits, mut cold_hits) = (0, 0, 0);
    for _ in 0..20_000 {
        if rng.gen_range(0..5) == 0 {
            let p = rng.gen_range(0..hot_pages);
            hot_reads += 1;
            hot_hits += usize::from(read_counting(&cache, &hot, p, 1));
            lru_hot_hits += usize::from(lru.access((1, p)));
        } else {
            cold_hits += usize::from(read_counting(&cache, &cold, next_cold, 2));
            lru.access((2, next_cold));
            next_cold = (next_cold + 1) % cold_pages;
        }
    }
    let (ratio, lru_ratio) = (
        hot_hits as f64 / hot_reads as f64,
        lru_hot_hits as f64 / hot_reads as f64,
    );
    eprintln!(
        "hot set of 400 pages, 1 read in 5, beside a cold stream: hot hit ratio {ratio:.3}, \
         an exact LRU's {lru_ratio:.3}"
    );
    assert_eq!(cold_hits, 0, "a cold page read once a lap cannot hit");
    assert!(
        ratio > 0.99,
        "the hot set was pushed out: {ratio} ({:?})",
        cache.stats()
    );
    assert!(
        lru_ratio < 0.6,
        "the trace does not test the policy: an LRU got {lru_ratio}"
    );
    assert_eq!(hot.cachestat(0, 0).unwrap().cached, hot_pages as u64);
}

/// Zipfian reads (theta 0.99, YCSB's skew) over a file 4x the cache, the
/// ranks spread over the file by a permutation. After a warm-up of
/// 20,000 reads, the cache's hit ratio over the next 40,000 is at least
/// an exact LRU's on the same reads less 2 points: the policy keeps what
/// a zipfian workload reuses as well as recency alone does.
#[test]
fn zipfian_reads_hit_at_least_as_often_as_an_exact_lru() {
    let pages = 4 * CAPACITY;
    let theta = 0.99;
    // The distribution's cumulative weights, rank 0 the most likely.
    let mut cdf = Vec::with_capacity(pages);
    let mut sum = 0.0;
    for rank in 1..=pages {
        sum += 1.0 / (rank as f64).powf(theta);
        cdf.push(sum);
    }
    let mut rng = StdRng::seed_from_u64(99);
    // 2,654,435,761 is odd, so a bijection of 0..4096.
    let mut draw = || {
        let u = rng.gen::<f64>() * sum;
        let rank = cdf.partition_point(|&c| c < u).min(pages - 1);
        rank * 2_654_435_761 % pages
    };
    let cache = TestCache::pages(CAPACITY)
        .max_folio(PAGE)
        .no_readahead()
        .build();
    let f = file(&cache, 3, pages);
    let mut lru = Lru::new(CAPACITY);
    let (warm, measured) = (20_000, 40_000);
    let (mut hits, mut lru_hits) = (0, 0);
    for i in 0..warm + measured {
        let p = draw();
        let hit = read_counting(&cache, &f, p, 3);
        let lru_hit = lru.access((3, p));
        if i >= warm {
            hits += usize::from(hit);
            lru_hits += usize::from(lru_hit);
        }
    }
    let (ratio, lru_ratio) = (
        hits as f64 / measured as f64,
        lru_hits as f64 / measured as f64,
    );
    eprintln!(
        "zipfian 0.99 over 4x the cache: hit ratio {ratio:.3}, an exact LRU's {lru_ratio:.3}"
    );
    assert!(
        ratio >= lru_ratio - 0.02,
        "hit ratio {ratio} more than 2 points below an exact LRU's {lru_ratio} ({:?})",
        cache.stats()
    );
}
