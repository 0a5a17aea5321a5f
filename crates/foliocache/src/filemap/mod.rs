//! The advanced layer: a file's [`Mapping`] (the kernel's
//! `address_space`) and the filemap operations on it, which hand out its
//! folios referenced ([`FolioRef`]) or locked ([`LockedFolio`]), as the
//! kernel's `filemap_*` calls do. [`File`](crate::File) is built on these;
//! a program that manages folios itself (populating guest memory, filling
//! folios from its own IO) uses them directly through
//! [`File::mapping`](crate::File::mapping).
//!
//! # The read path (`filemap_read`)
//! [`File`](crate::File)'s reads come down to one call here, `Mapping::read`,
//! with the handle's readahead state. The common hit is one lockless lookup
//! and a copy. Otherwise a batch of referenced, contiguous folios for the
//! request comes from one lockless walk ([`Mapping::get_read_batch`]) and is
//! copied out. On a miss, synchronous readahead (`page_cache_sync_ra`,
//! `readahead.rs`) allocates a window of folios, inserts them locked and
//! reads them in runs, one IO per run of contiguous folios; then the batch
//! is looked up again. A folio carrying the readahead marker starts the next
//! window (`page_cache_async_ra`). If readahead made nothing (memory short,
//! or off), the largest folio that fits the request at an aligned index is
//! created and read (`filemap_create_folio`). A second reader that misses on
//! the same index finds the locked folio and sleeps on its lock instead of
//! issuing a second IO.
//!
//! The index is an [`xarray::XArray`] of pointers into the cache's
//! descriptor table, which lives as long as the cache. A folio in a mapping
//! holds `2^order` references for the cache; every lookup that returns a
//! folio adds one, held by the returned [`FolioRef`] and dropped with it.
//!
//! # Lookup protocol (`filemap_get_entry`)
//! Under an epoch pin: load the entry, take a reference only if the count is
//! not zero, re-load the slot; if it no longer holds the same folio, drop
//! the reference and retry. Reclaim freezes the count from exactly the
//! cache's references (and its own) to zero, under the folio lock, before
//! it clears the slot, so a folio being removed is never returned.
//!
//! # Locking
//! | operation | index lock | sleeps |
//! |---|---|---|
//! | `get_entry`, `get_folio`, `get_read_batch`, `get_folios_contig` | no (epoch pin) | no |
//! | `lock_folio` | no | on the folio lock (not with `NOWAIT`) |
//! | `lock_folio` with `CREAT`, `new_folio`, `grab_folios` | to insert | may reclaim (only for the first folio of a grab) |
//! | `add_folio`, `add_folio_range` | one hold (dropped only to allocate index nodes, then re-validated) | no |
//! | `read_folio`, `read_folios`, `writeback` | no | on IO |
//!
//! The crate documentation gives the order of every lock.
//!
//! # What a caller cannot do
//! A folio's state changes only inside the crate: from outside, a
//! [`Folio`] can be read, never written, and a folio lock is released only
//! by its guard. Each of these fails to compile:
//!
//! ```compile_fail
//! # fn f(m: &foliocache::filemap::Mapping) {
//! let folio = m.get_folio(0, Default::default()).unwrap();
//! folio.set_mapping(1, 0); // reclaim would follow this "mapping"
//! # }
//! ```
//! ```compile_fail
//! # fn f(m: &foliocache::filemap::Mapping) {
//! let folio = m.lock_folio(0, Default::default()).unwrap();
//! folio.folio().unlock(); // the guard would unlock it again
//! # }
//! ```
//! ```compile_fail
//! # fn f(m: &foliocache::filemap::Mapping) {
//! let folio = m.get_folio(0, Default::default()).unwrap();
//! folio.test_and_set(foliocache::filemap::FolioFlags::UPTODATE);
//! # }
//! ```
//! ```compile_fail
//! # fn f(m: &foliocache::filemap::Mapping) {
//! let folio = m.get_folio(0, Default::default()).unwrap();
//! folio.freeze(1);
//! # }
//! ```
//! ```compile_fail
//! # fn f(m: &foliocache::filemap::Mapping) {
//! let folio = m.get_folio(0, Default::default()).unwrap();
//! folio.put_many(1);
//! # }
//! ```
//! ```compile_fail
//! # fn f(m: &foliocache::filemap::Mapping) {
//! let folio = m.get_folio(0, Default::default()).unwrap();
//! folio.init(0, 0);
//! # }
//! ```
//! ```compile_fail
//! # fn f(m: &foliocache::filemap::Mapping) {
//! // Adding a folio needs it locked: a reference alone is refused.
//! let new = m.new_folio(0).unwrap().unlock();
//! m.add_folio(&new, 0).unwrap();
//! # }
//! ```
//!
//! The same calls through the guards compile:
//!
//! ```no_run
//! # fn f(m: &foliocache::filemap::Mapping) -> std::io::Result<()> {
//! use foliocache::filemap::FgpFlags;
//! let folio = m.lock_folio(0, FgpFlags::CREAT)?; // locked, not uptodate
//! let folio = m.read_folio(folio)?; // filled, unlocked, still referenced
//! let locked = folio.lock(); // locked again; unlocked when dropped
//! drop(locked);
//! # Ok(()) }
//! ```

use std::io;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::Arc;

use backing::{Backing, BackingInfo};
use xarray::{Cursor, Entry, EntryRef, Error as XaError, Item, XArray, XaGuard};

use crate::arena::{PageId, MAX_ORDER};
pub use crate::folio::{Folio, FolioFlags, FolioRef, LockedFolio};
use crate::mm::CacheInner;
use crate::readahead::Insert;
pub use crate::workingset::Shadow;
// (`size` and `handles`: see the note in `Mapping`.)
#[allow(clippy::disallowed_types)]
use std::sync::atomic::AtomicU64 as StdAtomicU64;

use crate::sync::{spin_hint, AtomicU64, Ordering};

use crate::arena::PAGE;

// The file's slot and unsaved pages in the guardian's segment.
mod guard;
// Borrowed folios (`File::pin`), and the write side's guard against them.
pub(crate) mod pin;
// The read path and readahead's IO.
mod read;

use pin::WritableFolio;

/// The most folios one batch lookup returns (the kernel's `folio_batch`).
pub const BATCH: usize = 31;

/// Bytes of a random hit's data prefetched ahead of its lookup's atomics.
const PREFETCH_BYTES: usize = 1024;
/// Bytes of a sequential hit's data prefetched ahead of its lookup's
/// atomics: the request's own bytes, up to a page. The hardware's stream
/// prefetcher alone left sequential 4 KiB hits at 0.86-0.91x `memcpy`;
/// with the page prefetched, 0.91-0.98x from 1 to 16 threads (the note
/// "Sixteen CPUs" in `docs/measurements/`). Not beyond the request: a
/// prefetch of the next bytes cost more than it saved (the note
/// "Sequential 4 KiB hits: prefetching ahead").
const SEQ_PREFETCH_BYTES: usize = PAGE as usize;

/// A pointer to a folio descriptor, as stored in a mapping's index.
///
/// It owns nothing: descriptors live in the cache's table for the cache's
/// lifetime, and a mapping (which keeps the cache alive) removes its folios
/// before it is dropped.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct FolioPtr(NonNull<Folio>);

impl FolioPtr {
    pub(crate) fn new(f: &Folio) -> Self {
        FolioPtr(NonNull::from(f))
    }
}

impl std::fmt::Debug for FolioPtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FolioPtr({:p})", self.0)
    }
}

// SAFETY: a FolioPtr is a plain address of a descriptor made of atomics,
// which is Sync; sending or sharing the address is harmless.
unsafe impl Send for FolioPtr {}
// SAFETY: as above.
unsafe impl Sync for FolioPtr {}

// SAFETY: into_raw/as_ptr return the same pointer, which is 8-byte aligned
// (Folio holds an AtomicU64) and points into the cache's descriptor table,
// valid for as long as any mapping holding it lives; from_raw rebuilds the
// same value and dropping it does nothing.
unsafe impl Item for FolioPtr {
    type Target = Folio;

    fn into_raw(self) -> NonNull<Folio> {
        self.0
    }

    fn as_ptr(&self) -> NonNull<Folio> {
        self.0
    }

    unsafe fn from_raw(ptr: NonNull<Folio>) -> Self {
        FolioPtr(ptr)
    }
}

/// The largest order, up to `max`, of a folio that can start at page `at`
/// (aligned to its size) and end by page `end` (exclusive); 0 if none
/// larger than a page does.
pub(crate) fn fit_order(at: u64, end: u64, max: u32) -> u32 {
    let mut order = max;
    while order > 0 && (!at.is_multiple_of(1 << order) || at.saturating_add(1 << order) > end) {
        order -= 1;
    }
    order
}

