//! Memory files shared by processes, at their lowest level: a mapping
//! ([`Map`]), the one check every place in it passes before use
//! ([`Map::bytes`], [`Map::at`]), and the layout the guardian's segment
//! (`guardian::segment`, section 12 of docs/design.md) and the group's
//! (`shared::seg`, section 13) share: the page, the header's page, and the
//! file slots. No pointer is stored in a segment: every place is a number,
//! checked here against the mapping, so a segment scribbled on can make a
//! reader read wrong bytes, never reach outside its mapping.

use std::io;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use rustix::mm::{self, MapFlags, ProtFlags};

/// The page size of a segment's pages.
pub(crate) const PAGE: u64 = 4096;
/// Bytes of a segment's header: its first page; what follows starts here.
pub(crate) const HEADER_BYTES: u64 = PAGE;
/// Bytes of a file slot: its head, then its path.
pub(crate) const SLOT_BYTES: u64 = 4096;
/// Bytes of a slot before its path.
pub(crate) const SLOT_HEAD: u64 = 128;
/// The bytes a slot's path takes at most (the guardian's: its NUL too).
pub(crate) const SLOT_PATH: usize = (SLOT_BYTES - SLOT_HEAD) as usize;
/// A slot's state word: no file's (a lookup's probe ends there).
pub(crate) const SLOT_FREE: u32 = 0;
/// A slot's state word: a file's, its identity and path set.
pub(crate) const SLOT_USED: u32 = 1;

/// A type that lives in a segment, reached through a reference
/// ([`Map::at`]).
///
/// # Safety
/// `repr(C)` and made only of atomics: valid for any bytes, and any
/// process may write it meanwhile.
pub(crate) unsafe trait Atomics {}

// SAFETY: an atomic.
unsafe impl Atomics for AtomicU32 {}
// SAFETY: an atomic.
unsafe impl Atomics for AtomicU64 {}

/// A shared mapping of (part of) a memory file, unmapped on drop, by
/// system calls only (a guardian child maps its segment with it).
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

    /// Where `len` bytes at `off` start, if they lie in the mapping: for
    /// the shared copies (`copy.rs`) and system calls, never a Rust
    /// reference to bytes another process writes. The one check every
    /// place in a segment passes.
    #[inline]
    pub(crate) fn bytes(&self, off: u64, len: u64) -> Option<*mut u8> {
        let end = off.checked_add(len)?;
        // `off <= end <= self.len`: inside the mapping, where `add` stays.
        (end <= self.len as u64).then(|| self.ptr.as_ptr().wrapping_add(off as usize))
    }

    /// The `T` at `off`, if it lies in the mapping, aligned.
    #[inline]
    pub(crate) fn at<T: Atomics>(&self, off: u64) -> Option<&T> {
        let p = self.bytes(off, std::mem::size_of::<T>() as u64)?;
        if !(p as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return None;
        }
        // SAFETY: `size_of::<T>()` bytes at `p` lie in the mapping
        // (checked), aligned (checked), which lives as long as `self`; a
        // `T` is valid for any bytes and any process may write it
        // (`Atomics`).
        Some(unsafe { &*p.cast::<T>() })
    }

    /// The u64 at `off` (little-endian), if it lies in the mapping,
    /// aligned: a volatile load, for a reader of a mapping that is not
    /// writable or that another process may write meanwhile (the
    /// guardian's recovery).
    pub(crate) fn read_u64(&self, off: u64) -> Option<u64> {
        let p = self.bytes(off, 8)?;
        if !off.is_multiple_of(8) {
            return None;
        }
        // SAFETY: 8 bytes at `p` lie in the mapping (checked), aligned
        // (the mapping is page-aligned, `off` a multiple of 8).
        Some(u64::from_le(unsafe {
            std::ptr::read_volatile(p.cast::<u64>())
        }))
    }

    /// Copies the bytes at `off` into `dst` by volatile loads, if they
    /// lie in the mapping (as [`read_u64`](Self::read_u64)).
    pub(crate) fn read_bytes(&self, off: u64, dst: &mut [u8]) -> bool {
        let Some(p) = self.bytes(off, dst.len() as u64) else {
            return false;
        };
        for (i, b) in dst.iter_mut().enumerate() {
            // SAFETY: inside the checked range; a volatile byte load.
            *b = unsafe { std::ptr::read_volatile(p.add(i)) };
        }
        true
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `new`, no longer used (its
        // owner is being dropped).
        let _ = unsafe { mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(all(test, not(miri)))]
mod tests {
    use std::os::fd::AsFd;
    use std::sync::atomic::Ordering;

    use super::*;

    fn map(len: u64) -> Map {
        let fd = rustix::fs::memfd_create("shm-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, len).unwrap();
        Map::new(fd.as_fd(), 0, len, true).unwrap()
    }

    #[test]
    fn every_place_is_checked_against_the_mapping() {
        let m = map(PAGE);
        assert!(m.bytes(0, PAGE).is_some());
        assert!(m.bytes(PAGE, 0).is_some());
        assert!(m.bytes(1, PAGE).is_none(), "one byte past the end");
        assert!(m.bytes(u64::MAX, 2).is_none(), "an offset that overflows");
        assert!(m.at::<AtomicU64>(PAGE - 8).is_some());
        assert!(m.at::<AtomicU64>(PAGE - 4).is_none(), "past the end");
        assert!(m.at::<AtomicU64>(4).is_none(), "misaligned");
        assert!(m.at::<AtomicU32>(4).is_some());
        assert_eq!(m.read_u64(PAGE), None);
        assert_eq!(m.read_u64(3), None, "misaligned");
        let mut buf = [0u8; 8];
        assert!(!m.read_bytes(PAGE - 4, &mut buf));
    }

    #[test]
    fn a_value_written_through_at_is_read_back_by_every_accessor() {
        let m = map(2 * PAGE);
        m.at::<AtomicU64>(PAGE + 8)
            .unwrap()
            .store(0x0102_0304_0506_0708, Ordering::Relaxed);
        assert_eq!(m.read_u64(PAGE + 8), Some(0x0102_0304_0506_0708));
        let mut buf = [0u8; 8];
        assert!(m.read_bytes(PAGE + 8, &mut buf));
        assert_eq!(u64::from_le_bytes(buf), 0x0102_0304_0506_0708);
    }
}
