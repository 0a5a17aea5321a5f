//! Adding a folio over an eviction shadow (`__filemap_add_folio`'s one
//! conflict walk, upstream commit 6758c1128ceb): the one-walk design
//! against the lookup-then-store design it replaced, side by side in one run.
//!
//! Reproduce: `cargo bench -p foliocache --bench add_folio`
//! (`-- --test` is a smoke run).
//!
//! # What is compared
//! **The index alone** (group `add_folio_index`), both designs written here
//! over the `xarray` crate's cursor, storing stand-in items, so that the only
//! difference is the number of tree walks:
//! - `one_walk`: what `Mapping::add_folio` does: under the lock, one
//!   conflict walk that also records the first shadow and its order; a
//!   larger shadow is split in the same hold; then the store.
//! - `lookup_then_store`: the kernel's `__filemap_add_folio` before commit
//!   6758c1128ceb (kept here only, as the baseline): a lockless walk for the
//!   slot's order; if it is larger than the folio, a load of the entry and
//!   the split's nodes allocated; then under the lock the conflict walk; if
//!   a shadow was found, a walk for its order again (it may have been split
//!   before the lock was taken), the split, and the store.
//!
//! on three kinds of slot:
//! - `shadow0`: each add lands on an order-0 shadow (a 4 KiB file page
//!   evicted and read again: the common refault);
//! - `shadow_split`: each add is an order-0 folio landing inside an order-9
//!   shadow (a 2 MiB folio evicted, then a 4 KiB read of one of its pages),
//!   so the shadow must be split into order-0 shadows first;
//! - `empty`: each add lands on an empty slot (no shadow: the baseline
//!   where lookup-then-store only pays its first, wasted walk).
//!
//! **The real thing** (group `add_folio_mapping`): `Mapping::new_folio` +
//! `Mapping::add_folio` + unlock in a cache, over shadows that real
//! evictions (`Cache::shrink`) left, for the same three kinds of slot: what
//! one add costs with the folio allocation, LRU insertion and accounting
//! around the index work.
//!
//! Every measured iteration starts from a freshly prepared index (untimed):
//! the timed part is the adds only. At the end the bench prints the ratio
//! of the two designs per kind of slot, from the same run.

use std::hint::black_box;
use std::time::{Duration, Instant};

use backing::MemBacking;
use criterion::{BenchmarkGroup, Throughput};
use foliocache::{Cache, File, Populate};
use xarray::{Cursor, Entry, EntryRef, Error, XArray, XaGuard};

mod common;
use common::record;

const PAGE: u64 = 4096;
/// Adds per measured iteration for order-0 slots.
const ADDS: u64 = 4096;
/// Order-9 shadows per measured iteration (one order-0 add into each).
const BIG_SHADOWS: u64 = 64;
/// Order of the large shadow (2 MiB).
const BIG: u32 = 9;
/// Where in each large shadow the order-0 folio lands.
const INSIDE: u64 = 3;

/// A stand-in for a folio descriptor: 8-byte aligned, never moved.
#[repr(align(8))]
#[derive(Debug)]
struct Slot(#[allow(dead_code)] u64);

type Index = XArray<&'static Slot>;

fn slots(n: u64) -> &'static [Slot] {
    Box::leak((0..n).map(Slot).collect::<Vec<_>>().into_boxed_slice())
}

type Cur<'a> = Cursor<'a, &'static Slot>;
type Guard<'a> = XaGuard<'a, &'static Slot>;

