//! Helpers shared by the integration tests (each test file uses some).
#![allow(dead_code)]
// The tests drive and count their own threads with std atomics and locks;
// the shim rule (clippy.toml) is for the crate's protocols.
#![allow(clippy::disallowed_types)]

pub mod write;

// ---------------------------------------------------------------------------
// Readahead helpers (tests/it/readahead.rs): a backing that records its reads,
// and waits for asynchronous windows to settle.

use std::time::{Duration, Instant};

use backing::{Backing, Recorded};
use foliocache::filemap::FolioFlags;
use foliocache::filemap::{Mapping, MappingEntry};

/// How long a test waits for IO in flight (an asynchronous window) to
/// complete before it calls it a hang.
pub const HANG: Duration = Duration::from_secs(20);

/// One `read_blocks` call a [`RecordingBacking`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoRecord {
    /// Byte offset asked for.
    pub offset: u64,
    /// Bytes asked for (the buffers' total length).
    pub len: u64,
    /// What the inner backing returned: bytes read, or the OS error
    /// (`-1` for an error without one).
    pub result: Result<u64, i32>,
}

impl IoRecord {
    /// (first page, pages) asked for.
    pub fn pages(&self) -> (u64, u64) {
        (self.offset / 4096, self.len / 4096)
    }
}

