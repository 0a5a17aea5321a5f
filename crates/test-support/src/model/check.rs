//! Whole-array checks of an array against its [`Model`]: contents
//! ([`check_contents`]), the tree's exact node count and memory
//! ([`check_nodes`]), the items' reference counts, and the end of a run
//! ([`teardown`]: everything erased, every item made released).

use super::*;

/// Load, contains, order and marks at `i`, owned and borrowed.
pub fn probe(xa: &Xa, m: &Model, i: u64) {
    let want = m.load(i);
    assert_same(&xa.load(i), &want, format_args!("load({i})"));
    assert_eq!(xa.contains(i), want.is_some(), "contains({i})");
    assert_eq!(xa.get_order(i), m.get_order(i), "get_order({i})");
    for mk in marks() {
        assert_eq!(
            xa.get_mark(i, mk),
            m.get_mark(i, mk.index()),
            "get_mark({i}, {mk:?})"
        );
    }
    let g = xa.pin();
    assert!(
        ref_same_opt(&xa.load_ref(i, &g), &want),
        "load_ref({i}) = {:?}, expected {want:?}",
        xa.load_ref(i, &g)
    );
    // With no store racing it, the start it reports is exact: the first
    // index of the entry covering `i`.
    let with_start = xa.load_ref_with_start(i, &g);
    assert!(
        ref_same_opt(&with_start.map(|(e, _)| e), &want),
        "load_ref_with_start({i}): entry differs from {want:?}"
    );
    if let Some((_, start)) = with_start {
        assert_eq!(
            Some(start),
            m.covering(i).map(|(b, _)| b),
            "load_ref_with_start({i}): start"
        );
    }
}

/// Compares everything readable without the lock: emptiness, marks,
/// iteration, counts, and loads in and around every entry.
pub fn check_contents(xa: &Xa, m: &Model) {
    assert_eq!(xa.is_empty(), m.is_empty(), "is_empty");
    for mk in marks() {
        assert_eq!(xa.marked(mk), m.marked(mk.index()), "marked({mk:?})");
    }
    let all = Some((0, u64::MAX));
    let got: Vec<_> = xa.iter(..).unwrap().collect();
    assert_list(&got, &m.iter(all, Filt::Present), "iter(..)");
    for mk in marks() {
        let got: Vec<_> = xa.iter_marked(.., mk).unwrap().collect();
        assert_list(
            &got,
            &m.iter(all, Filt::Marked(mk.index())),
            format_args!("iter_marked(.., {mk:?})"),
        );
    }
    assert_eq!(xa.count(..).unwrap(), m.len(), "count(..)");
    // Probe a bounded number of slots: at, inside, before and after each.
    let step = (m.map.len() / 256).max(1);
    for (&b, s) in m.map.iter().step_by(step) {
        let last = last_of(b, s.order);
        probe(xa, m, b);
        probe(xa, m, last);
        probe(xa, m, b + (last - b) / 2);
        if let Some(p) = b.checked_sub(1) {
            probe(xa, m, p);
        }
        if let Some(n) = last.checked_add(1) {
            probe(xa, m, n);
        }
    }
}

/// Bytes one node adds to `memory_bytes`.
fn node_bytes() -> usize {
    let xa = Xa::new();
    xa.store(0, Entry::Value(0)).unwrap();
    assert_eq!(xa.node_count(), 1);
    xa.memory_bytes() - Xa::new().memory_bytes()
}

/// The tree's shape and accounting: exactly the nodes `Model::expected_nodes`
/// predicts (the root follows the documented growth and shrink rules, so a
/// node left behind, or a root that does not shrink after an erase, fails
/// this), and `memory_bytes` = base + nodes.
pub fn check_nodes(xa: &Xa, m: &Model) {
    let nodes = xa.node_count();
    if m.is_empty() {
        assert_eq!(nodes, 0, "node_count() of an empty array");
    }
    assert_eq!(
        nodes,
        m.expected_nodes(),
        "node_count() vs the smallest tree"
    );
    assert_eq!(
        xa.memory_bytes(),
        Xa::new().memory_bytes() + nodes * node_bytes(),
        "memory_bytes()"
    );
}

/// Each item the array holds k times (k slots) has at least 2k + 1 strong
/// references: k in the model, k in the array, one here. Fewer means the
/// array dropped a reference it still uses.
fn check_refcounts(m: &Model) {
    let mut per: HashMap<*const u64, (P, usize)> = HashMap::new();
    for s in m.map.values() {
        if let Val::Entry(Entry::Item(a)) = &s.val {
            per.entry(Arc::as_ptr(a))
                .or_insert_with(|| (a.clone(), 0))
                .1 += 1;
        }
    }
    for (a, k) in per.values() {
        assert!(
            Arc::strong_count(a) > 2 * k,
            "item {a} held by {k} slots has only {} references",
            Arc::strong_count(a)
        );
    }
}

/// `check_contents` plus what needs the lock, the shape and the refcounts.
pub fn check_full(xa: &Xa, m: &Model) {
    check_contents(xa, m);
    assert_eq!(xa.len(), m.len(), "len()");
    check_nodes(xa, m);
    check_refcounts(m);
}

/// Every item made during a run is freed once the array is gone and the
/// epoch has moved on (nothing leaked, through retirement or drop).
pub fn assert_released(created: &[Weak<u64>]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let alive = created.iter().filter(|w| w.strong_count() > 0).count();
        if alive == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{alive} of {} items never released",
            created.len()
        );
        crossbeam_epoch::pin().flush();
        std::thread::yield_now();
    }
}

/// Ends a run: checks the array against the model in full, erases
/// everything ([`teardown`]), drops the array and checks that every item
/// the run made was released exactly once.
pub fn finish_run(xa: Xa, m: &mut Model) {
    check_full(&xa, m);
    teardown(&xa, m);
    drop(xa);
    assert_released(&m.created.borrow());
}

/// Erases everything (alternately through the first and the last index of
/// each entry), then checks that erasing everything leaves the array
/// empty, with no node and the memory of an empty array.
pub fn teardown(xa: &Xa, m: &mut Model) {
    let slots: Vec<(u64, u32)> = m.map.iter().map(|(&b, s)| (b, s.order)).collect();
    for (k, (b, o)) in slots.into_iter().enumerate() {
        let i = if k % 2 == 0 { b } else { last_of(b, o) };
        let want = m.erase(i);
        assert_same(&xa.erase(i), &want, format_args!("teardown erase({i})"));
    }
    assert!(m.is_empty());
    assert!(xa.is_empty(), "is_empty() after erasing everything");
    assert_eq!(xa.len(), 0, "len() after erasing everything");
    assert_eq!(xa.node_count(), 0, "node_count() after erasing everything");
    assert_eq!(
        xa.memory_bytes(),
        Xa::new().memory_bytes(),
        "memory_bytes() after erasing everything"
    );
    for mk in marks() {
        assert!(!xa.marked(mk), "marked({mk:?}) after erasing everything");
    }
    assert_eq!(xa.iter(..).unwrap().count(), 0);
    assert_eq!(xa.find_empty(0, u64::MAX), Some(0));
}
