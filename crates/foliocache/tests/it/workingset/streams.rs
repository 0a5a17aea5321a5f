//! The streamed list (`lru.rs`): the folios a sequential stream's
//! readahead windows bring in go, once read, before a hot set that the
//! inactive list alone would let the stream flush; read again, they stay
//! streamed (a refault activates them, as any other).

use backing::{Backing, MemBacking};
use foliocache::filemap::{FolioFlags, MappingEntry};
use foliocache::{Advice, Cache, File};
use test_support::cache::TestCache;

const PAGE: u64 = 4096;
/// The cache, in pages.
const C: u64 = 1024;
/// The stream's reads.
const BS: u64 = 64 << 10;

fn sparse(cache: &Cache, pages: u64) -> File {
    let b = MemBacking::new();
    b.set_len(pages * PAGE).unwrap();
    cache.open_backing(b).unwrap()
}

/// A hot file of C/5, read whole first (random-advised: a page a read),
/// then one random page of it per 64 KiB read of a stream over 5 C, so
/// that the stream reads about 3.2 C between two reads of a hot page:
/// the hot reader's hit ratio along the stream (a read is a hit when
/// `cachestat` found its page cached just before it).
fn hot_beside_a_stream(cache: &Cache) -> f64 {
    let hot = sparse(cache, C / 5);
    hot.advise(0, 0, Advice::Random).unwrap();
    let stream = sparse(cache, 5 * C);
    let mut page = vec![0u8; PAGE as usize];
    for p in 0..C / 5 {
        hot.read_at(&mut page, p * PAGE).unwrap();
    }
    let mut buf = vec![0u8; BS as usize];
    let (mut reads, mut hits, mut x) = (0u64, 0u64, 1u64);
    for i in 0..5 * C * PAGE / BS {
        stream.read_at(&mut buf, i * BS).unwrap();
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let p = (x >> 33) % (C / 5);
        hits += u64::from(hot.cachestat(p * PAGE, PAGE).unwrap().cached == 1);
        hot.read_at(&mut page, p * PAGE).unwrap();
        reads += 1;
    }
    cache.check_lru().unwrap();
    hits as f64 / reads as f64
}

#[test]
fn a_hot_set_stays_beside_a_stream_that_sweeps_the_cache_between_its_reads() {
    let cache = TestCache::pages(C as usize).build();
    let ratio = hot_beside_a_stream(&cache);
    assert!(ratio > 0.95, "the hot reader hit {ratio}");
    // The stream's folios went, and their shadows say so.
    assert!(cache.stats().evictions > 0);
}

/// The flags of the folio at `index` of `f`, if one is cached.
fn flags_at(f: &File, index: u64) -> Option<FolioFlags> {
    match f.mapping().get_entry(index) {
        Some(MappingEntry::Folio(r)) => Some(r.flags()),
        _ => None,
    }
}

/// A stream's windows are streamed from its first one on: a scan from the
/// file's start, and a stream that missed close to its last window (its
/// large folio evicted before it was through) read into windows that
/// went on the inactive list, ahead of the hot set's place in the queue:
/// four scans' worth of them took the hot set.
#[test]
fn a_streams_first_window_and_its_windows_after_a_miss_are_streamed() {
    let cache = TestCache::pages(C as usize).build();
    let f = sparse(&cache, C / 2);
    let mut buf = vec![0u8; BS as usize];
    f.read_at(&mut buf, 0).unwrap();
    let first = flags_at(&f, 0).expect("cached");
    assert!(first.contains(FolioFlags::STREAMED), "{first:?}");
    // On to page 64; then page 64 onwards dropped (its windows evicted,
    // as far as the stream can tell) and a page read elsewhere (as reads
    // inside its large folios, which take no batch path, leave the last
    // read's end behind): its next read misses where nothing says the
    // stream goes on but its last window, which starts at the miss.
    for i in 1..4 {
        f.read_at(&mut buf, i * BS).unwrap();
    }
    let last = f.readahead_window();
    assert_eq!(last.start, 64, "{last:?}");
    // (Its window's IO ended: a folio still locked for its read stays.)
    cache.wait_io_idle();
    f.advise(64 * PAGE, 0, Advice::DontNeed).unwrap();
    let mut page = vec![0u8; PAGE as usize];
    f.read_at(&mut page, 500 * PAGE).unwrap();
    f.read_at(&mut buf, 4 * BS).unwrap();
    let w = f.readahead_window();
    assert_eq!(w.start, 64, "a look-back window from the miss: {w:?}");
    let again = flags_at(&f, 64).expect("cached");
    assert!(again.contains(FolioFlags::STREAMED), "{again:?}");
    cache.check_lru().unwrap();
}

