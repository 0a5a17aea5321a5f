//! The cursor model: moves and operations of a cursor under one lock hold,
//! applied to the array and to [`Model`] with a model of the cursor's
//! position.

use super::*;

/// Where the cursor goes before an operation.
// Stay, forward, back by so many indices, or to an index.
#[allow(missing_docs)]
#[derive(Clone, Debug)]
pub enum Move {
    Stay,
    Fwd(u64),
    Back(u64),
    To(u64),
}

/// `max` of a cursor search, relative to the cursor's index.
// `Delta(d)`: `index + d`; `Abs(a)`: `a`; `Max`: the end of the index
// space.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug)]
pub enum Span {
    Delta(u64),
    Abs(u64),
    Max,
}

impl Span {
    /// The search's `max` for a cursor at `from`.
    pub fn resolve(self, from: u64) -> u64 {
        match self {
            Span::Delta(d) => from.saturating_add(d),
            Span::Abs(a) => a,
            Span::Max => u64::MAX,
        }
    }
}

/// One cursor operation, applied by [`cursor_step`].
// Each variant is the call of the same name; its fields are the
// arguments.
#[allow(missing_docs)]
#[derive(Clone, Debug)]
pub enum COp {
    SetOrder(u32),
    /// `align`: move the cursor down to a multiple of its order first.
    Store {
        e: Option<ESpec>,
        align: bool,
    },
    Insert {
        e: ESpec,
        align: bool,
    },
    CmpXchg {
        key: KeySpec,
        e: ESpec,
        align: bool,
    },
    Erase,
    SetMark(u8),
    ClearMark(u8),
    ClearMarks,
    GetMark(u8),
    Load,
    GetOrder,
    Key,
    Next,
    Find(Span),
    FindMarked(Span, u8),
    FindEmpty(Span),
    Split(u32),
}

/// The model of a cursor's position.
#[derive(Debug, Default)]
pub struct MCursor {
    /// The cursor's index.
    pub index: u64,
    /// The order it stores and inserts at.
    pub order: u32,
    /// After a find: where the next find starts (`Some(None)`: nothing left).
    pub after: Option<Option<u64>>,
}

impl MCursor {
    /// What the cursor's next search with `f` up to `max` must report;
    /// moves the model cursor there.
    pub fn find(&mut self, m: &Model, max: u64, f: Filt) -> Option<(u64, E)> {
        let start = match self.after {
            Some(Some(n)) => n,
            Some(None) => return None,
            None => self.index,
        };
        let (i, b, o, e) = m.find_filter(start, max, f)?;
        self.index = i;
        self.after = Some(next_of(b, o));
        Some((i, e))
    }
}

/// Runs one cursor operation, handling `NeedNodes` by unlocking, reserving
/// and relocking. Checks that a `NeedNodes` failure changed nothing.
pub fn retry<'a, R>(
    xa: &'a Xa,
    cur: &mut Cursor<'a, P>,
    g: &mut Option<XaGuard<'a, P>>,
    m: &Model,
    relocks: &mut usize,
    mut f: impl FnMut(&mut Cursor<'a, P>, &mut XaGuard<'a, P>) -> xarray::Result<R>,
) -> xarray::Result<R> {
    for _ in 0..8 {
        match f(cur, g.as_mut().expect("locked")) {
            Err(Error::NeedNodes { nodes }) => {
                assert_eq!(g.as_ref().unwrap().len(), m.len(), "NeedNodes changed len");
                probe(xa, m, cur.index());
                if m.map.len() <= 512 {
                    check_contents(xa, m);
                }
                *g = None;
                cur.reserve_nodes(nodes).expect("reserve_nodes");
                assert!(cur.pooled_nodes() >= nodes, "pool below what was reserved");
                *relocks += 1;
                *g = Some(xa.lock());
            }
            r => return r,
        }
    }
    panic!("NeedNodes loop did not converge at index {}", cur.index());
}

/// Runs one cursor batch on `xa` and `m` from `start`: the lock is taken
/// once for all of `steps` (dropped and retaken only on `NeedNodes`), and
/// after each step the guard's counts and, on small arrays, the lockless
/// reads are checked against the model.
pub fn cursor_batch(xa: &Xa, m: &mut Model, start: u64, steps: &[(Move, COp)]) {
    let mut cur = Cursor::new(xa, start);
    let mut mc = MCursor {
        index: start,
        ..MCursor::default()
    };
    let mut relocks = 0;
    let mut g = Some(xa.lock());
    for (mv, op) in steps {
        cursor_step(xa, &mut cur, &mut g, m, &mut mc, &mut relocks, mv, op);
        assert_eq!(
            g.as_ref().unwrap().len(),
            m.len(),
            "guard len after {mv:?} {op:?}"
        );
        assert_eq!(
            g.as_ref().unwrap().is_empty(),
            m.is_empty(),
            "guard is_empty after {mv:?} {op:?}"
        );
        if m.map.len() <= 512 {
            // Lockless reads work while the lock is held.
            check_contents(xa, m);
            check_nodes(xa, m);
        }
    }
}

