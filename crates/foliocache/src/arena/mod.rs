//! The folio arena: all the memory folios are made of, mapped once at
//! start-up and handed out by a buddy allocator by order.
//!
//! # The problem
//! A page cache must bound its memory, hand out 4 KiB-aligned blocks of
//! 2^order pages (so a folio can go to an `O_DIRECT` read as it is), and pay
//! the cost of faulting memory in once, not on every cache miss. The first
//! touch of fresh memory (a page fault that zeroes the page) can cost as much
//! as a cold kernel read of that page
//! (the note "First touch of memory" in `docs/measurements/`). So the arena
//! maps its whole capacity at build (virtual memory only) and pays the
//! first touch in batches: by default a 2 MiB chunk at a time, in one
//! `MADV_POPULATE_WRITE` (the kernel's `madvise_populate`), the first time
//! the allocator hands out a block inside it; or all of it at build
//! ([`Populate::Eager`]). Under memory pressure the cache lowers the
//! arena's limit ([`Arena::set_limit_pages`]) and gives free blocks back to
//! the OS ([`Arena::release_free`], `MADV_DONTNEED`); see
//! `docs/design.md`, "Memory: population and pressure".
//!
//! # Layout
//! ```text
//!  one anonymous private mapping, 2 MiB aligned, exactly capacity bytes
//!  |<------ 2 MiB ------>|<------ 2 MiB ------>| ... |<- tail ->|
//!  |     order-9 block   |     order-9 block   | ... |8|4|1 ... |  tail carved into the
//!  page 0                page 512              ...               largest aligned blocks
//! ```
//! A block of order `n` starts at a page index that is a multiple of `2^n`.
//! Allocating order `n` takes the lowest-addressed free block of the
//! smallest order `>= n` and splits it, freeing the upper halves:
//! ```text
//!  alloc(0) from a free order-3 block at page 8:
//!  [8 ........ 15]  ->  [8][9][10 11][12 ...... 15]
//!                        ^   free     free
//!                        allocated    order 1  order 2
//!                            free order 0
//! ```
//! Freeing merges the block with its buddy (`index ^ 2^n`) while the buddy
//! is a free block of the same order, so the free blocks are always the
//! maximal free aligned blocks, and freeing everything restores the initial
//! block set.
//!
//! # Bookkeeping
//! Bitmaps, not lists: for each order `n`, one bit per order-`n` block slot
//! says "this block is free" (with a summary hierarchy on top, one bit per
//! non-zero 64-bit word, so the lowest free block is found in a few word
//! reads), and one bit per slot says "this block is allocated at order n".
//! Removing a buddy from the free set is clearing one bit (plus a summary bit
//! when its word empties). Every page lies in exactly one free or allocated
//! block, which is how [`Arena::free`] tells a double free from a wrong
//! order. Total: about 2 bits per page per kind, about half a byte per page
//! ([`Arena::metadata_bytes`]); the arena never reads or writes the pages
//! themselves after build.
//!
//! # Locking
//! | operation | takes | may block | allocates |
//! |---|---|---|---|
//! | [`Arena::new`] | nothing | with [`Populate::Eager`]: faults in the whole capacity | yes |
//! | [`Arena::release_free`] | the arena lock, twice per 64 MiB window | `madvise` with the lock dropped | yes |
//! | [`Arena::alloc`], [`Arena::free`], [`Arena::alloc_bulk`] | the arena lock, O(MAX_ORDER) work | on the lock | `alloc_bulk` grows the caller's `Vec` before taking the lock |
//! | [`Arena::populate_ahead`] | the arena lock, O(chunks) work | `madvise` with the lock dropped | before taking the lock |
//! | [`Arena::free_blocks`], [`Arena::largest_free_order`] | the arena lock | on the lock | no |
//! | [`Arena::free_pages`], [`Arena::page_ptr`], other accessors | nothing | never | no |
//!
//! The arena lock is a leaf: nothing else is taken under it, and it is not
//! meant to be taken under the page-cache index lock (allocate first, then
//! insert).
//!
//! # Files
//! `mod.rs` the arena and its API; `populate.rs` faulting chunks in and
//! giving free blocks back (population and pressure); `buddy.rs` the
//! allocator's bookkeeping; `bitmap.rs` its summary bitmaps; `region.rs`
//! the mapping.

