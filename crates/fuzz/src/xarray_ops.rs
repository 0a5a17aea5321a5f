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
//! The model and its checks are `test_support::model` (a `BTreeMap` from an
//! entry's first index to its order, value and marks; the xarray's proptest
//! model, `crates/xarray/tests/it/model.rs`, states the semantics it
//! encodes). After every step the
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
use std::ops::Bound;

use test_support::model::*;
use xarray::{MAX_VALUE, NR_MARKS};

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

fn range(u: &mut Unstructured<'_>) -> AResult<IndexRange> {
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

/// Decodes `data` into operations on an [`XArray`](xarray::XArray) and checks each against
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
            Step::Batch { start, steps } => cursor_batch(&xa, &mut m, *start, steps),
        }
        if m.map.len() <= 512 {
            check_full(&xa, &m);
        }
    }
    finish_run(xa, &mut m);
}
