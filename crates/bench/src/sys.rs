//! The OS calls the bench needs that `std` does not wrap, each in a small
//! safe type or function: a page-aligned buffer ([`AlignedBuf`]), the
//! mappings (`map`: a shared file mapping, [`Mmap`], `memmap2` under an
//! unsafe contract: nothing else may change the file meanwhile; fresh
//! anonymous memory, [`AnonMap`]; `mincore`), a memory file ([`memfd`]),
//! `preadv2`/`pwritev2` with flags, `posix_fadvise(DONTNEED)` (through
//! `rustix`), `getrusage` (through `nix`), `rdtsc`, and a job thread's own
//! io_uring of `O_DIRECT` reads ([`ring`]). This is the crate's only
//! module with `unsafe` code.

use std::alloc::{self, Layout};
use std::ffi::c_int;
use std::fs::File;
use std::io;
use std::ptr::NonNull;
use std::time::Duration;

use rustix::io::ReadWriteFlags;

mod map;
pub mod ring;

pub use map::{huge_mapped_all, resident_pages, AnonMap, Mapping, Mmap};

/// The page size the bench assumes (and O_DIRECT alignment it uses).
pub const PAGE: usize = 4096;

/// `RWF_DONTCACHE`: uncached buffered IO (Linux 6.14). Defined here because
/// `rustix` does not name it yet.
pub const RWF_DONTCACHE: c_int = 0x80;

/// `RWF_NOWAIT`: fail with `EAGAIN` instead of waiting (for a buffered
/// read: when the data is not in the page cache).
pub const RWF_NOWAIT: c_int = ReadWriteFlags::NOWAIT.bits() as c_int;

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

/// A memory file (`memfd_create(2)`, no flags): the kernel's shmem, what
/// the populate scenario's `kernel` engine writes into.
///
/// # Errors
/// The OS error of `memfd_create` (`EINVAL` for a name with a NUL).
pub fn memfd(name: &str) -> io::Result<File> {
    let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::empty())?;
    Ok(File::from(fd))
}

/// The flags as `rustix` takes them, unknown bits passed through (the
/// kernel answers `EOPNOTSUPP` for those it lacks); and the offset, which
/// must fit `off_t` (`EINVAL` past it, as the kernel answers for a negative
/// one; `u64::MAX` would mean "the current offset" to `rustix`).
fn rw_args(off: u64, flags: c_int) -> io::Result<ReadWriteFlags> {
    if i64::try_from(off).is_err() {
        return Err(io::Error::from_raw_os_error(
            rustix::io::Errno::INVAL.raw_os_error(),
        ));
    }
    Ok(ReadWriteFlags::from_bits_retain(flags as u32))
}

/// `preadv2(2)` of one buffer at `off` with `flags` (`RWF_*`).
///
/// # Errors
/// The OS error (`EOPNOTSUPP` where a flag is not supported).
#[inline]
pub fn preadv2(file: &File, buf: &mut [u8], off: u64, flags: c_int) -> io::Result<usize> {
    let flags = rw_args(off, flags)?;
    Ok(rustix::io::preadv2(
        file,
        &mut [io::IoSliceMut::new(buf)],
        off,
        flags,
    )?)
}

/// `pwritev2(2)` of one buffer at `off` with `flags` (`RWF_*`).
///
/// # Errors
/// The OS error (`EOPNOTSUPP` where a flag is not supported).
#[inline]
pub fn pwritev2(file: &File, buf: &[u8], off: u64, flags: c_int) -> io::Result<usize> {
    let flags = rw_args(off, flags)?;
    Ok(rustix::io::pwritev2(
        file,
        &[io::IoSlice::new(buf)],
        off,
        flags,
    )?)
}

/// `posix_fadvise(POSIX_FADV_DONTNEED)` on the whole file: the kernel drops
/// its clean cached pages (sync the file first to drop them all).
///
/// # Errors
/// The error `posix_fadvise` returns.
pub fn drop_cache(file: &File) -> io::Result<()> {
    Ok(rustix::fs::fadvise(
        file,
        0,
        None,
        rustix::fs::Advice::DontNeed,
    )?)
}

/// CPU time of the whole process so far: (user, system), from
/// `getrusage(RUSAGE_SELF)`.
pub fn cpu_times() -> (Duration, Duration) {
    use nix::sys::resource::{getrusage, UsageWho};
    let Ok(ru) = getrusage(UsageWho::RUSAGE_SELF) else {
        return (Duration::ZERO, Duration::ZERO);
    };
    let tv =
        |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
    (tv(ru.user_time()), tv(ru.system_time()))
}

/// CPU time of the calling thread so far (user and system), from
/// `getrusage(RUSAGE_THREAD)`; zero where that fails.
pub fn thread_cpu_time() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    let Ok(ru) = getrusage(UsageWho::RUSAGE_THREAD) else {
        return Duration::ZERO;
    };
    let tv =
        |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
    tv(ru.user_time()) + tv(ru.system_time())
}

/// Makes the calling thread's timed sleeps end when asked: a timer slack
/// of 1 ns (`prctl(PR_SET_TIMERSLACK)`; the default 50 us lets the kernel
/// wake a sleeper up to that late, to batch wake-ups).
///
/// # Errors
/// The `prctl` failed.
pub fn precise_timers() -> io::Result<()> {
    Ok(rustix::thread::set_current_timer_slack(
        std::num::NonZeroU64::new(1),
    )?)
}

/// The CPU's time-stamp counter (`rdtsc`): cheaper to read than
/// `Instant::now()` through the vDSO.
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
