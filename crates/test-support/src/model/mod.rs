//! The reference model of the `xarray` crate, shared by its proptest model
//! (`crates/xarray/tests/it/model.rs`) and the fuzz target
//! (`crates/fuzz/src/xarray_ops.rs`).
//!
//! The model is a `BTreeMap` from an entry's first index to its order,
//! value and marks ([`Model`]). An operation of the simple API ([`Op`]) is
//! applied to an [`XArray`] and the model by [`apply`], which compares the
//! results; a run of cursor operations under one lock hold ([`COp`], with
//! the cursor's moves, [`Move`]) by [`cursor_step`]. The whole-array
//! checks ([`check_full`]) compare the contents, the tree's exact node
//! count and memory, and the items' reference counts; [`teardown`] erases
//! everything and checks that every item made was released.
//!
//! The semantics the model encodes are stated in the proptest model's
//! header (`crates/xarray/tests/it/model.rs`). The generators (proptest
//! strategies there, `arbitrary` decoding in the fuzz target) stay with
//! their users.

#![allow(clippy::type_complexity)]

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::ops::Bound;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use xarray::{
    Cursor, Entry, EntryKey, EntryRef, Error, Mark, XArray, XaGuard, MAX_SPLIT_NODES, MAX_VALUE,
    NR_MARKS,
};

mod cursor;
pub use cursor::*;

/// The item type the model stores: a counted pointer to a value, so that
/// identity (`EntryKey`) and lifetime can be checked.
pub type P = Arc<u64>;
/// The array under test.
pub type Xa = XArray<P>;
/// An entry of the array under test.
pub type E = Entry<P>;

/// Orders the generators draw from.
pub const ORDERS: [u32; 9] = [0, 1, 2, 3, 5, 6, 7, 9, 12];

/// Indices at and around node boundaries (64, 4096, 262144 indices per
/// node level) and at the top of the index space.
pub const BOUNDARIES: [u64; 20] = [
    0,
    1,
    63,
    64,
    65,
    127,
    128,
    511,
    512,
    4095,
    4096,
    4097,
    8191,
    262_143,
    262_144,
    262_145,
    1 << 32,
    (1 << 32) - 1,
    u64::MAX - 63,
    u64::MAX,
];

/// Mark number `n` (below `NR_MARKS`).
pub fn mark(n: u8) -> Mark {
    Mark::new(usize::from(n)).expect("mark number below NR_MARKS")
}

/// Every mark.
pub fn marks() -> impl Iterator<Item = Mark> {
    (0..NR_MARKS as u8).map(mark)
}

/// Last index of an entry of `order` at `base` (`order <= 63`).
fn last_of(base: u64, order: u32) -> u64 {
    base + ((1u64 << order) - 1)
}

/// The index after an entry, if any.
fn next_of(base: u64, order: u32) -> Option<u64> {
    last_of(base, order).checked_add(1)
}

/// `index` rounded down to a multiple of `2^order`.
pub fn align_down(index: u64, order: u32) -> u64 {
    if order >= 64 {
        index
    } else {
        index & !((1u64 << order) - 1)
    }
}

// ---------------------------------------------------------------------------
// Comparing entries: by content and by identity.

/// Whether two entries are the same: equal content and identity.
pub fn same(a: &E, b: &E) -> bool {
    a.key() == b.key() && a == b
}

fn same_opt(a: &Option<E>, b: &Option<E>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => same(a, b),
        _ => false,
    }
}

fn ref_same(r: &EntryRef<'_, u64>, e: &E) -> bool {
    r.key() == e.key()
        && match (r, e) {
            (EntryRef::Item(x), Entry::Item(a)) => **x == **a,
            (EntryRef::Value(v), Entry::Value(w)) => v == w,
            _ => false,
        }
}

fn ref_same_opt(r: &Option<EntryRef<'_, u64>>, e: &Option<E>) -> bool {
    match (r, e) {
        (None, None) => true,
        (Some(r), Some(e)) => ref_same(r, e),
        _ => false,
    }
}

/// Asserts two optional entries are the [`same`].
#[track_caller]
pub fn assert_same(actual: &Option<E>, expected: &Option<E>, what: impl fmt::Display) {
    assert!(
        same_opt(actual, expected),
        "{what}: got {actual:?} (key {:?}), expected {expected:?} (key {:?})",
        actual.as_ref().map(|e| e.key()),
        expected.as_ref().map(|e| e.key()),
    );
}

#[track_caller]
fn assert_res(
    actual: &Result<Option<E>, Error>,
    expected: &Result<Option<E>, Error>,
    what: impl fmt::Display,
) {
    match (actual, expected) {
        (Ok(a), Ok(e)) => assert_same(a, e, what),
        (Err(a), Err(e)) => assert_eq!(a, e, "{what}"),
        _ => panic!("{what}: got {actual:?}, expected {expected:?}"),
    }
}

