//! The shared cache's pages: the descriptors (the truth), the index
//! derived from them (open addressing over page numbers), holding a page,
//! and the clock that picks a page to reuse (docs/design.md, section 13).
//!
//! Lookups take no lock: they walk the buckets (a bounded probe, every
//! page number checked) and validate what they find against the page's
//! descriptor. Changes to the buckets and to a page's identity happen
//! under the index lock, with the page held. A lookup racing a change can
//! miss a page that is there (it then takes the slow path, which looks
//! again under the locks), never find one that is not.

use std::io;
use std::sync::atomic::{fence, Ordering};

use super::crash::point;
use super::lock::{alive, lock, nap_on_holder, Held};
use super::seg::{Desc, PageMem, Seg, F_DIRTY, F_FRESH, F_REFERENCED, F_UPTODATE, F_USED, PAGE};

/// A file page's identity: which slot, which of the slot's files, which
/// page.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Key {
    pub(crate) slot: u32,
    pub(crate) generation: u32,
    pub(crate) index: u64,
}

impl Key {
    fn hash(self) -> u64 {
        let mut h = (u64::from(self.slot) << 32 | u64::from(self.generation))
            ^ self.index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^= h >> 29;
        h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h ^ (h >> 32)
    }
}

/// The holder in a state word.
#[inline]
pub(crate) fn holder(state: u64) -> u32 {
    state as u32
}

/// The key a descriptor names (relaxed loads: validated by the caller's
/// state check).
#[inline]
fn key_of(d: &Desc) -> Key {
    Key {
        slot: d.slot.load(Ordering::Relaxed),
        generation: d.generation.load(Ordering::Relaxed),
        index: d.index.load(Ordering::Relaxed),
    }
}

/// What a lookup found.
pub(crate) enum Found {
    /// Page `p` with state word `state` (no holder), uptodate.
    Page(u64, u64),
    /// The page is held by participant `holder`.
    Held(u64, u32),
    /// Not in the index (or not uptodate).
    Absent,
}

/// Looks `key` up without a lock.
#[inline]
pub(crate) fn find(seg: &Seg, key: Key) -> Found {
    let h = key.hash();
    let mut i = 0;
    let mut changed = 0;
    while i < seg.buckets {
        let v = seg.bucket(h.wrapping_add(i)).load(Ordering::Acquire);
        if v == 0 {
            return Found::Absent;
        }
        i += 1;
        let Some(p) = seg.page_of(v) else { continue };
        let Some(d) = seg.desc(p) else { continue };
        let state = d.state.load(Ordering::Acquire);
        if key_of(d) != key {
            continue;
        }
        if holder(state) != 0 {
            return Found::Held(p, holder(state));
        }
        let flags = d.flags.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if d.state.load(Ordering::Relaxed) != state {
            // Changed as it was read: look at it again (a few times; a
            // page changing that often is left to the slow path).
            changed += 1;
            if changed > 64 {
                return Found::Absent;
            }
            i -= 1;
            continue;
        }
        if flags & (F_USED | F_UPTODATE) != F_USED | F_UPTODATE {
            return Found::Absent;
        }
        return Found::Page(p, state);
    }
    Found::Absent
}

/// Marks page `d` read since the clock passed (a shared write only when
/// the bit is not yet set) and moves its stamp to the group's tick (a
/// shared write only when the tick moved: once a tick at most). Returns
/// whether this read is the first of a page readahead filled (`F_FRESH`,
/// cleared here, by one reader only), and the read's age: the ticks
/// since the page's last read or load (`curve.rs`).
#[inline]
pub(crate) fn touch(seg: &Seg, d: &Desc) -> (bool, u16) {
    let flags = d.flags.load(Ordering::Relaxed);
    if flags & F_REFERENCED == 0 {
        d.flags.fetch_or(F_REFERENCED, Ordering::Relaxed);
    }
    let age = age(seg, d);
    let fresh =
        flags & F_FRESH != 0 && d.flags.fetch_and(!F_FRESH, Ordering::Relaxed) & F_FRESH != 0;
    (fresh, age)
}

