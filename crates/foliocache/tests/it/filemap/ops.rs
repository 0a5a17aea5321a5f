//! The kernel-style filemap operations on `Mapping` (`filemap_get_folio`,
//! `filemap_add_folio`, `filemap_get_folios`, `filemap_remove_folio` and
//! their kind), one property each: a folio lies at an index aligned to its
//! size, the cache counts every page of every folio, any index inside a
//! folio finds that folio, and the rest stated at each test.

use std::io::ErrorKind;

use backing::MemBacking;
use foliocache::filemap::FolioFlags;
use foliocache::filemap::{AddError, FgpFlags, MappingEntry, BATCH};
use foliocache::{Cache, File};
use test_support::cache::TestCache;

const PAGE: usize = 4096;

fn file(pages: usize) -> (Cache, File, Vec<u8>) {
    file_with(pages, 2 << 20)
}

/// A file whose reads make one-page folios only.
fn file_small_folios(pages: usize) -> (Cache, File, Vec<u8>) {
    file_with(pages, PAGE)
}

fn file_with(pages: usize, max_folio: usize) -> (Cache, File, Vec<u8>) {
    let data: Vec<u8> = (0..pages * PAGE)
        .map(|i| (i / PAGE) as u8 ^ (i as u8) | 1)
        .collect();
    let cache = TestCache::bytes(8 << 20)
        .max_folio(max_folio)
        // Each read makes exactly the folio it needs: the layouts below
        // depend on it.
        .no_readahead()
        .build();
    let f = cache
        .open_backing(MemBacking::with_data(data.clone()))
        .unwrap();
    (cache, f, data)
}

#[test]
fn get_folio_without_creat_on_a_hole_is_not_found() {
    let (_c, f, _) = file(4);
    let e = f.mapping().get_folio(1, FgpFlags::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(f.mapping().get_entry(1).is_none());
}

#[test]
fn get_folio_creat_returns_a_locked_folio_that_read_folio_fills() {
    let (_c, f, data) = file(4);
    let m = f.mapping();
    let folio = m.lock_folio(2, FgpFlags::CREAT | FgpFlags::LOCK).unwrap();
    assert!(folio.is_locked());
    assert!(!folio.test(FolioFlags::UPTODATE));
    assert_eq!(folio.index(), 2);
    let folio = m.read_folio(folio).unwrap();
    assert!(folio.test(FolioFlags::UPTODATE));
    assert!(!folio.is_locked());
    drop(folio);
    let mut buf = vec![0u8; PAGE];
    f.read_at(&mut buf, 2 * PAGE as u64).unwrap();
    assert_eq!(buf, data[2 * PAGE..3 * PAGE]);
}

#[test]
fn a_created_folio_uses_the_requested_order_when_the_index_is_aligned() {
    let (_c, f, _) = file(16);
    let m = f.mapping();
    let folio = m
        .lock_folio(8, FgpFlags::CREAT | FgpFlags::LOCK.order(3))
        .unwrap();
    assert_eq!((folio.index(), folio.order()), (8, 3));
    let folio = m.read_folio(folio).unwrap();
    drop(folio);
    // Any index inside returns the same folio.
    let inside = m.get_folio(13, FgpFlags::default()).unwrap();
    assert_eq!((inside.index(), inside.order()), (8, 3));
    assert!(inside.contains(13));
}

#[test]
fn nowait_lock_on_a_locked_folio_would_block() {
    let (_c, f, _) = file(4);
    let m = f.mapping();
    let held = m.lock_folio(0, FgpFlags::CREAT | FgpFlags::LOCK).unwrap();
    let e = m
        .lock_folio(0, FgpFlags::LOCK | FgpFlags::NOWAIT)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::WouldBlock);
    m.read_folio(held).unwrap();
    let again = m.lock_folio(0, FgpFlags::LOCK | FgpFlags::NOWAIT).unwrap();
    assert!(again.is_locked());
    again.unlock();
}

#[test]
fn add_folio_over_a_cached_folio_fails_and_changes_nothing() {
    let (_c, f, _) = file(4);
    let m = f.mapping();
    let first = m.lock_folio(1, FgpFlags::CREAT | FgpFlags::LOCK).unwrap();
    let first = m.read_folio(first).unwrap();
    let other = m.new_folio(0).unwrap();
    assert!(matches!(m.add_folio(&other, 1), Err(AddError::Exists)));
    assert_eq!(
        other.mapping(),
        0,
        "a refused folio stays out of the mapping"
    );
    match m.get_entry(1) {
        Some(MappingEntry::Folio(g)) => assert!(std::ptr::eq(g.folio(), first.folio())),
        other => panic!("expected the first folio, got {other:?}"),
    }
    other.unlock();
}

