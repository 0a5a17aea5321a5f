//! The advanced layer: a file's [`Mapping`] (the kernel's
//! `address_space`) and the filemap operations on it, which hand out its
//! folios referenced ([`FolioRef`]) or locked ([`LockedFolio`]), as the
//! kernel's `filemap_*` calls do. [`File`](crate::File) is built on these;
//! a program that manages folios itself (populating guest memory, filling
//! folios from its own IO) uses them directly through
//! [`File::mapping`](crate::File::mapping).
//!
//! # One mechanism a file
//! Every method on a [`Mapping`] is defined in this module, one mechanism
//! a file: `lookup.rs` (`filemap_get_entry`, the read hit, batches),
//! `create.rs` (a write's folios, new folios), `add.rs`
//! (`filemap_add_folio`), `fill.rs` (`filemap_read_folio`), `bytes.rs`
//! (copies in and out), `read.rs` (the read path and readahead's IO),
//! `pin.rs` (pins), `remove.rs` (`__filemap_remove_folio`, invalidation,
//! reclaim's eviction), `writeback.rs` (the writeback IO and `sync`).
//! The modules above call down into these and are never called back.
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
use xarray::{Error as XaError, Item, XArray};

pub use crate::folio::{Folio, FolioFlags, FolioRef, LockedFolio};
use crate::mm::CacheInner;
pub use crate::workingset::Shadow;
// (`size` and `handles`: see the note in `Mapping`.)
#[allow(clippy::disallowed_types)]
use std::sync::atomic::AtomicU64 as StdAtomicU64;

use crate::sync::{AtomicU64, Ordering};

use crate::arena::PAGE;

// Borrowed folios (`File::pin`), and the write side's guard against them.
pub(crate) mod pin;
// The read path and readahead's IO.
mod add;
mod bytes;
mod create;
mod fill;
// The file's slot and unsaved pages in the guardian's segment.
mod guard;
mod lookup;
mod read;
mod remove;
mod writeback;

/// The most folios one batch lookup returns (the kernel's `folio_batch`).
pub const BATCH: usize = 31;

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

/// One file's state in the cache: its pages (the kernel's
/// `address_space`), with the part the kernel keeps in the `inode`
/// (`Inode`) and its writeback state (`bdi::FileWb`). See the [module
/// documentation](self).
pub struct Mapping {
    pub(crate) xa: XArray<FolioPtr>,
    /// This mapping's own `Arc`, weakly: reclaim, which reaches a mapping
    /// from a folio on an LRU list, holds it while it evicts the folio with
    /// the LRU lock dropped (and skips a mapping being dropped).
    this: std::sync::Weak<Mapping>,
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
    info: BackingInfo,
    /// Folios in the index (its entries less the shadows).
    folios: AtomicU64,
    /// A memory file: no backing store, folios never evicted nor written
    /// back, kept off the LRU lists.
    pub(crate) memfile: bool,
    /// Where the mapping's 2 MiB folios start in the arena, as walks last
    /// found them: lets a hit skip the walk (`huge_hints.rs`).
    huge: crate::huge_hints::HugeHints,
    /// Held shared by readers while they create folios and start their IO,
    /// exclusive by `set_len` and `punch_hole` while they remove folios and
    /// change the backing: no folio is read from blocks being freed (the
    /// kernel's `invalidate_lock`).
    pub(crate) invalidate_lock: crate::sync::RwLock<()>,
    /// The file's writeback state: its lock, where throttled writeback
    /// goes on, its dirty pages and its errors (`bdi.rs`).
    pub(crate) wb: crate::bdi::FileWb,
    /// What the kernel keeps in the file's `struct inode`: its identity,
    /// size and lock, and its open handles.
    pub(crate) inode: Inode,
    /// The file's slot in the guardian's segment (`guard.rs`).
    guard_slot: guard::GuardSlot,
    /// The file's own counts for its miss-ratio curve, from the first
    /// time it was asked for (`File::hit_ratio_curve`).
    pub(crate) curve: std::sync::OnceLock<Arc<crate::stats::FileCounts>>,
    /// The mapping's identity in the miss-ratio curve's sample: a number
    /// no other mapping has had (`mrc::mapping_key`, which says why
    /// neither the address nor the inode).
    pub(crate) sample_key: u64,
}

/// The part of a file's state the kernel keeps in its `struct inode`
/// rather than in its `address_space` ([`Mapping`]): the file's identity
/// and path, its size and the inode lock, and the handles open on it.
// (`size` and `handles` are std atomics even under loom: loom atomics
// there would add a scheduling point to every read and every clone of a
// handle for nothing the models check.)
pub(crate) struct Inode {
    /// The file's identity (device, inode) for a file opened by path: one
    /// mapping per file in a cache, so every handle sees the same data.
    pub(crate) key: Option<(u64, u64)>,
    /// The file's size in bytes (the kernel's `i_size`): changed by writes
    /// that extend the file (under `inode_lock` and the folio locks of the
    /// extending write, so writeback that locks a folio sees the size its
    /// data needs), and by `set_len`.
    #[allow(clippy::disallowed_types)]
    size: StdAtomicU64,
    /// Shifts of the file's data begun (`collapse_range`, `insert_range`:
    /// `shift.rs`), counted before each drops its folios. A folio a read
    /// holds was filled in some state of the file; only a shift can take
    /// the size below a place and bring it back with other data there
    /// (a collapse, then an insert), so a read that saw this change while
    /// it gathered its folios looks again ([`Mapping::read`]).
    #[allow(clippy::disallowed_types)]
    shifts: StdAtomicU64,
    /// The path the file was opened by (`None`: opened from a backing).
    pub(crate) path: Option<PathBuf>,
    /// Writers (shared; exclusive when extending), `set_len` and
    /// `punch_hole` (exclusive): the kernel's `i_rwsem`.
    pub(crate) lock: crate::sync::RwLock<()>,
    /// Open handles ([`File`](crate::File)s) on this mapping: the last one
    /// to go writes the dirty data back while the mapping is still
    /// registered, so an open meanwhile shares it rather than reading the
    /// backing before the data is there.
    #[allow(clippy::disallowed_types)]
    handles: StdAtomicU64,
    /// The last handle's close (`writeback::close`) wrote everything back
    /// and made the backing's size the file's: a mapping dropped without
    /// it gives up dirty data (logged). Set anew by each last close.
    #[allow(clippy::disallowed_types)]
    closed_clean: std::sync::atomic::AtomicBool,
    /// The file's `fstat` when this mapping was made (a file opened by
    /// path): a file kept past its last close (`Cache::close_keeping`)
    /// must still have the identity it gives then, else another writer
    /// changed it.
    opened_as: std::sync::OnceLock<std::fs::Metadata>,
}

