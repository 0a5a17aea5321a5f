//! `CachedFile::read_with` of a `File`: the bytes a read would return, in place when the
//! range lies in one cached folio (and counted as a hit), through a buffer
//! otherwise; a writer of the folio meanwhile neither waits nor changes
//! the caller's bytes.

use backing::MemBacking;
use foliocache::CachedFile;
use test_support::cache::TestCache;

fn data(n: usize) -> Vec<u8> {
    (0..n as u32).map(|i| (i * 13 + 5) as u8).collect()
}

#[test]
fn gives_what_read_at_gives_in_place_or_not() {
    let c = TestCache::bytes(8 << 20).build();
    let d = data(3 << 20);
    let f = c.open_backing(MemBacking::with_data(d.clone())).unwrap();
    // First: a miss, read through the buffer.
    let got = f.read_with(1000, 70_000, |b| b.to_vec()).unwrap();
    assert_eq!(got, &d[1000..71_000]);
    // Cached now: in place, a hit.
    let hits = c.stats().hits;
    let got = f.read_with(5000, 4096, |b| b.to_vec()).unwrap();
    assert_eq!(got, &d[5000..9096]);
    assert_eq!(c.stats().hits, hits + 1);
    // Across the whole file, and past its end.
    let got = f.read_with(0, 4 << 20, |b| b.to_vec()).unwrap();
    assert!(got == d);
    assert_eq!(f.read_with((3 << 20) - 5, 100, |b| b.len()).unwrap(), 5);
    assert_eq!(f.read_with(3 << 20, 100, |b| b.len()).unwrap(), 0);
    // Nested: the inner call gets its own buffer.
    let got = f
        .read_with(0, 3 << 20, |outer| {
            let inner = f.read_with(0, 3 << 20, |b| b.to_vec()).unwrap();
            (outer.to_vec(), inner)
        })
        .unwrap();
    assert!(got.0 == d && got.1 == d);
}

#[test]
fn a_writer_of_the_folio_neither_waits_nor_changes_the_readers_bytes() {
    let c = TestCache::bytes(8 << 20).build();
    let f = c
        .open_backing(MemBacking::with_data(vec![1u8; 1 << 20]))
        .unwrap();
    f.read_with(0, 4096, |_| ()).unwrap(); // cached
    let in_place = c.stats().hits;
    let bytes = f
        .read_with(0, 4096, |b| {
            // The write finishes while `b` lives (were it to wait for the
            // reader, this would never return).
            let f2 = f.clone();
            std::thread::spawn(move || f2.write_at(&[2u8; 10], 0).unwrap())
                .join()
                .unwrap();
            // This thread writes the file too.
            f.write_at(&[3u8; 10], 100).unwrap();
            b[..110].to_vec()
        })
        .unwrap();
    assert_eq!(c.stats().hits, in_place + 1, "served in place, as a hit");
    assert_eq!(bytes, vec![1u8; 110], "the reader's bytes changed under it");
    let mut now = [0u8; 110];
    f.read_at(&mut now, 0).unwrap();
    assert_eq!(&now[..10], &[2u8; 10]);
    assert_eq!(&now[100..], &[3u8; 10]);
    assert_eq!(c.stats().pin_copies, 1, "the writer copied the folio once");
}

#[test]
fn readahead_windows_are_counted() {
    let c = TestCache::bytes(8 << 20).build();
    let f = c
        .open_backing(MemBacking::with_data(data(2 << 20)))
        .unwrap();
    assert_eq!(c.stats().readahead_windows, 0);
    let mut buf = vec![0u8; 4096];
    for off in (0..(2u64 << 20)).step_by(4096) {
        f.read_at(&mut buf, off).unwrap();
    }
    c.wait_io_idle();
    let w = c.stats().readahead_windows;
    assert!(
        w >= 2,
        "a sequential stream builds a first window and more: {w}"
    );
}
