//! Caches of a fixed number of pages replayed offline over the offsets a
//! run read, for the hit ratios a measured cache is judged against:
//! - an exact LRU: what a perfect least-recently-used cache of the same
//!   capacity gets. O(1) per access: a map from page to slot, and the
//!   slots in a list linked by index, most recent first.
//! - Belady's MIN: on a miss with the cache full, evict the page whose
//!   next use is furthest away (or never comes), or keep the cache as it
//!   is when that is the page just read (a cache may read a page for its
//!   caller without keeping it, as an uncached read does). No policy of that
//!   capacity, however clever, gets more hits over the same accesses,
//!   so it bounds what any engine could gain by replacing pages better;
//!   and the pages read for the first time (compulsory misses) bound it.
//!   O(log n) per access: next uses found in one backward pass, and the
//!   cached pages ordered by next use.
//!
//! A long run reads far more pages than an offline replay can afford
//! (60M reads in 3 s of 16 threads; an exact MIN of them took 40 s). Past
//! [`EXACT_ACCESSES`] page accesses the replay is sampled by page (SHARDS,
//! Waldspurger et al., FAST '15): a page is replayed, every access of it,
//! when a hash of its number falls in a `1/2^s` slice, and the caches
//! replayed hold `capacity / 2^s` pages. Every access of a sampled page is
//! kept, so each one's reuse pattern is intact, and the ratios over the
//! sample estimate those over all the pages: within 2 points on the
//! zipfian and uniform streams of the tests, which compare the two. The
//! work is linear in the reads (drawing the offsets again) plus about
//! `EXACT_ACCESSES` replayed accesses, whatever the run's length.

use std::collections::{BTreeSet, HashMap};

/// No slot.
const NIL: u32 = u32::MAX;

/// An LRU of up to `capacity` keys.
pub struct Lru {
    capacity: usize,
    slot_of: HashMap<u64, u32>,
    key: Vec<u64>,
    prev: Vec<u32>,
    next: Vec<u32>,
    /// Most recent.
    head: u32,
    /// Least recent: the next to go.
    tail: u32,
}

impl Lru {
    /// An empty LRU of `capacity` keys (0 keeps nothing; at most
    /// `u32::MAX - 1`).
    pub fn new(capacity: usize) -> Lru {
        let capacity = capacity.min(NIL as usize - 1);
        Lru {
            capacity,
            slot_of: HashMap::with_capacity(capacity),
            key: Vec::with_capacity(capacity),
            prev: Vec::with_capacity(capacity),
            next: Vec::with_capacity(capacity),
            head: NIL,
            tail: NIL,
        }
    }

    fn unlink(&mut self, s: u32) {
        let (p, n) = (self.prev[s as usize], self.next[s as usize]);
        match p {
            NIL => self.head = n,
            p => self.next[p as usize] = n,
        }
        match n {
            NIL => self.tail = p,
            n => self.prev[n as usize] = p,
        }
    }

    fn push_front(&mut self, s: u32) {
        self.prev[s as usize] = NIL;
        self.next[s as usize] = self.head;
        match self.head {
            NIL => self.tail = s,
            h => self.prev[h as usize] = s,
        }
        self.head = s;
    }

    /// Accesses `key`: true if it was cached (a hit). Either way it is
    /// the most recent key afterwards, the least recent evicted to make
    /// room.
    pub fn access(&mut self, key: u64) -> bool {
        if self.capacity == 0 {
            return false;
        }
        if let Some(&s) = self.slot_of.get(&key) {
            self.unlink(s);
            self.push_front(s);
            return true;
        }
        let s = if self.key.len() < self.capacity {
            self.key.push(key);
            self.prev.push(NIL);
            self.next.push(NIL);
            (self.key.len() - 1) as u32
        } else {
            let s = self.tail;
            self.unlink(s);
            self.slot_of.remove(&self.key[s as usize]);
            self.key[s as usize] = key;
            s
        };
        self.slot_of.insert(key, s);
        self.push_front(s);
        false
    }
}

/// Page accesses replayed exactly; past this, the replay samples pages
/// (see the module documentation), about this many accesses replayed.
pub const EXACT_ACCESSES: u64 = 1 << 20;

/// The fewest pages a sampled replay's caches hold: a sample is never
/// taken so thin that the scaled capacity drops below this (a cache of a
/// few pages over a sample of pages estimates badly).
const MIN_SAMPLED_CAPACITY: usize = 1024;

