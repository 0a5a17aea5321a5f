//! Helpers shared by the integration tests: temporary directories on the
//! target's filesystem, aligned buffers of test data, and a probe of
//! the kernel page cache (mincore).
#![allow(dead_code)]

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use foliocache_backing::{AlignedBuf, BLOCK};

/// `BLOCK` as u64.
pub const B: u64 = BLOCK as u64;

/// A directory under `CARGO_TARGET_TMPDIR` (ext4 here, like the project's
/// real files), removed with its contents on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// A fresh, empty directory named after `tag`.
    pub fn new(tag: &str) -> TempDir {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("backing-{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("create temp dir");
        TempDir { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

pub use test_support::random_bytes;

/// An aligned buffer holding `data` (whose length is a multiple of BLOCK).
pub fn aligned_from(data: &[u8]) -> AlignedBuf {
    let mut buf = AlignedBuf::zeroed(data.len()).expect("aligned buffer");
    buf.copy_from_slice(data);
    buf
}

/// An aligned buffer of `len` bytes filled with `byte` (a sentinel to see
/// what a read did not touch).
pub fn filled(len: usize, byte: u8) -> AlignedBuf {
    let mut buf = AlignedBuf::zeroed(len).expect("aligned buffer");
    buf.fill(byte);
    buf
}

/// How many pages of the file at `path` are in the kernel's page cache,
/// asked with mmap + mincore (the file's owner may ask).
pub fn kernel_cached_pages(path: &Path) -> usize {
    use std::os::fd::AsRawFd;
    let file = fs::File::open(path).expect("open for mincore");
    let len = file.metadata().expect("stat").len() as usize;
    if len == 0 {
        return 0;
    }
    let pages = len.div_ceil(BLOCK);
    // SAFETY: a fresh shared read-only mapping of an open file; nothing is
    // read through it, it only gives mincore an address range.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(
        addr,
        libc::MAP_FAILED,
        "mmap: {}",
        io::Error::last_os_error()
    );
    let mut vec = vec![0u8; pages];
    // SAFETY: `addr` is the page-aligned start of a mapping of `len` bytes;
    // `vec` has one byte per page of it.
    let r = unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) };
    let err = io::Error::last_os_error();
    // SAFETY: unmaps exactly the mapping made above, which nothing uses.
    unsafe { libc::munmap(addr, len) };
    assert_eq!(r, 0, "mincore: {err}");
    vec.iter().filter(|&&b| b & 1 != 0).count()
}
