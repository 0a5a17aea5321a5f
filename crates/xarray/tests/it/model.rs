//! Model-based property tests for `xarray`.
//!
//! Every test drives an [`XArray`] and a reference model (a `BTreeMap` from
//! an entry's first index to its order, value and marks) with the same random
//! operations and compares every result, then compares the whole contents.
//! The model encodes the documented semantics (crate docs, `XArray` and
//! `Cursor` method docs, and the kernel XArray's rules, as `xas_store` and
//! `xa_insert` apply them):
//!
//! - `store_order` into part of a larger-or-equal entry replaces that entry
//!   whole, keeping its order and marks; otherwise it removes every entry
//!   (and reservation) overlapping its range and takes the union of their
//!   marks. It returns what `load(index)` gave before.
//! - `insert*` fails with `Occupied { first index in use }` and changes
//!   nothing; `compare_exchange` works by identity (`EntryKey`), `None`
//!   matching an empty or reserved index.
//! - A reservation loads `None`, is skipped by searches, is occupied for
//!   `insert` and `find_empty`, and keeps the array non-empty.
//! - Searches report an entry containing `start` at `start`, others at their
//!   first index, each multi-order entry once, in strictly increasing order.
//! - After erasing everything the array is empty, holds no node, and
//!   `memory_bytes` is back to the size of an empty array.
//!
//! Beyond results, every check also compares the tree's shape with the
//! model's (`node_count` is exactly the nodes needed under a root that grows
//! with stores and shrinks on erase, as `xas_expand` and `xas_shrink` do;
//! `memory_bytes` follows),
//! checks that each item keeps a reference per slot holding it, and at the
//! end of a run that every item made is released once the array is gone.
//!
//! Generators are bounded (indices below 4096, node boundaries, the top of
//! the index space; a small set of orders; values below 1000) so failures
//! shrink to short, readable op sequences. Failures are not persisted to a
//! regression file: minimal cases found so far are the hand-written tests at
//! the end of this file. `PROPTEST_CASES` overrides the default case count.

use std::ops::Bound;
use std::sync::Arc;

use foliocache_xarray::{Cursor, Entry, Error, Mark, XArray, MAX_VALUE, NR_MARKS};
use proptest::prelude::*;
use test_support::model::*;

use crate::common::cfg;

/// Runs `ops`, checking after each, then tears down.
fn run(ops: &[Op]) {
    let xa = Xa::new();
    let mut m = Model::default();
    for op in ops {
        apply(&xa, &mut m, op);
        if m.map.len() <= 512 {
            check_full(&xa, &m);
        }
    }
    finish_run(xa, &mut m);
}

fn any_index() -> BoxedStrategy<u64> {
    prop_oneof![
        4 => 0u64..64,
        4 => 0u64..4096,
        2 => prop::sample::select(BOUNDARIES.to_vec()),
        1 => (0u64..200).prop_map(|d| u64::MAX - d),
    ]
    .boxed()
}

/// Indices crowded enough for order-0 ops to collide.
fn dense_index() -> BoxedStrategy<u64> {
    prop_oneof![4 => 0u64..150, 1 => any_index()].boxed()
}

fn order() -> BoxedStrategy<u32> {
    prop::sample::select(ORDERS.to_vec()).boxed()
}

fn value() -> BoxedStrategy<u64> {
    (0u64..1000).boxed()
}

fn espec() -> BoxedStrategy<ESpec> {
    prop_oneof![
        6 => value().prop_map(ESpec::Item),
        4 => value().prop_map(ESpec::Value),
        2 => (0usize..8).prop_map(ESpec::Reuse),
        // The largest value entries (62 bits).
        1 => prop::sample::select(vec![MAX_VALUE, MAX_VALUE - 1, 1 << 61]).prop_map(ESpec::Value),
    ]
    .boxed()
}

fn keyspec() -> BoxedStrategy<KeySpec> {
    prop_oneof![
        4 => Just(KeySpec::Current),
        2 => Just(KeySpec::Null),
        1 => value().prop_map(KeySpec::Value),
        1 => value().prop_map(KeySpec::Fresh),
        1 => Just(KeySpec::SameContent),
    ]
    .boxed()
}

fn mark_no() -> BoxedStrategy<u8> {
    (0u8..NR_MARKS as u8).boxed()
}

/// `max` for a search from `start`: near it, anywhere, or the end.
fn max_for(start: u64, sel: (u8, u64)) -> u64 {
    match sel.0 % 4 {
        0 | 1 => start.saturating_add(sel.1 % 300),
        2 => sel.1,
        _ => u64::MAX,
    }
}

fn max_sel() -> BoxedStrategy<(u8, u64)> {
    (0u8..4, any_index()).boxed()
}

fn range() -> BoxedStrategy<IndexRange> {
    let bound = || {
        prop_oneof![
            1 => Just(Bound::Unbounded),
            3 => any_index().prop_map(Bound::Included),
            2 => any_index().prop_map(Bound::Excluded),
        ]
    };
    prop_oneof![
        // Mostly valid: start, then an end near it.
        3 => (any_index(), 0u64..300, any::<bool>()).prop_map(|(s, d, incl)| {
            let e = s.saturating_add(d);
            (
                Bound::Included(s),
                if incl { Bound::Included(e) } else { Bound::Excluded(e) },
            )
        }),
        2 => (bound(), bound()),
    ]
    .boxed()
}