#[track_caller]
/// Asserts two lists of (index, entry) are the same, pair by pair.
pub fn assert_list(actual: &[(u64, E)], expected: &[(u64, E)], what: impl fmt::Display) {
    let ok = actual.len() == expected.len()
        && actual
            .iter()
            .zip(expected)
            .all(|((i, a), (j, b))| i == j && same(a, b));
    assert!(
        ok,
        "{what}:\n  got      {actual:?}\n  expected {expected:?}"
    );
    for w in actual.windows(2) {
        assert!(
            w[0].0 < w[1].0,
            "{what}: indices not increasing: {actual:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// The model.

/// What a slot of the model holds.
#[derive(Clone, Debug)]
pub enum Val {
    /// An entry (item or value).
    Entry(E),
    /// A reservation: loads `None`, but the index is occupied.
    Reserved,
}

#[derive(Clone, Debug)]
/// One entry or reservation of the model.
pub struct Slot {
    /// It covers `2^order` indices from its first.
    pub order: u32,
    /// The entry, or a reservation.
    pub val: Val,
    /// Its marks, by number.
    pub marks: [bool; NR_MARKS],
}

impl Slot {
    /// The entry, `None` for a reservation.
    pub fn entry(&self) -> Option<&E> {
        match &self.val {
            Val::Entry(e) => Some(e),
            Val::Reserved => None,
        }
    }
}

/// Which entries a search of the model reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filt {
    /// Every entry (not reservations).
    Present,
    /// Entries with this mark set.
    Marked(usize),
}

/// The reference model: first index of each entry or reservation -> slot.
/// Slots never overlap.
#[derive(Default, Debug)]
pub struct Model {
    /// First index -> slot.
    pub map: BTreeMap<u64, Slot>,
    /// Every item made for this run, to check they are all released at the end.
    pub created: RefCell<Vec<Weak<u64>>>,
    /// Shift of the root node (None: no node). It grows with the largest
    /// index and order stored, and only an erase lowers it, to the smallest
    /// root for what is left, as `xas_shrink` does in the kernel.
    pub root: Option<u32>,
}

/// Smallest node shift whose node, starting at index 0, covers `index`.
fn shift_for(index: u64) -> u32 {
    let bits = 64 - index.leading_zeros();
    if bits <= 6 {
        0
    } else {
        (bits - 6).div_ceil(6) * 6
    }
}

/// Shift of the node an entry of `order` lives in (6 bits of index a
/// level, as `XA_CHUNK_SHIFT` in the kernel).
fn level_of(order: u32) -> u32 {
    order - order % 6
}

fn model_check_order(index: u64, order: u32) -> Result<(), Error> {
    if order > 63 {
        return Err(Error::OrderTooLarge { order });
    }
    if index & ((1u64 << order) - 1) != 0 {
        return Err(Error::Misaligned { index, order });
    }
    Ok(())
}

fn model_check_entry(e: &E) -> Result<(), Error> {
    match e {
        Entry::Value(v) if *v > MAX_VALUE => Err(Error::ValueTooLarge { value: *v }),
        _ => Ok(()),
    }
}

/// Nodes a split of an order-`order` entry into `new_order` pieces builds,
/// from the documented layout (an order-n entry lives in the node of shift
/// `n - n % 6`, over `2^(n % 6)` slots).
fn split_nodes(order: u32, new_order: u32) -> usize {
    let shift = order - order % 6;
    let span = 1usize << (order - shift);
    let lm = new_order - new_order % 6;
    if lm == shift {
        return 0;
    }
    let levels = (shift - lm) / 6;
    let mut per_slot = 0usize;
    for l in 0..levels {
        per_slot = match 64usize.checked_pow(l).and_then(|x| per_slot.checked_add(x)) {
            Some(p) => p,
            None => return usize::MAX,
        };
    }
    per_slot.saturating_mul(span)
}

impl Model {
    /// The slot covering index `i`, with its first index.
    pub fn covering(&self, i: u64) -> Option<(u64, &Slot)> {
        let (&b, s) = self.map.range(..=i).next_back()?;
        (last_of(b, s.order) >= i).then_some((b, s))
    }

    /// [`Model::covering`], mutable.
    pub fn covering_mut(&mut self, i: u64) -> Option<(u64, &mut Slot)> {
        let (&b, s) = self.map.range_mut(..=i).next_back()?;
        (last_of(b, s.order) >= i).then_some((b, s))
    }

    /// What `XArray::load(i)` must return.
    pub fn load(&self, i: u64) -> Option<E> {
        self.covering(i).and_then(|(_, s)| s.entry().cloned())
    }

    /// The key of the entry covering `i`.
    pub fn key(&self, i: u64) -> Option<EntryKey> {
        self.load(i).map(|e| e.key())
    }

    /// The number of entries (not reservations).
    pub fn len(&self) -> u64 {
        self.map.values().filter(|s| s.entry().is_some()).count() as u64
    }

    /// Whether the array must be empty (reservations keep it non-empty).
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether any entry has mark `m`.
    pub fn marked(&self, m: usize) -> bool {
        self.map.values().any(|s| s.entry().is_some() && s.marks[m])
    }

    /// What `XArray::get_order(i)` must return.
    pub fn get_order(&self, i: u64) -> u32 {
        match self.covering(i) {
            Some((_, s)) if s.entry().is_some() => s.order,
            _ => 0,
        }
    }

    /// What `XArray::get_mark(i, m)` must return.
    pub fn get_mark(&self, i: u64, m: usize) -> bool {
        match self.covering(i) {
            Some((_, s)) => s.entry().is_some() && s.marks[m],
            None => false,
        }
    }

    /// First indices of every slot overlapping `first..=last`.
    pub fn overlapping(&self, first: u64, last: u64) -> Vec<u64> {
        let cov = self.covering(first).map(|(b, _)| b);
        cov.into_iter()
            .chain(
                self.map
                    .range(first..=last)
                    .map(|(&b, _)| b)
                    .filter(|&b| Some(b) != cov),
            )
            .collect()
    }

    /// Every item the model holds, one per entry.
    pub fn items(&self) -> Vec<P> {
        self.map
            .values()
            .filter_map(|s| match &s.val {
                Val::Entry(Entry::Item(a)) => Some(a.clone()),
                _ => None,
            })
            .collect()
    }

    /// A fresh item holding `v`, recorded to check its release at the end.
    pub fn new_item(&self, v: u64) -> P {
        let a = Arc::new(v);
        self.created.borrow_mut().push(Arc::downgrade(&a));
        a
    }

    /// A store of `order` at `index` succeeded: the tree grows to hold it.
    pub fn grow(&mut self, index: u64, order: u32) {
        let need = level_of(order).max(shift_for(index));
        self.root = Some(self.root.map_or(need, |r| r.max(need)));
    }

    /// Something was erased: empty nodes go, and the root loses every level
    /// whose node would only use slot 0 for a node.
    pub fn shrink(&mut self) {
        self.root = self
            .map
            .iter()
            .map(|(&b, s)| level_of(s.order).max(shift_for(b)))
            .max();
    }

    /// Nodes of the tree holding the model's slots under a root of shift
    /// `self.root`: for each slot, the chain of nodes from the root down to
    /// the node of its level (an order-n entry lives in the node of shift
    /// `n - n % 6`). Empty nodes are freed, so the array has exactly these.
    pub fn expected_nodes(&self) -> usize {
        let Some(root) = self.root else {
            assert!(self.map.is_empty(), "model: slots without a root");
            return 0;
        };
        let mut nodes = BTreeSet::new();
        for (&b, s) in &self.map {
            let mut shift = level_of(s.order);
            while shift <= root {
                let prefix = if shift + 6 >= 64 { 0 } else { b >> (shift + 6) };
                nodes.insert((shift, prefix));
                shift += 6;
            }
        }
        nodes.len()
    }

    /// The entry `spec` describes.
    pub fn materialize(&self, spec: &ESpec) -> E {
        match *spec {
            ESpec::Item(v) => Entry::Item(self.new_item(v)),
            ESpec::Value(v) => Entry::Value(v),
            ESpec::Reuse(k) => {
                let items = self.items();
                if items.is_empty() {
                    Entry::Item(self.new_item(k as u64))
                } else {
                    Entry::Item(items[k % items.len()].clone())
                }
            }
        }
    }

    /// The key a `KeySpec` stands for at `index`, plus an item to keep alive
    /// while the key is used (so its address cannot be reused).
    pub fn key_for(&self, spec: &KeySpec, index: u64) -> (Option<EntryKey>, Option<P>) {
        match *spec {
            KeySpec::Current => (self.key(index), None),
            KeySpec::Null => (None, None),
            KeySpec::Value(v) => (Some(EntryKey::Value(v)), None),
            KeySpec::Fresh(v) => {
                let a = Arc::new(v);
                (Some(Entry::Item(a.clone()).key()), Some(a))
            }
            KeySpec::SameContent => match self.load(index) {
                Some(Entry::Item(a)) => {
                    let b = Arc::new(*a);
                    (Some(Entry::Item(b.clone()).key()), Some(b))
                }
                _ => (Some(EntryKey::Value(5000)), None),
            },
        }
    }

    /// `XArray::store_order` on the model.
    pub fn store_order(&mut self, index: u64, order: u32, e: E) -> Result<Option<E>, Error> {
        model_check_order(index, order)?;
        model_check_entry(&e)?;
        let old = self.load(index);
        self.grow(index, order);
        if let Some((_, s)) = self.covering_mut(index) {
            if s.entry().is_some() && s.order >= order {
                // Inside (or exactly) a larger-or-equal entry: replace it
                // whole, keeping its order and marks.
                s.val = Val::Entry(e);
                return Ok(old);
            }
        }
        let mut marks = [false; NR_MARKS];
        for b in self.overlapping(index, last_of(index, order)) {
            let s = self.map.remove(&b).expect("overlapping slot");
            if s.entry().is_some() {
                for (u, m) in marks.iter_mut().zip(s.marks) {
                    *u |= m;
                }
            }
        }
        self.map.insert(
            index,
            Slot {
                order,
                val: Val::Entry(e),
                marks,
            },
        );
        Ok(old)
    }

    /// `XArray::insert_order` on the model.
    pub fn insert_order(&mut self, index: u64, order: u32, e: E) -> Result<(), Error> {
        model_check_order(index, order)?;
        model_check_entry(&e)?;
        if let Some(&b) = self.overlapping(index, last_of(index, order)).first() {
            return Err(Error::Occupied {
                index: b.max(index),
            });
        }
        self.grow(index, order);
        self.map.insert(
            index,
            Slot {
                order,
                val: Val::Entry(e),
                marks: [false; NR_MARKS],
            },
        );
        Ok(())
    }

    /// Compare-exchange at `index` storing with `order`. `Ok(Err(current))`
    /// on a mismatch.
    pub fn cmpxchg(
        &mut self,
        index: u64,
        order: u32,
        key: Option<EntryKey>,
        new: Option<E>,
    ) -> Result<Result<Option<E>, Option<E>>, Error> {
        if let Some(e) = &new {
            model_check_order(index, order)?;
            model_check_entry(e)?;
        }
        if self.key(index) != key {
            return Ok(Err(self.load(index)));
        }
        Ok(Ok(match new {
            Some(e) => self.store_order(index, order, e)?,
            None => self.erase(index),
        }))
    }

    /// `XArray::erase` on the model.
    pub fn erase(&mut self, index: u64) -> Option<E> {
        let (b, _) = self.covering(index)?;
        let s = self.map.remove(&b).expect("covering slot");
        self.shrink();
        s.entry().cloned()
    }

    /// `XArray::reserve` on the model.
    pub fn reserve(&mut self, index: u64) -> Result<(), Error> {
        match self.covering(index) {
            Some((_, s)) if s.entry().is_some() => Err(Error::Occupied { index }),
            Some(_) => Ok(()),
            None => {
                self.grow(index, 0);
                self.map.insert(
                    index,
                    Slot {
                        order: 0,
                        val: Val::Reserved,
                        marks: [false; NR_MARKS],
                    },
                );
                Ok(())
            }
        }
    }

    /// `XArray::release` on the model.
    pub fn release(&mut self, index: u64) {
        if let Some((b, s)) = self.covering(index) {
            if s.entry().is_none() {
                self.map.remove(&b);
                self.shrink();
            }
        }
    }

    /// Sets (`on`) or clears mark `m` of the entry at `index`; whether
    /// there was an entry.
    pub fn set_mark(&mut self, index: u64, m: usize, on: bool) -> bool {
        match self.covering_mut(index) {
            Some((_, s)) if s.entry().is_some() => {
                s.marks[m] = on;
                true
            }
            _ => false,
        }
    }

    /// `XArray::split` on the model.
    pub fn split(&mut self, index: u64, new_order: u32) -> Result<(), Error> {
        let (b, s) = match self.covering(index) {
            Some((b, s)) if s.entry().is_some() => (b, s.clone()),
            _ => return Err(Error::NotPresent { index }),
        };
        if new_order >= s.order {
            return Err(Error::SplitOrder {
                entry_order: s.order,
                new_order,
            });
        }
        let nodes = split_nodes(s.order, new_order);
        if nodes > MAX_SPLIT_NODES {
            return Err(Error::SplitTooLarge { nodes });
        }
        self.map.remove(&b);
        for k in 0..1u64 << (s.order - new_order) {
            self.map.insert(
                b + (k << new_order),
                Slot {
                    order: new_order,
                    ..s.clone()
                },
            );
        }
        Ok(())
    }

    /// Whether a search with `f` reports the slot.
    pub fn hit(s: &Slot, f: Filt) -> bool {
        s.entry().is_some()
            && match f {
                Filt::Present => true,
                Filt::Marked(m) => s.marks[m],
            }
    }

    /// First matching entry in `start..=max`: (reported index, first index,
    /// order, entry).
    pub fn find_filter(&self, start: u64, max: u64, f: Filt) -> Option<(u64, u64, u32, E)> {
        if start > max {
            return None;
        }
        if let Some((b, s)) = self.covering(start) {
            if Self::hit(s, f) {
                return Some((start, b, s.order, s.entry()?.clone()));
            }
        }
        let from = start.checked_add(1).filter(|&f| f <= max)?;
        self.map
            .range(from..=max)
            .find(|(_, s)| Self::hit(s, f))
            .map(|(&b, s)| (b, b, s.order, s.entry().cloned().expect("hit")))
    }

    /// What a search with `f` of `start..=max` must report.
    pub fn find(&self, start: u64, max: u64, f: Filt) -> Option<(u64, E)> {
        self.find_filter(start, max, f).map(|(i, _, _, e)| (i, e))
    }

    /// What `XArray::find_after(index, max)` must report.
    pub fn find_after(&self, index: u64, max: u64) -> Option<(u64, E)> {
        let next = match self.covering(index) {
            Some((b, s)) if s.entry().is_some() => next_of(b, s.order)?,
            _ => index.checked_add(1)?,
        };
        self.find(next, max, Filt::Present)
    }

    /// The first index of `start..=max` neither stored nor reserved.
    pub fn find_empty(&self, start: u64, max: u64) -> Option<u64> {
        let mut i = start;
        loop {
            if i > max {
                return None;
            }
            match self.covering(i) {
                None => return Some(i),
                Some((b, s)) => i = next_of(b, s.order)?,
            }
        }
    }

    /// What an iteration with `f` over `range` (all if `None`) must yield.
    pub fn iter(&self, range: Option<(u64, u64)>, f: Filt) -> Vec<(u64, E)> {
        let mut out = Vec::new();
        let Some((mut start, last)) = range else {
            return out;
        };
        while let Some((i, b, o, e)) = self.find_filter(start, last, f) {
            out.push((i, e));
            match next_of(b, o) {
                Some(n) => start = n,
                None => break,
            }
        }
        out
    }
}

/// The documented conversion of a range to `start..=last` (None when empty).
fn model_range(r: &IndexRange) -> Result<Option<(u64, u64)>, ()> {
    let start = match r.0 {
        Bound::Included(s) => s,
        Bound::Excluded(s) => s.checked_add(1).ok_or(())?,
        Bound::Unbounded => 0,
    };
    let last = match r.1 {
        Bound::Included(e) => e,
        Bound::Excluded(0) if start == 0 => return Ok(None),
        Bound::Excluded(e) => e.checked_sub(1).ok_or(())?,
        Bound::Unbounded => u64::MAX,
    };
    if last.checked_add(1) == Some(start) {
        return Ok(None);
    }
    if start > last {
        return Err(());
    }
    Ok(Some((start, last)))
}

// ---------------------------------------------------------------------------
// Whole-array checks.

/// Load, contains, order and marks at `i`, owned and borrowed.
pub fn probe(xa: &Xa, m: &Model, i: u64) {
    let want = m.load(i);
    assert_same(&xa.load(i), &want, format_args!("load({i})"));
    assert_eq!(xa.contains(i), want.is_some(), "contains({i})");
    assert_eq!(xa.get_order(i), m.get_order(i), "get_order({i})");
    for mk in marks() {
        assert_eq!(
            xa.get_mark(i, mk),
            m.get_mark(i, mk.index()),
            "get_mark({i}, {mk:?})"
        );
    }
    let g = xa.pin();
    assert!(
        ref_same_opt(&xa.load_ref(i, &g), &want),
        "load_ref({i}) = {:?}, expected {want:?}",
        xa.load_ref(i, &g)
    );
    // With no store racing it, the start it reports is exact: the first
    // index of the entry covering `i`.
    let with_start = xa.load_ref_with_start(i, &g);
    assert!(
        ref_same_opt(&with_start.map(|(e, _)| e), &want),
        "load_ref_with_start({i}): entry differs from {want:?}"
    );
    if let Some((_, start)) = with_start {
        assert_eq!(
            Some(start),
            m.covering(i).map(|(b, _)| b),
            "load_ref_with_start({i}): start"
        );
    }
}

/// Compares everything readable without the lock: emptiness, marks,
/// iteration, counts, and loads in and around every entry.
pub fn check_contents(xa: &Xa, m: &Model) {
    assert_eq!(xa.is_empty(), m.is_empty(), "is_empty");
    for mk in marks() {
        assert_eq!(xa.marked(mk), m.marked(mk.index()), "marked({mk:?})");
    }
    let all = Some((0, u64::MAX));
    let got: Vec<_> = xa.iter(..).unwrap().collect();
    assert_list(&got, &m.iter(all, Filt::Present), "iter(..)");
    for mk in marks() {
        let got: Vec<_> = xa.iter_marked(.., mk).unwrap().collect();
        assert_list(
            &got,
            &m.iter(all, Filt::Marked(mk.index())),
            format_args!("iter_marked(.., {mk:?})"),
        );
    }
    assert_eq!(xa.count(..).unwrap(), m.len(), "count(..)");
    // Probe a bounded number of slots: at, inside, before and after each.
    let step = (m.map.len() / 256).max(1);
    for (&b, s) in m.map.iter().step_by(step) {
        let last = last_of(b, s.order);
        probe(xa, m, b);
        probe(xa, m, last);
        probe(xa, m, b + (last - b) / 2);
        if let Some(p) = b.checked_sub(1) {
            probe(xa, m, p);
        }
        if let Some(n) = last.checked_add(1) {
            probe(xa, m, n);
        }
    }
}

/// Bytes one node adds to `memory_bytes`.
fn node_bytes() -> usize {
    let xa = Xa::new();
    xa.store(0, Entry::Value(0)).unwrap();
    assert_eq!(xa.node_count(), 1);
    xa.memory_bytes() - Xa::new().memory_bytes()
}

/// The tree's shape and accounting: exactly the nodes `Model::expected_nodes`
/// predicts (the root follows the documented growth and shrink rules, so a
/// node left behind, or a root that does not shrink after an erase, fails
/// this), and `memory_bytes` = base + nodes.
pub fn check_nodes(xa: &Xa, m: &Model) {
    let nodes = xa.node_count();
    if m.is_empty() {
        assert_eq!(nodes, 0, "node_count() of an empty array");
    }
    assert_eq!(
        nodes,
        m.expected_nodes(),
        "node_count() vs the smallest tree"
    );
    assert_eq!(
        xa.memory_bytes(),
        Xa::new().memory_bytes() + nodes * node_bytes(),
        "memory_bytes()"
    );
}

/// Each item the array holds k times (k slots) has at least 2k + 1 strong
/// references: k in the model, k in the array, one here. Fewer means the
/// array dropped a reference it still uses.
fn check_refcounts(m: &Model) {
    let mut per: HashMap<*const u64, (P, usize)> = HashMap::new();
    for s in m.map.values() {
        if let Val::Entry(Entry::Item(a)) = &s.val {
            per.entry(Arc::as_ptr(a))
                .or_insert_with(|| (a.clone(), 0))
                .1 += 1;
        }
    }
    for (a, k) in per.values() {
        assert!(
            Arc::strong_count(a) > 2 * k,
            "item {a} held by {k} slots has only {} references",
            Arc::strong_count(a)
        );
    }
}

/// `check_contents` plus what needs the lock, the shape and the refcounts.
pub fn check_full(xa: &Xa, m: &Model) {
    check_contents(xa, m);
    assert_eq!(xa.len(), m.len(), "len()");
    check_nodes(xa, m);
    check_refcounts(m);
}

/// Every item made during a run is freed once the array is gone and the
/// epoch has moved on (nothing leaked, through retirement or drop).
pub fn assert_released(created: &[Weak<u64>]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let alive = created.iter().filter(|w| w.strong_count() > 0).count();
        if alive == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{alive} of {} items never released",
            created.len()
        );
        crossbeam_epoch::pin().flush();
        std::thread::yield_now();
    }
}

