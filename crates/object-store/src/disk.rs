//! The disk tier: chunks of object versions in a local file opened
//! `O_DIRECT`, below the memory cache and above the remote store, that
//! reopens warm after a restart or a crash.
//!
//! # The problem
//! Memory holds a fraction of what an engine reads from object storage;
//! local disk holds much more, far closer than the remote. A tier on
//! disk must survive `kill -9` and power loss without ever returning a
//! wrong byte, reopen in a time that does not grow with the tier (no
//! index to read or rebuild), and not be flushed by one scan.
//!
//! # Layout
//! ```text
//!   file: slot 0 | slot 1 | ... | slot n-1          (n = bytes / SLOT)
//!   slot: header block (4 KiB) | data (CHUNK = 64 KiB, zero-padded)
//!   header: magic "fcotier1" | key (u128) | len (u32) | xxh3-64 of key, len, data
//! ```
//! A chunk is the aligned 64 KiB `[c * CHUNK, (c + 1) * CHUNK)` of one
//! object version (the last one shorter); its key is a 128-bit hash of
//! the path, the version and `c` ([`chunk_key`]). The key picks a *set*
//! of [`WAYS`] slots (16-way set-associative, as a CPU cache: a
//! direct-mapped tier loses a third or more of its chunks to conflicts
//! when it is nearly full). In memory, each slot has a tag (the low 64
//! bits of the key it holds, or empty, or unknown) and when it was last
//! used, and whether it is kept until read: 17 bytes a slot, 255 KiB for an 1 GiB tier. A lookup reads the
//! one slot whose tag is its key's, header and data together, or none if
//! no tag matches; a write goes to the slot of its key, else an empty
//! one, else the set's least recently used, in one write of both.
//!
//! # Crashes
//! The headers on disk are the index: a reopen opens the file, reads
//! nothing and knows no tag; a lookup then reads the set's slots of
//! unknown content until one holds its key, learning their tags. So a
//! reopen takes the same time whatever the tier's size, and the first
//! lookup of a chunk reads at most its set. A slot whose write was cut short (a crash mid-write, a torn
//! write, a reader racing a writer of the same slot) fails its checksum,
//! which covers the key, the length and the data; a slot holding another
//! chunk fails the key check. Both are misses, never wrong bytes. No
//! write is ever synced: what a crash loses is a miss.
//!
//! # Version records
//! A slot may hold an object's *record* instead of a chunk: its latest
//! version, as a HEAD found it (crate::record), keyed by `record_key`
//! (whose bit 63 chunk keys never have), at one fixed slot of its set so
//! that it is replaced in place, never duplicated. A restarted store
//! reads it to find the version whose chunks to serve without a HEAD
//! first (docs/object-store.md, "Restart"). A set's LRU passes over
//! records while they are fewer than half its slots; checksums and keys
//! guard records as they guard chunks.
//!
//! # Kept until read
//! A chunk written with [`put_kept`](DiskTier::put_kept) (a write
//! through the store marked [`CacheHint::KeepUntilRead`](crate::CacheHint):
//! a file a compaction will read once, soon) is passed over by its set's
//! LRU until a lookup finds it; only when every slot of the set is kept
//! does the least recent kept one go (the tier does not refuse a write).
//! The mark lives in memory: after a restart a kept chunk is an ordinary
//! one. A lookup for a read marked [`CacheHint::ReadOnce`](crate::CacheHint)
//! (the compaction that reads the file once, then deletes it) clears the
//! mark and makes the chunk its set's least recent, not its most: the
//! first to go, so that it does not outlive the query's chunks.
//!
//! # Admission
//! A chunk goes to disk when a page of it misses in memory a second time
//! within a window: the first miss records the chunk's key and the pages
//! missed in a bounded map of recent misses (the *ghosts*, FIFO), the
//! second finds one of its pages there. So data read once (a scan) passes
//! through without displacing the tier; data read again after memory
//! evicted it (the kernel's refault) is kept.
//!
//! # Locking
//! The ghosts' mutex is a leaf, held to test and insert one key. Reads
//! and writes of slots take no lock: concurrent ones of one slot may mix
//! their blocks, which the checksum turns into a miss.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::path::Path as FsPath;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use backing::{AlignedBuf, Backing, FileBacking, FileOptions, BLOCK};
use parking_lot::Mutex;
use xxhash_rust::xxh3::Xxh3;

mod curve;
pub(crate) use curve::{Point, Request};
pub use curve::{TierCurve, TierPoint, MAX_SIM_SLOTS, TIER_RATIOS};

