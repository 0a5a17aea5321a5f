//! The advisor's workloads shaped like programs a newcomer ran, beside the
//! generators' traces: each runs through a cache and returns the hit
//! ratio it measured and the curve at its end.
//!
//! - **One pass over many small files** (`find -type f | xargs cat` over
//!   a tree of 20,000 files): each file opened, read whole in 4 KiB reads
//!   and closed, never read again. Nothing is read twice, so no byte
//!   comes from memory at any size (a page readahead brought in is a
//!   miss where it is read); the curve must say so at 2x. (The sample's keys were once the
//!   mapping's address, which a new file is often given after an old one
//!   closes, and this pass showed 52-69 % at 2x where 2.5-14 % was
//!   measured.)
//! - **A pool of workers** (a forked pool of 8 reading random 64 KiB
//!   ranges of one file of 2 C, readahead on): the reads span 16 pages
//!   each, where the generators' traces read one; and a read whose
//!   pages before it are cached starts a readahead window over the next
//!   range too (`readahead.rs`, the look-back), which the curve's
//!   simulations do not model: its pages count as misses where read.

use std::ops::Range;
use std::path::Path;

use anyhow::Result;
use backing::MemBacking;
use foliocache::{File, HitRatioCurve, SharedCache, SharedFile};

use super::{cache, hit_ratio, measured_from, PAGE, TRACE_CAPACITIES};

/// The one-pass workload's name in the table.
pub(super) const ONE_PASS: &str = "one pass, 20k files";

/// The pool's name in the table.
pub(super) const POOL: &str = "pool 8x64K over 2C";

/// Files the pass reads.
const FILES: u64 = 20_000;

/// Workers of the pool, and the pages of each of their reads (64 KiB).
const WORKERS: u64 = 8;
const READ_PAGES: u64 = 16;

/// One pass over [`FILES`] files of about 10 C in all (2 pages each at
/// least), each opened, read in 4 KiB reads and closed, through a cache
/// of `capacity` bytes (C of `c` pages): the hit ratio over the pass and
/// the curve at its end.
pub(super) fn one_pass(c: u64, capacity: u64) -> Result<(f64, HitRatioCurve)> {
    let cache = cache(capacity)?;
    let pages = (10 * c / FILES).max(2);
    let mut buf = vec![0u8; PAGE as usize];
    let before = cache.stats();
    for i in 0..FILES {
        // A file of its own content (its number in each page), so that a
        // read of one file's page in another's would show.
        let data = vec![i as u8; (pages * PAGE) as usize];
        let file = cache.open_backing(MemBacking::with_data(data))?;
        for p in 0..pages {
            file.read_at(&mut buf, p * PAGE)?;
            anyhow::ensure!(buf.iter().all(|&b| b == i as u8), "file {i}: wrong bytes");
        }
    }
    Ok((hit_ratio(&before, &cache.stats()), cache.hit_ratio_curve()))
}

/// [`WORKERS`] threads reading random 64 KiB ranges (aligned) of a file
/// of 2 C, [`TRACE_CAPACITIES`] C of pages in all, through a cache of
/// `capacity` bytes (C of `c` pages), readahead as the cache sets it:
/// the hit ratio over the last `window` page reads (or the second half:
/// [`split`]) and the curve at its end.
pub(super) fn pool(c: u64, capacity: u64, window: Option<u64>) -> Result<(f64, HitRatioCurve)> {
    let cache = cache(capacity)?;
    let pages = 2 * c;
    let file = cache.open_backing(MemBacking::with_data(vec![0u8; (pages * PAGE) as usize]))?;
    let reads = TRACE_CAPACITIES * c / READ_PAGES / WORKERS;
    let from = split(reads, window);
    workers(&file, pages, 0..from)?;
    let before = cache.stats();
    workers(&file, pages, from..reads)?;
    Ok((hit_ratio(&before, &cache.stats()), cache.hit_ratio_curve()))
}

/// The group's pool's name in the table.
pub(super) const GROUP_POOL: &str = "group: pool 8x64K";

/// The group's zipf's name in the table.
pub(super) const GROUP_ZIPF: &str = "group: zipf 0.99";