/// Ends a run: checks the array against the model in full, erases
/// everything ([`teardown`]), drops the array and checks that every item
/// the run made was released exactly once.
pub fn finish_run(xa: Xa, m: &mut Model) {
    check_full(&xa, m);
    teardown(&xa, m);
    drop(xa);
    assert_released(&m.created.borrow());
}

/// Erases everything (alternately through the first and the last index of
/// each entry), then checks that erasing everything leaves the array
/// empty, with no node and the memory of an empty array.
pub fn teardown(xa: &Xa, m: &mut Model) {
    let slots: Vec<(u64, u32)> = m.map.iter().map(|(&b, s)| (b, s.order)).collect();
    for (k, (b, o)) in slots.into_iter().enumerate() {
        let i = if k % 2 == 0 { b } else { last_of(b, o) };
        let want = m.erase(i);
        assert_same(&xa.erase(i), &want, format_args!("teardown erase({i})"));
    }
    assert!(m.is_empty());
    assert!(xa.is_empty(), "is_empty() after erasing everything");
    assert_eq!(xa.len(), 0, "len() after erasing everything");
    assert_eq!(xa.node_count(), 0, "node_count() after erasing everything");
    assert_eq!(
        xa.memory_bytes(),
        Xa::new().memory_bytes(),
        "memory_bytes() after erasing everything"
    );
    for mk in marks() {
        assert!(!xa.marked(mk), "marked({mk:?}) after erasing everything");
    }
    assert_eq!(xa.iter(..).unwrap().count(), 0);
    assert_eq!(xa.find_empty(0, u64::MAX), Some(0));
}

