//! What a sync promises, checked from outside: after `sync_data`/`sync_all`
//! (of the file or of the whole cache) returns, another process reading the
//! backing file sees exactly the bytes written and the file's size; and data
//! written and never synced still reaches the file when its last handle is
//! dropped or the cache goes away.
//!
//! The other process is this test binary run again with
//! `FOLIOCACHE_DURABILITY_FILE` set and a filter for
//! [`child_reports_a_file`], which reads the file with `std::fs` and prints
//! its length and an FNV-1a hash; `cmp(1)` from coreutils checks the same
//! where it is installed. Another child writes, syncs and aborts (no drop,
//! no exit): what it synced must be in the file.

use std::path::Path;
use std::process::Command;

use foliocache::Cache;
use test_support::{rerun_test, skip_or_fail};

use crate::common::write as wcommon;
use test_support::cache::TestCache;
use test_support::TempPath;
use wcommon::{disk, nonzero_bytes, open_rw, read_all, Model, P};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
const CHILD_ENV: &str = "FOLIOCACHE_DURABILITY_FILE";

/// 64-bit FNV-1a.
fn fnv(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// Not a test of its own: run in a child process by [`seen_by_another_process`],
/// it reports the file named by the environment. In the normal run it has
/// nothing to do.
#[test]
fn child_reports_a_file() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let data = std::fs::read(&path).unwrap();
    println!("DURABILITY len={} fnv={:016x}", data.len(), fnv(&data));
}

