//! How much one GET fetches: the remote's latency and bandwidth, measured
//! from the GETs themselves, and the single flight that lets concurrent
//! misses of neighbouring ranges share one GET.
//!
//! # Why a GET fetches more than it was asked for
//! A GET costs its first byte's latency `L` plus its bytes over the
//! request's bandwidth `B`. Below `L x B` bytes (1.8 MB at 20 ms and
//! 90 MB/s) a GET is latency-bound: fetching half of `L x B` costs at
//! most half more than fetching 4 KiB.
//! So a point miss of a store with a disk tier (a read of at most an
//! eighth of the window, the third miss in that window: point reads that
//! come back near their misses, where a table's reader reads each chunk
//! once) fetches the aligned
//! *window* around it ([`LinkModel::point_window`]), the largest power of
//! two within `L x B / 2`, and the tier keeps the whole window:
//! the next miss nearby is a disk hit, not another GET (the kernel's
//! read-around of a page fault, `do_sync_mmap_readahead`, for the same
//! reason: a seek costs more than the pages beside it).
//!
//! Sequential readers are foliocache's readahead's: windows that grow up
//! to the file's `ra_pages`, which [`LinkModel::stream_pages`] sets to
//! `L x B` (rounded up to a power of two), so that a stream's GETs are
//! bandwidth-bound, not latency-bound. A stream is more than two reads in
//! a row each beginning where the last ended; any other miss reads ahead
//! nothing (its object advised random: one GET of the pages asked for), so that what a reader did
//! not ask for is never fetched on a guess.
//!
//! ```text
//!   GET ──> get_opts answers (headers: latency L) ──> body (bytes / B)
//!           │                                         │
//!           └── EWMA of L                             └── decayed sums of
//!                                                        bytes and seconds
//!                                                        (GETs of >= 64 KiB)
//! ```
//!
//! A stream's prefetch (`Object::prefetch_span`) reaches about twice
//! `L x B_all` ahead of its reader ([`LinkModel::stream_depth`]), where
//! `B_all` is the rate of all GETs together, not one GET's: a GET's own
//! body rate is its share of the link while others are in flight, so the
//! model also times the link's *busy* time (the union of the bodies'
//! times: at least one body streaming) and the bytes that came in it.
//! Twice, so that an extension sent when half the depth is left arrives
//! (one `L` later) before the reader has caught up with it (the kernel's
//! readahead sizes its window per device, `ra_pages`, and starts the next
//! one when the reader is still a window away: `ondemand_readahead`).
//!
//! The figures are measured at run time, never assumed: until four GETs
//! and one body of at least [`MIN_BODY`] bytes were timed, no window is
//! widened. A store whose latency is negligible (`L x B / 2` under
//! [`MIN_WINDOW`], memory or a local disk) never widens.
//!
//! # Single flight
//! Two misses whose windows are the same, arriving together, make one GET:
//! the first to [`Flights::begin`] a window is its leader and fetches it;
//! the others wait for its bytes and copy theirs out. The flight stays
//! until the leader has written the window to the disk tier (in the
//! background), so a miss in between is served its bytes, not a GET. A leader that fails
//! hands its waiters nothing, and each sends its own GET (so every caller
//! sees the store's own error: errors are never shared or cached).
//!
//! # Locking
//! The model's mutex and the flights' map's mutex are leaves, held for a
//! few arithmetic operations or one map update. A waiter waits on its
//! flight's own mutex and condition variable, on a blocking thread (the
//! backing's reads run there), never on a runtime worker.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

/// The smallest window a point miss is widened to: the disk tier's chunk.
pub(crate) const MIN_WINDOW: u64 = 64 << 10;
/// The largest window a point miss is widened to.
pub(crate) const MAX_WINDOW: u64 = 4 << 20;
/// The smallest body whose time is a bandwidth sample: shorter ones
/// measure the request's overhead (and a timer's resolution), not `B`.
pub(crate) const MIN_BODY: u64 = 64 << 10;
/// The most pages a stream's readahead window is set to (foliocache caps
/// it again at an eighth of the cache).
const MAX_STREAM_PAGES: u64 = 2048;
/// The fewest: the kernel's default `ra_pages` (128 KiB).
const MIN_STREAM_PAGES: u64 = 32;
/// The shallowest a stream's prefetch is made by the link model, and the
/// depth its first span reaches (`Object::prefetch_span`): four of
/// `File::readahead`'s largest windows (2 MiB), so that an extension, sent
/// when half the depth is left, is two whole windows' GETs in flight
/// together. At 4 MiB a cold read at 100 MB/s sent half again as many
/// GETs, smaller ones, and kept the link less full (docs/object-store.md,
/// "A stream's prefetch is as deep as the link needs"); over a link of
/// negligible latency (memory, a local disk) it would only send more,
/// smaller GETs.
pub(crate) const MIN_DEPTH: u64 = 8 << 20;
/// `LinkModel::fixed`'s "never widen".
const NEVER: u64 = u64::MAX;
/// GETs timed before any window is computed.
const MIN_SAMPLES: u64 = 4;
/// The weight of a new latency sample (1/16), and the decay of the
/// bandwidth sums per sample (15/16).
const WEIGHT: f64 = 1.0 / 16.0;

