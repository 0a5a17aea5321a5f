//! The shared cache's segment: one memory file that every process of a
//! group maps, holding the whole cache (docs/design.md, section 13).
//!
//! ```text
//!  0            header: magic, version, counts, offsets, the index lock,
//!               the clock hand, the dirty count; at CLOCK_OFF, on a line
//!               of its own, the tick that ages the group's hits
//!  PART_OFF     participants: PART_BYTES each (pid, start time, generation,
//!               the reads it served and loaded, in pages and in bytes,
//!               its hits by their age's bin)
//!  RING_OFF     the sample's ring: its head on a line of its own, then
//!               RING_ENTRIES keys of sampled reads (`curve.rs`)
//!  slots_off    file slots: SLOT_BYTES each (dev, ino, generation, size,
//!               the inode lock, the path)
//!  descs_off    one descriptor per data page: its state word (version,
//!               holder), flags, identity (file slot, generation, index)
//!               and the tick of its last read
//!  buckets_off  the index: open addressing, one u32 per bucket (page + 1)
//!  data_off     the pages, 4 KiB each
//! ```
//!
//! No pointer is stored: every place is a number, and every number read
//! from the segment is checked against the header's counts before use, so
//! a process that scribbles on the segment can make others read wrong
//! bytes, never reach outside the segment. The memory file is sealed
//! against resizing (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`), and one
//! without those seals is refused, so no process can cut the mapping
//! short under the others. The page, the header's page and the slots'
//! layout are `shm.rs`'s, as the guardian's segment's; every place is
//! reached through the mapping's check there (`Map::at`, `Map::bytes`).

use std::fs::File;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::arena::collapse::{collapse_block, Collapsed};
use crate::copy::{copy_from_shared, copy_to_shared, zero_shared};
use crate::guardian::persist;
use crate::guardian::segment::Extents;
use crate::mrc::AGE_BINS;

use crate::shm::{Atomics, Map, HEADER_BYTES, SLOT_BYTES, SLOT_HEAD};
pub(crate) use crate::shm::{PAGE, SLOT_FREE, SLOT_PATH, SLOT_USED};

/// The memory file's name (`/proc/PID/fd` shows `/memfd:` and it).
pub(crate) const NAME: &str = "foliocache-shared";
/// `FCSHARE1`, little-endian.
const MAGIC: u64 = u64::from_le_bytes(*b"FCSHARE1");
/// The layout's version.
const VERSION: u32 = 9;
/// The seals a segment carries: no process may resize it (or unseal it).
const SEALS: rustix::fs::SealFlags = rustix::fs::SealFlags::SHRINK
    .union(rustix::fs::SealFlags::GROW)
    .union(rustix::fs::SealFlags::SEAL);
/// The pages' alignment in the segment and the mapping's in memory: a
/// huge page's, so that where the host gives shared memory huge pages
/// (`shmem_enabled`, or the creator's collapse: `arena::collapse`), the
/// pages are mapped by them.
const HUGE: u64 = crate::arena::collapse::HUGE_BLOCK as u64;
/// Participants: processes attached at once.
pub(crate) const PARTS: u32 = 1024;
/// Bytes of a participant.
const PART_BYTES: u64 = 64 + 8 * AGE_BINS as u64;
/// Where the participants start: after the header's page.
const PART_OFF: u64 = HEADER_BYTES;
/// Where the sample's ring starts: after the participants.
const RING_OFF: u64 = PART_OFF + PARTS as u64 * PART_BYTES;
/// Sampled reads the ring holds (`curve.rs`).
pub(crate) const RING_ENTRIES: u64 = 1 << 16;
/// The ring's head, alone on its line (every process's sampled reads
/// write it), before its entries.
const RING_HEAD_BYTES: u64 = 128;
/// Bytes of a descriptor.
const DESC_BYTES: u64 = 32;
/// The most pages a segment has (page numbers + 1 fit a bucket's u32).
pub(crate) const MAX_PAGES: u64 = (u32::MAX - 1) as u64;

