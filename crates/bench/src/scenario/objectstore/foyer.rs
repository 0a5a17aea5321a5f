//! A model of foyer's disk tier (foyer-storage 0.20's block engine, the
//! disk half of `HybridCache`), for the `objectstore` scenario: foyer
//! itself costs more to build here than the bench may add (docs/bench/objectstore.md
//! gives the measurement), so its policy is modelled, not its code:
//!
//! - the device is cut into blocks (foyer's `block_size`: [`REGION`],
//!   16 MiB, by default; the scenario gives it less, [`region_for`], so
//!   that its buffer fits in the memory budget); entries are appended to
//!   the current block through a buffer in memory, which serves hits as
//!   foyer's does, and the block written when full (foyer's flusher);
//! - each entry has a header with its key, length and a checksum (foyer
//!   checksums entries), aligned to 4 KiB as foyer's are;
//! - the index is in memory (key to position); a full device evicts its
//!   oldest block whole (foyer's `FifoPicker`), and its entries leave the
//!   index; every entry is admitted (foyer's default admission, no
//!   filter);
//! - **recovery reads every block** of the device and rebuilds the index
//!   from the headers it finds (foyer's recovery, whose time grows with
//!   the device: 50M entries in 24 s, foyer#1295).
//!
//! Files are opened `O_DIRECT` as foyer's `DirectFsDevice` does (buffered
//! where the filesystem refuses it).

use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path as FsPath;

use anyhow::{Context, Result};
use backing::AlignedBuf;
use bytes::Bytes;
use parking_lot::Mutex;
use xxhash_rust::xxh3::xxh3_64;

use super::lru::BlockKey;

/// A block of the device (foyer's default block size).
pub const REGION: u64 = 16 << 20;
/// An entry's header, and the alignment of entries.
const ALIGN: u64 = 4096;
/// The first bytes of a header.
const MAGIC: u64 = 0x666f_7965_726d_6f64;

/// Where an entry is: its offset in the file, its data's length, its
/// region.
#[derive(Debug, Clone, Copy)]
struct Place {
    offset: u64,
    len: u32,
    region: u64,
}

/// A region recovered: its sequence, its index, its entries.
type Found = (u64, u64, Vec<(BlockKey, Place)>);

/// The block size the scenario gives the model at memory `m`: the
/// largest power of two within a quarter of `m`, at most [`REGION`], at
/// least 1 MiB. The block's buffer is memory foyer holds beside its
/// memory cache (`HybridCache`'s memory capacity does not count it), so
/// the scenario takes it out of M: the model's memory cache gets
/// `m - region_for(m)`, and foyer's memory in all is M, as the others'.
pub fn region_for(m: u64) -> u64 {
    let quarter = (m / 4).max(1 << 20);
    (1u64 << (63 - quarter.leading_zeros())).min(REGION)
}

/// The device and its index.
#[derive(Debug)]
pub struct FoyerDisk {
    file: File,
    /// Its block (region) size.
    region: u64,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    index: HashMap<BlockKey, Place>,
    /// Keys written to each region (to drop them when it is evicted).
    keys: Vec<Vec<BlockKey>>,
    /// Sealed regions, oldest first.
    sealed: VecDeque<u64>,
    /// Regions never written.
    free: Vec<u64>,
    /// The region being filled, its buffer, how full, its sequence.
    current: u64,
    buf: AlignedBuf,
    fill: u64,
    seq: u64,
    /// Disk hits and misses.
    hits: u64,
    misses: u64,
}

/// An entry's header fields in its first bytes.
fn header(seq: u64, key: BlockKey, data: &[u8]) -> [u8; 40] {
    let mut h = [0u8; 40];
    h[..8].copy_from_slice(&MAGIC.to_le_bytes());
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h[16..20].copy_from_slice(&key.0.to_le_bytes());
    h[20..28].copy_from_slice(&key.1.to_le_bytes());
    h[28..32].copy_from_slice(&(data.len() as u32).to_le_bytes());
    h[32..40].copy_from_slice(&checksum(key, data).to_le_bytes());
    h
}

