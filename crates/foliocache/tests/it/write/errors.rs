//! Error reporting on the write path, with faults injected at the IO seam
//! (`backing::FaultyBacking` over a `MemBacking`): writeback
//! (`write_blocks`) and sync failing with `EIO` or `ENOSPC`, once, for
//! good, or past a space limit.
//!
//! What must hold (the kernel's errseq, `filemap_check_wb_err`):
//! - the error reaches the caller of `sync_data`/`sync_all`, once per
//!   handle: a clone shares the report, `reopen()` gets its own;
//! - a sync that returns `Ok` means the data is in the backing: no
//!   acknowledged write is lost, because folios whose writeback failed stay
//!   dirty and are retried;
//! - reads keep returning the written bytes meanwhile, and the cache stays
//!   usable (more writes, reads, `set_len`);
//! - a writer throttled on dirty memory whose writeback keeps failing gets
//!   the error instead of hanging.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use backing::{FaultyBacking, MemBacking, Op};
use foliocache::{Cache, File};

use crate::common::write as wcommon;
use test_support::cache::TestCache;
use wcommon::{
    assert_same, errno, nonzero_bytes, read_all, read_vec, wait_until, within, Model, HANG, P, PAGE,
};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

type Faulty = Arc<FaultyBacking<MemBacking>>;

/// An empty, writable, fault-injecting memory file through `c`.
fn open_faulty(c: &Cache) -> (File, Faulty) {
    let b = Arc::new(FaultyBacking::new(MemBacking::new()));
    let f = c.open_backing(b.clone()).unwrap();
    assert!(f.is_writable());
    (f, b)
}

/// The backing's bytes (behind the fault rules).
fn contents(b: &Faulty) -> Vec<u8> {
    b.inner().contents().unwrap()
}

// ---- one failure, then recovery ------------------------------------------------

fn one_failed_writeback(errno_: i32, max_folio: usize, sync_all: bool) {
    let c = TestCache::bytes(4 * MIB)
        .max_folio(max_folio)
        .quiet()
        .build();
    let (f, b) = open_faulty(&c);
    let data = nonzero_bytes(300 * KIB + 11, errno_ as u64);
    f.write_all_at(&data, 0).unwrap();
    b.fail_nth(Op::Write, 1, errno_);
    let sync = |f: &File| {
        if sync_all {
            f.sync_all()
        } else {
            f.sync_data()
        }
    };
    let what = format!("errno {errno_}, max folio {max_folio}, sync_all {sync_all}");
    assert_eq!(
        errno(&what, sync(&f)),
        errno_,
        "{what}: the first sync reports it"
    );
    assert!(b.stats().injected_errors >= 1, "{what}: the fault fired");
    let s = c.stats();
    assert!(s.writeback_errors >= 1, "{what}: counted: {s:?}");
    assert!(
        s.dirty_bytes > 0,
        "{what}: the failed folios stay dirty: {s:?}"
    );
    // Meanwhile the cache still has the data.
    assert_same(
        &format!("{what}: reads after the failure"),
        &read_all(&f),
        &data,
    );
    // The fault was one-shot: the next sync retries and succeeds.
    sync(&f).unwrap_or_else(|e| panic!("{what}: the second sync: {e}"));
    assert_same(
        &format!("{what}: backing after the retry"),
        &contents(&b),
        &data,
    );
    let cs = f.cachestat(0, 0).unwrap();
    assert_eq!((cs.dirty, cs.writeback), (0, 0), "{what}: {cs:?}");
    assert_eq!(c.stats().dirty_bytes, 0, "{what}");
    // Reported once: a third sync is clean.
    sync(&f).unwrap_or_else(|e| panic!("{what}: the third sync: {e}"));
}

#[test]
fn eio_on_writeback_is_reported_by_the_next_sync_once_and_the_data_is_retried() {
    for max_folio in [PAGE, 64 * KIB] {
        for sync_all in [false, true] {
            one_failed_writeback(libc::EIO, max_folio, sync_all);
        }
    }
}

#[test]
fn enospc_on_writeback_is_reported_by_the_next_sync_once_and_the_data_is_retried() {
    for max_folio in [PAGE, 64 * KIB] {
        for sync_all in [false, true] {
            one_failed_writeback(libc::ENOSPC, max_folio, sync_all);
        }
    }
}

