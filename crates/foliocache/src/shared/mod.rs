//! One cache for many processes: [`SharedCache`] (docs/design.md,
//! section 13).
//!
//! The whole cache lives in one memory file (`memfd_create`) that every
//! process of a group maps: a forked child keeps its parent's mapping, and
//! any process handed the memory file ([`SharedCache::memory_file`],
//! [`SharedCache::attach`]) maps it too. A page read by one process is a
//! hit for all, a write is seen by every process's next read, and the
//! cache outlives each process: a process killed at any instant, holding
//! any lock, leaves the cache consistent for the others, its accepted
//! writes in it, dirty, for the next writeback.
//!
//! What lives where: the header, the participants (one per attached
//! process), the file slots (one per file: its size, its inode lock,
//! its path), a descriptor per page (its identity and state), the index
//! (open addressing over page numbers), the pages. Every place is a
//! number checked before use ([`seg`]).
//!
//! - **Hits take no lock and write nothing shared**: the index walk finds
//!   the page, its descriptor's state word is read before and after the
//!   copy (a seqlock), and the copy counts only if no one held or changed
//!   the page meanwhile ([`index::find`]).
//! - **Writes, size changes and loads of missing pages** take the file's
//!   inode lock; the bytes of one page are changed only by the one
//!   process holding the page, and the index only under the index lock.
//!   Every lock and every hold names its holder's participant; a waiter
//!   that finds the holder dead takes over and repairs ([`lock`]): the
//!   index is rebuilt from the descriptors, a page whose load never
//!   completed leaves it.
//! - **Reclaim** is one clock over the group's pages; a dirty page is
//!   never reclaimed, and writers write back their own file's pages past
//!   half the cache dirty. A file no process has open any more is written
//!   back by path ([`SharedCache::write_back_all`]), its (dev, ino)
//!   checked first.
//!
//! Each process uses its own descriptor of each file (the kernel checked
//! its permission when it opened it) for the IO it does; `O_DIRECT` ones
//! suit (pages are 4 KiB and aligned).
//!
//! The processes of a group must share a pid namespace and see `/proc`
//! (a lock's holder is known by its pid and start time); a process that
//! cannot read its own `/proc/self/stat` is refused. Every file must be
//! written only through the group's cache while it serves it, as with
//! any cache: a write from outside the group is not seen by the group.

mod adopt;
pub(crate) mod crash;
mod figures;
mod flusher;
pub use flusher::Flusher;
mod handover;
mod huge;
mod index;
mod listing;
mod lock;
mod named;
pub use named::Host;
mod persist;
mod seg;
mod slots;

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crash::point;
use index::{Found, Hold, Key};
use lock::Me;
use seg::{Seg, Slot, F_DIRTY, F_UPTODATE, PAGE, SLOT_FREE, SLOT_USED};
use slots::{saw, wrote_back};

use crate::copy::{copy_from_shared, copy_to_shared, zero_shared};
use crate::stats::ShardedCounter;
use figures::{Published, PUBLISH_HITS, PUBLISH_MISSES};

/// A page cache in shared memory, for every process of a group.
///
/// Cloning a handle is cheap; a forked child keeps using the parent's
/// handles (and its [`SharedFile`]s), now as a process of its own.
#[derive(Clone)]
pub struct SharedCache {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SharedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCache")
            .field("pages", &self.inner.seg.pages)
            .field("memory_file", &self.inner.seg.fd().as_raw_fd())
            .finish()
    }
}

pub(crate) struct Inner {
    seg: Seg,
    me: Me,
    /// Sharded: a hit writes nothing another thread reads.
    hits: ShardedCounter,
    misses: ShardedCounter,
    /// What this process last published in its participant.
    published: Published,
    /// The process whose thread collapses the pages (`huge.rs`), 0 if
    /// none: only it waits for the collapse to end.
    collapser: crate::sync::AtomicU32,
}

/// What a shared cache holds and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharedStats {
    /// Pages the cache holds at most.
    pub pages: u64,
    /// Pages holding file data now.
    pub cached: u64,
    /// Of those, written and not yet written back.
    pub dirty: u64,
    /// Pages reused for other data, by the whole group.
    pub evictions: u64,
    /// Locks taken over from a process that died holding them.
    pub recoveries: u64,
    /// Processes attached now.
    pub processes: u64,
    /// Reads of this process served from the cache, in pages.
    pub hits: u64,
    /// Reads of this process that loaded a page.
    pub misses: u64,
    /// Reads served from the cache by every process of the group, this
    /// one's and those gone included, in pages: each process publishes
    /// its count every 1,024 hits of a thread of its, and at each call of
    /// `stats`, so another's latest few are not in it yet.
    pub group_hits: u64,
    /// Reads that loaded a page, by every process of the group
    /// (published every 64 misses of a thread, and at `stats`).
    pub group_misses: u64,
    /// Bytes of the pages that 2 MiB pages map (the creator's collapse,
    /// so far).
    pub huge_bytes: u64,
}