/// What [`Mapping::get_entry`] found.
#[derive(Debug)]
pub enum MappingEntry<'m> {
    /// A folio, with a reference.
    Folio(FolioRef<'m>),
    /// A value entry: the shadow an evicted folio left.
    Shadow(u64),
}

bitflags::bitflags! {
    /// Flags of [`Mapping::get_folio`] (the kernel's `FGP_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    pub struct FgpFlags: u32 {
        /// Mark the folio accessed.
        const ACCESSED = 1 << 0;
        /// Return it locked, after checking it is still in the mapping (what
        /// [`Mapping::lock_folio`] does; implied there, refused by
        /// [`Mapping::get_folio`]).
        const LOCK = 1 << 1;
        /// Create it if absent (a shadow counts as absent). A created folio is
        /// returned locked and not uptodate: fill it with
        /// [`Mapping::read_folio`].
        const CREAT = 1 << 2;
        /// Never sleep: a contended lock gives `WouldBlock`.
        const NOWAIT = 1 << 5;
        /// Uncached use: a created folio is dropbehind, and a dropbehind folio
        /// found stays so. Without it, a lookup that finds a dropbehind folio
        /// claims it for the cache (clears the flag, as the kernel's
        /// `__filemap_get_folio` does without `FGP_DONTCACHE`).
        const DONTCACHE = 1 << 6;
        /// The order asked for by [`order`](FgpFlags::order) (bits 26..32).
        const _ = 0x3f << 26;
    }
}

impl FgpFlags {
    /// Also asks for a created folio of up to `order` (capped by the cache's
    /// largest folio and the index's alignment).
    pub const fn order(self, order: u32) -> FgpFlags {
        FgpFlags::from_bits_retain((self.bits() & !(0x3f << 26)) | ((order & 0x3f) << 26))
    }

    fn get_order(self) -> u32 {
        (self.bits() >> 26) & 0x3f
    }
}

/// Why [`Mapping::add_folio`] did not add a folio.
#[derive(Debug)]
#[non_exhaustive]
pub enum AddError {
    /// A folio already covers part of the range (EEXIST): look it up instead.
    Exists,
    /// The folio is not locked, already in a mapping, or misaligned.
    Invalid(&'static str),
    /// The index refused the store (allocation failure).
    Index(XaError),
}

impl std::fmt::Display for AddError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AddError::Exists => write!(f, "a folio already covers part of the range"),
            AddError::Invalid(why) => write!(f, "cannot add this folio: {why}"),
            AddError::Index(e) => write!(f, "index error: {e}"),
        }
    }
}

impl std::error::Error for AddError {
    /// The index's own error, for [`AddError::Index`].
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AddError::Index(e) => Some(e),
            AddError::Exists | AddError::Invalid(_) => None,
        }
    }
}

impl From<AddError> for io::Error {
    fn from(e: AddError) -> io::Error {
        match e {
            AddError::Exists => io::Error::new(io::ErrorKind::AlreadyExists, e),
            AddError::Invalid(_) => io::Error::new(io::ErrorKind::InvalidInput, e),
            AddError::Index(x) => x.into(),
        }
    }
}

/// One file's state in the cache. See the [module documentation](self).
pub struct Mapping {
    pub(crate) xa: XArray<FolioPtr>,
    /// This mapping's own `Arc`, weakly: reclaim, which reaches a mapping
    /// from a folio on an LRU list, holds it while it evicts the folio with
    /// the LRU lock dropped (and skips a mapping being dropped).
    pub(crate) this: std::sync::Weak<Mapping>,
    /// The cache this file is in.
    cache: Arc<CacheInner>,
    /// Where the data comes from and goes to. Replaced only when a file
    /// first opened read-only is opened for writing (the new descriptor
    /// can write back).
    /// A plain lock even under loom: held only to clone or replace the
    /// `Arc`, never across anything a model races.
    #[allow(clippy::disallowed_types)]
    backing: parking_lot::RwLock<Arc<dyn Backing>>,
    /// Whether `backing` was opened for writing (plain, as `backing`).
    #[allow(clippy::disallowed_types)]
    backing_writable: std::sync::atomic::AtomicBool,
    /// The file's identity (device, inode) for a file opened by path: one
    /// mapping per file in a cache, so every handle sees the same data.
    pub(crate) key: Option<(u64, u64)>,
    /// The file's size in bytes (the kernel's `i_size`): changed by writes
    /// that extend the file (under `inode_lock` and the folio locks of the
    /// extending write, so writeback that locks a folio sees the size its
    /// data needs), and by `set_len`.
    #[allow(clippy::disallowed_types)]
    size: StdAtomicU64,
    info: BackingInfo,
    pub(crate) path: Option<PathBuf>,
    /// Folios in the index (its entries less the shadows).
    pub(crate) folios: AtomicU64,
    /// A memory file: no backing store, folios never evicted nor written
    /// back, kept off the LRU lists.
    pub(crate) memfile: bool,
    /// Where the mapping's 2 MiB folios start in the arena, as walks last
    /// found them: lets a hit skip the walk (`huge_hints.rs`).
    huge: crate::huge_hints::HugeHints,
    // (`size` and `handles` are std atomics even under loom: loom atomics
    // there would add a scheduling point to every read and every clone of
    // a handle for nothing the models check. `dirty_pages` is loom's:
    // writeback decides on it whether there is anything to do, and the
    // models of writeback against truncation and close race on it.)
    /// Writers (shared; exclusive when extending), `set_len` and
    /// `punch_hole` (exclusive): the kernel's `i_rwsem`.
    pub(crate) inode_lock: crate::sync::RwLock<()>,
    /// Held shared by readers while they create folios and start their IO,
    /// exclusive by `set_len` and `punch_hole` while they remove folios and
    /// change the backing: no folio is read from blocks being freed (the
    /// kernel's `invalidate_lock`).
    pub(crate) invalidate_lock: crate::sync::RwLock<()>,
    /// One batch of this file's writeback at a time (a pass takes it
    /// for each batch, so writers throttled on the file and the flusher
    /// take turns, in the order they came: a fair lock); held by
    /// truncation while it changes the backing's size.
    pub(crate) wb_lock: crate::sync::FairMutex<()>,
    /// The page where the last throttled writer's writeback stopped: the
    /// next one goes on from there (the kernel's `writeback_index`), so
    /// throttled writers take turns over the whole file. A hint, plain
    /// even under loom: any value is a correct place to start.
    #[allow(clippy::disallowed_types)]
    pub(crate) wb_next: StdAtomicU64,
    /// Writeback errors, reported once per handle (the kernel's errseq).
    pub(crate) wb_err: crate::errseq::ErrSeq,
    /// Pages of dirty folios.
    pub(crate) dirty_pages: AtomicU64,
    /// Open handles ([`File`](crate::File)s) on this mapping: the last one
    /// to go writes the dirty data back while the mapping is still
    /// registered, so an open meanwhile shares it rather than reading the
    /// backing before the data is there.
    #[allow(clippy::disallowed_types)]
    pub(crate) handles: StdAtomicU64,
    /// The last handle's close wrote everything back and made the
    /// backing's size the file's: the drop has nothing left to do, and
    /// must not set the size again (an asynchronous read may hold the
    /// mapping past the close, while the file is opened again and
    /// changed through another mapping).
    #[allow(clippy::disallowed_types)]
    pub(crate) closed_clean: std::sync::atomic::AtomicBool,
    /// The file's `fstat` when this mapping was made (a file opened by
    /// path): a file kept past its last close (`Cache::close_keeping`)
    /// must still have the identity it gives then, else another writer
    /// changed it.
    pub(crate) opened_as: std::sync::OnceLock<std::fs::Metadata>,
    /// The file's slot in the guardian's segment (`guard.rs`).
    guard_slot: guard::GuardSlot,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // The last handle wrote the dirty data back already (see
        // `close_handle`): nothing to do (and the backing may be another
        // open's by now). Or the cache kept the mapping until that worked
        // or it gave up; one last try.
        if self.closed_clean.load(std::sync::atomic::Ordering::Acquire) {
            self.remove_all();
            self.guard_release();
            return;
        }
        if let Err(e) = self.close_handle() {
            log::error!(
                "foliocache: {:?} goes with dirty data its writeback could not write: {e}",
                self.path
            );
        }
        self.remove_all();
        self.guard_release();
    }
}