/// Stores of any order; `align` false keeps the raw index (misaligned ones fail).
fn store_op(index: BoxedStrategy<u64>, order: BoxedStrategy<u32>) -> BoxedStrategy<Op> {
    (index, order, espec(), prop::bool::weighted(0.9))
        .prop_map(|(i, o, e, align)| Op::Store {
            index: if align { align_down(i, o) } else { i },
            order: o,
            e,
        })
        .boxed()
}

fn insert_op(index: BoxedStrategy<u64>, order: BoxedStrategy<u32>) -> BoxedStrategy<Op> {
    (index, order, espec(), prop::bool::weighted(0.9))
        .prop_map(|(i, o, e, align)| Op::Insert {
            index: if align { align_down(i, o) } else { i },
            order: o,
            e,
        })
        .boxed()
}

fn cmpxchg_op(index: BoxedStrategy<u64>) -> BoxedStrategy<Op> {
    (index, keyspec(), prop::option::weighted(0.8, espec()))
        .prop_map(|(index, key, new)| Op::CmpXchg { index, key, new })
        .boxed()
}

fn find_op() -> BoxedStrategy<Op> {
    prop_oneof![
        (any_index(), max_sel()).prop_map(|(s, m)| Op::Find {
            start: s,
            max: max_for(s, m)
        }),
        (any_index(), max_sel()).prop_map(|(s, m)| Op::FindAfter {
            index: s,
            max: max_for(s, m)
        }),
        (any_index(), max_sel()).prop_map(|(s, m)| Op::FindEmpty {
            start: s,
            max: max_for(s, m)
        }),
    ]
    .boxed()
}

fn find_marked_op() -> BoxedStrategy<Op> {
    (any_index(), max_sel(), mark_no())
        .prop_map(|(s, m, k)| Op::FindMarked {
            start: s,
            max: max_for(s, m),
            mark: k,
        })
        .boxed()
}

fn iter_op() -> BoxedStrategy<Op> {
    prop_oneof![
        range().prop_map(Op::Iter),
        (range(), mark_no()).prop_map(|(r, k)| Op::IterMarked(r, k)),
        range().prop_map(Op::IterRef),
        range().prop_map(Op::Count),
    ]
    .boxed()
}

fn plain_ops() -> BoxedStrategy<Vec<Op>> {
    let op = prop_oneof![
        6 => store_op(dense_index(), Just(0).boxed()),
        3 => insert_op(dense_index(), Just(0).boxed()),
        3 => dense_index().prop_map(Op::Erase),
        3 => cmpxchg_op(dense_index()),
        3 => dense_index().prop_map(Op::Probe),
        // Bad orders: misaligned (mostly) and too large; the array must not change.
        1 => (any_index(), prop::sample::select(vec![1u32, 5, 63, 64, 65, 100]), espec())
            .prop_map(|(index, order, e)| Op::Store { index, order, e }),
        1 => (any_index(), prop::sample::select(vec![3u32, 63, 64]), espec())
            .prop_map(|(index, order, e)| Op::Insert { index, order, e }),
        // A value that does not fit: ValueTooLarge, nothing changes.
        1 => (dense_index(), prop::sample::select(vec![MAX_VALUE + 1, u64::MAX]))
            .prop_map(|(index, v)| Op::Store { index, order: 0, e: ESpec::Value(v) }),
        1 => find_op(),
        1 => iter_op(),
    ];
    prop::collection::vec(op, 0..60).boxed()
}

fn multi_order_ops() -> BoxedStrategy<Vec<Op>> {
    let op = prop_oneof![
        8 => store_op(any_index(), order()),
        4 => insert_op(any_index(), order()),
        3 => any_index().prop_map(Op::Erase),
        3 => cmpxchg_op(any_index()),
        2 => (any_index(), mark_no()).prop_map(|(i, k)| Op::SetMark(i, k)),
        3 => any_index().prop_map(Op::Probe),
        1 => find_op(),
        1 => iter_op(),
    ];
    prop::collection::vec(op, 0..60).boxed()
}

fn mark_ops() -> BoxedStrategy<Vec<Op>> {
    let op = prop_oneof![
        5 => store_op(any_index(), order()),
        2 => insert_op(any_index(), order()),
        6 => (any_index(), mark_no()).prop_map(|(i, k)| Op::SetMark(i, k)),
        3 => (any_index(), mark_no()).prop_map(|(i, k)| Op::ClearMark(i, k)),
        2 => any_index().prop_map(Op::Erase),
        1 => any_index().prop_map(Op::Reserve),
        1 => cmpxchg_op(any_index()),
        3 => find_marked_op(),
        2 => (range(), mark_no()).prop_map(|(r, k)| Op::IterMarked(r, k)),
        2 => any_index().prop_map(Op::Probe),
    ];
    prop::collection::vec(op, 0..60).boxed()
}

