//! The guardian's segment: one memory file (`memfd_create`) that holds the
//! cache's folio memory and the state a second process needs to write
//! back what the cache leaves unsaved (docs/design.md, section 12).
//!
//! ```text
//!  0             header: magic, version, page size, pages, slots, offsets,
//!                the owner's pid
//!  PAGE          file slots: SLOT_BYTES each; slot 0 is never used
//!  owners_off    one u64 per arena page: (slot << INDEX_BITS) | file page
//!  unsaved_off   one bit per arena page
//!  arena_off     the arena (2 MiB aligned): `pages` pages of folio memory
//! ```
//!
//! No pointer is stored: every place is an offset from the segment's start
//! or a page number, checked against the mapping before use (`shm.rs`),
//! and a reader ([`View`]) checks each against the header's counts too, so
//! a segment scribbled on can make recovery write wrong bytes, never read
//! or write outside the segment. The page, the header's page and the
//! slots' layout are `shm.rs`'s, as the group's segment's.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use rustix::mm;

use crate::arena::collapse::HUGE_BLOCK;
pub(crate) use crate::shm::PAGE;
use crate::shm::{
    Atomics, Map, HEADER_BYTES, SLOT_BYTES, SLOT_FREE, SLOT_HEAD, SLOT_PATH, SLOT_USED,
};

/// The memory file's name (`/proc/PID/fd` shows `/memfd:` and it): how
/// an inherited fd is known for a segment.
pub(crate) const NAME: &str = "foliocache-guardian";
/// `FCGUARD1`, little-endian.
const MAGIC: u64 = u64::from_le_bytes(*b"FCGUARD1");
/// The layout's version (2: the slots' layout and states `shm.rs`'s).
const VERSION: u32 = 2;
/// Bits of an owner word that hold the file page.
pub(crate) const INDEX_BITS: u32 = 44;
/// The largest file page an owner word holds.
pub(crate) const MAX_FILE_PAGE: u64 = (1 << INDEX_BITS) - 1;
/// The most slots a segment has (slot numbers are 20 bits; 0 is none).
pub(crate) const MAX_SLOTS: u64 = (1 << (64 - INDEX_BITS)) - 1;
/// Where the slots start: after the header's page.
const SLOTS_OFF: u64 = HEADER_BYTES;
/// The arena's alignment in the segment (a 2 MiB folio's).
const ARENA_ALIGN: u64 = HUGE_BLOCK as u64;

/// A slot's state besides `shm.rs`'s free and used: being filled, not
/// yet to be read.
const SLOT_FILLING: u32 = 2;

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

// SAFETY: `repr(C)`, atomics only.
unsafe impl Atomics for Header {}

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

// SAFETY: `repr(C)`, atomics only.
unsafe impl Atomics for SlotHead {}
const _: () = assert!(std::mem::size_of::<SlotHead>() as u64 <= SLOT_HEAD);

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
        Segment::claim(backing::place_descriptor(fd), pages)
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
            let header = head
                .at::<Header>(0)
                .ok_or_else(|| io::Error::other("no header"))?;
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
        let (base, meta_len) = meta.range();
        // SAFETY: MADV_DONTFORK changes what a fork copies, not the memory;
        // the range is exactly the metadata mapping.
        unsafe { mm::madvise(base.cast(), meta_len, mm::Advice::LinuxDontFork) }?;
        let seg = Segment {
            fd,
            meta,
            pages,
            slots,
            owners_off,
            unsaved_off,
            arena_off,
        };
        let h = seg.header().ok_or_else(|| io::Error::other("no header"))?;
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

    fn header(&self) -> Option<&Header> {
        self.meta.at(0)
    }

    /// Slot `slot`'s head, or `None` past the table.
    fn slot_head(&self, slot: u32) -> Option<&SlotHead> {
        let slot = u64::from(slot);
        (slot < self.slots)
            .then(|| self.meta.at(SLOTS_OFF + slot * SLOT_BYTES))
            .flatten()
    }

    /// Fills slot `slot` (free, and this process's alone to fill) with a
    /// file's identity, size and path, and publishes it. `false`, with
    /// the slot left free, if the path does not fit.
    pub(crate) fn fill_slot(&self, slot: u32, id: (u64, u64, u64), size: u64, path: &[u8]) -> bool {
        let (dev, ino, version) = id;
        let at = SLOTS_OFF + u64::from(slot) * SLOT_BYTES + SLOT_HEAD;
        let dst = self.meta.bytes(at, path.len() as u64 + 1);
        let (Some(head), Some(dst)) = (self.slot_head(slot), dst) else {
            return false;
        };
        if path.len() >= SLOT_PATH || path.contains(&0) {
            return false;
        }
        head.state.store(SLOT_FILLING, Ordering::Relaxed);
        head.dev.store(dev, Ordering::Relaxed);
        head.ino.store(ino, Ordering::Relaxed);
        head.size.store(size, Ordering::Relaxed);
        head.version.store(version, Ordering::Relaxed);
        head.path_len.store(path.len() as u32, Ordering::Relaxed);
        // SAFETY: the path's bytes and its NUL lie in the mapping (checked)
        // and fit in the slot (checked); no one reads an unpublished slot's
        // path (recovery reads only slots in use, after this process is
        // gone).
        unsafe {
            std::ptr::copy_nonoverlapping(path.as_ptr(), dst, path.len());
            dst.add(path.len()).write(0);
        }
        head.state.store(SLOT_USED, Ordering::Release);
        true
    }

    /// The file of slot `slot` now has `size` bytes.
    #[inline]
    pub(crate) fn set_slot_size(&self, slot: u32, size: u64) {
        if let Some(head) = self.slot_head(slot) {
            head.size.store(size, Ordering::Release);
        }
    }

    /// Slot `slot` is free again (its file has nothing unsaved).
    pub(crate) fn free_slot(&self, slot: u32) {
        if let Some(head) = self.slot_head(slot) {
            head.state.store(SLOT_FREE, Ordering::Release);
        }
    }

    /// Arena page `page`'s owner word, or `None` past the arena.
    fn owner_word(&self, page: u64) -> Option<&AtomicU64> {
        (page < self.pages)
            .then(|| self.meta.at(self.owners_off + page * 8))
            .flatten()
    }

    /// The word of arena page `page`'s unsaved bit, or `None` past the
    /// arena.
    fn unsaved_word(&self, page: u64) -> Option<&AtomicU64> {
        (page < self.pages)
            .then(|| self.meta.at(self.unsaved_off + page / 64 * 8))
            .flatten()
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
            let Some(owner) = self.owner_word(page + i) else {
                return;
            };
            owner.store(
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
            let Some(w) = self.unsaved_word(p) else {
                return;
            };
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
                self.unsaved_word(w * 64)
                    .map_or(0, |w| u64::from(w.load(Ordering::Relaxed).count_ones()))
            })
            .sum()
    }
}

