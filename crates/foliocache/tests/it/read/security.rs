//! Stale data: no byte of one file may reach a reader of another.
//!
//! The rule (`docs/design.md`): a folio taken from the arena is never
//! visible to a reader until its contents are either read from backing or
//! zeroed, so no byte of another file may leak. The tests fill a small cache from a file A whose
//! bytes all have the high bit set, then read files B whose bytes never do
//! (and a 1-byte and an empty file), so that B's folios are built in A's
//! evicted memory: any byte >= 0x80 in a read of B is a leak. The caller's
//! buffers are pre-filled with a sentinel no file contains, so a byte
//! written past what a read returned (the zero tail of the last page, or
//! anything else) is seen too.

use std::sync::Arc;

use backing::{FaultyBacking, MemBacking};
use foliocache::{Cache, CacheStats, File, Populate};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use test_support::cache::TestCache;
use test_support::TempPath;

const PAGE: usize = 4096;
const P: u64 = PAGE as u64;

/// No file of these tests contains this byte: A's bytes are 0x80..=0xFF,
/// B's are 0x01..=0x7E.
const SENTINEL: u8 = 0x7F;

/// File A's bytes: random, all with the high bit set.
fn a_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.gen_range(0x80..=0xFFu8)).collect()
}

/// File B's bytes: random in 0x01..=0x7E (never zero, never the sentinel,
/// never a byte of A).
fn b_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.gen_range(0x01..=0x7Eu8)).collect()
}

/// Reads all of A in pieces of mixed sizes (so its folios have mixed
/// orders) until the arena holds nothing but A.
fn fill_with_a(c: &Cache, a: &File, a_data: &[u8]) {
    let mut rng = StdRng::seed_from_u64(7);
    let mut off = 0usize;
    let mut buf = vec![0u8; 64 * PAGE];
    while off < a_data.len() {
        let n = rng.gen_range(1..=buf.len()).min(a_data.len() - off);
        a.read_exact_at(&mut buf[..n], off as u64).unwrap();
        assert!(buf[..n] == a_data[off..off + n], "A's own bytes at {off}");
        off += n;
    }
    // Reclaim may have freed more than it needed: one-page misses take what
    // is left, so that every arena page holds A when B is read.
    let pages = a_data.len() / PAGE;
    let mut pg = 0;
    for _ in 0..100_000 {
        if c.stats().free_bytes == 0 {
            break;
        }
        a.read_exact_at(&mut buf[..PAGE], (pg * PAGE) as u64)
            .unwrap();
        assert!(buf[..PAGE] == a_data[pg * PAGE..(pg + 1) * PAGE]);
        pg = (pg + 7) % pages;
    }
    let s = c.stats();
    assert_eq!(s.free_bytes, 0, "A must occupy the whole arena: {s:?}");
    assert!(s.evictions > 0, "A must be larger than the cache: {s:?}");
}

/// Reads `len` bytes of `f` at `off` into a sentinel-filled buffer and
/// checks: the count is what the file has there; those bytes are the
/// file's (so none of A's); the rest of the buffer was not touched.
fn check_read(f: &File, data: &[u8], off: u64, len: usize, what: &str) {
    let mut buf = vec![SENTINEL; len];
    let n = f
        .read_at(&mut buf, off)
        .unwrap_or_else(|e| panic!("{what}: read_at({off}, {len}): {e}"));
    let want_n = if off >= data.len() as u64 {
        0
    } else {
        (data.len() - off as usize).min(len)
    };
    assert_eq!(
        n,
        want_n,
        "{what}: count of read_at({off}, {len}) of a {}-byte file",
        data.len()
    );
    if let Some(i) = buf[..n].iter().position(|&x| x >= 0x80) {
        panic!(
            "{what}: read_at({off}, {len}) returned byte {:#04x} at file offset {}: a byte of \
             file A leaked into file B",
            buf[i],
            off + i as u64
        );
    }
    if let Some(i) = buf[..n]
        .iter()
        .zip(data.get(off as usize..).unwrap_or(&[]))
        .position(|(g, w)| g != w)
    {
        panic!(
            "{what}: read_at({off}, {len}) returned {:#04x} at file offset {}, the file has {:#04x}",
            buf[i],
            off + i as u64,
            data[off as usize + i]
        );
    }
    if let Some(i) = buf[n..].iter().position(|&x| x != SENTINEL) {
        panic!(
            "{what}: read_at({off}, {len}) returned {n} but wrote {:#04x} at buffer offset {} \
             (file offset {}): bytes past EOF reached the caller",
            buf[n + i],
            n + i,
            off + (n + i) as u64
        );
    }
}

