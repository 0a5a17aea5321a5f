//! One face for both caches (`CachedFile`): the same tests run against a
//! file of this process's cache (`File`), of the group's (`SharedFile`),
//! and of each through `AnyFile`, the one a consumer holds. Each test is
//! a generic function over an [`Opener`]; `conformance!` makes a `#[test]`
//! of it in each of the modules `private`, `shared`, `any_private` and
//! `any_shared`. The model test runs random sequences of operations
//! against a `Vec<u8>` image and the file on disk after its last sync.
//!
//! Where the caches differ by design (the curve, advice), the test asks
//! the opener what its cache promises (`Opener::CURVE`).

use std::path::Path;
use std::sync::Arc;

use foliocache::{
    Advice, AnyFile, Cache, CachedFile, ReadFlags, SharedCache, SharedFile, SharedHandle,
    WriteFlags,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use test_support::{nonzero_bytes, TempPath};

use crate::common::write::{assert_same, cases, disk, Model};

const PAGE: u64 = 4096;

/// Opens files in one cache of a kind.
trait Opener {
    /// The file it opens.
    type F: CachedFile;
    /// Whether its files keep a miss-ratio curve.
    const CURVE: bool;
    /// A fresh cache of `capacity` bytes.
    fn new(capacity: u64) -> Self;
    /// `path` opened for reading, and for writing if `write`.
    fn open(&self, path: &Path, write: bool) -> Self::F;
}

/// This process's cache.
struct Private(Cache);

impl Opener for Private {
    type F = foliocache::File;
    const CURVE: bool = true;
    fn new(capacity: u64) -> Private {
        Private(
            Cache::builder()
                .capacity(capacity as usize)
                .build()
                .expect("cache"),
        )
    }
    fn open(&self, path: &Path, write: bool) -> foliocache::File {
        let mut o = self.0.open_options();
        o.read(true).write(write);
        o.open(path).expect("open")
    }
}

/// The group's cache.
struct Group(SharedCache);

impl Opener for Group {
    type F = SharedFile;
    const CURVE: bool = false;
    fn new(capacity: u64) -> Group {
        Group(SharedCache::new(capacity).expect("shared cache"))
    }
    fn open(&self, path: &Path, write: bool) -> SharedFile {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .open(path)
            .expect("open");
        self.0.open(f).expect("serve")
    }
}

/// A cache's files through [`AnyFile`].
struct Any<O>(O);

/// A file of either cache as the `AnyFile` a consumer holds.
trait IntoAny {
    fn into_any(self, write: bool) -> AnyFile;
}

impl IntoAny for foliocache::File {
    fn into_any(self, _: bool) -> AnyFile {
        AnyFile::Private(self)
    }
}

impl IntoAny for SharedFile {
    fn into_any(self, write: bool) -> AnyFile {
        AnyFile::Shared(SharedHandle::new(Arc::new(self), write, false))
    }
}

impl<O: Opener> Opener for Any<O>
where
    O::F: IntoAny,
{
    type F = AnyFile;
    const CURVE: bool = O::CURVE;
    fn new(capacity: u64) -> Any<O> {
        Any(O::new(capacity))
    }
    fn open(&self, path: &Path, write: bool) -> AnyFile {
        self.0.open(path, write).into_any(write)
    }
}

/// A file of `data`, opened in a fresh cache of kind `O` (1 MiB).
fn with_file<O: Opener>(data: &[u8], write: bool) -> (O, TempPath, O::F) {
    let t = TempPath::with_data("face", data);
    let o = O::new(1 << 20);
    let f = o.open(&t.path, write);
    (o, t, f)
}

fn read_vec(f: &impl CachedFile, off: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let n = f.read_at(&mut buf, off).expect("read");
    buf.truncate(n);
    buf
}

fn reads_are_the_files_bytes_short_only_at_the_end<O: Opener>() {
    let data = nonzero_bytes(3 * PAGE as usize + 100, 1);
    let (_c, _t, f) = with_file::<O>(&data, false);
    assert_eq!(f.len().unwrap(), data.len() as u64);
    assert_eq!(read_vec(&f, 100, 5000), &data[100..5100]);
    assert_eq!(read_vec(&f, 3 * PAGE, 4096), &data[3 * PAGE as usize..]);
    assert_eq!(read_vec(&f, data.len() as u64, 10), b"");
    assert_eq!(read_vec(&f, 1 << 40, 10), b"");
    let mut buf = [0u8; 10];
    let n = f.read_at_flags(&mut buf, 7, ReadFlags::DONTCACHE).unwrap();
    assert_eq!(&buf[..n], &data[7..17]);
}

fn read_with_gives_the_range_cut_at_the_end<O: Opener>() {
    let data = nonzero_bytes(300_000, 2);
    let (_c, _t, f) = with_file::<O>(&data, false);
    let got = f.read_with(1000, 70_000, <[u8]>::to_vec).unwrap();
    assert_eq!(got, &data[1000..71_000]);
    // Once cached: in one page, which the private cache lends in place.
    let got = f.read_with(5000, 100, <[u8]>::to_vec).unwrap();
    assert_eq!(got, &data[5000..5100]);
    assert_eq!(f.read_with(299_995, 100, <[u8]>::len).unwrap(), 5);
    assert_eq!(f.read_with(300_000, 100, <[u8]>::len).unwrap(), 0);
    assert_eq!(f.read_with(10, 0, <[u8]>::len).unwrap(), 0);
    // A read inside `f` (the thread's buffer is in use) gets its own.
    let same = f
        .read_with(0, 200_000, |outer| {
            let inner = f.read_with(0, 200_000, <[u8]>::to_vec).unwrap();
            inner == outer
        })
        .unwrap();
    assert!(same);
}

fn a_write_is_read_back_and_reaches_the_file_at_sync<O: Opener>() {
    let data = nonzero_bytes(10_000, 3);
    let (_c, t, f) = with_file::<O>(&data, true);
    let new = nonzero_bytes(9000, 4);
    assert_eq!(f.write_at(&new, 8000).unwrap(), 9000);
    assert_eq!(f.len().unwrap(), 17_000);
    let mut model = Model { data };
    model.write(8000, &new);
    assert_eq!(read_vec(&f, 0, 20_000), model.data);
    f.write_at_flags(b"abc", 1, WriteFlags::DONTCACHE).unwrap();
    model.write(1, b"abc");
    f.sync_data().unwrap();
    assert_same("after sync_data", &disk(&t.path), &model.data);
    f.write_at(b"z", 20_000).unwrap();
    model.write(20_000, b"z");
    f.sync_all().unwrap();
    assert_same("after sync_all", &disk(&t.path), &model.data);
}

fn append_writes_at_the_end_and_says_where<O: Opener>() {
    let (_c, t, f) = with_file::<O>(b"12345", true);
    assert_eq!(f.append(b"678").unwrap(), 5);
    assert_eq!(f.append(b"").unwrap(), 8);
    assert_eq!(f.append(b"9").unwrap(), 8);
    assert_eq!(read_vec(&f, 0, 100), b"123456789");
    f.sync_data().unwrap();
    assert_eq!(disk(&t.path), b"123456789");
}

fn set_len_cuts_and_grows_with_zeros<O: Opener>() {
    let data = nonzero_bytes(3 * PAGE as usize, 5);
    let (_c, t, f) = with_file::<O>(&data, true);
    assert_eq!(read_vec(&f, 0, 3 * PAGE as usize), data);
    f.set_len(PAGE + 10).unwrap();
    assert_eq!(f.len().unwrap(), PAGE + 10);
    assert!(!f.is_empty().unwrap());
    f.set_len(3 * PAGE).unwrap();
    let mut want = data[..PAGE as usize + 10].to_vec();
    want.resize(3 * PAGE as usize, 0);
    assert_eq!(read_vec(&f, 0, 4 * PAGE as usize), want);
    f.set_len(0).unwrap();
    assert!(f.is_empty().unwrap());
    f.sync_all().unwrap();
    assert_eq!(disk(&t.path), b"");
}

fn a_read_only_handle_refuses_changes<O: Opener>() {
    let (_c, t, f) = with_file::<O>(b"hello", false);
    assert!(!f.is_writable());
    let denied = |r: std::io::Result<()>| {
        assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::PermissionDenied);
    };
    denied(f.write_at(b"x", 0).map(drop));
    denied(f.append(b"x").map(drop));
    denied(f.set_len(1));
    denied(f.punch_hole(0, 1));
    denied(f.allocate(0, 10, false));
    assert_eq!(read_vec(&f, 0, 10), b"hello");
    assert_eq!(disk(&t.path), b"hello");
}