/// A reader's view of a segment (recovery's), over the whole memory file
/// mapped read-only. Another process may still write the segment (its
/// owner, or one that scribbles on it): every place is read with a
/// volatile load after the mapping's check (`Map::read_u64`), never
/// through a Rust reference to the shared bytes, so nothing it reads can
/// make it read outside the mapping, and nothing written meanwhile is a
/// data race in this process.
pub(crate) struct View<'a> {
    map: &'a Map,
    /// What of the memory file holds data: a slot or a word of unsaved
    /// bits in a hole is read as empty without faulting it in.
    extents: Extents<'a>,
    pub(crate) pages: u64,
    pub(crate) slots: u64,
    owners_off: u64,
    unsaved_off: u64,
    arena_off: u64,
}

impl<'a> View<'a> {
    /// The view of the segment `map` maps (from the start of the memory
    /// file `fd`, where given), or why it is not one.
    pub(crate) fn new(map: &'a Map, fd: Option<BorrowedFd<'a>>) -> Result<View<'a>, &'static str> {
        let field = |off: u64| map.read_u64(off).ok_or("shorter than its header");
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
        if end > map.range().1 as u64 {
            return Err("shorter than its layout");
        }
        Ok(View {
            map,
            extents: Extents::new(fd),
            pages,
            slots,
            owners_off,
            unsaved_off,
            arena_off,
        })
    }

    /// The u64 at `off`, or 0 past the segment (which every caller's checks
    /// keep it inside: 0 reads as "nothing here").
    fn u64_at(&self, off: u64) -> u64 {
        self.map.read_u64(off).unwrap_or(0)
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
        if !self.extents.may_hold(at) {
            return None;
        }
        let head = self.u64_at(at);
        if head as u32 != SLOT_USED {
            return None;
        }
        let path_len = (head >> 32) as usize;
        if path_len == 0 || path_len >= SLOT_PATH {
            return None;
        }
        if !self.map.read_bytes(at + SLOT_HEAD, &mut path[..=path_len]) {
            return None;
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
        let at = self.unsaved_off + w * 8;
        if !self.extents.may_hold(at) {
            return 0;
        }
        let mut bits = self.u64_at(at);
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

    /// Where arena pages `page..page + n` start in the mapping, if inside
    /// it: an address for a system call to read, never a Rust reference.
    pub(crate) fn arena_ptr(&self, page: u64, n: u64) -> Option<*const u8> {
        let start = self.arena_off.checked_add(page.checked_mul(PAGE)?)?;
        let p = self.map.bytes(start, n.checked_mul(PAGE)?)?;
        Some(p.cast_const())
    }
}

/// Which parts of a sparse memory file hold data (`SEEK_DATA`,
/// `SEEK_HOLE`), the last extent found kept. Recovery reads a segment's
/// slots and unsaved bits only where they hold data: tmpfs gives a read
/// fault on a hole a page of its own (`shmem_fault`), so a walk of a
/// large cache's thousands of slots never used faulted in megabytes at
/// every launch's end. A page swapped out counts as data
/// (`mapping_seek_hole_data`); where the file cannot say, every place
/// may hold data.
pub(crate) struct Extents<'a> {
    fd: Option<BorrowedFd<'a>>,
    /// `lo..hi`, of data if `.2`, else a hole.
    known: std::cell::Cell<(u64, u64, bool)>,
}

impl<'a> Extents<'a> {
    /// The extents of `fd` (`None`: everything may hold data).
    pub(crate) fn new(fd: Option<BorrowedFd<'a>>) -> Extents<'a> {
        Extents {
            fd,
            known: std::cell::Cell::new((0, 0, false)),
        }
    }

    /// Whether the byte at `off` may hold data. (System calls only: no
    /// allocation, as recovery in a guardian child needs.)
    pub(crate) fn may_hold(&self, off: u64) -> bool {
        use rustix::fs::{seek, SeekFrom};
        let Some(fd) = self.fd else {
            return true;
        };
        let (lo, hi, data) = self.known.get();
        if (lo..hi).contains(&off) {
            return data;
        }
        let known = match seek(fd, SeekFrom::Data(off)) {
            Ok(d) if d == off => (off, seek(fd, SeekFrom::Hole(off)).unwrap_or(u64::MAX), true),
            Ok(d) => (off, d, false),
            Err(rustix::io::Errno::NXIO) => (off, u64::MAX, false),
            Err(_) => (0, u64::MAX, true),
        };
        self.known.set(known);
        known.2
    }
}
