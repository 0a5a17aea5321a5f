//! A read run's figures per read: its hit ratio (foliocache's from its
//! statistics, the page-cache engines' from the device reads the process
//! made), its read amplification (foliocache's own reads, the others'
//! device reads, over the bytes delivered), and for foliocache over random
//! offsets (uniform or zipfian) that missed, the hit ratios that an exact
//! LRU of its capacity, Belady's MIN and an unbounded cache get over the
//! same offsets (a run without a miss needs no replay to judge it: no
//! policy would have done better).

use crate::disk::DeviceReads;
use crate::job::{Measured, Offsets};
use crate::lru;
use crate::report::{CacheFigures, FolioFigures, LruFigures};
use crate::spec::JobSpec;
use crate::sys::PAGE;

/// The figures per read of run `m` of `job` (the other cache figures left
/// to the caller): `page_cache` for an engine on the kernel's page cache,
/// `folio` for a foliocache engine (of capacity `capacity`), `device` the
/// device's reads over the run.
pub fn figures(
    m: &Measured,
    job: &JobSpec,
    page_cache: bool,
    folio: Option<&FolioFigures>,
    device: Option<&DeviceReads>,
    capacity: Option<u64>,
) -> CacheFigures {
    let mut p = CacheFigures::default();
    if job.rw.is_write() || job.memory || m.ops == 0 {
        return p;
    }
    match (folio, device) {
        (Some(f), _) if f.hits + f.misses > 0 => {
            p.hit_ratio = Some(f.hits as f64 / (f.hits + f.misses) as f64);
            p.hit_ratio_from = Some("foliocache statistics");
        }
        (None, Some(d)) if page_cache => {
            // The process's own device bytes, a read of `bs` per miss,
            // where the kernel counts them; else the whole device's reads.
            let misses = match d.process_bytes {
                Some(b) if job.bs > 0 => b.div_ceil(job.bs),
                _ => d.reads,
            };
            p.hit_ratio = Some(1.0 - misses.min(m.ops) as f64 / m.ops as f64);
            p.hit_ratio_from = Some("device reads");
        }
        _ => {}
    }
    if m.bytes > 0 {
        // foliocache's own reads, else the process's device bytes, else
        // (no per-process counts) the whole device's.
        let read = match (folio, device) {
            (Some(f), _) => Some(f.io_bytes),
            (None, Some(d)) => Some(d.process_bytes.unwrap_or(d.bytes)),
            (None, None) => None,
        };
        p.read_amplification = read.map(|b| b as f64 / m.bytes as f64);
    }
    let missed = folio.is_some_and(|f| f.misses > 0);
    if let (true, Some(cap), true) = (missed, capacity, job.rw.is_random()) {
        let pages = cap / PAGE as u64;
        let mut streams: Vec<Offsets> = (0..job.numjobs)
            .map(|j| Offsets::of_thread(job, j))
            .collect();
        let replayed = lru::replay(
            usize::try_from(pages).unwrap_or(usize::MAX),
            PAGE as u64,
            job.bs,
            &m.thread_ops,
            |t| streams[t].next(),
        );
        p.lru = replayed.map(|r| LruFigures {
            capacity_pages: pages,
            hit_ratio: r.lru,
            min_hit_ratio: r.min,
            unbounded_hit_ratio: r.unbounded,
            sampled_one_in: r.sampled_one_in,
        });
    }
    p
}
