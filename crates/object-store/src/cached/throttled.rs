//! [`Throttled`]: a store slowed to a remote's pace, for examples and
//! benchmarks: `LocalFileSystem` (or `InMemory`) behind it answers as S3
//! does, each request after its first-byte latency, each GET's body at a
//! bandwidth per request.
//!
//! object_store's own `ThrottledStore` (0.13, 0.14) cannot stand in for
//! it over `LocalFileSystem`: its GET wraps the body's stream and panics
//! (`unimplemented!`) on the file payloads `LocalFileSystem` answers with.
//! `Throttled` takes the body as a stream (`GetResult::into_stream`, which
//! reads a file payload in pieces) and holds each piece until the
//! bandwidth allows it since the first byte, against absolute deadlines
//! (a wait per piece would add the timer's rounding, a millisecond, to
//! each).

use super::object_store;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{GetOptions, GetResult, GetResultPayload, ObjectStore, Result};

/// A store whose reads (GETs and HEADs) wait `latency` before they are
/// sent to the store it wraps, and whose GETs' bodies arrive at
/// `bandwidth` bytes a second each (see the module documentation).
/// Writes and listings pass through at once. Needs a tokio runtime with
/// its timer (`enable_time`). The inner store's answer is kept but for
/// its `extensions`.
///
/// ```
/// use foliocache_object_store::Throttled;
/// use object_store::{local::LocalFileSystem, path::Path, ObjectStoreExt};
/// use std::time::{Duration, Instant};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let dir = std::env::temp_dir().join(format!("throttled-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// // S3's pace: 100 ms to the first byte, 90 MB/s a request.
/// let s3ish = Throttled::new(
///     LocalFileSystem::new_with_prefix(&dir)?,
///     Duration::from_millis(100),
///     90_000_000,
/// );
/// let path = Path::from("a");
/// s3ish.put(&path, vec![1u8; 9_000_000].into()).await?;
/// let t = Instant::now();
/// assert_eq!(s3ish.get_range(&path, 0..9_000_000).await?.len(), 9_000_000);
/// assert!(t.elapsed() >= Duration::from_millis(200)); // 100 ms, then 100 ms of body
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct Throttled {
    inner: Arc<dyn ObjectStore>,
    latency: Duration,
    bandwidth: u64,
}

impl Throttled {
    /// `inner`, each request after `latency`, each GET's body at
    /// `bandwidth` bytes a second (0: as fast as `inner` gives it).
    pub fn new(inner: impl ObjectStore, latency: Duration, bandwidth: u64) -> Self {
        Throttled {
            inner: Arc::new(inner),
            latency,
            bandwidth,
        }
    }

    /// The store it wraps.
    pub fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }
}

impl fmt::Display for Throttled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Throttled({}, {:?}, {} B/s)",
            self.inner, self.latency, self.bandwidth
        )
    }
}

/// `body`'s pieces, each held until `bandwidth` bytes a second since the
/// first allow it.
fn paced(
    body: BoxStream<'static, Result<bytes::Bytes>>,
    bandwidth: u64,
) -> BoxStream<'static, Result<bytes::Bytes>> {
    if bandwidth == 0 {
        return body;
    }
    let start = tokio::time::Instant::now();
    stream::unfold((body, 0u64), move |(mut body, sent)| async move {
        let piece = body.next().await?;
        let sent = sent + piece.as_ref().map_or(0, |b| b.len() as u64);
        let due = u128::from(sent) * 1_000_000_000 / u128::from(bandwidth);
        let due = Duration::from_nanos(u64::try_from(due).unwrap_or(u64::MAX));
        tokio::time::sleep_until(start + due).await;
        Some((piece, (body, sent)))
    })
    .boxed()
}

crate::__forward_object_store! {
    object_store;
    Throttled,
    inner,
    async fn get_opts(&self, l: &Path, o: GetOptions) -> Result<GetResult> {
        tokio::time::sleep(self.latency).await;
        let r = self.inner.get_opts(l, o).await?;
        let (meta, range, attributes) = (r.meta.clone(), r.range.clone(), r.attributes.clone());
        let body = paced(r.into_stream(), self.bandwidth);
        Ok(super::get_result(GetResultPayload::Stream(body), meta, range, attributes))
    }
}
