//! One cache for a group of processes (`foliocache run --shared`;
//! docs/preload.md, "Processes"): forked children keep serving from the
//! group's shared cache, see the parent's unsynced writes and share its
//! positions; what a child wrote and never wrote back (`_exit`, SIGKILL)
//! is read by the others from the cache and reaches the files once the
//! group's holder writes back.

use std::os::fd::AsRawFd;

use crate::support::{compile, preloaded, Build};

/// Runs `tests/c/<name>.c` on a fresh directory (its `data`) in a new
/// group's cache: the directory, `data`, the cache and how it ended.
fn run_in_group(
    name: &str,
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    fc::SharedCache,
    std::process::Output,
) {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(name, dir.path(), Build::Plain);
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let cache = fc::SharedCache::new(16 << 20).unwrap();
    let fd = format!(
        "/proc/{}/fd/{}",
        std::process::id(),
        cache.memory_file().as_raw_fd()
    );
    let out = preloaded(&exe, &data)
        .arg(&data)
        .env("FOLIOCACHE_PRELOAD_SHARED", &fd)
        .env("FOLIOCACHE_PRELOAD_STATS", "1")
        .output()
        .unwrap();
    (dir, data, cache, out)
}

#[test]
fn forked_children_share_the_cache_positions_and_unsaved_writes() {
    let (_dir, data, cache, out) = run_in_group("forked");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "check failed: {stderr}");
    assert!(stderr.contains("shared"), "{stderr}");
    // The parent wrote `a` back at its exit; `b` and `c` (a child's,
    // never written back) only the group's holder writes.
    let a = std::fs::read(data.join("a")).unwrap();
    assert_eq!(a.len(), 16384);
    assert!(a[..12288].iter().all(|&b| b == b'P') && a[12288..].iter().all(|&b| b == b'C'));
    assert!(
        cache.stats().dirty > 0,
        "the children's pages wait in the cache"
    );
    cache.write_back_all().unwrap();
    assert_eq!(std::fs::read(data.join("b")).unwrap(), vec![b'B'; 5000]);
    assert_eq!(std::fs::read(data.join("c")).unwrap(), vec![b'K'; 4096]);
    assert_eq!(cache.stats().dirty, 0);
    cache.verify().unwrap();
}

/// A process that ends with `_exit` (every `multiprocessing` worker)
/// printed no line of figures and left its last reads out of the group's
/// figures: only exit handlers did either. In `tests/c/forked.c` the
/// parent exits, the first child `_exit`s after reading the parent's
/// three pages, the second kills itself having read nothing: two lines,
/// in the form docs/preload.md shows, and the group's bytes read are the
/// two processes' (the parent's 4096 + 5000 + 4096, the child's 12288).
#[test]
fn a_process_that_ends_with_exit_has_its_line_and_its_reads_in_the_groups() {
    let (_dir, _data, cache, out) = run_in_group("forked");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "check failed: {stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("foliocache-preload: pid ") && l.contains(" opens served; "))
        .collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    for l in &lines {
        assert!(
            l.contains("; from the group's shared cache (") && l.ends_with(" (page lookups)"),
            "{l}"
        );
    }
    assert!(
        lines.iter().any(|l| l.contains(
            ": 12288 bytes read: 12288 from memory (100.0 %), 0 read from the files (readahead \
             included); 3 hits, 0 misses (page lookups)"
        )),
        "the child's line: {stderr}"
    );
    let s = cache.stats();
    assert_eq!(s.group_read_bytes, 4096 + 5000 + 4096 + 12288, "{s:?}");
    assert_eq!(s.group_memory_bytes(), s.group_read_bytes, "{s:?}");
}

/// One process maps a file the group serves: the others hand it to the
/// kernel at their next call on it, so a read after the mapping's write
/// sees it and a write is seen by the mapping (`tests/c/handed.c`).
#[test]
fn a_file_one_process_maps_is_handed_over_by_the_others() {
    let (_dir, _data, cache) = run_mapped("handed");
    cache.verify().unwrap();
}

/// Runs `tests/c/<name>.c` in a group ([`run_in_group`]), which is to
/// succeed leaving `data/f` a page of 'B' with a 'C' at byte 100 (a
/// mapping's write, and a write through an fd the mapping saw).
fn run_mapped(name: &str) -> (tempfile::TempDir, std::path::PathBuf, fc::SharedCache) {
    let (dir, data, cache, out) = run_in_group(name);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "check failed: {stderr}");
    let f = std::fs::read(data.join("f")).unwrap();
    assert_eq!(f.len(), 4096);
    assert!(f
        .iter()
        .enumerate()
        .all(|(i, &b)| b == if i == 100 { b'C' } else { b'B' }));
    (dir, data, cache)
}

/// A file one process of the group maps, or writes through a stdio
/// stream, is the kernel's for every process of it, also for a
/// description opened after the hand-over by a process that had no part
/// in it: the mapping's writes and the stream's are seen at once, and the
/// late opener's write reaches the mapping; once the one process that
/// mapped a file is gone, the file is served again, with what it wrote
/// (`tests/c/handed_later.c`).
#[test]
fn a_file_handed_to_the_kernel_is_not_served_to_a_later_open() {
    let (_dir, data, cache) = run_mapped("handed_later");
    assert_eq!(std::fs::read(data.join("s")).unwrap(), b"onetwo");
    assert_eq!(std::fs::read(data.join("t")).unwrap(), vec![b'X'; 4096]);
    cache.verify().unwrap();
}

#[test]
fn a_group_whose_cache_cannot_be_attached_passes_through() {
    let dir = tempfile::tempdir().unwrap();
    let out = preloaded("sh", dir.path())
        .arg("-c")
        .arg("echo hello > f && cat f")
        .current_dir(dir.path())
        .env("FOLIOCACHE_PRELOAD_SHARED", dir.path().join("no-such-file"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("FOLIOCACHE_PRELOAD_SHARED") && stderr.contains("pass through"),
        "{stderr}"
    );
}
