//! A store restarted over its disk tier: the version the tier recorded is
//! served at once, its HEAD sent beside the first read; a version replaced
//! while the store was down is served new once that HEAD answers; a write
//! through the store drops the record; a read naming a newer version
//! (`If-Match`) and a store with `revalidate_after` do not trust the record;
//! an object with nothing on disk gets none; a write of another path keeps
//! it (docs/object-store.md, "Restart").

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use foliocache_object_store::disk::SLOT;
use foliocache_object_store::{
    CacheHint, CachedStore, CachedStoreBuilder, CachedStoreStats, DiskTier,
};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use test_support::cache::TestCache;
use test_support::TempPath;

use crate::counting::Counting;
use crate::data;

const R: Range<u64> = 70_000..90_000;

fn builder(inner: Counting, tier: &Arc<DiskTier>) -> CachedStoreBuilder<Counting> {
    CachedStore::builder(inner, TestCache::bytes(1 << 20).build()).disk_tier(tier.clone())
}

fn open(file: &TempPath) -> Arc<DiskTier> {
    Arc::new(DiskTier::open(&file.path, 64 * SLOT as u64).unwrap())
}

/// Waits until `f` holds (at most 5 s).
pub(crate) async fn until(what: &str, f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(5), "{what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A first process: `p` (put by [`stored`], holding `d`) read twice, memory emptied between,
/// so that `R`'s chunks are on disk and the version recorded; the store
/// dropped once the record is written (no one else holds the tier).
async fn first_process(inner: &Counting, file: &TempPath, p: &Path, d: &[u8]) {
    let tier = open(file);
    let s = builder(inner.clone(), &tier).build();
    for _ in 0..2 {
        let got = s.get_range(p, R).await.unwrap();
        assert_eq!(&got[..], &d[R.start as usize..R.end as usize]);
        s.cache().shrink(u64::MAX);
    }
    assert!(tier.stats().writes >= 1, "{:?}", tier.stats());
    drop(s);
    until("the record written", || Arc::strong_count(&tier) == 1).await;
}

/// An object of 300,000 bytes (`seed`'s) at `p` in a new inner store,
/// and a tier's file named after `name`.
async fn stored(name: &str, p: &str, seed: u64) -> (TempPath, Counting, Path, Vec<u8>) {
    let file = TempPath::new(name);
    let inner = Counting::new();
    let (p, d) = (Path::from(p), data(300_000, seed));
    inner.inner.put(&p, d.clone().into()).await.unwrap();
    (file, inner, p, d)
}

/// A new process over the tier in `file` reads `R` of `p` (holding
/// `d`): its store's figures after.
async fn read_after_restart(
    inner: &Counting,
    file: &TempPath,
    p: &Path,
    d: &[u8],
) -> CachedStoreStats {
    let (_tier, s) = restart(inner, file);
    let got = s.get_range(p, R).await.unwrap();
    assert_eq!(&got[..], &d[R.start as usize..R.end as usize]);
    s.stats()
}

/// An object of 300,000 bytes (`seed`'s) at `p`, read by a first
/// process over a tier in a file named after `name`.
async fn after_first_process(
    name: &str,
    p: &str,
    seed: u64,
) -> (TempPath, Counting, Path, Vec<u8>) {
    let (file, inner, p, d) = stored(name, p, seed).await;
    first_process(&inner, &file, &p, &d).await;
    (file, inner, p, d)
}

/// A new process over the tier in `file`: the tier and its store.
fn restart(inner: &Counting, file: &TempPath) -> (Arc<DiskTier>, CachedStore<Counting>) {
    let tier = open(file);
    let s = builder(inner.clone(), &tier).build();
    (tier, s)
}

#[tokio::test]
async fn a_restart_serves_the_recorded_version_before_its_head() {
    let (file, inner, p, d) = after_first_process("objstore-restart-recorded", "t/a", 31).await;

    // A new process; the store's HEADs now take 400 ms.
    let (gets, heads) = (inner.seen.gets(), inner.seen.heads());
    inner.seen.delay_ms.store(400, Ordering::SeqCst);
    let (tier, s) = restart(&inner, &file);
    let t = Instant::now();
    let got = s.get_range(&p, R).await.unwrap();
    assert_eq!(&got[..], &d[R.start as usize..R.end as usize]);
    assert!(
        t.elapsed() < Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(inner.seen.gets(), gets, "served from disk");
    assert!(tier.stats().hits >= 1);
    let st = s.stats();
    assert_eq!((st.recorded_versions, st.remote_heads), (1, 1), "{st:?}");
    // The HEAD went beside the read and confirmed the version.
    until("the HEAD", || inner.seen.heads() == heads + 1).await;
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(s.stats().stale_versions, 0);
    assert_eq!(s.stats().objects, 1);
}

#[tokio::test]
async fn a_version_replaced_while_down_is_served_new_once_its_head_answers() {
    let (file, inner, p, old) = after_first_process("objstore-restart-replaced", "t/b", 32).await;
    // Replaced by another writer while no store ran.
    let new = data(300_000, 33);
    inner.inner.put(&p, new.clone().into()).await.unwrap();

    let (tier, s) = restart(&inner, &file);
    let want = |v: &[u8]| v[R.start as usize..R.end as usize].to_vec();
    // Within the HEAD's round trip, the recorded version (whole, never a
    // mix): the staleness a restart accepts.
    let got = s.get_range(&p, R).await.unwrap();
    assert_eq!(&got[..], &want(&old)[..]);
    until("the HEAD found the new version", || {
        s.stats().stale_versions == 1
    })
    .await;
    assert_eq!(&s.get_range(&p, R).await.unwrap()[..], &want(&new)[..]);
    drop((s, tier));

    // And after another restart, only the new bytes.
    let (_tier, s) = restart(&inner, &file);
    assert_eq!(&s.get_range(&p, R).await.unwrap()[..], &want(&new)[..]);
    // A read of the rest of the object: the new version's bytes.
    assert_eq!(
        &s.get(&p).await.unwrap().bytes().await.unwrap()[..],
        &new[..]
    );
}

#[tokio::test]
async fn a_write_through_the_store_drops_the_record() {
    let (file, inner, p, _) = after_first_process("objstore-restart-written", "t/c", 34).await;
    let new = data(300_000, 35);
    {
        // A process that writes the object, then is killed.
        let (_tier, s) = restart(&inner, &file);
        s.put(&p, new.clone().into()).await.unwrap();
    }
    let (_tier, s) = restart(&inner, &file);
    let got = s.get_range(&p, R).await.unwrap();
    assert_eq!(&got[..], &new[R.start as usize..R.end as usize]);
    assert_eq!(s.stats().recorded_versions, 0, "no record: a HEAD first");
}

#[tokio::test]
async fn revalidation_does_not_trust_the_record() {
    let (file, inner, p, d) = after_first_process("objstore-restart-revalidate", "t/d", 36).await;
    let heads = inner.seen.heads();
    let tier = open(&file);
    let s = builder(inner.clone(), &tier)
        .revalidate_after(Duration::from_secs(60))
        .build();
    let got = s.get_range(&p, R).await.unwrap();
    assert_eq!(&got[..], &d[R.start as usize..R.end as usize]);
    assert_eq!(s.stats().recorded_versions, 0);
    assert_eq!(inner.seen.heads(), heads + 1, "a HEAD before the read");
    assert!(tier.stats().hits >= 1, "the chunks still served from disk");
}

#[tokio::test]
async fn a_read_naming_a_newer_version_is_not_served_the_record() {
    let (file, inner, p, _) = after_first_process("objstore-restart-if-match", "t/e", 37).await;
    let new = data(300_000, 38);
    let put = inner.inner.put(&p, new.clone().into()).await.unwrap();
    let (_tier, s) = restart(&inner, &file);
    // The caller knows the new version (`If-Match`): a HEAD, not the
    // record, and the new bytes.
    let opts = GetOptions {
        if_match: put.e_tag.clone(),
        range: Some(GetRange::Bounded(R)),
        ..GetOptions::default()
    };
    let got = s.get_opts(&p, opts).await.unwrap().bytes().await.unwrap();
    assert_eq!(&got[..], &new[R.start as usize..R.end as usize]);
    assert_eq!(s.stats().recorded_versions, 0);
}

#[tokio::test]
async fn an_object_with_nothing_on_disk_gets_no_record() {
    let (file, inner, p, d) = stored("objstore-restart-nothing", "t/f", 39).await;
    {
        // Read once: a first miss admits nothing, so no record either.
        let (tier, s) = restart(&inner, &file);
        s.get_range(&p, R).await.unwrap();
        assert_eq!(tier.stats().writes, 0);
    }
    let st = read_after_restart(&inner, &file, &p, &d).await;
    assert_eq!(st.recorded_versions, 0, "a HEAD first");
}

#[tokio::test]
async fn a_write_of_another_path_keeps_the_record() {
    let (file, inner, p, d) = stored("objstore-restart-other", "t/g", 40).await;
    {
        let (tier, s) = restart(&inner, &file);
        s.get_range(&p, R).await.unwrap();
        // A write of another path between the HEAD and the chunk's write.
        s.put(&Path::from("t/other"), vec![1u8; 10].into())
            .await
            .unwrap();
        s.cache().shrink(u64::MAX);
        s.get_range(&p, R).await.unwrap();
        assert!(tier.stats().writes >= 1);
    }
    let st = read_after_restart(&inner, &file, &p, &d).await;
    assert_eq!(st.recorded_versions, 1);
}

/// After a restart, a version a GET found gone (a prefetch's, in the
/// background) is not taken from the tier's record again: the next read
/// looks the object up (a HEAD) and reads the new version, not the
/// recorded version's chunks on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_a_get_found_gone_is_not_taken_from_the_record_again() {
    let (file, inner, p, d) = after_first_process("objstore-restart-gone", "t/g", 37).await;
    let (_tier, s) = restart(&inner, &file);
    let seen = inner.seen.clone();
    seen.gated.store(true, Ordering::SeqCst);
    seen.gate.add_permits(1);
    let gets = seen.gets();
    let mut o = GetOptions {
        range: Some(GetRange::Bounded(0..16 << 10)),
        ..GetOptions::default()
    };
    o.extensions.insert(CacheHint::Sequential);
    let got = s.get_opts(&p, o).await.unwrap().bytes().await.unwrap();
    assert_eq!(&got[..], &d[..16 << 10]);
    until("the prefetch's GETs at the gate", || {
        seen.gets() >= gets + 2
    })
    .await;
    let new = data(300_000, 38);
    inner.inner.put(&p, new.clone().into()).await.unwrap();
    seen.gated.store(false, Ordering::SeqCst);
    seen.gate.add_permits(1 << 16);
    until("a prefetch GET failed", || s.stats().remote_get_errors >= 1).await;
    let got = s.get_range(&p, R).await.unwrap();
    assert_eq!(&got[..], &new[R.start as usize..R.end as usize]);
}
