//! A [`CachedStore`](crate::CachedStore)'s figures as Prometheus metrics
//! (the `prometheus` feature), through foliocache's
//! [`register_figures`](foliocache::metrics::register_figures): the
//! store's counters and its disk tier's, read at each scrape, beside the
//! cache's own figures in the same registry and the same `/metrics`
//! endpoint. Nothing here counts; the collector reads the counters the
//! store already keeps, holding them weakly.

use std::sync::{Arc, Weak};

use std::fmt;

use foliocache::metrics::{register_figures, Family, Figures, Kind};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

use crate::disk::{DiskTier, DiskTierStats};
use super::objects::Objects;
use super::remote::Counters;

/// Adds a collector of these figures to `registry`.
pub(crate) fn register(
    counters: &Arc<Counters>,
    objects: &Arc<Objects>,
    tier: Option<&Arc<DiskTier>>,
    registry: &mut Registry,
) {
    register_figures(
        registry,
        Box::new(StoreFigures {
            counters: Arc::downgrade(counters),
            objects: Arc::downgrade(objects),
            tier: tier.map(Arc::downgrade),
        }),
    );
    if let Some(t) = tier {
        registry.register_collector(Box::new(DiskCurve(Arc::downgrade(t))));
    }
}

/// One family of the disk tier's curve: its name, help, unit, and what
/// it reads of a point.
type CurveFamily = (
    &'static str,
    &'static str,
    Option<Unit>,
    fn(&crate::TierPoint) -> f64,
);

/// The disk tier's curve ([`DiskTier::hit_ratio_curve`]), as gauges
/// labelled `tier="disk"` and `capacity_ratio`: the hit ratio, and the
/// GETs and bytes the store would have fetched, at each size. (The
/// memory tier's hit ratios are the cache's own
/// `foliocache_predicted_hit_ratio`.)
struct DiskCurve(Weak<DiskTier>);

impl fmt::Debug for DiskCurve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiskCurve").finish_non_exhaustive()
    }
}

