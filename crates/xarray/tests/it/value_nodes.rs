//! Checks `XArray::value_nodes` (and `value_node_bytes`): the count of nodes
//! that hold only value entries (`count > 0 && count == nr_values`, the
//! kernel's workingset shadow nodes), which writers keep incrementally.
//!
//! Hand-written cases name one transition each: a leaf filling with values,
//! an item or reservation joining it, the last item or value leaving it,
//! multi-order value entries and their splits (within a node and into new
//! subtrees), multi-order stores replacing whole subtrees, the root growing
//! and shrinking, and the cursor's cached-leaf fast path. A property test
//! then runs random sequences of store, store_order, insert, erase,
//! compare_exchange, split, reserve/release and cursor batches over items
//! and values, and after every operation compares the counter with
//! `debug_recount_value_nodes`, which walks the tree and classifies every
//! slot without looking at the writers' counters.

use std::sync::Arc;

use foliocache_xarray::{Cursor, Entry, EntryKey, Error};
use proptest::prelude::*;

use crate::common::{cfg, item, val, Xa, E};

/// The counter, after checking it against a walk of the tree.
#[track_caller]
fn value_nodes(xa: &Xa) -> usize {
    let n = xa.value_nodes();
    assert_eq!(n, xa.debug_recount_value_nodes(), "counter vs recount");
    n
}

/// Bytes of one node, measured through `memory_bytes`.
fn node_size() -> usize {
    let xa = Xa::new();
    let empty = xa.memory_bytes();
    xa.store(0, val(0)).unwrap();
    assert_eq!(xa.node_count(), 1);
    xa.memory_bytes() - empty
}

/// Runs `f` on a fresh lock and cursor at `start`, retrying with more nodes
/// whenever the pool runs short (the documented `NeedNodes` loop). `f`
/// gets the index to resume from and must stop at the first error.
fn with_cursor(
    xa: &Xa,
    start: u64,
    mut f: impl FnMut(
        &mut Cursor<'_, Arc<u64>>,
        &mut foliocache_xarray::XaGuard<'_, Arc<u64>>,
    ) -> Result<(), Error>,
) {
    let mut cur = Cursor::new(xa, start);
    loop {
        let mut lock = xa.lock();
        let r = f(&mut cur, &mut lock);
        drop(lock);
        match r {
            Err(Error::NeedNodes { nodes }) => cur.reserve_nodes(nodes).unwrap(),
            other => break other.unwrap(),
        }
    }
}

#[test]
fn empty_array_has_no_value_nodes() {
    let xa = Xa::new();
    assert_eq!(value_nodes(&xa), 0);
    assert_eq!(xa.value_node_bytes(), 0);
}

#[test]
fn leaf_of_only_values_counts_one() {
    let xa = Xa::new();
    for i in 0..10 {
        xa.store(i, val(i)).unwrap();
    }
    assert_eq!(xa.node_count(), 1);
    assert_eq!(value_nodes(&xa), 1);
}

#[test]
fn value_node_bytes_is_value_nodes_times_node_size() {
    let xa = Xa::new();
    for i in (0..4096).step_by(64) {
        xa.store(i, val(i)).unwrap();
    }
    assert_eq!(value_nodes(&xa), 64);
    assert_eq!(xa.value_node_bytes(), 64 * node_size());
}

#[test]
fn storing_an_item_into_a_value_leaf_makes_it_zero() {
    let xa = Xa::new();
    xa.store(1, val(1)).unwrap();
    xa.store(2, val(2)).unwrap();
    assert_eq!(value_nodes(&xa), 1);
    xa.store(3, item(3)).unwrap();
    assert_eq!(value_nodes(&xa), 0);
}

#[test]
fn replacing_a_value_by_an_item_makes_it_zero_and_back_makes_it_one() {
    let xa = Xa::new();
    xa.store(1, val(1)).unwrap();
    xa.store(1, item(1)).unwrap();
    assert_eq!(value_nodes(&xa), 0);
    xa.store(1, val(1)).unwrap();
    assert_eq!(value_nodes(&xa), 1);
}