fn holes_allocation_and_shifts_change_the_file_as_fallocate_does<O: Opener>() {
    let data = nonzero_bytes(8 * PAGE as usize, 6);
    let (_c, t, f) = with_file::<O>(&data, true);
    let mut model = Model { data };
    assert_eq!(read_vec(&f, 0, 8 * PAGE as usize), model.data);
    f.write_at(b"dirty", PAGE + 1).unwrap();
    model.write(PAGE + 1, b"dirty");
    f.punch_hole(PAGE, 2 * PAGE).unwrap();
    model.punch(PAGE, 2 * PAGE);
    assert_eq!(read_vec(&f, 0, 9 * PAGE as usize), model.data);
    f.allocate(0, 10 * PAGE, true).unwrap();
    assert_eq!(f.len().unwrap(), 8 * PAGE);
    f.allocate(8 * PAGE, 2 * PAGE, false).unwrap();
    model.set_len(10 * PAGE);
    assert_eq!(read_vec(&f, 0, 11 * PAGE as usize), model.data);
    f.collapse_range(PAGE, PAGE).unwrap();
    assert!(model.shift(false, PAGE, PAGE));
    f.insert_range(2 * PAGE, PAGE).unwrap();
    assert!(model.shift(true, 2 * PAGE, PAGE));
    assert_eq!(f.len().unwrap(), model.len());
    assert_eq!(read_vec(&f, 0, 11 * PAGE as usize), model.data);
    f.sync_all().unwrap();
    assert_same("after the shifts", &disk(&t.path), &model.data);
}

