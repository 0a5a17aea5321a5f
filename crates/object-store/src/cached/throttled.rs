//! [`Throttled`]: a store slowed to a remote's pace, for examples and
//! benchmarks: `LocalFileSystem` (or `InMemory`) behind it answers as S3
//! does, each request after its first-byte latency, each GET's body at a
//! bandwidth per request ([`Throttled::new`]) or through one link whose
//! bandwidth every GET in flight shares ([`Throttled::link`]: a node's
//! network, which concurrent GETs divide and cannot exceed).
//!
//! object_store's own `ThrottledStore` (0.13, 0.14) cannot stand in for
//! it over `LocalFileSystem`: its GET wraps the body's stream and panics
//! (`unimplemented!`) on the file payloads `LocalFileSystem` answers with.
//! `Throttled` reads the body in pieces, each a ranged GET of the wrapped
//! store pinned to the version the GET found (16 KiB first, doubling to
//! 256 KiB), and holds each piece until the bandwidth allows it since the
//! first byte, against absolute deadlines (a wait per piece would add the
//! timer's rounding, a millisecond, to each).

use super::object_store;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use futures_util::stream::{self, BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, GetResult, GetResultPayload, ObjectStore, Result};

/// A store whose reads (GETs and HEADs) wait `latency` before they are
/// sent to the store it wraps, and whose GETs' bodies arrive at
/// `bandwidth` bytes a second each (see the module documentation).
/// Writes and listings pass through at once. Needs a tokio runtime with
/// its timer (`enable_time`). A GET's answer is the inner store's, but
/// for its `extensions`, its body read from the inner store in pieces
/// (see the module documentation).
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
    /// With [`Throttled::link`]: when the link is free again, the pieces
    /// of every GET queued on it in the order they came.
    link: Option<Arc<Mutex<Option<Instant>>>>,
}

impl Throttled {
    /// `inner`, each request after `latency`, each GET's body at
    /// `bandwidth` bytes a second (0: as fast as `inner` gives it).
    pub fn new(inner: impl ObjectStore, latency: Duration, bandwidth: u64) -> Self {
        Throttled {
            inner: Arc::new(inner),
            latency,
            bandwidth,
            link: None,
        }
    }

    /// `inner`, each request after `latency`, the GETs' bodies through
    /// one link of `bandwidth` bytes a second (0: as fast as `inner`
    /// gives them) that every GET in flight shares: one GET alone has the
    /// whole link, two at once half each, and together they never pass
    /// it (what a node's network does; [`new`](Self::new)'s bandwidth is
    /// each GET's own, as S3's per-request limit).
    pub fn link(inner: impl ObjectStore, latency: Duration, bandwidth: u64) -> Self {
        Throttled {
            link: Some(Arc::default()),
            ..Throttled::new(inner, latency, bandwidth)
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
            "Throttled({}, {:?}, {} B/s{})",
            self.inner,
            self.latency,
            self.bandwidth,
            if self.link.is_some() { " shared" } else { "" }
        )
    }
}

/// How long `bytes` take at `bandwidth` bytes a second.
fn transfer(bytes: u64, bandwidth: u64) -> Duration {
    let ns = u128::from(bytes) * 1_000_000_000 / u128::from(bandwidth);
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// An idle gap of the link shorter than this is taken for the timer's
/// lateness, not idleness: a piece sent after a piece whose due time the
/// timer overslept by up to a millisecond starts at that due time, so
/// that one GET alone keeps the whole bandwidth (a burst of this long at
/// most is the cost).
const SLACK: Duration = Duration::from_millis(2);

/// `body`'s pieces, each held until `bandwidth` bytes a second since the
/// first allow it; with `link`, each held until the link (shared with
/// the other GETs' pieces) has carried it: it starts when the link is
/// free or now, whichever is later (within [`SLACK`]).
fn paced(
    body: BoxStream<'static, Result<bytes::Bytes>>,
    bandwidth: u64,
    link: Option<Arc<Mutex<Option<Instant>>>>,
) -> BoxStream<'static, Result<bytes::Bytes>> {
    if bandwidth == 0 {
        return body;
    }
    let start = Instant::now();
    stream::unfold((body, 0u64), move |(mut body, sent)| {
        let link = link.clone();
        async move {
            let piece = body.next().await?;
            let len = piece.as_ref().map_or(0, |b| b.len() as u64);
            let due = match &link {
                None => start + transfer(sent + len, bandwidth),
                Some(link) => {
                    let mut free = link.lock();
                    let now = Instant::now();
                    let from = match *free {
                        Some(f) if f + SLACK >= now => f,
                        _ => now,
                    };
                    let due = from + transfer(len, bandwidth);
                    *free = Some(due);
                    due
                }
            };
            tokio::time::sleep_until(due).await;
            Some((piece, (body, sent + len)))
        }
    })
    .boxed()
}

