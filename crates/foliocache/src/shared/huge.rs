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
    /// each block of pages only once the clock's hand (`index::victim`
    /// takes free pages in order) comes within [`AHEAD_BLOCKS`] of it: the
    /// metadata's blocks at once, then the pages' just ahead of the
    /// group's use, so that memory follows the use. A block made a 2 MiB
    /// page before its pages are given out is a hole made one: a zeroed
    /// 2 MiB page, no copy, and no process faults its pages in one by one
    /// (a block collapsed once filled was copied whole, and each of its
    /// pages zeroed at first touch before: a forked pool filling its
    /// cache spent more time so than reading; docs/design.md, section 13).
    /// The thread ends when every block was tried or the cache is gone.
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
/// group's use to reach them, while the hand moves ([`FILL_PAUSE`] while
/// it stands): a group filling its cache at 1 GB/s gives out 5 blocks
/// between two looks, fewer than [`AHEAD_BLOCKS`].
const MOVING_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);
/// The pause while the hand stands.
const FILL_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);
/// How far ahead of the clock's hand blocks of pages are made 2 MiB
/// pages (16 MiB): memory faulted in before its use.
const AHEAD_BLOCKS: u64 = 8;

/// The thread: every block in turn (with `as_filled`, once the group's
/// use comes near it: [`reached`]), then, a moment apart, those some IO
/// held each time (the group reads into its pages as it starts), while
/// the cache lives.
fn collapse_all(weak: &Weak<Inner>, as_filled: bool) {
    // Each block left, and the passes that skipped it; not the blocks of
    // the file slots only (a 1 GiB cache's 64 MiB of them, zeroed by a
    // collapse where a group of a few files writes a few of their pages).
    let Some(mut todo) = weak.upgrade().map(|i| {
        (0..i.seg.huge_blocks())
            .filter(|&b| !i.seg.is_slots_block(b))
            .map(|b| (b, 0u32))
            .collect::<Vec<_>>()
    }) else {
        return;
    };
    let mut hand = 0;
    loop {
        let mut left = Vec::new();
        for (b, tries) in todo {
            let ready = !as_filled || weak.upgrade().is_some_and(|i| reached(&i.seg, b));
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
        let now = weak
            .upgrade()
            .map_or(0, |i| i.seg.header().hand.load(Ordering::Relaxed));
        let pause = match (waiting, std::mem::replace(&mut hand, now) != now) {
            (false, _) => RETRY_PAUSE,
            (true, true) => MOVING_PAUSE,
            (true, false) => FILL_PAUSE,
        };
        std::thread::sleep(pause);
    }
    if let Some(inner) = weak.upgrade() {
        inner.seg.header().huge_ended.store(1, Ordering::Release);
    }
}

/// Whether block `b` is the metadata's, or the clock's hand (which counts
/// every page it looked at, and takes free pages in order) is within
/// [`AHEAD_BLOCKS`] of its first page.
fn reached(seg: &super::seg::Seg, b: u64) -> bool {
    if !seg.is_data_block(b) {
        return true;
    }
    let per_block = (HUGE_BLOCK as u64) / super::seg::PAGE;
    let first = seg.pages_through_block(b).saturating_sub(per_block);
    seg.header().hand.load(Ordering::Relaxed) + AHEAD_BLOCKS * per_block >= first
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
