//! The allocator's bitmaps: plain word slices, and the summary bitmap
//! that finds the lowest free block of an order in a few word reads.

/// Bit `i` of a word slice.
pub(super) fn bit(words: &[u64], i: usize) -> bool {
    words[i / 64] & (1 << (i % 64)) != 0
}

/// Sets bits `from..from + n` of `words`, a word at a time.
pub(super) fn set_bits(words: &mut [u64], from: usize, n: usize) {
    let (mut i, end) = (from, from + n);
    while i < end {
        let b = i % 64;
        let take = (64 - b).min(end - i);
        let mask = if take == 64 {
            u64::MAX
        } else {
            ((1u64 << take) - 1) << b
        };
        words[i / 64] |= mask;
        i += take;
    }
}

/// A bitmap with a summary hierarchy: level 0 holds one bit per slot, each
/// level above one bit per word of the level below (set iff that word is
/// not zero), up to a single word. Finding the lowest set bit reads one
/// word per level; setting or clearing a bit touches the levels above only
/// when a word turns non-zero or zero.
pub(super) struct SummaryBitmap {
    /// Number of valid slots; bits at and above it are always clear.
    pub(super) slots: usize,
    /// `levels[0]` is the bitmap; the last level is one word.
    pub(super) levels: Vec<Box<[u64]>>,
}

impl SummaryBitmap {
    /// An all-clear bitmap of `slots` bits.
    pub(super) fn new(slots: usize) -> SummaryBitmap {
        let mut levels = Vec::new();
        let mut words = slots.div_ceil(64).max(1);
        loop {
            levels.push(vec![0u64; words].into_boxed_slice());
            if words == 1 {
                break;
            }
            words = words.div_ceil(64);
        }
        SummaryBitmap { slots, levels }
    }

    /// Whether slot `i` (< slots) is set.
    pub(super) fn get(&self, i: usize) -> bool {
        bit(&self.levels[0], i)
    }

    /// Sets slot `i` (< slots).
    pub(super) fn set(&mut self, i: usize) {
        let mut idx = i;
        for level in self.levels.iter_mut() {
            let word = &mut level[idx / 64];
            let was = *word;
            *word = was | 1 << (idx % 64);
            if was != 0 {
                break;
            }
            idx /= 64;
        }
    }

    /// Clears slot `i` (< slots).
    pub(super) fn clear(&mut self, i: usize) {
        let mut idx = i;
        for level in self.levels.iter_mut() {
            let word = &mut level[idx / 64];
            *word &= !(1 << (idx % 64));
            if *word != 0 {
                break;
            }
            idx /= 64;
        }
    }

    /// The lowest set slot at or after `from` (a scan of the bottom
    /// level's words: for the few top-order blocks a chunk scan visits).
    pub(super) fn next_set(&self, from: usize) -> Option<usize> {
        let words = &self.levels[0];
        let mut w = from / 64;
        let mut bits = *words.get(w)? & (u64::MAX << (from % 64));
        loop {
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
            w += 1;
            bits = *words.get(w)?;
        }
    }

    /// The lowest set slot.
    pub(super) fn first_set(&self) -> Option<usize> {
        let top = self.levels.last()?;
        if top[0] == 0 {
            return None;
        }
        let mut idx = 0;
        for level in self.levels.iter().rev() {
            idx = idx * 64 + level[idx].trailing_zeros() as usize;
        }
        Some(idx)
    }

    /// Heap bytes.
    pub(super) fn bytes(&self) -> usize {
        self.levels.iter().map(|l| l.len() * 8).sum::<usize>()
            + self.levels.capacity() * std::mem::size_of::<Box<[u64]>>()
    }

    /// Checks the summaries and the unused bits; returns the number of set
    /// slots.
    pub(super) fn check(&self) -> Result<usize, String> {
        let leaf = &self.levels[0];
        for i in self.slots..leaf.len() * 64 {
            if bit(leaf, i) {
                return Err(format!("bit {i} set beyond {} slots", self.slots));
            }
        }
        for l in 1..self.levels.len() {
            let below = &self.levels[l - 1];
            let here = &self.levels[l];
            for i in 0..here.len() * 64 {
                let want = i < below.len() && below[i] != 0;
                if bit(here, i) != want {
                    return Err(format!("summary level {l} bit {i} is {}", !want));
                }
            }
        }
        Ok(leaf.iter().map(|w| w.count_ones() as usize).sum())
    }
}