/// A random reader's miss next to cached pages makes a look-back window
/// (the kernel's `page_cache_sync_ra`) with a marker on its last page; a
/// random read that later hits the marker starts an asynchronous window.
/// Neither is a stream's: their folios go on the inactive list, where
/// the hot set they belong to is (on the streamed list they went first,
/// and a second read never activated them).
#[test]
fn a_random_readers_look_back_window_and_its_marker_are_not_streamed() {
    let cache = TestCache::pages(C as usize).build();
    let f = sparse(&cache, C / 2);
    let mut page = vec![0u8; PAGE as usize];
    // Pages 100..132 cached by one read (no window: nothing before it).
    f.read_at(&mut vec![0u8; 32 * PAGE as usize], 100 * PAGE)
        .unwrap();
    // A read elsewhere, then a miss at 132 after the cached run: a
    // window from 132 of 32 pages (33 asked, the kernel's 32 at most),
    // its marker on page 163.
    f.read_at(&mut page, 300 * PAGE).unwrap();
    f.read_at(&mut page, 132 * PAGE).unwrap();
    let w = f.readahead_window();
    assert_eq!((w.start, w.size), (132, 32), "{w:?}");
    f.read_at(&mut page, 163 * PAGE).unwrap();
    for index in [132, 163, 164] {
        let fl = flags_at(&f, index).unwrap_or_else(|| panic!("page {index} not cached"));
        assert!(!fl.contains(FolioFlags::STREAMED), "page {index}: {fl:?}");
    }
    cache.check_lru().unwrap();
}

/// A stream whose first read misses just past cached pages starts with a
/// look-back window, as a random miss does, not a stream's; once a read
/// that goes on from its thread's last one reaches that window's marker,
/// the windows after it are a stream's.
#[test]
fn a_stream_that_starts_beside_cached_pages_is_streamed_from_its_first_marker() {
    let cache = TestCache::pages(C as usize).build();
    let f = sparse(&cache, C / 2);
    // Pages 100..132 cached by one read (no window: nothing before it).
    f.read_at(&mut vec![0u8; 32 * PAGE as usize], 100 * PAGE)
        .unwrap();
    let scan = f.reopen();
    let mut page = vec![0u8; PAGE as usize];
    // The scan's first read, at 132: a look-back window from 132 of 32
    // pages (33 asked, the kernel's 32 at most), its marker on page 163.
    scan.read_at(&mut page, 132 * PAGE).unwrap();
    let w = scan.readahead_window();
    assert_eq!((w.start, w.size), (132, 32), "{w:?}");
    let first = flags_at(&f, 140).expect("cached");
    assert!(!first.contains(FolioFlags::STREAMED), "page 140: {first:?}");
    // On, page by page, through the marker.
    for index in 133..=163 {
        scan.read_at(&mut page, index * PAGE).unwrap();
    }
    let w = scan.readahead_window();
    assert_eq!(w.start, 164, "the marker's window: {w:?}");
    assert!(w.size > 32, "a stream's window, past the kernel's: {w:?}");
    let next = flags_at(&f, 164).expect("cached");
    assert!(next.contains(FolioFlags::STREAMED), "page 164: {next:?}");
    cache.check_lru().unwrap();
}

#[test]
fn a_streamed_folio_read_again_stays_streamed() {
    let cache = TestCache::pages(C as usize).build();
    let f = sparse(&cache, C / 2);
    let mut buf = vec![0u8; BS as usize];
    let flags = |index: u64| flags_at(&f, index);
    for i in 0..C / 2 * PAGE / BS {
        f.read_at(&mut buf, i * BS).unwrap();
    }
    // The last page came in with an asynchronous window: streamed.
    let last = flags(C / 2 - 1).expect("cached");
    assert!(last.contains(FolioFlags::STREAMED), "{last:?}");
    assert!(!last.contains(FolioFlags::ACTIVE), "{last:?}");
    for i in 0..C / 2 * PAGE / BS {
        f.read_at(&mut buf, i * BS).unwrap();
    }
    // A second pass (or a stream's reads through its own large folio)
    // does not activate it: it would take the hot set's place.
    let last = flags(C / 2 - 1).expect("cached");
    assert!(
        last.contains(FolioFlags::STREAMED) && !last.contains(FolioFlags::ACTIVE),
        "{last:?}"
    );
    cache.check_lru().unwrap();
}

