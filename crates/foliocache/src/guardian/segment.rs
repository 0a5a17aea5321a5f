//! The guardian's segment: one memory file (`memfd_create`) that holds the
//! cache's folio memory and the state a second process needs to write
//! back what the cache leaves unsaved (docs/design.md, section 12).
//!
//! ```text
//!  0             header: magic, version, page size, pages, slots, offsets,
//!                the owner's pid
//!  SLOTS_OFF     file slots: SLOT_BYTES each; slot 0 is never used
//!  owners_off    one u64 per arena page: (slot << INDEX_BITS) | file page
//!  unsaved_off   one bit per arena page
//!  arena_off     the arena (2 MiB aligned): `pages` pages of folio memory
//! ```
//!
//! No pointer is stored: every place is an offset from the segment's start
//! or a page number, and a reader ([`View`]) checks each before use, so a
//! segment scribbled on can make recovery write wrong bytes, never read or
//! write outside the segment.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use rustix::mm::{self, MapFlags, ProtFlags};

/// The memory file's name (`/proc/PID/fd` shows `/memfd:` and it): how
/// an inherited fd is known for a segment.
pub(crate) const NAME: &str = "foliocache-guardian";
/// `FCGUARD1`, little-endian.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"FCGUARD1");
/// The layout's version.
pub(crate) const VERSION: u32 = 1;
/// The arena's page size.
pub(crate) const PAGE: u64 = 4096;
/// Bytes of a file slot.
pub(crate) const SLOT_BYTES: u64 = 4096;
/// Bytes of a slot before its path.
const SLOT_HEAD: u64 = 64;
/// The longest path a slot holds, its NUL included.
pub(crate) const SLOT_PATH: usize = (SLOT_BYTES - SLOT_HEAD) as usize;
/// Bits of an owner word that hold the file page.
pub(crate) const INDEX_BITS: u32 = 44;
/// The largest file page an owner word holds.
pub(crate) const MAX_FILE_PAGE: u64 = (1 << INDEX_BITS) - 1;
/// The most slots a segment has (slot numbers are 20 bits; 0 is none).
pub(crate) const MAX_SLOTS: u64 = (1 << (64 - INDEX_BITS)) - 1;
/// Where the slots start: after the header's page.
pub(crate) const SLOTS_OFF: u64 = PAGE;
/// The arena's alignment in the segment (a 2 MiB folio's).
const ARENA_ALIGN: u64 = 2 << 20;

/// A slot's state.
pub(crate) const SLOT_FREE: u32 = 0;
/// A slot being filled: not yet to be read.
pub(crate) const SLOT_FILLING: u32 = 1;
/// A slot in use: its file, size and path are set.
pub(crate) const SLOT_USED: u32 = 2;

/// The header, at offset 0. Every field is an atomic: the segment is
/// shared memory.
#[repr(C)]
pub(crate) struct Header {
    pub(crate) magic: AtomicU64,
    pub(crate) version: AtomicU32,
    /// The owner's pid, 0 when unclaimed.
    pub(crate) owner: AtomicU32,
    pub(crate) page: AtomicU64,
    /// Arena pages.
    pub(crate) pages: AtomicU64,
    /// File slots (slot 0 included, never used).
    pub(crate) slots: AtomicU64,
    pub(crate) owners_off: AtomicU64,
    pub(crate) unsaved_off: AtomicU64,
    pub(crate) arena_off: AtomicU64,
    /// The segment's length.
    pub(crate) len: AtomicU64,
}

/// A file slot's head; its path follows at `SLOT_HEAD`.
#[repr(C)]
pub(crate) struct SlotHead {
    pub(crate) state: AtomicU32,
    /// The path's length, its NUL excluded.
    pub(crate) path_len: AtomicU32,
    pub(crate) dev: AtomicU64,
    pub(crate) ino: AtomicU64,
    /// The file's size in the cache (`i_size`).
    pub(crate) size: AtomicU64,
    /// The file's generation (`persist::file_version`; 0 unknown).
    pub(crate) version: AtomicU64,
}

