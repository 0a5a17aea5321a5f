//! An exact LRU of a fixed number of pages, replayed offline over the
//! offsets a run read: the hit ratio a perfect least-recently-used cache
//! of the same capacity gets, beside the one a cache measured. O(1) per
//! access: a map from page to slot, and the slots in a list linked by
//! index, most recent first.

use std::collections::HashMap;

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

/// The hit ratio of an exact LRU of `capacity` pages of `page` bytes over
/// reads of `bs` bytes from several streams: stream `t` makes
/// `counts[t]` reads, the streams taken in turn (one read of each in
/// every turn, as threads running side by side would), `next(t)` giving
/// stream `t`'s next byte offset. A read touches every page it spans,
/// and the ratio is of pages (`None` without a read).
pub fn replay(
    capacity: usize,
    page: u64,
    bs: u64,
    counts: &[u64],
    mut next: impl FnMut(usize) -> u64,
) -> Option<f64> {
    let mut lru = Lru::new(capacity);
    let (mut hits, mut accesses) = (0u64, 0u64);
    let turns = counts.iter().copied().max().unwrap_or(0);
    let page = page.max(1);
    for i in 0..turns {
        for (t, &c) in counts.iter().enumerate() {
            if i >= c {
                continue;
            }
            let off = next(t);
            for p in off / page..(off + bs.max(1)).div_ceil(page) {
                hits += u64::from(lru.access(p));
                accesses += 1;
            }
        }
    }
    (accesses > 0).then(|| hits as f64 / accesses as f64)
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

    #[test]
    fn replay_takes_the_streams_in_turn_and_counts_pages() {
        // Two streams: 0 reads page 0 three times, 1 reads page 1 once.
        let mut seen = Vec::new();
        let r = replay(1, 4096, 4096, &[3, 1], |t| {
            seen.push(t);
            t as u64 * 4096
        });
        assert_eq!(seen, [0, 1, 0, 0]);
        // Capacity 1: miss, miss, miss (page 0 was evicted by 1), hit.
        assert_eq!(r, Some(0.25));
        // A read of 8 KiB touches two pages.
        assert_eq!(replay(4, 4096, 8192, &[2], |_| 0), Some(0.5));
        assert_eq!(replay(4, 4096, 4096, &[], |_| 0), None);
    }
}