/// The header, at offset 0. Every field is an atomic: the segment is
/// shared memory, and any process may write any of it.
#[repr(C)]
pub(crate) struct Header {
    magic: AtomicU64,
    version: AtomicU32,
    /// Set once a process of a deferred group joined it
    /// (`SharedCache::join`): from then on every process that starts
    /// attaches at once.
    pub(crate) joined: AtomicU32,
    pages: AtomicU64,
    slots: AtomicU64,
    buckets: AtomicU64,
    slots_off: AtomicU64,
    descs_off: AtomicU64,
    buckets_off: AtomicU64,
    data_off: AtomicU64,
    len: AtomicU64,
    /// The index lock: the buckets, the clock, the slots' allocation.
    pub(crate) index_lock: AtomicU32,
    /// Waiters on the index lock.
    pub(crate) index_waiters: AtomicU32,
    /// The clock's hand: the next page reclaim looks at.
    pub(crate) hand: AtomicU64,
    /// Dirty pages.
    pub(crate) dirty: AtomicU64,
    /// Pages reclaimed.
    pub(crate) evictions: AtomicU64,
    /// Times a lock was taken from a dead holder.
    pub(crate) recoveries: AtomicU64,
    /// Bytes of the pages that 2 MiB pages map (`arena::collapse`), as far
    /// as the creator's collapse has gone.
    pub(crate) huge_bytes: AtomicU64,
    /// Set once the creator's collapse has tried every block.
    pub(crate) huge_ended: AtomicU32,
    /// The group's hit-ratio curve as its creator last published it
    /// (`curve.rs`): a sequence number, odd while it writes, then the
    /// words.
    pub(crate) curve_seq: AtomicU64,
    pub(crate) curve: [AtomicU64; CURVE_WORDS],
}

/// Where the tick that ages the group's hits lies in the header's page
/// (`curve.rs`): alone on its line, past the header's fields (which
/// misses, reclaim and the curve's publication write), so that the load
/// every hit makes of it finds a line written once a tick.
const CLOCK_OFF: u64 = HEADER_BYTES / 2;

const _: () = assert!(std::mem::size_of::<Header>() as u64 + 128 <= CLOCK_OFF);

/// The published curve's words: each point's hit ratio and bound (`f64`
/// bits), the window's page reads, its sampled reads.
pub(crate) const CURVE_WORDS: usize = 12;

const _: () = assert!(std::mem::size_of::<Header>() as u64 <= HEADER_BYTES);

/// A participant: one attached process.
#[repr(C)]
pub(crate) struct Part {
    /// The process's pid, 0 when the participant is free.
    pub(crate) pid: AtomicU32,
    /// Bumped at each attach: a participant number names one generation.
    pub(crate) generation: AtomicU32,
    /// The process's start time (`/proc/PID/stat` field 22): a reused
    /// pid is another process.
    pub(crate) start: AtomicU64,
    /// Reads served from the cache (pages) by every process that held
    /// this participant, as each last published them: only its holder
    /// writes it, and it only grows (a new holder goes on from it), so
    /// the sum over the participants is the group's, dead processes'
    /// included (`SharedCache::stats`).
    pub(crate) hits: AtomicU64,
    /// Reads that loaded a page, likewise.
    pub(crate) misses: AtomicU64,
    /// Bytes reads returned, likewise.
    pub(crate) read_bytes: AtomicU64,
    /// Of those, bytes of pages read from their files for a read (a
    /// miss's page, a readahead page at its first read), likewise.
    pub(crate) first_read_bytes: AtomicU64,
    /// Bytes read from the files (misses, readahead, a partial write's
    /// page), likewise.
    pub(crate) loaded_bytes: AtomicU64,
    /// Hits (pages from memory) by their age's bin (`mrc::age_bin`: the
    /// ticks of the group's clock since the page's last read), likewise:
    /// what the group's curve weights its simulations' losses by
    /// (`curve.rs`).
    pub(crate) aged: [AtomicU64; AGE_BINS],
}

const _: () = assert!(std::mem::size_of::<Part>() as u64 <= PART_BYTES);

// SAFETY: `repr(C)`, atomics only (as `Header`, `Slot` and `Desc`).
unsafe impl Atomics for Part {}
// SAFETY: as above.
unsafe impl Atomics for Header {}
// SAFETY: as above.
unsafe impl Atomics for Slot {}
// SAFETY: as above.
unsafe impl Atomics for Desc {}

