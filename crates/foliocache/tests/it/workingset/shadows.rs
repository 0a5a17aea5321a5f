//! Eviction shadows (the kernel's `workingset_eviction`, kept by
//! `__filemap_add_folio` and `page_cache_delete`): reclaim
//! leaves a value entry of the evicted folio's order, recording the
//! eviction clock; an add over it returns it; a large one is split when a
//! smaller folio lands in it; reads through shadows return the right bytes.

use backing::MemBacking;
use foliocache::filemap::FolioFlags;
use foliocache::filemap::{FgpFlags, MappingEntry, Shadow};
use foliocache::{Cache, File};

// Readahead off: these tests shape the cache by the folios each read
// creates and by which ones are read again.
use test_support::cache::TestCache;

const PAGE: usize = 4096;
const MIB: usize = 1 << 20;

fn data(tag: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i / PAGE) as u8 ^ (i as u8) ^ tag | 1)
        .collect()
}

fn open(cache: &Cache, bytes: &[u8]) -> File {
    cache
        .open_backing(MemBacking::with_data(bytes.to_vec()))
        .unwrap()
}

fn read_all(f: &File, bs: usize) -> Vec<u8> {
    let mut out = vec![0u8; f.len() as usize];
    for (i, chunk) in out.chunks_mut(bs).enumerate() {
        f.read_exact_at(chunk, (i * bs) as u64).unwrap();
    }
    out
}

fn shadow_at(f: &File, index: u64) -> Option<Shadow> {
    match f.mapping().get_entry(index) {
        Some(MappingEntry::Shadow(v)) => Some(Shadow::unpack(v)),
        _ => None,
    }
}

/// A 4 MiB cache; file `a` (4 MiB, 2 MiB folios) read, then `b` evicts it.
fn evicted(max_folio: usize) -> (Cache, File, Vec<u8>, File) {
    let cache = TestCache::bytes(4 * MIB)
        .max_folio(max_folio)
        .no_readahead()
        .build();
    let da = data(0x11, 4 * MIB);
    let a = open(&cache, &da);
    assert_eq!(read_all(&a, 2 * MIB), da);
    let b = open(&cache, &data(0x22, 4 * MIB));
    read_all(&b, 2 * MIB);
    (cache, a, da, b)
}

#[test]
fn eviction_leaves_a_shadow_of_the_folios_order() {
    let (cache, a, _, _b) = evicted(2 * MIB);
    assert!(cache.stats().evictions >= 2);
    assert_eq!(a.mapping().nr_folios(), 0, "a was evicted whole");
    assert_eq!(a.mapping().nr_shadows(), 2, "two order-9 shadows");
    // Every page of each 2 MiB folio reads the same shadow: one entry of
    // order 9, not 512 of order 0.
    let first = shadow_at(&a, 0).expect("a shadow at 0");
    for i in [1, 100, 511] {
        assert_eq!(shadow_at(&a, i), Some(first), "index {i}");
    }
    let second = shadow_at(&a, 512).expect("a shadow at 512");
    // The clock moved by the first folio's pages between the two evictions.
    assert_eq!(second.distance(first.age), (1u64 << 61) - 512);
    assert_eq!(first.distance(second.age), 512);
    assert!(!first.workingset, "never activated");
}

#[test]
fn a_read_over_shadows_returns_the_right_bytes_and_consumes_them() {
    let (_cache, a, da, _b) = evicted(2 * MIB);
    // A 4 KiB read lands an order-0 folio inside the order-9 shadow (split).
    let mut buf = vec![0u8; PAGE];
    a.read_exact_at(&mut buf, 7 * PAGE as u64).unwrap();
    assert_eq!(buf, da[7 * PAGE..8 * PAGE]);
    assert!(matches!(
        a.mapping().get_entry(7),
        Some(MappingEntry::Folio(_))
    ));
    // Its neighbours keep the shadow, now of order 0 each.
    let s6 = shadow_at(&a, 6).expect("shadow left of the new folio");
    let s8 = shadow_at(&a, 8).expect("shadow right of the new folio");
    assert_eq!(s6, s8);
    // Everything still reads right, through shadows of either order.
    assert_eq!(read_all(&a, 3 * PAGE), da);
}

