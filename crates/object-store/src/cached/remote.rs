//! The backing of one cached object: a foliocache [`Backing`] whose block
//! reads are ranged GETs of one version of one object.
//!
//! ```text
//!   Mapping (foliocache)        RemoteBacking
//!   folios 0..n of the object   path, the version's ObjectMeta, the store
//!        │ miss: one run of              │
//!        │ contiguous folios             v
//!        └──read_blocks(bufs, off)──> GET path, range off..off+len,
//!                                     if-match e_tag (or version id,
//!                                     or if-unmodified-since)
//! ```
//!
//! foliocache reads a run of contiguous folios with one `read_blocks` call
//! (`Mapping::read_window`, one IO per run), so a readahead window, or a
//! read missing many folios, is one GET. Folio locks make concurrent misses
//! of one folio one read: the second reader waits on the lock of the folio
//! the first inserted.
//!
//! Every GET names the version the mapping holds: a store whose object
//! changed answers `Precondition` (or `NotFound`), never the new bytes, so
//! a mapping never mixes two versions. The store's error goes up inside
//! the `io::Error` the cache returns ([`into_store_error`] takes it out
//! again), and a failed read leaves no folio behind (foliocache removes
//! the folios of a failed read), so errors are never cached.
//!
//! `read_blocks` is synchronous: it drives the GET's future to completion
//! on its own thread, through the tokio runtime's handle it was given
//! (`Handle::block_on`) or, without one, by parking the thread until the
//! future wakes it (`block_on`). It runs on
//! the threads foliocache reads on: the thread of a blocking read (the
//! store runs those on tokio's blocking pool, never on a runtime worker)
//! and the IO engine's pool threads (asynchronous readahead).

use super::object_store;
use std::future::Future;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use backing::{Backing, BackingInfo, DataPath, IoBuf, IoBufMut, BLOCK};
use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, GetResult, ObjectMeta, ObjectStore};
use parking_lot::Mutex;
use tokio::runtime::Handle;

use super::budget::{GetBudget, Taken};
use super::objects::Validity;
use crate::disk::{chunk_key, DiskTier, Found, Point, Request, CHUNK};
use crate::window::{span, Flights, Leader, LinkModel, NearMisses, Pieces, Role};

/// The name the store's own errors carry (`object_store::Error::Generic`'s
/// `store`).
pub(crate) const STORE: &str = "CachedStore";

/// The counters of a [`CachedStore`](crate::CachedStore), shared with its
/// objects' backings. Relaxed: each is a count on its own.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
    pub(crate) gets: AtomicU64,
    pub(crate) get_bytes: AtomicU64,
    pub(crate) get_errors: AtomicU64,
    pub(crate) heads: AtomicU64,
    pub(crate) stale: AtomicU64,
    /// Objects whose version came from the disk tier's record.
    pub(crate) recorded: AtomicU64,
    /// Point misses that waited for another's GET of their window.
    pub(crate) coalesced: AtomicU64,
    /// The remote's latency and bandwidth, from the GETs' timings.
    pub(crate) link: LinkModel,
    /// Read-around windows waiting for their tier writes in the
    /// background.
    pub(crate) pending_windows: AtomicU64,
    /// Chunks of puts written through to the disk tier.
    pub(crate) written_through: AtomicU64,
    /// Puts that waited for room in the write-through queue.
    pub(crate) write_waits: AtomicU64,
    /// Reads passed to the inner store uncached ([`CacheHint::DontCache`](crate::CacheHint)).
    pub(crate) passed_through: AtomicU64,
    /// Extensions of streams' prefetches (super::read::prefetch), and the
    /// deepest a prefetch reaches whatever the link (the budget of GET
    /// bytes, at most half the cache), and its bound once the cache is
    /// full (a quarter of it).
    pub(crate) prefetches: AtomicU64,
    pub(crate) prefetch_most: AtomicU64,
    pub(crate) prefetch_full: AtomicU64,
}

/// A point read is at most this fraction of its window.
const POINT_SHARE: u64 = 8;
/// Misses in a window before the next one fetches it whole.
const NEAR_MISSES: u32 = 2;

/// The most read-around windows whose tier writes wait in the background
/// (each holds its window's bytes); past it a miss writes its own.
const MAX_PENDING_WINDOWS: u64 = 16;

