//! The group's hit-ratio curve: what the group's cache would have served
//! from memory at 0.25x to 4x its pages ([`SharedCache::hit_ratio_curve`];
//! docs/design.md, section 13, "The group's curve").
//!
//! The estimator is the private cache's (`mrc.rs`): a sample of page
//! keys by hash, miniature simulations of the group's policy, a clock
//! (`index::victim`), below 1x and, in place of the private cache's LRU
//! stack, above. Its keys are the file's
//! identity (device, inode: `mrc::file_key`) and the page's offset, the
//! same in every process. Every process samples its own reads, and the
//! reads of a group are one stream: a smaller cache loses a hit of one
//! process on a page another read, so the samples go to one estimator,
//! in the process that made the cache (the group's owner: `foliocache
//! run`, a named cache's host), by a ring in the segment:
//!
//! ```text
//!   a sampled read (1 in 16 to 64):  i = head.fetch_add(1)
//!                                    entry[i % RING_ENTRIES] = key | PRESENT | hit
//!   the owner's thread (every 1-20 ms, and at each curve asked for):
//!                                    takes the entries up to head, feeds its estimator;
//!                                    publishes the curve in the header (a seqlock)
//!   any process's hit_ratio_curve:   the published curve
//! ```
//!
//! A read that is not sampled does what it did: one hash and a compare.
//! A sampled one writes two words in shared memory, never waits, and
//! takes no lock. The exact counts the curve scales its sample by are the
//! group's published figures (`figures.rs`: bytes returned and, of them,
//! read from the files, in pages; and the hits by age, below).
//!
//! **Ages.** Below 1x the simulations say which share of the sample's
//! hits a smaller clock loses; on a skewed workload which pages the
//! sample drew (one file draws the same pages every run) moved that share
//! by points. A
//! hit's loss turns on how long ago its page was read, which the group
//! can count for every hit, as the private cache does (`mrc.rs`, "The
//! draw of keys is the noise"):
//!
//! ```text
//!   a sampled read:  ... and when head + 1 ends a tick (tick_len sampled
//!                    reads, an eighth of the capacity): clock = (head + 1) / tick_len
//!   every read:      age = clock - page's stamp (16 bits); the stamp := clock
//!                    if it moved (a descriptor's word: one write a tick at most)
//!   a hit:           its process's bin of age += 1 (sharded), published
//!                    in its participant with its other figures
//!   the owner:       simulates ring entry i at tick i / tick_len, and weights
//!                    each age's lost share by the group's hits of that age
//! ```
//!
//! The clock is alone on its line (`seg.rs`, `CLOCK_OFF`): a hit loads it
//! and the page's descriptor (which it reads anyway), and writes only its
//! own shard and, once a tick, the stamp.
//!
//! What a member can do to it: any process of the group can write the
//! ring and the header, as it can write any page. A bad entry is a read
//! of a made-up key; a moved head makes the owner take at most
//! `RING_ENTRIES` entries at a time; a torn or odd curve reads as none,
//! and a value out of range as an unknown point. The estimator lives in
//! the owner's own memory, which no member reaches: a member can make the
//! figures wrong, never the owner fail. A member that dies mid-write
//! leaves one entry unwritten (skipped) or a sequence odd (no curve
//! until the owner publishes again). Entries the owner did not take
//! before the ring came round again are lost (a gap in the sample's
//! stream); it takes them at least every 20 ms, and every 1 ms while a
//! quarter of the ring fills between two looks.

use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::seg::{Seg, CURVE_WORDS, PAGE, PARTS, RING_ENTRIES};
use super::{Inner, SharedCache, SharedFile};
use crate::mrc::{self, CurvePoint, Exact, HitRatioCurve, Mrc, AGE_BINS, CAPACITY_RATIOS};
use crate::sync::Mutex;

/// An entry holds a sampled read (an entry taken is 0).
const PRESENT: u64 = 1 << 62;
/// The read came from memory.
const HIT: u64 = 1 << 63;
/// The key's bits (a sampled key's hash is under `u64::MAX >> 4`).
const KEY: u64 = PRESENT - 1;

/// The longest the owner's thread waits between two looks at the ring.
const MAX_PAUSE_MS: u64 = 20;
/// The owner publishes the curve at least this often.
const PUBLISH_EVERY: Duration = Duration::from_millis(100);

/// The group's estimator, in the process that made the cache.
pub(super) struct Owner {
    /// The process that made the cache: a forked child, which inherits
    /// this, is not it.
    pid: u32,
    mrc: Mrc,
    /// The ring's entries taken so far.
    tail: Mutex<u64>,
}