impl SharedCache {
    /// A new shared cache of `capacity` bytes (whole 4 KiB pages; at
    /// least one) in a new memory file. A thread of this process then
    /// maps its pages by 2 MiB pages where the kernel allows, while the
    /// cache is in use ([`wait_huge_pages`](Self::wait_huge_pages)): all
    /// its memory is faulted in by it.
    pub fn new(capacity: u64) -> io::Result<SharedCache> {
        let cache = SharedCache::with(Seg::create(capacity / PAGE)?);
        cache.join();
        cache.collapse_in_background();
        Ok(cache)
    }

    /// Attaches to the shared cache in memory file `fd` (another
    /// process's [`memory_file`](SharedCache::memory_file), passed on by
    /// inheritance or `SCM_RIGHTS`). Its layout is checked first:
    /// anything else is refused.
    pub fn attach(fd: OwnedFd) -> io::Result<SharedCache> {
        Ok(SharedCache::with(Seg::attach(fd)?))
    }

    fn with(seg: Seg) -> SharedCache {
        SharedCache {
            inner: Arc::new(Inner {
                seg,
                me: Me::new(),
                hits: ShardedCounter::default(),
                misses: ShardedCounter::default(),
                published: Published::default(),
                collapser: crate::sync::AtomicU32::new(0),
            }),
        }
    }

    /// The memory file holding the cache: whoever gets a descriptor of
    /// it can read every cached byte, so pass it only to processes that
    /// may read the files. It is close-on-exec; clear that (or dup it) to
    /// hand it to an `exec`'d program.
    pub fn memory_file(&self) -> BorrowedFd<'_> {
        self.inner.seg.fd()
    }

    /// Serves `file` (a regular file this process opened) through the
    /// cache: every process's handle of the same file (device and inode)
    /// shares its pages and its size.
    pub fn open(&self, file: File) -> io::Result<SharedFile> {
        let meta = file.metadata()?;
        if !meta.file_type().is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "shared cache: only regular files",
            ));
        }
        let writable = rustix::fs::fcntl_getfl(&file).is_ok_and(|f| {
            f.contains(rustix::fs::OFlags::WRONLY) || f.contains(rustix::fs::OFlags::RDWR)
        });
        let path = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .map(|p| p.into_os_string().into_encoded_bytes())
            .unwrap_or_default();
        let f = SharedFile {
            cache: self.clone(),
            file,
            dev: meta.dev(),
            ino: meta.ino(),
            path,
            key: AtomicU64::new(0),
            ra: AtomicU64::new(0),
            writable,
        };
        f.resolve(&meta)?;
        f.follow_kernel(&meta)?;
        Ok(f)
    }

    /// The cache's pages.
    pub fn pages(&self) -> u64 {
        self.inner.seg.pages
    }

    /// The pages dirty now (written by a process of the group, not yet
    /// written back): one load, no walk.
    pub fn dirty_pages(&self) -> u64 {
        self.inner.seg.header().dirty.load(Ordering::Relaxed)
    }

    /// A handle that does not keep the cache alive (a metrics collector's).
    #[cfg(feature = "prometheus")]
    pub(crate) fn downgrade(&self) -> std::sync::Weak<Inner> {
        Arc::downgrade(&self.inner)
    }

    /// The cache behind a [`downgrade`](Self::downgrade)d handle, while
    /// any process-local handle of it lives.
    #[cfg(feature = "prometheus")]
    pub(crate) fn upgrade(weak: &std::sync::Weak<Inner>) -> Option<SharedCache> {
        weak.upgrade().map(|inner| SharedCache { inner })
    }

    /// What the cache holds and did.
    pub fn stats(&self) -> SharedStats {
        let seg = &self.inner.seg;
        let h = seg.header();
        let mut cached = 0;
        for p in 0..seg.pages {
            let used = seg
                .desc(p)
                .is_some_and(|d| d.flags.load(Ordering::Relaxed) & seg::F_USED != 0);
            cached += u64::from(used);
        }
        self.inner.publish();
        let (mut processes, mut group_hits, mut group_misses) = (0, 0u64, 0u64);
        for part in (0..seg::PARTS).filter_map(|i| seg.part(i)) {
            processes += u64::from(lock::lives(part));
            group_hits = group_hits.wrapping_add(part.hits.load(Ordering::Relaxed));
            group_misses = group_misses.wrapping_add(part.misses.load(Ordering::Relaxed));
        }
        SharedStats {
            pages: seg.pages,
            cached,
            dirty: h.dirty.load(Ordering::Relaxed),
            evictions: h.evictions.load(Ordering::Relaxed),
            recoveries: h.recoveries.load(Ordering::Relaxed),
            processes,
            hits: self.inner.hits.sum(),
            misses: self.inner.misses.sum(),
            group_hits,
            group_misses,
            huge_bytes: h.huge_bytes.load(Ordering::Relaxed),
        }
    }

    /// The group's size of the file (`dev`, `ino`) while the group holds
    /// data of it not yet written back (a write of one of its processes):
    /// then the file's own size is not the one its readers will find.
    /// `None` when the cache holds nothing unsaved of the file, whose size
    /// is then the file's. A lookup with no lock and no system call (a
    /// `stat`'s correction).
    pub fn unsaved_len(&self, dev: u64, ino: u64) -> Option<u64> {
        let slot = self.slot_of(dev, ino)?;
        let generation = slot.generation.load(Ordering::Acquire);
        let unsaved =
            slot.dirty_lo.load(Ordering::Acquire) <= slot.dirty_hi.load(Ordering::Acquire);
        let size = slot.size.load(Ordering::Acquire);
        let same = slot.generation.load(Ordering::Acquire) == generation;
        (unsaved && same).then_some(size)
    }

    /// The slot of the file (`dev`, `ino`), found by its hash with no
    /// lock (the slot may be taken from it meanwhile: callers check its
    /// generation or store only a hint).
    fn slot_of(&self, dev: u64, ino: u64) -> Option<&Slot> {
        let seg = &self.inner.seg;
        for i in seg.slot_probe(dev, ino) {
            let slot = seg.slot(i)?;
            match slot.state.load(Ordering::Acquire) {
                SLOT_FREE => return None,
                SLOT_USED
                    if slot.dev.load(Ordering::Relaxed) == dev
                        && slot.ino.load(Ordering::Relaxed) == ino =>
                {
                    return Some(slot);
                }
                _ => {}
            }
        }
        None
    }

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
        let _index = index::index_lock(seg, self.inner.me.id(seg)?)?;
        index::check(seg).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Writes back every dirty page of every file, opening each by the
    /// path it was opened with and checking it is still the same file
    /// (device and inode; a file renamed over or deleted is skipped and
    /// counted in the error): what the group's last process (or its
    /// guardian) does for files whose writers have gone. Returns the
    /// pages written.
    pub fn write_back_all(&self) -> io::Result<u64> {
        let seg = &self.inner.seg;
        let mut written = 0;
        let mut failed = Vec::new();
        for i in 1..seg.slots as u32 {
            let Some(slot) = seg.slot(i) else { break };
            if slot.state.load(Ordering::Acquire) != SLOT_USED {
                continue;
            }
            if slot.dirty_lo.load(Ordering::Acquire) > slot.dirty_hi.load(Ordering::Acquire) {
                continue;
            }
            match self.write_back_slot(i, slot) {
                Ok(n) => written += n,
                Err(e) => failed.push(format!("slot {i}: {e}")),
            }
        }
        if failed.is_empty() {
            Ok(written)
        } else {
            Err(io::Error::other(format!(
                "shared cache: {written} pages written back; not: {}",
                failed.join("; ")
            )))
        }
    }

    fn write_back_slot(&self, i: u32, slot: &Slot) -> io::Result<u64> {
        let path = listing::slot_path(&self.inner.seg, i, slot)?;
        let file = open_direct(&path, false)?;
        let meta = file.metadata()?;
        let version = crate::guardian::persist::file_version(file.as_fd());
        if meta.dev() != slot.dev.load(Ordering::Relaxed)
            || meta.ino() != slot.ino.load(Ordering::Relaxed)
            || !crate::guardian::persist::same_version(
                slot.file_version.load(Ordering::Relaxed),
                version,
            )
        {
            return Err(io::Error::other(format!(
                "{} is another file now",
                path.to_string_lossy()
            )));
        }
        let f = self.open(file)?;
        let n = f.write_back()?;
        f.file.sync_data()?;
        Ok(n)
    }
}