/// The hit ratios [`replay`] gives, of pages read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Replayed {
    /// An exact LRU's.
    pub lru: f64,
    /// Belady's MIN's: the most any replacement policy of the capacity
    /// gets over these accesses.
    pub min: f64,
    /// 1 - the pages read for the first time over the accesses: what an
    /// unbounded cache gets.
    pub unbounded: f64,
    /// One page in this many was replayed (1: all, exact).
    pub sampled_one_in: u64,
    /// The page accesses replayed.
    pub accesses: u64,
}

/// The hit ratios of an exact LRU and of Belady's MIN, each of
/// `capacity` pages of `page` bytes, over reads of `bs` bytes from
/// several streams: stream `t` makes `counts[t]` reads, the streams taken
/// in turn (one read of each in every turn, as threads running side by
/// side would), `next(t)` giving stream `t`'s next byte offset. A read
/// touches every page it spans, and the ratios are of pages (`None`
/// without a read). Past [`EXACT_ACCESSES`] page accesses, sampled by
/// page (see the module documentation).
pub fn replay(
    capacity: usize,
    page: u64,
    bs: u64,
    counts: &[u64],
    next: impl FnMut(usize) -> u64,
) -> Option<Replayed> {
    let page = page.max(1);
    // At most this many pages per read (one more where a read is not
    // aligned to pages).
    let per_read = bs.max(1).div_ceil(page) + u64::from(!bs.is_multiple_of(page));
    let accesses = counts.iter().sum::<u64>().saturating_mul(per_read);
    replay_sampled(
        capacity,
        page,
        bs,
        counts,
        next,
        sample_shift(accesses, capacity),
    )
}

/// The sample a replay of about `accesses` page accesses with caches of
/// `capacity` pages takes: one page in `2^s`, the least `s` that brings the
/// accesses to [`EXACT_ACCESSES`], but never so thin that the scaled
/// capacity drops below [`MIN_SAMPLED_CAPACITY`].
fn sample_shift(accesses: u64, capacity: usize) -> u32 {
    let mut s = 0;
    while (accesses >> s) > EXACT_ACCESSES && (capacity >> (s + 1)) >= MIN_SAMPLED_CAPACITY {
        s += 1;
    }
    s
}

/// [`replay`] over the pages whose hash falls in one `2^shift`-th slice,
/// with caches of `capacity >> shift` pages (all pages and `capacity` at
/// `shift` 0).
fn replay_sampled(
    capacity: usize,
    page: u64,
    bs: u64,
    counts: &[u64],
    mut next: impl FnMut(usize) -> u64,
    shift: u32,
) -> Option<Replayed> {
    let mask = (1u64 << shift) - 1;
    let mut pages = Vec::new();
    // Every page access, sampled or not.
    let mut all = 0u64;
    let turns = counts.iter().copied().max().unwrap_or(0);
    let page = page.max(1);
    for i in 0..turns {
        for (t, &c) in counts.iter().enumerate() {
            if i >= c {
                continue;
            }
            let off = next(t);
            let span = off / page..(off.saturating_add(bs.max(1))).div_ceil(page);
            all += span.end - span.start;
            pages.extend(span.filter(|&p| crate::data::mix(p ^ SAMPLE_SALT) & mask == 0));
        }
    }
    if all == 0 {
        return None;
    }
    let capacity = capacity >> shift;
    let mut lru = Lru::new(capacity);
    let lru_hits = pages.iter().filter(|&&p| lru.access(p)).count();
    let (min_hits, first) = min_hits(capacity, &pages);
    // The accesses a sample of one page in 2^s would hold on average; a
    // sample that caught more (a hot page in it) or fewer (a hot page
    // out of it) than that is adjusted as SHARDS-adj does: the difference,
    // mostly accesses of the hottest pages, are hits of any cache.
    let expected = all as f64 / (1u64 << shift) as f64;
    let adjust = expected - pages.len() as f64;
    let ratio = |hits: usize| ((hits as f64 + adjust) / expected).clamp(0.0, 1.0);
    Some(Replayed {
        lru: ratio(lru_hits),
        min: ratio(min_hits),
        unbounded: (1.0 - first as f64 / expected).clamp(0.0, 1.0),
        sampled_one_in: 1 << shift,
        accesses: pages.len() as u64,
    })
}