/// A file slot's head; its path follows at `SLOT_HEAD`.
#[repr(C)]
pub(crate) struct Slot {
    /// `SLOT_FREE`, `SLOT_USED` or `SLOT_GONE`; a file's slot is found
    /// by linear probing from its (dev, ino)'s hash ([`Seg::slot_probe`]).
    pub(crate) state: AtomicU32,
    /// Bumped each time the slot is given to another file: pages name
    /// (slot, generation), so a page of a slot's previous file is never
    /// found for the next.
    pub(crate) generation: AtomicU32,
    pub(crate) dev: AtomicU64,
    pub(crate) ino: AtomicU64,
    /// The file's size for every process of the group (`i_size`).
    pub(crate) size: AtomicU64,
    /// The inode lock: writes, size changes, claims of missing pages.
    pub(crate) lock: AtomicU32,
    pub(crate) waiters: AtomicU32,
    /// The path's length.
    pub(crate) path_len: AtomicU32,
    /// Who holds the file in the kernel (`handover::handed`: a mapping, a
    /// stdio stream, a plain descriptor): 0 no one; the participant number
    /// of the one process that did; `handover::KERNEL_MANY` when more than
    /// one did. While it is not 0 no handle serves the file from the cache
    /// ([`super::SharedFile::handed_elsewhere`]); an open takes it back
    /// once its one holder is gone (`SharedFile::take_back_from_kernel`), never after
    /// two (a mapping outlives its descriptor, and the group cannot tell
    /// when the last ends). A slot held so is not given to another file
    /// (`recycle_slot`).
    pub(crate) kernel: AtomicU32,
    /// The file as the group last saw it in the kernel (at its open, after
    /// its size change): its change time in nanoseconds and its size; after
    /// its writeback, the time the writeback ended, marked (the change
    /// time not looked at: `slots::wrote_back`); once handed to the kernel
    /// by a process of the group, a mark no file matches. A process
    /// opening the file finding it changed behind the group drops the
    /// group's clean pages of it.
    pub(crate) seen_ctime: AtomicU64,
    pub(crate) seen_size: AtomicU64,
    /// The file pages a write may have dirtied since the last complete
    /// writeback: `dirty_lo..=dirty_hi`, empty when `dirty_lo >
    /// dirty_hi`. Widened (under the inode lock) before a page is marked
    /// dirty, emptied only by a writeback that cleaned every dirty page
    /// in it, so a death leaves it too wide, never too narrow: a
    /// writeback looks up these pages alone, not every descriptor.
    pub(crate) dirty_lo: AtomicU64,
    pub(crate) dirty_hi: AtomicU64,
    /// The file's generation when the slot was given to it
    /// (`persist::file_version`; 0 unknown): a writeback by path checks
    /// that the file there is still this one.
    pub(crate) file_version: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Slot>() as u64 <= SLOT_HEAD);

/// A slot's state besides `shm.rs`'s free (no file has held it: a
/// lookup's probe ends there) and used (a file's): taken back from a file: a lookup's probe goes on past it.
pub(crate) const SLOT_GONE: u32 = 2;

/// A page's descriptor: the truth the index is derived from.
#[repr(C)]
pub(crate) struct Desc {
    /// `version << 32 | holder`: a holder (a participant number, 0 for
    /// none) has the page to itself; each release bumps the version, so a
    /// reader that saw the same word before and after its copy copied a
    /// page no one changed (a seqlock).
    pub(crate) state: AtomicU64,
    /// `F_*` flags.
    pub(crate) flags: AtomicU32,
    /// The file slot (0: none).
    pub(crate) slot: AtomicU32,
    /// The slot's generation the page belongs to.
    pub(crate) generation: AtomicU32,
    /// The tick of the group's clock ([`Seg::clock`]) at the page's last
    /// read or load (its low 16 bits): the next hit's age (`curve.rs`).
    /// A hint, written only when the tick moved.
    pub(crate) stamp: AtomicU32,
    /// The page's index in its file.
    pub(crate) index: AtomicU64,
}

