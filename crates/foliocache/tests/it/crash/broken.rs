//! The crash check must catch a broken stack: backings between the cache
//! and the recording that lose, reorder or corrupt what a sync
//! acknowledged, and a recording that lost a sync.

// A test backing's queue: the shim rule (clippy.toml) is for the crate's
// protocols.
#![allow(clippy::disallowed_types)]

use std::io;
use std::sync::{Arc, Mutex};

use backing::{AlignedBuf, Backing, IoBuf, IoBufMut, Recorded};
use test_support::crash::{check, Explore};

use super::driver::{cache, explore, run, Rec};
use crate::common::forward_backing;

/// Sequences enough to meet a sync after a write: the check must fail
/// within them.
const SEQUENCES: u64 = 64;

/// Runs sequences over `wrap`'s backing; returns the check's failure.
fn caught(wrap: &dyn Fn(Arc<Rec>) -> Arc<dyn Backing>) -> String {
    let explore = explore(
        1,
        40,
        (u64::MAX, SEQUENCES),
        Explore { random: 4, seed: 0 },
        wrap,
        false,
    );
    match explore {
        Ok((checked, n)) => panic!("{n} sequences, {checked:?}, and no violation found"),
        Err(e) => e,
    }
}

/// A device whose cache acknowledges a flush it never did: `fdatasync`
/// (or, with `all`, `fsync`) returns `Ok` without reaching the file.
struct LyingSync {
    rec: Arc<Rec>,
    all: bool,
}

impl Backing for LyingSync {
    forward_backing!(rec: len, read_blocks, write_blocks, set_len, punch_hole, check_size, info);
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        self.rec.allocate(offset, len)
    }
    fn sync_data(&self) -> io::Result<()> {
        if self.all {
            self.rec.sync_data()
        } else {
            Ok(())
        }
    }
    fn sync_all(&self) -> io::Result<()> {
        if self.all {
            Ok(())
        } else {
            self.rec.sync_all()
        }
    }
}

#[test]
fn a_sync_data_that_does_not_reach_the_file_is_caught() {
    let e = caught(&|rec| Arc::new(LyingSync { rec, all: false }));
    assert!(e.contains("byte") || e.contains("size"), "{e}");
}

#[test]
fn a_sync_all_that_does_not_reach_the_file_is_caught() {
    let e = caught(&|rec| Arc::new(LyingSync { rec, all: true }));
    assert!(e.contains("without an fsync"), "{e}");
}

/// A device that flushes before the writes queued ahead of the flush:
/// each write waits in a queue until the next call that reads or changes
/// the file, and a sync goes to the file before it (a sync that does not
/// order).
struct Unordered {
    rec: Arc<Rec>,
    queue: Mutex<Vec<(u64, Vec<u8>)>>,
}

impl Unordered {
    fn drain(&self) -> io::Result<()> {
        for (offset, data) in self.queue.lock().unwrap().drain(..) {
            let mut buf = AlignedBuf::zeroed(data.len())?;
            buf.copy_from_slice(&data);
            self.rec.write_blocks(&[buf.io_buf()], offset)?;
        }
        Ok(())
    }
}

impl Backing for Unordered {
    forward_backing!(rec: check_size, info);
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        self.rec.allocate(offset, len)
    }
    /// The size with the queued writes, which stay queued.
    fn len(&self) -> io::Result<u64> {
        let queued = self
            .queue
            .lock()
            .unwrap()
            .iter()
            .map(|(o, d)| o + d.len() as u64)
            .max();
        Ok(self.rec.len()?.max(queued.unwrap_or(0)))
    }
    fn read_blocks(&self, bufs: &mut [IoBufMut<'_>], offset: u64) -> io::Result<usize> {
        self.drain()?;
        self.rec.read_blocks(bufs, offset)
    }
    fn write_blocks(&self, bufs: &[IoBuf<'_>], offset: u64) -> io::Result<usize> {
        let data: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        let n = data.len();
        self.queue.lock().unwrap().push((offset, data));
        Ok(n)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.drain()?;
        self.rec.set_len(len)
    }
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        self.drain()?;
        self.rec.punch_hole(offset, len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.rec.sync_data()?;
        self.drain()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.rec.sync_all()?;
        self.drain()
    }
}

#[test]
fn a_sync_that_does_not_order_the_writes_before_it_is_caught() {
    let e = caught(&|rec| {
        Arc::new(Unordered {
            rec,
            queue: Mutex::new(Vec::new()),
        })
    });
    assert!(e.contains("byte") || e.contains("size"), "{e}");
}

/// A device that corrupts one byte of every write.
struct Corrupting {
    rec: Arc<Rec>,
}

impl Backing for Corrupting {
    forward_backing!(rec: len, read_blocks, set_len, sync_data, sync_all, punch_hole, check_size, info);
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        self.rec.allocate(offset, len)
    }
    fn write_blocks(&self, bufs: &[IoBuf<'_>], offset: u64) -> io::Result<usize> {
        let mut buf = AlignedBuf::zeroed(bufs.iter().map(|b| b.len()).sum())?;
        let mut at = 0;
        for b in bufs {
            buf[at..at + b.len()].copy_from_slice(b);
            at += b.len();
        }
        buf[0] ^= 0x5a;
        self.rec.write_blocks(&[buf.io_buf()], offset)
    }
}

#[test]
fn a_write_that_corrupts_is_caught() {
    let e = caught(&|rec| Arc::new(Corrupting { rec }));
    assert!(e.contains("byte"), "{e}");
}

/// The log of a good run, less its `fdatasync`s: the check must find the
/// acknowledged data it then loses.
#[test]
fn a_recording_that_drops_a_sync_is_caught() {
    let c = cache(false);
    let explore = Explore { random: 4, seed: 0 };
    let lost = (0..SEQUENCES).find_map(|seed| {
        let seq = run(&c, seed, 40, &|rec| rec, true);
        check(&seq.program, &seq.log, &explore).expect("the good run passes");
        let without: Vec<Recorded> = seq
            .log
            .into_iter()
            .filter(|e| *e != Recorded::Sync { all: false })
            .collect();
        check(&seq.program, &without, &explore).err()
    });
    let v = lost.expect("no sequence lost acknowledged data without its syncs");
    assert!(v.what.contains("byte") || v.what.contains("size"), "{v}");
}