impl Counters {
    /// Adds `n` to `c`.
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// `c`'s value.
    pub(crate) fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// One version of one object, read by ranged GETs (see the module
/// documentation).
pub(crate) struct RemoteBacking<S> {
    store: Arc<S>,
    path: Path,
    /// The version: its size bounds every read, its version id, e_tag or
    /// modification time conditions every GET.
    meta: ObjectMeta,
    /// The runtime that drives the GETs; `None` outside tokio.
    runtime: Option<Handle>,
    counters: Arc<Counters>,
    /// The disk tier, and this version's name in its keys.
    tier: Option<(Arc<DiskTier>, String)>,
    /// Windows being fetched for point misses (crate::window).
    flights: Arc<Flights>,
    /// The store's budget of GET bytes in flight (super::budget).
    budget: Arc<GetBudget>,
    /// Where the last range read from the remote or the tier ended: a
    /// range starting there is a sequential reader's.
    last_end: AtomicU64,
    /// Misses (not held by the tier) by point window, since the map was
    /// last cleared ([`point_reads_near`](Self::point_reads_near)).
    near: Mutex<NearMisses<u64>>,
    /// Writes the tier's record of this version (super::record), run
    /// once, when the tier first holds a chunk of it (a hit or a write):
    /// an object none of whose chunks is on disk gets no record.
    record: Mutex<Option<RecordWrite>>,
    /// Read-once reads of the object under way (`Object::read_once`):
    /// while there is one, the tier's chunks found are not promoted.
    once: Arc<AtomicU32>,
    /// What the store last said of this version, shared with its
    /// `Object`: each GET's answer says it again (super::objects::Validity).
    validity: Arc<Validity>,
    /// The bytes of this version at an offset that the GET which found
    /// it brought (`CachedStore`'s first read of an object): the first
    /// miss's [`fetch`](Self::fetch) of a range within them takes them
    /// instead of a GET ([`with_primed`](Self::with_primed)).
    primed: Mutex<Option<(u64, Bytes)>>,
}

/// What writes a version's record to the tier ([`RemoteBacking::new`]).
pub(crate) type RecordWrite = Box<dyn FnOnce() + Send>;

impl<S: ObjectStore> RemoteBacking<S> {
    /// A backing over `meta`'s version of `path` in `store`.
    pub(crate) fn new(
        store: Arc<S>,
        path: Path,
        meta: ObjectMeta,
        runtime: Option<Handle>,
        counters: Arc<Counters>,
        tier: Option<Arc<DiskTier>>,
        budget: Arc<GetBudget>,
    ) -> Self {
        let tier = tier.map(|t| (t, version_name(&meta)));
        RemoteBacking {
            store,
            path,
            meta,
            runtime,
            counters,
            tier,
            flights: Arc::default(),
            budget,
            last_end: AtomicU64::new(u64::MAX),
            near: Mutex::default(),
            record: Mutex::new(None),
            once: Arc::default(),
            validity: Arc::new(Validity::new()),
            primed: Mutex::new(None),
        }
    }

    /// The backing, `data` (this version's bytes at `at`, brought by the
    /// GET that found the version) served to its first miss, once: what
    /// of the miss's range `data` holds is not fetched again. Memory is
    /// held until the first miss, which the read that made the GET is.
    pub(crate) fn with_primed(self, primed: Option<(u64, Bytes)>) -> Self {
        *self.primed.lock() = primed;
        self
    }

    /// The backing, its GETs' answers told to `validity` (shared with
    /// its `Object`).
    pub(crate) fn with_validity(mut self, validity: Arc<Validity>) -> Self {
        self.validity = validity;
        self
    }

    /// The backing, `once` counting the object's read-once reads under
    /// way (shared with its `Object`).
    pub(crate) fn with_once(mut self, once: Arc<AtomicU32>) -> Self {
        self.once = once;
        self
    }

    /// The backing, `record` writing its version's record to the tier
    /// once the tier holds a chunk of it.
    pub(crate) fn with_record(self, record: Option<RecordWrite>) -> Self {
        *self.record.lock() = record;
        self
    }

    /// The record's write, the first time the tier holds a chunk of this
    /// version (`None` after).
    fn take_record(&self) -> Option<RecordWrite> {
        self.record.lock().take()
    }

