//! The simple API's operations ([`Op`], with how to make the entry to
//! store, [`ESpec`], and what `compare_exchange` expects, [`KeySpec`]),
//! applied to the array and the model by [`apply`], which compares the
//! results.

use super::*;

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
pub(super) fn assert_split(
    got: &xarray::Result<()>,
    want: &xarray::Result<()>,
    what: impl fmt::Display,
) {
    match (got, want) {
        (Err(Error::SplitTooLarge { .. }), Err(Error::SplitTooLarge { .. })) => {}
        _ => assert_eq!(got, want, "{what}"),
    }
}

/// Do the borrowed entries `got` match `want`, index for index and entry
/// for entry?
pub(super) fn refs_same(got: &[(u64, EntryRef<'_, u64>)], want: &[(u64, E)]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|((i, a), (j, b))| i == j && ref_same(a, b))
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
