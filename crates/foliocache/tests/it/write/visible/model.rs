//! Property tests of the write path against a `Vec<u8>` model
//! (tests that can fail: a wrong byte is a counterexample): random sequences of `write_at`,
//! `read_at`, `set_len`, `punch_hole`, `collapse_range`/`insert_range`,
//! `sync_data`/`sync_all`,
//! `Cache::sync_all`, eviction and re-opening, on a real file through a
//! small cache (so writeback under pressure and reclaim happen), with the
//! backing file read directly with `std::fs` after every sync and compared
//! byte for byte (and its length) with the model.
//!
//! - `one_thread_*`: one handle, overlapping unaligned ranges that cross
//!   folio boundaries, folios of 4 KiB to 2 MiB, caches of 256 KiB to 8 MiB.
//! - `threads_*`: 2-4 threads, each on its own byte range of one file (the
//!   ranges are cut at unaligned offsets, so neighbours share folios), then
//!   a join, a sync and a check of the whole file.
//! - `memfile_*`: the same sequences on a memfile (no backing to check).
//!
//! Default case counts keep the file to seconds in release; set
//! `PROPTEST_CASES` to run more.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Barrier};

use foliocache::internals::Insert;
use foliocache::{Advice, Cache, File, ReadFlags, WriteFlags};
use proptest::prelude::*;

use crate::common::write as wcommon;
use test_support::cache::TestCache;
use test_support::TempPath;
use wcommon::{assert_same, cases, disk, nonzero_bytes, open_rw, read_all, Model};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
/// Offsets stay below this (plus a write's length).
const MAX_OFF: u64 = 3 * MIB as u64;

// ---- generators --------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Write {
        off: u64,
        len: usize,
        seed: u64,
        /// `WriteFlags::DONTCACHE`.
        uncached: bool,
    },
    Read {
        off: u64,
        len: usize,
        /// 0: plain, 1: `ReadFlags::DONTCACHE`, 2: `ReadFlags::NOWAIT`
        /// (may stop early or refuse with `WouldBlock`).
        flags: u8,
    },
    /// `Advice::DontNeed` (drop clean folios) or `WillNeed` (read ahead):
    /// the contents do not change.
    Advise {
        off: u64,
        len: u64,
        dont_need: bool,
    },
    SetLen(u64),
    Punch {
        off: u64,
        len: u64,
    },
    /// `collapse_range` (or, `insert`, `insert_range`) of `blocks` 4 KiB
    /// blocks at block `block`: refused (nothing changes) unless the model
    /// allows it; on a memfile always refused (`Unsupported`).
    Shift {
        insert: bool,
        block: u64,
        blocks: u64,
    },
    SyncData,
    SyncAll,
    /// `Cache::sync_all`.
    CacheSync,
    /// `Cache::shrink` everything it can: the next reads come from the
    /// backing (or, for a memfile, must not lose anything).
    Evict,
    /// Drop the handle and open the path again, through the same cache or
    /// (`new_cache`) a new one. On a memfile: swap to `reopen()`.
    Reopen {
        new_cache: bool,
    },
    /// Open the path once more through the same cache while the other
    /// handles stay open (it shares their file); ops then take turns on
    /// the handles. On a memfile: add a clone.
    OpenAnother,
}

/// Offsets: anywhere, near a page boundary, or near a large-folio boundary.
fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 0..MAX_OFF,
        2 => (0..MAX_OFF / 4096, -3i64..=3).prop_map(|(p, d)| (p * 4096).saturating_add_signed(d)),
        2 => (0u32..=9, 0u64..6, -2i64..=2)
            .prop_map(|(order, k, d)| (k << (12 + order)).saturating_add_signed(d).min(MAX_OFF)),
    ]
}

fn length() -> impl Strategy<Value = usize> {
    prop_oneof![
        3 => 1usize..=16,
        4 => 1usize..=9000,
        2 => 1usize..=70_000,
        1 => 100_000usize..=600_000,
    ]
}

