//! Loom models of the lockless-reader versus writer protocol.
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p foliocache-xarray --release --test loom`
//!
//! Under loom the crate's atomics and lock are loom's and epoch reclamation
//! is a leak (see `src/sync.rs`), so these models check publication and
//! ordering: what a reader can observe while one writer changes the tree.
//! Each model has one writer thread and the main thread as the reader; the
//! reader must only ever see, for its index, the entry before or after the
//! write (never another index's entry, never a torn or internal one), and
//! marked searches must only return marked entries.
//!
//! Entries are value entries so the models stay cheap; a value encodes the
//! range it was stored over where that matters.
#![cfg(loom)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use foliocache_xarray::{Entry, Mark, XArray};
use loom::thread;

type Xa = XArray<&'static u64>;
const M: Mark = Mark::MARK_0;

fn val(v: u64) -> Entry<&'static u64> {
    Entry::Value(v)
}

/// The value of a loaded entry (every model stores value entries only).
fn v(e: Option<Entry<&'static u64>>) -> Option<u64> {
    e.map(|e| e.value().expect("models store value entries only"))
}

/// Runs a model with a small preemption bound and reports how long it took.
/// (`bound` is the model's depth; CI caps it, see below.)
fn model<F>(name: &str, bound: usize, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let start = Instant::now();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    // CI explores up to 3 preemptions; `XARRAY_LOOM_BOUND=4` (or more) runs
    // the deeper search the models were written for (minutes, not seconds).
    let bound = std::env::var("XARRAY_LOOM_BOUND")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(bound.min(3));
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(bound);
    b.max_branches = 20_000;
    b.check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        f()
    });
    eprintln!(
        "loom model {name}: {} executions in {:.2?}",
        runs.load(Ordering::Relaxed),
        start.elapsed()
    );
}

/// Runs `writer` and `reader` on two loom threads against `xa`.
///
/// The writer is spawned and joined first, so loom's first execution runs
/// it to completion before the reader starts. That matters: loom's DPOR
/// remembers only the last access to each atomic, and the writer loads the
/// slots it is about to store, so a reader load that came *before* those
/// writer loads would be forgotten and its races never explored (loom issues
/// #166 and #392; with the reader first, most models ran one execution). A
/// reader load that comes after the writer's stores depends on the last
/// store, which loads do not hide, and loom then backtracks into the
/// writer.
fn race(
    xa: &Arc<Xa>,
    writer: impl FnOnce(&Xa) + Send + 'static,
    reader: impl FnOnce(&Xa) + Send + 'static,
) {
    let w = {
        let xa = xa.clone();
        thread::spawn(move || writer(&xa))
    };
    let r = {
        let xa = xa.clone();
        thread::spawn(move || reader(&xa))
    };
    w.join().unwrap();
    r.join().unwrap();
}

/// Collects an iteration (at most 8 entries: the models hold fewer, and a
/// torn view must not make the reader spin forever while the writer is
/// descheduled), checking order and that each entry belongs where it was
/// found (`owner(value)` gives the range `(base, order)`).
fn iter_checked(
    xa: &Xa,
    start: u64,
    marked: bool,
    owner: impl Fn(u64) -> (u64, u32),
) -> Vec<(u64, u64)> {
    let it = if marked {
        xa.iter_marked(start.., M).unwrap()
    } else {
        xa.iter(start..).unwrap()
    };
    let got: Vec<(u64, u64)> = it
        .take(8)
        .map(|(i, e)| (i, e.value().expect("value entries only")))
        .collect();
    for w in got.windows(2) {
        assert!(w[0].0 < w[1].0, "iteration not increasing: {got:?}");
    }
    for &(i, v) in &got {
        let (base, order) = owner(v);
        assert!(
            i >= start && base <= i && i - base < 1 << order,
            "iteration reported {v} at {i}, outside {base}/{order}: {got:?}"
        );
    }
    got
}

/// A model of one writer call racing one reader ([`race`]) on an array that
/// `setup` filled; `after` checks the array once both are done.
fn race_model<W, R>(name: &str, bound: usize, setup: fn(&Xa), writer: W, reader: R, after: fn(&Xa))
where
    W: Fn(&Xa) + Copy + Send + Sync + 'static,
    R: Fn(&Xa) + Copy + Send + Sync + 'static,
{
    model(name, bound, move || {
        let xa = Arc::new(Xa::new());
        setup(&xa);
        race(&xa, writer, reader);
        after(&xa);
    });
}

/// [`race_model`] whose writer stores `W` of `order` at 0 over what
/// `setup` left.
fn store_w_over(
    name: &str,
    bound: usize,
    order: u32,
    setup: fn(&Xa),
    reader: fn(&Xa),
    after: fn(&Xa),
) {
    let writer = move |xa: &Xa| {
        xa.store_order(0, order, val(W)).unwrap();
    };
    race_model(name, bound, setup, writer, reader, after);
}

/// [`race_model`] whose writer splits the entry at 0 into order-0 pieces.
fn split_model(name: &str, bound: usize, setup: fn(&Xa), reader: fn(&Xa), after: fn(&Xa)) {
    let writer = |xa: &Xa| xa.split(0, 0).unwrap();
    race_model(name, bound, setup, writer, reader, after);
}

/// No check.
fn nothing(_: &Xa) {}

// ---------------------------------------------------------------------------
// (a) A store into an empty tree: two nodes created and published.

#[test]
fn a_store_into_empty_tree_publishes_initialised_nodes() {
    race_model(
        "a_store_into_empty_tree",
        4,
        nothing,
        |xa| {
            xa.store(100, val(100)).unwrap();
        },
        |xa| {
            let first = v(xa.load(100));
            assert!(matches!(first, None | Some(100)), "load(100) = {first:?}");
            assert_eq!(v(xa.load(101)), None);
            assert_eq!(v(xa.load(36)), None, "same slot, other leaf");
            let got = iter_checked(xa, 0, false, |v| (v, 0));
            assert!(got.is_empty() || got == [(100, 100)], "{got:?}");
            let again = v(xa.load(100));
            if first.is_some() {
                assert_eq!(again, Some(100), "a later load went back in time");
            }
        },
        |xa| {
            assert_eq!(v(xa.load(100)), Some(100));
        },
    );
}

// ---------------------------------------------------------------------------
// (b) Replacing an entry.

#[test]
fn b_replace_is_seen_as_old_or_new() {
    race_model(
        "b_replace",
        4,
        |xa| {
            xa.store(100, val(1)).unwrap();
            xa.store(0, val(7)).unwrap();
        },
        |xa| {
            xa.store(100, val(2)).unwrap();
        },
        |xa| {
            let first = v(xa.load(100));
            assert!(matches!(first, Some(1 | 2)), "load(100) = {first:?}");
            assert_eq!(v(xa.load(0)), Some(7));
            let again = v(xa.load(100));
            if first == Some(2) {
                assert_eq!(again, Some(2), "a later load went back in time");
            }
        },
        nothing,
    );
}

/// Value `A` = an order-2 entry at 4, `B` its replacement, 9 an order-0 entry.
const A: u64 = 0xa;
const B: u64 = 0xb;
fn owner_b(v: u64) -> (u64, u32) {
    match v {
        A | B => (4, 2),
        9 => (9, 0),
        _ => panic!("unexpected value {v}"),
    }
}

fn replace_multi_order(reader: impl Fn(&Xa) + Sync + Send + 'static, name: &str) {
    let reader = Arc::new(reader);
    model(name, 3, move || {
        let xa = Arc::new(Xa::new());
        xa.store_order(4, 2, val(A)).unwrap();
        xa.store(9, val(9)).unwrap();
        let reader = reader.clone();
        race(
            &xa,
            |xa| {
                // Through an index inside: replaces the whole order-2 entry.
                xa.store(5, val(B)).unwrap();
            },
            move |xa| reader(xa),
        );
        assert!((4..8).all(|i| v(xa.load(i)) == Some(B)));
    });
}

#[test]
fn b_replace_multi_order_entry_load_sees_old_or_new() {
    replace_multi_order(
        |xa| {
            for i in [7, 6] {
                let got = v(xa.load(i));
                assert!(matches!(got, Some(A | B)), "load({i}) = {got:?}");
            }
            assert_eq!(v(xa.load(8)), None);
            assert_eq!(v(xa.load(9)), Some(9));
        },
        "b_replace_multi_order_load",
    );
}

#[test]
fn b_replace_multi_order_entry_get_order_stays_the_same() {
    replace_multi_order(
        |xa| {
            let o = xa.get_order(7);
            assert_eq!(o, 2, "get_order(7) during a replace of an order-2 entry");
        },
        "b_replace_multi_order_get_order",
    );
}

#[test]
fn b_replace_multi_order_entry_iteration_is_increasing() {
    replace_multi_order(
        |xa| {
            let got = iter_checked(xa, 7, false, owner_b);
            assert_eq!(got.len(), 2, "one entry in 4..8 then 9: {got:?}");
        },
        "b_replace_multi_order_iteration",
    );
}

// ---------------------------------------------------------------------------
// (c) Erasing: the node is freed and the tree shrinks.

#[test]
fn c_erase_frees_node_and_shrinks_tree() {
    race_model(
        "c_erase_and_shrink",
        4,
        |xa| {
            xa.store(0, val(0)).unwrap();
            xa.set_mark(0, M);
            xa.store(100, val(100)).unwrap();
            xa.set_mark(100, M);
        },
        |xa| {
            // Frees the leaf of 100, then the root: the leaf of 0 becomes the root.
            assert_eq!(v(xa.erase(100)), Some(100));
        },
        |xa| {
            let got = v(xa.load(100));
            assert!(matches!(got, None | Some(100)), "load(100) = {got:?}");
            assert_eq!(v(xa.load(0)), Some(0), "index 0 is present throughout");
            let f = xa.find_marked(0, u64::MAX, M).map(|(i, e)| (i, e.value()));
            assert_eq!(f, Some((0, Some(0))), "find_marked");
            assert!(xa.marked(M));
            let got = iter_checked(xa, 0, true, |v| (v, 0));
            assert!(got == [(0, 0)] || got == [(0, 0), (100, 100)], "{got:?}");
        },
        |xa| {
            assert_eq!(xa.node_count(), 1);
        },
    );
}

#[test]
fn c_erase_of_the_last_entry_empties_the_tree() {
    race_model(
        "c_erase_last",
        4,
        |xa| {
            xa.store(100, val(100)).unwrap();
            xa.set_mark(100, M);
        },
        |xa| {
            xa.erase(100);
        },
        |xa| {
            let got = v(xa.load(100));
            assert!(matches!(got, None | Some(100)), "load(100) = {got:?}");
            let got = iter_checked(xa, 0, true, |v| (v, 0));
            assert!(got.is_empty() || got == [(100, 100)], "{got:?}");
            assert_eq!(xa.get_order(100), 0);
        },
        |xa| {
            assert!(xa.is_empty());
            assert_eq!(xa.node_count(), 0);
        },
    );
}

// ---------------------------------------------------------------------------
// (d) Growing the tree: a store far away when only index 0 exists.

#[test]
fn d_grow_keeps_existing_entries_visible() {
    race_model(
        "d_grow",
        4,
        |xa| {
            xa.store(0, val(0)).unwrap();
            xa.set_mark(0, M);
        },
        |xa| {
            // Two new levels above the old root, then two below.
            xa.store(4096, val(4096)).unwrap();
        },
        |xa| {
            assert_eq!(v(xa.load(0)), Some(0), "index 0 is present throughout");
            let got = v(xa.load(4096));
            assert!(matches!(got, None | Some(4096)), "load(4096) = {got:?}");
            let f = xa.find_marked(0, u64::MAX, M).map(|(i, e)| (i, e.value()));
            assert_eq!(f, Some((0, Some(0))), "find_marked");
            let got = iter_checked(xa, 0, false, |v| (v, 0));
            assert!(got == [(0, 0)] || got == [(0, 0), (4096, 4096)], "{got:?}");
        },
        nothing,
    );
}

// ---------------------------------------------------------------------------
// (e) A multi-order entry stored over smaller ones.

/// `W` = the new multi-order entry at 0; small entries are their index.
const W: u64 = 0x77;

#[test]
fn e_multi_order_store_over_smaller_entries_in_one_node() {
    store_w_over(
        "e_over_smaller_same_node",
        3,
        2,
        |xa| {
            xa.store(1, val(1)).unwrap();
            xa.store(2, val(2)).unwrap();
        },
        |xa| {
            let got = v(xa.load(1));
            assert!(matches!(got, Some(1 | W)), "load(1) = {got:?}");
            let got = v(xa.load(3));
            assert!(matches!(got, None | Some(W)), "load(3) = {got:?}");
        },
        |xa| {
            assert_eq!(xa.get_order(3), 2);
        },
    );
}

#[test]
fn e_multi_order_store_over_smaller_entries_iteration_is_increasing() {
    store_w_over(
        "e_over_smaller_same_node_iteration",
        2,
        2,
        |xa| {
            xa.store(1, val(1)).unwrap();
            xa.store(2, val(2)).unwrap();
        },
        |xa| {
            iter_checked(xa, 0, false, |v| if v == W { (0, 2) } else { (v, 0) });
        },
        nothing,
    );
}

#[test]
fn e_multi_order_store_over_marked_entries_stays_findable() {
    // Index 1 is marked throughout: first as the small entry, then as part of
    // W, which takes the union of the marks it covers.
    store_w_over(
        "e_over_marked_same_node",
        2,
        2,
        |xa| {
            xa.store(1, val(1)).unwrap();
            xa.set_mark(1, M);
            xa.store(2, val(2)).unwrap();
        },
        |xa| {
            let f = xa.find_marked(0, 3, M).map(|(i, e)| (i, e.value()));
            assert!(
                matches!(f, Some((1, Some(1))) | Some((0, Some(W)))),
                "find_marked(0, 3) = {f:?}"
            );
        },
        |xa| {
            assert!(xa.get_mark(3, M));
        },
    );
}

#[test]
fn e_multi_order_store_over_marked_entries_never_returns_an_unmarked_old_entry() {
    // 0 holds an unmarked entry, 1 a marked one; W (order 1) replaces both
    // and inherits the mark. A marked search may return the marked old
    // entry or W, never the old entry at 0, which was never marked.
    store_w_over(
        "e_over_marked_no_early_mark",
        3,
        1,
        |xa| {
            xa.store(0, val(0)).unwrap();
            xa.store(1, val(1)).unwrap();
            xa.set_mark(1, M);
        },
        |xa| {
            let f = xa.find_marked(0, 1, M).map(|(i, e)| (i, e.value()));
            assert_ne!(f, Some((0, Some(0))), "returned the never-marked entry");
            let got = iter_checked(xa, 0, true, |v| if v == W { (0, 1) } else { (v, 0) });
            assert!(!got.contains(&(0, 0)), "iter_marked returned it: {got:?}");
        },
        nothing,
    );
}

#[test]
fn e_multi_order_store_over_a_subtree_never_reads_empty() {
    // Order 6 at 0 replaces the leaf holding 1 and 3 with one slot of a new
    // root: index 1 is never empty (the kernel stores the entry over the
    // node pointer in one step).
    store_w_over(
        "e_over_subtree",
        2,
        6,
        |xa| {
            xa.store(1, val(1)).unwrap();
            xa.store(3, val(3)).unwrap();
        },
        |xa| {
            let got = v(xa.load(1));
            assert!(matches!(got, Some(1 | W)), "load(1) = {got:?}");
        },
        |xa| {
            assert_eq!(xa.get_order(63), 6);
        },
    );
}

#[test]
fn e_multi_order_store_over_a_subtree_marked_search_sees_no_internal_entry() {
    store_w_over(
        "e_over_subtree_marked_iter",
        3,
        6,
        |xa| {
            xa.store(1, val(1)).unwrap();
            xa.set_mark(1, M);
        },
        |xa| {
            let got = iter_checked(xa, 0, true, |v| if v == W { (0, 6) } else { (v, 0) });
            assert!(got.len() <= 1, "{got:?}");
        },
        nothing,
    );
}

// ---------------------------------------------------------------------------
// (f) Splitting a multi-order entry.

#[test]
fn f_split_in_one_node_loads_the_original() {
    split_model(
        "f_split_same_node_load",
        4,
        |xa| {
            xa.store_order(0, 2, val(A)).unwrap();
        },
        |xa| {
            for i in [3, 2] {
                assert_eq!(v(xa.load(i)), Some(A), "load({i})");
            }
        },
        |xa| {
            assert_eq!(xa.count(..).unwrap(), 4);
        },
    );
}

#[test]
fn f_split_in_one_node_get_order_is_old_or_new() {
    split_model(
        "f_split_same_node_get_order",
        3,
        |xa| {
            xa.store_order(0, 2, val(A)).unwrap();
        },
        |xa| {
            let o = xa.get_order(3);
            assert!(
                o == 2 || o == 0,
                "get_order(3) = {o} while splitting 2 -> 0"
            );
        },
        nothing,
    );
}

#[test]
fn f_split_in_one_node_iteration_is_increasing() {
    split_model(
        "f_split_same_node_iteration",
        3,
        |xa| {
            xa.store_order(0, 2, val(A)).unwrap();
        },
        |xa| {
            let got = iter_checked(xa, 1, false, |_| (0, 2));
            assert!(!got.is_empty(), "{got:?}");
        },
        nothing,
    );
}

#[test]
fn f_split_of_a_marked_entry_keeps_every_index_marked() {
    split_model(
        "f_split_same_node_marks",
        3,
        |xa| {
            xa.store_order(0, 2, val(A)).unwrap();
            xa.set_mark(0, M);
        },
        |xa| {
            assert!(
                xa.get_mark(2, M),
                "get_mark(2) of a marked entry being split"
            );
        },
        nothing,
    );
}

#[test]
fn f_split_of_a_marked_entry_stays_findable_by_marked_search() {
    split_model(
        "f_split_same_node_find_marked",
        3,
        |xa| {
            xa.store_order(0, 2, val(A)).unwrap();
            xa.set_mark(0, M);
        },
        |xa| {
            let f = xa.find_marked(2, 3, M).map(|(i, e)| (i, e.value()));
            assert_eq!(f, Some((2, Some(A))), "find_marked(2, 3)");
        },
        nothing,
    );
}

#[test]
fn f_split_into_a_new_node_loads_the_original() {
    // An order-6 entry in the root's slot 0 becomes a leaf of 64 pieces.
    split_model(
        "f_split_new_node",
        3,
        |xa| {
            xa.store_order(0, 6, val(A)).unwrap();
            xa.store(64, val(64)).unwrap();
            xa.set_mark(0, M);
        },
        |xa| {
            assert_eq!(v(xa.load(5)), Some(A), "load(5)");
            let o = xa.get_order(5);
            assert!(o == 6 || o == 0, "get_order(5) = {o}");
            assert!(xa.get_mark(5, M), "get_mark(5)");
            let f = xa.find_marked(5, u64::MAX, M).map(|(i, e)| (i, e.value()));
            assert_eq!(f, Some((5, Some(A))), "find_marked(5)");
        },
        |xa| {
            assert_eq!(xa.count(..).unwrap(), 65);
        },
    );
}

#[test]
fn f_split_into_new_nodes_keeps_every_index_marked() {
    // An order-7 entry fills the root's slots 0 and 1; the split builds two
    // leaves. Index 100 (slot 1, a sibling slot) is marked throughout.
    split_model(
        "f_split_new_nodes_marks",
        2,
        |xa| {
            xa.store_order(0, 7, val(A)).unwrap();
            xa.set_mark(0, M);
        },
        |xa| {
            assert_eq!(v(xa.load(100)), Some(A), "load(100)");
            assert!(
                xa.get_mark(100, M),
                "get_mark(100) of a marked entry being split"
            );
        },
        |xa| {
            assert_eq!(xa.count(..).unwrap(), 128);
        },
    );
}

// ---------------------------------------------------------------------------
// (g) One slot changes entry, then the new entry is marked: two single-slot
// updates, outside any sequence section.

#[test]
fn g_marked_search_never_pairs_an_old_entry_with_a_later_mark() {
    // 5 holds an unmarked entry; the writer replaces it (the mark stays
    // clear) and then marks the new one. A marked search may return nothing
    // or the new entry, never the old one: it was never marked. A reader
    // that loads the slot (old entry) and only then the mark bit (set for
    // the new entry) would pair them.
    race_model(
        "g_old_entry_new_mark",
        3,
        |xa| {
            xa.store(5, val(1)).unwrap();
            xa.store(6, val(6)).unwrap();
        },
        |xa| {
            xa.store(5, val(2)).unwrap();
            xa.set_mark(5, M);
        },
        |xa| {
            // Starting at 5, the search examines 5's slot itself (as an
            // iteration does after returning the entry before it).
            let f = xa.find_marked(5, 63, M).map(|(i, e)| (i, e.value()));
            assert_ne!(f, Some((5, Some(1))), "returned the never-marked entry");
        },
        nothing,
    );
}
