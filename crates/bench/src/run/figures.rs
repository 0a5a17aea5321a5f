//! The parts of a [`RunRecord`] made from what a run measured: what ran,
//! its bandwidth, latency, CPU and timelines ([`measured`]), the hot
//! reader's figures, and the notes that explain a figure.

use super::{HotRun, RunCtx, MMAP_COLLAPSE};
use crate::hot::MissProbe;
use crate::job::Measured;
use crate::report::{
    self, CacheFigures, Cpu, FineTimeline, HotFigures, Latency, Perf, RunJob, RunRecord, Timing,
};
use crate::spec::{EngineKind, EngineSpec, JobSpec};
use crate::units::{fmt_size_approx, GIB_F64};

/// The record's measured fields (what ran, bandwidth, latency, CPU,
/// timelines) of a run of `seconds`, `setup_s` of them its setup; the
/// caller fills in the rest.
pub fn measured(
    m: Measured,
    job: &JobSpec,
    ctx: &RunCtx<'_>,
    seconds: f64,
    setup_s: Option<f64>,
) -> RunRecord {
    let secs = seconds.max(1e-9);
    let ns = |ticks: f64| (ticks * m.ns_per_tick).round() as u64;
    let cpu = m.cpu_user + m.cpu_sys;
    RunRecord {
        job: RunJob {
            rw: job.rw.name(),
            bs: job.bs,
            numjobs: job.numjobs,
            shared: job.shared,
            file_size: job.file_size,
            dist: job.dist_name(),
            runtime_s: job.runtime.map(|d| d.as_secs_f64()),
            buf_offset: ctx.plan.buf_offset,
            consume: ctx.plan.consume,
            cold: ctx.mode.cold,
        },
        perf: Perf {
            bytes: m.bytes,
            ops: m.ops,
            seconds,
            bw_bytes: m.bytes as f64 / secs,
            iops: m.ops as f64 / secs,
            lat_ns: Latency {
                p50: ns(m.hist.percentile(0.50) as f64),
                p75: ns(m.hist.percentile(0.75) as f64),
                p99: ns(m.hist.percentile(0.99) as f64),
                p999: ns(m.hist.percentile(0.999) as f64),
                mean: m.hist.mean() * m.ns_per_tick,
                max: ns(m.hist.max() as f64),
            },
            cpu_s: Cpu {
                user: m.cpu_user,
                sys: m.cpu_sys,
            },
            cpu_s_per_gib: if m.bytes > 0 {
                cpu / (m.bytes as f64 / GIB_F64)
            } else {
                0.0
            },
            cpu_us_per_op: if m.ops > 0 {
                cpu * 1e6 / m.ops as f64
            } else {
                0.0
            },
        },
        timing: Timing {
            sync_s: m.sync_s,
            setup_s,
            timeline_bw_bytes: m.timeline,
            fine_timeline: (job.bins_per_second > 1).then(|| FineTimeline {
                interval_s: job.interval().as_secs_f64(),
                bw_bytes: m.fine_timeline,
            }),
        },
        ..RunRecord::default()
    }
}

/// The hot reader's figures, beside a job that moved `job_bytes` while
/// they were counted.
pub fn hot(h: &HotRun, job: &JobSpec, job_bytes: u64) -> HotFigures {
    let told = h.ready.probe != MissProbe::Unavailable;
    HotFigures {
        file_size: job.hot.map_or(0, |s| s.file_size),
        bs: job.hot.map_or(0, |s| s.bs),
        warm_cached_pages: h.ready.cached_pages,
        pages: h.ready.pages,
        reads: h.reads,
        misses: h.misses,
        hit_ratio: (told && h.reads > 0).then(|| (h.reads - h.misses) as f64 / h.reads as f64),
        misses_per_gib: (told && job_bytes > 0)
            .then(|| h.misses as f64 / (job_bytes as f64 / f64::from(1u32 << 30))),
        reads_per_s: if h.seconds > 0.0 {
            h.reads as f64 / h.seconds
        } else {
            0.0
        },
        miss_detection: h.ready.probe.describe().to_string(),
        rate_limit_per_s: job.hot.map_or(0, |s| s.rate),
    }
}

/// Why an mmap run read many times what it delivered under a memory
/// limit, where it did.
pub fn mmap_collapse(spec: &EngineSpec, job: &JobSpec, cache: &CacheFigures) -> Option<String> {
    let (EngineKind::Mmap, Some(limit), Some(amp)) =
        (spec.kind, job.memory_limit, cache.read_amplification)
    else {
        return None;
    };
    (amp > MMAP_COLLAPSE).then(|| {
        format!(
            "mmap read {amp:.0} bytes from the device per byte delivered: a fault reads \
             around the page it wants (readahead, do_sync_mmap_readahead) and fault-around \
             maps its neighbours (filemap_map_pages), and under the memory limit of {} \
             those pages are reclaimed before they are read: why mmap collapses on data \
             larger than memory",
            fmt_size_approx(limit)
        )
    })
}

/// A warning where `rec`'s DONTCACHE reads look cached
/// ([`report::dontcache_ignored`]).
pub fn dontcache_ignored(rec: &RunRecord) -> Option<String> {
    if !report::dontcache_ignored(rec) {
        return None;
    }
    let f = rec
        .cache
        .foliocache
        .as_ref()
        .map_or((0, 0), |f| (f.evictions, f.bytes_cached));
    Some(format!(
        "warning: no folio was dropped behind these DONTCACHE reads (dropbehind_drops \
         unchanged), yet {} folios were evicted and {} is cached at the end: the library \
         does not act on ReadFlags::DONTCACHE yet, so these are cached reads",
        f.0,
        fmt_size_approx(f.1)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hot::Ready;
    use crate::spec::{HotSpec, Rw};

    fn hot_run(probe: MissProbe) -> HotRun {
        HotRun {
            ready: Ready {
                cached_pages: 16,
                pages: 16,
                probe,
            },
            reads: 1000,
            misses: 250,
            seconds: 2.0,
        }
    }

    #[test]
    fn hot_misses_are_per_gib_the_job_moved() {
        let job = JobSpec {
            hot: Some(HotSpec {
                file_size: 64 << 10,
                bs: 4096,
                rate: 500,
            }),
            ..JobSpec::new(Rw::Read, 64 << 10, 1 << 30, Vec::new())
        };
        let h = hot(&hot_run(MissProbe::FolioNowait), &job, 2 << 30);
        assert_eq!(h.hit_ratio, Some(0.75));
        assert_eq!(h.misses_per_gib, Some(125.0));
        assert_eq!(h.reads_per_s, 500.0);
        assert_eq!(
            hot(&hot_run(MissProbe::FolioNowait), &job, 0).misses_per_gib,
            None
        );
        let untold = hot(&hot_run(MissProbe::Unavailable), &job, 2 << 30);
        assert_eq!((untold.hit_ratio, untold.misses_per_gib), (None, None));
    }
}
