//! The soak: everything at once, for a bounded time, with every byte
//! checked.
//!
//! A 16 MiB cache over 8 files of 8 MiB (4x the capacity), and 9 threads:
//! 3 writers rewriting whole regions of any file with versioned patterns
//! (one write in four uncached), dirty data at the cache's dirty limit so
//! they are throttled; 3 readers reading parts of regions and checking
//! them against the version the model holds; a cutter truncating files
//! (at any byte) and growing them back (the cut part then reads as zeros)
//! under the readers; a replacer deleting a file's name under its open
//! handles (readers keep reading it through them) and making a new file
//! of that name, written whole through the cache; a syncer calling
//! `sync_data` and `Cache::sync_all`. Regions are not page-aligned, so
//! neighbours share folios; each region has a read-write lock, so the
//! model is exact (the interleavings inside a region are
//! checked by tests/it/write/visible/stress.rs).
//!
//! A watchdog fails the test if the threads do not finish soon after the
//! time is up (a deadlock). At the end, after `sync_all`: every file
//! through the cache, then on disk, holds exactly the model, nothing is
//! dirty, and every arena page is free or cached.
//!
//! 10 s by default, 30 s under `CI=true`; `FOLIOCACHE_SOAK_SECS` sets it.

// The tests drive and count their own threads with std atomics and locks;
// the shim rule (clippy.toml) is for the crate's protocols.
#![allow(clippy::disallowed_types)]

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use foliocache::{Cache, File, WriteFlags};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use test_support::cache::TestCache;

#[path = "it/common/write.rs"]
mod wcommon;
use wcommon::{assert_same, within, HANG};

const FILES: usize = 8;
const REGION: usize = 200_003;
const REGIONS: usize = 42; // 8.4 MB a file
const SIZE: u64 = (REGION * REGIONS) as u64;
const CAPACITY: usize = 16 << 20;

fn secs() -> Duration {
    let default = if test_support::under_ci() { 30 } else { 10 };
    Duration::from_secs(test_support::env_or("FOLIOCACHE_SOAK_SECS", default))
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Region `r` of file `f` at version `v`, bytes `0..zero_from` (the rest
/// zeros).
fn region_bytes(f: usize, r: usize, v: u64, zero_from: usize) -> Vec<u8> {
    let seed = mix((f as u64) << 48 ^ (r as u64) << 32 ^ v);
    let mut out = Vec::with_capacity(REGION);
    let mut i = 0u64;
    while out.len() < REGION {
        out.extend_from_slice(&mix(seed ^ i).to_le_bytes());
        i += 1;
    }
    out.truncate(REGION);
    out[zero_from.min(REGION)..].fill(0);
    out
}

/// What one region holds: a version, zeros from an offset on.
struct RegionState {
    lock: RwLock<()>,
    version: AtomicU64,
    zero_from: AtomicU64,
}

struct Slot {
    path: PathBuf,
    file: Mutex<File>,
    regions: Vec<RegionState>,
    /// Files made for this slot so far (part of the pattern's seed).
    generation: AtomicU64,
}

struct Shared {
    cache: Cache,
    slots: Vec<Slot>,
    stop: AtomicBool,
    versions: AtomicU64,
}

impl Shared {
    fn expected(&self, s: usize, r: usize) -> Vec<u8> {
        let st = &self.slots[s].regions[r];
        let g = self.slots[s].generation.load(SeqCst);
        region_bytes(
            s + FILES * g as usize,
            r,
            st.version.load(SeqCst),
            st.zero_from.load(SeqCst) as usize,
        )
    }

    fn handle(&self, s: usize) -> File {
        self.slots[s].file.lock().unwrap().clone()
    }
}

fn writer(sh: &Shared, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !sh.stop.load(SeqCst) {
        let (s, r) = (rng.gen_range(0..FILES), rng.gen_range(0..REGIONS));
        let st = &sh.slots[s].regions[r];
        let _g = st.lock.write().unwrap();
        let v = sh.versions.fetch_add(1, SeqCst) + 1;
        let g = sh.slots[s].generation.load(SeqCst);
        let data = region_bytes(s + FILES * g as usize, r, v, REGION);
        let flags = if rng.gen_range(0..4) == 0 {
            WriteFlags::DONTCACHE
        } else {
            WriteFlags::NONE
        };
        sh.handle(s)
            .write_at_flags(&data, (r * REGION) as u64, flags)
            .unwrap_or_else(|e| panic!("writer: file {s} region {r}: {e}"));
        st.version.store(v, SeqCst);
        st.zero_from.store(REGION as u64, SeqCst);
    }
}

fn reader(sh: &Shared, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut buf = vec![0u8; REGION];
    while !sh.stop.load(SeqCst) {
        let (s, r) = (rng.gen_range(0..FILES), rng.gen_range(0..REGIONS));
        let st = &sh.slots[s].regions[r];
        let _g = st.lock.read().unwrap();
        let from = rng.gen_range(0..REGION);
        let len = rng.gen_range(1..=REGION - from);
        let f = sh.handle(s);
        let n = f
            .read_at(&mut buf[..len], (r * REGION + from) as u64)
            .unwrap_or_else(|e| panic!("reader: file {s} region {r}: {e}"));
        assert_eq!(n, len, "reader: file {s} region {r}: short read");
        let want = sh.expected(s, r);
        assert_same(
            &format!("reader: file {s} region {r} bytes {from}..{}", from + len),
            &buf[..n],
            &want[from..from + len],
        );
    }
}

/// Write-locks every region of slot `s`, in order.
fn lock_all(sh: &Shared, s: usize) -> Vec<std::sync::RwLockWriteGuard<'_, ()>> {
    sh.slots[s]
        .regions
        .iter()
        .map(|st| st.lock.write().unwrap())
        .collect()
}

fn cutter(sh: &Shared, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !sh.stop.load(SeqCst) {
        std::thread::sleep(Duration::from_millis(rng.gen_range(5..40)));
        let s = rng.gen_range(0..FILES);
        let _all = lock_all(sh, s);
        let cut = rng.gen_range(0..SIZE);
        let f = sh.handle(s);
        f.set_len(cut).unwrap();
        f.set_len(SIZE).unwrap();
        for (r, st) in sh.slots[s].regions.iter().enumerate() {
            let start = (r * REGION) as u64;
            if start + REGION as u64 <= cut {
                continue;
            }
            let z = cut.saturating_sub(start);
            st.zero_from.store(z.min(st.zero_from.load(SeqCst)), SeqCst);
        }
    }
}

fn replacer(sh: &Shared, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !sh.stop.load(SeqCst) {
        std::thread::sleep(Duration::from_millis(rng.gen_range(50..200)));
        let s = rng.gen_range(0..FILES);
        let slot = &sh.slots[s];
        let _all = lock_all(sh, s);
        // The old file: its name goes, its handles stay readable.
        fs::remove_file(&slot.path).unwrap();
        let g = slot.generation.load(SeqCst) + 1;
        let f = sh
            .cache
            .open_options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&slot.path)
            .unwrap();
        let v = sh.versions.fetch_add(1, SeqCst) + 1;
        for r in 0..REGIONS {
            f.write_all_at(
                &region_bytes(s + FILES * g as usize, r, v, REGION),
                (r * REGION) as u64,
            )
            .unwrap();
        }
        *slot.file.lock().unwrap() = f;
        slot.generation.store(g, SeqCst);
        for st in &slot.regions {
            st.version.store(v, SeqCst);
            st.zero_from.store(REGION as u64, SeqCst);
        }
    }
}

