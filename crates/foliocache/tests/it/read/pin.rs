//! `File::pin`: bytes borrowed from the cache, in place when the range lies
//! in one cached folio, copied otherwise; a snapshot that no write,
//! truncation, hole punch or reclaim changes while it lives; defined past
//! end of file and with the `Cache` handle gone.

// The tests drive and count their own threads with std atomics and locks;
// the shim rule (clippy.toml) is for the crate's protocols.
#![allow(clippy::disallowed_types)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use foliocache::{Cache, File};

use crate::common::write::{disk, open_rw, P, PAGE};
use test_support::cache::{mem_file, TestCache};
use test_support::TempPath;

fn data(n: usize) -> Vec<u8> {
    (0..n as u32).map(|i| (i * 7 + 3) as u8).collect()
}

/// A cache of `pages` pages, folios up to `max_folio` bytes, no
/// readahead: a pinned range's folios are the ones the test reads.
fn cache(pages: usize, max_folio: usize) -> Cache {
    TestCache::pages(pages)
        .max_folio(max_folio)
        .no_readahead()
        .build()
}

/// Reads the file's first `len` bytes in 64 KiB pieces: with no readahead
/// and folios up to 64 KiB, each piece is one folio.
fn warm(f: &File, len: usize) {
    let mut buf = vec![0u8; 64 << 10];
    for off in (0..len).step_by(64 << 10) {
        f.read_exact_at(&mut buf, off as u64).unwrap();
    }
}

#[test]
fn a_cached_range_is_borrowed_and_counted_as_a_hit() {
    let c = cache(64, 64 << 10);
    let d = data(256 << 10);
    let f = mem_file(&c, &d);
    // A miss: read in, then pinned in place (the read counted it).
    let (hits, misses) = (c.stats().hits, c.stats().misses);
    let p = f.pin(5000, 3000).unwrap();
    assert!(p.is_borrowed());
    assert_eq!(&p[..], &d[5000..8000]);
    assert_eq!(c.stats().hits, hits);
    assert!(c.stats().misses > misses);
    // A hit: in place, one hit.
    let q = f.pin(4096, 100).unwrap();
    assert!(q.is_borrowed());
    assert_eq!(&q[..], &d[4096..4196]);
    assert_eq!(c.stats().hits, hits + 1);
    assert_eq!(p.as_ref(), &d[5000..8000], "two pins of one folio");
    drop((p, q));
    // Pins gone, the folio is an ordinary one: reclaim takes it.
    assert!(c.shrink(u64::MAX) > 0);
    assert_eq!(c.stats().folios, 0);
}

#[test]
fn a_range_across_folios_is_a_copy_with_the_same_bytes() {
    let c = cache(64, 4096);
    let d = data(64 << 10);
    let f = mem_file(&c, &d);
    let p = f.pin(4000, 10_000).unwrap();
    assert!(!p.is_borrowed(), "4 KiB folios: the range spans four");
    assert_eq!(&p[..], &d[4000..14_000]);
    // Inside one folio it is borrowed.
    let q = f.pin(8192, 4096).unwrap();
    assert!(q.is_borrowed());
    assert_eq!(&q[..], &d[8192..12_288]);
}

#[test]
fn past_end_of_file_a_pin_is_cut_or_empty() {
    let c = cache(64, 64 << 10);
    let d = data(10_000);
    let f = mem_file(&c, &d);
    let p = f.pin(9000, 5000).unwrap();
    assert_eq!(&p[..], &d[9000..], "cut at end of file");
    assert!(f.pin(10_000, 10).unwrap().is_empty());
    assert!(f.pin(u64::MAX, usize::MAX).unwrap().is_empty());
    assert!(f.pin(0, 0).unwrap().is_empty());
    // The largest length from offset 0: the whole file.
    assert_eq!(&f.pin(0, usize::MAX).unwrap()[..], &d[..]);
}

