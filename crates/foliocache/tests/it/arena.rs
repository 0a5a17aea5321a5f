//! Tests of the folio arena: a property test against a model buddy
//! allocator, the refused frees, odd capacities, bulk allocation, memory
//! patterns that catch overlapping blocks, a two-thread stress test, and
//! eager against lazy population (with the measured cost printed).

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;
use std::time::Instant;

use foliocache::internals::arena::{Arena, ArenaError, PageId, Populate, MAX_ORDER, PAGE_SIZE};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};

const ORDERS: usize = MAX_ORDER as usize + 1;

// ---------------------------------------------------------------------------
// Memory patterns: a tag in the first and last word of every page of a
// block. Two blocks that share a page overwrite each other's tag.

fn tag_of(seed: u64, page: u32) -> u64 {
    seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(page)
}

/// Writes the block's tags. The caller owns the block.
fn stamp(arena: &Arena, page: PageId, order: u32, seed: u64) {
    for p in page.index()..page.index() + (1 << order) {
        let base = arena.page_ptr(PageId::new(p)).as_ptr().cast::<u64>();
        let t = tag_of(seed, p);
        // SAFETY: the page is inside a block the caller allocated and has
        // not freed; page_ptr is page aligned so both words are aligned and
        // inside the page.
        unsafe {
            base.write(t);
            base.add(PAGE_SIZE / 8 - 1).write(!t);
        }
    }
}