fn advice_never_changes_the_bytes<O: Opener>() {
    let data = nonzero_bytes(64 * PAGE as usize, 7);
    let (_c, _t, f) = with_file::<O>(&data, true);
    f.advise(0, 0, Advice::WillNeed).unwrap();
    f.advise(0, 16 * PAGE, Advice::Sequential).unwrap();
    assert_eq!(read_vec(&f, 0, 64 * PAGE as usize), data);
    f.write_at(b"x", 3).unwrap();
    f.advise(0, 0, Advice::DontNeed).unwrap();
    f.advise(0, 0, Advice::Random).unwrap();
    let mut want = data;
    want[3] = b'x';
    assert_eq!(read_vec(&f, 0, 64 * PAGE as usize), want);
}

fn cachestat_counts_the_cached_and_dirty_pages_of_a_range<O: Opener>() {
    let data = nonzero_bytes(16 * PAGE as usize, 8);
    let (_c, _t, f) = with_file::<O>(&data, true);
    read_vec(&f, 4 * PAGE, 2 * PAGE as usize);
    let s = f.cachestat(4 * PAGE, 2 * PAGE).unwrap();
    assert_eq!(s.cached, 2, "{s:?}");
    assert_eq!(s.dirty, 0, "{s:?}");
    f.write_at(b"x", 5 * PAGE + 7).unwrap();
    let s = f.cachestat(5 * PAGE, 1).unwrap();
    assert_eq!((s.cached, s.dirty), (1, 1), "{s:?}");
    let whole = f.cachestat(0, 0).unwrap();
    assert!(whole.cached >= 2 && whole.dirty >= 1, "{whole:?}");
    f.sync_data().unwrap();
    assert_eq!(f.cachestat(0, 0).unwrap().dirty, 0);
    // A range past everything cached holds nothing.
    assert_eq!(f.cachestat(1 << 30, PAGE).unwrap().cached, 0);
    let err = f.cachestat(u64::MAX, 2).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}

