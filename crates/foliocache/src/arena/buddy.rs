//! The buddy allocator's state, behind the arena lock: per order a
//! bitmap of free blocks and one of allocated blocks, the counters, the
//! populated chunks and the limit. See the arena's module documentation
//! for the scheme.

use super::bitmap::{bit, set_bits, SummaryBitmap};
use super::{ArenaError, CHUNK_PAGES, MAX_ORDER, ORDERS};

/// The allocator's state, behind the arena lock. Page indices are `u32`,
/// slots of order `n` are `page >> n`; order `n` has `pages >> n` slots
/// (a slot exists iff its whole block is inside the arena).
pub(super) struct Buddy {
    /// Capacity in pages.
    pub(super) pages: u32,
    /// Pages in free blocks.
    pub(super) free_pages: usize,
    /// At most this many pages may be allocated at once (the capacity
    /// unless the pressure watcher lowered it).
    pub(super) limit: usize,
    /// One bit per 2 MiB chunk (the last one may be shorter): faulted in,
    /// as far as the allocator knows.
    pub(super) populated: Box<[u64]>,
    /// Set bits in `populated`.
    pub(super) populated_chunks: usize,
    /// Bytes given back to the OS by [`Arena::release_free`] so far.
    pub(super) released_bytes: usize,
    /// Per order: which slots are free blocks.
    pub(super) free: [SummaryBitmap; ORDERS],
    /// Per order: which slots are allocated blocks.
    pub(super) allocated: [Box<[u64]>; ORDERS],
    /// Per order: number of free blocks (set bits in `free`).
    pub(super) counts: [usize; ORDERS],
}

impl Buddy {
    /// All pages free, carved into the largest aligned blocks.
    pub(super) fn new(pages: u32) -> Buddy {
        let slots = |order: usize| (pages >> order) as usize;
        let mut buddy = Buddy {
            pages,
            free_pages: pages as usize,
            limit: pages as usize,
            populated: vec![0u64; pages.div_ceil(CHUNK_PAGES).div_ceil(64) as usize]
                .into_boxed_slice(),
            populated_chunks: 0,
            released_bytes: 0,
            free: std::array::from_fn(|order| SummaryBitmap::new(slots(order))),
            allocated: std::array::from_fn(|order| {
                vec![0u64; slots(order).div_ceil(64)].into_boxed_slice()
            }),
            counts: [0; ORDERS],
        };
        let mut page = 0u32;
        while page < pages {
            // Largest order that page is aligned to and that fits.
            let order = (0..=MAX_ORDER)
                .rev()
                .find(|&o| page & ((1 << o) - 1) == 0 && pages - page >= 1 << o)
                .unwrap_or(0);
            buddy.free[order as usize].set((page >> order) as usize);
            buddy.counts[order as usize] += 1;
            page += 1 << order;
        }
        buddy
    }

    /// Number of order-`order` slots.
    pub(super) fn slots(&self, order: u32) -> usize {
        (self.pages >> order) as usize
    }

    /// Number of chunks (the last one may be partial).
    pub(super) fn chunks(&self) -> usize {
        self.pages.div_ceil(CHUNK_PAGES) as usize
    }

    /// Whether the thread that populates ahead should look again: an
    /// allocation (or a batch) took a whole free 2 MiB block (there were
    /// `chunks_free` before it), and chunks not faulted in remain.
    pub(super) fn wants_ahead(&self, chunks_free: usize) -> bool {
        self.counts[MAX_ORDER as usize] < chunks_free && self.populated_chunks < self.chunks()
    }

    /// Marks `chunk` populated; returns whether it was not.
    pub(super) fn mark_populated(&mut self, chunk: u32) -> bool {
        let (w, b) = (chunk as usize / 64, chunk % 64);
        let was = self.populated[w] & 1 << b != 0;
        self.populated[w] |= 1 << b;
        self.populated_chunks += usize::from(!was);
        !was
    }

    /// Marks `chunk` unpopulated.
    pub(super) fn clear_populated(&mut self, chunk: u32) {
        let (w, b) = (chunk as usize / 64, chunk % 64);
        let was = self.populated[w] & 1 << b != 0;
        self.populated[w] &= !(1 << b);
        self.populated_chunks -= usize::from(was);
    }

