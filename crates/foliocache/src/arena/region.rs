//! The mapping under the arena: one anonymous private region, aligned,
//! faulted in by `MADV_POPULATE_WRITE` (or by touch), unmapped on drop.

use std::ffi::c_void;
use std::fmt;
use std::io;
use std::ptr::NonNull;

use rustix::io::Errno;
use rustix::mm::{self, Advice};

use super::{MAX_BLOCK_BYTES, PAGE_SIZE, POPULATE_RETRIES};

/// How a region was faulted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PopulateMethod {
    /// `madvise(MADV_POPULATE_WRITE)`, Linux 5.14+.
    Madvise,
    /// A volatile write of one byte per page.
    Touch,
}

impl fmt::Display for PopulateMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PopulateMethod::Madvise => "MADV_POPULATE_WRITE",
            PopulateMethod::Touch => "touching each page",
        })
    }
}

/// An anonymous private read-write mapping, unmapped on drop.
///
/// Under Miri, which cannot unmap part of a mapping nor take `madvise`, it
/// is a zeroed heap block with the same size and alignment instead: the
/// arena's bookkeeping and every pointer it hands out are checked the same
/// way, and populating touches each page (the fallback path).
pub(crate) struct Region {
    /// First byte; aligned as asked in `map_aligned`.
    pub(crate) ptr: NonNull<u8>,
    /// Length in bytes, a multiple of `PAGE_SIZE`.
    pub(super) len: usize,
    /// A shared mapping of a memory file (the guardian's segment,
    /// `map_shared_aligned`): its pages are freed by `MADV_REMOVE`, not
    /// `MADV_DONTNEED`, which only unmaps a shared page.
    pub(super) shared: bool,
    /// The heap block's layout (Miri only).
    #[cfg(miri)]
    pub(super) layout: std::alloc::Layout,
}

impl Region {
    /// Under Miri: a zeroed heap block of `len` bytes aligned to `align`.
    #[cfg(miri)]
    pub(crate) fn map_aligned(len: usize, align: usize) -> io::Result<Region> {
        let oom = || io::Error::from(io::ErrorKind::OutOfMemory);
        let layout = std::alloc::Layout::from_size_align(len, align).map_err(|_| oom())?;
        // SAFETY: `layout` has a non-zero size (`len > 0`, as callers give).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(oom)?;
        Ok(Region {
            ptr,
            len,
            shared: false,
            layout,
        })
    }

    /// Maps `len` bytes (a non-zero multiple of `PAGE_SIZE`) aligned to
    /// `align` (a power of two, a multiple of `PAGE_SIZE`): maps
    /// `len + align`, then unmaps the excess before and after.
    #[cfg(not(miri))]
    pub(crate) fn map_aligned(len: usize, align: usize) -> io::Result<Region> {
        debug_assert!(len > 0 && len & (PAGE_SIZE - 1) == 0);
        debug_assert!(align.is_power_of_two() && align >= PAGE_SIZE);
        let context = |err: io::Error| {
            io::Error::new(
                err.kind(),
                format!(
                    "mapping {} MiB for the folio arena: {err}; choose a smaller capacity",
                    len >> 20
                ),
            )
        };
        let map_len = len
            .checked_add(align)
            .ok_or_else(|| context(io::Error::from(io::ErrorKind::OutOfMemory)))?;
        // SAFETY: a fresh anonymous mapping with no address hint cannot
        // overlap memory anyone uses.
        let raw = unsafe {
            mm::mmap_anonymous(
                std::ptr::null_mut(),
                map_len,
                mm::ProtFlags::READ | mm::ProtFlags::WRITE,
                mm::MapFlags::PRIVATE,
            )
        }
        .map_err(|e| context(e.into()))?;
        let raw = raw.cast::<u8>();
        let head = (raw as usize).next_multiple_of(align) - raw as usize;
        let tail = map_len - head - len;
        let aligned = raw.wrapping_add(head);
        let after = aligned.wrapping_add(len);
        if head > 0 {
            // SAFETY: [raw, raw + head) is the start of the mapping we just
            // made, page-aligned (align and mmap results are), and nobody
            // else knows its address.
            if let Err(err) = unsafe { mm::munmap(raw.cast(), head) } {
                // SAFETY: same mapping, nothing of it handed out; best effort.
                let _ = unsafe { mm::munmap(raw.cast(), map_len) };
                return Err(context(err.into()));
            }
        }
        if tail > 0 {
            // SAFETY: [after, after + tail) is the end of the same mapping,
            // page-aligned, unknown to anyone else.
            if let Err(err) = unsafe { mm::munmap(after.cast(), tail) } {
                // SAFETY: [aligned, aligned + len) is what is left of it.
                let _ = unsafe { mm::munmap(aligned.cast(), len) };
                return Err(context(err.into()));
            }
        }
        let ptr = NonNull::new(aligned).ok_or_else(|| context(io::Error::other("null mapping")))?;
        Ok(Region {
            ptr,
            len,
            shared: false,
        })
    }

