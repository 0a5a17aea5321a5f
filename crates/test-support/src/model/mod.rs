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
//! Files: the model (`state.rs`), the simple API's operations
//! (`ops.rs`), the cursor's (`cursor.rs`), the whole-array checks
//! (`check.rs`); here the item type, the orders and boundaries the
//! generators draw from, and the comparisons of entries.
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

mod check;
mod cursor;
mod ops;
mod state;
pub use check::*;
pub use cursor::*;
pub use ops::*;
pub use state::*;

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
