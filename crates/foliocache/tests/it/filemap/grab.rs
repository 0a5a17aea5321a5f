//! `Mapping::grab_folios` (the kernel's `__filemap_get_folio` with
//! `FGP_CREAT | FGP_LOCK`, over a range): find or create, and
//! lock, every folio of a range at once, large folios where alignment
//! allows, present folios included, shadows never activating.

use std::sync::Arc;

use backing::MemBacking;
use foliocache::filemap::FolioFlags;
use foliocache::filemap::{LockedFolio, Mapping};
use foliocache::{Cache, File};
use test_support::cache::TestCache;

const PAGE: usize = 4096;

/// A cache of `pages` pages, folios up to `max_folio` bytes, no readahead:
/// the folios are the ones the grabs make.
fn cache(pages: usize, max_folio: usize) -> Cache {
    TestCache::pages(pages)
        .max_folio(max_folio)
        .no_readahead()
        .build()
}

fn file(c: &Cache, pages: usize) -> File {
    let data: Vec<u8> = (0..pages * PAGE)
        .map(|i| (i / PAGE) as u8 ^ i as u8)
        .collect();
    c.open_backing(MemBacking::with_data(data)).unwrap()
}

/// Checks that the folios `got` start at `index` and have `pages[i]` pages
/// each, in order.
#[track_caller]
fn assert_spans(got: &[LockedFolio<'_>], index: u64, pages: &[u64]) {
    let spans: Vec<(u64, u64)> = got.iter().map(|f| (f.index(), f.nr_pages())).collect();
    let want: Vec<(u64, u64)> = pages
        .iter()
        .scan(index, |at, &n| {
            let span = (*at, n);
            *at += n;
            Some(span)
        })
        .collect();
    assert_eq!(spans, want);
}

/// Checks `got` covers `index..index + pages` contiguously, every folio
/// locked, this mapping's and aligned; fills the new ones from the backing
/// and unlocks the rest. Returns (created, present).
fn settle(m: &Mapping, got: Vec<LockedFolio<'_>>, index: u64, pages: u64) -> (usize, usize) {
    let first = got.first().expect("some folio");
    assert!(first.index() <= index);
    let mut at = first.index();
    let (mut created, mut present) = (0, 0);
    for f in got {
        assert_eq!(f.index(), at, "not contiguous");
        assert_eq!(f.index() % f.nr_pages(), 0, "misaligned");
        assert!(f.is_locked());
        at += f.nr_pages();
        if f.test(FolioFlags::UPTODATE) {
            present += 1;
            f.unlock();
        } else {
            created += 1;
            m.read_folio(f).unwrap();
        }
    }
    assert!(at >= index + pages, "covered up to {at}");
    (created, present)
}

/// Grabs `count` pages at `index` of a 2048-page file with nothing cached,
/// folios up to 2 MiB, checks that they come as `pages` (`assert_spans`)
/// and settles them: the cache, the file, and what `settle` counted.
fn grab_uncached(index: u64, count: u64, pages: &[u64]) -> (Cache, File, (usize, usize)) {
    let c = cache(4096, 2 << 20);
    let f = file(&c, 2048);
    let m = f.mapping();
    let mut out = Vec::new();
    assert_eq!(m.grab_folios(index, count, &mut out).unwrap(), count);
    assert_spans(&out, index, pages);
    let counts = settle(m, out, index, count);
    (c, f, counts)
}

#[test]
fn an_empty_aligned_range_gets_the_largest_folios() {
    let (c, _f, counts) = grab_uncached(0, 1024, &[512, 512]);
    assert_eq!(counts, (2, 0));
    assert_eq!(c.stats().folios, 2);
}

#[test]
fn an_unaligned_range_is_cut_into_aligned_folios() {
    let (_c, f, _) = grab_uncached(3, 100, &[1, 4, 8, 16, 32, 32, 4, 2, 1]);
    // The bytes read back through the cache are the file's.
    let mut buf = vec![0u8; 100 * PAGE];
    f.read_exact_at(&mut buf, 3 * PAGE as u64).unwrap();
    assert!(buf
        .iter()
        .enumerate()
        .all(|(i, &b)| b == ((i / PAGE + 3) as u8 ^ i as u8)));
}

#[test]
fn present_folios_are_locked_and_the_gaps_created() {
    let c = cache(4096, 64 << 10);
    let f = file(&c, 256);
    let m = f.mapping();
    let mut buf = vec![0u8; 64 << 10];
    f.read_exact_at(&mut buf, 32 * PAGE as u64).unwrap(); // pages 32..48
    let mut out = Vec::new();
    assert_eq!(m.grab_folios(20, 60, &mut out).unwrap(), 60);
    let (created, present) = settle(m, out, 20, 60);
    assert_eq!(present, 1, "the 64 KiB folio at 32");
    assert!(created >= 4);
    // A second grab finds everything present.
    let mut out = Vec::new();
    m.grab_folios(20, 60, &mut out).unwrap();
    assert_eq!(settle(m, out, 20, 60).0, 0);
}

#[test]
fn a_grab_over_shadows_skips_the_refault_test() {
    let c = cache(64, PAGE);
    let f = file(&c, 256);
    let mut buf = vec![0u8; PAGE];
    for p in 0..256u64 {
        f.read_exact_at(&mut buf, p * PAGE as u64).unwrap();
    }
    let m = f.mapping();
    let before = c.stats();
    let mut out = Vec::new();
    assert_eq!(m.grab_folios(180, 8, &mut out).unwrap(), 8);
    for g in &out {
        assert!(!g.test(FolioFlags::ACTIVE), "{g:?}");
    }
    settle(m, out, 180, 8);
    let after = c.stats();
    assert_eq!(
        after.refaults, before.refaults,
        "a write's add is no refault"
    );
    assert_eq!(
        f.cachestat(180 * PAGE as u64, 8 * PAGE as u64)
            .unwrap()
            .cached,
        8
    );
    assert_eq!(after.activations, before.activations);
}

#[test]
fn bad_ranges_and_a_full_cache_give_errors() {
    let c = cache(16, PAGE);
    let f = file(&c, 64);
    let m = f.mapping();
    let mut out = Vec::new();
    let e = m.grab_folios(u64::MAX - 2, 10, &mut out).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(m.grab_folios(0, 0, &mut out).unwrap(), 0);
    // Every folio of the cache held locked: a grab of more gets what fits.
    assert_eq!(m.grab_folios(0, 16, &mut out).unwrap(), 16);
    let mut more = Vec::new();
    let e = m.grab_folios(32, 4, &mut more).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::OutOfMemory);
    for g in out {
        m.read_folio(g).unwrap();
    }
}