/// Checks the block's tags; returns the first page whose tag is wrong.
fn check_stamp(arena: &Arena, page: PageId, order: u32, seed: u64) -> Result<(), u32> {
    for p in page.index()..page.index() + (1 << order) {
        let base = arena.page_ptr(PageId::new(p)).as_ptr().cast::<u64>();
        let t = tag_of(seed, p);
        // SAFETY: as in stamp.
        let (first, last) = unsafe { (base.read(), base.add(PAGE_SIZE / 8 - 1).read()) };
        if first != t || last != !t {
            return Err(p);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The model: which pages are allocated. With eager coalescing the free
// blocks are exactly the maximal fully free aligned blocks, so the model
// derives them from the occupancy alone.

struct Model {
    pages: u32,
    used: Vec<bool>,
    live: BTreeMap<u32, u32>,
    /// Memory tag seed of each live block.
    seeds: BTreeMap<u32, u64>,
}

impl Model {
    fn new(pages: u32) -> Model {
        Model {
            pages,
            used: vec![false; pages as usize],
            live: BTreeMap::new(),
            seeds: BTreeMap::new(),
        }
    }

    /// Free blocks as (order, page), maximal first.
    fn free_blocks(&self) -> Vec<(u32, u32)> {
        let n = self.pages as usize;
        // prefix[i] = used pages before i
        let mut prefix = vec![0u32; n + 1];
        for i in 0..n {
            prefix[i + 1] = prefix[i] + u32::from(self.used[i]);
        }
        let mut covered = vec![false; n];
        let mut out = Vec::new();
        for o in (0..=MAX_ORDER).rev() {
            let size = 1usize << o;
            for slot in 0..(n >> o) {
                let p = slot << o;
                if !covered[p] && prefix[p + size] == prefix[p] {
                    out.push((o, p as u32));
                    covered[p..p + size].fill(true);
                }
            }
        }
        out
    }

    fn counts(&self) -> [usize; ORDERS] {
        let mut c = [0; ORDERS];
        for (o, _) in self.free_blocks() {
            c[o as usize] += 1;
        }
        c
    }

    /// The block an allocation of `order` takes: the lowest-addressed free
    /// block of the smallest order that has one at or above `order` (split
    /// down to its first `2^order` pages).
    fn pick(&self, order: u32) -> Option<u32> {
        self.free_blocks()
            .into_iter()
            .filter(|&(o, _)| o >= order)
            .min()
            .map(|(_, page)| page)
    }

    fn allocated_pages(&self) -> usize {
        self.used.iter().filter(|&&u| u).count()
    }

    fn take(&mut self, page: u32, order: u32) -> Result<(), String> {
        let (s, e) = (page as usize, page as usize + (1 << order));
        if !page.is_multiple_of(1 << order) {
            return Err(format!("page {page} misaligned for order {order}"));
        }
        if e > self.pages as usize {
            return Err(format!(
                "block {page}/{order} past the end ({})",
                self.pages
            ));
        }
        if let Some(p) = (s..e).find(|&p| self.used[p]) {
            return Err(format!("block {page}/{order} overlaps live page {p}"));
        }
        self.used[s..e].fill(true);
        self.live.insert(page, order);
        Ok(())
    }

    fn release(&mut self, page: u32) -> u32 {
        let order = self.live.remove(&page).unwrap();
        self.seeds.remove(&page);
        self.used[page as usize..page as usize + (1 << order)].fill(false);
        order
    }
}

/// Every observable count agrees with the model.
fn assert_matches_model(arena: &Arena, model: &Model) {
    let counts = model.counts();
    for o in 0..=MAX_ORDER {
        assert_eq!(
            arena.free_blocks(o),
            counts[o as usize],
            "free blocks of order {o}"
        );
    }
    assert_eq!(
        arena.free_pages(),
        model.pages as usize - model.allocated_pages(),
        "free pages conservation"
    );
    let largest = (0..=MAX_ORDER).rev().find(|&o| counts[o as usize] > 0);
    assert_eq!(arena.largest_free_order(), largest, "largest free order");
    arena.check_consistency().unwrap();
}

#[derive(Clone, Debug)]
enum Op {
    Alloc(u32),
    Free(usize),
    Bulk(u32, usize),
    BadFree(u8, usize, u32),
    /// `free_bulk` of up to `n` live blocks from the `i`th, with a free
    /// that must be refused (a block repeated) when `bad`.
    FreeBulk(usize, usize, bool),
}

fn order_strategy() -> impl Strategy<Value = u32> {
    prop_oneof![3 => 0u32..=2, 1 => 0u32..=MAX_ORDER]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => order_strategy().prop_map(Op::Alloc),
        4 => any::<usize>().prop_map(Op::Free),
        1 => (order_strategy(), 0usize..40).prop_map(|(o, n)| Op::Bulk(o, n)),
        1 => (0u8..4, any::<usize>(), 0u32..=MAX_ORDER).prop_map(|(k, i, o)| Op::BadFree(k, i, o)),
        1 => (any::<usize>(), 1usize..12, any::<bool>()).prop_map(|(i, n, b)| Op::FreeBulk(i, n, b)),
    ]
}

fn pages_strategy() -> impl Strategy<Value = u32> {
    prop_oneof![1u32..=40, Just(512), Just(1024), 500u32..=2100]
}

/// One step of the model run. `seq` seeds the memory tags.
fn step(arena: &Arena, model: &mut Model, op: &Op, seq: u64) {
    let counts = model.counts();
    let can = |order: u32| counts[order as usize..].iter().any(|&c| c > 0);
    match *op {
        Op::Alloc(order) => {
            let expect = can(order);
            let want = model.pick(order);
            match arena.alloc(order) {
                Some(page) => {
                    assert!(expect, "alloc({order}) succeeded with no free block >= it");
                    assert_eq!(
                        Some(page.index()),
                        want,
                        "alloc({order}) took another block"
                    );
                    model.take(page.index(), order).unwrap();
                    stamp(arena, page, order, seq);
                    model.seeds.insert(page.index(), seq);
                }
                None => assert!(!expect, "alloc({order}) failed with a free block >= it"),
            }
        }
        Op::Free(i) => {
            if model.live.is_empty() {
                return;
            }
            let (&page, &order) = model.live.iter().nth(i % model.live.len()).unwrap();
            check_stamp(arena, PageId::new(page), order, model.seeds[&page])
                .unwrap_or_else(|p| panic!("page {p} of block {page} was overwritten"));
            arena.free(PageId::new(page), order).unwrap();
            model.release(page);
        }
        Op::Bulk(order, n) => {
            let mut out = vec![PageId::new(u32::MAX)];
            let got = arena.alloc_bulk(order, n, &mut out);
            assert_eq!(out.len(), 1 + got, "alloc_bulk appends what it reports");
            assert!(got <= n, "alloc_bulk({order}, {n}) took {got} blocks");
            assert_eq!(
                out[0],
                PageId::new(u32::MAX),
                "alloc_bulk keeps what was there"
            );
            // It stops early only when nothing of that order is left.
            if got < n {
                assert!(
                    arena.largest_free_order().is_none_or(|o| o < order),
                    "alloc_bulk stopped early with memory left"
                );
            }
            // The blocks as many single allocations would take, in their
            // order (a block the batch uses whole is taken at once).
            for &page in &out[1..] {
                assert_eq!(
                    Some(page.index()),
                    model.pick(order),
                    "alloc_bulk({order}, {n}) took another block than alloc would"
                );
                model.take(page.index(), order).unwrap();
                let seed = seq << 20 | u64::from(page.index());
                stamp(arena, page, order, seed);
                model.seeds.insert(page.index(), seed);
            }
        }
        Op::BadFree(kind, i, order) => bad_free(arena, model, kind, i, order),
        Op::FreeBulk(i, n, bad) => {
            if model.live.is_empty() {
                return;
            }
            let live: Vec<(u32, u32)> = model.live.iter().map(|(&p, &o)| (p, o)).collect();
            let mut blocks: Vec<(PageId, u32)> = (0..n.min(live.len()))
                .map(|k| live[(i + k) % live.len()])
                .map(|(p, o)| (PageId::new(p), o))
                .collect();
            for &(page, order) in &blocks {
                check_stamp(arena, page, order, model.seeds[&page.index()])
                    .unwrap_or_else(|p| panic!("page {p} of block {page:?} was overwritten"));
            }
            let wrong = bad.then(|| {
                blocks.push(blocks[0]);
                blocks.len() - 1
            });
            match (arena.free_bulk(&blocks), wrong) {
                (Ok(()), None) => {}
                (Err((at, e)), Some(w)) => {
                    assert_eq!(at, w, "the refused block's position");
                    assert!(matches!(e, ArenaError::DoubleFree { .. }), "{e:?}");
                    blocks.pop();
                }
                (r, w) => panic!("free_bulk gave {r:?}, the wrong block at {w:?}"),
            }
            for (page, _) in blocks {
                model.release(page.index());
            }
        }
    }
}

/// A free that must be refused, with the error it must get.
fn bad_free(arena: &Arena, model: &Model, kind: u8, i: usize, order: u32) {
    let (page, order, want): (u32, u32, fn(&ArenaError) -> bool) = match kind {
        0 => (model.pages + (i % 1000) as u32, order, |e| {
            matches!(e, ArenaError::OutOfRange { .. })
        }),
        1 => {
            let order = order.max(1);
            let page = (i as u32 % model.pages) | 1;
            if page >= model.pages {
                return;
            }
            (page, order, |e| matches!(e, ArenaError::Misaligned { .. }))
        }
        2 => {
            // Any page of a free block, at order 0.
            let free = model.free_blocks();
            if free.is_empty() {
                return;
            }
            let (o, start) = free[i % free.len()];
            let page = start + (i as u32 >> 8) % (1 << o);
            (page, 0, |e| matches!(e, ArenaError::DoubleFree { .. }))
        }
        _ => {
            // A live block at another order, or a page inside it.
            if model.live.is_empty() {
                return;
            }
            let (&start, &live_order) = model.live.iter().nth(i % model.live.len()).unwrap();
            if order == live_order {
                if live_order == 0 {
                    return;
                }
                let page = start + 1 + (i as u32 >> 8) % ((1 << live_order) - 1);
                (page, 0, |e| matches!(e, ArenaError::WrongOrder { .. }))
            } else if start % (1 << order) != 0 {
                return;
            } else {
                (start, order, |e| matches!(e, ArenaError::WrongOrder { .. }))
            }
        }
    };
    let err = arena
        .free(PageId::new(page), order)
        .expect_err("a bad free was accepted");
    assert!(want(&err), "free({page}, {order}) gave {err:?}");
    assert!(!err.to_string().is_empty());
}

proptest! {
    // (Two short cases on small arenas under Miri, which runs this about a
    // thousand times slower; scripts/miri.sh.)
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 2 } else { 96 }))]

    /// Random alloc/free sequences agree with the model at every step, blocks
    /// never overlap (checked in the model and by memory tags), and freeing
    /// everything restores the initial free block set.
    #[test]
    fn buddy_agrees_with_model(
        pages in if cfg!(miri) { (1u32..=40).boxed() } else { pages_strategy().boxed() },
        ops in prop::collection::vec(op_strategy(), 1..if cfg!(miri) { 12 } else { 160 }),
    ) {
        let arena = Arena::new(pages as usize * PAGE_SIZE, Populate::Lazy).unwrap();
        let mut model = Model::new(pages);
        let initial = model.counts();
        assert_matches_model(&arena, &model);
        for (seq, op) in ops.iter().enumerate() {
            step(&arena, &mut model, op, seq as u64);
            assert_matches_model(&arena, &model);
        }
        let live: Vec<(u32, u32)> = model.live.iter().map(|(&p, &o)| (p, o)).collect();
        for (page, order) in live {
            prop_assert_eq!(check_stamp(&arena, PageId::new(page), order, model.seeds[&page]), Ok(()));
            arena.free(PageId::new(page), order).unwrap();
            model.release(page);
        }
        assert_matches_model(&arena, &model);
        let back: Vec<usize> = (0..=MAX_ORDER).map(|o| arena.free_blocks(o)).collect();
        prop_assert_eq!(back, initial.to_vec());
        prop_assert_eq!(arena.free_pages(), pages as usize);
    }
}