    /// Maps `len` bytes of the memory file `fd` from `offset` (the
    /// guardian's segment), shared, at an address aligned to `align`
    /// (`Map::new_aligned`: an aligned reservation, the file mapped over
    /// it), not inherited by a child of `fork`.
    #[cfg(not(miri))]
    pub(crate) fn map_shared_aligned(
        fd: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: usize,
        align: usize,
    ) -> io::Result<Region> {
        let map = crate::shm::Map::new_aligned(fd, offset, len as u64, align).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "mapping {} MiB of the guardian's segment for the folio arena: {e}",
                    len >> 20
                ),
            )
        })?;
        let (ptr, len) = map.into_raw();
        // The Region owns the mapping from here (its drop unmaps it).
        let region = Region {
            ptr,
            len,
            shared: true,
        };
        // Not inherited by a child of `fork`: a shared arena would be the
        // parent's own memory in the child, whose copy of the cache would
        // write the parent's folios. The child has no arena at that address
        // (a use of the inherited cache faults) instead of sharing it.
        // SAFETY: MADV_DONTFORK changes what a fork copies, not the memory;
        // the range is exactly this mapping.
        unsafe { mm::madvise(ptr.as_ptr().cast(), len, mm::Advice::LinuxDontFork) }
            .map_err(io::Error::from)?;
        Ok(region)
    }

    /// Under Miri: no memory files; a heap block as `map_aligned`.
    #[cfg(miri)]
    pub(crate) fn map_shared_aligned(
        _fd: std::os::fd::BorrowedFd<'_>,
        _offset: u64,
        len: usize,
        align: usize,
    ) -> io::Result<Region> {
        Region::map_aligned(len, align)
    }

    /// Under Miri: no huge pages (Miri has no `madvise`).
    #[cfg(miri)]
    pub(crate) fn advise_huge_pages(&self) -> bool {
        false
    }

    /// Asks for transparent huge pages; returns whether the kernel agreed.
    #[cfg(not(miri))]
    pub(crate) fn advise_huge_pages(&self) -> bool {
        // SAFETY: madvise with advice MADV_HUGEPAGE changes no memory
        // contents; the range is exactly our mapping.
        let ret = unsafe { mm::madvise(self.ptr.as_ptr().cast(), self.len, Advice::LinuxHugepage) };
        if let Err(e) = ret {
            log::debug!(
                "arena: MADV_HUGEPAGE refused ({}); order-9 blocks may not be huge pages",
                io::Error::from(e)
            );
        }
        ret.is_ok()
    }

    /// Faults every page of the region in, writable, before anyone uses
    /// it: `MADV_POPULATE_WRITE`, or, where the kernel does not know it
    /// (`EINVAL`, before 5.14) or `force_touch` is set, a write of a zero
    /// byte per page (so a region whose zero bytes are its valid state
    /// keeps it). `what` names the region in an error.
    pub(crate) fn populate(&self, what: &str, force_touch: bool) -> io::Result<PopulateMethod> {
        if !force_touch {
            match self.populate_parallel() {
                Ok(()) => return Ok(PopulateMethod::Madvise),
                Err(e) if e.raw_os_error() == Some(Errno::INVAL.raw_os_error()) => {}
                Err(err) => {
                    return Err(io::Error::new(
                        err.kind(),
                        format!(
                            "faulting in the {} MiB {what} (MADV_POPULATE_WRITE): \
                             {err}; choose a smaller capacity or Populate::Lazy",
                            self.len >> 20
                        ),
                    ))
                }
            }
            log::info!("{what}: MADV_POPULATE_WRITE unsupported, touching each page instead");
        }
        let base = self.ptr.as_ptr();
        for offset in (0..self.len).step_by(PAGE_SIZE) {
            // SAFETY: offset < len, so the byte is inside our private
            // read-write mapping; the arena is being built, so no one else
            // has a pointer into it. A volatile write cannot be elided.
            unsafe { base.add(offset).write_volatile(0) };
        }
        Ok(PopulateMethod::Touch)
    }
}