    /// Hands `range`'s bytes (within the object) to `fill`, at their
    /// offsets: from the disk tier if it holds every chunk the range
    /// touches; else, for a point miss among others near it
    /// ([`point_reads_near`](Self::point_reads_near)), by a GET of its window
    /// ([`read_around`](Self::read_around)); else by a GET widened to
    /// whole chunks when one of them is admitted to the tier (a page of it
    /// missed a second time, [`DiskTier::admit`]), which is then written
    /// there. `fill` may be handed bytes of a range more than once (tier
    /// chunks, then a GET's): the last are the range's.
    fn read_range(&self, range: Range<u64>, fill: Fill<'_>) -> object_store::Result<()> {
        let Some((tier, version)) = &self.tier else {
            return self.fetch(range, fill).map(drop);
        };
        let chunk = CHUNK as u64;
        let chunks = range.start / chunk..range.end.div_ceil(chunk);
        let pages = |c: u64| {
            let lo = range.start.max(c * chunk) - c * chunk;
            let hi = range.end.min((c + 1) * chunk) - c * chunk;
            let (first, last) = (lo / BLOCK as u64, (hi - 1) / BLOCK as u64);
            (first..=last).fold(0u16, |m, p| m | 1 << p)
        };
        let asked: Vec<(u128, u16)> = chunks
            .map(|c| (chunk_key(self.path.as_ref(), version, c), pages(c)))
            .collect();
        let promote = self.once.load(Ordering::Relaxed) == 0;
        let sequential = self.last_end.swap(range.end, Ordering::Relaxed) == range.start;
        let window = self.counters.link.point_window();
        let point = window > 0
            && !sequential
            && (range.end - range.start).saturating_mul(POINT_SHARE) <= window;
        let mut paid = Paid::default();
        let ask = Ask {
            range: &range,
            chunks: &asked,
            promote,
            window: if point { window } else { 0 },
        };
        self.read_tiered(tier, version, &ask, fill, &mut paid)?;
        // What it cost, for the tier's curve (`disk::curve`).
        let key = |c: u64| chunk_key(self.path.as_ref(), version, c);
        let span = span(&range, window.max(1), self.meta.size);
        let first = span.start / chunk;
        tier.request(&Request {
            chunks: &asked,
            promote,
            point: point.then(|| Point {
                id: key(first),
                chunks: first..span.end.div_ceil(chunk),
                key: &key,
                after: NEAR_MISSES,
            }),
            gets: paid.gets,
            bytes: paid.bytes,
            len: range.end - range.start,
        });
        Ok(())
    }

    /// [`read_range`](Self::read_range), the part of `range` the primed
    /// bytes hold read on its own (before it and after it too), so that
    /// its [`fetch`](Self::fetch) is served from them: with a disk tier,
    /// the tier's lookup, admission and curve count it as the miss whose
    /// GET it is. The first miss only: they are dropped after it, used or
    /// not (a tier that held the range, a GET widened to whole chunks).
    fn read_primed(&self, range: Range<u64>, fill: Fill<'_>) -> object_store::Result<()> {
        let held = self.primed.lock().as_ref().map(|(at, d)| *at..*at + d.len() as u64);
        let Some(held) = held else {
            return self.read_range(range, fill);
        };
        let (lo, hi) = (range.start.max(held.start), range.end.min(held.end));
        let done = if lo < hi {
            [range.start..lo, lo..hi, hi..range.end]
                .into_iter()
                .filter(|r| r.start < r.end)
                .try_for_each(|r| self.read_range(r, &mut *fill))
        } else {
            self.read_range(range, fill)
        };
        drop(self.primed.lock().take());
        done
    }