#[test]
fn add_folio_returns_the_shadow_it_replaces() {
    let (_cache, a, _, b) = evicted(2 * MIB);
    drop(b); // free the arena
    let m = a.mapping();
    let before = shadow_at(&a, 512).unwrap();
    // An order-0 add into the order-9 shadow: split, then store.
    let f = m.new_folio(0).unwrap();
    let got = m.add_folio(&f, 515).unwrap().expect("replaced a shadow");
    assert_eq!(Shadow::unpack(got), before);
    assert_eq!(shadow_at(&a, 514), Some(before));
    assert_eq!(shadow_at(&a, 516), Some(before));
    let f = m.read_folio(f).unwrap();
    assert!(f.test(FolioFlags::UPTODATE));
    drop(f);
    // An order-9 add over the shadows and the folio conflicts...
    let big = m.new_folio(9).unwrap();
    assert!(m.add_folio(&big, 512).is_err());
    drop(big.unlock());
    // ...but over the whole untouched first shadow it replaces it in place.
    let s0 = shadow_at(&a, 0).unwrap();
    let big = m.new_folio(9).unwrap();
    assert_eq!(big.order(), 9);
    assert_eq!(m.add_folio(&big, 0).unwrap().map(Shadow::unpack), Some(s0));
    m.read_folio(big).unwrap();
    // get_folio with CREAT treats a shadow as absent.
    let g = m.lock_folio(600, FgpFlags::CREAT | FgpFlags::LOCK).unwrap();
    assert!(g.is_locked() && !g.test(FolioFlags::UPTODATE));
    m.read_folio(g).unwrap();
}

#[test]
fn shadows_record_the_workingset_bit_of_deactivated_folios() {
    // Order-0 folios, a 1 MiB cache: a (3/4 of it) is read twice, so
    // reclaim activates it; then streams of b keep the lists balanced by
    // deactivating part of a, which marks it workingset, and evict that.
    // (Half of the cache or less would stay active for good: the inactive
    // list is only refilled while it is smaller than the active one.)
    // A shadow budget of one node per 16 pages, so that b's shadows do not
    // push all of a's out.
    let cache = TestCache::bytes(MIB)
        .max_folio(PAGE)
        .no_readahead()
        .shadow_budget(MIB / PAGE / 16 * xarray::NODE_SIZE)
        .build();
    let da = data(0x33, 3 * MIB / 4);
    let a = open(&cache, &da);
    let db = data(0x44, 4 * MIB);
    let b = open(&cache, &db);
    read_all(&a, PAGE);
    read_all(&a, PAGE);
    for _ in 0..3 {
        assert_eq!(read_all(&b, 64 << 10), db);
    }
    let shadows: Vec<Shadow> = (0..(3 * MIB / 4 / PAGE) as u64)
        .filter_map(|i| shadow_at(&a, i))
        .collect();
    assert!(!shadows.is_empty(), "a was evicted");
    assert!(
        shadows.iter().any(|s| s.workingset),
        "an activated folio that was evicted leaves a workingset shadow"
    );
    // b's own folios were never activated.
    let b_ws = (0..(4 * MIB / PAGE) as u64)
        .filter_map(|i| shadow_at(&b, i))
        .filter(|s| s.workingset)
        .count();
    assert_eq!(b_ws, 0);
    assert_eq!(read_all(&a, 5 * PAGE / 2), da);
}

#[test]
fn shrink_evicts_what_is_unused_and_leaves_shadows() {
    let cache = TestCache::bytes(4 * MIB)
        .max_folio(64 << 10)
        .no_readahead()
        .build();
    let da = data(0x55, 2 * MIB);
    let a = open(&cache, &da);
    assert_eq!(read_all(&a, 64 << 10), da);
    assert_eq!(read_all(&a, 64 << 10), da); // referenced: activated first
    assert_eq!(cache.shrink(0), 0);
    // A pinned folio stays.
    let pinned = match a.mapping().get_entry(16) {
        Some(MappingEntry::Folio(f)) => f,
        other => panic!("expected a folio, got {other:?}"),
    };
    let freed = cache.shrink(64 << 10);
    assert!(freed >= 64 << 10, "freed {freed}");
    let freed_all = cache.shrink(u64::MAX);
    assert_eq!(freed + freed_all, 2 * MIB as u64 - (64 << 10));
    assert_eq!(a.mapping().nr_folios(), 1);
    assert_eq!(a.mapping().nr_shadows(), 31);
    assert_eq!(cache.stats().bytes_cached, 64 << 10);
    drop(pinned);
    assert_eq!(cache.shrink(u64::MAX), 64 << 10);
    assert_eq!(cache.stats().free_bytes, 4 * MIB as u64);
    assert_eq!(read_all(&a, 4 * PAGE), da);
}