fn the_curve_is_there_or_the_type_says_it_is_not<O: Opener>() {
    let (_c, _t, f) = with_file::<O>(&nonzero_bytes(PAGE as usize, 9), false);
    match f.hit_ratio_curve() {
        Some(first) => {
            assert!(O::CURVE);
            assert_eq!(first.accesses, 0);
            read_vec(&f, 0, 10);
            read_vec(&f, 0, 10);
            assert_eq!(f.hit_ratio_curve().unwrap().accesses, 2);
        }
        None => assert!(!O::CURVE),
    }
}

fn figures_count_hits_misses_and_bytes<O: Opener>() {
    let (_c, _t, f) = with_file::<O>(&nonzero_bytes(PAGE as usize, 10), true);
    let before = f.figures();
    assert_eq!(before.capacity_bytes, 1 << 20);
    read_vec(&f, 0, 10);
    let missed = f.figures();
    assert!(missed.misses > before.misses, "{missed:?}");
    assert!(missed.cached_bytes >= PAGE, "{missed:?}");
    read_vec(&f, 0, 10);
    let hit = f.figures();
    assert!(hit.hits > missed.hits, "{hit:?}");
    assert_eq!(hit.misses, missed.misses, "{hit:?}");
    f.write_at(b"x", 0).unwrap();
    assert_eq!(f.figures().dirty_bytes, PAGE);
    f.sync_data().unwrap();
    assert_eq!(f.figures().dirty_bytes, 0);
}

/// Hits in bytes: a pass over a file read sequentially, page by page,
/// was shown as mostly hits in page lookups (readahead's pages found
/// cached) while every byte came from the file. The bytes reads got
/// from memory count readahead where it was read: none on the first pass
/// (the readahead counted as loaded), all on the second.
fn bytes_from_memory_count_readahead_where_it_was_read<O: Opener>() {
    const PAGES: u64 = 64;
    let (_c, _t, f) = with_file::<O>(&nonzero_bytes((PAGES * PAGE) as usize, 11), false);
    let pass = |f: &O::F| {
        for i in 0..PAGES {
            assert_eq!(read_vec(f, i * PAGE, PAGE as usize).len(), PAGE as usize);
        }
        f.figures()
    };
    let first = pass(&f);
    assert_eq!(first.read_bytes, PAGES * PAGE, "{first:?}");
    assert!(
        first.hits > 0,
        "readahead's pages are page-lookup hits: {first:?}"
    );
    assert_eq!(first.memory_bytes, 0, "{first:?}");
    assert!(first.loaded_bytes >= PAGES * PAGE, "{first:?}");
    let second = pass(&f);
    assert_eq!(second.read_bytes, 2 * PAGES * PAGE, "{second:?}");
    assert_eq!(second.memory_bytes, PAGES * PAGE, "{second:?}");
    assert_eq!(second.loaded_bytes, first.loaded_bytes, "{second:?}");
}

// ---- the model -----------------------------------------------------------------

/// Offsets stay below this (plus an operation's length): the file
/// outgrows the 1 MiB caches, so pages are evicted and loaded again.
const MAX_OFF: u64 = 1 << 20;

#[derive(Clone, Debug)]
enum Op {
    Write { off: u64, len: usize, seed: u64 },
    Append { len: usize, seed: u64 },
    Read { off: u64, len: usize },
    ReadWith { off: u64, len: usize },
    SetLen(u64),
    Punch { off: u64, len: u64 },
    Advise { off: u64, len: u64, dont_need: bool },
    SyncData,
    SyncAll,
}

fn op() -> impl Strategy<Value = Op> {
    let off = 0..MAX_OFF;
    prop_oneof![
        4 => (off.clone(), 1..20_000usize, any::<u64>())
            .prop_map(|(off, len, seed)| Op::Write { off, len, seed }),
        1 => (1..9000usize, any::<u64>()).prop_map(|(len, seed)| Op::Append { len, seed }),
        3 => (off.clone(), 1..40_000usize).prop_map(|(off, len)| Op::Read { off, len }),
        2 => (off.clone(), 0..40_000usize).prop_map(|(off, len)| Op::ReadWith { off, len }),
        1 => (0..MAX_OFF).prop_map(Op::SetLen),
        1 => (off.clone(), 1..3 * PAGE).prop_map(|(off, len)| Op::Punch { off, len }),
        1 => (off, 0..64 * PAGE, any::<bool>())
            .prop_map(|(off, len, dont_need)| Op::Advise { off, len, dont_need }),
        1 => Just(Op::SyncData),
        1 => Just(Op::SyncAll),
    ]
}