#[test]
fn a_failed_backing_sync_is_reported_and_the_next_sync_succeeds() {
    for e in [libc::EIO, libc::ENOSPC] {
        let c = TestCache::bytes(MIB).max_folio(16 * KIB).quiet().build();
        let (f, b) = open_faulty(&c);
        let data = nonzero_bytes(50_000, 1);
        f.write_all_at(&data, 0).unwrap();
        b.fail_nth(Op::Sync, 1, e);
        assert_eq!(errno("failed fsync", f.sync_all()), e);
        f.sync_all().unwrap();
        assert_same("backing", &contents(&b), &data);
        // sync_data goes through the same path.
        f.write_all_at(b"more", 10).unwrap();
        b.fail_nth(Op::Sync, 1, e);
        assert_eq!(errno("failed fdatasync", f.sync_data()), e);
        f.sync_data().unwrap();
        let mut model = Model { data };
        model.write(10, b"more");
        assert_same("backing", &contents(&b), &model.data);
    }
}

#[test]
fn a_failure_only_in_one_range_keeps_that_range_dirty_and_writes_the_rest() {
    let c = TestCache::bytes(4 * MIB).max_folio(PAGE).quiet().build();
    let (f, b) = open_faulty(&c);
    let data = nonzero_bytes(64 * PAGE, 2);
    f.write_all_at(&data, 0).unwrap();
    // A bad spot at page 40; a write covering it fails, others pass.
    b.fail_writes_in(40 * P, P, libc::EIO);
    assert_eq!(errno("bad range", f.sync_data()), libc::EIO);
    let got = contents(&b);
    // Whatever was written is the right data (never garbage).
    for (i, (g, w)) in got.iter().zip(&data).enumerate() {
        if *g != 0 {
            assert_eq!(g, w, "backing byte {i} after a partly failed writeback");
        }
    }
    assert!(
        f.cachestat(40 * P, P).unwrap().dirty == 1,
        "page 40 stays dirty"
    );
    // Still failing: the retry fails again, and a sync says so.
    assert_eq!(
        errno("bad range, retried", f.sync_data()),
        libc::EIO,
        "a sync must not succeed while data it was asked to write is not written"
    );
    b.clear_write_ranges();
    f.sync_data().unwrap();
    assert_same("backing once the range heals", &contents(&b), &data);
}

#[test]
fn a_dead_device_fails_every_sync_until_it_comes_back_and_loses_nothing() {
    let c = TestCache::bytes(2 * MIB)
        .max_folio(64 * KIB)
        .quiet()
        .build();
    let (f, b) = open_faulty(&c);
    let mut model = Model::default();
    let data = nonzero_bytes(200_000, 3);
    f.write_all_at(&data, 0).unwrap();
    model.write(0, &data);
    b.fail_from_nth(Op::Write, 1, libc::EIO);
    for i in 0..3 {
        assert_eq!(
            errno(&format!("sync {i} on a dead device"), f.sync_data()),
            libc::EIO,
            "every sync that could not write its data fails"
        );
        // The cache stays usable: writes, reads, set_len.
        let buf = nonzero_bytes(5000, 10 + i);
        let off = 1000 + 30_000 * i;
        f.write_all_at(&buf, off).unwrap();
        model.write(off, &buf);
        assert_same(
            &format!("reads during failure {i}"),
            &read_all(&f),
            &model.data,
        );
    }
    f.set_len(150_001).unwrap();
    model.set_len(150_001);
    f.set_len(190_000).unwrap();
    model.set_len(190_000);
    assert_same("after set_len during failure", &read_all(&f), &model.data);
    b.clear_nth(Op::Write);
    f.sync_all().unwrap();
    assert_same(
        "backing after the device came back",
        &contents(&b),
        &model.data,
    );
    f.sync_all().unwrap();
}

// ---- errseq: who gets the report ------------------------------------------------

#[test]
fn a_clone_shares_the_error_report_and_reopen_gets_its_own() {
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).quiet().build();
    let (f, b) = open_faulty(&c);
    let g = f.clone();
    let r = f.reopen();
    let data = nonzero_bytes(40_000, 4);
    f.write_all_at(&data, 0).unwrap();
    b.fail_nth(Op::Write, 1, libc::EIO);
    assert_eq!(
        errno("f", f.sync_data()),
        libc::EIO,
        "the handle that hit it"
    );
    g.sync_data()
        .expect("a clone shares the report f already consumed");
    assert_eq!(
        errno("reopened before the error", r.sync_data()),
        libc::EIO,
        "a reopened handle has its own report"
    );
    r.sync_data().expect("reported once to r too");
    f.sync_data().unwrap();
    assert_same("backing", &contents(&b), &data);
}