/// Where each part of a segment of `pages` arena pages and `slots` slots
/// lies: `(owners_off, unsaved_off, arena_off, len)`, or `None` if it
/// overflows.
pub(crate) fn layout(pages: u64, slots: u64) -> Option<(u64, u64, u64, u64)> {
    let owners = SLOTS_OFF.checked_add(slots.checked_mul(SLOT_BYTES)?)?;
    let unsaved = owners
        .checked_add(pages.checked_mul(8)?)?
        .next_multiple_of(PAGE);
    let bits = pages.div_ceil(64).checked_mul(8)?;
    let arena = unsaved.checked_add(bits)?.next_multiple_of(ARENA_ALIGN);
    let len = arena.checked_add(pages.checked_mul(PAGE)?)?;
    Some((owners, unsaved, arena, len))
}

/// The slots a segment of `pages` arena pages gets: one per 16 pages,
/// at least 256 (files with unsaved data at once; a slot's memory is
/// touched only when used).
pub(crate) fn slots_for(pages: u64) -> u64 {
    (pages / 16).clamp(256, MAX_SLOTS)
}

/// Whether process `pid` exists.
fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 sends nothing; it asks whether the process exists.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// A mapping of part of a segment, unmapped on drop (by system calls
/// only: a guardian child maps the segment with it).
pub(crate) struct Map {
    ptr: NonNull<u8>,
    len: usize,
}

