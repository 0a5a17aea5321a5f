//! Reads through the cache against the file read directly.

use std::fs;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use test_support::cache::TestCache;

fn temp_file(name: &str, len: usize, seed: u64) -> (PathBuf, Vec<u8>) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("foliocache-read");
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}-{}", std::process::id()));
    let mut rng = StdRng::seed_from_u64(seed);
    let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
    let mut f = fs::File::create(&path).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    (path, data)
}

#[test]
fn second_read_is_a_hit_with_no_io() {
    let (path, data) = temp_file("hit", 1 << 20, 1);
    let c = TestCache::bytes(8 << 20).build();
    let f = c.open(&path).unwrap();
    assert!(f.info().is_direct(), "ext4 accepts O_DIRECT: {}", f.info());
    let mut buf = vec![0u8; 4096];
    assert_eq!(f.read_at(&mut buf, 8192).unwrap(), 4096);
    assert_eq!(&buf[..], &data[8192..12288]);
    let io = c.stats().io_reads;
    assert_eq!(f.read_at(&mut buf, 8192).unwrap(), 4096);
    assert_eq!(&buf[..], &data[8192..12288]);
    assert_eq!(c.stats().io_reads, io, "a cached read issues no IO");
    assert!(c.stats().hits >= 1);
    fs::remove_file(path).unwrap();
}

#[test]
fn a_large_aligned_read_makes_one_large_folio_and_one_io() {
    let (path, data) = temp_file("large", 4 << 20, 2);
    let c = TestCache::bytes(16 << 20).build();
    let f = c.open(&path).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    assert_eq!(f.read_at(&mut buf, 1 << 20).unwrap(), 1 << 20);
    assert_eq!(&buf[..], &data[1 << 20..2 << 20]);
    let s = c.stats();
    assert_eq!(s.folios, 1, "{s:?}");
    assert_eq!(s.io_reads, 1, "{s:?}");
    assert_eq!(s.bytes_cached, 1 << 20);
    fs::remove_file(path).unwrap();
}

#[test]
fn reads_stop_at_eof_and_the_tail_of_the_last_folio_reads_as_file_bytes() {
    let len = 3 * 4096 + 123;
    let (path, data) = temp_file("eof", len, 3);
    let c = TestCache::bytes(1 << 20).build();
    let f = c.open(&path).unwrap();
    assert_eq!(f.len(), len as u64);
    let mut buf = vec![0xAAu8; 10000];
    let n = f.read_at(&mut buf, 3 * 4096).unwrap();
    assert_eq!(n, 123);
    assert_eq!(&buf[..123], &data[3 * 4096..]);
    assert!(
        buf[123..].iter().all(|&b| b == 0xAA),
        "nothing written past what was read"
    );
    assert_eq!(f.read_at(&mut buf, len as u64).unwrap(), 0);
    assert_eq!(f.read_at(&mut buf, u64::MAX).unwrap(), 0);
    let mut exact = vec![0u8; 200];
    assert!(f.read_exact_at(&mut exact, len as u64 - 100).is_err());
    fs::remove_file(path).unwrap();
}

#[test]
fn random_reads_match_pread_under_constant_reclaim_from_threads() {
    let len = 24 << 20;
    let (path, _) = temp_file("diff", len, 4);
    // A capacity of one sixth of the file: reclaim runs all the time.
    let c = TestCache::bytes(4 << 20).build();
    let f = c.open(&path).unwrap();
    let direct = Arc::new(fs::File::open(&path).unwrap());
    let threads: Vec<_> = (0..3)
        .map(|t| {
            let (f, direct) = (f.clone(), direct.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(100 + t);
                let mut want = vec![0u8; 300 << 10];
                let mut got = vec![0u8; (300 << 10) + 17];
                for _ in 0..400 {
                    let off = rng.gen_range(0..len as u64 + 5000);
                    let n = rng.gen_range(0..want.len());
                    // Any destination alignment.
                    let shift = rng.gen_range(0..17);
                    let dst = &mut got[shift..shift + n];
                    let r = f.read_at(dst, off).unwrap();
                    let expect = direct.read_at(&mut want[..n], off).unwrap_or(0);
                    assert_eq!(r, expect, "length at {off}+{n}");
                    assert!(dst[..r] == want[..r], "bytes at {off}+{n}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = c.stats();
    assert!(s.evictions > 0, "the test must exercise reclaim: {s:?}");
    assert!(s.bytes_cached <= 4 << 20, "{s:?}");
    drop(f);
    // A close does not wait for the file's readahead in flight (a window
    // a marker started: its folios go back once its IO ends).
    c.wait_io_idle();
    assert_eq!(c.stats().folios, 0, "closing the file drops its folios");
    assert_eq!(c.stats().free_bytes, c.stats().capacity_bytes);
    fs::remove_file(path).unwrap();
}

#[test]
fn readers_that_briefly_hold_every_folio_do_not_make_others_fail() {
    // Eight readers over a cache of eight one-page folios: at any moment all
    // of them may be held by readers copying out. A reader that finds the
    // cache pinned waits for one to be released instead of failing.
    let len = 64 * 4096;
    let (path, data) = temp_file("pinned", len, 5);
    let c = TestCache::bytes(8 * 4096).max_folio(4096).build();
    let f = c.open(&path).unwrap();
    let data = Arc::new(data);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (f, data) = (f.clone(), data.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(200 + t);
                let mut buf = vec![0u8; 4096];
                for _ in 0..1500 {
                    let off = rng.gen_range(0..len as u64 - 4096) & !4095;
                    let n = f
                        .read_at(&mut buf, off)
                        .expect("a pinned cache waits, it does not fail");
                    assert_eq!(n, 4096);
                    assert!(buf[..] == data[off as usize..off as usize + 4096]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(c.stats().evictions > 0);
    fs::remove_file(path).unwrap();
}