impl Mapping {
    /// A new mapping, to be built in its `Arc` (`this` is that `Arc`'s
    /// `Weak`: see [`Arc::new_cyclic`]).
    // (Builds the plain `backing`, `backing_writable`, `size` and
    // `handles`, each with its reason at its field.)
    #[allow(clippy::disallowed_types)]
    pub(crate) fn new(
        this: std::sync::Weak<Mapping>,
        cache: Arc<CacheInner>,
        backing: Arc<dyn Backing>,
        size: u64,
    ) -> Mapping {
        let info = backing.info();
        Mapping {
            xa: XArray::new(),
            this,
            cache,
            backing: parking_lot::RwLock::new(backing),
            backing_writable: std::sync::atomic::AtomicBool::new(true),
            key: None,
            size: StdAtomicU64::new(size),
            info,
            path: None,
            folios: AtomicU64::new(0),
            memfile: false,
            huge: Default::default(),
            inode_lock: crate::sync::RwLock::new(()),
            invalidate_lock: crate::sync::RwLock::new(()),
            wb_lock: crate::sync::FairMutex::new(()),
            wb_next: StdAtomicU64::new(0),
            wb_err: crate::errseq::ErrSeq::default(),
            dirty_pages: AtomicU64::new(0),
            handles: StdAtomicU64::new(0),
            closed_clean: std::sync::atomic::AtomicBool::new(false),
            opened_as: std::sync::OnceLock::new(),
            guard_slot: guard::GuardSlot::new(0),
        }
    }

    /// The cache this file is in.
    pub(crate) fn inner(&self) -> &CacheInner {
        &self.cache
    }

    /// The cache this file is in, to keep it alive (an IO in flight).
    pub(crate) fn inner_arc(&self) -> &Arc<CacheInner> {
        &self.cache
    }

    /// The identity recorded in a folio's `mapping` field.
    pub(crate) fn id(&self) -> usize {
        self as *const Mapping as usize
    }

    /// The mapping of a folio on one of the cache's LRU lists, held (reclaim's
    /// step from a folio to its file), or `None` when the mapping is being
    /// dropped or the folio is on no list. `_lru` is the lists themselves,
    /// borrowed from the guard of the cache's LRU lock: the proof that the
    /// caller holds it.
    pub(crate) fn of_listed(_lru: &crate::lru::Lists, f: &Folio) -> Option<Arc<Mapping>> {
        if !f.test(FolioFlags::LRU) {
            return None;
        }
        // SAFETY: under the LRU lock, a folio with `LRU` set is in a live
        // mapping, the one its `mapping` field records (`Mapping::id`): the
        // flag is set only under that lock on a folio in a mapping
        // (`lru_add_all`, reclaim's putback), and a mapping clears it on
        // every folio of its own, under that lock, before its memory goes
        // (`lru_detach`, from `remove_all` in its drop). The mapping is
        // only read, and only its `Weak` to itself, which tells whether it
        // is being dropped.
        let m = unsafe { &*(f.mapping() as *const Mapping) };
        m.this.upgrade()
    }

    /// The file's size in bytes now.
    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    /// The backing (a counted reference: it may be replaced meanwhile).
    pub(crate) fn backing(&self) -> Arc<dyn Backing> {
        self.backing.read().clone()
    }

