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

use std::ffi::c_void;
use std::fmt;
use std::io;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::mm::{self, Advice};

use crate::sync::{AtomicUsize, Mutex, Ordering};

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
/// allocator. See the module documentation (`arena.rs`) for the layout, the
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
        let populate_time = match populate {
            Populate::Lazy => Duration::ZERO,
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
            free_pages: AtomicUsize::new(pages as usize),
            limit_pages: AtomicUsize::new(pages as usize),
            buddy: Mutex::new(buddy),
            ahead: std::sync::OnceLock::new(),
        })
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
            self.populate_chunks(p >> MAX_ORDER, 1);
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
        self.populate_runs(&mut fresh);
        if kick {
            self.kick_ahead();
        }
        got
    }

    /// Faults in `chunks` (marked populated by the caller), one call per
    /// run of adjacent ones: a window that takes several chunks faults
    /// them in at once.
    fn populate_runs(&self, chunks: &mut [u32]) {
        chunks.sort_unstable();
        let mut i = 0;
        while i < chunks.len() {
            let mut j = i + 1;
            while j < chunks.len() && chunks[j] == chunks[j - 1] + 1 {
                j += 1;
            }
            self.populate_chunks(chunks[i], (j - i) as u32);
            i = j;
        }
    }

    /// Sets the wake-up of the thread that calls
    /// [`populate_ahead`](Self::populate_ahead): kicked whenever allocation
    /// starts a whole 2 MiB block while chunks not yet faulted in remain.
    /// Once; later calls change nothing.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn set_ahead(&self, kick: std::sync::Arc<crate::kick::Kick>) {
        let _ = self.ahead.set(kick);
    }

    fn kick_ahead(&self) {
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
        self.populate_runs(&mut todo);
        todo.len()
    }

    /// Faults `count` chunks from `first` in (`MADV_POPULATE_WRITE`, the
    /// kernel's `madvise_populate`), as writes would, without changing
    /// their contents: other blocks of these chunks may be in use by other
    /// threads, which is harmless. A failure (an old kernel without the
    /// advice, or no memory now) is only logged: the pages are then
    /// faulted in when first written.
    fn populate_chunks(&self, first: u32, count: u32) {
        if cfg!(any(loom, miri)) {
            // Neither models the kernel's page tables; the memory is
            // touched by its users.
            return;
        }
        let start = first as usize * MAX_BLOCK_BYTES;
        let len = (count as usize * MAX_BLOCK_BYTES).min(self.region.len - start);
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

    /// How long [`Arena::new`] spent faulting the memory in: zero for
    /// [`Populate::Lazy`]. Report it beside any benchmark that pays it.
    pub fn populate_time(&self) -> Duration {
        self.populate_time
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

// ---------------------------------------------------------------------------
// The mapping.

/// How a region was faulted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PopulateMethod {
    /// `madvise(MADV_POPULATE_WRITE)`, Linux 5.14+.
    Madvise,
    /// A volatile write of one byte per page.
    Touch,
}

impl fmt::Display for PopulateMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PopulateMethod::Madvise => "MADV_POPULATE_WRITE",
            PopulateMethod::Touch => "touching each page",
        })
    }
}

/// An anonymous private read-write mapping, unmapped on drop.
///
/// Under Miri, which cannot unmap part of a mapping nor take `madvise`, it
/// is a zeroed heap block with the same size and alignment instead: the
/// arena's bookkeeping and every pointer it hands out are checked the same
/// way, and populating touches each page (the fallback path).
pub(crate) struct Region {
    /// First byte; aligned as asked in `map_aligned`.
    pub(crate) ptr: NonNull<u8>,
    /// Length in bytes, a multiple of `PAGE_SIZE`.
    len: usize,
    /// A shared mapping of a memory file (the guardian's segment,
    /// `map_shared_aligned`): its pages are freed by `MADV_REMOVE`, not
    /// `MADV_DONTNEED`, which only unmaps a shared page.
    shared: bool,
    /// The heap block's layout (Miri only).
    #[cfg(miri)]
    layout: std::alloc::Layout,
}