/// The remote's latency and bandwidth, as its GETs measured them (see the
/// module documentation).
#[derive(Debug, Default)]
pub(crate) struct LinkModel {
    state: Mutex<LinkState>,
    /// The point window now (0: do not widen), kept so that a miss reads
    /// it without the lock.
    window: AtomicU64,
    /// A window set by the builder: 0 measured, [`NEVER`] never widen,
    /// else the window.
    fixed: AtomicU64,
}

#[derive(Debug, Default)]
struct LinkState {
    samples: u64,
    /// EWMA of the first byte's latency, in seconds.
    latency: f64,
    /// Decayed sums of body bytes and seconds (bodies of >= MIN_BODY).
    body_bytes: f64,
    body_secs: f64,
    /// Bodies streaming now, and when that count last changed.
    bodies: u32,
    mark: Option<Instant>,
    /// The link's busy time (some body streaming), in seconds, and the
    /// bytes of the bodies that ended in it, not yet a sample.
    busy: f64,
    pending: u64,
    /// Decayed sums of the bytes of every body and of the link's busy
    /// time they came in: the rate of all GETs together.
    all_bytes: f64,
    all_secs: f64,
}

impl LinkModel {
    /// Fixes the point window at `bytes` (0: never widen), instead of
    /// measuring it.
    pub(crate) fn fix(&self, bytes: u64) {
        let (fixed, w) = if bytes == 0 {
            (NEVER, 0)
        } else {
            let w = bytes.next_power_of_two().clamp(MIN_WINDOW, MAX_WINDOW);
            (w, w)
        };
        self.fixed.store(fixed, Ordering::Relaxed);
        self.window.store(w, Ordering::Relaxed);
    }

    /// A GET's body starts streaming: the link is busy until every body
    /// begun has ended ([`body_ended`](Self::body_ended), which the
    /// returned guard calls with no bytes if it is dropped first: a
    /// failed GET).
    pub(crate) fn body_began(&self) -> Body<'_> {
        self.state.lock().begin(Instant::now());
        Body(Some(self))
    }

    /// A body began with [`body_began`](Self::body_began) ended, having
    /// brought `bytes`.
    fn body_ended(&self, bytes: u64) {
        self.state.lock().end(Instant::now(), bytes);
    }

    /// How far ahead of its reader a stream's prefetch reaches, at most
    /// `most`: twice `L x B_all` (see the module documentation), at least
    /// [`MIN_DEPTH`]; no more than that until the link is measured (a
    /// span sent deeper before would still be fetched, ahead of the
    /// reader, after the measure bounded the depth).
    pub(crate) fn stream_depth(&self, most: u64) -> u64 {
        let s = self.state.lock();
        s.link_depth().unwrap_or(0).max(MIN_DEPTH).min(most)
    }

    /// Records one GET: its first byte came after `latency`, and its body
    /// of `bytes` took `body` more.
    pub(crate) fn record(&self, latency: Duration, bytes: u64, body: Duration) {
        let window = {
            let mut s = self.state.lock();
            let l = latency.as_secs_f64();
            s.latency = if s.samples == 0 {
                l
            } else {
                s.latency + WEIGHT * (l - s.latency)
            };
            s.samples += 1;
            if bytes >= MIN_BODY {
                s.body_bytes = s.body_bytes * (1.0 - WEIGHT) + bytes as f64;
                s.body_secs = s.body_secs * (1.0 - WEIGHT) + body.as_secs_f64();
            }
            s.point_window()
        };
        if self.fixed.load(Ordering::Relaxed) == 0 {
            self.window.store(window, Ordering::Relaxed);
        }
    }

    /// The window a point miss is widened to, a power of two in
    /// [`MIN_WINDOW`, `MAX_WINDOW`]; 0: not widened (too few samples, or
    /// a latency too low for widening to pay).
    pub(crate) fn point_window(&self) -> u64 {
        self.window.load(Ordering::Relaxed)
    }

    /// The readahead window for sequential readers, in pages: `L x B`
    /// rounded up to a power of two, in [32, 2048] pages; `None` until
    /// measured.
    pub(crate) fn stream_pages(&self) -> Option<u64> {
        let s = self.state.lock();
        let lb = s.latency_bandwidth()?;
        let pages = (lb as u64).div_ceil(4096).next_power_of_two();
        Some(pages.clamp(MIN_STREAM_PAGES, MAX_STREAM_PAGES))
    }
}