/// Applies one cursor step to the array (through `cur` under `g`) and to the
/// model, comparing results.
#[allow(clippy::too_many_arguments)]
pub fn cursor_step<'a>(
    xa: &'a Xa,
    cur: &mut Cursor<'a, P>,
    g: &mut Option<XaGuard<'a, P>>,
    m: &mut Model,
    mc: &mut MCursor,
    relocks: &mut usize,
    mv: &Move,
    op: &COp,
) {
    match *mv {
        Move::Stay => {}
        Move::Fwd(d) => seek(cur, mc, mc.index.saturating_add(d)),
        Move::Back(d) => seek(cur, mc, mc.index.saturating_sub(d)),
        Move::To(i) => seek(cur, mc, i),
    }
    assert_eq!(cur.index(), mc.index, "cursor index");
    let what = format!("{mv:?} {op:?} at {} order {}", mc.index, mc.order);
    match *op {
        COp::SetOrder(_)
        | COp::Store { .. }
        | COp::Insert { .. }
        | COp::CmpXchg { .. }
        | COp::Erase
        | COp::Split(_) => {
            let l = Locked {
                xa,
                cur,
                g,
                relocks,
            };
            write_step(l, m, mc, op, &what)
        }
        COp::SetMark(_) | COp::ClearMark(_) | COp::ClearMarks | COp::GetMark(_) => {
            mark_step(cur, g.as_mut().expect("locked"), m, mc, op, &what)
        }
        _ => read_step(cur, g.as_ref().expect("locked"), m, mc, op, &what),
    }
}

/// Moves the cursor and its model to `i` (a move forgets a find's place).
fn seek<'a>(cur: &mut Cursor<'a, P>, mc: &mut MCursor, i: u64) {
    cur.set_index(i);
    mc.index = i;
    mc.after = None;
}

/// Moves the cursor and its model down to a multiple of the order, if
/// `align`.
fn maybe_align<'a>(cur: &mut Cursor<'a, P>, mc: &mut MCursor, align: bool) {
    let a = align_down(mc.index, mc.order);
    if align && a != mc.index {
        seek(cur, mc, a);
    }
}

/// What a step that may need nodes works with: the array, the cursor, the
/// lock it holds (dropped and retaken by [`retry`]) and the relocks so far.
struct Locked<'a, 'r> {
    xa: &'a Xa,
    cur: &'r mut Cursor<'a, P>,
    g: &'r mut Option<XaGuard<'a, P>>,
    relocks: &'r mut usize,
}

/// The steps that change the array (or the cursor's order): stores,
/// inserts, exchanges, erases and splits.
fn write_step(l: Locked<'_, '_>, m: &mut Model, mc: &mut MCursor, op: &COp, what: &str) {
    let Locked {
        xa,
        cur,
        g,
        relocks,
    } = l;
    match *op {
        COp::SetOrder(o) => {
            let got = cur.set_order(o);
            if o > 63 {
                assert_eq!(got, Err(Error::OrderTooLarge { order: o }), "{what}");
            } else {
                assert_eq!(got, Ok(()), "{what}");
                mc.order = o;
            }
            assert_eq!(cur.order(), mc.order, "{what}");
        }
        COp::Store { ref e, align } => {
            maybe_align(cur, mc, align);
            match e {
                None => {
                    let got = retry(xa, cur, g, m, relocks, |c, g| c.store(g, None));
                    assert_res(&got, &Ok(m.erase(mc.index)), what);
                }
                Some(spec) => {
                    let e = m.materialize(spec);
                    let got = retry(xa, cur, g, m, relocks, |c, g| c.store(g, Some(e.clone())));
                    let want = m.store_order(mc.index, mc.order, e);
                    assert_res(&got, &want, what);
                }
            }
        }
        COp::Insert { ref e, align } => {
            maybe_align(cur, mc, align);
            let e = m.materialize(e);
            let got = retry(xa, cur, g, m, relocks, |c, g| c.insert(g, e.clone()));
            assert_eq!(got, m.insert_order(mc.index, mc.order, e), "{what}");
        }
        COp::CmpXchg {
            ref key,
            ref e,
            align,
        } => {
            maybe_align(cur, mc, align);
            let (key, _keep) = m.key_for(key, mc.index);
            let e = m.materialize(e);
            let got = retry(xa, cur, g, m, relocks, |c, g| {
                c.compare_exchange(g, key, e.clone())
            });
            let want = m.cmpxchg(mc.index, mc.order, key, Some(e.clone()));
            match (got, want) {
                (Ok(Ok(a)), Ok(Ok(b))) => assert_same(&a, &b, what),
                (Ok(Err((current, back))), Ok(Err(c))) => {
                    assert_same(&current, &c, format_args!("{what}: current"));
                    assert_same(&Some(back), &Some(e), format_args!("{what}: given back"));
                }
                (Err(a), Err(b)) => assert_eq!(a, b, "{what}"),
                (got, want) => panic!("{what}: got {got:?}, expected {want:?}"),
            }
        }
        COp::Erase => {
            let got = cur.erase(g.as_mut().unwrap());
            assert_res(&got, &Ok(m.erase(mc.index)), what);
        }
        COp::Split(new_order) => {
            let got = retry(xa, cur, g, m, relocks, |c, g| c.split(g, new_order));
            assert_split(&got, &m.split(mc.index, new_order), what);
        }
        _ => unreachable!("not a write step: {op:?}"),
    }
}