/// A file served through a [`SharedCache`]: reads and writes at offsets,
/// coherent with every other process's handle of the same file.
pub struct SharedFile {
    cache: SharedCache,
    file: File,
    dev: u64,
    ino: u64,
    path: Vec<u8>,
    /// `slot << 32 | generation`: where the file is in the segment.
    key: AtomicU64,
    /// Readahead: `next miss expected << 8 | last window` ([`SharedFile::window`]).
    ra: AtomicU64,
    /// The descriptor was opened for writing: only then may this handle
    /// change the file's bytes or size in the cache (what it writes there,
    /// another process of the group writes back with its own descriptor).
    writable: bool,
}

/// The offset past `buf` written at `offset`, or an error past
/// [`MAX_OFFSET`].
fn end_of(offset: u64, buf: &[u8]) -> io::Result<u64> {
    offset
        .checked_add(buf.len() as u64)
        .filter(|&e| e <= MAX_OFFSET)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "shared cache: write past the largest offset",
            )
        })
}

/// The largest readahead window, in pages (256 KiB).
const RA_MAX: u64 = 64;

/// The largest offset a read or write reaches.
const MAX_OFFSET: u64 = i64::MAX as u64;

/// A whole-page aligned buffer for `O_DIRECT` IO.
struct Bounce {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

impl Bounce {
    fn new(pages: usize) -> io::Result<Bounce> {
        let layout =
            std::alloc::Layout::from_size_align(pages.max(1) * PAGE as usize, PAGE as usize)
                .map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(ptr).ok_or(io::ErrorKind::OutOfMemory)?;
        Ok(Bounce { ptr, layout })
    }
}

impl Drop for Bounce {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// What a page [`SharedFile::load`] gives out holds.
#[derive(Clone, Copy)]
enum Fill<'a> {
    /// The file's bytes, read from it.
    File,
    /// Zeros, not yet uptodate (a write fills it).
    Zero,
    /// These bytes (the file's, the caller says), then zeros.
    Bytes(&'a [u8]),
}

impl SharedFile {
    fn seg(&self) -> &Seg {
        &self.cache.inner.seg
    }