// ---------------------------------------------------------------------------
// Construction.

#[test]
fn zero_pages_is_invalid_input() {
    for bytes in [0, 1, PAGE_SIZE - 1] {
        let err = Arena::new(bytes, Populate::Lazy).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("page"), "{err}");
    }
}

#[test]
fn capacity_rounds_down_to_pages() {
    let arena = Arena::new(3 * PAGE_SIZE + PAGE_SIZE - 1, Populate::Lazy).unwrap();
    assert_eq!(arena.capacity_pages(), 3);
    assert_eq!(arena.capacity_bytes(), 3 * PAGE_SIZE);
    assert_eq!(arena.free_pages(), 3);
}

#[test]
fn mapping_is_2mib_aligned_and_pages_are_contiguous() {
    let arena = Arena::new(3 << 20, Populate::Lazy).unwrap();
    let base = arena.page_ptr(PageId::new(0)).as_ptr() as usize;
    assert_eq!(base % (2 << 20), 0);
    let last = arena.capacity_pages() as u32 - 1;
    assert_eq!(
        arena.page_ptr(PageId::new(last)).as_ptr() as usize,
        base + last as usize * PAGE_SIZE
    );
    assert!(arena.contains(PageId::new(last)));
    assert!(!arena.contains(PageId::new(last + 1)));
}