/// The pool ([`pool`]) through the group's cache (`SharedCache`) of
/// `capacity` bytes, over a sparse file of 2 C made in `dir`: the group's
/// hit ratio over the last `window` page reads (or the second half) and
/// the group's curve at its end (`SharedCache::hit_ratio_curve`).
pub(super) fn group_pool(
    dir: &Path,
    c: u64,
    capacity: u64,
    window: Option<u64>,
) -> Result<(f64, HitRatioCurve)> {
    let pages = 2 * c;
    let reads = TRACE_CAPACITIES * c / READ_PAGES / WORKERS;
    let from = split(reads, window);
    group_run(dir, pages, capacity, |file, part| {
        let range = if part == 0 { 0..from } else { from..reads };
        workers(file, pages, range)
    })
}

/// Where each worker's measured reads start, of its `reads` (of
/// [`READ_PAGES`] each, [`WORKERS`] side by side): the window's page
/// reads' worth at the end (`measured_from`).
fn split(reads: u64, window: Option<u64>) -> u64 {
    let window = window.map(|w| w / (READ_PAGES * WORKERS));
    measured_from(reads as usize, window) as u64
}

/// The trace of `trace` (a file of `pages`) through the group's cache of
/// `capacity` bytes, read by [`WORKERS`] threads, each every
/// [`WORKERS`]th read in turn; as [`group_pool`].
pub(super) fn group_trace(
    dir: &Path,
    trace: &[u64],
    pages: u64,
    capacity: u64,
    window: Option<u64>,
) -> Result<(f64, HitRatioCurve)> {
    let from = measured_from(trace.len(), window);
    group_run(dir, pages, capacity, |file, part| {
        let part = if part == 0 {
            &trace[..from]
        } else {
            &trace[from..]
        };
        std::thread::scope(|s| {
            let running: Vec<_> = (0..WORKERS as usize)
                .map(|w| {
                    s.spawn(move || -> Result<()> {
                        let mut buf = vec![0u8; PAGE as usize];
                        for p in part.iter().skip(w).step_by(WORKERS as usize) {
                            file.read_at(&mut buf, p * PAGE)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            running
                .into_iter()
                .try_for_each(|w| w.join().expect("a group worker panicked"))
        })
    })
}

/// A group's cache of `capacity` bytes over a sparse file of `pages` in
/// `dir`, read by `halves` (the first part, 0, fills it; the second, 1,
/// is measured): the group's hit ratio over the second part, in bytes,
/// and the group's curve.
fn group_run(
    dir: &Path,
    pages: u64,
    capacity: u64,
    halves: impl Fn(&dyn Reader, usize) -> Result<()>,
) -> Result<(f64, HitRatioCurve)> {
    let path = dir.join("advisor-group");
    let f = std::fs::File::create(&path)?;
    f.set_len(pages * PAGE)?;
    drop(f);
    let cache = SharedCache::new(capacity)?;
    let file = cache.open(std::fs::File::open(&path)?)?;
    halves(&file, 0)?;
    let before = cache.stats();
    halves(&file, 1)?;
    let after = cache.stats();
    let curve = cache
        .hit_ratio_curve()
        .ok_or_else(|| anyhow::anyhow!("the group's curve was not published"))?;
    drop(file);
    std::fs::remove_file(&path)?;
    let read = after.group_read_bytes - before.group_read_bytes;
    let memory = after.group_memory_bytes() - before.group_memory_bytes();
    Ok((memory as f64 / read.max(1) as f64, curve))
}

/// A file the workers read at offsets: a private cache's or the group's.
pub(super) trait Reader: Sync {
    /// Reads into `buf` at `offset`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize>;
}

impl Reader for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        File::read_at(self, buf, offset)
    }
}

impl Reader for SharedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        SharedFile::read_at(self, buf, offset)
    }
}

/// The pool's reads numbered `reads` of each worker, the workers side by
/// side: each its own draws (splitmix64 of its number and a counter, as
/// the traces'), a range of [`READ_PAGES`] aligned in a file of `pages`.
fn workers(file: &dyn Reader, pages: u64, reads: Range<u64>) -> Result<()> {
    let ranges = pages / READ_PAGES;
    std::thread::scope(|s| {
        let running: Vec<_> = (0..WORKERS)
            .map(|w| {
                let reads = reads.clone();
                s.spawn(move || -> Result<()> {
                    let mut buf = vec![0u8; (READ_PAGES * PAGE) as usize];
                    for i in reads {
                        let n = (w << 40 | i).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                        let at = crate::data::mix(n) % ranges * READ_PAGES * PAGE;
                        file.read_at(&mut buf, at)?;
                    }
                    Ok(())
                })
            })
            .collect();
        running
            .into_iter()
            .try_for_each(|w| w.join().expect("a pool worker panicked"))
    })
}