    /// [`read_range`](Self::read_range) with a disk tier, of what `ask`
    /// asks; the GETs sent counted into `paid`.
    fn read_tiered(
        &self,
        tier: &Arc<DiskTier>,
        version: &str,
        ask: &Ask<'_>,
        fill: Fill<'_>,
        paid: &mut Paid,
    ) -> object_store::Result<()> {
        let Ask {
            range,
            chunks: asked,
            promote,
            window,
        } = *ask;
        let chunk = CHUNK as u64;
        let size = self.meta.size;
        let first = range.start / chunk;
        let len = |c: u64| ((size - c * chunk).min(chunk)) as usize;
        let held = (first..).zip(asked).all(|(c, &(key, _))| {
            let found = tier.get_with(key, len(c), promote, |data| {
                clip(range, c * chunk, data, &mut *fill)
            });
            if found == Found::Corrupt {
                // Said once: the damaged slot is empty from now on.
                log::warn!(
                    "disk tier: the chunk of {} at offset {} (version {version}) failed its checksum; read from the store instead",
                    self.path,
                    c * chunk
                );
            }
            found == Found::Hit
        });
        if held {
            if let Some(write) = self.take_record() {
                write();
            }
            return Ok(());
        }
        if window > 0 && self.point_reads_near(range, window) {
            return self.read_around(tier, range.clone(), window, fill, paid);
        }
        let admitted: Vec<u64> = (first..)
            .zip(asked)
            .filter(|&(_, &(key, pages))| tier.admit(key, pages))
            .map(|(c, _)| c)
            .collect();
        if admitted.is_empty() {
            return self.fetch_paid(range.clone(), fill, paid).map(drop);
        }
        // The admitted chunks are kept as the body streams in, and written
        // once it is all in (a GET that fails writes nothing).
        let mut kept: Vec<(u64, Vec<u8>)> = Vec::with_capacity(admitted.len());
        let wide = first * chunk..((first + asked.len() as u64) * chunk).min(size);
        let mut sink = |at: u64, data: &[u8]| {
            clip(range, at, data, &mut *fill);
            for (c, part) in split(at, data) {
                if admitted.binary_search(&c).is_err() {
                    continue;
                }
                match kept.last_mut() {
                    Some((k, buf)) if *k == c => buf.extend_from_slice(part),
                    _ => {
                        let mut buf = Vec::with_capacity(len(c));
                        buf.extend_from_slice(part);
                        kept.push((c, buf));
                    }
                }
            }
        };
        let _taken = self.fetch_paid(wide, &mut sink, paid)?;
        for (c, data) in kept {
            tier.put_read(asked[(c - first) as usize].0, &data);
        }
        if let Some(write) = self.take_record() {
            write();
        }
        Ok(())
    }

    /// [`fetch`](Self::fetch) of `range`, its GET and bytes counted into
    /// `paid`.
    fn fetch_paid(
        &self,
        range: Range<u64>,
        sink: Fill<'_>,
        paid: &mut Paid,
    ) -> object_store::Result<Option<Taken>> {
        let n = range.end - range.start;
        let taken = self.fetch(range, sink)?;
        paid.gets += 1;
        paid.bytes += n;
        Ok(taken)
    }

    /// Whether a miss of `range`, a point read (at most an
    /// [`POINT_SHARE`]th of `window`, not sequential), is among others
    /// near it, so that its `window` is worth fetching whole: a window
    /// where [`NEAR_MISSES`] misses came before it. A reader that reads
    /// each part once (a table's column chunks, its footer) is fetched
    /// what it asks for; one that comes back near its misses (point
    /// lookups of hot keys) gets the window after a few.
    fn point_reads_near(&self, range: &Range<u64>, window: u64) -> bool {
        self.near.lock().count(range.start / window) > NEAR_MISSES
    }

    /// A point miss of `range`: one GET of the aligned `window` around it
    /// (a GET that small is latency-bound: the neighbours cost little
    /// more, crate::window), whose chunks all go to the tier, so that
    /// the next miss nearby is a disk hit. Concurrent misses of one
    /// window wait for its one GET; if it fails, each sends its own.
    fn read_around(
        &self,
        tier: &Arc<DiskTier>,
        range: Range<u64>,
        window: u64,
        fill: Fill<'_>,
        paid: &mut Paid,
    ) -> object_store::Result<()> {
        let span = span(&range, window, self.meta.size);
        match self.flights.begin(&span) {
            Role::Leader(lead) => {
                // The window in the tier's chunks, as its body streams in.
                let mut pieces: Vec<Bytes> = Vec::new();
                let mut piece: Vec<u8> = Vec::new();
                let mut sink = |at: u64, data: &[u8]| {
                    clip(&range, at, data, &mut *fill);
                    for (_, part) in split(at, data) {
                        if piece.is_empty() {
                            piece.reserve_exact(CHUNK);
                        }
                        piece.extend_from_slice(part);
                        if piece.len() == CHUNK {
                            pieces.push(std::mem::take(&mut piece).into());
                        }
                    }
                };
                match self.fetch_paid(span.clone(), &mut sink, paid) {
                    Ok(taken) => {
                        if !piece.is_empty() {
                            pieces.push(piece.into());
                        }
                        let pieces: Pieces = pieces.into();
                        lead.publish(Some(pieces.clone()));
                        let version = self.tier.as_ref().map_or("", |t| t.1.as_str());
                        self.keep(tier, version, span.start, pieces, (lead, taken));
                        Ok(())
                    }
                    Err(e) => {
                        lead.publish(None);
                        Err(e)
                    }
                }
            }
            Role::Waiter(flight) => {
                Counters::add(&self.counters.coalesced, 1);
                match flight.wait() {
                    Some(pieces) => {
                        for (i, p) in pieces.iter().enumerate() {
                            clip(&range, span.start + (i * CHUNK) as u64, p, &mut *fill);
                        }
                        Ok(())
                    }
                    None => self.fetch_paid(range, fill, paid).map(drop),
                }
            }
        }
    }

