//! A file mapped read-only and shared ([`ReadMap`]): its bytes in place,
//! and how many of its pages are in the kernel's page cache (`mincore`),
//! for the tests and benches that look at the kernel's cache of a file
//! ([`kernel_cached_pages`]).
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;

/// The page `mincore` reports on (the kernel's base page on the hosts we
/// run on).
const PAGE: usize = 4096;

/// A read-only shared mapping of a file's first `len` bytes, unmapped on
/// drop.
pub struct ReadMap {
    ptr: NonNull<u8>,
    len: usize,
}

impl ReadMap {
    /// Maps the first `len` bytes of `file` (the kernel picks the address).
    ///
    /// # Errors
    /// `mmap`'s (`len` 0 among them).
    pub fn new(file: &File, len: usize) -> io::Result<ReadMap> {
        // SAFETY: a fresh read-only shared mapping of an open file; the
        // kernel picks the address; nothing else is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(ReadMap { ptr, len })
    }

    /// The mapping's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never: `mmap` refuses 0 bytes).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapped bytes. The caller must not change the file's mapped
    /// bytes through another handle while it holds the slice (a test's
    /// own file, written before it is mapped).
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `len` readable bytes mapped at `ptr` for `self`'s
        // lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// Pages of the mapping in the kernel's page cache (`mincore`).
    ///
    /// # Errors
    /// `mincore`'s.
    pub fn resident_pages(&self) -> io::Result<usize> {
        let mut vec = vec![0u8; self.len.div_ceil(PAGE)];
        // SAFETY: `ptr`/`len` is our page-aligned mapping and `vec` has one
        // byte per page of it.
        let r = unsafe { libc::mincore(self.ptr.as_ptr().cast(), self.len, vec.as_mut_ptr()) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(vec.iter().filter(|&&b| b & 1 != 0).count())
    }
}

impl Drop for ReadMap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` made; no slice of it
        // outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// How many pages of the file at `path` are in the kernel's page cache,
/// asked with mmap + mincore (the file's owner may ask); 0 for an empty
/// file. Panics where a call fails (a test's helper).
pub fn kernel_cached_pages(path: &Path) -> usize {
    let file = File::open(path).expect("open for mincore");
    let len = file.metadata().expect("stat").len() as usize;
    if len == 0 {
        return 0;
    }
    let map = ReadMap::new(&file, len).expect("mmap");
    map.resident_pages().expect("mincore")
}
