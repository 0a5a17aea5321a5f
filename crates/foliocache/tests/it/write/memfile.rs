//! Memfiles (`Cache::memfile`): files with no backing, whose data lives in
//! the cache. A hole reads as zeros and allocates nothing; `set_len` and
//! `punch_hole` free memory; a memfile is found by no name, and its clones
//! and reopened handles share it; a sync writes nothing; its data is never
//! evicted, nor dropped by anything that drops clean folios, and does not
//! throttle writers of other files; writing more than the cache holds
//! fails with `StorageFull` (from two threads too), keeping what was
//! written, and the cache recovers.

use std::io::ErrorKind;

use foliocache::WriteFlags;

use crate::common::write as wcommon;
use test_support::cache::TestCache;
use test_support::TempPath;
use wcommon::{assert_same, disk, nonzero_bytes, open_rw, read_all, read_vec, Model, HANG, PAGE};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

#[test]
fn memfile_holes_and_data() {
    let c = TestCache::bytes(4 << 20).build();
    let m = c.memfile("guest", 3 << 20).unwrap();
    m.write_at(&[7u8; 10000], 1 << 20).unwrap();
    let before = c.stats().folios;
    let mut back = vec![1u8; 3 << 20];
    m.read_exact_at(&mut back, 0).unwrap();
    assert_eq!(c.stats().folios, before, "a hole read allocated");
    assert!(back[..1 << 20].iter().all(|&b| b == 0));
    assert!(back[(1 << 20)..(1 << 20) + 10000].iter().all(|&b| b == 7));
    assert!(back[(1 << 20) + 10000..].iter().all(|&b| b == 0));
    let e = m.write_at(&vec![1u8; 8 << 20], 0).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{e}");
}

#[test]
fn a_memfile_hole_reads_zeros_and_allocates_nothing() {
    let c = TestCache::bytes(MIB).max_folio(64 * KIB).build();
    let f = c.memfile("holes", 64 * MIB as u64).unwrap();
    assert!(f.is_memfile());
    assert_eq!(f.len(), 64 * MIB as u64);
    let before = c.stats();
    let mut buf = vec![0xAAu8; MIB];
    for i in 0..64u64 {
        assert_eq!(f.read_at(&mut buf, i * MIB as u64).unwrap(), MIB);
        assert!(
            buf.iter().all(|&b| b == 0),
            "MiB {i} of the hole is not zero"
        );
        buf.fill(0xAA);
    }
    let s = c.stats();
    assert_eq!(
        s.folios, before.folios,
        "reading a hole allocates no folio: {s:?}"
    );
    assert_eq!(s.bytes_cached, before.bytes_cached, "{s:?}");
    assert_eq!(f.cachestat(0, 0).unwrap().cached, 0);
}

#[test]
fn a_memfile_takes_a_write_ending_exactly_at_i64_max() {
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    let f = c.memfile("edge", 0).unwrap();
    let last = i64::MAX as u64 - 1;
    f.write_all_at(b"z", last).unwrap();
    assert_eq!(f.len(), i64::MAX as u64);
    assert_eq!(read_vec(&f, last - 2, 10).unwrap(), b"\0\0z");
    assert_eq!(
        f.write_at(b"z", last + 1).unwrap_err().kind(),
        ErrorKind::FileTooLarge
    );
    f.set_len(0).unwrap();
    assert_eq!(c.stats().folios, 0, "set_len(0) frees the memfile's folio");
}

#[test]
fn memfile_set_len_and_punch_hole_free_memory_and_read_zeros() {
    let c = TestCache::bytes(4 * MIB).max_folio(64 * KIB).build();
    let m = c.memfile("shrink", 0).unwrap();
    let data = nonzero_bytes(MIB + 999, 27);
    m.write_all_at(&data, 0).unwrap();
    let full = c.stats().bytes_cached;
    assert!(full >= MIB as u64, "{full}");
    // Punch whole large folios and some partial pages.
    m.punch_hole(100, 512 * KIB as u64).unwrap();
    let mut model = Model { data };
    model.punch(100, 512 * KIB as u64);
    assert_same("after punch", &read_all(&m), &model.data);
    assert!(
        c.stats().bytes_cached <= full - 448 * KIB as u64,
        "punching 512 KiB frees the folios inside: {:?}",
        c.stats()
    );
    m.set_len(5000).unwrap();
    model.set_len(5000);
    m.set_len(200_000).unwrap();
    model.set_len(200_000);
    assert_same("after shrink and grow", &read_all(&m), &model.data);
    assert!(
        c.stats().bytes_cached <= 64 * KIB as u64,
        "shrinking to 5000 frees everything past the first folio: {:?}",
        c.stats()
    );
}

