//! The xarray target: operation sequences against a `BTreeMap` model.
//!
//! The input bytes decode (through [`arbitrary`]) into a sequence of steps.
//! A step is either one call of the simple API (`store_order`, `insert_order`,
//! `erase`, `compare_exchange`, `reserve`/`release`, marks, `split`, `find*`,
//! `iter*`, `count`, a probe of `load`/`load_ref`/`contains`/`get_order`/
//! `get_mark`) or a *cursor batch*: the lock taken once and a run of cursor
//! moves and operations under it (store, insert, compare-exchange, erase,
//! marks, load, next, find, find_marked, find_empty, split), with
//! `NeedNodes` handled by unlocking, reserving and relocking.
//!
//! The model and its checks are those of `crates/xarray/tests/model.rs` (a
//! `BTreeMap` from an entry's first index to its order, value and marks; see
//! that file's header for the semantics it encodes). After every step the
//! whole contents are compared (emptiness, marks, `iter`, `iter_marked`,
//! `count`, probes around every entry), then `len`, the exact node count and
//! `memory_bytes`, and the items' reference counts. At the end everything is
//! erased, the array must hold no node, and every item made must be freed.
//! Any mismatch panics with the operation and both results.
//!
//! Index generators are biased as in the proptest model: small indices so
//! entries collide, node boundaries, and the top of the index space.

#![allow(clippy::type_complexity)]

use arbitrary::{Arbitrary, Result as AResult, Unstructured};
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

type P = Arc<u64>;
type Xa = XArray<P>;
type E = Entry<P>;

/// Orders the generators draw from.
const ORDERS: [u32; 9] = [0, 1, 2, 3, 5, 6, 7, 9, 12];

