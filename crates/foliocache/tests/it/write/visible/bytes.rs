//! What a write puts where: every byte it writes reads back through the
//! cache at once, and reaches the backing after a sync, whatever the
//! folios around it hold (new, cached, partly written: a partial-folio
//! write reads the rest of the folio first), one folio at a time or in
//! runs, through `std::os::unix::fs::FileExt` as through the cache's own
//! calls, and over a backing that refuses `O_DIRECT`.
//!
//! Files are real files on the target's filesystem, checked with `std::fs`
//! after a sync.

use crate::common::write as wcommon;
use test_support::cache::TestCache;
use test_support::TempPath;
use wcommon::{assert_same, disk, nonzero_bytes, open_rw, read_all, read_vec, Model, P, PAGE};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

#[test]
fn write_read_sync_reaches_the_file() {
    let c = TestCache::bytes(8 << 20).build();
    let p = TempPath::new("write-read-sync");
    let f = open_rw(&c, &p.path);
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + 3) as u8).collect();
    assert_eq!(f.write_at(&data, 12345).unwrap(), data.len());
    assert_eq!(f.len(), 12345 + data.len() as u64);
    let mut back = vec![1u8; data.len() + 12345];
    assert_eq!(f.read_at(&mut back, 0).unwrap(), back.len());
    assert!(back[..12345].iter().all(|&b| b == 0));
    assert_eq!(&back[12345..], &data[..]);
    assert!(c.stats().dirty_bytes > 0);
    f.sync_all().unwrap();
    assert_eq!(c.stats().dirty_bytes, 0);
    let disk = std::fs::read(&p).unwrap();
    assert_eq!(disk.len(), back.len());
    assert_eq!(disk, back);
}

#[test]
fn a_write_across_new_and_cached_small_folios_lands_every_byte_in_place() {
    // A write's copy is one per run of folios adjacent in the arena: new
    // folios of one batch are, cached ones scattered among them are not
    // (every third page read first, so the batch's folios fill the gaps
    // around them). Offsets inside pages at both ends, and a piece longer
    // than the cache's piece size, check the runs' edges.
    for max_folio in [PAGE, 16 * KIB] {
        let data = nonzero_bytes(3 * MIB, 7);
        let tmp = TempPath::with_data("runs", &data);
        let c = TestCache::bytes(8 * MIB)
            .max_folio(max_folio)
            .no_readahead()
            .build();
        let f = open_rw(&c, &tmp.path);
        let mut model = Model { data };
        for page in (0..model.data.len() / PAGE).step_by(3) {
            let off = (page * PAGE) as u64;
            assert_same(
                "caching read",
                &read_vec(&f, off, 1).unwrap(),
                model.read(off, 1),
            );
        }
        for (off, len) in [(100, 2 * MIB + 5000), (PAGE as u64 * 7 + 1, 300 * KIB)] {
            let buf = nonzero_bytes(len, off ^ 0x5a);
            f.write_all_at(&buf, off).unwrap();
            model.write(off, &buf);
            assert_same("read after the write", &read_all(&f), &model.data);
        }
        f.sync_all().unwrap();
        assert_same("the file after sync", &disk(&tmp.path), &model.data);
    }
}

#[test]
fn a_partial_folio_write_reads_the_rest_of_the_folio_first() {
    for max_folio in [PAGE, 64 * KIB] {
        let data = nonzero_bytes(256 * KIB, 1);
        let tmp = TempPath::with_data("partial", &data);
        let c = TestCache::bytes(4 * MIB)
            .max_folio(max_folio)
            .no_readahead()
            .build();
        let f = open_rw(&c, &tmp.path);
        let mut model = Model { data };
        // 10 bytes in the middle of an uncached page of a large folio's range.
        let off = 64 * KIB as u64 + 5 * P + 1000;
        f.write_all_at(b"0123456789", off).unwrap();
        model.write(off, b"0123456789");
        let what = format!("max folio {max_folio}");
        // The whole page and the whole (large) folio around it.
        let page = off / P * P;
        assert_same(
            &format!("{what}: the page written in"),
            &read_vec(&f, page, PAGE).unwrap(),
            model.read(page, PAGE),
        );
        let fstart = off / max_folio as u64 * max_folio as u64;
        assert_same(
            &format!("{what}: the folio written in"),
            &read_vec(&f, fstart, max_folio).unwrap(),
            model.read(fstart, max_folio),
        );
        f.sync_data().unwrap();
        assert_same(
            &format!("{what}: on disk after sync"),
            &disk(&tmp.path),
            &model.data,
        );
        // Evicted and read again from disk.
        c.shrink(u64::MAX);
        assert_same(
            &format!("{what}: after eviction"),
            &read_all(&f),
            &model.data,
        );
    }
}