/// The bytes of object a slot holds.
pub const CHUNK: usize = 64 << 10;
// A chunk's pages are the 16 bits of an admission mask (`admit`).
const _: () = assert!(CHUNK / BLOCK == 16);

/// The bytes of a slot: a header block and a chunk (68 KiB).
pub const SLOT: usize = BLOCK + CHUNK;
const MAGIC: &[u8; 8] = b"fcotier1";
/// Slots per set: a chunk may go to any of its set's.
pub const WAYS: u64 = 16;
/// The most keys the ghosts remember.
const MAX_GHOSTS: usize = 1 << 16;
/// The bytes a ghost key may take at most: the map's bucket (a `u128`
/// and a `u16`, 32 bytes, and a control byte) at hashbrown's worst load
/// (buckets up to 16/7 of its entries: 76 bytes), and two places in the
/// order (16 bytes each, its capacity at most twice that: 64).
pub const GHOST_BYTES: u64 = 140;

/// The key of chunk `chunk` of the object version `version` (an e_tag,
/// a version id) of `path`: a 128-bit hash, so that two chunks meeting in
/// one slot are told apart.
pub fn chunk_key(path: &str, version: &str, chunk: u64) -> u128 {
    let mut h = Xxh3::new();
    h.update(path.as_bytes());
    h.update(&[0]);
    h.update(version.as_bytes());
    h.update(&[0]);
    h.update(&chunk.to_le_bytes());
    h.digest128() & !RECORD_BIT
}

/// The bit of a key (and so of its [`tag`]) that [`record_key`]s have and
/// [`chunk_key`]s do not: a set's LRU passes over records
/// ([`DiskTier::victim`]).
const RECORD_BIT: u128 = 1 << 63;

/// The key of the version record of `path` (crate::record): what a
/// restarted store knows of the object's latest version without a HEAD.
/// Hashed apart from every [`chunk_key`] (a leading byte no path has).
pub(crate) fn record_key(path: &str) -> u128 {
    let mut h = Xxh3::new();
    h.update(&[0xff]);
    h.update(b"version record");
    h.update(&[0]);
    h.update(path.as_bytes());
    h.digest128() | RECORD_BIT
}

/// A disk tier (see the module documentation): shared by the objects of
/// a [`CachedStore`](crate::CachedStore) through
/// [`CachedStoreBuilder::disk_tier`](crate::CachedStoreBuilder::disk_tier).
pub struct DiskTier {
    file: Box<dyn Backing>,
    slots: u64,
    /// Slots per set ([`WAYS`], fewer in a tier of fewer slots).
    ways: u64,
    /// What each slot holds, as far as this process knows: [`UNKNOWN`],
    /// [`EMPTY`], or the [`tag`] of the chunk written there.
    tags: Vec<AtomicU64>,
    /// When each slot was last written or hit (`clock`'s value): the
    /// least recent of a set is replaced.
    used: Vec<AtomicU64>,
    /// Slots holding a chunk written kept and not read since
    /// ([`put_kept`](Self::put_kept)).
    kept: Vec<AtomicBool>,
    clock: AtomicU64,
    ghosts: Mutex<Ghosts>,
    counts: Counts,
    /// Slot buffers kept for the next read or write, at most
    /// [`POOL_BUFS`]: a slot's IO reuses one instead of allocating its
    /// 68 KiB (an allocator keeps what each thread frees, in its own
    /// arena: docs/object-store.md, "Bounds").
    pool: Mutex<Vec<AlignedBuf>>,
    /// The tier's curve at other sizes (module `curve`).
    curve: curve::Estimator,
}

/// The most slot buffers [`DiskTier`] keeps for reuse.
const POOL_BUFS: usize = 16;

/// A slot whose content this process has not seen (every slot after an
/// open: the file is not read).
const UNKNOWN: u64 = 0;
/// A slot that holds no chunk (or a damaged one).
const EMPTY: u64 = 1;
/// A slot one writer has claimed and is writing: no other writer picks
/// it, no reader reads it.
const BUSY: u64 = 2;

/// The tag of chunk `key` in [`DiskTier::tags`]: its low 64 bits (the
/// set is chosen by the high ones), never [`UNKNOWN`], [`EMPTY`] or
/// [`BUSY`]. Two keys of one tag are told apart by the slot's header.
fn tag(key: u128) -> u64 {
    (key as u64).max(3)
}