/// The page holds a file page (it is in the index).
pub(crate) const F_USED: u32 = 1;
/// Its bytes are the file's (or newer).
pub(crate) const F_UPTODATE: u32 = 2;
/// Written and not yet written back.
pub(crate) const F_DIRTY: u32 = 4;
/// Read since the clock last passed.
pub(crate) const F_REFERENCED: u32 = 8;
/// Filled by readahead and not read since: its first read counts it as
/// read from the file, not from memory (`index::touch`).
pub(crate) const F_FRESH: u32 = 16;

/// A mapped segment. Every accessor checks its number first.
pub(crate) struct Seg {
    fd: OwnedFd,
    map: Map,
    pub(crate) pages: u64,
    pub(crate) slots: u64,
    pub(crate) buckets: u64,
    slots_off: u64,
    descs_off: u64,
    buckets_off: u64,
    data_off: u64,
}

// SAFETY: the mapping is reached only through atomics, and page bytes
// only through `copy.rs`'s shared routines and system calls.
unsafe impl Send for Seg {}
// SAFETY: as above.
unsafe impl Sync for Seg {}

/// Where each part of a segment lies: what the header records besides
/// the page count, and what [`Seg`] keeps of it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Layout {
    slots: u64,
    buckets: u64,
    slots_off: u64,
    descs_off: u64,
    buckets_off: u64,
    data_off: u64,
    len: u64,
}

impl Layout {
    /// The layout of a segment of `pages` pages; `None` past `u64`.
    fn of(pages: u64) -> Option<Layout> {
        let slots = (pages / 16).clamp(64, 1 << 16);
        let buckets = pages.checked_mul(2)?.next_power_of_two().max(64);
        let slots_off = RING_OFF + RING_HEAD_BYTES + RING_ENTRIES * 8;
        let descs_off = slots_off.checked_add(slots.checked_mul(SLOT_BYTES)?)?;
        let buckets_off = descs_off.checked_add(pages.checked_mul(DESC_BYTES)?)?;
        let data_off = buckets_off
            .checked_add(buckets.checked_mul(4)?)?
            .next_multiple_of(HUGE);
        let len = data_off.checked_add(pages.checked_mul(PAGE)?)?;
        Some(Layout {
            slots,
            buckets,
            slots_off,
            descs_off,
            buckets_off,
            data_off,
            len,
        })
    }

    /// The header's fields of the layout, each with its value here.
    fn fields<'h>(&self, h: &'h Header) -> [(&'h AtomicU64, u64); 7] {
        [
            (&h.slots, self.slots),
            (&h.buckets, self.buckets),
            (&h.slots_off, self.slots_off),
            (&h.descs_off, self.descs_off),
            (&h.buckets_off, self.buckets_off),
            (&h.data_off, self.data_off),
            (&h.len, self.len),
        ]
    }
}

/// Asks for huge pages over the whole segment (`MADV_HUGEPAGE`): the
/// pages, and the descriptors and index every hit reads too: taken where
/// the host's `shmem_enabled` is `advise` (or `within_size`, `always`),
/// ignored where it is `never` (there the creator collapses them,
/// `huge.rs`).
fn advise_huge(map: &Map) {
    let (base, len) = map.range();
    // SAFETY: advice over our own mapping; it changes no byte.
    let _ = unsafe { libc::madvise(base.cast(), len, libc::MADV_HUGEPAGE) };
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("shared cache: {what}"))
}

impl Seg {
    /// A new segment of `pages` pages in a new memory file.
    pub(crate) fn create(pages: u64) -> io::Result<Seg> {
        let fd = rustix::fs::memfd_create(
            NAME,
            rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
        )?;
        Seg::create_in(fd, pages)
    }