    /// Writes `pieces` (the window at `start`, in chunks) to the tier,
    /// then ends its flight and gives its GET's budget back (`held`): on
    /// the runtime's blocking pool, off the miss's path (the flight serves
    /// the window meanwhile), or here outside tokio or when
    /// [`MAX_PENDING_WINDOWS`] wait already (so the memory they hold is
    /// bounded when the disk is slower than the remote).
    fn keep(
        &self,
        tier: &Arc<DiskTier>,
        version: &str,
        start: u64,
        pieces: Pieces,
        held: (Leader, Option<Taken>),
    ) {
        let (tier, version, path) = (tier.clone(), version.to_string(), self.path.clone());
        let record = self.take_record();
        let write = move || {
            let chunk = CHUNK as u64;
            for (i, data) in pieces.iter().enumerate() {
                let c = start / chunk + i as u64;
                tier.put_read(chunk_key(path.as_ref(), &version, c), data);
            }
            if let Some(write) = record {
                write();
            }
            drop(held);
        };
        let pending = &self.counters.pending_windows;
        let runtime = self.runtime.as_ref();
        match runtime.filter(|_| pending.fetch_add(1, Ordering::Relaxed) < MAX_PENDING_WINDOWS) {
            Some(h) => {
                let counters = self.counters.clone();
                drop(h.spawn_blocking(move || {
                    write();
                    counters.pending_windows.fetch_sub(1, Ordering::Relaxed);
                }));
            }
            None => {
                if runtime.is_some() {
                    pending.fetch_sub(1, Ordering::Relaxed);
                }
                write();
            }
        }
    }

    /// The GET of `range` of this version, its body handed to `sink` chunk
    /// by chunk as it streams in (at each chunk's offset in the object), so
    /// that no buffer of the body's size is made; it must be `range`'s
    /// bytes exactly ([`counted_get`]). What it took of the GET budget is
    /// returned, to be dropped once the bytes are where they go (on an
    /// error, it is given back here). A range the primed bytes hold is
    /// handed from them instead, taking none
    /// ([`serve_primed`](Self::serve_primed)).
    fn fetch(&self, range: Range<u64>, sink: Fill<'_>) -> object_store::Result<Option<Taken>> {
        if self.serve_primed(&range, sink) {
            return Ok(None);
        }
        let answer = |r: &GetResult| {
            self.check_version(&r.meta)?;
            if confirms(&self.meta, &r.meta) {
                // Answered by the current version: as a HEAD that found
                // it unchanged now.
                self.validity.confirm();
            }
            Ok(range.clone())
        };
        let opts = version_conditions(&self.meta);
        let on = (&*self.store, &*self.budget, &*self.counters);
        let get = counted_get(on, &self.path, opts, range.clone(), answer, |at, b| {
            sink(at, &b)
        });
        let done = match &self.runtime {
            Some(h) => h.block_on(get),
            None => block_on(get),
        };
        done.map(Some).inspect_err(|e| {
            if gone(e) {
                // The version pinned is not the store's any more: as a
                // HEAD that found another would, the object is replaced
                // at its next read, not served from memory.
                self.validity.supersede();
            }
        })
    }

    /// Hands `sink` `range` from the primed bytes (the GET that found
    /// this version brought them: counted where it was sent), taking
    /// them, if they hold all of it; `false` (left as they are) if not.
    fn serve_primed(&self, range: &Range<u64>, sink: Fill<'_>) -> bool {
        let mut primed = self.primed.lock();
        let (at, data) = match primed.take() {
            Some((at, data)) if at <= range.start && range.end <= at + data.len() as u64 => {
                (at, data)
            }
            other => {
                *primed = other;
                return false;
            }
        };
        drop(primed);
        sink(range.start, &data[(range.start - at) as usize..(range.end - at) as usize]);
        true
    }

