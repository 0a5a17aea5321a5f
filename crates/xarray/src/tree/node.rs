//! The nodes: their layout, their sequence count, their allocation (with a
//! per-thread spare list) and the pool a writer fills before it takes the
//! lock (the kernel's `xa_node`, `xas_nomem`).

use std::ptr::NonNull;

use super::{ACQ, NR_MARKS, REL, RLX, SLOTS};
use crate::entry::node_addr;
use crate::error::{Error, Result};
use crate::sync::{fence, spin_hint, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
use std::sync::atomic::AtomicUsize as StdAtomicUsize;

/// A node of 64 slots. Aligned to 64 bytes so node words have free low bits
/// and a node starts on a cache line.
#[repr(C, align(64))]
pub(crate) struct Node {
    pub(super) slots: [AtomicUsize; SLOTS],
    pub(super) marks: [AtomicU64; NR_MARKS],
    /// Address of the parent node, 0 for the root. Writers only.
    pub(super) parent: AtomicUsize,
    /// Level: the low index bit this node's offsets start at. Set before publication.
    pub(super) shift: AtomicU8,
    /// Offset in the parent. Writers only.
    pub(super) offset: AtomicU8,
    pub(super) count: AtomicU8,
    pub(super) nr_values: AtomicU8,
    /// Sequence count: odd while a writer updates several slots of this
    /// node at once (see [`Snapshot`](super::scan::Snapshot)).
    pub(super) seq: AtomicU32,
    /// The value-only list's neighbours (older, newer), 0 at either end or
    /// off the list. Writers only, under the lock: plain `std` atomics (no
    /// reader touches them, so loom has no interleaving to explore here).
    pub(super) lru: [StdAtomicUsize; 2],
}

/// Bytes one node occupies.
pub const NODE_SIZE: usize = std::mem::size_of::<Node>();

/// A node with `count` non-empty slots of which `values` hold value entries
/// (or their siblings) holds only value entries.
#[inline]
pub(super) fn value_only(count: u8, values: u8) -> bool {
    count != 0 && count == values
}

impl Node {
    #[cfg(loom)]
    pub(super) fn new() -> Self {
        Node {
            slots: std::array::from_fn(|_| AtomicUsize::new(0)),
            marks: std::array::from_fn(|_| AtomicU64::new(0)),
            parent: AtomicUsize::new(0),
            shift: AtomicU8::new(0),
            offset: AtomicU8::new(0),
            count: AtomicU8::new(0),
            nr_values: AtomicU8::new(0),
            seq: AtomicU32::new(0),
            lru: [StdAtomicUsize::new(0), StdAtomicUsize::new(0)],
        }
    }

    #[inline]
    pub(super) fn shift(&self) -> u32 {
        u32::from(self.shift.load(RLX))
    }

    #[inline]
    pub(super) fn slot(&self, off: usize) -> usize {
        self.slots[off].load(ACQ)
    }

    #[inline]
    pub(super) fn parent(&self) -> Option<&Node> {
        let p = self.parent.load(RLX);
        // SAFETY: parent addresses are only followed by writers under the
        // lock, and a node's parent is attached (hence alive) while the node is.
        (p != 0).then(|| unsafe { &*(p as *const Node) })
    }

    pub(super) fn count(&self) -> usize {
        usize::from(self.count.load(RLX))
    }

    /// Does the node hold only value entries (the kernel's shadow nodes:
    /// `count == nr_values`, not empty)? Writers only.
    #[inline]
    pub(super) fn value_only(&self) -> bool {
        value_only(self.count.load(RLX), self.nr_values.load(RLX))
    }

    #[inline]
    pub(super) fn marked(&self, m: usize, off: usize) -> bool {
        self.marks[m].load(ACQ) & (1 << off) != 0
    }

    /// Writer: enters a multi-slot update (the count goes odd).
    pub(super) fn write_begin(&self) {
        let s = self.seq.load(RLX);
        self.seq.store(s.wrapping_add(1), RLX);
        fence(REL);
    }

    /// Writer: leaves a multi-slot update (the count goes even again).
    pub(super) fn write_end(&self) {
        let s = self.seq.load(RLX);
        self.seq.store(s.wrapping_add(1), REL);
    }

    /// Reader: an even sequence count to validate against.
    pub(super) fn read_begin(&self) -> u32 {
        loop {
            let s = self.seq.load(ACQ);
            if s & 1 == 0 {
                return s;
            }
            spin_hint();
        }
    }

    /// Reader: did no writer touch the node since `read_begin` returned `s`?
    pub(super) fn read_valid(&self, s: u32) -> bool {
        fence(ACQ);
        self.seq.load(RLX) == s
    }

    pub(super) fn addr(&self) -> usize {
        self as *const Node as usize
    }
}

/// Borrows the node a node word points to.
///
/// # Safety
/// `w` must be a node word read from the tree while pinned (or under the
/// lock), and the borrow must not outlive that pin.
#[inline]
pub(super) unsafe fn node<'g>(w: usize) -> &'g Node {
    // SAFETY: forwarded to the caller.
    unsafe { &*(node_addr(w) as *const Node) }
}

/// Allocates a zeroed node outside the lock: one this thread freed
/// earlier if it kept one ([`spare`]), else a new one.
pub(super) fn alloc_node() -> Result<NonNull<Node>> {
    #[cfg(not(any(loom, miri)))]
    if let Some(p) = spare::take() {
        return Ok(p);
    }
    #[cfg(not(loom))]
    {
        let layout = std::alloc::Layout::new::<Node>();
        // SAFETY: Node has a non-zero size. All-zero bytes are a valid Node:
        // every field is an atomic integer.
        let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Node>();
        NonNull::new(p).ok_or(Error::AllocFailed)
    }
    #[cfg(loom)]
    {
        Ok(NonNull::from(Box::leak(Box::new(Node::new()))))
    }
}

/// Frees a node that no reader can reach: kept for this thread's next
/// allocation while it keeps fewer than [`spare::KEEP`], else given back.
///
/// # Safety
/// `p` came from `alloc_node`, is not in any tree (or every reader that saw
/// it has unpinned), and is freed once.
pub(super) unsafe fn free_node(p: *mut Node) {
    #[cfg(not(any(loom, miri)))]
    let Err(p) = spare::keep(p) else {
        return;
    };
    // SAFETY: forwarded to the caller.
    unsafe { dealloc_node(p) };
}

/// Gives a node's memory back to the allocator.
///
/// # Safety
/// As for [`free_node`].
pub(super) unsafe fn dealloc_node(p: *mut Node) {
    // SAFETY: alloc_zeroed with Layout::new::<Node>() is the allocation Box
    // uses for a Node, so Box may free it; the caller guarantees exclusivity.
    drop(unsafe { Box::from_raw(p) });
}

/// Freed nodes a thread keeps for its next allocations (the kernel keeps
/// `radix_tree_node`s in a slab cache). An aligned allocation misses
/// glibc's per-thread cache and takes its slow path, and a reader at random
/// over a file many times its cache allocates and frees about one leaf per
/// miss; a kept node costs a 576-byte clear instead. At most [`KEEP`] per
/// thread (36 KiB), given back when the thread exits. Not under loom or
/// Miri, which check every node's allocation and free.
#[cfg(not(any(loom, miri)))]
mod spare {
    use std::cell::RefCell;
    use std::ptr::NonNull;

    use super::Node;

    /// Nodes kept per thread at most.
    pub(super) const KEEP: usize = 64;

    struct Spare(Vec<NonNull<Node>>);

    impl Drop for Spare {
        fn drop(&mut self) {
            for p in self.0.drain(..) {
                // SAFETY: a kept node was freed (no reader can reach it)
                // and is owned by this list alone.
                unsafe { super::dealloc_node(p.as_ptr()) };
            }
        }
    }

    thread_local! {
        static SPARE: RefCell<Spare> = const { RefCell::new(Spare(Vec::new())) };
    }

    /// A kept node, zeroed, if this thread has one.
    pub(super) fn take() -> Option<NonNull<Node>> {
        let p = SPARE.try_with(|s| s.borrow_mut().0.pop()).ok().flatten()?;
        // SAFETY: the node is owned by nobody else (it left the list), and
        // all-zero bytes are a valid Node: every field is an atomic integer.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0, 1) };
        Some(p)
    }

    /// Keeps the freed node `p` if this thread has room (and is not
    /// exiting); hands it back otherwise.
    pub(super) fn keep(p: *mut Node) -> Result<(), *mut Node> {
        let Some(nn) = NonNull::new(p) else {
            return Err(p);
        };
        let kept = SPARE.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.0.len() >= KEEP {
                return false;
            }
            if s.0.capacity() == 0 {
                s.0.reserve_exact(KEEP);
            }
            s.0.push(nn);
            true
        });
        if kept == Ok(true) {
            Ok(())
        } else {
            Err(p)
        }
    }
}