#[test]
#[cfg_attr(miri, ignore = "mincore: Miri has no page residency")]
fn every_page_of_the_capacity_is_mapped() {
    let arena = Arena::new((2 << 20) + 5 * PAGE_SIZE, Populate::Lazy).unwrap();
    let base = arena.page_ptr(PageId::new(0)).as_ptr();
    let mut vec = vec![0u8; arena.capacity_pages()];
    // SAFETY: mincore only reads page tables; the range is the arena's and
    // vec has one byte per page.
    let ret = unsafe { libc::mincore(base.cast(), arena.capacity_bytes(), vec.as_mut_ptr()) };
    assert_eq!(ret, 0, "mincore: {}", io::Error::last_os_error());
    assert_eq!(arena.capacity_bytes(), 517 * PAGE_SIZE);
}

#[test]
fn tail_is_carved_into_largest_aligned_blocks() {
    // 3 whole 2 MiB blocks + 300 pages = 256 + 32 + 8 + 4.
    let pages = 3 * 512 + 300;
    let arena = Arena::new(pages * PAGE_SIZE, Populate::Lazy).unwrap();
    let mut want = [0usize; ORDERS];
    want[9] = 3;
    want[8] = 1;
    want[5] = 1;
    want[3] = 1;
    want[2] = 1;
    let got: Vec<usize> = (0..=MAX_ORDER).map(|o| arena.free_blocks(o)).collect();
    assert_eq!(got, want.to_vec());
    assert_eq!(arena.largest_free_order(), Some(9));
}

#[test]
fn non_2mib_capacity_uses_every_page() {
    // (Under Miri, three of the sizes: one page at a time is slow there.)
    let sizes: &[usize] = if cfg!(miri) {
        &[1, 3, 513]
    } else {
        &[1, 3, 511, 513, 777, 1000, 1536 + 300]
    };
    for &pages in sizes {
        let arena = Arena::new(pages * PAGE_SIZE, Populate::Lazy).unwrap();
        let mut seen = vec![false; pages];
        while let Some(p) = arena.alloc(0) {
            assert!(!seen[p.index() as usize], "page {} twice", p.index());
            seen[p.index() as usize] = true;
        }
        assert!(
            seen.iter().all(|&s| s),
            "{pages} pages: some never allocated"
        );
        assert_eq!(arena.free_pages(), 0);
        assert_eq!(arena.largest_free_order(), None);
        for p in 0..pages as u32 {
            arena.free(PageId::new(p), 0).unwrap();
        }
        assert_eq!(arena.free_pages(), pages);
        arena.check_consistency().unwrap();
        let fresh = Arena::new(pages * PAGE_SIZE, Populate::Lazy).unwrap();
        for o in 0..=MAX_ORDER {
            assert_eq!(
                arena.free_blocks(o),
                fresh.free_blocks(o),
                "{pages} pages, order {o}"
            );
        }
    }
}