fn op(reopen: bool) -> impl Strategy<Value = Op> {
    let base = prop_oneof![
        10 => (offset(), length(), any::<u64>(), prop::bool::weighted(0.2))
            .prop_map(|(off, len, seed, uncached)| Op::Write { off, len, seed, uncached }),
        6 => (offset(), length(), prop_oneof![4 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)])
            .prop_map(|(off, len, flags)| Op::Read { off, len, flags }),
        1 => (offset(), length(), any::<bool>())
            .prop_map(|(off, len, dont_need)| Op::Advise { off, len: len as u64, dont_need }),
        2 => offset().prop_map(Op::SetLen),
        2 => (offset(), length()).prop_map(|(off, len)| Op::Punch { off, len: len as u64 }),
        2 => (any::<bool>(), 0..MAX_OFF / 4096, prop_oneof![3 => 1u64..=4, 2 => 1u64..=160, 1 => 0u64..=600])
            .prop_map(|(insert, block, blocks)| Op::Shift { insert, block, blocks }),
        1 => Just(Op::SyncData),
        1 => Just(Op::SyncAll),
        1 => Just(Op::CacheSync),
        1 => Just(Op::Evict),
    ];
    if reopen {
        prop_oneof![
            14 => base,
            1 => any::<bool>().prop_map(|new_cache| Op::Reopen { new_cache }),
            1 => Just(Op::OpenAnother),
        ]
        .boxed()
    } else {
        base.boxed()
    }
}

/// (capacity, max folio size): capacities 256 KiB..8 MiB, folios 4 KiB up
/// to a quarter of the capacity (2 MiB with 8 MiB).
fn geometry() -> impl Strategy<Value = (usize, usize)> {
    geometry_from(0)
}

/// [`geometry`] from the `min`-th capacity on (the thread tests start at
/// 1 MiB: a write locks as much of the cache as it grabs, and in a 256 KiB
/// cache concurrent threads can find every folio locked and get
/// `OutOfMemory`, which `write::visible::stress` reports on its own).
fn geometry_from(min: usize) -> impl Strategy<Value = (usize, usize)> {
    (min..6).prop_flat_map(|ci| {
        let cap = [256 * KIB, 512 * KIB, MIB, 2 * MIB, 4 * MIB, 8 * MIB][ci];
        let max_order = (cap / 4 / 4096).trailing_zeros().min(9);
        (Just(cap), (0..=max_order).prop_map(|o| 4096usize << o))
    })
}

fn write_flags(uncached: bool) -> WriteFlags {
    if uncached {
        WriteFlags::DONTCACHE
    } else {
        WriteFlags::NONE
    }
}

fn advice(dont_need: bool) -> Advice {
    if dont_need {
        Advice::DontNeed
    } else {
        Advice::WillNeed
    }
}

/// [`Op::Write`] `op` on `f`: where, and the bytes written, all of them
/// (`write_at` is never short).
fn write(f: &File, op: &Op, what: &str) -> (u64, Vec<u8>) {
    let Op::Write {
        off,
        len,
        seed,
        uncached,
    } = *op
    else {
        unreachable!("{what}: not a write");
    };
    let buf = nonzero_bytes(len, seed);
    let n = f
        .write_at_flags(&buf, off, write_flags(uncached))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(n, len, "{what}: write_at is never short");
    (off, buf)
}

/// A read with `flags` (see [`Op::Read`]) checked against the model: all
/// of it, or for `NOWAIT` a prefix (or `WouldBlock`).
fn check_read(f: &File, model: &Model, off: u64, len: usize, flags: u8, what: &str) {
    let mut buf = vec![0xE7u8; len];
    let want = model.read(off, len);
    let rf = [ReadFlags::NONE, ReadFlags::DONTCACHE, ReadFlags::NOWAIT][flags as usize];
    match f.read_at_flags(&mut buf, off, rf) {
        Ok(n) if rf == ReadFlags::NOWAIT => {
            assert!(n <= want.len(), "{what}: NOWAIT read {n} of {}", want.len());
            assert_same(what, &buf[..n], &want[..n]);
        }
        Ok(n) => assert_same(what, &buf[..n], want),
        Err(e) if rf == ReadFlags::NOWAIT && e.kind() == std::io::ErrorKind::WouldBlock => {}
        Err(e) => panic!("{what}: {e}"),
    }
}

// ---- one thread, a real file ----------------------------------------------------