    /// Whether the backing can be written.
    pub(crate) fn backing_writable(&self) -> bool {
        self.backing_writable
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Sets the backing and whether it is writable (a new mapping, or one
    /// whose file is now opened for writing).
    pub(crate) fn set_backing(&self, backing: Arc<dyn Backing>, writable: bool) {
        *self.backing.write() = backing;
        self.backing_writable
            .store(writable, std::sync::atomic::Ordering::Release);
    }

    /// Sets the size (the caller holds `inode_lock` exclusively, or is an
    /// extending write holding it and the folio locks of its last folios).
    pub(crate) fn set_size(&self, size: u64) {
        self.size.store(size, Ordering::Release);
        self.guard_size(size);
    }

    /// Whether this is a memory file ([`Cache::memfile`](crate::Cache::memfile)).
    pub fn is_memfile(&self) -> bool {
        self.memfile
    }

    /// Bytes of dirty folios (written, not yet written back).
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty_pages.load(Ordering::Relaxed) * PAGE
    }

    /// How the file's data travels.
    pub fn info(&self) -> &BackingInfo {
        &self.info
    }

    /// Folios in the index (shadows excluded).
    pub fn nr_folios(&self) -> u64 {
        self.folios.load(Ordering::Relaxed)
    }

    /// Eviction shadows in the index (a large one counts once). A snapshot:
    /// concurrent adds and evictions may skew it by a few.
    pub fn nr_shadows(&self) -> u64 {
        self.xa.len().saturating_sub(self.nr_folios())
    }

    /// Index nodes holding only shadows.
    pub fn shadow_nodes(&self) -> usize {
        self.xa.value_nodes()
    }

    /// Bytes of [`shadow_nodes`](Self::shadow_nodes).
    pub fn shadow_bytes(&self) -> usize {
        self.xa.value_node_bytes()
    }

    /// Bytes of index memory (nodes, and the table of 2 MiB folios a hit
    /// reads before it walks), for the cache's budget.
    pub fn index_bytes(&self) -> usize {
        self.xa.memory_bytes() + self.huge.bytes()
    }

    /// Turns a folio seen under a pin into a counted reference, if it is
    /// still the one at `index`.
    ///
    /// With the reference taken, the folio cannot be freed, so its
    /// identity is the check instead of a second walk of the index (the
    /// kernel's `xas_reload`): a folio in this mapping that covers `index`
    /// is the entry there, as a mapping holds one folio per index, and
    /// every removal clears the folio's mapping under the index lock before
    /// it drops the cache's references. (A folio being added has its
    /// mapping set just before it is stored: found so, it is new, locked
    /// and not yet uptodate, which a hit checks; or the uptodate copy a
    /// writer swaps in for a pinned folio, whose bytes are the old one's.)
    /// The descriptor may have been freed and reused since the walk found
    /// it, or since a walk left it in the hints a hit read instead
    /// (`huge_hints.rs`): the check then refuses it, or finds it back in
    /// this mapping at `index`, which is as good.
    fn try_ref<'m>(&'m self, f: &Folio, index: u64) -> Option<FolioRef<'m>> {
        let cache = self.inner();
        let page = cache.mem.table.page_of(f)?;
        let folio = cache.mem.table.get(page)?;
        if !folio.try_get() {
            return None;
        }
        if folio.mapping() == self.id() && folio.contains(index) {
            Some(FolioRef::adopt(&cache.mem, folio))
        } else {
            cache.mem.put(folio);
            None
        }
    }

    /// Whatever sits at `index`: a folio (with a reference), a shadow, or
    /// nothing. Never locks; the folio may be truncated right after.
    pub fn get_entry(&self, index: u64) -> Option<MappingEntry<'_>> {
        let guard = self.xa.pin();
        loop {
            match self.xa.load_ref(index, &guard) {
                None => return None,
                Some(EntryRef::Value(v)) => return Some(MappingEntry::Shadow(v)),
                Some(EntryRef::Item(f)) => {
                    if let Some(r) = self.try_ref(f, index) {
                        return Some(MappingEntry::Folio(r));
                    }
                    spin_hint();
                }
            }
        }
    }

    /// The folio holding byte `offset`, with a reference, for a read of
    /// `len` bytes from there: [`get_entry`](Self::get_entry) for the read
    /// path's hit (`filemap_read`'s first lookup) and a pin's (`pin.rs` here).
    /// `None` for a hole or a shadow. Also says whether the read continues
    /// this thread's previous read of this mapping (the read path then does
    /// not count a second access to the folio where that one ended).
    ///
    /// Unless the read continues this thread's previous read, the first
    /// bytes of the read are prefetched as soon as the index walk ends,
    /// before the folio's descriptor is read ([`prefetch`](Self::prefetch)),
    /// so a random hit's miss on its data overlaps the rest of the lookup
    /// instead of following it.
    /// A sequential reader is left to the hardware prefetcher: prefetching
    /// its next page cost it throughput.
    pub(crate) fn get_for_read(&self, offset: u64, len: usize) -> (Option<FolioRef<'_>>, bool) {
        thread_local! {
            /// The mapping and the byte where this thread's last read ended.
            static NEXT: std::cell::Cell<(usize, u64)> = const { std::cell::Cell::new((0, u64::MAX)) };
        }
        let id = self.id();
        let sequential =
            NEXT.with(|n| n.replace((id, offset.saturating_add(len as u64))) == (id, offset));
        let index = offset / PAGE;
        let cache = self.inner();
        // A 2 MiB folio where a walk last found one: checked as a walk's
        // find is, so a stale hint only costs the walk that follows. Its
        // data is prefetched first, before anything orders this thread's
        // loads (the hint names a page whatever it holds now). A hit on a
        // hint needs no epoch pin (the hints and the descriptors live as
        // long as the cache, and the reference is the check): only the
        // walk takes one.
        if let Some(f) = self.huge.get(index).and_then(|p| cache.mem.table.get(p)) {
            let first = index & !((1u64 << MAX_ORDER) - 1);
            self.prefetch(f, first, offset, len, sequential);
            if let Some(r) = self.try_ref(f, index) {
                return (Some(r), sequential);
            }
        }
        let guard = self.xa.pin();
        loop {
            match self.xa.load_ref_with_start(index, &guard) {
                None | Some((EntryRef::Value(_), _)) => {
                    self.huge.note(index, None, || self.size());
                    return (None, sequential);
                }
                Some((EntryRef::Item(f), first)) => {
                    let found = cache.mem.table.page_of(f).map(|page| (f.order(), page));
                    self.huge.note(index, found, || self.size());
                    self.prefetch(f, first, offset, len, sequential);
                    if let Some(r) = self.try_ref(f, index) {
                        return (Some(r), sequential);
                    }
                    spin_hint();
                }
            }
        }
    }

    /// Prefetches up to [`PREFETCH_BYTES`] ([`SEQ_PREFETCH_BYTES`] for a
    /// read that continues this thread's last) from file byte `offset`, in
    /// `f`, whose first index the index walk reported as `first`
    /// (`XArray::load_ref_with_start`). The address comes from `f`'s place
    /// in the descriptor table and from the walk, without reading `f`: the
    /// data's miss overlaps the miss on the descriptor instead of
    /// following it. Nothing is checked: `f` is not referenced and may be
    /// freed or reused meanwhile, and `first` may be stale. A wrong address
    /// only wastes the prefetch (it stays inside the arena, which stays
    /// mapped, and a prefetch never faults or changes memory).
    #[inline]
    fn prefetch(&self, f: &Folio, first: u64, offset: u64, len: usize, sequential: bool) {
        let cache = self.inner();
        let Some(head) = cache.mem.table.page_of(f) else {
            return;
        };
        let Some(page) = (offset / PAGE)
            .checked_sub(first)
            .and_then(|d| usize::try_from(d).ok())
            .and_then(|d| d.checked_add(head))
            .filter(|&p| p < cache.mem.arena.capacity_pages())
        else {
            return;
        };
        let within = (offset % PAGE) as usize;
        let start = cache.mem.arena.page_ptr(PageId::new(page as u32)).as_ptr();
        let start = start.wrapping_add(within);
        let left = cache.mem.arena.capacity_bytes() - page * PAGE as usize - within;
        let most = if sequential {
            SEQ_PREFETCH_BYTES
        } else {
            PREFETCH_BYTES
        };
        let bytes = len.min(most).min(left);
        let mut line = 0;
        while line < bytes {
            crate::copy::prefetch(start.wrapping_add(line));
            line += 64;
        }
    }

    /// The folio covering `index`, with a reference (`filemap_get_folio`):
    /// [`FgpFlags::ACCESSED`] and [`FgpFlags::DONTCACHE`] apply. Never
    /// locks and never sleeps; the folio may be truncated right after.
    ///
    /// # Errors
    /// `NotFound` when absent; `InvalidInput` with `LOCK` or `CREAT` (a
    /// locked folio: see [`lock_folio`](Self::lock_folio)).
    pub fn get_folio(&self, index: u64, flags: FgpFlags) -> io::Result<FolioRef<'_>> {
        if flags.contains(FgpFlags::LOCK) || flags.contains(FgpFlags::CREAT) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "get_folio: LOCK and CREAT return a locked folio: use lock_folio",
            ));
        }
        match self.get_entry(index) {
            Some(MappingEntry::Folio(f)) => {
                self.found(&f, flags);
                Ok(f)
            }
            _ => Err(not_found()),
        }
    }

    /// The folio covering `index`, locked and still in this mapping, with a
    /// reference (`__filemap_get_folio` with `FGP_LOCK`; `LOCK` is implied):
    /// found, or with [`FgpFlags::CREAT`] created in its place (locked and
    /// not uptodate: fill it with [`read_folio`](Self::read_folio)).
    ///
    /// # Locking
    /// Sleeps on the folio lock unless [`FgpFlags::NOWAIT`]; may reclaim
    /// to create. Takes no other lock of the caller's (see the crate's lock
    /// order: no folio lock of this file at a higher index may be held).
    ///
    /// # Errors
    /// `NotFound` when absent and not `CREAT`; `WouldBlock` with `NOWAIT`
    /// when the lock is held; `OutOfMemory` when a folio cannot be created.
    pub fn lock_folio(&self, index: u64, flags: FgpFlags) -> io::Result<LockedFolio<'_>> {
        loop {
            if let Some(MappingEntry::Folio(f)) = self.get_entry(index) {
                let f = if flags.contains(FgpFlags::NOWAIT) {
                    f.try_lock()
                        .map_err(|_| io::Error::from(io::ErrorKind::WouldBlock))?
                } else {
                    f.lock()
                };
                if f.mapping() != self.id() || !f.contains(index) {
                    // Removed (or replaced) while we slept: look again.
                    continue;
                }
                self.found(&f, flags);
                return Ok(f);
            }
            if !flags.contains(FgpFlags::CREAT) {
                return Err(not_found());
            }
            let mut order = flags.get_order().min(self.inner().io.max_order);
            while order > 0 && !index.is_multiple_of(1 << order) {
                order -= 1;
            }
            let f = self.new_folio(order)?;
            if flags.contains(FgpFlags::DONTCACHE) {
                f.test_and_set(FolioFlags::DROPBEHIND);
            }
            let at = index & !((1u64 << f.order()) - 1);
            match self.add_folio(&f, at) {
                Ok(_) => {
                    if flags.contains(FgpFlags::ACCESSED) {
                        self.inner().lru().mark_accessed(&f, f.flags());
                    }
                    return Ok(f);
                }
                Err(AddError::Exists) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// A lookup's effect on the folio it found: a cached lookup claims a
    /// dropbehind folio for the cache; `ACCESSED` marks it accessed.
    fn found(&self, f: &Folio, flags: FgpFlags) {
        if !flags.contains(FgpFlags::DONTCACHE) {
            f.test_and_clear(FolioFlags::DROPBEHIND);
        }
        if flags.contains(FgpFlags::ACCESSED) {
            self.inner().lru().mark_accessed(f, f.flags());
        }
    }

    /// Finds or creates, and locks, the folios covering pages
    /// `index..index + count` (`filemap_grab_folios`, with large folios
    /// and shadows): one lockless walk finds the
    /// folios present; every gap gets the largest aligned folios that fit
    /// it (up to the cache's largest), allocated first and inserted with
    /// one lock hold per gap; then the present ones are locked, in index
    /// order, and checked against removal. Appends the folios, in index
    /// order, to `out`, each locked and referenced: a created folio is not
    /// uptodate (fill it, mark it uptodate, unlock it); a present one keeps
    /// its state. Returns the pages covered from `index` on (the last folio
    /// may reach past `index + count`, and the first begin before
    /// `index`): all of them, or fewer when memory ran out after some were
    /// had. Created folios are for writing: a shadow they replace goes
    /// without the refault test (as the kernel skips it for `__GFP_WRITE`
    /// adds): not counted, never activating.
    ///
    /// # Errors
    /// `InvalidInput` for a range past the largest index; `OutOfMemory`
    /// when not even the first folio could be had.
    pub fn grab_folios<'m>(
        &'m self,
        index: u64,
        count: u64,
        out: &mut Vec<LockedFolio<'m>>,
    ) -> io::Result<u64> {
        self.grab(index, count, out, Insert::Batched, false)
    }

    /// [`grab_folios`](Self::grab_folios); `dontcache`: created folios are
    /// dropbehind, and present ones keep their flag (else a present
    /// dropbehind folio is claimed, as by any cached lookup).
    pub(crate) fn grab<'m>(
        &'m self,
        index: u64,
        count: u64,
        out: &mut Vec<LockedFolio<'m>>,
        insert: Insert,
        dontcache: bool,
    ) -> io::Result<u64> {
        let end = index.checked_add(count).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("grab_folios: index {index} + count {count} overflows"),
            )
        })?;
        let start_len = out.len();
        let mut next = index;
        while next < end {
            // The folios present from `next` on, as far as they run on.
            let mut present = Vec::new();
            let mut from = next;
            self.get_folios_contig(&mut from, end - 1, &mut present);
            let gap_start = match present.first() {
                Some(f) if f.index() <= next => None,
                _ => Some(next),
            };
            if let Some(gap) = gap_start {
                // Create the gap up to the next present folio (or `end`).
                let gap_end = self.next_present(gap, end);
                drop(present);
                // Only the first folio of the call may wait for memory:
                // waiting while holding folios locked could hold up the
                // writeback that would free some.
                let may_wait = out.len() == start_len;
                match self.create_range(gap, gap_end, out, insert, dontcache, may_wait) {
                    // Another thread added a folio there first (or one is
                    // being evicted: present but not to be had): look again.
                    Ok(None) => spin_hint(),
                    Ok(Some(pages)) => next = gap + pages,
                    Err(e) => {
                        if out.len() == start_len {
                            return Err(e);
                        }
                        break;
                    }
                }
                continue;
            }
            // Lock the present run in order; one removed meanwhile ends it.
            let mut stop = false;
            for f in present {
                if stop {
                    break;
                }
                let f = f.lock();
                if f.mapping() != self.id() || !f.contains(next) {
                    stop = true;
                    continue;
                }
                if !dontcache {
                    f.test_and_clear(FolioFlags::DROPBEHIND);
                }
                self.inner().lru().mark_accessed(&f, f.flags());
                next = f.index() + f.nr_pages();
                out.push(f);
            }
        }
        Ok(next - index)
    }

    /// [`grab_folios`](Self::grab_folios) one folio at a time: the same
    /// lookup and the same folios, but each created folio allocated and
    /// inserted on its own, with its own hold of the index lock (the kernel
    /// before `filemap_grab_folios`). For comparison.
    ///
    /// # Errors
    /// As [`grab_folios`](Self::grab_folios).
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn grab_folios_single<'m>(
        &'m self,
        index: u64,
        count: u64,
        out: &mut Vec<LockedFolio<'m>>,
    ) -> io::Result<u64> {
        self.grab(index, count, out, Insert::Single, false)
    }

    /// The first page in `from..end` holding a folio, or `end`.
    pub(crate) fn next_present(&self, from: u64, end: u64) -> u64 {
        let guard = self.xa.pin();
        let Ok(it) = self.xa.iter_ref(from..end, &guard) else {
            return end;
        };
        for (i, e) in it {
            if let EntryRef::Item(_) = e {
                return i.max(from);
            }
        }
        end
    }

    /// Creates locked folios over the gap `start..end`: the largest
    /// aligned order that fits at each step, all allocated first (never
    /// waiting, except for the first folio), then inserted in one lock
    /// hold. Returns the pages inserted from `start` (at least one folio's),
    /// or `None` when another thread added a folio at `start` first (look
    /// again).
    ///
    /// # Errors
    /// `OutOfMemory` when not even one folio could be had.
    fn create_range<'m>(
        &'m self,
        start: u64,
        end: u64,
        out: &mut Vec<LockedFolio<'m>>,
        insert: Insert,
        dontcache: bool,
        may_wait: bool,
    ) -> io::Result<Option<u64>> {
        if start >= end {
            // A folio appeared at the gap's start since the caller looked.
            return Ok(None);
        }
        if insert == Insert::Single {
            return self.create_one(start, end, out, dontcache, may_wait);
        }
        let max = self.inner().io.max_order;
        let mut folios = self.alloc_plan(start, end, max);
        let mut at = start + folios.iter().map(|f| f.nr_pages()).sum::<u64>();
        while at < end {
            let order = fit_order(at, end, max);
            let f = if folios.is_empty() && may_wait {
                // The first one may wait for memory; the rest may not.
                Some(self.new_folio(order)?)
            } else {
                self.new_folio_nowait(order)
                    .or_else(|| (order > 0).then(|| self.new_folio_nowait(0)).flatten())
            };
            let Some(f) = f else { break };
            at += f.nr_pages();
            folios.push(f);
        }
        if dontcache {
            for f in &folios {
                f.test_and_set(FolioFlags::DROPBEHIND);
            }
        }
        // A folio smaller than planned may leave the next misaligned:
        // keep the aligned prefix.
        let mut index = start;
        let mut keep = 0;
        for f in &folios {
            if !index.is_multiple_of(f.nr_pages()) {
                break;
            }
            index += f.nr_pages();
            keep += 1;
        }
        let rest = folios.split_off(keep);
        for f in rest {
            f.test_and_clear(FolioFlags::DROPBEHIND);
        }
        if folios.is_empty() {
            // (Only when not allowed to wait: the caller holds folios.)
            return Err(no_free_folio());
        }
        let done = match self.add_range(&folios, start, false) {
            Ok(n) => n,
            Err(AddError::Exists) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut pages = 0;
        for (i, f) in folios.into_iter().enumerate() {
            if i < done {
                pages += f.nr_pages();
                out.push(f);
            }
        }
        Ok(Some(pages))
    }

    /// The folios of a gap's plan (the largest aligned order that fits at
    /// each step), taken from the arena in one bulk allocation per order:
    /// all of them, or none (when the arena is short, the caller goes one
    /// folio at a time, reclaiming and waiting as needed). In plan order.
    fn alloc_plan<'m>(&'m self, start: u64, end: u64, max: u32) -> Vec<LockedFolio<'m>> {
        let mut plan = Vec::new();
        let mut at = start;
        while at < end {
            let order = fit_order(at, end, max);
            plan.push(order);
            at += 1 << order;
        }
        // Straight from the arena: no reclaim here.
        self.new_folios_planned(&plan, false).unwrap_or_default()
    }

    /// New locked folios of the orders in `plan`, in that order, taken
    /// with one bulk allocation per distinct order (one hold of the
    /// arena's lock each): all of them, or `None` (what was had goes
    /// back). `reclaim`: reclaim once when an order is short (a readahead
    /// window), else the arena's free memory only (a write's gap).
    pub(crate) fn new_folios_planned<'m>(
        &'m self,
        plan: &[u32],
        reclaim: bool,
    ) -> Option<Vec<LockedFolio<'m>>> {
        let mut orders = plan.to_vec();
        orders.sort_unstable();
        orders.dedup();
        let cache = self.inner();
        let mut pools: Vec<Vec<LockedFolio<'m>>> = Vec::with_capacity(orders.len());
        for &order in &orders {
            let want = plan.iter().filter(|&&o| o == order).count();
            let mut raw = Vec::with_capacity(want);
            let got = if reclaim {
                cache.try_alloc_folios(order.min(cache.io.max_order), want, &mut raw)
            } else {
                cache.mem.alloc_bulk(order, want, &mut raw)
            };
            // (Dropped, never inserted, if the plan fails.) Reversed, so
            // that the pops below hand out the arena's lowest pages first:
            // a range's folios then ascend in memory as its indices do,
            // as one at a time would have them. Descending, a write's copy
            // into a range of 4 KiB folios runs slower (the hardware
            // prefetches ascending streams;
            // the note "A write's new folios in ascending order" in `docs/measurements/`).
            pools.push(
                raw.into_iter()
                    .rev()
                    .map(|f| LockedFolio::new_fresh(&cache.mem, f))
                    .collect(),
            );
            if got < want {
                return None;
            }
        }
        let mut out = Vec::with_capacity(plan.len());
        for &order in plan {
            let i = orders.binary_search(&order).expect("planned order");
            out.push(pools[i].pop().expect("one folio per step"));
        }
        Some(out)
    }

    /// [`create_range`](Self::create_range) one folio at a time: each
    /// allocated, then inserted with its own lock hold, until the gap is
    /// full or memory runs out.
    fn create_one<'m>(
        &'m self,
        start: u64,
        end: u64,
        out: &mut Vec<LockedFolio<'m>>,
        dontcache: bool,
        may_wait: bool,
    ) -> io::Result<Option<u64>> {
        let max = self.inner().io.max_order;
        let mut at = start;
        while at < end {
            let order = fit_order(at, end, max);
            let f = if at == start && may_wait {
                self.new_folio(order)?
            } else {
                match self.new_folio_nowait(order) {
                    Some(f) => f,
                    None if at == start => return Err(no_free_folio()),
                    None => break,
                }
            };
            if dontcache {
                f.test_and_set(FolioFlags::DROPBEHIND);
            }
            let mut cur = Cursor::new(&self.xa, at);
            match self.add_one(&mut cur, &f, at) {
                Ok(_) => {
                    // A write's add: no refault test.
                    self.account_added(&f, None);
                    at += f.nr_pages();
                    out.push(f);
                }
                Err(AddError::Exists) if at == start => return Ok(None),
                Err(AddError::Exists) => break,
                Err(e) => {
                    if at == start {
                        return Err(e.into());
                    }
                    break;
                }
            }
        }
        Ok(Some(at - start))
    }

    /// A new locked folio of up to `order` (smaller when the arena has no
    /// block that large), in no mapping, reclaiming if the cache is full.
    ///
    /// # Errors
    /// `OutOfMemory` when every cached folio is in use.
    pub fn new_folio(&self, order: u32) -> io::Result<LockedFolio<'_>> {
        let cache = self.inner();
        let f = cache.alloc_folio(order.min(cache.io.max_order))?;
        Ok(LockedFolio::new_fresh(&cache.mem, f))
    }

    /// Adds a locked folio that is in no mapping at `index` (a multiple of
    /// its size), taking the cache's `2^order` references and putting it on
    /// the LRU. One walk under the index lock finds conflicts and the first
    /// shadow (with its order); a shadow larger than the folio is split in
    /// the same hold, from nodes allocated beforehand (the lock is dropped
    /// to allocate only when the pool is short, and everything is checked
    /// again after). Returns the shadow the folio replaced, if any.
    ///
    /// # Errors
    /// [`AddError::Exists`] if a folio covers part of the range (nothing
    /// changed); [`AddError::Invalid`] for a folio already mapped,
    /// misaligned, or of another cache.
    pub fn add_folio(&self, f: &LockedFolio<'_>, index: u64) -> Result<Option<u64>, AddError> {
        let mut cur = Cursor::new(&self.xa, index);
        let shadow = self.add_one(&mut cur, f, index)?;
        self.account_added(f, shadow);
        Ok(shadow)
    }

    fn check_new(&self, f: &Folio, index: u64) -> Result<(), AddError> {
        if self.inner().mem.table.page_of(f).is_none() {
            return Err(AddError::Invalid("the folio is another cache's"));
        }
        if f.mapping() != 0 {
            return Err(AddError::Invalid("the folio is already in a mapping"));
        }
        if !index.is_multiple_of(f.nr_pages()) {
            return Err(AddError::Invalid(
                "the index is not a multiple of the folio's size",
            ));
        }
        Ok(())
    }

    /// The add itself, under the index lock, retrying node allocation
    /// outside it. The caller accounts and LRU-adds on success.
    fn add_one(
        &self,
        cur: &mut Cursor<'_, FolioPtr>,
        f: &Folio,
        index: u64,
    ) -> Result<Option<u64>, AddError> {
        self.check_new(f, index)?;
        loop {
            let mut g = self.xa.lock();
            let r = self.add_in_hold(&mut g, cur, f, index);
            drop(g);
            match r {
                Ok(done) => return done,
                Err(XaError::NeedNodes { nodes }) => {
                    cur.reserve_nodes(nodes).map_err(AddError::Index)?;
                }
                Err(e) => return Err(AddError::Index(e)),
            }
        }
    }

    /// One add inside a lock hold: one walk over the range finds any
    /// conflicting folio and the first shadow with its order; a larger
    /// shadow is split here; then the store. `Err(NeedNodes)` changes
    /// nothing: allocate outside the lock and call again.
    fn add_in_hold(
        &self,
        g: &mut XaGuard<'_, FolioPtr>,
        cur: &mut Cursor<'_, FolioPtr>,
        f: &Folio,
        index: u64,
    ) -> Result<Result<Option<u64>, AddError>, XaError> {
        let order = f.order();
        let last = index + f.nr_pages() - 1;
        cur.set_order(order)?;
        cur.set_index(index);
        let mut shadow = None;
        while let Some((_, e)) = cur.find(g, last)? {
            match e {
                EntryRef::Item(_) => return Ok(Err(AddError::Exists)),
                EntryRef::Value(v) => {
                    if shadow.is_none() {
                        shadow = Some((v, cur.get_order(g)?));
                    }
                }
            }
        }
        if let Some((_, sorder)) = shadow {
            if sorder > order {
                cur.set_index(index);
                cur.split(g, order)?;
            }
        }
        self.store_in_hold(g, cur, f, index)?;
        Ok(Ok(shadow.map(|s| s.0)))
    }

    /// The store of [`add_in_hold`](Self::add_in_hold), into a range the
    /// caller found empty under this hold of the lock: the folio takes the
    /// cache's references for its pages and its identity, and goes in.
    /// `Err(NeedNodes)` changes nothing.
    fn store_in_hold(
        &self,
        g: &mut XaGuard<'_, FolioPtr>,
        cur: &mut Cursor<'_, FolioPtr>,
        f: &Folio,
        index: u64,
    ) -> Result<(), XaError> {
        cur.set_order(f.order())?;
        f.get_many(f.nr_pages() as u32);
        f.set_mapping(self.id(), index);
        cur.set_index(index);
        if let Err(e) = cur.store(g, Some(Entry::Item(FolioPtr::new(f)))) {
            f.set_mapping(0, index);
            f.put_many(f.nr_pages() as u32);
            return Err(e);
        }
        Ok(())
    }

    fn account_added(&self, f: &Folio, shadow: Option<u64>) {
        let cache = self.inner();
        self.folios.fetch_add(1, Ordering::Relaxed);
        cache.stats.folios.add(1);
        cache.stats.pages.add(f.nr_pages());
        if !self.memfile {
            cache.lru().add_all([(f, shadow)]);
        }
    }

    /// Adds an array of locked folios over the contiguous range from
    /// `start`, each after the previous one, in one hold of the index lock
    /// (one lock round trip for a whole readahead window, as the kernel's
    /// batched readahead insertion; index nodes for the run are allocated
    /// before it is taken, and it is dropped only if those were not enough). Stops at the first folio that
    /// conflicts with one already cached, and returns how many folios, a
    /// prefix of `folios`, were inserted. The caller keeps its reference on
    /// every folio: the inserted ones are now in the cache (read them in
    /// and unlock them), the others are not (drop them).
    ///
    /// # Errors
    /// The first folio's error, when none was inserted.
    pub fn add_folio_range(
        &self,
        folios: &[LockedFolio<'_>],
        start: u64,
    ) -> Result<usize, AddError> {
        self.add_range(folios, start, true)
    }

    /// [`add_folio_range`](Self::add_folio_range); `refault`: whether the
    /// shadows replaced go through the refault test (not for folios a
    /// write creates: a write over a shadow never activates, as the kernel
    /// skips `workingset_refault` for `__GFP_WRITE` adds).
    fn add_range(
        &self,
        folios: &[LockedFolio<'_>],
        start: u64,
        refault: bool,
    ) -> Result<usize, AddError> {
        let mut cur = Cursor::new(&self.xa, start);
        let pages: u64 = folios.iter().map(|f| f.nr_pages()).sum();
        let order = folios.iter().map(|f| f.order()).min().unwrap_or(0);
        cur.reserve_nodes(range_nodes(order, start, start + pages))
            .map_err(AddError::Index)?;
        let mut done = 0usize;
        let mut index = start;
        let mut stop = None;
        let mut shadows = Vec::with_capacity(folios.len());
        let end = start + pages;
        'hold: while done < folios.len() {
            let mut g = self.xa.lock();
            // One walk over the rest of the range: when it holds nothing
            // (no folio, no shadow: a file being written for the first
            // time), each folio goes in with its store alone, without a
            // walk of its own for conflicts and shadows.
            // (At order 0: the cursor keeps the last store's order, whose
            // alignment would start the walk before `index`.)
            let empty = match cur
                .set_order(0)
                .and_then(|()| {
                    cur.set_index(index);
                    cur.find(&g, end - 1)
                })
                .map(|found| found.is_none())
            {
                Ok(empty) => empty,
                Err(e) => {
                    stop = Some(AddError::Index(e));
                    break 'hold;
                }
            };
            while done < folios.len() {
                let f = &folios[done];
                if let Err(e) = self.check_new(f, index) {
                    stop = Some(e);
                    break 'hold;
                }
                let added = if empty {
                    self.store_in_hold(&mut g, &mut cur, f, index)
                        .map(|()| Ok(None))
                } else {
                    self.add_in_hold(&mut g, &mut cur, f, index)
                };
                match added {
                    Ok(Ok(shadow)) => {
                        shadows.push(shadow);
                        index += f.nr_pages();
                        done += 1;
                    }
                    Ok(Err(e)) => {
                        stop = Some(e);
                        break 'hold;
                    }
                    Err(XaError::NeedNodes { nodes }) => {
                        drop(g);
                        if let Err(e) = cur.reserve_nodes(nodes) {
                            stop = Some(AddError::Index(e));
                            break 'hold;
                        }
                        continue 'hold;
                    }
                    Err(e) => {
                        stop = Some(AddError::Index(e));
                        break 'hold;
                    }
                }
            }
        }
        // LRU insertion happens outside the index lock (lock order), in
        // one hold of the LRU lock.
        let cache = self.inner();
        let pages: u64 = folios[..done].iter().map(|f| f.nr_pages()).sum();
        self.folios.fetch_add(done as u64, Ordering::Relaxed);
        cache.stats.folios.add(done as u64);
        cache.stats.pages.add(pages);
        if !refault {
            shadows.iter_mut().for_each(|s| *s = None);
        }
        if !self.memfile {
            cache
                .lru()
                .add_all(folios[..done].iter().map(|f| f.folio()).zip(shadows));
        }
        match stop {
            Some(e) if done == 0 => Err(e),
            _ => Ok(done),
        }
    }

    /// Fills `batch` (up to [`BATCH`] folios) with referenced folios that
    /// cover one contiguous run of pages from the folio containing `index`
    /// up to `max`, in one lockless walk. Stops at a hole, a shadow, a full
    /// batch, or after a folio that is not uptodate or carries the readahead
    /// marker (so only the last folio can be either); tests "past `max`"
    /// before stepping, so no walk is wasted (`filemap_get_read_batch`).
    pub fn get_read_batch<'m>(&'m self, index: u64, max: u64, batch: &mut Vec<FolioRef<'m>>) {
        self.contig(index, max, batch, true);
    }

    /// Like [`get_read_batch`](Self::get_read_batch) without the uptodate
    /// and marker stops; advances `*start` past the last folio returned
    /// (unchanged if none). The first folio may begin before `*start`.
    pub fn get_folios_contig<'m>(
        &'m self,
        start: &mut u64,
        end: u64,
        batch: &mut Vec<FolioRef<'m>>,
    ) {
        let before = batch.len();
        self.contig(*start, end, batch, false);
        if let Some(last) = batch[before..].last() {
            *start = last.index() + last.nr_pages();
        }
    }

    fn contig<'m>(&'m self, index: u64, max: u64, batch: &mut Vec<FolioRef<'m>>, read: bool) {
        if index > max {
            return;
        }
        let guard = self.xa.pin();
        let Ok(iter) = self.xa.iter_ref(index..=max, &guard) else {
            return;
        };
        let mut next = index;
        for (i, e) in iter {
            if i != next || batch.len() >= BATCH {
                break;
            }
            let EntryRef::Item(f) = e else { break };
            let Some(r) = self.try_ref(f, i) else {
                break;
            };
            let end = r.index() + r.nr_pages();
            let stop = read && (!r.test(FolioFlags::UPTODATE) || r.test(FolioFlags::READAHEAD));
            batch.push(r);
            if stop || batch.len() >= BATCH || end > max || end == 0 {
                break;
            }
            next = end;
        }
    }

    /// Reads a locked folio of this mapping that is not uptodate from the
    /// backing with one IO (`filemap_read_folio`), zeroes what lies past end
    /// of file, marks it uptodate and unlocks it; returns the reference. An
    /// uptodate folio is only unlocked. On error the folio leaves the
    /// mapping (no uptodate folio is left behind), is unlocked, and the
    /// error is returned.
    ///
    /// # Errors
    /// The backing's error; `InvalidInput` if the folio is not this
    /// mapping's.
    pub fn read_folio<'m>(&self, mut f: LockedFolio<'m>) -> io::Result<FolioRef<'m>> {
        self.fill_folio(&mut f)?;
        Ok(f.unlock())
    }

    /// [`read_folio`](Self::read_folio) without the unlock: the folio stays
    /// locked, uptodate on success, out of the mapping on error (a write
    /// fills a partial folio this way before copying into it).
    pub(crate) fn fill_folio(&self, f: &mut LockedFolio<'_>) -> io::Result<()> {
        if f.mapping() != self.id() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "read_folio needs a folio of this mapping",
            ));
        }
        if f.test(FolioFlags::UPTODATE) {
            // Readers may be copying out of it: nothing to write.
            return Ok(());
        }
        let cache = self.inner();
        let len = (f.nr_pages() * PAGE) as usize;
        let pos = f.index() * PAGE;
        // The bytes the file has for this folio: all of it, or up to EOF.
        let want = if self.memfile {
            0
        } else {
            len.min(self.size().saturating_sub(pos) as usize)
        };
        let mut got = 0usize;
        let mut failure = None;
        let mut short_retries = 0;
        while got < want {
            // Re-read from the block that holds the first missing byte: a
            // backing may (wrongly) stop short mid-file; what it returned
            // before that block is kept.
            let from = got / backing::BLOCK * backing::BLOCK;
            // (Locked and not uptodate, checked above: its memory is this
            // read's. `from` is a block boundary inside it.)
            let (_, mut buf) = f.fill_buf().split_at(from).expect("a block boundary");
            let r = self
                .backing()
                .read_blocks(std::slice::from_mut(&mut buf), pos + from as u64);
            cache.stats.io_reads.add(1);
            match r {
                Ok(n) if from + n > got => {
                    cache.stats.io_bytes.add(n as u64);
                    got = (from + n).min(len);
                }
                Ok(n) => {
                    // No progress. The file may have grown in the cache
                    // past what the backing holds yet (a write past end of
                    // file, not written back): past the backing's end the
                    // file reads as zeros.
                    let at = pos + (from + n) as u64;
                    if matches!(self.backing().len(), Ok(blen) if blen <= at) {
                        break;
                    }
                    // Longer now: a writeback may have extended it since
                    // the read (past a hole that reads as zeros). Read
                    // again, a few times, before calling it EIO.
                    if short_retries < SHORT_READ_RETRIES {
                        short_retries += 1;
                        continue;
                    }
                    // Else the backing ends before the size it reports. A
                    // read that cannot fill a folio is EIO, as in the
                    // kernel; caching zeros would return wrong bytes.
                    log::warn!(
                        "foliocache: backing read at {} returned {n} bytes where {} remain \
                         before end of file ({}); failing the read with EIO",
                        pos + from as u64,
                        want - from,
                        self.info
                    );
                    cache.stats.read_errors.fetch_add(1, Ordering::Relaxed);
                    failure = Some(io::Error::from(rustix::io::Errno::IO));
                    break;
                }
                Err(e) => {
                    cache.stats.read_errors.fetch_add(1, Ordering::Relaxed);
                    failure = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failure {
            f.test_and_set(FolioFlags::ERROR);
            self.remove_locked(f);
            return Err(e);
        }
        // Zeroes the part past end of file, and any bytes a previous owner
        // of this memory left there.
        f.fill_buf()[got..].fill(0);
        f.test_and_clear(FolioFlags::ERROR);
        f.mark_uptodate();
        Ok(())
    }

    /// A locked folio of exactly `order`, in no mapping, without waiting for
    /// memory: `None` when the arena has no block of that order even after
    /// one reclaim pass (readahead then shrinks or falls back).
    pub(crate) fn new_folio_nowait(&self, order: u32) -> Option<LockedFolio<'_>> {
        let cache = self.inner();
        let f = cache.try_alloc_folio(order.min(cache.io.max_order))?;
        Some(LockedFolio::new_fresh(&cache.mem, f))
    }

    /// Up to `n` new locked folios of exactly `order`, in no mapping,
    /// appended to `out`, taken from the arena in one go (a readahead
    /// window's allocation: one hold of the allocator's lock, not one per
    /// folio), reclaiming once if it is short, never waiting. Returns how
    /// many were added.
    pub fn new_folios<'m>(&'m self, order: u32, n: usize, out: &mut Vec<LockedFolio<'m>>) -> usize {
        let cache = self.inner();
        let mut raw = Vec::with_capacity(n);
        let got = cache.try_alloc_folios(order.min(cache.io.max_order), n, &mut raw);
        out.extend(
            raw.into_iter()
                .map(|f| LockedFolio::new_fresh(&cache.mem, f)),
        );
        got
    }

    /// The pages the folio at `index` covers (`first`, `count`), if one is
    /// there. Takes no reference, so the answer may be stale by the time it
    /// is used: for heuristics (readahead's look-back) only.
    pub(crate) fn span_at(&self, index: u64) -> Option<(u64, u64)> {
        let guard = self.xa.pin();
        match self.xa.load_ref(index, &guard)? {
            EntryRef::Value(_) => None,
            EntryRef::Item(f) => {
                let (first, n) = (f.index(), f.nr_pages());
                // A folio being reused under us may show anything.
                if first <= index && index - first < n {
                    Some((first, n))
                } else {
                    Some((index, 1))
                }
            }
        }
    }

    /// The cache state of pages `first..=last` (see
    /// [`File::cachestat`](crate::File::cachestat)): one lockless walk,
    /// no references taken; a folio's flags are read as they are at that
    /// moment (a folio freed and reused under the walk can only skew the
    /// figures, never fault: descriptors live as long as the cache).
    pub fn cachestat(&self, first: u64, last: u64) -> crate::CacheStat {
        let mut cs = crate::CacheStat::default();
        if first > last {
            return cs;
        }
        let cache = self.inner();
        let (now, active) = crate::workingset::now(&cache.lru());
        let guard = self.xa.pin();
        let Ok(mut it) = self.xa.iter_ref(first..=last, &guard) else {
            return cs;
        };
        while let Some((_, e)) = it.next() {
            let (base, order) = it.span();
            let span_last = base.saturating_add((1u64 << order.min(63)) - 1);
            let pages = span_last.min(last) - base.max(first) + 1;
            match e {
                EntryRef::Item(f) => {
                    cs.cached += pages;
                    let flags = f.flags();
                    if flags.contains(FolioFlags::DIRTY) {
                        cs.dirty += pages;
                    }
                    if flags.contains(FolioFlags::WRITEBACK) {
                        cs.writeback += pages;
                    }
                }
                EntryRef::Value(v) => {
                    cs.evicted += pages;
                    if crate::workingset::Shadow::unpack(v).distance(now) <= active {
                        cs.recently_evicted += pages;
                    }
                }
            }
        }
        cs
    }

    /// Copies `dst.len()` bytes from byte `from` of an uptodate folio.
    pub(crate) fn copy_out(&self, f: &FolioRef<'_>, from: usize, dst: &mut [u8]) {
        assert!(from + dst.len() <= (f.nr_pages() * PAGE) as usize);
        debug_assert!(f.test(FolioFlags::UPTODATE));
        let src = self.inner().mem.arena.page_ptr(f.page()).as_ptr();
        // SAFETY: the folio is uptodate and referenced: its bytes are
        // initialised, nobody writes them, and reclaim cannot free them;
        // `from + dst.len()` lies inside the folio; `dst` is a distinct
        // caller buffer.
        // A writer may copy into it meanwhile: both sides use `copy`'s
        // shared functions, whose accesses are defined under that race.
        unsafe { crate::copy::copy_from_shared(src.add(from), dst.as_mut_ptr(), dst.len()) };
    }
}