#[test]
fn add_folio_rejects_misaligned_folios() {
    // (An unlocked folio cannot be passed at all: `add_folio` takes a
    // `LockedFolio`, which the compile-fail test of `foliocache::filemap`
    // shows.)
    let (_c, f, _) = file(8);
    let m = f.mapping();
    let big = m.new_folio(2).unwrap();
    assert!(matches!(m.add_folio(&big, 2), Err(AddError::Invalid(_))));
    big.unlock();
}

/// An index failure is the source of the `AddError` that carries it; the
/// other kinds have none.
#[test]
fn add_error_source_is_the_index_error() {
    use std::error::Error as _;
    let e = AddError::Index(xarray::Error::AllocFailed);
    let src = e.source().expect("an index error has a source");
    assert!(matches!(
        src.downcast_ref::<xarray::Error>(),
        Some(xarray::Error::AllocFailed)
    ));
    assert!(AddError::Exists.source().is_none());
    assert!(AddError::Invalid("misaligned").source().is_none());
}

/// A folio of one cache offered to another cache's mapping is refused
/// with an error (its descriptor is not in that cache's table: added, its
/// lookups and its reclaim would have nothing to point at).
#[test]
fn add_folio_refuses_another_caches_folio() {
    let (_c1, f1, _) = file(8);
    let (_c2, f2, _) = file(8);
    let foreign = f1.mapping().new_folio(0).unwrap();
    let m = f2.mapping();
    assert!(matches!(
        m.add_folio(&foreign, 0),
        Err(AddError::Invalid(_))
    ));
    assert!(matches!(
        m.add_folio_range(std::slice::from_ref(&foreign), 0),
        Err(AddError::Invalid(_))
    ));
    assert_eq!(foreign.mapping(), 0);
    assert!(m.get_entry(0).is_none(), "nothing went into the index");
    // The folio is still its own cache's to use.
    f1.mapping().add_folio(&foreign, 0).unwrap();
    f1.mapping().read_folio(foreign).unwrap();
}

#[test]
fn add_folio_range_inserts_a_prefix_up_to_the_first_conflict() {
    let (_c, f, data) = file(16);
    let m = f.mapping();
    // Page 5 is cached already.
    let five = m.lock_folio(5, FgpFlags::CREAT | FgpFlags::LOCK).unwrap();
    let five = m.read_folio(five).unwrap();
    drop(five);
    let folios: Vec<_> = (0..8).map(|_| m.new_folio(0).unwrap()).collect();
    let n = m.add_folio_range(&folios, 2).unwrap();
    assert_eq!(n, 3, "pages 2, 3, 4 go in; 5 conflicts");
    for (i, folio) in folios.into_iter().enumerate() {
        if i < n {
            assert_eq!((folio.index(), folio.mapping() != 0), (2 + i as u64, true));
            m.read_folio(folio).unwrap();
        } else {
            assert_eq!(
                folio.mapping(),
                0,
                "folios after the conflict stay the caller's"
            );
            folio.unlock();
        }
    }
    let mut buf = vec![0u8; 4 * PAGE];
    f.read_at(&mut buf, 2 * PAGE as u64).unwrap();
    assert_eq!(buf, data[2 * PAGE..6 * PAGE]);
}

/// A range of mixed orders into an empty range goes in whole, each folio
/// at its own index (`add_range`'s empty-range path: a store each, the
/// cursor set to each folio's order), and reads back the file's bytes.
/// (Ranges over a conflict: the test above; over shadows:
/// `workingset::shadows`.)
#[test]
fn add_folio_range_of_mixed_orders_fills_an_empty_range() {
    let (_c, f, data) = file(16);
    let m = f.mapping();
    let orders = [2u32, 0, 0, 1, 2];
    let folios: Vec<_> = orders.iter().map(|&o| m.new_folio(o).unwrap()).collect();
    assert_eq!(m.add_folio_range(&folios, 4).unwrap(), 5);
    let want = [4u64, 8, 9, 10, 12];
    for (folio, &at) in folios.into_iter().zip(&want) {
        assert_eq!(folio.index(), at);
        m.read_folio(folio).unwrap();
    }
    for (&at, &o) in want.iter().zip(&orders) {
        for page in at..at + (1 << o) {
            match m.get_entry(page) {
                Some(MappingEntry::Folio(g)) => assert_eq!(g.index(), at, "page {page}"),
                other => panic!("page {page}: {other:?}"),
            }
        }
    }
    let mut buf = vec![0u8; 12 * PAGE];
    f.read_at(&mut buf, 4 * PAGE as u64).unwrap();
    assert_eq!(buf, data[4 * PAGE..16 * PAGE]);
}

