//! Reclaim (`mm/vmscan.c`): evicting folios from the inactive end of the
//! LRU lists when the arena is short, leaving eviction shadows, and keeping
//! the shadows within their budget.
//!
//! Reclaim works in batches, as the kernel's `shrink_inactive_list`:
//!
//! ```text
//!   LRU lock held                          LRU lock dropped
//!   isolate_lru_folios ──────────────────▶ shrink_folio_list
//!   inactive tail: activate / rotate /     trylock, re-check mapping and
//!   take off the list with a reference     dirty; per mapping, in one
//!   and its mapping's Arc (≤ 32 folios)    index lock hold: freeze
//!                                          (count → 0), shadow in; free
//!                                          (one arena lock hold);
//!                                          failures: putback_lru_folios
//! ```
//!
//! An isolated folio is off the lists (its `LRU` flag clear), so nothing
//! else unlinks it, and its mapping cannot be dropped: reclaim holds the
//! mapping's `Arc`, taken through the mapping's `Weak` to itself while the
//! LRU lock still guarantees the mapping is alive. Truncation may take an
//! isolated folio out of its mapping meanwhile; reclaim then only drops its
//! reference.
//!
//! # The LRU rules (`mm/vmscan.c`, `mm/workingset.c`)
//! New folios go to the head of the inactive list, or of the active list
//! when they replace an eviction shadow whose refault distance (pages
//! evicted or activated since) is within the active list's size. A read
//! marks a folio accessed as the kernel's `folio_mark_accessed` does: the
//! first access sets `REFERENCED`, a second one while it is inactive
//! activates it (moved at once if the LRU lock is free, else flagged
//! `ACTIVATE` for the next LRU pass; either way a hit writes a folio's
//! flags at most twice per trip through the inactive list). A read that
//! continues in the folio where the same thread's previous read ended does
//! not count as a new access, so a stream of small reads through a large
//! folio uses it once. Dropbehind folios are never marked.
//!
//! Ahead of the inactive list, reclaim takes the streamed list's tail
//! (`lru.rs`: folios a sequential stream's readahead windows brought in),
//! once the stream has read it; one it has not read yet goes back to the
//! streamed head, once a scan. So a one-pass scan's folios go before any other, and a
//! hot set read less often than a scan sweeps the inactive list stays.
//!
//! Reclaim takes folios from the inactive tail (a batch at a time off the
//! list under the LRU lock, then evicted with it dropped, above): one
//! flagged `ACTIVATE` is activated; a locked one, or one with references
//! beyond the cache's, is rotated; any other, referenced once or not at all, is frozen, removed
//! from its mapping leaving a shadow, and its pages go back to the arena
//! (a folio used once is not worth keeping over the working set: the
//! kernel's rule for unmapped file folios). When the inactive list is
//! shorter than the active one, the active tail is moved to the inactive
//! head, flagged `WORKINGSET` and keeping its `REFERENCED` bit, so one more
//! access brings it back. Every activation and every eviction advances the
//! eviction clock (`nonresident_age`).
//!
//! Reclaim never evicts a dirty folio or one under writeback: it rotates
//! it and wakes the flusher ([`crate::writeback`]). Memory files' folios are
//! on no list.

use std::sync::Arc;

use crate::filemap::Mapping;
use crate::folio::{Folio, FolioFlags, FolioRef, FreeBatch, FrozenFolio, LockedFolio};
use crate::lru::{Lists, NIL};
use crate::mm::CacheInner;
use crate::sync::{AtomicU64, Ordering};

/// Reclaim's state in a cache: the shadow budget and when to check it,
/// and the one trimmer at a time.
pub(crate) struct Reclaim {
    /// The shadow budget, in index nodes holding only shadows.
    shadow_nodes: usize,
    /// The eviction count at which to check the shadow budget next.
    shadow_check: AtomicU64,
    /// Held by the one thread trimming shadows (a plain lock even under
    /// loom: nothing inside it is part of a modelled protocol, and no
    /// model thread can be switched out while holding it).
    #[allow(clippy::disallowed_types)]
    trimming: parking_lot::Mutex<()>,
}

