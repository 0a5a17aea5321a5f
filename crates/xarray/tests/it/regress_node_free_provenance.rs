//! Regression: a node was freed through a pointer with no right to free it.
//!
//! Miri (Tree Borrows, scripts/miri.sh) reported "deallocation through
//! <wildcard> is forbidden" when an array holding nodes was dropped. The
//! tree keeps nodes as plain addresses, taken with `Node::addr` from a
//! `&Node` that `Pool::take` made out of the allocation's pointer, and frees
//! them by casting such an address back to a pointer (`Tree::drop`, and
//! `retire_node` through the epoch). Only the shared reference's provenance
//! had been exposed, and a pointer derived from a shared reference may not
//! deallocate: undefined behaviour under Rust's aliasing rules, harmless in
//! today's compiled code, which is why no native test saw it. `Pool::take`
//! now exposes the allocation's own pointer before handing the node out.
//!
//! Natively these tests only check the array's contents; run them under
//! Miri (`scripts/miri.sh`) to check the frees.

use std::sync::Arc;

use foliocache_xarray::{Entry, XArray};

/// Stores enough entries to grow the tree three levels (64 slots a node),
/// then drops it: `Tree::drop` frees every node.
#[test]
fn dropping_a_tree_of_nodes_frees_them_with_their_own_provenance() {
    let xa: XArray<Arc<u64>> = XArray::new();
    for i in [0u64, 1, 63, 64, 4095, 4096, 1 << 20] {
        xa.store(i, Entry::Item(Arc::new(i))).unwrap();
    }
    for i in [0u64, 63, 4096, 1 << 20] {
        match xa.load(i) {
            Some(Entry::Item(p)) => assert_eq!(*p, i),
            other => panic!("index {i}: {other:?}"),
        }
    }
    drop(xa);
}

/// Erasing shrinks the tree: the emptied nodes are retired (freed once the
/// epoch allows) and the rest freed at drop.
#[test]
fn retired_nodes_are_freed_with_their_own_provenance() {
    let xa: XArray<Arc<u64>> = XArray::new();
    for i in [5u64, 70, 5000, 1 << 18] {
        xa.store(i, Entry::Value(i)).unwrap();
    }
    for i in [70u64, 5000, 1 << 18] {
        assert_eq!(xa.erase(i), Some(Entry::Value(i)));
    }
    assert_eq!(xa.load(5), Some(Entry::Value(5)));
    drop(xa);
}
