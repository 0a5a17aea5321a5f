//! The cache's own threads: `CacheBuilder::on_thread_start` runs once on
//! every thread the cache and its IO engine start, before the thread's
//! work (what an `LD_PRELOAD` interposer needs to let the cache's own
//! calls pass through).
//!
//! The test runs in a child process of its own (the test binary re-run
//! on it), where no other test starts threads: every thread that appears
//! while it builds and uses a cache is one of the cache's.
// The hook's record is shared with the cache's threads: std's types, no
// model checker runs this test.
#![allow(clippy::disallowed_types)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use foliocache::{Cache, Populate};
use test_support::cache::mem_file;
use test_support::{rerun_test, run_checked};

/// The environment variable that tells the re-run test binary its part.
const ROLE: &str = "FOLIOCACHE_THREADS_ROLE";

/// The threads of this process now: thread id to name. The kernel's
/// io_uring workers (`iou-wrk-*`, `iou-sqp-*`) are left out: the kernel
/// starts them, not the cache.
fn threads() -> BTreeMap<i32, String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let tid: i32 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            let comm = comm.trim_end().to_string();
            (!comm.starts_with("iou-")).then_some((tid, comm))
        })
        .collect()
}

#[test]
fn hook_runs_once_on_every_thread_the_cache_starts() {
    if std::env::var_os(ROLE).is_none() {
        run_checked(
            rerun_test(
                module_path!(),
                "hook_runs_once_on_every_thread_the_cache_starts",
            )
            .env(ROLE, "child"),
        );
        return;
    }
    let before = threads();
    let ran: Arc<Mutex<Vec<(i32, String)>>> = Arc::default();
    let seen = ran.clone();
    let cache = Cache::builder()
        .capacity(4 << 20)
        .populate(Populate::Lazy)
        .on_thread_start(move || {
            let name = std::thread::current().name().unwrap_or("").to_string();
            seen.lock()
                .unwrap()
                .push((nix::unistd::gettid().as_raw(), name));
        })
        .build()
        .unwrap();
    // Readahead over a memory backing (no file descriptor) runs on the
    // engine's pool, which io_uring starts on first use: a read starts it.
    let file = mem_file(&cache, &vec![7u8; 1 << 20]);
    let mut buf = vec![0u8; 4096];
    file.read_at(&mut buf, 0).unwrap();
    cache.wait_io_idle();
    let started: Vec<i32> = threads()
        .into_keys()
        .filter(|tid| !before.contains_key(tid))
        .collect();
    // A thread just started may not have run its first line yet: once
    // the cache is gone and its threads have exited, every one of them
    // has (its hook is the first thing it runs).
    drop(file);
    drop(cache);
    let mut waits = 0;
    while threads().keys().any(|tid| started.contains(tid)) {
        waits += 1;
        assert!(
            waits < 3000,
            "the cache's threads did not exit after its drop"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let ran = ran.lock().unwrap().clone();
    let mut hooked: Vec<i32> = ran.iter().map(|(tid, _)| *tid).collect();
    hooked.sort_unstable();
    let mut once = hooked.clone();
    once.dedup();
    assert_eq!(hooked, once, "the hook ran twice on a thread: {ran:?}");
    assert_eq!(
        hooked, started,
        "threads the cache started against those that ran the hook ({ran:?})"
    );
    for name in [
        "foliocache-flush",
        "foliocache-curve",
        "foliocache-populate",
        "foliocache-pressure",
        "foliocache-wb0",
        "aio-",
    ] {
        assert!(
            ran.iter().any(|(_, n)| n.starts_with(name)),
            "no thread {name}* among {ran:?}"
        );
    }
}