fn split_ops() -> BoxedStrategy<Vec<Op>> {
    let big = prop::sample::select(vec![1u32, 3, 6, 7, 9, 12]).boxed();
    let op = prop_oneof![
        5 => store_op(any_index(), big),
        4 => (any_index(), order()).prop_map(|(index, new_order)| Op::Split { index, new_order }),
        3 => (any_index(), mark_no()).prop_map(|(i, k)| Op::SetMark(i, k)),
        1 => (any_index(), mark_no()).prop_map(|(i, k)| Op::ClearMark(i, k)),
        2 => store_op(any_index(), order()),
        1 => any_index().prop_map(Op::Erase),
        1 => cmpxchg_op(any_index()),
        2 => any_index().prop_map(Op::Probe),
        1 => find_marked_op(),
        1 => iter_op(),
    ];
    prop::collection::vec(op, 0..60).boxed()
}

fn reservation_ops() -> BoxedStrategy<Vec<Op>> {
    let op = prop_oneof![
        5 => dense_index().prop_map(Op::Reserve),
        3 => dense_index().prop_map(Op::Release),
        3 => insert_op(dense_index(), prop::sample::select(vec![0u32, 0, 1, 3, 6]).boxed()),
        3 => store_op(dense_index(), prop::sample::select(vec![0u32, 0, 2, 6, 7]).boxed()),
        3 => dense_index().prop_map(Op::Erase),
        2 => (dense_index(), prop::option::weighted(0.8, espec()))
            .prop_map(|(index, new)| Op::CmpXchg { index, key: KeySpec::Null, new }),
        1 => cmpxchg_op(dense_index()),
        2 => (dense_index(), mark_no()).prop_map(|(i, k)| Op::SetMark(i, k)),
        2 => (dense_index(), max_sel()).prop_map(|(s, m)| Op::FindEmpty {
            start: s,
            max: max_for(s, m)
        }),
        1 => (dense_index(), order()).prop_map(|(index, new_order)| Op::Split { index, new_order }),
        2 => dense_index().prop_map(Op::Probe),
        2 => find_op(),
        1 => iter_op(),
    ];
    prop::collection::vec(op, 0..60).boxed()
}

fn search_ops() -> BoxedStrategy<Vec<Op>> {
    let op = prop_oneof![
        5 => store_op(any_index(), order()),
        1 => any_index().prop_map(Op::Reserve),
        2 => (any_index(), mark_no()).prop_map(|(i, k)| Op::SetMark(i, k)),
        1 => any_index().prop_map(Op::Erase),
        4 => find_op(),
        2 => find_marked_op(),
        4 => iter_op(),
    ];
    prop::collection::vec(op, 0..60).boxed()
}

/// Ops at the top of the index space, where the root has shift 60 and uses
/// only slots 0..=15: orders up to 63 (and splits of them, including ones
/// too large for one split), mixed with small entries near `u64::MAX`.
fn top_ops() -> BoxedStrategy<Vec<Op>> {
    let top_index = || {
        prop_oneof![
            2 => prop::sample::select(vec![0u64, 1 << 60, 1 << 62, 3 << 62, 1 << 63, 15 << 60]),
            2 => (0u64..300).prop_map(|d| u64::MAX - d),
            1 => any_index(),
        ]
        .boxed()
    };
    let top_order = || {
        prop_oneof![
            2 => prop::sample::select(vec![58u32, 60, 61, 62, 63]),
            1 => order(),
        ]
        .boxed()
    };
    let op = prop_oneof![
        5 => store_op(top_index(), top_order()),
        1 => insert_op(top_index(), top_order()),
        2 => top_index().prop_map(Op::Erase),
        1 => top_index().prop_map(Op::Reserve),
        2 => (top_index(), mark_no()).prop_map(|(i, k)| Op::SetMark(i, k)),
        2 => (top_index(), prop::sample::select(vec![12u32, 54, 57, 59, 60, 62]))
            .prop_map(|(index, new_order)| Op::Split { index, new_order }),
        2 => top_index().prop_map(Op::Probe),
        2 => (top_index(), max_sel()).prop_map(|(s, m)| Op::Find { start: s, max: max_for(s, m) }),
        2 => (top_index(), max_sel()).prop_map(|(s, m)| Op::FindAfter {
            index: s,
            max: max_for(s, m)
        }),
        2 => (top_index(), max_sel()).prop_map(|(s, m)| Op::FindEmpty {
            start: s,
            max: max_for(s, m)
        }),
        1 => (top_index(), max_sel(), mark_no()).prop_map(|(s, m, k)| Op::FindMarked {
            start: s,
            max: max_for(s, m),
            mark: k
        }),
        1 => iter_op(),
    ];
    prop::collection::vec(op, 0..40).boxed()
}

fn cursor_move() -> BoxedStrategy<Move> {
    prop_oneof![
        4 => Just(Move::Stay),
        6 => (0u64..80).prop_map(Move::Fwd),
        1 => (0u64..200).prop_map(Move::Back),
        1 => any_index().prop_map(Move::To),
    ]
    .boxed()
}