#[test]
fn a_write_while_pinned_goes_to_a_copy_and_the_pin_keeps_its_bytes() {
    let c = cache(64, 64 << 10);
    let t = TempPath::with_data("pin-write", &data(128 << 10));
    let f = open_rw(&c, &t.path);
    let before = data(128 << 10);
    warm(&f, 128 << 10);
    let p = f.pin(10_000, 20_000).unwrap();
    assert!(p.is_borrowed());
    // Written from the pinning thread itself: no wait, no deadlock.
    f.write_at(&[0xAB; 5000], 12_000).unwrap();
    assert_eq!(c.stats().pin_copies, 1);
    assert_eq!(&p[..], &before[10_000..30_000], "the pin is a snapshot");
    let mut now = vec![0u8; 20_000];
    f.read_exact_at(&mut now, 10_000).unwrap();
    let mut want = before.clone();
    want[12_000..17_000].fill(0xAB);
    assert_eq!(&now[..], &want[10_000..30_000], "reads see the write");
    // A new pin sees the write too; the copy is not pinned by the old pin,
    // so a second write needs no copy.
    let q = f.pin(12_000, 5000).unwrap();
    assert!(q.iter().all(|&b| b == 0xAB));
    drop(q);
    f.write_at(&[0xCD; 10], 40_000).unwrap();
    assert_eq!(c.stats().pin_copies, 1);
    want[40_000..40_010].fill(0xCD);
    // The copy carries the dirty data: written back on sync, as written.
    f.sync_data().unwrap();
    assert!(disk(&t.path) == want);
    assert_eq!(&p[..], &before[10_000..30_000]);
    drop(p);
    assert!(
        c.shrink(u64::MAX) > 0,
        "the old folio is freed with its pin"
    );
}

#[test]
fn a_dirty_pinned_folio_written_again_keeps_its_dirty_pages() {
    let c = cache(64, 64 << 10);
    let t = TempPath::with_data("pin-dirty", &data(64 << 10));
    let f = open_rw(&c, &t.path);
    let mut want = data(64 << 10);
    warm(&f, 64 << 10);
    f.write_at(&[1; 100], 0).unwrap(); // dirty page 0, not yet written back
    want[..100].fill(1);
    let p = f.pin(0, 4096).unwrap();
    assert!(p.is_borrowed());
    f.write_at(&[2; 100], 50_000).unwrap(); // copies the folio, dirties page 12
    want[50_000..50_100].fill(2);
    assert_eq!(c.stats().pin_copies, 1);
    assert_eq!(
        c.stats().dirty_bytes,
        2 * P,
        "pages 0 and 12, moved to the copy"
    );
    f.sync_data().unwrap();
    assert!(disk(&t.path) == want, "both writes reached the file");
    assert_eq!(&p[..100], &[1; 100]);
}

#[test]
fn truncation_and_a_hole_leave_a_pin_as_it_was() {
    let c = cache(64, 64 << 10);
    let d = data(128 << 10);
    let t = TempPath::with_data("pin-truncate", &d);
    let f = open_rw(&c, &t.path);
    warm(&f, 128 << 10);
    let whole = f.pin(64 << 10, 64 << 10).unwrap(); // the second folio, whole
    let part = f.pin(1000, 30_000).unwrap(); // the first, cut below
    assert!(whole.is_borrowed() && part.is_borrowed());
    // Cut in the middle of the first folio: it is copied, then zeroed past
    // the end; the second goes from the file with its pin holding it.
    f.set_len(20_000).unwrap();
    assert_eq!(&part[..], &d[1000..31_000]);
    assert_eq!(&whole[..], &d[64 << 10..]);
    // Grown again: the cut part reads as zeros, whatever the pins hold.
    f.set_len(128 << 10).unwrap();
    let mut now = vec![0xFFu8; 128 << 10];
    f.read_exact_at(&mut now, 0).unwrap();
    assert_eq!(&now[..20_000], &d[..20_000]);
    assert!(now[20_000..].iter().all(|&b| b == 0));
    // A hole punched through a pinned folio.
    let q = f.pin(0, 16_384).unwrap();
    f.punch_hole(4096, 8192).unwrap();
    assert_eq!(&q[..], &d[..16_384]);
    f.read_exact_at(&mut now[..16_384], 0).unwrap();
    assert_eq!(&now[..4096], &d[..4096]);
    assert!(now[4096..12_288].iter().all(|&b| b == 0));
    assert_eq!(&now[12_288..16_384], &d[12_288..16_384]);
}