    /// Takes every free block inside chunks `first..end` of a populated
    /// chunk out of the free sets, marking it allocated at its order, and
    /// appends `(page, order)` for each: for [`Arena::release_free`], which
    /// frees them back. The limit is not applied.
    pub(super) fn take_free(&mut self, first: u32, end: u32, out: &mut Vec<(u32, u32)>) {
        for o in 0..=MAX_ORDER {
            let ou = o as usize;
            let from = ((first * CHUNK_PAGES) >> o) as usize;
            let to = (((end * CHUNK_PAGES) >> o) as usize).min(self.slots(o));
            let mut slot = from;
            while slot < to {
                let word = self.free[ou].levels[0][slot / 64] >> (slot % 64);
                if word == 0 {
                    slot = (slot / 64 + 1) * 64;
                    continue;
                }
                slot += word.trailing_zeros() as usize;
                if slot >= to {
                    break;
                }
                let page = (slot as u32) << o;
                if bit(&self.populated, (page / CHUNK_PAGES) as usize) {
                    self.free[ou].clear(slot);
                    self.counts[ou] -= 1;
                    self.allocated[ou][slot / 64] |= 1 << (slot % 64);
                    self.free_pages -= 1 << o;
                    out.push((page, o));
                }
                slot += 1;
            }
        }
    }

    /// See [`Arena::alloc`]; `order <= MAX_ORDER`.
    pub(super) fn alloc(&mut self, order: u32) -> Option<u32> {
        if self.pages as usize - self.free_pages + (1 << order) > self.limit {
            return None;
        }
        let from = (order..=MAX_ORDER).find(|&o| self.counts[o as usize] > 0)?;
        let slot = self.free[from as usize].first_set()?;
        self.free[from as usize].clear(slot);
        self.counts[from as usize] -= 1;
        let page = (slot as u32) << from;
        // Split: keep the lower half, free the upper half, at each order
        // from `from - 1` down to `order`.
        for o in (order..from).rev() {
            self.free[o as usize].set(((page >> o) | 1) as usize);
            self.counts[o as usize] += 1;
        }
        let slot = (page >> order) as usize;
        self.allocated[order as usize][slot / 64] |= 1 << (slot % 64);
        self.free_pages -= 1 << order;
        Some(page)
    }

    /// Takes a whole free block of the smallest order above `order` that
    /// has one, if `want` order-`order` blocks would use it all, and marks
    /// its `2^(from - order)` pieces allocated at `order`: what as many
    /// calls of [`alloc`](Self::alloc) would hand out (they split that
    /// same block and take its pieces in ascending order), in one step.
    /// Returns its first page and order, or `None` (no such block, a batch
    /// too short for it, a free block of `order` itself to take first, or
    /// the limit): then allocate one block at a time.
    pub(super) fn alloc_whole(&mut self, order: u32, want: usize) -> Option<(u32, u32)> {
        let from = (order..=MAX_ORDER).find(|&o| self.counts[o as usize] > 0)?;
        let pieces = 1usize << (from - order);
        if from == order
            || want < pieces
            || self.pages as usize - self.free_pages + (1 << from) > self.limit
        {
            return None;
        }
        let slot = self.free[from as usize].first_set()?;
        self.free[from as usize].clear(slot);
        self.counts[from as usize] -= 1;
        let page = (slot as u32) << from;
        set_bits(
            &mut self.allocated[order as usize],
            (page >> order) as usize,
            pieces,
        );
        self.free_pages -= 1 << from;
        Some((page, from))
    }

