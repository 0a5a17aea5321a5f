//! The fault matrix at the IO seam: every read, write and sync path of a
//! file against every kind of fault the backing can show, each checked the
//! same way.
//!
//! Paths (rows): a read miss without readahead, readahead windows, an
//! uncached read, a write into a block not cached (read first), a sync's
//! writeback (`sync_data`, `sync_all`), the backing's own sync failing,
//! the background flusher, a writer throttled on the dirty limit, an
//! uncached write (written back before it returns), `set_len`, and
//! `punch_hole`.
//!
//! Faults (columns), armed at the backing call the path makes
//! (`backing::FaultyBacking`): `EIO` and `ENOSPC` on every such call until
//! cleared; a short transfer (a read returning 100 bytes once; a write
//! past a space limit, which writes what fits and fails with `ENOSPC`);
//! slow IO (20 ms a call).
//!
//! For each cell: the path runs within [`HANG`] (no stuck lock); its error
//! is the one injected, errno unchanged, or it succeeds where the fault is
//! one the cache must absorb (a short read, slow IO); a failed write or
//! `set_len` changes nothing; a writeback error is reported by the next
//! sync, once. Then the faults are cleared, and: every byte the model
//! holds (the acknowledged writes) reads back, a sync succeeds and the
//! backing then holds exactly the model (no acknowledged write lost), no
//! page stays dirty, the arena's pages are all free or cached, and a new
//! write and read work.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use backing::{FaultyBacking, MemBacking, Op};
use foliocache::{Cache, File, ReadFlags, WriteFlags};

use crate::common::write as wcommon;
use test_support::cache::{faulty_file, TestCache};
use wcommon::{all_written, assert_same, nonzero_bytes, read_all, wait_until, within, HANG, PAGE};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
const SIZE: usize = 512 * KIB;

type Faulty = Arc<FaultyBacking<MemBacking>>;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    Eio,
    Enospc,
    Short,
    Slow,
}

const FAULTS: [Fault; 4] = [Fault::Eio, Fault::Enospc, Fault::Short, Fault::Slow];

impl Fault {
    fn errno(self) -> Option<i32> {
        match self {
            Fault::Eio => Some(libc::EIO),
            Fault::Enospc => Some(libc::ENOSPC),
            Fault::Short | Fault::Slow => None,
        }
    }
}

/// One cell's world: the cache, the file, its backing, the model of the
/// acknowledged contents, and the writeback error the next sync owes.
struct Cell {
    what: String,
    cache: Cache,
    file: File,
    b: Faulty,
    model: Vec<u8>,
    owed: Option<i32>,
    /// The fault armed: it must have fired (no vacuous cell).
    armed: Option<Fault>,
}

impl Cell {
    /// The cell `what`: a file of `SIZE` bytes over a faulty memory backing,
    /// through a cache built from `cache`.
    fn new(what: String, cache: TestCache) -> Cell {
        let cache = cache.build();
        let model = nonzero_bytes(SIZE, 7);
        let (file, b) = faulty_file(&cache, &model);
        Cell {
            what,
            cache,
            file,
            b,
            model,
            owed: None,
            armed: None,
        }
    }

    /// Arms `fault` on `op` (a short transfer of a write: a space limit
    /// `short_at`).
    fn arm(&mut self, fault: Fault, op: Op, short_at: u64) {
        self.armed = Some(fault);
        match fault {
            Fault::Eio | Fault::Enospc => self.b.fail_from_nth(op, 1, fault.errno().unwrap()),
            Fault::Short if op == Op::Read => self.b.short_read_nth(1, 100),
            Fault::Short => self.b.set_space_limit(Some(short_at)),
            Fault::Slow => {
                self.b.set_read_latency(Duration::from_millis(20));
                self.b.set_write_latency(Duration::from_millis(20));
            }
        }
    }

    /// The error a path met must be the injected one (`want`), or none.
    fn check_result<T>(&self, r: &io::Result<T>, want: Option<i32>, step: &str) {
        match (r, want) {
            (Ok(_), None) => {}
            (Err(e), Some(w)) => assert_eq!(
                e.raw_os_error(),
                Some(w),
                "{}: {step}: the error is not the injected errno {w}: {e}",
                self.what
            ),
            (Ok(_), Some(w)) => panic!("{}: {step} succeeded; want errno {w}", self.what),
            (Err(e), None) => panic!("{}: {step} failed: {e}", self.what),
        }
    }

