//! Warm restarts: a cache saves the list of what it holds
//! (`Cache::save_state`) and a later cache loads it in the background
//! (`Cache::warm_from`): the ranges come back, a file changed in between
//! is never served from the list, a bad state file is a warning and a
//! cold start, the load stops at the capacity, and the parser takes any
//! bytes without panicking.

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use foliocache::internals::warm::{Identity, SavedFile, SavedRange, State, StateError};
use foliocache::{Cache, WarmProgress};
use proptest::prelude::*;
use test_support::cache::TestCache;
use test_support::{random_bytes, TempPath};

const PAGE: u64 = 4096;

/// Waits until the cache's background load has ended (bounded: a load
/// that never ends fails the test).
fn loaded(c: &Cache) -> WarmProgress {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let p = c.warm_progress();
        if p.done {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "the warm load never ended: {p:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A cache that has read `ranges` (in pages) of `path` and saved its
/// list to `state`; it is dropped on return.
fn save_after_reading(path: &Path, ranges: &[(u64, u64)], state: &Path) {
    let c = TestCache::bytes(16 << 20).no_readahead().build();
    let f = c.open(path).unwrap();
    for &(first, pages) in ranges {
        let mut buf = vec![0u8; (pages * PAGE) as usize];
        f.read_exact_at(&mut buf, first * PAGE).unwrap();
    }
    let saved = c.save_state(state).unwrap();
    assert_eq!(saved.files, 1, "{saved:?}");
    let pages: u64 = ranges.iter().map(|r| r.1).sum();
    assert_eq!(saved.bytes, pages * PAGE, "{saved:?}");
}

/// A file of `pages` random pages (from `seed`), a cache that read
/// `ranges` of it and saved its list: the file, its bytes, the list.
fn saved(tag: &str, seed: u64, pages: u64, ranges: &[(u64, u64)]) -> (TempPath, Vec<u8>, TempPath) {
    let data = random_bytes(seed, (pages * PAGE) as usize);
    let file = TempPath::with_data(tag, &data);
    let state = TempPath::new(&format!("{tag}-state"));
    save_after_reading(&file.path, ranges, &state.path);
    (file, data, state)
}

/// A new cache that loaded the list `state` (to the load's end), and the
/// load's figures.
fn load(state: &Path) -> (Cache, WarmProgress) {
    let c = TestCache::bytes(16 << 20).no_readahead().build();
    assert!(c.warm_from(state).found);
    let p = loaded(&c);
    (c, p)
}

fn cached_pages(f: &foliocache::File, first: u64, pages: u64) -> u64 {
    f.cachestat(first * PAGE, pages * PAGE).unwrap().cached
}

#[test]
fn a_load_brings_back_the_saved_ranges_before_any_read() {
    let (file, _, state) = saved("warm-ranges", 1, 256, &[(0, 16), (100, 20), (200, 1)]);

    let c = TestCache::bytes(16 << 20).no_readahead().build();
    let start = c.warm_from(&state.path);
    assert!(start.found && start.warning.is_none(), "{start:?}");
    assert_eq!((start.files, start.ranges, start.bytes), (1, 3, 37 * PAGE));
    let p = loaded(&c);
    assert_eq!((p.files_loaded, p.files_skipped), (1, 0), "{p:?}");
    assert_eq!(p.ranges_loaded, 3, "{p:?}");
    assert_eq!(p.bytes_loaded, 37 * PAGE, "{p:?}");
    // The open takes the loaded file over (and its data goes with the
    // last handle, as any file's).
    let f = c.open(&file.path).unwrap();
    assert_eq!(cached_pages(&f, 0, 16), 16);
    assert_eq!(cached_pages(&f, 100, 20), 20);
    assert_eq!(cached_pages(&f, 200, 1), 1);
    assert_eq!(cached_pages(&f, 16, 84), 0, "only the saved ranges");
}

#[test]
fn loaded_ranges_read_as_hits_with_the_files_bytes() {
    let (file, data, state) = saved("warm-hits", 2, 64, &[(0, 64)]);
    let (c, _) = load(&state.path);
    let io = c.stats().io_reads;
    let f = c.open(&file.path).unwrap();
    let mut buf = vec![0u8; data.len()];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf == data, "the loaded bytes are the file's");
    assert_eq!(c.stats().io_reads, io, "a loaded range reads with no IO");
}

#[test]
fn the_ranges_are_saved_most_recently_used_first() {
    let (_file, _, state) = saved("warm-order", 3, 64, &[(40, 4), (0, 4), (20, 4)]);
    let s = State::decode(&fs::read(&state.path).unwrap()).unwrap();
    let firsts: Vec<u64> = s.ranges.iter().map(|r| r.first).collect();
    assert_eq!(firsts, [20, 0, 40], "{s:?}");
}

/// Saves a list of pages 0..32 of a file, lets `change` change the file,
/// loads the list, and checks that a read through the loaded cache
/// returns the file's new bytes (`want`), the file counted skipped.
fn changed_between_save_and_load(tag: &str, change: impl FnOnce(&Path) -> Vec<u8>) {
    let (file, data, state) = saved(tag, 4, 32, &[(0, 32)]);
    let want = change(&file.path);
    let (c, p) = load(&state.path);
    assert_eq!((p.files_loaded, p.files_skipped), (0, 1), "{p:?}");
    assert_eq!(
        c.stats().bytes_cached,
        0,
        "nothing of a changed file loaded"
    );
    let f = c.open(&file.path).unwrap();
    let mut buf = vec![0u8; data.len()];
    let n = f.read_at(&mut buf, 0).unwrap();
    assert!(buf[..n] == want[..], "only the new bytes are read");
    assert_eq!(n, want.len());
}

#[test]
fn a_file_rewritten_in_place_with_its_size_is_skipped() {
    changed_between_save_and_load("warm-rewrite", |path| {
        let new = random_bytes(5, (32 * PAGE) as usize);
        let f = fs::OpenOptions::new().write(true).open(path).unwrap();
        f.write_all_at(&new, 0).unwrap();
        f.sync_all().unwrap();
        new
    });
}

#[test]
fn a_truncated_file_is_skipped() {
    changed_between_save_and_load("warm-truncate", |path| {
        let f = fs::OpenOptions::new().write(true).open(path).unwrap();
        f.set_len(3 * PAGE + 17).unwrap();
        fs::read(path).unwrap()
    });
}

#[test]
fn a_file_replaced_by_rename_is_skipped() {
    changed_between_save_and_load("warm-rename", |path| {
        let new = random_bytes(6, (32 * PAGE) as usize);
        let tmp = path.with_extension("new");
        fs::write(&tmp, &new).unwrap();
        fs::rename(&tmp, path).unwrap();
        new
    });
}

#[test]
fn a_file_changed_after_the_load_is_dropped_at_its_open() {
    let (file, _, state) = saved("warm-late", 7, 32, &[(0, 32)]);
    let (c, p) = load(&state.path);
    assert_eq!(p.files_loaded, 1);
    assert_eq!(c.stats().bytes_cached, 32 * PAGE, "loaded");
    let new = random_bytes(8, (32 * PAGE) as usize);
    let w = fs::OpenOptions::new().write(true).open(&file.path).unwrap();
    w.write_all_at(&new, 0).unwrap();
    w.sync_all().unwrap();

    let f = c.open(&file.path).unwrap();
    let mut buf = vec![0u8; new.len()];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert!(
        buf == new,
        "the open found the file changed and read it again"
    );
}

#[test]
fn a_load_stops_at_the_capacity_without_evicting() {
    let (_file, _, state) = saved("warm-capacity", 9, 1024, &[(0, 1024)]);

    let c = TestCache::bytes(1 << 20).no_readahead().build();
    assert_eq!(c.warm_from(&state.path).bytes, 1024 * PAGE);
    let p = loaded(&c);
    assert!(p.stopped_at_capacity, "{p:?}");
    let s = c.stats();
    assert!(p.bytes_loaded <= s.capacity_bytes, "{p:?}");
    assert!(s.bytes_cached <= s.capacity_bytes, "{s:?}");
    assert_eq!(s.evictions, 0, "the load never evicts: {s:?}");
}

/// A good state file's bytes, for the corruption tests.
fn good_state_bytes() -> Vec<u8> {
    State {
        files: vec![SavedFile {
            path: "/nonexistent/foliocache-warm".into(),
            identity: Identity {
                dev: 1,
                ino: 2,
                size: 3 << 20,
                mtime_ns: 4,
                ctime_ns: 5,
            },
        }],
        ranges: vec![
            SavedRange {
                file: 0,
                first: 7,
                pages: 3,
            },
            SavedRange {
                file: 0,
                first: 0,
                pages: 1,
            },
        ],
    }
    .encode()
}

/// Loads `bytes` as a state file and returns the warning.
fn warning_of(bytes: &[u8]) -> String {
    let state = TempPath::new("warm-bad-state");
    fs::write(&state.path, bytes).unwrap();
    let c = TestCache::bytes(1 << 20).build();
    let start = c.warm_from(&state.path);
    assert!(!start.found, "{start:?}");
    assert!(!c.warm_progress().started, "a cold start loads nothing");
    start.warning.expect("a bad state file is a warning")
}

#[test]
fn a_missing_state_file_is_a_quiet_cold_start() {
    let c = TestCache::bytes(1 << 20).build();
    let start = c.warm_from("/nonexistent/foliocache-state");
    assert!(!start.found && start.warning.is_none(), "{start:?}");
}

#[test]
fn a_truncated_state_file_is_a_warning() {
    let good = good_state_bytes();
    let w = warning_of(&good[..good.len() - 20]);
    assert!(w.contains("truncated"), "{w}");
}

#[test]
fn a_corrupt_state_file_is_a_warning() {
    let mut bad = good_state_bytes();
    let i = bad.len() - 12;
    bad[i] ^= 1;
    let w = warning_of(&bad);
    assert!(w.contains("corrupt"), "{w}");
}

#[test]
fn a_state_file_of_another_version_is_a_warning() {
    let mut bad = good_state_bytes();
    bad[8] = 99;
    let w = warning_of(&bad);
    assert!(w.contains("version 99"), "{w}");
}

#[test]
fn what_is_not_a_state_file_is_a_warning() {
    let w = warning_of(b"hello, world");
    assert!(w.contains("not a foliocache state file"), "{w}");
}

#[test]
fn a_save_replaces_the_old_list_whole() {
    let state = TempPath::new("warm-replace-state");
    fs::write(&state.path, b"old contents, longer than the new list").unwrap();
    let c = TestCache::bytes(1 << 20).build();
    let saved = c.save_state(&state.path).unwrap();
    assert_eq!(saved.files, 0);
    let s = State::decode(&fs::read(&state.path).unwrap()).unwrap();
    assert_eq!(s, State::default());
}

fn arb_state() -> impl Strategy<Value = State> {
    let file =
        ("/[a-z]{1,12}(/[a-z0-9.]{1,8}){0,3}", any::<[u64; 5]>()).prop_map(|(p, v)| SavedFile {
            path: p.into(),
            identity: Identity {
                dev: v[0],
                ino: v[1],
                size: v[2],
                mtime_ns: v[3] as i64,
                ctime_ns: v[4] as i64,
            },
        });
    prop::collection::vec(file, 1..4).prop_flat_map(|files| {
        let n = files.len() as u32;
        let range = (0..n, 0..1u64 << 40, 1..u32::MAX)
            .prop_map(|(file, first, pages)| SavedRange { file, first, pages });
        prop::collection::vec(range, 0..8).prop_map(move |ranges| State {
            files: files.clone(),
            ranges,
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(test_support::proptest_cases(256)))]

    #[test]
    fn a_state_decodes_to_what_was_encoded(s in arb_state()) {
        prop_assert_eq!(State::decode(&s.encode()), Ok(s));
    }

    #[test]
    fn any_bytes_decode_without_panicking(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = State::decode(&bytes);
    }

    #[test]
    fn any_corruption_of_a_state_file_is_an_error(
        s in arb_state(),
        at in any::<prop::sample::Index>(),
        flip in 1..=255u8,
    ) {
        let mut bytes = s.encode();
        let i = at.index(bytes.len());
        bytes[i] ^= flip;
        prop_assert!(State::decode(&bytes).is_err());
    }

    #[test]
    fn any_prefix_of_a_state_file_is_an_error(s in arb_state(), at in any::<prop::sample::Index>()) {
        let bytes = s.encode();
        let cut = at.index(bytes.len());
        let e = State::decode(&bytes[..cut]);
        prop_assert!(e.is_err());
        let version = matches!(e, Err(StateError::Version { .. }));
        prop_assert!(!version, "a cut file is not another version");
    }
}

#[test]
fn a_file_remembered_before_its_close_is_saved_after_it() {
    let data = random_bytes(10, (64 * PAGE) as usize);
    let file = TempPath::with_data("warm-remember", &data);
    let state = TempPath::new("warm-remember-state");
    let c = TestCache::bytes(16 << 20).no_readahead().build();
    let f = c.open(&file.path).unwrap();
    let mut buf = vec![0u8; (8 * PAGE) as usize];
    f.read_exact_at(&mut buf, 16 * PAGE).unwrap();
    c.remember(&f);
    drop(f);
    assert_eq!(c.stats().bytes_cached, 0, "the close took the folios");
    c.save_state(&state.path).unwrap();
    let s = State::decode(&fs::read(&state.path).unwrap()).unwrap();
    assert_eq!(s.files.len(), 1, "{s:?}");
    let ranges: Vec<(u64, u32)> = s.ranges.iter().map(|r| (r.first, r.pages)).collect();
    assert_eq!(ranges, [(16, 8)]);

    assert_eq!(load(&state.path).1.bytes_loaded, 8 * PAGE);
}

/// The ranges the state file at `path` lists, in its order.
fn listed(path: &Path) -> Vec<(u64, u32)> {
    let s = State::decode(&fs::read(path).unwrap()).unwrap();
    s.ranges.iter().map(|r| (r.first, r.pages)).collect()
}

#[test]
fn a_file_read_again_after_its_close_keeps_the_note_of_all_it_held() {
    // RocksDB writes a table, closes it, and opens it again to read its
    // index: the kernel keeps all the table's pages, and so does the list.
    let data = random_bytes(11, (64 * PAGE) as usize);
    let file = TempPath::with_data("warm-renote", &data);
    let state = TempPath::new("warm-renote-state");
    let c = TestCache::bytes(16 << 20).no_readahead().build();
    let mut buf = vec![0u8; (64 * PAGE) as usize];
    let f = c.open(&file.path).unwrap();
    f.read_exact_at(&mut buf, 0).unwrap();
    c.remember(&f);
    drop(f);
    let f = c.open(&file.path).unwrap();
    f.read_exact_at(&mut buf[..PAGE as usize], 60 * PAGE)
        .unwrap();
    c.remember(&f);
    // Saved with the file open again (its two pages live), then closed.
    c.save_state(&state.path).unwrap();
    let mut open_again = listed(&state.path);
    open_again.sort_unstable();
    assert_eq!(open_again, [(0, 60), (60, 1), (61, 3)]);
    drop(f);
    // The same pages (now one note): the list is left as it was.
    assert!(!c.save_state(&state.path).unwrap().written);
    assert_eq!(load(&state.path).1.bytes_loaded, 64 * PAGE);
}

#[test]
fn a_save_that_finds_its_list_unchanged_writes_nothing() {
    use std::os::unix::fs::MetadataExt;
    let (file, _, state) = saved("warm-unchanged", 17, 32, &[(0, 8), (20, 4)]);
    let ino = |p: &Path| fs::metadata(p).unwrap().ino();
    let before = ino(&state.path);
    let (c, _) = load(&state.path);
    // The loaded pages read again, in another order: the same list.
    let f = c.open(&file.path).unwrap();
    let mut buf = vec![0u8; (8 * PAGE) as usize];
    f.read_exact_at(&mut buf[..(4 * PAGE) as usize], 20 * PAGE)
        .unwrap();
    f.read_exact_at(&mut buf, 0).unwrap();
    let saved = c.save_state_unsynced(&state.path).unwrap();
    assert!(!saved.written, "{saved:?}");
    assert_eq!(saved.bytes, 12 * PAGE, "{saved:?}");
    assert_eq!(ino(&state.path), before, "the file is not replaced");
    // One page more: the list changed, and is written.
    f.read_exact_at(&mut buf[..PAGE as usize], 30 * PAGE)
        .unwrap();
    let saved = c.save_state_unsynced(&state.path).unwrap();
    assert!(saved.written, "{saved:?}");
    assert_ne!(ino(&state.path), before);
    assert_eq!(load(&state.path).1.bytes_loaded, 13 * PAGE);
}

#[test]
fn a_save_before_the_load_ends_lists_what_it_has_not_loaded() {
    // A short program exits before its load is done: the list it leaves
    // has what the program read and the rest of the list it found.
    let (file, _, state) = saved("warm-unfinished", 18, 64, &[(0, 16), (40, 8)]);
    let c = TestCache::bytes(16 << 20).no_readahead().build();
    let (start, load_later) = c.warm_load(&state.path);
    assert!(start.found, "{start:?}");
    let f = c.open(&file.path).unwrap();
    let mut buf = vec![0u8; PAGE as usize];
    f.read_exact_at(&mut buf, 30 * PAGE).unwrap();
    let saved = c.save_state(&state.path).unwrap();
    assert!(saved.written, "{saved:?}");
    let mut pages = listed(&state.path);
    assert_eq!(pages[0], (30, 1), "what the cache holds first");
    pages.sort_unstable();
    assert_eq!(pages, [(0, 16), (30, 1), (40, 8)]);
    // Once the load has ended, a save lists what the cache holds, each
    // page once.
    load_later.expect("a load").run();
    let saved = c.save_state(&state.path).unwrap();
    assert_eq!(saved.bytes, 25 * PAGE, "{saved:?}");
    drop(f);
}

#[test]
fn a_noted_file_changed_or_deleted_since_is_not_listed() {
    let data = random_bytes(12, (8 * PAGE) as usize);
    let kept = TempPath::with_data("warm-note-kept", &data);
    let gone = TempPath::with_data("warm-note-gone", &data);
    let state = TempPath::new("warm-note-gone-state");
    let c = TestCache::bytes(16 << 20).no_readahead().build();
    let mut buf = vec![0u8; (8 * PAGE) as usize];
    for p in [&kept.path, &gone.path] {
        let f = c.open(p).unwrap();
        f.read_exact_at(&mut buf, 0).unwrap();
        c.remember(&f);
    }
    fs::remove_file(&gone.path).unwrap();
    let saved = c.save_state(&state.path).unwrap();
    assert_eq!((saved.files, saved.bytes), (1, 8 * PAGE), "{saved:?}");
}

#[test]
fn cachestat_of_a_path_leaves_a_loaded_file_to_the_loader() {
    let (file, _, state) = saved("warm-peek", 15, 16, &[(0, 16)]);
    let (c, _) = load(&state.path);
    for _ in 0..2 {
        assert_eq!(c.cachestat_file(&file.path).unwrap().cached, 16);
    }
    assert_eq!(c.stats().bytes_cached, 16 * PAGE, "still cached");
}

#[test]
fn a_file_written_through_the_cache_is_listed_as_its_close_leaves_it() {
    let file = TempPath::new("warm-written");
    let state = TempPath::new("warm-written-state");
    let c = TestCache::bytes(16 << 20).build();
    let f = test_support::cache::open_rw(&c, &file.path);
    // Not a whole number of pages: the writeback writes past the end, and
    // the close cuts the backing back, changing its times.
    let data = random_bytes(16, 10_000);
    f.write_all_at(&data, 0).unwrap();
    c.remember(&f);
    drop(f);
    c.save_state(&state.path).unwrap();
    let (_c, p) = load(&state.path);
    assert_eq!((p.files_loaded, p.files_skipped), (1, 0), "{p:?}");
    assert_eq!(p.bytes_loaded, 10_000);
}

/// `path` opened in `c` and read whole: the handle.
fn read_whole(c: &Cache, path: &Path) -> foliocache::File {
    let f = c.open(path).unwrap();
    let mut buf = vec![0u8; f.len() as usize];
    f.read_exact_at(&mut buf, 0).unwrap();
    f
}

/// `bytes` written at 0 of `path` by another writer, not through a cache.
fn write_outside(path: &Path, bytes: &[u8]) {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .write_all_at(bytes, 0)
        .unwrap();
}

#[test]
fn a_file_closed_keeping_is_found_cached_by_its_next_open() {
    // Read, closed, opened again: as the kernel's page cache, the pages
    // are still there.
    let data = random_bytes(13, (32 * PAGE) as usize);
    let file = TempPath::with_data("warm-keep", &data);
    let c = TestCache::bytes(16 << 20).no_readahead().build();
    c.close_keeping(read_whole(&c, &file.path));
    let mut buf = vec![0u8; data.len()];
    assert_eq!(c.stats().bytes_cached, 32 * PAGE, "kept past the close");
    let misses = c.stats().misses;
    let f = c.open(&file.path).unwrap();
    assert_eq!(cached_pages(&f, 0, 32), 32);
    buf.fill(0);
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, data);
    assert_eq!(c.stats().misses, misses, "every read a hit");
    // A plain close forgets the file, as before.
    drop(f);
    assert_eq!(c.stats().bytes_cached, 0);
}

#[test]
fn a_file_written_through_the_cache_is_not_kept_past_its_close() {
    let file = TempPath::new("warm-keep-written");
    let c = TestCache::bytes(16 << 20).build();
    let f = test_support::cache::open_rw(&c, &file.path);
    f.write_all_at(&random_bytes(17, (4 * PAGE) as usize), 0)
        .unwrap();
    c.close_keeping(f);
    assert_eq!(c.stats().bytes_cached, 0);
}

#[test]
fn a_file_changed_by_another_writer_while_open_is_not_kept() {
    let data = random_bytes(18, (4 * PAGE) as usize);
    let file = TempPath::with_data("warm-keep-while-open", &data);
    let c = TestCache::bytes(16 << 20).no_readahead().build();
    let f = read_whole(&c, &file.path);
    let mut buf = vec![0u8; data.len()];
    // Another writer, not through the cache, while the file is open: same
    // size, so only the times tell.
    let new = random_bytes(19, data.len());
    write_outside(&file.path, &new);
    c.close_keeping(f);
    assert_eq!(c.stats().bytes_cached, 0, "not kept");
    let f = c.open(&file.path).unwrap();
    f.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf == new, "a stale byte after the close");
}

#[test]
fn a_kept_file_changed_by_another_writer_is_read_afresh() {
    let data = random_bytes(14, (16 * PAGE) as usize);
    let file = TempPath::with_data("warm-keep-changed", &data);
    let c = TestCache::bytes(16 << 20).no_readahead().build();
    c.close_keeping(read_whole(&c, &file.path));
    let mut buf = vec![0u8; data.len()];
    // Another writer, not through the cache: same size, new bytes.
    let new = random_bytes(15, data.len());
    write_outside(&file.path, &new);
    let f = c.open(&file.path).unwrap();
    f.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf == new, "a stale byte from the kept file");
}