impl Reclaim {
    /// A budget of `shadow_nodes` index nodes of shadows.
    #[allow(clippy::disallowed_types)]
    pub(crate) fn new(shadow_nodes: usize) -> Reclaim {
        Reclaim {
            shadow_nodes,
            shadow_check: AtomicU64::new(shadow_check_every(shadow_nodes)),
            trimming: parking_lot::Mutex::new(()),
        }
    }
}

/// After evictions: every [`shadow_check_every`] of them, if the index
/// nodes holding only shadows exceed the budget, removes the oldest
/// (whole nodes' worth) until they take three quarters of it (the
/// kernel's shadow-node shrinker: `count_shadow_nodes`, then
/// `shadow_lru_isolate` from the head of the shadow nodes' `list_lru`).
/// Each index keeps its shadow-only nodes on a list in the order their
/// last folio left, so a trim walks nothing: it costs the shadows it
/// removes, each paid for by the eviction that left it. Every file
/// gives up its oldest nodes in proportion to the nodes it holds (the
/// kernel's one list spans the files; ours keep each file's newest).
/// Called with no lock held. One thread trims at a time; the others go
/// on.
fn maybe_trim_shadows(cache: &CacheInner) {
    let evictions = cache.stats.evictions.sum();
    let due = cache.reclaim.shadow_check.load(Ordering::Relaxed);
    if evictions < due {
        return;
    }
    let Some(_one) = cache.reclaim.trimming.try_lock() else {
        return;
    };
    cache.reclaim.shadow_check.store(
        evictions + shadow_check_every(cache.reclaim.shadow_nodes),
        Ordering::Relaxed,
    );
    let live = cache.live_mappings();
    let nodes: usize = live.iter().map(|m| m.shadow_nodes()).sum();
    if nodes <= cache.reclaim.shadow_nodes {
        return;
    }
    let excess = nodes - cache.reclaim.shadow_nodes * 3 / 4;
    for m in &live {
        let held = m.shadow_nodes();
        // Rounded up, so that the files together give up the excess.
        m.trim_shadow_nodes((excess * held).div_ceil(nodes));
    }
}

/// Evicts folios until about `want` pages went back to the arena, or a
/// full pass found nothing to evict. Returns the pages freed.
pub(crate) fn reclaim(cache: &CacheInner, want: u64) -> u64 {
    let mut scan = Scan {
        budget: None,
        stuck: 0,
        unread: 0,
    };
    let mut batch = Isolated::default();
    let mut freed = 0;
    while freed < want {
        isolate_lru_folios(cache, want - freed, &mut scan, &mut batch);
        if batch.folios.is_empty() {
            break;
        }
        freed += shrink_folio_list(cache, &mut batch, &mut scan);
    }
    if freed > 0 {
        maybe_trim_shadows(cache);
    }
    freed
}

/// Reclaim for an allocation that found the arena short of `want`
/// pages: at least [`ISOLATE_BATCH`] pages, as the kernel's
/// `try_to_free_pages` asks for at least `SWAP_CLUSTER_MAX`. The
/// surplus stays free in the arena for the next allocations, so a full
/// cache pays one isolation (one LRU lock hold) and one shadow trim per
/// batch of misses, not per miss. (In a small cache the batch is at
/// most a 128th of the capacity: reclaim there stays close to the
/// exact LRU the workingset tests check.)
pub(crate) fn direct_reclaim(cache: &CacheInner, want: u64) -> u64 {
    let batch = (cache.mem.arena.capacity_pages() as u64 / 128).min(ISOLATE_BATCH as u64);
    reclaim(cache, want.max(batch))
}

