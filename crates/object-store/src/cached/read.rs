//! The read path: a range of a tracked object, lent from its mapping (a
//! hit in one folio) or copied out of it.
//!
//! ```text
//!   read(obj, range)
//!     0. the read noted in the object's pattern: a stream's when more
//!        than two reads in a row each began where the last ended
//!     1. on the caller's thread, no IO, no wait: a range in one cached
//!        folio is that folio, pinned and lent to the returned `Bytes`;
//!        else NOWAIT reads copy what is cached (a hit ends here; a
//!        readahead marker met starts the next window in the background)
//!     2. the rest: a blocking read on tokio's blocking pool
//!        (spawn_blocking), which misses into foliocache's read path:
//!        readahead (a stream's only), folio locks, one GET per run of
//!        missing folios
//! ```
//!
//! A miss that is not a stream's fetches the pages it asked for, no more:
//! a reader's first read (Parquet's first data read begins at byte 4),
//! each column chunk of a query, a point read. A table's reader reads a
//! row group's columns one after another (the filter column, then the one
//! beside it), so two reads in a row are not yet a stream; a third is.
//!
//! A whole-object or large GET is served in pieces of [`CHUNK`] bytes, the
//! first read before the `GetResult` is returned (so that a stale version
//! is found while the request can still go to the new one), the rest as
//! the caller polls the stream: memory held per request is one piece.

use super::object_store;
use std::io;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use foliocache::{Cache, File, ReadFlags};
use futures_util::stream::{self, BoxStream, StreamExt};
use object_store::{coalesce_ranges, Error, Result, OBJECT_STORE_COALESCE_DEFAULT};
use tokio::runtime::Handle;

use super::objects::Object;
use super::remote::{into_store_error, Counters, STORE};

/// The most bytes one piece of a GET's stream holds.
pub(crate) const CHUNK: u64 = 4 << 20;
/// A stream's readahead window before the remote is measured, in pages
/// (foliocache's default, which the cache caps at an eighth of itself).
const DEFAULT_STREAM_PAGES: u64 = 2048;

/// Reads `range` (within the object) of `obj`: from memory where cached,
/// else through the cache's read path on a blocking thread (`once`: its
/// folios not kept after the read, foliocache's `DONTCACHE`). Counts a
/// hit or a miss.
pub(crate) async fn read(
    obj: &Arc<Object>,
    range: Range<u64>,
    counters: &Counters,
    cache: &Cache,
    once: bool,
) -> Result<Bytes> {
    let len = usize::try_from(range.end - range.start).map_err(|_| Error::Generic {
        store: STORE,
        source: format!("range {range:?} does not fit in memory").into(),
    })?;
    let stream = obj.note_read(&range);
    if stream && !once {
        prefetch(obj, range.end, counters, cache);
    }
    let (mut buf, done) = match cached(obj, range.start, len)? {
        Ok(hit) => {
            Counters::add(&counters.hits, 1);
            return Ok(hit);
        }
        Err(partial) => partial,
    };
    Counters::add(&counters.misses, 1);
    // A stream's miss reads ahead, as far as the remote's latency times
    // its bandwidth; any other fetches what it asked for (crate::window).
    obj.tune_readahead(match stream {
        true => counters.link.stream_pages().unwrap_or(DEFAULT_STREAM_PAGES),
        false => 0,
    });
    let at = range.start + done as u64;
    // The tier's chunks this miss finds are not promoted (crate::disk).
    let _once = once.then(|| obj.read_once());
    let obj2 = obj.clone();
    let flags = match once {
        true => ReadFlags::DONTCACHE,
        false => ReadFlags::NONE,
    };
    let blocking = move || {
        let r = read_exact(&obj2.file, &mut buf[done..], at, flags);
        (buf, r)
    };
    let (buf, r) = match Handle::try_current() {
        Ok(h) => h
            .spawn_blocking(blocking)
            .await
            .map_err(|e| Error::Generic {
                store: STORE,
                source: Box::new(e),
            })?,
        // Outside tokio: the read blocks the executor's thread.
        Err(_) => blocking(),
    };
    r.map_err(into_store_error)?;
    Ok(buf.into())
}

/// A stream's read of `obj` ending at `end` (a hit or a miss): extends
/// the stream's prefetch ([`Object::prefetch_span`]) when it is due, as
/// deep as the link needs (twice its latency times the rate of all GETs
/// together, `LinkModel::stream_depth`: deeper holds bytes unread and
/// sends GETs in bursts) and the cache can spare (half its capacity, as
/// `File::readahead` reads at most, while that much of `cache` is free;
/// once it is full, a quarter, as the cache caps its own streams' unread
/// windows: deeper, the span's unread bytes push the other readers' hot
/// set out, and its far end is evicted before the reader comes to it,
/// and fetched again), within the GET budget; by
/// the cache's asynchronous readahead of the span (`File::readahead`: the
/// span's windows of up to 2 MiB go to the cache's IO engine at once, each
/// a GET, as many in flight as the engine has threads and the budget of
/// GET bytes allows), started on a blocking thread (it allocates the
/// span's folios). One GET at a time cannot fill a link whose latency
/// times its bandwidth is more than a window: the next window's GET would
/// wait for the last's bytes and pay the latency again (crate::window).
pub(crate) fn prefetch(obj: &Object, end: u64, counters: &Counters, cache: &Cache) {
    if !obj.prefetch_due(end) {
        return;
    }
    let most = Counters::get(&counters.prefetch_most);
    let full = most.min(Counters::get(&counters.prefetch_full));
    let free = cache.free_bytes();
    let most = counters.link.stream_depth(most.min(full.max(free)));
    let Some(span) = obj.prefetch_span(end, most) else {
        return;
    };
    Counters::add(&counters.prefetches, 1);
    let file = obj.file.reopen();
    // Never fails today (`File::readahead`); a read that fails is
    // reported to the read of those bytes.
    let ahead = move || drop(file.readahead(span.start, span.end - span.start));
    match Handle::try_current() {
        Ok(h) => drop(h.spawn_blocking(ahead)),
        Err(_) => ahead(),
    }
}