    /// A GET's answer of version `got` must be this mapping's.
    fn check_version(&self, got: &ObjectMeta) -> object_store::Result<()> {
        if same_version(got, &self.meta) {
            return Ok(());
        }
        // A store that ignores the condition (s3s-fs does on GET):
        // another version's bytes, not this mapping's.
        let pinned = &self.meta;
        Err(object_store::Error::Precondition {
            path: self.path.to_string(),
            source: format!(
                "the store answered with version {:?}/{:?} of {} bytes, the cached one is {:?}/{:?} of {}",
                got.e_tag, got.version, got.size, pinned.e_tag, pinned.version, pinned.size
            )
            .into(),
        })
    }

}

/// A ranged GET of `range` of `path` (with `opts`' conditions) as the
/// store sends each of its own (a miss's, [`RemoteBacking::fetch`], or an
/// object's first read, `CachedStore::first_get`), on `on`: the store,
/// the GET budget it takes `range`'s bytes from before it is sent, and
/// the counters that count it (the GET; the bytes its body brought; an
/// error: the store's, `answer`'s, or a body not of `answer`'s length),
/// its answer's latency and body timed into the link model
/// (crate::window). `answer` checks the store's answer before its body
/// is read and names the object's range the body holds; the body goes to
/// `sink` piece by piece, at each piece's offset. Returns the budget
/// taken: to be dropped once the bytes are where they go.
pub(crate) async fn counted_get<S: ObjectStore>(
    (store, budget, counters): (&S, &GetBudget, &Counters),
    path: &Path,
    mut opts: GetOptions,
    range: Range<u64>,
    answer: impl FnOnce(&GetResult) -> object_store::Result<Range<u64>>,
    mut sink: impl FnMut(u64, Bytes),
) -> object_store::Result<Taken> {
    let mut got = 0u64;
    let get = async {
        let taken = budget.take(range.end - range.start).await?;
        opts.range = Some(GetRange::Bounded(range));
        let asked = Instant::now();
        let r = store.get_opts(path, opts).await?;
        let answered = Instant::now();
        let body = answer(&r)?;
        let want = body.end - body.start;
        let streaming = counters.link.body_began();
        let mut stream = r.into_stream();
        while let Some(piece) = stream.next().await {
            let piece = piece?;
            if got + piece.len() as u64 > want {
                return Err(wrong_length(path, got + piece.len() as u64, want));
            }
            let n = piece.len() as u64;
            sink(body.start + got, piece);
            got += n;
        }
        if got != want {
            return Err(wrong_length(path, got, want));
        }
        streaming.ended(got);
        counters.link.record(answered - asked, got, answered.elapsed());
        Ok(taken)
    };
    Counters::add(&counters.gets, 1);
    let done = get.await;
    Counters::add(&counters.get_bytes, got);
    if done.is_err() {
        Counters::add(&counters.get_errors, 1);
    }
    done
}

/// The error of a ranged GET of `path` whose body was `got` bytes (or
/// more), not `want`.
fn wrong_length(path: &Path, got: u64, want: u64) -> object_store::Error {
    object_store::Error::Generic {
        store: STORE,
        source: format!("ranged GET of {path} returned {got} bytes, not {want}").into(),
    }
}

/// The GETs one read sent and their bytes: what the disk tier's curve
/// counts (`disk::curve`).
#[derive(Default)]
struct Paid {
    gets: u64,
    bytes: u64,
}

/// What one read asks the tier ([`RemoteBacking::read_tiered`]).
#[derive(Clone, Copy)]
struct Ask<'a> {
    /// Its range in the object.
    range: &'a Range<u64>,
    /// Its chunks' keys, and the pages of each it asks.
    chunks: &'a [(u128, u16)],
    /// Whether a chunk found is marked used (not a read-once read).
    promote: bool,
    /// The read-around window of a point read (0: not one).
    window: u64,
}

/// Where a GET's body goes as it streams in: each chunk with its offset in
/// the object.
type Fill<'a> = &'a mut dyn FnMut(u64, &[u8]);

/// Hands `fill` the part of `data` (at `at` in the object) within `range`.
fn clip(range: &Range<u64>, at: u64, data: &[u8], fill: Fill<'_>) {
    let lo = range.start.max(at);
    let hi = range.end.min(at + data.len() as u64);
    if lo < hi {
        fill(lo, &data[(lo - at) as usize..(hi - at) as usize]);
    }
}

/// `data` (at `at` in the object) cut at the disk tier's chunk
/// boundaries: (chunk, its part of `data`).
fn split(at: u64, data: &[u8]) -> impl Iterator<Item = (u64, &[u8])> {
    let mut pos = at;
    let mut rest = data;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let c = pos / CHUNK as u64;
        let n = ((c + 1) * CHUNK as u64 - pos).min(rest.len() as u64) as usize;
        let (part, tail) = rest.split_at(n);
        rest = tail;
        pos += n as u64;
        Some((c, part))
    })
}

