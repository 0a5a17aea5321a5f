//! A cache's figures as Prometheus metrics (the `prometheus` feature), for
//! a service that exports its metrics through `prometheus-client`'s
//! registry (the crate the Prometheus project keeps for Rust, with
//! OpenMetrics text encoding).
//!
//! [`register`] adds a collector that reads [`Cache::stats`] and
//! [`Cache::memory`] at each scrape: the cache counts as it always does
//! (its sharded counters, no second set of counters on the read path), and
//! a scrape costs a sum over the shards. The collector holds the cache
//! weakly: a dropped cache's metrics disappear from the registry's output.
//!
//! ```
//! # fn main() -> std::io::Result<()> {
//! use prometheus_client::registry::Registry;
//!
//! let cache = foliocache::Cache::builder().capacity(8 << 20).build()?;
//! let mut registry = Registry::default();
//! // One label per cache, to tell several apart.
//! foliocache::metrics::register(
//!     &cache,
//!     registry.sub_registry_with_label(("cache".into(), "main".into())),
//! );
//! let mut text = String::new();
//! prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
//! assert!(text.contains("foliocache_hits_total{cache=\"main\"} 0"));
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::{Arc, Weak};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

mod server;
pub use server::{serve, MetricsServer};

use crate::loaded::Loaded;
use crate::mm::CacheInner;
use crate::{Cache, CacheStats, Latencies, MemoryUsage, LATENCY_BUCKETS};

/// Registers `cache`'s metrics in `registry`, named `foliocache_*`.
/// Register several caches under sub-registries with a label each (see
/// the module's example).
pub fn register(cache: &Cache, registry: &mut Registry) {
    registry.register_collector(Box::new(CacheCollector {
        cache: Arc::downgrade(&cache.inner),
        warm: Arc::downgrade(&cache.warm),
    }));
}

/// Reads a cache's figures at each scrape (see [`register`]).
struct CacheCollector {
    cache: Weak<CacheInner>,
    warm: Weak<Loaded>,
}

impl fmt::Debug for CacheCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheCollector")
            .field("live", &(self.cache.strong_count() > 0))
            .finish()
    }
}

/// What a metric is, for its descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A count that only grows (written `NAME_total`).
    Counter,
    /// A value now, that may go down.
    Gauge,
}

/// One metric family of figures another crate keeps (see [`Figures`]):
/// its descriptor and its samples, one per label value.
#[derive(Debug)]
pub struct Family {
    /// Its name, without the `_total` a counter gets or its unit's suffix.
    pub name: &'static str,
    /// Its help text.
    pub help: &'static str,
    /// A counter or a gauge.
    pub kind: Kind,
    /// Its unit, if any (`Unit::Bytes` adds `_bytes` to the name).
    pub unit: Option<Unit>,
    /// Its values: each with one label (name, value), or none.
    pub samples: Vec<(Option<(&'static str, &'static str)>, u64)>,
}

/// Figures a crate built on foliocache keeps beside a cache's own (an
/// object store's requests, a disk tier's hits), read at each scrape by
/// the collector [`register_figures`] adds. The cache's [`register`]
/// writes its figures the same way; nothing here counts, a scrape reads.
pub trait Figures: Send + Sync + fmt::Debug + 'static {
    /// The families to write now, in order. An implementation holds what
    /// it reads weakly and returns nothing once that is gone, as the
    /// cache's collector does.
    fn families(&self) -> Vec<Family>;
}

/// Registers `figures` in `registry`: at each scrape, the families it
/// returns are written as counters and gauges. For a crate that keeps
/// figures of its own beside a cache's (`foliocache-object-store`'s
/// `CachedStore::register_metrics`), so that they reach the same
/// registry and the same [`serve`]d endpoint without this crate knowing
/// it.
pub fn register_figures(registry: &mut Registry, figures: Box<dyn Figures>) {
    registry.register_collector(Box::new(FiguresCollector(figures)));
}