/// The read patterns of a small file B: all of it at once and past it, page
/// by page, around EOF, and past EOF.
fn check_all_patterns(f: &File, data: &[u8], what: &str) {
    let len = data.len() as u64;
    check_read(f, data, 0, data.len() + 3 * PAGE + 5, what);
    for pg in 0..len.div_ceil(P) {
        check_read(f, data, pg * P, PAGE, what);
        check_read(f, data, pg * P + 1, PAGE, what);
    }
    for back in [1u64, 2, 100, P - 1, P, P + 1] {
        if back <= len {
            check_read(f, data, len - back, 2 * PAGE, what);
            check_read(f, data, len - back, back as usize, what);
        }
    }
    for past in [
        len,
        len + 1,
        len + P,
        len.next_multiple_of(P),
        u64::MAX - 1,
        u64::MAX,
    ] {
        check_read(f, data, past, PAGE, what);
    }
    check_read(f, data, len.saturating_sub(1), 1, what);
    // read_exact_at across EOF fails and fills nothing past EOF.
    if len > 0 {
        let mut buf = vec![SENTINEL; 10];
        assert!(f.read_exact_at(&mut buf, len - 1).is_err(), "{what}");
    }
}

fn check_consistent(c: &Cache) -> CacheStats {
    let s = c.stats();
    assert_eq!(s.free_bytes + s.bytes_cached, s.capacity_bytes, "{s:?}");
    s
}

#[test]
fn a_short_file_read_into_evicted_memory_of_another_file_sees_only_its_own_bytes() {
    for (max_folio, populate) in [
        (PAGE, Populate::Lazy),
        (4 * PAGE, Populate::Eager),
        (2 << 20, Populate::Lazy),
    ] {
        let capacity = 16 * PAGE;
        let c = TestCache::bytes(capacity)
            .max_folio(max_folio)
            .populate(populate)
            .build();
        let a_data = a_bytes(64 * PAGE, 1);
        let a_tmp = TempPath::with_data("a", &a_data);
        let a = c.open(&a_tmp.path).unwrap();
        for (i, len) in [5 * PAGE + 1234, PAGE - 1, 3 * PAGE + 1, 14 * PAGE + 4095]
            .into_iter()
            .enumerate()
        {
            fill_with_a(&c, &a, &a_data);
            let b_data = b_bytes(len, 100 + i as u64);
            let b_tmp = TempPath::with_data("b", &b_data);
            let b = c.open(&b_tmp.path).unwrap();
            assert_eq!(b.len(), len as u64);
            let what = format!("O_DIRECT B of {len} bytes, max folio {max_folio}");
            let ev = c.stats().evictions;
            check_all_patterns(&b, &b_data, &what);
            assert!(
                c.stats().evictions > ev,
                "{what}: B's folios must reuse A's memory"
            );
            check_consistent(&c);
            // A memory file of the same shape, into memory A held.
            fill_with_a(&c, &a, &a_data);
            let m = c
                .open_backing(MemBacking::with_data(b_data.clone()))
                .unwrap();
            check_all_patterns(
                &m,
                &b_data,
                &format!("memory B of {len} bytes, max folio {max_folio}"),
            );
            check_consistent(&c);
        }
    }
}