/// Indices at and around node boundaries (64, 4096, 262144 indices per
/// node level) and at the top of the index space.
const BOUNDARIES: [u64; 20] = [
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

include!("../../xarray/tests/common/model_core.rs");

// ---------------------------------------------------------------------------
// Operations and generators.

/// How to make the entry to store.
#[derive(Clone, Debug)]
enum ESpec {
    /// A fresh `Arc::new(v)`.
    Item(u64),
    /// `Entry::Value(v)`.
    Value(u64),
    /// A clone (same identity) of the k-th item in the model, or a fresh one.
    Reuse(usize),
}

/// What `compare_exchange` expects.
#[derive(Clone, Debug)]
enum KeySpec {
    /// The key of what the model holds at the index (so it should succeed).
    Current,
    /// `None`: empty or reserved.
    Null,
    Value(u64),
    /// An item that was never stored.
    Fresh(u64),
    /// A new `Arc` with the same content as the item there: a different
    /// identity, so it must not match.
    SameContent,
}

type Rng = (Bound<u64>, Bound<u64>);

#[derive(Clone, Debug)]
enum Op {
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
    Iter(Rng),
    IterMarked(Rng, u8),
    IterRef(Rng),
    Count(Rng),
}

/// Applies `op` to the array and the model and compares the results.
fn apply(xa: &Xa, m: &mut Model, op: &Op) {
    match op {
        &Op::Store {
            index,
            order,
            ref e,
        } => {
            let e = m.materialize(e);
            let got = xa.store_order(index, order, e.clone());
            let want = m.store_order(index, order, e);
            assert_res(&got, &want, format_args!("{op:?}"));
        }
        &Op::Insert {
            index,
            order,
            ref e,
        } => {
            let e = m.materialize(e);
            let got = xa.insert_order(index, order, e.clone());
            let want = m.insert_order(index, order, e);
            assert_eq!(got, want, "{op:?}");
        }
        &Op::Erase(i) => {
            let got = xa.erase(i);
            assert_same(&got, &m.erase(i), format_args!("{op:?}"));
        }
        &Op::CmpXchg {
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
        &Op::Reserve(i) => assert_eq!(xa.reserve(i), m.reserve(i), "{op:?}"),
        &Op::Release(i) => {
            xa.release(i);
            m.release(i);
        }
        &Op::SetMark(i, k) => {
            let got = xa.set_mark(i, mark(k));
            assert_eq!(got, m.set_mark(i, usize::from(k), true), "{op:?}");
        }
        &Op::ClearMark(i, k) => {
            let got = xa.clear_mark(i, mark(k));
            assert_eq!(got, m.set_mark(i, usize::from(k), false), "{op:?}");
        }
        &Op::Split { index, new_order } => {
            let got = xa.split(index, new_order);
            let want = m.split(index, new_order);
            match (&got, &want) {
                (Err(Error::SplitTooLarge { .. }), Err(Error::SplitTooLarge { .. })) => {}
                _ => assert_eq!(got, want, "{op:?}"),
            }
        }
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
                    let ok = got.len() == want.len()
                        && got
                            .iter()
                            .zip(&want)
                            .all(|((i, a), (j, b))| i == j && ref_same(a, b));
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
    }
}

/// Where the cursor goes before an operation.
#[derive(Clone, Debug)]
enum Move {
    Stay,
    Fwd(u64),
    Back(u64),
    To(u64),
}

/// `max` of a cursor search, relative to the cursor's index.
#[derive(Clone, Copy, Debug)]
enum Span {
    Delta(u64),
    Abs(u64),
    Max,
}

impl Span {
    fn resolve(self, from: u64) -> u64 {
        match self {
            Span::Delta(d) => from.saturating_add(d),
            Span::Abs(a) => a,
            Span::Max => u64::MAX,
        }
    }
}

#[derive(Clone, Debug)]
enum COp {
    SetOrder(u32),
    /// `align`: move the cursor down to a multiple of its order first.
    Store {
        e: Option<ESpec>,
        align: bool,
    },
    Insert {
        e: ESpec,
        align: bool,
    },
    CmpXchg {
        key: KeySpec,
        e: ESpec,
        align: bool,
    },
    Erase,
    SetMark(u8),
    ClearMark(u8),
    ClearMarks,
    GetMark(u8),
    Load,
    GetOrder,
    Key,
    Next,
    Find(Span),
    FindMarked(Span, u8),
    FindEmpty(Span),
    Split(u32),
}

/// The model of a cursor's position.
#[derive(Debug, Default)]
struct MCursor {
    index: u64,
    order: u32,
    /// After a find: where the next find starts (`Some(None)`: nothing left).
    after: Option<Option<u64>>,
}

impl MCursor {
    fn find(&mut self, m: &Model, max: u64, f: Filt) -> Option<(u64, E)> {
        let start = match self.after {
            Some(Some(n)) => n,
            Some(None) => return None,
            None => self.index,
        };
        let (i, b, o, e) = m.find_filter(start, max, f)?;
        self.index = i;
        self.after = Some(next_of(b, o));
        Some((i, e))
    }
}

/// Runs one cursor operation, handling `NeedNodes` by unlocking, reserving
/// and relocking. Checks that a `NeedNodes` failure changed nothing.
fn retry<'a, R>(
    xa: &'a Xa,
    cur: &mut Cursor<'a, P>,
    g: &mut Option<XaGuard<'a, P>>,
    m: &Model,
    relocks: &mut usize,
    mut f: impl FnMut(&mut Cursor<'a, P>, &mut XaGuard<'a, P>) -> xarray::Result<R>,
) -> xarray::Result<R> {
    for _ in 0..8 {
        match f(cur, g.as_mut().expect("locked")) {
            Err(Error::NeedNodes { nodes }) => {
                assert_eq!(g.as_ref().unwrap().len(), m.len(), "NeedNodes changed len");
                probe(xa, m, cur.index());
                if m.map.len() <= 512 {
                    check_contents(xa, m);
                }
                *g = None;
                cur.reserve_nodes(nodes).expect("reserve_nodes");
                assert!(cur.pooled_nodes() >= nodes, "pool below what was reserved");
                *relocks += 1;
                *g = Some(xa.lock());
            }
            r => return r,
        }
    }
    panic!("NeedNodes loop did not converge at index {}", cur.index());
}

/// Applies one cursor step to the array (through `cur` under `g`) and to the
/// model, comparing results.
#[allow(clippy::too_many_arguments)]
fn cursor_step<'a>(
    xa: &'a Xa,
    cur: &mut Cursor<'a, P>,
    g: &mut Option<XaGuard<'a, P>>,
    m: &mut Model,
    mc: &mut MCursor,
    relocks: &mut usize,
    mv: &Move,
    op: &COp,
) {
    let set = |cur: &mut Cursor<'a, P>, mc: &mut MCursor, i: u64| {
        cur.set_index(i);
        mc.index = i;
        mc.after = None;
    };
    match *mv {
        Move::Stay => {}
        Move::Fwd(d) => set(cur, mc, mc.index.saturating_add(d)),
        Move::Back(d) => set(cur, mc, mc.index.saturating_sub(d)),
        Move::To(i) => set(cur, mc, i),
    }
    let maybe_align = |cur: &mut Cursor<'a, P>, mc: &mut MCursor, align: bool| {
        let a = align_down(mc.index, mc.order);
        if align && a != mc.index {
            set(cur, mc, a);
        }
    };
    assert_eq!(cur.index(), mc.index, "cursor index");
    let what = format!("{mv:?} {op:?} at {} order {}", mc.index, mc.order);
    match *op {
        COp::SetOrder(o) => {
            let got = cur.set_order(o);
            if o > 63 {
                assert_eq!(got, Err(Error::OrderTooLarge { order: o }), "{what}");
            } else {
                assert_eq!(got, Ok(()), "{what}");
                mc.order = o;
            }
            assert_eq!(cur.order(), mc.order, "{what}");
        }
        COp::Store { ref e, align } => {
            maybe_align(cur, mc, align);
            match e {
                None => {
                    let got = retry(xa, cur, g, m, relocks, |c, g| c.store(g, None));
                    assert_res(&got, &Ok(m.erase(mc.index)), &what);
                }
                Some(spec) => {
                    let e = m.materialize(spec);
                    let got = retry(xa, cur, g, m, relocks, |c, g| c.store(g, Some(e.clone())));
                    let want = m.store_order(mc.index, mc.order, e);
                    assert_res(&got, &want, &what);
                }
            }
        }
        COp::Insert { ref e, align } => {
            maybe_align(cur, mc, align);
            let e = m.materialize(e);
            let got = retry(xa, cur, g, m, relocks, |c, g| c.insert(g, e.clone()));
            assert_eq!(got, m.insert_order(mc.index, mc.order, e), "{what}");
        }
        COp::CmpXchg {
            ref key,
            ref e,
            align,
        } => {
            maybe_align(cur, mc, align);
            let (key, _keep) = m.key_for(key, mc.index);
            let e = m.materialize(e);
            let got = retry(xa, cur, g, m, relocks, |c, g| {
                c.compare_exchange(g, key, e.clone())
            });
            let want = m.cmpxchg(mc.index, mc.order, key, Some(e.clone()));
            match (got, want) {
                (Ok(Ok(a)), Ok(Ok(b))) => assert_same(&a, &b, &what),
                (Ok(Err((current, back))), Ok(Err(c))) => {
                    assert_same(&current, &c, format_args!("{what}: current"));
                    assert_same(&Some(back), &Some(e), format_args!("{what}: given back"));
                }
                (Err(a), Err(b)) => assert_eq!(a, b, "{what}"),
                (got, want) => panic!("{what}: got {got:?}, expected {want:?}"),
            }
        }
        COp::Erase => {
            let got = cur.erase(g.as_mut().unwrap());
            assert_res(&got, &Ok(m.erase(mc.index)), &what);
        }
        COp::SetMark(k) => {
            let got = cur.set_mark(g.as_mut().unwrap(), mark(k));
            assert_eq!(
                got,
                Ok(m.set_mark(mc.index, usize::from(k), true)),
                "{what}"
            );
        }
        COp::ClearMark(k) => {
            let got = cur.clear_mark(g.as_mut().unwrap(), mark(k));
            assert_eq!(
                got,
                Ok(m.set_mark(mc.index, usize::from(k), false)),
                "{what}"
            );
        }
        COp::ClearMarks => {
            let got = cur.clear_marks(g.as_mut().unwrap());
            let mut present = false;
            for k in 0..NR_MARKS {
                present = m.set_mark(mc.index, k, false);
            }
            assert_eq!(got, Ok(present), "{what}");
        }
        COp::GetMark(k) => {
            let got = cur.get_mark(g.as_ref().unwrap(), mark(k));
            assert_eq!(got, Ok(m.get_mark(mc.index, usize::from(k))), "{what}");
        }
        COp::Load => {
            let guard = g.as_ref().unwrap();
            let want = m.load(mc.index);
            let got = cur.load(guard).unwrap();
            assert!(
                ref_same_opt(&got, &want),
                "{what}: got {got:?}, expected {want:?}"
            );
            let owned = cur.load_owned(guard).unwrap();
            assert_same(&owned, &want, format_args!("{what}: load_owned"));
        }
        COp::GetOrder => {
            let got = cur.get_order(g.as_ref().unwrap());
            assert_eq!(got, Ok(m.get_order(mc.index)), "{what}");
        }
        COp::Key => {
            let got = cur.key(g.as_ref().unwrap());
            assert_eq!(got, Ok(m.key(mc.index)), "{what}");
        }
        COp::Next => {
            let got = cur.next(g.as_ref().unwrap()).unwrap();
            let want = match mc.index.checked_add(1) {
                Some(i) => {
                    mc.index = i;
                    mc.after = None;
                    m.load(i)
                }
                None => None,
            };
            assert!(
                ref_same_opt(&got, &want),
                "{what}: got {got:?}, expected {want:?}"
            );
            assert_eq!(cur.index(), mc.index, "{what}: index after next");
        }
        COp::Find(span) => {
            let max = span.resolve(mc.index);
            let got = cur.find(g.as_ref().unwrap(), max).unwrap();
            let want = mc.find(m, max, Filt::Present);
            let got: Vec<_> = got.into_iter().collect();
            let want: Vec<_> = want.into_iter().collect();
            let ok = got.len() == want.len()
                && got
                    .iter()
                    .zip(&want)
                    .all(|((i, a), (j, b))| i == j && ref_same(a, b));
            assert!(ok, "{what} (max {max}): got {got:?}, expected {want:?}");
            assert_eq!(cur.index(), mc.index, "{what}: index after find");
        }
        COp::FindMarked(span, k) => {
            let max = span.resolve(mc.index);
            let got = cur.find_marked(g.as_ref().unwrap(), max, mark(k)).unwrap();
            let want = mc.find(m, max, Filt::Marked(usize::from(k)));
            let got: Vec<_> = got.into_iter().collect();
            let want: Vec<_> = want.into_iter().collect();
            let ok = got.len() == want.len()
                && got
                    .iter()
                    .zip(&want)
                    .all(|((i, a), (j, b))| i == j && ref_same(a, b));
            assert!(ok, "{what} (max {max}): got {got:?}, expected {want:?}");
            assert_eq!(cur.index(), mc.index, "{what}: index after find_marked");
        }
        COp::FindEmpty(span) => {
            let max = span.resolve(mc.index);
            let got = cur.find_empty(g.as_ref().unwrap(), max);
            let want = m.find_empty(mc.index, max);
            if let Some(i) = want {
                mc.index = i;
                mc.after = None;
            }
            assert_eq!(got, Ok(want), "{what} (max {max})");
            assert_eq!(cur.index(), mc.index, "{what}: index after find_empty");
        }
        COp::Split(new_order) => {
            let got = retry(xa, cur, g, m, relocks, |c, g| c.split(g, new_order));
            let want = m.split(mc.index, new_order);
            match (&got, &want) {
                (Err(Error::SplitTooLarge { .. }), Err(Error::SplitTooLarge { .. })) => {}
                _ => assert_eq!(got, want, "{what}"),
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Decoding fuzz input into steps.

/// At most this many steps per input: the whole-array checks after each
/// step are O(entries), so inputs stay fast to run.
const MAX_STEPS: usize = 96;
/// At most this many cursor operations in one batch (one lock hold).
const MAX_BATCH: usize = 48;

/// One step of a run.
#[derive(Debug)]
enum Step {
    /// One call of the simple API.
    Plain(Op),
    /// The lock taken once, a cursor at `start`, and these moves and ops.
    Batch { start: u64, steps: Vec<(Move, COp)> },
}

/// Which family of indices and orders a plain operation draws from.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Region {
    /// Order 0 around small indices: collisions.
    Dense,
    /// Any order anywhere.
    Any,
    /// The top of the index space, huge orders.
    Top,
}

/// What a plain step does.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum PlainKind {
    Store,
    Store2,
    Insert,
    Erase,
    CmpXchg,
    Reserve,
    Release,
    SetMark,
    ClearMark,
    Split,
    Probe,
    Find,
    FindAfter,
    FindMarked,
    FindEmpty,
    Iter,
    IterMarked,
    IterRef,
    Count,
    BadStore,
    BadInsert,
    BadValue,
}

/// What a cursor step does.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum CursorKind {
    SetOrder,
    Store,
    Store2,
    Erase,
    Insert,
    CmpXchg,
    SetMark,
    ClearMark,
    ClearMarks,
    GetMark,
    Load,
    GetOrder,
    Key,
    Next,
    Find,
    FindMarked,
    FindEmpty,
    Split,
}

