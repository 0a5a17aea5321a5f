//! The store's figures in `foliocache::metrics`: registered beside the
//! cache's, served at `/metrics`, moving with reads, per tier.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;

use backing::MemBacking;
use foliocache_object_store::disk::SLOT;
use foliocache_object_store::{CachedStore, DiskTier};
use object_store::path::Path;
use object_store::ObjectStoreExt;
use prometheus_client::registry::Registry;
use test_support::cache::TestCache;

use crate::counting::Counting;
use crate::data;

/// The body of `GET /metrics` at `addr`.
fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(
        out.starts_with("HTTP/1.0 200") || out.starts_with("HTTP/1.1 200"),
        "{out}"
    );
    out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string()
}

/// The value of the sample `name` (labels included, as written) in `text`.
fn sample(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_serves_the_stores_figures_per_tier() {
    let inner = Counting::new();
    let p = Path::from("m/a");
    let d = data(300_000, 40);
    inner.inner.put(&p, d.clone().into()).await.unwrap();
    let tier = Arc::new(DiskTier::with_backing(MemBacking::new(), 64 * SLOT as u64).unwrap());
    let s = CachedStore::builder(inner, TestCache::bytes(1 << 20).build())
        .disk_tier(tier)
        .build();
    let mut registry = Registry::default();
    foliocache::metrics::register(s.cache(), &mut registry);
    s.register_metrics(&mut registry);
    let server = foliocache::metrics::serve("127.0.0.1:0".parse().unwrap(), registry).unwrap();
    let addr = server.local_addr();

    let before = tokio::task::spawn_blocking(move || scrape(addr))
        .await
        .unwrap();
    for name in [
        "foliocache_object_store_hits_total{tier=\"memory\"}",
        "foliocache_object_store_hits_total{tier=\"disk\"}",
        "foliocache_object_store_misses_total{tier=\"memory\"}",
        "foliocache_object_store_remote_gets_total",
        "foliocache_object_store_remote_read_bytes_total",
        "foliocache_object_store_remote_heads_total",
        "foliocache_object_store_invalidations_total",
        "foliocache_object_store_written_through_total",
        "foliocache_object_store_write_waits_total",
        "foliocache_object_store_passed_through_total",
    ] {
        assert_eq!(sample(&before, name), 0, "{name}");
    }
    assert_eq!(sample(&before, "foliocache_object_store_disk_slots"), 64);
    assert!(
        before.contains("# TYPE foliocache_object_store_hits counter\n"),
        "{before}"
    );

    // A miss (HEAD, GET), a hit, then the range again after memory
    // dropped it: a second miss, which admits its chunks to disk; once
    // more after another drop: served from disk.
    let r = 70_000..90_000;
    for drop_memory in [false, false, true, true] {
        if drop_memory {
            s.cache().shrink(u64::MAX);
        }
        let got = s.get_range(&p, r.clone()).await.unwrap();
        assert_eq!(&got[..], &d[70_000..90_000]);
    }
    s.put(&p, d.clone().into()).await.unwrap();
    let st = s.stats();
    let disk = s.disk_tier().unwrap().stats();
    assert!(disk.hits >= 1, "{disk:?}");

    let after = tokio::task::spawn_blocking(move || scrape(addr))
        .await
        .unwrap();
    let m = |name| sample(&after, name);
    assert_eq!(
        m("foliocache_object_store_hits_total{tier=\"memory\"}"),
        st.hits
    );
    assert_eq!(
        m("foliocache_object_store_misses_total{tier=\"memory\"}"),
        st.misses
    );
    assert_eq!(
        m("foliocache_object_store_hits_total{tier=\"disk\"}"),
        disk.hits
    );
    assert_eq!(
        m("foliocache_object_store_misses_total{tier=\"disk\"}"),
        disk.misses
    );
    assert_eq!(
        m("foliocache_object_store_remote_gets_total"),
        st.remote_gets
    );
    assert_eq!(
        m("foliocache_object_store_remote_read_bytes_total"),
        st.remote_get_bytes
    );
    // None: the first read's GET found the object.
    assert_eq!(m("foliocache_object_store_remote_heads_total"), 0);
    assert_eq!(m("foliocache_object_store_invalidations_total"), 1);
    assert_eq!(m("foliocache_object_store_disk_writes_total"), disk.writes);
    assert!(
        st.hits >= 1 && st.misses >= 3 && st.remote_gets >= 2,
        "{st:?}"
    );
    // The cache's own figures, in the same text.
    assert!(m("foliocache_misses_total") >= 1);
    // The disk tier's curve: at each ratio, the tier's own figures
    // (1x: what it had and sent).
    let curve = s.tier_curves().disk.unwrap();
    let f = |name: String| -> f64 {
        after
            .lines()
            .find_map(|l| l.strip_prefix(&name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {name} in:\n{after}"))
            .parse()
            .unwrap()
    };
    for p in curve.points {
        let labels = format!("{{tier=\"disk\",capacity_ratio=\"{}\"}}", p.capacity_ratio);
        let name = |n: &str| format!("foliocache_object_store_predicted_{n}{labels}");
        assert_eq!(f(name("hit_ratio")), p.hit_ratio, "{labels}");
        assert_eq!(Some(f(name("remote_gets"))), p.remote_gets, "{labels}");
        assert_eq!(
            Some(f(name("remote_read_bytes"))),
            p.remote_bytes,
            "{labels}"
        );
    }
    assert_eq!(
        curve.at(1.0).unwrap().remote_gets,
        Some(st.remote_gets as f64)
    );

    // The collector holds the store weakly.
    drop(s);
    let gone = tokio::task::spawn_blocking(move || scrape(addr))
        .await
        .unwrap();
    assert!(!gone.contains("foliocache_object_store"), "{gone}");
    drop(server);
}
