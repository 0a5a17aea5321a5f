//! The async writes, syncs and `set_len` (`foliocache::future`): on tokio's
//! runtimes and minimal executors, against the blocking calls, throttled,
//! with errors, and dropped at every await point under faults.
//!
//! What must hold (`docs/async.md`):
//! - a write into cached folios under the dirty limit completes on its
//!   first poll, without a waker;
//! - the futures leave the bytes, the size and the error reports the
//!   blocking calls leave;
//! - a writer over the dirty limit awaits the file's writeback (no thread
//!   of its own), and many such writers on one thread all complete;
//! - dropped at any await point, under failing reads and writes, a future
//!   leaves the cache sound: nothing locked or under writeback once its
//!   jobs ended, nothing dirty lost (a later sync writes it).

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use backing::{FaultyBacking, MemBacking};
use foliocache::filemap::{FgpFlags, FolioFlags};
use foliocache::{Cache, File};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{check_cache, counting_waker, drive, drop_after, test_cache, Counting, P};
use crate::common::nonzero_bytes;
use test_support::cache::faulty_file;

/// Checks that `f`'s writebacks in flight end (within 10 s) and that the
/// cache is sound then (`check_cache`).
fn check_written(c: &Cache, f: &File, pages: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // A sync's or throttle's job still running holds the folios it
        // writes locked: `check_cache` waits for them. A memory job a
        // dropped write started kicks the flusher, as a blocking
        // allocation does (`docs/async.md`, "Waiting for memory"): the
        // flusher's writeback may start after that, and must end too.
        check_cache(c, f, pages);
        let busy = (0..pages).find_map(|i| {
            let folio = f.mapping().get_folio(i, FgpFlags::empty()).ok()?;
            let wb = folio.flags().contains(FolioFlags::WRITEBACK);
            wb.then(|| format!("{folio:?}"))
        });
        let Some(folio) = busy else { return };
        assert!(Instant::now() < deadline, "still under writeback: {folio}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A cache of `cache_pages` pages with a dirty limit of `dirty_pages`
/// pages, and a file of `pages` pages of nonzero bytes (`seed`) on a
/// faulty memory backing: the cache, the bytes, the file, the backing.
fn throttled(
    cache_pages: usize,
    dirty_pages: u64,
    pages: u64,
    seed: u64,
) -> (Cache, Vec<u8>, File, Arc<FaultyBacking<MemBacking>>) {
    let c = test_cache(cache_pages)
        .dirty_limit((dirty_pages * P) as usize)
        .build();
    let data = nonzero_bytes((pages * P) as usize, seed);
    let (f, b) = faulty_file(&c, &data);
    (c, data, f, b)
}

#[test]
fn a_write_into_cached_folios_completes_on_the_first_poll_without_a_waker() {
    let c = test_cache(64).build();
    let data = nonzero_bytes(8 * P as usize, 1);
    let (f, _b) = faulty_file(&c, &data);
    let mut buf = vec![0u8; data.len()];
    f.read_exact_at(&mut buf, 0).unwrap();
    let counting = Arc::new(Counting::default());
    let waker = counting_waker(&counting);
    let mut cx = Context::from_waker(&waker);
    for (off, len) in [
        (0u64, 10usize),
        (P + 100, 3 * P as usize),
        (5 * P, P as usize),
    ] {
        let new = vec![0xa5u8; len];
        let mut fut = std::pin::pin!(f.write_at_async(&new, off));
        assert!(matches!(fut.as_mut().poll(&mut cx), Poll::Ready(Ok(n)) if n == len));
    }
    assert_eq!(
        counting.clones.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "a hit registered a waker"
    );
    assert_eq!(counting.wakes(), 0);
    let mut got = vec![0u8; 10];
    f.read_exact_at(&mut got, 0).unwrap();
    assert_eq!(got, [0xa5; 10]);
}

/// The executors the tests run futures on.
#[derive(Clone, Copy, Debug)]
enum Exec {
    Pollster,
    Futures,
    TokioCurrent,
    TokioMulti,
}

impl Exec {
    const ALL: [Exec; 4] = [
        Exec::Pollster,
        Exec::Futures,
        Exec::TokioCurrent,
        Exec::TokioMulti,
    ];

    fn block_on<F: Future>(self, fut: F) -> F::Output {
        match self {
            Exec::Pollster => pollster::block_on(fut),
            Exec::Futures => futures_executor::block_on(fut),
            Exec::TokioCurrent => tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(fut),
            Exec::TokioMulti => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .build()
                .unwrap()
                .block_on(fut),
        }
    }
}

/// One call, as the test makes it on both files.
#[derive(Clone, Debug)]
enum Call {
    Write(u64, Vec<u8>),
    SetLen(u64),
    Sync,
}

fn calls(rng: &mut StdRng, pages: u64) -> Vec<Call> {
    (0..40)
        .map(|_| match rng.gen_range(0..10) {
            0 => Call::SetLen(rng.gen_range(0..pages * P)),
            1 => Call::Sync,
            _ => {
                let len = rng.gen_range(1..3 * P as usize);
                let byte = rng.gen_range(1..=255u8);
                Call::Write(rng.gen_range(0..pages * P), vec![byte; len])
            }
        })
        .collect()
}

/// Random writes, growths, cuts and syncs through the futures on each
/// executor leave the bytes and the size (in the cache and, after a sync,
/// on the backing) that the same blocking calls leave on a twin file.
#[test]
#[cfg_attr(miri, ignore = "hundreds of writes: too slow for Miri")]
fn async_writes_sizes_and_syncs_leave_what_the_blocking_calls_leave() {
    let mut rng = StdRng::seed_from_u64(50);
    for exec in Exec::ALL {
        let c = test_cache(48).build();
        let pages = 24u64;
        let data = nonzero_bytes((pages * P) as usize, 3);
        let (a, ab) = faulty_file(&c, &data);
        let (b, bb) = faulty_file(&c, &data);
        let calls = calls(&mut rng, pages);
        for call in &calls {
            match call {
                Call::Write(off, buf) => {
                    let n = exec.block_on(a.write_at_async(buf, *off)).unwrap();
                    assert_eq!(n, buf.len());
                    b.write_all_at(buf, *off).unwrap();
                }
                Call::SetLen(size) => {
                    exec.block_on(a.set_len_async(*size)).unwrap();
                    b.set_len(*size).unwrap();
                }
                Call::Sync => {
                    exec.block_on(a.sync_data_async()).unwrap();
                    b.sync_data().unwrap();
                }
            }
            assert_eq!(a.len(), b.len(), "{exec:?} {call:?}");
        }
        exec.block_on(a.sync_all_async()).unwrap();
        b.sync_all().unwrap();
        let (mut x, mut y) = (vec![0u8; a.len() as usize], vec![0u8; b.len() as usize]);
        a.read_exact_at(&mut x, 0).unwrap();
        b.read_exact_at(&mut y, 0).unwrap();
        assert!(x == y, "{exec:?}: the cached bytes differ");
        let (bx, by) = (
            ab.inner().contents().unwrap(),
            bb.inner().contents().unwrap(),
        );
        assert!(bx == by && bx == x, "{exec:?}: the backing's bytes differ");
        assert_eq!(c.stats().dirty_bytes, 0);
        check_written(&c, &a, pages * 2);
    }
}

#[test]
fn set_len_async_grows_with_zeros_and_cuts_as_set_len() {
    let c = test_cache(32).build();
    let data = nonzero_bytes(4 * P as usize, 4);
    let (f, b) = faulty_file(&c, &data);
    let mut buf = vec![0u8; 4 * P as usize];
    f.read_exact_at(&mut buf, 0).unwrap();
    pollster::block_on(f.set_len_async(P + 10)).unwrap();
    assert_eq!(f.len(), P + 10);
    pollster::block_on(f.set_len_async(3 * P)).unwrap();
    let mut got = vec![0u8; 3 * P as usize];
    f.read_exact_at(&mut got, 0).unwrap();
    assert_eq!(&got[..(P + 10) as usize], &data[..(P + 10) as usize]);
    assert!(
        got[(P + 10) as usize..].iter().all(|&x| x == 0),
        "the grown part is zeros"
    );
    assert_eq!(b.inner().contents().unwrap().len() as u64, 3 * P);
    // Bad input is refused on the first poll, as set_len refuses it.
    let e = pollster::block_on(f.set_len_async(u64::MAX)).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge);
    for off in [u64::MAX - 1, u64::MAX - P, i64::MAX as u64] {
        let e = pollster::block_on(f.write_at_async(&[1u8; 3], off)).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge, "{off}");
    }
    let path = std::env::temp_dir().join(format!("foliocache-set-len-{}", std::process::id()));
    std::fs::write(&path, &data).unwrap();
    let ro = c.open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let e = pollster::block_on(ro.set_len_async(0)).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
    let e = pollster::block_on(ro.write_at_async(b"x", 0)).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
}