fn any_index(u: &mut Unstructured<'_>) -> AResult<u64> {
    Ok(match u.int_in_range(0u8..=10)? {
        0..=3 => u.int_in_range(0..=63)?,
        4..=7 => u.int_in_range(0..=4095)?,
        8 | 9 => *u.choose(&BOUNDARIES)?,
        _ => u64::MAX - u.int_in_range(0..=199)?,
    })
}

fn dense_index(u: &mut Unstructured<'_>) -> AResult<u64> {
    if u.ratio(4u8, 5)? {
        u.int_in_range(0..=149)
    } else {
        any_index(u)
    }
}

fn top_index(u: &mut Unstructured<'_>) -> AResult<u64> {
    Ok(match u.int_in_range(0u8..=4)? {
        0 | 1 => *u.choose(&[0u64, 1 << 60, 1 << 62, 3 << 62, 1 << 63, 15 << 60])?,
        2 | 3 => u64::MAX - u.int_in_range(0..=299)?,
        _ => any_index(u)?,
    })
}

fn index_in(u: &mut Unstructured<'_>, r: Region) -> AResult<u64> {
    match r {
        Region::Dense => dense_index(u),
        Region::Any => any_index(u),
        Region::Top => top_index(u),
    }
}

fn order_in(u: &mut Unstructured<'_>, r: Region) -> AResult<u32> {
    match r {
        Region::Dense => Ok(*u.choose(&[0u32, 0, 0, 1, 2, 3, 6, 7])?),
        Region::Any => Ok(*u.choose(&ORDERS)?),
        Region::Top => {
            if u.ratio(2u8, 3)? {
                Ok(*u.choose(&[58u32, 60, 61, 62, 63])?)
            } else {
                Ok(*u.choose(&ORDERS)?)
            }
        }
    }
}

