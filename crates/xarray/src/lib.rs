//! A concurrent radix tree from `u64` indices to entries: the Linux kernel's
//! XArray, in Rust, for a page cache and anything else that maps dense
//! integer keys to pointers.
//!
//! # The problem
//! A page cache looks up "which folio holds page `i` of this file" on every
//! read, from many threads, while a few threads insert and evict. A hash map
//! behind a lock makes every read write the lock's cache line; a B-tree
//! walks and compares. A radix tree over the index bits answers a lookup
//! with one load per level (two or three levels for most files), lets
//! readers run with no lock at all, keeps neighbours together so a run of
//! pages costs one walk, and carries per-entry marks (dirty, writeback)
//! summarised up the tree so "find the next dirty page" skips clean regions.
//!
//! # Concepts
//! - **Entries** are items (a pointer-like [`Item`]: `Arc<T>` or
//!   `&'static T`) or **value entries** (62-bit integers; the page cache
//!   keeps eviction shadows there). They never collide: [`Entry`] tells them apart.
//! - **Multi-order entries**: an entry of order `n` stored at a multiple of
//!   `2^n` covers all `2^n` indices. A load anywhere inside returns it;
//!   [`XArray::get_order`] reads its order; [`XArray::split`] splits it.
//!   Storing into part of one replaces it whole (see [`XArray::store_order`]).
//! - **Marks**: [`NR_MARKS`] bits per entry, with per-node summaries, so
//!   [`XArray::find_marked`] skips unmarked subtrees and
//!   [`XArray::marked`] is O(1).
//! - **Reservations**: [`XArray::reserve`] holds an index empty-but-taken.
//! - Two layers: the simple API on [`XArray`] locks for you; the cursor
//!   API ([`Cursor`], [`XaGuard`]) lets a caller holding the lock do a whole
//!   batch of stores, erases and marks in one hold, walking forward from the
//!   last position instead of from the root.
//!
//! # Locking
//! | operation | takes | may block | allocates |
//! |---|---|---|---|
//! | `load`, `load_ref`, `get_order`, `get_mark`, `marked`, `find*`, `iter*`, `count`, `contains` | epoch pin | never | no |
//! | `store*`, `insert*`, `compare_exchange`, `reserve`, `split` | the lock | on the lock | nodes, outside the lock, then retry |
//! | `erase`, `release`, `set_mark`, `clear_mark`, `len` | the lock | on the lock | never |
//! | `Cursor` operations | the guard you pass | no | never (they report [`Error::NeedNodes`]) |
//! | `Cursor::reserve_nodes` | nothing (call it unlocked) | in the allocator | yes |
//!
//! Lock order: the array's lock is a leaf. Hold no other lock of a caller
//! that a reader might need while holding it, do no IO under it, and never
//! take two arrays' locks unless every thread takes them in the same order.
//!
//! Readers are lockless and linearizable per index: a load returns an entry
//! that the index held at some moment during the call. Removed nodes and
//! items are freed through epoch-based reclamation (crossbeam-epoch, the
//! user-space stand-in for RCU) once no reader can see them. Iteration is not
//! a snapshot: entries present throughout are returned exactly once, in
//! index order; entries stored or erased meanwhile may or may not be.
//!
//! # Example
//! ```
//! use std::sync::Arc;
//! use foliocache_xarray::{Entry, Mark, XArray};
//!
//! let xa: XArray<Arc<String>> = XArray::new();
//! xa.store_order(512, 9, Entry::Item(Arc::new("a 2 MiB folio".into()))).unwrap();
//! xa.store(3, Entry::Value(42)).unwrap();
//! assert_eq!(xa.get_order(700), 9);
//! assert_eq!(xa.load(3), Some(Entry::Value(42)));
//! xa.set_mark(600, Mark::MARK_0);
//! assert_eq!(xa.find_marked(0, u64::MAX, Mark::MARK_0).map(|(i, _)| i), Some(512));
//! xa.split(512, 0).unwrap();
//! assert_eq!(xa.get_order(700), 0);
//! assert!(xa.get_mark(1000, Mark::MARK_0));
//! ```
//!
//! # When not to use it
//! Sparse keys spread over the whole `u64` space (hashes, random ids) make a
//! radix tree tall and its nodes nearly empty: use a hash map. If you need
//! ordered iteration with a snapshot, or range deletes on arbitrary bounds,
//! use a B-tree. Items must be pointers aligned to 8 bytes.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod cursor;
mod entry;
mod error;
mod mark;
mod sync;
mod tree;
mod xarray;

pub use cursor::{Cursor, XaGuard};
pub use entry::{Entry, EntryKey, EntryRef, Item, MAX_VALUE};
pub use error::{Error, Result};
pub use mark::Mark;
pub use tree::{MAX_ORDER, MAX_SPLIT_NODES, NODE_SIZE, NR_MARKS};
pub use xarray::{CompareExchangeError, Iter, IterRef, ReadGuard, XArray};
