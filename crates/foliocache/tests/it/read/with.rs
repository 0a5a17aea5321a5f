//! `File::read_with`: the bytes a read would return, in place when the
//! range lies in one cached folio (and counted as a hit), through a buffer
//! otherwise; a writer of the folio waits until the caller is done.

// The tests drive and count their own threads with std atomics and locks;
// the shim rule (clippy.toml) is for the crate's protocols.
#![allow(clippy::disallowed_types)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use backing::MemBacking;
use foliocache::Cache;

fn data(n: usize) -> Vec<u8> {
    (0..n as u32).map(|i| (i * 13 + 5) as u8).collect()
}

#[test]
fn gives_what_read_at_gives_in_place_or_not() {
    let c = Cache::builder().capacity(8 << 20).build().unwrap();
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
fn a_writer_of_the_folio_waits_for_the_reader() {
    let c = Cache::builder().capacity(8 << 20).build().unwrap();
    let f = c
        .open_backing(MemBacking::with_data(vec![1u8; 1 << 20]))
        .unwrap();
    f.read_with(0, 4096, |_| ()).unwrap(); // cached
    let wrote = Arc::new(AtomicBool::new(false));
    let seen = f
        .read_with(0, 4096, |b| {
            let (f2, w) = (f.clone(), wrote.clone());
            let t = std::thread::spawn(move || {
                f2.write_at(&[2u8; 10], 0).unwrap();
                w.store(true, Ordering::SeqCst);
            });
            std::thread::sleep(Duration::from_millis(50));
            let during = wrote.load(Ordering::SeqCst);
            let bytes = b[..10].to_vec();
            (t, during, bytes)
        })
        .unwrap();
    let (t, during, bytes) = seen;
    t.join().unwrap();
    assert!(!during, "the write went into a folio the reader held");
    assert_eq!(bytes, vec![1u8; 10]);
    let mut now = [0u8; 10];
    f.read_at(&mut now, 0).unwrap();
    assert_eq!(now, [2u8; 10]);
}

#[test]
fn readahead_windows_are_counted() {
    let c = Cache::builder().capacity(8 << 20).build().unwrap();
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