impl Drop for Mapping {
    /// Takes every folio out of the cache. What was dirty was written
    /// back by the last handle's close (`writeback::close`), or by the
    /// flusher's retries of a closed file the cache kept; what is still
    /// dirty now is given up (logged).
    fn drop(&mut self) {
        if !self
            .inode
            .closed_clean
            .load(std::sync::atomic::Ordering::Acquire)
            && self.wb.dirty_pages() > 0
        {
            log::error!(
                "foliocache: {:?} goes with {} dirty bytes its writeback could not write",
                self.inode.path,
                self.wb.dirty_pages() * PAGE
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
            info,
            folios: AtomicU64::new(0),
            memfile: false,
            huge: Default::default(),
            invalidate_lock: crate::sync::RwLock::new(()),
            wb: Default::default(),
            inode: Inode {
                key: None,
                path: None,
                size: StdAtomicU64::new(size),
                shifts: StdAtomicU64::new(0),
                lock: crate::sync::RwLock::new(()),
                handles: StdAtomicU64::new(0),
                closed_clean: std::sync::atomic::AtomicBool::new(false),
                opened_as: std::sync::OnceLock::new(),
            },
            guard_slot: guard::GuardSlot::new(0),
            curve: std::sync::OnceLock::new(),
            sample_key: crate::mrc::mapping_key(),
        }
    }

    /// A handle on the file opened (`File`'s open and clone).
    pub(crate) fn handle_opened(&self) {
        self.inode
            .handles
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// A handle on the file went: whether it was the last.
    pub(crate) fn handle_closed(&self) -> bool {
        self.inode
            .handles
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
    }

    /// Whether any handle is open on the file.
    pub(crate) fn has_handles(&self) -> bool {
        self.inode
            .handles
            .load(std::sync::atomic::Ordering::Acquire)
            > 0
    }

    /// Records whether the last handle's close wrote everything back
    /// (see `closed_clean`).
    pub(crate) fn set_closed_clean(&self, clean: bool) {
        self.inode
            .closed_clean
            .store(clean, std::sync::atomic::Ordering::Release);
    }

    /// The file's `fstat` when this mapping was made, if opened by path.
    pub(crate) fn opened_as(&self) -> Option<&std::fs::Metadata> {
        self.inode.opened_as.get()
    }

    /// Records the file's `fstat` as the mapping is made (once).
    pub(crate) fn set_opened_as(&self, md: std::fs::Metadata) {
        let _ = self.inode.opened_as.set(md);
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

    /// The file's counts for its miss-ratio curve, if it is kept.
    pub(crate) fn curve_counts(&self) -> Option<&crate::stats::FileCounts> {
        self.curve.get().map(|c| &**c)
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
        self.inode.size.load(Ordering::Acquire)
    }

    /// How many shifts of the file's data have begun (see `Inode::shifts`).
    /// Loaded after [`size`](Self::size) by a read that checks its folios:
    /// a read that sees a shift's new size sees its count.
    #[inline]
    pub(crate) fn shifts(&self) -> u64 {
        self.inode.shifts.load(Ordering::Acquire)
    }

    /// A shift of the file's data begins (its caller holds `inode_lock`
    /// and `invalidate_lock` exclusively, and sets the size after this).
    pub(crate) fn shift_begins(&self) {
        self.inode.shifts.fetch_add(1, Ordering::AcqRel);
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
        self.inode.size.store(size, Ordering::Release);
        self.guard_size(size);
    }

    /// Whether this is a memory file ([`Cache::memfile`](crate::Cache::memfile)).
    pub fn is_memfile(&self) -> bool {
        self.memfile
    }

    /// Bytes of dirty folios (written, not yet written back).
    pub fn dirty_bytes(&self) -> u64 {
        self.wb.dirty_pages() * PAGE
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
}

/// Whether the read path's hit may serve a read ending at file byte `end`
/// (and starting inside it) from `f`, whose flags are `ff`: uptodate,
/// neither `READAHEAD` nor `DROPBEHIND` (the batch path acts on those),
/// and the whole read inside it. (A `FRESH` folio is served, and its
/// first read counted: `Mapping::first_read`.)
#[inline]
pub(crate) fn serves_hit(f: &Folio, ff: FolioFlags, end: u64) -> bool {
    ff.contains(FolioFlags::UPTODATE)
        && !ff.intersects(FolioFlags::READAHEAD.union(FolioFlags::DROPBEHIND))
        && end <= (f.index() + f.nr_pages()) * PAGE
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping")
            .field("path", &self.inode.path)
            .field("size", &self.size())
            .field("folios", &self.nr_folios())
            .field("info", &self.info)
            .finish()
    }
}