#[test]
fn a_clone_that_syncs_first_consumes_the_report_for_the_original() {
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).quiet().build();
    let (f, b) = open_faulty(&c);
    let g = f.clone();
    f.write_all_at(&nonzero_bytes(10_000, 5), 0).unwrap();
    b.fail_nth(Op::Write, 1, libc::ENOSPC);
    assert_eq!(errno("clone", g.sync_all()), libc::ENOSPC);
    f.sync_all().expect("the clone reported it for both");
}

#[test]
fn an_error_hit_by_the_background_flusher_is_reported_by_the_next_sync() {
    // Background writeback from 16 KiB of dirty data on.
    let c = TestCache::bytes(4 * MIB)
        .max_folio(PAGE)
        .dirty_limit(2 * MIB)
        .dirty_background(16 * KIB)
        .build();
    let (f, b) = open_faulty(&c);
    let r = f.reopen();
    b.fail_nth(Op::Write, 1, libc::EIO);
    let data = nonzero_bytes(256 * KIB, 6);
    f.write_all_at(&data, 0).unwrap();
    wait_until("the flusher to hit the fault", || {
        b.stats().injected_errors >= 1
    });
    // Let the flusher write the rest (or not): the report must come anyway.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        errno("sync after a flusher error", f.sync_data()),
        libc::EIO,
        "an error nobody saw is reported by the next sync"
    );
    assert_eq!(errno("reopened handle", r.sync_data()), libc::EIO);
    f.sync_data().unwrap();
    r.sync_data().unwrap();
    assert_same("backing", &contents(&b), &data);
}

// ---- ENOSPC from a space limit ---------------------------------------------------

#[test]
fn enospc_past_a_space_limit_reaches_sync_and_the_data_lands_once_space_is_back() {
    for max_folio in [PAGE, 64 * KIB] {
        let c = TestCache::bytes(4 * MIB)
            .max_folio(max_folio)
            .quiet()
            .build();
        let (f, b) = open_faulty(&c);
        let data = nonzero_bytes(256 * KIB + 100, 7);
        f.write_all_at(&data, 0).unwrap();
        b.set_space_limit(Some(64 * KIB as u64 + 3 * P));
        let what = format!("max folio {max_folio}");
        assert_eq!(errno(&what, f.sync_data()), libc::ENOSPC, "{what}");
        // What fit is right; the rest is still in the cache.
        // What fit is the right data (or a hole), never garbage.
        let got = contents(&b);
        for (i, (g, w)) in got.iter().zip(&data).enumerate() {
            assert!(*g == 0 || g == w, "{what}: backing byte {i} is {g:#x}");
        }
        assert_same(&format!("{what}: cache"), &read_all(&f), &data);
        // Still full: another sync cannot succeed.
        assert_eq!(
            errno(&what, f.sync_data()),
            libc::ENOSPC,
            "{what}: still full"
        );
        b.set_space_limit(None);
        f.sync_data().unwrap();
        assert_same(
            &format!("{what}: backing once space is back"),
            &contents(&b),
            &data,
        );
    }
}

// ---- throttling ---------------------------------------------------------------------

/// Writes 4 KiB pieces into a 1 MiB cache (dirty limit 64 KiB) whose
/// backing fails every write with `e`, until a write fails; bounded by
/// [`HANG`]. Returns the error, the bytes acknowledged before it, the
/// backing, the file and the cache.
fn throttled_writer(e: i32) -> (io::Error, u64, Faulty, File, Cache) {
    within(HANG, "a writer throttled on failing writeback", move || {
        let c = TestCache::bytes(MIB)
            .max_folio(16 * KIB)
            .dirty_limit(64 * KIB)
            .dirty_background(32 * KIB)
            .build();
        let (f, b) = open_faulty(&c);
        b.fail_from_nth(Op::Write, 1, e);
        let chunk = nonzero_bytes(4 * KIB, 8);
        let mut acked = 0u64;
        // Far more than the cache: the writer must stop with an error.
        while acked < 8 * MIB as u64 {
            match f.write_at(&chunk, acked) {
                Ok(n) => acked += n as u64,
                Err(err) => return (err, acked, b, f, c),
            }
        }
        panic!("{acked} bytes written into a 1 MiB cache whose writeback always fails");
    })
}

#[test]
fn a_throttled_writers_error_carries_the_errno() {
    for e in [libc::EIO, libc::ENOSPC] {
        let (err, ..) = throttled_writer(e);
        assert_eq!(
            err.raw_os_error(),
            Some(e),
            "the writeback error as the backing gave it (api7: \"a writeback error (e.g. \
             ENOSPC/EIO raw os error)\"): {err}"
        );
    }
}

