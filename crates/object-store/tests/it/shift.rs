//! Shifting ranges: a job whose reads move by a few bytes each pass (a
//! file rewritten with a longer header, a reader that aligns differently
//! each run) still hits. A cache keyed by exact range never hits again;
//! one keyed by page serves every byte the first pass brought in.

use object_store::path::Path;
use object_store::ObjectStoreExt;

use crate::{data, store};

/// Pass one reads an object in 64 KiB ranges; pass two reads ranges of the
/// same length, each moved by 1 to 4095 bytes: every byte comes from the
/// cache (no miss, so at least 99 % of the bytes), and no GET is sent.
#[tokio::test]
async fn ranges_moved_by_less_than_a_page_still_hit() {
    const SIZE: u64 = 4 << 20;
    const LEN: u64 = 64 << 10;
    let (s, seen) = store(16 << 20);
    let p = Path::from("shift/object");
    let d = data(SIZE as usize, 90);
    s.inner().inner.put(&p, d.clone().into()).await.unwrap();
    for at in (0..SIZE).step_by(LEN as usize) {
        s.get_range(&p, at..at + LEN).await.unwrap();
    }
    let (gets, misses, hits) = (seen.gets(), s.stats().misses, s.stats().hits);
    let mut bytes = 0;
    for (k, at) in (0..SIZE - LEN).step_by(LEN as usize).enumerate() {
        // 1 to 4095, a different shift each read.
        let shift = 1 + (k as u64 * 2_654_435_761) % 4095;
        let r = at + shift..at + shift + LEN;
        let got = s.get_range(&p, r.clone()).await.unwrap();
        assert_eq!(&got[..], &d[r.start as usize..r.end as usize], "{r:?}");
        bytes += got.len() as u64;
    }
    let st = s.stats();
    assert_eq!(seen.gets(), gets, "GETs in the second pass");
    assert_eq!(
        st.misses, misses,
        "reads that missed: none of {bytes} bytes"
    );
    assert_eq!(st.hits - hits, (SIZE / LEN - 1), "every read a hit");
}