/// Takes up to [`ISOLATE_BATCH`] folios, about `want` pages, off the
/// inactive tail in one hold of the LRU lock (`isolate_lru_folios`),
/// each with a reference and its mapping kept alive, for
/// [`shrink_folio_list`](shrink_folio_list) to evict with the
/// lock dropped. On the way, as the kernel's scan does: the inactive
/// list is refilled from the active tail when it is the shorter one
/// (or after a whole lap found nothing to take); a folio accessed twice
/// while inactive is activated; a dirty folio, one under writeback, or
/// a locked one is rotated (and the flusher asked to write the dirty
/// ones back).
fn isolate_lru_folios<'c>(
    cache: &'c CacheInner,
    want: u64,
    scan: &mut Scan,
    batch: &mut Isolated<'c>,
) {
    let lruv = cache.lru();
    let mut lru = lruv.lock();
    let lru = &mut *lru;
    let budget = scan
        .budget
        .get_or_insert(2 * (lru.active.pages + lru.inactive.pages + lru.streamed.pages) + 2);
    let mut pages = 0;
    while pages < want && batch.folios.len() < ISOLATE_BATCH && *budget > 0 {
        *budget -= 1;
        let page = match next_folio(cache, lru, scan.stuck, &mut scan.unread) {
            Next::Take(page) => page,
            Next::Again => continue,
            Next::Done => break,
        };
        let f = cache.mem.folio(page);
        // Used once (or not at all) since it came in: it goes, unless
        // it was accessed twice while inactive.
        if f.fetch_clear(FolioFlags::REFERENCED)
            .contains(FolioFlags::ACTIVATE)
        {
            lruv.activate_on(lru, f, page);
            continue;
        }
        let busy = f.flags();
        if busy.intersects(FolioFlags::DIRTY.union(FolioFlags::WRITEBACK)) {
            // Never dropped dirty: rotated, and the flusher asked to
            // write it back, whatever the dirty thresholds (the kernel
            // sets PG_reclaim and wakes the flusher for reclaim).
            lruv.list_push_head(&mut lru.inactive, page);
            scan.stuck += f.nr_pages();
            cache.bdi.kick_for_reclaim();
            continue;
        }
        let mapping = match batch.mapping_of(f) {
            _ if busy.intersects(FolioFlags::LOCKED) => None,
            Some(i) => Some(i),
            None => {
                // (Off the list just now, but `LRU` still set and the
                // lock held: its mapping is alive, unless being dropped.)
                Mapping::of_listed(lru, f).map(|m| {
                    batch.mappings.push(m);
                    batch.mappings.len() - 1
                })
            }
        };
        let Some(mapping) = mapping else {
            // Locked (being read, written or truncated), or its file is
            // going: rotated (a going file takes its folios off itself).
            lruv.list_push_head(&mut lru.inactive, page);
            scan.stuck += f.nr_pages();
            continue;
        };
        // Off the lists, with a reference and its mapping held: nothing
        // else takes it off a list (`lru_detach` finds `LRU` clear), and
        // the mapping cannot go while it is isolated.
        f.test_and_clear(FolioFlags::LRU);
        f.get_many(1);
        pages += f.nr_pages();
        batch.folios.push((FolioRef::adopt(&cache.mem, f), mapping));
    }
}

/// What [`next_folio`] found.
enum Next {
    /// This folio, off its list, for the scan to judge.
    Take(u32),
    /// A folio moved between lists: look again.
    Again,
    /// The lists are empty.
    Done,
}