#[test]
fn get_read_batch_returns_one_contiguous_run_and_stops_at_a_hole() {
    let (_c, f, _) = file_small_folios(16);
    let m = f.mapping();
    let mut buf = vec![0u8; 3 * PAGE];
    f.read_at(&mut buf, 0).unwrap(); // pages 0..3
    f.read_at(&mut buf[..PAGE], 6 * PAGE as u64).unwrap(); // page 6
    let mut batch = Vec::new();
    m.get_read_batch(0, 15, &mut batch);
    let got: Vec<u64> = batch.iter().map(|f| f.index()).collect();
    assert_eq!(got, [0, 1, 2], "stops at the hole at 3");
    batch.clear();
    m.get_read_batch(1, 1, &mut batch);
    assert_eq!(batch.len(), 1, "never past max");
}

#[test]
fn get_read_batch_stops_after_a_folio_that_is_not_uptodate() {
    let (_c, f, _) = file_small_folios(8);
    let m = f.mapping();
    let mut buf = vec![0u8; 2 * PAGE];
    f.read_at(&mut buf, 0).unwrap(); // 0, 1
    let locked = m.lock_folio(2, FgpFlags::CREAT | FgpFlags::LOCK).unwrap();
    f.read_at(&mut buf[..PAGE], 3 * PAGE as u64).unwrap(); // 3
    let mut batch = Vec::new();
    m.get_read_batch(0, 7, &mut batch);
    let got: Vec<u64> = batch.iter().map(|f| f.index()).collect();
    assert_eq!(got, [0, 1, 2], "the not-uptodate folio is last");
    assert!(!batch[2].test(FolioFlags::UPTODATE));
    drop(batch);
    m.read_folio(locked).unwrap();
}

#[test]
fn get_read_batch_holds_at_most_a_batch() {
    let (_c, f, _) = file(64);
    let m = f.mapping();
    let mut buf = vec![0u8; PAGE];
    for p in 0..64u64 {
        // One page at a time, so each is its own folio.
        f.read_at(&mut buf, p * PAGE as u64).unwrap();
    }
    let mut batch = Vec::new();
    m.get_read_batch(0, 63, &mut batch);
    assert_eq!(batch.len(), BATCH);
}

#[test]
fn get_folios_contig_advances_start_past_the_last_folio() {
    let (_c, f, _) = file(16);
    let m = f.mapping();
    let mut buf = vec![0u8; 4 * PAGE];
    f.read_at(&mut buf, 4 * PAGE as u64).unwrap(); // one order-2 folio at 4
    let mut start = 5;
    let mut batch = Vec::new();
    m.get_folios_contig(&mut start, 15, &mut batch);
    assert_eq!(batch.len(), 1);
    assert_eq!(
        batch[0].index(),
        4,
        "the first folio may begin before start"
    );
    assert_eq!(start, 8);
    batch.clear();
    let mut hole = 9;
    m.get_folios_contig(&mut hole, 15, &mut batch);
    assert!(batch.is_empty());
    assert_eq!(hole, 9, "unchanged when nothing was returned");
}

#[test]
fn every_cached_folio_is_aligned_and_counted_once() {
    let (c, f, _) = file(64);
    let mut buf = vec![0u8; 200_000];
    for off in [0u64, 12_345, 100_000, 150_000] {
        f.read_at(&mut buf, off).unwrap();
    }
    let m = f.mapping();
    let mut pages = 0;
    let mut start = 0;
    loop {
        let mut batch = Vec::new();
        let before = start;
        m.get_folios_contig(&mut start, 63, &mut batch);
        if batch.is_empty() {
            start = before + 1;
            if start > 63 {
                break;
            }
            continue;
        }
        for folio in &batch {
            assert_eq!(
                folio.index() % folio.nr_pages(),
                0,
                "a folio's index is aligned to its size"
            );
            pages += folio.nr_pages();
        }
    }
    assert_eq!(
        pages * PAGE as u64,
        c.stats().bytes_cached,
        "the cache counts every page of every folio"
    );
}