/// A failed writeback is reported by the sync futures as by the blocking
/// syncs: to the sync that met it, then once to every other handle, and
/// the data stays dirty until a sync writes it.
#[test]
fn sync_futures_report_writeback_errors_as_the_blocking_syncs() {
    let c = test_cache(32).build();
    let data = nonzero_bytes(4 * P as usize, 5);
    let (f, b) = faulty_file(&c, &data);
    let g = f.reopen();
    pollster::block_on(f.write_at_async(&[9u8; 100], P)).unwrap();
    b.fail_writes_in(0, 4 * P, libc::EIO);
    let e = pollster::block_on(f.sync_data_async()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    // Reported once to this handle; the other handle's next sync gets it.
    b.clear_write_ranges();
    pollster::block_on(f.sync_data_async()).unwrap();
    b.fail_writes_in(0, 4 * P, libc::EIO);
    let e = pollster::block_on(g.sync_all_async()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    b.clear_write_ranges();
    pollster::block_on(g.sync_all_async()).unwrap();
    assert_eq!(
        &b.inner().contents().unwrap()[P as usize..][..100],
        &[9u8; 100]
    );
}

/// Writers over a small dirty limit, many tasks on one current-thread
/// runtime: each throttled writer awaits its file's writeback (run on the
/// cache's pool) and all complete, with the file's bytes right.
#[test]
#[cfg_attr(miri, ignore = "many writes: too slow for Miri")]
fn throttled_writers_await_the_writeback_and_complete_on_one_thread() {
    let pages = 128u64;
    let (c, _, f, b) = throttled(256, 16, pages, 6);
    b.set_write_latency(std::time::Duration::from_micros(200));
    let f = Arc::new(f);
    let before = c.stats().throttled;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let tasks = 16u64;
    rt.block_on(async {
        let mut hs = Vec::new();
        for t in 0..tasks {
            let f = f.clone();
            hs.push(tokio::spawn(async move {
                for k in 0..pages / tasks {
                    let page = k * tasks + t;
                    let buf = vec![(page % 250) as u8 + 1; P as usize];
                    f.write_all_at_async(&buf, page * P).await.unwrap();
                }
            }));
        }
        for h in hs {
            h.await.unwrap();
        }
        f.sync_data_async().await.unwrap();
    });
    assert!(c.stats().throttled > before, "no writer was throttled");
    let got = b.inner().contents().unwrap();
    for page in 0..pages {
        let want = (page % 250) as u8 + 1;
        assert!(
            got[(page * P) as usize..][..P as usize]
                .iter()
                .all(|&x| x == want),
            "page {page}"
        );
    }
    check_written(&c, &f, pages);
}

/// A write over the dirty limit returns `Pending` while the file's
/// writeback runs, and is woken at its end.
#[test]
fn a_throttled_write_waits_for_the_writeback_without_blocking() {
    let pages = 64u64;
    let (c, data, f, b) = throttled(256, 8, pages, 7);
    // Dirty past the limit without the throttle (a memory of the blocking
    // writers' debt): writes of whole cached pages.
    let mut all = vec![0u8; data.len()];
    f.read_exact_at(&mut all, 0).unwrap();
    b.set_write_latency(std::time::Duration::from_millis(20));
    let buf = vec![3u8; P as usize];
    let mut pendings = 0;
    for page in 0..32 {
        let (r, p) = drive(f.write_at_async(&buf, page * P));
        r.unwrap();
        pendings += p;
    }
    assert!(pendings > 0, "no write waited for the throttle's writeback");
    assert!(
        c.stats().dirty_bytes <= 8 * P + 64 * P,
        "{:?}",
        c.stats().dirty_bytes
    );
    pollster::block_on(f.sync_data_async()).unwrap();
    check_written(&c, &f, pages);
}

/// A write of `buf` at `off` (`which` 0), a sync (1) or a `set_len(size)`.
fn one_call<'a>(
    f: &'a File,
    which: u8,
    buf: &'a [u8],
    off: u64,
    size: u64,
) -> std::pin::Pin<Box<dyn Future<Output = std::io::Result<()>> + 'a>> {
    match which {
        0 => Box::pin(f.write_all_at_async(buf, off)),
        1 => Box::pin(f.sync_data_async()),
        _ => Box::pin(f.set_len_async(size)),
    }
}