    fn me(&self) -> io::Result<u32> {
        self.cache.inner.me.id(self.seg())
    }

    /// `(slot, generation)`: where the file was last found.
    #[inline]
    pub(super) fn slot_key(&self) -> (u32, u32) {
        let k = self.key.load(Ordering::Acquire);
        ((k >> 32) as u32, k as u32)
    }

    /// The file's inode lock, with its slot as the lock found it.
    fn inode_lock(&self) -> io::Result<(lock::Held<'_>, &Slot, u32, u32)> {
        let me = self.me()?;
        for _ in 0..4 {
            let (slot, i, generation) = self.current()?;
            let held = lock::lock(self.seg(), &slot.lock, &slot.waiters, me)?;
            if slot.generation.load(Ordering::Acquire) == generation {
                if held.recovered {
                    // Its holder died: a write may have left bytes past
                    // the size (copied, the size not yet moved), a
                    // truncation pages past its cut and the file uncut.
                    // Past the size the cache and the file hold nothing,
                    // as a later extension must read zeros there.
                    let size = slot.size.load(Ordering::Acquire);
                    self.cut_cache(i, generation, size)?;
                    if self.file.metadata()?.len() > size {
                        self.file.set_len(size)?;
                    }
                }
                return Ok((held, slot, i, generation));
            }
        }
        Err(io::Error::other(
            "shared cache: the file's slot keeps moving",
        ))
    }

    /// The file's size for the group.
    pub fn len(&self) -> io::Result<u64> {
        Ok(self.sized()?.3)
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Looks at the file as the kernel has it now, as
    /// [`SharedCache::open`] does: a change made behind the group since
    /// the group last looked (another program wrote the file) is
    /// followed (the file's pages dropped, its size taken from the file)
    /// unless the group holds unsaved data of it. For a handle kept
    /// across its user's opens, as the mount's server keeps one per file:
    /// each open of the file follows it as a fresh handle's would.
    ///
    /// # Locking
    /// One `fstat`; the inode lock only when the file changed.
    pub fn follow(&self) -> io::Result<()> {
        self.follow_kernel(&self.file.metadata()?)
    }

    /// Reads into `buf` from `offset`: the bytes every process's last
    /// completed write left there, short at the end of the file.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let (_, i, generation, size) = self.sized()?;
        if offset >= size {
            return Ok(0);
        }
        let n = buf
            .len()
            .min((size - offset).min(usize::MAX as u64) as usize);
        let mut done = 0;
        while done < n {
            let at = offset + done as u64;
            let in_page = (at % PAGE) as usize;
            let len = (PAGE as usize - in_page).min(n - done);
            let key = Key {
                slot: i,
                generation,
                index: at / PAGE,
            };
            let dst = &mut buf[done..done + len];
            if !self.copy_hit(key, in_page, dst)? {
                if self
                    .cache
                    .inner
                    .misses
                    .add_get(1)
                    .is_multiple_of(PUBLISH_MISSES)
                {
                    self.cache.inner.publish();
                }
                self.read_miss(key, in_page, dst)?;
            }
            done += len;
        }
        Ok(n)
    }

    /// Copies from the cached page of `key`, if cached: `false` if not.
    #[inline]
    fn copy_hit(&self, key: Key, in_page: usize, dst: &mut [u8]) -> io::Result<bool> {
        let seg = self.seg();
        let mut spins = 0;
        loop {
            match index::find(seg, key) {
                Found::Absent => return Ok(false),
                Found::Held(p, h) => {
                    if !lock::nap_on_holder(seg, h, &mut spins) {
                        index::repair_dead(seg, p, h, self.me()?)?;
                    }
                }
                Found::Page(p, state) => {
                    let (Some(src), Some(d)) = (seg.data(p), seg.desc(p)) else {
                        return Ok(false);
                    };
                    // SAFETY: `in_page + dst.len()` is at most a page, of
                    // page `p` in the mapping; another process may write
                    // those bytes meanwhile only with the shared copies,
                    // and the state check below discards such a copy.
                    unsafe { copy_from_shared(src.add(in_page), dst.as_mut_ptr(), dst.len()) };
                    std::sync::atomic::fence(Ordering::Acquire);
                    if d.state.load(Ordering::Relaxed) == state {
                        index::touch(d);
                        if self
                            .cache
                            .inner
                            .hits
                            .add_get(1)
                            .is_multiple_of(PUBLISH_HITS)
                        {
                            self.cache.inner.publish();
                        }
                        return Ok(true);
                    }
                    spins += 1;
                    if spins > 1000 {
                        return Ok(false);
                    }
                }
            }
        }
    }

