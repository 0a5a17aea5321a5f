//! The group's pages in 2 MiB pages where the host gives shared memory
//! none by itself (`arena::collapse`): the cache's creator collapses the
//! segment's pages block by block on a thread of its own, while the group
//! already uses them, so that a hit in any process maps its page through
//! one TLB entry per 2 MiB, as an in-process hit does.
//!
//! The memory is all faulted in by it (as the in-process cache's arena is
//! by default), and kept: the group's cache gives no memory back anyway.

use std::sync::{Arc, Weak};

use super::{Inner, SharedCache};
use crate::arena::collapse::{collapse_block, Collapsed, HUGE_BLOCK};
use crate::sync::Ordering;

impl SharedCache {
    /// Starts collapsing the pages into 2 MiB pages on a thread of its
    /// own; it ends when every block was tried, the kernel refuses, or
    /// the cache is gone. The header says how far it got
    /// ([`SharedStats::huge_bytes`](super::SharedStats::huge_bytes)).
    pub(super) fn collapse_in_background(&self) {
        let h = self.inner.seg.header();
        if self.inner.seg.huge_blocks() == 0 || cfg!(miri) {
            h.huge_ended.store(1, Ordering::Release);
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        let spawned = std::thread::Builder::new()
            .name("foliocache-huge".into())
            .spawn(move || collapse_all(&weak));
        match spawned {
            Ok(_) => self
                .inner
                .collapser
                .store(std::process::id(), Ordering::Relaxed),
            Err(_) => h.huge_ended.store(1, Ordering::Release),
        }
    }

    /// In the process that made the cache, waits until its collapse has
    /// ended (every block tried, refused, or it could not start): for a
    /// measurement that must not run while the pages change size under
    /// it. Elsewhere (a process that attached, a forked child: the
    /// collapse is not theirs, and its process may be gone) it does not
    /// wait. Returns the bytes that 2 MiB pages map.
    pub fn wait_huge_pages(&self) -> u64 {
        let h = self.inner.seg.header();
        let mine = self.inner.collapser.load(Ordering::Relaxed) == std::process::id();
        while mine && h.huge_ended.load(Ordering::Acquire) == 0 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        h.huge_bytes.load(Ordering::Relaxed)
    }
}

/// Passes over the blocks left in small pages, after the first.
const RETRY_PASSES: u32 = 8;
/// The pause before each of those passes.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// The thread: every block in turn, then, a moment apart, those some IO
/// held each time (the group reads into its pages as it starts), while
/// the cache lives.
fn collapse_all(weak: &Weak<Inner>) {
    let Some(blocks) = weak.upgrade().map(|i| i.seg.huge_blocks()) else {
        return;
    };
    let mut todo: Vec<u64> = (0..blocks).collect();
    'passes: for pass in 0..=RETRY_PASSES {
        if todo.is_empty() {
            break;
        }
        if pass > 0 {
            std::thread::sleep(RETRY_PAUSE);
        }
        let mut skipped = Vec::new();
        for b in todo {
            match collapse(weak, b) {
                Some(Collapsed::Huge) => {}
                Some(Collapsed::Skipped) => skipped.push(b),
                Some(Collapsed::Refused(e)) => {
                    log::info!(
                        "shared cache: its pages stay 4 KiB (MADV_COLLAPSE refused: {e}); \
                         hits map a page table entry per 4 KiB"
                    );
                    break 'passes;
                }
                None => return,
            }
        }
        todo = skipped;
    }
    if let Some(inner) = weak.upgrade() {
        inner.seg.header().huge_ended.store(1, Ordering::Release);
    }
}

/// Collapses block `b` of the segment, counting it in the header if it
/// holds pages; `None` if the cache is gone. The metadata's blocks come
/// first: a hit reads a bucket and a descriptor before its page, each
/// through the TLB too.
fn collapse(weak: &Weak<Inner>, b: u64) -> Option<Collapsed> {
    let inner = weak.upgrade()?;
    let addr = inner.seg.huge_block(b)?;
    // SAFETY: `addr` is block `b` of the segment: 2 MiB aligned in its
    // shared, writable mapping (`Map::new_aligned`, from the memory
    // file's offset 0), held mapped by `inner` for the call.
    let done = unsafe { collapse_block(addr) };
    if matches!(done, Collapsed::Huge) && inner.seg.is_data_block(b) {
        inner
            .seg
            .header()
            .huge_bytes
            .fetch_add(HUGE_BLOCK as u64, Ordering::Relaxed);
    }
    Some(done)
}
