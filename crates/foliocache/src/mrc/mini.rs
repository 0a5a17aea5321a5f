//! Miniature simulations (Waldspurger et al., "Cache Modeling and
//! Optimization using Miniature Simulations", USENIX ATC 2017): the
//! cache's own replacement policy run over the sampled keys only, at the
//! sizes below 1x scaled down by the sampling rate. A cache of `r C`
//! pages over all keys behaves as one of `r C x rate` pages over a
//! sample of the keys taken at `rate`: so the hits of a miniature cache
//! of that size, scaled by the rate, are the hits the real one would
//! have had.
//!
//! Why the policy and not an LRU: the cache's two lists are not an LRU.
//! A folio read twice goes to the active list, and a scan or a loop
//! passes through the inactive list without flushing it, so at a smaller
//! size the cache keeps more of its hot folios than an LRU would (25
//! points of a zipf's 0.25x at a 16 MiB cache, where an LRU's ratio
//! missed by 2 to 4 points however large its sample).
//!
//! The policy simulated is the cache's (docs/design.md section 7,
//! `vmscan.rs`, `workingset.rs`), page by page:
//!
//! ```text
//!   miss:  in at the inactive head, referenced (the read marks it);
//!          at the active head when its shadow's distance is within
//!          the active list (workingset_refault; the clock advances)
//!   hit:   inactive and referenced -> active head (the clock advances);
//!          otherwise -> referenced
//!   full:  inactive shorter than active -> the active tail to the
//!          inactive head, keeping its bit; else the inactive tail goes,
//!          leaving a shadow of the clock (the clock advances)
//! ```
//!
//! The simulations share one map from a sampled key to its place in each
//! (a slot, or its shadow's age): one lookup a sampled read for all of
//! them. A shadow is kept for as many evictions as its simulation has
//! pages (an older one cannot pass the refault test: its distance counts
//! at least the evictions since, the active list at most the capacity),
//! and a key in no simulation leaves the map: the map holds at most
//! twice the simulations' pages, whatever the key space (a scan does not
//! grow it).

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use super::KeyHasher;

/// The sizes simulated, as shares of the capacity: 0.25, 0.5 and 1.
pub(crate) const SIMS: usize = 3;

/// No slot.
const NIL: u32 = u32::MAX;

/// A sampled key's place in each simulation: its slot while resident,
/// and the clock at its eviction while it has a shadow.
#[derive(Clone, Copy)]
struct Entry {
    slot: [u32; SIMS],
    shadow: [u32; SIMS],
    /// Bit `i`: simulation `i` holds a shadow of the key.
    shadowed: u8,
}

const EMPTY: Entry = Entry {
    slot: [NIL; SIMS],
    shadow: [0; SIMS],
    shadowed: 0,
};

/// A resident page of a simulation.
#[derive(Clone, Copy)]
struct Slot {
    key: u64,
    prev: u32,
    next: u32,
    active: bool,
    referenced: bool,
    /// On a list (not on the free list).
    live: bool,
}

/// A list of slots, head first.
#[derive(Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
    len: u32,
}

const INACTIVE: usize = 0;
const ACTIVE: usize = 1;

/// One miniature cache: its lists and its eviction clock.
struct Sim {
    cap: u32,
    slots: Vec<Slot>,
    free: Vec<u32>,
    lists: [List; 2],
    /// Pages evicted or activated (`nonresident_age`), wrapping.
    clock: u32,
    /// The newest `cap` evictions (key, clock): the shadows that can
    /// still pass the refault test (its distance counts at least the
    /// evictions since, and the active list is at most `cap`).
    ring: Vec<(u64, u32)>,
    ring_at: usize,
}

impl Sim {
    fn new(cap: u32) -> Sim {
        let empty = List {
            head: NIL,
            tail: NIL,
            len: 0,
        };
        Sim {
            cap,
            slots: Vec::new(),
            free: Vec::new(),
            lists: [empty; 2],
            clock: 0,
            ring: Vec::new(),
            ring_at: 0,
        }
    }

    fn len(&self) -> u32 {
        self.lists[INACTIVE].len + self.lists[ACTIVE].len
    }

    fn unlink(&mut self, s: u32) {
        let Slot {
            prev, next, active, ..
        } = self.slots[s as usize];
        let list = &mut self.lists[usize::from(active)];
        match prev {
            NIL => list.head = next,
            p => self.slots[p as usize].next = next,
        }
        match next {
            NIL => list.tail = prev,
            n => self.slots[n as usize].prev = prev,
        }
        list.len -= 1;
    }

    fn push_head(&mut self, s: u32, active: bool) {
        let list = &mut self.lists[usize::from(active)];
        let old = list.head;
        list.head = s;
        if old == NIL {
            list.tail = s;
        }
        list.len += 1;
        if old != NIL {
            self.slots[old as usize].prev = s;
        }
        let slot = &mut self.slots[s as usize];
        slot.prev = NIL;
        slot.next = old;
        slot.active = active;
    }