#[test]
fn erasing_the_last_item_of_a_mixed_leaf_makes_it_one() {
    let xa = Xa::new();
    xa.store(1, val(1)).unwrap();
    xa.store(2, item(2)).unwrap();
    xa.store(3, item(3)).unwrap();
    assert_eq!(value_nodes(&xa), 0);
    xa.erase(2);
    assert_eq!(value_nodes(&xa), 0);
    xa.erase(3);
    assert_eq!(value_nodes(&xa), 1);
}

#[test]
fn erasing_all_values_frees_the_node_and_makes_zero() {
    let xa = Xa::new();
    for i in 0..5 {
        xa.store(i, val(i)).unwrap();
    }
    for i in 0..5 {
        assert_eq!(value_nodes(&xa), 1);
        xa.erase(i);
    }
    assert_eq!(xa.node_count(), 0);
    assert_eq!(value_nodes(&xa), 0);
}

#[test]
fn a_reservation_in_a_value_leaf_makes_it_zero_until_released() {
    let xa = Xa::new();
    xa.store(1, val(1)).unwrap();
    xa.reserve(2).unwrap();
    assert_eq!(value_nodes(&xa), 0);
    xa.release(2);
    assert_eq!(value_nodes(&xa), 1);
}

#[test]
fn compare_exchange_between_value_and_item_moves_the_count() {
    let xa = Xa::new();
    xa.store(7, val(7)).unwrap();
    xa.compare_exchange(7, Some(EntryKey::Value(7)), Some(item(7)))
        .unwrap();
    assert_eq!(value_nodes(&xa), 0);
    let key = xa.load(7).unwrap().key();
    xa.compare_exchange(7, Some(key), Some(val(8))).unwrap();
    assert_eq!(value_nodes(&xa), 1);
    xa.compare_exchange(7, Some(EntryKey::Value(8)), None)
        .unwrap();
    assert_eq!(value_nodes(&xa), 0);
    assert_eq!(xa.node_count(), 0);
}

#[test]
fn an_order_6_value_entry_counts_its_node_and_its_split_counts_the_new_leaf() {
    let xa = Xa::new();
    xa.store_order(64, 6, val(64)).unwrap();
    // One node of shift 6 whose slot 1 holds the entry.
    assert_eq!(xa.node_count(), 1);
    assert_eq!(value_nodes(&xa), 1);
    xa.split(64, 3).unwrap();
    // The root now points to a leaf of eight order-3 values.
    assert_eq!(xa.node_count(), 2);
    assert_eq!(value_nodes(&xa), 1);
    xa.split(64, 0).unwrap();
    assert_eq!(value_nodes(&xa), 1);
    xa.store(65, item(65)).unwrap();
    assert_eq!(value_nodes(&xa), 0);
}

#[test]
fn splitting_an_order_6_item_builds_no_value_node() {
    let xa = Xa::new();
    xa.store_order(64, 6, item(64)).unwrap();
    assert_eq!(value_nodes(&xa), 0);
    xa.split(64, 0).unwrap();
    assert_eq!(xa.node_count(), 2);
    assert_eq!(value_nodes(&xa), 0);
}

#[test]
fn an_order_9_value_entry_split_into_order_0_counts_eight_leaves() {
    let xa = Xa::new();
    xa.store_order(512, 9, val(512)).unwrap();
    assert_eq!(value_nodes(&xa), 1);
    xa.split(512, 0).unwrap();
    // The root's slots 8..16 now point to eight full leaves of values.
    assert_eq!(xa.node_count(), 9);
    assert_eq!(value_nodes(&xa), 8);
    xa.erase(1023);
    assert_eq!(value_nodes(&xa), 8);
    xa.store(600, item(600)).unwrap();
    assert_eq!(value_nodes(&xa), 7);
}

#[test]
fn an_order_9_value_entry_split_within_its_node_stays_one() {
    let xa = Xa::new();
    xa.store_order(512, 9, val(512)).unwrap();
    xa.split(512, 6).unwrap();
    assert_eq!(xa.node_count(), 1);
    assert_eq!(value_nodes(&xa), 1);
    xa.erase(512);
    assert_eq!(value_nodes(&xa), 1);
}