impl Collector for DiskCurve {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Some(curve) = self.0.upgrade().map(|t| t.hit_ratio_curve()) else {
            return Ok(());
        };
        let families: [CurveFamily; 3] = [
            (
                "foliocache_object_store_predicted_hit_ratio",
                "The share of the chunks the tier was asked for that it would have held at capacity_ratio times its slots, over the reads since it was opened (1: the share it had)",
                None,
                |p| p.hit_ratio,
            ),
            (
                "foliocache_object_store_predicted_remote_gets",
                "The ranged GETs the store would have sent, since the tier was opened, with the tier at capacity_ratio times its slots (1: those it sent)",
                None,
                |p| p.remote_gets.unwrap_or(0.0),
            ),
            (
                "foliocache_object_store_predicted_remote_read",
                "The bytes those GETs would have fetched",
                Some(Unit::Bytes),
                |p| p.remote_bytes.unwrap_or(0.0),
            ),
        ];
        for (name, help, unit, value) in families {
            let m = ConstGauge::new(0.0f64);
            let mut family = enc.encode_descriptor(name, help, unit.as_ref(), m.metric_type())?;
            for p in &curve.points {
                let labels = [
                    ("tier", "disk".to_string()),
                    ("capacity_ratio", p.capacity_ratio.to_string()),
                ];
                ConstGauge::new(value(p)).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// What a scrape reads: the store's counters, its table, its tier.
#[derive(Debug)]
struct StoreFigures {
    counters: Weak<Counters>,
    objects: Weak<Objects>,
    tier: Option<Weak<DiskTier>>,
}

/// A family of one sample, with no label.
fn one(name: &'static str, help: &'static str, kind: Kind, unit: Option<Unit>, v: u64) -> Family {
    Family {
        name,
        help,
        kind,
        unit,
        samples: vec![(None, v)],
    }
}

impl Figures for StoreFigures {
    fn families(&self) -> Vec<Family> {
        let (Some(c), Some(objects)) = (self.counters.upgrade(), self.objects.upgrade()) else {
            return Vec::new();
        };
        let tier = self
            .tier
            .as_ref()
            .and_then(Weak::upgrade)
            .map(|t| t.stats());
        let get = Counters::get;
        let per_tier = |memory: u64, disk: Option<u64>| {
            let mut samples = vec![(Some(("tier", "memory")), memory)];
            samples.extend(disk.map(|d| (Some(("tier", "disk")), d)));
            samples
        };
        let counter = Kind::Counter;
        let mut out = vec![
            Family {
                name: "foliocache_object_store_hits",
                help: "Reads served by a tier: from memory without a wait, or 64 KiB chunks read from the disk tier",
                kind: counter,
                unit: None,
                samples: per_tier(get(&c.hits), tier.map(|t| t.hits)),
            },
            Family {
                name: "foliocache_object_store_misses",
                help: "Reads a tier could not serve: reads that needed bytes not in memory, chunk lookups not on disk",
                kind: counter,
                unit: None,
                samples: per_tier(get(&c.misses), tier.map(|t| t.misses)),
            },
            one(
                "foliocache_object_store_remote_gets",
                "Ranged GETs sent to the inner store, failed ones included",
                counter,
                None,
                get(&c.gets),
            ),
            one(
                "foliocache_object_store_remote_read",
                "Bytes the inner store's GETs returned",
                counter,
                Some(Unit::Bytes),
                get(&c.get_bytes),
            ),
            one(
                "foliocache_object_store_remote_get_errors",
                "GETs that failed (the inner store's error, or a short body)",
                counter,
                None,
                get(&c.get_errors),
            ),
            one(
                "foliocache_object_store_remote_heads",
                "HEADs sent to the inner store (an object's version looked up)",
                counter,
                None,
                get(&c.heads),
            ),
            one(
                "foliocache_object_store_invalidations",
                "Paths invalidated by writes through the store",
                counter,
                None,
                objects.invalidations(),
            ),
            one(
                "foliocache_object_store_stale_versions",
                "Reads that found their cached version replaced or gone",
                counter,
                None,
                get(&c.stale),
            ),
            one(
                "foliocache_object_store_recorded_versions",
                "Objects whose version came from the disk tier's record, their HEAD sent beside the read",
                counter,
                None,
                get(&c.recorded),
            ),
            one(
                "foliocache_object_store_objects",
                "Objects tracked now",
                Kind::Gauge,
                None,
                objects.len() as u64,
            ),
        ];
        out.extend(hint_families(&c));
        out.extend(tier.map(disk_families).into_iter().flatten());
        out
    }
}

/// The figures of write-through and of the hints (docs/object-store.md,
/// "Hints").
fn hint_families(c: &Counters) -> [Family; 3] {
    let get = Counters::get;
    [
        one(
            "foliocache_object_store_written_through",
            "Chunks of puts written through to the disk tier",
            Kind::Counter,
            None,
            get(&c.written_through),
        ),
        one(
            "foliocache_object_store_write_waits",
            "Puts that waited for room in the write-through queue (none is dropped)",
            Kind::Counter,
            None,
            get(&c.write_waits),
        ),
        one(
            "foliocache_object_store_passed_through",
            "Reads passed to the inner store uncached (CacheHint::DontCache)",
            Kind::Counter,
            None,
            get(&c.passed_through),
        ),
    ]
}

/// The disk tier's own figures (its hits and misses are in the families
/// per tier).
fn disk_families(t: DiskTierStats) -> [Family; 4] {
    let counter = Kind::Counter;
    [

        one(
            "foliocache_object_store_disk_corrupt",
            "Disk tier slots of the chunk looked up whose checksum or length failed (read as misses)",
            counter,
            None,
            t.corrupt,
        ),
        one(
            "foliocache_object_store_disk_writes",
            "Chunks written to the disk tier",
            counter,
            None,
            t.writes,
        ),
        one(
            "foliocache_object_store_disk_io_errors",
            "Disk tier reads and writes that failed (each a miss or a chunk not kept)",
            counter,
            None,
            t.io_errors,
        ),
        one(
            "foliocache_object_store_disk_slots",
            "Slots of 64 KiB chunks in the disk tier's file",
            Kind::Gauge,
            None,
            t.slots,
        ),
    ]
}