#[test]
fn reclaim_skips_a_pinned_folio_and_the_cache_handle_may_go() {
    let c = cache(64, 64 << 10);
    let d = data(256 << 10);
    let f = mem_file(&c, &d);
    let p = f.pin(70_000, 1000).unwrap();
    f.pin(0, 200 << 10).unwrap(); // more folios, unpinned
    c.shrink(u64::MAX);
    assert_eq!(c.stats().folios, 1, "only the pinned folio stays");
    // The `Cache` handle goes; the file (which the pin borrows) keeps the
    // cache alive, and the pin its bytes.
    drop(c);
    assert_eq!(&p[..], &d[70_000..71_000]);
    assert_eq!(&f.pin(70_500, 10).unwrap()[..], &d[70_500..70_510]);
}

/// An owned pin (`pin_cached_owned`) is a pin in place that outlives its
/// file and the `Cache` handle: a write over its range goes to a copy,
/// reclaim skips its folio, and its bytes stay as they were until it goes.
#[test]
fn an_owned_pin_keeps_its_bytes_through_a_write_reclaim_and_the_close() {
    let c = cache(64, 64 << 10);
    let before = data(128 << 10);
    let t = TempPath::with_data("pin-owned", &before);
    let f = open_rw(&c, &t.path);
    assert!(f.pin_cached_owned(0, 100).is_none(), "nothing cached yet");
    warm(&f, 128 << 10);
    let (hits, read) = (c.stats().hits, c.stats().read_bytes);
    let p = f
        .pin_cached_owned(70_000, 1000)
        .expect("cached in one folio");
    assert_eq!(c.stats().hits, hits + 1, "a hit");
    assert_eq!(c.stats().read_bytes, read + 1000, "its bytes read");
    assert_eq!(&p[..], &before[70_000..71_000]);
    assert!(
        f.pin_cached_owned(65_000, 2000).is_none(),
        "across two folios"
    );
    assert!(f.pin_cached_owned(130_000, 2000).is_none(), "past the end");
    // A write over the range: to a copy; reads see it, the pin does not.
    f.write_at(&[0xEE; 3000], 69_000).unwrap();
    assert_eq!(c.stats().pin_copies, 1);
    let mut now = vec![0u8; 1000];
    f.read_exact_at(&mut now, 70_000).unwrap();
    assert!(now.iter().all(|&b| b == 0xEE), "reads see the write");
    assert_eq!(&p[..], &before[70_000..71_000], "the pin is a snapshot");
    // Reclaim takes every folio but the pinned one (out of the file's
    // index, now the copy's): the write is saved first.
    f.sync_data().unwrap();
    c.shrink(u64::MAX);
    assert_eq!(c.stats().folios, 0, "the pinned folio left the file");
    f.read_exact_at(&mut now, 70_000).unwrap();
    assert!(now.iter().all(|&b| b == 0xEE), "read again from the file");
    // The file and the cache handle go: the pin keeps the cache's memory.
    drop((f, c));
    assert_eq!(&p[..], &before[70_000..71_000]);
    let q = std::thread::spawn(move || p.to_vec()).join().unwrap();
    assert_eq!(&q[..], &before[70_000..71_000], "sent to another thread");
}

/// Owned pins hold at most a quarter of the cache at a time, each folio
/// counted whole; past that the cache lends no more (`None`, and no hit
/// counted) while a borrowed pin still works, and reclaim and misses go
/// on around the pinned folios.
#[test]
fn owned_pins_hold_at_most_a_quarter_of_the_cache() {
    // 64 pages in folios of 4 pages: a quarter is 4 folios.
    let c = cache(64, 16 << 10);
    let d = data(512 << 10);
    let f = mem_file(&c, &d);
    let folio = 16 << 10;
    let mut held = Vec::new();
    for i in 0..16u64 {
        // The whole folio read: one folio of 4 pages (no readahead).
        f.read_exact_at(&mut [0u8; 16 << 10], i * folio as u64)
            .unwrap();
        let at = i * folio as u64 + 100;
        let hits = c.stats().hits;
        match f.pin_cached_owned(at, 10) {
            Some(p) => {
                assert_eq!(&p[..], &d[at as usize..at as usize + 10]);
                held.push((at, p));
            }
            None => {
                assert_eq!(c.stats().hits, hits, "a refusal counts no hit");
                assert!(f.pin_cached(at, 10).is_some(), "a borrowed pin still");
                break;
            }
        }
    }
    assert_eq!(held.len(), 4, "a quarter of 64 pages, in folios of 4");
    // Reading the whole file twice through the rest of the cache: every
    // byte right, the pinned folios kept, their bytes unchanged.
    for _ in 0..2 {
        let mut all = vec![0u8; d.len()];
        f.read_exact_at(&mut all, 0).unwrap();
        assert!(all == d);
    }
    c.shrink(u64::MAX);
    assert_eq!(c.stats().folios, 4, "reclaim skips the owned pins' folios");
    for (at, p) in &held {
        assert_eq!(&p[..], &d[*at as usize..*at as usize + 10]);
    }
    // One goes: the cache lends again.
    held.pop();
    f.read_exact_at(&mut [0u8; 16 << 10], 256 << 10).unwrap();
    assert!(f.pin_cached_owned((256 << 10) + 5, 10).is_some());
}

