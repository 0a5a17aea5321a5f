//! The disk tier: admission on a second miss, a restart served from disk,
//! damaged slots read as misses, and a writer killed mid-write.

use std::sync::Arc;

use backing::{AlignedBuf, Backing, MemBacking, BLOCK};
use foliocache_object_store::disk::{chunk_key, CHUNK, SLOT};
use foliocache_object_store::{CachedStore, DiskTier};
use object_store::path::Path;
use object_store::{Error, GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use test_support::cache::TestCache;
use test_support::TempPath;

use crate::counting::Counting;
use crate::data;

/// A store over `inner` with a small memory cache and `tier`.
fn tiered(inner: Counting, tier: Arc<DiskTier>) -> CachedStore<Counting> {
    CachedStore::builder(inner, TestCache::bytes(1 << 20).build())
        .disk_tier(tier)
        .build()
}

#[tokio::test]
async fn a_second_miss_admits_and_a_restart_serves_from_disk() {
    let file = TempPath::new("objstore-tier-restart");
    let inner = Counting::new();
    let p = Path::from("t/a");
    let d = data(300_000, 30);
    inner.inner.put(&p, d.clone().into()).await.unwrap();
    let tier = Arc::new(DiskTier::open(&file.path, 64 * SLOT as u64).unwrap());
    let s = tiered(inner.clone(), tier.clone());
    let r = 70_000..90_000;
    assert_eq!(
        &s.get_range(&p, r.clone()).await.unwrap()[..],
        &d[70_000..90_000]
    );
    assert_eq!(tier.stats().writes, 0, "a first miss is not admitted");
    s.cache().shrink(u64::MAX);
    assert_eq!(
        &s.get_range(&p, r.clone()).await.unwrap()[..],
        &d[70_000..90_000]
    );
    assert!(tier.stats().writes >= 1, "{:?}", tier.stats());
    drop(s);
    drop(tier);

    // A new process: a new cache, the tier reopened.
    let gets = inner.seen.gets();
    let tier = Arc::new(DiskTier::open(&file.path, 64 * SLOT as u64).unwrap());
    let s = tiered(inner.clone(), tier.clone());
    assert_eq!(
        &s.get_range(&p, r.clone()).await.unwrap()[..],
        &d[70_000..90_000]
    );
    assert_eq!(inner.seen.gets(), gets, "served from disk, no GET");
    assert!(tier.stats().hits >= 1);
}

#[tokio::test]
async fn a_scan_does_not_fill_the_tier() {
    let inner = Counting::new();
    let p = Path::from("t/scan");
    let d = data(4 << 20, 31);
    inner.inner.put(&p, d.clone().into()).await.unwrap();
    let tier = Arc::new(DiskTier::with_backing(MemBacking::new(), 64 * SLOT as u64).unwrap());
    let s = tiered(inner, tier.clone());
    let all = s.get(&p).await.unwrap().bytes().await.unwrap();
    assert_eq!(&all[..], &d[..]);
    assert_eq!(tier.stats().writes, 0);
}

/// A slot written, then damaged in each way a crash or a bad disk can
/// damage it, reads as a miss.
#[test]
fn a_damaged_slot_is_a_miss() {
    let mem = Arc::new(MemBacking::new());
    let tier = DiskTier::with_backing(mem.clone(), SLOT as u64).unwrap();
    let key = chunk_key("x", "e:1:10", 0);
    let chunk = data(CHUNK, 32);
    tier.put(key, &chunk);
    assert_eq!(tier.get(key, CHUNK).as_deref(), Some(&chunk[..]));
    assert_eq!(tier.get(key, CHUNK - 1), None, "a chunk of another length");
    assert_eq!(
        tier.get(chunk_key("x", "e:2:10", 0), CHUNK),
        None,
        "another version"
    );

    // One data block rewritten (a torn write: the header of one write,
    // a block of another).
    let before = tier.stats().corrupt;
    let mut block = AlignedBuf::zeroed(BLOCK).unwrap();
    block.fill(0x5a);
    mem.write_blocks(&[block.io_buf()], 5 * BLOCK as u64)
        .unwrap();
    assert_eq!(tier.get(key, CHUNK), None);
    assert_eq!(tier.stats().corrupt, before + 1);

    // Rewritten whole, then its header zeroed (the data written, the
    // header not yet).
    tier.put(key, &chunk);
    assert!(tier.get(key, CHUNK).is_some());
    block.fill(0);
    mem.write_blocks(&[block.io_buf()], 0).unwrap();
    assert_eq!(tier.get(key, CHUNK), None);
}

#[tokio::test]
async fn a_damaged_slot_is_read_from_the_store() {
    let inner = Counting::new();
    let p = Path::from("t/d");
    let d = data(CHUNK, 33);
    inner.inner.put(&p, d.clone().into()).await.unwrap();
    let mem = Arc::new(MemBacking::new());
    let tier = Arc::new(DiskTier::with_backing(mem.clone(), 4 * SLOT as u64).unwrap());
    let s = tiered(inner.clone(), tier.clone());
    for _ in 0..2 {
        s.get_range(&p, 0..100).await.unwrap();
        s.cache().shrink(u64::MAX);
    }
    assert_eq!(tier.stats().writes, 1);
    let contents = mem.contents().unwrap();
    let mut block = AlignedBuf::zeroed(BLOCK).unwrap();
    // Every slot's last data block damaged: whichever holds the chunk.
    for slot in 0..4 {
        let at = (slot + 1) * SLOT - BLOCK;
        block.copy_from_slice(&contents[at..at + BLOCK]);
        block[17] ^= 1;
        mem.write_blocks(&[block.io_buf()], at as u64).unwrap();
    }
    warnings();
    let gets = inner.seen.gets();
    assert_eq!(&s.get_range(&p, 0..CHUNK as u64).await.unwrap()[..], &d[..]);
    assert_eq!(
        inner.seen.gets(),
        gets + 1,
        "the damaged chunk came from the store"
    );
    assert_eq!(tier.stats().corrupt, 1);
    // Said once, with the object and the offset; the slot is read no
    // more (the next miss does not meet it again).
    let said = || {
        warnings()
            .iter()
            .filter(|w| w.contains("t/d at offset 0"))
            .count()
    };
    assert_eq!(said(), 1, "{:?}", warnings());
    s.cache().shrink(u64::MAX);
    assert_eq!(&s.get_range(&p, 0..CHUNK as u64).await.unwrap()[..], &d[..]);
    assert_eq!((said(), tier.stats().corrupt), (1, 1));
}

/// The `warn` lines logged in this test binary so far (a logger of its
/// own, installed by the first call).
fn warnings() -> Vec<String> {
    struct Kept(std::sync::Mutex<Vec<String>>);
    impl log::Log for Kept {
        fn enabled(&self, m: &log::Metadata<'_>) -> bool {
            m.level() <= log::Level::Warn
        }
        fn log(&self, r: &log::Record<'_>) {
            if self.enabled(r.metadata()) {
                self.0.lock().unwrap().push(r.args().to_string());
            }
        }
        fn flush(&self) {}
    }
    static KEPT: std::sync::OnceLock<&'static Kept> = std::sync::OnceLock::new();
    let kept = KEPT.get_or_init(|| {
        let k: &'static Kept = Box::leak(Box::new(Kept(Default::default())));
        let _ = log::set_logger(k);
        log::set_max_level(log::LevelFilter::Warn);
        k
    });
    kept.0.lock().unwrap().clone()
}

/// The writer's part of `a_writer_killed_mid_write_leaves_no_wrong_byte`:
/// writes chunks `i` (data seeded by the round's version and `i`, of a
/// length that differs with both) to the tier at the given path, round
/// after round, until killed; says `WRITING` once its first round is
/// written.
#[test]
fn tier_writer_child() {
    let Ok(path) = std::env::var("OBJSTORE_TIER_WRITER") else {
        return;
    };
    let tier = DiskTier::open(&path, 16 * SLOT as u64).unwrap();
    for round in 0u64.. {
        let v = round % 3;
        for i in 0..64u64 {
            let key = chunk_key("crash", &format!("{v}"), i);
            tier.put(key, &data(chunk_len(v, i), v * 1000 + i));
        }
        if round == 0 {
            // (On a line of its own: the harness's "test ... " has none.)
            println!("\nWRITING");
        }
    }
}

/// The length of chunk `i` of version `v`: versions of one chunk differ
/// in length as well as bytes, so a slot holding a torn mix of two fails.
fn chunk_len(v: u64, i: u64) -> usize {
    CHUNK - (i as usize * 97 + v as usize * 1013) % (CHUNK / 2)
}

/// Kills the tier's writer at random moments (20 times; more with
/// `OBJSTORE_CRASH_KILLS=N`), reopening the tier after each: every chunk
/// found has exactly its version's bytes (a torn or half-written slot is
/// a miss, never wrong bytes), and chunks survive the writer.
#[test]
fn a_writer_killed_mid_write_leaves_no_wrong_byte() {
    use std::io::BufRead;
    let kills: u64 = std::env::var("OBJSTORE_CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let file = TempPath::new("objstore-tier-crash");
    let mut found = 0;
    for k in 0..kills {
        let mut child = test_support::rerun_test(module_path!(), "tier_writer_child")
            .env("OBJSTORE_TIER_WRITER", &file.path)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("re-running the test binary");
        let out = child.stdout.take().expect("the child's stdout");
        let writing = std::io::BufReader::new(out)
            .lines()
            .any(|l| l.is_ok_and(|l| l == "WRITING"));
        assert!(writing, "the writer started writing");
        // A random moment of its writes (0 to 30 ms after its first round).
        let wait = (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(std::process::id())) % 30_000;
        std::thread::sleep(std::time::Duration::from_micros(wait));
        child.kill().expect("killing the writer");
        assert!(!child.wait().unwrap().success(), "killed, not done");

        let tier = DiskTier::open(&file.path, 16 * SLOT as u64).unwrap();
        for v in 0..3u64 {
            for i in 0..64u64 {
                let key = chunk_key("crash", &format!("{v}"), i);
                // Asked with the length the version has: another version's
                // length in the slot is a miss too.
                if let Some(got) = tier.get(key, chunk_len(v, i)) {
                    assert_eq!(
                        got,
                        data(chunk_len(v, i), v * 1000 + i),
                        "kill {k}, chunk {v}/{i}"
                    );
                    found += 1;
                }
            }
        }
    }
    assert!(found > 0, "the writer's chunks survive it");
}

/// Admission is by page: a chunk whose pages are each missed once (a
/// scan whose reads split it) is not admitted; a page missed again is.
#[test]
fn admission_takes_a_page_missed_twice() {
    let tier = DiskTier::with_backing(MemBacking::new(), SLOT as u64).unwrap();
    let key = chunk_key("a", "e:1:1", 0);
    assert!(!tier.admit(key, 0b0011));
    assert!(!tier.admit(key, 0b1100), "other pages of the chunk");
    assert!(tier.admit(key, 0b0100), "page 2 again");
    assert!(
        !tier.admit(key, 0b0100),
        "admitted once, the window starts again"
    );
}

/// A set holds as many chunks as it has ways: eight keys of one set all
/// stay (a direct-mapped tier would keep one); a ninth replaces the least
/// recently used; a reopened tier finds them all without knowing where.
#[test]
fn a_set_keeps_its_ways_and_replaces_the_least_recent() {
    let mem = Arc::new(MemBacking::new());
    let ways = foliocache_object_store::disk::WAYS;
    let tier = DiskTier::with_backing(mem.clone(), ways * SLOT as u64).unwrap();
    let key = |i: u64| chunk_key("set", "e:1", i);
    let chunk = |i: u64| data(1000 + i as usize, 50 + i);
    for i in 0..ways {
        tier.put(key(i), &chunk(i));
    }
    for i in 0..ways {
        assert_eq!(tier.get(key(i), 1000 + i as usize), Some(chunk(i)), "{i}");
    }
    // Key 0 the least recently used now: hit every other one again.
    for i in 1..ways {
        assert!(tier.get(key(i), 1000 + i as usize).is_some());
    }
    tier.put(key(ways), &chunk(ways));
    assert_eq!(tier.get(key(0), 1000), None, "the least recent went");
    for i in 1..=ways {
        assert_eq!(tier.get(key(i), 1000 + i as usize), Some(chunk(i)), "{i}");
    }
    drop(tier);
    let tier = DiskTier::with_backing(mem, ways * SLOT as u64).unwrap();
    for i in 1..=ways {
        assert_eq!(
            tier.get(key(i), 1000 + i as usize),
            Some(chunk(i)),
            "reopened: {i}"
        );
    }
    assert_eq!(tier.get(key(0), 1000), None);
}

/// A disk tier of 64 slots in memory.
fn in_memory() -> Arc<DiskTier> {
    Arc::new(DiskTier::with_backing(MemBacking::new(), 64 * SLOT as u64).unwrap())
}

/// An empty counting store, a tier [`in_memory`], and a store over both.
fn fresh() -> (Counting, Arc<DiskTier>, CachedStore<Counting>) {
    let (inner, tier) = (Counting::new(), in_memory());
    let s = tiered(inner.clone(), tier.clone());
    (inner, tier, s)
}

/// With a disk tier too, the first read of an object not tracked is one
/// request, the GET of its blocks (no HEAD first), and it is the tier's
/// miss as any other: looked up in the tier, remembered by its admission
/// (the same pages missed again are written there), its GET counted in
/// the tier's curve; then the tier serves them with no request.
#[tokio::test]
async fn a_first_read_with_a_tier_is_one_get_and_the_tiers_miss() {
    let (inner, tier, s) = fresh();
    let p = Path::from("t/first");
    let d = data(300_000, 32);
    inner.inner.put(&p, d.clone().into()).await.unwrap();
    let r = 70_000..90_000;
    let read = || async { s.get_range(&p, r.clone()).await.unwrap() };
    assert_eq!(&read().await[..], &d[70_000..90_000]);
    let seen = (inner.seen.heads(), inner.seen.gets());
    assert_eq!(seen, (0, 1), "one GET, no HEAD");
    let st = s.stats();
    // The blocks around the range: 69_632..90_112.
    assert_eq!((st.remote_gets, st.remote_get_bytes), (1, 20_480), "{st:?}");
    assert_eq!(st.remote_heads, 0);
    let t = tier.stats();
    assert_eq!((t.hits, t.writes), (0, 0), "looked up, not admitted: {t:?}");
    assert!(t.misses >= 1, "looked up: {t:?}");
    let curve = tier.hit_ratio_curve();
    assert_eq!(curve.at(1.0).unwrap().remote_gets, Some(1.0));
    // Missed again: admitted, its chunks written.
    s.cache().shrink(u64::MAX);
    assert_eq!(&read().await[..], &d[70_000..90_000]);
    assert!(tier.stats().writes >= 1, "{:?}", tier.stats());
    assert_eq!(inner.seen.gets(), 2);
    // And again: the tier's.
    s.cache().shrink(u64::MAX);
    assert_eq!(&read().await[..], &d[70_000..90_000]);
    assert_eq!((inner.seen.heads(), inner.seen.gets()), (0, 2));
    assert!(tier.stats().hits >= 1);
}

/// A first read with preconditions, with a disk tier, answers as the
/// inner store does, with no HEAD: `If-None-Match` of the version is
/// `NotModified`, an `If-Match` of another `Precondition`, an `If-Match`
/// of the version its bytes.
#[tokio::test]
async fn a_first_read_with_a_tier_answers_preconditions_as_the_store() {
    let inner = Counting::new();
    let d = data(100_000, 33);
    let kind = |e: &Error| match e {
        Error::NotModified { .. } => "not modified",
        Error::Precondition { .. } => "precondition",
        _ => "another error",
    };
    for case in ["not modified", "precondition", "bytes"] {
        let p = Path::from(format!("t/cond-{}", case.len()));
        let e_tag = inner.inner.put(&p, d.clone().into()).await.unwrap().e_tag;
        let mut opts = GetOptions {
            range: Some(GetRange::Bounded(1000..9000)),
            ..GetOptions::default()
        };
        match case {
            "not modified" => opts.if_none_match = e_tag,
            "precondition" => opts.if_match = Some("\"other\"".into()),
            _ => opts.if_match = e_tag,
        }
        // A store of its own: the object not tracked.
        let s = tiered(inner.clone(), in_memory());
        let heads = inner.seen.heads();
        let ours = s.get_opts(&p, opts.clone()).await;
        let theirs = inner.inner.get_opts(&p, opts).await;
        match (ours, theirs) {
            (Ok(a), Ok(b)) => {
                assert_eq!(case, "bytes");
                let (a, b) = (a.bytes().await.unwrap(), b.bytes().await.unwrap());
                assert_eq!(&a[..], &d[1000..9000]);
                assert_eq!(a, b);
            }
            (Err(a), Err(b)) => assert_eq!((kind(&a), kind(&b)), (case, case), "{a}; {b}"),
            (a, b) => panic!("{case}: ours {:?}, the store's {:?}", a.err(), b.err()),
        }
        assert_eq!(inner.seen.heads(), heads, "{case}: no HEAD");
    }
}

/// An object replaced by another writer, then forgotten by the store
/// (`invalidate`), is found again by its first read's GET: the new
/// version's bytes, never the tier's chunks of the old one.
#[tokio::test]
async fn a_replaced_object_is_not_served_the_old_versions_chunks() {
    let (inner, tier, s) = fresh();
    let p = Path::from("t/replaced");
    let (old, new) = (data(300_000, 34), data(300_000, 35));
    inner.inner.put(&p, old.clone().into()).await.unwrap();
    let r = 70_000..90_000;
    for _ in 0..2 {
        s.cache().shrink(u64::MAX);
        let got = s.get_range(&p, r.clone()).await.unwrap();
        assert_eq!(&got[..], &old[70_000..90_000]);
    }
    assert!(tier.stats().writes >= 1, "the old version's chunks on disk");
    inner.inner.put(&p, new.clone().into()).await.unwrap();
    s.invalidate(&p);
    for _ in 0..3 {
        s.cache().shrink(u64::MAX);
        let got = s.get_range(&p, r.clone()).await.unwrap();
        assert_eq!(&got[..], &new[70_000..90_000]);
    }
    assert_eq!(inner.seen.heads(), 0);
}

/// The first read of an object the store wrote through to its tier is
/// looked up by a HEAD, not the GET of its range: the tier holds its
/// bytes, and serves them with no GET.
#[tokio::test]
async fn a_first_read_of_an_object_written_through_is_the_tiers() {
    let (inner, tier, s) = fresh();
    let p = Path::from("t/written");
    let d = data(300_000, 36);
    s.put(&p, d.clone().into()).await.unwrap();
    let got = s.get_range(&p, 70_000..90_000).await.unwrap();
    assert_eq!(&got[..], &d[70_000..90_000]);
    assert_eq!((inner.seen.heads(), inner.seen.gets()), (1, 0));
    assert!(tier.stats().hits >= 1);
}
