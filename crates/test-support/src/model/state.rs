//! The model itself ([`Model`]): the first index of each entry or
//! reservation to its slot (order, value, marks), the root's height as
//! the array's, and the simple API's calls on it.

use super::*;

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
