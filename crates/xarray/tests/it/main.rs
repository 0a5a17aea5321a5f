//! The xarray's integration tests, one binary (`cargo test -p foliocache-xarray
//! --test it`), a module per theme. The loom models are a binary of their
//! own (`--test loom`, built with `--cfg loom`): see `docs/testing.md`.

/// What the suites share: the array type, entries, the proptest config.
mod common;
/// One test per property of the array (entries, multi-order entries,
/// marks, the tree's shape, memory), bad input, the paused cursor.
mod invariants;
/// Random operation sequences against the reference model
/// (`test_support::model`).
mod model;
/// A node freed through a pointer with the right to free it (Miri).
mod regress_node_free_provenance;
/// Lockless readers against writers on real threads.
mod stress;
/// The count of nodes holding only value entries.
mod value_nodes;