/// Registers a [`SharedCache`](crate::SharedCache)'s figures in
/// `registry`, named `foliocache_shared_*`: the group's
/// ([`SharedCache::stats`](crate::SharedCache::stats) at each scrape: its
/// pages, those cached and dirty, the processes attached, and every
/// process's reads, hits and misses, as they last published them). Held
/// weakly, as [`register`] holds a cache.
///
/// ```
/// # fn main() -> std::io::Result<()> {
/// use prometheus_client::registry::Registry;
///
/// let cache = foliocache::SharedCache::new(1 << 20)?;
/// let mut registry = Registry::default();
/// foliocache::metrics::register_shared(&cache, &mut registry);
/// let mut text = String::new();
/// prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
/// assert!(text.contains("foliocache_shared_capacity_pages 256"));
/// // No process has served a file from it yet.
/// assert!(text.contains("foliocache_shared_processes 0"));
/// assert!(text.contains("foliocache_shared_hits_total 0"));
/// # Ok(()) }
/// ```
pub fn register_shared(cache: &crate::SharedCache, registry: &mut Registry) {
    register_figures(registry, Box::new(SharedFigures(cache.downgrade())));
    registry.register_collector(Box::new(SharedCurve(cache.downgrade())));
}

/// The group's curve ([`SharedCache::hit_ratio_curve`](crate::SharedCache::hit_ratio_curve)),
/// as `foliocache_shared_predicted_hit_ratio{capacity_ratio}`: nothing
/// before the cache's maker published one.
struct SharedCurve(Weak<crate::shared::Inner>);

impl fmt::Debug for SharedCurve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedCurve").finish_non_exhaustive()
    }
}

impl Collector for SharedCurve {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        let curve = crate::SharedCache::upgrade(&self.0).and_then(|c| c.hit_ratio_curve());
        match curve {
            Some(c) => encode_curve(&mut enc, &c, SHARED_CURVE),
            None => Ok(()),
        }
    }
}

/// Serves `cache`'s figures ([`register_shared`], in a registry of
/// their own) at `http://ADDR/metrics`, as [`serve`] does: for a process
/// that holds a shared cache for others (`foliocache cache serve
/// --metrics`).
///
/// # Errors
/// As [`serve`].
pub fn serve_shared(
    addr: std::net::SocketAddr,
    cache: &crate::SharedCache,
) -> std::io::Result<MetricsServer> {
    let mut registry = Registry::default();
    register_shared(cache, &mut registry);
    serve(addr, registry)
}

/// The figures [`register_shared`] writes.
struct SharedFigures(Weak<crate::shared::Inner>);

impl fmt::Debug for SharedFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedFigures")
            .field("live", &(self.0.strong_count() > 0))
            .finish()
    }
}

impl Figures for SharedFigures {
    fn families(&self) -> Vec<Family> {
        let Some(cache) = crate::SharedCache::upgrade(&self.0) else {
            return Vec::new();
        };
        let s = cache.stats();
        let one = |name, help, kind, v| Family {
            name,
            help,
            kind,
            unit: None,
            samples: vec![(None, v)],
        };
        let bytes = |name: &'static str, help: &'static str, v: u64| Family {
            unit: Some(Unit::Bytes),
            ..one(name, help, Kind::Counter, v)
        };
        vec![
            one(
                "foliocache_shared_capacity_pages",
                "Pages (4 KiB) the shared cache holds at most",
                Kind::Gauge,
                s.pages,
            ),
            one(
                "foliocache_shared_cached_pages",
                "Pages holding file data",
                Kind::Gauge,
                s.cached,
            ),
            one(
                "foliocache_shared_dirty_pages",
                "Pages written and not yet written back",
                Kind::Gauge,
                s.dirty,
            ),
            one(
                "foliocache_shared_huge_bytes",
                "Bytes of the pages mapped by 2 MiB pages (the creator's collapse, so far)",
                Kind::Gauge,
                s.huge_bytes,
            ),
            one(
                "foliocache_shared_processes",
                "Processes attached",
                Kind::Gauge,
                s.processes,
            ),
            one(
                "foliocache_shared_hits",
                "Page lookups of reads that found the page cached (not bytes; readahead's pages included), by every process of the group",
                Kind::Counter,
                s.group_hits,
            ),
            bytes(
                "foliocache_shared_returned",
                "Bytes reads returned, by every process of the group",
                s.group_read_bytes,
            ),
            bytes(
                "foliocache_shared_from_memory",
                "Of the bytes reads returned, those found cached (a page readahead loaded counts as read from the file at its first read), by every process of the group",
                s.group_memory_bytes(),
            ),
            bytes(
                "foliocache_shared_loaded",
                "Bytes read from the files into the cache (misses, readahead, partial writes' pages), by every process of the group",
                s.group_loaded_bytes,
            ),
            one(
                "foliocache_shared_misses",
                "Page reads that loaded a page, by every process of the group",
                Kind::Counter,
                s.group_misses,
            ),
            one(
                "foliocache_shared_evictions",
                "Pages reclaimed for other data",
                Kind::Counter,
                s.evictions,
            ),
            one(
                "foliocache_shared_recoveries",
                "Locks taken over from a process that died holding them",
                Kind::Counter,
                s.recoveries,
            ),
        ]
    }
}

