//! The async reads and writes when memory is short
//! (`foliocache::future`, `docs/async.md` "Waiting for memory"): a cache
//! whose every folio is dirty, written back slowly, and reads and writes
//! of other data that need new folios.
//!
//! What must hold:
//! - a read or write that finds no folio without waiting for reclaim
//!   returns `Pending` while the cache's memory job waits for writeback to
//!   make clean folios (where the blocking calls would wait in their
//!   allocation on the polling thread), and completes with the file's
//!   bytes once woken;
//! - many such tasks on one thread all complete;
//! - dropped at any of its `Pending`s under that pressure, a future leaves
//!   the cache sound and the bytes right.

use std::sync::Arc;
use std::time::Duration;

use foliocache::{Cache, File};
use test_support::cache::faulty_file;

use super::{check_cache, drive, drop_after, test_cache, P};
use crate::common::nonzero_bytes;

/// The cache's pages: all of them dirty in [`full_of_dirt`].
const PAGES: u64 = 64;

/// A cache of [`PAGES`] pages whose dirty limit and background threshold
/// let every page be dirty; a file `dirt` filling it, and a file `other`
/// of 16 pages, not cached. Returns them and `dirt`'s backing.
fn cache_and_files() -> (
    Cache,
    File,
    File,
    Arc<backing::FaultyBacking<backing::MemBacking>>,
) {
    let all = (PAGES * P) as usize;
    let c = test_cache(PAGES as usize)
        .dirty_limit(2 * all)
        .dirty_background(2 * all)
        .build();
    let (dirt, b) = faulty_file(&c, &nonzero_bytes(all, 11));
    let (other, _) = faulty_file(&c, &nonzero_bytes(16 * P as usize, 12));
    (c, dirt, other, b)
}

/// Writes every page of `dirt` without syncing, so that every folio of the
/// cache is dirty, then slows its writeback (`latency` a write): a new
/// folio can be had only once the flusher wrote some back.
fn full_of_dirt(dirt: &File, b: &backing::FaultyBacking<backing::MemBacking>, latency: Duration) {
    b.set_write_latency(Duration::ZERO);
    let buf = vec![0x5au8; (PAGES * P) as usize];
    dirt.write_all_at(&buf, 0).unwrap();
    b.set_write_latency(latency);
}

/// Checks the cache (`check_cache`), then writes both files back at full
/// speed.
fn settle(c: &Cache, dirt: &File, other: &File, b: &backing::FaultyBacking<backing::MemBacking>) {
    check_cache(c, other, 16);
    b.set_write_latency(Duration::ZERO);
    other.sync_data().unwrap();
    dirt.sync_data().unwrap();
}

#[test]
#[cfg_attr(miri, ignore = "slow writeback on purpose")]
fn a_read_short_of_memory_awaits_the_reclaim_instead_of_blocking() {
    let (c, dirt, other, b) = cache_and_files();
    let want = nonzero_bytes(16 * P as usize, 12);
    full_of_dirt(&dirt, &b, Duration::from_millis(20));
    assert_eq!(
        c.stats().dirty_bytes,
        PAGES * P,
        "the cache is not all dirty"
    );
    let mut buf = vec![0u8; 100];
    let (r, pendings) = drive(other.read_at_async(&mut buf, 3 * P + 7));
    assert_eq!(r.unwrap(), 100);
    assert_eq!(&buf[..], &want[(3 * P + 7) as usize..][..100]);
    // The blocking read's allocation would have waited on the polling
    // thread for the flusher: the future returned `Pending` instead.
    assert!(pendings > 0, "the read never returned Pending");
    check_cache(&c, &other, 16);
    check_cache(&c, &dirt, PAGES);
}