/// A read of page `d` now: its age in ticks of the group's clock since
/// its last read or load, its stamp moved to the tick now (a shared write
/// only when the tick moved).
#[inline]
pub(crate) fn age(seg: &Seg, d: &Desc) -> u16 {
    let now = tick(seg);
    let last = d.stamp.load(Ordering::Relaxed) as u16;
    if last != now {
        d.stamp.store(u32::from(now), Ordering::Relaxed);
    }
    now.wrapping_sub(last)
}

/// The group's clock's tick now, as a page's stamp keeps it (its low 16
/// bits, wrapping as the private cache's clock does: `Mrc::now`).
#[inline]
fn tick(seg: &Seg) -> u16 {
    seg.clock().load(Ordering::Relaxed) as u16
}

/// A page held by this process: no one else changes its bytes, flags or
/// identity until it is dropped, which bumps its version.
pub(crate) struct Hold<'a> {
    pub(crate) d: &'a Desc,
    pub(crate) p: u64,
    version: u64,
}

impl Hold<'_> {
    /// The held page's bytes, to change.
    pub(crate) fn page<'s>(&self, seg: &'s Seg) -> io::Result<PageMem<'s>> {
        seg.page(self.p).ok_or_else(|| io::Error::other("no page"))
    }

    /// The version the page will have once let go.
    pub(crate) fn next_version(&self) -> u64 {
        (self.version + 1) & 0xffff_ffff
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.d
            .state
            .store(self.next_version() << 32, Ordering::Release);
    }
}

/// Holds page `p` if no one does; `Err(holder)` if someone does.
pub(crate) fn try_hold(seg: &Seg, p: u64, me: u32) -> Result<Option<Hold<'_>>, u32> {
    let Some(d) = seg.desc(p) else {
        return Ok(None);
    };
    let state = d.state.load(Ordering::Relaxed);
    if holder(state) != 0 {
        return Err(holder(state));
    }
    if d.state
        .compare_exchange(
            state,
            state | u64::from(me),
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .is_err()
    {
        return try_hold(seg, p, me);
    }
    // Readers that see a byte written from here on see the hold too.
    fence(Ordering::Release);
    Ok(Some(Hold {
        d,
        p,
        version: state >> 32,
    }))
}

/// Holds the page of `key` if it is cached: waits for a live holder,
/// repairs a dead one's page. A miss is checked under the index lock
/// (which rebuilds the buckets if a process died changing them), so
/// `None` means the page is not cached: the caller, holding the file's
/// inode lock, may load it without making a second page of one key.
pub(crate) fn hold_key<'s>(seg: &'s Seg, key: Key, me: u32) -> io::Result<Option<Hold<'s>>> {
    let mut spins = 0;
    loop {
        let p = match find(seg, key) {
            Found::Absent => {
                let _index = index_lock(seg, me)?;
                if matches!(find(seg, key), Found::Absent) {
                    return Ok(None);
                }
                continue;
            }
            Found::Page(p, _) => p,
            Found::Held(p, h) => {
                if !nap_on_holder(seg, h, &mut spins) {
                    repair_dead(seg, p, h, me)?;
                }
                continue;
            }
        };
        match try_hold(seg, p, me) {
            Ok(Some(hold)) => {
                let flags = hold.d.flags.load(Ordering::Relaxed);
                if key_of(hold.d) == key && flags & (F_USED | F_UPTODATE) == F_USED | F_UPTODATE {
                    return Ok(Some(hold));
                }
            }
            Ok(None) => return Ok(None),
            Err(h) => {
                if !nap_on_holder(seg, h, &mut spins) {
                    repair_dead(seg, p, h, me)?;
                }
            }
        }
    }
}

/// The index lock, rebuilding the index from the descriptors if its
/// holder died.
pub(crate) fn index_lock(seg: &Seg, me: u32) -> io::Result<Held<'_>> {
    let h = seg.header();
    let held = lock(seg, &h.index_lock, &h.index_waiters, me)?;
    if held.recovered {
        rebuild(seg);
    }
    Ok(held)
}