fn value(u: &mut Unstructured<'_>) -> AResult<u64> {
    u.int_in_range(0..=999)
}

fn espec(u: &mut Unstructured<'_>) -> AResult<ESpec> {
    Ok(match u.int_in_range(0u8..=12)? {
        0..=5 => ESpec::Item(value(u)?),
        6..=9 => ESpec::Value(value(u)?),
        10 | 11 => ESpec::Reuse(u.int_in_range(0..=7)?),
        _ => ESpec::Value(*u.choose(&[MAX_VALUE, MAX_VALUE - 1, 1 << 61])?),
    })
}

fn keyspec(u: &mut Unstructured<'_>) -> AResult<KeySpec> {
    Ok(match u.int_in_range(0u8..=8)? {
        0..=3 => KeySpec::Current,
        4 | 5 => KeySpec::Null,
        6 => KeySpec::Value(value(u)?),
        7 => KeySpec::Fresh(value(u)?),
        _ => KeySpec::SameContent,
    })
}

fn mark_no(u: &mut Unstructured<'_>) -> AResult<u8> {
    u.int_in_range(0..=NR_MARKS as u8 - 1)
}

fn max_from(u: &mut Unstructured<'_>, start: u64) -> AResult<u64> {
    let sel = u.int_in_range(0u8..=3)?;
    let v = any_index(u)?;
    Ok(max_for(start, (sel, v)))
}

