//! The `hits` job of the `objectstore` scenario: issue 68's "cached reads
//! at least 0.9x foliocache's hits on a local file of the same size".
//!
//! One object of M/2 bytes, every byte of it cached, read at random
//! aligned offsets from one task, three ways side by side:
//!
//! - `foliocache`: [`CachedStore::get_range`] over `LocalFileSystem` (the
//!   object fetched once, then every read a hit in memory);
//! - the local file: foliocache's own [`foliocache::File::read_at`] into a
//!   buffer of the caller's, over a file of the same bytes (`O_DIRECT`);
//! - the trait's floor: `object_store`'s `InMemory` store holding the
//!   object, whose `get_range` hands back a slice of bytes it already has
//!   (no lookup of pages, no copy): what any `ObjectStore` costs per call
//!   (the request's future, its `GetResult` and stream, the `Bytes`).
//!
//! The three alternate, three times each at each size (4 KiB and 64 KiB);
//! each one's best pass counts. One read in 64 is checked, against the
//! object's bytes in memory (a compare, not a regeneration of them, so
//! that the check costs each reader little and alike).

use std::path::Path as FsPath;
use std::time::Instant;

use anyhow::{ensure, Result};
use bytes::Bytes;
use foliocache_object_store::CachedStore;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use super::{object_bytes, ObjectBench, HITS};
use crate::report::{RunJob, RunRecord};
use crate::scenario::rounds::scatter;

/// The object's index for [`object_bytes`] (none of the others').
const OBJ: u32 = u32::MAX;
/// The read sizes, in the order measured.
const SIZES: [u64; 2] = [4 << 10, 64 << 10];
/// Passes of each reader at each size.
const PASSES: usize = 3;
/// One read in this many is checked.
const CHECK_EVERY: u64 = 64;

/// The best pass of each reader at one size: reads a second.
struct Rates {
    store: f64,
    local: f64,
    floor: f64,
}

/// Runs the job over an object written under `dir`: its record (the
/// cached store's figures at 4 KiB, the comparisons in its notes).
///
/// # Errors
/// The object could not be written or read, or a read was wrong.
pub fn run(b: &ObjectBench, dir: &FsPath, rt: &tokio::runtime::Runtime) -> Result<RunRecord> {
    let size = (b.m / 2) & !((64 << 10) - 1);
    ensure!(size >= 1 << 20, "objectstore hits: M/2 below 1 MiB");
    let data = object_bytes(OBJ, 0..size);
    let remote = dir.join("hits-remote");
    std::fs::create_dir_all(&remote)?;
    std::fs::write(remote.join("object"), &data)?;
    let local_path = dir.join("hits-local");
    std::fs::write(&local_path, &data)?;
    let path = Path::from("object");

    let cache = foliocache::Cache::builder()
        .capacity(b.m as usize)
        .build()?;
    let store = CachedStore::new(LocalFileSystem::new_with_prefix(&remote)?, cache);
    let local_cache = foliocache::Cache::builder()
        .capacity(b.m as usize)
        .build()?;
    let local = local_cache.open(&local_path)?;
    let floor = InMemory::new();
    let data = Bytes::from(data);
    rt.block_on(async {
        floor.put(&path, data.clone().into()).await?;
        // Everything cached: the whole object through each.
        let mut buf = vec![0; 1 << 20];
        for at in (0..size).step_by(1 << 20) {
            let got = store.get_range(&path, at..at + (1 << 20)).await?;
            ensure!(got == data.slice(at as usize..at as usize + (1 << 20)));
            ensure!(local.read_at(&mut buf, at)? == buf.len());
        }
        anyhow::Ok(())
    })?;
    let misses = store.stats().misses;

    let ops = (b.ops * 100).max(20_000);
    let mut rates = Vec::new();
    for len in SIZES {
        let mut best = Rates {
            store: 0.0,
            local: 0.0,
            floor: 0.0,
        };
        let slots = size / len;
        let at = |i: u64| (scatter(i) % slots) * len;
        for _ in 0..PASSES {
            let pass = Pass {
                path: &path,
                data: &data,
                len,
                slots,
                ops,
            };
            best.store = best.store.max(pass.through(rt, &store)?);

            let mut buf = vec![0; len as usize];
            let t = Instant::now();
            for i in 0..ops {
                let off = at(i);
                ensure!(local.read_at(&mut buf, off)? == buf.len());
                if i % CHECK_EVERY == 0 {
                    same(&data, &(off..off + len), &buf)?;
                }
            }
            best.local = best.local.max(ops as f64 / t.elapsed().as_secs_f64());

            best.floor = best.floor.max(pass.through(rt, &floor)?);
        }
        rates.push((len, best));
    }
    ensure!(
        store.stats().misses == misses,
        "objectstore hits: the cached store missed after the object was cached"
    );
    let _ = std::fs::remove_dir_all(&remote);
    let _ = std::fs::remove_file(&local_path);
    Ok(record(&rates, ops))
}

/// One pass of an `ObjectStore` reader.
struct Pass<'a> {
    path: &'a Path,
    data: &'a [u8],
    len: u64,
    slots: u64,
    ops: u64,
}

impl Pass<'_> {
    /// `ops` reads of `len` bytes at `len`-aligned offsets through `store`:
    /// reads a second.
    fn through(&self, rt: &tokio::runtime::Runtime, store: &impl ObjectStore) -> Result<f64> {
        let t = Instant::now();
        rt.block_on(async {
            for i in 0..self.ops {
                let at = (scatter(i) % self.slots) * self.len;
                let range = at..at + self.len;
                let got = store.get_range(self.path, range.clone()).await?;
                if i % CHECK_EVERY == 0 {
                    same(self.data, &range, &got)?;
                }
            }
            anyhow::Ok(())
        })?;
        Ok(self.ops as f64 / t.elapsed().as_secs_f64())
    }
}

/// Checks `got` is `range` of the object `data`.
fn same(data: &[u8], range: &std::ops::Range<u64>, got: &[u8]) -> Result<()> {
    ensure!(
        got == &data[range.start as usize..range.end as usize],
        "objectstore hits: {range:?}: not the object's bytes"
    );
    Ok(())
}

/// The job's record: the cached store's 4 KiB figures; every size's
/// rates and ratios in its notes (what `compare` prints).
fn record(rates: &[(u64, Rates)], ops: u64) -> RunRecord {
    let (len, first) = &rates[0];
    let mut r = RunRecord {
        engine: super::FOLIO.to_string(),
        ..RunRecord::default()
    };
    r.job = RunJob {
        rw: HITS,
        bs: *len,
        numjobs: 1,
        dist: Some("uniform".into()),
        ..RunJob::default()
    };
    r.perf.ops = ops;
    r.perf.bytes = ops * len;
    r.perf.seconds = ops as f64 / first.store;
    r.perf.iops = first.store;
    r.perf.bw_bytes = first.store * *len as f64;
    r.perf.cpu_us_per_op = f64::NAN;
    r.perf.cpu_s_per_gib = f64::NAN;
    r.cache.hit_ratio = Some(1.0);
    r.cache.hit_ratio_from = Some("every read after the object was cached (no miss counted)");
    for (len, x) in rates {
        r.notes.push(format!(
            "hits {} KiB: CachedStore::get_range {:.0}/s, foliocache File::read_at on a local \
             file {:.0}/s, InMemory::get_range {:.0}/s: store / local file {:.2}x (target \
             0.9x), InMemory / local file {:.2}x (the ObjectStore call's floor)",
            len >> 10,
            x.store,
            x.local,
            x.floor,
            x.store / x.local,
            x.floor / x.local
        ));
    }
    r
}