#[test]
fn a_throttled_writer_gets_the_writeback_error_instead_of_hanging() {
    for e in [libc::EIO, libc::ENOSPC] {
        let (err, acked, b, f, c) = throttled_writer(e);
        assert_eq!(
            err.kind(),
            io::Error::from_raw_os_error(e).kind(),
            "the writeback error's kind: {err}"
        );
        assert!(
            acked <= MIB as u64,
            "{acked} bytes acknowledged beyond the capacity"
        );
        let s = c.stats();
        assert!(s.throttled >= 1, "the writer was throttled: {s:?}");
        // The acknowledged data is still readable, and lands once the
        // device heals.
        let chunk = nonzero_bytes(4 * KIB, 8);
        for i in 0..acked / chunk.len() as u64 {
            assert_eq!(read_vec(&f, i * 4096, 4096).unwrap(), chunk, "chunk {i}");
        }
        b.clear();
        // The first sync may repeat the error the writer got; one after it
        // must succeed.
        let _ = f.sync_data();
        f.sync_data().unwrap();
        let got = contents(&b);
        assert!(got.len() as u64 >= acked);
        for i in 0..acked as usize / 4096 {
            assert_eq!(
                &got[i * 4096..(i + 1) * 4096],
                &chunk[..],
                "backing chunk {i}"
            );
        }
    }
}

#[test]
fn one_failed_writeback_under_pressure_loses_no_acknowledged_write() {
    // A cache much smaller than the data: writeback happens in the
    // flusher, in throttled writers and in reclaim. The 3rd write IO fails.
    let c = TestCache::bytes(256 * KIB).max_folio(16 * KIB).build();
    let (f, b) = open_faulty(&c);
    b.fail_nth(Op::Write, 3, libc::EIO);
    let data = nonzero_bytes(2 * MIB + 5, 9);
    let mut failures = 0;
    for (i, piece) in data.chunks(10_000).enumerate() {
        let off = (i * 10_000) as u64;
        if let Err(e) = f.write_at(piece, off) {
            // (The errno itself: `a_throttled_writers_error_carries_the_errno`.)
            assert_eq!(
                e.kind(),
                io::Error::from_raw_os_error(libc::EIO).kind(),
                "{e}"
            );
            failures += 1;
            // Transient: the retry goes through.
            f.write_all_at(piece, off)
                .unwrap_or_else(|e| panic!("retry of piece {i}: {e}"));
        }
    }
    assert!(
        failures <= 1,
        "one injected error, {failures} failed writes"
    );
    assert_same("cache", &read_all(&f), &data);
    // The error is reported once (to the writer or to this sync).
    let first = f.sync_data();
    if failures == 1 {
        // Either way is errseq-consistent; what matters is the next one.
        let _ = first;
    } else {
        assert_eq!(errno("the error nobody saw", first), libc::EIO);
    }
    f.sync_data().unwrap();
    assert_same("backing", &contents(&b), &data);
    assert_eq!(b.stats().injected_errors, 1);
}

#[test]
fn a_slow_failing_writeback_does_not_block_reads_of_other_files() {
    let c = TestCache::bytes(2 * MIB)
        .max_folio(16 * KIB)
        .dirty_limit(MIB)
        .dirty_background(64 * KIB)
        .build();
    let (f, b) = open_faulty(&c);
    b.set_write_latency(Duration::from_millis(200));
    b.fail_from_nth(Op::Write, 1, libc::EIO);
    f.write_all_at(&nonzero_bytes(512 * KIB, 10), 0).unwrap();
    let other = nonzero_bytes(256 * KIB, 11);
    let g = c
        .open_backing(MemBacking::with_data(other.clone()))
        .unwrap();
    let got = within(
        HANG,
        "reading another file during failing writeback",
        move || read_all(&g),
    );
    assert_same("other file", &got, &other);
    b.clear();
    let _ = f.sync_data();
    f.sync_data().unwrap();
}

#[test]
fn cache_sync_all_reports_a_failed_writeback_and_each_handle_still_sees_it() {
    let c = TestCache::bytes(2 * MIB)
        .max_folio(16 * KIB)
        .quiet()
        .build();
    let (f, b) = open_faulty(&c);
    let (g, b2) = open_faulty(&c);
    let data = nonzero_bytes(100_000, 12);
    f.write_all_at(&data, 0).unwrap();
    g.write_all_at(&data, 0).unwrap();
    b.fail_nth(Op::Write, 1, libc::EIO);
    assert_eq!(errno("Cache::sync_all", c.sync_all()), libc::EIO);
    // The other file was still written.
    assert_same("the healthy file's backing", &contents(&b2), &data);
    // The failing file's handle has not reported it yet: its sync does
    // (the retry itself succeeds).
    assert_eq!(
        errno(
            "the handle after Cache::sync_all met its error",
            f.sync_data()
        ),
        libc::EIO
    );
    g.sync_data()
        .expect("the healthy file has nothing to report");
    f.sync_data().unwrap();
    c.sync_all().unwrap();
    assert_same("backing after the retry", &contents(&b), &data);
}