impl Owner {
    /// The estimator of a cache of `pages` pages.
    pub(super) fn new(pages: u64) -> Owner {
        let mrc = Mrc::default();
        mrc.set_capacity_clock(pages);
        Owner {
            pid: std::process::id(),
            mrc,
            tail: Mutex::new(0),
        }
    }
}

/// The hash under which a read is in the group's sample, for a cache of
/// `pages` pages (the estimator's rate: `mrc::rate_shift`).
pub(super) fn threshold(pages: u64) -> u64 {
    u64::MAX >> mrc::rate_shift(pages)
}

/// Sampled reads a tick of the group's clock lasts, for a cache of
/// `pages` pages: the estimator's (`mrc::tick_len`), so that a hit's age
/// and a sampled read's are read by one clock.
pub(super) fn tick_len(pages: u64) -> u64 {
    mrc::tick_len(pages, mrc::rate_shift(pages))
}

impl SharedFile {
    /// Counts a read of the file's page `index` in the group's sample if
    /// its key is drawn: `hit` when its bytes came from memory.
    #[inline]
    pub(super) fn sample(&self, index: u64, hit: bool) {
        let inner = &self.cache.inner;
        let h = mrc::key_hash(self.sample_key, index);
        if h < inner.sample_below {
            inner.push_sample(h, hit);
        }
    }
}

impl Inner {
    /// Puts sampled read `h` in the ring.
    #[cold]
    #[inline(never)]
    fn push_sample(&self, h: u64, hit: bool) {
        let i = self.seg.ring_head().fetch_add(1, Ordering::Relaxed);
        let v = (h & KEY) | PRESENT | if hit { HIT } else { 0 };
        self.seg.ring_entry(i).store(v, Ordering::Release);
        let next = i.wrapping_add(1);
        if next.is_multiple_of(self.tick_len) {
            // The sampled reads so far, in ticks: every process's hits
            // are aged by it (`index::age`), as the owner's estimator ages
            // the ring's entries by their position (`drain`).
            self.seg
                .clock()
                .store(next / self.tick_len, Ordering::Relaxed);
        }
    }

    /// The owner of the group's estimator, if this process is it.
    fn owner(&self) -> Option<&Owner> {
        self.owner
            .as_deref()
            .filter(|o| o.pid == std::process::id())
    }

    /// In the owner, feeds the ring's entries since the last look to the
    /// estimator; returns how many it looked at.
    fn drain(&self) -> u64 {
        let Some(o) = self.owner() else { return 0 };
        let mut tail = o.tail.lock();
        let head = self.seg.ring_head().load(Ordering::Acquire);
        // A head that moved back (a member wrote it) or came round the
        // ring: at most its last `RING_ENTRIES` entries.
        let n = head.wrapping_sub(*tail).min(RING_ENTRIES);
        let start = head.wrapping_sub(n);
        let reads = (0..n).filter_map(|k| {
            let i = start.wrapping_add(k);
            let v = self.seg.ring_entry(i).swap(0, Ordering::Acquire);
            // At the tick the group's clock had when it was pushed.
            let now = (i / self.tick_len) as u16;
            (v & PRESENT != 0).then_some((v & KEY, v & HIT != 0, now))
        });
        o.mrc.take_ticked(reads, || group_exact(&self.seg));
        *tail = head;
        n
    }

    /// In the owner, writes the curve now into the header.
    fn publish_curve(&self) {
        let Some(o) = self.owner() else { return };
        let c = o.mrc.curve(|| group_exact(&self.seg));
        let h = self.seg.header();
        let seq = h.curve_seq.load(Ordering::Relaxed) | 1;
        h.curve_seq.store(seq, Ordering::Relaxed);
        fence(Ordering::Release);
        for (w, v) in h.curve.iter().zip(words(&c)) {
            w.store(v, Ordering::Relaxed);
        }
        h.curve_seq.store(seq.wrapping_add(1), Ordering::Release);
    }
}

/// The group's exact counts as published (`figures.rs`): pages of bytes
/// returned from memory and read from the files, and the hits by their
/// age's bin, by which the curve weights the share of hits of each age
/// its simulations say a smaller cache loses (`mrc.rs`, "The draw of
/// keys is the noise"). The group's clock has no shadows: the gains
/// above 1x are its simulations'.
fn group_exact(seg: &Seg) -> Exact {
    let (mut read, mut first) = (0u64, 0u64);
    let mut aged = [0u64; AGE_BINS];
    for part in (0..PARTS).filter_map(|i| seg.part(i)) {
        let bytes = part.read_bytes.load(Ordering::Relaxed);
        if bytes == 0 {
            // Never published a read (most of the table).
            continue;
        }
        read = read.wrapping_add(bytes);
        first = first.wrapping_add(part.first_read_bytes.load(Ordering::Relaxed));
        for (sum, bin) in aged.iter_mut().zip(&part.aged) {
            *sum = sum.wrapping_add(bin.load(Ordering::Relaxed));
        }
    }
    Exact::of_pages(read / PAGE, first / PAGE, [0; 2], aged)
}

