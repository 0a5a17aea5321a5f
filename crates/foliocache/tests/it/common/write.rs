//! Helpers for the write-path suites (`write::*`, `faults::matrix`), which
//! import this module as `wcommon`; the `soak` binary includes it with
//! `#[path]`.
#![allow(dead_code)]
// The tests drive and count their own threads with std atomics and locks;
// the shim rule (clippy.toml) is for the crate's protocols.
#![allow(clippy::disallowed_types)]

use std::fs;
use std::io;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use foliocache::File;

/// A page.
pub const PAGE: usize = 4096;
/// A page, as a file offset.
pub const P: u64 = PAGE as u64;
/// How long one step (a sync, a write, a join) may take before a test calls
/// it a hang.
pub const HANG: Duration = Duration::from_secs(30);

// The `soak` binary includes this module and uses only part of it.
#[allow(unused_imports)]
pub use test_support::{cache::open_rw, nonzero_bytes, TempPath};

/// Writes `pages` single pages, every other page from page 0, through `f`;
/// returns the file's model.
#[allow(dead_code)]
pub fn write_scattered(f: &File, pages: u64, seed: u64) -> Model {
    let mut model = Model::default();
    for i in 0..pages {
        let d = nonzero_bytes(PAGE, seed + i);
        f.write_all_at(&d, 2 * i * P).unwrap();
        model.write(2 * i * P, &d);
    }
    model
}

/// Reads `len` bytes at `off` (short at EOF).
pub fn read_vec(f: &File, off: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let n = f.read_at(&mut buf[done..], off + done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    buf.truncate(done);
    Ok(buf)
}

/// The whole file as the cache shows it: `f.len()` bytes.
pub fn read_all(f: &File) -> Vec<u8> {
    let len = f.len() as usize;
    let got = read_vec(f, 0, len).unwrap();
    assert_eq!(got.len(), len, "read_all: a read stopped short of len()");
    got
}

/// The file at `path` as the kernel shows it (std::fs, not the cache).
pub fn disk(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("std::fs::read {}: {e}", path.display()))
}

/// The file's allocated bytes on its filesystem (`st_blocks`).
pub fn allocated(path: &Path) -> u64 {
    std::os::unix::fs::MetadataExt::blocks(&fs::metadata(path).unwrap()) * 512
}

/// Asserts `got == want` and, if not, says where they first differ
/// (instead of printing megabytes).
#[track_caller]
pub fn assert_same(what: &str, got: &[u8], want: &[u8]) {
    if got == want {
        return;
    }
    let first = got
        .iter()
        .zip(want)
        .position(|(g, w)| g != w)
        .unwrap_or(got.len().min(want.len()));
    let show = |v: &[u8]| {
        let end = (first + 16).min(v.len());
        format!("{:02x?}", &v[first.min(v.len())..end])
    };
    let differing = got.iter().zip(want).filter(|(g, w)| g != w).count();
    panic!(
        "{what}: got {} bytes, want {}; first difference at byte {first} (page {}, {} bytes differ \
         in the common prefix): got {} want {}",
        got.len(),
        want.len(),
        first / PAGE,
        differing,
        show(got),
        show(want)
    );
}

/// Runs `f` on a thread and fails the test if it does not finish within
/// `limit`.
pub fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => {
            t.join().unwrap();
            v
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: hung for more than {limit:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => match t.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => unreachable!("sent nothing but returned"),
        },
    }
}

/// How long each write stress test runs: `FOLIOCACHE_STRESS_SECS` (2 s by
/// default).
pub fn stress_secs() -> Duration {
    let s = std::env::var("FOLIOCACHE_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(2.0);
    Duration::from_secs_f64(s)
}

/// splitmix64's finaliser: the stress tests' patterns.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Byte `o` (offset inside the region) of version `v` of region `r`, in the
/// stress tests: never zero, so a zero is never data.
pub fn pat(r: usize, v: u64, o: u64) -> u8 {
    (mix(((r as u64) << 48) ^ (v << 24) ^ o) as u8) | 1
}

/// Polls `cond` every millisecond until it holds; panics after [`HANG`].
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < HANG, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether every byte written has reached the backing: nothing dirty and
/// nothing under writeback (a folio's dirty pages stop counting as dirty
/// when its writeback starts, before the backing has them).
pub fn all_written(c: &foliocache::Cache) -> bool {
    let s = c.stats();
    s.dirty_bytes == 0 && s.writeback_bytes == 0
}

/// The OS error number of an error, panicking on success or a non-OS error.
#[track_caller]
pub fn errno<T: std::fmt::Debug>(what: &str, r: io::Result<T>) -> i32 {
    match r {
        Ok(v) => panic!("{what}: expected an OS error, got Ok({v:?})"),
        Err(e) => e
            .raw_os_error()
            .unwrap_or_else(|| panic!("{what}: expected an OS error, got {e:?}")),
    }
}

#[allow(unused_imports)]
pub use test_support::proptest_cases as cases;

/// A file image: what the cache must show, and the backing after a sync.
#[derive(Clone, Debug, Default)]
pub struct Model {
    /// The bytes, `data.len()` is the file size.
    pub data: Vec<u8>,
}

impl Model {
    /// `pwrite`: extends with zeros up to `off`, then overwrites.
    pub fn write(&mut self, off: u64, buf: &[u8]) {
        let off = off as usize;
        let end = off + buf.len();
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        self.data[off..end].copy_from_slice(buf);
    }

    /// `ftruncate`.
    pub fn set_len(&mut self, len: u64) {
        self.data.resize(len as usize, 0);
    }

    /// `fallocate(PUNCH_HOLE | KEEP_SIZE)`.
    pub fn punch(&mut self, off: u64, len: u64) {
        let size = self.data.len() as u64;
        let start = off.min(size) as usize;
        let end = off.saturating_add(len).min(size) as usize;
        self.data[start..end].fill(0);
    }

    /// `fallocate(COLLAPSE_RANGE)` (`insert == false`) or
    /// `fallocate(INSERT_RANGE)` of `len` bytes at `off`, if the file
    /// allows it (whole 4 KiB blocks, a non-empty range, a collapse ending
    /// before end of file, an insert starting before it): returns whether
    /// it did, and changes nothing if not.
    pub fn shift(&mut self, insert: bool, off: u64, len: u64) -> bool {
        let size = self.len();
        let valid = off.is_multiple_of(4096)
            && len.is_multiple_of(4096)
            && len > 0
            && if insert { off < size } else { off + len < size };
        if valid {
            let (off, len) = (off as usize, len as usize);
            if insert {
                self.data.splice(off..off, std::iter::repeat_n(0, len));
            } else {
                self.data.drain(off..off + len);
            }
        }
        valid
    }

    /// What `read_at(len, off)` returns.
    pub fn read(&self, off: u64, len: usize) -> &[u8] {
        let start = off.min(self.data.len() as u64) as usize;
        let end = (start + len).min(self.data.len());
        &self.data[start..end]
    }

    /// The size.
    pub fn len(&self) -> u64 {
        self.data.len() as u64
    }

    /// Zero size.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}
