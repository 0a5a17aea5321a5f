//! An exact LRU stack over a sub-sample of the sampled keys, for the
//! curve's points above 1x where shadows run out (docs/design.md, "How big
//! should the cache be"), and the hasher of the sample's maps.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// An exact LRU stack over the sampled keys: each key's last access time,
/// and a Fenwick tree over times with a 1 at each key's last one, so the
/// distinct keys read since a key's last read are a range sum. Times are
/// renumbered (`compact`) when they reach the tree's end: amortised over
/// as many reads as keys, O(log n) a read.
#[derive(Default)]
pub(crate) struct Stack {
    last: HashMap<u64, u32, BuildHasherDefault<KeyHasher>>,
    tree: Vec<u32>,
    now: u32,
}

/// The sample's keys are [`key_hash`](super::key_hash)es already: its maps hash them by
/// a rotation (SipHash would only hash them again).
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, v: u64) {
        // The top bits of a sampled key are its stratum's slot, nearly
        // all zero (`key_hash`); the map's probe tags are the top bits:
        // rotate the run's hash into them.
        self.0 = v.rotate_right(8);
    }
}

impl Stack {
    /// Keys held.
    pub(crate) fn keys(&self) -> usize {
        self.last.len()
    }

    /// Reads key `h`: the number of other keys read since its last read
    /// (its stack distance), or `None` the first time.
    pub(crate) fn access(&mut self, h: u64) -> Option<u64> {
        if self.now as usize + 1 >= self.tree.len() {
            self.compact();
        }
        self.now += 1;
        let now = self.now;
        let d = self.last.insert(h, now).map(|t| {
            let d = self.prefix(now - 1).wrapping_sub(self.prefix(t));
            self.add(t, u32::MAX);
            u64::from(d)
        });
        self.add(now, 1);
        d
    }

    /// The number of other keys read since key `h`'s last read (its
    /// depth in the stack), or `None` if the stack does not hold it.
    pub(crate) fn depth(&self, h: u64) -> Option<u64> {
        let t = *self.last.get(&h)?;
        Some(u64::from(
            self.prefix(self.now).wrapping_sub(self.prefix(t)),
        ))
    }

    /// Drops the keys hashed at or above `threshold`.
    pub(crate) fn retain_below(&mut self, threshold: u64) {
        self.last.retain(|h, _| *h <= threshold);
        self.compact();
    }

    /// Renumbers the keys' times 1..=n in their order and rebuilds the
    /// tree with room for as many reads again.
    fn compact(&mut self) {
        let mut order: Vec<(u32, u64)> = self.last.iter().map(|(h, t)| (*t, *h)).collect();
        order.sort_unstable();
        let n = order.len();
        self.tree = vec![0; (2 * n + 2).max(1024)];
        for (i, (_, h)) in order.iter().enumerate() {
            let t = i as u32 + 1;
            self.last.insert(*h, t);
            self.tree[t as usize] = 1;
        }
        // The tree in O(len): each node passes its sum to its parent.
        for i in 1..self.tree.len() {
            let j = i + (i & i.wrapping_neg());
            if j < self.tree.len() {
                self.tree[j] = self.tree[j].wrapping_add(self.tree[i]);
            }
        }
        self.now = n as u32;
    }

    fn add(&mut self, mut i: u32, v: u32) {
        while (i as usize) < self.tree.len() {
            self.tree[i as usize] = self.tree[i as usize].wrapping_add(v);
            i += i & i.wrapping_neg();
        }
    }

    fn prefix(&self, mut i: u32) -> u32 {
        let mut s = 0u32;
        while i > 0 {
            s = s.wrapping_add(self.tree[i as usize]);
            i -= i & i.wrapping_neg();
        }
        s
    }
}