#[test]
fn a_one_byte_file_returns_one_byte_and_nothing_of_the_page_it_was_read_into() {
    let c = TestCache::pages(8).max_folio(16 * PAGE).build();
    let a_data = a_bytes(32 * PAGE, 2);
    let a_tmp = TempPath::with_data("a1", &a_data);
    let a = c.open(&a_tmp.path).unwrap();
    let one = [0x42u8];
    let one_tmp = TempPath::with_data("one", &one);
    let f = c.open(&one_tmp.path).unwrap();
    let m = c.open_backing(MemBacking::with_data(one.to_vec())).unwrap();
    for (file, what) in [(&f, "O_DIRECT 1-byte file"), (&m, "memory 1-byte file")] {
        fill_with_a(&c, &a, &a_data);
        let io = c.stats().io_reads;
        let mut buf = vec![SENTINEL; 2 * PAGE];
        assert_eq!(file.read_at(&mut buf, 0).unwrap(), 1, "{what}");
        assert_eq!(buf[0], 0x42, "{what}");
        assert!(
            buf[1..].iter().all(|&x| x == SENTINEL),
            "{what}: bytes past EOF reached the caller"
        );
        assert_eq!(c.stats().io_reads, io + 1, "{what}");
        check_all_patterns(file, &one, what);
    }
    check_consistent(&c);
}

#[test]
fn an_empty_file_reads_nothing_and_does_no_io() {
    let c = TestCache::pages(8).max_folio(16 * PAGE).build();
    let a_data = a_bytes(32 * PAGE, 3);
    let a_tmp = TempPath::with_data("a0", &a_data);
    let a = c.open(&a_tmp.path).unwrap();
    fill_with_a(&c, &a, &a_data);
    let empty_tmp = TempPath::with_data("empty", &[]);
    let e = c.open(&empty_tmp.path).unwrap();
    let m = c.open_backing(MemBacking::new()).unwrap();
    for (file, what) in [(&e, "O_DIRECT empty file"), (&m, "memory empty file")] {
        assert_eq!(file.len(), 0);
        assert!(file.is_empty());
        let before = c.stats();
        for off in [0, 1, P - 1, P, u64::MAX] {
            let mut buf = vec![SENTINEL; PAGE];
            assert_eq!(file.read_at(&mut buf, off).unwrap(), 0, "{what} at {off}");
            assert!(
                buf.iter().all(|&x| x == SENTINEL),
                "{what}: a read of nothing wrote bytes"
            );
        }
        assert!(file.read_exact_at(&mut [0u8; 1], 0).is_err(), "{what}");
        file.read_exact_at(&mut [], 0).unwrap();
        let after = c.stats();
        assert_eq!(after.io_reads, before.io_reads, "{what}: no IO");
        assert_eq!(after.folios, before.folios, "{what}: no folio");
        check_all_patterns(file, &[], what);
    }
}

#[test]
fn interleaved_files_never_see_each_others_bytes_single_threaded() {
    // A and B take turns evicting each other, folio by folio.
    let c = TestCache::pages(6).max_folio(4 * PAGE).build();
    let a_data = a_bytes(40 * PAGE + 3, 4);
    let b_data = b_bytes(40 * PAGE + 2049, 5);
    let a = c
        .open_backing(MemBacking::with_data(a_data.clone()))
        .unwrap();
    let b_tmp = TempPath::with_data("bi", &b_data);
    let b = c.open(&b_tmp.path).unwrap();
    let mut rng = StdRng::seed_from_u64(6);
    for _ in 0..2000 {
        let off = rng.gen_range(0..a_data.len() as u64 + 100);
        let n = rng.gen_range(1..5 * PAGE);
        let mut buf = vec![0u8; n];
        let got = a.read_at(&mut buf, off).unwrap();
        assert!(
            buf[..got].iter().all(|&x| x >= 0x80),
            "a byte of B leaked into A at {off}"
        );
        let off = rng.gen_range(0..b_data.len() as u64 + 100);
        check_read(&b, &b_data, off, n, "interleaved B");
    }
    assert!(c.stats().evictions > 1000);
    check_consistent(&c);
}

