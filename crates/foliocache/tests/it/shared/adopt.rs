//! A private cache's pages handed to a group's (what the interposer does
//! at a process's first fork): `Mapping::cached_pages` gives out exactly
//! the pages cached, with their bytes and the last one cut at the size;
//! `SharedFile::cache_clean` takes them in as clean pages (served as hits
//! after, never over a page the group holds, refusing what is not a page
//! of the file); `Cache::release` gives the private cache's memory back.

use std::io::ErrorKind;

use foliocache::SharedCache;
use test_support::cache::TestCache;
use test_support::TempPath;

use super::open;

const PAGE: usize = 4096;

fn byte(off: usize) -> u8 {
    (off / PAGE * 7 + off % 253) as u8
}

#[test]
fn a_private_caches_pages_become_the_groups_clean_pages() {
    // 10 pages and a half.
    let len = 10 * PAGE + PAGE / 2;
    let want: Vec<u8> = (0..len).map(byte).collect();
    let file = TempPath::with_data("shared-adopt", &want);
    let own = TestCache::bytes(4 << 20).build();
    let f = own.open(&file.path).expect("open");
    // Pages 2, 3 and the last read into the private cache (whatever
    // readahead adds to them, below: the walk reports what is cached).
    let mut buf = vec![0u8; 2 * PAGE];
    f.read_exact_at(&mut buf, 2 * PAGE as u64).expect("read");
    f.read_exact_at(&mut buf[..PAGE / 2], 10 * PAGE as u64)
        .expect("read");
    let cached = f.cachestat(0, 0).expect("cachestat").cached;
    let mut seen = Vec::new();
    f.mapping()
        .cached_pages(|at, bytes| {
            let at = at as usize;
            assert_eq!(bytes, &want[at..(at + PAGE).min(len)], "page at {at}");
            seen.push(at / PAGE);
            Ok(())
        })
        .expect("walk");
    assert_eq!(
        seen.len() as u64,
        cached,
        "every cached page, once: {seen:?}"
    );
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "in order: {seen:?}");
    assert!(seen.contains(&2) && seen.contains(&3) && seen.contains(&10));

    let group = SharedCache::new(1 << 20).expect("group");
    let g = open(&group, &file.path, true);
    let mut added = 0;
    f.mapping()
        .cached_pages(|at, bytes| {
            added += u64::from(g.cache_clean(at, bytes)?);
            Ok(())
        })
        .expect("moved");
    assert_eq!(added, cached);
    // Served from the group's cache: hits, the bytes the file's.
    let misses = group.stats().misses;
    let mut got = vec![0u8; 2 * PAGE];
    g.read_at(&mut got, 2 * PAGE as u64).expect("read");
    assert_eq!(got, want[2 * PAGE..4 * PAGE]);
    assert_eq!(group.stats().misses, misses, "pages 2 and 3 were hits");
    assert_eq!(group.stats().dirty, 0, "clean pages");
    // A page the group holds is kept; what is not a page of the file is
    // refused, and the cache stays as it was.
    assert!(!g.cache_clean(2 * PAGE as u64, &[9u8; PAGE]).expect("held"));
    for (at, bytes) in [
        (1u64, vec![0u8; PAGE]),
        (0, vec![0u8; PAGE - 1]),
        (10 * PAGE as u64, vec![0u8; PAGE]),
        (11 * PAGE as u64, vec![0u8; 10]),
        (0, Vec::new()),
    ] {
        let e = g.cache_clean(at, &bytes).expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    }
    let mut all = vec![0u8; len];
    let mut done = 0;
    while done < len {
        done += g.read_at(&mut all[done..], done as u64).expect("read");
    }
    assert_eq!(all, want, "the whole file through the group");
    group.verify().expect("consistent");

    // The private cache gives its memory back, and serves on.
    drop(f);
    assert!(own.release().expect("release") > 0, "memory given back");
    let f = own.open(&file.path).expect("reopen");
    let mut again = vec![0u8; PAGE];
    f.read_exact_at(&mut again, 0).expect("read");
    assert_eq!(again, want[..PAGE]);
}