impl Region {
    /// Under Miri: a zeroed heap block of `len` bytes aligned to `align`.
    #[cfg(miri)]
    pub(crate) fn map_aligned(len: usize, align: usize) -> io::Result<Region> {
        let oom = || io::Error::from(io::ErrorKind::OutOfMemory);
        let layout = std::alloc::Layout::from_size_align(len, align).map_err(|_| oom())?;
        // SAFETY: `layout` has a non-zero size (`len > 0`, as callers give).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(oom)?;
        Ok(Region {
            ptr,
            len,
            shared: false,
            layout,
        })
    }

    /// Maps `len` bytes (a non-zero multiple of `PAGE_SIZE`) aligned to
    /// `align` (a power of two, a multiple of `PAGE_SIZE`): maps
    /// `len + align`, then unmaps the excess before and after.
    #[cfg(not(miri))]
    pub(crate) fn map_aligned(len: usize, align: usize) -> io::Result<Region> {
        debug_assert!(len > 0 && len & (PAGE_SIZE - 1) == 0);
        debug_assert!(align.is_power_of_two() && align >= PAGE_SIZE);
        let context = |err: io::Error| {
            io::Error::new(
                err.kind(),
                format!(
                    "mapping {} MiB for the folio arena: {err}; choose a smaller capacity",
                    len >> 20
                ),
            )
        };
        let map_len = len
            .checked_add(align)
            .ok_or_else(|| context(io::Error::from(io::ErrorKind::OutOfMemory)))?;
        // SAFETY: a fresh anonymous mapping with no address hint cannot
        // overlap memory anyone uses.
        let raw = unsafe {
            mm::mmap_anonymous(
                std::ptr::null_mut(),
                map_len,
                mm::ProtFlags::READ | mm::ProtFlags::WRITE,
                mm::MapFlags::PRIVATE,
            )
        }
        .map_err(|e| context(e.into()))?;
        let raw = raw.cast::<u8>();
        let head = (raw as usize).next_multiple_of(align) - raw as usize;
        let tail = map_len - head - len;
        let aligned = raw.wrapping_add(head);
        let after = aligned.wrapping_add(len);
        if head > 0 {
            // SAFETY: [raw, raw + head) is the start of the mapping we just
            // made, page-aligned (align and mmap results are), and nobody
            // else knows its address.
            if let Err(err) = unsafe { mm::munmap(raw.cast(), head) } {
                // SAFETY: same mapping, nothing of it handed out; best effort.
                let _ = unsafe { mm::munmap(raw.cast(), map_len) };
                return Err(context(err.into()));
            }
        }
        if tail > 0 {
            // SAFETY: [after, after + tail) is the end of the same mapping,
            // page-aligned, unknown to anyone else.
            if let Err(err) = unsafe { mm::munmap(after.cast(), tail) } {
                // SAFETY: [aligned, aligned + len) is what is left of it.
                let _ = unsafe { mm::munmap(aligned.cast(), len) };
                return Err(context(err.into()));
            }
        }
        let ptr = NonNull::new(aligned).ok_or_else(|| context(io::Error::other("null mapping")))?;
        Ok(Region {
            ptr,
            len,
            shared: false,
        })
    }

