//! Warm restarts of a shared cache (`SharedCache::save_state`,
//! `SharedCache::warm_from`): what one group's cache held is loaded into
//! the next one's in the background, every byte the file's; a file
//! changed between them, or handed to the kernel, is not loaded.

use std::os::unix::fs::{FileExt, MetadataExt};
use std::time::{Duration, Instant};

use foliocache::SharedCache;
use test_support::TempPath;

use super::open;

/// Waits until `cache` holds `pages` pages (the loader's work), for at
/// most 20 s.
fn wait_cached(cache: &SharedCache, pages: u64) {
    let start = Instant::now();
    while cache.stats().cached < pages {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "loaded {} pages of {pages}",
            cache.stats().cached
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_groups_cache_is_loaded_back_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("group.state");
    let (hot, changed, mapped) = (
        TempPath::new("shared-warm"),
        TempPath::new("shared-warm"),
        TempPath::new("shared-warm"),
    );
    let bytes = |seed: u8, n: usize| -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
    };
    {
        let first = SharedCache::new(1024 * 4096).unwrap();
        for (t, seed) in [(&hot, 1), (&changed, 2), (&mapped, 3)] {
            let f = open(&first, &t.path, false);
            f.write_at(&bytes(seed, 40 * 4096), 0).unwrap();
            let mut buf = vec![0; 8 * 4096];
            f.read_at(&mut buf, 8 * 4096).unwrap();
        }
        let meta = std::fs::metadata(&mapped.path).unwrap();
        assert!(first.handed_to_kernel(meta.dev(), meta.ino()));
        first.write_back_all().unwrap();
        let saved = first.save_state(&state).unwrap();
        assert_eq!((saved.files, saved.files_left_out), (2, 0), "{saved:?}");
        assert_eq!(saved.bytes, 2 * 40 * 4096, "{saved:?}");
    }
    // Changed between the groups: its saved pages would be stale.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&changed.path)
        .unwrap()
        .write_all_at(b"new", 0)
        .unwrap();
    let next = SharedCache::new(1024 * 4096).unwrap();
    let start = next.warm_from(&state);
    assert!(start.found && start.warning.is_none(), "{start:?}");
    assert_eq!((start.files, start.bytes), (2, 2 * 40 * 4096));
    wait_cached(&next, 40);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(next.stats().cached, 40, "the changed file is not loaded");
    let f = open(&next, &hot.path, false);
    let misses = next.stats().misses;
    let mut buf = vec![0; 40 * 4096];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), buf.len());
    assert!(buf == bytes(1, 40 * 4096));
    assert_eq!(next.stats().misses, misses, "every page a hit");
    let g = open(&next, &changed.path, false);
    assert_eq!(g.read_at(&mut buf[..3], 0).unwrap(), 3);
    assert_eq!(&buf[..3], b"new");
    next.verify().unwrap();
}

#[test]
fn a_bad_state_file_is_a_cold_start_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let cache = SharedCache::new(64 * 4096).unwrap();
    let none = cache.warm_from(dir.path().join("none.state"));
    assert!(!none.found && none.warning.is_none(), "{none:?}");
    let bad = dir.path().join("bad.state");
    std::fs::write(&bad, b"not a state file").unwrap();
    let start = cache.warm_from(&bad);
    assert!(!start.found, "{start:?}");
    assert!(
        start
            .warning
            .as_deref()
            .is_some_and(|w| w.contains("empty cache")),
        "{start:?}"
    );
    assert_eq!(cache.stats().cached, 0);
}

/// A group that read what the last one listed leaves the list as it was
/// (`WarmSaved::written` false, the file not replaced), synced or not; a
/// page more, and it is written.
#[test]
fn a_groups_unchanged_list_is_not_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("group.state");
    let data = TempPath::with_data("shared-warm-same", &vec![9u8; 1024 * 4096]);
    let ino = |p: &std::path::Path| std::fs::metadata(p).unwrap().ino();
    let cache = SharedCache::new(4096 * 4096).unwrap();
    let f = open(&cache, &data.path, true);
    let mut buf = vec![0; 4 * 4096];
    f.read_at(&mut buf, 0).unwrap();
    let first = cache.save_state(&state).unwrap();
    assert!(first.written, "{first:?}");
    let before = ino(&state);
    // The same pages, read again: the same list.
    f.read_at(&mut buf, 0).unwrap();
    for saved in [cache.save_state(&state), cache.save_state_unsynced(&state)] {
        let saved = saved.unwrap();
        assert!(!saved.written, "{saved:?}");
        assert_eq!(saved.bytes, first.bytes, "{saved:?}");
    }
    assert_eq!(ino(&state), before, "the list is not replaced");
    // Pages more (far from the first, past any readahead): written.
    f.read_at(&mut buf[..4096], 1000 * 4096).unwrap();
    let saved = cache.save_state_unsynced(&state).unwrap();
    assert!(saved.written && saved.bytes > first.bytes, "{saved:?}");
    assert_ne!(ino(&state), before);
}

/// The group's end in a large cache a short program used a little of:
/// its figures, its writeback and its list walk only the descriptors and
/// slots in use, and fault in none of the rest of its metadata (tmpfs
/// gives each read of a hole a page of its own). The cache is made
/// deferred, so that no collapse fills its memory meanwhile.
#[test]
fn a_groups_end_faults_in_only_what_it_used() {
    use std::os::fd::AsRawFd;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("group.state");
    let data = TempPath::with_data("shared-warm-end", &vec![3u8; 64 * 4096]);
    // 1 GiB: 262,144 descriptors (8 MiB) and thousands of slots.
    let cache = SharedCache::new_deferred(1 << 30).unwrap();
    cache.join();
    let f = open(&cache, &data.path, true);
    let mut buf = vec![0; 8 * 4096];
    f.read_at(&mut buf, 0).unwrap();
    let held = || {
        // SAFETY: an all-zero stat is a valid value; fstat fills it from
        // the cache's memory file, open for the call.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let fd = cache.memory_file().as_raw_fd();
        // SAFETY: as above.
        assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0);
        st.st_blocks as u64 * 512
    };
    let before = held();
    let cached = cache.stats().cached;
    assert!(cached >= 8, "{cached}");
    assert_eq!(cache.write_back_all().unwrap(), 0);
    let saved = cache.save_state(&state).unwrap();
    assert!(saved.bytes >= 8 * 4096, "{saved:?}");
    let after = held();
    assert!(
        after - before < 1 << 20,
        "the end's walks faulted in {} bytes ({before} held before)",
        after - before
    );
}