/// A sample's labels where it has none.
const NO_LABELS: [(&str, &str); 0] = [];

/// The collector [`register_figures`] adds.
#[derive(Debug)]
struct FiguresCollector(Box<dyn Figures>);

impl Collector for FiguresCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        for f in self.0.families() {
            let mut family =
                enc.encode_descriptor(f.name, f.help, f.unit.as_ref(), f.kind.into())?;
            for (label, v) in &f.samples {
                match label {
                    Some(l) => encode_value(f.kind, *v, family.encode_family(&[*l])?)?,
                    None => encode_value(f.kind, *v, family.encode_family(&NO_LABELS)?)?,
                }
            }
        }
        Ok(())
    }
}

impl From<Kind> for MetricType {
    fn from(k: Kind) -> MetricType {
        match k {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
        }
    }
}

/// One counter's or gauge's value (a gauge past `i64::MAX` saturates).
fn encode_value(kind: Kind, v: u64, enc: MetricEncoder<'_>) -> Result<(), fmt::Error> {
    match kind {
        Kind::Counter => ConstCounter::new(v).encode(enc),
        Kind::Gauge => ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX)).encode(enc),
    }
}

/// One counter or gauge: its descriptor, and where its value comes from.
struct Figure {
    name: &'static str,
    help: &'static str,
    kind: Kind,
    unit: Option<Unit>,
    /// The value, from a scrape's stats and memory figures.
    value: fn(&CacheStats, &MemoryUsage) -> u64,
}

