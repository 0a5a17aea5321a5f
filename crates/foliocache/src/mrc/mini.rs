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
//! size the cache keeps more of its hot folios than an LRU would, and an
//! LRU's ratio missed the cache's however large its sample
//! (the measurements are linked from docs/design.md, "How big should the
//! cache be").
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
//! The streamed list (`lru.rs`: a stream's readahead goes first) is not
//! simulated: the curve counts pages a read copies, and a stream's pages
//! are simulated as inactive ones.
//!
//! The simulations share one map from a sampled key to its slot in each:
//! one lookup a sampled read for all of them, none on an eviction. A
//! slot is a page while resident and its shadow once evicted: each
//! simulation has twice its capacity in slots and reuses the one freed
//! longest ago, so a shadow lasts as many evictions as the simulation
//! has pages (an older one could not pass the refault test: its distance
//! counts at least the evictions since, the active list at most the
//! capacity). A key's slot is its own while it holds the key; keys whose
//! slots all went to others leave the map when it grows past twice the
//! slots (whatever the key space: a scan does not grow it).

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;

use super::KeyHasher;

/// The sizes simulated, as shares of the capacity: 0.25, 0.5 and 1.
pub(crate) const SIMS: usize = 3;

/// No slot.
const NIL: u32 = u32::MAX;

/// A slot: a resident page of a simulation, or the shadow it left.
#[derive(Clone, Copy)]
struct Slot {
    key: u64,
    prev: u32,
    next: u32,
    active: bool,
    referenced: bool,
    /// On a list; otherwise a shadow, of the clock at `age`.
    live: bool,
    age: u32,
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
    /// The most slots (twice the capacity), made as they are first needed.
    max_slots: u32,
    slots: Vec<Slot>,
    /// Slots not on a list, the one freed longest ago first.
    free: VecDeque<u32>,
    lists: [List; 2],
    /// Pages evicted or activated (`nonresident_age`), wrapping.
    clock: u32,
    /// The policy is a clock's (`Minis::new`): one list, no activation.
    second_chance: bool,
}

/// What a simulation's slot holds for a key.
enum Held {
    Page,
    Shadow(u32),
    Nothing,
}

impl Sim {
    fn new(cap: u32, second_chance: bool) -> Sim {
        let empty = List {
            head: NIL,
            tail: NIL,
            len: 0,
        };
        Sim {
            cap,
            max_slots: 2 * cap,
            slots: Vec::new(),
            free: VecDeque::new(),
            lists: [empty; 2],
            clock: 0,
            second_chance,
        }
    }

    fn len(&self) -> u32 {
        self.lists[INACTIVE].len + self.lists[ACTIVE].len
    }

    /// What slot `s` holds for key `h`.
    fn held(&self, s: u32, h: u64) -> Held {
        match self.slots.get(s as usize) {
            Some(slot) if slot.key == h && slot.live => Held::Page,
            Some(slot) if slot.key == h => Held::Shadow(slot.age),
            _ => Held::Nothing,
        }
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
        if !slot.active && slot.referenced && !self.second_chance {
            self.unlink(s);
            self.slots[s as usize].referenced = false;
            self.push_head(s, true);
            self.clock = self.clock.wrapping_add(1);
        } else {
            self.slots[s as usize].referenced = true;
        }
    }

    /// A miss on `key`, whose shadow (if any) recorded clock `shadow`:
    /// makes room, and returns its new slot.
    fn insert(&mut self, key: u64, shadow: Option<u32>) -> u32 {
        if self.len() >= self.cap {
            self.evict();
        }
        let active = !self.second_chance
            && shadow.is_some_and(|age| self.clock.wrapping_sub(age) <= self.lists[ACTIVE].len);
        if active {
            self.clock = self.clock.wrapping_add(1);
        }
        let slot = Slot {
            key,
            prev: NIL,
            next: NIL,
            active,
            // (A clock's new page is not marked: a load is no read.)
            referenced: !self.second_chance,
            live: true,
            age: 0,
        };
        // A new slot while there may be more (the freed keep their
        // shadows longer), else the one freed longest ago (there is one:
        // at most `cap` of the `2 cap` are live).
        let s = if (self.slots.len() as u32) < self.max_slots {
            self.slots.push(slot);
            self.slots.len() as u32 - 1
        } else {
            self.free.pop_front().unwrap_or(0)
        };
        self.slots[s as usize] = slot;
        self.push_head(s, active);
        s
    }