/// Four threads grab random overlapping ranges of one file, 200 times
/// each, `single(t)` choosing thread `t`'s path, and settle what they got;
/// every `dontneed`-th round drops the range again. Then every page must
/// read right and the accounting agree.
fn grab_from_threads(single: fn(u64) -> bool, seed: u64, dontneed: Option<u64>) {
    let c = cache(1024, 64 << 10);
    let f = Arc::new(file(&c, 512));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let f = f.clone();
            std::thread::spawn(move || {
                let m = f.mapping();
                let mut x = t + seed;
                for _ in 0..200 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let index = x % 480;
                    let count = 1 + (x >> 20) % 32;
                    let mut out = Vec::new();
                    let got = if single(t) {
                        m.grab_folios_single(index, count, &mut out)
                    } else {
                        m.grab_folios(index, count, &mut out)
                    };
                    assert!(got.unwrap() >= count);
                    settle(m, out, index, count);
                    if dontneed.is_some_and(|d| x.is_multiple_of(d)) {
                        f.advise(
                            index * PAGE as u64,
                            count * PAGE as u64,
                            foliocache::Advice::DontNeed,
                        )
                        .unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut buf = vec![0u8; 512 * PAGE];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf
        .iter()
        .enumerate()
        .all(|(i, &b)| b == ((i / PAGE) as u8 ^ i as u8)));
    let s = c.stats();
    assert_eq!(s.folios, f.mapping().nr_folios());
    assert_eq!(s.free_bytes + s.bytes_cached, s.capacity_bytes);
}

#[test]
fn threads_grabbing_overlapping_ranges_each_get_one_folio_per_index() {
    grab_from_threads(|_| false, 1, None);
}

#[test]
fn the_one_at_a_time_path_makes_the_same_folios() {
    let c = cache(4096, 2 << 20);
    let f = file(&c, 2048);
    let m = f.mapping();
    let mut buf = vec![0u8; 16 * PAGE];
    f.read_exact_at(&mut buf, 48 * PAGE as u64).unwrap(); // pages 48..64 present
    let mut out = Vec::new();
    assert_eq!(m.grab_folios_single(3, 100, &mut out).unwrap(), 100);
    // As the batched path, but 32..64 in two around the present folio.
    assert_spans(&out, 3, &[1, 4, 8, 16, 16, 16, 32, 4, 2, 1]);
    assert_eq!(settle(m, out, 3, 100), (9, 1));
}

#[test]
fn threads_mixing_both_paths_agree() {
    grab_from_threads(|t| t % 2 == 1, 11, Some(7));
}