/// The curve as the header's words: hit ratios, bounds, accesses,
/// sampled.
fn words(c: &HitRatioCurve) -> [u64; CURVE_WORDS] {
    let mut w = [0; CURVE_WORDS];
    for (i, p) in c.points.iter().enumerate() {
        w[i] = p.hit_ratio.to_bits();
        w[5 + i] = p.bound.to_bits();
    }
    w[10] = c.accesses;
    w[11] = c.sampled;
    w
}

/// The curve from the header's words, each value checked (a member may
/// have written them): a ratio out of 0..=1 reads as 0, a bound out of
/// it as 1 (not known).
fn from_words(w: &[u64; CURVE_WORDS]) -> HitRatioCurve {
    let ratio = |bits: u64, bad: f64| {
        let v = f64::from_bits(bits);
        if (0.0..=1.0).contains(&v) {
            v
        } else {
            bad
        }
    };
    HitRatioCurve {
        points: std::array::from_fn(|i| CurvePoint {
            capacity_ratio: CAPACITY_RATIOS[i],
            hit_ratio: ratio(w[i], 0.0),
            bound: ratio(w[5 + i], 1.0),
        }),
        accesses: w[10],
        sampled: w[11],
    }
}

impl SharedCache {
    /// Starts the owner's thread that takes the ring's entries to its
    /// estimator and publishes the curve (`curve.rs`), while the cache
    /// lives in this process.
    pub(super) fn sample_in_background(&self) {
        if self.inner.owner.is_none() || cfg!(miri) {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        // Without the thread the curve is drained when asked for (less
        // of the stream, if the ring came round meanwhile).
        let _ = std::thread::Builder::new()
            .name("foliocache-curve".into())
            .spawn(move || drain_on_thread(&weak));
    }

    /// The group's hit-ratio curve: the share of what the group's reads
    /// returned that came from memory, and what it would have been in a
    /// cache of 0.25x, 0.5x, 2x and 4x the pages, over a recent window of
    /// every process's reads (as [`Cache::hit_ratio_curve`]'s, in pages
    /// read: [`HitRatioCurve`]). The process that made the cache keeps
    /// it and publishes it in the cache every 100 ms (and at each call of
    /// its own); another process reads what it last published. `None`
    /// before the first publication, while the publisher is writing it,
    /// or when the figures there were changed under the reader.
    ///
    /// Its points simulate the group's clock, below 1x weighted by the
    /// ages of the group's hits (docs/metrics.md, "The group's curve").
    ///
    /// [`Cache::hit_ratio_curve`]: crate::Cache::hit_ratio_curve
    pub fn hit_ratio_curve(&self) -> Option<HitRatioCurve> {
        let i = &self.inner;
        if i.owner().is_some() {
            i.publish();
            i.drain();
            i.publish_curve();
        }
        published(&i.seg)
    }
}

/// The curve published in `seg`'s header (a seqlock's read).
fn published(seg: &Seg) -> Option<HitRatioCurve> {
    let h = seg.header();
    for _ in 0..64 {
        let seq = h.curve_seq.load(Ordering::Acquire);
        if seq == 0 {
            return None;
        }
        if seq & 1 == 0 {
            let w: [u64; CURVE_WORDS] = std::array::from_fn(|k| h.curve[k].load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            if h.curve_seq.load(Ordering::Relaxed) == seq {
                return Some(from_words(&w));
            }
        }
        std::hint::spin_loop();
    }
    None
}

/// The owner's thread: takes the ring's entries, sooner while they come
/// fast, and publishes the curve, until the cache is gone.
fn drain_on_thread(weak: &Weak<Inner>) {
    let mut pause = 1;
    let mut since = Duration::ZERO;
    loop {
        std::thread::sleep(Duration::from_millis(pause));
        let Some(inner) = weak.upgrade() else { return };
        let n = inner.drain();
        pause = if n > RING_ENTRIES / 4 {
            1
        } else {
            (pause * 2).min(MAX_PAUSE_MS)
        };
        since += Duration::from_millis(pause);
        if since >= PUBLISH_EVERY {
            since = Duration::ZERO;
            inner.publish_curve();
        }
    }
}
