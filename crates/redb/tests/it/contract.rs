//! The `StorageBackend` contract, method by method, over a memory file and
//! over a real file.

use foliocache_redb::FolioBackend;
use redb::StorageBackend;
use test_support::cache::{open_rw, TestCache};
use test_support::{nonzero_bytes, TempPath};

const MIB: usize = 1 << 20;

fn mem_backend(cache: &foliocache::Cache, len: u64) -> FolioBackend {
    FolioBackend::from_file(cache.memfile("redb", len).expect("a memory file"))
}

#[test]
fn read_past_the_end_fails() {
    let c = TestCache::bytes(MIB).build();
    let b = mem_backend(&c, 0);
    b.write(0, &[7u8; 100]).unwrap();
    let mut buf = [0u8; 10];
    let e = b.read(95, &mut buf).expect_err("a read crossing the end");
    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    assert!(b.read(100, &mut buf).is_err(), "a read at the end");
    assert!(
        b.read(u64::MAX - 3, &mut buf).is_err(),
        "an offset that overflows"
    );
    b.read(90, &mut buf).expect("a read that ends at the end");
    assert_eq!(buf, [7u8; 10]);
}

#[test]
fn set_len_growth_reads_as_zeros() {
    let c = TestCache::bytes(MIB).build();
    let b = mem_backend(&c, 0);
    b.write(0, &[0xAB; 5000]).unwrap();
    // Shrink into the written data, then grow past it: the cut part must
    // read as zeros, not as the old bytes still in the cached folio.
    b.set_len(3000).unwrap();
    b.set_len(64 << 10).unwrap();
    assert_eq!(b.len().unwrap(), 64 << 10);
    let mut buf = vec![1u8; 64 << 10];
    b.read(0, &mut buf).unwrap();
    assert!(buf[..3000].iter().all(|&x| x == 0xAB), "kept bytes");
    assert!(buf[3000..].iter().all(|&x| x == 0), "grown bytes are zeros");
}

#[test]
fn writes_past_the_end_extend_the_length() {
    let c = TestCache::bytes(MIB).build();
    let b = mem_backend(&c, 4096);
    b.write(10_000, b"tail").unwrap();
    assert_eq!(b.len().unwrap(), 10_004);
    let mut buf = [1u8; 8];
    b.read(9_996, &mut buf).unwrap();
    assert_eq!(&buf, b"\0\0\0\0tail");
}

#[test]
fn sync_after_set_len_is_durable_and_reopen_sees_the_data() {
    let tmp = TempPath::new("redb-contract");
    let want = nonzero_bytes(3 * MIB / 2 + 17, 5);
    {
        let c = TestCache::bytes(MIB).build();
        let b = FolioBackend::open(&c, &tmp.path).unwrap();
        b.set_len(2 * MIB as u64).unwrap();
        b.write(0, &want).unwrap();
        b.set_len(want.len() as u64).unwrap();
        b.sync_data().unwrap();
        // On the disk now, whatever the cache does later.
        let disk = std::fs::read(&tmp.path).unwrap();
        assert_eq!(disk.len(), want.len(), "the synced length");
        assert!(disk == want, "the synced bytes");
        b.close().unwrap();
    }
    let c = TestCache::bytes(MIB).build();
    let b = FolioBackend::open(&c, &tmp.path).unwrap();
    assert_eq!(b.len().unwrap(), want.len() as u64);
    let mut got = vec![0u8; want.len()];
    b.read(0, &mut got).unwrap();
    assert!(got == want, "the reopened bytes");
}

#[test]
fn a_read_only_file_refuses_writes_with_an_error() {
    let tmp = TempPath::with_data("redb-ro", &[1u8; 4096]);
    let c = TestCache::bytes(MIB).build();
    let b = FolioBackend::from_file(c.open(&tmp.path).unwrap());
    assert!(b.write(0, b"x").is_err(), "write through a read-only file");
    assert!(b.set_len(0).is_err(), "set_len through a read-only file");
    let mut buf = [0u8; 4];
    b.read(0, &mut buf).unwrap();
    assert_eq!(buf, [1u8; 4]);
    // A writable one over the same path works.
    let w = FolioBackend::from_file(open_rw(&c, &tmp.path));
    w.write(0, b"abcd").unwrap();
}