#[derive(Default)]
struct Ghosts {
    /// The pages of each chunk missed in the window.
    map: HashMap<u128, u16>,
    /// Keys in the order they came (a key admitted and back again may be
    /// here twice: dropping the older drops its pages a little early).
    order: VecDeque<u128>,
}

#[derive(Default)]
struct Counts {
    hits: AtomicU64,
    misses: AtomicU64,
    corrupt: AtomicU64,
    writes: AtomicU64,
    errors: AtomicU64,
    kept_evicted: AtomicU64,
}

/// A [`DiskTier`]'s figures, from [`DiskTier::stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct DiskTierStats {
    /// Lookups that found their chunk, checksum verified.
    pub hits: u64,
    /// Lookups that did not (an empty slot, another chunk's, a corrupt one).
    pub misses: u64,
    /// Of the misses, slots of the chunk looked up whose checksum or
    /// length failed (a torn or damaged write).
    pub corrupt: u64,
    /// Chunks written.
    pub writes: u64,
    /// Chunks written kept ([`DiskTier::put_kept`]) that were replaced
    /// before a lookup found them: their whole set was kept.
    pub kept_evicted: u64,
    /// Reads and writes of the file that failed (each a miss or a chunk
    /// not kept; never a failed request).
    pub io_errors: u64,
    /// Slots in the file.
    pub slots: u64,
}

impl DiskTier {
    /// Opens (creating it if needed) the tier in the file at `path`, of
    /// `bytes` (rounded down to whole slots of 68 KiB, at least one),
    /// with `O_DIRECT` where the filesystem allows it. What an earlier
    /// tier of the same size left there is served at once; a file of
    /// another size is resized, and what it held is found only where its
    /// slot did not move.
    ///
    /// # Errors
    /// The file's open or resize error.
    pub fn open(path: impl AsRef<FsPath>, bytes: u64) -> io::Result<DiskTier> {
        let opts = FileOptions::new().read(true).write(true).create(true);
        DiskTier::with_backing(FileBacking::open(path, &opts)?, bytes)
    }

    /// The tier over any backing (a memory or fault-injecting one, in
    /// tests), sized as [`open`](Self::open) sizes it.
    ///
    /// # Errors
    /// The backing's `len` or `set_len` error.
    pub fn with_backing(file: impl Backing, bytes: u64) -> io::Result<DiskTier> {
        let ways = (bytes / SLOT as u64).clamp(1, WAYS);
        let slots = (bytes / SLOT as u64 / ways).max(1) * ways;
        if file.len()? != slots * SLOT as u64 {
            file.set_len(slots * SLOT as u64)?;
        }
        let fresh = |v: u64| (0..slots).map(|_| AtomicU64::new(v)).collect::<Vec<_>>();
        Ok(DiskTier {
            file: Box::new(file),
            slots,
            ways,
            tags: fresh(UNKNOWN),
            used: fresh(0),
            kept: (0..slots).map(|_| AtomicBool::new(false)).collect(),
            clock: AtomicU64::new(1),
            ghosts: Mutex::new(Ghosts::default()),
            counts: Counts::default(),
            pool: Mutex::new(Vec::new()),
            curve: curve::Estimator::new(slots),
        })
    }

    /// The tier with its curve's estimator ([`hit_ratio_curve`](Self::hit_ratio_curve))
    /// on (the default) or off. Off, a read that asks the tier samples
    /// nothing (the curve's points other than 1x are not known): for a
    /// comparison of what the estimator costs, or a tier whose curve no
    /// one reads.
    pub fn with_curve(mut self, on: bool) -> DiskTier {
        self.curve.set_on(on);
        self
    }

    /// The tier's figures now.
    pub fn stats(&self) -> DiskTierStats {
        let c = &self.counts;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DiskTierStats {
            hits: get(&c.hits),
            misses: get(&c.misses),
            corrupt: get(&c.corrupt),
            writes: get(&c.writes),
            kept_evicted: get(&c.kept_evicted),
            io_errors: get(&c.errors),
            slots: self.slots,
        }
    }

    /// The most bytes the tier's memory takes: the tags and recency of
    /// its slots and their kept marks (17 bytes a slot) and the ghosts at their bound (a key
    /// per slot, 64 to 65,536; [`GHOST_BYTES`] each, the map's and the
    /// order's), and the slot buffers it keeps for its IO (16 of
    /// 68 KiB). The file's bytes are on disk, not here.
    pub fn memory_bound(&self) -> u64 {
        self.slots * 17 + self.ghost_cap() as u64 * GHOST_BYTES + (POOL_BUFS * SLOT) as u64
    }