/// The first piece of a GET's body, in bytes; each next is twice the
/// last, up to [`PIECE`].
const FIRST_PIECE: u64 = 16 << 10;
/// The largest piece: an HTTP body comes in frames of a few KiB to tens
/// of KiB, but a piece is a request to the wrapped store and a timer
/// here, whose cost would cap the link under a few hundred MB/s at 8 KiB
/// (`LocalFileSystem`'s stream reads a file in pieces of 8 KiB, each on
/// tokio's blocking pool).
const PIECE: u64 = 256 << 10;

/// The body of the GET `r` of `path` from `inner`, in pieces each read by
/// a ranged GET of its own of the version `r` answered with (`If-Match`
/// its e_tag, and its version id): from [`FIRST_PIECE`] bytes, doubling
/// to [`PIECE`], so that a first byte is not held for a large piece and
/// a long body costs a request per 256 KiB, not per 8 KiB.
fn pieces(
    inner: Arc<dyn ObjectStore>,
    path: Path,
    r: &GetResult,
) -> BoxStream<'static, Result<bytes::Bytes>> {
    let (meta, end) = (r.meta.clone(), r.range.end);
    stream::try_unfold((r.range.start, FIRST_PIECE), move |(at, len)| {
        let (inner, path, meta) = (inner.clone(), path.clone(), meta.clone());
        async move {
            if at >= end {
                return Ok(None);
            }
            let to = end.min(at + len);
            let opts = GetOptions {
                range: Some(GetRange::Bounded(at..to)),
                if_match: meta.e_tag.clone(),
                version: meta.version.clone(),
                ..GetOptions::default()
            };
            let piece = inner.get_opts(&path, opts).await?.bytes().await?;
            Ok(Some((piece, (to, (len * 2).min(PIECE)))))
        }
    })
    .boxed()
}

crate::__forward_object_store! {
    object_store;
    Throttled,
    inner,
    async fn get_opts(&self, l: &Path, o: GetOptions) -> Result<GetResult> {
        tokio::time::sleep(self.latency).await;
        let head = o.head;
        let r = self.inner.get_opts(l, o).await?;
        if head || self.bandwidth == 0 {
            return Ok(r);
        }
        let (meta, range, attributes) = (r.meta.clone(), r.range.clone(), r.attributes.clone());
        let body = pieces(self.inner.clone(), l.clone(), &r);
        drop(r);
        let body = paced(body, self.bandwidth, self.link.clone());
        Ok(super::get_result(GetResultPayload::Stream(body), meta, range, attributes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // The version this module is compiled for (`super::object_store`), not
    // the dev-dependency of the same name: with object_store 0.13 alone
    // they are two crates.
    use super::object_store::memory::InMemory;
    use super::object_store::ObjectStoreExt;

    /// Two GETs of 1 MB at once, on tokio's paused clock (which jumps to
    /// each deadline: no wall time is measured): through a link of 1 MB/s
    /// they share it and end 2 s after the latency; at 1 MB/s each they
    /// end 1 s after it.
    #[test]
    fn a_link_is_shared_by_the_gets_in_flight_and_a_per_request_bandwidth_is_not() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let latency = Duration::from_millis(50);
            for (store, took) in [
                (
                    Throttled::link(InMemory::new(), latency, 1_000_000),
                    Duration::from_secs(2),
                ),
                (
                    Throttled::new(InMemory::new(), latency, 1_000_000),
                    Duration::from_secs(1),
                ),
            ] {
                for p in ["a", "b"] {
                    store.put(&Path::from(p), vec![7u8; 1_000_000].into()).await.unwrap();
                }
                let t = Instant::now();
                let get = |p: &'static str| {
                    let store = &store;
                    async move { store.get(&Path::from(p)).await.unwrap().bytes().await.unwrap() }
                };
                let (a, b) = futures_util::join!(get("a"), get("b"));
                assert_eq!((a.len(), b.len()), (1_000_000, 1_000_000));
                assert_eq!(t.elapsed(), latency + took, "{store}");
            }
        });
    }
}