/// What the sampling hash mixes into a page number first (the hash of 0
/// is 0: page 0 would always be in the sample).
const SAMPLE_SALT: u64 = 0x5851_f42d_4c95_7f2d;

/// Belady's MIN over `keys` with room for `capacity`: its hits, and the
/// distinct keys (each one's first access, a miss for any cache).
fn min_hits(capacity: usize, keys: &[u64]) -> (usize, usize) {
    let (hit, distinct) = min_replay(capacity, keys);
    (hit.iter().filter(|&&h| h).count(), distinct)
}

/// Belady's MIN over `keys` with room for `capacity`: whether each access
/// hit, and the distinct keys.
pub(crate) fn min_replay(capacity: usize, keys: &[u64]) -> (Vec<bool>, usize) {
    // next_use[i]: where keys[i] comes again (keys.len(): never).
    let never = keys.len();
    let mut next_use = vec![never; keys.len()];
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for (i, &k) in keys.iter().enumerate().rev() {
        if let Some(j) = seen.insert(k, i) {
            next_use[i] = j;
        }
    }
    let distinct = seen.len();
    // The cached keys by (next use, key); `at` is each cached key's entry.
    let mut by_next: BTreeSet<(usize, u64)> = BTreeSet::new();
    let mut at: HashMap<u64, usize> = HashMap::new();
    let mut hit = vec![false; keys.len()];
    for (i, &k) in keys.iter().enumerate() {
        if let Some(n) = at.get(&k).copied() {
            hit[i] = true;
            by_next.remove(&(n, k));
        } else if capacity == 0 {
            continue;
        } else if at.len() == capacity {
            match by_next.last().copied() {
                Some((n, victim)) if n > next_use[i] => {
                    by_next.remove(&(n, victim));
                    at.remove(&victim);
                }
                // Every cached key is used before this one: not kept.
                _ => continue,
            }
        }
        by_next.insert((next_use[i], k));
        at.insert(k, next_use[i]);
    }
    (hit, distinct)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The obvious LRU: a vector, most recent last.
    fn model(capacity: usize, keys: &[u64]) -> Vec<bool> {
        let mut v: Vec<u64> = Vec::new();
        keys.iter()
            .map(|&k| {
                let hit = match v.iter().position(|&x| x == k) {
                    Some(i) => {
                        v.remove(i);
                        true
                    }
                    None => false,
                };
                v.push(k);
                if v.len() > capacity {
                    v.remove(0);
                }
                hit
            })
            .collect()
    }

    proptest! {
        #[test]
        fn matches_the_obvious_lru(capacity in 0usize..8, keys in prop::collection::vec(0u64..12, 0..200)) {
            let mut lru = Lru::new(capacity);
            let got: Vec<bool> = keys.iter().map(|&k| lru.access(k)).collect();
            prop_assert_eq!(got, model(capacity, &keys));
        }
    }

    /// MIN by brute force: on a miss with the cache full, scan the cache
    /// for the key used furthest ahead.
    fn min_model(capacity: usize, keys: &[u64]) -> usize {
        let mut c: Vec<u64> = Vec::new();
        let mut hits = 0;
        for (i, &k) in keys.iter().enumerate() {
            if c.contains(&k) {
                hits += 1;
                continue;
            }
            if capacity == 0 {
                continue;
            }
            if c.len() == capacity {
                let next = |x: u64| {
                    keys[i + 1..]
                        .iter()
                        .position(|&y| y == x)
                        .unwrap_or(usize::MAX)
                };
                let v = (0..c.len()).max_by_key(|&j| next(c[j])).unwrap();
                if next(c[v]) <= next(k) {
                    continue;
                }
                c.swap_remove(v);
            }
            c.push(k);
        }
        hits
    }

    proptest! {
        #[test]
        fn min_matches_brute_force_and_beats_lru(capacity in 0usize..8, keys in prop::collection::vec(0u64..12, 0..200)) {
            let (hits, distinct) = min_hits(capacity, &keys);
            prop_assert_eq!(hits, min_model(capacity, &keys));
            let lru = model(capacity, &keys).iter().filter(|&&h| h).count();
            prop_assert!(hits >= lru);
            prop_assert!(hits <= keys.len() - distinct);
        }
    }

    #[test]
    fn replay_takes_the_streams_in_turn_and_counts_pages() {
        // Two streams: 0 reads page 0 three times, 1 reads page 1 once.
        let mut seen = Vec::new();
        let r = replay(1, 4096, 4096, &[3, 1], |t| {
            seen.push(t);
            t as u64 * 4096
        });
        assert_eq!(seen, [0, 1, 0, 0]);
        // Capacity 1, pages 0 1 0 0. LRU: miss, miss, miss (page 0 was
        // evicted by 1), hit. MIN keeps page 0 (used again sooner than 1,
        // never): miss, miss, hit, hit. Unbounded: two first reads.
        assert_eq!(
            r,
            Some(Replayed {
                lru: 0.25,
                min: 0.5,
                unbounded: 0.5,
                sampled_one_in: 1,
                accesses: 4,
            })
        );
        // A read of 8 KiB touches two pages.
        assert_eq!(replay(4, 4096, 8192, &[2], |_| 0).map(|r| r.lru), Some(0.5));
        assert_eq!(replay(4, 4096, 4096, &[], |_| 0), None);
    }

    /// A zipfian (YCSB's 0.99) stream of page offsets over `pages` pages.
    fn zipf_pages(pages: u64, seed: u64) -> impl FnMut(usize) -> u64 {
        let z = crate::zipf::Zipf::new(pages, 0.99).unwrap();
        let mut k = seed;
        move |_| {
            k = k.wrapping_add(0x9e37_79b9_7f4a_7c15);
            z.draw(crate::data::mix(k)) * 4096
        }
    }

    #[test]
    fn a_sampled_replay_is_within_two_points_of_the_exact_one() {
        // Zipfian and uniform reads of 4 KiB over 256k pages, caches of a
        // quarter and a sixteenth of them: one page in 16 against all.
        for (capacity, zipf) in [(65_536, true), (16_384, true), (65_536, false)] {
            let reads = 1_000_000u64;
            let stream = || -> Box<dyn FnMut(usize) -> u64> {
                if zipf {
                    Box::new(zipf_pages(1 << 18, 5))
                } else {
                    let mut k = 9u64;
                    Box::new(move |_| {
                        k += 1;
                        (crate::data::mix(k) % (1 << 18)) * 4096
                    })
                }
            };
            let exact = replay_sampled(capacity, 4096, 4096, &[reads], stream(), 0).unwrap();
            let sampled = replay_sampled(capacity, 4096, 4096, &[reads], stream(), 4).unwrap();
            assert_eq!((exact.sampled_one_in, sampled.sampled_one_in), (1, 16));
            for (what, e, s) in [
                ("LRU", exact.lru, sampled.lru),
                ("MIN", exact.min, sampled.min),
                ("unbounded", exact.unbounded, sampled.unbounded),
            ] {
                assert!(
                    (e - s).abs() <= 0.02,
                    "{what} (capacity {capacity}, zipf {zipf}): exact {e:.4}, sampled {s:.4}"
                );
            }
        }
    }

    #[test]
    fn a_long_replay_replays_a_bounded_number_of_accesses() {
        // 16 streams of 1M reads each over 4M pages, a 1M-page cache:
        // 16M page accesses, about EXACT_ACCESSES replayed.
        let mut k = 0u64;
        let r = replay(1 << 20, 4096, 4096, &[1 << 20; 16], |_| {
            k += 1;
            (crate::data::mix(k) % (1 << 22)) * 4096
        })
        .unwrap();
        assert_eq!(r.sampled_one_in, 16);
        assert!(
            r.accesses <= 2 * EXACT_ACCESSES,
            "{} accesses replayed",
            r.accesses
        );
    }

    proptest! {
        #[test]
        fn short_replays_are_exact(capacity in 0usize..8, keys in prop::collection::vec(0u64..12, 1..200)) {
            // Under EXACT_ACCESSES, the replay is the unsampled one: MIN as
            // the brute force gets it, LRU as the obvious one.
            let mut it = keys.iter();
            let r = replay(capacity, 4096, 4096, &[keys.len() as u64], |_| it.next().unwrap() * 4096).unwrap();
            let n = keys.len() as f64;
            prop_assert_eq!(r.sampled_one_in, 1);
            prop_assert_eq!(r.min, min_model(capacity, &keys) as f64 / n);
            prop_assert_eq!(r.lru, model(capacity, &keys).iter().filter(|&&h| h).count() as f64 / n);
        }
    }
}