#[test]
fn one_folio_at_a_time_writes_the_same_bytes() {
    let c = TestCache::bytes(8 << 20).max_folio(64 << 10).build();
    let m = c.memfile("single", 0).unwrap();
    m.set_write_insert(foliocache::internals::Insert::Single);
    assert_eq!(m.write_insert(), foliocache::internals::Insert::Single);
    let data: Vec<u8> = (0..(1u32 << 20) + 333).map(|i| (i % 251) as u8).collect();
    m.write_all_at(&data, 4096 + 17).unwrap();
    let mut back = vec![1u8; data.len()];
    m.read_exact_at(&mut back, 4096 + 17).unwrap();
    assert!(back == data);
    m.set_write_insert(foliocache::internals::Insert::Batched);
    assert_eq!(m.write_insert(), foliocache::internals::Insert::Batched);
    assert_eq!(m.default_flags(), foliocache::ReadFlags::NONE);
}

/// Code written against `std::os::unix::fs::FileExt` (as for a
/// `std::fs::File`) runs on a cached file unchanged.
#[test]
fn file_ext_reads_and_writes_through_the_cache() {
    use std::os::unix::fs::FileExt;
    fn roundtrip(f: &impl FileExt) -> std::io::Result<Vec<u8>> {
        f.write_all_at(b"through FileExt", 5000)?;
        let mut back = vec![0u8; 15];
        f.read_exact_at(&mut back, 5000)?;
        Ok(back)
    }
    let c = TestCache::bytes(4 << 20).build();
    let path = TempPath::new("file-ext");
    let f = open_rw(&c, &path.path);
    assert_eq!(roundtrip(&f).unwrap(), b"through FileExt");
    f.sync_all().unwrap();
    drop(f);
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(&on_disk[5000..5015], b"through FileExt");
    assert!(on_disk[..5000].iter().all(|&b| b == 0));
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn writes_through_a_buffered_fallback_backing_reach_the_file() {
    // Where a filesystem refuses O_DIRECT the backing falls back to
    // buffered IO; forced here, the write path must give the same file.
    use backing::{FileBacking, FileOptions};
    let old = nonzero_bytes(100_000, 42);
    let tmp = TempPath::with_data("buffered", &old);
    let inner = FileBacking::open(
        &tmp.path,
        &FileOptions::new()
            .read(true)
            .write(true)
            .force_buffered(true),
    )
    .unwrap();
    assert!(!inner.is_direct());
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    let f = c.open_backing(inner).unwrap();
    let mut model = Model { data: old };
    let a = nonzero_bytes(70_001, 43);
    f.write_all_at(&a, 12_345).unwrap();
    model.write(12_345, &a);
    f.write_all_at(b"end", 150_000).unwrap();
    model.write(150_000, b"end");
    f.punch_hole(20_000, 30_000).unwrap();
    model.punch(20_000, 30_000);
    f.sync_data().unwrap();
    assert_same("buffered backing after sync", &disk(&tmp.path), &model.data);
    f.set_len(99_999).unwrap();
    model.set_len(99_999);
    f.sync_all().unwrap();
    assert_same("after set_len", &disk(&tmp.path), &model.data);
    c.shrink(u64::MAX);
    assert_same("read back", &read_all(&f), &model.data);
}
