//! The object store's tiers (`CachedStore::tier_curves`) on the advisor's
//! workloads: the traces' 4 KiB reads as `get_range`s of one object in
//! `InMemory`, through a `CachedStore`.
//!
//! - **The memory tier**: the store's cache of C, its curve (the cache's:
//!   the store's hits are lent from its folios, counted and sampled as a
//!   read's) beside caches of each size, as the other rows.
//! - **The disk tier**: a zipf 0.99 trace over 4 C through a memory of
//!   C / 4 and a tier of C (in 64 KiB chunks), with the read-around the
//!   store measures (none against `InMemory`) and with 256 KiB windows;
//!   the tier's curve at its end beside tiers of 0.5x and 2x run with
//!   the same reads: hit ratio and GETs, with the target's verdict (GETs
//!   within 10 %). Each run is over the whole trace (the tier's curve
//!   covers its reads since it was opened). The same trace at 1x with
//!   the tier's estimator off (`DiskTier::with_curve`), interleaved with
//!   it on: the estimator's cost, as the ratio of the two runs' times.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use backing::MemBacking;
use foliocache::HitRatioCurve;
use foliocache_object_store::disk::SLOT;
use foliocache_object_store::{CachedStore, DiskTier, TierCurve};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::ObjectStoreExt;

use super::{cache, hit_ratio, measured_from, PAGE};

/// The object's path.
fn path() -> Path {
    Path::from("advisor/object")
}

/// A runtime for one run.
fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// An `InMemory` store holding an object of `pages` pages.
async fn remote(pages: u64) -> Result<InMemory> {
    let inner = InMemory::new();
    inner
        .put(&path(), vec![7u8; (pages * PAGE) as usize].into())
        .await?;
    Ok(inner)
}

/// Reads `trace`'s pages through `s`.
async fn replay(s: &CachedStore<InMemory>, trace: &[u64]) -> Result<()> {
    let p = path();
    for &pg in trace {
        let got = s.get_range(&p, pg * PAGE..(pg + 1) * PAGE).await?;
        anyhow::ensure!(got.len() as u64 == PAGE, "a short read");
    }
    Ok(())
}

/// `trace` (an object of `pages`) through a store whose cache has
/// `capacity` bytes: the hit ratio over the trace's last `window` reads
/// (or its second half: `measured_from`), and the memory tier's curve at
/// its end (the cache's; checked to be the one `tier_curves` gives).
pub(super) fn memory(
    trace: &[u64],
    pages: u64,
    capacity: u64,
    window: Option<u64>,
) -> Result<(f64, HitRatioCurve)> {
    runtime()?.block_on(async {
        let s = CachedStore::new(remote(pages).await?, cache(capacity)?);
        let from = measured_from(trace.len(), window);
        replay(&s, &trace[..from]).await?;
        let before = s.cache().stats();
        replay(&s, &trace[from..]).await?;
        let curve = s.cache().hit_ratio_curve();
        let tiers = s.tier_curves().memory;
        let same = curve.points.iter().zip(&tiers.points);
        anyhow::ensure!(
            same.clone().all(|(a, b)| a.hit_ratio == b.hit_ratio),
            "the memory tier's curve is not the cache's: {tiers:?} against {curve:?}"
        );
        Ok((hit_ratio(&before, &s.cache().stats()), curve))
    })
}

/// What one run through a disk tier measured.
struct DiskRun {
    /// The tier's chunk lookups found, over all.
    hit_ratio: f64,
    /// The store's GETs.
    gets: u64,
    /// The tier's curve at the end.
    curve: TierCurve,
    /// The run's wall time, in seconds.
    secs: f64,
}

/// `trace` through a store with a memory of `memory` bytes and a tier of
/// `slots` slots (`around`: the read-around window, `None` for the one
/// the store measures; `curve`: the tier's estimator on).
fn disk_run(
    trace: &[u64],
    pages: u64,
    memory: u64,
    slots: u64,
    around: Option<u64>,
    curve: bool,
) -> Result<DiskRun> {
    runtime()?.block_on(async {
        let tier = DiskTier::with_backing(MemBacking::new(), slots * SLOT as u64)?;
        let tier = Arc::new(tier.with_curve(curve));
        let mut b =
            CachedStore::builder(remote(pages).await?, cache(memory)?).disk_tier(tier.clone());
        if let Some(w) = around {
            b = b.read_around(w);
        }
        let s = b.build();
        let t = Instant::now();
        replay(&s, trace).await?;
        let secs = t.elapsed().as_secs_f64();
        let st = tier.stats();
        Ok(DiskRun {
            hit_ratio: st.hits as f64 / (st.hits + st.misses).max(1) as f64,
            gets: s.stats().remote_gets,
            curve: s.tier_curves().disk.expect("a tier"),
            secs,
        })
    })
}

/// The disk tier's rows for `trace` (zipf over an object of `pages`;
/// C of `c` pages): for each read-around setting, predicted against
/// measured at 0.5x and 2x, and the verdict of the GETs' target; then
/// the estimator's cost. Each line to `say`.
pub(super) fn disk_rows(
    trace: &[u64],
    pages: u64,
    c: u64,
    say: &mut dyn FnMut(String),
) -> Result<()> {
    let memory = c * PAGE / 4;
    // About C, in whole sets of 16 slots at 0.5x too (a tier's slots are
    // whole sets: a tier asked for 1.5 sets has 1).
    let slots = (c * PAGE / SLOT as u64).div_ceil(32).max(1) * 32;
    for (name, around) in [("measured", None), ("256 KiB", Some(256 << 10))] {
        let one = disk_run(trace, pages, memory, slots, around, true)?;
        let mut cells = Vec::new();
        let mut met = true;
        for ratio in [0.5, 2.0] {
            let at = disk_run(
                trace,
                pages,
                memory,
                (slots as f64 * ratio) as u64,
                around,
                true,
            )?;
            let p = one.curve.at(ratio).expect("a point");
            let gets = p.remote_gets.unwrap_or(f64::NAN);
            let off = gets / at.gets.max(1) as f64 - 1.0;
            met &= off.abs() <= 0.10;
            cells.push(format!(
                "{ratio}x hit {:.3}/{:.3} GETs {gets:.0}/{} ({:+.1} %)",
                p.hit_ratio,
                at.hit_ratio,
                at.gets,
                100.0 * off
            ));
        }
        say(format!(
            "disk tier, zipf 0.99 over 4C, memory C/4, tier {slots} slots, read-around {name}: \
             pred/meas {}; 1x hit {:.3}, {} GETs; GETs within 10 % at 0.5x and 2x: {}",
            cells.join(", "),
            one.hit_ratio,
            one.gets,
            if met { "met" } else { "NOT met" }
        ));
    }
    // The estimator's cost: the 1x run with it on and off, interleaved.
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        on.push(disk_run(trace, pages, memory, slots, None, true)?.secs);
        off.push(disk_run(trace, pages, memory, slots, None, false)?.secs);
    }
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    say(format!(
        "disk tier's estimator: the 1x run {:.3} s with it on, {:.3} s off (fastest of 2, \
         interleaved): {:.3}x",
        min(&on),
        min(&off),
        min(&on) / min(&off)
    ));
    Ok(())
}