// Operations and generators.

/// How to make the entry to store.
#[derive(Clone, Debug)]
pub enum ESpec {
    /// A fresh `Arc::new(v)`.
    Item(u64),
    /// `Entry::Value(v)`.
    Value(u64),
    /// A clone (same identity) of the k-th item in the model, or a fresh one.
    Reuse(usize),
}

/// What `compare_exchange` expects.
#[derive(Clone, Debug)]
pub enum KeySpec {
    /// The key of what the model holds at the index (so it should succeed).
    Current,
    /// `None`: empty or reserved.
    Null,
    /// `Entry::Value(v)`.
    Value(u64),
    /// An item that was never stored.
    Fresh(u64),
    /// A new `Arc` with the same content as the item there: a different
    /// identity, so it must not match.
    SameContent,
}

/// A range of indices as the range APIs take it.
pub type IndexRange = (Bound<u64>, Bound<u64>);

/// One call of the simple API, applied by [`apply`].
// Each variant is the call of the same name; its fields are the
// arguments.
#[allow(missing_docs)]
#[derive(Clone, Debug)]
pub enum Op {
    Store {
        index: u64,
        order: u32,
        e: ESpec,
    },
    Insert {
        index: u64,
        order: u32,
        e: ESpec,
    },
    Erase(u64),
    CmpXchg {
        index: u64,
        key: KeySpec,
        new: Option<ESpec>,
    },
    Reserve(u64),
    Release(u64),
    SetMark(u64, u8),
    ClearMark(u64, u8),
    Split {
        index: u64,
        new_order: u32,
    },
    Probe(u64),
    Find {
        start: u64,
        max: u64,
    },
    FindAfter {
        index: u64,
        max: u64,
    },
    FindMarked {
        start: u64,
        max: u64,
        mark: u8,
    },
    FindEmpty {
        start: u64,
        max: u64,
    },
    Iter(IndexRange),
    IterMarked(IndexRange, u8),
    IterRef(IndexRange),
    Count(IndexRange),
}