#[test]
fn a_streamed_page_that_refaults_within_its_distance_comes_back_active() {
    // A hot file read twice fills the active list (C/4); a stream of 2 C
    // then sweeps the rest of the cache, its pages going from the
    // streamed list's tail. One of its pages evicted last refaults within
    // the active list's size and comes back active (`workingset_refault`);
    // one evicted some C before comes back inactive.
    let cache = TestCache::pages(C as usize).build();
    let hot = sparse(&cache, C / 4);
    hot.advise(0, 0, Advice::Random).unwrap();
    let mut page = vec![0u8; PAGE as usize];
    for _ in 0..2 {
        for p in 0..C / 4 {
            hot.read_at(&mut page, p * PAGE).unwrap();
        }
    }
    let stream = sparse(&cache, 2 * C);
    let mut buf = vec![0u8; BS as usize];
    for i in 0..2 * C * PAGE / BS {
        stream.read_at(&mut buf, i * BS).unwrap();
    }
    let stat = |p: u64| stream.cachestat(p * PAGE, PAGE).unwrap();
    // The last page evicted that would come back active, and the first
    // that would not.
    let near = (0..2 * C)
        .rev()
        .find(|&p| stat(p).recently_evicted == 1)
        .expect("a stream page evicted within the active list's size");
    let far = (0..near)
        .find(|&p| stat(p).evicted == 1 && stat(p).recently_evicted == 0)
        .expect("a stream page evicted past the active list's size");
    let flags = |index: u64| match stream.mapping().get_entry(index) {
        Some(MappingEntry::Folio(r)) => r.flags(),
        other => panic!("page {index} not cached after its read: {other:?}"),
    };
    // Read again by another stream, from 64 pages before `near` on: its
    // second read's asynchronous window brings `near` in as a streamed
    // folio, which the refault takes off the streamed list. (The pages
    // before it refault within their distances too.)
    let again = stream.reopen();
    let activations = cache.stats().activations;
    let from = near.saturating_sub(64) * PAGE;
    let mut at = from;
    while at <= near * PAGE {
        at += again.read_at(&mut buf, at).unwrap() as u64;
    }
    let f = flags(near);
    assert!(
        f.contains(FolioFlags::ACTIVE) && !f.contains(FolioFlags::STREAMED),
        "page {near}, refaulted within its distance: {f:?}"
    );
    assert!(cache.stats().activations > activations);
    // One page, by a reader that reads no more (no window).
    let one = stream.reopen();
    one.advise(0, 0, Advice::Random).unwrap();
    one.read_at(&mut page, far * PAGE).unwrap();
    let f = flags(far);
    assert!(
        !f.contains(FolioFlags::ACTIVE),
        "page {far}, refaulted past its distance: {f:?}"
    );
    cache.check_lru().unwrap();
}

/// Reads `f` in order from 0 up to page `to` with 64 KiB reads; the
/// largest readahead window it had.
fn stream_to(f: &File, to: u64) -> u64 {
    let mut buf = vec![0u8; BS as usize];
    let mut most = 0;
    for i in 0..to * PAGE / BS {
        f.read_at(&mut buf, i * BS).unwrap();
        most = most.max(f.readahead_window().size);
    }
    most
}

/// Streams share a cap on what they hold read ahead and not yet read (a
/// quarter of the cache, `readahead.rs`'s `UnreadCap`): with four streams
/// part way through their files, a fifth stream's windows shrink; with the
/// same four read to their ends and their handles kept open, they hold
/// none of it, and the fifth's windows are whole.
#[test]
fn a_stream_read_to_its_end_gives_its_share_of_the_unread_cap_back() {
    // 32 MiB, windows up to 2 MiB: the cap is 2,048 pages, each file's
    // windows up to 1,024.
    let cache = TestCache::bytes(32 << 20)
        .max_folio(2 << 20)
        .readahead(foliocache::ReadaheadConfig::new(512, 512))
        .build();
    let pages = 2048;
    // The largest window of a stream over the first half of a new file.
    let fifth = || stream_to(&sparse(&cache, pages), pages / 2);
    let streams = |to: u64| -> Vec<File> {
        (0..4)
            .map(|_| {
                let f = sparse(&cache, pages);
                stream_to(&f, to);
                f
            })
            .collect()
    };
    let alone = fifth();
    assert_eq!(alone, 512, "a stream alone grows its windows to the most");
    let halfway = streams(pages / 2);
    let beside = fifth();
    assert!(
        beside < alone,
        "four streams part way through hold the cap: {beside} pages"
    );
    drop(halfway);
    let done = streams(pages);
    assert_eq!(
        fifth(),
        alone,
        "four streams read to their ends, their handles open, hold none"
    );
    drop(done);
    cache.check_lru().unwrap();
}
