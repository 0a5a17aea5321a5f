//! Population and pressure: faulting the arena's 2 MiB chunks in as the
//! allocator first hands out blocks in them (or ahead of it, from the
//! thread the owner kicks), and giving free blocks back to the OS under a
//! lowered limit (`MADV_DONTNEED`); see docs/design.md, "Memory: population
//! and pressure".

use std::io;
use std::time::Duration;

use rustix::mm::{self, Advice};

use super::bitmap::bit;
use super::region::populate_range;
use super::{
    Arena, PageId, CHUNK_PAGES, MAX_BLOCK_BYTES, MAX_ORDER, PAGE_SIZE, RELEASE_WINDOW_CHUNKS,
};
use crate::sync::Ordering;

impl Arena {
    /// Faults in `chunks` (marked populated by the caller), one call a
    /// chunk. `MADV_POPULATE_WRITE` holds the process's `mmap_lock` (read)
    /// for its whole range (`madvise_populate` faults it in under one
    /// hold), and every `mmap` and `munmap` of the process waits for it:
    /// a thread started meanwhile (its stack is an `mmap`), a large
    /// `malloc`. Where first touch is slow, a run of several chunks in one
    /// call holds them for as long as all its chunks take to fault (a cold
    /// object mount's first GET waited so for the thread it started: the
    /// object store's docs, "Cold reads"); one chunk a call lets them in
    /// between chunks. Returns the calls made.
    pub(super) fn populate_each(&self, chunks: &mut [u32]) -> usize {
        chunks.sort_unstable();
        for &c in chunks.iter() {
            self.populate_chunk(c);
        }
        chunks.len()
    }