/// Reads exactly `buf.len()` bytes at `offset` of `file` with `flags`.
fn read_exact(file: &File, mut buf: &mut [u8], mut offset: u64, flags: ReadFlags) -> io::Result<()> {
    while !buf.is_empty() {
        match file.read_at_flags(buf, offset, flags) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `len` bytes at `offset`, if every one is cached (without waiting for
/// IO): where they lie in one folio, the folio itself, lent (an owned pin
/// the returned `Bytes` holds until its last clone goes: no copy; see
/// docs/object-store.md, "Hits do not leave the task"); else (across
/// folios, or the cache lending no more) read into a buffer. If not,
/// `Err` of the buffer and how many of its first bytes were cached.
pub(crate) fn cached(obj: &Object, offset: u64, len: usize) -> Result<Result<Bytes, (Vec<u8>, usize)>> {
    if let Some(p) = obj.file.pin_cached_owned(offset, len) {
        return Ok(Ok(Bytes::from_owner(p)));
    }
    let mut buf = vec![0u8; len];
    let done = read_cached(obj, &mut buf, offset)?;
    Ok(if done == len {
        Ok(buf.into())
    } else {
        Err((buf, done))
    })
}

/// Copies what is cached of `buf.len()` bytes at `offset` into `buf`
/// without waiting for IO: the bytes copied, up to the first one not
/// cached.
fn read_cached(obj: &Object, buf: &mut [u8], offset: u64) -> Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match obj
            .file
            .read_at_flags(&mut buf[done..], offset + done as u64, ReadFlags::NOWAIT)
        {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(into_store_error(e)),
        }
    }
    Ok(done)
}

/// The stream of `range` of `obj` after its first piece, `first` (which
/// ends where the stream starts), one piece of at most [`CHUNK`] bytes at a
/// time, read as the caller polls.
pub(crate) fn stream_rest(
    obj: Arc<Object>,
    first: Bytes,
    range: Range<u64>,
    counters: Arc<Counters>,
    cache: Cache,
    once: bool,
) -> BoxStream<'static, Result<Bytes>> {
    let from = range.start + first.len() as u64;
    if from >= range.end {
        return stream::once(std::future::ready(Ok(first))).boxed();
    }
    let rest = stream::try_unfold(from, move |pos| {
        let (obj, counters, cache) = (obj.clone(), counters.clone(), cache.clone());
        async move {
            if pos >= range.end {
                return Ok(None);
            }
            let end = range.end.min(pos + CHUNK);
            let piece = read(&obj, pos..end, &counters, &cache, once).await?;
            Ok(Some((piece, end)))
        }
    });
    stream::once(async move { Ok(first) }).chain(rest).boxed()
}

/// Reads `ranges` (within the object, none empty) of `obj`: each one
/// cached whole is copied out; the others are merged where less than
/// [`OBJECT_STORE_COALESCE_DEFAULT`] apart (as the trait's own
/// `get_ranges` merges them, so a miss costs no more GETs or bytes than
/// the uncached store's) and read through the cache, one span at a time
/// in parallel.
pub(crate) async fn read_ranges(
    obj: &Arc<Object>,
    ranges: &[Range<u64>],
    counters: &Counters,
    cache: &Cache,
) -> Result<Vec<Bytes>> {
    let mut out: Vec<Option<Bytes>> = Vec::with_capacity(ranges.len());
    let mut missing = Vec::new();
    for r in ranges {
        let len = usize::try_from(r.end - r.start).map_err(|_| Error::Generic {
            store: STORE,
            source: format!("range {r:?} does not fit in memory").into(),
        })?;
        if let Ok(hit) = cached(obj, r.start, len)? {
            Counters::add(&counters.hits, 1);
            out.push(Some(hit));
        } else {
            missing.push(r.clone());
            out.push(None);
        }
    }
    if !missing.is_empty() {
        let fetch = |r: Range<u64>| {
            let obj = obj.clone();
            async move { read(&obj, r, counters, cache, false).await }
        };
        let mut got = coalesce_ranges(&missing, fetch, OBJECT_STORE_COALESCE_DEFAULT)
            .await?
            .into_iter();
        for slot in out.iter_mut().filter(|s| s.is_none()) {
            *slot = got.next();
        }
    }
    out.into_iter()
        .map(|b| {
            b.ok_or_else(|| Error::Generic {
                store: STORE,
                source: "a range was not read".into(),
            })
        })
        .collect()
}