#[test]
fn an_order_9_value_entry_beside_an_item_counts_nothing_until_the_item_goes() {
    let xa = Xa::new();
    xa.store_order(512, 9, val(512)).unwrap();
    xa.store(64, item(64)).unwrap();
    // Root: value slots 8..16 and a leaf at slot 1 holding an item.
    assert_eq!(value_nodes(&xa), 0);
    xa.erase(64);
    assert_eq!(value_nodes(&xa), 1);
}

#[test]
fn an_order_12_value_split_into_order_0_counts_every_leaf() {
    let xa = Xa::new();
    xa.store_order(4096, 12, val(1)).unwrap();
    assert_eq!(value_nodes(&xa), 1);
    xa.split(4096, 0).unwrap();
    assert_eq!(xa.node_count(), 1 + 1 + 64);
    assert_eq!(value_nodes(&xa), 64);
    xa.split(4100, 0).unwrap_err();
    xa.erase(4096 + 64 * 5 + 3);
    assert_eq!(value_nodes(&xa), 64);
}

#[test]
fn a_multi_order_item_store_over_value_only_nodes_removes_them() {
    let xa = Xa::new();
    for i in 0..256 {
        xa.store(i, val(i)).unwrap();
    }
    // Four full value leaves under an internal root.
    assert_eq!(value_nodes(&xa), 4);
    xa.store_order(0, 6, item(0)).unwrap();
    assert_eq!(value_nodes(&xa), 3);
    // Order 12 covers the whole root: the tree grows one level and the old
    // root, with its leaves, is replaced.
    xa.store_order(0, 12, item(0)).unwrap();
    assert_eq!(value_nodes(&xa), 0);
    assert_eq!(xa.node_count(), 1);
}

#[test]
fn a_multi_order_value_store_over_a_mixed_subtree_makes_its_parent_count() {
    let xa = Xa::new();
    xa.store(1, item(1)).unwrap();
    xa.store(2, val(2)).unwrap();
    xa.store(70, val(70)).unwrap();
    // Root (shift 6) over a mixed leaf and a value leaf.
    assert_eq!(value_nodes(&xa), 1);
    xa.store_order(0, 6, val(0)).unwrap();
    // The mixed leaf is gone; the root holds a value and a value leaf.
    assert_eq!(value_nodes(&xa), 1);
    xa.erase(70);
    // The value leaf is gone; the root holds only the order-6 value.
    assert_eq!(xa.node_count(), 1);
    assert_eq!(value_nodes(&xa), 1);
}

#[test]
fn a_multi_order_value_store_over_value_nodes_counts_the_parent() {
    let xa = Xa::new();
    for i in 0..64 {
        xa.store(i, val(i)).unwrap();
    }
    xa.store(64, val(64)).unwrap();
    assert_eq!(value_nodes(&xa), 2);
    xa.store_order(0, 7, val(0)).unwrap();
    // Both leaves replaced by one entry in the root's slots 0 and 1.
    assert_eq!(xa.node_count(), 1);
    assert_eq!(value_nodes(&xa), 1);
}

#[test]
fn storing_into_part_of_a_multi_order_value_replaces_it_whole() {
    let xa = Xa::new();
    xa.store_order(0, 9, val(0)).unwrap();
    assert_eq!(value_nodes(&xa), 1);
    xa.store(5, item(5)).unwrap();
    assert_eq!(xa.get_order(5), 9);
    assert_eq!(value_nodes(&xa), 0);
    xa.store(5, val(5)).unwrap();
    assert_eq!(value_nodes(&xa), 1);
}

#[test]
fn growing_and_shrinking_height_keeps_the_leaf_counted() {
    let xa = Xa::new();
    xa.store(0, val(0)).unwrap();
    xa.store(1, val(1)).unwrap();
    assert_eq!(value_nodes(&xa), 1);
    // Grows the tree to shift 18: three new internal nodes above the leaf,
    // and a new chain down to a leaf for 1 << 20.
    xa.store(1 << 20, val(2)).unwrap();
    assert_eq!(xa.node_count(), 7);
    assert_eq!(value_nodes(&xa), 2);
    xa.erase(1 << 20);
    // Shrinks back to the single leaf.
    assert_eq!(xa.node_count(), 1);
    assert_eq!(value_nodes(&xa), 1);
    // Grow over an item this time.
    xa.store(100, item(100)).unwrap();
    assert_eq!(xa.node_count(), 3);
    assert_eq!(value_nodes(&xa), 1);
    xa.erase(100);
    assert_eq!(xa.node_count(), 1);
    assert_eq!(value_nodes(&xa), 1);
}