#[test]
fn big_orders_fit_only_where_aligned_blocks_fit() {
    // 700 pages: one 512-page block, then 128 + 32 + 16 + 8 + 4.
    let arena = Arena::new(700 * PAGE_SIZE, Populate::Lazy).unwrap();
    assert_eq!(arena.alloc(9), Some(PageId::new(0)));
    assert_eq!(arena.alloc(9), None);
    assert_eq!(arena.alloc(8), None);
    assert_eq!(arena.alloc(7), Some(PageId::new(512)));
    assert_eq!(arena.alloc(7), None);
    arena.check_consistency().unwrap();
}

#[test]
fn populate_ahead_faults_in_the_chunks_allocation_takes_next() {
    const CHUNK: usize = 2 << 20;
    let arena = Arena::new(8 * CHUNK, Populate::Lazy).unwrap();
    assert_eq!(arena.populated_bytes(), 0);
    // A page of chunk 0: that chunk is faulted in by the allocation.
    let a = arena.alloc(0).unwrap();
    assert_eq!(arena.populated_bytes(), CHUNK);
    // The next two whole free blocks, chunks 1 and 2.
    assert_eq!(arena.populate_ahead(2), 2);
    assert_eq!(arena.populated_bytes(), 3 * CHUNK);
    // Still the next two: nothing more to do.
    assert_eq!(arena.populate_ahead(2), 0);
    // Allocation takes them and faults nothing in.
    let b = arena.alloc(MAX_ORDER).unwrap();
    let c = arena.alloc(MAX_ORDER).unwrap();
    assert_eq!((b, c), (PageId::new(512), PageId::new(1024)));
    assert_eq!(arena.populated_bytes(), 3 * CHUNK);
    assert_eq!(arena.populate_ahead(2), 2, "chunks 3 and 4");
    assert_eq!(arena.populated_bytes(), 5 * CHUNK);
    // The limit leaves room for one more chunk only (and a page).
    let allocated = 8 * 512 - arena.free_pages();
    arena.set_limit_pages(allocated + 512 + 1);
    assert_eq!(
        arena.populate_ahead(8),
        0,
        "chunks 3 and 4 are the next, done"
    );
    arena.set_limit_pages(allocated + 3 * 512);
    assert_eq!(arena.populate_ahead(8), 1, "room for 3: chunks 3, 4 and 5");
    assert_eq!(arena.populated_bytes(), 6 * CHUNK);
    arena.set_limit_pages(usize::MAX);
    // The contents of allocated blocks are not touched.
    stamp(&arena, a, 0, 7);
    assert_eq!(arena.populate_ahead(8), 2, "chunks 6 and 7");
    assert_eq!(check_stamp(&arena, a, 0, 7), Ok(()));
    assert_eq!(arena.populated_bytes(), 8 * CHUNK);
    assert_eq!(arena.populate_ahead(8), 0);
    assert_eq!(arena.populate_ahead(usize::MAX), 0, "any count is taken");
    arena.check_consistency().unwrap();
}

// ---------------------------------------------------------------------------
// Refused frees leave the arena as it was.

fn snapshot(arena: &Arena) -> (usize, Vec<usize>) {
    (
        arena.free_pages(),
        (0..=MAX_ORDER).map(|o| arena.free_blocks(o)).collect(),
    )
}