mod bitmap;
mod buddy;
pub(crate) mod collapse;
mod populate;
mod region;
#[cfg(test)]
mod tests;

use std::fmt;
use std::io;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use crate::sync::{AtomicUsize, Mutex, Ordering};

use buddy::Buddy;
pub(crate) use region::Region;

/// Size of one page, the arena's unit: 4 KiB.
pub const PAGE_SIZE: usize = 4096;
/// [`PAGE_SIZE`] as a file offset or index unit.
pub(crate) const PAGE: u64 = PAGE_SIZE as u64;

/// Largest block order the arena hands out: order 9 is 512 pages, 2 MiB,
/// the size of a transparent huge page on x86-64.
pub const MAX_ORDER: u32 = 9;

/// Number of orders, `0..=MAX_ORDER`.
const ORDERS: usize = MAX_ORDER as usize + 1;

/// Bytes in a block of [`MAX_ORDER`]; the mapping is aligned to it. Also
/// the unit of lazy population: a chunk.
const MAX_BLOCK_BYTES: usize = PAGE_SIZE << MAX_ORDER;

/// Pages in a chunk, the unit of lazy population.
const CHUNK_PAGES: u32 = 1 << MAX_ORDER;

/// Chunks whose free blocks [`Arena::release_free`] takes out of the
/// allocator at a time (64 MiB): only those are unavailable while their
/// memory goes back to the OS.
const RELEASE_WINDOW_CHUNKS: u32 = 32;

/// How many times a populate that the kernel reports as interrupted
/// (`EINTR`, `EAGAIN`) is retried before giving up.
const POPULATE_RETRIES: u32 = 16;

/// When the arena's memory is faulted in: all at build, or a 2 MiB chunk
/// at a time as the allocator first hands out blocks in it.
///
/// # Example
/// ```
/// use foliocache::internals::arena::{Arena, Populate};
/// let arena = Arena::new(2 << 20, Populate::Eager).unwrap();
/// eprintln!("faulted 2 MiB in in {:?}", arena.populate_time());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Populate {
    /// Fault every page in at build (`MADV_POPULATE_WRITE`, or touching
    /// each page on kernels older than 5.14; a cache faults its folio
    /// descriptors in with its arena), and record how long it took
    /// in the arena's `populate_time` (the cache's
    /// [`CacheStats::populate_time`](crate::CacheStats::populate_time)): for a program that would rather pay
    /// the whole first-touch cost before it serves, at a build time and a
    /// resident memory that grow with the capacity.
    Eager,
    /// Leave the memory unfaulted at build, so a cache of any capacity
    /// builds at once and holds only what it caches. The first time the
    /// arena's allocator hands out a block inside a
    /// 2 MiB chunk of the arena, it faults the whole chunk in with one
    /// `MADV_POPULATE_WRITE` (after dropping the arena lock): the
    /// first-touch cost is paid per chunk, in one system call, not per
    /// page fault. Memory written without being allocated (or a chunk
    /// partly given back under pressure) is faulted in page by page.
    Lazy,
}

/// The index of a page in an [`Arena`]: block `b` of order `n` is
/// identified by its first page, a multiple of `2^n`.
///
/// # Example
/// ```
/// use foliocache::internals::arena::PageId;
/// let page = PageId::new(512);
/// assert_eq!(page.index(), 512);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PageId(u32);

impl PageId {
    /// The page at `index`. Nothing checks it against an arena here; the
    /// arena's methods do.
    pub const fn new(index: u32) -> PageId {
        PageId(index)
    }

    /// The page's index in its arena (its byte offset is
    /// `index * PAGE_SIZE`).
    pub const fn index(self) -> u32 {
        self.0
    }
}

impl fmt::Display for PageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "page {}", self.0)
    }
}