/// A GET's body streaming ([`LinkModel::body_began`]).
pub(crate) struct Body<'a>(Option<&'a LinkModel>);

impl Body<'_> {
    /// The body ended, having brought `bytes`.
    pub(crate) fn ended(mut self, bytes: u64) {
        if let Some(m) = self.0.take() {
            m.body_ended(bytes);
        }
    }
}

impl Drop for Body<'_> {
    fn drop(&mut self) {
        if let Some(m) = self.0.take() {
            m.body_ended(0);
        }
    }
}

impl LinkState {
    /// Adds the busy time since the count of bodies last changed.
    fn tick(&mut self, now: Instant) {
        if let Some(mark) = self.mark {
            if self.bodies > 0 {
                self.busy += now.saturating_duration_since(mark).as_secs_f64();
            }
        }
        self.mark = Some(now);
    }

    /// A body began at `now`.
    fn begin(&mut self, now: Instant) {
        self.tick(now);
        self.bodies += 1;
    }

    /// A body ended at `now`, having brought `bytes`: they and the busy
    /// time since the last sample are the next sample of `B_all`.
    fn end(&mut self, now: Instant, bytes: u64) {
        self.tick(now);
        self.bodies = self.bodies.saturating_sub(1);
        self.pending += bytes;
        // Bodies ending together (no busy time between them) are one
        // sample: alone, each but the first would read as infinitely fast.
        if self.busy > 0.0 && self.pending > 0 {
            self.all_bytes = self.all_bytes * (1.0 - WEIGHT) + self.pending as f64;
            self.all_secs = self.all_secs * (1.0 - WEIGHT) + self.busy;
            self.busy = 0.0;
            self.pending = 0;
        }
    }

    /// Twice `L x B_all` in bytes, once measured.
    fn link_depth(&self) -> Option<u64> {
        if self.samples < MIN_SAMPLES || self.all_secs <= 0.0 || self.all_bytes < MIN_BODY as f64 {
            return None;
        }
        Some((2.0 * self.latency * self.all_bytes / self.all_secs) as u64)
    }

    /// `L x B` in bytes, once measured.
    fn latency_bandwidth(&self) -> Option<f64> {
        if self.samples < MIN_SAMPLES || self.body_secs <= 0.0 {
            return None;
        }
        Some(self.latency * self.body_bytes / self.body_secs)
    }

    fn point_window(&self) -> u64 {
        let Some(lb) = self.latency_bandwidth() else {
            return 0;
        };
        let half = (lb / 2.0) as u64;
        if half < MIN_WINDOW {
            return 0;
        }
        // The largest power of two within half of L x B.
        (1u64 << (63 - half.leading_zeros())).min(MAX_WINDOW)
    }
}

/// The aligned span of windows of `window` bytes that covers `range`,
/// within an object of `size` bytes.
pub(crate) fn span(range: &Range<u64>, window: u64, size: u64) -> Range<u64> {
    let start = range.start / window * window;
    let end = range.end.div_ceil(window).saturating_mul(window).min(size);
    start..end
}

/// A window's bytes, in the disk tier's chunks (`disk::CHUNK` each, the
/// last one shorter): pieces the store allocates as the GET's body
/// streams in, never one buffer of the window's size (crate::remote).
pub(crate) type Pieces = Arc<[Bytes]>;

/// The GETs in flight of one object, by span (see the module
/// documentation).
#[derive(Debug, Default)]
pub(crate) struct Flights {
    map: Mutex<HashMap<(u64, u64), Arc<Flight>>>,
}

/// One GET in flight: `None` while it runs, then its bytes (`Some(None)`:
/// it failed).
#[derive(Debug, Default)]
pub(crate) struct Flight {
    done: Mutex<Option<Option<Pieces>>>,
    cv: Condvar,
}