/// Page `p` is held by `dead`, which died holding it: under the index
/// lock, take it over; a page whose load never completed leaves the
/// index, one written part-way stays (dirty: its writer marked it before
/// copying), and the version moves on.
pub(crate) fn repair_dead(seg: &Seg, p: u64, dead: u32, me: u32) -> io::Result<()> {
    let _index = index_lock(seg, me)?;
    let Some(d) = seg.desc(p) else { return Ok(()) };
    let state = d.state.load(Ordering::Relaxed);
    if holder(state) != dead || alive(seg, dead) {
        return Ok(());
    }
    if d.state
        .compare_exchange(
            state,
            (state & !0xffff_ffff) | u64::from(me),
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .is_err()
    {
        return Ok(());
    }
    let hold = Hold {
        d,
        p,
        version: state >> 32,
    };
    if d.flags.load(Ordering::Relaxed) & F_UPTODATE == 0 {
        forget(seg, &hold);
    }
    Ok(())
}

/// Removes held page `hold` from the index and clears it. The index lock
/// is held.
pub(crate) fn forget(seg: &Seg, hold: &Hold<'_>) {
    let flags = hold.d.flags.load(Ordering::Relaxed);
    if flags & F_USED != 0 {
        unlink(seg, hold.p);
    }
    if flags & F_DIRTY != 0 {
        dec_dirty(seg);
    }
    hold.d.flags.store(0, Ordering::Relaxed);
    hold.d.slot.store(0, Ordering::Relaxed);
}

/// One dirty page fewer in the header's count (never below 0).
pub(crate) fn dec_dirty(seg: &Seg) {
    let _ = seg
        .header()
        .dirty
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
}

/// Puts page `p` (its identity set) into the buckets. The index lock is
/// held.
fn link(seg: &Seg, p: u64, key: Key) {
    let h = key.hash();
    for i in 0..seg.buckets {
        let b = seg.bucket(h.wrapping_add(i));
        let v = b.load(Ordering::Relaxed);
        if v == 0 || seg.page_of(v).is_none() {
            b.store(p as u32 + 1, Ordering::Release);
            return;
        }
    }
}

/// Takes page `p` out of the buckets, shifting the entries after it
/// back (linear probing's deletion: no tombstones). The index lock is
/// held.
fn unlink(seg: &Seg, p: u64) {
    let Some(d) = seg.desc(p) else { return };
    let h = key_of(d).hash();
    let mask = seg.buckets - 1;
    let mut hole = None;
    for i in 0..seg.buckets {
        let at = h.wrapping_add(i) & mask;
        let v = seg.bucket(at).load(Ordering::Relaxed);
        if v == 0 {
            break;
        }
        if u64::from(v) == p + 1 {
            hole = Some(at);
            break;
        }
    }
    let Some(mut hole) = hole else { return };
    seg.bucket(hole).store(0, Ordering::Release);
    point();
    let mut j = hole;
    for _ in 0..seg.buckets {
        j = (j + 1) & mask;
        let v = seg.bucket(j).load(Ordering::Relaxed);
        if v == 0 {
            return;
        }
        let home = match seg.page_of(v).and_then(|q| seg.desc(q)) {
            Some(dq) => key_of(dq).hash() & mask,
            // A scribble: drop it (the rebuild would).
            None => {
                seg.bucket(j).store(0, Ordering::Release);
                continue;
            }
        };
        // The entry at `j` may move to the hole unless its home lies
        // cyclically in (hole, j].
        if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
            seg.bucket(hole).store(v, Ordering::Release);
            point();
            seg.bucket(j).store(0, Ordering::Release);
            hole = j;
        }
    }
}

/// Gives held page `hold` the identity `key`, not uptodate, in the
/// index. The index lock is held and the page is clean.
pub(crate) fn assign(seg: &Seg, hold: &Hold<'_>, key: Key) {
    forget(seg, hold);
    point();
    hold.d.generation.store(key.generation, Ordering::Relaxed);
    hold.d.index.store(key.index, Ordering::Relaxed);
    hold.d.slot.store(key.slot, Ordering::Relaxed);
    hold.d.flags.store(F_USED, Ordering::Relaxed);
    // Its load (or write) is its first access: its age starts.
    hold.d.stamp.store(u32::from(tick(seg)), Ordering::Relaxed);
    point();
    link(seg, hold.p, key);
}