/// Why [`Arena::free`] refused a block. The arena is unchanged after any
/// of these: the call was a no-op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ArenaError {
    /// The page index is not inside the arena.
    OutOfRange {
        /// The page passed.
        page: u32,
        /// The arena's size in pages.
        capacity_pages: u32,
    },
    /// The order is larger than [`MAX_ORDER`].
    InvalidOrder {
        /// The order passed.
        order: u32,
    },
    /// The page index is not a multiple of `2^order`, so it cannot start a
    /// block of that order.
    Misaligned {
        /// The page passed.
        page: u32,
        /// The order passed.
        order: u32,
    },
    /// The page lies in a block that is already free.
    DoubleFree {
        /// The page passed.
        page: u32,
        /// The order passed.
        order: u32,
        /// First page of the free block that holds `page`.
        free_block: u32,
        /// Order of that free block.
        free_order: u32,
    },
    /// The page lies in an allocated block, but not one of this order that
    /// starts at this page.
    WrongOrder {
        /// The page passed.
        page: u32,
        /// The order passed.
        order: u32,
        /// First page of the allocated block that holds `page`.
        allocated_block: u32,
        /// The order that block was allocated with.
        allocated_order: u32,
    },
}

impl fmt::Display for ArenaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ArenaError::OutOfRange {
                page,
                capacity_pages,
            } => write!(
                f,
                "page {page} is outside the arena ({capacity_pages} pages): \
                 free only pages that this arena's alloc returned"
            ),
            ArenaError::InvalidOrder { order } => write!(
                f,
                "order {order} is larger than MAX_ORDER ({MAX_ORDER}): \
                 pass the order the block was allocated with"
            ),
            ArenaError::Misaligned { page, order } => write!(
                f,
                "page {page} cannot start an order-{order} block (not a multiple of {}): \
                 free the block's first page with the order it was allocated with",
                1u64 << order
            ),
            ArenaError::DoubleFree {
                page,
                order,
                free_block,
                free_order,
            } => write!(
                f,
                "double free: page {page} (order {order}) is already free, inside the free \
                 order-{free_order} block at page {free_block}; drop the second free \
                 (the first one may have been a use-after-free)"
            ),
            ArenaError::WrongOrder {
                page,
                order,
                allocated_block,
                allocated_order,
            } => write!(
                f,
                "page {page} was freed with order {order}, but it belongs to the order-\
                 {allocated_order} block allocated at page {allocated_block}: \
                 free that block with order {allocated_order}"
            ),
        }
    }
}

impl std::error::Error for ArenaError {}

/// The folio arena: one anonymous private mapping of a fixed capacity,
/// 2 MiB aligned, handed out in blocks of `2^order` pages by a buddy
/// allocator. See the module documentation (`arena/mod.rs`) for the layout, the
/// bookkeeping and the locking.
///
/// The mapping is made once in [`Arena::new`], never grown, never handed
/// back to the OS while the arena lives, and unmapped when it drops. The
/// arena never reads or writes the pages after build: their contents
/// belong to whoever allocated them (and a freshly allocated block holds
/// whatever its previous owner left in it; zero or fill it before anyone
/// can read it).
///
/// # Example
/// ```
/// use foliocache::internals::arena::{Arena, Populate, MAX_ORDER};
/// let arena = Arena::new(4 << 20, Populate::Lazy).unwrap();
/// assert_eq!(arena.capacity_pages(), 1024);
/// let page = arena.alloc(2).unwrap(); // 4 pages, 16 KiB
/// assert_eq!(page.index() % 4, 0);
/// // SAFETY: the block is ours until we free it and spans 4 pages.
/// unsafe { arena.page_ptr(page).as_ptr().write_bytes(0, 4 * 4096) };
/// arena.free(page, 2).unwrap();
/// assert_eq!(arena.free_blocks(MAX_ORDER), 2);
/// ```
pub struct Arena {
    /// The mapping.
    region: Region,
    /// `region.len / PAGE_SIZE`.
    pages: u32,
    /// Time spent faulting the memory in at build.
    populate_time: Duration,
    /// Whether `madvise(MADV_HUGEPAGE)` succeeded.
    huge_pages_advised: bool,
    /// A shared region whose chunks are faulted in as huge pages
    /// (`collapse.rs`): the cache asked for huge pages, and the kernel has
    /// not refused to collapse.
    collapse: crate::sync::AtomicU8,
    /// Bytes faulted in as huge pages that way.
    huge_bytes: AtomicUsize,
    /// Mirror of `Buddy::free_pages`, written under the lock, read without.
    free_pages: AtomicUsize,
    /// Mirror of `Buddy::limit`, written under the lock, read without.
    limit_pages: AtomicUsize,
    /// The allocator's state.
    buddy: Mutex<Buddy>,
    /// Kicked when allocation starts a whole 2 MiB block while chunks not
    /// yet faulted in remain: the thread that faults in the next ones
    /// ahead of allocation ([`Arena::populate_ahead`]), if the owner set
    /// one ([`Arena::set_ahead`]).
    ahead: std::sync::OnceLock<std::sync::Arc<crate::kick::Kick>>,
}