#[test]
fn a_failed_write_of_a_partial_folio_read_reports_the_read_error_and_changes_nothing() {
    // A write that covers a folio only in part reads the rest first; if
    // that read fails, the write fails with the read's error and the
    // file keeps its old bytes and size.
    let data = nonzero_bytes(64 * PAGE, 13);
    let b = Arc::new(FaultyBacking::new(MemBacking::with_data(data.clone())));
    let c = TestCache::bytes(MIB).max_folio(PAGE).no_readahead().build();
    let f = c.open_backing(b.clone()).unwrap();
    b.fail_reads_in(5 * P, P, libc::EIO);
    assert_eq!(
        errno(
            "partial write over a bad page",
            f.write_at(b"xyz", 5 * P + 10)
        ),
        libc::EIO
    );
    assert_eq!(f.len(), data.len() as u64);
    assert_eq!(c.stats().dirty_bytes, 0, "nothing was dirtied");
    b.clear();
    assert_same("after the failed write", &read_all(&f), &data);
    // A whole-page write needs no read and goes through.
    b.fail_reads_in(6 * P, P, libc::EIO);
    f.write_all_at(&[1u8; PAGE], 6 * P).unwrap();
    b.clear();
    f.sync_data().unwrap();
    let mut model = Model { data };
    model.write(6 * P, &[1u8; PAGE]);
    assert_same("backing", &contents(&b), &model.data);
}

#[test]
fn a_failed_writeback_to_a_real_file_is_retried_and_the_file_ends_right() {
    // The same promises over an O_DIRECT file (FileBacking) instead of
    // memory: a full device past 64 KiB, then EIO once, then healed.
    use backing::{FileBacking, FileOptions};
    let tmp = wcommon::TempPath::new("faulty-file");
    let inner = FileBacking::open(
        &tmp.path,
        &FileOptions::new().read(true).write(true).create(true),
    )
    .unwrap();
    let b = Arc::new(FaultyBacking::new(inner));
    let c = TestCache::bytes(4 * MIB)
        .max_folio(64 * KIB)
        .quiet()
        .build();
    let f = c.open_backing(b.clone()).unwrap();
    let data = nonzero_bytes(300_001, 14);
    f.write_all_at(&data, 0).unwrap();
    b.set_space_limit(Some(64 * KIB as u64));
    assert_eq!(errno("full device", f.sync_data()), libc::ENOSPC);
    b.set_space_limit(None);
    b.fail_nth(Op::Write, 1, libc::EIO);
    assert_eq!(errno("EIO on the retry", f.sync_data()), libc::EIO);
    assert_same("cache meanwhile", &read_all(&f), &data);
    f.sync_all().unwrap();
    assert_same(
        "the file, read with std::fs",
        &wcommon::disk(&tmp.path),
        &data,
    );
}

// ---- a model with faults ----------------------------------------------------------

mod model {
    //! Random writes, reads, set_len, punches and syncs, with write and
    //! sync faults (one-shot EIO/ENOSPC, a full device) armed and healed
    //! between them. A sync that returns Ok means the backing holds the
    //! model; a sync fails only while a rule is armed, or as the first
    //! sync after healing (reporting an error met before); reads always
    //! return the model.
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum FOp {
        Write { off: u64, len: usize, seed: u64 },
        Read { off: u64, len: usize },
        SetLen(u64),
        Punch { off: u64, len: u64 },
        Sync { all: bool },
        FailWrite { nth: u64, enospc: bool },
        FailSync { enospc: bool },
        Full { limit: u64 },
        Heal,
    }

    fn fop() -> impl Strategy<Value = FOp> {
        let off = 0u64..1_500_000;
        let len = prop_oneof![1usize..=100, 1usize..=20_000, 1usize..=200_000];
        prop_oneof![
            6 => (off.clone(), len.clone(), any::<u64>())
                .prop_map(|(off, len, seed)| FOp::Write { off, len, seed }),
            3 => (off.clone(), len.clone()).prop_map(|(off, len)| FOp::Read { off, len }),
            1 => off.clone().prop_map(FOp::SetLen),
            1 => (off.clone(), len).prop_map(|(off, len)| FOp::Punch { off, len: len as u64 }),
            3 => any::<bool>().prop_map(|all| FOp::Sync { all }),
            1 => (1u64..=3, any::<bool>()).prop_map(|(nth, enospc)| FOp::FailWrite { nth, enospc }),
            1 => any::<bool>().prop_map(|enospc| FOp::FailSync { enospc }),
            1 => off.prop_map(|limit| FOp::Full { limit }),
            2 => Just(FOp::Heal),
        ]
    }