/// The buffers of one `read_blocks` call, at `offset` in the object,
/// filled by a GET's chunks in order (a cursor keeps the next buffer).
struct Bufs<'a, 'b> {
    bufs: &'a mut [IoBufMut<'b>],
    offset: u64,
    /// The buffer the last copy ended in, and its offset in the object.
    cur: (usize, u64),
}

impl Bufs<'_, '_> {
    /// Copies `data`, at `at` in the object, into the buffers.
    fn put(&mut self, at: u64, mut data: &[u8]) {
        if at < self.cur.1 {
            self.cur = (0, self.offset);
        }
        let (mut i, mut base) = self.cur;
        let mut pos = at;
        while !data.is_empty() && i < self.bufs.len() {
            let len = self.bufs[i].len() as u64;
            if pos >= base + len {
                (i, base) = (i + 1, base + len);
                continue;
            }
            let from = (pos - base) as usize;
            let n = (len as usize - from).min(data.len());
            self.bufs[i][from..from + n].copy_from_slice(&data[..n]);
            data = &data[n..];
            pos += n as u64;
        }
        self.cur = if i < self.bufs.len() {
            (i, base)
        } else {
            (0, self.offset)
        };
    }
}

/// Runs `fut` to completion on this thread, parking it while the future
/// waits: for a GET outside tokio (an `InMemory` store under another
/// executor). Unlike `futures::executor::block_on` it may run inside
/// another executor's `block_on` (a blocking read on that executor's
/// thread), which only blocks that thread.
fn block_on<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

/// The name of `meta`'s version in the disk tier's keys: its version id,
/// else its e_tag, else its modification time; with its size.
fn version_name(meta: &ObjectMeta) -> String {
    version_name_of(meta.version.as_deref(), meta.e_tag.as_deref(), meta.size).unwrap_or_else(
        || {
            format!(
                "t:{}:{}",
                meta.last_modified.timestamp_nanos_opt().unwrap_or(0),
                meta.size
            )
        },
    )
}

/// The name in the disk tier's keys of the version of `size` bytes with
/// `version` id or `e_tag` (what a put's answer names): as
/// [`version_name`] names it, `None` without either.
pub(crate) fn version_name_of(version: Option<&str>, e_tag: Option<&str>, size: u64) -> Option<String> {
    match (version, e_tag) {
        (Some(v), _) => Some(format!("v:{v}:{size}")),
        (None, Some(e)) => Some(format!("e:{e}:{size}")),
        (None, None) => None,
    }
}

/// Whether a GET's answer `got` is of the version `pinned`: the same size,
/// and the same e_tag and version id where both sides have one.
pub(crate) fn same_version(got: &ObjectMeta, pinned: &ObjectMeta) -> bool {
    let agree = |a: &Option<String>, b: &Option<String>| match (a, b) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    };
    got.size == pinned.size
        && agree(&got.e_tag, &pinned.e_tag)
        && agree(&got.version, &pinned.version)
}

/// Whether a HEAD's `found` names the version `tracked` is: the same size
/// and e_tag and version id, and where the store gives neither, the same
/// modification time. Stricter than [`same_version`], which checks a GET's
/// answer against a pinned version and lets a field the answer lacks
/// agree: a revalidation that keeps a version's cached bytes must know it
/// is the same one.
pub(crate) fn unchanged(tracked: &ObjectMeta, found: &ObjectMeta) -> bool {
    tracked.size == found.size
        && tracked.e_tag == found.e_tag
        && tracked.version == found.version
        && (tracked.e_tag.is_some()
            || tracked.version.is_some()
            || tracked.last_modified == found.last_modified)
}

/// Whether the answer `got` to a GET pinned to `pinned`
/// ([`version_conditions`]) says `pinned` is the object's current version,
/// as a HEAD that found it [`unchanged`] would: only where the GET's
/// condition tests the current version (`If-Match`,
/// `If-Unmodified-Since`), never a GET by version id, which that version
/// answers whatever the current one is.
pub(crate) fn confirms(pinned: &ObjectMeta, got: &ObjectMeta) -> bool {
    pinned.version.is_none() && unchanged(pinned, got)
}

/// Whether a read's error says the version it named is gone (replaced,
/// or the object deleted).
pub(crate) fn gone(e: &object_store::Error) -> bool {
    matches!(
        e,
        object_store::Error::Precondition { .. }
            | object_store::Error::NotModified { .. }
            | object_store::Error::NotFound { .. }
    )
}