/// Runs `before` (outside the lock), then `hold` under the index lock;
/// when `hold` needs more nodes than the cursor has, allocates them outside
/// the lock and starts again (both designs share this loop).
fn add_with_retry(
    xa: &Index,
    cur: &mut Cur<'_>,
    mut before: impl FnMut(&mut Cur<'_>),
    mut hold: impl FnMut(&mut Guard<'_>, &mut Cur<'_>) -> Result<Option<u64>, Error>,
) {
    loop {
        before(cur);
        let mut g = xa.lock();
        match hold(&mut g, cur) {
            Ok(shadow) => {
                black_box(shadow);
                return;
            }
            Err(Error::NeedNodes { nodes }) => {
                drop(g);
                cur.reserve_nodes(nodes).expect("nodes");
            }
            Err(e) => panic!("add at {}: {e}", cur.index()),
        }
    }
}

/// The one-walk add (what `Mapping::add_folio` does inside its lock hold).
fn one_walk(xa: &Index, cur: &mut Cur<'_>, item: &'static Slot, index: u64) {
    add_with_retry(
        xa,
        cur,
        |_| {},
        |g, cur| one_walk_in_hold(g, cur, item, index),
    );
}

fn one_walk_in_hold(
    g: &mut Guard<'_>,
    cur: &mut Cur<'_>,
    item: &'static Slot,
    index: u64,
) -> Result<Option<u64>, Error> {
    let mut shadow = None;
    for_each_conflict(g, cur, index, |g, cur, v| {
        if shadow.is_none() {
            shadow = Some((v, cur.get_order(g)?));
        }
        Ok(())
    })?;
    if let Some((_, order)) = shadow {
        if order > 0 {
            cur.set_index(index);
            cur.split(g, 0)?;
        }
    }
    cur.set_index(index);
    cur.store(g, Some(Entry::Item(item)))?;
    Ok(shadow.map(|s| s.0))
}

/// The conflict walk under the lock (the kernel's `xas_for_each_conflict`)
/// over an order-0 slot at `index`: `shadow` sees each shadow's value, with
/// the cursor on it; a folio there panics (the benches add where none is).
#[inline]
fn for_each_conflict(
    g: &mut Guard<'_>,
    cur: &mut Cur<'_>,
    index: u64,
    mut shadow: impl FnMut(&mut Guard<'_>, &mut Cur<'_>, u64) -> Result<(), Error>,
) -> Result<(), Error> {
    cur.set_order(0)?;
    cur.set_index(index);
    while let Some((_, e)) = cur.find(g, index)? {
        match e {
            EntryRef::Item(_) => panic!("conflict at {index}"),
            EntryRef::Value(v) => shadow(g, cur, v)?,
        }
    }
    Ok(())
}

/// Nodes a split of an order-`order` entry into order 0 needs.
fn split_nodes(order: u32) -> usize {
    (1usize << order).div_ceil(64)
}

/// The lookup-then-store add (the kernel's `__filemap_add_folio` before
/// commit 6758c1128ceb).
fn lookup_then_store(xa: &Index, cur: &mut Cur<'_>, item: &'static Slot, index: u64) {
    add_with_retry(
        xa,
        cur,
        |cur| {
            // Walk 1, lockless: the order of whatever is in the slot.
            let order = xa.get_order(index);
            if order > 0 {
                // Walk 2: the entry to split; its nodes, outside the lock.
                black_box(xa.load(index));
                cur.reserve_nodes(split_nodes(order)).expect("nodes");
            }
        },
        |g, cur| lookup_then_store_in_hold(g, cur, item, index),
    );
}

fn lookup_then_store_in_hold(
    g: &mut Guard<'_>,
    cur: &mut Cur<'_>,
    item: &'static Slot,
    index: u64,
) -> Result<Option<u64>, Error> {
    // Walk 3: the conflict check.
    let mut old = None;
    for_each_conflict(g, cur, index, |_, _, v| {
        old = Some(v);
        Ok(())
    })?;
    if old.is_some() {
        // Walk 4: the order again, now under the lock.
        cur.set_index(index);
        if cur.get_order(g)? > 0 {
            cur.set_index(index);
            cur.split(g, 0)?;
        }
    }
    cur.set_index(index);
    cur.store(g, Some(Entry::Item(item)))?;
    Ok(old)
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Kind {
    Shadow0,
    ShadowSplit,
    Empty,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Shadow0, Kind::ShadowSplit, Kind::Empty];

    fn name(self) -> &'static str {
        match self {
            Kind::Shadow0 => "shadow0",
            Kind::ShadowSplit => "shadow_split",
            Kind::Empty => "empty",
        }
    }

    /// The indices the adds land on, in order.
    fn targets(self) -> Vec<u64> {
        match self {
            Kind::Shadow0 | Kind::Empty => (0..ADDS).collect(),
            Kind::ShadowSplit => (0..BIG_SHADOWS).map(|k| (k << BIG) + INSIDE).collect(),
        }
    }

    /// Puts the index into this kind's starting state (a store over a range
    /// replaces whatever entries it covers).
    fn prepare(self, xa: &Index) {
        match self {
            Kind::Shadow0 => {
                for i in 0..ADDS {
                    xa.store(i, Entry::Value(i)).expect("store");
                }
            }
            Kind::ShadowSplit => {
                for k in 0..BIG_SHADOWS {
                    xa.store_order(k << BIG, BIG, Entry::Value(k))
                        .expect("store");
                }
            }
            Kind::Empty => {
                for i in 0..ADDS {
                    xa.erase(i);
                }
            }
        }
    }
}

