//! Helpers shared by the integration tests (each test file uses some).
#![allow(dead_code)]

use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use foliocache::{Cache, Populate, ReadaheadConfig};

/// A cache of `capacity` bytes whose folios are at most `max_folio` bytes,
/// populated lazily (tests build many; faulting each in would dominate).
pub fn lazy_cache(capacity: usize, max_folio: usize) -> Cache {
    Cache::builder()
        .capacity(capacity)
        .max_folio_size(max_folio)
        .populate(Populate::Lazy)
        .build()
        .unwrap()
}

/// [`lazy_cache`] without readahead: a miss reads what the request needs
/// (the largest aligned folio that fits it), so tests can count IOs and
/// place faults exactly.
pub fn lazy_cache_no_readahead(capacity: usize, max_folio: usize) -> Cache {
    Cache::builder()
        .capacity(capacity)
        .max_folio_size(max_folio)
        .populate(Populate::Lazy)
        .readahead(ReadaheadConfig::disabled())
        .build()
        .unwrap()
}

/// A file of `data` on the target's filesystem (ext4 here, so O_DIRECT
/// works), removed on drop.
pub struct TempFile {
    /// Where it is.
    pub path: PathBuf,
}

impl TempFile {
    /// Writes `data` to a new file named after `tag`, durably.
    pub fn new(tag: &str, data: &[u8]) -> TempFile {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("foliocache-tests");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!(
            "{tag}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let mut f = fs::File::create(&path).unwrap();
        f.write_all(data).unwrap();
        f.sync_all().unwrap();
        TempFile { path }
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}
