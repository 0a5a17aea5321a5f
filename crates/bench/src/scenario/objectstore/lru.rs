//! A memory LRU of blocks bounded by their bytes, what the model of
//! SlateDB's part cache keeps (SlateDB's evictor approximates LRU by
//! picking the older of two random entries, which an exact LRU only
//! betters).

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

use bytes::{Bytes, BytesMut};

/// A block's key: the object's index and the block's.
pub type BlockKey = (u32, u64);

/// The LRU (not thread-safe: its user locks it).
#[derive(Debug, Default)]
pub struct BlockLru {
    /// Each block, and its tick of last use.
    map: HashMap<BlockKey, (Bytes, u64)>,
    /// Blocks by tick of last use: the first is the least recent.
    order: BTreeMap<u64, BlockKey>,
    tick: u64,
    bytes: u64,
    capacity: u64,
}

impl BlockLru {
    /// An empty LRU of at most `capacity` bytes.
    pub fn new(capacity: u64) -> BlockLru {
        BlockLru {
            capacity,
            ..BlockLru::default()
        }
    }

    /// The block `key`, now the most recent.
    pub fn get(&mut self, key: BlockKey) -> Option<Bytes> {
        let (data, t) = self.map.get_mut(&key)?;
        self.order.remove(t);
        self.tick += 1;
        *t = self.tick;
        self.order.insert(self.tick, key);
        Some(data.clone())
    }

    /// Inserts `key` as the most recent; returns what it evicted, oldest
    /// first.
    pub fn insert(&mut self, key: BlockKey, data: Bytes) -> Vec<(BlockKey, Bytes)> {
        if let Some((old, t)) = self.map.remove(&key) {
            self.order.remove(&t);
            self.bytes -= old.len() as u64;
        }
        self.tick += 1;
        self.bytes += data.len() as u64;
        self.map.insert(key, (data, self.tick));
        self.order.insert(self.tick, key);
        let mut evicted = Vec::new();
        while self.bytes > self.capacity {
            let Some((_, k)) = self.order.pop_first() else {
                break;
            };
            if let Some((d, _)) = self.map.remove(&k) {
                self.bytes -= d.len() as u64;
                evicted.push((k, d));
            }
        }
        evicted
    }
}

/// `range` out of the blocks of `block` bytes that hold it, `parts`, the
/// first being block `first`.
pub fn assemble(range: &Range<u64>, block: u64, first: u64, parts: &[Bytes]) -> Bytes {
    let mut out = BytesMut::with_capacity((range.end - range.start) as usize);
    for (b, data) in (first..).zip(parts) {
        let base = b * block;
        let from = range.start.max(base) - base;
        let to = range.end.min(base + data.len() as u64) - base;
        out.extend_from_slice(&data[from as usize..to as usize]);
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recent_goes_first_and_the_bytes_stay_bounded() {
        let mut lru = BlockLru::new(3);
        for k in 0..3 {
            assert!(lru.insert((0, k), Bytes::from_static(b"x")).is_empty());
        }
        assert!(lru.get((0, 0)).is_some());
        let gone = lru.insert((0, 3), Bytes::from_static(b"y"));
        assert_eq!(gone.iter().map(|g| g.0).collect::<Vec<_>>(), [(0, 1)]);
        let gone = lru.insert((0, 4), Bytes::from_static(b"zz"));
        assert_eq!(
            gone.iter().map(|g| g.0).collect::<Vec<_>>(),
            [(0, 2), (0, 0)]
        );
        assert!(lru.get((0, 3)).is_some() && lru.get((0, 4)).is_some());
    }
}