#[test]
fn growing_over_a_value_only_root_that_is_not_a_leaf() {
    let xa = Xa::new();
    xa.store_order(64, 6, val(1)).unwrap();
    assert_eq!(value_nodes(&xa), 1);
    xa.store(1 << 30, val(2)).unwrap();
    assert_eq!(value_nodes(&xa), 2);
    xa.erase(1 << 30);
    assert_eq!(xa.node_count(), 1);
    assert_eq!(value_nodes(&xa), 1);
    xa.erase(64);
    assert_eq!(xa.node_count(), 0);
    assert_eq!(value_nodes(&xa), 0);
}

#[test]
fn the_top_of_the_index_space_counts_like_anywhere_else() {
    let xa = Xa::new();
    xa.store(u64::MAX, val(1)).unwrap();
    assert_eq!(xa.node_count(), 11);
    assert_eq!(value_nodes(&xa), 1);
    xa.store_order(0, 63, val(2)).unwrap();
    // The order-63 entry replaces index 0's half of the root; u64::MAX's
    // chain stays: the root holds a value and a node.
    assert_eq!(value_nodes(&xa), 1);
    xa.erase(u64::MAX);
    assert_eq!(value_nodes(&xa), 1);
    xa.erase(0);
    assert_eq!(value_nodes(&xa), 0);
}

#[test]
fn cursor_stores_in_the_cached_leaf_are_counted() {
    let xa = Xa::new();
    with_cursor(&xa, 0, |cur, lock| {
        for i in cur.index()..64 {
            cur.set_index(i);
            cur.store(lock, Some(val(i)))?;
        }
        Ok(())
    });
    assert_eq!(value_nodes(&xa), 1);
    with_cursor(&xa, 10, |cur, lock| {
        for i in cur.index()..20 {
            cur.set_index(i);
            cur.store(lock, Some(item(i)))?;
        }
        Ok(())
    });
    assert_eq!(value_nodes(&xa), 0);
    with_cursor(&xa, 10, |cur, lock| {
        for i in cur.index()..20 {
            cur.set_index(i);
            cur.store(lock, None)?;
        }
        Ok(())
    });
    assert_eq!(value_nodes(&xa), 1);
}

#[test]
fn a_cursor_item_into_an_empty_slot_of_a_value_leaf_makes_it_zero() {
    let xa = Xa::new();
    // In one lock hold: values fill 0..10 (the first store builds the leaf,
    // the rest take the cached-leaf fast path), then an item lands in an
    // empty slot of the same leaf through the fast path, then a value
    // replaces it.
    let mut seen = Vec::new();
    with_cursor(&xa, 0, |cur, lock| {
        for i in cur.index()..12 {
            cur.set_index(i);
            let e = match i {
                10 => item(i),
                _ => val(i),
            };
            cur.store(lock, Some(e))?;
        }
        Ok(())
    });
    seen.push(value_nodes(&xa));
    with_cursor(&xa, 0, |cur, lock| {
        cur.store(lock, Some(val(0)))?;
        cur.set_index(10);
        cur.store(lock, Some(val(10)))?;
        Ok(())
    });
    seen.push(value_nodes(&xa));
    with_cursor(&xa, 0, |cur, lock| {
        cur.store(lock, Some(val(0)))?;
        cur.set_index(30);
        cur.store(lock, Some(item(30)))?;
        Ok(())
    });
    seen.push(value_nodes(&xa));
    assert_eq!(seen, [0, 1, 0]);
}

#[test]
fn dropping_an_array_of_value_nodes_frees_everything() {
    let xa = Xa::new();
    xa.store_order(0, 12, val(0)).unwrap();
    xa.split(0, 0).unwrap();
    assert_eq!(value_nodes(&xa), 64);
    drop(xa);
}

