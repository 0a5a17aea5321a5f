//! Smoke tests of the write path: what every later suite builds on. Each
//! checks the bytes, through the cache and on the backing file.

use foliocache::{Cache, WriteFlags};
use test_support::cache::TestCache;

fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("fc-wsmoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// `path` created (or emptied) and opened for reading and writing.
fn create(c: &Cache, path: &std::path::Path) -> foliocache::File {
    c.open_options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap()
}

#[test]
fn write_read_sync_reaches_the_file() {
    let c = TestCache::new().capacity(8 << 20).build();
    let p = tmp("a");
    let f = create(&c, &p);
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
fn partial_write_reads_the_rest_and_shrink_zeroes() {
    let c = TestCache::new().capacity(8 << 20).build();
    let p = tmp("b");
    std::fs::write(&p, vec![b'x'; 20000]).unwrap();
    let f = c.open_options().read(true).write(true).open(&p).unwrap();
    f.write_at(b"hello", 5000).unwrap();
    f.set_len(5002).unwrap();
    f.set_len(9000).unwrap();
    let mut back = vec![0u8; 9000];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back[..5000].iter().all(|&b| b == b'x'));
    assert_eq!(&back[5000..5002], b"he");
    assert!(
        back[5002..].iter().all(|&b| b == 0),
        "stale bytes past the old end"
    );
    f.sync_data().unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), back);
}

#[test]
fn punch_hole_zeroes_exactly() {
    let c = TestCache::new().capacity(8 << 20).build();
    let p = tmp("c");
    std::fs::write(&p, vec![b'y'; 40000]).unwrap();
    let f = c.open_options().read(true).write(true).open(&p).unwrap();
    f.punch_hole(1000, 20000).unwrap();
    let mut back = vec![0u8; 40000];
    f.read_exact_at(&mut back, 0).unwrap();
    let mut want = vec![b'y'; 40000];
    want[1000..21000].fill(0);
    assert_eq!(back, want);
    f.sync_all().unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), want);
}

#[test]
fn memfile_holes_and_data() {
    let c = TestCache::new().capacity(4 << 20).build();
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
fn dontcache_write_leaves_nothing_new() {
    let c = TestCache::new().capacity(8 << 20).build();
    let p = tmp("d");
    let f = create(&c, &p);
    f.write_at_flags(&[5u8; 1 << 20], 0, WriteFlags::DONTCACHE)
        .unwrap();
    assert_eq!(f.cachestat(0, 0).unwrap().cached, 0);
    assert_eq!(std::fs::read(&p).unwrap(), vec![5u8; 1 << 20]);
}

#[test]
fn every_open_of_a_file_shares_one_mapping() {
    let c = TestCache::new().capacity(8 << 20).build();
    let p = tmp("e");
    std::fs::write(&p, vec![b'a'; 10000]).unwrap();
    // Read-only first: its folios are cached.
    let r = c.open(&p).unwrap();
    let mut back = vec![0u8; 10000];
    r.read_exact_at(&mut back, 0).unwrap();
    // A writable open of the same file: the reader sees its writes, and
    // the writes reach the file through the writable descriptor.
    let w = c.open_options().read(true).write(true).open(&p).unwrap();
    w.write_at(b"zz", 100).unwrap();
    r.read_exact_at(&mut back, 0).unwrap();
    assert_eq!(&back[99..103], b"azza");
    assert_eq!(r.len(), 10000);
    w.sync_data().unwrap();
    assert_eq!(&std::fs::read(&p).unwrap()[99..103], b"azza");
    // An O_TRUNC open empties the shared cache too.
    let t = c
        .open_options()
        .write(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    assert_eq!(r.len(), 0);
    assert_eq!(r.read_at(&mut back, 0).unwrap(), 0);
    t.write_at(b"new", 0).unwrap();
    drop((t, w));
    // The last writable handle is gone, the data is not.
    let mut three = [0u8; 3];
    r.read_exact_at(&mut three, 0).unwrap();
    assert_eq!(&three, b"new");
    c.sync_all().unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"new");
}

#[test]
fn a_write_larger_than_the_cache_is_throttled_not_failed() {
    let c = TestCache::new()
        .capacity(8 << 20)
        .dirty_limit(2 << 20)
        .build();
    let p = tmp("f");
    let f = create(&c, &p);
    let data: Vec<u8> = (0..(40u32 << 20))
        .map(|i| (i >> 12) as u8 ^ i as u8)
        .collect();
    f.write_all_at(&data, 0).unwrap();
    let s = c.stats();
    assert!(s.throttled > 0, "{s:?}");
    // The limit plus one piece of the write at most.
    assert!(
        s.dirty_bytes <= (2 << 20) + 4 * foliocache::internals::WRITE_CHUNK_PAGES * 4096,
        "{s:?}"
    );
    f.sync_all().unwrap();
    assert!(std::fs::read(&p).unwrap() == data);
}

#[test]
fn one_folio_at_a_time_writes_the_same_bytes() {
    let c = TestCache::new()
        .capacity(8 << 20)
        .max_folio(64 << 10)
        .build();
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

#[test]
fn a_large_folio_written_in_two_places_writes_back_only_those_pages() {
    let c = TestCache::new().capacity(16 << 20).build();
    let p = tmp("g");
    std::fs::write(&p, vec![b'q'; 4 << 20]).unwrap();
    let f = c.open_options().read(true).write(true).open(&p).unwrap();
    // Cached in large folios by a read.
    let mut all = vec![0u8; 4 << 20];
    f.read_exact_at(&mut all, 0).unwrap();
    let before = c.stats();
    f.write_at(b"hello", 100_000).unwrap(); // page 24
    f.write_at(&[b'w'; 8192], 1 << 20).unwrap(); // pages 256..258
    f.write_at(b"!", (1 << 20) + 8192).unwrap(); // page 258: joins them
    f.sync_data().unwrap();
    let s = c.stats();
    assert_eq!(s.io_write_bytes - before.io_write_bytes, 4 * 4096, "{s:?}");
    assert_eq!(
        s.io_writes - before.io_writes,
        2,
        "two runs of dirty pages: {s:?}"
    );
    let disk = std::fs::read(&p).unwrap();
    let mut want = vec![b'q'; 4 << 20];
    want[100_000..100_005].copy_from_slice(b"hello");
    want[1 << 20..(1 << 20) + 8192].fill(b'w');
    want[(1 << 20) + 8192] = b'!';
    assert!(disk == want);
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
    let c = TestCache::new().capacity(4 << 20).build();
    let path = tmp("file_ext");
    let f = create(&c, &path);
    assert_eq!(roundtrip(&f).unwrap(), b"through FileExt");
    f.sync_all().unwrap();
    drop(f);
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(&on_disk[5000..5015], b"through FileExt");
    assert!(on_disk[..5000].iter().all(|&b| b == 0));
    std::fs::remove_file(&path).unwrap();
}