    /// Maps `len` bytes of the memory file `fd` from `offset` (the
    /// guardian's segment), shared, at an address aligned to `align`:
    /// reserves an aligned range as [`map_aligned`](Self::map_aligned)
    /// does, then maps the file over it (`MAP_FIXED`).
    #[cfg(not(miri))]
    pub(crate) fn map_shared_aligned(
        fd: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: usize,
        align: usize,
    ) -> io::Result<Region> {
        let reserved = Region::map_aligned(len, align)?;
        // SAFETY: [ptr, ptr + len) is the reservation just made, which
        // nobody else knows: mapping the file over it (MAP_FIXED) replaces
        // memory no one uses. On success the reservation's range is the
        // file's mapping, which the returned Region owns and unmaps.
        let raw = unsafe {
            mm::mmap(
                reserved.ptr.as_ptr().cast(),
                len,
                mm::ProtFlags::READ | mm::ProtFlags::WRITE,
                mm::MapFlags::SHARED | mm::MapFlags::FIXED,
                fd,
                offset,
            )
        }
        .map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!(
                    "mapping {} MiB of the guardian's segment for the folio arena: {e}",
                    len >> 20
                ),
            )
        })?;
        debug_assert_eq!(raw.cast::<u8>(), reserved.ptr.as_ptr());
        let mut region = reserved;
        region.shared = true;
        Ok(region)
    }

    /// Under Miri: no memory files; a heap block as `map_aligned`.
    #[cfg(miri)]
    pub(crate) fn map_shared_aligned(
        _fd: std::os::fd::BorrowedFd<'_>,
        _offset: u64,
        len: usize,
        align: usize,
    ) -> io::Result<Region> {
        Region::map_aligned(len, align)
    }

    /// Under Miri: no huge pages (Miri has no `madvise`).
    #[cfg(miri)]
    pub(crate) fn advise_huge_pages(&self) -> bool {
        false
    }

    /// Asks for transparent huge pages; returns whether the kernel agreed.
    #[cfg(not(miri))]
    pub(crate) fn advise_huge_pages(&self) -> bool {
        // SAFETY: madvise with advice MADV_HUGEPAGE changes no memory
        // contents; the range is exactly our mapping.
        let ret = unsafe { mm::madvise(self.ptr.as_ptr().cast(), self.len, Advice::LinuxHugepage) };
        if let Err(e) = ret {
            log::debug!(
                "arena: MADV_HUGEPAGE refused ({}); order-9 blocks may not be huge pages",
                io::Error::from(e)
            );
        }
        ret.is_ok()
    }

    /// Faults every page of the region in, writable, before anyone uses
    /// it: `MADV_POPULATE_WRITE`, or, where the kernel does not know it
    /// (`EINVAL`, before 5.14) or `force_touch` is set, a write of a zero
    /// byte per page (so a region whose zero bytes are its valid state
    /// keeps it). `what` names the region in an error.
    pub(crate) fn populate(&self, what: &str, force_touch: bool) -> io::Result<PopulateMethod> {
        if !force_touch {
            match self.populate_parallel() {
                Ok(()) => return Ok(PopulateMethod::Madvise),
                Err(e) if e.raw_os_error() == Some(Errno::INVAL.raw_os_error()) => {}
                Err(err) => {
                    return Err(io::Error::new(
                        err.kind(),
                        format!(
                            "faulting in the {} MiB {what} (MADV_POPULATE_WRITE): \
                             {err}; choose a smaller capacity or Populate::Lazy",
                            self.len >> 20
                        ),
                    ))
                }
            }
            log::info!("{what}: MADV_POPULATE_WRITE unsupported, touching each page instead");
        }
        let base = self.ptr.as_ptr();
        for offset in (0..self.len).step_by(PAGE_SIZE) {
            // SAFETY: offset < len, so the byte is inside our private
            // read-write mapping; the arena is being built, so no one else
            // has a pointer into it. A volatile write cannot be elided.
            unsafe { base.add(offset).write_volatile(0) };
        }
        Ok(PopulateMethod::Touch)
    }
}

impl Region {
    /// `MADV_POPULATE_WRITE` over the region, split between up to
    /// [`POPULATE_THREADS`] threads (one per CPU) for a region of
    /// [`POPULATE_SPLIT`] or more: the first touch of fresh memory costs
    /// the host most of the time, and several threads fault it in faster
    /// than one. The first error is returned
    /// (`EINVAL` where the kernel does not know the advice).
    fn populate_parallel(&self) -> io::Result<()> {
        // Miri has no `madvise`: as a kernel without the advice, so the
        // pages are touched.
        if cfg!(miri) {
            return Err(Errno::INVAL.into());
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = if self.len >= POPULATE_SPLIT {
            cpus.min(POPULATE_THREADS)
        } else {
            1
        };
        // Whole 2 MiB blocks per thread (the region is 2 MiB aligned).
        let chunk = self.len.div_ceil(threads).next_multiple_of(MAX_BLOCK_BYTES);
        let base = self.ptr.as_ptr() as usize;
        let len = self.len;
        if threads == 1 {
            return populate_range(base, len);
        }
        std::thread::scope(|scope| {
            let parts: Vec<_> = (0..len)
                .step_by(chunk)
                .map(|off| {
                    let n = chunk.min(len - off);
                    scope.spawn(move || populate_range(base + off, n))
                })
                .collect();
            parts
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(io::Error::other("populate thread panicked")))
                })
                .collect::<io::Result<Vec<()>>>()
                .map(|_| ())
        })
    }
}

/// Regions this large are faulted in by several threads.
const POPULATE_SPLIT: usize = 256 << 20;
/// At most this many populate threads.
const POPULATE_THREADS: usize = 4;

