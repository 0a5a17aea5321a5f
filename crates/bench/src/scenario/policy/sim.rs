//! Replacement policies replayed page by page over a trace, each with room
//! for a fixed number of pages: a model of the cache's own (the kernel's
//! two lists with eviction shadows, `vmscan.rs` and `workingset.rs`),
//! that model with one-pass streams evicted first, S3-FIFO and ARC.
//! Belady's MIN and an exact LRU are in [`crate::lru`].
//!
//! Every policy answers one question per read: was the page in the
//! cache? A miss brings it in (no policy here declines a page).

use std::collections::{HashMap, HashSet, VecDeque};

/// One read of a trace: a page of a file, by a reader (a thread, a
/// process, a descriptor: what a readahead state belongs to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    /// The reader.
    pub reader: u32,
    /// The file.
    pub file: u32,
    /// The page in the file.
    pub page: u64,
}

impl Read {
    /// The page's key across files.
    pub fn key(self) -> u64 {
        (u64::from(self.file) << 40) | self.page
    }
}

/// A replacement policy of a fixed capacity.
pub trait Policy {
    /// Reads `r`: whether its page was cached (it is afterwards).
    fn read(&mut self, r: Read) -> bool;
}

/// No slot.
const NIL: u32 = u32::MAX;

/// An ordered set of keys, the newest at the head: O(1) to push, remove
/// and pop the oldest.
#[derive(Default)]
struct Queue {
    slot: HashMap<u64, u32>,
    key: Vec<u64>,
    prev: Vec<u32>,
    next: Vec<u32>,
    free: Vec<u32>,
    head: Option<u32>,
    tail: Option<u32>,
}

impl Queue {
    fn len(&self) -> usize {
        self.slot.len()
    }

    fn is_empty(&self) -> bool {
        self.slot.is_empty()
    }

    fn contains(&self, k: u64) -> bool {
        self.slot.contains_key(&k)
    }

    /// `k` at the head (it must not be in the queue).
    fn push_head(&mut self, k: u64) {
        let s = match self.free.pop() {
            Some(s) => {
                self.key[s as usize] = k;
                s
            }
            None => {
                self.key.push(k);
                self.prev.push(NIL);
                self.next.push(NIL);
                (self.key.len() - 1) as u32
            }
        };
        self.prev[s as usize] = NIL;
        self.next[s as usize] = self.head.unwrap_or(NIL);
        match self.head {
            Some(h) => self.prev[h as usize] = s,
            None => self.tail = Some(s),
        }
        self.head = Some(s);
        self.slot.insert(k, s);
    }

    /// Takes `k` out; whether it was in.
    fn remove(&mut self, k: u64) -> bool {
        let Some(s) = self.slot.remove(&k) else {
            return false;
        };
        let (p, n) = (self.prev[s as usize], self.next[s as usize]);
        match p {
            NIL => self.head = (n != NIL).then_some(n),
            p => self.next[p as usize] = n,
        }
        match n {
            NIL => self.tail = (p != NIL).then_some(p),
            n => self.prev[n as usize] = p,
        }
        self.free.push(s);
        true
    }

    /// Takes the oldest out.
    fn pop_tail(&mut self) -> Option<u64> {
        let k = self.key[self.tail? as usize];
        self.remove(k);
        Some(k)
    }
}

/// Where a reader's last read of a file was, and how many pages in a row
/// it has read there: the sequential detection readahead makes per open
/// file (`ondemand_readahead`'s "the read starts where the last ended").
#[derive(Default)]
struct Streams {
    last: HashMap<(u32, u32), (u64, u64)>,
}

/// Pages read in a row from which a reader's reads of a file are a
/// stream (32 KiB: a two-page block read is not one).
const STREAM_RUN: u64 = 8;

impl Streams {
    /// Whether `r` continues a stream of its reader's in its file.
    fn sequential(&mut self, r: Read) -> bool {
        let e = self.last.entry((r.reader, r.file)).or_insert((u64::MAX, 0));
        let run = if e.0.wrapping_add(1) == r.page {
            e.1 + 1
        } else if e.0 == r.page {
            e.1
        } else {
            1
        };
        *e = (r.page, run);
        run >= STREAM_RUN
    }
}