#[test]
fn double_free_is_refused_and_harmless() {
    let arena = Arena::new(2 << 20, Populate::Lazy).unwrap();
    let a = arena.alloc(0).unwrap();
    let b = arena.alloc(0).unwrap();
    arena.free(a, 0).unwrap();
    let before = snapshot(&arena);
    let err = arena.free(a, 0).unwrap_err();
    assert_eq!(
        err,
        ArenaError::DoubleFree {
            page: a.index(),
            order: 0,
            free_block: a.index(),
            free_order: 0
        }
    );
    assert!(err.to_string().contains("double free"), "{err}");
    assert_eq!(snapshot(&arena), before);
    arena.check_consistency().unwrap();
    arena.free(b, 0).unwrap();
    // Now a and b merged up to the whole 2 MiB block.
    let err = arena.free(b, 0).unwrap_err();
    assert!(
        matches!(
            err,
            ArenaError::DoubleFree {
                free_order: 9,
                free_block: 0,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(arena.free_blocks(9), 1);
}

#[test]
fn wrong_order_is_refused_and_harmless() {
    let arena = Arena::new(2 << 20, Populate::Lazy).unwrap();
    let block = arena.alloc(4).unwrap();
    let before = snapshot(&arena);
    for order in [0, 3, 5, 9] {
        let err = arena.free(block, order).unwrap_err();
        assert_eq!(
            err,
            ArenaError::WrongOrder {
                page: block.index(),
                order,
                allocated_block: block.index(),
                allocated_order: 4
            }
        );
        assert!(err.to_string().contains("with order 4"), "{err}");
    }
    // A page inside the block.
    let inner = PageId::new(block.index() + 8);
    assert!(matches!(
        arena.free(inner, 3),
        Err(ArenaError::WrongOrder {
            allocated_order: 4,
            ..
        })
    ));
    assert_eq!(snapshot(&arena), before);
    arena.check_consistency().unwrap();
    arena.free(block, 4).unwrap();
    assert_eq!(arena.free_blocks(9), 1);
}

#[test]
fn misaligned_is_refused_and_harmless() {
    let arena = Arena::new(2 << 20, Populate::Lazy).unwrap();
    let block = arena.alloc(2).unwrap();
    let before = snapshot(&arena);
    let err = arena.free(PageId::new(block.index() + 2), 2).unwrap_err();
    assert_eq!(
        err,
        ArenaError::Misaligned {
            page: block.index() + 2,
            order: 2
        }
    );
    assert!(err.to_string().contains("first page"), "{err}");
    assert_eq!(snapshot(&arena), before);
    arena.check_consistency().unwrap();
    arena.free(block, 2).unwrap();
}

#[test]
fn out_of_range_and_bad_order_are_refused_and_harmless() {
    let arena = Arena::new(100 * PAGE_SIZE, Populate::Lazy).unwrap();
    let block = arena.alloc(0).unwrap();
    let before = snapshot(&arena);
    for page in [100, 101, 4096, u32::MAX] {
        let err = arena.free(PageId::new(page), 0).unwrap_err();
        assert_eq!(
            err,
            ArenaError::OutOfRange {
                page,
                capacity_pages: 100
            }
        );
        assert!(err.to_string().contains("outside"), "{err}");
    }
    let err = arena.free(block, MAX_ORDER + 1).unwrap_err();
    assert_eq!(
        err,
        ArenaError::InvalidOrder {
            order: MAX_ORDER + 1
        }
    );
    assert!(err.to_string().contains("MAX_ORDER"), "{err}");
    assert_eq!(arena.alloc(MAX_ORDER + 1), None);
    assert_eq!(arena.free_blocks(MAX_ORDER + 1), 0);
    assert_eq!(snapshot(&arena), before);
    arena.check_consistency().unwrap();
    arena.free(block, 0).unwrap();
}

#[test]
#[should_panic(expected = "outside the arena")]
fn page_ptr_of_a_foreign_page_panics() {
    let arena = Arena::new(PAGE_SIZE, Populate::Lazy).unwrap();
    let _ = arena.page_ptr(PageId::new(1));
}

// ---------------------------------------------------------------------------
// alloc_bulk.

#[test]
fn alloc_bulk_takes_a_window_at_once() {
    let arena = Arena::new(2 << 20, Populate::Lazy).unwrap();
    let mut out = Vec::new();
    assert_eq!(arena.alloc_bulk(0, 32, &mut out), 32);
    let mut idx: Vec<u32> = out.iter().map(|p| p.index()).collect();
    idx.sort_unstable();
    idx.dedup();
    assert_eq!(idx.len(), 32, "distinct pages");
    assert_eq!(arena.free_pages(), 512 - 32);
    // Larger orders, more than fit: gets what there is.
    let mut big = Vec::new();
    let got = arena.alloc_bulk(4, 1000, &mut big);
    assert_eq!(got, (512 - 32) / 16);
    assert_eq!(big.len(), got);
    assert!(big.iter().all(|p| p.index() % 16 == 0));
    assert_eq!(arena.free_pages(), 0);
    assert_eq!(arena.alloc_bulk(0, 1, &mut big), 0);
    assert_eq!(arena.alloc_bulk(MAX_ORDER + 1, 1, &mut big), 0);
    assert_eq!(arena.alloc_bulk(0, 0, &mut big), 0);
    for p in out {
        arena.free(p, 0).unwrap();
    }
    for p in big {
        arena.free(p, 4).unwrap();
    }
    assert_eq!(arena.free_blocks(9), 1);
    arena.check_consistency().unwrap();
}

#[test]
fn alloc_bulk_with_a_huge_count_does_not_overreserve() {
    let arena = Arena::new(64 * PAGE_SIZE, Populate::Lazy).unwrap();
    let mut out = Vec::new();
    assert_eq!(arena.alloc_bulk(0, usize::MAX, &mut out), 64);
    assert!(out.capacity() < 1024);
}

// ---------------------------------------------------------------------------
// Memory.

#[test]
fn every_block_holds_its_own_pattern() {
    // Fill the whole arena with blocks of mixed orders, write a full
    // per-block byte pattern into each, check each before freeing it.
    // (Under Miri, which checks each byte, 73 pages: orders up to 6.)
    let pages = if cfg!(miri) { 64 + 9 } else { 1536 + 200 };
    let arena = Arena::new(pages * PAGE_SIZE, Populate::Eager).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut live: Vec<(PageId, u32, u8)> = Vec::new();
    let mut fill = 1u8;
    loop {
        let order = rng.gen_range(0..=MAX_ORDER);
        let (page, order) = match arena.alloc(order) {
            Some(page) => (page, order),
            None => match arena.alloc(0) {
                Some(page) => (page, 0),
                None => break,
            },
        };
        let len = PAGE_SIZE << order;
        // SAFETY: the block is ours until freed below; len is its size.
        unsafe { arena.page_ptr(page).as_ptr().write_bytes(fill, len) };
        live.push((page, order, fill));
        fill = fill.wrapping_add(1).max(1);
    }
    assert_eq!(arena.free_pages(), 0);
    let total: usize = live.iter().map(|&(_, o, _)| 1usize << o).sum();
    assert_eq!(total, pages);
    for (page, order, fill) in live {
        let len = PAGE_SIZE << order;
        // SAFETY: the block is ours and was fully written above.
        let bytes = unsafe { std::slice::from_raw_parts(arena.page_ptr(page).as_ptr(), len) };
        assert!(
            bytes.iter().all(|&b| b == fill),
            "block {page} order {order} was overwritten"
        );
        arena.free(page, order).unwrap();
    }
    assert_eq!(arena.free_pages(), pages);
    arena.check_consistency().unwrap();
}

#[test]
#[cfg_attr(
    miri,
    ignore = "parking_lot_core's futex wait passes &AtomicI32 to syscall(), which this Miri rejects as a variadic argument"
)]
fn two_threads_alloc_and_free_without_overlap() {
    // Under Miri, which checks every access of the two threads for races
    // and for the blocks' bounds, a smaller arena and fewer operations.
    let (bytes, rounds) = if cfg!(miri) {
        (4 << 20, 600)
    } else {
        (16 << 20, 1_000_000)
    };
    let arena = Arc::new(Arena::new(bytes, Populate::Eager).unwrap());
    let initial = snapshot(&arena);
    let start = Instant::now();
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let arena = Arc::clone(&arena);
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                let mut live: Vec<(PageId, u32, u64)> = Vec::new();
                let mut batch = Vec::new();
                let mut ops = 0u64;
                for seq in 0..rounds {
                    let seed = (t << 56) | seq;
                    match rng.gen_range(0..10) {
                        0..=4 if live.len() < 400 => {
                            let order = if rng.gen_range(0..50) == 0 {
                                MAX_ORDER
                            } else {
                                rng.gen_range(0..=3)
                            };
                            if let Some(page) = arena.alloc(order) {
                                stamp(&arena, page, order, seed);
                                live.push((page, order, seed));
                            }
                        }
                        5 => {
                            batch.clear();
                            arena.alloc_bulk(0, 32, &mut batch);
                            for &page in &batch {
                                stamp(&arena, page, 0, seed ^ u64::from(page.index()));
                                live.push((page, 0, seed ^ u64::from(page.index())));
                            }
                        }
                        _ if !live.is_empty() => {
                            let i = rng.gen_range(0..live.len());
                            let (page, order, seed) = live.swap_remove(i);
                            check_stamp(&arena, page, order, seed).unwrap_or_else(|p| {
                                panic!("thread {t}: page {p} of block {page} was overwritten")
                            });
                            arena.free(page, order).unwrap();
                        }
                        _ => {}
                    }
                    ops += 1;
                }
                for (page, order, seed) in live {
                    check_stamp(&arena, page, order, seed).unwrap();
                    arena.free(page, order).unwrap();
                }
                ops
            })
        })
        .collect();
    let ops: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    eprintln!(
        "two-thread stress: {ops} ops in {:.2} s",
        start.elapsed().as_secs_f64()
    );
    assert_eq!(snapshot(&arena), initial);
    arena.check_consistency().unwrap();
}