impl Region {
    /// `MADV_POPULATE_WRITE` over the region, split between up to
    /// [`POPULATE_THREADS`] threads (one per CPU) for a region of
    /// [`POPULATE_SPLIT`] or more: the first touch of fresh memory costs
    /// the host most of the time, and several threads fault it in faster
    /// than one. The first error is returned
    /// (`EINVAL` where the kernel does not know the advice).
    fn populate_parallel(&self) -> io::Result<()> {
        // Miri has no `madvise`: as a kernel without the advice, so the
        // pages are touched.
        if cfg!(miri) {
            return Err(Errno::INVAL.into());
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = if self.len >= POPULATE_SPLIT {
            cpus.min(POPULATE_THREADS)
        } else {
            1
        };
        // Whole 2 MiB blocks per thread (the region is 2 MiB aligned).
        let chunk = self.len.div_ceil(threads).next_multiple_of(MAX_BLOCK_BYTES);
        let base = self.ptr.as_ptr() as usize;
        let len = self.len;
        if threads == 1 {
            return populate_range(base, len);
        }
        std::thread::scope(|scope| {
            let parts: Vec<_> = (0..len)
                .step_by(chunk)
                .map(|off| {
                    let n = chunk.min(len - off);
                    scope.spawn(move || populate_range(base + off, n))
                })
                .collect();
            parts
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(io::Error::other("populate thread panicked")))
                })
                .collect::<io::Result<Vec<()>>>()
                .map(|_| ())
        })
    }
}

/// Regions this large are faulted in by several threads.
const POPULATE_SPLIT: usize = 256 << 20;
/// At most this many populate threads.
const POPULATE_THREADS: usize = 4;

/// `MADV_POPULATE_WRITE` over `len` bytes at address `addr` (inside a
/// region being built), retrying `EINTR`/`EAGAIN` a few times.
pub(super) fn populate_range(addr: usize, len: usize) -> io::Result<()> {
    let mut retries = 0;
    loop {
        // SAFETY: MADV_POPULATE_WRITE faults pages in as a write would,
        // without changing their contents; the range lies inside the
        // region's private read-write mapping, which nobody uses yet.
        match unsafe { mm::madvise(addr as *mut c_void, len, Advice::LinuxPopulateWrite) } {
            Ok(()) => return Ok(()),
            Err(Errno::INTR | Errno::AGAIN) if retries < POPULATE_RETRIES => retries += 1,
            Err(e) => return Err(e.into()),
        }
    }
}

impl Drop for Region {
    #[cfg(miri)]
    fn drop(&mut self) {
        // SAFETY: the block was allocated in `map_aligned` with `layout`
        // and is freed once; as below, no use of its pointers may follow.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }

    #[cfg(not(miri))]
    fn drop(&mut self) {
        // SAFETY: [ptr, ptr + len) is a mapping this Region owns and unmaps
        // once. Pointers into it exist only as Arena::page_ptr results,
        // which are documented valid only while the arena lives; the arena
        // (or Arena::new, on failure) is dropping this Region, so no use of
        // them may follow.
        if let Err(e) = unsafe { mm::munmap(self.ptr.as_ptr().cast(), self.len) } {
            log::error!(
                "arena: munmap of {} bytes failed: {}",
                self.len,
                io::Error::from(e)
            );
        }
    }
}