/// The cache's policy, page by page (docs/design.md section 7; the
/// model of `mrc/mini.rs`, with exact shadows):
///
/// ```text
///   miss:  in at the inactive head, referenced (the read marks it);
///          at the active head when its shadow's distance (evictions
///          and activations since) is within the active list
///   hit:   inactive and referenced -> active head (the clock advances);
///          otherwise -> referenced
///   full:  inactive shorter than active -> the active tail to the
///          inactive head, keeping its bit; else the inactive tail
///          goes, leaving a shadow of the clock (the clock advances)
/// ```
///
/// With `streams`, the candidate: a miss of a reader's stream (see
/// [`Streams`]) that the shadow does not activate goes to a third list,
/// which reclaim empties first, oldest first: a page a one-pass scan
/// read goes before any other; read again while there, it activates as
/// an inactive page would.
pub struct TwoLists {
    capacity: usize,
    inactive: Queue,
    active: Queue,
    streamed: Queue,
    referenced: HashSet<u64>,
    /// Each evicted key's clock at eviction.
    shadows: HashMap<u64, u64>,
    /// The shadows in the order they were left, for trimming.
    shadow_order: VecDeque<(u64, u64)>,
    clock: u64,
    streams: Option<Streams>,
}

impl TwoLists {
    /// The cache's policy with room for `capacity` pages; `streams`: the
    /// candidate that evicts one-pass streams first.
    pub fn new(capacity: usize, streams: bool) -> TwoLists {
        TwoLists {
            capacity,
            inactive: Queue::default(),
            active: Queue::default(),
            streamed: Queue::default(),
            referenced: HashSet::new(),
            shadows: HashMap::new(),
            shadow_order: VecDeque::new(),
            clock: 0,
            streams: streams.then(Streams::default),
        }
    }

    fn len(&self) -> usize {
        self.inactive.len() + self.active.len() + self.streamed.len()
    }

    fn activate(&mut self, k: u64) {
        self.referenced.remove(&k);
        self.active.push_head(k);
        self.clock += 1;
    }

    /// Frees a page: the streamed list's oldest, else as `isolate_lru_folios`.
    fn shrink(&mut self) {
        let victim = match self.streamed.pop_tail() {
            Some(k) => k,
            None if self.inactive.len() < self.active.len() => {
                let k = self
                    .active
                    .pop_tail()
                    .expect("the active list is not empty");
                self.inactive.push_head(k);
                return;
            }
            None => match self.inactive.pop_tail() {
                Some(k) => k,
                None => return,
            },
        };
        self.referenced.remove(&victim);
        self.shadows.insert(victim, self.clock);
        self.shadow_order.push_back((victim, self.clock));
        self.clock += 1;
        // A shadow older than the capacity's evictions cannot pass the
        // refault test (its distance is more than any active list).
        while let Some(&(k, at)) = self.shadow_order.front() {
            if self.clock - at <= self.capacity as u64 {
                break;
            }
            self.shadow_order.pop_front();
            if self.shadows.get(&k) == Some(&at) {
                self.shadows.remove(&k);
            }
        }
    }
}

impl Policy for TwoLists {
    fn read(&mut self, r: Read) -> bool {
        let k = r.key();
        let stream = self.streams.as_mut().is_some_and(|s| s.sequential(r));
        if self.active.contains(k) {
            self.referenced.insert(k);
            return true;
        }
        if self.inactive.contains(k) || self.streamed.contains(k) {
            if self.referenced.contains(&k) {
                if !self.inactive.remove(k) {
                    self.streamed.remove(k);
                }
                self.activate(k);
            } else {
                self.referenced.insert(k);
            }
            return true;
        }
        if self.capacity == 0 {
            return false;
        }
        while self.len() >= self.capacity {
            self.shrink();
        }
        let refault = self
            .shadows
            .remove(&k)
            .is_some_and(|at| self.clock - at <= self.active.len() as u64);
        if refault {
            self.active.push_head(k);
            self.clock += 1;
        } else if stream {
            self.streamed.push_head(k);
        } else {
            self.inactive.push_head(k);
        }
        self.referenced.insert(k);
        false
    }
}

/// S3-FIFO (Yang et al., SOSP '23): a small FIFO of a tenth of the
/// capacity that new pages enter, a main FIFO for the rest, and a ghost
/// FIFO of keys (as many as the main one holds). A page read again while
/// in the small queue moves to the main one when it reaches the small
/// queue's end, else it leaves (its key to the ghosts); a miss on a
/// ghost goes straight to the main queue; the main queue's end goes back
/// to its head while its count (at most 3, one less a lap) is above 0.
pub struct S3Fifo {
    capacity: usize,
    small: Queue,
    main: Queue,
    freq: HashMap<u64, u8>,
    ghost: Queue,
}