/// Whether the read path's hit may serve a read ending at file byte `end`
/// (and starting inside it) from `f`, whose flags are `ff`: uptodate,
/// neither `READAHEAD` nor `DROPBEHIND` (the batch path acts on those),
/// and the whole read inside it.
#[inline]
pub(crate) fn serves_hit(f: &Folio, ff: FolioFlags, end: u64) -> bool {
    ff.contains(FolioFlags::UPTODATE)
        && !ff.intersects(FolioFlags::READAHEAD.union(FolioFlags::DROPBEHIND))
        && end <= (f.index() + f.nr_pages()) * PAGE
}

/// How many times a read that stopped short of a backing that is longer
/// than where it stopped is tried again before it is an error.
const SHORT_READ_RETRIES: u32 = 2;

/// A lookup found no folio.
fn not_found() -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, "no folio at this index")
}

/// A grab that may not wait found no free folio.
fn no_free_folio() -> io::Error {
    io::Error::new(
        io::ErrorKind::OutOfMemory,
        "foliocache: no free folio without waiting",
    )
}

/// Writing folio bytes: a write's copy into its locked folios, and the
/// zeroing of part of one.
impl Mapping {
    /// Copies a write's bytes into locked folios that no pin borrows
    /// ([`Mapping::writable`]): `parts[i]` is where folio `i`'s part
    /// starts in it, which bytes of `src` it takes, and whether the folio
    /// is fresh (created by this write, which fills it whole: its memory
    /// came from the free pool, untouched lately). One copy per run of
    /// folios whose parts adjoin both in `src` and in the arena, fresh or
    /// not alike: a batch's new folios are allocated in ascending pages
    /// ([`new_folios_planned`](Self::new_folios_planned)), so a write
    /// across a range of small folios is one long copy, as into one large
    /// folio, rather than one short copy per folio (`docs/design.md`, the
    /// write path). A fresh run copies with `copy::copy_to_fresh` (the
    /// bulk class's routine from `copy::BULK` bytes up).
    pub(crate) fn copy_in(
        &self,
        folios: &[WritableFolio<'_>],
        parts: &[(usize, std::ops::Range<usize>, bool)],
        src: &[u8],
    ) {
        assert_eq!(folios.len(), parts.len(), "copy_in: a part per folio");
        let arena = &self.inner().mem.arena;
        // The run so far: where it goes, which bytes of `src`, and whether
        // its folios are fresh.
        let mut run: Option<(*mut u8, std::ops::Range<usize>, bool)> = None;
        let flush = |dst: *mut u8, r: std::ops::Range<usize>, fresh: bool| {
            let from = src[r.clone()].as_ptr();
            // SAFETY: `dst..dst + r.len()` is the union of adjoining parts,
            // each inside a folio of `folios` (checked below), which the
            // caller holds locked (no other writer), referenced (not freed)
            // and not pinned (no `&[u8]` of a pin reads it:
            // `WritableFolio`), borrowed for this call; `r` lies inside
            // `src` (checked), a caller buffer, distinct from arena memory
            // the caller holds locked. Readers of an uptodate folio copy
            // out without the lock: a read racing a write of the same bytes
            // may see either, as with the kernel's page cache; both sides
            // use `copy`'s shared functions, whose accesses are defined
            // under that race.
            unsafe {
                if fresh {
                    crate::copy::copy_to_fresh(from, dst, r.len());
                } else {
                    crate::copy::copy_to_shared(from, dst, r.len());
                }
            }
        };
        for (f, (from, r, fresh)) in folios.iter().zip(parts) {
            assert!(
                r.start <= r.end
                    && r.end <= src.len()
                    && from + r.len() <= (f.nr_pages() * PAGE) as usize,
                "copy_in past the folio's end or the source's"
            );
            let dst = arena.page_ptr(f.page()).as_ptr().wrapping_add(*from);
            match &mut run {
                Some((d, rr, fr))
                    if d.wrapping_add(rr.len()) == dst && rr.end == r.start && *fr == *fresh =>
                {
                    rr.end = r.end;
                }
                _ => {
                    if let Some((d, rr, fr)) = run.take() {
                        flush(d, rr, fr);
                    }
                    run = Some((dst, r.clone(), *fresh));
                }
            }
        }
        if let Some((d, rr, fr)) = run {
            flush(d, rr, fr);
        }
    }

    /// Zeroes `len` bytes of a locked folio (one no pin borrows) from byte
    /// `from`.
    pub(crate) fn zero_folio(&self, f: &WritableFolio<'_>, from: usize, len: usize) {
        assert!(
            from + len <= (f.nr_pages() * PAGE) as usize,
            "zero_folio past the folio's end"
        );
        let dst = self.inner().mem.arena.page_ptr(f.page()).as_ptr();
        // SAFETY: as in `copy_in`: locked, unpinned, referenced, in bounds; readers
        // may copy the bytes meanwhile (`zero_shared`).
        unsafe { crate::copy::zero_shared(dst.add(from), len) };
    }
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping")
            .field("path", &self.path)
            .field("size", &self.size())
            .field("folios", &self.nr_folios())
            .field("info", &self.info)
            .finish()
    }
}