/// The counters and gauges, in the order a scrape writes them (the
/// latency histograms follow: see `CacheCollector::encode`).
static FIGURES: [Figure; 29] = [
    Figure {
        name: "foliocache_hits",
        help: "Folio lookups by reads that found the data cached (lookups, not bytes; readahead's folios included)",
        kind: Kind::Counter,
        unit: None,
        value: |s, _| s.hits,
    },
    Figure {
        name: "foliocache_returned",
        help: "Bytes reads returned",
        kind: Kind::Counter,
        unit: Some(Unit::Bytes),
        value: |s, _| s.read_bytes,
    },
    Figure {
        name: "foliocache_from_memory",
        help: "Of the bytes reads returned, those found cached (a folio read from the backing, by readahead too, counts as read from below at its first read)",
        kind: Kind::Counter,
        unit: Some(Unit::Bytes),
        value: |s, _| s.memory_bytes(),
    },
    Figure {
        name: "foliocache_misses",
        help: "Folios a read had to create and fill from the backing",
        kind: Kind::Counter,
        unit: None,
        value: |s, _| s.misses,
    },
    Figure {
        name: "foliocache_evictions",
        help: "Folios evicted by reclaim",
        kind: Kind::Counter,
        unit: None,
        value: |s, _| s.evictions,
    },
    Figure {
        name: "foliocache_refaults",
        help: "Folios read again after reclaim evicted them",
        kind: Kind::Counter,
        unit: None,
        value: |s, _| s.refaults,
    },
    Figure {
        name: "foliocache_activations",
        help: "Folios moved to the active list",
        kind: Kind::Counter,
        unit: None,
        value: |s, _| s.activations,
    },
    Figure {
        name: "foliocache_readahead_windows",
        help: "Readahead windows built",
        kind: Kind::Counter,
        unit: None,
        value: |s, _| s.readahead_windows,
    },
    Figure {
        name: "foliocache_read_ios",
        help: "Reads issued to backings",
        kind: Kind::Counter,
        unit: None,
        value: |s, _| s.io_reads,
    },
    Figure {
        name: "foliocache_read",
        help: "Bytes read from backings, readahead's included",
        kind: Kind::Counter,
        unit: Some(Unit::Bytes),
        value: |s, _| s.io_bytes,
    },
    Figure {
        name: "foliocache_write_ios",
        help: "Writes issued to backings",
        kind: Kind::Counter,
        unit: None,
        value: |s, _| s.io_writes,
    },
    Figure {
        name: "foliocache_written",
        help: "Bytes written back to backings",
        kind: Kind::Counter,
        unit: Some(Unit::Bytes),
        value: |s, _| s.io_write_bytes,
    },
    Figure {
        name: "foliocache_writeback_errors",
        help: "Writeback runs that failed (their folios stayed dirty)",
        kind: Kind::Counter,
        unit: None,
        value: |s, _| s.writeback_errors,
    },
    Figure {
        name: "foliocache_read_errors",
        help: "Reads from backings that failed",
        kind: Kind::Counter,
        unit: None,
        value: |s, _| s.read_errors,
    },
    Figure {
        name: "foliocache_throttled_writes",
        help: "Writes that found the cache over its dirty limit",
        kind: Kind::Counter,
        unit: None,
        value: |s, _| s.throttled,
    },
    Figure {
        name: "foliocache_pressure_shrinks",
        help: "Times memory pressure shrank the cache",
        kind: Kind::Counter,
        unit: None,
        value: |s, _| s.pressure_shrinks,
    },
    Figure {
        name: "foliocache_dropbehind_drops",
        help: "Uncached folios dropped after use",
        kind: Kind::Counter,
        unit: None,
        value: |s, _| s.dropbehind_drops,
    },
    Figure {
        name: "foliocache_curve_samples_dropped",
        help: "Sampled reads the miss-ratio curve left out: its queue was full and its drain busy",
        kind: Kind::Counter,
        unit: None,
        value: |s, _| s.curve_samples_dropped,
    },
    Figure {
        name: "foliocache_pin_copies",
        help: "Folios copied because a reader had them pinned",
        kind: Kind::Counter,
        unit: None,
        value: |s, _| s.pin_copies,
    },
    Figure {
        name: "foliocache_folios",
        help: "Folios in the cache",
        kind: Kind::Gauge,
        unit: None,
        value: |s, _| s.folios,
    },
    Figure {
        name: "foliocache_cached",
        help: "Bytes of folios in the cache",
        kind: Kind::Gauge,
        unit: Some(Unit::Bytes),
        value: |s, _| s.bytes_cached,
    },
    Figure {
        name: "foliocache_dirty",
        help: "Bytes of dirty folios",
        kind: Kind::Gauge,
        unit: Some(Unit::Bytes),
        value: |s, _| s.dirty_bytes,
    },
    Figure {
        name: "foliocache_writeback",
        help: "Bytes of folios being written back",
        kind: Kind::Gauge,
        unit: Some(Unit::Bytes),
        value: |s, _| s.writeback_bytes,
    },
    Figure {
        name: "foliocache_capacity",
        help: "The arena's size",
        kind: Kind::Gauge,
        unit: Some(Unit::Bytes),
        value: |s, _| s.capacity_bytes,
    },
    Figure {
        name: "foliocache_allowed",
        help: "What the cache may hold now (less than the capacity while pressure has it shrunk)",
        kind: Kind::Gauge,
        unit: Some(Unit::Bytes),
        value: |s, _| s.allowed_bytes,
    },
    Figure {
        name: "foliocache_free",
        help: "Arena bytes not holding a folio",
        kind: Kind::Gauge,
        unit: Some(Unit::Bytes),
        value: |s, _| s.free_bytes,
    },
    Figure {
        name: "foliocache_populated",
        help: "Arena memory faulted in",
        kind: Kind::Gauge,
        unit: Some(Unit::Bytes),
        value: |s, _| s.populated_bytes,
    },
    Figure {
        name: "foliocache_shadows",
        help: "Eviction shadows in the open files' indexes",
        kind: Kind::Gauge,
        unit: None,
        value: |s, _| s.shadows,
    },
    Figure {
        name: "foliocache_overhead",
        help: "Memory beside the arena: descriptors, allocator, indexes, shadows",
        kind: Kind::Gauge,
        unit: Some(Unit::Bytes),
        value: |_, mem| mem.overhead_bytes(),
    },
];