/// What [`Flights::begin`] made the caller.
pub(crate) enum Role {
    /// It fetches the span, and must [`Leader::publish`] it.
    Leader(Leader),
    /// Another fetches it: wait with [`Flight::wait`].
    Waiter(Arc<Flight>),
}

/// The fetcher of a span. Publishing wakes the waiters; the flight stays
/// joinable (its bytes served to later misses of the span) until the
/// leader is dropped, after the span is written to the tier.
pub(crate) struct Leader {
    flights: Arc<Flights>,
    key: (u64, u64),
    flight: Arc<Flight>,
}

impl Flights {
    /// Joins the flight of `span`, or starts it.
    pub(crate) fn begin(self: &Arc<Self>, span: &Range<u64>) -> Role {
        let key = (span.start, span.end);
        let mut map = self.map.lock();
        if let Some(f) = map.get(&key) {
            return Role::Waiter(f.clone());
        }
        let flight = Arc::new(Flight::default());
        map.insert(key, flight.clone());
        Role::Leader(Leader {
            flights: self.clone(),
            key,
            flight,
        })
    }
}

impl Leader {
    /// Hands `bytes` (`None`: the GET failed) to the waiters, and to the
    /// misses of the span that come before the leader is dropped.
    pub(crate) fn publish(&self, bytes: Option<Pieces>) {
        let mut done = self.flight.done.lock();
        if done.is_none() {
            *done = Some(bytes);
            self.flight.cv.notify_all();
        }
    }

    /// Publishes `bytes` and ends the flight.
    #[cfg(test)]
    pub(crate) fn finish(self, bytes: Option<Pieces>) {
        self.publish(bytes);
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.flights.map.lock().remove(&self.key);
        // A leader that unwound before publishing: its waiters fetch for
        // themselves.
        self.publish(None);
    }
}

impl Flight {
    /// Waits for the leader: its bytes, or `None` if it failed.
    pub(crate) fn wait(&self) -> Option<Pieces> {
        let mut done = self.done.lock();
        while done.is_none() {
            self.cv.wait(&mut done);
        }
        done.clone().flatten()
    }
}

/// The windows whose misses a [`NearMisses`] counts; past it the counts
/// start over.
const MAX_NEAR: usize = 4096;

/// Misses counted by read-around window, bounded: what decides that a
/// point miss fetches its whole window (`RemoteBacking::point_reads_near`),
/// and the disk tier's simulations of that decision (`disk::curve`).
pub(crate) struct NearMisses<K>(HashMap<K, u32>);

impl<K> Default for NearMisses<K> {
    fn default() -> Self {
        NearMisses(HashMap::new())
    }
}