fn span() -> BoxedStrategy<Span> {
    prop_oneof![
        3 => (0u64..300).prop_map(Span::Delta),
        1 => any_index().prop_map(Span::Abs),
        1 => Just(Span::Max),
    ]
    .boxed()
}

fn cursor_op() -> BoxedStrategy<COp> {
    prop_oneof![
        2 => prop::sample::select(vec![0u32, 0, 0, 1, 2, 3, 5, 6, 7, 9, 12, 64])
            .prop_map(COp::SetOrder),
        8 => (prop::option::weighted(0.85, espec()), prop::bool::weighted(0.9))
            .prop_map(|(e, align)| COp::Store { e, align }),
        2 => (espec(), prop::bool::weighted(0.9)).prop_map(|(e, align)| COp::Insert { e, align }),
        2 => (keyspec(), espec(), prop::bool::weighted(0.9))
            .prop_map(|(key, e, align)| COp::CmpXchg { key, e, align }),
        2 => Just(COp::Erase),
        3 => mark_no().prop_map(COp::SetMark),
        1 => mark_no().prop_map(COp::ClearMark),
        1 => Just(COp::ClearMarks),
        1 => mark_no().prop_map(COp::GetMark),
        2 => Just(COp::Load),
        1 => Just(COp::GetOrder),
        1 => Just(COp::Key),
        1 => Just(COp::Next),
        3 => span().prop_map(COp::Find),
        2 => (span(), mark_no()).prop_map(|(s, k)| COp::FindMarked(s, k)),
        1 => span().prop_map(COp::FindEmpty),
        1 => order().prop_map(COp::Split),
    ]
    .boxed()
}

/// Operations to fill an array before a cursor test.
fn prefill_ops() -> BoxedStrategy<Vec<Op>> {
    let op = prop_oneof![
        6 => store_op(any_index(), order()),
        2 => (any_index(), mark_no()).prop_map(|(i, k)| Op::SetMark(i, k)),
        1 => any_index().prop_map(Op::Reserve),
    ];
    prop::collection::vec(op, 0..20).boxed()
}

fn run_cursor_batch(prefill: &[Op], start: u64, steps: &[(Move, COp)]) {
    let xa = Xa::new();
    let mut m = Model::default();
    for op in prefill {
        apply(&xa, &mut m, op);
    }
    check_full(&xa, &m);
    cursor_batch(&xa, &mut m, start, steps);
    finish_run(xa, &mut m);
}

/// Cursor `find` / `find_marked` from `start` up to `max`, re-locking every
/// `pause` entries (0: never): returns what it visited.
fn cursor_walk(xa: &Xa, start: u64, max: u64, f: Filt, pause: usize) -> Vec<(u64, E)> {
    let mut cur = Cursor::new(xa, start);
    let mut out = Vec::new();
    let mut g = xa.lock();
    loop {
        let r = match f {
            Filt::Present => cur.find(&g, max).unwrap(),
            Filt::Marked(k) => cur.find_marked(&g, max, mark(k as u8)).unwrap(),
        };
        let Some((i, _)) = r else { break };
        assert_eq!(cur.index(), i, "cursor index after find");
        let owned = cur.load_owned(&g).unwrap().expect("found entry loads");
        out.push((i, owned));
        assert!(out.len() <= 100_000, "cursor walk does not terminate");
        if pause != 0 && out.len() % pause == 0 {
            drop(g);
            g = xa.lock();
        }
    }
    // Once exhausted, it stays exhausted (or finds nothing new).
    let again = match f {
        Filt::Present => cur.find(&g, max).unwrap().map(|(i, _)| i),
        Filt::Marked(k) => cur
            .find_marked(&g, max, mark(k as u8))
            .unwrap()
            .map(|(i, _)| i),
    };
    assert_eq!(again, None, "find after the walk ended");
    out
}

// ---------------------------------------------------------------------------
// The properties.