#[test]
fn a_memfile_is_separate_from_other_memfiles_of_the_same_name() {
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    let a = c.memfile("same", 0).unwrap();
    let b = c.memfile("same", 0).unwrap();
    a.write_all_at(b"aaaa", 0).unwrap();
    assert_eq!(b.len(), 0, "a memfile is not found by name");
    assert_eq!(read_all(&a), b"aaaa");
}

#[test]
fn memfile_clones_and_reopened_handles_share_the_data() {
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    let a = c.memfile("shared", 0).unwrap();
    let b = a.clone();
    let r = a.reopen();
    a.write_all_at(b"xyz", 5).unwrap();
    assert_eq!(read_all(&b), b"\0\0\0\0\0xyz");
    assert_eq!(read_all(&r), b"\0\0\0\0\0xyz");
    drop(a);
    r.write_all_at(b"!", 0).unwrap();
    assert_eq!(read_all(&b), b"!\0\0\0\0xyz");
}

#[test]
fn a_memfile_sync_succeeds_and_writes_nothing() {
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    let m = c.memfile("sync", 0).unwrap();
    m.write_all_at(&[9u8; 3 * PAGE], 0).unwrap();
    let before = c.stats();
    m.sync_data().unwrap();
    m.sync_all().unwrap();
    c.sync_all().unwrap();
    let s = c.stats();
    assert_eq!(
        s.io_writes, before.io_writes,
        "a memfile has nowhere to write: {s:?}"
    );
    assert_eq!(read_all(&m), vec![9u8; 3 * PAGE]);
}

#[test]
fn memfile_data_is_never_evicted_by_read_pressure() {
    let other = nonzero_bytes(4 * MIB, 23);
    let tmp = TempPath::with_data("memfile-pressure", &other);
    let c = TestCache::bytes(MIB).max_folio(64 * KIB).build();
    let m = c.memfile("keep", 0).unwrap();
    let data = nonzero_bytes(256 * KIB + 17, 24);
    m.write_all_at(&data, 0).unwrap();
    let pages = m.cachestat(0, 0).unwrap().cached;
    let g = c.open(&tmp.path).unwrap();
    for _ in 0..3 {
        assert_same("the other file", &read_all(&g), &other);
    }
    c.shrink(u64::MAX);
    assert_eq!(
        m.cachestat(0, 0).unwrap().cached,
        pages,
        "memfile pages are never reclaimed"
    );
    assert_same("memfile after pressure", &read_all(&m), &data);
}

#[test]
fn nothing_that_drops_clean_folios_drops_memfile_data() {
    // A memfile's folios are its only copy: uncached reads and writes,
    // DontNeed, NoReuse, shrink and reclaim must all leave them.
    use foliocache::{Advice, ReadFlags};
    let c = TestCache::bytes(2 * MIB).max_folio(16 * KIB).build();
    let m = c.memfile("only-copy", 0).unwrap();
    let data = nonzero_bytes(300 * KIB, 38);
    m.write_at_flags(&data, 0, WriteFlags::DONTCACHE).unwrap();
    assert_same("after an uncached write", &read_all(&m), &data);
    let mut buf = vec![0u8; data.len()];
    assert_eq!(
        m.read_at_flags(&mut buf, 0, ReadFlags::DONTCACHE).unwrap(),
        data.len()
    );
    assert_same("an uncached read", &buf, &data);
    m.advise(0, 0, Advice::DontNeed).unwrap();
    assert_same("after DontNeed", &read_all(&m), &data);
    m.advise(0, 0, Advice::NoReuse).unwrap();
    assert_same("after NoReuse (read once)", &read_all(&m), &data);
    assert_same("after NoReuse (read twice)", &read_all(&m), &data);
    c.shrink(u64::MAX);
    assert_same("after shrink", &read_all(&m), &data);
    let pages = m.cachestat(0, 0).unwrap().cached;
    assert_eq!(pages, 75, "300 KiB stays in 75 pages");
}

#[test]
fn memfile_data_does_not_throttle_writers_of_other_files() {
    // A memfile's data can never be written back: it must not count
    // against the dirty limit, or every other writer would wait on it.
    let c = TestCache::bytes(4 * MIB).max_folio(64 * KIB).build(); // dirty limit 2 MiB
    let m = c.memfile("big", 0).unwrap();
    m.write_all_at(&nonzero_bytes(3 * MIB, 36), 0).unwrap();
    let tmp = TempPath::new("beside-memfile");
    let f = open_rw(&c, &tmp.path);
    let data = nonzero_bytes(256 * KIB, 37);
    let start = std::time::Instant::now();
    let g = f.clone();
    let d = data.clone();
    wcommon::within(
        std::time::Duration::from_secs(10),
        "a write beside a large memfile",
        move || {
            for (i, piece) in d.chunks(16 * KIB).enumerate() {
                g.write_all_at(piece, (i * 16 * KIB) as u64).unwrap();
            }
        },
    );
    assert!(
        start.elapsed() < std::time::Duration::from_secs(5),
        "256 KiB took {:?} beside a 3 MiB memfile",
        start.elapsed()
    );
    f.sync_all().unwrap();
    assert_same("file beside a memfile", &disk(&tmp.path), &data);
    assert_same("the memfile", &read_all(&m), &nonzero_bytes(3 * MIB, 36));
}