impl S3Fifo {
    /// Room for `capacity` pages.
    pub fn new(capacity: usize) -> S3Fifo {
        S3Fifo {
            capacity,
            small: Queue::default(),
            main: Queue::default(),
            freq: HashMap::new(),
            ghost: Queue::default(),
        }
    }

    fn evict(&mut self) {
        let small_target = (self.capacity / 10).max(1);
        if self.small.len() >= small_target || self.main.is_empty() {
            while let Some(k) = self.small.pop_tail() {
                if self.freq.get(&k).copied().unwrap_or(0) > 0 {
                    self.freq.insert(k, 0);
                    self.main.push_head(k);
                } else {
                    self.freq.remove(&k);
                    self.ghost.push_head(k);
                    if self.ghost.len() > self.capacity - small_target.min(self.capacity) {
                        self.ghost.pop_tail();
                    }
                    return;
                }
            }
        }
        while let Some(k) = self.main.pop_tail() {
            let f = self.freq.get(&k).copied().unwrap_or(0);
            if f > 0 {
                self.freq.insert(k, f - 1);
                self.main.push_head(k);
            } else {
                self.freq.remove(&k);
                return;
            }
        }
    }
}

impl Policy for S3Fifo {
    fn read(&mut self, r: Read) -> bool {
        let k = r.key();
        if let Some(f) = self.freq.get_mut(&k) {
            *f = (*f + 1).min(3);
            return true;
        }
        if self.capacity == 0 {
            return false;
        }
        while self.small.len() + self.main.len() >= self.capacity {
            self.evict();
        }
        if self.ghost.remove(k) {
            self.main.push_head(k);
        } else {
            self.small.push_head(k);
        }
        self.freq.insert(k, 0);
        false
    }
}

/// ARC (Megiddo and Modha, FAST '03): pages seen once (`t1`) and more
/// than once (`t2`) in two LRUs, with the keys each recently lost
/// (`b1`, `b2`); a miss on a lost key moves the target size of `t1`
/// (`p`) toward the list that lost it.
pub struct Arc {
    capacity: usize,
    p: f64,
    t1: Queue,
    t2: Queue,
    b1: Queue,
    b2: Queue,
}

impl Arc {
    /// Room for `capacity` pages.
    pub fn new(capacity: usize) -> Arc {
        Arc {
            capacity,
            p: 0.0,
            t1: Queue::default(),
            t2: Queue::default(),
            b1: Queue::default(),
            b2: Queue::default(),
        }
    }

    /// ARC's `REPLACE`: `t1`'s oldest to `b1` when `t1` is over its
    /// target, else `t2`'s oldest to `b2`.
    fn replace(&mut self, in_b2: bool) {
        let t1 = self.t1.len() as f64;
        if !self.t1.is_empty() && ((in_b2 && t1 == self.p.floor()) || t1 > self.p) {
            if let Some(k) = self.t1.pop_tail() {
                self.b1.push_head(k);
            }
        } else if let Some(k) = self.t2.pop_tail() {
            self.b2.push_head(k);
        } else if let Some(k) = self.t1.pop_tail() {
            self.b1.push_head(k);
        }
    }
}

impl Policy for Arc {
    fn read(&mut self, r: Read) -> bool {
        let k = r.key();
        let c = self.capacity;
        if self.t1.remove(k) || self.t2.remove(k) {
            self.t2.push_head(k);
            return true;
        }
        if c == 0 {
            return false;
        }
        let (b1, b2) = (self.b1.len().max(1) as f64, self.b2.len().max(1) as f64);
        if self.b1.remove(k) {
            self.p = (self.p + (b2 / b1).max(1.0)).min(c as f64);
            self.replace(false);
            self.t2.push_head(k);
            return false;
        }
        if self.b2.remove(k) {
            self.p = (self.p - (b1 / b2).max(1.0)).max(0.0);
            self.replace(true);
            self.t2.push_head(k);
            return false;
        }
        let l1 = self.t1.len() + self.b1.len();
        if l1 == c {
            if self.t1.len() < c {
                self.b1.pop_tail();
                self.replace(false);
            } else {
                self.t1.pop_tail();
            }
        } else {
            let total = l1 + self.t2.len() + self.b2.len();
            if total >= c {
                if total >= 2 * c {
                    self.b2.pop_tail();
                }
                self.replace(false);
            }
        }
        self.t1.push_head(k);
        false
    }
}