    /// One eviction (`isolate_lru_folios`): the inactive list refilled
    /// from the active tail while shorter (the bit kept), then its tail
    /// leaves its shadow in its slot.
    fn evict(&mut self) {
        while self.lists[ACTIVE].len > self.lists[INACTIVE].len {
            let s = self.lists[ACTIVE].tail;
            self.unlink(s);
            self.push_head(s, false);
        }
        let mut s = self.lists[INACTIVE].tail;
        if self.second_chance {
            // The clock's hand: a page read since it last passed loses
            // its mark and is passed over (to the head: the hand's next
            // round reaches it last), at most once each.
            for _ in 0..self.lists[INACTIVE].len {
                if s == NIL || !self.slots[s as usize].referenced {
                    break;
                }
                self.slots[s as usize].referenced = false;
                self.unlink(s);
                self.push_head(s, false);
                s = self.lists[INACTIVE].tail;
            }
        }
        if s == NIL {
            return;
        }
        self.unlink(s);
        let slot = &mut self.slots[s as usize];
        slot.live = false;
        slot.age = self.clock;
        self.clock = self.clock.wrapping_add(1);
        self.free.push_back(s);
    }
}

/// A sampled key: its slot in each simulation (its own while the slot
/// holds the key), and the clock's tick at its last read (`Mrc::now`):
/// its next read's age, binned as the cache's hits are (`mrc::age_bin`).
#[derive(Clone, Copy)]
struct Key {
    slots: [u32; SIMS],
    last: u16,
}

/// The miniature caches over one sample of keys.
pub(crate) struct Minis {
    entries: HashMap<u64, Key, BuildHasherDefault<KeyHasher>>,
    sims: [Sim; SIMS],
    /// The map's size past which the keys no slot holds leave it.
    sweep_at: usize,
}

impl Minis {
    /// Simulations of `caps` pages each, of the cache's two lists, or
    /// with `second_chance` of a clock (the group's cache: one list; a
    /// page loaded is not marked, a read marks it, and the hand passes
    /// over a marked page once, unmarking it; `shared/index.rs`'s
    /// `victim`).
    pub(crate) fn new(caps: [u32; SIMS], second_chance: bool) -> Minis {
        let sims = caps.map(|c| Sim::new(c.max(1), second_chance));
        let slots: usize = sims.iter().map(|s| s.max_slots as usize).sum();
        Minis {
            entries: HashMap::default(),
            sims,
            sweep_at: 2 * slots,
        }
    }

    /// Reads key `h` in every simulation at tick `now`: whether each hit,
    /// and the ticks since the key's last read (none if new to the map).
    pub(crate) fn access(&mut self, h: u64, now: u16) -> ([bool; SIMS], Option<u16>) {
        let mut age = None;
        let key = self
            .entries
            .entry(h)
            .and_modify(|k| age = Some(now.wrapping_sub(k.last)))
            .or_insert(Key {
                slots: [NIL; SIMS],
                last: now,
            });
        key.last = now;
        let mut hits = [false; SIMS];
        for ((sim, s), hit) in self
            .sims
            .iter_mut()
            .zip(key.slots.iter_mut())
            .zip(&mut hits)
        {
            match sim.held(*s, h) {
                Held::Page => {
                    sim.hit(*s);
                    *hit = true;
                }
                Held::Shadow(age) => *s = sim.insert(h, Some(age)),
                Held::Nothing => *s = sim.insert(h, None),
            }
        }
        if self.entries.len() > self.sweep_at {
            // (Amortised: at least `sweep_at / 2` new keys between two.)
            let sims = &self.sims;
            self.entries.retain(|h, key| {
                sims.iter()
                    .zip(key.slots.iter())
                    .any(|(sim, &s)| !matches!(sim.held(s, *h), Held::Nothing))
            });
        }
        (hits, age)
    }
}

#[cfg(test)]
impl Minis {
    /// Keys in the map.
    pub(crate) fn keys(&self) -> usize {
        self.entries.len()
    }
}
