//! The remote store of the `objectstore` scenario: object_store's
//! `LocalFileSystem` behind its `ThrottledStore` (S3's first-byte latency
//! and per-request bandwidth), behind a counter of GETs and their bytes.
//!
//! The figures (docs/bench.md):
//! - **Latency per request**: AWS's "Performance design patterns for
//!   Amazon S3" (<https://docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance-design-patterns.html>):
//!   small-object latencies "and first-byte-out latencies for larger
//!   objects" of "roughly 100–200 milliseconds". The bench's default is
//!   [`DEFAULT_LATENCY_MS`], lower to bound its wall time;
//!   `--remote-latency 150` gives S3's.
//! - **Bandwidth per request**: AWS's "Performance guidelines for Amazon
//!   S3" (<https://docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance-guidelines.html>):
//!   "make one concurrent request for each 85–90 MB/s of desired network
//!   throughput": [`BANDWIDTH`] per GET.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use foliocache_object_store::forward_object_store;
use futures_util::stream::{self, StreamExt};
use object_store::path::Path;
use object_store::throttle::{ThrottleConfig, ThrottledStore};
use object_store::{local::LocalFileSystem, GetOptions, GetResult, GetResultPayload, Result};

/// The default first-byte latency of a request, in milliseconds (S3's is
/// 100 to 200: see the module documentation).
pub const DEFAULT_LATENCY_MS: u64 = 20;
/// Bytes per second of one GET (S3: 85 to 90 MB/s per request).
pub const BANDWIDTH: u64 = 90_000_000;

/// What the remote saw: GETs (HEADs apart) and the bytes they returned.
#[derive(Debug, Default)]
pub struct Seen {
    /// Ranged GETs.
    pub gets: AtomicU64,
    /// Their bytes.
    pub bytes: AtomicU64,
    /// HEADs.
    pub heads: AtomicU64,
}

impl Seen {
    /// (GETs, bytes) now.
    pub fn now(&self) -> (u64, u64) {
        (
            self.gets.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

/// A directory served as S3 would: its GETs streamed (object_store
/// 0.14.2's `ThrottledStore` panics on `LocalFileSystem`'s file payloads,
/// `unimplemented!` in `throttle_get`) and counted.
#[derive(Debug)]
pub struct Local {
    inner: LocalFileSystem,
    seen: Arc<Seen>,
}

/// The remote every engine reads: [`Local`] behind `ThrottledStore`.
pub type Throttled = ThrottledStore<Local>;

/// The remote, and what it saw.
#[derive(Debug, Clone)]
pub struct Remote {
    /// The store.
    pub store: Arc<Throttled>,
    /// What it saw.
    pub seen: Arc<Seen>,
}

impl Remote {
    /// The objects under `dir`, each request waiting `latency` and each
    /// byte its share of [`BANDWIDTH`].
    ///
    /// # Errors
    /// `dir` cannot be served.
    pub fn new(dir: &std::path::Path, latency: Duration) -> anyhow::Result<Remote> {
        let seen = Arc::<Seen>::default();
        let local = Local {
            inner: LocalFileSystem::new_with_prefix(dir)?,
            seen: seen.clone(),
        };
        let cfg = ThrottleConfig {
            wait_get_per_call: latency,
            // 11 ns a byte: 90 MB/s.
            wait_get_per_byte: Duration::from_nanos(1_000_000_000 / BANDWIDTH),
            ..ThrottleConfig::default()
        };
        Ok(Remote {
            store: Arc::new(ThrottledStore::new(local, cfg)),
            seen,
        })
    }
}

impl fmt::Display for Local {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Local({})", self.inner)
    }
}

forward_object_store! {
    Local,
    inner,
    async fn get_opts(&self, l: &Path, o: GetOptions) -> Result<GetResult> {
        let head = o.head;
        let mut r = self.inner.get_opts(l, o).await?;
        if let GetResultPayload::File(..) = r.payload {
            // One piece: `ThrottledStore` sleeps per piece, and tokio's
            // timer rounds each sleep up to a millisecond, so the 8 KiB
            // pieces of `into_stream` would cost 1 ms each (11 MB/s).
            let (meta, range) = (r.meta.clone(), r.range.clone());
            let (attributes, extensions) = (r.attributes.clone(), r.extensions.clone());
            let bytes = r.bytes().await?;
            r = GetResult {
                payload: GetResultPayload::Stream(stream::once(async { Ok(bytes) }).boxed()),
                meta,
                range,
                attributes,
                extensions,
            };
        }
        if head {
            self.seen.heads.fetch_add(1, Ordering::Relaxed);
        } else {
            self.seen.gets.fetch_add(1, Ordering::Relaxed);
            let n = r.range.end - r.range.start;
            self.seen.bytes.fetch_add(n, Ordering::Relaxed);
        }
        Ok(r)
    }
}