/// `ops` on a file of 100 KiB through a fresh 1 MiB cache of kind `O`,
/// against the model: every read and every size as the model has them,
/// the file on disk after the last sync.
fn run_model<O: Opener>(ops: &[Op]) {
    let mut model = Model {
        data: nonzero_bytes(100 << 10, 11),
    };
    let (_c, t, f) = with_file::<O>(&model.data, true);
    for (i, op) in ops.iter().enumerate() {
        let what = format!("op {i} {op:?}");
        match *op {
            Op::Write { off, len, seed } => {
                let buf = nonzero_bytes(len, seed);
                assert_eq!(f.write_at(&buf, off).expect(&what), len);
                model.write(off, &buf);
            }
            Op::Append { len, seed } => {
                let buf = nonzero_bytes(len, seed);
                assert_eq!(f.append(&buf).expect(&what), model.len(), "{what}");
                model.write(model.len(), &buf);
            }
            Op::Read { off, len } => {
                assert_same(&what, &read_vec(&f, off, len), model.read(off, len));
            }
            Op::ReadWith { off, len } => {
                let got = f.read_with(off, len, <[u8]>::to_vec).expect(&what);
                assert_same(&what, &got, model.read(off, len));
            }
            Op::SetLen(len) => {
                f.set_len(len).expect(&what);
                model.set_len(len);
            }
            Op::Punch { off, len } => {
                f.punch_hole(off, len).expect(&what);
                model.punch(off, len);
            }
            Op::Advise {
                off,
                len,
                dont_need,
            } => {
                let advice = if dont_need {
                    Advice::DontNeed
                } else {
                    Advice::WillNeed
                };
                f.advise(off, len, advice).expect(&what);
            }
            Op::SyncData | Op::SyncAll => {
                if matches!(op, Op::SyncData) {
                    f.sync_data().expect(&what);
                } else {
                    f.sync_all().expect(&what);
                }
                assert_same(&what, &disk(&t.path), &model.data);
                assert_eq!(f.cachestat(0, 0).expect(&what).dirty, 0, "{what}");
            }
        }
        assert_eq!(f.len().expect(&what), model.len(), "{what}");
    }
    f.sync_all().expect("the last sync");
    assert_same("the file at the end", &disk(&t.path), &model.data);
}

fn the_file_follows_a_vec_model<O: Opener>() {
    let mut runner = TestRunner::new(Config::with_cases(cases(24)));
    let ops = proptest::collection::vec(op(), 1..40);
    if let Err(e) = runner.run(&ops, |ops| {
        run_model::<O>(&ops);
        Ok(())
    }) {
        panic!("{e}");
    }
}

/// A `#[test]` of each generic test in each cache's module.
macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
        mod private {
            $(#[test] fn $test() { super::$test::<super::Private>() })*
        }
        mod shared {
            $(#[test] fn $test() { super::$test::<super::Group>() })*
        }
        mod any_private {
            $(#[test] fn $test() { super::$test::<super::Any<super::Private>>() })*
        }
        mod any_shared {
            $(#[test] fn $test() { super::$test::<super::Any<super::Group>>() })*
        }
    };
}

conformance!(
    reads_are_the_files_bytes_short_only_at_the_end,
    read_with_gives_the_range_cut_at_the_end,
    a_write_is_read_back_and_reaches_the_file_at_sync,
    append_writes_at_the_end_and_says_where,
    set_len_cuts_and_grows_with_zeros,
    a_read_only_handle_refuses_changes,
    holes_allocation_and_shifts_change_the_file_as_fallocate_does,
    advice_never_changes_the_bytes,
    cachestat_counts_the_cached_and_dirty_pages_of_a_range,
    the_curve_is_there_or_the_type_says_it_is_not,
    figures_count_hits_misses_and_bytes,
    bytes_from_memory_count_readahead_where_it_was_read,
    the_file_follows_a_vec_model,
);