    /// Runs `op`; if it fails, which only a writeback error met under
    /// pressure (a throttled writer, reclaim) may cause and only with a
    /// rule armed, heals the backing and runs it again, which must work.
    fn or_heal<T>(
        what: &str,
        pressure: bool,
        armed: &mut bool,
        may_report: &mut bool,
        b: &Faulty,
        mut op: impl FnMut() -> io::Result<T>,
    ) -> T {
        match op() {
            Ok(v) => v,
            Err(e) => {
                assert!(
                    pressure && (*armed || *may_report),
                    "{what}: failed (pressure {pressure}, armed {armed}): {e}"
                );
                b.clear();
                *armed = false;
                *may_report = true;
                op().unwrap_or_else(|e2| {
                    panic!("{what}: failed again once healed: {e2} (was: {e})")
                })
            }
        }
    }

    /// `capacity`: `None` for room for everything (no throttling or
    /// reclaim: only syncs and the periodic flush write back, so nothing
    /// but a sync may fail); else a small cache with the default dirty
    /// thresholds, where writes, reads and punches may meet a writeback
    /// error too.
    fn run(folio: usize, capacity: Option<usize>, ops: &[FOp]) {
        let pressure = capacity.is_some();
        let c = match capacity {
            None => TestCache::bytes(16 * MIB).max_folio(folio).quiet().build(),
            Some(cap) => TestCache::bytes(cap).max_folio(folio).build(),
        };
        let (f, b) = open_faulty(&c);
        let mut model = Model::default();
        // A rule is set (it may not have fired yet).
        let mut armed = false;
        // Healed since the last sync, with rules set before: that sync may
        // still report an error met earlier.
        let mut may_report = false;
        for (step, op) in ops.iter().enumerate() {
            let what = format!("step {step} {op:?} (max folio {folio})");
            match *op {
                FOp::Write { off, len, seed } => {
                    let buf = nonzero_bytes(len, seed);
                    or_heal(&what, pressure, &mut armed, &mut may_report, &b, || {
                        f.write_all_at(&buf, off)
                    });
                    model.write(off, &buf);
                }
                FOp::Read { off, len } => {
                    let got = or_heal(&what, pressure, &mut armed, &mut may_report, &b, || {
                        read_vec(&f, off, len)
                    });
                    assert_same(&what, &got, model.read(off, len));
                }
                FOp::SetLen(len) => {
                    f.set_len(len).unwrap_or_else(|e| panic!("{what}: {e}"));
                    model.set_len(len);
                }
                FOp::Punch { off, len } => {
                    or_heal(&what, pressure, &mut armed, &mut may_report, &b, || {
                        f.punch_hole(off, len)
                    });
                    model.punch(off, len);
                }
                FOp::Sync { all } => {
                    let r = if all { f.sync_all() } else { f.sync_data() };
                    match r {
                        Ok(()) => assert_same(
                            &format!("{what}: backing after a good sync"),
                            &contents(&b),
                            &model.data,
                        ),
                        Err(e) => assert!(
                            armed || may_report,
                            "{what}: failed with no fault armed and none to report: {e}"
                        ),
                    }
                    may_report = false;
                }
                FOp::FailWrite { nth, enospc } => {
                    let e = if enospc { libc::ENOSPC } else { libc::EIO };
                    b.fail_nth(Op::Write, nth, e);
                    armed = true;
                }
                FOp::FailSync { enospc } => {
                    let e = if enospc { libc::ENOSPC } else { libc::EIO };
                    b.fail_nth(Op::Sync, 1, e);
                    armed = true;
                }
                FOp::Full { limit } => {
                    b.set_space_limit(Some(limit));
                    armed = true;
                }
                FOp::Heal => {
                    b.clear();
                    may_report |= armed;
                    armed = false;
                }
            }
            assert_eq!(f.len(), model.len(), "{what}: len()");
        }
        b.clear();
        let first = f.sync_all();
        f.sync_all()
            .unwrap_or_else(|e| panic!("the second sync after healing (first: {first:?}): {e}"));
        assert_same("backing at the end", &contents(&b), &model.data);
        assert_same("cache at the end", &read_all(&f), &model.data);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(wcommon::cases(64)))]

        #[test]
        fn syncs_with_faults_lose_no_acknowledged_data(
            folio in (0u32..=6).prop_map(|o| 4096usize << o),
            ops in prop::collection::vec(fop(), 1..40),
        ) {
            run(folio, None, &ops);
        }

        #[test]
        fn under_pressure_faults_lose_no_acknowledged_data(
            folio in (0u32..=4).prop_map(|o| 4096usize << o),
            cap in prop_oneof![Just(256 * KIB), Just(512 * KIB), Just(MIB)],
            ops in prop::collection::vec(fop(), 1..40),
        ) {
            run(folio, Some(cap), &ops);
        }
    }
}