proptest! {
    #![proptest_config(cfg())]

    /// Order-0 stores, inserts, erases and compare-exchanges (plus stores
    /// with bad orders) agree with the model: return values, `Occupied`
    /// indices, `Misaligned`/`OrderTooLarge` leaving the array unchanged,
    /// compare-exchange by identity (a same-content different `Arc` does not
    /// match), and `len`/`count`/`iter` after each step.
    #[test]
    fn plain_ops_match_model(ops in plain_ops()) {
        run(&ops);
    }

    /// Multi-order stores and inserts: storing inside a larger-or-equal entry
    /// replaces it whole and keeps its order and marks, storing over smaller
    /// entries replaces them all, loads anywhere in a range return the entry,
    /// `get_order` at every index of it, erasing through any index removes
    /// the whole entry.
    #[test]
    fn multi_order_ops_match_model(ops in multi_order_ops()) {
        run(&ops);
    }

    /// Marks: set/clear through any index affect the whole entry, setting on
    /// an empty or reserved index does nothing and returns false, a store
    /// into an empty slot has no marks, an in-place replacement keeps them,
    /// a store over smaller entries takes their union, erase clears them;
    /// `marked`, `find_marked`, `iter_marked` and `get_mark` agree
    /// (a mark set through any index of an entry reads the same at all).
    #[test]
    fn marks_match_model(ops in mark_ops()) {
        run(&ops);
    }

    /// `split` turns an order-N entry into 2^(N-m) order-m entries with the
    /// same item (same identity) or value and the same marks; NotPresent and
    /// SplitOrder errors change nothing; later stores into the pieces act on
    /// one piece only.
    #[test]
    fn split_matches_model(ops in split_ops()) {
        run(&ops);
    }

    /// Reservations: `reserve` succeeds on empty or reserved indices and
    /// fails with Occupied on an entry; a reserved index loads None, is
    /// skipped by find/iter/count, is occupied for insert (Occupied with the
    /// first index in use) and find_empty, keeps `is_empty()` false;
    /// `release` frees only a reservation; compare-exchange with `None`
    /// matches it.
    #[test]
    fn reservations_match_model(ops in reservation_ops()) {
        run(&ops);
    }

    /// Searches and iteration over random ranges (including inverted and
    /// overflowing bounds): an entry containing `start` is reported at
    /// `start`, others at their first index, each multi-order entry once,
    /// indices strictly increasing; `find_after` skips the rest of the entry
    /// containing its index; `find_empty` treats reservations as occupied;
    /// `count` and `iter_ref` agree with `iter`.
    #[test]
    fn search_and_iteration_match_model(ops in search_ops()) {
        run(&ops);
    }

    /// Entries of orders up to 63 at the top of the index space (root shift
    /// 60, slots 0..=15 in use) behave like any others: loads, orders,
    /// searches (including `find_empty`), splits (`SplitTooLarge` when one
    /// split would build more than `MAX_SPLIT_NODES` nodes) and teardown.
    #[test]
    fn top_of_index_space_matches_model(ops in top_ops()) {
        run(&ops);
    }

    /// A random batch of cursor stores, inserts, compare-exchanges, erases,
    /// marks, loads, steps, finds and splits at mostly increasing (sometimes
    /// decreasing) indices, through one `Cursor` in one lock hold, agrees op
    /// by op with the model. `NeedNodes` is handled by unlocking,
    /// `reserve_nodes` and relocking, and must leave the array unchanged.
    /// Cursor `find`/`find_marked` return the entry at/after the index first,
    /// then the entry after the previous one; `find_empty` and `next` move
    /// the cursor. The array is checked against the model after every step
    /// (lockless reads under the held lock) and after the batch.
    #[test]
    fn cursor_batch_matches_model(
        prefill in prefill_ops(),
        start in any_index(),
        steps in prop::collection::vec((cursor_move(), cursor_op()), 0..60),
    ) {
        run_cursor_batch(&prefill, start, &steps);
    }

    /// Walking with cursor `find` (and `find_marked`) from `start` to `max`
    /// visits exactly the entries `XArray::iter` (`iter_marked`) yields over
    /// that range, and a walk that drops and retakes the lock every few
    /// entries visits the same sequence.
    #[test]
    fn cursor_find_walk_matches_iter(
        prefill in prop::collection::vec(
            prop_oneof![
                6 => store_op(any_index(), order()),
                3 => (any_index(), mark_no()).prop_map(|(i, k)| Op::SetMark(i, k)),
                1 => any_index().prop_map(Op::Reserve),
            ],
            0..40,
        ),
        start in any_index(),
        max in max_sel(),
        k in mark_no(),
        pause in 1usize..4,
    ) {
        let xa = Xa::new();
        let mut m = Model::default();
        for op in &prefill {
            apply(&xa, &mut m, op);
        }
        let max = max_for(start, max);
        for f in [Filt::Present, Filt::Marked(usize::from(k))] {
            let want = m.iter(Some((start, max)).filter(|(s, l)| s <= l), f);
            let walk = cursor_walk(&xa, start, max, f, 0);
            assert_list(&walk, &want, format_args!("cursor walk {f:?} {start}..={max}"));
            let paused = cursor_walk(&xa, start, max, f, pause);
            assert_list(&paused, &want, format_args!("paused walk {f:?} {start}..={max}"));
        }
        teardown(&xa, &mut m);
    }
}

// ---------------------------------------------------------------------------
// Hand-written regression cases.

fn item(v: u64) -> E {
    Entry::Item(Arc::new(v))
}

