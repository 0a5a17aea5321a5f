//! The OS calls the bench needs that `std` does not wrap, each in a small
//! safe type or function: a page-aligned buffer ([`AlignedBuf`]), a shared
//! file mapping ([`Mmap`], made under an unsafe contract: nothing else may
//! change the file meanwhile), fresh anonymous memory ([`AnonMap`]), a memory
//! file ([`memfd`]), `preadv2`/`pwritev2` with flags,
//! `posix_fadvise(DONTNEED)`, `getrusage` and `rdtsc`. This is the crate's only
//! module with `unsafe` code.

use std::alloc::{self, Layout};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
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

/// A mapping made here and unmapped on drop: what [`Mmap`] and
/// [`AnonMap`] share (they dereference to it). Through `&Mapping` the bytes
/// can only be read ([`copy_out`](Self::copy_out)) or advised on without
/// changing them, so it is `Sync`; writing takes the owner's `&mut` (its
/// `copy_in` or `fill`), so no copy can race a write of this process.
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is memory owned by this value, like a `Box<[u8]>`;
// nothing in it is tied to a thread.
unsafe impl Send for Mapping {}
// SAFETY: `&Mapping` allows only reads of the bytes and advice that
// changes none of them; the only writes (`Mmap::copy_in`, `AnonMap::fill`)
// take `&mut` of the owner, so they never run while a `&Mapping` is used.
// Changes from outside the process are excluded by `Mmap::new`'s contract
// (an anonymous private mapping has none).
unsafe impl Sync for Mapping {}