#[test]
fn a_failed_backing_punch_never_brings_back_older_data() {
    // Old data D on the backing, newer data X written over part of it
    // (dirty, not written back), then a punch whose backing call fails:
    // the range may read as X (unchanged) or zeros (punched), never D.
    for sync_first in [false, true] {
        let old = vec![0xD0u8; 32 * PAGE];
        let b = Arc::new(FaultyBacking::new(MemBacking::with_data(old)));
        let c = TestCache::bytes(MIB).max_folio(PAGE).quiet().build();
        let f = c.open_backing(b.clone()).unwrap();
        let x = vec![0x11u8; 16 * PAGE];
        f.write_all_at(&x, 4 * P).unwrap();
        if sync_first {
            f.sync_data().unwrap();
        }
        b.fail_nth(Op::PunchHole, 1, libc::EIO);
        let r = f.punch_hole(0, 24 * P);
        let what = format!("written back first: {sync_first}; punch: {r:?}");
        let got = read_vec(&f, 4 * P, 16 * PAGE).unwrap();
        if let Some(i) = got.iter().position(|&v| v == 0xD0) {
            panic!(
                "{what}: byte {} reads the older data 0xd0",
                4 * P + i as u64
            );
        }
        assert!(got.iter().all(|&v| v == 0x11 || v == 0), "{what}");
        // And after a sync and an eviction, from the backing.
        let _ = f.sync_data();
        f.sync_data().unwrap();
        c.shrink(u64::MAX);
        let got = read_vec(&f, 4 * P, 16 * PAGE).unwrap();
        if let Some(i) = got.iter().position(|&v| v == 0xD0) {
            panic!(
                "{what}: after sync and eviction, byte {} reads the older data 0xd0",
                4 * P + i as u64
            );
        }
    }
}

#[test]
fn concurrent_syncs_on_several_handles_each_report_the_error_once() {
    // Four handles opened before the fault sync at once; the first write
    // IO fails, whoever does it. No sync can return before that IO (there
    // is dirty data), so each handle's first sync reports it and its
    // second does not.
    for _ in 0..20 {
        let c = TestCache::bytes(MIB).max_folio(16 * KIB).quiet().build();
        let (f, b) = open_faulty(&c);
        let handles: Vec<File> = (0..4).map(|_| f.reopen()).collect();
        let data = nonzero_bytes(200_000, 15);
        f.write_all_at(&data, 0).unwrap();
        b.fail_nth(Op::Write, 1, libc::EIO);
        let barrier = Arc::new(std::sync::Barrier::new(4));
        let threads: Vec<_> = handles
            .into_iter()
            .map(|h| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    let first = h.sync_data().map_err(|e| e.raw_os_error());
                    let second = h.sync_data().map_err(|e| e.raw_os_error());
                    (first, second)
                })
            })
            .collect();
        for (i, t) in threads.into_iter().enumerate() {
            let (first, second) = t.join().unwrap();
            assert_eq!(first, Err(Some(libc::EIO)), "handle {i}: the first sync");
            assert_eq!(second, Ok(()), "handle {i}: the second sync");
        }
        assert_same("backing", &contents(&b), &data);
        assert_eq!(b.stats().injected_errors, 1);
    }
}

#[test]
fn a_failed_run_in_a_large_folio_keeps_only_its_pages_dirty_and_loses_none() {
    let old = nonzero_bytes(2 * MIB, 16);
    let b = Arc::new(FaultyBacking::new(MemBacking::with_data(old.clone())));
    let c = TestCache::bytes(8 * MIB).max_folio(2 * MIB).quiet().build();
    let f = c.open_backing(b.clone()).unwrap();
    assert_eq!(read_all(&f), old);
    let mut model = Model { data: old };
    for (page, seed) in [(10u64, 17u64), (500, 18), (501, 19), (900, 20)] {
        let d = nonzero_bytes(PAGE, seed);
        f.write_all_at(&d, page * P).unwrap();
        model.write(page * P, &d);
    }
    // The run of pages 500-501 fails; 10 and 900 go through.
    b.fail_writes_in(500 * P, 2 * P, libc::EIO);
    assert_eq!(errno("one bad run", f.sync_data()), libc::EIO);
    let got = contents(&b);
    for page in [10usize, 900] {
        assert_same(
            &format!("page {page} written despite the failed run"),
            &got[page * PAGE..(page + 1) * PAGE],
            &model.data[page * PAGE..(page + 1) * PAGE],
        );
    }
    let cs = f.cachestat(0, 0).unwrap();
    assert!(cs.dirty >= 2, "pages 500-501 stay dirty: {cs:?}");
    assert_same("cache meanwhile", &read_all(&f), &model.data);
    b.clear();
    f.sync_data().unwrap();
    assert_same("backing once healed", &contents(&b), &model.data);
}

