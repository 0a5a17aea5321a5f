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
//! - **Hits take no lock and write nothing shared** but, now and then,
//!   their page's descriptor (its referenced bit once the clock cleared
//!   it; the tick of its last read once the curve's clock moved: `curve.rs`):
//!   the index walk finds the page, its descriptor's state word is read
//!   before and after the copy (a seqlock), and the copy counts only if no
//!   one held or changed the page meanwhile ([`index::find`]).
//! - **Writes, size changes and claims of missing pages** take the
//!   file's inode lock; a read's miss claims its run of missing pages
//!   there, held, then reads them in one IO without it ([`read`]). The
//!   bytes of one page are changed only by the one process holding the
//!   page, and the index only under the index lock.
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
mod curve;
mod figures;
pub use figures::{ReadCounts, SharedStats};
mod flusher;
pub use flusher::Flusher;
mod handover;
mod huge;
mod index;
mod join;
mod listing;
mod lock;
mod member;
mod named;
pub use named::Host;
mod persist;
mod read;
mod seg;
mod slots;
mod stat;
mod truncate;
mod write;
mod writeback;
pub(crate) use writeback::open_direct;

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use figures::Published;
use lock::Me;
use read::Fill;
use seg::{Seg, Slot, PAGE, SLOT_FREE, SLOT_USED};

use crate::stats::{AgeCounts, ShardedCounter};

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
    /// Bytes this process's reads returned.
    read_bytes: ShardedCounter,
    /// Of those, the bytes of pages read from their files for a read
    /// (`SharedStats::first_read_bytes`).
    first_read_bytes: ShardedCounter,
    /// Bytes this process read from files into the cache.
    loaded_bytes: ShardedCounter,
    /// This process's hits (pages from memory) by their age's bin, for
    /// the group's curve (`curve.rs`).
    aged: AgeCounts,
    /// The totals of another cache of this process's last counted here
    /// (`SharedCache::count_reads_elsewhere`).
    elsewhere: [crate::sync::StatU64; 5],
    /// What this process last published in its participant.
    published: Published,
    /// The process whose thread collapses the pages (`huge.rs`), 0 if
    /// none: only it waits for the collapse to end.
    collapser: crate::sync::AtomicU32,
    /// A read of a key hashed under this is in the group's sample
    /// (`curve.rs`).
    sample_below: u64,
    /// Sampled reads a tick of the group's clock lasts (`curve.rs`).
    tick_len: u64,
    /// The group's estimator, where this process made the cache.
    owner: Option<Box<curve::Owner>>,
}

impl SharedCache {
    /// A new shared cache of `capacity` bytes (whole 4 KiB pages; at
    /// least one) in a new memory file. A thread of this process then
    /// maps its pages by 2 MiB pages where the kernel allows, while the
    /// cache is in use ([`wait_huge_pages`](Self::wait_huge_pages)): all
    /// its memory but the file slots' (faulted in as files open) is
    /// faulted in by it.
    pub fn new(capacity: u64) -> io::Result<SharedCache> {
        let cache = SharedCache::made(Seg::create(capacity / PAGE)?);
        cache.join();
        cache.collapse_in_background();
        Ok(cache)
    }

    /// Attaches to the shared cache in memory file `fd` (another
    /// process's [`memory_file`](SharedCache::memory_file), passed on by
    /// inheritance or `SCM_RIGHTS`). Its layout is checked first:
    /// anything else is refused.
    pub fn attach(fd: OwnedFd) -> io::Result<SharedCache> {
        Ok(SharedCache::with(Seg::attach(fd)?, false))
    }

    /// A cache over the segment this process just made: it keeps the
    /// group's curve (`curve.rs`).
    fn made(seg: Seg) -> SharedCache {
        let cache = SharedCache::with(seg, true);
        cache.sample_in_background();
        cache
    }

    fn with(seg: Seg, owner: bool) -> SharedCache {
        SharedCache {
            inner: Arc::new(Inner {
                me: Me::new(),
                hits: ShardedCounter::default(),
                misses: ShardedCounter::default(),
                read_bytes: ShardedCounter::default(),
                first_read_bytes: ShardedCounter::default(),
                loaded_bytes: ShardedCounter::default(),
                aged: AgeCounts::default(),
                elsewhere: Default::default(),
                published: Published::default(),
                collapser: crate::sync::AtomicU32::new(0),
                sample_below: curve::threshold(seg.pages),
                tick_len: curve::tick_len(seg.pages),
                owner: owner.then(|| Box::new(curve::Owner::new(seg.pages))),
                seg,
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
            sample_key: crate::mrc::file_key(meta.dev(), meta.ino()),
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
}

/// A file served through a [`SharedCache`]: reads and writes at offsets,
/// coherent with every other process's handle of the same file.
pub struct SharedFile {
    cache: SharedCache,
    file: File,
    dev: u64,
    ino: u64,
    /// The file's number in the group's sample (`curve.rs`).
    sample_key: u64,
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

/// A file's close publishes the process's reads (`Inner::publish`): a
/// short-lived reader (a `cat` under the interposer) counts in the
/// group's figures though it reads fewer pages than a publication's
/// period.
impl Drop for SharedFile {
    fn drop(&mut self) {
        self.cache.inner.publish();
    }
}

/// The largest offset a read or write reaches.
const MAX_OFFSET: u64 = i64::MAX as u64;

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
        Err(slots::moving())
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