/// The kernel's rule (`xas_store` into a larger entry): order-4 A at 0, then order-0 B at 0:
/// all of 0..=15 read B and the entry keeps order 4 and its marks.
#[test]
fn small_store_into_large_entry_replaces_it_whole() {
    let xa = Xa::new();
    let a = item(1);
    assert!(xa.store_order(0, 4, a.clone()).unwrap().is_none());
    assert!(xa.set_mark(9, Mark::MARK_1));
    let b = item(2);
    let old = xa.store(0, b.clone()).unwrap();
    assert_same(&old, &Some(a), "old");
    for i in 0..16 {
        assert_same(&xa.load(i), &Some(b.clone()), format_args!("load({i})"));
        assert_eq!(xa.get_order(i), 4);
        assert!(xa.get_mark(i, Mark::MARK_1));
    }
    assert_eq!(xa.load(16), None);
    // Through a middle index too, with a smaller non-zero order.
    let c = Entry::Value(7);
    assert_same(&xa.store_order(8, 2, c.clone()).unwrap(), &Some(b), "old");
    assert_same(&xa.load(0), &Some(c), "load(0)");
    assert_eq!(xa.len(), 1);
    assert_eq!(xa.erase(15), Some(Entry::Value(7)));
    assert!(xa.is_empty());
    assert_eq!(xa.node_count(), 0);
}

/// Storing an order-n entry over marked smaller entries (and a reservation)
/// gives it the union of their marks; an unmarked store into an empty slot
/// has none.
#[test]
fn store_over_smaller_entries_merges_marks() {
    let xa = Xa::new();
    xa.store(64, item(1)).unwrap();
    xa.store_order(96, 5, Entry::Value(3)).unwrap();
    xa.reserve(70).unwrap();
    assert!(xa.set_mark(64, Mark::MARK_0));
    assert!(xa.set_mark(100, Mark::MARK_2));
    assert!(!xa.set_mark(70, Mark::MARK_1), "mark on a reservation");
    assert_eq!(xa.len(), 2);
    let old = xa.store_order(64, 6, Entry::Value(9)).unwrap();
    assert_eq!(old.and_then(|e| e.item().map(|a| **a)), Some(1));
    assert_eq!(xa.len(), 1);
    assert!(xa.get_mark(127, Mark::MARK_0));
    assert!(!xa.get_mark(127, Mark::MARK_1));
    assert!(xa.get_mark(64, Mark::MARK_2));
    assert_eq!(xa.get_order(70), 6);
    // Fresh store: no marks.
    xa.store(5, item(5)).unwrap();
    assert!(marks().all(|mk| !xa.get_mark(5, mk)));
    xa.erase(5);
    xa.erase(64);
    assert!(xa.is_empty());
    assert!(marks().all(|mk| !xa.marked(mk)));
    assert_eq!(xa.node_count(), 0);
}

/// Failed stores leave the array unchanged: bad order, misaligned index,
/// value too large, misaligned item pointer.
#[test]
fn failed_stores_change_nothing() {
    let xa = Xa::new();
    xa.store(3, Entry::Value(1)).unwrap();
    assert_eq!(
        xa.store_order(3, 1, Entry::Value(2)),
        Err(Error::Misaligned { index: 3, order: 1 })
    );
    assert_eq!(
        xa.store_order(0, 64, Entry::Value(2)),
        Err(Error::OrderTooLarge { order: 64 })
    );
    assert_eq!(
        xa.store(3, Entry::Value(MAX_VALUE + 1)),
        Err(Error::ValueTooLarge {
            value: MAX_VALUE + 1
        })
    );
    assert_eq!(
        xa.insert(3, Entry::Value(2)),
        Err(Error::Occupied { index: 3 })
    );
    assert_eq!(
        xa.insert_order(0, 2, item(2)),
        Err(Error::Occupied { index: 3 })
    );
    assert_eq!(xa.load(3), Some(Entry::Value(1)));
    assert_eq!(xa.len(), 1);

    static BYTES: [u8; 16] = [0; 16];
    let bytes: XArray<&'static u8> = XArray::new();
    let r = bytes.store(0, Entry::Item(&BYTES[1]));
    assert!(matches!(r, Err(Error::MisalignedItem { .. })), "{r:?}");
    assert!(bytes.is_empty());
    assert_eq!(bytes.node_count(), 0);
    xa.erase(3);
    assert_eq!(xa.node_count(), 0);
}

/// `compare_exchange` matches by identity, not content; `None` matches an
/// empty or reserved index; `new = None` erases.
#[test]
fn compare_exchange_uses_identity() {
    let xa = Xa::new();
    let a = Arc::new(10u64);
    xa.store(1, Entry::Item(a.clone())).unwrap();
    let twin = Entry::Item(Arc::new(10u64));
    match xa.compare_exchange(1, Some(twin.key()), Some(Entry::Value(1))) {
        Err(foliocache_xarray::CompareExchangeError::Mismatch { current, new }) => {
            assert_same(&current, &Some(Entry::Item(a.clone())), "current");
            assert_eq!(new, Some(Entry::Value(1)));
        }
        r => panic!("{r:?}"),
    }
    let key = Entry::Item(a.clone()).key();
    let old = xa.compare_exchange(1, Some(key), None).unwrap();
    assert_same(&old, &Some(Entry::Item(a)), "old");
    xa.reserve(2).unwrap();
    assert!(xa
        .compare_exchange(2, None, Some(Entry::Value(5)))
        .unwrap()
        .is_none());
    assert_eq!(xa.load(2), Some(Entry::Value(5)));
    xa.erase(2);
    assert!(xa.is_empty());
    assert_eq!(xa.node_count(), 0);
}