/// An info metric: a gauge of 1 whose labels carry the information
/// (Prometheus's convention for build information, `*_build_info`).
struct Info {
    name: &'static str,
    help: &'static str,
    labels: [(&'static str, &'static str); 1],
}

/// `foliocache_build_info{version="..."} 1`: which foliocache a program
/// runs, written after the counters and gauges.
static BUILD_INFO: Info = Info {
    name: "foliocache_build_info",
    help: "The foliocache library's version, as a label; always 1",
    labels: [("version", env!("CARGO_PKG_VERSION"))],
};

impl Collector for CacheCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        let (Some(inner), Some(warm)) = (self.cache.upgrade(), self.warm.upgrade()) else {
            return Ok(());
        };
        let cache = Cache { inner, warm };
        let s = cache.stats();
        let mem = cache.memory();
        for f in &FIGURES {
            let v = (f.value)(&s, &mem);
            let family = enc.encode_descriptor(f.name, f.help, f.unit.as_ref(), f.kind.into())?;
            encode_value(f.kind, v, family)?;
        }
        let info = &BUILD_INFO;
        let one = ConstGauge::new(1i64);
        let mut family = enc.encode_descriptor(info.name, info.help, None, one.metric_type())?;
        one.encode(family.encode_family(&info.labels)?)?;
        encode_curve(&mut enc, &cache.hit_ratio_curve(), CURVE)?;
        for (name, help, l) in [
            (
                "foliocache_miss_latency",
                "How long reads that missed waited for their data",
                &s.miss_latency,
            ),
            (
                "foliocache_sync_latency",
                "How long sync_data and sync_all took",
                &s.sync_latency,
            ),
            (
                "foliocache_throttle_latency",
                "How long writers over the dirty limit were held",
                &s.throttle_latency,
            ),
        ] {
            encode_histogram(&mut enc, name, help, l)?;
        }
        Ok(())
    }
}