    /// A new segment of `pages` pages in the empty file `fd`: a memory
    /// file made for it, sealed here, or a persisted launch's file
    /// (`persist::Run`), which tmpfs cannot seal.
    pub(crate) fn create_in(fd: OwnedFd, pages: u64) -> io::Result<Seg> {
        if pages == 0 || pages > MAX_PAGES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("shared cache: {pages} pages (1 to {MAX_PAGES})"),
            ));
        }
        let l = Layout::of(pages).ok_or_else(|| invalid("too large"))?;
        rustix::fs::ftruncate(&fd, l.len)?;
        if !persist::is_persisted(fd.as_fd(), persist::GROUP) {
            // Its size for good: a process that could shrink it would make
            // every other process's next access past the new end a SIGBUS.
            rustix::fs::fcntl_add_seals(&fd, SEALS)?;
        }
        let seg = Seg::map(fd, pages, l)?;
        let h = seg.header();
        h.pages.store(pages, Ordering::Relaxed);
        for (field, v) in l.fields(h) {
            field.store(v, Ordering::Relaxed);
        }
        h.version.store(VERSION, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(seg)
    }

    /// Maps the segment in `fd` (another process's, passed on), checking
    /// its header: the counts must give exactly the layout this version
    /// makes of them and fit the memory file.
    pub(crate) fn attach(fd: OwnedFd) -> io::Result<Seg> {
        if !rustix::fs::fcntl_get_seals(&fd).is_ok_and(|s| s.contains(SEALS))
            && !persist::is_persisted(fd.as_fd(), persist::GROUP)
        {
            return Err(invalid(
                "not sealed against resizing (nor a persisted launch's file)",
            ));
        }
        let file_len = rustix::fs::fstat(&fd)?.st_size as u64;
        if file_len < PAGE {
            return Err(invalid("not a segment (too short)"));
        }
        let head = Map::new(fd.as_fd(), 0, PAGE, false)?;
        let h = head
            .at::<Header>(0)
            .ok_or_else(|| invalid("not a segment (too short)"))?;
        if h.magic.load(Ordering::Acquire) != MAGIC || h.version.load(Ordering::Relaxed) != VERSION
        {
            return Err(invalid("not a segment of this version"));
        }
        let pages = h.pages.load(Ordering::Relaxed);
        let want = (1..=MAX_PAGES)
            .contains(&pages)
            .then(|| Layout::of(pages))
            .flatten()
            .ok_or_else(|| invalid("bad page count"))?;
        let matches = want
            .fields(h)
            .iter()
            .all(|(field, v)| field.load(Ordering::Relaxed) == *v);
        if !matches || want.len > file_len {
            return Err(invalid("layout does not match its page count"));
        }
        drop(head);
        Seg::map(fd, pages, want)
    }

    /// Maps `fd`'s segment of `pages` pages laid out as `l` (checked by
    /// the caller against the file), huge pages asked for.
    fn map(fd: OwnedFd, pages: u64, l: Layout) -> io::Result<Seg> {
        let map = Map::new_aligned(fd.as_fd(), 0, l.len, HUGE as usize)?;
        advise_huge(&map);
        Ok(Seg {
            fd,
            map,
            pages,
            slots: l.slots,
            buckets: l.buckets,
            slots_off: l.slots_off,
            descs_off: l.descs_off,
            buckets_off: l.buckets_off,
            data_off: l.data_off,
        })
    }

    /// The memory file.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The `T` at `off`, which the caller computed from numbers checked
    /// against the header's counts, so that it lies in the mapping (the
    /// layout was checked at `create` and `attach`): a miss is a bug of
    /// this file's, never a segment's content.
    #[inline]
    fn at<T: Atomics>(&self, off: u64) -> &T {
        self.map
            .at(off)
            .expect("the shared cache's layout lies in its mapping")
    }

    pub(crate) fn header(&self) -> &Header {
        self.at(0)
    }

    /// Participant `i`, or `None` past the table.
    pub(crate) fn part(&self, i: u32) -> Option<&Part> {
        (i < PARTS)
            .then(|| self.map.at(PART_OFF + u64::from(i) * PART_BYTES))
            .flatten()
    }

    /// The tick that ages the group's hits: the sampled reads pushed so
    /// far, in ticks (`curve.rs`).
    pub(crate) fn clock(&self) -> &AtomicU64 {
        self.at(CLOCK_OFF)
    }

    /// The sample's ring's head: the sampled reads pushed so far.
    pub(crate) fn ring_head(&self) -> &AtomicU64 {
        self.at(RING_OFF)
    }

    /// The ring's entry for the `i`th sampled read (wrapping).
    pub(crate) fn ring_entry(&self, i: u64) -> &AtomicU64 {
        self.at(RING_OFF + RING_HEAD_BYTES + (i % RING_ENTRIES) * 8)
    }

    /// File slot `i` (1-based; 0 is no slot), or `None` past the table.
    /// The slots a lookup of (`dev`, `ino`) visits, in order: every slot
    /// but 0, from the one its hash names.
    pub(crate) fn slot_probe(&self, dev: u64, ino: u64) -> impl Iterator<Item = u32> {
        let n = self.slots.saturating_sub(1).max(1);
        let h = (dev.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ino).wrapping_mul(0xff51_afd7_ed55_8ccd);
        let start = (h >> 32) % n;
        (0..n).map(move |k| 1 + ((start + k) % n) as u32)
    }

    pub(crate) fn slot(&self, i: u32) -> Option<&Slot> {
        let i = u64::from(i);
        (1..self.slots)
            .contains(&i)
            .then(|| self.map.at(self.slots_off + i * SLOT_BYTES))
            .flatten()
    }

    /// Copies `src` (at most [`SLOT_PATH`] bytes) into slot `i`'s path;
    /// `false` past the table or for a longer path.
    pub(crate) fn write_slot_path(&self, i: u32, src: &[u8]) -> bool {
        let Some(at) = self.slot_path_at(i).filter(|_| src.len() <= SLOT_PATH) else {
            return false;
        };
        // SAFETY: `src.len()` bytes of slot `i`'s path (checked), in the
        // mapping; other processes read and write them only with the
        // shared copies.
        unsafe { copy_to_shared(src.as_ptr(), at, src.len()) };
        true
    }

    /// Copies the first `dst.len()` bytes of slot `i`'s path (another
    /// process may be writing them) into `dst`; `false` past the table or
    /// for more than [`SLOT_PATH`] bytes.
    pub(crate) fn read_slot_path(&self, i: u32, dst: &mut [u8]) -> bool {
        let Some(at) = self.slot_path_at(i).filter(|_| dst.len() <= SLOT_PATH) else {
            return false;
        };
        // SAFETY: as in `write_slot_path`, into the caller's buffer.
        unsafe { copy_from_shared(at, dst.as_mut_ptr(), dst.len()) };
        true
    }

    /// Slot `i`'s path bytes' address: `SLOT_PATH` bytes; `None` past
    /// the table.
    fn slot_path_at(&self, i: u32) -> Option<*mut u8> {
        let i = u64::from(i);
        (1..self.slots)
            .contains(&i)
            .then(|| {
                self.map.bytes(
                    self.slots_off + i * SLOT_BYTES + SLOT_HEAD,
                    SLOT_PATH as u64,
                )
            })
            .flatten()
    }

    /// The pages whose descriptors may be set, in order: every page but
    /// those whose descriptor lies in a hole of the memory file (never
    /// written: all zeros, a page not in use), which a read would fault
    /// in, tmpfs giving a read fault on a hole a page of its own
    /// (`shmem_fault`). A walk of a large cache's descriptors so touches
    /// only what the group's use wrote (pages are given out in order);
    /// where the file cannot say (`Extents`), every page.
    pub(crate) fn descs_in_use(&self) -> impl Iterator<Item = u64> + '_ {
        let extents = Extents::new(Some(self.fd()));
        (0..self.pages).filter(move |&p| {
            let at = self.descs_off + p * DESC_BYTES;
            extents.may_hold(at) || extents.may_hold(at + DESC_BYTES - 1)
        })
    }

    /// The slots that may be in use, in order, as
    /// [`descs_in_use`](Self::descs_in_use): every slot but those whose
    /// head (its state, identity and dirty range) lies in a hole.
    pub(crate) fn slots_in_use(&self) -> impl Iterator<Item = u32> + '_ {
        let extents = Extents::new(Some(self.fd()));
        (1..self.slots).filter_map(move |i| {
            let at = self.slots_off + i * SLOT_BYTES;
            let used = extents.may_hold(at) || extents.may_hold(at + SLOT_HEAD - 1);
            used.then_some(u32::try_from(i).ok()).flatten()
        })
    }

    /// Page `p`'s descriptor, or `None` past the table.
    pub(crate) fn desc(&self, p: u64) -> Option<&Desc> {
        (p < self.pages)
            .then(|| self.map.at(self.descs_off + p * DESC_BYTES))
            .flatten()
    }

    /// Bucket `b` (taken modulo the bucket count).
    pub(crate) fn bucket(&self, b: u64) -> &AtomicU32 {
        self.at(self.buckets_off + (b & (self.buckets - 1)) * 4)
    }

    /// Page `p`'s bytes, or `None` past the table.
    #[inline]
    pub(crate) fn page(&self, p: u64) -> Option<PageMem<'_>> {
        if p >= self.pages {
            return None;
        }
        let at = self.map.bytes(self.data_off + p * PAGE, PAGE)?;
        Some(PageMem {
            at,
            _seg: PhantomData,
        })
    }

    /// The whole 2 MiB blocks of the segment: the metadata's (header to
    /// index: `data_off` is a multiple of 2 MiB), then the pages'.
    pub(crate) fn huge_blocks(&self) -> u64 {
        (self.data_off + self.pages * PAGE) / HUGE
    }

    /// Whether block `b` holds pages (not metadata).
    pub(crate) fn is_data_block(&self, b: u64) -> bool {
        b * HUGE >= self.data_off
    }

    /// Whether block `b` lies wholly in the file slots (no descriptor,
    /// bucket nor page of it): a read looks at its file's one slot, where
    /// it reads a descriptor and a bucket for every page.
    pub(crate) fn is_slots_block(&self, b: u64) -> bool {
        b * HUGE >= self.slots_off && (b + 1) * HUGE <= self.descs_off
    }

    /// The number of pages before the end of block `b` (0 for the
    /// metadata's blocks).
    pub(crate) fn pages_through_block(&self, b: u64) -> u64 {
        ((b + 1) * HUGE).saturating_sub(self.data_off) / PAGE
    }

    /// The block holding page `p`.
    pub(crate) fn block_of_page(&self, p: u64) -> u64 {
        (self.data_off + p * PAGE) / HUGE
    }

    /// Collapses block `b` into one 2 MiB page (`arena::collapse`);
    /// `None` past the segment's whole blocks.
    pub(crate) fn collapse_block(&self, b: u64) -> Option<Collapsed> {
        if b >= self.huge_blocks() {
            return None;
        }
        let at = self.map.bytes(b * HUGE, HUGE)?;
        // SAFETY: block `b` lies in the segment (checked), 2 MiB aligned
        // in its shared, writable mapping (`Map::new_aligned`, from the
        // memory file's offset 0), held mapped by `self` for the call; the
        // collapse keeps its bytes.
        Some(unsafe { collapse_block(at) })
    }

    /// A bucket's value as a page number: `None` for an empty bucket or a
    /// number past the table (a scribble).
    pub(crate) fn page_of(&self, v: u32) -> Option<u64> {
        let p = u64::from(v).checked_sub(1)?;
        (p < self.pages).then_some(p)
    }
}