fn checksum(key: BlockKey, data: &[u8]) -> u64 {
    xxh3_64(data) ^ u64::from(key.0).rotate_left(32) ^ key.1
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// An entry's bytes on the device: header and data, 4 KiB aligned.
fn footprint(len: usize) -> u64 {
    ALIGN + (len as u64).div_ceil(ALIGN) * ALIGN
}

impl FoyerDisk {
    /// Opens the device at `path` of `bytes` (whole regions of `region`
    /// bytes, at least 2) and recovers its index by reading every region.
    /// Also the time it took is the caller's to measure.
    ///
    /// # Errors
    /// The file cannot be opened, sized or read.
    pub fn open(path: &FsPath, bytes: u64, region: u64) -> Result<FoyerDisk> {
        let regions = (bytes / region).max(2);
        let open = |direct: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(true).create(true).truncate(false);
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            o.open(path)
        };
        let file = open(true)
            .or_else(|_| open(false))
            .with_context(|| format!("foyer model: opening {}", path.display()))?;
        file.set_len(regions * region)?;
        let mut found: Vec<Found> = Vec::new();
        let mut buf = AlignedBuf::zeroed(region as usize)?;
        for r in 0..regions {
            file.read_exact_at(&mut buf, r * region)?;
            let entries = parse_region(&buf, r, region);
            if let Some(seq) = entries.first().map(|e| e.0) {
                found.push((seq, r, entries.into_iter().map(|e| (e.1, e.2)).collect()));
            }
        }
        found.sort_by_key(|f| f.0);
        let mut st = State {
            index: HashMap::new(),
            keys: vec![Vec::new(); regions as usize],
            sealed: VecDeque::new(),
            free: (0..regions).rev().collect(),
            current: 0,
            buf,
            fill: 0,
            seq: found.last().map_or(0, |f| f.0),
            hits: 0,
            misses: 0,
        };
        for (_, r, entries) in found {
            st.free.retain(|&x| x != r);
            st.sealed.push_back(r);
            for (k, p) in entries {
                st.index.insert(k, p);
                st.keys[r as usize].push(k);
            }
        }
        st.next_region();
        Ok(FoyerDisk {
            file,
            region,
            state: Mutex::new(st),
        })
    }

    /// Entries in the index.
    pub fn entries(&self) -> usize {
        self.state.lock().index.len()
    }

    /// (hits, misses).
    pub fn counts(&self) -> (u64, u64) {
        let st = self.state.lock();
        (st.hits, st.misses)
    }

    /// The entry `key`, checksum verified; `None` is a miss.
    pub fn get(&self, key: BlockKey) -> Option<Bytes> {
        let place = {
            let mut st = self.state.lock();
            let Some(p) = st.index.get(&key).copied() else {
                st.misses += 1;
                return None;
            };
            if p.region == st.current {
                // Still in the buffer.
                let at = (p.offset - p.region * self.region) as usize;
                let data = Bytes::copy_from_slice(&st.buf[at + ALIGN as usize..][..p.len as usize]);
                st.hits += 1;
                return Some(data);
            }
            p
        };
        let got = self.read(key, place);
        let mut st = self.state.lock();
        match &got {
            Some(_) => st.hits += 1,
            None => st.misses += 1,
        }
        got
    }

    /// Reads and checks the entry at `p` (outside the lock: a region
    /// evicted and rewritten meanwhile fails its key or checksum).
    fn read(&self, key: BlockKey, p: Place) -> Option<Bytes> {
        let mut buf = AlignedBuf::zeroed(footprint(p.len as usize) as usize).ok()?;
        self.file.read_exact_at(&mut buf, p.offset).ok()?;
        let data = &buf[ALIGN as usize..][..p.len as usize];
        let h = &buf[..40];
        let ok = u64_at(h, 0) == MAGIC
            && h[16..20] == key.0.to_le_bytes()
            && u64_at(h, 20) == key.1
            && u64_at(h, 32) == checksum(key, data);
        ok.then(|| Bytes::copy_from_slice(data))
    }

    /// Admits `key` (foyer admits every entry memory evicts).
    ///
    /// # Errors
    /// Writing a sealed region failed.
    pub fn insert(&self, key: BlockKey, data: &[u8]) -> Result<()> {
        let mut st = self.state.lock();
        let need = footprint(data.len());
        if need > self.region {
            return Ok(());
        }
        if st.fill + need > self.region {
            let at = st.current * self.region;
            self.file.write_all_at(&st.buf, at)?;
            let cur = st.current;
            st.sealed.push_back(cur);
            st.next_region();
        }
        let (seq, at) = (st.seq, st.fill as usize);
        st.buf[at..at + 40].copy_from_slice(&header(seq, key, data));
        st.buf[at + ALIGN as usize..][..data.len()].copy_from_slice(data);
        let region = st.current;
        let place = Place {
            offset: region * self.region + st.fill,
            len: data.len() as u32,
            region,
        };
        st.fill += need;
        st.index.insert(key, place);
        st.keys[region as usize].push(key);
        Ok(())
    }
}

