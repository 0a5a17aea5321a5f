//! Write-through: a put's bytes into the disk tier, so that the reads
//! that follow it (the compaction that reads a new SST once, the queries
//! of a new file) find them there instead of sending a GET each.
//!
//! ```text
//!   put_opts ──> inner put ──> its e_tag / version id: the chunks' keys
//!        └──> take(len) from the queue (waits while full: counted)
//!              └──> blocking pool: each 64 KiB chunk ──> DiskTier::put
//!                   (put_kept for CacheHint::KeepUntilRead) ──> queue back
//!                   ──> the put returns
//! ```
//!
//! A write through is never dropped: a put whose bytes do not fit in the
//! queue (the bytes being written to the tier) waits for room, and is
//! counted ([`CachedStoreStats::write_waits`](super::CachedStoreStats)).
//! The put returns once its chunks are in the tier (a local write after
//! the remote one), so a read after it finds them. A put the store
//! answers without an e_tag or a version id writes nothing: a later HEAD
//! could not name the chunks' version. What the tier does with a chunk
//! (a failed write is counted there, `io_errors`) is the tier's.
//!
//! The paths written through are remembered, a few thousand, by hash
//! ([`WriteThrough::wrote`]): the first read of one looks its version up
//! by a HEAD, whose answer names the chunks the tier holds, instead of
//! the GET of its range that an object's first read sends otherwise
//! (`CachedStore::first_get`), which would fetch bytes the tier has.

use super::object_store;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use object_store::path::Path;
use object_store::{PutPayload, PutResult};
use tokio::runtime::Handle;

use super::budget::GetBudget;
use super::remote::{version_name_of, Counters};
use crate::disk::{chunk_key, record_key, DiskTier, CHUNK};

/// The paths written through that are remembered ([`WriteThrough::wrote`]).
const WRITTEN: usize = 4096;

/// The tier a store writes its puts through to, and the queue that
/// bounds the bytes being written.
#[derive(Debug)]
pub(crate) struct WriteThrough {
    tier: Arc<DiskTier>,
    queue: GetBudget,
    /// Hashes of paths written through, each at the place its hash
    /// names (a later one there replaces it).
    written: Box<[AtomicU64]>,
}

impl WriteThrough {
    /// Writes through to `tier`, at most `queue` bytes at once.
    pub(crate) fn new(tier: Arc<DiskTier>, queue: u64) -> Self {
        WriteThrough {
            tier,
            queue: GetBudget::new(queue),
            written: (0..WRITTEN).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Whether `path` was written through lately (by its hash: another
    /// path's may answer `true`, a path written through long ago
    /// `false`; either costs a request, not a wrong byte).
    pub(crate) fn wrote(&self, path: &Path) -> bool {
        let (at, hash) = place(path);
        self.written[at].load(Ordering::Relaxed) == hash
    }

    /// Writes `payload`, put at `path` as the version `put` names, to the
    /// tier (`keep`: kept until read), waiting for room in the queue. The
    /// put itself is done: nothing here fails it.
    pub(crate) async fn write(
        &self,
        path: &Path,
        payload: PutPayload,
        put: &PutResult,
        keep: bool,
        counters: &Counters,
    ) {
        let size = payload.content_length() as u64;
        let Some(version) = version_name_of(put.version.as_deref(), put.e_tag.as_deref(), size)
        else {
            return;
        };
        let taken = match self.queue.try_take(size) {
            Some(t) => t,
            None => {
                Counters::add(&counters.write_waits, 1);
                match self.queue.take(size).await {
                    Ok(t) => t,
                    // (The queue is never closed.)
                    Err(_) => return,
                }
            }
        };
        let (tier, name) = (self.tier.clone(), path.to_string());
        let chunks = size.div_ceil(CHUNK as u64);
        let write = move || {
            let mut buf = Vec::with_capacity(CHUNK);
            let mut c = 0;
            for part in payload.iter() {
                let mut part = &part[..];
                while !part.is_empty() {
                    let n = (CHUNK - buf.len()).min(part.len());
                    buf.extend_from_slice(&part[..n]);
                    part = &part[n..];
                    if buf.len() == CHUNK {
                        put_chunk(&tier, chunk_key(&name, &version, c), &buf, keep);
                        c += 1;
                        buf.clear();
                    }
                }
            }
            if !buf.is_empty() {
                put_chunk(&tier, chunk_key(&name, &version, c), &buf, keep);
            }
            drop(taken);
        };
        let done = match Handle::try_current() {
            Ok(h) => h.spawn_blocking(write).await.is_ok(),
            Err(_) => {
                write();
                true
            }
        };
        if done {
            let (at, hash) = place(path);
            self.written[at].store(hash, Ordering::Relaxed);
            Counters::add(&counters.written_through, chunks);
        } else {
            log::warn!("the write through of {path} to the disk tier did not finish (its task was cancelled or panicked): its reads go to the store");
        }
    }
}

/// Where `path` is remembered in [`WriteThrough::written`], and its hash
/// (never 0: an empty place).
fn place(path: &Path) -> (usize, u64) {
    let hash = record_key(path.as_ref()) as u64 | 1;
    ((hash >> 1) as usize % WRITTEN, hash)
}

/// Writes chunk `key` to `tier`, kept until read or not.
fn put_chunk(tier: &DiskTier, key: u128, data: &[u8], keep: bool) {
    if keep {
        tier.put_kept(key, data);
    } else {
        tier.put(key, data);
    }
}