impl Map {
    /// Maps `len` bytes of `fd` from `offset`, shared, `writable` or not.
    pub(crate) fn new(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: u64,
        writable: bool,
    ) -> io::Result<Map> {
        let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
        let prot = if writable {
            ProtFlags::READ | ProtFlags::WRITE
        } else {
            ProtFlags::READ
        };
        // SAFETY: a fresh shared mapping of the memory file with no
        // address hint: it overlaps nothing anyone uses, and the memory it
        // maps is only ever reached through atomics or bytes copied out.
        let raw = unsafe {
            mm::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                MapFlags::SHARED,
                fd,
                offset,
            )
        }?;
        let ptr = NonNull::new(raw.cast::<u8>()).ok_or_else(|| io::Error::other("null mapping"))?;
        Ok(Map { ptr, len })
    }

    /// Maps `len` bytes of `fd` from `offset`, shared and writable, at an
    /// address that is a multiple of `align` (a power of two, a multiple
    /// of the page size): a range of `len + align` reserved with no
    /// access, the file mapped over its aligned part (`MAP_FIXED`), the
    /// rest given back. With `offset` a multiple of 2 MiB and `align`
    /// 2 MiB, each 2 MiB of the file can be mapped by one huge page.
    pub(crate) fn new_aligned(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: u64,
        align: usize,
    ) -> io::Result<Map> {
        let oom = || io::Error::from(io::ErrorKind::OutOfMemory);
        let len = usize::try_from(len).map_err(|_| oom())?;
        let reserve = len.checked_add(align).ok_or_else(oom)?;
        // SAFETY: a fresh anonymous mapping with no address hint and no
        // access: it overlaps nothing anyone uses.
        let raw = unsafe {
            mm::mmap_anonymous(
                std::ptr::null_mut(),
                reserve,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }?
        .cast::<u8>();
        let head = (raw as usize).next_multiple_of(align) - raw as usize;
        let aligned = raw.wrapping_add(head);
        // SAFETY: [aligned, aligned + len) lies in the reservation just
        // made, which nobody else knows: the file replaces memory no one
        // uses (MAP_FIXED).
        let mapped = unsafe {
            mm::mmap(
                aligned.cast(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED | MapFlags::FIXED,
                fd,
                offset,
            )
        };
        let tail = reserve - head - len;
        // SAFETY: the parts of the reservation before and after the
        // aligned range (or, if the file could not be mapped, all of it),
        // which no one uses.
        unsafe {
            if mapped.is_err() {
                let _ = mm::munmap(raw.cast(), reserve);
            } else {
                if head > 0 {
                    let _ = mm::munmap(raw.cast(), head);
                }
                if tail > 0 {
                    let _ = mm::munmap(aligned.wrapping_add(len).cast(), tail);
                }
            }
        }
        mapped?;
        let ptr = NonNull::new(aligned).ok_or_else(|| io::Error::other("null mapping"))?;
        Ok(Map { ptr, len })
    }

    /// Gives the mapping up to the caller, who unmaps it: its first byte
    /// and its length (the arena's `Region` takes it over).
    #[cfg_attr(miri, allow(dead_code))]
    pub(crate) fn into_raw(self) -> (NonNull<u8>, usize) {
        let me = std::mem::ManuallyDrop::new(self);
        (me.ptr, me.len)
    }

    /// The mapping's first byte (page-aligned) and its length.
    pub(crate) fn range(&self) -> (*mut u8, usize) {
        (self.ptr.as_ptr(), self.len)
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `new`, no longer used (its
        // owner is being dropped).
        let _ = unsafe { mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// The cache's side of a segment: made with the cache, written as it
/// runs. Its arena part is mapped by the arena.
pub(crate) struct Segment {
    fd: OwnedFd,
    /// The metadata: header, slots, owners, unsaved bits.
    meta: Map,
    pages: u64,
    slots: u64,
    owners_off: u64,
    unsaved_off: u64,
    arena_off: u64,
}

// SAFETY: the mapping is reached only through atomics (and bytes of slot
// paths, written before the slot is published with a release store).
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

impl Segment {
    /// A new segment in a new memory file, for an arena of `pages` pages.
    pub(crate) fn create(pages: u64) -> io::Result<Segment> {
        let fd = rustix::fs::memfd_create(NAME, rustix::fs::MemfdFlags::CLOEXEC)?;
        Segment::claim(fd, pages)
    }

    /// Claims the memory file `fd` (a launcher's, or [`create`]'s) for
    /// this process and lays out in it a segment for an arena of `pages`
    /// pages, dropping what a previous image of this process left there.
    /// Refused if another live process claimed it: exactly one process
    /// wins a race to claim a file (a compare-and-swap of the header's
    /// owner).
    ///
    /// [`create`]: Self::create
    pub(crate) fn claim(fd: OwnedFd, pages: u64) -> io::Result<Segment> {
        let me = std::process::id();
        let slots = slots_for(pages);
        let too_large = || {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the guardian's segment is too large",
            )
        };
        let (owners_off, unsaved_off, arena_off, len) =
            layout(pages, slots).ok_or_else(too_large)?;
        if rustix::fs::fstat(&fd)?.st_size < PAGE as i64 {
            // (Only ever grows the file: a racing claimer's header stays.)
            rustix::fs::fallocate(&fd, rustix::fs::FallocateFlags::empty(), 0, PAGE)?;
        }
        {
            let head = Map::new(fd.as_fd(), 0, PAGE, true)?;
            // SAFETY: the header is the first bytes of the mapping
            // (page-aligned, a page long), made only of atomics.
            let header = unsafe { head.ptr.cast::<Header>().as_ref() };
            let owner = header.owner.load(Ordering::Acquire);
            if owner != 0 && owner != me && alive(owner) {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("the guardian's segment belongs to process {owner}"),
                ));
            }
            if header
                .owner
                .compare_exchange(owner, me, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "another process claimed the guardian's segment first",
                ));
            }
        }
        // Everything past the header emptied (a previous image of this
        // process wrote it all back), then sized: every byte reads as
        // zero (no slot in use, no page unsaved), and memory is taken only
        // where written.
        rustix::fs::ftruncate(&fd, PAGE)?;
        rustix::fs::ftruncate(&fd, len)?;
        let meta = Map::new(fd.as_fd(), 0, arena_off, true)?;
        // Not inherited by a child of `fork` (as the arena: `Region::
        // map_shared_aligned`): the child's copy of the cache must not mark
        // the parent's pages.
        // SAFETY: MADV_DONTFORK changes what a fork copies, not the memory;
        // the range is exactly the metadata mapping.
        unsafe {
            mm::madvise(
                meta.ptr.as_ptr().cast(),
                meta.len,
                mm::Advice::LinuxDontFork,
            )
        }?;
        let seg = Segment {
            fd,
            meta,
            pages,
            slots,
            owners_off,
            unsaved_off,
            arena_off,
        };
        let h = seg.header();
        h.page.store(PAGE, Ordering::Relaxed);
        h.pages.store(pages, Ordering::Relaxed);
        h.slots.store(slots, Ordering::Relaxed);
        h.owners_off.store(owners_off, Ordering::Relaxed);
        h.unsaved_off.store(unsaved_off, Ordering::Relaxed);
        h.arena_off.store(arena_off, Ordering::Relaxed);
        h.len.store(len, Ordering::Relaxed);
        h.version.store(VERSION, Ordering::Relaxed);
        // Last: a reader that finds the magic finds the rest.
        h.magic.store(MAGIC, Ordering::Release);
        Ok(seg)
    }

    /// The memory file.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Where the arena starts in the memory file.
    pub(crate) fn arena_offset(&self) -> u64 {
        self.arena_off
    }

    /// Arena pages.
    #[cfg(test)]
    pub(crate) fn pages(&self) -> u64 {
        self.pages
    }

    /// File slots, slot 0 included.
    pub(crate) fn slots(&self) -> u64 {
        self.slots
    }

    fn header(&self) -> &Header {
        // SAFETY: the header is the first bytes of the metadata mapping
        // (page-aligned, larger than a Header), made only of atomics.
        unsafe { self.meta.ptr.cast::<Header>().as_ref() }
    }

    /// Slot `slot`'s head; `slot` is below [`slots`](Self::slots).
    fn slot_head(&self, slot: u32) -> &SlotHead {
        assert!(u64::from(slot) < self.slots, "slot {slot} out of range");
        let off = SLOTS_OFF + u64::from(slot) * SLOT_BYTES;
        // SAFETY: `off` is inside the slots part of the metadata mapping
        // (checked above), 64-byte aligned, and the head is atomics.
        unsafe { self.meta.ptr.add(off as usize).cast::<SlotHead>().as_ref() }
    }

    /// Fills slot `slot` (free, and this process's alone to fill) with a
    /// file's identity, size and path, and publishes it. `false`, with
    /// the slot left free, if the path does not fit.
    pub(crate) fn fill_slot(&self, slot: u32, id: (u64, u64, u64), size: u64, path: &[u8]) -> bool {
        let (dev, ino, version) = id;
        if path.len() >= SLOT_PATH || path.contains(&0) {
            return false;
        }
        let head = self.slot_head(slot);
        head.state.store(SLOT_FILLING, Ordering::Relaxed);
        head.dev.store(dev, Ordering::Relaxed);
        head.ino.store(ino, Ordering::Relaxed);
        head.size.store(size, Ordering::Relaxed);
        head.version.store(version, Ordering::Relaxed);
        head.path_len.store(path.len() as u32, Ordering::Relaxed);
        let at = SLOTS_OFF + u64::from(slot) * SLOT_BYTES + SLOT_HEAD;
        // SAFETY: the path's bytes and its NUL fit in the slot (checked),
        // which lies inside the metadata mapping; no one reads an unpublished
        // slot's path (recovery reads only slots in use, after this process
        // is gone).
        unsafe {
            let dst = self.meta.ptr.add(at as usize).as_ptr();
            std::ptr::copy_nonoverlapping(path.as_ptr(), dst, path.len());
            dst.add(path.len()).write(0);
        }
        head.state.store(SLOT_USED, Ordering::Release);
        true
    }

    /// The file of slot `slot` now has `size` bytes.
    #[inline]
    pub(crate) fn set_slot_size(&self, slot: u32, size: u64) {
        self.slot_head(slot).size.store(size, Ordering::Release);
    }

    /// Slot `slot` is free again (its file has nothing unsaved).
    pub(crate) fn free_slot(&self, slot: u32) {
        self.slot_head(slot)
            .state
            .store(SLOT_FREE, Ordering::Release);
    }

    fn owner_word(&self, page: u64) -> &AtomicU64 {
        assert!(page < self.pages, "page {page} out of range");
        // SAFETY: inside the owners part (checked), 8-byte aligned.
        unsafe {
            self.meta
                .ptr
                .add((self.owners_off + page * 8) as usize)
                .cast::<AtomicU64>()
                .as_ref()
        }
    }

    fn unsaved_word(&self, page: u64) -> &AtomicU64 {
        assert!(page < self.pages, "page {page} out of range");
        // SAFETY: inside the unsaved part (checked), 8-byte aligned.
        unsafe {
            self.meta
                .ptr
                .add((self.unsaved_off + page / 64 * 8) as usize)
                .cast::<AtomicU64>()
                .as_ref()
        }
    }

    /// Arena pages `page..page + n` hold pages `file_page..` of the file of
    /// `slot`, which the file does not have yet: their owners are written,
    /// then their bits set (release), so a set bit names its owner.
    /// (A file page past [`MAX_FILE_PAGE`], 64 PiB, is left unmarked:
    /// unprotected, never written to a wrong place.)
    pub(crate) fn mark_unsaved(&self, page: u64, n: u64, slot: u32, file_page: u64) {
        if file_page.saturating_add(n) > MAX_FILE_PAGE {
            return;
        }
        for i in 0..n {
            self.owner_word(page + i).store(
                (u64::from(slot) << INDEX_BITS) | (file_page + i),
                Ordering::Relaxed,
            );
        }
        self.update_bits(page, n, true);
    }

    /// Arena pages `page..page + n` are saved (written back), or hold
    /// nothing of any file any more.
    pub(crate) fn clear_unsaved(&self, page: u64, n: u64) {
        self.update_bits(page, n, false);
    }

    fn update_bits(&self, page: u64, n: u64, set: bool) {
        let mut p = page;
        let end = page + n;
        while p < end {
            let bit = p % 64;
            let take = (64 - bit).min(end - p);
            let mask = if take == 64 {
                u64::MAX
            } else {
                ((1u64 << take) - 1) << bit
            };
            let w = self.unsaved_word(p);
            if set {
                w.fetch_or(mask, Ordering::Release);
            } else {
                w.fetch_and(!mask, Ordering::Release);
            }
            p += take;
        }
    }

    /// How many arena pages are unsaved (a walk of the bits: for tests and
    /// statistics).
    #[cfg(test)]
    pub(crate) fn unsaved_pages(&self) -> u64 {
        (0..self.pages.div_ceil(64))
            .map(|w| {
                u64::from(
                    self.unsaved_word(w * 64)
                        .load(Ordering::Relaxed)
                        .count_ones(),
                )
            })
            .sum()
    }
}