#[test]
fn a_short_backing_read_into_evicted_memory_never_exposes_the_previous_owner() {
    // `FaultyBacking::short_read_nth` returns fewer bytes than asked in the
    // middle of the file and leaves the rest of the folio's memory as it
    // was: A's bytes. Whatever the cache makes of the short read (see
    // tests/it/faults/reads.rs for whether the bytes are right), none of A's bytes
    // may reach a reader of B.
    for (max, max_folio) in [
        (100usize, PAGE),
        (0, PAGE),
        (PAGE, 4 * PAGE),
        (PAGE + 5, 4 * PAGE),
    ] {
        let c = TestCache::pages(16).max_folio(max_folio).build();
        let a_data = a_bytes(64 * PAGE, 8);
        let a = c
            .open_backing(MemBacking::with_data(a_data.clone()))
            .unwrap();
        fill_with_a(&c, &a, &a_data);
        let b_data = b_bytes(12 * PAGE + 99, 9);
        let b = Arc::new(FaultyBacking::new(MemBacking::with_data(b_data.clone())));
        let f = c.open_backing(b.clone()).unwrap();
        b.short_read_nth(1, max);
        let mut buf = vec![SENTINEL; max_folio + 10];
        let r = f.read_at(&mut buf, 4 * P);
        assert_eq!(b.stats().short_reads, 1, "the short read happened");
        if let Ok(n) = r {
            if let Some(i) = buf[..n].iter().position(|&x| x >= 0x80) {
                panic!(
                    "after a short backing read of {max} bytes (max folio {max_folio}), \
                     read_at returned byte {:#04x} at file offset {}: a byte of file A leaked",
                    buf[i],
                    4 * P + i as u64
                );
            }
            assert!(
                buf[n..].iter().all(|&x| x == SENTINEL),
                "wrote past the count"
            );
        }
        // Later reads of the same range, and of every other range, too.
        check_read_no_leak(&f, b_data.len(), "after a short read");
        check_consistent(&c);
    }
}

/// Reads all of `f` page by page and fails on any byte of A (high bit set)
/// or any byte written past the count; the bytes' values are not checked.
fn check_read_no_leak(f: &File, len: usize, what: &str) {
    for pg in 0..len.div_ceil(PAGE) as u64 {
        let mut buf = vec![SENTINEL; 2 * PAGE];
        let n = f.read_at(&mut buf, pg * P).unwrap_or(0);
        if let Some(i) = buf[..n].iter().position(|&x| x >= 0x80) {
            panic!(
                "{what}: byte {:#04x} of file A at file offset {}",
                buf[i],
                pg * P + i as u64
            );
        }
        assert!(
            buf[n..].iter().all(|&x| x == SENTINEL),
            "{what}: wrote past the count"
        );
    }
}

/// The 8-byte word at byte offset `o` (a multiple of 8) of file `id`: the
/// id in the top bytes, the word's position below, so a byte from another
/// file or another place is told apart.
fn tagged_bytes(id: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 8);
    let mut w = 0u64;
    while v.len() < len {
        let word = (0xA5 ^ id) << 56 | (id + 1) << 48 | w;
        v.extend_from_slice(&word.to_le_bytes());
        w += 1;
    }
    v.truncate(len);
    v
}

#[test]
fn files_read_concurrently_through_a_small_cache_never_see_each_others_bytes() {
    // ~125 pages of files through 40 pages of cache. The capacity exceeds
    // what 8 readers can hold at once (one folio of at most 4 pages each),
    // so every read must succeed: with less, a read may legitimately fail
    // with OutOfMemory when every folio is in use at that moment.
    read_files_concurrently(TestCache::pages(40).max_folio(4 * PAGE).build());
}

