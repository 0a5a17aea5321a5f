//! Hits lent, not copied: a cached range in one folio is answered with a
//! `Bytes` over the folio itself (an owned pin, `File::pin_cached_owned`),
//! so two hits of one range share their memory. The bytes are a snapshot:
//! a `put` of the object while a hit's `Bytes` is held, eviction under
//! pressure and the store's drop leave them as they were; the cache lends
//! at most a quarter of itself, copies past that, and goes on missing.

use object_store::path::Path;
use object_store::ObjectStoreExt;

use crate::{data, expect, put, store};

/// Whether two answers share their memory (both lent from one folio).
fn same_memory(a: &[u8], b: &[u8]) -> bool {
    a.as_ptr() == b.as_ptr()
}

#[tokio::test]
async fn a_held_hit_keeps_its_bytes_through_a_put_eviction_and_the_drop() {
    let (s, seen) = store(4 << 20);
    let p = Path::from("lent/a");
    let old = data(256 << 10, 1);
    put(&s, &p, old.clone()).await;
    s.get_range(&p, 0..65_536).await.unwrap(); // a miss brings it in
    let held = s.get_range(&p, 4096..8192).await.unwrap();
    let again = s.get_range(&p, 4096..8192).await.unwrap();
    assert_eq!(&held[..], &old[4096..8192]);
    assert!(same_memory(&held, &again), "a hit is lent, not copied");
    drop(again);

    // A write of the object while the hit is held: later reads see the new
    // version, the held bytes stay the old.
    let new = data(256 << 10, 2);
    put(&s, &p, new.clone()).await;
    expect(&s, &p, 4096..8192, &new[4096..8192]).await;
    assert_eq!(&held[..], &old[4096..8192], "the held hit is a snapshot");

    // Pressure: an object of four times the cache read through twice while
    // a hit of the new version is held. Reclaim skips its folio: the same
    // range is lent again from the same memory afterwards.
    s.get_range(&p, 8192..12_288).await.unwrap(); // a miss
    let kept = s.get_range(&p, 8192..12_288).await.unwrap();
    let big = Path::from("lent/big");
    let d = data(16 << 20, 3);
    put(&s, &big, d.clone()).await;
    for _ in 0..2 {
        for at in (0..d.len() as u64).step_by(1 << 20) {
            expect(&s, &big, at..at + (1 << 20), &d[at as usize..][..1 << 20]).await;
        }
    }
    assert_eq!(&kept[..], &new[8192..12_288]);
    let gets = seen.gets();
    let after = s.get_range(&p, 8192..12_288).await.unwrap();
    assert!(same_memory(&kept, &after), "the held folio was not evicted");
    assert_eq!(seen.gets(), gets, "and is still a hit");

    // The store (and with it the cache) goes: the bytes stay valid.
    drop(s);
    assert_eq!(&held[..], &old[4096..8192]);
    assert_eq!(&kept[..], &new[8192..12_288]);
    assert_eq!(&after[..], &new[8192..12_288]);
}

#[tokio::test]
async fn held_hits_past_a_quarter_of_the_cache_are_copies_and_misses_go_on() {
    const CACHE: usize = 1 << 20;
    let (s, _) = store(CACHE);
    let p = Path::from("lent/pages");
    let d = data(4 << 20, 4);
    put(&s, &p, d.clone()).await;
    // Every other page (no stream: its misses read one page each), each
    // brought in by a miss, then held from a hit.
    let mut held = Vec::new();
    let mut lent = 0;
    for i in 0..128u64 {
        let r = i * 8192..i * 8192 + 4096;
        s.get_range(&p, r.clone()).await.unwrap();
        let a = s.get_range(&p, r.clone()).await.unwrap();
        let b = s.get_range(&p, r.clone()).await.unwrap();
        assert_eq!(&a[..], &d[r.start as usize..r.end as usize]);
        if same_memory(&a, &b) {
            lent += 1;
        }
        held.push((r, a, b));
    }
    // One-page folios: a quarter of the cache is 64 of them, each held
    // twice (two pins of one folio count twice).
    assert_eq!(lent, CACHE / 4 / 4096 / 2, "lent until a quarter is held");
    // The rest of the cache still serves misses: the whole object, twice.
    for _ in 0..2 {
        for at in (0..d.len() as u64).step_by(256 << 10) {
            expect(&s, &p, at..at + (256 << 10), &d[at as usize..][..256 << 10]).await;
        }
    }
    for (r, a, b) in &held {
        assert_eq!(&a[..], &d[r.start as usize..r.end as usize]);
        assert_eq!(&b[..], &d[r.start as usize..r.end as usize]);
    }
    drop(held);
    // All given back: a hit is lent again.
    s.get_range(&p, 0..4096).await.unwrap();
    let a = s.get_range(&p, 0..4096).await.unwrap();
    let b = s.get_range(&p, 0..4096).await.unwrap();
    assert!(same_memory(&a, &b));
}