    /// A slot buffer: a kept one, or a new one.
    fn take_buf(&self) -> Option<AlignedBuf> {
        let kept = self.pool.lock().pop();
        kept.or_else(|| AlignedBuf::zeroed(SLOT).ok())
    }

    /// Keeps `buf` for the next slot IO, unless [`POOL_BUFS`] are kept.
    fn give_buf(&self, buf: AlignedBuf) {
        let mut pool = self.pool.lock();
        if pool.len() < POOL_BUFS {
            pool.push(buf);
        }
    }

    /// The most keys the ghosts hold: one per slot, within 64 to
    /// [`MAX_GHOSTS`].
    fn ghost_cap(&self) -> usize {
        (self.slots as usize).clamp(64, MAX_GHOSTS)
    }

    /// The slots of `key`'s set.
    fn set(&self, key: u128) -> std::ops::Range<u64> {
        let first = ((key >> 64) as u64 % (self.slots / self.ways)) * self.ways;
        first..first + self.ways
    }

    /// Marks slot `s` used now.
    fn touch(&self, s: u64) {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        self.used[s as usize].store(now, Ordering::Relaxed);
    }

    /// The chunk `key` of `len` bytes, if a slot of its set holds it whole
    /// and its checksum verifies. A slot whose tag is `key`'s is read
    /// first; slots of unknown content (after an open) are read until one
    /// holds it, and their tags learnt; a set whose tags are all known
    /// and none `key`'s is a miss with no read.
    pub fn get(&self, key: u128, len: usize) -> Option<Vec<u8>> {
        let mut got = None;
        self.get_with(key, len, true, |data| got = Some(data.to_vec()));
        got
    }

    /// As [`get`](Self::get), the chunk handed to `f` in the tier's own
    /// buffer, not copied out: whether it was found, or a slot of its
    /// failed its checksum (the slot is empty from then on: the caller,
    /// which knows the object and the offset, says so once). A chunk found
    /// is marked used now (`promote`), or, for a read that will not come
    /// back ([`CacheHint::ReadOnce`](crate::CacheHint): a compaction's
    /// input), made its set's first to go: its kept mark cleared, its use
    /// the oldest.
    pub(crate) fn get_with(
        &self,
        key: u128,
        len: usize,
        promote: bool,
        f: impl FnOnce(&[u8]),
    ) -> Found {
        let (found, corrupt) = self.lookup(key, len, promote);
        let c = if found.is_some() {
            &self.counts.hits
        } else {
            &self.counts.misses
        };
        c.fetch_add(1, Ordering::Relaxed);
        match found {
            Some(buf) => {
                f(&buf[BLOCK..BLOCK + len]);
                self.give_buf(buf);
                Found::Hit
            }
            None if corrupt => Found::Corrupt,
            None => Found::Miss,
        }
    }

    /// The buffer of the slot holding `key` (its `len` bytes at
    /// [`BLOCK`]), if one does; and whether a slot of `key` failed its
    /// checksum. `promote`: as [`get_with`](Self::get_with).
    fn lookup(&self, key: u128, len: usize, promote: bool) -> (Option<AlignedBuf>, bool) {
        let want = tag(key);
        let mut corrupt = false;
        for pass in [want, UNKNOWN] {
            for s in self.set(key) {
                if self.tags[s as usize].load(Ordering::Relaxed) != pass {
                    continue;
                }
                match self.read_slot(s, key, len) {
                    Ok(data) => {
                        self.learn(s, want);
                        self.kept[s as usize].store(false, Ordering::Relaxed);
                        match promote {
                            true => self.touch(s),
                            false => self.used[s as usize].store(0, Ordering::Relaxed),
                        }
                        return (Some(data), corrupt);
                    }
                    Err(bad) => corrupt |= bad,
                }
            }
        }
        (None, corrupt)
    }

    /// Reads slot `s`: its buffer, if it holds `key`'s `len` bytes,
    /// checksum verified. Otherwise what the header says the slot holds
    /// becomes its tag (another chunk's, or [`EMPTY`]), and whether it
    /// held `key` damaged.
    fn read_slot(&self, s: u64, key: u128, len: usize) -> Result<AlignedBuf, bool> {
        let mut buf = self.take_buf().ok_or(false)?;
        let r = self.check_slot(s, key, len, &mut buf);
        match r {
            Ok(()) => Ok(buf),
            Err(bad) => {
                self.give_buf(buf);
                Err(bad)
            }
        }
    }