    /// A hit on slot `s` (`folio_mark_accessed`).
    fn hit(&mut self, s: u32) {
        let slot = self.slots[s as usize];
        if !slot.active && slot.referenced {
            self.unlink(s);
            self.slots[s as usize].referenced = false;
            self.push_head(s, true);
            self.clock = self.clock.wrapping_add(1);
        } else {
            self.slots[s as usize].referenced = true;
        }
    }

    /// A miss on `key`, whose shadow (if any) recorded clock `shadow`:
    /// its new slot.
    fn insert(&mut self, key: u64, shadow: Option<u32>) -> u32 {
        let active =
            shadow.is_some_and(|age| self.clock.wrapping_sub(age) <= self.lists[ACTIVE].len);
        if active {
            self.clock = self.clock.wrapping_add(1);
        }
        let slot = Slot {
            key,
            prev: NIL,
            next: NIL,
            active,
            referenced: true,
            live: true,
        };
        let s = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = slot;
                s
            }
            None => {
                self.slots.push(slot);
                self.slots.len() as u32 - 1
            }
        };
        self.push_head(s, active);
        s
    }

    /// Makes room while over capacity: one eviction, the key and the
    /// clock its shadow records, or `None` when within capacity
    /// (`isolate_lru_folios`).
    fn evict_one(&mut self) -> Option<(u64, u32)> {
        while self.len() > self.cap {
            if self.lists[ACTIVE].len > self.lists[INACTIVE].len {
                // Refill the inactive list from the active tail, the bit kept.
                let s = self.lists[ACTIVE].tail;
                self.unlink(s);
                self.push_head(s, false);
                continue;
            }
            let s = self.lists[INACTIVE].tail;
            self.unlink(s);
            self.slots[s as usize].live = false;
            self.free.push(s);
            let age = self.clock;
            self.clock = self.clock.wrapping_add(1);
            return Some((self.slots[s as usize].key, age));
        }
        None
    }
}

impl Sim {
    /// Records an eviction's shadow in the ring: the one it displaces,
    /// now too old to pass the refault test.
    fn remember(&mut self, key: u64, age: u32) -> Option<(u64, u32)> {
        if self.ring.len() < self.cap as usize {
            self.ring.push((key, age));
            return None;
        }
        let old = std::mem::replace(&mut self.ring[self.ring_at], (key, age));
        self.ring_at = (self.ring_at + 1) % self.ring.len();
        Some(old)
    }
}

/// The miniature caches over one sample of keys.
pub(crate) struct Minis {
    entries: HashMap<u64, Entry, BuildHasherDefault<KeyHasher>>,
    sims: [Sim; SIMS],
}

impl Minis {
    /// Simulations of `caps` pages each.
    pub(crate) fn new(caps: [u32; SIMS]) -> Minis {
        Minis {
            entries: HashMap::default(),
            sims: caps.map(|c| Sim::new(c.max(1))),
        }
    }

    /// Reads key `h` in every simulation: whether each hit.
    pub(crate) fn access(&mut self, h: u64) -> [bool; SIMS] {
        let e = self.entries.entry(h).or_insert(EMPTY);
        let mut hits = [false; SIMS];
        for (i, sim) in self.sims.iter_mut().enumerate() {
            if e.slot[i] != NIL {
                sim.hit(e.slot[i]);
                hits[i] = true;
            } else {
                let bit = 1 << i;
                let shadow = (e.shadowed & bit != 0).then_some(e.shadow[i]);
                e.shadowed &= !bit;
                e.slot[i] = sim.insert(h, shadow);
            }
        }
        self.make_room();
        hits
    }

    /// Evicts from each simulation over its capacity, leaving shadows,
    /// and forgets the shadows that have grown too old to matter (a key
    /// in no simulation any more leaves the map).
    fn make_room(&mut self) {
        for (i, sim) in self.sims.iter_mut().enumerate() {
            while let Some((key, age)) = sim.evict_one() {
                if let Some(e) = self.entries.get_mut(&key) {
                    e.slot[i] = NIL;
                    e.shadow[i] = age;
                    e.shadowed |= 1 << i;
                }
                let Some((old, old_age)) = sim.remember(key, age) else {
                    continue;
                };
                if let Some(e) = self.entries.get_mut(&old) {
                    if e.shadowed & (1 << i) != 0 && e.shadow[i] == old_age {
                        e.shadowed &= !(1 << i);
                        if e.shadowed == 0 && e.slot == [NIL; SIMS] {
                            self.entries.remove(&old);
                        }
                    }
                }
            }
        }
    }
}