    /// See [`Arena::free`].
    pub(super) fn free(&mut self, page: u32, order: u32) -> Result<(), ArenaError> {
        if order > MAX_ORDER {
            return Err(ArenaError::InvalidOrder { order });
        }
        if page >= self.pages {
            return Err(ArenaError::OutOfRange {
                page,
                capacity_pages: self.pages,
            });
        }
        if page & ((1 << order) - 1) != 0 {
            return Err(ArenaError::Misaligned { page, order });
        }
        let slot = (page >> order) as usize;
        if slot >= self.slots(order) || !bit(&self.allocated[order as usize], slot) {
            return Err(self.diagnose(page, order));
        }
        self.allocated[order as usize][slot / 64] &= !(1 << (slot % 64));
        self.free_pages += 1 << order;
        // Merge with free buddies.
        let mut page = page;
        let mut o = order;
        while o < MAX_ORDER {
            let buddy = ((page >> o) ^ 1) as usize;
            if buddy >= self.slots(o) || !self.free[o as usize].get(buddy) {
                break;
            }
            self.free[o as usize].clear(buddy);
            self.counts[o as usize] -= 1;
            page &= !(1 << o);
            o += 1;
        }
        self.free[o as usize].set((page >> o) as usize);
        self.counts[o as usize] += 1;
        Ok(())
    }

    /// Why freeing the aligned, in-range `page` at `order` is wrong: finds
    /// the block that holds `page`.
    pub(super) fn diagnose(&self, page: u32, order: u32) -> ArenaError {
        for o in 0..=MAX_ORDER {
            let slot = (page >> o) as usize;
            if slot >= self.slots(o) {
                continue;
            }
            let start = page & !((1 << o) - 1);
            if self.free[o as usize].get(slot) {
                return ArenaError::DoubleFree {
                    page,
                    order,
                    free_block: start,
                    free_order: o,
                };
            }
            if bit(&self.allocated[o as usize], slot) {
                return ArenaError::WrongOrder {
                    page,
                    order,
                    allocated_block: start,
                    allocated_order: o,
                };
            }
        }
        // Every page is in some block (check() verifies it); should the
        // bookkeeping ever be broken, still refuse rather than panic.
        log::error!("arena: page {page} is in no block; bookkeeping is inconsistent");
        ArenaError::OutOfRange {
            page,
            capacity_pages: self.pages,
        }
    }

    /// See [`Arena::metadata_bytes`].
    pub(super) fn metadata_bytes(&self) -> usize {
        std::mem::size_of::<Buddy>()
            + self.free.iter().map(SummaryBitmap::bytes).sum::<usize>()
            + self.allocated.iter().map(|a| a.len() * 8).sum::<usize>()
            + self.populated.len() * 8
    }

    /// See [`Arena::check_consistency`].
    pub(super) fn check(&self) -> Result<(), String> {
        let pages = self.pages as usize;
        let mut owner = vec![0u8; pages];
        let mut free_pages = 0;
        for o in 0..=MAX_ORDER {
            let ou = o as usize;
            let slots = self.slots(o);
            let set = self.free[ou]
                .check()
                .map_err(|e| format!("order {o} free bitmap: {e}"))?;
            if set != self.counts[ou] {
                return Err(format!(
                    "order {o}: {set} free bits but count {}",
                    self.counts[ou]
                ));
            }
            free_pages += set << o;
            let alloc = &self.allocated[ou];
            for i in slots..alloc.len() * 64 {
                if bit(alloc, i) {
                    return Err(format!("order {o}: allocated bit {i} beyond {slots} slots"));
                }
            }
            for slot in 0..slots {
                let is_free = self.free[ou].get(slot);
                let is_alloc = bit(alloc, slot);
                if !is_free && !is_alloc {
                    continue;
                }
                if is_free && is_alloc {
                    return Err(format!("order {o} slot {slot} both free and allocated"));
                }
                if is_free && o < MAX_ORDER {
                    let buddy = slot ^ 1;
                    if buddy < slots && self.free[ou].get(buddy) {
                        return Err(format!(
                            "order {o}: free blocks {slot} and {buddy} are unmerged buddies"
                        ));
                    }
                }
                let start = slot << o;
                for (p, n) in owner.iter_mut().enumerate().skip(start).take(1 << o) {
                    *n += 1;
                    if *n > 1 {
                        return Err(format!("page {p} is in two blocks (one of order {o})"));
                    }
                }
            }
        }
        if let Some(p) = owner.iter().position(|&n| n == 0) {
            return Err(format!("page {p} is in no block"));
        }
        if free_pages != self.free_pages {
            return Err(format!(
                "free bits cover {free_pages} pages but free_pages is {}",
                self.free_pages
            ));
        }
        Ok(())
    }
}