/// A reader's view of a segment (recovery's), over the whole memory file
/// mapped read-only. Another process may still write the segment (its
/// owner, or one that scribbles on it): every place is read with a
/// volatile load after a check against the segment's length, never
/// through a Rust reference to the shared bytes, so nothing it reads can
/// make it read outside the mapping, and nothing written meanwhile is a
/// data race in this process.
pub(crate) struct View {
    base: *const u8,
    len: usize,
    pub(crate) pages: u64,
    pub(crate) slots: u64,
    owners_off: u64,
    unsaved_off: u64,
    arena_off: u64,
}

impl View {
    /// The view of the segment mapped at `base`, `len` bytes, or why it is
    /// not one.
    ///
    /// # Safety
    /// `base..base + len` stays mapped readable while the view lives, and
    /// `base` is page-aligned.
    pub(crate) unsafe fn new(base: *const u8, len: usize) -> Result<View, &'static str> {
        let mut view = View {
            base,
            len,
            pages: 0,
            slots: 0,
            owners_off: 0,
            unsaved_off: 0,
            arena_off: 0,
        };
        let field = |off: u64| view.word(off).ok_or("shorter than its header");
        if field(0)? != MAGIC {
            return Err("no segment (bad magic)");
        }
        if field(8)? as u32 != VERSION {
            return Err("another version");
        }
        if field(16)? != PAGE {
            return Err("another page size");
        }
        let (pages, slots) = (field(24)?, field(32)?);
        if slots > MAX_SLOTS + 1 {
            return Err("too many slots");
        }
        let (owners_off, unsaved_off, arena_off, end) =
            layout(pages, slots).ok_or("overflowing sizes")?;
        if (field(40)?, field(48)?, field(56)?, field(64)?)
            != (owners_off, unsaved_off, arena_off, end)
        {
            return Err("offsets that do not match its sizes");
        }
        if end > len as u64 {
            return Err("shorter than its layout");
        }
        view.pages = pages;
        view.slots = slots;
        view.owners_off = owners_off;
        view.unsaved_off = unsaved_off;
        view.arena_off = arena_off;
        Ok(view)
    }

    /// The u64 at `off` (a multiple of 8), if inside the segment.
    fn word(&self, off: u64) -> Option<u64> {
        let end = off.checked_add(8)?;
        if end > self.len as u64 || !off.is_multiple_of(8) {
            return None;
        }
        // SAFETY: `off..off + 8` is inside the mapping (checked), aligned
        // (the base is page-aligned, `off` a multiple of 8); a volatile load
        // of memory another process may write.
        Some(u64::from_le(unsafe {
            std::ptr::read_volatile(self.base.add(off as usize).cast::<u64>())
        }))
    }

    /// The u64 at `off`, or 0 past the segment (which every caller's checks
    /// keep it inside: 0 reads as "nothing here").
    fn u64_at(&self, off: u64) -> u64 {
        self.word(off).unwrap_or(0)
    }

    /// Slot `slot`, if in use: its file (device, inode, generation), its
    /// size, and its path, copied into `path` (the segment's bytes may
    /// change meanwhile).
    pub(crate) fn slot<'p>(
        &self,
        slot: u64,
        path: &'p mut [u8; SLOT_PATH],
    ) -> Option<((u64, u64, u64), u64, &'p std::ffi::CStr)> {
        if slot == 0 || slot >= self.slots {
            return None;
        }
        let at = SLOTS_OFF + slot * SLOT_BYTES;
        let head = self.u64_at(at);
        if head as u32 != SLOT_USED {
            return None;
        }
        let path_len = (head >> 32) as usize;
        if path_len == 0 || path_len >= SLOT_PATH {
            return None;
        }
        let start = at + SLOT_HEAD;
        if start + path_len as u64 >= self.len as u64 {
            return None;
        }
        for (i, b) in path.iter_mut().take(path_len + 1).enumerate() {
            // SAFETY: inside the mapping (checked above); a volatile byte
            // load.
            *b = unsafe { std::ptr::read_volatile(self.base.add(start as usize + i)) };
        }
        let path = std::ffi::CStr::from_bytes_with_nul(&path[..=path_len]).ok()?;
        Some((
            (
                self.u64_at(at + 8),
                self.u64_at(at + 16),
                self.u64_at(at + 32),
            ),
            self.u64_at(at + 24),
            path,
        ))
    }

    /// The unsaved bits of pages `64 * w..64 * w + 64`.
    pub(crate) fn unsaved_word(&self, w: u64) -> u64 {
        let mut bits = self.u64_at(self.unsaved_off + w * 8);
        let last = self.pages.saturating_sub(w * 64);
        if last < 64 {
            bits &= (1u64 << last) - 1;
        }
        bits
    }

    /// Words of unsaved bits.
    pub(crate) fn unsaved_words(&self) -> u64 {
        self.pages.div_ceil(64)
    }

    /// Arena page `page`'s owner: (slot, file page).
    pub(crate) fn owner(&self, page: u64) -> (u64, u64) {
        let w = self.u64_at(self.owners_off + page * 8);
        (w >> INDEX_BITS, w & MAX_FILE_PAGE)
    }

    /// Where arena pages `page..page + n` start in the mapping
    /// (`page + n <= pages`, which the layout's check keeps inside it): an
    /// address for a system call to read, never a Rust reference.
    pub(crate) fn arena_ptr(&self, page: u64, n: u64) -> Option<*const u8> {
        let start = self.arena_off.checked_add(page.checked_mul(PAGE)?)?;
        let end = start.checked_add(n.checked_mul(PAGE)?)?;
        // SAFETY: `start <= end <= len`: inside the mapping.
        (end <= self.len as u64).then(|| unsafe { self.base.add(start as usize) })
    }
}
