//! The cache under memory pressure: every folio in use at once, many
//! threads over many files with a capacity far below the data, any buffer
//! alignment, reads across folio boundaries and EOF, and a property test of
//! random reads against a `Vec<u8>` model.
//!
//! `tests/it/read/basic.rs` checks one O_DIRECT file against `pread`; these extend the
//! differential check to several files at once (O_DIRECT and memory), to
//! every destination alignment, and to random file sizes and capacities.

use std::io::{self};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use backing::{FaultyBacking, MemBacking};
use foliocache::{Cache, CacheStats, File};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use test_support::cache::TestCache;
use test_support::TempPath;

const PAGE: usize = 4096;
const P: u64 = PAGE as u64;
const HANG: Duration = Duration::from_secs(20);

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

/// At rest every arena byte is free or cached, and never more than the
/// capacity is cached.
fn check_consistent(c: &Cache) -> CacheStats {
    let s = c.stats();
    assert_eq!(s.free_bytes + s.bytes_cached, s.capacity_bytes, "{s:?}");
    assert_eq!(s.folios == 0, s.bytes_cached == 0, "{s:?}");
    s
}

/// What `read_at(len, off)` must return for a file of `data`.
fn expected(data: &[u8], off: u64, len: usize) -> &[u8] {
    let start = (off.min(data.len() as u64)) as usize;
    let end = start + (data.len() - start).min(len);
    &data[start..end]
}

/// Reads `len` bytes at `off` into `buf[shift..]`, `buf` pre-filled with a
/// guard byte, and checks the count, the bytes, and that nothing around the
/// destination window was touched.
fn check_read(
    f: &File,
    data: &[u8],
    off: u64,
    len: usize,
    shift: usize,
    buf: &mut Vec<u8>,
    what: &str,
) {
    const GUARD: u8 = 0xE7;
    buf.clear();
    buf.resize(shift + len + 64, GUARD);
    let n = f
        .read_at(&mut buf[shift..shift + len], off)
        .unwrap_or_else(|e| panic!("{what}: read_at({off}, {len}) at shift {shift}: {e}"));
    let want = expected(data, off, len);
    assert_eq!(
        n,
        want.len(),
        "{what}: count of read_at({off}, {len}) (file of {})",
        data.len()
    );
    if let Some(i) = buf[shift..shift + n]
        .iter()
        .zip(want)
        .position(|(g, w)| g != w)
    {
        panic!(
            "{what}: read_at({off}, {len}) at shift {shift}: wrong byte at file offset {}: got \
             {:#04x}, want {:#04x}",
            off + i as u64,
            buf[shift + i],
            want[i]
        );
    }
    assert!(
        buf[..shift].iter().all(|&b| b == GUARD),
        "{what}: read_at({off}, {len}) wrote before its buffer (shift {shift})"
    );
    assert!(
        buf[shift + n..].iter().all(|&b| b == GUARD),
        "{what}: read_at({off}, {len}) wrote past the {n} bytes it returned (shift {shift})"
    );
}

// ---- every folio in use --------------------------------------------------

#[test]
fn every_folio_locked_by_a_slow_read_gives_out_of_memory_then_recovers() {
    // There is no public way to hold a folio yet; slow reads do it: each
    // reader holds its folio locked for the whole (injected) latency. With
    // as many readers as the cache has folios, nothing can be reclaimed.
    let folios = 4;
    let data = random_bytes(64 * PAGE, 1);
    // Readahead off: one IO per reader, each holding its one folio.
    let c = TestCache::pages(folios)
        .max_folio(PAGE)
        .no_readahead()
        .build();
    let b = Arc::new(FaultyBacking::new(MemBacking::with_data(data.clone())));
    let f = c.open_backing(b.clone()).unwrap();
    b.set_read_latency(Duration::from_millis(1500));
    let holders: Vec<_> = (0..folios as u64)
        .map(|i| {
            let f = f.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; PAGE];
                let n = f.read_at(&mut buf, i * P)?;
                Ok::<_, io::Error>((i, n, buf))
            })
        })
        .collect();
    let start = Instant::now();
    while b.stats().reads < folios as u64 {
        assert!(start.elapsed() < HANG, "the holders never started their IO");
        std::thread::sleep(Duration::from_millis(1));
    }
    let s = c.stats();
    assert_eq!(s.free_bytes, 0, "every page is a locked folio now: {s:?}");

    // A reader that needs a new folio now: a clear error, quickly, no hang.
    let (tx, rx) = mpsc::channel();
    let f2 = f.clone();
    let t = std::thread::spawn(move || {
        let mut buf = vec![0u8; 100];
        let _ = tx.send(f2.read_at(&mut buf, 40 * P + 5));
    });
    let r = rx
        .recv_timeout(HANG)
        .expect("a read into a cache whose folios are all locked hung");
    t.join().unwrap();
    assert!(
        start.elapsed() < Duration::from_millis(1500),
        "the check must run while the folios are still locked"
    );
    let e = r.expect_err("no folio could be freed, the read cannot have succeeded");
    assert_eq!(e.kind(), io::ErrorKind::OutOfMemory, "{e}");
    assert_eq!(
        b.stats().reads,
        folios as u64,
        "the failed read issued no IO"
    );

    // The holders finish with the right bytes.
    for h in holders {
        let (i, n, buf) = h.join().unwrap().unwrap();
        assert_eq!(n, PAGE);
        assert!(
            buf == data[i as usize * PAGE..(i as usize + 1) * PAGE],
            "holder {i}"
        );
    }
    check_consistent(&c);
    // And now the same read succeeds by evicting one of them.
    b.set_read_latency(Duration::ZERO);
    let mut buf = vec![0u8; 100];
    assert_eq!(f.read_at(&mut buf, 40 * P + 5).unwrap(), 100);
    assert_eq!(buf, &data[40 * PAGE + 5..40 * PAGE + 105]);
    let s = check_consistent(&c);
    assert_eq!(s.evictions, 1, "{s:?}");
    drop(f);
    assert_eq!(c.stats().free_bytes, c.stats().capacity_bytes);
}