/// Reservations: load None, skipped by searches, occupied for insert and
/// find_empty, keep the array non-empty; release frees only reservations.
#[test]
fn reservation_semantics() {
    let xa = Xa::new();
    xa.reserve(4096).unwrap();
    assert!(!xa.is_empty());
    assert_eq!(xa.len(), 0);
    assert_eq!(xa.load(4096), None);
    assert!(!xa.contains(4096));
    assert_eq!(xa.find(0, u64::MAX), None);
    assert_eq!(xa.count(..).unwrap(), 0);
    assert_eq!(xa.find_empty(4096, 4097), Some(4097));
    assert_eq!(
        xa.insert(4096, item(1)),
        Err(Error::Occupied { index: 4096 })
    );
    assert_eq!(
        xa.insert_order(0, 13, item(1)),
        Err(Error::Occupied { index: 4096 })
    );
    assert_eq!(xa.reserve(4096), Ok(()));
    xa.store(5, Entry::Value(5)).unwrap();
    assert_eq!(xa.reserve(5), Err(Error::Occupied { index: 5 }));
    xa.release(5);
    assert_eq!(xa.load(5), Some(Entry::Value(5)));
    xa.erase(5);
    xa.release(4096);
    assert!(xa.is_empty());
    assert_eq!(xa.node_count(), 0);
}

/// Split copies identity and marks to every piece, one reference each.
#[test]
fn split_copies_entry_and_marks() {
    let xa = Xa::new();
    let a = Arc::new(77u64);
    xa.store_order(4096, 12, Entry::Item(a.clone())).unwrap();
    xa.set_mark(5000, Mark::MARK_2);
    assert_eq!(
        xa.split(4096, 12),
        Err(Error::SplitOrder {
            entry_order: 12,
            new_order: 12
        })
    );
    assert_eq!(xa.split(0, 0), Err(Error::NotPresent { index: 0 }));
    xa.split(4200, 3).unwrap();
    assert_eq!(xa.len(), 512);
    assert_eq!(Arc::strong_count(&a), 1 + 512);
    let key = Entry::Item(a.clone()).key();
    for (n, (i, e)) in xa.iter(..).unwrap().enumerate() {
        assert_eq!(i, 4096 + 8 * n as u64);
        assert_eq!(e.key(), key);
        assert_eq!(xa.get_order(i + 7), 3);
        assert!(xa.get_mark(i + 5, Mark::MARK_2));
        assert!(!xa.get_mark(i, Mark::MARK_0));
    }
    xa.store(4096 + 8, Entry::Value(1)).unwrap();
    assert_eq!(xa.load(4096 + 15), Some(Entry::Value(1)));
    assert_eq!(xa.load(4096 + 16).map(|e| e.key()), Some(key));
    for i in (4096..8192).step_by(8) {
        xa.erase(i);
    }
    assert!(xa.is_empty());
    assert_eq!(xa.node_count(), 0);
}

/// A search started inside an entry reports it at the start index;
/// `find_after` skips the rest of it; iteration reports it once.
#[test]
fn search_from_inside_an_entry() {
    let xa = Xa::new();
    xa.store_order(512, 9, Entry::Value(1)).unwrap();
    xa.store(1024, Entry::Value(2)).unwrap();
    assert_eq!(xa.find(700, u64::MAX), Some((700, Entry::Value(1))));
    assert_eq!(xa.find_after(700, u64::MAX), Some((1024, Entry::Value(2))));
    let got: Vec<_> = xa.iter(600..).unwrap().collect();
    assert_eq!(got, vec![(600, Entry::Value(1)), (1024, Entry::Value(2))]);
    assert_eq!(xa.count(513..=1023).unwrap(), 1);
    assert_eq!(xa.find_empty(512, u64::MAX), Some(1025));
    let inverted = std::ops::RangeInclusive::new(5u64, 3);
    assert!(matches!(xa.iter(inverted), Err(Error::InvalidRange { .. })));
    assert_eq!(xa.iter(5..5).unwrap().count(), 0);
    xa.erase(1000);
    xa.erase(1024);
    assert_eq!(xa.node_count(), 0);
}

/// A cursor store that runs out of nodes fails with NeedNodes and changes
/// nothing; after `reserve_nodes` the retry succeeds.
#[test]
fn cursor_need_nodes_changes_nothing() {
    let xa = Xa::new();
    xa.store(1, Entry::Value(1)).unwrap();
    let mut cur = Cursor::new(&xa, 1 << 40);
    let mut g = xa.lock();
    let nodes = match cur.store(&mut g, Some(Entry::Value(2))) {
        Err(Error::NeedNodes { nodes }) => nodes,
        r => panic!("expected NeedNodes, got {r:?}"),
    };
    assert_eq!(g.len(), 1);
    assert_eq!(xa.load(1 << 40), None);
    assert_eq!(xa.load(1), Some(Entry::Value(1)));
    drop(g);
    cur.reserve_nodes(nodes).unwrap();
    let mut g = xa.lock();
    assert_eq!(cur.store(&mut g, Some(Entry::Value(2))), Ok(None));
    drop(g);
    assert_eq!(xa.load(1 << 40), Some(Entry::Value(2)));
    assert_eq!(xa.len(), 2);
    xa.erase(1);
    xa.erase(1 << 40);
    assert_eq!(xa.node_count(), 0);
}

