//! Regression: a read racing a truncate returned zeros as data.
//!
//! Found by the memory audit (tests/memory_audit.rs, "truncate/delete
//! under reads"): a reader of a file being cut in halves got 0x00 at
//! offset 20 MiB of a file just cut from 32 to 16 MiB, where the data's
//! pattern was expected.
//!
//! Why: `File::read_at` read the file's size once, at its start, and
//! copied out up to it. A truncate cuts the backing, sets the new size and
//! drops the folios past it, holding `invalidate_lock`; a reader's miss
//! waits for that lock to create its folio, and then fills the folio from
//! the backing, already cut: zeros past the new end (a short read at end
//! of file is zero-filled). With the old size in hand, the reader copied
//! those zeros out as if they were the file's bytes. The kernel's
//! `filemap_read` reads `i_size` again once its folios are uptodate, for
//! this reason.
//!
//! The fix: the read loop reads the size again after each batch of
//! folios is uptodate and stops at it. A read racing a truncate now
//! returns the old bytes (it ran before) or stops at the new end (after),
//! never zeros in between.
//!
//! The race made deterministic: 4 KiB folios, no readahead, so a read of
//! four pages creates them one at a time; the first page's backing read
//! is slowed down, and the truncate to one page starts meanwhile. It
//! waits for the reader's `invalidate_lock`, then holds it while the
//! reader wants it for page 1; so page 1 is created after the cut.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use backing::{FaultyBacking, MemBacking};

use test_support::cache::TestCache;

const PAGE: usize = 4096;

#[test]
fn a_read_racing_a_truncate_stops_at_the_new_end_and_returns_no_zeros() {
    for round in 0..3 {
        let data: Vec<u8> = (0..4 * PAGE).map(|i| (i % 251) as u8 + 1).collect();
        let b = Arc::new(FaultyBacking::new(MemBacking::with_data(data.clone())));
        let cache = TestCache::bytes(1 << 20)
            .max_folio(PAGE)
            .no_readahead()
            .build();
        let f = cache.open_backing(b.clone()).unwrap();
        b.set_read_latency(Duration::from_millis(300));
        let reader = {
            let f = f.clone();
            thread::spawn(move || {
                let mut buf = vec![0u8; 4 * PAGE];
                let n = f.read_at(&mut buf, 0).unwrap();
                buf.truncate(n);
                buf
            })
        };
        // The reader is in its first page's backing read by now.
        thread::sleep(Duration::from_millis(100));
        f.set_len(PAGE as u64).unwrap();
        b.set_read_latency(Duration::ZERO);
        let got = reader.join().unwrap();
        assert!(
            got.len() == PAGE || got.len() == 4 * PAGE,
            "round {round}: read {} bytes: neither all of the old file nor up to the new end",
            got.len()
        );
        if let Some(i) = (0..got.len()).find(|&i| got[i] != data[i]) {
            panic!(
                "round {round}: byte {i} of the read is {:#04x}, the file's was {:#04x} \
                 (the read returned {} bytes)",
                got[i],
                data[i],
                got.len()
            );
        }
        assert_eq!(f.len(), PAGE as u64);
    }
}