// ---- many threads, many files ----------------------------------------------

#[test]
fn many_threads_over_many_files_read_the_right_bytes_with_a_capacity_far_below_the_data() {
    // Files of both kinds, sizes that end inside a page, one tiny and one
    // empty; ~13 MiB of data through 512 KiB of cache. 8 readers holding at
    // most one 32 KiB folio each cannot pin the whole cache, so every read
    // must succeed (with capacity <= readers x max folio, a read may
    // legitimately fail with OutOfMemory when every folio is in use).
    let max_folio = 8 * PAGE;
    let c = TestCache::pages(128).max_folio(max_folio).build();
    let sizes = [
        3 << 20,
        (2 << 20) + 1,
        (1 << 20) + 4095,
        5 * PAGE + 17,
        1,
        0,
        (4 << 20) - 3,
        (2 << 20) + 2 * PAGE,
    ];
    let mut tmps = Vec::new();
    let mut files = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let data = Arc::new(random_bytes(len, 10 + i as u64));
        let f = if i % 2 == 0 {
            let t = TempPath::with_data("many", &data);
            let f = c.open(&t.path).unwrap();
            assert!(f.info().is_direct(), "{}", f.info());
            tmps.push(t);
            f
        } else {
            c.open_backing(MemBacking::with_data(data.to_vec()))
                .unwrap()
        };
        files.push((f, data));
    }
    let files = Arc::new(files);
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let files = files.clone();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(500 + t);
                let mut buf = Vec::new();
                for i in 0..1500 {
                    let which = rng.gen_range(0..files.len());
                    let (f, data) = &files[which];
                    let len = data.len() as u64;
                    // A mix: anywhere, near a folio boundary, near EOF.
                    let off = match i % 3 {
                        0 => rng.gen_range(0..len + 100),
                        1 => {
                            let b = rng.gen_range(0..len / P + 2) * P;
                            (b + rng.gen_range(0..8)).saturating_sub(4)
                        }
                        _ => len.saturating_sub(rng.gen_range(0..3 * P)),
                    };
                    let n = match rng.gen_range(0..4) {
                        0 => rng.gen_range(1..64),
                        1 => rng.gen_range(1..2 * PAGE),
                        2 => rng.gen_range(1..4 * max_folio),
                        _ => PAGE,
                    };
                    let shift = rng.gen_range(0..64);
                    check_read(
                        f,
                        data,
                        off,
                        n,
                        shift,
                        &mut buf,
                        &format!("thread {t} file {which}"),
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = check_consistent(&c);
    assert!(s.evictions > 100, "reclaim must run all the time: {s:?}");
    assert!(s.hits > 0 && s.misses > 0, "{s:?}");
    // Every file still reads back whole.
    for (f, data) in files.iter() {
        let mut all = vec![0u8; data.len()];
        f.read_exact_at(&mut all, 0).unwrap();
        assert!(all == **data);
    }
    drop(files);
    crate::common::assert_empty(&c);
}

// ---- alignment and boundaries -------------------------------------------------

#[test]
fn every_destination_alignment_and_every_boundary_reads_exactly_the_right_bytes() {
    let len = 9 * 16 * PAGE + 2 * PAGE + 777; // ends inside a page, past whole folios
    let data = random_bytes(len, 20);
    let tmp = TempPath::with_data("align", &data);
    let c = TestCache::pages(24).max_folio(16 * PAGE).build();
    let mem = c.open_backing(MemBacking::with_data(data.clone())).unwrap();
    let file = c.open(&tmp.path).unwrap();
    let l = len as u64;
    let mut points: Vec<u64> = vec![
        0,
        1,
        P - 1,
        P,
        P + 1,
        16 * P - 1,
        16 * P,
        16 * P + 1,
        48 * P - 3,
    ];
    points.extend([l - 777, l - 778, l - 1, l, l + 1, l - P, l - P - 1]);
    let lens = [
        1usize,
        2,
        7,
        63,
        64,
        65,
        PAGE - 1,
        PAGE,
        PAGE + 1,
        2 * PAGE + 3,
        16 * PAGE,
        16 * PAGE + 9,
        40 * PAGE + 5,
    ];
    let mut buf = Vec::new();
    for (f, what) in [(&mem, "memory"), (&file, "O_DIRECT")] {
        for shift in 0..64 {
            for &off in &points {
                for &n in &lens {
                    check_read(f, &data, off, n, shift, &mut buf, what);
                }
            }
        }
        // Reads crossing every page boundary of one folio and the next.
        for b in (P..(48 * P)).step_by(PAGE) {
            for (back, n) in [
                (1u64, 2usize),
                (100, 200),
                (P - 1, PAGE + 1),
                (3, 16 * PAGE),
            ] {
                check_read(f, &data, b - back, n, (b % 61) as usize, &mut buf, what);
            }
        }
    }
    let s = check_consistent(&c);
    assert!(s.evictions > 0, "{s:?}");
}

#[test]
fn read_exact_at_fills_any_buffer_across_folios_or_fails_at_eof() {
    let len = 50 * PAGE + 3;
    let data = random_bytes(len, 21);
    let c = TestCache::pages(8).max_folio(4 * PAGE).build();
    let f = c.open_backing(MemBacking::with_data(data.clone())).unwrap();
    let mut rng = StdRng::seed_from_u64(21);
    for _ in 0..2000 {
        let off = rng.gen_range(0..len as u64 + 10);
        let n = rng.gen_range(0..12 * PAGE);
        let shift = rng.gen_range(0..64);
        let mut buf = vec![0u8; shift + n];
        let r = f.read_exact_at(&mut buf[shift..], off);
        if off + n as u64 <= len as u64 {
            r.unwrap_or_else(|e| panic!("read_exact_at({off}, {n}): {e}"));
            assert!(
                buf[shift..] == data[off as usize..off as usize + n],
                "at {off}+{n}"
            );
        } else {
            let e = r.expect_err("past EOF");
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "at {off}+{n}: {e}");
        }
    }
    check_consistent(&c);
}

