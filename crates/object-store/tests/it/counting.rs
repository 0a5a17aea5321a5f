//! A store that counts the requests reaching it, and can fail or delay its
//! GETs: the inner store of the tests.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use foliocache_object_store::forward_object_store;
use futures_util::{StreamExt, TryStreamExt};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{GetOptions, GetResult, GetResultPayload, ObjectStore, Result};

/// What reached the store.
#[derive(Debug)]
pub struct Seen {
    /// GETs of data (not HEADs).
    pub gets: AtomicU64,
    /// HEADs (`get_opts` with `head`).
    pub heads: AtomicU64,
    /// While set, every GET of data fails with a `Generic` error.
    pub fail_gets: AtomicBool,
    /// While set, GETs ignore `If-Match` (as s3s-fs's GetObject does).
    pub ignore_if_match: AtomicBool,
    /// Milliseconds each GET (a HEAD included) waits before it is
    /// answered.
    pub delay_ms: AtomicU64,
    /// While set, each GET of data (counted first) waits for a permit of
    /// `gate` before it is answered.
    pub gated: AtomicBool,
    /// The permits gated GETs wait for (none at first).
    pub gate: tokio::sync::Semaphore,
    /// While non-zero, a GET's body streams in pieces of this many bytes
    /// (`InMemory` answers in one).
    pub piece: AtomicU64,
    /// While set, a GET's body fails after its first piece.
    pub fail_mid_stream: AtomicBool,
    /// GETs of data inside `get_opts` now, and the most at once.
    pub active: AtomicU64,
    pub max_active: AtomicU64,
    /// The furthest end of a GET's range asked for so far.
    pub max_end: AtomicU64,
    /// While non-zero (with `piece`), one link that every body shares:
    /// each piece takes it for this many microseconds.
    pub link_us: AtomicU64,
    link: tokio::sync::Mutex<()>,
    /// GETs of data by path.
    by_path: std::sync::Mutex<std::collections::HashMap<String, u64>>,
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            gets: AtomicU64::new(0),
            heads: AtomicU64::new(0),
            fail_gets: AtomicBool::new(false),
            ignore_if_match: AtomicBool::new(false),
            delay_ms: AtomicU64::new(0),
            gated: AtomicBool::new(false),
            gate: tokio::sync::Semaphore::new(0),
            piece: AtomicU64::new(0),
            fail_mid_stream: AtomicBool::new(false),
            active: AtomicU64::new(0),
            max_active: AtomicU64::new(0),
            max_end: AtomicU64::new(0),
            link_us: AtomicU64::new(0),
            link: tokio::sync::Mutex::new(()),
            by_path: Default::default(),
        }
    }
}

impl Seen {
    pub fn gets(&self) -> u64 {
        self.gets.load(Ordering::SeqCst)
    }
    pub fn heads(&self) -> u64 {
        self.heads.load(Ordering::SeqCst)
    }
    /// GETs of data of the paths that begin with `prefix`.
    pub fn gets_under(&self, prefix: &str) -> u64 {
        let by_path = self.by_path.lock().expect("not poisoned");
        by_path
            .iter()
            .filter(|(p, _)| p.starts_with(prefix))
            .map(|(_, n)| n)
            .sum()
    }
}

/// `InMemory`, counted.
#[derive(Debug, Clone)]
pub struct Counting {
    pub inner: Arc<InMemory>,
    pub seen: Arc<Seen>,
}

impl Counting {
    pub fn new() -> Self {
        Counting {
            inner: Arc::new(InMemory::new()),
            seen: Arc::new(Seen::default()),
        }
    }
}

impl fmt::Display for Counting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Counting({})", self.inner)
    }
}

impl Counting {
    /// A GET of data, once counted: gated or failed as `seen`
    /// says, its body cut into pieces.
    async fn get_data(&self, l: &Path, o: GetOptions) -> Result<GetResult> {
        if self.seen.gated.load(Ordering::SeqCst) {
            self.seen.gate.acquire().await.expect("open").forget();
        }
        if self.seen.fail_gets.load(Ordering::SeqCst) {
            return Err(object_store::Error::Generic {
                store: "Counting",
                source: "injected GET failure".into(),
            });
        }
        let mut r = self.inner.get_opts(l, o).await?;
        let piece = self.seen.piece.load(Ordering::SeqCst) as usize;
        let fail = self.seen.fail_mid_stream.load(Ordering::SeqCst);
        if piece == 0 && !fail {
            return Ok(r);
        }
        // The body taken out and cut up; the rest of the answer kept
        // (its fields differ between object_store's versions).
        let empty = GetResultPayload::Stream(futures_util::stream::empty().boxed());
        let body = match std::mem::replace(&mut r.payload, empty) {
            GetResultPayload::Stream(s) => {
                let parts: Vec<Bytes> = s.try_collect().await?;
                Bytes::from(parts.concat())
            }
            other => {
                r.payload = other;
                return Ok(r);
            }
        };
        let n = if piece == 0 { body.len() } else { piece };
        let mut pieces: Vec<Result<Bytes>> = (0..body.len())
            .step_by(n.max(1))
            .map(|at| Ok(body.slice(at..(at + n).min(body.len()))))
            .collect();
        if fail {
            pieces.truncate(1);
            pieces.push(Err(object_store::Error::Generic {
                store: "Counting",
                source: "injected failure mid-stream".into(),
            }));
        }
        let pieces = futures_util::stream::iter(pieces);
        let us = self.seen.link_us.load(Ordering::SeqCst);
        r.payload = GetResultPayload::Stream(if us == 0 {
            pieces.boxed()
        } else {
            let seen = self.seen.clone();
            pieces
                .then(move |p| {
                    let seen = seen.clone();
                    async move {
                        let _link = seen.link.lock().await;
                        tokio::time::sleep(Duration::from_micros(us)).await;
                        p
                    }
                })
                .boxed()
        });
        Ok(r)
    }
}

forward_object_store! {
    Counting,
    inner,
    async fn get_opts(&self, l: &Path, mut o: GetOptions) -> Result<GetResult> {
        if self.seen.ignore_if_match.load(Ordering::SeqCst) {
            o.if_match = None;
        }
        let ms = self.seen.delay_ms.load(Ordering::SeqCst);
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        if o.head {
            self.seen.heads.fetch_add(1, Ordering::SeqCst);
            return self.inner.get_opts(l, o).await;
        }
        self.seen.gets.fetch_add(1, Ordering::SeqCst);
        *self
            .seen
            .by_path
            .lock()
            .expect("not poisoned")
            .entry(l.to_string())
            .or_default() += 1;
        if let Some(object_store::GetRange::Bounded(r)) = &o.range {
            self.seen.max_end.fetch_max(r.end, Ordering::SeqCst);
        }
        let now = self.seen.active.fetch_add(1, Ordering::SeqCst) + 1;
        self.seen.max_active.fetch_max(now, Ordering::SeqCst);
        let r = self.get_data(l, o).await;
        self.seen.active.fetch_sub(1, Ordering::SeqCst);
        r
    }

    async fn get_ranges(&self, l: &Path, r: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.inner.get_ranges(l, r).await
    }
}