/// An exact LRU, as a [`Policy`].
pub struct Lru(crate::lru::Lru);

impl Lru {
    /// Room for `capacity` pages.
    pub fn new(capacity: usize) -> Lru {
        Lru(crate::lru::Lru::new(capacity))
    }
}

impl Policy for Lru {
    fn read(&mut self, r: Read) -> bool {
        self.0.access(r.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reads(keys: &[(u32, u64)]) -> Vec<Read> {
        keys.iter()
            .map(|&(file, page)| Read {
                reader: file,
                file,
                page,
            })
            .collect()
    }

    fn policies(c: usize) -> Vec<(&'static str, Box<dyn Policy>)> {
        vec![
            ("two lists", Box::new(TwoLists::new(c, false))),
            ("streams", Box::new(TwoLists::new(c, true))),
            ("s3-fifo", Box::new(S3Fifo::new(c))),
            ("arc", Box::new(Arc::new(c))),
            ("lru", Box::new(Lru::new(c))),
        ]
    }

    proptest! {
        /// No policy beats MIN, and each hits only pages it read before,
        /// and never holds more than its capacity (a hit on more distinct
        /// recent pages than that would show it).
        #[test]
        fn no_policy_beats_min_or_hits_an_unread_page(
            c in 1usize..12,
            keys in prop::collection::vec((0u32..3, 0u64..24), 0..400),
        ) {
            let trace = reads(&keys);
            let ks: Vec<u64> = trace.iter().map(|r| r.key()).collect();
            let (min, _) = crate::lru::min_replay(c, &ks);
            let min_hits = min.iter().filter(|&&h| h).count();
            for (name, mut p) in policies(c) {
                let mut seen = HashSet::new();
                let mut hits = 0;
                for r in &trace {
                    let hit = p.read(*r);
                    prop_assert!(!hit || seen.contains(&r.key()), "{name}: hit on an unread page");
                    seen.insert(r.key());
                    hits += usize::from(hit);
                }
                prop_assert!(hits <= min_hits, "{name}: {hits} hits, MIN {min_hits}");
            }
        }
    }

    #[test]
    fn a_page_read_right_after_it_came_in_hits_in_every_policy() {
        for (name, mut p) in policies(4) {
            for page in 0..100 {
                let r = Read {
                    reader: 0,
                    file: 0,
                    page,
                };
                assert!(!p.read(r), "{name}");
                assert!(p.read(r), "{name}");
            }
        }
    }

    #[test]
    fn streams_evicted_first_keep_a_hot_set_that_two_lists_lose() {
        // A hot set of 20 pages read once every 80 pages of a scan, in a
        // cache of 64: the scan sweeps the inactive list between two
        // reads of a hot page. (In steps of 7: not a stream of its own.)
        let (c, hot) = (64, 20u64);
        let mut trace = Vec::new();
        let mut scan = 0;
        for i in 0..20_000u64 {
            trace.push(Read {
                reader: 0,
                file: 0,
                page: i * 7 % hot,
            });
            for _ in 0..4 {
                trace.push(Read {
                    reader: 1,
                    file: 1,
                    page: scan,
                });
                scan += 1;
            }
        }
        let hot_hits = |p: &mut dyn Policy| {
            let hits = trace.iter().filter(|r| p.read(**r) && r.file == 0).count();
            hits as f64 / 20_000.0
        };
        let (mut plain, mut streams) = (TwoLists::new(c, false), TwoLists::new(c, true));
        let plain = hot_hits(&mut plain);
        let streams = hot_hits(&mut streams);
        assert!(plain < 0.5, "two lists kept {plain}");
        assert!(streams > 0.99, "streams first kept {streams}");
    }

    #[test]
    fn a_stream_starts_after_its_run() {
        let mut s = Streams::default();
        let r = |page| Read {
            reader: 0,
            file: 0,
            page,
        };
        let got: Vec<bool> = (10..20).map(|p| s.sequential(r(p))).collect();
        assert_eq!(
            got.iter().filter(|&&b| b).count(),
            10 - STREAM_RUN as usize + 1
        );
        assert!(!s.sequential(r(100)), "a jump ends it");
        // Another reader's run of the same file is its own.
        assert!(!s.sequential(Read {
            reader: 1,
            ..r(101)
        }));
    }
}
