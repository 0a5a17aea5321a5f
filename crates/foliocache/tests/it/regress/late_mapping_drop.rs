//! Regression (found by the crash harness, `crash::random`, in a run of
//! 2,000,000 crash states): a closed file's size came back and cut or
//! grew the file after it was opened again.
//!
//! Input, minimized by hand: a file of 2 blocks over a memory backing
//! whose reads are slow; an explicit readahead, then the last handle
//! dropped while the readahead's read is in flight; the backing opened
//! again, a write to 6 blocks, `sync_data`; the readahead's read ends.
//!
//! What went wrong: the backing was 2 blocks long again, the 4 blocks the
//! sync had acknowledged cut off. An asynchronous read holds its mapping
//! until it completes; the last handle's close had written the file back
//! and set the backing's size, and when the read let go of the mapping,
//! its drop ran the close again (`close_handle`, kept for a mapping the
//! cache held because its writeback failed) and set the backing's size to
//! the closed file's, over what the new open had made of the file since.
//!
//! The fix: the last handle's close notes that it wrote everything back
//! and set the size (`Mapping::closed_clean`); the mapping's drop then
//! leaves the backing alone.

use std::sync::Arc;
use std::time::Duration;

use backing::{Backing, FaultyBacking, MemBacking};
use test_support::cache::TestCache;

const B: usize = 4096;

#[test]
fn a_read_in_flight_at_close_does_not_reset_the_size_of_a_reopened_file() {
    let cache = TestCache::bytes(1 << 20).build();
    let backing = Arc::new(FaultyBacking::new(MemBacking::with_data(vec![1; 2 * B])));
    let f = cache.open_backing(backing.clone()).unwrap();
    backing.set_read_latency(Duration::from_millis(300));
    f.readahead(0, 2 * B as u64).unwrap();
    drop(f);
    backing.set_read_latency(Duration::ZERO);

    let g = cache.open_backing(backing.clone()).unwrap();
    g.write_all_at(&[7; B], 5 * B as u64).unwrap();
    g.sync_data().unwrap();
    assert_eq!(backing.len().unwrap(), 6 * B as u64);
    // The readahead's read ends, and its mapping goes.
    std::thread::sleep(Duration::from_millis(600));
    cache.wait_io_idle();
    assert_eq!(
        backing.len().unwrap(),
        6 * B as u64,
        "the size the sync acknowledged"
    );
    let data = backing.inner().contents().unwrap();
    assert_eq!(&data[5 * B..], &[7; B][..]);
}
