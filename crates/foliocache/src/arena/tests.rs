use super::bitmap::SummaryBitmap;
use super::region::PopulateMethod;
use super::*;

#[test]
fn summary_bitmap_finds_lowest_across_levels() {
    let mut b = SummaryBitmap::new(64 * 64 * 3 + 5);
    assert_eq!(b.levels.len(), 3);
    assert_eq!(b.first_set(), None);
    b.set(64 * 64 * 3 + 4);
    b.set(4097);
    assert_eq!(b.first_set(), Some(4097));
    b.clear(4097);
    assert_eq!(b.first_set(), Some(64 * 64 * 3 + 4));
    b.set(0);
    assert_eq!(b.first_set(), Some(0));
    assert_eq!(b.check(), Ok(2));
    b.clear(0);
    b.clear(64 * 64 * 3 + 4);
    assert_eq!(b.first_set(), None);
    assert_eq!(b.check(), Ok(0));
}

#[test]
fn empty_bitmap_has_one_word() {
    let b = SummaryBitmap::new(0);
    assert_eq!(b.first_set(), None);
    assert_eq!(b.check(), Ok(0));
}

#[test]
#[cfg_attr(
    miri,
    ignore = "safe bookkeeping checked in full after each of 15 000 steps: minutes under Miri, nothing unsafe"
)]
fn buddy_random_ops_keep_invariants() {
    // A small xorshift so the unit test needs no dev-dependency.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for pages in [1u32, 7, 512, 1000, 1536 + 77] {
        let mut b = Buddy::new(pages);
        b.check().unwrap();
        let initial = b.counts;
        let mut live = Vec::new();
        for _ in 0..3000 {
            if next() % 3 != 0 {
                let order = (next() % 4) as u32 * (next() % 4) as u32 % (MAX_ORDER + 1);
                if let Some(p) = b.alloc(order) {
                    live.push((p, order));
                }
            } else if !live.is_empty() {
                let i = next() as usize % live.len();
                let (p, o) = live.swap_remove(i);
                b.free(p, o).unwrap();
            }
            b.check().unwrap();
        }
        for (p, o) in live {
            b.free(p, o).unwrap();
        }
        b.check().unwrap();
        assert_eq!(b.counts, initial);
    }
}

#[test]
fn limit_refuses_past_it_and_lifts() {
    let arena = Arena::new(4 << 20, Populate::Lazy).unwrap();
    arena.set_limit_pages(3);
    assert_eq!(arena.limit_pages(), 3);
    let a = arena.alloc(1).unwrap();
    assert_eq!(arena.alloc(1), None, "4 pages would pass the limit of 3");
    let b = arena.alloc(0).unwrap();
    let mut more = Vec::new();
    assert_eq!(arena.alloc_bulk(0, 4, &mut more), 0);
    arena.set_limit_pages(usize::MAX);
    assert_eq!(arena.limit_pages(), 1024);
    assert_eq!(arena.alloc_bulk(0, 4, &mut more), 4);
    for p in more {
        arena.free(p, 0).unwrap();
    }
    arena.free(a, 1).unwrap();
    arena.free(b, 0).unwrap();
    arena.check_consistency().unwrap();
}

/// Adjacent chunks are faulted in one `madvise` each, never as one run:
/// `MADV_POPULATE_WRITE` holds the process's `mmap_lock` for its whole
/// range, and a thread's start (its stack's `mmap`) waits for it.
#[test]
fn adjacent_chunks_are_faulted_in_one_call_each() {
    let arena = Arena::new(8 << 20, Populate::Lazy).unwrap();
    assert_eq!(arena.populate_each(&mut [2, 0, 1, 3]), 4);
    assert_eq!(arena.populate_ahead(4), 4, "four chunks were free");
}

#[test]
fn chunks_are_populated_once_and_released_whole() {
    // Three chunks (pages 0, 512, 1024) and a tail of 5 pages (an
    // order-2 block at 1536, an order-0 one at 1540): chunk 3.
    let arena = Arena::new((6 << 20) + 5 * PAGE_SIZE, Populate::Lazy).unwrap();
    assert_eq!(arena.populated_bytes(), 0);
    // The smallest fitting blocks first: the tail's.
    let a = arena.alloc(0).unwrap();
    assert_eq!(a.index(), 1540);
    assert_eq!(arena.populated_bytes(), 5 * PAGE_SIZE, "the tail chunk");
    let b = arena.alloc(0).unwrap();
    assert_eq!(b.index(), 1536);
    assert_eq!(arena.populated_bytes(), 5 * PAGE_SIZE, "same chunk");
    let mut window = Vec::new();
    assert_eq!(arena.alloc_bulk(9, 2, &mut window), 2);
    assert_eq!(window, [PageId(0), PageId(512)]);
    assert_eq!(arena.populated_bytes(), (4 << 20) + 5 * PAGE_SIZE);
    // Chunk 1 freed whole: released, and no longer populated. Chunk 2
    // was never populated: skipped. The tail's 3 free pages are
    // released, and their chunk stays populated.
    arena.free(window[1], 9).unwrap();
    let released = arena.release_free();
    assert_eq!(released, (2 << 20) + 3 * PAGE_SIZE);
    assert_eq!(arena.released_bytes(), released);
    assert_eq!(arena.populated_bytes(), (2 << 20) + 5 * PAGE_SIZE);
    arena.check_consistency().unwrap();
    assert_eq!(arena.free_pages(), 512 + 512 + 3);
    // Allocating in chunk 1 again populates it again.
    let c = arena.alloc(9).unwrap();
    assert_eq!(c.index(), 512);
    assert_eq!(arena.populated_bytes(), (4 << 20) + 5 * PAGE_SIZE);
    for (p, o) in [(a, 0), (b, 0), (window[0], 9), (c, 9)] {
        arena.free(p, o).unwrap();
    }
    arena.check_consistency().unwrap();
    assert_eq!(arena.free_pages(), arena.capacity_pages());
}

#[test]
fn eager_counts_everything_populated() {
    let arena = Arena::new(2 << 20, Populate::Lazy).unwrap();
    assert_eq!(arena.populated_bytes(), 0);
    if cfg!(miri) {
        return;
    }
    let eager = Arena::new((2 << 20) + PAGE_SIZE, Populate::Eager).unwrap();
    assert_eq!(eager.populated_bytes(), (2 << 20) + PAGE_SIZE);
}

#[test]
#[cfg_attr(miri, ignore = "mincore: Miri has no page residency")]
fn touch_fallback_faults_every_page() {
    let region = Region::map_aligned(64 * PAGE_SIZE, MAX_BLOCK_BYTES).unwrap();
    assert_eq!(
        region.populate("test region", true).unwrap(),
        PopulateMethod::Touch
    );
    let mut vec = vec![0u8; 64];
    // A raw call: neither rustix nor nix wraps mincore.
    // SAFETY: the range is our mapping; vec has one byte per page.
    let ret = unsafe { libc::mincore(region.ptr.as_ptr().cast(), region.len, vec.as_mut_ptr()) };
    assert_eq!(ret, 0);
    assert!(vec.iter().all(|&v| v & 1 == 1), "not all pages resident");
}