    /// Sets the wake-up of the thread that calls
    /// [`populate_ahead`](Self::populate_ahead): kicked whenever allocation
    /// starts a whole 2 MiB block while chunks not yet faulted in remain.
    /// Once; later calls change nothing.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn set_ahead(&self, kick: std::sync::Arc<crate::kick::Kick>) {
        let _ = self.ahead.set(kick);
    }

    pub(super) fn kick_ahead(&self) {
        if let Some(k) = self.ahead.get() {
            k.kick();
        }
    }

    /// Wakes the populater for the last time, as its owner goes: it finds
    /// the cache gone and exits now rather than at its next timeout.
    pub(crate) fn release_ahead(&self) {
        if let Some(k) = self.ahead.get() {
            k.kick_surely();
        }
    }

    /// Faults in, ahead of allocation, the chunks that allocation starts
    /// next: of the first `chunks` whole free 2 MiB blocks (the lowest, the
    /// ones [`alloc`](Self::alloc) splits next), those not faulted in yet,
    /// as far as the limit leaves room to allocate them. Returns how many
    /// it faulted in. For a thread of its own beside the allocating ones
    /// (the cache's, with [`Populate::Lazy`]): allocation then finds its
    /// chunks populated, and its caller does not pay their first touch. A
    /// block allocated from such a chunk before the call returns is only
    /// touched as the call touches it (faulting it in is harmless to its
    /// contents, as in [`alloc`](Self::alloc)).
    ///
    /// # Locking
    /// Takes the arena lock for a scan of `chunks` free blocks; faults
    /// the memory in with the lock dropped.
    pub fn populate_ahead(&self, chunks: usize) -> usize {
        // (Room for every chunk there is: no allocation under the lock.)
        let mut todo: Vec<u32> =
            Vec::with_capacity(chunks.min(self.pages.div_ceil(CHUNK_PAGES) as usize));
        {
            let mut buddy = self.buddy.lock();
            let allocated = buddy.pages as usize - buddy.free_pages;
            let room = buddy.limit.saturating_sub(allocated) / CHUNK_PAGES as usize;
            let mut from = 0;
            for _ in 0..chunks.min(room) {
                let Some(slot) = buddy.free[MAX_ORDER as usize].next_set(from) else {
                    break;
                };
                from = slot + 1;
                // A whole free block of the top order is one chunk.
                if buddy.mark_populated(slot as u32) {
                    todo.push(slot as u32);
                }
            }
        }
        self.populate_each(&mut todo);
        todo.len()
    }

    /// Faults chunk `chunk` in (`MADV_POPULATE_WRITE`, the
    /// kernel's `madvise_populate`), as writes would, without changing
    /// its contents: other blocks of the chunk may be in use by other
    /// threads, which is harmless. A failure (an old kernel without the
    /// advice, or no memory now) is only logged: the pages are then
    /// faulted in when first written.
    pub(super) fn populate_chunk(&self, chunk: u32) {
        if cfg!(any(loom, miri)) {
            // Neither models the kernel's page tables; the memory is
            // touched by its users.
            return;
        }
        let start = chunk as usize * MAX_BLOCK_BYTES;
        let len = MAX_BLOCK_BYTES.min(self.region.len - start);
        if self.collapse.load(Ordering::Relaxed) != 0 {
            if !super::collapse::populate_huge(&self.region, &self.huge_bytes, start, len) {
                self.collapse.store(0, Ordering::Relaxed);
            }
            return;
        }
        let addr = self.region.ptr.as_ptr() as usize + start;
        if let Err(e) = populate_range(addr, len) {
            log::debug!(
                "arena: MADV_POPULATE_WRITE of {} KiB failed ({e}); pages fault in on first write",
                len >> 10
            );
        }
    }

    /// Limits the pages that may be allocated at once to `pages` (at most
    /// the capacity; a larger value means the capacity). Blocks already
    /// allocated stay; allocations fail (and the cache reclaims) until
    /// enough are freed to stay within the limit. The pressure watcher
    /// lowers it while memory is short and raises it back afterwards.
    ///
    /// # Locking
    /// Takes the arena lock.
    pub fn set_limit_pages(&self, pages: usize) {
        let pages = pages.min(self.pages as usize);
        let mut buddy = self.buddy.lock();
        buddy.limit = pages;
        self.limit_pages.store(pages, Ordering::Relaxed);
    }

    /// The limit on allocated pages ([`Arena::set_limit_pages`]): the
    /// capacity unless lowered.
    pub fn limit_pages(&self) -> usize {
        self.limit_pages.load(Ordering::Relaxed)
    }

    /// Bytes of chunks that allocation faulted in, or all of the arena with
    /// [`Populate::Eager`], less the whole chunks given back since: an
    /// upper bound of the arena's resident memory, up to pages written
    /// without being allocated and partly given back chunks.
    ///
    /// # Locking
    /// Takes the arena lock.
    pub fn populated_bytes(&self) -> usize {
        let buddy = self.buddy.lock();
        let mut bytes = buddy.populated_chunks * MAX_BLOCK_BYTES;
        // A partial last chunk counts for what it has.
        let last = buddy.chunks() - 1;
        if bit(&buddy.populated, last) {
            bytes -= buddy.chunks() * MAX_BLOCK_BYTES - self.region.len;
        }
        bytes
    }

    /// Bytes [`Arena::release_free`] has given back to the OS since build.
    ///
    /// # Locking
    /// Takes the arena lock.
    pub fn released_bytes(&self) -> usize {
        self.buddy.lock().released_bytes
    }

    /// Gives the memory of every free block back to the OS
    /// (`MADV_DONTNEED`: the pages are unmapped, and read as zeros if
    /// written again) and returns how many bytes that was. A whole free
    /// chunk is marked unpopulated, so the next allocation in it faults it
    /// in again in one call; a free block smaller than a chunk is faulted
    /// in page by page when reused.
    ///
    /// Works a window of [`RELEASE_WINDOW_CHUNKS`] chunks at a time: the
    /// window's free blocks are taken out of the allocator (as if
    /// allocated), released with the lock dropped, and freed back; only
    /// they are unavailable meanwhile. Chunks never populated are skipped.
    ///
    /// # Locking
    /// Takes the arena lock twice per window; one `madvise` per run of
    /// adjacent free blocks with it dropped.
    pub fn release_free(&self) -> usize {
        let chunks = self.pages.div_ceil(CHUNK_PAGES);
        let mut released = 0;
        let mut taken = Vec::new();
        let mut first = 0;
        while first < chunks {
            let end = (first + RELEASE_WINDOW_CHUNKS).min(chunks);
            taken.clear();
            {
                let mut buddy = self.buddy.lock();
                buddy.take_free(first, end, &mut taken);
                self.free_pages.store(buddy.free_pages, Ordering::Relaxed);
            }
            // Ascending page order (take_free goes order by order).
            taken.sort_unstable();
            let mut i = 0;
            while i < taken.len() {
                let (start, order) = taken[i];
                let mut next = start + (1 << order);
                let mut j = i + 1;
                while j < taken.len() && taken[j].0 == next {
                    next += 1 << taken[j].1;
                    j += 1;
                }
                released += self.discard(start, next - start);
                i = j;
            }
            let mut buddy = self.buddy.lock();
            for &(page, order) in &taken {
                if order == MAX_ORDER {
                    buddy.clear_populated(page >> MAX_ORDER);
                }
                if let Err(e) = buddy.free(page, order) {
                    log::error!("arena: giving back a released block: {e}");
                    debug_assert!(false, "giving back a released block: {e}");
                }
            }
            self.free_pages.store(buddy.free_pages, Ordering::Relaxed);
            drop(buddy);
            first = end;
        }
        self.buddy.lock().released_bytes += released;
        released
    }

    /// `MADV_DONTNEED` over `pages` pages from `first`, all in blocks taken
    /// out of the allocator by the caller; returns the bytes released (0
    /// if the kernel refused, which is logged).
    fn discard(&self, first: u32, pages: u32) -> usize {
        let len = pages as usize * PAGE_SIZE;
        if cfg!(any(loom, miri)) {
            return len;
        }
        let addr = self.page_ptr(PageId(first)).as_ptr();
        // A shared mapping's pages are the memory file's: MADV_DONTNEED
        // would only unmap them; MADV_REMOVE frees them (a hole).
        let advice = if self.region.shared {
            Advice::LinuxRemove
        } else {
            Advice::LinuxDontNeed
        };
        // SAFETY: [addr, addr + len) is inside the arena's mapping and lies
        // in free blocks the caller took out of the allocator, so nobody
        // holds or may get a block there until they are freed back: the
        // contents (zeroed by MADV_DONTNEED or MADV_REMOVE) belong to no
        // one.
        match unsafe { mm::madvise(addr.cast(), len, advice) } {
            Ok(()) => len,
            Err(e) => {
                log::warn!(
                    "arena: MADV_DONTNEED of {} KiB refused: {}",
                    len >> 10,
                    io::Error::from(e)
                );
                0
            }
        }
    }

    /// How long [`Arena::new`] spent faulting the memory in: zero for
    /// [`Populate::Lazy`]. Report it beside any benchmark that pays it.
    pub fn populate_time(&self) -> Duration {
        self.populate_time
    }
}