/// Drops writes, syncs and `set_len`s after each of their `Pending`s,
/// with reads and writes failing at random: the cache stays sound (nothing
/// locked or under writeback once the jobs they started ended), and once
/// the faults are gone a sync writes what the cache holds, which is the
/// model's bytes after the same calls made to completion.
#[test]
#[cfg_attr(miri, ignore = "hundreds of calls under faults: too slow for Miri")]
fn calls_dropped_at_every_await_point_under_faults_leave_the_cache_sound() {
    let pages = 40u64;
    let (c, data, f, b) = throttled(24, 6, pages, 8);
    // IO slow enough that the jobs and reads are still running when the
    // futures look for their ends.
    b.set_read_latency(std::time::Duration::from_micros(300));
    b.set_write_latency(std::time::Duration::from_micros(300));
    let mut model = data.clone();
    let mut rng = StdRng::seed_from_u64(9);
    let mut awaits = 0;
    for round in 0..40 {
        // Nothing cached at the start of a round (the dirty data written
        // first: `discard` drops it). An error met earlier is reported
        // once, then the sync works.
        let _ = f.sync_data();
        f.sync_data().unwrap();
        f.discard().unwrap();
        if round % 3 != 0 {
            let at = rng.gen_range(0..pages) * P;
            b.fail_reads_in(at, P * rng.gen_range(1..4), libc::EIO);
            let at = rng.gen_range(0..pages) * P;
            b.fail_writes_in(at, P * rng.gen_range(1..8), libc::EIO);
        }
        let off = rng.gen_range(0..pages * P - 6 * P);
        let len = rng.gen_range(1..6 * P as usize);
        let buf = vec![rng.gen_range(1..=255u8); len];
        let which = rng.gen_range(0..3u8);
        let size = pages * P - rng.gen_range(0..3 * P);
        let make = |f| one_call(f, which, &buf, off, size);
        let (_, total) = drive(make(&f));
        awaits += total;
        for k in 0..=total {
            drop_after(make(&f), k);
            check_written(&c, &f, pages);
        }
        // The call made to completion with the faults gone: the model.
        b.clear_read_ranges();
        b.clear_write_ranges();
        pollster::block_on(make(&f)).unwrap();
        match which {
            0 => model[off as usize..][..len].copy_from_slice(&buf),
            2 => {
                assert_eq!(f.len(), size);
                model.truncate(size as usize);
                model.resize((pages * P) as usize, 0);
                f.set_len(pages * P).unwrap();
            }
            _ => {}
        }
        assert_eq!(f.len(), pages * P);
        let mut got = vec![0u8; model.len()];
        f.read_exact_at(&mut got, 0).unwrap();
        let bad = got.iter().zip(&model).position(|(a, b)| a != b);
        assert_eq!(
            bad,
            None,
            "round {round}: which {which} off {off} len {len} size {size} got {:?} want {:?}",
            bad.map(|i| got[i]),
            bad.map(|i| model[i])
        );
    }
    assert!(awaits >= 10, "only {awaits} await points met");
    // Errors met on the way are reported once; then the sync works.
    let _ = pollster::block_on(f.sync_all_async());
    pollster::block_on(f.sync_all_async()).unwrap();
    let mut got = vec![0u8; model.len()];
    f.read_exact_at(&mut got, 0).unwrap();
    let first = |x: &[u8]| x.iter().zip(&model).position(|(a, b)| a != b);
    assert_eq!(first(&got), None, "the cached bytes differ");
    let on = b.inner().contents().unwrap();
    assert_eq!(
        (on.len(), first(&on)),
        (model.len(), None),
        "the backing's bytes differ"
    );
    check_written(&c, &f, pages);
}