#[test]
#[cfg_attr(miri, ignore = "slow writeback on purpose")]
fn a_write_short_of_memory_awaits_the_reclaim_instead_of_blocking() {
    let (c, dirt, other, b) = cache_and_files();
    full_of_dirt(&dirt, &b, Duration::from_millis(20));
    assert_eq!(
        c.stats().dirty_bytes,
        PAGES * P,
        "the cache is not all dirty"
    );
    // Whole pages: no partial page to read first.
    let new = vec![0xc3u8; 2 * P as usize];
    let (r, pendings) = drive(other.write_at_async(&new, 4 * P));
    assert_eq!(r.unwrap(), new.len());
    assert!(pendings > 0, "the write never returned Pending");
    let mut got = vec![0u8; new.len()];
    other.read_exact_at(&mut got, 4 * P).unwrap();
    assert_eq!(got, new);
    settle(&c, &dirt, &other, &b);
}

/// Tasks reading and writing on one current-thread runtime while every
/// folio is dirty, so that they wait for the cache's memory job together
/// (joining it, or the next one): all complete, with the right bytes. (A
/// liveness check: that the waits are `Pending`s, not the thread blocked,
/// is the two tests above.)
#[test]
#[cfg_attr(miri, ignore = "slow writeback on purpose")]
fn tasks_short_of_memory_on_one_thread_all_complete() {
    let (c, dirt, other, b) = cache_and_files();
    let want = nonzero_bytes(16 * P as usize, 12);
    full_of_dirt(&dirt, &b, Duration::from_millis(5));
    let other = Arc::new(other);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut hs = Vec::new();
        for t in 0..16u64 {
            let f = other.clone();
            hs.push(tokio::spawn(async move {
                if t % 2 == 0 {
                    let mut buf = vec![0u8; P as usize];
                    f.read_exact_at_async(&mut buf, t * P).await.unwrap();
                    buf
                } else {
                    let buf = vec![t as u8; P as usize];
                    f.write_all_at_async(&buf, t * P).await.unwrap();
                    buf
                }
            }));
        }
        for (t, h) in hs.into_iter().enumerate() {
            let got = h.await.unwrap();
            if t % 2 == 0 {
                assert_eq!(&got[..], &want[t * P as usize..][..P as usize], "task {t}");
            }
        }
    });
    for t in (1..16u64).step_by(2) {
        let mut got = vec![0u8; P as usize];
        other.read_exact_at(&mut got, t * P).unwrap();
        assert!(got.iter().all(|&x| x == t as u8), "page {t}");
    }
    settle(&c, &dirt, &other, &b);
}

/// Reads and writes dropped after each of their `Pending`s while every
/// folio is dirty: the memory job they started ends on its own, nothing
/// stays locked or waited on, and the bytes are the file's.
#[test]
#[cfg_attr(miri, ignore = "slow writeback on purpose")]
fn futures_short_of_memory_dropped_at_every_pending_leave_the_cache_sound() {
    let (c, dirt, other, b) = cache_and_files();
    let mut model = nonzero_bytes(16 * P as usize, 12);
    let mut awaits = 0;
    for round in 0..6u64 {
        let at = (round * 2 + 1) * P;
        let new = vec![round as u8 + 1; P as usize + 100];
        let write = || other.write_all_at_async(&new, at);
        let mut buf = vec![0u8; 2 * P as usize];
        for which in 0..2 {
            other.sync_data().unwrap();
            other.discard().unwrap();
            full_of_dirt(&dirt, &b, Duration::from_millis(3));
            let total = if which == 0 {
                drive(other.read_at_async(&mut buf, at)).1
            } else {
                drive(write()).1
            };
            awaits += total;
            for k in 1..=total {
                other.sync_data().unwrap();
                other.discard().unwrap();
                full_of_dirt(&dirt, &b, Duration::from_millis(3));
                if which == 0 {
                    drop_after(other.read_at_async(&mut buf, at), k);
                } else {
                    drop_after(write(), k);
                }
                check_cache(&c, &other, 16);
                check_cache(&c, &dirt, PAGES);
            }
        }
        model[at as usize..][..new.len()].copy_from_slice(&new);
        b.set_write_latency(Duration::ZERO);
        let mut got = vec![0u8; model.len()];
        other.read_exact_at(&mut got, 0).unwrap();
        assert!(got == model, "round {round}: the bytes differ");
    }
    assert!(awaits >= 6, "only {awaits} await points met");
    c.check_lru().unwrap();
}