/// The steps on marks: set, clear, clear all, read.
fn mark_step<'a>(
    cur: &mut Cursor<'a, P>,
    g: &mut XaGuard<'a, P>,
    m: &mut Model,
    mc: &MCursor,
    op: &COp,
    what: &str,
) {
    match *op {
        COp::SetMark(k) => {
            let got = cur.set_mark(g, mark(k));
            assert_eq!(
                got,
                Ok(m.set_mark(mc.index, usize::from(k), true)),
                "{what}"
            );
        }
        COp::ClearMark(k) => {
            let got = cur.clear_mark(g, mark(k));
            assert_eq!(
                got,
                Ok(m.set_mark(mc.index, usize::from(k), false)),
                "{what}"
            );
        }
        COp::ClearMarks => {
            let got = cur.clear_marks(g);
            let mut present = false;
            for k in 0..NR_MARKS {
                present = m.set_mark(mc.index, k, false);
            }
            assert_eq!(got, Ok(present), "{what}");
        }
        COp::GetMark(k) => {
            let got = cur.get_mark(g, mark(k));
            assert_eq!(got, Ok(m.get_mark(mc.index, usize::from(k))), "{what}");
        }
        _ => unreachable!("not a mark step: {op:?}"),
    }
}

/// The steps that read: loads, orders, keys, `next` and the searches
/// (which move the cursor).
fn read_step<'a>(
    cur: &mut Cursor<'a, P>,
    g: &XaGuard<'a, P>,
    m: &Model,
    mc: &mut MCursor,
    op: &COp,
    what: &str,
) {
    match *op {
        COp::Load => {
            let want = m.load(mc.index);
            let got = cur.load(g).unwrap();
            assert!(
                ref_same_opt(&got, &want),
                "{what}: got {got:?}, expected {want:?}"
            );
            let owned = cur.load_owned(g).unwrap();
            assert_same(&owned, &want, format_args!("{what}: load_owned"));
        }
        COp::GetOrder => {
            let got = cur.get_order(g);
            assert_eq!(got, Ok(m.get_order(mc.index)), "{what}");
        }
        COp::Key => {
            let got = cur.key(g);
            assert_eq!(got, Ok(m.key(mc.index)), "{what}");
        }
        COp::Next => {
            let got = cur.next(g).unwrap();
            let want = match mc.index.checked_add(1) {
                Some(i) => {
                    mc.index = i;
                    mc.after = None;
                    m.load(i)
                }
                None => None,
            };
            assert!(
                ref_same_opt(&got, &want),
                "{what}: got {got:?}, expected {want:?}"
            );
            assert_eq!(cur.index(), mc.index, "{what}: index after next");
        }
        COp::Find(span) => {
            let max = span.resolve(mc.index);
            let got = cur.find(g, max).unwrap();
            let want = mc.find(m, max, Filt::Present);
            assert_found(got, want, format_args!("{what} (max {max})"));
            assert_eq!(cur.index(), mc.index, "{what}: index after find");
        }
        COp::FindMarked(span, k) => {
            let max = span.resolve(mc.index);
            let got = cur.find_marked(g, max, mark(k)).unwrap();
            let want = mc.find(m, max, Filt::Marked(usize::from(k)));
            assert_found(got, want, format_args!("{what} (max {max})"));
            assert_eq!(cur.index(), mc.index, "{what}: index after find_marked");
        }
        COp::FindEmpty(span) => {
            let max = span.resolve(mc.index);
            let got = cur.find_empty(g, max);
            let want = m.find_empty(mc.index, max);
            if let Some(i) = want {
                mc.index = i;
                mc.after = None;
            }
            assert_eq!(got, Ok(want), "{what} (max {max})");
            assert_eq!(cur.index(), mc.index, "{what}: index after find_empty");
        }
        _ => unreachable!("not a read step: {op:?}"),
    }
}

/// Asserts that a cursor search found what the model's did: the same index
/// and an entry of the same identity, or nothing for both.
fn assert_found(
    got: Option<(u64, EntryRef<'_, u64>)>,
    want: Option<(u64, E)>,
    what: impl fmt::Display,
) {
    let ok = refs_same(got.as_slice(), want.as_slice());
    assert!(ok, "{what}: got {got:?}, expected {want:?}");
}
