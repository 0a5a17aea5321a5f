//! Regression (found by the `file_ops` fuzzer, crates/fuzz): a write past
//! the end of the file that failed before writing anything still extended
//! the file, to the write's offset.
//!
//! Input, minimized by hand: a 5000-byte file over a fault-injecting memory
//! backing, reads of its second block failing (EIO), and a write of 10
//! bytes at offset 6000: past the end, but in the folio that holds the end.
//!
//! What went wrong: the write returned EIO, as it should (that folio is
//! partly the file's, so it is read first, and the read failed), but the
//! file's size was then 6000: the bytes 5000..6000 appeared, zeros or
//! whatever the backing held past its end, from a write that wrote nothing.
//! `write_range` extends the size to `pos`, the end of what a piece wrote,
//! and `pos` starts at the write's offset; when the first folio of the
//! first piece failed, nothing was written but `pos` (the offset) was still
//! past the size. `write_at` promises that on an error only the folios
//! before the failing one may have been written and the file extended to
//! their end.
//!
//! The fix: `write_range` extends the size only when the piece wrote a
//! folio.

use std::sync::Arc;

use backing::{FaultyBacking, MemBacking};
use test_support::cache::TestCache;

#[test]
fn a_failed_write_past_the_end_that_wrote_nothing_keeps_the_size() {
    let cache = TestCache::bytes(1 << 20).max_folio(4096).build();
    let data = vec![0x5Au8; 5000];
    let b = Arc::new(FaultyBacking::new(MemBacking::with_data(data.clone())));
    let f = cache.open_backing(b.clone()).unwrap();
    b.fail_reads_in(4096, 4096, libc::EIO);
    let e = f.write_at(&[1u8; 10], 6000).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "the read error: {e}");
    assert_eq!(
        f.len(),
        5000,
        "the failed write wrote nothing: the size is kept"
    );
    b.clear();
    let mut buf = vec![0u8; 8192];
    let n = f.read_at(&mut buf, 0).unwrap();
    assert_eq!(n, 5000, "the file reads to its old end");
    assert!(buf[..n] == data[..], "and holds its old bytes");
    f.sync_data().unwrap();
    assert_eq!(b.inner().contents().unwrap().len(), 5000, "the backing too");
}
