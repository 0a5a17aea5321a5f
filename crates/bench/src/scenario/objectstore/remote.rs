//! The remote store of the `objectstore` scenario: object_store's
//! `LocalFileSystem` behind its `ThrottledStore` (S3's first-byte latency
//! and per-request bandwidth), behind a counter of GETs and their bytes.
//!
//! The figures (docs/bench/objectstore.md):
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
//!
//! The body of a GET streams in pieces of [`PIECE`] bytes, as an HTTP
//! store's does (frames of a few KiB to tens of KiB), each sent when the
//! GET's bandwidth allows it: `Local` paces them itself, against absolute
//! deadlines, instead of `ThrottledStore`'s wait per piece, which tokio's
//! timer rounds up to a millisecond each (64 KiB pieces would run at
//! 65 MB/s, not 90). `ThrottledStore` keeps the latency per request.

use std::fmt;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use foliocache_object_store::forward_object_store;
use futures_util::stream::{self, BoxStream, StreamExt};
use object_store::path::Path;
use object_store::throttle::{ThrottleConfig, ThrottledStore};
use object_store::{local::LocalFileSystem, GetOptions, GetResult, GetResultPayload, Result};

/// The default first-byte latency of a request, in milliseconds (S3's is
/// 100 to 200: see the module documentation).
pub const DEFAULT_LATENCY_MS: u64 = 20;
/// Bytes per second of one GET (S3: 85 to 90 MB/s per request).
pub const BANDWIDTH: u64 = 90_000_000;
/// The pieces a GET's body streams in.
const PIECE: u64 = 64 << 10;

/// The objects: their names and sizes, by index.
#[derive(Debug, Clone)]
pub struct Objects {
    /// Each object's path and size.
    pub list: Vec<(Path, u64)>,
}

/// What the remote saw: GETs (HEADs apart) and the bytes they returned.
#[derive(Debug, Default)]
pub struct Seen {
    /// Ranged GETs.
    pub gets: AtomicU64,
    /// Their bytes.
    pub bytes: AtomicU64,
    /// HEADs.
    pub heads: AtomicU64,
    /// GETs of the scanned objects (paths under `scan/`), counted in
    /// `gets` too.
    pub scan_gets: AtomicU64,
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

/// A directory served as S3 would: its GETs streamed in pieces at
/// [`BANDWIDTH`] (object_store 0.14.2's `ThrottledStore` panics on
/// `LocalFileSystem`'s file payloads, `unimplemented!` in
/// `throttle_get`) and counted.
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
    /// GET's body streamed at [`BANDWIDTH`].
    ///
    /// # Errors
    /// `dir` cannot be served.
    pub fn new(dir: &std::path::Path, latency: Duration) -> anyhow::Result<Remote> {
        let seen = Arc::<Seen>::default();
        let local = Local {
            inner: LocalFileSystem::new_with_prefix(dir)?,
            seen: seen.clone(),
        };
        // The bandwidth is `Local`'s pacing (`paced`).
        let cfg = ThrottleConfig {
            wait_get_per_call: latency,
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
        if let GetResultPayload::File(file, _) = r.payload {
            r.payload = GetResultPayload::Stream(paced(file, r.range.clone()));
        }
        if head {
            self.seen.heads.fetch_add(1, Ordering::Relaxed);
        } else {
            self.seen.gets.fetch_add(1, Ordering::Relaxed);
            if l.as_ref().starts_with("scan/") {
                self.seen.scan_gets.fetch_add(1, Ordering::Relaxed);
            }
            let n = r.range.end - r.range.start;
            self.seen.bytes.fetch_add(n, Ordering::Relaxed);
        }
        Ok(r)
    }
}

/// `range` of `file`, in pieces of [`PIECE`] bytes, each sent once the
/// GET's [`BANDWIDTH`] allows it since its first byte: the piece ending
/// at byte `n` of the body at `n / BANDWIDTH` seconds (absolute deadlines,
/// so that the timer's rounding does not add up).
fn paced(file: std::fs::File, range: Range<u64>) -> BoxStream<'static, Result<Bytes>> {
    let start = range.start;
    stream::unfold((file, start, None), move |(file, pos, t0)| async move {
        if pos >= range.end {
            return None;
        }
        let t0 = t0.unwrap_or_else(tokio::time::Instant::now);
        let n = (range.end - pos).min(PIECE);
        let sent = u128::from(pos + n - start);
        let due = Duration::from_nanos((sent * 1_000_000_000 / u128::from(BANDWIDTH)) as u64);
        tokio::time::sleep_until(t0 + due).await;
        let mut buf = vec![0u8; n as usize];
        let piece = match file.read_exact_at(&mut buf, pos) {
            Ok(()) => Ok(Bytes::from(buf)),
            Err(e) => Err(object_store::Error::Generic {
                store: "Local",
                source: Box::new(e),
            }),
        };
        let next = if piece.is_ok() { pos + n } else { range.end };
        Some((piece, (file, next, Some(t0))))
    })
    .boxed()
}
