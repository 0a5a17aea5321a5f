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
}

/// The hit ratios of an exact LRU and of Belady's MIN, each of
/// `capacity` pages of `page` bytes, over reads of `bs` bytes from
/// several streams: stream `t` makes `counts[t]` reads, the streams taken
/// in turn (one read of each in every turn, as threads running side by
/// side would), `next(t)` giving stream `t`'s next byte offset. A read
/// touches every page it spans, and the ratios are of pages (`None`
/// without a read).
pub fn replay(
    capacity: usize,
    page: u64,
    bs: u64,
    counts: &[u64],
    mut next: impl FnMut(usize) -> u64,
) -> Option<Replayed> {
    let mut pages = Vec::new();
    let turns = counts.iter().copied().max().unwrap_or(0);
    let page = page.max(1);
    for i in 0..turns {
        for (t, &c) in counts.iter().enumerate() {
            if i >= c {
                continue;
            }
            let off = next(t);
            pages.extend(off / page..(off.saturating_add(bs.max(1))).div_ceil(page));
        }
    }
    if pages.is_empty() {
        return None;
    }
    let mut lru = Lru::new(capacity);
    let lru_hits = pages.iter().filter(|&&p| lru.access(p)).count();
    let (min_hits, first) = min_hits(capacity, &pages);
    let n = pages.len() as f64;
    Some(Replayed {
        lru: lru_hits as f64 / n,
        min: min_hits as f64 / n,
        unbounded: 1.0 - first as f64 / n,
    })
}

/// Belady's MIN over `keys` with room for `capacity`: its hits, and the
/// distinct keys (each one's first access, a miss for any cache).
fn min_hits(capacity: usize, keys: &[u64]) -> (usize, usize) {
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
    let mut hits = 0;
    for (i, &k) in keys.iter().enumerate() {
        if let Some(n) = at.get(&k).copied() {
            hits += 1;
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
    (hits, distinct)
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
                unbounded: 0.5
            })
        );
        // A read of 8 KiB touches two pages.
        assert_eq!(replay(4, 4096, 8192, &[2], |_| 0).map(|r| r.lru), Some(0.5));
        assert_eq!(replay(4, 4096, 4096, &[], |_| 0), None);
    }
}