/// Forwards the named [`Backing`] methods to `self.$field`, inside the
/// `impl Backing` of a test wrapper that changes the others.
macro_rules! forward_backing {
    ($f:ident: $($m:ident),* $(,)?) => { $(crate::common::forward_backing!(@ $f $m);)* };
    (@ $f:ident len) => {
        fn len(&self) -> ::std::io::Result<u64> {
            self.$f.len()
        }
    };
    (@ $f:ident read_blocks) => {
        fn read_blocks(
            &self,
            bufs: &mut [::backing::IoBufMut<'_>],
            offset: u64,
        ) -> ::std::io::Result<usize> {
            self.$f.read_blocks(bufs, offset)
        }
    };
    (@ $f:ident write_blocks) => {
        fn write_blocks(
            &self,
            bufs: &[::backing::IoBuf<'_>],
            offset: u64,
        ) -> ::std::io::Result<usize> {
            self.$f.write_blocks(bufs, offset)
        }
    };
    (@ $f:ident set_len) => {
        fn set_len(&self, len: u64) -> ::std::io::Result<()> {
            self.$f.set_len(len)
        }
    };
    (@ $f:ident sync_data) => {
        fn sync_data(&self) -> ::std::io::Result<()> {
            self.$f.sync_data()
        }
    };
    (@ $f:ident sync_all) => {
        fn sync_all(&self) -> ::std::io::Result<()> {
            self.$f.sync_all()
        }
    };
    (@ $f:ident punch_hole) => {
        fn punch_hole(&self, offset: u64, len: u64) -> ::std::io::Result<()> {
            self.$f.punch_hole(offset, len)
        }
    };
    (@ $f:ident check_size) => {
        fn check_size(&self, size: u64) -> ::std::io::Result<()> {
            self.$f.check_size(size)
        }
    };
    (@ $f:ident info) => {
        fn info(&self) -> ::backing::BackingInfo {
            self.$f.info()
        }
    };
}
pub(crate) use forward_backing;

/// A [`Backing`] that forwards to `inner` and logs every `read_blocks`
/// call (offset, length, result) after the inner call returns, so a folio
/// found uptodate was read by a call already in the log: the reads of a
/// [`backing::RecordingBacking`]'s log. It has no `raw_file`, so an
/// asynchronous engine reads it through `read_blocks` on its pool
/// threads, and those reads are logged too.
pub struct RecordingBacking<B: Backing> {
    rec: backing::RecordingBacking<B>,
}

impl<B: Backing> RecordingBacking<B> {
    /// Wraps `inner` with an empty log.
    pub fn new(inner: B) -> Self {
        RecordingBacking {
            rec: backing::RecordingBacking::new(inner),
        }
    }

    /// The wrapped backing (to arm faults on a `FaultyBacking`).
    pub fn inner(&self) -> &B {
        self.rec.inner()
    }

    /// Every read so far, in the order they returned.
    pub fn log(&self) -> Vec<IoRecord> {
        let reads = self.rec.log().into_iter().filter_map(|e| match e {
            Recorded::Read {
                offset,
                len,
                result,
            } => Some(IoRecord {
                offset,
                len,
                result,
            }),
            _ => None,
        });
        reads.collect()
    }

    /// The reads so far as (first page, pages), sorted by page.
    pub fn page_runs(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self.log().iter().map(IoRecord::pages).collect();
        v.sort_unstable();
        v
    }

    /// Forgets the reads so far.
    pub fn clear(&self) {
        self.rec.clear();
    }

    /// Reads so far.
    pub fn reads(&self) -> usize {
        self.log().len()
    }
}

impl<B: Backing> Backing for RecordingBacking<B> {
    forward_backing!(rec: len, read_blocks, write_blocks, set_len, sync_data, sync_all, punch_hole, info);
    // No raw_file: asynchronous reads must come through read_blocks.
}

pub use test_support::nonzero_bytes;

/// Waits (up to [`HANG`]) until every page of `first..=last` is in an
/// uptodate, unlocked folio: the windows covering them have completed.
/// Panics with what it found otherwise.
pub fn wait_uptodate(m: &Mapping, first: u64, last: u64) {
    let deadline = Instant::now() + HANG;
    let mut i = first;
    while i <= last {
        let found = m.get_entry(i);
        if let Some(MappingEntry::Folio(f)) = &found {
            if f.test(FolioFlags::UPTODATE) && !f.is_locked() && f.contains(i) {
                i = f.index() + f.nr_pages();
                continue;
            }
        }
        assert!(
            Instant::now() < deadline,
            "page {i} still not in an uptodate, unlocked folio after {HANG:?}: {found:?}"
        );
        drop(found);
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Waits (up to [`HANG`]) until no folio of pages `first..=last` is locked,
/// then checks every folio there is uptodate, without an error, waiters or
/// a lock, and lies where the index says. Returns the folios' (index,
/// order), in order.
pub fn settled(m: &Mapping, first: u64, last: u64) -> Vec<(u64, u32)> {
    let deadline = Instant::now() + HANG;
    'again: loop {
        let mut out = Vec::new();
        let mut i = first;
        while i <= last {
            match m.get_entry(i) {
                Some(MappingEntry::Folio(f)) => {
                    if f.is_locked() {
                        assert!(
                            Instant::now() < deadline,
                            "folio still locked after {HANG:?}: {f:?}"
                        );
                        drop(f);
                        std::thread::sleep(Duration::from_micros(200));
                        continue 'again;
                    }
                    assert!(f.contains(i), "index {i} holds {f:?}");
                    let flags = f.flags();
                    assert!(flags.contains(FolioFlags::UPTODATE), "{f:?}");
                    assert!(
                        !flags.intersects(FolioFlags::ERROR | FolioFlags::WAITERS),
                        "{f:?}"
                    );
                    out.push((f.index(), f.order()));
                    i = f.index() + f.nr_pages();
                }
                _ => i += 1,
            }
        }
        return out;
    }
}

/// At rest (no read in flight), every arena byte is either free or in a
/// cached folio, and the folio counts agree. Waits (up to [`HANG`]) for
/// free + cached to reach the capacity first: a failed read's completion
/// removes its folios and unlocks them, and a reader woken by the unlock
/// can return before the completion drops the last reference that frees
/// them (the window is short, but a busy machine hit it once in eight runs).
#[track_caller]
pub fn assert_at_rest(c: &foliocache::Cache) -> foliocache::CacheStats {
    write::wait_until("free + cached to reach the capacity", || {
        let s = c.stats();
        s.free_bytes + s.bytes_cached == s.capacity_bytes
    });
    let s = c.stats();
    assert_eq!(
        s.free_bytes + s.bytes_cached,
        s.capacity_bytes,
        "free + cached must be the capacity at rest: {s:?}"
    );
    assert!(s.bytes_cached <= s.capacity_bytes, "{s:?}");
    assert_eq!(s.folios == 0, s.bytes_cached == 0, "{s:?}");
    assert!(s.folios * 4096 <= s.bytes_cached, "{s:?}");
    s
}

/// Every arena byte is free or in a cached folio (checked at once: see
/// [`assert_at_rest`] for a cache that may still be completing reads).
#[track_caller]
pub fn assert_accounted(c: &foliocache::Cache) {
    let s = c.stats();
    assert_eq!(s.free_bytes + s.bytes_cached, s.capacity_bytes, "{s:?}");
}

/// The cache holds nothing: no folio, no cached byte, the whole arena free
/// (once every file that had folios is gone).
#[track_caller]
pub fn assert_empty(c: &foliocache::Cache) {
    let s = c.stats();
    assert_eq!(
        (s.folios, s.bytes_cached, s.free_bytes),
        (0, 0, s.capacity_bytes),
        "{s:?}"
    );
}