/// Four files, two over O_DIRECT files and two in memory, each byte
/// tagged with its file, read at random by 8 threads through `c`: every
/// read returns its own file's bytes, and nothing leaks.
fn read_files_concurrently(c: Cache) {
    let files = 4u64;
    let mut tmps = Vec::new();
    let mut opened = Vec::new();
    for id in 0..files {
        let len = (20 + 7 * id as usize) * PAGE + 123 * id as usize + 1;
        let data = Arc::new(tagged_bytes(id, len));
        let f = if id % 2 == 0 {
            let t = TempPath::with_data("tag", &data);
            let f = c.open(&t.path).unwrap();
            tmps.push(t);
            f
        } else {
            c.open_backing(MemBacking::with_data(data.to_vec()))
                .unwrap()
        };
        opened.push((f, data));
    }
    let opened = Arc::new(opened);
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let opened = opened.clone();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(1000 + t);
                let mut buf = vec![0u8; 6 * PAGE + 64];
                for _ in 0..1500 {
                    let id = rng.gen_range(0..opened.len());
                    let (f, data) = &opened[id];
                    let off = rng.gen_range(0..data.len() as u64 + 50);
                    let n = rng.gen_range(1..6 * PAGE);
                    let shift = rng.gen_range(0..64);
                    let dst = &mut buf[shift..shift + n];
                    let got = f.read_at(dst, off).unwrap();
                    let want = data.len().saturating_sub(off as usize).min(n);
                    assert_eq!(got, want, "file {id} at {off}+{n}");
                    if let Some(i) = dst[..got]
                        .iter()
                        .zip(data.get(off as usize..).unwrap_or(&[]))
                        .position(|(g, w)| g != w)
                    {
                        let pos = off as usize + i;
                        // The tag bytes (6 and 7) of the word holding the bad byte,
                        // when the read returned them.
                        let word_start = i as i64 - (pos % 8) as i64;
                        let tag = (word_start >= 0 && word_start as usize + 8 <= got).then(|| {
                            let w = word_start as usize;
                            i64::from(dst[w + 6]) - 1
                        });
                        panic!(
                            "file {id} at {off}+{n}: wrong byte at file offset {pos}: got {:#04x}, \
                             want {:#04x}; the tag of that word names file {tag:?}",
                            dst[i], data[pos]
                        );
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = check_consistent(&c);
    assert!(s.evictions > 1000, "{s:?}");
    drop(opened);
    // A mapping's folios go with its last reference, which may outlive the
    // last handle: an asynchronous readahead's read keeps its mapping
    // until the IO engine completes it (`Mapping::submit_runs`), and under
    // load that completion can come after the readers are joined. Wait for
    // them to go (a folio that never goes fails the wait).
    crate::common::write::wait_until("the files' folios to leave the cache", || {
        c.stats().folios == 0
    });
    let s = c.stats();
    assert_eq!((s.folios, s.free_bytes), (0, s.capacity_bytes), "{s:?}");
}

/// Reads `len` bytes at `off` of `f` and checks them against `data`.
fn expect_bytes(f: &File, data: &[u8], off: u64, len: usize, what: &str) {
    let mut buf = vec![SENTINEL; len];
    let n = f
        .read_at(&mut buf, off)
        .unwrap_or_else(|e| panic!("{what}: read_at({off}, {len}): {e}"));
    let end = data.len().min(off as usize + len);
    assert_eq!(
        n,
        end.saturating_sub(off as usize),
        "{what}: count at {off}"
    );
    if let Some(i) = buf[..n]
        .iter()
        .zip(&data[off as usize..end])
        .position(|(g, w)| g != w)
    {
        panic!(
            "{what}: read_at({off}, {len}): wrong byte {:#04x} at file offset {}, want {:#04x}",
            buf[i],
            off as usize + i,
            data[off as usize + i]
        );
    }
}

/// 2 MiB of pages: the arena's largest folio, the one a hit finds without
/// a walk when a walk found it there before (`huge_hints.rs`).
const HUGE: usize = 2 << 20;

/// A hit that looks where a walk last found a 2 MiB folio never returns a
/// folio that went since (`huge_hints.rs`). File A fills the cache with
/// 2 MiB folios and every one is read, so that the hints name their pages;
/// A is truncated away and file B fills the same pages. A, grown back as a
/// hole, reads zeros, not B's bytes; written again with new bytes (in
/// pages B's folios leave), it reads those, never B's nor its old ones
/// nor another block's.
#[test]
fn a_hit_where_a_2m_folio_was_never_returns_what_took_its_place() {
    const BLOCKS: usize = 8;
    let span = (BLOCKS * HUGE) as u64;
    let offsets =
        || (0..BLOCKS as u64).flat_map(|k| [k * HUGE as u64 + 5 * P, k * HUGE as u64 + 77]);
    // A write's piece is at most an eighth of the cache: 2 MiB here,
    // so each aligned 2 MiB written is one folio, and 8 fill the arena.
    let c = TestCache::bytes(BLOCKS * HUGE).max_folio(HUGE).build();
    let a_old = a_bytes(BLOCKS * HUGE, 1);
    let a = c.open_backing(MemBacking::new()).unwrap();
    a.write_all_at(&a_old, 0).unwrap();
    assert_eq!(c.stats().folios, BLOCKS as u64, "A in 2 MiB folios");
    for off in offsets() {
        expect_bytes(&a, &a_old, off, 3000, "A");
    }
    a.set_len(0).unwrap();
    let b_data = b_bytes(BLOCKS * HUGE, 2);
    let b = c.open_backing(MemBacking::new()).unwrap();
    b.write_all_at(&b_data, 0).unwrap();
    let s = c.stats();
    assert_eq!(
        (s.folios, s.bytes_cached),
        (BLOCKS as u64, span),
        "B in all of it"
    );
    a.set_len(span).unwrap();
    let zeros = vec![0u8; BLOCKS * HUGE];
    for off in offsets() {
        expect_bytes(&a, &zeros, off, 3000, "A a hole");
    }
    // Bytes of neither, a different one in each block.
    let a_new: Vec<u8> = (0..BLOCKS * HUGE)
        .map(|i| ((i / HUGE) as u8 * 16 + (i % 13) as u8) | 0x80)
        .collect();
    a.write_all_at(&a_new, 0).unwrap();
    for off in offsets() {
        expect_bytes(&a, &a_new, off, 3000, "A rewritten");
    }
    for off in offsets() {
        expect_bytes(&b, &b_data, off, 3000, "B");
    }
    drop((a, b));
    check_consistent(&c);
}

/// [`read_files_concurrently`] with 2 MiB folios: threads write whole
/// aligned 2 MiB blocks again with the bytes they hold (each a 2 MiB folio
/// when it is not cached), read whole blocks, and read short pieces at
/// random, through a cache that holds four fifths of the data, so that 2
/// MiB folios are evicted and their pages reused for other files while
/// hits look where walks last found them.
#[test]
fn files_in_2m_folios_read_concurrently_never_see_each_others_bytes() {
    // A write's piece is at most an eighth of the cache: 2 MiB here.
    let c = TestCache::bytes(8 * HUGE).max_folio(HUGE).build();
    let opened: Vec<(File, Vec<u8>)> = (0..3u64)
        .map(|id| {
            let data = tagged_bytes(id, 3 * HUGE + 4096 * id as usize + 1);
            let f = c.open_backing(MemBacking::new()).unwrap();
            f.write_all_at(&data, 0).unwrap();
            (f, data)
        })
        .collect();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let opened = &opened;
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(2000 + t);
                let mut buf = vec![0u8; HUGE + 64];
                for i in 0..300 {
                    let id = rng.gen_range(0..opened.len());
                    let (f, data) = &opened[id];
                    let block = rng.gen_range(0..data.len() / HUGE) * HUGE;
                    if i % 8 == 0 {
                        f.write_all_at(&data[block..block + HUGE], block as u64)
                            .unwrap();
                        continue;
                    }
                    let (off, n) = if i % 8 == 1 {
                        (block as u64, HUGE)
                    } else {
                        let n = rng.gen_range(1..3 * PAGE);
                        (rng.gen_range(0..data.len() as u64), n)
                    };
                    let shift = rng.gen_range(0..64);
                    let dst = &mut buf[shift..shift + n];
                    let got = f.read_at(dst, off).unwrap();
                    let want = data.len().saturating_sub(off as usize).min(n);
                    assert_eq!(got, want, "file {id} at {off}+{n}");
                    assert!(
                        dst[..got] == data[off as usize..off as usize + got],
                        "file {id} at {off}+{n}: wrong bytes"
                    );
                }
            });
        }
    });
    let s = check_consistent(&c);
    assert!(s.evictions > 0, "{s:?}");
}