impl Mapping {
    /// `mmap(2)` of `len` bytes (of `fd` from offset 0, or anonymous) at an
    /// address the kernel picks. Private: a mapping of a file is only safe
    /// to read under [`Mmap::new`]'s contract; mapping it without reading
    /// it ([`resident_pages`]) needs none.
    fn new(
        fd: Option<BorrowedFd<'_>>,
        len: usize,
        prot: libc::c_int,
        flags: libc::c_int,
    ) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        let raw = fd.map_or(-1, |f| f.as_raw_fd());
        // SAFETY: a fresh mapping at an address the kernel picks
        // (no MAP_FIXED): no existing memory is affected; `fd` is open for
        // the call (borrowed) or -1 for MAP_ANONYMOUS.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, raw, 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast()).ok_or_else(io::Error::last_os_error)?;
        Ok(Mapping { ptr, len })
    }

    /// The address of byte `off`, if `off..off + n` lies inside the
    /// mapping; `UnexpectedEof` otherwise.
    #[inline]
    fn range(&self, off: usize, n: usize) -> io::Result<*mut u8> {
        match off.checked_add(n) {
            // SAFETY: `off <= end <= len`: inside the mapping or one past
            // its end.
            Some(end) if end <= self.len => Ok(unsafe { self.ptr.as_ptr().add(off) }),
            _ => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "access past the end of the mapping",
            )),
        }
    }

    /// Copies `dst.len()` bytes at `off` out of the mapping (a plain
    /// `memcpy`).
    ///
    /// # Errors
    /// `UnexpectedEof` if the range leaves the mapping.
    #[inline]
    pub fn copy_out(&self, off: usize, dst: &mut [u8]) -> io::Result<()> {
        let src = self.range(off, dst.len())?;
        // SAFETY: the range is inside the mapping (checked by `range`) and
        // readable; `dst` is a distinct Rust buffer. Nothing writes the
        // range meanwhile: writes of this process take `&mut` of the owner
        // (see the `Sync` impl), and changes from elsewhere are excluded by
        // `Mmap::new`'s contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// `madvise(2)` over the whole mapping, for advice that changes no
    /// contents (populate, huge pages).
    fn advise(&self, advice: libc::c_int) -> io::Result<()> {
        // SAFETY: advice on exactly our own mapping; the callers pass only
        // advice that leaves its contents as they are.
        let r = unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.len, advice) };
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
        // byte per page of it; mincore reads no contents.
        let r = unsafe { libc::mincore(self.ptr.as_ptr().cast(), self.len, vec.as_mut_ptr()) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((vec.iter().filter(|&&b| b & 1 != 0).count(), pages))
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` made; no borrow of it
        // outlives `self` (copies borrow `self` for their duration only).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A `MAP_SHARED` mapping of the start of a file, read-only or read-write.
///
/// Copies out go through `&self` ([`Mapping::copy_out`], by `Deref`), so
/// several threads may read one mapping at once; [`copy_in`](Self::copy_in)
/// takes `&mut self`, so a thread writing a mapping owns it for the time of
/// the copy and nothing of this process reads or writes it meanwhile (the
/// bench gives each writing thread its own mapping, `job::run`). What
/// other processes and descriptors may do to the file is
/// [`new`](Self::new)'s contract. (A copy in through a shared borrow, the
/// race this type once allowed, does not compile; the crate is a binary, so
/// the test `writes_take_the_mapping_exclusively` pins the signatures
/// instead of a `compile_fail` doc test.)
pub struct Mmap {
    map: Mapping,
    writable: bool,
}

impl Mmap {
    /// Maps the first `len` bytes of `file` (`MAP_SHARED`), writable if
    /// `write`.
    ///
    /// # Safety
    /// For as long as the returned `Mmap` lives, the first `len` bytes of
    /// `file` change only through this `Mmap`'s own
    /// [`copy_in`](Self::copy_in), and the file keeps at least `len` bytes:
    /// nothing else, in this process or another, writes them (`write(2)`,
    /// `pwrite`, an `O_DIRECT` write, `fallocate`, another writable mapping
    /// of the file, including another `Mmap`) or truncates the file. Reads
    /// of the mapping are plain memory reads (`copy_out` is a `memcpy`):
    /// a change made elsewhere while one runs is a data race, undefined
    /// behaviour, and a page past a shrunken end faults (`SIGBUS`).
    ///
    /// # Errors
    /// `InvalidInput` for `len` 0 or past the file's end (its pages would
    /// fault); the OS error of `fstat(2)` or `mmap(2)`.
    pub unsafe fn new(file: &File, len: usize, write: bool) -> io::Result<Mmap> {
        if file.metadata()?.len() < len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "mapping past the end of the file",
            ));
        }
        let prot = if write {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        let map = Mapping::new(Some(file.as_fd()), len, prot, libc::MAP_SHARED)?;
        Ok(Mmap {
            map,
            writable: write,
        })
    }

    /// Copies `src` into the mapping at `off`.
    ///
    /// # Errors
    /// `PermissionDenied` for a mapping made read-only; `UnexpectedEof` if
    /// the range leaves the mapping.
    #[inline]
    pub fn copy_in(&mut self, off: usize, src: &[u8]) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "copy into a read-only mapping",
            ));
        }
        let dst = self.map.range(off, src.len())?;
        // SAFETY: the range is inside the mapping (checked by `range`),
        // which is writable (checked above); `&mut self` makes this the
        // only access of this process to the mapping meanwhile, and
        // `new`'s contract excludes every other writer; `src` is a Rust
        // buffer, not part of the mapping while `self` is borrowed mutably.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        Ok(())
    }

    /// Faults every page in (`MADV_POPULATE_READ`/`_WRITE`, or a read of a
    /// byte per page where the kernel lacks those), so the measurement
    /// copies instead of taking page faults.
    pub fn prefault(&self, write: bool) {
        let advice = if write && self.writable {
            libc::MADV_POPULATE_WRITE
        } else {
            libc::MADV_POPULATE_READ
        };
        if self.map.advise(advice).is_ok() {
            return;
        }
        let mut sum = 0u8;
        for off in (0..self.map.len).step_by(PAGE) {
            // SAFETY: `off < len`: inside the mapping, readable; no write
            // runs meanwhile (as in `copy_out`).
            sum ^= unsafe { std::ptr::read_volatile(self.map.ptr.as_ptr().add(off)) };
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
        let r = unsafe { libc::msync(self.map.ptr.as_ptr().cast(), self.map.len, libc::MS_SYNC) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl std::ops::Deref for Mmap {
    type Target = Mapping;
    fn deref(&self) -> &Mapping {
        &self.map
    }
}

/// A private anonymous mapping (`MAP_PRIVATE | MAP_ANONYMOUS`), left
/// untouched at creation: its pages are faulted in by the first write to
/// each (the `anon` engine of the populate scenario, which measures exactly
/// that). Reads go through `&self` ([`Mapping::copy_out`], by `Deref`);
/// [`fill`](Self::fill) takes `&mut self`, so a writing thread owns the
/// mapping (the bench gives each writing thread its own). Nothing outside
/// this value can change private anonymous memory, so making one is safe.
pub struct AnonMap {
    map: Mapping,
}

impl AnonMap {
    /// Maps `len` bytes of fresh anonymous memory (nothing faulted in).
    ///
    /// # Errors
    /// `InvalidInput` for `len` 0; the OS error of `mmap(2)`.
    pub fn new(len: usize) -> io::Result<AnonMap> {
        let map = Mapping::new(
            None,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        )?;
        Ok(AnonMap { map })
    }

    /// `madvise(MADV_HUGEPAGE)` over the mapping: transparent huge pages
    /// where the kernel's policy allows them (as foliocache's arena asks).
    ///
    /// # Errors
    /// The OS error of `madvise(2)`.
    pub fn advise_huge_pages(&self) -> io::Result<()> {
        self.map.advise(libc::MADV_HUGEPAGE)
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
            let Err(e) = self.map.advise(libc::MADV_POPULATE_WRITE) else {
                return Ok(());
            };
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
    pub fn fill(&mut self, off: usize, n: usize, byte: u8) -> io::Result<()> {
        let dst = self.map.range(off, n)?;
        // SAFETY: `off..off + n` is inside our writable mapping (checked by
        // `range`); `&mut self` makes this the only access meanwhile.
        unsafe { std::ptr::write_bytes(dst, byte, n) };
        Ok(())
    }
}

impl std::ops::Deref for AnonMap {
    type Target = Mapping;
    fn deref(&self) -> &Mapping {
        &self.map
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
    // Mapped and dropped here without a read of its bytes (mincore reads
    // none), so what others do to the file meanwhile does not matter.
    Mapping::new(Some(file.as_fd()), len, libc::PROT_READ, libc::MAP_SHARED)?.resident_pages()
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

    #[test]
    fn writes_take_the_mapping_exclusively() {
        // Compiles only while the writes take `&mut`: through `&Mmap` or
        // `&AnonMap` (which threads share) nothing can write.
        let _: fn(&mut Mmap, usize, &[u8]) -> io::Result<()> = Mmap::copy_in;
        let _: fn(&mut AnonMap, usize, usize, u8) -> io::Result<()> = AnonMap::fill;
        fn shared_reads<T: Sync>() {}
        shared_reads::<Mapping>();
    }

    #[test]
    fn mmap_copies_and_refuses_what_it_cannot_do() {
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, &[7u8; 2 * PAGE]).unwrap();
        // SAFETY: a fresh unnamed file that only this test reaches.
        let mut m = unsafe { Mmap::new(&f, 2 * PAGE, true) }.unwrap();
        m.copy_in(PAGE - 1, b"ab").unwrap();
        let mut out = [0u8; 4];
        m.copy_out(PAGE - 2, &mut out).unwrap();
        assert_eq!(out, [7, b'a', b'b', 7]);
        assert!(m.copy_out(2 * PAGE - 1, &mut out).is_err(), "past the end");
        assert!(m.copy_in(usize::MAX, b"x").is_err(), "overflowing offset");
        drop(m);
        // SAFETY: as above (and `m`, which wrote the file, is gone).
        let mut ro = unsafe { Mmap::new(&f, PAGE, false) }.unwrap();
        assert_eq!(
            ro.copy_in(0, b"x").unwrap_err().kind(),
            io::ErrorKind::PermissionDenied
        );
        // SAFETY: as above.
        let past = unsafe { Mmap::new(&f, 3 * PAGE, false) };
        assert_eq!(
            past.err().map(|e| e.kind()),
            Some(io::ErrorKind::InvalidInput)
        );
        let mut a = AnonMap::new(PAGE).unwrap();
        a.fill(10, 3, 9).unwrap();
        a.copy_out(9, &mut out).unwrap();
        assert_eq!(out, [0, 9, 9, 9]);
    }
}