    fn write(&mut self, buf: &[u8], off: u64, flags: WriteFlags) -> io::Result<usize> {
        let r = self.file.write_at_flags(buf, off, flags);
        if let Ok(n) = r {
            assert_eq!(n, buf.len(), "{}: a short write", self.what);
            let end = off as usize + n;
            if self.model.len() < end {
                self.model.resize(end, 0);
            }
            self.model[off as usize..end].copy_from_slice(buf);
        }
        r
    }

    /// Clears the faults and checks the cell's state (see the module
    /// documentation).
    fn recover_and_check(mut self) {
        let what = self.what.clone();
        let st = self.b.stats();
        match self.armed {
            Some(Fault::Eio | Fault::Enospc) => {
                assert!(
                    st.injected_errors > 0,
                    "{what}: the fault never fired: {st:?}"
                )
            }
            Some(Fault::Short) => assert!(
                st.injected_errors + st.short_reads > 0,
                "{what}: the short transfer never happened: {st:?}"
            ),
            Some(Fault::Slow) | None => {}
        }
        self.b.clear();
        self.b.set_read_latency(Duration::ZERO);
        self.b.set_write_latency(Duration::ZERO);
        self.b.set_space_limit(None);
        assert_eq!(self.file.len(), self.model.len() as u64, "{what}: size");
        assert_same(
            &format!("{what}: reads after recovery"),
            &read_all(&self.file),
            &self.model,
        );
        let r = self.file.sync_data();
        match self.owed.take() {
            Some(e) => assert_eq!(
                r.as_ref().err().and_then(io::Error::raw_os_error),
                Some(e),
                "{what}: the sync after recovery owes the writeback error: {r:?}"
            ),
            None => r.unwrap_or_else(|e| panic!("{what}: sync after recovery: {e}")),
        }
        self.file
            .sync_data()
            .unwrap_or_else(|e| panic!("{what}: the second sync after recovery: {e}"));
        assert_same(
            &format!("{what}: backing after the sync"),
            &self.b.inner().contents().unwrap(),
            &self.model,
        );
        let s = self.cache.stats();
        assert_eq!(s.dirty_bytes, 0, "{what}: dirty after sync: {s:?}");
        assert_eq!(s.writeback_bytes, 0, "{what}: {s:?}");
        assert_eq!(
            s.free_bytes + s.bytes_cached,
            s.capacity_bytes,
            "{what}: pages neither free nor cached: {s:?}"
        );
        // Usable: one more write and read.
        let more = nonzero_bytes(3 * PAGE + 5, 99);
        self.write(&more, 100 * KIB as u64 + 3, WriteFlags::NONE)
            .unwrap_or_else(|e| panic!("{what}: a write after recovery: {e}"));
        assert_same(
            &format!("{what}: after one more write"),
            &read_all(&self.file),
            &self.model,
        );
        self.file.sync_data().unwrap();
        assert_same(
            &format!("{what}: backing at the end"),
            &self.b.inner().contents().unwrap(),
            &self.model,
        );
    }
}

/// Runs `cell` for every fault, each within [`HANG`].
fn row(path: &'static str, cell: fn(Fault, String)) {
    for fault in FAULTS {
        let what = format!("{path} x {fault:?}");
        within(HANG, &what.clone(), move || cell(fault, what));
    }
}

/// Reads `len` bytes at `off`, checking them against the model on
/// success.
fn read_check(c: &Cell, off: u64, len: usize, flags: ReadFlags) -> io::Result<usize> {
    let mut buf = vec![0u8; len];
    let r = c.file.read_at_flags(&mut buf, off, flags);
    if let Ok(n) = r {
        assert_same(
            &format!("{}: read at {off}", c.what),
            &buf[..n],
            &c.model[off as usize..off as usize + n],
        );
    }
    r
}

#[test]
fn read_miss_without_readahead() {
    row("read miss", |fault, what| {
        let mut c = Cell::new(
            what,
            TestCache::bytes(2 * MIB).max_folio(64 * KIB).no_readahead(),
        );
        c.arm(fault, Op::Read, 0);
        let r = read_check(&c, 40 * KIB as u64 + 17, 20 * KIB, ReadFlags::NONE);
        c.check_result(&r, fault.errno(), "the read");
        c.recover_and_check();
    });
}