#[test]
fn a_kept_file_unlinked_is_let_go_at_the_next_close() {
    let data = random_bytes(16, (8 * PAGE) as usize);
    let a = TempPath::with_data("warm-keep-a", &data);
    let b = TempPath::with_data("warm-keep-b", &data);
    let c = TestCache::bytes(16 << 20).no_readahead().build();
    let mut buf = vec![0u8; data.len()];
    c.close_keeping(read_whole(&c, &a.path));
    fs::remove_file(&a.path).unwrap();
    assert_eq!(c.stats().bytes_cached, 8 * PAGE);
    // The next close lets the unlinked file go (its descriptor too, so
    // its blocks are freed), and keeps the other.
    let f = c.open(&b.path).unwrap();
    f.read_exact_at(&mut buf[..PAGE as usize], 0).unwrap();
    c.close_keeping(f);
    assert_eq!(c.stats().bytes_cached, PAGE);
    // An unlinked file is not kept at all.
    let f = c.open(&b.path).unwrap();
    fs::remove_file(&b.path).unwrap();
    c.close_keeping(f);
    assert_eq!(c.stats().bytes_cached, 0);
}

/// Waits until `pages` pages from 0 of `f` are cached (bounded).
fn until_cached(f: &foliocache::File, pages: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while cached_pages(f, 0, pages) < pages {
        assert!(Instant::now() < deadline, "never cached");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_written_file_opened_again_reads_its_noted_ranges_back() {
    // RocksDB writes a table, closes it, and opens it again to read: the
    // cache did not keep it (it wrote it), but its note brings it back.
    let file = TempPath::new("warm-reload");
    let c = TestCache::bytes(16 << 20).build();
    let f = test_support::cache::open_rw(&c, &file.path);
    let data = random_bytes(20, (32 * PAGE) as usize);
    f.write_all_at(&data, 0).unwrap();
    c.remember(&f);
    c.close_keeping(f);
    assert_eq!(c.stats().bytes_cached, 0, "not kept");
    let f = c.open(&file.path).unwrap();
    assert_eq!(c.reload_noted(&f), 32 * PAGE);
    until_cached(&f, 32);
    let misses = c.stats().misses;
    let mut buf = vec![0u8; data.len()];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf == data);
    assert_eq!(c.stats().misses, misses, "every read a hit");
    drop(f);

    // Changed since its note: nothing read back.
    write_outside(&file.path, b"new");
    let f = c.open(&file.path).unwrap();
    assert_eq!(c.reload_noted(&f), 0);
    assert_eq!(cached_pages(&f, 0, 32), 0);
}

/// A FIFO at the state path: the load neither blocks (a plain open of a
/// FIFO waits for a writer) nor reads it; a warning and a cold start.
#[test]
fn a_fifo_at_the_state_path_is_refused_without_waiting() {
    let state = TempPath::new("warm-fifo-state");
    nix::unistd::mkfifo(&state.path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let path = state.path.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let c = TestCache::bytes(1 << 20).build();
        let _ = tx.send(c.warm_from(&path));
    });
    let start = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the load of a FIFO returned (it waited for a writer)");
    let w = start.warning.expect("a FIFO is a warning");
    assert!(w.contains("not a regular file"), "{w}");
}