    /// Reads slot `s` into `buf`: `Ok` if it holds `key`'s `len` bytes
    /// (see [`read_slot`](Self::read_slot)).
    fn check_slot(&self, s: u64, key: u128, len: usize, buf: &mut AlignedBuf) -> Result<(), bool> {
        let n = match self
            .file
            .read_blocks(&mut [buf.io_buf_mut()], s * SLOT as u64)
        {
            Ok(n) => n,
            Err(_) => {
                self.counts.errors.fetch_add(1, Ordering::Relaxed);
                return Err(false);
            }
        };
        self.verify(s, key, len, buf, n)
    }

    /// Whether `buf`, the `n` bytes read of slot `s`, holds `key`'s `len`
    /// bytes, checksum verified; if not, what its header says the slot
    /// holds becomes its tag (another chunk's, or [`EMPTY`]: a damaged
    /// slot of `key`, `Err(true)`, is read no more).
    fn verify(
        &self,
        s: u64,
        key: u128,
        len: usize,
        buf: &AlignedBuf,
        n: usize,
    ) -> Result<(), bool> {
        let field = |r: std::ops::Range<usize>| buf.get(r).ok_or(false);
        let held = if n >= BLOCK && &buf[..8] == MAGIC {
            u128::from_le_bytes(field(8..24)?.try_into().map_err(|_| false)?)
        } else {
            self.learn(s, EMPTY);
            return Err(false);
        };
        if held != key {
            self.learn(s, tag(held));
            return Err(false);
        }
        let stored_len = u32::from_le_bytes(field(24..28)?.try_into().map_err(|_| false)?) as usize;
        let sum = u64::from_le_bytes(field(28..36)?.try_into().map_err(|_| false)?);
        // Another length than asked (asked wrongly, or a short read): a
        // miss; the slot may serve the right question.
        if len > CHUNK || n < BLOCK + len || stored_len != len {
            self.counts.corrupt.fetch_add(1, Ordering::Relaxed);
            return Err(false);
        }
        if sum != checksum(key, len, &buf[BLOCK..BLOCK + len]) {
            self.counts.corrupt.fetch_add(1, Ordering::Relaxed);
            self.learn(s, EMPTY);
            return Err(true);
        }
        Ok(())
    }

    /// Writes the chunk `key` (`data`, at most [`CHUNK`] bytes) to a slot
    /// of its set: the one that holds `key` already, else an empty or
    /// unknown one, else the least recently used. A failed write is
    /// counted and otherwise ignored: the chunk is just not kept.
    pub fn put(&self, key: u128, data: &[u8]) {
        self.curve.written(key);
        self.put_marked(key, data, false);
    }

    /// As [`put`](Self::put), the chunk *kept until read*: its set's LRU
    /// passes over it until a lookup finds it, unless every slot of the
    /// set is kept (see the module documentation).
    pub fn put_kept(&self, key: u128, data: &[u8]) {
        self.curve.written(key);
        self.put_marked(key, data, true);
    }

    /// [`put`](Self::put) of a chunk a read fetched (admitted, or of a
    /// read-around window): the curve's simulations put it by their own
    /// request ([`request`](Self::request)), not here.
    pub(crate) fn put_read(&self, key: u128, data: &[u8]) {
        self.put_marked(key, data, false);
    }

    /// Counts a read's request to the tier, and what it cost, into the
    /// tier's curve (module `curve`).
    pub(crate) fn request(&self, r: &Request<'_>) {
        self.curve.request(r);
    }

    /// The hit ratio, the GETs and the bytes fetched from the store that
    /// the tier would have had at 0.25x, 0.5x, 1x, 2x and 4x its slots,
    /// over the reads through a [`CachedStore`](crate::CachedStore)
    /// since the tier was opened (1x: what it had), from miniature
    /// tiers run with its policy over a sample of its chunks (see
    /// [`TierCurve`] and docs/object-store.md, "The tiers' curves").
    pub fn hit_ratio_curve(&self) -> TierCurve {
        let s = self.stats();
        self.curve.curve(s.hits, s.misses)
    }