fn syncer(sh: &Shared, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !sh.stop.load(SeqCst) {
        std::thread::sleep(Duration::from_millis(rng.gen_range(10..100)));
        if rng.gen_range(0..4) == 0 {
            sh.cache.sync_all().unwrap();
        } else {
            sh.handle(rng.gen_range(0..FILES)).sync_data().unwrap();
        }
    }
}

#[test]
fn writers_readers_cutters_replacers_and_syncs_over_many_files_in_a_small_cache() {
    let run = secs();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("foliocache-soak-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let cache = TestCache::bytes(CAPACITY).build();
    let slots = (0..FILES)
        .map(|s| {
            let path = dir.join(format!("file-{s}"));
            let mut data = Vec::with_capacity(SIZE as usize);
            for r in 0..REGIONS {
                data.extend_from_slice(&region_bytes(s, r, 0, REGION));
            }
            fs::write(&path, &data).unwrap();
            let file = cache
                .open_options()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap();
            Slot {
                path,
                file: Mutex::new(file),
                regions: (0..REGIONS)
                    .map(|_| RegionState {
                        lock: RwLock::new(()),
                        version: AtomicU64::new(0),
                        zero_from: AtomicU64::new(REGION as u64),
                    })
                    .collect(),
                generation: AtomicU64::new(0),
            }
        })
        .collect();
    let sh = std::sync::Arc::new(Shared {
        cache: cache.clone(),
        slots,
        stop: AtomicBool::new(false),
        versions: AtomicU64::new(0),
    });
    let start = Instant::now();
    let sh2 = sh.clone();
    within(run + HANG, "the soak's threads", move || {
        let sh = &*sh2;
        std::thread::scope(|s| {
            for t in 0..3u64 {
                s.spawn(move || writer(sh, 10 + t));
                s.spawn(move || reader(sh, 20 + t));
            }
            s.spawn(move || cutter(sh, 30));
            s.spawn(move || replacer(sh, 40));
            s.spawn(move || syncer(sh, 50));
            std::thread::sleep(run);
            sh.stop.store(true, SeqCst);
        });
    });
    let elapsed = start.elapsed();
    let s = cache.stats();
    println!(
        "soak: {:.1} s, {} versions written, {} throttled writes, {} evictions, {} IO writes, \
         {} MiB written back",
        elapsed.as_secs_f64(),
        sh.versions.load(SeqCst),
        s.throttled,
        s.evictions,
        s.io_writes,
        s.io_write_bytes >> 20
    );
    assert!(s.evictions > 0, "the data never exceeded the cache: {s:?}");
    cache.sync_all().unwrap();
    for (i, slot) in sh.slots.iter().enumerate() {
        let mut want = Vec::with_capacity(SIZE as usize);
        for r in 0..REGIONS {
            want.extend_from_slice(&sh.expected(i, r));
        }
        let f = sh.handle(i);
        assert_eq!(f.len(), SIZE);
        let mut got = vec![0u8; SIZE as usize];
        assert_eq!(f.read_at(&mut got, 0).unwrap(), SIZE as usize);
        assert_same(&format!("file {i} through the cache"), &got, &want);
        assert_same(
            &format!("file {i} on disk"),
            &fs::read(&slot.path).unwrap(),
            &want,
        );
    }
    let s = cache.stats();
    assert_eq!(s.dirty_bytes, 0, "{s:?}");
    assert_eq!(s.free_bytes + s.bytes_cached, s.capacity_bytes, "{s:?}");
    drop(sh);
    let _ = fs::remove_dir_all(&dir);
}