fn bound(u: &mut Unstructured<'_>) -> AResult<Bound<u64>> {
    Ok(match u.int_in_range(0u8..=5)? {
        0 => Bound::Unbounded,
        1..=3 => Bound::Included(any_index(u)?),
        _ => Bound::Excluded(any_index(u)?),
    })
}

fn range(u: &mut Unstructured<'_>) -> AResult<Rng> {
    if u.ratio(3u8, 5)? {
        let s = any_index(u)?;
        let e = s.saturating_add(u.int_in_range(0..=299)?);
        let end = if u.arbitrary()? {
            Bound::Included(e)
        } else {
            Bound::Excluded(e)
        };
        Ok((Bound::Included(s), end))
    } else {
        Ok((bound(u)?, bound(u)?))
    }
}

/// `max` for a search from `start`: near it, anywhere, or the end.
fn max_for(start: u64, sel: (u8, u64)) -> u64 {
    match sel.0 % 4 {
        0 | 1 => start.saturating_add(sel.1 % 300),
        2 => sel.1,
        _ => u64::MAX,
    }
}

fn plain_op(u: &mut Unstructured<'_>) -> AResult<Op> {
    let region: Region = u.arbitrary()?;
    let kind: PlainKind = u.arbitrary()?;
    let index = index_in(u, region)?;
    Ok(match kind {
        PlainKind::Store | PlainKind::Store2 | PlainKind::Insert => {
            let order = order_in(u, region)?;
            let aligned = u.ratio(9u8, 10)?;
            let index = if aligned {
                align_down(index, order)
            } else {
                index
            };
            let e = espec(u)?;
            if matches!(kind, PlainKind::Insert) {
                Op::Insert { index, order, e }
            } else {
                Op::Store { index, order, e }
            }
        }
        PlainKind::Erase => Op::Erase(index),
        PlainKind::CmpXchg => Op::CmpXchg {
            index,
            key: keyspec(u)?,
            new: if u.ratio(4u8, 5)? {
                Some(espec(u)?)
            } else {
                None
            },
        },
        PlainKind::Reserve => Op::Reserve(index),
        PlainKind::Release => Op::Release(index),
        PlainKind::SetMark => Op::SetMark(index, mark_no(u)?),
        PlainKind::ClearMark => Op::ClearMark(index, mark_no(u)?),
        PlainKind::Split => Op::Split {
            index,
            new_order: if matches!(region, Region::Top) {
                *u.choose(&[12u32, 54, 57, 59, 60, 62])?
            } else {
                *u.choose(&ORDERS)?
            },
        },
        PlainKind::Probe => Op::Probe(index),
        PlainKind::Find => Op::Find {
            start: index,
            max: max_from(u, index)?,
        },
        PlainKind::FindAfter => Op::FindAfter {
            index,
            max: max_from(u, index)?,
        },
        PlainKind::FindMarked => Op::FindMarked {
            start: index,
            max: max_from(u, index)?,
            mark: mark_no(u)?,
        },
        PlainKind::FindEmpty => Op::FindEmpty {
            start: index,
            max: max_from(u, index)?,
        },
        PlainKind::Iter => Op::Iter(range(u)?),
        PlainKind::IterMarked => Op::IterMarked(range(u)?, mark_no(u)?),
        PlainKind::IterRef => Op::IterRef(range(u)?),
        PlainKind::Count => Op::Count(range(u)?),
        PlainKind::BadStore => Op::Store {
            index,
            order: *u.choose(&[1u32, 5, 63, 64, 65, 100])?,
            e: espec(u)?,
        },
        PlainKind::BadInsert => Op::Insert {
            index,
            order: *u.choose(&[3u32, 63, 64])?,
            e: espec(u)?,
        },
        PlainKind::BadValue => Op::Store {
            index,
            order: 0,
            e: ESpec::Value(*u.choose(&[MAX_VALUE + 1, u64::MAX])?),
        },
    })
}