    /// The slow path of a read: under the inode lock, a hit after all
    /// (another process loaded the page meanwhile) or a load.
    fn read_miss(&self, key: Key, in_page: usize, dst: &mut [u8]) -> io::Result<()> {
        let (_inode, slot, ..) = self.inode_lock()?;
        if self.copy_hit(key, in_page, dst)? {
            return Ok(());
        }
        let me = self.me()?;
        let hold = match index::hold_key(self.seg(), key, me)? {
            Some(hold) => hold,
            None => self.load(key, slot, Fill::File)?,
        };
        let src = self
            .seg()
            .data(hold.p)
            .ok_or_else(|| io::Error::other("no page"))?;
        // SAFETY: as in `copy_hit`; the page is held, so no one changes it.
        unsafe { copy_from_shared(src.add(in_page), dst.as_mut_ptr(), dst.len()) };
        drop(hold);
        let window = self.window(key.index);
        if window > 0 {
            self.read_ahead(key, slot, window)?;
        }
        Ok(())
    }

    /// The readahead window for a miss at file page `index`: growing
    /// from 4 pages to [`RA_MAX`] while the misses are sequential (each
    /// at the page after the last window, or at page 0), nothing for a
    /// random one (`ondemand_readahead`'s rule, without its marker).
    fn window(&self, index: u64) -> u64 {
        let ra = self.ra.load(Ordering::Relaxed);
        let (next, last) = (ra >> 8, ra & 0xff);
        let window = if index == 0 || index == next {
            (last * 2).clamp(4, RA_MAX)
        } else {
            0
        };
        self.ra
            .store((index + window + 1) << 8 | window, Ordering::Relaxed);
        window.min(self.seg().pages / 4)
    }