/// (length, hash) of `path` as a separate process sees it.
fn seen_by_another_process(path: &Path) -> (usize, u64) {
    let out = rerun_test(module_path!(), "child_reports_a_file")
        .env(CHILD_ENV, path)
        .output()
        .expect("re-running the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        // libtest prints "test child_reports_a_file ... " on the same line.
        .find_map(|l| l.split_once("DURABILITY ").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("no report from the child:\n{stdout}"));
    let mut len = None;
    let mut hash = None;
    for kv in line.split_whitespace() {
        match kv.split_once('=') {
            Some(("len", v)) => len = v.parse().ok(),
            Some(("fnv", v)) => hash = u64::from_str_radix(v, 16).ok(),
            _ => {}
        }
    }
    (len.unwrap(), hash.unwrap())
}

/// Asserts another process sees `want` at `path`; also with `cmp(1)` if it
/// is installed.
#[track_caller]
fn assert_seen(what: &str, path: &Path, want: &[u8]) {
    let (len, hash) = seen_by_another_process(path);
    assert_eq!(len, want.len(), "{what}: length another process sees");
    if hash != fnv(want) {
        // Say where, from our own view of the file.
        wcommon::assert_same(what, &disk(path), want);
        panic!("{what}: another process sees different bytes (hash {hash:016x})");
    }
    let expected = TempPath::with_data("expected", want);
    match Command::new("cmp").arg(&expected.path).arg(path).output() {
        Ok(out) => assert!(
            out.status.success(),
            "{what}: cmp: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => skip_or_fail(what, format!("the cmp check: cmp(1) not runnable: {e}")),
    }
}

#[test]
fn after_sync_all_another_process_sees_the_data() {
    let tmp = TempPath::new("sync-all");
    let c = TestCache::bytes(MIB).max_folio(64 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    let mut model = Model::default();
    // More than the cache, unaligned, with overwrites.
    let a = nonzero_bytes(3 * MIB + 333, 1);
    f.write_all_at(&a, 0).unwrap();
    model.write(0, &a);
    let b = nonzero_bytes(70_001, 2);
    f.write_all_at(&b, 123_457).unwrap();
    model.write(123_457, &b);
    f.sync_all().unwrap();
    assert_seen("after File::sync_all", &tmp.path, &model.data);
}

#[test]
fn after_sync_data_another_process_sees_the_data_and_the_grown_size() {
    let tmp = TempPath::with_data("sync-data", &nonzero_bytes(10_000, 3));
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    let mut model = Model {
        data: disk(&tmp.path),
    };
    // Grow to an unaligned size past the old end.
    let b = nonzero_bytes(5, 4);
    f.write_all_at(&b, 50_001).unwrap();
    model.write(50_001, &b);
    f.sync_data().unwrap();
    assert_seen("grown, after sync_data", &tmp.path, &model.data);
    // Shrink, and sync again.
    f.set_len(7777).unwrap();
    model.set_len(7777);
    f.sync_data().unwrap();
    assert_seen("shrunk, after sync_data", &tmp.path, &model.data);
    // Punch, and sync again.
    f.punch_hole(100, 5000).unwrap();
    model.punch(100, 5000);
    f.sync_data().unwrap();
    assert_seen("punched, after sync_data", &tmp.path, &model.data);
}

#[test]
fn after_cache_sync_all_another_process_sees_every_open_file() {
    let c = TestCache::bytes(2 * MIB).max_folio(64 * KIB).build();
    let paths: Vec<TempPath> = (0..3).map(|_| TempPath::new("cache-sync")).collect();
    let mut want = Vec::new();
    let files: Vec<_> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let f = open_rw(&c, &p.path);
            let data = nonzero_bytes(100_000 + i * 4097, 10 + i as u64);
            f.write_all_at(&data, 0).unwrap();
            want.push(data);
            f
        })
        .collect();
    c.sync_all().unwrap();
    let s = c.stats();
    assert_eq!(
        s.dirty_bytes, 0,
        "Cache::sync_all leaves nothing dirty: {s:?}"
    );
    for (p, w) in paths.iter().zip(&want) {
        assert_seen("after Cache::sync_all", &p.path, w);
    }
    drop(files);
}

#[test]
fn dropping_the_last_handle_writes_dirty_data_back() {
    let tmp = TempPath::with_data("drop", &nonzero_bytes(20_000, 5));
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    let g = f.clone();
    let r = f.reopen();
    let mut model = Model {
        data: disk(&tmp.path),
    };
    let b = nonzero_bytes(30_000, 6);
    f.write_all_at(&b, 9_999).unwrap();
    model.write(9_999, &b);
    drop(f);
    drop(g);
    drop(r); // the last handle
    assert_eq!(
        c.stats().dirty_bytes,
        0,
        "nothing dirty after the last handle went"
    );
    assert_seen("after dropping every handle", &tmp.path, &model.data);
    // And a new cache reads it back.
    let c2 = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    assert_eq!(read_all(&open_rw(&c2, &tmp.path)), model.data);
}

#[test]
fn dropping_the_cache_after_the_file_writes_dirty_data_back() {
    let tmp = TempPath::new("drop-cache");
    let data = nonzero_bytes(MIB + 1, 7);
    {
        let c: Cache = TestCache::bytes(4 * MIB).max_folio(64 * KIB).build();
        let f = open_rw(&c, &tmp.path);
        f.write_all_at(&data, 0).unwrap();
        // Dropped in the opposite order of the test above: the cache
        // handle first (the file keeps the cache alive), then the file.
        drop(c);
        drop(f);
    }
    assert_seen("after dropping the cache and the file", &tmp.path, &data);
    let c2 = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    assert_eq!(read_all(&open_rw(&c2, &tmp.path)), data);
}

#[test]
fn a_dirty_file_dropped_then_cache_sync_all_leaves_nothing_dirty() {
    let tmp = TempPath::new("drop-then-sync");
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    let data = nonzero_bytes(40 * P as usize + 3, 8);
    {
        let f = open_rw(&c, &tmp.path);
        f.write_all_at(&data, 0).unwrap();
    }
    c.sync_all().unwrap();
    assert_eq!(c.stats().dirty_bytes, 0);
    assert_seen("dropped, then Cache::sync_all", &tmp.path, &data);
}

#[test]
fn an_uncached_write_then_sync_is_seen_by_another_process() {
    let tmp = TempPath::new("dontcache-durable");
    let c = TestCache::bytes(MIB).max_folio(64 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    let data = nonzero_bytes(2 * MIB + 7, 9);
    f.write_at_flags(&data, 0, foliocache::WriteFlags::DONTCACHE)
        .unwrap();
    f.sync_data().unwrap();
    assert_seen("uncached write, synced", &tmp.path, &data);
}

#[test]
fn dropping_the_last_handle_while_the_flusher_works_writes_back_before_drop_returns() {
    // The flusher holds the files it works on for a while (here: a slow
    // backing write). The last handle dropped meanwhile must still have
    // written the data back when drop returns, not leave it to whoever
    // lets go of the file last: a reopen would read stale bytes.
    use std::sync::Arc;
    let c = TestCache::bytes(4 * MIB)
        .max_folio(64 * KIB)
        .dirty_limit(4 * MIB)
        .dirty_background(64 * KIB)
        .build();
    let b = Arc::new(backing::FaultyBacking::new(backing::MemBacking::new()));
    b.set_write_latency(std::time::Duration::from_millis(300));
    let f = c.open_backing(b.clone()).unwrap();
    let data = nonzero_bytes(512 * KIB, 11);
    f.write_all_at(&data, 0).unwrap();
    wcommon::wait_until("the flusher to start a write", || b.stats().writes >= 1);
    drop(f);
    let got = b.inner().contents().unwrap();
    wcommon::assert_same(
        "the backing right after the last handle was dropped",
        &got,
        &data,
    );
}

const ABORT_ENV: &str = "FOLIOCACHE_DURABILITY_ABORT_FILE";

/// Not a test of its own: run in a child process by
/// [`data_synced_by_a_process_that_then_aborts_is_in_the_file`], it writes
/// through a cache, syncs, dirties more, and aborts (no drop, no exit
/// handlers). In the normal run it has nothing to do.
#[test]
fn child_writes_syncs_and_aborts() {
    let Ok(path) = std::env::var(ABORT_ENV) else {
        return;
    };
    let c = TestCache::bytes(MIB).max_folio(64 * KIB).build();
    let f = open_rw(&c, Path::new(&path));
    f.write_all_at(&nonzero_bytes(3 * MIB + 5, 20), 0).unwrap();
    f.sync_data().unwrap();
    // Dirty again after the sync: may or may not reach the file.
    f.write_all_at(&[0u8; 100], 0).unwrap();
    println!("SYNCED");
    std::process::abort();
}

#[test]
fn data_synced_by_a_process_that_then_aborts_is_in_the_file() {
    let tmp = TempPath::new("abort");
    let out = rerun_test(module_path!(), "child_writes_syncs_and_aborts")
        .env(ABORT_ENV, &tmp.path)
        .output()
        .expect("re-running the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("SYNCED"),
        "the child did not get to its sync:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "the child aborted");
    let want = nonzero_bytes(3 * MIB + 5, 20);
    let got = disk(&tmp.path);
    assert_eq!(got.len(), want.len(), "the synced length");
    // The first 100 bytes were dirtied again after the sync: either is fine.
    assert!(
        got[..100] == want[..100] || got[..100] == [0u8; 100],
        "bytes 0..100 are neither the synced nor the later data"
    );
    wcommon::assert_same(
        "synced data after the writer aborted",
        &got[100..],
        &want[100..],
    );
}