fn cursor_move(u: &mut Unstructured<'_>) -> AResult<Move> {
    Ok(match u.int_in_range(0u8..=11)? {
        0..=3 => Move::Stay,
        4..=9 => Move::Fwd(u.int_in_range(0..=79)?),
        10 => Move::Back(u.int_in_range(0..=199)?),
        _ => Move::To(any_index(u)?),
    })
}

fn span(u: &mut Unstructured<'_>) -> AResult<Span> {
    Ok(match u.int_in_range(0u8..=4)? {
        0..=2 => Span::Delta(u.int_in_range(0..=299)?),
        3 => Span::Abs(any_index(u)?),
        _ => Span::Max,
    })
}

fn cursor_op(u: &mut Unstructured<'_>) -> AResult<COp> {
    let kind: CursorKind = u.arbitrary()?;
    let align = u.ratio(9u8, 10)?;
    Ok(match kind {
        CursorKind::SetOrder => {
            COp::SetOrder(*u.choose(&[0u32, 0, 0, 1, 2, 3, 5, 6, 7, 9, 12, 64])?)
        }
        CursorKind::Store | CursorKind::Store2 => COp::Store {
            e: if u.ratio(17u8, 20)? {
                Some(espec(u)?)
            } else {
                None
            },
            align,
        },
        CursorKind::Erase => COp::Erase,
        CursorKind::Insert => COp::Insert {
            e: espec(u)?,
            align,
        },
        CursorKind::CmpXchg => COp::CmpXchg {
            key: keyspec(u)?,
            e: espec(u)?,
            align,
        },
        CursorKind::SetMark => COp::SetMark(mark_no(u)?),
        CursorKind::ClearMark => COp::ClearMark(mark_no(u)?),
        CursorKind::ClearMarks => COp::ClearMarks,
        CursorKind::GetMark => COp::GetMark(mark_no(u)?),
        CursorKind::Load => COp::Load,
        CursorKind::GetOrder => COp::GetOrder,
        CursorKind::Key => COp::Key,
        CursorKind::Next => COp::Next,
        CursorKind::Find => COp::Find(span(u)?),
        CursorKind::FindMarked => COp::FindMarked(span(u)?, mark_no(u)?),
        CursorKind::FindEmpty => COp::FindEmpty(span(u)?),
        CursorKind::Split => COp::Split(*u.choose(&ORDERS)?),
    })
}