#[test]
fn readahead_windows() {
    row("readahead", |fault, what| {
        let mut c = Cell::new(what, TestCache::bytes(2 * MIB).max_folio(64 * KIB));
        c.arm(fault, Op::Read, 0);
        // A stream: the first read fails (or not), and so may any window.
        let mut off = 0u64;
        let mut first = None;
        while off < SIZE as u64 {
            match read_check(&c, off, 16 * KIB, ReadFlags::NONE) {
                Ok(n) => off += n as u64,
                Err(e) => {
                    first.get_or_insert(e);
                    break;
                }
            }
        }
        let r = first.map_or(Ok(()), Err);
        c.check_result(&r, fault.errno(), "the stream");
        c.recover_and_check();
    });
}

#[test]
fn uncached_read() {
    row("uncached read", |fault, what| {
        let mut c = Cell::new(what, TestCache::bytes(2 * MIB).max_folio(64 * KIB));
        c.arm(fault, Op::Read, 0);
        let r = read_check(&c, 64 * KIB as u64, 128 * KIB, ReadFlags::DONTCACHE);
        c.check_result(&r, fault.errno(), "the read");
        if r.is_ok() {
            assert_eq!(
                c.cache.stats().bytes_cached,
                0,
                "{}: it stayed cached",
                c.what
            );
        }
        c.recover_and_check();
    });
}

#[test]
fn write_into_a_block_not_cached() {
    row("partial write", |fault, what| {
        let mut c = Cell::new(what, TestCache::bytes(2 * MIB).max_folio(64 * KIB).quiet());
        c.arm(fault, Op::Read, 0);
        let before = c.model.clone();
        let r = c.write(&[0xab; 100], 5000, WriteFlags::NONE);
        c.check_result(&r, fault.errno(), "the write");
        if r.is_err() {
            assert_eq!(c.model, before);
        }
        c.recover_and_check();
    });
}

/// A write acknowledged, then a sync whose writeback meets the fault.
fn sync_row(all: bool) {
    let path = if all {
        "sync_all writeback"
    } else {
        "sync_data writeback"
    };
    let cell: fn(Fault, String) = if all {
        |fault, what| sync_cell(fault, what, true)
    } else {
        |fault, what| sync_cell(fault, what, false)
    };
    row(path, cell);
}

fn sync_cell(fault: Fault, what: String, all: bool) {
    let mut c = Cell::new(what, TestCache::bytes(2 * MIB).max_folio(64 * KIB).quiet());
    let data = nonzero_bytes(200 * KIB, 3);
    c.write(&data, 256 * KIB as u64, WriteFlags::NONE).unwrap();
    c.arm(fault, Op::Write, 300 * KIB as u64);
    let r = if all {
        c.file.sync_all()
    } else {
        c.file.sync_data()
    };
    let want = match fault {
        Fault::Short => Some(libc::ENOSPC),
        f => f.errno(),
    };
    c.check_result(&r, want, "the sync");
    if r.is_err() {
        assert!(
            c.cache.stats().dirty_bytes > 0,
            "{}: nothing stayed dirty",
            c.what
        );
    }
    c.recover_and_check();
}

#[test]
fn sync_data_writeback() {
    sync_row(false);
}

#[test]
fn sync_all_writeback() {
    sync_row(true);
}

#[test]
fn the_backings_own_sync() {
    row("backing fsync", |fault, what| {
        let mut c = Cell::new(what, TestCache::bytes(2 * MIB).max_folio(64 * KIB).quiet());
        c.write(&nonzero_bytes(10 * KIB, 4), 8, WriteFlags::NONE)
            .unwrap();
        match fault {
            Fault::Eio | Fault::Enospc => {
                c.armed = Some(fault);
                c.b.fail_nth(Op::Sync, 1, fault.errno().unwrap())
            }
            // No short sync; slow applies to reads and writes.
            Fault::Short => {}
            Fault::Slow => c.arm(fault, Op::Sync, 0),
        }
        let r = c.file.sync_all();
        c.check_result(&r, fault.errno(), "the sync");
        c.recover_and_check();
    });
}

#[test]
fn background_flusher() {
    row("flusher", |fault, what| {
        // Writeback starts past 32 KiB dirty.
        let mut c = Cell::new(
            what,
            TestCache::bytes(2 * MIB)
                .max_folio(64 * KIB)
                .dirty_limit(2 * MIB)
                .dirty_background(32 * KIB),
        );
        c.arm(fault, Op::Write, 200 * KIB as u64);
        c.write(
            &nonzero_bytes(256 * KIB, 5),
            64 * KIB as u64,
            WriteFlags::NONE,
        )
        .unwrap();
        let cache = c.cache.clone();
        match fault
            .errno()
            .or((fault == Fault::Short).then_some(libc::ENOSPC))
        {
            Some(e) => {
                wait_until("the flusher meets the fault", || {
                    cache.stats().writeback_errors > 0
                });
                c.owed = Some(e);
            }
            None => wait_until("the flusher writes everything", || all_written(&cache)),
        }
        c.recover_and_check();
    });
}