// SAFETY: the raw pointer in `region` is only used to compute addresses
// inside a mapping that lives as long as the arena; the arena itself never
// dereferences it after build. All mutable allocator state is behind a
// Mutex or atomic. Moving the arena to another thread moves ownership of
// the mapping, which any thread may unmap.
unsafe impl Send for Arena {}
// SAFETY: as for Send; `&Arena` methods only read immutable fields, take
// the mutex, or read an atomic.
unsafe impl Sync for Arena {}

impl Arena {
    /// Maps an arena of `capacity_bytes`, rounded down to whole pages, and
    /// faults it in if `populate` is [`Populate::Eager`].
    ///
    /// The mapping is aligned to 2 MiB (it is made 2 MiB larger, then the
    /// excess is unmapped at once, so no more than the capacity stays
    /// mapped), advised for transparent huge pages (`MADV_HUGEPAGE`;
    /// failure is ignored, see [`Arena::huge_pages_advised`]), and starts
    /// with every page free: whole 2 MiB blocks, then a tail that is not a
    /// multiple of 2 MiB carved into the largest aligned blocks that fit.
    ///
    /// # Locking
    /// Takes no lock. With [`Populate::Eager`] it blocks while the kernel
    /// faults the whole capacity in: slow for memory the host has taken
    /// back, much faster for recently used memory.
    /// [`Arena::populate_time`] reports it. Allocates about half a
    /// byte of bookkeeping per page.
    ///
    /// # Errors
    /// - [`io::ErrorKind::InvalidInput`] if the capacity is less than one
    ///   page or more than `u32::MAX` pages.
    /// - The OS error (`ENOMEM` usually) if the mapping or the populate
    ///   fails, with the capacity in the message: choose a smaller capacity.
    ///
    /// # Example
    /// ```
    /// use foliocache::internals::arena::{Arena, Populate};
    /// let arena = Arena::new((2 << 20) + 12345, Populate::Lazy).unwrap();
    /// assert_eq!(arena.capacity_pages(), 515); // 512 + 3 whole pages
    /// assert!(Arena::new(100, Populate::Lazy).is_err());
    /// ```
    pub fn new(capacity_bytes: usize, populate: Populate) -> io::Result<Arena> {
        Self::with_huge_pages(capacity_bytes, populate, true)
    }