struct Run {
    cap: usize,
    folio: usize,
    cache: Cache,
    /// Open handles on the file (all share it); op `step` uses
    /// `files[step % files.len()]`.
    files: Vec<File>,
    model: Model,
    step: usize,
}

impl Run {
    fn f(&self) -> &File {
        &self.files[self.step % self.files.len()]
    }

    fn what(&self, op: &Op) -> String {
        format!(
            "step {} {op:?} (capacity {} KiB, max folio {} KiB, model size {})",
            self.step,
            self.cap / KIB,
            self.folio / KIB,
            self.model.len()
        )
    }

    fn check_disk(&self, path: &Path, what: &str) {
        assert_same(
            &format!("{what}: backing file after sync"),
            &disk(path),
            &self.model.data,
        );
    }
}

/// [`Op::Shift`] on `f`: the byte offset and length, and what the call
/// returned.
fn shift(f: &File, insert: bool, block: u64, blocks: u64) -> (u64, u64, std::io::Result<()>) {
    let (off, len) = (block * 4096, blocks * 4096);
    let r = if insert {
        f.insert_range(off, len)
    } else {
        f.collapse_range(off, len)
    };
    (off, len, r)
}

/// `insert`: how this run's writes create folios (batched by default, or
/// one at a time: the same semantics).
fn run_file(cap: usize, folio: usize, insert: Insert, initial: usize, ops: &[Op]) {
    let open = |c: &Cache, p: &Path| {
        let f = open_rw(c, p);
        f.set_write_insert(insert);
        f
    };
    let tmp = TempPath::with_data("model", &nonzero_bytes(initial, initial as u64));
    let cache = TestCache::bytes(cap).max_folio(folio).build();
    let file = open(&cache, &tmp.path);
    let mut r = Run {
        cap,
        folio,
        cache,
        files: vec![file],
        model: Model {
            data: disk(&tmp.path),
        },
        step: 0,
    };
    assert_eq!(r.f().len(), initial as u64, "len() at open");
    for (step, op) in ops.iter().enumerate() {
        r.step = step;
        let what = r.what(op);
        match *op {
            Op::Write { .. } => {
                let (off, buf) = write(r.f(), op, &what);
                r.model.write(off, &buf);
            }
            Op::Read { off, len, flags } => {
                check_read(r.f(), &r.model, off, len, flags, &what);
            }
            Op::Advise {
                off,
                len,
                dont_need,
            } => {
                r.f()
                    .advise(off, len, advice(dont_need))
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
            }
            Op::SetLen(len) => {
                r.f().set_len(len).unwrap_or_else(|e| panic!("{what}: {e}"));
                r.model.set_len(len);
            }
            Op::Punch { off, len } => {
                r.f()
                    .punch_hole(off, len)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                r.model.punch(off, len);
            }
            Op::Shift {
                insert,
                block,
                blocks,
            } => {
                let (off, len, res) = shift(r.f(), insert, block, blocks);
                match (r.model.shift(insert, off, len), res) {
                    (true, Ok(())) => {}
                    (false, Err(e)) => {
                        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{what}: {e}")
                    }
                    (true, Err(e)) => panic!("{what}: refused: {e}"),
                    (false, Ok(())) => panic!("{what}: done, but the file does not allow it"),
                }
            }
            Op::SyncData => {
                r.f().sync_data().unwrap_or_else(|e| panic!("{what}: {e}"));
                r.check_disk(&tmp.path, &what);
            }
            Op::SyncAll => {
                r.f().sync_all().unwrap_or_else(|e| panic!("{what}: {e}"));
                r.check_disk(&tmp.path, &what);
            }
            Op::CacheSync => {
                r.cache.sync_all().unwrap_or_else(|e| panic!("{what}: {e}"));
                r.check_disk(&tmp.path, &what);
            }
            Op::Evict => {
                r.cache.shrink(u64::MAX);
            }
            Op::Reopen { new_cache } => {
                // Dropping the last handle writes the dirty data back.
                r.files.clear();
                r.check_disk(&tmp.path, &format!("{what}: after dropping the handles"));
                if new_cache {
                    r.cache = TestCache::bytes(cap).max_folio(folio).build();
                }
                r.files.push(open(&r.cache, &tmp.path));
            }
            Op::OpenAnother => {
                if r.files.len() < 3 {
                    let g = open(&r.cache, &tmp.path);
                    assert_eq!(g.len(), r.model.len(), "{what}: a new open's len()");
                    r.files.push(g);
                }
            }
        }
        assert_eq!(r.f().len(), r.model.len(), "{what}: len() after the op");
    }
    let what = format!("after all {} ops", ops.len());
    assert_same(&what, &read_all(r.f()), &r.model.data);
    r.f().sync_all().unwrap();
    r.check_disk(&tmp.path, &what);
    // Dirty again, then drop without a sync: the data still reaches the file.
    if !r.model.is_empty() {
        let off = r.model.len() / 2;
        let buf = nonzero_bytes(5000, 99);
        r.f().write_all_at(&buf, off).unwrap();
        r.model.write(off, &buf);
    }
    r.files.clear();
    r.check_disk(
        &tmp.path,
        "after the last handle was dropped without a sync",
    );
    let s = r.cache.stats();
    assert_eq!(
        s.dirty_bytes, 0,
        "no dirty bytes once every file is closed: {s:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(128)))]

    #[test]
    fn one_thread_file_matches_the_model_and_the_backing_after_every_sync(
        (cap, folio) in geometry(),
        insert in prop_oneof![3 => Just(Insert::Batched), 1 => Just(Insert::Single)],
        initial in prop_oneof![Just(0usize), 1usize..=1_200_000],
        ops in prop::collection::vec(op(true), 1..40),
    ) {
        run_file(cap, folio, insert, initial, &ops);
    }
}

// ---- one thread, a memfile --------------------------------------------------------

fn run_memfile(folio: usize, initial: u64, ops: &[Op]) {
    // Room for the largest file the ops can make, in the largest folios,
    // so nothing here is StorageFull (`write::memfile` covers it).
    let cache = TestCache::bytes(16 * MIB).max_folio(folio).build();
    let mut f = cache.memfile("model", initial).unwrap();
    assert!(f.is_memfile() && f.is_writable());
    let mut model = Model::default();
    model.set_len(initial);
    for (step, op) in ops.iter().enumerate() {
        let what = format!("memfile step {step} {op:?} (max folio {} KiB)", folio / KIB);
        match *op {
            Op::Write { .. } => {
                let (off, buf) = write(&f, op, &what);
                model.write(off, &buf);
            }
            Op::Read { off, len, flags } => check_read(&f, &model, off, len, flags, &what),
            Op::Advise {
                off,
                len,
                dont_need,
            } => f
                .advise(off, len, advice(dont_need))
                .unwrap_or_else(|e| panic!("{what}: {e}")),
            Op::SetLen(len) => {
                f.set_len(len).unwrap_or_else(|e| panic!("{what}: {e}"));
                model.set_len(len);
            }
            Op::Punch { off, len } => {
                f.punch_hole(off, len)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                model.punch(off, len);
            }
            Op::Shift {
                insert,
                block,
                blocks,
            } => {
                let (_, _, res) = shift(&f, insert, block, blocks);
                let e = res.expect_err(&format!("{what}: a memfile's data does not move"));
                assert_eq!(e.kind(), std::io::ErrorKind::Unsupported, "{what}: {e}");
            }
            Op::SyncData => f.sync_data().unwrap_or_else(|e| panic!("{what}: {e}")),
            Op::SyncAll => f.sync_all().unwrap_or_else(|e| panic!("{what}: {e}")),
            Op::CacheSync => cache.sync_all().unwrap_or_else(|e| panic!("{what}: {e}")),
            Op::Evict => {
                cache.shrink(u64::MAX);
            }
            Op::Reopen { .. } => {
                let g = f.reopen();
                drop(std::mem::replace(&mut f, g));
            }
            Op::OpenAnother => {
                let g = f.clone();
                drop(std::mem::replace(&mut f, g));
            }
        }
        assert_eq!(f.len(), model.len(), "{what}: len()");
    }
    assert_same("memfile at the end", &read_all(&f), &model.data);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(128)))]

    #[test]
    fn memfile_matches_the_model(
        folio in (0u32..=9).prop_map(|o| 4096usize << o),
        initial in prop_oneof![Just(0u64), 0..MAX_OFF],
        ops in prop::collection::vec(op(true), 1..40),
    ) {
        run_memfile(folio, initial, &ops);
    }
}

