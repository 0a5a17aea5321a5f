//! The disk tier: chunks of object versions in a local file opened
//! `O_DIRECT`, below the memory cache and above the remote store, that
//! reopens warm after a restart or a crash.
//!
//! # The problem
//! Memory holds a fraction of what an engine reads from object storage;
//! local disk holds much more, at a hundredth of a GET's latency. A tier
//! on disk must survive `kill -9` and power loss without ever returning a
//! wrong byte, reopen without reading an index whose size grows with the
//! tier (foyer recovers 50M entries in 24 s; Databend starts in minutes),
//! and not be flushed by one scan.
//!
//! # Layout
//! ```text
//!   file: slot 0 | slot 1 | ... | slot n-1          (n = bytes / SLOT)
//!   slot: header block (4 KiB) | data (CHUNK = 64 KiB, zero-padded)
//!   header: magic "fcotier1" | key (u128) | len (u32) | xxh3-64 of key, len, data
//! ```
//! A chunk is the aligned 64 KiB `[c * CHUNK, (c + 1) * CHUNK)` of one
//! object version (the last one shorter); its key is a 128-bit hash of
//! the path, the version and `c` ([`chunk_key`]). The key picks one slot
//! (direct-mapped): a lookup is one read of that slot, header and data
//! together, and a write one write of both.
//!
//! # Crashes
//! The headers on disk are the index: a reopen opens the file and reads
//! nothing, whatever the tier's size; the first lookup of a chunk reads
//! its slot. A slot whose write was cut short (a crash mid-write, a torn
//! write, a reader racing a writer of the same slot) fails its checksum,
//! which covers the key, the length and the data; a slot holding another
//! chunk fails the key check. Both are misses, never wrong bytes. No
//! write is ever synced: what a crash loses is a miss.
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
use std::sync::atomic::{AtomicU64, Ordering};

use backing::{AlignedBuf, Backing, FileBacking, FileOptions, BLOCK};
use parking_lot::Mutex;
use xxhash_rust::xxh3::Xxh3;

/// The bytes of object a slot holds.
pub const CHUNK: usize = 64 << 10;
// A chunk's pages are the 16 bits of an admission mask (`admit`).
const _: () = assert!(CHUNK / BLOCK == 16);

/// The bytes of a slot: a header block and a chunk (68 KiB).
pub const SLOT: usize = BLOCK + CHUNK;
const MAGIC: &[u8; 8] = b"fcotier1";
/// The most keys the ghosts remember.
const MAX_GHOSTS: usize = 1 << 16;

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
    h.digest128()
}

/// A disk tier (see the module documentation): shared by the objects of
/// a [`CachedStore`](crate::CachedStore) through
/// [`CachedStoreBuilder::disk_tier`](crate::CachedStoreBuilder::disk_tier).
pub struct DiskTier {
    file: Box<dyn Backing>,
    slots: u64,
    ghosts: Mutex<Ghosts>,
    counts: Counts,
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
        let slots = (bytes / SLOT as u64).max(1);
        if file.len()? != slots * SLOT as u64 {
            file.set_len(slots * SLOT as u64)?;
        }
        Ok(DiskTier {
            file: Box::new(file),
            slots,
            ghosts: Mutex::new(Ghosts::default()),
            counts: Counts::default(),
        })
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
            io_errors: get(&c.errors),
            slots: self.slots,
        }
    }

    fn offset(&self, key: u128) -> u64 {
        ((key >> 64) as u64 % self.slots) * SLOT as u64
    }

    /// The chunk `key` of `len` bytes, if its slot holds it whole and
    /// its checksum verifies.
    pub fn get(&self, key: u128, len: usize) -> Option<Vec<u8>> {
        let found = self.read_slot(key, len);
        let c = if found.is_some() {
            &self.counts.hits
        } else {
            &self.counts.misses
        };
        c.fetch_add(1, Ordering::Relaxed);
        found
    }

    fn read_slot(&self, key: u128, len: usize) -> Option<Vec<u8>> {
        if len > CHUNK {
            return None;
        }
        let mut buf = AlignedBuf::zeroed(SLOT).ok()?;
        let n = match self
            .file
            .read_blocks(&mut [buf.io_buf_mut()], self.offset(key))
        {
            Ok(n) => n,
            Err(_) => {
                self.counts.errors.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        if n < BLOCK + len || &buf[..8] != MAGIC || buf[8..24] != key.to_le_bytes() {
            return None;
        }
        let stored_len = u32::from_le_bytes(buf[24..28].try_into().ok()?) as usize;
        let sum = u64::from_le_bytes(buf[28..36].try_into().ok()?);
        if stored_len != len || sum != checksum(key, len, &buf[BLOCK..BLOCK + len]) {
            self.counts.corrupt.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(buf[BLOCK..BLOCK + len].to_vec())
    }

    /// Writes the chunk `key` (`data`, at most [`CHUNK`] bytes) to its
    /// slot, replacing what was there. A failed write is counted and
    /// otherwise ignored: the chunk is just not kept.
    pub fn put(&self, key: u128, data: &[u8]) {
        if data.len() > CHUNK {
            return;
        }
        let Ok(mut buf) = AlignedBuf::zeroed(SLOT) else {
            return;
        };
        buf[..8].copy_from_slice(MAGIC);
        buf[8..24].copy_from_slice(&key.to_le_bytes());
        buf[24..28].copy_from_slice(&(data.len() as u32).to_le_bytes());
        buf[28..36].copy_from_slice(&checksum(key, data.len(), data).to_le_bytes());
        buf[BLOCK..BLOCK + data.len()].copy_from_slice(data);
        match self.file.write_blocks(&[buf.io_buf()], self.offset(key)) {
            Ok(_) => self.counts.writes.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.counts.errors.fetch_add(1, Ordering::Relaxed),
        };
    }

    /// Whether the chunk `key`, whose pages `pages` (bit `i`: bytes
    /// `[i * 4096, (i + 1) * 4096)` of the chunk) were missed in memory
    /// now, had one of those pages missed before within the window: then
    /// it is admitted (the caller writes it). Otherwise this miss is
    /// remembered. A page counts, not the chunk, so that a sequential scan
    /// whose runs of folios split a chunk between two reads admits
    /// nothing.
    pub fn admit(&self, key: u128, pages: u16) -> bool {
        let mut g = self.ghosts.lock();
        if let Some(seen) = g.map.get_mut(&key) {
            if *seen & pages != 0 {
                g.map.remove(&key);
                return true;
            }
            *seen |= pages;
            return false;
        }
        let cap = (self.slots as usize).clamp(64, MAX_GHOSTS);
        while g.map.len() >= cap {
            match g.order.pop_front() {
                Some(old) => {
                    g.map.remove(&old);
                }
                None => break,
            }
        }
        g.map.insert(key, pages);
        g.order.push_back(key);
        false
    }
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