/// Index nodes a store of folios, contiguous over `start..end`, the smallest
/// of order `order`, may need,
/// reserved before the lock is taken: at the lowest level the folios are
/// stored at (a folio of order `k` takes `2^(k % 6)` slots of a node at
/// level `k / 6`, as the kernel's `xas_set_order` places it), one node per
/// 64 slots the range touches, and one per span at each of the three levels
/// above (room for the tree to grow). Exact for windows of one-page folios
/// (their leaves), a few nodes over for 2 MiB folios; an estimate sized by
/// pages alone reserved (and freed unused) some sixty nodes for a window of
/// four 2 MiB folios, which made batched insertion slower than one folio at
/// a time (the note "Batched insertion with 2 MiB folios" in
/// `docs/measurements/`). A short estimate is met by the store's
/// `NeedNodes` and a retry.
fn range_nodes(order: u32, start: u64, end: u64) -> usize {
    const SHIFT: u32 = 6;
    if end <= start {
        return 0;
    }
    let level = order / SHIFT;
    (level..level + 4)
        .map(|l| {
            let s = (SHIFT * (l + 1)).min(63);
            (((end - 1) >> s) - (start >> s) + 1) as usize
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::range_nodes;

    #[test]
    fn a_window_reserves_the_nodes_of_its_folios_level() {
        // Four 2 MiB folios (an 8 MiB window at 32 MiB): 32 slots of one
        // node at level 1, and one node at each of the three levels above.
        // (Sized by pages, the reservation was 68 nodes.)
        assert_eq!(range_nodes(9, 8192, 8192 + 2048), 4);
        // 512 one-page folios: their 8 leaves, and one node a level above,
        // twice more above that.
        assert_eq!(range_nodes(0, 0, 512), 8 + 1 + 1 + 1);
        // Unaligned: the two leaves the range touches.
        assert_eq!(range_nodes(0, 60, 68), 2 + 1 + 1 + 1);
        // 64 KiB folios live in leaves too.
        assert_eq!(range_nodes(4, 0, 256), 4 + 1 + 1 + 1);
        assert_eq!(range_nodes(0, 5, 5), 0);
    }
}