#[test]
fn throttled_writer() {
    row("throttled writer", |fault, what| {
        // Writers past 64 KiB dirty write back first.
        let mut c = Cell::new(
            what,
            TestCache::bytes(2 * MIB)
                .max_folio(16 * KIB)
                .dirty_limit(64 * KIB)
                .dirty_background(32 * KIB),
        );
        c.arm(fault, Op::Write, 128 * KIB as u64);
        let chunk = nonzero_bytes(4 * KIB, 6);
        let mut r = Ok(0);
        for i in 0..(SIZE / (4 * KIB)) {
            r = c.write(&chunk, (i * 4 * KIB) as u64, WriteFlags::NONE);
            if r.is_err() {
                break;
            }
        }
        match fault {
            Fault::Eio | Fault::Enospc | Fault::Short => {
                let want = fault.errno().unwrap_or(libc::ENOSPC);
                c.check_result(&r, Some(want), "the throttled write");
                // Written back by nobody yet: the next sync reports it.
                c.owed = Some(want);
            }
            Fault::Slow => c.check_result(&r, None, "the writes"),
        }
        c.recover_and_check();
    });
}

#[test]
fn uncached_write() {
    row("uncached write", |fault, what| {
        let mut c = Cell::new(what, TestCache::bytes(2 * MIB).max_folio(64 * KIB).quiet());
        c.arm(fault, Op::Write, 300 * KIB as u64);
        let data = nonzero_bytes(128 * KIB, 8);
        let r = c.write(&data, 256 * KIB as u64, WriteFlags::DONTCACHE);
        if r.is_ok() {
            // The write only started its writeback (one run, one backing
            // write): let it meet the fault before the recovery clears it.
            wait_until("the uncached write's writeback", || {
                c.b.stats().writes > 0 && c.cache.stats().writeback_bytes == 0
            });
        }
        let want = fault
            .errno()
            .or((fault == Fault::Short).then_some(libc::ENOSPC));
        match (&r, want) {
            (Ok(_), Some(e)) => {
                // Acknowledged (copied into the cache); its writeback's
                // error goes to the next sync, as the kernel's.
                c.owed = Some(e);
            }
            _ => c.check_result(&r, want, "the write"),
        }
        c.recover_and_check();
    });
}

#[test]
fn set_len() {
    row("set_len", |fault, what| {
        let mut c = Cell::new(what, TestCache::bytes(2 * MIB).max_folio(64 * KIB).quiet());
        c.write(
            &nonzero_bytes(4 * KIB, 9),
            500 * KIB as u64,
            WriteFlags::NONE,
        )
        .unwrap();
        match fault {
            Fault::Eio | Fault::Enospc => {
                c.armed = Some(fault);
                c.b.fail_nth(Op::SetLen, 1, fault.errno().unwrap())
            }
            Fault::Short => {}
            Fault::Slow => c.arm(fault, Op::SetLen, 0),
        }
        let r = c.file.set_len(300 * KIB as u64 + 5);
        c.check_result(&r, fault.errno(), "set_len");
        if r.is_ok() {
            c.model.truncate(300 * KIB + 5);
        }
        c.recover_and_check();
    });
}

#[test]
fn punch_hole() {
    row("punch_hole", |fault, what| {
        let mut c = Cell::new(what, TestCache::bytes(2 * MIB).max_folio(64 * KIB).quiet());
        read_all(&c.file);
        match fault {
            Fault::Eio | Fault::Enospc => {
                c.armed = Some(fault);
                c.b.fail_nth(Op::PunchHole, 1, fault.errno().unwrap())
            }
            Fault::Short => {}
            Fault::Slow => c.arm(fault, Op::PunchHole, 0),
        }
        let (off, len) = (10 * KIB + 7, 100 * KIB);
        let r = c.file.punch_hole(off as u64, len as u64);
        c.check_result(&r, fault.errno(), "punch_hole");
        if r.is_ok() {
            c.model[off..off + len].fill(0);
        }
        c.recover_and_check();
    });
}