/// Many tasks writing and syncing one file, arriving over 60 ms while
/// each sync's writeback takes 30 ms: a file runs one sync job at a time,
/// and the tasks that come meanwhile join the one queued behind it, so the
/// backing sees a few syncs, not one a task, and every task's page is
/// written.
#[test]
#[cfg_attr(miri, ignore = "slow IO on purpose")]
fn syncs_of_one_file_at_once_share_its_sync_jobs() {
    // One page a folio: a task's write never waits for the writeback of
    // another task's page (a large folio under writeback stays locked).
    let c = test_cache(64).max_folio(P as usize).build();
    let tasks = 32u64;
    let data = nonzero_bytes((tasks * P) as usize, 10);
    let (f, b) = faulty_file(&c, &data);
    let mut all = vec![0u8; data.len()];
    f.read_exact_at(&mut all, 0).unwrap();
    b.set_write_latency(std::time::Duration::from_millis(30));
    let f = Arc::new(f);
    let before = b.stats().syncs;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let hs: Vec<_> = (0..tasks)
            .map(|t| {
                let f = f.clone();
                tokio::spawn(async move {
                    let wait = std::time::Duration::from_millis(t * 60 / tasks);
                    tokio::time::sleep(wait).await;
                    f.write_all_at_async(&[t as u8 + 1; P as usize], t * P)
                        .await?;
                    f.sync_data_async().await
                })
            })
            .collect();
        for h in hs {
            h.await.unwrap().unwrap();
        }
    });
    let syncs = b.stats().syncs - before;
    assert!(syncs <= 6, "{syncs} backing syncs for {tasks} tasks");
    let on = b.inner().contents().unwrap();
    for t in 0..tasks {
        assert!(on[(t * P) as usize..][..P as usize]
            .iter()
            .all(|&x| x == t as u8 + 1));
    }
}

