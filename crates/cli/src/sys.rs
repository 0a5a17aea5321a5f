//! The OS calls the bench needs that `std` does not wrap, each in a small
//! safe type or function: a page-aligned buffer ([`AlignedBuf`]), a shared
//! file mapping ([`Mmap`]), fresh anonymous memory ([`AnonMap`]), a memory
//! file ([`memfd`]), `preadv2`/`pwritev2` with flags,
//! `posix_fadvise(DONTNEED)`, `getrusage` and `rdtsc`. This is the crate's only
//! module with `unsafe` code.

use std::alloc::{self, Layout};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::time::Duration;

/// The page size the bench assumes (and O_DIRECT alignment it uses).
pub const PAGE: usize = 4096;

/// `RWF_DONTCACHE`: uncached buffered IO (Linux 6.14). Defined here because
/// older `libc` releases lack it.
pub const RWF_DONTCACHE: libc::c_int = 0x80;

/// `RWF_NOWAIT`: fail with `EAGAIN` instead of waiting (for a buffered
/// read: when the data is not in the page cache).
pub const RWF_NOWAIT: libc::c_int = 0x8;

/// A heap buffer of `len` bytes that starts `offset` bytes past a
/// [`PAGE`]-aligned address, so O_DIRECT can use it (`offset` 0) and copies
/// into misaligned destinations can be measured (`offset` > 0). Its memory
/// is written once at creation, so the bench never pays first-touch faults
/// on it.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
    offset: usize,
    len: usize,
}

// SAFETY: the buffer owns its allocation exclusively (like a `Vec<u8>`);
// nothing in it is tied to a thread.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// Allocates a buffer of `len` bytes at `offset` past a page boundary.
    ///
    /// # Errors
    /// `InvalidInput` for `len` 0 or a size that overflows; `OutOfMemory`
    /// if the allocator fails.
    pub fn new(len: usize, offset: usize) -> io::Result<AlignedBuf> {
        let size = offset
            .checked_add(len)
            .and_then(|n| n.checked_next_multiple_of(PAGE))
            .filter(|_| len > 0)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "bad buffer size"))?;
        let layout = Layout::from_size_align(size, PAGE)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: `layout` has a non-zero size (len > 0).
        let raw = unsafe { alloc::alloc(layout) };
        let ptr = NonNull::new(raw).ok_or(io::ErrorKind::OutOfMemory)?;
        // SAFETY: `ptr` is a fresh allocation of `size` bytes.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0x5a, size) };
        Ok(AlignedBuf {
            ptr,
            layout,
            offset,
            len,
        })
    }

    /// The buffer's bytes.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `offset + len <= layout.size()` by construction, the
        // memory is initialised and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(self.offset), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// A `MAP_SHARED` mapping of a whole file, read-only or read-write.