#[test]
fn shrink_takes_value_nodes_in_the_order_they_came_to_hold_only_values() {
    let xa = Xa::new();
    // Leaves 0, 1, 2, 3 (indices 0, 64, 128, 192): 1 and 3 hold an item.
    for leaf in 0..4u64 {
        xa.store(leaf * 64, val(leaf)).unwrap();
        if leaf % 2 == 1 {
            xa.store(leaf * 64 + 1, item(leaf)).unwrap();
        }
    }
    assert_eq!(value_nodes(&xa), 2, "leaves 0 and 2");
    // Leaf 3 loses its item: it is now the newest. Leaf 0 gains one and
    // leaves the list; losing it again makes it newer than leaf 3.
    xa.erase(193);
    xa.store(1, item(0)).unwrap();
    xa.erase(1);
    assert_eq!(value_nodes(&xa), 3);
    let present = |xa: &Xa| -> Vec<u64> { xa.iter(..).unwrap().map(|(i, _)| i).collect() };
    assert_eq!(xa.shrink_value_nodes(1), 1);
    assert_eq!(present(&xa), [0, 64, 65, 192], "leaf 2 was the oldest");
    assert_eq!(xa.shrink_value_nodes(1), 1);
    assert_eq!(present(&xa), [0, 64, 65], "then leaf 3");
    assert_eq!(value_nodes(&xa), 1);
    assert_eq!(xa.shrink_value_nodes(5), 1, "only leaf 0 is left to take");
    assert_eq!(present(&xa), [64, 65]);
    assert_eq!(value_nodes(&xa), 0);
}

#[test]
fn shrinking_a_node_of_large_values_frees_it_and_counts_its_parent_in() {
    let xa = Xa::new();
    // An order-6 value and an order-0 one under one shift-6 node whose other
    // slot holds a leaf of values: the leaf goes first, then the parent,
    // which then holds only values, goes too.
    xa.store(1 << 12, val(9)).unwrap(); // grow the tree
    xa.store_order(0, 6, val(1)).unwrap();
    xa.store(64, val(2)).unwrap();
    xa.store(65, val(3)).unwrap();
    let before = value_nodes(&xa);
    assert!(before >= 1);
    let done = xa.shrink_value_nodes(usize::MAX);
    assert!(done >= before);
    assert_eq!(value_nodes(&xa), 0);
    assert_eq!(xa.len(), 0, "every entry was a value");
    assert_eq!(xa.node_count(), 0);
}

// ---------------------------------------------------------------------------
// The property test.

/// Orders drawn for multi-order operations.
const ORDERS: [u32; 6] = [0, 1, 3, 6, 7, 9];

#[derive(Clone, Copy, Debug)]
enum Kind {
    Value(u64),
    Item(u64),
}

impl Kind {
    fn entry(self) -> E {
        match self {
            Kind::Value(v) => val(v),
            Kind::Item(v) => item(v),
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Store(u64, u32, Kind),
    Insert(u64, u32, Kind),
    Erase(u64),
    /// `true`: expect what is there (so it succeeds); `false`: a stale key.
    CompareExchange(u64, bool, Option<Kind>),
    Split(u64, u32),
    Reserve(u64),
    Release(u64),
    /// Order-0 stores (`None` erases) at `start`, `start + 1`, ... through
    /// one cursor in one lock hold, which takes the cached-leaf fast path.
    CursorRun(u64, Vec<Option<Kind>>),
    /// `shrink_value_nodes(max)`.
    Shrink(usize),
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        3 => (0u64..1000).prop_map(Kind::Value),
        2 => (0u64..1000).prop_map(Kind::Item),
    ]
}

/// Mostly the first few leaves, sometimes far enough to grow the tree.
fn index() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 0u64..1024,
        1 => 4096u64..4224,
        1 => prop::sample::select(vec![1 << 18, (1 << 18) + 63, 1 << 24, u64::MAX]),
    ]
}

fn order() -> impl Strategy<Value = u32> {
    prop_oneof![3 => Just(0u32), 2 => prop::sample::select(ORDERS.to_vec())]
}