/// Makes the file `path` holding `bytes` and opens it through `c` in append
/// mode, readable.
fn open_append(c: &Cache, path: &std::path::Path, bytes: &[u8]) -> File {
    std::fs::write(path, bytes).unwrap();
    c.open_options().append(true).read(true).open(path).unwrap()
}

/// In append mode a write goes to the end of the file, whatever offset it
/// names, in one run of bytes even when it takes several pieces (a cache
/// of 16 pages writes 2 pages a piece).
#[test]
#[cfg_attr(miri, ignore = "a file on disk")]
fn an_append_mode_write_goes_to_the_end_in_one_run() {
    let c = test_cache(16).build();
    let path = std::env::temp_dir().join(format!("foliocache-append-{}", std::process::id()));
    let f = open_append(&c, &path, b"head");
    let body = nonzero_bytes(5 * P as usize + 7, 11);
    let n = pollster::block_on(f.write_at_async(&body, 0)).unwrap();
    assert_eq!(n, body.len());
    pollster::block_on(f.write_all_at_async(b"tail", 1)).unwrap();
    pollster::block_on(f.sync_all_async()).unwrap();
    let on = std::fs::read(&path).unwrap();
    assert_eq!(on.len(), 4 + body.len() + 4);
    assert!(
        &on[..4] == b"head"
            && on[4..4 + body.len()] == body[..]
            && &on[4 + body.len()..] == b"tail"
    );

    // Appenders on four threads: each write lands whole, none inside
    // another.
    std::fs::remove_file(&path).unwrap();
    let path = path.with_extension("4");
    let f = open_append(&c, &path, b"");
    let len = 5 * P as usize + 3;
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let f = &f;
            s.spawn(move || {
                for _ in 0..4 {
                    pollster::block_on(f.write_at_async(&vec![t + 1; len], 0)).unwrap();
                }
            });
        }
    });
    pollster::block_on(f.sync_all_async()).unwrap();
    let on = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(on.len(), 16 * len);
    for run in on.chunks(len) {
        assert!(
            run.iter().all(|&x| x == run[0]),
            "an append landed inside another"
        );
    }
}