type AddFn = fn(&Index, &mut Cursor<'_, &'static Slot>, &'static Slot, u64);

/// Time and adds per (group, kind, variant), for the summary.
type Means = common::Means<(&'static str, Kind, &'static str)>;

fn bench_index(g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>, means: &Means) {
    let items = slots(ADDS.max(BIG_SHADOWS));
    let variants: [(&'static str, AddFn); 2] = [
        ("one_walk", one_walk),
        ("lookup_then_store", lookup_then_store),
    ];
    for kind in Kind::ALL {
        let targets = kind.targets();
        g.throughput(Throughput::Elements(targets.len() as u64));
        for (name, add) in variants {
            let xa = Index::new();
            let mut cur = Cursor::new(&xa, 0);
            g.bench_function(format!("{}/{name}", kind.name()), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        kind.prepare(&xa);
                        let t = Instant::now();
                        for (i, &index) in targets.iter().enumerate() {
                            add(&xa, &mut cur, &items[i], index);
                        }
                        total += t.elapsed();
                    }
                    record(
                        means,
                        ("index", kind, name),
                        total,
                        iters * targets.len() as u64,
                    );
                    total
                })
            });
            // Every add landed, on the right kind of slot.
            for (i, &index) in targets.iter().enumerate() {
                match xa.load(index) {
                    Some(Entry::Item(p)) => assert!(std::ptr::eq(p, &items[i])),
                    other => panic!("{name}: index {index} holds {other:?}"),
                }
            }
            if kind == Kind::ShadowSplit {
                assert_eq!(xa.get_order(INSIDE + 1), 0, "{name}: the shadow was split");
                assert!(matches!(xa.load(INSIDE + 1), Some(Entry::Value(0))));
            }
        }
    }
}

/// A file whose index is in `kind`'s starting state, in `cache`.
fn prepare_mapping(cache: &Cache, file: &mut Option<File>, kind: Kind) {
    let span = match kind {
        Kind::Shadow0 | Kind::Empty => ADDS,
        Kind::ShadowSplit => BIG_SHADOWS << BIG,
    };
    let fresh = || {
        cache
            .open_backing(MemBacking::with_data(vec![0u8; (span * PAGE) as usize]))
            .expect("open")
    };
    match kind {
        Kind::Empty => {
            *file = None;
            *file = Some(fresh());
        }
        Kind::Shadow0 | Kind::ShadowSplit => {
            let f = file.get_or_insert_with(fresh);
            // Whatever the last iteration added goes (leaving shadows),
            // then one folio of the wanted order per slot, evicted in turn.
            cache.shrink(u64::MAX);
            let m = f.mapping();
            let order = if kind == Kind::ShadowSplit { BIG } else { 0 };
            let mut index = 0;
            while index < span {
                let folio = m.new_folio(order).expect("new_folio");
                assert_eq!(folio.order(), order);
                m.add_folio(&folio, index).expect("add_folio");
                folio.unlock();
                index += 1 << order;
            }
            cache.shrink(u64::MAX);
            assert_eq!(m.nr_folios(), 0);
            assert_eq!(
                m.nr_shadows(),
                span >> order,
                "{kind:?}: one shadow per folio"
            );
        }
    }
}

fn bench_mapping(g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>, means: &Means) {
    let cache = Cache::builder()
        .capacity(((BIG_SHADOWS << BIG) * PAGE) as usize)
        .populate(Populate::Lazy)
        .build()
        .expect("cache");
    for kind in Kind::ALL {
        let targets = kind.targets();
        g.throughput(Throughput::Elements(targets.len() as u64));
        let mut file = None;
        g.bench_function(kind.name(), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    prepare_mapping(&cache, &mut file, kind);
                    let m = file.as_ref().expect("prepared").mapping();
                    let t = Instant::now();
                    for &index in &targets {
                        let folio = m.new_folio(0).expect("new_folio");
                        let shadow = m.add_folio(&folio, index).expect("add_folio");
                        folio.unlock();
                        black_box(shadow);
                    }
                    total += t.elapsed();
                }
                record(
                    means,
                    ("mapping", kind, "one_walk"),
                    total,
                    iters * targets.len() as u64,
                );
                total
            })
        });
        let m = file.as_ref().expect("prepared").mapping();
        assert_eq!(m.nr_folios(), targets.len() as u64);
        if kind == Kind::ShadowSplit {
            // Each order-9 shadow became 511 order-0 shadows and a folio.
            assert_eq!(m.nr_shadows(), BIG_SHADOWS * ((1 << BIG) - 1));
        }
    }
}

fn main() {
    let mut c = common::criterion("add_folio");
    let means = Means::default();
    let mut g = c.benchmark_group("add_folio_index");
    bench_index(&mut g, &means);
    g.finish();
    let mut g = c.benchmark_group("add_folio_mapping");
    bench_mapping(&mut g, &means);
    g.finish();
    c.final_summary();

    let means = means.into_inner();
    let ns = |key| common::mean_ns(&means, &key);
    eprintln!("\nns per add (all timed iterations of this run) and the gain of one walk:");
    eprintln!(
        "{:<14} {:>10} {:>18} {:>8} {:>14}",
        "slot", "one_walk", "lookup_then_store", "ratio", "mapping (real)"
    );
    for kind in Kind::ALL {
        let one = ns(("index", kind, "one_walk"));
        let two = ns(("index", kind, "lookup_then_store"));
        let real = ns(("mapping", kind, "one_walk"));
        eprintln!(
            "{:<14} {:>10} {:>18} {:>8} {:>14}",
            kind.name(),
            common::ns_text(one),
            common::ns_text(two),
            common::ratio_text(one, two),
            common::ns_text(real)
        );
    }
}
