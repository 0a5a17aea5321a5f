//! [`Asked`]: the bytes a client asks its store for. Shared by this crate
//! (object_store 0.14) and the DataFusion client (`clients/datafusion`,
//! object_store 0.13), which compiles this file as a module of its own
//! (`#[path]`): `object_store` and `forward_object_store!` name the
//! version each crate reads through.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use foliocache_object_store::forward_object_store;
use object_store::path::Path;
use object_store::{GetOptions, GetResult, ObjectStore};

/// A store that counts the bytes its readers ask for (GETs' ranges and
/// `get_ranges`' ranges, before the store it wraps coalesces or widens
/// them) and passes every call to the store it wraps.
#[derive(Debug)]
pub struct Asked {
    inner: Arc<dyn ObjectStore>,
    bytes: AtomicU64,
    requests: AtomicU64,
}

impl Asked {
    /// `inner`, counted.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Asked {
        Asked {
            inner,
            bytes: AtomicU64::new(0),
            requests: AtomicU64::new(0),
        }
    }

    /// (requests, bytes) asked for so far: a `get_ranges` call counts
    /// once, with the sum of its ranges.
    pub fn asked(&self) -> (u64, u64) {
        (
            self.requests.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }

    fn count(&self, bytes: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

impl fmt::Display for Asked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Asked({})", self.inner)
    }
}

forward_object_store! { Asked, inner,
    async fn get_opts(&self, l: &Path, o: GetOptions) -> object_store::Result<GetResult> {
        let head = o.head;
        let r = self.inner.get_opts(l, o).await?;
        if !head {
            self.count(r.range.end - r.range.start);
        }
        Ok(r)
    }

    async fn get_ranges(&self, l: &Path, ranges: &[Range<u64>]) -> object_store::Result<Vec<Bytes>> {
        self.count(ranges.iter().map(|r| r.end - r.start).sum());
        self.inner.get_ranges(l, ranges).await
    }
}