impl<K: std::hash::Hash + Eq> NearMisses<K> {
    /// Counts a miss in window `id`: the misses there so far.
    pub(crate) fn count(&mut self, id: K) -> u32 {
        if self.0.len() >= MAX_NEAR {
            self.0.clear();
        }
        let n = self.0.entry(id).or_insert(0);
        *n += 1;
        *n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// 20 ms and 90 MB/s: `L x B` = 1.8 MB, half 900 KB, so 512 KiB
    /// windows; streams 2 MiB (512 pages).
    #[test]
    fn windows_follow_latency_times_bandwidth() {
        let m = LinkModel::default();
        for _ in 0..MIN_SAMPLES {
            assert_eq!(m.point_window(), 0, "not measured yet");
            // 900 KB in 10 ms: 90 MB/s.
            m.record(20 * MS, 900_000, 10 * MS);
        }
        assert_eq!(m.point_window(), 512 << 10);
        assert_eq!(m.stream_pages(), Some(512));
    }

    /// A link of 100 MB/s shared by the GETs in flight: each body alone
    /// is timed at 100 MB/s, four at once at 25 MB/s each. The stream's
    /// depth is twice 50 ms times the link's 100 MB/s either way (10 MB:
    /// what keeps it full), not the GETs' own rate; within `most`, and
    /// not before the link is measured.
    #[test]
    fn the_stream_depth_follows_the_rate_of_all_gets_together() {
        for together in [1u32, 4] {
            let m = LinkModel::default();
            assert_eq!(m.stream_depth(64 << 20), MIN_DEPTH, "not measured yet");
            let t0 = Instant::now();
            let mut s = m.state.lock();
            // 1 MB bodies, `together` at a time: each takes 10 ms x
            // `together` on the link of 100 MB/s.
            let each = 10 * MS * together;
            for round in 0..16u32 {
                let at = t0 + each * round;
                for _ in 0..together {
                    s.begin(at);
                }
                for _ in 0..together {
                    s.end(at + each, 1_000_000);
                }
                drop(s);
                for _ in 0..together {
                    m.record(50 * MS, 1_000_000, each);
                }
                s = m.state.lock();
            }
            drop(s);
            let d = m.stream_depth(64 << 20);
            assert!(
                (9_500_000..=10_500_000).contains(&d),
                "{together} at once: {d}"
            );
            assert_eq!(m.stream_depth(1 << 20), 1 << 20);
        }
    }

    /// A link of negligible latency: the prefetch is [`MIN_DEPTH`] deep.
    #[test]
    fn a_fast_link_prefetches_the_least_depth() {
        let m = LinkModel::default();
        let t0 = Instant::now();
        for i in 0..8u32 {
            let mut s = m.state.lock();
            s.begin(t0 + 2 * MS * i);
            s.end(t0 + 2 * MS * (i + 1), 1 << 20);
            drop(s);
            m.record(Duration::from_micros(50), 1 << 20, 2 * MS);
        }
        assert_eq!(m.stream_depth(64 << 20), MIN_DEPTH);
    }

    /// Small bodies are no bandwidth sample: no window from them alone.
    #[test]
    fn small_bodies_measure_no_bandwidth() {
        let m = LinkModel::default();
        for _ in 0..16 {
            m.record(20 * MS, 4096, MS);
        }
        assert_eq!(m.point_window(), 0);
        assert_eq!(m.stream_pages(), None);
    }

    /// A store answering in 50 us (memory, a local disk) is never widened.
    #[test]
    fn a_fast_store_is_not_widened() {
        let m = LinkModel::default();
        for _ in 0..16 {
            m.record(Duration::from_micros(50), 1 << 20, 2 * MS);
        }
        assert_eq!(m.point_window(), 0);
        assert_eq!(m.stream_pages(), Some(MIN_STREAM_PAGES));
    }

    /// A fixed window stays whatever is measured.
    #[test]
    fn a_fixed_window_is_kept() {
        let m = LinkModel::default();
        m.fix(100_000);
        m.record(20 * MS, 900_000, 10 * MS);
        assert_eq!(m.point_window(), 128 << 10);
    }

    #[test]
    fn a_span_covers_the_range_in_whole_windows() {
        assert_eq!(span(&(5000..9000), 65536, 1 << 20), 0..65536);
        assert_eq!(span(&(60_000..70_000), 65536, 1 << 20), 0..131_072);
        assert_eq!(
            span(&(1_040_000..1_048_000), 65536, 1_048_000),
            983_040..1_048_000
        );
    }

    /// A leader of span 0..8 and a waiter of it.
    fn leader_and_waiter(f: &Arc<Flights>) -> (Leader, Arc<Flight>) {
        let Role::Leader(lead) = f.begin(&(0..8)) else {
            panic!("the first is the leader")
        };
        let Role::Waiter(w) = f.begin(&(0..8)) else {
            panic!("the second waits")
        };
        (lead, w)
    }

    /// The second to begin a span waits for the first's bytes; once the
    /// leader is gone, the span starts a new flight.
    #[test]
    fn a_second_miss_of_a_span_waits_for_the_first() {
        let f = Arc::new(Flights::default());
        let (lead, w) = leader_and_waiter(&f);
        let waiter = std::thread::spawn(move || w.wait());
        lead.finish(Some(Arc::from([Bytes::from_static(b"01234567")])));
        assert_eq!(waiter.join().unwrap().unwrap()[0], &b"01234567"[..]);
        assert!(matches!(f.begin(&(0..8)), Role::Leader(_)));
    }

    /// A published flight serves misses that come before its leader is
    /// dropped (its window being written to the tier).
    #[test]
    fn a_published_flight_serves_until_its_leader_goes() {
        let f = Arc::new(Flights::default());
        let (lead, _) = leader_and_waiter(&f);
        lead.publish(Some(Arc::from([Bytes::from_static(b"abcdefgh")])));
        let Role::Waiter(late) = f.begin(&(0..8)) else {
            panic!("the flight is still joinable")
        };
        assert_eq!(late.wait().unwrap()[0], &b"abcdefgh"[..]);
        drop(lead);
        assert!(matches!(f.begin(&(0..8)), Role::Leader(_)));
    }

    /// A leader that fails (or unwinds) hands its waiters nothing.
    #[test]
    fn a_failed_leader_hands_nothing() {
        let f = Arc::new(Flights::default());
        let (lead, w) = leader_and_waiter(&f);
        drop(lead);
        assert!(w.wait().is_none());
    }
}