#[test]
fn writing_more_than_the_capacity_to_a_memfile_fails_storage_full_and_the_cache_recovers() {
    let c = TestCache::bytes(MIB).max_folio(64 * KIB).build();
    let m = c.memfile("full", 0).unwrap();
    let chunk = nonzero_bytes(64 * KIB, 25);
    let mut written = 0u64;
    let err = loop {
        match m.write_at(&chunk, written) {
            Ok(n) => {
                assert_eq!(n, chunk.len());
                written += n as u64;
                assert!(
                    written <= MIB as u64,
                    "wrote {written} bytes into a 1 MiB cache"
                );
            }
            Err(e) => break e,
        }
    };
    assert_eq!(err.kind(), ErrorKind::StorageFull, "{err}");
    assert!(written >= MIB as u64 / 2, "only {written} bytes fit");
    // What was acknowledged is there.
    for i in 0..written / chunk.len() as u64 {
        assert_eq!(
            read_vec(&m, i * chunk.len() as u64, chunk.len()).unwrap(),
            chunk,
            "chunk {i}"
        );
    }
    // Another file can still be read once the memfile gives memory back.
    m.punch_hole(0, written / 2).unwrap();
    let data = nonzero_bytes(300 * KIB, 26);
    let tmp = TempPath::with_data("after-full", &data);
    let g = c.open(&tmp.path).unwrap();
    assert_same("another file after StorageFull", &read_all(&g), &data);
    // And the memfile takes writes again.
    m.write_all_at(&chunk, 0).unwrap();
    assert_eq!(read_vec(&m, 0, chunk.len()).unwrap(), chunk);
}

/// Two threads fill a memfile in a 1 MiB cache until it is full, while a
/// third reads another file through the same cache: the writers stop with
/// `StorageFull` (not hang, not another error), everything acknowledged
/// reads back, and the reader never fails while the cache has clean folios
/// of its own to reuse... until the memfile takes them all, when it may.
#[test]
fn writers_filling_a_memfile_stop_with_storage_full_and_keep_what_they_wrote() {
    let other = wcommon::nonzero_bytes(512 * KIB, 90);
    let tmp = TempPath::with_data("memfull-other", &other);
    let c = TestCache::bytes(1024 * KIB).max_folio(16 * KIB).build();
    let m = c.memfile("full", 0).unwrap();
    let g = c.open(&tmp.path).unwrap();
    let results = wcommon::within(HANG, "filling a memfile from two threads", move || {
        let writers: Vec<_> = (0..2u64)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    let chunk = wcommon::nonzero_bytes(16 * KIB, 91 + t);
                    let mut acked = 0u64;
                    loop {
                        let off = t * (4 << 20) + acked * chunk.len() as u64;
                        match m.write_at(&chunk, off) {
                            Ok(n) => {
                                assert_eq!(n, chunk.len());
                                acked += 1;
                            }
                            Err(e) => return (acked, e.kind(), e.to_string()),
                        }
                    }
                })
            })
            .collect();
        let mut buf = vec![0u8; 64 * KIB];
        // (Once the memfile holds the whole cache, a read waits for a
        // folio and then fails: a few reads are enough.)
        for i in 0..8u64 {
            let off = (i * 48 * KIB as u64) % other.len() as u64;
            if let Ok(n) = g.read_at(&mut buf, off) {
                assert_eq!(&buf[..n], &other[off as usize..off as usize + n]);
            }
        }
        let r: Vec<_> = writers.into_iter().map(|h| h.join().unwrap()).collect();
        (r, m)
    });
    let (results, m) = results;
    let mut total = 0;
    for (t, (acked, kind, msg)) in results.iter().enumerate() {
        assert_eq!(*kind, std::io::ErrorKind::StorageFull, "writer {t}: {msg}");
        let chunk = wcommon::nonzero_bytes(16 * KIB, 91 + t as u64);
        for i in 0..*acked {
            let off = t as u64 * (4 << 20) + i * chunk.len() as u64;
            assert_eq!(
                wcommon::read_vec(&m, off, chunk.len()).unwrap(),
                chunk,
                "writer {t}, chunk {i}"
            );
        }
        total += acked * 16 * KIB as u64;
    }
    assert!(
        total >= 512 * KIB as u64,
        "only {total} bytes fit in a 1 MiB cache"
    );
    assert!(total <= 1024 * KIB as u64, "{total} bytes in a 1 MiB cache");
}