/// Applies `op` to the array and the model and compares the results.
pub fn apply(xa: &Xa, m: &mut Model, op: &Op) {
    match op {
        Op::Store { .. }
        | Op::Insert { .. }
        | Op::Erase(_)
        | Op::CmpXchg { .. }
        | Op::Reserve(_)
        | Op::Release(_)
        | Op::SetMark(..)
        | Op::ClearMark(..)
        | Op::Split { .. } => apply_write(xa, m, op),
        _ => apply_read(xa, m, op),
    }
}

/// [`apply`] for the operations that change the array.
fn apply_write(xa: &Xa, m: &mut Model, op: &Op) {
    match *op {
        Op::Store {
            index,
            order,
            ref e,
        } => {
            let e = m.materialize(e);
            let got = xa.store_order(index, order, e.clone());
            let want = m.store_order(index, order, e);
            assert_res(&got, &want, format_args!("{op:?}"));
        }
        Op::Insert {
            index,
            order,
            ref e,
        } => {
            let e = m.materialize(e);
            let got = xa.insert_order(index, order, e.clone());
            let want = m.insert_order(index, order, e);
            assert_eq!(got, want, "{op:?}");
        }
        Op::Erase(i) => {
            let got = xa.erase(i);
            assert_same(&got, &m.erase(i), format_args!("{op:?}"));
        }
        Op::CmpXchg {
            index,
            ref key,
            ref new,
        } => {
            let (key, _keep) = m.key_for(key, index);
            let new = new.as_ref().map(|s| m.materialize(s));
            let got = xa.compare_exchange(index, key, new.clone());
            let want = m.cmpxchg(index, 0, key, new.clone());
            match (got, want) {
                (Ok(a), Ok(Ok(b))) => assert_same(&a, &b, format_args!("{op:?}")),
                (
                    Err(xarray::CompareExchangeError::Mismatch { current, new: back }),
                    Ok(Err(c)),
                ) => {
                    assert_same(&current, &c, format_args!("{op:?}: current"));
                    assert_same(&back, &new, format_args!("{op:?}: entry given back"));
                }
                (Err(xarray::CompareExchangeError::Failed(a)), Err(b)) => {
                    assert_eq!(a, b, "{op:?}")
                }
                (got, want) => panic!("{op:?}: got {got:?}, expected {want:?}"),
            }
        }
        Op::Reserve(i) => assert_eq!(xa.reserve(i), m.reserve(i), "{op:?}"),
        Op::Release(i) => {
            xa.release(i);
            m.release(i);
        }
        Op::SetMark(i, k) => {
            let got = xa.set_mark(i, mark(k));
            assert_eq!(got, m.set_mark(i, usize::from(k), true), "{op:?}");
        }
        Op::ClearMark(i, k) => {
            let got = xa.clear_mark(i, mark(k));
            assert_eq!(got, m.set_mark(i, usize::from(k), false), "{op:?}");
        }
        Op::Split { index, new_order } => {
            let got = xa.split(index, new_order);
            assert_split(&got, &m.split(index, new_order), format_args!("{op:?}"));
        }
        _ => unreachable!("not a write: {op:?}"),
    }
}