#[test]
fn a_write_with_every_folio_pinned_fails_and_changes_nothing() {
    // Four one-page folios, all pinned: a write has nowhere to copy to.
    let c = cache(4, 4096);
    let d = data(4 * PAGE);
    let f = mem_file(&c, &d);
    let pins: Vec<_> = (0..4).map(|i| f.pin(i * P, PAGE).unwrap()).collect();
    assert!(pins.iter().all(|p| p.is_borrowed()));
    let e = f.write_at(&[9; 10], 100).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::OutOfMemory, "{e}");
    assert_eq!(&pins[0][..], &d[..PAGE]);
    let mut now = vec![0u8; 4 * PAGE];
    f.read_exact_at(&mut now, 0).unwrap();
    assert!(now == d, "nothing changed");
    drop(pins);
    f.write_at(&[9; 10], 100).unwrap();
    f.read_exact_at(&mut now, 0).unwrap();
    assert_eq!(&now[100..110], &[9; 10]);
}

/// A pin that goes while a write waits for room to copy its folio: the
/// write goes on (in place) instead of failing. A mount's read reply pins
/// its folio until the reply is written, and the reader, woken by the
/// reply, may write the same page before that pin goes: SQLite's write of
/// a WAL frame header failed with `ENOMEM` through a full mount so.
#[test]
fn a_write_waits_for_a_pin_to_go_when_there_is_no_room_to_copy() {
    let c = cache(4, 4096);
    let d = data(4 * PAGE);
    let f = mem_file(&c, &d);
    for round in 0..20u8 {
        let mut pins: Vec<_> = (0..4).map(|i| f.pin(i * P, PAGE).unwrap()).collect();
        assert!(pins.iter().all(|p| p.is_borrowed()));
        let writing = AtomicBool::new(false);
        std::thread::scope(|s| {
            let w = s.spawn(|| {
                writing.store(true, Ordering::SeqCst);
                f.write_at(&[round; 10], 100)
            });
            while !writing.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            // (The write meets the pin, most rounds, and waits for it.)
            std::thread::sleep(std::time::Duration::from_millis(5));
            drop(pins.remove(0));
            w.join().unwrap().expect("the write waits for the pin");
        });
        let mut now = vec![0u8; 4 * PAGE];
        f.read_exact_at(&mut now, 0).unwrap();
        assert_eq!(&now[100..110], &[round; 10]);
        assert_eq!(&now[110..], &d[110..], "round {round}");
        assert_eq!(&pins[0][..], &d[PAGE..2 * PAGE], "a pin keeps its bytes");
    }
}