/// The names of a curve's two families: the points', the window's.
type CurveNames = [&'static str; 2];

/// A cache's curve's ([`Cache::hit_ratio_curve`]).
const CURVE: CurveNames = [
    "foliocache_predicted_hit_ratio",
    "foliocache_predicted_hit_ratio_window_reads",
];

/// The group's ([`SharedCache::hit_ratio_curve`](crate::SharedCache::hit_ratio_curve)).
const SHARED_CURVE: CurveNames = [
    "foliocache_shared_predicted_hit_ratio",
    "foliocache_shared_predicted_hit_ratio_window_reads",
];

/// The miss-ratio curve ([`Cache::hit_ratio_curve`]): one gauge per
/// capacity ratio whose point is known,
/// `foliocache_predicted_hit_ratio{capacity_ratio="2"}`, and the page
/// reads its window holds (named `names`).
fn encode_curve(
    enc: &mut DescriptorEncoder<'_>,
    c: &crate::HitRatioCurve,
    names: CurveNames,
) -> Result<(), fmt::Error> {
    let m = ConstGauge::new(0.0f64);
    let mut family = enc.encode_descriptor(
        names[0],
        "The share of what reads returned that would have come from memory at capacity_ratio times the capacity over the recent window (1: the share it had; bytes from memory, counted in pages); absent while not yet known",
        None,
        m.metric_type(),
    )?;
    // A point not yet known (`CurvePoint::known`) is left out: no number
    // rather than one that is off.
    for p in c.points.iter().filter(|p| p.known().is_some()) {
        let label = [("capacity_ratio", p.capacity_ratio.to_string())];
        ConstGauge::new(p.hit_ratio).encode(family.encode_family(&label)?)?;
    }
    let n = ConstGauge::new(i64::try_from(c.accesses).unwrap_or(i64::MAX));
    n.encode(enc.encode_descriptor(
        names[1],
        "Page reads (each page a read covers) in the window the predicted hit ratios cover",
        None,
        n.metric_type(),
    )?)
}

/// One latency histogram, in seconds, with the cache's power-of-two
/// buckets.
fn encode_histogram(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    l: &Latencies,
) -> Result<(), fmt::Error> {
    let buckets: [(f64, u64); LATENCY_BUCKETS] = std::array::from_fn(|i| {
        let bound = Latencies::bound(i).map_or(f64::INFINITY, |d| d.as_secs_f64());
        (bound, l.counts[i])
    });
    enc.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Histogram)?
        .encode_histogram::<NoLabelSet>(l.sum.as_secs_f64(), l.count, &buckets, None)
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpStream};

    use super::*;

    /// One HTTP/1.0 request; the status line and the body.
    fn get(addr: SocketAddr, method: &str, path: &str) -> (String, String) {
        let mut s = TcpStream::connect(addr).unwrap();
        write!(s, "{method} {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let status = out.lines().next().unwrap_or_default().to_string();
        let body = out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
        (status, body)
    }

    /// The value of the sample line `name` (no labels) in `text`.
    fn sample(text: &str, name: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
            .parse()
            .unwrap()
    }

    #[test]
    fn the_endpoint_serves_counters_that_move_with_reads_and_syncs() {
        let file = test_support::TempPath::with_data("metrics", &[7u8; 64 << 10]);
        let path = &file.path;
        let cache = Cache::builder().capacity(4 << 20).build().unwrap();
        let mut registry = Registry::default();
        register(&cache, &mut registry);
        let server = serve("127.0.0.1:0".parse().unwrap(), registry).unwrap();
        let addr = server.local_addr();

        let (status, before) = get(addr, "GET", "/metrics");
        assert!(status.contains("200"), "{status}");
        assert_eq!(sample(&before, "foliocache_misses_total"), 0.0);
        assert_eq!(
            sample(&before, "foliocache_capacity_bytes"),
            (4 << 20) as f64
        );
        assert!(before.trim_end().ends_with("# EOF"), "{before}");

        let f = cache
            .open_options()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let mut buf = [0u8; 4096];
        f.read_at(&mut buf, 0).unwrap();
        f.read_at(&mut buf, 0).unwrap();
        f.write_at(b"x", 0).unwrap();
        f.sync_data().unwrap();
        let (_, after) = get(addr, "GET", "/metrics");
        assert!(sample(&after, "foliocache_misses_total") >= 1.0, "{after}");
        assert!(sample(&after, "foliocache_hits_total") >= 1.0, "{after}");
        // Two reads of 4 KiB, in bytes; the first from the backing.
        assert_eq!(sample(&after, "foliocache_returned_bytes_total"), 8192.0);
        assert!(sample(&after, "foliocache_from_memory_bytes_total") <= 4096.0);
        assert!(sample(&after, "foliocache_miss_latency_seconds_count") >= 1.0);
        assert_eq!(sample(&after, "foliocache_sync_latency_seconds_count"), 1.0);
        assert_eq!(sample(&after, "foliocache_read_errors_total"), 0.0);
        assert_eq!(
            sample(&after, "foliocache_throttle_latency_seconds_count"),
            0.0
        );
        assert!(
            sample(&after, "foliocache_written_bytes_total") >= 1.0,
            "{after}"
        );
        assert!(after.contains("foliocache_miss_latency_seconds_bucket{le=\"+Inf\"}"));
        let info = format!(
            "foliocache_build_info{{version=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        );
        assert!(after.contains(&info), "{after}");
        assert!(
            after.contains("# TYPE foliocache_build_info gauge\n"),
            "{after}"
        );

        assert!(get(addr, "GET", "/").0.contains("404"));
        assert!(get(addr, "POST", "/metrics").0.contains("405"));

        // The collector holds the cache weakly.
        drop(f);
        drop(cache);
        let (_, gone) = get(addr, "GET", "/metrics");
        assert!(!gone.contains("foliocache_hits"), "{gone}");
        // Stops: the serving thread is joined.
        drop(server);
    }

    /// Figures of another crate, one family labelled, one not.
    #[derive(Debug)]
    struct Two(Weak<u64>);

    impl Figures for Two {
        fn families(&self) -> Vec<Family> {
            let Some(v) = self.0.upgrade() else {
                return Vec::new();
            };
            vec![
                Family {
                    name: "x_hits",
                    help: "Hits",
                    kind: Kind::Counter,
                    unit: None,
                    samples: vec![(Some(("tier", "memory")), *v), (Some(("tier", "disk")), 2)],
                },
                Family {
                    name: "x_read",
                    help: "Read",
                    kind: Kind::Gauge,
                    unit: Some(Unit::Bytes),
                    samples: vec![(None, 5)],
                },
            ]
        }
    }

    #[test]
    fn registered_figures_are_written_with_their_labels_while_their_source_lives() {
        let v = Arc::new(7u64);
        let mut registry = Registry::default();
        register_figures(&mut registry, Box::new(Two(Arc::downgrade(&v))));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("# TYPE x_hits counter\n"), "{text}");
        assert!(text.contains("x_hits_total{tier=\"memory\"} 7\n"), "{text}");
        assert!(text.contains("x_hits_total{tier=\"disk\"} 2\n"), "{text}");
        assert!(text.contains("\nx_read_bytes 5\n"), "{text}");
        drop(v);
        let mut gone = String::new();
        prometheus_client::encoding::text::encode(&mut gone, &registry).unwrap();
        assert!(!gone.contains("x_hits"), "{gone}");
    }

    /// Reads the first 16 pages three times with `read` (a buffer, an
    /// offset), then writes `registry`'s text.
    fn three_passes(registry: &Registry, read: impl Fn(&mut [u8], u64)) -> String {
        let mut buf = [0u8; 4096];
        for _ in 0..3 {
            for i in 0..16u64 {
                read(&mut buf, i * 4096);
            }
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn the_predicted_hit_ratios_are_one_gauge_per_capacity_ratio() {
        let file = test_support::TempPath::with_data("metrics-mrc", &[7u8; 64 << 10]);
        let cache = Cache::builder().capacity(4 << 20).build().unwrap();
        let mut registry = Registry::default();
        register(&cache, &mut registry);
        let f = cache.open(&file.path).unwrap();
        let text = three_passes(&registry, |buf, at| {
            f.read_at(buf, at).unwrap();
        });
        // Each point the curve knows is a gauge of its value; one it does
        // not know yet (its window has only first reads at that size) is
        // absent, never a number. 1x is the ratio measured: always there.
        let curve = cache.hit_ratio_curve();
        for (r, p) in ["0.25", "0.5", "1", "2", "4"].iter().zip(curve.points) {
            let name = format!("foliocache_predicted_hit_ratio{{capacity_ratio=\"{r}\"}} ");
            match p.known() {
                Some(h) => assert_eq!(sample(&text, name.trim_end()), h, "{name}"),
                None => assert!(!text.contains(&name), "{name} not yet known:\n{text}"),
            }
        }
        assert!(curve.points[2].known().is_some());
        assert!(sample(&text, "foliocache_predicted_hit_ratio_window_reads") >= 3.0);
        // The sample's reads left out, as `CacheStats` counts them (none
        // on one thread: mrc/tests.rs forces some).
        let dropped = sample(&text, "foliocache_curve_samples_dropped_total");
        assert_eq!(dropped, cache.stats().curve_samples_dropped as f64);
    }

    #[test]
    fn the_groups_predicted_hit_ratios_are_the_published_curve() {
        let file = test_support::TempPath::with_data("metrics-shared-mrc", &[7u8; 64 << 10]);
        let cache = crate::SharedCache::new(4 << 20).unwrap();
        let mut registry = Registry::default();
        register_shared(&cache, &mut registry);
        let f = cache
            .open(std::fs::File::open(&file.path).unwrap())
            .unwrap();
        let text = three_passes(&registry, |buf, at| {
            f.read_at(buf, at).unwrap();
        });
        let curve = cache.hit_ratio_curve().expect("published by its maker");
        let one = "foliocache_shared_predicted_hit_ratio{capacity_ratio=\"1\"}";
        assert_eq!(sample(&text, one), curve.at(1.0).unwrap(), "{text}");
        assert_eq!(
            sample(&text, "foliocache_shared_predicted_hit_ratio_window_reads"),
            curve.accesses as f64
        );
        assert!(curve.accesses >= 48, "{curve:?}");
    }

    #[test]
    fn an_address_in_use_is_an_error() {
        let first = serve("127.0.0.1:0".parse().unwrap(), Registry::default()).unwrap();
        let e = serve(first.local_addr(), Registry::default()).unwrap_err();
        assert!(e.to_string().contains("serving metrics"), "{e}");
    }
}