/// A sparse 1 GiB file in memory, opened through `cache`.
fn sparse_gib(cache: &Cache) -> File {
    use backing::Backing;
    let mem = MemBacking::new();
    mem.set_len(1 << 30).unwrap();
    cache.open_backing(mem).unwrap()
}

/// Reference 5.4: shadows cost index memory, so nodes holding only shadows
/// are bounded (the cache's shadow budget), and the oldest go first. A
/// sparse 1 GiB file read one page per 64 (one page per leaf node), through
/// a 256-page cache: every eviction would leave a node of its own.
#[test]
fn shadow_nodes_stay_within_the_budget_and_the_oldest_go_first() {
    let budget_nodes = 128;
    let cache = TestCache::pages(256)
        .max_folio(PAGE)
        .no_readahead()
        .shadow_budget(budget_nodes * xarray::NODE_SIZE)
        .build();
    let f = sparse_gib(&cache);
    let mut buf = vec![1u8; PAGE];
    let leaves = (1u64 << 30) / (64 * PAGE as u64);
    let mut most = 0;
    for k in 0..leaves {
        f.read_exact_at(&mut buf, k * 64 * PAGE as u64).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        most = most.max(f.mapping().shadow_nodes());
    }
    let st = cache.stats();
    assert!(st.evictions >= leaves - 256);
    // Checked every 64 evictions (at least): overshoot of at most that.
    assert!(
        most <= budget_nodes + 64,
        "{most} shadow-only nodes, budget {budget_nodes}"
    );
    assert!(st.shadow_bytes as usize <= (budget_nodes + 64) * xarray::NODE_SIZE);
    assert_eq!(st.shadow_bytes as usize, f.mapping().shadow_bytes());
    assert!(st.shadows >= (budget_nodes * 3 / 4) as u64, "{st:?}");
    // The newest evictions kept their shadows; the oldest lost theirs.
    let newest = (leaves - 257) * 64;
    assert!(shadow_at(&f, newest).is_some(), "newest shadow trimmed");
    assert!(shadow_at(&f, 0).is_none(), "oldest shadow kept");
}

/// With two files, the trim takes from each in proportion to the
/// shadow-only nodes it holds, oldest first within each: both keep their
/// newest shadows, and together they stay within the budget. File A is
/// read at twice B's rate, one page per leaf node.
#[test]
fn shadow_trimming_takes_from_every_file_in_proportion_keeping_the_newest() {
    let budget_nodes = 96;
    let cache = TestCache::pages(256)
        .max_folio(PAGE)
        .no_readahead()
        .shadow_budget(budget_nodes * xarray::NODE_SIZE)
        .build();
    let (a, b) = (sparse_gib(&cache), sparse_gib(&cache));
    let mut buf = vec![1u8; PAGE];
    let leaf = 64 * PAGE as u64;
    let rounds = 2048u64;
    let mut most = 0;
    for k in 0..rounds {
        a.read_exact_at(&mut buf, 2 * k * leaf).unwrap();
        a.read_exact_at(&mut buf, (2 * k + 1) * leaf).unwrap();
        b.read_exact_at(&mut buf, k * leaf).unwrap();
        most = most.max(a.mapping().shadow_nodes() + b.mapping().shadow_nodes());
    }
    assert!(
        most <= budget_nodes + 64,
        "{most} shadow-only nodes, budget {budget_nodes}"
    );
    let (na, nb) = (a.mapping().shadow_nodes(), b.mapping().shadow_nodes());
    assert!(na > 0 && nb > 0, "a: {na}, b: {nb}");
    // A holds about twice B's nodes (rounding moves a few).
    assert!(na + 8 >= 2 * nb && na <= 2 * nb + 8, "a: {na}, b: {nb}");
    // Each file's newest evictions kept their shadows, its oldest lost them.
    // (The last 256 reads are cached: 171 of A's and 85 of B's.)
    assert!(
        shadow_at(&a, (2 * rounds - 180) * 64).is_some(),
        "A's newest"
    );
    assert!(shadow_at(&b, (rounds - 90) * 64).is_some(), "B's newest");
    assert!(shadow_at(&a, 0).is_none() && shadow_at(&b, 0).is_none());
}