/// The next folio the scan looks at, under the LRU lock (`lists` is the
/// guard's), off its list: the streamed list's tail if the stream has
/// read it (a one-pass scan's folio goes before any other; one it has not
/// reached yet goes back to the streamed head, once a scan, for the
/// stream to reach it: on the inactive list it would age beside the hot
/// set and push it out); else the inactive tail, after the inactive list
/// is refilled from the active tail when it is the shorter one or
/// `stuck` (pages passed over) reached its length; with the other lists
/// empty, the streamed tail, read or not. `unread` counts the unread
/// streamed pages put back this scan.
fn next_folio(cache: &CacheInner, lru: &mut Lists, stuck: u64, unread: &mut u64) -> Next {
    let lruv = cache.lru();
    let page = lru.streamed.tail;
    if page != NIL && *unread < lru.streamed.pages {
        let f = cache.mem.folio(page);
        lruv.list_remove(&mut lru.streamed, page);
        if f.test(FolioFlags::REFERENCED) {
            f.test_and_clear(FolioFlags::STREAMED);
            return Next::Take(page);
        }
        *unread += f.nr_pages();
        lruv.list_push_head(&mut lru.streamed, page);
        return Next::Again;
    }
    if lru.active.tail != NIL
        && (lru.inactive.pages < lru.active.pages || stuck >= lru.inactive.pages)
    {
        // Refill the inactive list from the active tail. As the kernel
        // does for file folios nobody maps, referenced or not: the bit
        // stays, so one more access reactivates it. It was in the
        // working set once, and its shadow will say so (PG_workingset).
        let page = lru.active.tail;
        let f = cache.mem.folio(page);
        lruv.list_remove(&mut lru.active, page);
        // (An `ACTIVATE` left from an access made before the folio
        // reached a list goes too: it asked for what happened.)
        f.fetch_clear(FolioFlags::ACTIVE.union(FolioFlags::ACTIVATE));
        f.test_and_set(FolioFlags::WORKINGSET);
        lruv.list_push_head(&mut lru.inactive, page);
        return Next::Again;
    }
    let page = lru.inactive.tail;
    if page != NIL {
        lruv.list_remove(&mut lru.inactive, page);
        return Next::Take(page);
    }
    // Nothing else: a stream's folios it has not read yet go too.
    let page = lru.streamed.tail;
    if page == NIL {
        return Next::Done;
    }
    lruv.list_remove(&mut lru.streamed, page);
    cache.mem.folio(page).test_and_clear(FolioFlags::STREAMED);
    Next::Take(page)
}