/// One page of the segment, its number checked ([`Seg::page`]): the only
/// way to its bytes. Each copy checks its range inside the page once and
/// goes through the shared copies (`copy.rs`), which other processes'
/// copies of the same bytes may race: a reader's copy that raced a
/// writer's is discarded by its seqlock (`index::find`), and a page's
/// bytes change only while a process holds it (`index::Hold`).
#[derive(Clone, Copy)]
pub(crate) struct PageMem<'a> {
    at: *mut u8,
    _seg: PhantomData<&'a Seg>,
}

/// The error of a copy past its page (a caller's bug, never an input's).
fn past_page() -> io::Error {
    io::Error::other("shared cache: a copy past its page")
}

impl PageMem<'_> {
    /// Copies the page's bytes from `at` into `dst`.
    #[inline]
    pub(crate) fn copy_out(self, at: usize, dst: &mut [u8]) -> io::Result<()> {
        if at > PAGE as usize || dst.len() > PAGE as usize - at {
            return Err(past_page());
        }
        // SAFETY: `at..at + dst.len()` lies in the page (checked), in the
        // mapping for `'a`; others write it only with the shared copies.
        unsafe { copy_from_shared(self.at.add(at), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copies `src` into the page from `at`.
    #[inline]
    pub(crate) fn copy_in(self, at: usize, src: &[u8]) -> io::Result<()> {
        if at > PAGE as usize || src.len() > PAGE as usize - at {
            return Err(past_page());
        }
        // SAFETY: as in `copy_out`, from the caller's slice.
        unsafe { copy_to_shared(src.as_ptr(), self.at.add(at), src.len()) };
        Ok(())
    }

    /// Zeroes the page from `at` to its end.
    pub(crate) fn zero_from(self, at: usize) -> io::Result<()> {
        if at > PAGE as usize {
            return Err(past_page());
        }
        // SAFETY: `at..PAGE` lies in the page (checked); others read it
        // only with the shared copies.
        unsafe { zero_shared(self.at.add(at), PAGE as usize - at) };
        Ok(())
    }

    /// Reads the file page at `offset` of `file` into the page (a held
    /// one, which no process reads until let go: readers check the state
    /// word): the bytes read, short at the end of the file.
    pub(crate) fn read_file(self, file: &File, offset: u64) -> io::Result<usize> {
        let mut n = 0;
        while n < PAGE as usize {
            // SAFETY: `n..PAGE` lies in the page, in the mapping; the
            // kernel writes it.
            let r = unsafe {
                libc::pread(
                    file.as_raw_fd(),
                    self.at.add(n).cast(),
                    PAGE as usize - n,
                    (offset + n as u64) as libc::off_t,
                )
            };
            match r {
                0 => break,
                r if r > 0 => n += r as usize,
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
        Ok(n)
    }
}

/// Reads `file` from `offset` into `pages` (held, as for
/// [`PageMem::read_file`]) by `preadv`, one call unless the kernel
/// returns less than asked short of the end of the file: the bytes read,
/// short at the end of the file (a read that ends inside a page ends
/// there: a descriptor with `O_DIRECT` reads whole pages from whole pages).
pub(crate) fn read_pages(file: &File, pages: &[PageMem<'_>], offset: u64) -> io::Result<usize> {
    let iov: Vec<libc::iovec> = pages
        .iter()
        .map(|p| libc::iovec {
            iov_base: p.at.cast(),
            iov_len: PAGE as usize,
        })
        .collect();
    let mut done = 0;
    while done < iov.len() * PAGE as usize && done.is_multiple_of(PAGE as usize) {
        let rest = &iov[done / PAGE as usize..];
        // SAFETY: each iovec is a whole page of the mapping (`PageMem`); the
        // kernel writes them.
        let r = unsafe {
            libc::preadv(
                file.as_raw_fd(),
                rest.as_ptr(),
                rest.len().min(1024) as libc::c_int,
                (offset + done as u64) as libc::off_t,
            )
        };
        match usize::try_from(r) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(done)
}

#[cfg(all(test, not(miri)))]
mod tests {
    use super::*;

    #[test]
    fn a_page_handle_copies_inside_its_page_only() {
        let seg = Seg::create(2).unwrap();
        assert!(seg.page(2).is_none(), "past the table");
        let page = seg.page(1).unwrap();
        page.copy_in(PAGE as usize - 3, b"abc").unwrap();
        let mut out = [0u8; 3];
        page.copy_out(PAGE as usize - 3, &mut out).unwrap();
        assert_eq!(&out, b"abc");
        assert!(page.copy_in(PAGE as usize - 2, b"abc").is_err());
        assert!(page.copy_out(PAGE as usize + 1, &mut []).is_err());
        assert!(page.zero_from(PAGE as usize + 1).is_err());
        page.zero_from(PAGE as usize - 2).unwrap();
        page.copy_out(PAGE as usize - 3, &mut out).unwrap();
        assert_eq!(&out, b"a\0\0");
        // Page 0 is untouched by page 1's copies.
        let mut first = vec![1u8; PAGE as usize];
        seg.page(0).unwrap().copy_out(0, &mut first).unwrap();
        assert!(first.iter().all(|&b| b == 0));
    }

    #[test]
    fn a_slot_path_is_copied_only_inside_its_slot() {
        let seg = Seg::create(2).unwrap();
        assert!(seg.write_slot_path(1, b"/a/b"));
        let mut back = [0u8; 4];
        assert!(seg.read_slot_path(1, &mut back));
        assert_eq!(&back, b"/a/b");
        assert!(!seg.write_slot_path(0, b"x"), "slot 0 is no slot");
        assert!(
            !seg.write_slot_path(seg.slots as u32, b"x"),
            "past the table"
        );
        assert!(!seg.write_slot_path(1, &vec![b'x'; SLOT_PATH + 1]));
    }
}