/// Polls `fut` once and drops it, then waits (2 s at most) until the
/// backing `b` saw one more sync than `before`: the dropped sync's job ran
/// to its end (the flusher's periodic writeback is 5 s away).
fn drop_after_one_poll_and_wait_for_its_sync<F: Future>(
    fut: F,
    b: &backing::FaultyBacking<backing::MemBacking>,
    before: u64,
) {
    let counting = Arc::new(Counting::default());
    let waker = counting_waker(&counting);
    let mut fut = Box::pin(fut);
    let _ = fut.as_mut().poll(&mut Context::from_waker(&waker));
    drop(fut);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while b.stats().syncs == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the dropped sync's job never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// A sync dropped after its first poll still runs to its end (its
/// writeback completes, the backing's sync is called), and an error it
/// meets is left for the handle's next sync, as `docs/async.md` says.
#[test]
#[cfg_attr(miri, ignore = "waits for the pool")]
fn a_dropped_sync_still_writes_back_and_leaves_its_error_to_the_next_sync() {
    let c = test_cache(32).build();
    let data = nonzero_bytes(8 * P as usize, 12);
    let (f, b) = faulty_file(&c, &data);
    b.set_write_latency(std::time::Duration::from_millis(5));
    f.write_all_at(&[4u8; 2 * P as usize], P).unwrap();
    drop_after_one_poll_and_wait_for_its_sync(f.sync_data_async(), &b, b.stats().syncs);
    check_written(&c, &f, 8);
    assert_eq!(c.stats().dirty_bytes, 0);
    assert!(
        b.inner().contents().unwrap()[P as usize..][..2 * P as usize]
            .iter()
            .all(|&x| x == 4)
    );

    f.write_all_at(&[5u8; P as usize], 4 * P).unwrap();
    b.fail_writes_in(0, 8 * P, libc::EIO);
    drop_after_one_poll_and_wait_for_its_sync(f.sync_all_async(), &b, b.stats().syncs);
    b.clear_write_ranges();
    // The error the dropped sync met is this handle's next sync's.
    let e = f.sync_data().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    f.sync_data().unwrap();
    assert!(
        b.inner().contents().unwrap()[4 * P as usize..][..P as usize]
            .iter()
            .all(|&x| x == 5)
    );
}

/// `write_at_flags_async` with `DONTCACHE`: each piece's writeback is
/// kicked, not awaited; a stream that outruns its writeback awaits the
/// bound on the pool (no thread of its own blocks) and holds about the
/// bound; a sync makes it durable, and the folios go.
#[test]
fn an_uncached_async_stream_kicks_its_writeback_and_stays_bounded() {
    use foliocache::WriteFlags;
    let ahead = foliocache::internals::UNCACHED_AHEAD_PAGES * P;
    let b = Arc::new(FaultyBacking::new(MemBacking::new()));
    let c = test_support::cache::TestCache::bytes(64 << 20)
        .max_folio(64 << 10)
        .quiet()
        .build();
    let f = c.open_backing(b.clone()).unwrap();
    b.set_write_latency(Duration::from_millis(20));
    let chunk = nonzero_bytes(1 << 20, 61);
    let total = 32u64 << 20;
    let mut peak = 0;
    let t = Instant::now();
    pollster::block_on(async {
        for k in 0..total / chunk.len() as u64 {
            let n = f
                .write_at_flags_async(&chunk, k * chunk.len() as u64, WriteFlags::DONTCACHE)
                .await
                .unwrap();
            assert_eq!(n, chunk.len());
            peak = peak.max(c.stats().bytes_cached);
        }
    });
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "the stream took {:?}",
        t.elapsed()
    );
    let most = 2 * ahead + 2 * chunk.len() as u64;
    assert!(peak <= most, "the cache held {peak} bytes (at most {most})");
    pollster::block_on(f.sync_data_async()).unwrap();
    assert_eq!(f.cachestat(0, 0).unwrap().cached, 0);
    let disk = b.inner().contents().unwrap();
    assert_eq!(disk.len() as u64, total);
    assert!(disk.chunks(chunk.len()).all(|x| x == &chunk[..]));
}