/// A state file another user could write chooses which files the cache
/// reads: refused, as ssh refuses such a key; likewise one owned by
/// another user.
#[test]
fn a_state_file_others_can_write_or_own_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let state = TempPath::with_data("warm-open-state", &good_state_bytes());
    fs::set_permissions(&state.path, fs::Permissions::from_mode(0o666)).unwrap();
    let c = TestCache::bytes(1 << 20).build();
    let w = c.warm_from(&state.path).warning.expect("a warning");
    assert!(w.contains("writable by others"), "{w}");
    fs::set_permissions(&state.path, fs::Permissions::from_mode(0o600)).unwrap();
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(&state.path, Some(65534), None).unwrap();
        let w = c.warm_from(&state.path).warning.expect("a warning");
        assert!(w.contains("owned by user 65534"), "{w}");
    }
}

/// The save makes its temporary new: a symlink planted at any name it
/// might use is never followed (the file it points to keeps its bytes),
/// and the state path ends a regular file of mode 0600 (it lists the
/// path of every file cached).
#[test]
fn a_save_follows_no_planted_symlink_and_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let state = TempPath::new("warm-planted-state");
    let victim = TempPath::with_data("warm-victim", b"precious");
    let pid = std::process::id();
    let mut planted = vec![format!("{}.tmp.{pid}", state.path.display())];
    planted.extend((0..3).map(|i| format!("{}.tmp.{pid}.{i}", state.path.display())));
    for p in &planted {
        std::os::unix::fs::symlink(&victim.path, p).unwrap();
    }
    let c = TestCache::bytes(1 << 20).build();
    c.save_state(&state.path).unwrap();
    assert_eq!(fs::read(&victim.path).unwrap(), b"precious");
    let md = fs::symlink_metadata(&state.path).unwrap();
    assert!(md.file_type().is_file(), "the state path is a regular file");
    assert_eq!(md.permissions().mode() & 0o777, 0o600);
    assert_eq!(
        State::decode(&fs::read(&state.path).unwrap()).unwrap(),
        State::default()
    );
    for p in &planted {
        let _ = fs::remove_file(p);
    }
}