///
/// Copies in and out go through raw pointers, so several threads may copy
/// out of one mapping at once. Callers must not copy *into* a region
/// another thread is reading or writing at the same time (the bench gives
/// each writing thread its own file).
pub struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; the
// methods that touch it copy through raw pointers with bounds checks, and
// the type's contract forbids overlapping concurrent writes.
unsafe impl Send for Mmap {}
// SAFETY: as for `Send`: `&Mmap` only allows bounds-checked copies.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Maps the first `len` bytes of `file`, writable if `write`.
    ///
    /// # Errors
    /// `InvalidInput` for `len` 0; the OS error of `mmap(2)`.
    pub fn new(file: &File, len: usize, write: bool) -> io::Result<Mmap> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        let prot = if write {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh shared mapping of an open file at an address the
        // kernel picks; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast()).ok_or_else(io::Error::last_os_error)?;
        Ok(Mmap { ptr, len })
    }

    fn check(&self, off: usize, n: usize) -> io::Result<()> {
        match off.checked_add(n) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "copy past the end of the mapping",
            )),
        }
    }

    /// Copies `dst.len()` bytes at `off` out of the mapping.
    ///
    /// # Errors
    /// `UnexpectedEof` if the range leaves the mapping.
    #[inline]
    pub fn copy_out(&self, off: usize, dst: &mut [u8]) -> io::Result<()> {
        self.check(off, dst.len())?;
        // SAFETY: the range is inside the mapping (checked above) and `dst`
        // is a distinct Rust buffer; no thread writes this range meanwhile
        // (the type's contract).
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), dst.len())
        };
        Ok(())
    }

    /// Copies `src` into the mapping at `off` (a writable mapping only).
    ///
    /// # Errors
    /// `UnexpectedEof` if the range leaves the mapping.
    #[inline]
    pub fn copy_in(&self, off: usize, src: &[u8]) -> io::Result<()> {
        self.check(off, src.len())?;
        // SAFETY: the range is inside the mapping, which the caller made
        // writable; no other thread touches this range meanwhile (the
        // type's contract).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len())
        };
        Ok(())
    }

    /// Faults every page in (`MADV_POPULATE_READ`/`_WRITE`, or a read of a
    /// byte per page where the kernel lacks those), so the measurement
    /// copies instead of taking page faults.
    pub fn prefault(&self, write: bool) {
        let advice = if write {
            libc::MADV_POPULATE_WRITE
        } else {
            libc::MADV_POPULATE_READ
        };
        // SAFETY: advice on exactly our own mapping; it changes no contents.
        let r = unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.len, advice) };
        if r == 0 {
            return;
        }
        let mut sum = 0u8;
        for off in (0..self.len).step_by(PAGE) {
            // SAFETY: `off < len`: inside the mapping.
            sum ^= unsafe { std::ptr::read_volatile(self.ptr.as_ptr().add(off)) };
        }
        std::hint::black_box(sum);
    }

    /// Writes the mapping's dirty pages back to the file and waits for
    /// them (`msync(MS_SYNC)`).
    ///
    /// # Errors
    /// The OS error of `msync(2)`.
    pub fn sync(&self) -> io::Result<()> {
        // SAFETY: our own page-aligned mapping; msync changes no contents.
        let r = unsafe { libc::msync(self.ptr.as_ptr().cast(), self.len, libc::MS_SYNC) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// How many of the mapping's pages are in the kernel's page cache
    /// (`mincore`), and how many pages it has.
    ///
    /// # Errors
    /// The OS error of `mincore(2)`.
    pub fn resident_pages(&self) -> io::Result<(usize, usize)> {
        let pages = self.len.div_ceil(PAGE);
        let mut vec = vec![0u8; pages];
        // SAFETY: `ptr`/`len` is our page-aligned mapping and `vec` has one
        // byte per page of it.
        let r = unsafe { libc::mincore(self.ptr.as_ptr().cast(), self.len, vec.as_mut_ptr()) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((vec.iter().filter(|&&b| b & 1 != 0).count(), pages))
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` made; no reference into
        // it outlives `self` (copies go through `&self`).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A private anonymous mapping (`MAP_PRIVATE | MAP_ANONYMOUS`), left
/// untouched at creation: its pages are faulted in by the first write to
/// each (the `anon` engine of the populate scenario, which measures exactly
/// that). Writes go through raw pointers: callers must not write a range
/// another thread reads or writes at the same time (the bench gives each
/// writing thread its own mapping).
pub struct AnonMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; the methods that
// touch it copy or set bytes through raw pointers with bounds checks, and
// the type's contract forbids overlapping concurrent writes.
unsafe impl Send for AnonMap {}
// SAFETY: as for `Send`.
unsafe impl Sync for AnonMap {}

impl AnonMap {
    /// Maps `len` bytes of fresh anonymous memory (nothing faulted in).
    ///
    /// # Errors
    /// `InvalidInput` for `len` 0; the OS error of `mmap(2)`.
    pub fn new(len: usize) -> io::Result<AnonMap> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // SAFETY: a fresh private anonymous mapping at an address the
        // kernel picks; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast()).ok_or_else(io::Error::last_os_error)?;
        Ok(AnonMap { ptr, len })
    }

    /// `madvise(MADV_HUGEPAGE)` over the mapping: transparent huge pages
    /// where the kernel's policy allows them (as foliocache's arena asks).
    ///
    /// # Errors
    /// The OS error of `madvise(2)`.
    pub fn advise_huge_pages(&self) -> io::Result<()> {
        // SAFETY: advice on exactly our own mapping; it changes no contents.
        let r = unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.len, libc::MADV_HUGEPAGE) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Faults every page in, writable (`MADV_POPULATE_WRITE`, Linux 5.14),
    /// as foliocache's eager arena does.
    ///
    /// # Errors
    /// The OS error of `madvise(2)` (`EINVAL` before 5.14).
    pub fn populate_write(&self) -> io::Result<()> {
        let mut tries = 0;
        loop {
            tries += 1;
            // SAFETY: populating our own private read-write mapping changes
            // no contents.
            let r = unsafe {
                libc::madvise(
                    self.ptr.as_ptr().cast(),
                    self.len,
                    libc::MADV_POPULATE_WRITE,
                )
            };
            if r == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if tries >= 8 || !matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN)) {
                return Err(e);
            }
        }
    }

    /// Sets `n` bytes at `off` to `byte` (a `memset`, taking the page
    /// faults of pages not touched before).
    ///
    /// # Errors
    /// `UnexpectedEof` if the range leaves the mapping.
    #[inline]
    pub fn fill(&self, off: usize, n: usize, byte: u8) -> io::Result<()> {
        match off.checked_add(n) {
            Some(end) if end <= self.len => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "memset past the end of the mapping",
                ))
            }
        }
        // SAFETY: `off..off + n` is inside our writable mapping (checked
        // above); no other thread touches this range meanwhile (the type's
        // contract).
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(off), byte, n) };
        Ok(())
    }

    /// Copies `dst.len()` bytes at `off` out of the mapping.
    ///
    /// # Errors
    /// `UnexpectedEof` if the range leaves the mapping.
    pub fn copy_out(&self, off: usize, dst: &mut [u8]) -> io::Result<()> {
        match off.checked_add(dst.len()) {
            Some(end) if end <= self.len => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "copy past the end of the mapping",
                ))
            }
        }
        // SAFETY: the range is inside the mapping (checked above) and `dst`
        // is a distinct Rust buffer; no thread writes this range meanwhile
        // (the type's contract).
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), dst.len())
        };
        Ok(())
    }
}

impl Drop for AnonMap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` made; no reference into
        // it outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A memory file (`memfd_create(2)`, no flags): the kernel's shmem, what
/// the populate scenario's `kernel` engine writes into.
///
/// # Errors
/// The OS error of `memfd_create`.
pub fn memfd(name: &str) -> io::Result<File> {
    let c =
        std::ffi::CString::new(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::memfd_create(c.as_ptr(), 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// Pages of `file`'s first `len` bytes in the kernel page cache, and the
/// number of pages (maps the file without touching it, asks `mincore`).
///
/// # Errors
/// The OS errors of `mmap(2)` and `mincore(2)`.
pub fn resident_pages(file: &File, len: u64) -> io::Result<(usize, usize)> {
    let len = usize::try_from(len).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    Mmap::new(file, len, false)?.resident_pages()
}

fn check_len(r: isize) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `preadv2(2)` of one buffer at `off` with `flags` (`RWF_*`).
///
/// # Errors
/// The OS error (`EOPNOTSUPP` where a flag is not supported).
#[inline]
pub fn preadv2(file: &File, buf: &mut [u8], off: u64, flags: libc::c_int) -> io::Result<usize> {
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: one iovec describing `buf`, which is writable and outlives
    // the call; the fd is open for `file`'s lifetime.
    let r = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, off as libc::off_t, flags) };
    check_len(r)
}

/// `pwritev2(2)` of one buffer at `off` with `flags` (`RWF_*`).
///
/// # Errors
/// The OS error (`EOPNOTSUPP` where a flag is not supported).
#[inline]
pub fn pwritev2(file: &File, buf: &[u8], off: u64, flags: libc::c_int) -> io::Result<usize> {
    let iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: one iovec describing `buf`, which the kernel only reads and
    // which outlives the call; the fd is open for `file`'s lifetime.
    let r = unsafe { libc::pwritev2(file.as_raw_fd(), &iov, 1, off as libc::off_t, flags) };
    check_len(r)
}

/// `posix_fadvise(POSIX_FADV_DONTNEED)` on the whole file: the kernel drops
/// its clean cached pages (sync the file first to drop them all).
///
/// # Errors
/// The error `posix_fadvise` returns.
pub fn drop_cache(file: &File) -> io::Result<()> {
    // SAFETY: plain syscall on an open fd; no memory is passed.
    let r = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok(())
}

/// CPU time of the whole process so far: (user, system), from
/// `getrusage(RUSAGE_SELF)`.
pub fn cpu_times() -> (Duration, Duration) {
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable `rusage`.
    let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if r != 0 {
        return (Duration::ZERO, Duration::ZERO);
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

/// The CPU's time-stamp counter (`rdtsc`): about 10 ns to read here,
/// against about 27 ns for `Instant::now()` through the vDSO.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` has no preconditions and every x86_64 CPU has it.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buf_is_aligned_plus_offset() {
        for off in [0, 8, 100] {
            let mut b = AlignedBuf::new(4096, off).unwrap();
            let s = b.as_mut_slice();
            assert_eq!(s.len(), 4096);
            assert_eq!(s.as_ptr() as usize % PAGE, off);
        }
    }

    #[test]
    fn aligned_buf_rejects_empty() {
        assert!(AlignedBuf::new(0, 0).is_err());
    }
}