// ---- property test ---------------------------------------------------------------

#[derive(Debug, Clone)]
struct Read {
    off: u64,
    len: usize,
    shift: usize,
}

fn reads(max_off: u64) -> impl Strategy<Value = Vec<Read>> {
    prop::collection::vec(
        (
            0..max_off,
            prop_oneof![1..64usize, 1..3 * PAGE, 1..20 * PAGE],
            0..64usize,
        )
            .prop_map(|(off, len, shift)| Read { off, len, shift }),
        1..40,
    )
}

fn case() -> impl Strategy<Value = (Vec<u8>, usize, usize, Vec<Read>)> {
    (
        prop_oneof![0..3 * PAGE, 0..40 * PAGE, 0..200 * PAGE],
        any::<u64>(),
        1..24usize,
        0..6u32,
    )
        .prop_flat_map(|(size, seed, cap_pages, folio_order)| {
            let data = random_bytes(size, seed);
            let max_off = size as u64 + 2 * P;
            (
                Just(data),
                Just(cap_pages * PAGE),
                Just(PAGE << folio_order),
                reads(max_off),
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_reads_match_a_vec_model((data, capacity, max_folio, ops) in case()) {
        let c = TestCache::bytes(capacity).max_folio(max_folio).build();
        let f = c.open_backing(MemBacking::with_data(data.clone())).unwrap();
        prop_assert_eq!(f.len(), data.len() as u64);
        let mut buf = Vec::new();
        for r in &ops {
            buf.clear();
            buf.resize(r.shift + r.len, 0xE7);
            let n = f.read_at(&mut buf[r.shift..], r.off);
            let want = expected(&data, r.off, r.len);
            let n = match n {
                Ok(n) => n,
                Err(e) => return Err(TestCaseError::fail(format!("{r:?}: {e}"))),
            };
            prop_assert_eq!(n, want.len(), "count of {:?}", r);
            prop_assert!(buf[r.shift..r.shift + n] == *want, "bytes of {:?}", r);
            prop_assert!(buf[..r.shift].iter().chain(&buf[r.shift + n..]).all(|&b| b == 0xE7),
                "{:?} wrote outside what it returned", r);
            let s = c.stats();
            prop_assert_eq!(s.free_bytes + s.bytes_cached, s.capacity_bytes, "{:?}", s);
        }
        drop(f);
        // A closed file's folios go when its last readahead IO completes.
        c.wait_io_idle();
        let s = c.stats();
        prop_assert_eq!((s.folios, s.free_bytes), (0, s.capacity_bytes), "{:?}", s);
    }
}
