//! The group's pages in 2 MiB pages where the host gives shared memory
//! none by itself (`arena::collapse`): the cache's creator collapses the
//! segment's pages block by block on a thread of its own, while the group
//! already uses them, so that a hit in any process maps its page through
//! one TLB entry per 2 MiB, as an in-process hit does.
//!
//! `SharedCache::new`'s memory is all faulted in by it (as the in-process
//! cache's arena is by default), and kept: the group's cache gives no
//! memory back anyway. A cache made deferred (`new_deferred`, for a group
//! joined at its first fork) is collapsed only once started, and each
//! block of pages only once the group's use has reached it, so its memory
//! follows its use.

use std::sync::{Arc, Weak};

use super::{Inner, SharedCache};
use crate::arena::collapse::{Collapsed, HUGE_BLOCK};
use crate::sync::Ordering;

impl SharedCache {
    /// Starts collapsing the pages into 2 MiB pages on a thread of its
    /// own; it ends when every block was tried, the kernel refuses, or
    /// the cache is gone. The header says how far it got
    /// ([`SharedStats::huge_bytes`](super::SharedStats::huge_bytes)).
    pub(super) fn collapse_in_background(&self) {
        self.collapse_on_thread(false);
    }

    /// As [`collapse_in_background`](Self::collapse_in_background), but
    /// each block of pages only once the clock's hand has given all of
    /// its pages out (`index::victim` takes free pages in order): the
    /// metadata's blocks at once, then the pages' as the group's use
    /// reaches them, so that only memory in use is faulted in. The thread
    /// ends when every block was tried or the cache is gone.
    pub(super) fn collapse_as_filled(&self) {
        self.collapse_on_thread(true);
    }

    fn collapse_on_thread(&self, as_filled: bool) {
        let h = self.inner.seg.header();
        if self.inner.seg.huge_blocks() == 0 || cfg!(miri) {
            h.huge_ended.store(1, Ordering::Release);
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        let spawned = std::thread::Builder::new()
            .name("foliocache-huge".into())
            .spawn(move || collapse_all(&weak, as_filled));
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
/// The pause between looks at the clock's hand while blocks wait for the
/// group's use to reach them.
const FILL_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// The thread: every block in turn (with `as_filled`, once the group's
/// pages reach it: [`filled`]), then, a moment apart, those some IO held
/// each time (the group reads into its pages as it starts), while the
/// cache lives.
fn collapse_all(weak: &Weak<Inner>, as_filled: bool) {
    let Some(blocks) = weak.upgrade().map(|i| i.seg.huge_blocks()) else {
        return;
    };
    // Each block left, and the passes that skipped it.
    let mut todo: Vec<(u64, u32)> = (0..blocks).map(|b| (b, 0)).collect();
    loop {
        let mut left = Vec::new();
        for (b, tries) in todo {
            let ready = !as_filled || weak.upgrade().is_some_and(|i| filled(&i.seg, b));
            if !ready {
                left.push((b, tries));
                continue;
            }
            match collapse(weak, b) {
                Some(Collapsed::Huge) => {}
                Some(Collapsed::Skipped) if tries < RETRY_PASSES => left.push((b, tries + 1)),
                Some(Collapsed::Skipped) => {}
                Some(Collapsed::Refused(e)) => {
                    log::info!(
                        "shared cache: its pages stay 4 KiB (MADV_COLLAPSE refused: {e}); \
                         hits map a page table entry per 4 KiB"
                    );
                    left.clear();
                    break;
                }
                None => return,
            }
        }
        todo = left;
        if todo.is_empty() {
            break;
        }
        let waiting = todo.iter().any(|&(_, tries)| tries == 0);
        std::thread::sleep(if waiting { FILL_PAUSE } else { RETRY_PAUSE });
    }
    if let Some(inner) = weak.upgrade() {
        inner.seg.header().huge_ended.store(1, Ordering::Release);
    }
}

/// Whether block `b` is the metadata's, or every page of it was given
/// out: the clock's hand (which counts every page it looked at, and takes
/// free pages in order) has passed its last page.
fn filled(seg: &super::seg::Seg, b: u64) -> bool {
    if !seg.is_data_block(b) {
        return true;
    }
    seg.header().hand.load(Ordering::Relaxed) >= seg.pages_through_block(b)
}

/// Collapses block `b` of the segment, counting it in the header if it
/// holds pages; `None` if the cache is gone. The metadata's blocks come
/// first: a hit reads a bucket and a descriptor before its page, each
/// through the TLB too.
fn collapse(weak: &Weak<Inner>, b: u64) -> Option<Collapsed> {
    let inner = weak.upgrade()?;
    let done = inner.seg.collapse_block(b)?;
    if matches!(done, Collapsed::Huge) && inner.seg.is_data_block(b) {
        inner
            .seg
            .header()
            .huge_bytes
            .fetch_add(HUGE_BLOCK as u64, Ordering::Relaxed);
    }
    Some(done)
}