fn decode(data: &[u8]) -> Vec<Step> {
    let mut u = Unstructured::new(data);
    let mut steps = Vec::new();
    while !u.is_empty() && steps.len() < MAX_STEPS {
        let step = (|| -> AResult<Step> {
            if u.ratio(1u8, 8)? {
                let start = any_index(&mut u)?;
                let n = u.int_in_range(1..=MAX_BATCH)?;
                let mut ops = Vec::with_capacity(n);
                for _ in 0..n {
                    if u.is_empty() {
                        break;
                    }
                    ops.push((cursor_move(&mut u)?, cursor_op(&mut u)?));
                }
                Ok(Step::Batch { start, steps: ops })
            } else {
                Ok(Step::Plain(plain_op(&mut u)?))
            }
        })();
        match step {
            Ok(s) => steps.push(s),
            Err(_) => break,
        }
    }
    steps
}

/// Runs one cursor batch on `xa` and `m`: the lock is taken once for all of
/// `steps` (dropped and retaken only on `NeedNodes`).
fn run_batch(xa: &Xa, m: &mut Model, start: u64, steps: &[(Move, COp)]) {
    let mut cur = Cursor::new(xa, start);
    let mut mc = MCursor {
        index: start,
        ..MCursor::default()
    };
    let mut relocks = 0;
    let mut g = Some(xa.lock());
    for (mv, op) in steps {
        cursor_step(xa, &mut cur, &mut g, m, &mut mc, &mut relocks, mv, op);
        assert_eq!(
            g.as_ref().unwrap().len(),
            m.len(),
            "guard len after {mv:?} {op:?}"
        );
        assert_eq!(
            g.as_ref().unwrap().is_empty(),
            m.is_empty(),
            "guard is_empty after {mv:?} {op:?}"
        );
        if m.map.len() <= 512 {
            // Lockless reads work while the lock is held.
            check_contents(xa, m);
            check_nodes(xa, m);
        }
    }
}

/// Decodes `data` into operations on an [`XArray`] and checks each against
/// the `BTreeMap` model (see the module docs). Panics on the first mismatch,
/// naming the operation and both results.
///
/// ```
/// foliocache_fuzz::xarray_ops(b"some bytes: any input is a valid program");
/// ```
pub fn xarray_ops(data: &[u8]) {
    let steps = decode(data);
    if std::env::var_os("FUZZ_DEBUG").is_some() {
        eprintln!("{steps:#?}");
    }
    let xa = Xa::new();
    let mut m = Model::default();
    for step in &steps {
        match step {
            Step::Plain(op) => apply(&xa, &mut m, op),
            Step::Batch { start, steps } => run_batch(&xa, &mut m, *start, steps),
        }
        if m.map.len() <= 512 {
            check_full(&xa, &m);
        }
    }
    check_full(&xa, &m);
    teardown(&xa, &mut m);
    drop(xa);
    assert_released(&m.created.borrow());
}