    /// Loads the up to `window` pages after `key` that are not cached and
    /// lie inside the file, in one `preadv` into the pages themselves.
    /// The inode lock is held.
    fn read_ahead(&self, key: Key, slot: &Slot, window: u64) -> io::Result<()> {
        let seg = self.seg();
        let me = self.me()?;
        let size = slot.size.load(Ordering::Relaxed);
        let mut holds = Vec::new();
        {
            let _index = index::index_lock(seg, me)?;
            for index in key.index + 1..=key.index + window {
                let k = Key { index, ..key };
                if index * PAGE >= size || !matches!(index::find(seg, k), Found::Absent) {
                    break;
                }
                let Some(hold) = index::victim(seg, me) else {
                    break;
                };
                index::assign(seg, &hold, k);
                point();
                holds.push(hold);
            }
        }
        let Some(first) = holds.first() else {
            return Ok(());
        };
        let first = first.d.index.load(Ordering::Relaxed);
        let iov: Vec<libc::iovec> = holds
            .iter()
            .filter_map(|h| seg.data(h.p))
            .map(|p| libc::iovec {
                iov_base: p.cast(),
                iov_len: PAGE as usize,
            })
            .collect();
        // SAFETY: each iovec is a page of the mapping that we hold: no
        // process reads it until we let go (readers check the state
        // word); the kernel writes them.
        let r = unsafe {
            libc::preadv(
                self.file.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as libc::c_int,
                (first * PAGE) as libc::off_t,
            )
        };
        if r < 0 {
            // Readahead is a hint: the pages leave, the read that wanted
            // them will load them itself.
            let _index = index::index_lock(seg, me)?;
            holds.iter().for_each(|h| index::forget(seg, h));
            return Ok(());
        }
        let mut left = r as usize;
        for (h, v) in holds.iter().zip(&iov) {
            let n = left.min(PAGE as usize);
            left -= n;
            // SAFETY: the page's tail, held by us.
            unsafe { zero_shared(v.iov_base.cast::<u8>().add(n), PAGE as usize - n) };
            h.d.flags.fetch_or(F_UPTODATE, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Gives `key` a page, held, filled from the file (uptodate), or with
    /// zeros if `zero` (not uptodate: the write that fills it makes it so
    /// once its bytes are in, as `write_end` does, so that a writer killed
    /// before its copy leaves no page of zeros for others to read). The
    /// inode lock is held.
    fn load(&self, key: Key, slot: &Slot, fill: Fill<'_>) -> io::Result<Hold<'_>> {
        let seg = self.seg();
        let me = self.me()?;
        let mut wrote_back = false;
        let hold = loop {
            let index = index::index_lock(seg, me)?;
            if let Some(hold) = index::victim(seg, me) {
                index::assign(seg, &hold, key);
                point();
                drop(index);
                point();
                break hold;
            }
            drop(index);
            if wrote_back {
                return Err(io::Error::other(
                    "shared cache: every page is dirty or in use",
                ));
            }
            wrote_back = true;
            self.write_back_locked(slot, key.slot, key.generation)?;
        };
        let dst = seg
            .data(hold.p)
            .ok_or_else(|| io::Error::other("no page"))?;
        let filled = match fill {
            Fill::Zero => Ok(0),
            Fill::File => self.fill(dst, key.index * PAGE),
            Fill::Bytes(b) => {
                let n = b.len().min(PAGE as usize);
                // SAFETY: `n` bytes of the caller's slice into the held
                // page, in the mapping.
                unsafe { copy_to_shared(b.as_ptr(), dst, n) };
                Ok(n)
            }
        };
        match filled {
            Ok(n) => {
                point();
                // SAFETY: the page's tail, in the mapping, held by us.
                unsafe { zero_shared(dst.add(n), PAGE as usize - n) };
                if !matches!(fill, Fill::Zero) {
                    hold.d.flags.fetch_or(F_UPTODATE, Ordering::Relaxed);
                }
                Ok(hold)
            }
            Err(e) => {
                let _index = index::index_lock(seg, me)?;
                index::forget(seg, &hold);
                Err(e)
            }
        }
    }

    /// Reads the file page at `offset` into page memory `dst` (held):
    /// the bytes read, short at the end of the file.
    fn fill(&self, dst: *mut u8, offset: u64) -> io::Result<usize> {
        let mut n = 0;
        while n < PAGE as usize {
            // SAFETY: `dst` is a held page of the mapping, `PAGE` bytes,
            // written here only by the kernel; no process reads it until
            // the hold is let go (readers check the state word).
            let r = unsafe {
                libc::pread(
                    self.file.as_raw_fd(),
                    dst.add(n).cast(),
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

    /// Calls `f` with the file's bytes `offset..offset + len` (fewer at
    /// the end of the file), read into a buffer of this thread's that the
    /// next read reuses: for a server that sends them on (a FUSE reply)
    /// without a buffer of its own per read.
    ///
    /// # Errors
    /// The read's.
    pub fn read_with<R>(
        &self,
        offset: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<R> {
        crate::copy::with_thread_buffer(len, |buf| {
            let n = self.read_at(buf, offset)?;
            Ok(f(&buf[..n]))
        })
    }

    /// Whether its descriptor was opened for writing (else its writes,
    /// size changes and file changes are refused).
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    fn check_writable(&self) -> io::Result<()> {
        if self.writable {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "shared cache: the file's descriptor was not opened for writing",
        ))
    }

    /// Writes `buf` at `offset`: every process's next read sees it; it
    /// reaches the file at the next writeback ([`sync_data`](Self::sync_data),
    /// or when the cache needs its page).
    ///
    /// # Errors
    /// `PermissionDenied` if its descriptor was not opened for writing (as
    /// for [`append`](Self::append), [`set_len`](Self::set_len) and
    /// [`change_file`](Self::change_file)); the inode lock's.
    pub fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.check_writable()?;
        let end = end_of(offset, buf)?;
        if buf.is_empty() {
            return Ok(0);
        }
        let (_inode, slot, i, generation) = self.inode_lock()?;
        self.write_locked(slot, i, generation, buf, offset, end)
    }

    /// Writes `buf` at the end of the file, atomically for every process
    /// (`O_APPEND`: the size read and moved in one hold of the inode
    /// lock). Returns the offset written at.
    pub fn append(&self, buf: &[u8]) -> io::Result<u64> {
        self.check_writable()?;
        let (_inode, slot, i, generation) = self.inode_lock()?;
        let offset = slot.size.load(Ordering::Acquire);
        let end = end_of(offset, buf)?;
        if !buf.is_empty() {
            self.write_locked(slot, i, generation, buf, offset, end)?;
        }
        Ok(offset)
    }

    /// Changes the file itself with `change` (a hole punched, a range
    /// allocated, collapsed or inserted: what moves or drops data behind
    /// the cache), in one hold of the inode lock: the file's dirty pages
    /// are written back and its pages dropped from the cache first, and
    /// the size is the file's afterwards (`filemap_write_and_wait_range`
    /// then `truncate_pagecache_range`, as the kernel's `fallocate` does).
    /// A writeback that fails leaves the file unchanged.
    pub fn change_file<T>(&self, change: impl FnOnce(&File) -> io::Result<T>) -> io::Result<T> {
        self.check_writable()?;
        let (_inode, slot, i, generation) = self.inode_lock()?;
        self.write_back_locked(slot, i, generation)?;
        if !self.dirty_pages(slot, i, generation)?.is_empty() {
            return Err(io::Error::other(
                "shared cache: dirty pages left after a writeback",
            ));
        }
        self.cut_cache(i, generation, 0)?;
        // Sized from the file whatever `change` did, even on its error.
        let r = change(&self.file);
        let meta = self.file.metadata()?;
        slot.size.store(meta.len(), Ordering::Release);
        saw(slot, &meta);
        r
    }

    /// [`write_at`](Self::write_at)'s body, `end` the offset past `buf`,
    /// the inode lock held.
    fn write_locked(
        &self,
        slot: &Slot,
        i: u32,
        generation: u32,
        buf: &[u8],
        offset: u64,
        end: u64,
    ) -> io::Result<usize> {
        let seg = self.seg();
        if seg.header().dirty.load(Ordering::Relaxed) > seg.pages / 2 {
            self.write_back_locked(slot, i, generation)?;
        }
        let me = self.me()?;
        let mut at = offset;
        while at < end {
            let in_page = (at % PAGE) as usize;
            let len = (PAGE as usize - in_page).min((end - at) as usize);
            let key = Key {
                slot: i,
                generation,
                index: at / PAGE,
            };
            let hold = match index::hold_key(seg, key, me)? {
                Some(hold) => hold,
                None => {
                    let whole = in_page == 0 && len == PAGE as usize;
                    let past_end = at - in_page as u64 >= slot.size.load(Ordering::Relaxed);
                    let fill = if whole || past_end {
                        Fill::Zero
                    } else {
                        Fill::File
                    };
                    self.load(key, slot, fill)?
                }
            };
            // In the file's dirty range before dirty (see `Slot::dirty_lo`;
            // page by page: a load above may have written back and
            // emptied the range), and dirty before the copy: a writer
            // killed part-way leaves a page that is written back, never
            // one dropped half-new.
            slot.dirty_lo.fetch_min(key.index, Ordering::AcqRel);
            slot.dirty_hi.fetch_max(key.index, Ordering::AcqRel);
            if hold.d.flags.fetch_or(F_DIRTY, Ordering::Relaxed) & F_DIRTY == 0 {
                point();
                seg.header().dirty.fetch_add(1, Ordering::Relaxed);
            }
            point();
            let dst = seg
                .data(hold.p)
                .ok_or_else(|| io::Error::other("no page"))?;
            let src = &buf[(at - offset) as usize..][..len];
            // SAFETY: `in_page + len` is at most a page of page `hold.p`,
            // which we hold; readers copy it only with the shared copy.
            unsafe { copy_to_shared(src.as_ptr(), dst.add(in_page), len) };
            point();
            hold.d.flags.fetch_or(F_UPTODATE, Ordering::Relaxed);
            drop(hold);
            point();
            at += len as u64;
            slot.size.fetch_max(at, Ordering::AcqRel);
        }
        Ok(buf.len())
    }

    /// Sets the file's size: pages past it leave the cache, the last
    /// one's tail is zeroed, the file is truncated or extended.
    pub fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_writable()?;
        if len > MAX_OFFSET {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "shared cache: size past the largest offset",
            ));
        }
        let (_inode, slot, i, generation) = self.inode_lock()?;
        // A cut moves the size first: from then on the truncation has
        // happened for every reader, and a process killed part-way leaves
        // the rest (pages past the size, the file's length) to the inode
        // lock's next holder (`inode_lock`). A growth moves it last.
        if len < slot.size.load(Ordering::Relaxed) {
            slot.size.store(len, Ordering::Release);
            point();
        }
        self.cut_cache(i, generation, len)?;
        point();
        self.file.set_len(len)?;
        point();
        slot.size.store(len, Ordering::Release);
        saw(slot, &self.file.metadata()?);
        Ok(())
    }

    /// Drops the cached pages of (slot `i`, `generation`) wholly past
    /// `len` and zeroes the rest of the page holding `len`. The inode lock
    /// is held.
    fn cut_cache(&self, i: u32, generation: u32, len: u64) -> io::Result<()> {
        let seg = self.seg();
        let me = self.me()?;
        let first_gone = len.div_ceil(PAGE);
        for (index, _) in index::pages_of(seg, i, generation, false) {
            if index < first_gone {
                continue;
            }
            let key = Key {
                slot: i,
                generation,
                index,
            };
            if let Some(hold) = index::hold_key(seg, key, me)? {
                let _index = index::index_lock(seg, me)?;
                index::forget(seg, &hold);
                point();
            }
        }
        if !len.is_multiple_of(PAGE) {
            let key = Key {
                slot: i,
                generation,
                index: len / PAGE,
            };
            if let Some(hold) = index::hold_key(seg, key, me)? {
                let dst = seg
                    .data(hold.p)
                    .ok_or_else(|| io::Error::other("no page"))?;
                // SAFETY: the page's tail past `len`, held by us.
                unsafe {
                    zero_shared(dst.add((len % PAGE) as usize), (PAGE - len % PAGE) as usize)
                };
            }
        }
        Ok(())
    }

    /// Writes back this file's dirty pages and waits for the device
    /// (`fdatasync`).
    pub fn sync_data(&self) -> io::Result<()> {
        self.write_back()?;
        self.file.sync_data()
    }

    /// As [`sync_data`](Self::sync_data), with the metadata (`fsync`).
    pub fn sync_all(&self) -> io::Result<()> {
        self.write_back()?;
        self.file.sync_all()
    }

    /// Writes back this file's dirty pages (whoever wrote them), without
    /// waiting for the device: the pages written.
    pub fn write_back(&self) -> io::Result<u64> {
        let (_inode, slot, i, generation) = self.inode_lock()?;
        self.write_back_locked(slot, i, generation)
    }

    /// Writes back the dirty pages of (slot `i`, `generation`) through
    /// this process's descriptor, in runs of consecutive file pages. A
    /// page is marked clean only if no one changed it since its bytes
    /// were copied out, so a write racing the writeback stays dirty. The
    /// inode lock is held.
    fn write_back_locked(&self, slot: &Slot, i: u32, generation: u32) -> io::Result<u64> {
        const RUN: usize = 64;
        let seg = self.seg();
        let me = self.me()?;
        let dirty = self.dirty_pages(slot, i, generation)?;
        if dirty.is_empty() {
            // (The range held none dirty: it is empty now.)
            slot.dirty_lo.store(u64::MAX, Ordering::Release);
            slot.dirty_hi.store(0, Ordering::Release);
            return Ok(0);
        }
        // Only as large as the run needs: a commit's sync writes a page
        // or two, and a bounce of a whole run would be mapped and
        // unmapped (fresh pages faulted in) at every sync.
        let bounce = Bounce::new(dirty.len().min(RUN))?;
        let mut written = 0;
        let mut cleaned = 0;
        let mut past_size = false;
        for run in dirty.chunk_by(|a, b| b.0 == a.0 + 1) {
            for run in run.chunks(RUN) {
                let mut copied = Vec::with_capacity(run.len());
                for (n, &(index, _)) in run.iter().enumerate() {
                    let key = Key {
                        slot: i,
                        generation,
                        index,
                    };
                    let Some(hold) = index::hold_key(seg, key, me)? else {
                        break;
                    };
                    let src = seg
                        .data(hold.p)
                        .ok_or_else(|| io::Error::other("no page"))?;
                    // SAFETY: a held page of the mapping into the
                    // bounce's `n`th page (`n < RUN`).
                    unsafe {
                        copy_from_shared(
                            src,
                            bounce.ptr.as_ptr().add(n * PAGE as usize),
                            PAGE as usize,
                        )
                    };
                    copied.push((key, hold.p, hold.next_version()));
                }
                let Some(&(first, ..)) = copied.first() else {
                    continue;
                };
                // SAFETY: the bounce holds `copied.len()` pages we wrote.
                let bytes = unsafe {
                    std::slice::from_raw_parts(bounce.ptr.as_ptr(), copied.len() * PAGE as usize)
                };
                point();
                FileExt::write_all_at(&self.file, bytes, first.index * PAGE)?;
                point();
                past_size |=
                    (first.index + copied.len() as u64) * PAGE > slot.size.load(Ordering::Relaxed);
                for (key, p, version) in copied {
                    cleaned += usize::from(self.mark_clean(key, p, version, me)?);
                    written += 1;
                }
            }
        }
        let size = slot.size.load(Ordering::Acquire);
        if past_size && self.file.metadata()?.len() > size {
            self.file.set_len(size)?;
        }
        if written > 0 {
            wrote_back(slot);
        }
        if cleaned == dirty.len() {
            // Every page the range held dirty is clean, and no write ran
            // meanwhile (the inode lock is held).
            slot.dirty_lo.store(u64::MAX, Ordering::Release);
            slot.dirty_hi.store(0, Ordering::Release);
        }
        Ok(written)
    }

    /// Marks page `p` of `key` clean if its version is still `version`;
    /// whether it is clean now.
    fn mark_clean(&self, key: Key, p: u64, version: u64, me: u32) -> io::Result<bool> {
        let seg = self.seg();
        let Some(hold) = index::hold_key(seg, key, me)? else {
            return Ok(false);
        };
        if hold.p != p || hold.d.state.load(Ordering::Relaxed) >> 32 != version {
            return Ok(false);
        }
        if hold.d.flags.fetch_and(!F_DIRTY, Ordering::Relaxed) & F_DIRTY != 0 {
            point();
            index::dec_dirty(seg);
        }
        Ok(true)
    }

    /// The file's dirty pages, `(index, page)` in file order: those in its
    /// slot's dirty range, looked up one by one under the index lock, or,
    /// for a range of more than a quarter of the cache, every descriptor
    /// walked. The inode lock is held.
    fn dirty_pages(&self, slot: &Slot, i: u32, generation: u32) -> io::Result<Vec<(u64, u64)>> {
        let (lo, hi) = (
            slot.dirty_lo.load(Ordering::Acquire),
            slot.dirty_hi.load(Ordering::Acquire),
        );
        if lo > hi {
            return Ok(Vec::new());
        }
        let seg = self.seg();
        if hi - lo >= seg.pages / 4 {
            return Ok(index::pages_of(seg, i, generation, true));
        }
        let _index = index::index_lock(seg, self.me()?)?;
        Ok(index::dirty_in(seg, i, generation, lo, hi))
    }

    /// The descriptor this process uses for the file's IO.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The cache the file is served through.
    pub fn cache(&self) -> &SharedCache {
        &self.cache
    }
}

impl AsFd for SharedFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// Opens `path` for writing (`read`: for reading instead), `O_DIRECT`
/// where the filesystem takes it, as the group's own descriptors are (the
/// cache's IO then leaves no second copy in the kernel's cache).
pub(crate) fn open_direct(path: &std::path::Path, read: bool) -> io::Result<File> {
    let open = |direct: bool| {
        let mut o = std::fs::OpenOptions::new();
        o.read(read).write(!read);
        if direct {
            std::os::unix::fs::OpenOptionsExt::custom_flags(&mut o, libc::O_DIRECT);
        }
        o.open(path)
    };
    open(true).or_else(|_| open(false))
}