// ---- several threads, disjoint ranges of one file -------------------------------

/// One thread's op, with raw numbers mapped into its range at run time (so
/// shrinking keeps them valid).
#[derive(Clone, Debug)]
enum TOp {
    Write {
        at: u32,
        len: u32,
        seed: u64,
        /// `WriteFlags::DONTCACHE`: its folios go when written back, and
        /// they may hold a neighbour's dirty bytes.
        uncached: bool,
    },
    Read {
        at: u32,
        len: u32,
    },
    Punch {
        at: u32,
        len: u32,
    },
    /// Only the last range's thread changes the size (inside its range).
    SetLen {
        at: u32,
    },
    Sync,
}

fn top() -> impl Strategy<Value = TOp> {
    let len = prop_oneof![3 => 1u32..=100, 4 => 1u32..=10_000, 1 => 1u32..=200_000];
    prop_oneof![
        8 => (any::<u32>(), len.clone(), any::<u64>(), prop::bool::weighted(0.3))
            .prop_map(|(at, len, seed, uncached)| TOp::Write { at, len, seed, uncached }),
        5 => (any::<u32>(), len.clone()).prop_map(|(at, len)| TOp::Read { at, len }),
        2 => (any::<u32>(), len).prop_map(|(at, len)| TOp::Punch { at, len }),
        1 => any::<u32>().prop_map(|at| TOp::SetLen { at }),
        1 => Just(TOp::Sync),
    ]
}