/// A page to reuse, held: the clock's next page that is free, or clean
/// and not read since the clock last passed. The index lock is held.
pub(crate) fn victim(seg: &Seg, me: u32) -> Option<Hold<'_>> {
    let h = seg.header();
    for step in 0..seg.pages * 3 {
        let p = h.hand.fetch_add(1, Ordering::Relaxed) % seg.pages;
        let d = seg.desc(p)?;
        let flags = d.flags.load(Ordering::Relaxed);
        if flags & F_USED != 0 && flags & F_DIRTY != 0 {
            continue;
        }
        if flags & F_REFERENCED != 0 && step < seg.pages * 2 {
            d.flags.fetch_and(!F_REFERENCED, Ordering::Relaxed);
            continue;
        }
        match try_hold(seg, p, me) {
            Ok(Some(hold)) => {
                point();
                if hold.d.flags.load(Ordering::Relaxed) & F_DIRTY == 0 {
                    if flags & F_USED != 0 {
                        h.evictions.fetch_add(1, Ordering::Relaxed);
                    }
                    return Some(hold);
                }
            }
            Ok(None) => return None,
            Err(holder) => {
                // A page its holder died with: take it over (the index
                // lock is ours already).
                if step >= seg.pages && !alive(seg, holder) {
                    if let Some(hold) = take_dead(seg, p, holder, me) {
                        return Some(hold);
                    }
                }
            }
        }
    }
    None
}

/// Takes over page `p` from `dead`, the index lock held; `None` if the
/// page was changed meanwhile, or holds dirty data (then released).
fn take_dead(seg: &Seg, p: u64, dead: u32, me: u32) -> Option<Hold<'_>> {
    let d = seg.desc(p)?;
    let state = d.state.load(Ordering::Relaxed);
    if holder(state) != dead {
        return None;
    }
    d.state
        .compare_exchange(
            state,
            (state & !0xffff_ffff) | u64::from(me),
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .ok()?;
    let hold = Hold {
        d,
        p,
        version: state >> 32,
    };
    (d.flags.load(Ordering::Relaxed) & F_DIRTY == 0).then_some(hold)
}

/// Rebuilds the buckets and the dirty count from the descriptors: what
/// the index lock's next holder does when its last holder died with it
/// (a bucket change half-done).
pub(crate) fn rebuild(seg: &Seg) {
    for b in 0..seg.buckets {
        seg.bucket(b).store(0, Ordering::Release);
    }
    let mut dirty = 0;
    for p in 0..seg.pages {
        let Some(d) = seg.desc(p) else { break };
        let flags = d.flags.load(Ordering::Relaxed);
        if flags & F_USED != 0 {
            link(seg, p, key_of(d));
        }
        dirty += u64::from(flags & F_DIRTY != 0);
    }
    seg.header().dirty.store(dirty, Ordering::Relaxed);
}

/// The largest file page a read or write reaches (an offset fits an
/// `i64`): a descriptor naming a larger one is a scribble.
pub(crate) const MAX_INDEX: u64 = (i64::MAX as u64) / PAGE;

/// The pages of (slot, generation), dirty ones only if `dirty`: `(file
/// page, page)` sorted by file page. A scan of the descriptors in use
/// (`Seg::descs_in_use`; no lock: the caller holds each page before it
/// uses it).
pub(crate) fn pages_of(seg: &Seg, slot: u32, generation: u32, dirty: bool) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    for p in seg.descs_in_use() {
        let Some(d) = seg.desc(p) else { break };
        let flags = d.flags.load(Ordering::Relaxed);
        if flags & F_USED == 0 || (dirty && flags & F_DIRTY == 0) {
            continue;
        }
        let index = d.index.load(Ordering::Relaxed);
        if d.slot.load(Ordering::Relaxed) == slot
            && d.generation.load(Ordering::Relaxed) == generation
            && index <= MAX_INDEX
        {
            v.push((index, p));
        }
    }
    v.sort_unstable();
    v
}