#[test]
fn a_handle_opened_after_an_error_was_reported_does_not_report_it_again() {
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).quiet().build();
    let (f, b) = open_faulty(&c);
    f.write_all_at(&nonzero_bytes(20_000, 21), 0).unwrap();
    b.fail_nth(Op::Write, 1, libc::EIO);
    assert_eq!(errno("f", f.sync_data()), libc::EIO);
    // Sampled after the report: nothing new to say.
    let late = f.reopen();
    late.sync_data()
        .expect("an error reported before this handle existed");
    f.sync_data().unwrap();
}

/// 64 scattered dirty pages of one 2 MiB folio (every 8th page): 64 runs,
/// written several at a time. Returns the cache, the file, its backing and
/// the model.
fn scattered(seed: u64) -> (Cache, File, Faulty, Model) {
    let old = nonzero_bytes(2 * MIB, seed);
    let b = Arc::new(FaultyBacking::new(MemBacking::with_data(old.clone())));
    let c = TestCache::bytes(8 * MIB).max_folio(2 * MIB).quiet().build();
    let f = c.open_backing(b.clone()).unwrap();
    assert_eq!(read_all(&f), old);
    let mut model = Model { data: old };
    for i in 0..64u64 {
        let d = nonzero_bytes(PAGE, seed + 1 + i);
        f.write_all_at(&d, i * 8 * P).unwrap();
        model.write(i * 8 * P, &d);
    }
    assert_eq!(c.stats().dirty_bytes, 64 * P);
    b.set_write_latency(Duration::from_millis(2));
    (c, f, b, model)
}

/// Which of the 64 scattered pages the backing does not hold yet.
fn missing(b: &Faulty, model: &Model) -> Vec<usize> {
    let got = contents(b);
    let page = |v: &[u8], i: usize| v[i * 8 * PAGE..(i * 8 + 1) * PAGE].to_vec();
    (0..64)
        .filter(|&i| page(&got, i) != page(&model.data, i))
        .collect()
}

#[test]
fn one_failed_write_among_many_scattered_runs_keeps_only_its_page_dirty() {
    // The 10th write fails: every other run is still written ("the runs
    // after a failed one are still tried"), only the failed page stays
    // dirty, and the retry writes that page alone.
    let (c, f, b, model) = scattered(22);
    b.fail_nth(Op::Write, 10, libc::EIO);
    assert_eq!(errno("one of 64 writes failed", f.sync_data()), libc::EIO);
    let m = missing(&b, &model);
    assert_eq!(
        m.len(),
        1,
        "pages (of 64) not on the backing after the sync: {m:?}"
    );
    // (cachestat counts the pages of dirty folios, as the kernel does;
    // the cache's dirty bytes count pages.)
    let s = c.stats();
    assert_eq!(s.dirty_bytes, P, "only the failed page stays dirty: {s:?}");
    b.reset_stats();
    f.sync_data().unwrap();
    assert_eq!(
        b.stats().bytes_written,
        P,
        "the retry writes the one page that failed"
    );
    assert_same("backing after the retry", &contents(&b), &model.data);
    assert_eq!(c.stats().dirty_bytes, 0);
}

#[test]
fn a_bad_page_among_many_scattered_runs_does_not_hold_back_the_others() {
    // A persistent bad spot under one of the 64 runs: each sync fails, but
    // the 63 others reach the backing, not only those before it.
    let (_c, f, b, model) = scattered(300);
    b.fail_writes_in(16 * 8 * P, P, libc::EIO);
    for attempt in 0..2 {
        assert_eq!(errno("a bad page", f.sync_data()), libc::EIO);
        let m = missing(&b, &model);
        assert_eq!(m, vec![16], "sync {attempt}: pages not on the backing");
    }
    b.clear();
    f.sync_data().unwrap();
    assert_same("backing once healed", &contents(&b), &model.data);
}