/// Runs one thread's ops on `[start, end)` of `f`, `model` holding those
/// bytes (`model.len()` is how much of the range is inside the file; only
/// the last range can be partly past EOF). Returns the final model.
/// One thread's share of the file.
struct Share {
    id: usize,
    start: u64,
    end: u64,
    /// The last range: the file ends in it.
    last: bool,
}

/// `path`: the backing file to check after a sync (`None` for a memfile).
fn thread_ops(f: &File, path: Option<&Path>, share: Share, mut model: Model, ops: &[TOp]) -> Model {
    let Share {
        id,
        start,
        end,
        last,
    } = share;
    let span = end - start;
    let disk = path.map(|p| std::fs::File::open(p).unwrap());
    for (step, op) in ops.iter().enumerate() {
        let what = format!("thread {id} [{start}, {end}) step {step} {op:?}");
        match *op {
            TOp::Write {
                at,
                len,
                seed,
                uncached,
            } => {
                let rel = at as u64 % span;
                let len = (len as u64).min(span - rel) as usize;
                let buf = nonzero_bytes(len, seed);
                let n = f
                    .write_at_flags(&buf, start + rel, write_flags(uncached))
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(n, len, "{what}");
                model.write(rel, &buf);
            }
            TOp::Read { at, len } => {
                let rel = at as u64 % span;
                let len = (len as u64).min(span - rel) as usize;
                let mut buf = vec![0xE7u8; len];
                let n = f
                    .read_at(&mut buf, start + rel)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                if last {
                    assert_same(&what, &buf[..n], model.read(rel, len));
                } else {
                    // Not the last range: always inside the file, so a
                    // full read.
                    assert_same(
                        &what,
                        &buf[..n],
                        &model.data[rel as usize..rel as usize + len],
                    );
                }
            }
            TOp::Punch { at, len } => {
                let rel = at as u64 % span;
                let len = (len as u64).min(span - rel);
                f.punch_hole(start + rel, len)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                model.punch(rel, len);
            }
            TOp::SetLen { at } => {
                if last {
                    let rel = at as u64 % (span + 1);
                    f.set_len(start + rel)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    model.set_len(rel);
                }
            }
            TOp::Sync => {
                f.sync_data().unwrap_or_else(|e| panic!("{what}: {e}"));
                let Some(disk) = &disk else { continue };
                // Our bytes are on disk now, whatever the others do.
                let mut got = vec![0u8; model.data.len()];
                disk.read_exact_at(&mut got, start)
                    .unwrap_or_else(|e| panic!("{what}: reading the backing file: {e}"));
                assert_same(
                    &format!("{what}: own range on disk after sync_data"),
                    &got,
                    &model.data,
                );
            }
        }
    }
    model
}