/// The dirty pages of (`slot`, `generation`) at file pages `lo..=hi`, as
/// `(index, page)`: what [`pages_of`] finds among them, by a lookup of
/// each rather than a walk of every descriptor. The index lock is held
/// (a lookup racing a shift of the buckets could miss a page).
pub(crate) fn dirty_in(seg: &Seg, slot: u32, generation: u32, lo: u64, hi: u64) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    for index in lo..=hi.min(MAX_INDEX) {
        let key = Key {
            slot,
            generation,
            index,
        };
        let h = key.hash();
        for i in 0..seg.buckets {
            let b = seg.bucket(h.wrapping_add(i)).load(Ordering::Acquire);
            if b == 0 {
                break;
            }
            let Some(p) = seg.page_of(b) else { continue };
            let Some(d) = seg.desc(p) else { continue };
            if key_of(d) == key {
                if d.flags.load(Ordering::Relaxed) & (F_USED | F_DIRTY) == F_USED | F_DIRTY {
                    v.push((index, p));
                }
                break;
            }
        }
    }
    v
}

impl super::SharedCache {
    /// Checks the segment's invariants (every used page in the index
    /// once and found by its identity, no two pages of one file page,
    /// nothing else there, no page held
    /// by a live process): for tests and after a crash, with no call of
    /// the group's in flight. A page a dead process held is not an error
    /// (the next process to meet it repairs it); the index is checked
    /// under its lock, so that a process that died changing it (buckets
    /// half-shifted) has had it rebuilt first, as any taker of the lock
    /// does (a lookup without the lock that misses checks again under it).
    pub fn verify(&self) -> io::Result<()> {
        let seg = &self.inner.seg;
        let _index = index_lock(seg, self.inner.me.id(seg)?)?;
        check(seg).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }
}

/// What [`check`] found wrong, if anything.
pub(crate) fn check(seg: &Seg) -> Result<(), String> {
    let mut in_index = vec![false; seg.pages as usize];
    for b in 0..seg.buckets {
        let v = seg.bucket(b).load(Ordering::Relaxed);
        if v == 0 {
            continue;
        }
        let p = seg
            .page_of(v)
            .ok_or_else(|| format!("bucket {b}: page {} past the table", v - 1))?;
        if std::mem::replace(&mut in_index[p as usize], true) {
            return Err(format!("page {p} in two buckets"));
        }
        let d = seg.desc(p).ok_or("no descriptor")?;
        if d.flags.load(Ordering::Relaxed) & F_USED == 0 {
            return Err(format!("page {p} in the index but not used"));
        }
    }
    let mut keys = std::collections::HashSet::new();
    for p in 0..seg.pages {
        let d = seg.desc(p).ok_or("no descriptor")?;
        if d.flags.load(Ordering::Relaxed) & F_USED != 0 && !keys.insert(key_of(d)) {
            return Err(format!("two pages hold {:?}", key_of(d)));
        }
        let state = d.state.load(Ordering::Relaxed);
        if holder(state) != 0 && !alive(seg, holder(state)) {
            continue;
        }
        if holder(state) != 0 {
            return Err(format!(
                "page {p} held by live participant {}",
                holder(state)
            ));
        }
        let used = d.flags.load(Ordering::Relaxed) & F_USED != 0;
        if used != in_index[p as usize] {
            return Err(format!("page {p}: used {used}, in the index {}", !used));
        }
        if used {
            let key = key_of(d);
            match find(seg, key) {
                Found::Page(q, _) | Found::Held(q, _) if q == p => {}
                Found::Absent if d.flags.load(Ordering::Relaxed) & F_UPTODATE == 0 => {}
                _ => return Err(format!("page {p} ({key:?}) not found by its key")),
            }
            // A dirty page lies in its file's dirty range, which a
            // writeback looks up (`Slot::dirty_lo`).
            let slot = seg.slot(key.slot).ok_or("no slot")?;
            let current = slot.generation.load(Ordering::Relaxed) == key.generation;
            let (lo, hi) = (
                slot.dirty_lo.load(Ordering::Relaxed),
                slot.dirty_hi.load(Ordering::Relaxed),
            );
            if current
                && d.flags.load(Ordering::Relaxed) & F_DIRTY != 0
                && !(lo..=hi).contains(&key.index)
            {
                return Err(format!(
                    "page {p} ({key:?}) dirty outside its file's dirty range {lo}..={hi}"
                ));
            }
        }
    }
    Ok(())
}