    /// [`new`](Self::new), choosing whether to ask for transparent huge
    /// pages. Without them every 4 KiB page is faulted on its own: more
    /// TLB misses on cache hits, but a first touch of huge pages (zeroing
    /// and, with `defrag=madvise`, compacting 2 MiB at a time) can be
    /// several times slower than of 4 KiB pages
    /// (the note "First touch of memory" in `docs/measurements/`), so a
    /// cache whose memory is filled once by writes (a VM's memory file)
    /// may populate faster without them.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_huge_pages(
        capacity_bytes: usize,
        populate: Populate,
        huge_pages: bool,
    ) -> io::Result<Arena> {
        Self::with_memory(capacity_bytes, populate, huge_pages, None)
    }

    /// [`with_huge_pages`](Self::with_huge_pages), with the pages in the
    /// memory file `memory` from its offset (the guardian's segment) where
    /// given, mapped shared.
    pub(crate) fn with_memory(
        capacity_bytes: usize,
        populate: Populate,
        huge_pages: bool,
        memory: Option<(std::os::fd::BorrowedFd<'_>, u64)>,
    ) -> io::Result<Arena> {
        let pages = capacity_bytes / PAGE_SIZE;
        if pages == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "arena capacity of {capacity_bytes} bytes is less than one {PAGE_SIZE}-byte \
                     page: give the cache at least {PAGE_SIZE} bytes"
                ),
            ));
        }
        let pages = u32::try_from(pages).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "arena capacity of {capacity_bytes} bytes is more than u32::MAX pages \
                     (16 TiB): give the cache less memory"
                ),
            )
        })?;
        let len = pages as usize * PAGE_SIZE;
        // Bookkeeping first: if it cannot be had, nothing was mapped yet.
        let mut buddy = Buddy::new(pages);
        let region = match memory {
            Some((fd, offset)) => Region::map_shared_aligned(fd, offset, len, MAX_BLOCK_BYTES)?,
            None => Region::map_aligned(len, MAX_BLOCK_BYTES)?,
        };
        let huge_pages_advised = huge_pages && region.advise_huge_pages();
        let collapse = huge_pages && region.shared && !cfg!(any(loom, miri));
        let huge_bytes = AtomicUsize::new(0);
        let mut collapsing = collapse;
        let populate_time = match populate {
            Populate::Lazy => Duration::ZERO,
            Populate::Eager if collapse => {
                let start = Instant::now();
                collapsing = collapse::populate_huge(&region, &huge_bytes, 0, len);
                start.elapsed()
            }
            Populate::Eager => {
                let start = Instant::now();
                let how = region.populate("folio arena", false)?;
                let took = start.elapsed();
                log::info!(
                    "arena: faulted in {} MiB in {:.3} s ({:.2} GiB/s) by {how}",
                    len >> 20,
                    took.as_secs_f64(),
                    len as f64 / (1u64 << 30) as f64 / took.as_secs_f64().max(1e-9),
                );
                took
            }
        };
        if populate == Populate::Eager {
            buddy.populated.iter_mut().for_each(|w| *w = u64::MAX);
        }
        if populate == Populate::Eager {
            buddy.populated_chunks = buddy.chunks();
        }
        Ok(Arena {
            region,
            pages,
            populate_time,
            huge_pages_advised,
            collapse: crate::sync::AtomicU8::new(u8::from(collapsing)),
            huge_bytes,
            free_pages: AtomicUsize::new(pages as usize),
            limit_pages: AtomicUsize::new(pages as usize),
            buddy: Mutex::new(buddy),
            ahead: std::sync::OnceLock::new(),
        })
    }

    /// Bytes of the arena faulted in as huge pages of its shared memory
    /// (`collapse.rs`): 0 for a private arena, whose huge pages are the
    /// kernel's transparent ones.
    pub fn shared_huge_bytes(&self) -> usize {
        self.huge_bytes.load(Ordering::Relaxed)
    }

    /// Allocates a block of `2^order` pages and returns its first page, a
    /// multiple of `2^order`.
    ///
    /// Takes the lowest-addressed free block of the smallest order that is
    /// at least `order`, splitting it if it is larger. Returns `None` when
    /// no free block of order `>= order` exists (however many free pages
    /// there are in smaller blocks), or when `order > MAX_ORDER`.
    ///
    /// Also returns `None` when the block would take the allocated pages
    /// over the limit ([`Arena::set_limit_pages`]).
    ///
    /// The block's memory holds whatever its last owner wrote: zero it or
    /// fill it before anyone else can read it.
    ///
    /// # Locking
    /// Takes the arena lock for O([`MAX_ORDER`]) bit operations. Does not
    /// allocate. With [`Populate::Lazy`], the first block handed out in a
    /// 2 MiB chunk faults the chunk in (`MADV_POPULATE_WRITE`) after the
    /// lock is dropped; the block's contents are not changed.
    ///
    /// # Example
    /// ```
    /// use foliocache::internals::arena::{Arena, Populate};
    /// let arena = Arena::new(2 << 20, Populate::Lazy).unwrap();
    /// let big = arena.alloc(9).unwrap(); // the whole arena
    /// assert_eq!(arena.alloc(0), None);
    /// arena.free(big, 9).unwrap();
    /// ```
    pub fn alloc(&self, order: u32) -> Option<PageId> {
        if order > MAX_ORDER {
            return None;
        }
        let mut buddy = self.buddy.lock();
        let chunks_free = buddy.counts[MAX_ORDER as usize];
        let page = buddy.alloc(order);
        self.free_pages.store(buddy.free_pages, Ordering::Relaxed);
        let fresh = match page {
            Some(p) => buddy.mark_populated(p >> MAX_ORDER),
            _ => false,
        };
        let kick = buddy.wants_ahead(chunks_free);
        drop(buddy);
        if let (true, Some(p)) = (fresh, page) {
            self.populate_chunk(p >> MAX_ORDER);
        }
        if kick {
            self.kick_ahead();
        }
        page.map(PageId)
    }

    /// Allocates up to `n` blocks of `2^order` pages in one lock hold,
    /// appends them to `out`, and returns how many it appended: fewer than
    /// `n` when no free block of order `>= order` is left. Readahead uses
    /// it to allocate a whole window at once, and a write the folios it
    /// creates. The blocks are those `n` calls of [`alloc`](Self::alloc)
    /// would give, in the same order; a larger free block that the batch
    /// would split and use up is taken in one step.
    ///
    /// Returns 0 if `order > MAX_ORDER`.
    ///
    /// # Locking
    /// Reserves room in `out` first (no more than the arena could ever
    /// give), then takes the arena lock once, for O(`n * MAX_ORDER`) work.
    ///
    /// # Example
    /// ```
    /// use foliocache::internals::arena::{Arena, Populate};
    /// let arena = Arena::new(2 << 20, Populate::Lazy).unwrap();
    /// let mut window = Vec::new();
    /// assert_eq!(arena.alloc_bulk(0, 32, &mut window), 32);
    /// assert_eq!(arena.free_pages(), 512 - 32);
    /// for page in window.drain(..) {
    ///     arena.free(page, 0).unwrap();
    /// }
    /// ```
    pub fn alloc_bulk(&self, order: u32, n: usize, out: &mut Vec<PageId>) -> usize {
        if order > MAX_ORDER || n == 0 {
            return 0;
        }
        out.reserve(n.min(self.pages as usize >> order));
        let mut fresh: Vec<u32> = Vec::new();
        let mut buddy = self.buddy.lock();
        let chunks_free = buddy.counts[MAX_ORDER as usize];
        let mut got = 0;
        while got < n {
            // A whole block the batch uses up: its pieces in one step; else
            // one block.
            let (page, pieces) = match buddy.alloc_whole(order, n - got) {
                Some((page, from)) => (page, 1u32 << (from - order)),
                None => match buddy.alloc(order) {
                    Some(page) => (page, 1),
                    None => break,
                },
            };
            out.extend((0..pieces).map(|i| PageId(page + (i << order))));
            // (A block of at most `MAX_ORDER` lies in one chunk.)
            if buddy.mark_populated(page >> MAX_ORDER) {
                fresh.push(page >> MAX_ORDER);
            }
            got += pieces as usize;
        }
        self.free_pages.store(buddy.free_pages, Ordering::Relaxed);
        let kick = buddy.wants_ahead(chunks_free);
        drop(buddy);
        self.populate_each(&mut fresh);
        if kick {
            self.kick_ahead();
        }
        got
    }

    /// Returns the block of `2^order` pages that starts at `page` to the
    /// arena, merging it with its buddy while the buddy is free.
    ///
    /// # Locking
    /// Takes the arena lock for O([`MAX_ORDER`]) bit operations. Does not
    /// allocate, never touches the block's memory.
    ///
    /// # Errors
    /// Refuses, and changes nothing, when the block is not one that is
    /// allocated now: [`ArenaError::OutOfRange`],
    /// [`ArenaError::InvalidOrder`], [`ArenaError::Misaligned`],
    /// [`ArenaError::DoubleFree`], [`ArenaError::WrongOrder`]. Each is a
    /// bug in the caller; the message says which block the page is in.
    ///
    /// # Example
    /// ```
    /// use foliocache::internals::arena::{Arena, ArenaError, Populate};
    /// let arena = Arena::new(2 << 20, Populate::Lazy).unwrap();
    /// let page = arena.alloc(3).unwrap();
    /// assert!(matches!(arena.free(page, 2), Err(ArenaError::WrongOrder { .. })));
    /// arena.free(page, 3).unwrap();
    /// assert!(matches!(arena.free(page, 3), Err(ArenaError::DoubleFree { .. })));
    /// ```
    pub fn free(&self, page: PageId, order: u32) -> Result<(), ArenaError> {
        let mut buddy = self.buddy.lock();
        buddy.free(page.0, order)?;
        self.free_pages.store(buddy.free_pages, Ordering::Relaxed);
        Ok(())
    }

    /// Frees every `(block, order)` of `blocks` in one hold of the arena's
    /// lock, as [`free`](Self::free) would one at a time: reclaim gives
    /// back a batch of evicted folios for the price of one lock round trip
    /// (the kernel's `free_unref_folios` over a `folio_batch`). A block
    /// that [`free`](Self::free) would refuse is skipped and the others are
    /// freed.
    ///
    /// # Errors
    /// The first refusal, with the position of its block in `blocks`.
    ///
    /// # Example
    /// ```
    /// use foliocache::internals::arena::{Arena, Populate};
    /// let arena = Arena::new(2 << 20, Populate::Lazy).unwrap();
    /// let (a, b) = (arena.alloc(0).unwrap(), arena.alloc(1).unwrap());
    /// arena.free_bulk(&[(a, 0), (b, 1)]).unwrap();
    /// assert_eq!(arena.free_pages(), 512);
    /// let (at, _) = arena.free_bulk(&[(a, 0)]).unwrap_err(); // freed already
    /// assert_eq!(at, 0);
    /// ```
    pub fn free_bulk(&self, blocks: &[(PageId, u32)]) -> Result<(), (usize, ArenaError)> {
        let mut first = None;
        let mut buddy = self.buddy.lock();
        for (i, &(page, order)) in blocks.iter().enumerate() {
            if let Err(e) = buddy.free(page.0, order) {
                first.get_or_insert((i, e));
            }
        }
        self.free_pages.store(buddy.free_pages, Ordering::Relaxed);
        drop(buddy);
        first.map_or(Ok(()), Err)
    }

    /// The address of `page`'s first byte: `PAGE_SIZE`-aligned, so a block
    /// can be handed to an `O_DIRECT` read or write as it is; the pages of
    /// a block are contiguous, so its bytes are
    /// `page_ptr(page) .. page_ptr(page) + (PAGE_SIZE << order)`.
    ///
    /// The pointer is valid for reads and writes as long as the arena
    /// lives; which blocks the caller may touch is the caller's protocol
    /// (the block it allocated and has not freed).
    ///
    /// # Locking
    /// None; pure arithmetic.
    ///
    /// # Panics
    /// If `page` is not inside the arena (a `PageId` of another arena, or a
    /// made-up one): handing out a pointer outside the mapping would turn
    /// that bug into memory corruption. Use [`Arena::contains`] to check.
    ///
    /// # Example
    /// ```
    /// use foliocache::internals::arena::{Arena, Populate, PAGE_SIZE};
    /// let arena = Arena::new(1 << 20, Populate::Lazy).unwrap();
    /// let page = arena.alloc(0).unwrap();
    /// assert_eq!(arena.page_ptr(page).as_ptr() as usize % PAGE_SIZE, 0);
    /// # arena.free(page, 0).unwrap();
    /// ```
    pub fn page_ptr(&self, page: PageId) -> NonNull<u8> {
        assert!(
            page.0 < self.pages,
            "page_ptr: page {} is outside the arena of {} pages",
            page.0,
            self.pages
        );
        let offset = page.0 as usize * PAGE_SIZE;
        // SAFETY: page < pages, so offset < region.len: the result is inside
        // the same mapping as region.ptr, hence in bounds and non-null.
        unsafe { self.region.ptr.add(offset) }
    }

    /// Whether `page` is inside this arena (`index < capacity_pages`).
    pub fn contains(&self, page: PageId) -> bool {
        page.0 < self.pages
    }

    /// The arena's size in pages: the capacity passed to [`Arena::new`]
    /// divided by [`PAGE_SIZE`], rounded down.
    pub fn capacity_pages(&self) -> usize {
        self.pages as usize
    }

    /// The arena's size in bytes, `capacity_pages() * PAGE_SIZE`: exactly
    /// what is mapped.
    pub fn capacity_bytes(&self) -> usize {
        self.region.len
    }

    /// Pages in free blocks, of any order.
    ///
    /// # Locking
    /// None: reads a counter the allocator updates under its lock, so it
    /// may be a moment stale while other threads allocate and free.
    pub fn free_pages(&self) -> usize {
        self.free_pages.load(Ordering::Relaxed)
    }

    /// The order of the largest free block, or `None` when nothing is free.
    /// [`Arena::alloc`]`(order)` succeeds iff this is `Some(o)` with
    /// `o >= order` (and no other thread allocates meanwhile).
    ///
    /// # Locking
    /// Takes the arena lock.
    pub fn largest_free_order(&self) -> Option<u32> {
        let buddy = self.buddy.lock();
        (0..=MAX_ORDER)
            .rev()
            .find(|&order| buddy.counts[order as usize] > 0)
    }

    /// How many free blocks of exactly `order` there are (0 for an order
    /// above [`MAX_ORDER`]).
    ///
    /// # Locking
    /// Takes the arena lock.
    pub fn free_blocks(&self, order: u32) -> usize {
        if order > MAX_ORDER {
            return 0;
        }
        self.buddy.lock().counts[order as usize]
    }

    /// Bytes of bookkeeping the allocator keeps (its bitmaps and counters):
    /// about half a byte per page, 0.012 % of the capacity.
    pub fn metadata_bytes(&self) -> usize {
        self.buddy.lock().metadata_bytes()
    }

    /// Whether the kernel accepted `madvise(MADV_HUGEPAGE)` for the mapping,
    /// so that order-9 blocks can be backed by transparent huge pages.
    pub fn huge_pages_advised(&self) -> bool {
        self.huge_pages_advised
    }

    /// Walks all the allocator's bookkeeping and checks its invariants:
    /// summaries agree with the bitmaps, counters with the bits, every page
    /// is in exactly one free or allocated block, and no free block has a
    /// free buddy of its own order. Returns what is wrong, if anything.
    ///
    /// A debugging and testing aid: O(capacity) under the arena lock.
    ///
    /// # Errors
    /// A description of the first broken invariant.
    pub fn check_consistency(&self) -> Result<(), String> {
        let buddy = self.buddy.lock();
        buddy.check()?;
        let mirror = self.free_pages.load(Ordering::Relaxed);
        if mirror != buddy.free_pages {
            return Err(format!(
                "free_pages mirror {mirror} != allocator's {}",
                buddy.free_pages
            ));
        }
        Ok(())
    }
}

impl fmt::Debug for Arena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Arena")
            .field("base", &self.region.ptr)
            .field("capacity_pages", &self.pages)
            .field("free_pages", &self.free_pages())
            .field("populate_time", &self.populate_time)
            .field("huge_pages_advised", &self.huge_pages_advised)
            .finish_non_exhaustive()
    }
}