fn run_threads(
    memfile: bool,
    insert: Insert,
    folio: usize,
    cap: usize,
    total: u64,
    cuts: &[u64],
    per_thread: &[Vec<TOp>],
) {
    let n = per_thread.len();
    let initial = nonzero_bytes(total as usize, total);
    let tmp = TempPath::with_data("model-mt", &initial);
    let cache = TestCache::bytes(cap).max_folio(folio).build();
    let f = if memfile {
        let f = cache.memfile("model-mt", 0).unwrap();
        f.write_all_at(&initial, 0).unwrap();
        f
    } else {
        open_rw(&cache, &tmp.path)
    };
    // (Clones share it.)
    f.set_write_insert(insert);
    let backing = (!memfile).then(|| tmp.path.clone());
    // Range boundaries: 0, the cuts (sorted, unaligned), total.
    let mut bounds: Vec<u64> = cuts.iter().map(|c| c % total).collect();
    bounds.push(0);
    bounds.push(total);
    bounds.sort_unstable();
    bounds.dedup();
    // Fewer ranges than threads if cuts collided: the extra threads idle.
    let ranges: Vec<(u64, u64)> = bounds.windows(2).map(|w| (w[0], w[1])).collect();
    let barrier = Arc::new(Barrier::new(ranges.len().min(n)));
    let handles: Vec<_> = ranges
        .iter()
        .zip(per_thread)
        .enumerate()
        .map(|(id, (&(start, end), ops))| {
            let f = f.clone();
            let path = backing.clone();
            let ops = ops.clone();
            let last = end == total;
            let model = Model {
                data: initial[start as usize..end as usize].to_vec(),
            };
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let share = Share {
                    id,
                    start,
                    end,
                    last,
                };
                thread_ops(&f, path.as_deref(), share, model, &ops)
            })
        })
        .collect();
    let mut whole = Model {
        data: initial.clone(),
    };
    let used = handles.len();
    for (h, &(start, end)) in handles.into_iter().zip(&ranges) {
        let m = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        if end == total {
            whole.set_len(start + m.len());
        }
        whole.data[start as usize..start as usize + m.data.len()].copy_from_slice(&m.data);
    }
    // A range that got no thread kept its initial bytes.
    let _ = used;
    let what = format!(
        "{n} threads over {:?} (capacity {} KiB, max folio {} KiB)",
        ranges,
        cap / KIB,
        folio / KIB
    );
    assert_eq!(f.len(), whole.len(), "{what}: len()");
    assert_same(
        &format!("{what}: cache after join"),
        &read_all(&f),
        &whole.data,
    );
    f.sync_all().unwrap();
    if memfile {
        return;
    }
    assert_same(
        &format!("{what}: backing after sync_all"),
        &disk(&tmp.path),
        &whole.data,
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(48)))]

    #[test]
    fn threads_on_disjoint_ranges_match_the_model(
        (cap, folio) in geometry(),
        insert in prop_oneof![3 => Just(Insert::Batched), 1 => Just(Insert::Single)],
        total in 8_000u64..=2_000_000,
        cuts in prop::collection::vec(any::<u64>(), 1..=3),
        per_thread in prop::collection::vec(prop::collection::vec(top(), 1..30), 4),
    ) {
        run_threads(false, insert, folio, cap, total, &cuts, &per_thread[..cuts.len() + 1]);
    }

    #[test]
    fn threads_on_disjoint_ranges_of_a_memfile_match_the_model(
        folio in (0u32..=9).prop_map(|o| 4096usize << o),
        total in 8_000u64..=2_000_000,
        cuts in prop::collection::vec(any::<u64>(), 1..=3),
        per_thread in prop::collection::vec(prop::collection::vec(top(), 1..30), 4),
    ) {
        run_threads(
            true,
            Insert::Batched,
            folio,
            16 * MIB,
            total,
            &cuts,
            &per_thread[..cuts.len() + 1],
        );
    }
}