/// The conditions that pin a GET to `meta`'s version: its version id where
/// the store has them, else its e_tag (`If-Match`), else its modification
/// time (`If-Unmodified-Since`, the weakest: two writes within the store's
/// time resolution look alike).
pub(crate) fn version_conditions(meta: &ObjectMeta) -> GetOptions {
    let mut opts = GetOptions::new();
    if let Some(v) = &meta.version {
        opts.version = Some(v.clone());
    } else if let Some(e) = &meta.e_tag {
        opts.if_match = Some(e.clone());
    } else {
        opts.if_unmodified_since = Some(meta.last_modified);
    }
    opts
}

/// The store's error an `io::Error` from the cache carries (put there by
/// [`RemoteBacking::read_blocks`]), or the `io::Error` itself as a
/// `Generic` error of this store (a cache error: out of memory).
pub(crate) fn into_store_error(e: io::Error) -> object_store::Error {
    if !e.get_ref().is_some_and(|r| r.is::<object_store::Error>()) {
        return object_store::Error::Generic {
            store: STORE,
            source: Box::new(e),
        };
    }
    match e
        .into_inner()
        .map(|inner| inner.downcast::<object_store::Error>())
    {
        Some(Ok(store)) => *store,
        Some(Err(other)) => object_store::Error::Generic {
            store: STORE,
            source: other,
        },
        None => object_store::Error::Generic {
            store: STORE,
            source: "an IO error that lost its cause".into(),
        },
    }
}

/// The error of a change through this backing: the cache never writes an
/// object (writes go to the store and invalidate the mapping).
fn read_only() -> io::Error {
    io::Error::new(
        io::ErrorKind::ReadOnlyFilesystem,
        "a cached object is read-only: write through the CachedStore",
    )
}

impl<S: ObjectStore> Backing for RemoteBacking<S> {
    fn len(&self) -> io::Result<u64> {
        Ok(self.meta.size)
    }

    fn read_blocks(&self, bufs: &mut [IoBufMut<'_>], offset: u64) -> io::Result<usize> {
        if !offset.is_multiple_of(BLOCK as u64) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("read at {offset}, not a multiple of {BLOCK}"),
            ));
        }
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let end = offset.saturating_add(total).min(self.meta.size);
        if offset < end {
            let mut to = Bufs {
                bufs: &mut *bufs,
                offset,
                cur: (0, offset),
            };
            self.read_primed(offset..end, &mut |at, data| to.put(at, data))
                .map_err(io::Error::other)?;
        }
        // Zero what lies past the end of the object (the trait's
        // contract).
        let mut at = offset;
        for buf in bufs.iter_mut() {
            let n = end.saturating_sub(at).min(buf.len() as u64) as usize;
            buf[n..].fill(0);
            at += buf.len() as u64;
        }
        Ok(end.saturating_sub(offset) as usize)
    }

    fn write_blocks(&self, _bufs: &[IoBuf<'_>], _offset: u64) -> io::Result<usize> {
        Err(read_only())
    }

    fn set_len(&self, _len: u64) -> io::Result<()> {
        Err(read_only())
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }

    fn punch_hole(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Err(read_only())
    }

    fn info(&self) -> BackingInfo {
        // (No `DataPath` names remote storage; the data bypasses the
        // kernel's page cache, as `Direct`'s does.)
        BackingInfo::new(
            "object",
            DataPath::Direct,
            "ranged GET",
            format!("{} in {}", self.path, self.store),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(e_tag: Option<&str>, version: Option<&str>, at: u64) -> ObjectMeta {
        ObjectMeta {
            location: Path::from("o"),
            last_modified: (std::time::UNIX_EPOCH + std::time::Duration::from_secs(at)).into(),
            size: 10,
            e_tag: e_tag.map(str::to_string),
            version: version.map(str::to_string),
        }
    }

    /// A GET's answer confirms the version it was pinned to only where
    /// its condition tested the current version: a GET by version id is
    /// answered by that version even after the object was replaced.
    #[test]
    fn only_an_answer_to_a_condition_on_the_current_version_confirms_it() {
        let tagged = meta(Some("e1"), None, 1);
        assert!(confirms(&tagged, &meta(Some("e1"), None, 1)));
        assert!(!confirms(&tagged, &meta(Some("e2"), None, 1)));
        let dated = meta(None, None, 1);
        assert!(confirms(&dated, &meta(None, None, 1)));
        assert!(!confirms(&dated, &meta(None, None, 2)));
        let versioned = meta(Some("e1"), Some("v1"), 1);
        assert!(!confirms(&versioned, &meta(Some("e1"), Some("v1"), 1)));
    }
}