/// Evicts the folios [`isolate_lru_folios`](isolate_lru_folios)
/// took, with the LRU lock dropped (`shrink_folio_list`): each is
/// locked (without waiting) and checked again (still its mapping's,
/// still clean); then, one index lock hold per mapping, frozen (nobody
/// else holds a reference, and now nobody can take one) and replaced by
/// its eviction shadow; the pages of the evicted go back to the arena
/// in one arena lock hold. The folios that could not go are put
/// back at the inactive head in one hold of the LRU lock; those that
/// left their mapping meanwhile are just let go. Returns the pages
/// freed; `batch` is empty after.
fn shrink_folio_list<'c>(cache: &'c CacheInner, batch: &mut Isolated<'c>, scan: &mut Scan) -> u64 {
    let mut keep: Vec<(FolioRef<'_>, usize)> = Vec::new();
    let mut locked: Vec<(LockedFolio<'_>, usize)> = Vec::with_capacity(batch.folios.len());
    for (f, mi) in batch.folios.drain(..) {
        let m = &batch.mappings[mi];
        let pages = f.nr_pages();
        let f = match f.try_lock() {
            Ok(f) => f,
            Err(f) => {
                keep.push((f, mi));
                scan.stuck += pages;
                continue;
            }
        };
        if f.mapping() != m.id() {
            // Truncated (or its read failed) meanwhile: not on a list
            // any more, and not ours to put back.
            continue;
        }
        if f.test(FolioFlags::DIRTY) || f.test(FolioFlags::WRITEBACK) {
            // Written to since it was isolated.
            keep.push((f.unlock(), mi));
            scan.stuck += pages;
            continue;
        }
        locked.push((f, mi));
    }
    // Out of their mappings, one index lock hold per mapping (a batch
    // mostly holds one).
    let mut frozen: Vec<FrozenFolio<'_>> = Vec::with_capacity(locked.len());
    let mut busy = Vec::new();
    while let Some(&(_, mi)) = locked.first() {
        let (of_m, rest): (Vec<_>, Vec<_>) = locked.into_iter().partition(|&(_, m)| m == mi);
        locked = rest;
        let before = frozen.len();
        batch.mappings[mi].evict_locked(
            cache,
            of_m.into_iter().map(|(f, _)| f),
            &mut frozen,
            &mut busy,
        );
        if frozen.len() > before {
            scan.stuck = 0;
        }
        for f in busy.drain(..) {
            // A reader holds it.
            scan.stuck += f.nr_pages();
            keep.push((f.unlock(), mi));
        }
    }
    let freed: u64 = frozen.iter().map(|f| f.nr_pages()).sum();
    // The evicted folios' pages go back to the arena together, in one
    // hold of its lock, when this drops.
    let mut free = FreeBatch::with_capacity(&cache.mem, frozen.len());
    let evicted = frozen.len() as u64;
    for f in frozen {
        f.set_mapping(0, f.index());
        f.free_into(&mut free);
    }
    drop(free);
    // The batch's counts at once (each a line other CPUs write).
    cache.stats.evictions.add(evicted);
    cache.stats.folios.sub(evicted);
    cache.stats.pages.sub(freed);
    {
        // `putback_lru_folios`: back at the inactive head, unless the
        // folio left its mapping meanwhile (its remover, finding it off
        // the lists, cleared its mapping under this lock: `lru_detach`,
        // so this test and that removal cannot interleave). Taken even
        // with nothing to put back: a mapping this batch held may go
        // once its `Arc` below does, and its drop's `lru_detach` must
        // see every eviction made here (each folio's `mapping`
        // cleared). The `Arc`'s own ordering gives that too; the lock
        // also says it to the loom models, which do not see `std`'s
        // `Arc`.
        let lruv = cache.lru();
        let mut lru = lruv.lock();
        for (f, mi) in &keep {
            if f.mapping() == batch.mappings[*mi].id() && !f.test_and_set(FolioFlags::LRU) {
                let page = cache.mem.page(f);
                lruv.list_push_head(&mut lru.inactive, page);
            }
        }
    }
    // The references, then the mappings (a file closed meanwhile goes
    // here: its drop takes the LRU lock), with no lock held.
    drop(keep);
    batch.mappings.clear();
    freed
}

/// The most folios one hold of the LRU lock isolates for reclaim (the
/// kernel's `SWAP_CLUSTER_MAX`).
const ISOLATE_BATCH: usize = 32;

/// One reclaim call's scan state across its batches.
struct Scan {
    /// Folios it may still look at: twice the lists' length when it began.
    budget: Option<u64>,
    /// Inactive pages passed over (pinned, locked or dirty) since the last
    /// eviction: after a whole lap of them, deactivate anyway.
    stuck: u64,
    /// Streamed pages not yet read that it put back at the streamed head:
    /// after a whole lap of them, it takes from the other lists.
    unread: u64,
}

/// Folios taken off the LRU for eviction: each with a reference and the
/// index of its mapping in `mappings`, which keeps the mappings alive.
#[derive(Default)]
struct Isolated<'c> {
    folios: Vec<(FolioRef<'c>, usize)>,
    mappings: Vec<Arc<Mapping>>,
}

impl Isolated<'_> {
    /// The index of `f`'s mapping among those already held, if it is.
    fn mapping_of(&self, f: &Folio) -> Option<usize> {
        let id = f.mapping();
        self.mappings.iter().rposition(|m| m.id() == id)
    }
}

/// Evictions between two checks of the shadow budget (see
/// `maybe_trim_shadows`): each eviction adds at most one shadow-only node,
/// so the budget is overshot by at most this many nodes.
pub(crate) fn shadow_check_every(budget_nodes: usize) -> u64 {
    (budget_nodes as u64 / 8).max(64)
}