fn align(index: u64, order: u32) -> u64 {
    index & !((1u64 << order) - 1)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (index(), order(), kind()).prop_map(|(i, o, k)| Op::Store(align(i, o), o, k)),
        2 => (index(), order(), kind()).prop_map(|(i, o, k)| Op::Insert(align(i, o), o, k)),
        4 => index().prop_map(Op::Erase),
        2 => (index(), any::<bool>(), prop::option::weighted(0.8, kind()))
            .prop_map(|(i, m, k)| Op::CompareExchange(i, m, k)),
        2 => (index(), prop::sample::select(vec![0u32, 1, 3, 6])).prop_map(|(i, o)| Op::Split(i, o)),
        1 => index().prop_map(Op::Reserve),
        1 => index().prop_map(Op::Release),
        2 => (index(), prop::collection::vec(prop::option::weighted(0.8, kind()), 1..80))
            .prop_map(|(i, ks)| Op::CursorRun(i, ks)),
        1 => (0usize..4).prop_map(Op::Shrink),
    ]
}

fn apply(xa: &Xa, op: &Op) {
    match *op {
        Op::Store(i, o, k) => {
            xa.store_order(i, o, k.entry()).unwrap();
        }
        Op::Insert(i, o, k) => match xa.insert_order(i, o, k.entry()) {
            Ok(()) | Err(Error::Occupied { .. }) => {}
            Err(e) => panic!("insert_order({i}, {o}): {e}"),
        },
        Op::Erase(i) => {
            xa.erase(i);
        }
        Op::CompareExchange(i, matching, k) => {
            let current = xa.load(i).map(|e| e.key());
            let expect = if matching {
                current
            } else {
                Some(EntryKey::Value(1 << 40))
            };
            let _ = xa.compare_exchange(i, expect, k.map(Kind::entry));
        }
        Op::Split(i, o) => match xa.split(i, o) {
            Ok(())
            | Err(Error::NotPresent { .. })
            | Err(Error::SplitOrder { .. })
            | Err(Error::SplitTooLarge { .. }) => {}
            Err(e) => panic!("split({i}, {o}): {e}"),
        },
        Op::Reserve(i) => {
            let _ = xa.reserve(i);
        }
        Op::Release(i) => xa.release(i),
        Op::CursorRun(start, ref kinds) => {
            with_cursor(xa, start, |cur, lock| {
                // Resume where a `NeedNodes` retry left off.
                for i in cur.index()..=start.saturating_add(kinds.len() as u64 - 1) {
                    cur.set_index(i);
                    cur.store(lock, kinds[(i - start) as usize].map(Kind::entry))?;
                }
                Ok(())
            });
        }
        Op::Shrink(max) => {
            // Items (and reservations) stay; only values go.
            let items = |xa: &Xa| -> Vec<u64> {
                xa.iter(..)
                    .unwrap()
                    .filter(|(_, e)| matches!(e, Entry::Item(_)))
                    .map(|(i, _)| i)
                    .collect()
            };
            let before = items(xa);
            let values = xa.len();
            let done = xa.shrink_value_nodes(max);
            assert!(done == max || xa.value_nodes() == 0, "stopped early");
            assert_eq!(items(xa), before, "an item went");
            assert!(done == 0 || xa.len() < values, "nodes went but no entry");
        }
    }
}

proptest! {
    #![proptest_config(cfg())]

    /// After every operation the counter equals a walk of the tree; after
    /// erasing everything both are zero.
    #[test]
    fn value_nodes_matches_a_recount_after_every_operation(
        ops in prop::collection::vec(op(), 1..60)
    ) {
        let xa = Xa::new();
        let node = node_size();
        for (n, op) in ops.iter().enumerate() {
            apply(&xa, op);
            prop_assert_eq!(
                xa.value_nodes(),
                xa.debug_recount_value_nodes(),
                "after op {} ({:?})", n, op
            );
            prop_assert_eq!(xa.value_node_bytes(), xa.value_nodes() * node);
            prop_assert!(xa.value_nodes() <= xa.node_count());
        }
        let present: Vec<u64> = xa.iter(..).unwrap().map(|(i, _)| i).collect();
        for i in present {
            xa.erase(i);
        }
        // Reservations may keep nodes alive, but none of them holds a value.
        prop_assert_eq!(xa.value_nodes(), 0);
        prop_assert_eq!(xa.debug_recount_value_nodes(), 0);
    }
}