/// A cursor used with another array's guard fails with WrongArray.
#[test]
fn cursor_wrong_array() {
    let a = Xa::new();
    let b = Xa::new();
    let mut cur = Cursor::new(&a, 0);
    let mut g = b.lock();
    assert_eq!(
        cur.store(&mut g, Some(Entry::Value(1))),
        Err(Error::WrongArray)
    );
    assert!(matches!(cur.load(&g), Err(Error::WrongArray)));
    drop(g);
    assert!(a.is_empty() && b.is_empty());
}

/// Cursor find: first call returns the entry at/after the index (an entry
/// containing it at the index), later calls the next entry; stores then act
/// on the found index.
#[test]
fn cursor_find_then_store() {
    let xa = Xa::new();
    xa.store_order(64, 6, Entry::Value(1)).unwrap();
    xa.store(200, Entry::Value(2)).unwrap();
    let mut cur = Cursor::new(&xa, 100);
    let mut g = xa.lock();
    assert_eq!(
        cur.find(&g, u64::MAX).unwrap().map(|(i, e)| (i, e.value())),
        Some((100, Some(1)))
    );
    assert!(cur.set_mark(&mut g, Mark::MARK_0).unwrap());
    assert_eq!(
        cur.find(&g, u64::MAX).unwrap().map(|(i, e)| (i, e.value())),
        Some((200, Some(2)))
    );
    assert_eq!(
        cur.store(&mut g, Some(Entry::Value(3))),
        Ok(Some(Entry::Value(2)))
    );
    assert!(cur.find(&g, u64::MAX).unwrap().is_none());
    drop(g);
    assert!(xa.get_mark(64, Mark::MARK_0));
    assert_eq!(xa.load(200), Some(Entry::Value(3)));
    xa.erase(64);
    xa.erase(200);
    assert_eq!(xa.node_count(), 0);
}

/// Entries at the top of the index space: order-63 entries and an order-60
/// entry in the root's last used slot (shift 60, slots 0..=15).
#[test]
fn top_of_index_space() {
    let xa = Xa::new();
    let top = 1u64 << 63;
    xa.store_order(top, 63, Entry::Value(1)).unwrap();
    assert_eq!(xa.load(u64::MAX), Some(Entry::Value(1)));
    assert_eq!(xa.get_order(top + 12345), 63);
    assert_eq!(
        xa.find(u64::MAX, u64::MAX),
        Some((u64::MAX, Entry::Value(1)))
    );
    assert_eq!(xa.find_after(top, u64::MAX), None);
    assert_eq!(xa.count(..).unwrap(), 1);
    assert_eq!(xa.find_empty(0, u64::MAX), Some(0));
    xa.erase(top + 5);
    assert!(xa.is_empty());
    assert_eq!(xa.node_count(), 0);
}

/// `find_empty` inside or past an entry that ends at the top of the root
/// node (root shift 60 uses slots 0..=15) must not report an occupied index.
#[test]
fn find_empty_at_top_of_index_space() {
    let xa = Xa::new();
    let top = 1u64 << 63;
    xa.store_order(top, 63, Entry::Value(1)).unwrap();
    assert_eq!(xa.find_empty(top, u64::MAX), None, "find_empty(2^63, MAX)");
    assert_eq!(xa.find_empty(u64::MAX - 5, u64::MAX), None);
    xa.erase(top);

    let xa = Xa::new();
    xa.store_order(15 << 60, 60, Entry::Value(2)).unwrap();
    assert_eq!(
        xa.find_empty(u64::MAX, u64::MAX),
        None,
        "find_empty(MAX, MAX)"
    );
    assert_eq!(xa.find_empty(15 << 60, u64::MAX), None);
    xa.erase(15 << 60);

    // Found by `top_of_index_space_matches_model`: the answer is not even
    // inside `start..=max`.
    let xa = Xa::new();
    xa.store_order(3 << 62, 62, Entry::Value(5)).unwrap();
    assert_eq!(
        xa.find_empty(15 << 60, 15 << 60),
        None,
        "find_empty(15 << 60, 15 << 60)"
    );
    let mut cur = Cursor::new(&xa, 15 << 60);
    let g = xa.lock();
    assert_eq!(cur.find_empty(&g, u64::MAX), Ok(None), "Cursor::find_empty");
    drop(g);
    xa.erase(3 << 62);

    let xa = Xa::new();
    xa.store_order(0, 63, Entry::Value(3)).unwrap();
    xa.store_order(top, 63, Entry::Value(4)).unwrap();
    assert_eq!(
        xa.find_empty(0, u64::MAX),
        None,
        "a full array has no empty index"
    );
    xa.erase(0);
    xa.erase(top);
    assert_eq!(xa.node_count(), 0);
}