/// `MADV_POPULATE_WRITE` over `len` bytes at address `addr` (inside a
/// region being built), retrying `EINTR`/`EAGAIN` a few times.
fn populate_range(addr: usize, len: usize) -> io::Result<()> {
    let mut retries = 0;
    loop {
        // SAFETY: MADV_POPULATE_WRITE faults pages in as a write would,
        // without changing their contents; the range lies inside the
        // region's private read-write mapping, which nobody uses yet.
        match unsafe { mm::madvise(addr as *mut c_void, len, Advice::LinuxPopulateWrite) } {
            Ok(()) => return Ok(()),
            Err(Errno::INTR | Errno::AGAIN) if retries < POPULATE_RETRIES => retries += 1,
            Err(e) => return Err(e.into()),
        }
    }
}

impl Drop for Region {
    #[cfg(miri)]
    fn drop(&mut self) {
        // SAFETY: the block was allocated in `map_aligned` with `layout`
        // and is freed once; as below, no use of its pointers may follow.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }

    #[cfg(not(miri))]
    fn drop(&mut self) {
        // SAFETY: [ptr, ptr + len) is a mapping this Region owns and unmaps
        // once. Pointers into it exist only as Arena::page_ptr results,
        // which are documented valid only while the arena lives; the arena
        // (or Arena::new, on failure) is dropping this Region, so no use of
        // them may follow.
        if let Err(e) = unsafe { mm::munmap(self.ptr.as_ptr().cast(), self.len) } {
            log::error!(
                "arena: munmap of {} bytes failed: {}",
                self.len,
                io::Error::from(e)
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Bitmaps.

/// Bit `i` of a word slice.
fn bit(words: &[u64], i: usize) -> bool {
    words[i / 64] & (1 << (i % 64)) != 0
}

/// Sets bits `from..from + n` of `words`, a word at a time.
fn set_bits(words: &mut [u64], from: usize, n: usize) {
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
struct SummaryBitmap {
    /// Number of valid slots; bits at and above it are always clear.
    slots: usize,
    /// `levels[0]` is the bitmap; the last level is one word.
    levels: Vec<Box<[u64]>>,
}

impl SummaryBitmap {
    /// An all-clear bitmap of `slots` bits.
    fn new(slots: usize) -> SummaryBitmap {
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
    fn get(&self, i: usize) -> bool {
        bit(&self.levels[0], i)
    }

    /// Sets slot `i` (< slots).
    fn set(&mut self, i: usize) {
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
    fn clear(&mut self, i: usize) {
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
    fn next_set(&self, from: usize) -> Option<usize> {
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
    fn first_set(&self) -> Option<usize> {
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
    fn bytes(&self) -> usize {
        self.levels.iter().map(|l| l.len() * 8).sum::<usize>()
            + self.levels.capacity() * std::mem::size_of::<Box<[u64]>>()
    }

    /// Checks the summaries and the unused bits; returns the number of set
    /// slots.
    fn check(&self) -> Result<usize, String> {
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

// ---------------------------------------------------------------------------
// The buddy allocator.

/// The allocator's state, behind the arena lock. Page indices are `u32`,
/// slots of order `n` are `page >> n`; order `n` has `pages >> n` slots
/// (a slot exists iff its whole block is inside the arena).
struct Buddy {
    /// Capacity in pages.
    pages: u32,
    /// Pages in free blocks.
    free_pages: usize,
    /// At most this many pages may be allocated at once (the capacity
    /// unless the pressure watcher lowered it).
    limit: usize,
    /// One bit per 2 MiB chunk (the last one may be shorter): faulted in,
    /// as far as the allocator knows.
    populated: Box<[u64]>,
    /// Set bits in `populated`.
    populated_chunks: usize,
    /// Bytes given back to the OS by [`Arena::release_free`] so far.
    released_bytes: usize,
    /// Per order: which slots are free blocks.
    free: [SummaryBitmap; ORDERS],
    /// Per order: which slots are allocated blocks.
    allocated: [Box<[u64]>; ORDERS],
    /// Per order: number of free blocks (set bits in `free`).
    counts: [usize; ORDERS],
}

impl Buddy {
    /// All pages free, carved into the largest aligned blocks.
    fn new(pages: u32) -> Buddy {
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
    fn slots(&self, order: u32) -> usize {
        (self.pages >> order) as usize
    }

    /// Number of chunks (the last one may be partial).
    fn chunks(&self) -> usize {
        self.pages.div_ceil(CHUNK_PAGES) as usize
    }

    /// Whether the thread that populates ahead should look again: an
    /// allocation (or a batch) took a whole free 2 MiB block (there were
    /// `chunks_free` before it), and chunks not faulted in remain.
    fn wants_ahead(&self, chunks_free: usize) -> bool {
        self.counts[MAX_ORDER as usize] < chunks_free && self.populated_chunks < self.chunks()
    }

    /// Marks `chunk` populated; returns whether it was not.
    fn mark_populated(&mut self, chunk: u32) -> bool {
        let (w, b) = (chunk as usize / 64, chunk % 64);
        let was = self.populated[w] & 1 << b != 0;
        self.populated[w] |= 1 << b;
        self.populated_chunks += usize::from(!was);
        !was
    }

    /// Marks `chunk` unpopulated.
    fn clear_populated(&mut self, chunk: u32) {
        let (w, b) = (chunk as usize / 64, chunk % 64);
        let was = self.populated[w] & 1 << b != 0;
        self.populated[w] &= !(1 << b);
        self.populated_chunks -= usize::from(was);
    }

    /// Takes every free block inside chunks `first..end` of a populated
    /// chunk out of the free sets, marking it allocated at its order, and
    /// appends `(page, order)` for each: for [`Arena::release_free`], which
    /// frees them back. The limit is not applied.
    fn take_free(&mut self, first: u32, end: u32, out: &mut Vec<(u32, u32)>) {
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
    fn alloc(&mut self, order: u32) -> Option<u32> {
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
    fn alloc_whole(&mut self, order: u32, want: usize) -> Option<(u32, u32)> {
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
    fn free(&mut self, page: u32, order: u32) -> Result<(), ArenaError> {
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
    fn diagnose(&self, page: u32, order: u32) -> ArenaError {
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
    fn metadata_bytes(&self) -> usize {
        std::mem::size_of::<Buddy>()
            + self.free.iter().map(SummaryBitmap::bytes).sum::<usize>()
            + self.allocated.iter().map(|a| a.len() * 8).sum::<usize>()
            + self.populated.len() * 8
    }

    /// See [`Arena::check_consistency`].
    fn check(&self) -> Result<(), String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_bitmap_finds_lowest_across_levels() {
        let mut b = SummaryBitmap::new(64 * 64 * 3 + 5);
        assert_eq!(b.levels.len(), 3);
        assert_eq!(b.first_set(), None);
        b.set(64 * 64 * 3 + 4);
        b.set(4097);
        assert_eq!(b.first_set(), Some(4097));
        b.clear(4097);
        assert_eq!(b.first_set(), Some(64 * 64 * 3 + 4));
        b.set(0);
        assert_eq!(b.first_set(), Some(0));
        assert_eq!(b.check(), Ok(2));
        b.clear(0);
        b.clear(64 * 64 * 3 + 4);
        assert_eq!(b.first_set(), None);
        assert_eq!(b.check(), Ok(0));
    }

    #[test]
    fn empty_bitmap_has_one_word() {
        let b = SummaryBitmap::new(0);
        assert_eq!(b.first_set(), None);
        assert_eq!(b.check(), Ok(0));
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "safe bookkeeping checked in full after each of 15 000 steps: minutes under Miri, nothing unsafe"
    )]
    fn buddy_random_ops_keep_invariants() {
        // A small xorshift so the unit test needs no dev-dependency.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for pages in [1u32, 7, 512, 1000, 1536 + 77] {
            let mut b = Buddy::new(pages);
            b.check().unwrap();
            let initial = b.counts;
            let mut live = Vec::new();
            for _ in 0..3000 {
                if next() % 3 != 0 {
                    let order = (next() % 4) as u32 * (next() % 4) as u32 % (MAX_ORDER + 1);
                    if let Some(p) = b.alloc(order) {
                        live.push((p, order));
                    }
                } else if !live.is_empty() {
                    let i = next() as usize % live.len();
                    let (p, o) = live.swap_remove(i);
                    b.free(p, o).unwrap();
                }
                b.check().unwrap();
            }
            for (p, o) in live {
                b.free(p, o).unwrap();
            }
            b.check().unwrap();
            assert_eq!(b.counts, initial);
        }
    }

    #[test]
    fn limit_refuses_past_it_and_lifts() {
        let arena = Arena::new(4 << 20, Populate::Lazy).unwrap();
        arena.set_limit_pages(3);
        assert_eq!(arena.limit_pages(), 3);
        let a = arena.alloc(1).unwrap();
        assert_eq!(arena.alloc(1), None, "4 pages would pass the limit of 3");
        let b = arena.alloc(0).unwrap();
        let mut more = Vec::new();
        assert_eq!(arena.alloc_bulk(0, 4, &mut more), 0);
        arena.set_limit_pages(usize::MAX);
        assert_eq!(arena.limit_pages(), 1024);
        assert_eq!(arena.alloc_bulk(0, 4, &mut more), 4);
        for p in more {
            arena.free(p, 0).unwrap();
        }
        arena.free(a, 1).unwrap();
        arena.free(b, 0).unwrap();
        arena.check_consistency().unwrap();
    }

    #[test]
    fn chunks_are_populated_once_and_released_whole() {
        // Three chunks (pages 0, 512, 1024) and a tail of 5 pages (an
        // order-2 block at 1536, an order-0 one at 1540): chunk 3.
        let arena = Arena::new((6 << 20) + 5 * PAGE_SIZE, Populate::Lazy).unwrap();
        assert_eq!(arena.populated_bytes(), 0);
        // The smallest fitting blocks first: the tail's.
        let a = arena.alloc(0).unwrap();
        assert_eq!(a.index(), 1540);
        assert_eq!(arena.populated_bytes(), 5 * PAGE_SIZE, "the tail chunk");
        let b = arena.alloc(0).unwrap();
        assert_eq!(b.index(), 1536);
        assert_eq!(arena.populated_bytes(), 5 * PAGE_SIZE, "same chunk");
        let mut window = Vec::new();
        assert_eq!(arena.alloc_bulk(9, 2, &mut window), 2);
        assert_eq!(window, [PageId(0), PageId(512)]);
        assert_eq!(arena.populated_bytes(), (4 << 20) + 5 * PAGE_SIZE);
        // Chunk 1 freed whole: released, and no longer populated. Chunk 2
        // was never populated: skipped. The tail's 3 free pages are
        // released, and their chunk stays populated.
        arena.free(window[1], 9).unwrap();
        let released = arena.release_free();
        assert_eq!(released, (2 << 20) + 3 * PAGE_SIZE);
        assert_eq!(arena.released_bytes(), released);
        assert_eq!(arena.populated_bytes(), (2 << 20) + 5 * PAGE_SIZE);
        arena.check_consistency().unwrap();
        assert_eq!(arena.free_pages(), 512 + 512 + 3);
        // Allocating in chunk 1 again populates it again.
        let c = arena.alloc(9).unwrap();
        assert_eq!(c.index(), 512);
        assert_eq!(arena.populated_bytes(), (4 << 20) + 5 * PAGE_SIZE);
        for (p, o) in [(a, 0), (b, 0), (window[0], 9), (c, 9)] {
            arena.free(p, o).unwrap();
        }
        arena.check_consistency().unwrap();
        assert_eq!(arena.free_pages(), arena.capacity_pages());
    }

    #[test]
    fn eager_counts_everything_populated() {
        let arena = Arena::new(2 << 20, Populate::Lazy).unwrap();
        assert_eq!(arena.populated_bytes(), 0);
        if cfg!(miri) {
            return;
        }
        let eager = Arena::new((2 << 20) + PAGE_SIZE, Populate::Eager).unwrap();
        assert_eq!(eager.populated_bytes(), (2 << 20) + PAGE_SIZE);
    }

    #[test]
    #[cfg_attr(miri, ignore = "mincore: Miri has no page residency")]
    fn touch_fallback_faults_every_page() {
        let region = Region::map_aligned(64 * PAGE_SIZE, MAX_BLOCK_BYTES).unwrap();
        assert_eq!(
            region.populate("test region", true).unwrap(),
            PopulateMethod::Touch
        );
        let mut vec = vec![0u8; 64];
        // A raw call: neither rustix nor nix wraps mincore.
        // SAFETY: the range is our mapping; vec has one byte per page.
        let ret =
            unsafe { libc::mincore(region.ptr.as_ptr().cast(), region.len, vec.as_mut_ptr()) };
        assert_eq!(ret, 0);
        assert!(vec.iter().all(|&v| v & 1 == 1), "not all pages resident");
    }
}