    /// [`put`](Self::put), marked kept or not.
    fn put_marked(&self, key: u128, data: &[u8], keep: bool) {
        if data.len() > CHUNK {
            return;
        }
        let s = loop {
            let s = self.victim(key);
            let held = self.tags[s as usize].load(Ordering::Relaxed);
            if held != BUSY && self.claim(s, held) {
                if self.kept[s as usize].swap(false, Ordering::Relaxed) && held != tag(key) {
                    self.counts.kept_evicted.fetch_add(1, Ordering::Relaxed);
                }
                break s;
            }
            // Every slot of the set being written (or this one claimed
            // by another writer since): try again once one is done.
            std::thread::yield_now();
        };
        if self.write_slot(s, key, data, keep) {
            self.counts.writes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Claims slot `s` for a write if its tag is still `held`: from then
    /// on it is [`BUSY`] until [`write_slot`](Self::write_slot) ends.
    fn claim(&self, s: u64, held: u64) -> bool {
        self.tags[s as usize]
            .compare_exchange(held, BUSY, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Records what slot `s` holds (`t`), learnt by a read, unless a
    /// writer has claimed it meanwhile (its write decides the tag).
    fn learn(&self, s: u64, t: u64) {
        let _ = self.tags[s as usize].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
            (c != BUSY).then_some(t)
        });
    }

    /// Writes `data` (at most [`CHUNK`] bytes) as the chunk `key` to slot
    /// `s`, claimed ([`claim`](Self::claim)), header and data in one
    /// write (`keep`: kept until read): whether it was written. The slot
    /// is `key`'s after, or empty.
    fn write_slot(&self, s: u64, key: u128, data: &[u8], keep: bool) -> bool {
        let Some(mut buf) = self.take_buf() else {
            self.tags[s as usize].store(EMPTY, Ordering::Relaxed);
            return false;
        };
        // (A kept buffer holds an earlier slot: what the header and the
        // data do not cover is zeroed.)
        buf[36..BLOCK].fill(0);
        buf[BLOCK + data.len()..].fill(0);
        buf[..8].copy_from_slice(MAGIC);
        buf[8..24].copy_from_slice(&key.to_le_bytes());
        buf[24..28].copy_from_slice(&(data.len() as u32).to_le_bytes());
        buf[28..36].copy_from_slice(&checksum(key, data.len(), data).to_le_bytes());
        buf[BLOCK..BLOCK + data.len()].copy_from_slice(data);
        // Busy while it is written: no lookup expects `key` or the old
        // chunk there (a reader racing the write fails the checksum).
        let done = self.file.write_blocks(&[buf.io_buf()], s * SLOT as u64);
        self.give_buf(buf);
        match done {
            Ok(_) => {
                self.kept[s as usize].store(keep, Ordering::Relaxed);
                self.touch(s);
                self.tags[s as usize].store(tag(key), Ordering::Relaxed);
                true
            }
            Err(_) => {
                self.tags[s as usize].store(EMPTY, Ordering::Relaxed);
                self.counts.errors.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// The one slot of record `key` (a [`record_key`]): a record has a
    /// fixed place in its set, so that a record written again (a new
    /// version, a tombstone) replaces the old one, never sits beside it
    /// in a slot of unknown content after a restart.
    fn record_slot(&self, key: u128) -> u64 {
        self.set(key).start + (key as u64 >> 32) % self.ways
    }

    /// Writes the record `key` ([`record_key`]; `data` at most [`CHUNK`]
    /// bytes, empty for a tombstone) to its slot, whatever the slot held.
    /// A slot holding a chunk kept until read is left to it: the record
    /// is not there to replace (a record saves a HEAD; the chunk, a GET).
    pub(crate) fn put_record(&self, key: u128, data: &[u8]) {
        if data.len() > CHUNK {
            return;
        }
        let s = self.record_slot(key);
        loop {
            if self.kept[s as usize].load(Ordering::Relaxed) {
                return;
            }
            let held = self.tags[s as usize].load(Ordering::Relaxed);
            // (A record or a tombstone waits for the write in progress:
            // it must land after it.)
            if held != BUSY && self.claim(s, held) {
                break;
            }
            std::thread::yield_now();
        }
        if self.write_slot(s, key, data, false) {
            self.mark_record(s, key, data.is_empty());
        }
    }

    /// Tags slot `s`, found or written holding the record `key`: a
    /// tombstone's slot is as good as an empty one (a chunk may take it).
    fn mark_record(&self, s: u64, key: u128, tombstone: bool) {
        let t = if tombstone { EMPTY } else { tag(key) };
        self.learn(s, t);
        self.touch(s);
    }

    /// The record `key` holds, checksum verified, if its slot holds it
    /// (empty: a tombstone); no read where the slot's tag says it holds
    /// something else.
    pub(crate) fn get_record(&self, key: u128) -> Option<Vec<u8>> {
        let s = self.record_slot(key);
        // A slot this process knows holds something else: no read.
        let t = self.tags[s as usize].load(Ordering::Relaxed);
        if t != UNKNOWN && t != tag(key) {
            return None;
        }
        let mut buf = self.take_buf()?;
        let got = match self
            .file
            .read_blocks(&mut [buf.io_buf_mut()], s * SLOT as u64)
        {
            Ok(n) => {
                // The length the header claims: the checksum covers it.
                let len = (n >= BLOCK)
                    .then(|| u32::from_le_bytes(buf[24..28].try_into().expect("4 bytes")))
                    .map_or(0, |l| (l as usize).min(CHUNK));
                self.verify(s, key, len, &buf, n)
                    .ok()
                    .map(|()| buf[BLOCK..BLOCK + len].to_vec())
            }
            Err(_) => {
                self.counts.errors.fetch_add(1, Ordering::Relaxed);
                None
            }
        };
        self.give_buf(buf);
        if let Some(d) = &got {
            self.mark_record(s, key, d.is_empty());
        }
        got
    }

    /// Replaces the record `key` with a tombstone if its slot holds it
    /// (its tag is the record's, or a read finds it): a write that
    /// changed the object made the record stale. (A slot torn by a crash
    /// or a racing write fails its checksum: no record either.)
    pub(crate) fn drop_record(&self, key: u128) {
        let t = self.tags[self.record_slot(key) as usize].load(Ordering::Relaxed);
        // Unknown: read first (learning what the slot holds), so that a
        // chunk there is not overwritten for nothing.
        let held =
            t == tag(key) || (t == UNKNOWN && self.get_record(key).is_some_and(|d| !d.is_empty()));
        if held {
            self.put_record(key, &[]);
        }
    }

    /// The slot `put` writes `key` to: the one holding it, an empty one,
    /// one of unknown content, else the least recently used chunk not
    /// kept until read (see the module documentation).
    fn victim(&self, key: u128) -> u64 {
        let want = tag(key);
        let set = self.set(key);
        let tag_of = |s: u64| self.tags[s as usize].load(Ordering::Relaxed);
        if let Some(s) = set.clone().find(|&s| tag_of(s) == want) {
            return s;
        }
        if let Some(s) = set.clone().find(|&s| tag_of(s) == EMPTY) {
            return s;
        }
        if let Some(s) = set.clone().find(|&s| tag_of(s) == UNKNOWN) {
            return s;
        }
        // The least recent chunk, passing over records while they are
        // fewer than half the set: a record is one slot per object, and
        // chunks read every day would otherwise push out the records of
        // their objects, read once per process (crate::record).
        let used = |s: &u64| self.used[*s as usize].load(Ordering::Relaxed);
        let record = |s: &u64| u128::from(tag_of(*s)) & RECORD_BIT != 0;
        let chunks_only = set.clone().filter(|s| !record(s)).count() as u64 * 2 >= self.ways;
        let candidates = set
            .clone()
            .filter(|s| tag_of(*s) != BUSY && !(chunks_only && record(s)));
        // Chunks kept until read are passed over while one is not (then
        // the least recent kept one goes: the tier never refuses a write).
        let kept = |s: &u64| self.kept[*s as usize].load(Ordering::Relaxed);
        candidates
            .clone()
            .filter(|s| !kept(s))
            .min_by_key(used)
            .or_else(|| candidates.min_by_key(used))
            // Every slot busy: the caller tries again.
            .unwrap_or(set.start)
    }

    /// Whether the chunk `key`, whose pages `pages` (bit `i`: bytes
    /// `[i * 4096, (i + 1) * 4096)` of the chunk) were missed in memory
    /// now, had one of those pages missed before within the window: then
    /// it is admitted (the caller writes it). Otherwise this miss is
    /// remembered. A page counts, not the chunk, so that a sequential scan
    /// whose runs of folios split a chunk between two reads admits
    /// nothing.
    pub fn admit(&self, key: u128, pages: u16) -> bool {
        let cap = self.ghost_cap();
        self.ghosts.lock().admit(key, pages, cap)
    }
}

impl Ghosts {
    /// [`DiskTier::admit`] over these ghosts, at most `cap` keys (the
    /// curve's simulations keep their own: module `curve`).
    fn admit(&mut self, key: u128, pages: u16, cap: usize) -> bool {
        if let Some(seen) = self.map.get_mut(&key) {
            if *seen & pages != 0 {
                self.map.remove(&key);
                return true;
            }
            *seen |= pages;
            return false;
        }
        // The order holds admitted keys too (removed from the map, not
        // from it): bounded at twice the map, so it cannot grow where
        // most keys are admitted.
        while self.map.len() >= cap || self.order.len() >= 2 * cap {
            match self.order.pop_front() {
                Some(old) => {
                    self.map.remove(&old);
                }
                None => break,
            }
        }
        self.map.insert(key, pages);
        self.order.push_back(key);
        false
    }
}

/// What [`DiskTier::get_with`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// The chunk, checksum verified.
    Hit,
    /// No slot holds it.
    Miss,
    /// A slot held it damaged (a torn write, a changed disk): emptied.
    Corrupt,
}

/// The checksum of a chunk: xxh3-64 of its key, length and bytes.
fn checksum(key: u128, len: usize, data: &[u8]) -> u64 {
    let mut h = Xxh3::new();
    h.update(&key.to_le_bytes());
    h.update(&(len as u32).to_le_bytes());
    h.update(data);
    h.digest()
}

impl std::fmt::Debug for DiskTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskTier")
            .field("backing", &self.file.info())
            .field("stats", &self.stats())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// A record is found at its slot whatever its length; a tombstone
    /// replaces it; a torn one (a block of its slot rewritten) is no
    /// record; chunks and records never share a key, and a set's LRU
    /// passes over its records.
    #[test]
    fn records_replace_in_place_and_a_torn_one_is_none() {
        let mem = Arc::new(backing::MemBacking::new());
        let tier = DiskTier::with_backing(mem.clone(), 32 * SLOT as u64).unwrap();
        let key = record_key("a/b");
        assert_ne!(key & RECORD_BIT, 0);
        assert_eq!(chunk_key("a/b", "e:1:10", 0) & RECORD_BIT, 0);
        assert_eq!(tier.get_record(key), None, "a fresh tier");
        tier.put_record(key, b"version one");
        assert_eq!(tier.get_record(key).as_deref(), Some(&b"version one"[..]));
        tier.put_record(key, b"v2");
        assert_eq!(tier.get_record(key).as_deref(), Some(&b"v2"[..]));
        tier.drop_record(key);
        assert_eq!(tier.get_record(key), None, "its slot is empty");
        let reopened = DiskTier::with_backing(mem.clone(), 32 * SLOT as u64).unwrap();
        assert_eq!(
            reopened.get_record(key).as_deref(),
            Some(&b""[..]),
            "a tombstone"
        );
        assert_eq!(tier.stats().writes, 0, "records are not chunks written");

        tier.put_record(key, &[7u8; 3 * BLOCK]);
        let s = tier.record_slot(key);
        let mut block = AlignedBuf::zeroed(BLOCK).unwrap();
        block.fill(0x5a);
        let at = s * SLOT as u64 + 2 * BLOCK as u64;
        mem.write_blocks(&[block.io_buf()], at).unwrap();
        assert_eq!(tier.get_record(key), None, "torn");
        // A reopened tier (no tags known) finds a record whole.
        tier.put_record(key, b"v3");
        let again = DiskTier::with_backing(mem.clone(), 32 * SLOT as u64).unwrap();
        assert_eq!(again.get_record(key).as_deref(), Some(&b"v3"[..]));

        // Sixteen chunks of the record's set: the record stays.
        let set = tier.set(key);
        let mut n = 0u64;
        let mut put = 0;
        while put < 2 * WAYS {
            let c = chunk_key("c", "e:1:1", n);
            n += 1;
            if tier.set(c) == set {
                tier.put(c, b"chunk");
                put += 1;
            }
        }
        assert_eq!(tier.get_record(key).as_deref(), Some(&b"v3"[..]));
    }

    /// Keys admitted at their second miss leave their places in the
    /// order; the order stays within twice the ghosts' bound however many
    /// come, and so within [`DiskTier::memory_bound`]'s count.
    #[test]
    fn ghost_order_stays_bounded_when_every_key_is_admitted() {
        let tier = DiskTier::with_backing(backing::MemBacking::new(), 64 * SLOT as u64).unwrap();
        let cap = tier.ghost_cap();
        assert_eq!(cap, 64);
        for key in 0..10_000u128 {
            assert!(!tier.admit(key, 1));
            assert!(tier.admit(key, 1));
            let g = tier.ghosts.lock();
            assert!(g.map.len() <= cap && g.order.len() <= 2 * cap, "{key}");
        }
        assert_eq!(
            tier.memory_bound(),
            64 * 17 + 64 * GHOST_BYTES + (POOL_BUFS * SLOT) as u64,
            "tags, recency and kept marks, the ghosts at their bound, the kept buffers"
        );
    }
}