// ---------------------------------------------------------------------------
// Population.

fn resident_pages(arena: &Arena) -> usize {
    let mut vec = vec![0u8; arena.capacity_pages()];
    let base = arena.page_ptr(PageId::new(0)).as_ptr();
    // SAFETY: mincore only reads page tables; the range is the arena's and
    // vec has one byte per page.
    let ret = unsafe { libc::mincore(base.cast(), arena.capacity_bytes(), vec.as_mut_ptr()) };
    assert_eq!(ret, 0, "mincore: {}", io::Error::last_os_error());
    vec.iter().filter(|&&v| v & 1 != 0).count()
}

fn gib_per_s(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64 / secs.max(1e-9)
}

#[test]
#[cfg_attr(miri, ignore = "mincore and 768 MiB of populated arenas: not for Miri")]
fn eager_populates_at_build_and_lazy_does_not() {
    const BYTES: usize = 256 << 20;
    let eager = Arena::new(BYTES, Populate::Eager).unwrap();
    let took = eager.populate_time();
    assert!(!took.is_zero(), "eager populate time recorded");
    assert_eq!(
        resident_pages(&eager),
        eager.capacity_pages(),
        "eager: all resident"
    );
    let gib = BYTES as f64 / (1u64 << 30) as f64;
    eprintln!(
        "populate Eager 256 MiB: {:.1} ms = {:.2} s/GiB ({:.2} GiB/s), THP advised: {}",
        took.as_secs_f64() * 1e3,
        took.as_secs_f64() / gib,
        gib_per_s(BYTES, took.as_secs_f64()),
        eager.huge_pages_advised()
    );
    // Keep the eager arena alive, so the lazy one gets other memory, as
    // fresh as the eager one's was (not pages the eager arena just freed).
    let lazy = Arena::new(BYTES, Populate::Lazy).unwrap();
    assert!(lazy.populate_time().is_zero());
    assert_eq!(resident_pages(&lazy), 0, "lazy: nothing resident at build");
    // The first touch pays the same cost later, page by page.
    let start = Instant::now();
    let base = lazy.page_ptr(PageId::new(0)).as_ptr();
    for off in (0..BYTES).step_by(PAGE_SIZE) {
        // SAFETY: inside the arena; nothing is allocated, nobody else uses it.
        unsafe { base.add(off).write_volatile(1) };
    }
    let touch = start.elapsed();
    eprintln!(
        "populate Lazy 256 MiB, first touch after build: {:.1} ms = {:.2} s/GiB ({:.2} GiB/s)",
        touch.as_secs_f64() * 1e3,
        touch.as_secs_f64() / gib,
        gib_per_s(BYTES, touch.as_secs_f64())
    );
    assert_eq!(resident_pages(&lazy), lazy.capacity_pages());
    drop(eager);
    drop(lazy);

    // Built again at once, the arena gets memory the guest still holds.
    let again = Arena::new(BYTES, Populate::Eager).unwrap();
    let took = again.populate_time();
    eprintln!(
        "populate Eager 256 MiB right after freeing 512 MiB: {:.1} ms = {:.2} s/GiB ({:.2} GiB/s)",
        took.as_secs_f64() * 1e3,
        took.as_secs_f64() / gib,
        gib_per_s(BYTES, took.as_secs_f64())
    );
}

#[test]
fn metadata_is_small() {
    let arena = Arena::new(256 << 20, Populate::Lazy).unwrap();
    let per_page = arena.metadata_bytes() as f64 / arena.capacity_pages() as f64;
    eprintln!(
        "metadata: {} bytes for {} pages = {per_page:.3} bytes/page",
        arena.metadata_bytes(),
        arena.capacity_pages()
    );
    assert!(per_page < 1.0, "{per_page} bytes per page");
}

#[test]
fn arena_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Arena>();
}