#[test]
fn a_truncation_with_no_memory_drops_a_clean_pinned_folio_and_waits_for_a_dirty_one() {
    let c = cache(2, 4096);
    let d = data(2 * PAGE);
    let t = TempPath::with_data("pin-cut-oom", &d);
    let f = open_rw(&c, &t.path);
    let p0 = f.pin(0, PAGE).unwrap();
    let p1 = f.pin(P, PAGE).unwrap();
    // Clean, pinned, no free folio: cut at 6000 drops the second folio
    // from the file (read again from the cut backing), the pin keeps it.
    f.set_len(6000).unwrap();
    assert_eq!(&p1[..], &d[PAGE..]);
    // (The pins hold both pages: the read of the dropped one needs one.)
    drop((p0, p1));
    let mut now = vec![0u8; 6000];
    f.read_exact_at(&mut now, 0).unwrap();
    assert_eq!(&now[..], &d[..6000]);
    // Dirty and pinned, with both pages pinned: the cut waits for the pins.
    f.write_at(&[5; 10], 0).unwrap();
    let p0 = f.pin(0, PAGE).unwrap();
    let p1 = f.pin(P, 1000).unwrap();
    assert!(p0.is_borrowed() && p1.is_borrowed());
    let cut = AtomicBool::new(false);
    std::thread::scope(|s| {
        let t = s.spawn(|| {
            f.set_len(100).unwrap();
            cut.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!cut.load(Ordering::SeqCst), "the cut waits for the pins");
        assert_eq!(&p0[..10], &[5; 10], "its bytes as pinned");
        assert_eq!(&p0[100..200], &d[100..200], "not zeroed under the pin");
        drop(p0);
        t.join().unwrap();
    });
    assert_eq!(c.stats().pin_copies, 0, "no memory to copy to");
    drop(p1);
    assert_eq!(f.len(), 100);
    let mut now = vec![0u8; 100];
    f.read_exact_at(&mut now, 0).unwrap();
    assert_eq!(&now[..10], &[5; 10]);
    assert_eq!(&now[10..], &d[10..100]);
}

#[test]
fn memory_files_pin_too() {
    let c = cache(64, 64 << 10);
    let f = c.memfile("pins", 100_000).unwrap();
    f.write_at(&[7; 5000], 1000).unwrap();
    let p = f.pin(0, 8192).unwrap();
    assert!(p.is_borrowed());
    assert_eq!(&p[..1000], &[0; 1000]);
    assert_eq!(&p[1000..6000], &[7; 5000]);
    f.write_at(&[8; 10], 1000).unwrap();
    assert_eq!(&p[1000..1010], &[7; 10]);
    let mut now = [0u8; 10];
    f.read_exact_at(&mut now, 1000).unwrap();
    assert_eq!(now, [8; 10]);
}

/// Real threads: writers fill whole pages with one byte each (a page's
/// value is `file tag * 64 + round`), pinners check every pinned page is
/// of their file, unchanged until the pin goes, and, pinned in place, one
/// value.
#[test]
fn pins_racing_writes_and_reclaim_see_whole_snapshots_of_their_own_file() {
    const PAGES: u64 = 32;
    let c = cache(24, 16 << 10);
    let files: Vec<File> = (0..2u8)
        .map(|tag| mem_file(&c, &vec![tag * 64; PAGES as usize * PAGE]))
        .collect();
    let done = AtomicU64::new(0);
    let borrowed = AtomicU64::new(0);
    std::thread::scope(|s| {
        for (tag, f) in files.iter().enumerate() {
            let done = &done;
            s.spawn(move || {
                let mut x = 0x9E37_79B9u64 + tag as u64;
                let mut round = 0u8;
                while done.load(Ordering::Relaxed) < 2 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    round = (round + 1) % 64;
                    let page = x % PAGES;
                    let v = tag as u8 * 64 + round;
                    // (Out of memory while every folio is pinned: retried.)
                    let _ = f.write_at(&[v; PAGE], page * P);
                }
            });
        }
        for t in 0..2u64 {
            let (files, borrowed, done) = (&files, &borrowed, &done);
            s.spawn(move || {
                // (The writers stop once both pinners are done, or one
                // failed: counted when this goes, panicking or not.)
                struct Done<'a>(&'a AtomicU64);
                impl Drop for Done<'_> {
                    fn drop(&mut self) {
                        self.0.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let _done = Done(done);
                let mut x = 0x2545_F491u64 + t;
                for _ in 0..5_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let tag = (x >> 40) as usize % 2;
                    let page = x % PAGES;
                    let p = match files[tag].pin(page * P, PAGE) {
                        Ok(p) => p,
                        Err(e) => {
                            assert_eq!(e.kind(), std::io::ErrorKind::OutOfMemory, "{e}");
                            continue;
                        }
                    };
                    assert_eq!(p.len(), PAGE);
                    let first = p.to_vec();
                    assert!(
                        first.iter().all(|&b| b / 64 == tag as u8),
                        "another file's bytes"
                    );
                    // In place: one write's bytes, whole. (A copy is a
                    // read's: a racing write may show in part.)
                    if p.is_borrowed() {
                        let v = first[0];
                        assert!(first.iter().all(|&b| b == v), "a torn page pinned in place");
                        borrowed.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::yield_now();
                    assert!(p[..] == first[..], "a pinned page changed");
                }
            });
        }
    });
    assert!(
        borrowed.load(Ordering::Relaxed) > 0,
        "some pins were in place"
    );
}