/// Nodes allocated ahead of a locked operation (the kernel's `xas_nomem`
/// preallocation). Unused nodes are freed on drop.
#[derive(Default)]
pub(crate) struct Pool {
    nodes: Vec<NonNull<Node>>,
}

// SAFETY: the pool owns its nodes exclusively; nobody else refers to them.
unsafe impl Send for Pool {}
// SAFETY: a shared Pool gives no access to its nodes.
unsafe impl Sync for Pool {}

impl Pool {
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Tops the pool up to `n` nodes. Never called under the lock by this crate.
    pub(crate) fn reserve(&mut self, n: usize) -> Result<()> {
        self.nodes
            .try_reserve(n.saturating_sub(self.nodes.len()))
            .map_err(|_| Error::AllocFailed)?;
        while self.nodes.len() < n {
            self.nodes.push(alloc_node()?);
        }
        Ok(())
    }

    pub(super) fn take(&mut self, shift: u32, parent: usize, offset: usize) -> &'static Node {
        let p = self.nodes.pop().expect("node pool checked before use");
        // The tree keeps nodes as addresses (`Node::addr`, taken from the
        // shared reference below) and frees them through pointers made from
        // those addresses (`retire_node`, `Tree::drop`). A pointer derived
        // from a shared reference may not free memory, so expose the
        // allocation's own pointer here: the address then carries its
        // provenance back (Miri found the free through the reference; see
        // tests/it/regress_node_free_provenance.rs).
        let _ = p.as_ptr().expose_provenance();
        // SAFETY: the node is owned by the pool and unpublished; from here it
        // belongs to the tree, which keeps it alive until it is retired.
        let n: &'static Node = unsafe { p.as_ref() };
        n.shift.store(shift as u8, RLX);
        n.parent.store(parent, RLX);
        n.offset.store(offset as u8, RLX);
        n
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for p in self.nodes.drain(..) {
            // SAFETY: pool nodes were never published.
            unsafe { free_node(p.as_ptr()) };
        }
    }
}

pub(super) fn ensure(pool: &Pool, nodes: usize) -> Result<()> {
    if pool.len() < nodes {
        Err(Error::NeedNodes { nodes })
    } else {
        Ok(())
    }
}