impl State {
    /// Takes a free region, or evicts the oldest sealed one (FIFO), as
    /// the one to fill.
    fn next_region(&mut self) {
        let r = match self.free.pop() {
            Some(r) => r,
            None => {
                let r = self.sealed.pop_front().expect("a sealed region");
                for k in std::mem::take(&mut self.keys[r as usize]) {
                    if self.index.get(&k).is_some_and(|p| p.region == r) {
                        self.index.remove(&k);
                    }
                }
                r
            }
        };
        self.current = r;
        self.fill = 0;
        self.seq += 1;
        self.buf.fill(0);
    }
}

/// The entries a region's bytes hold, in order, with the region's
/// sequence: (seq, key, place), for region `region` of `size` bytes; they end at the first header that is not
/// one.
fn parse_region(buf: &[u8], region: u64, size: u64) -> Vec<(u64, BlockKey, Place)> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + ALIGN as usize <= buf.len() {
        let h = &buf[at..at + 40];
        if u64_at(h, 0) != MAGIC {
            break;
        }
        let key = (
            u32::from_le_bytes(h[16..20].try_into().expect("4 bytes")),
            u64_at(h, 20),
        );
        let len = u32::from_le_bytes(h[28..32].try_into().expect("4 bytes"));
        let end = at + footprint(len as usize) as usize;
        if end > buf.len() {
            break;
        }
        let data = &buf[at + ALIGN as usize..][..len as usize];
        if u64_at(h, 32) != checksum(key, data) {
            break;
        }
        let place = Place {
            offset: region * size + at as u64,
            len,
            region,
        };
        out.push((u64_at(h, 8), key, place));
        at = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(k: u64) -> Vec<u8> {
        (0..65_536u64 - k).map(|i| (i ^ k) as u8).collect()
    }

    /// Sealed regions come back after a reopen, the buffered one does
    /// not, and a full device evicts its oldest region.
    #[test]
    fn sealed_regions_are_recovered_and_the_oldest_evicted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("foyer");
        let disk = FoyerDisk::open(&path, 2 * REGION, REGION).unwrap();
        // 68 KiB a block: 240 fill a region; 600 fill two and part of a third.
        for k in 0..600u64 {
            disk.insert((1, k), &block(k)).unwrap();
        }
        assert!(disk.get((1, 0)).is_none(), "the oldest region was evicted");
        assert_eq!(disk.get((1, 599)).unwrap(), block(599), "from the buffer");
        drop(disk);
        let disk = FoyerDisk::open(&path, 2 * REGION, REGION).unwrap();
        assert_eq!(disk.entries(), 240, "one sealed region survives");
        let found: Vec<u64> = (0..600).filter(|&k| disk.get((1, k)).is_some()).collect();
        assert_eq!(found, (240..480).collect::<Vec<_>>());
        for k in found {
            assert_eq!(disk.get((1, k)).unwrap(), block(k));
        }
    }

    /// The block buffer is a quarter of M at most (so that the model's
    /// memory in all is M), foyer's 16 MiB at most, 1 MiB at least.
    #[test]
    fn the_block_fits_in_a_quarter_of_memory() {
        assert_eq!(region_for(8 << 20), 2 << 20);
        assert_eq!(region_for(12 << 20), 2 << 20);
        assert_eq!(region_for(64 << 20), REGION);
        assert_eq!(region_for(1 << 30), REGION);
        assert_eq!(region_for(1 << 20), 1 << 20);
    }
}
