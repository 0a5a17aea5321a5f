//! Helpers shared by the integration tests: temporary directories on the
//! target's filesystem, aligned buffers of test data, and a probe of
//! the kernel page cache (mincore).
#![allow(dead_code)]

use std::fs;
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

pub use test_support::mapped::kernel_cached_pages;