/// [`apply`] for the operations that only read: probes, searches,
/// iterations and counts.
fn apply_read(xa: &Xa, m: &Model, op: &Op) {
    match op {
        &Op::Probe(i) => probe(xa, m, i),
        &Op::Find { start, max } => {
            let got = xa.find(start, max);
            let want = m.find(start, max, Filt::Present);
            assert_list(
                got.as_slice(),
                want.as_slice(),
                format_args!("find({start}, {max})"),
            );
        }
        &Op::FindAfter { index, max } => {
            let got = xa.find_after(index, max);
            let want = m.find_after(index, max);
            assert_list(
                got.as_slice(),
                want.as_slice(),
                format_args!("find_after({index}, {max})"),
            );
        }
        &Op::FindMarked {
            start,
            max,
            mark: k,
        } => {
            let got = xa.find_marked(start, max, mark(k));
            let want = m.find(start, max, Filt::Marked(usize::from(k)));
            assert_list(
                got.as_slice(),
                want.as_slice(),
                format_args!("find_marked({start}, {max}, {k})"),
            );
        }
        &Op::FindEmpty { start, max } => {
            let got = xa.find_empty(start, max);
            assert_eq!(got, m.find_empty(start, max), "find_empty({start}, {max})");
        }
        Op::Iter(r) => match (xa.iter(*r), model_range(r)) {
            (Ok(it), Ok(mr)) => {
                let got: Vec<_> = it.collect();
                assert_list(&got, &m.iter(mr, Filt::Present), format_args!("{op:?}"));
            }
            (Err(Error::InvalidRange { .. }), Err(())) => {}
            (got, want) => panic!("{op:?}: got {:?}, expected {want:?}", got.err()),
        },
        Op::IterMarked(r, k) => match (xa.iter_marked(*r, mark(*k)), model_range(r)) {
            (Ok(it), Ok(mr)) => {
                let got: Vec<_> = it.collect();
                let want = m.iter(mr, Filt::Marked(usize::from(*k)));
                assert_list(&got, &want, format_args!("{op:?}"));
            }
            (Err(Error::InvalidRange { .. }), Err(())) => {}
            (got, want) => panic!("{op:?}: got {:?}, expected {want:?}", got.err()),
        },
        Op::IterRef(r) => {
            let g = xa.pin();
            match (xa.iter_ref(*r, &g), model_range(r)) {
                (Ok(it), Ok(mr)) => {
                    let got: Vec<_> = it.collect();
                    let want = m.iter(mr, Filt::Present);
                    let ok = refs_same(&got, &want);
                    assert!(ok, "{op:?}: got {got:?}, expected {want:?}");
                }
                (Err(Error::InvalidRange { .. }), Err(())) => {}
                (got, want) => panic!("{op:?}: got {:?}, expected {want:?}", got.err()),
            }
        }
        Op::Count(r) => match (xa.count(*r), model_range(r)) {
            (Ok(n), Ok(mr)) => {
                assert_eq!(n, m.iter(mr, Filt::Present).len() as u64, "{op:?}")
            }
            (Err(Error::InvalidRange { .. }), Err(())) => {}
            (got, want) => panic!("{op:?}: got {got:?}, expected {want:?}"),
        },
        _ => unreachable!("not a read: {op:?}"),
    }
}

/// Asserts that a split did what the model's did (two splits too large
/// for one step agree whatever node counts they name).
fn assert_split(got: &xarray::Result<()>, want: &xarray::Result<()>, what: impl fmt::Display) {
    match (got, want) {
        (Err(Error::SplitTooLarge { .. }), Err(Error::SplitTooLarge { .. })) => {}
        _ => assert_eq!(got, want, "{what}"),
    }
}

/// Do the borrowed entries `got` match `want`, index for index and entry
/// for entry?
fn refs_same(got: &[(u64, EntryRef<'_, u64>)], want: &[(u64, E)]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|((i, a), (j, b))| i == j && ref_same(a, b))
}
