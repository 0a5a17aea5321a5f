//! The file target: a file through the cache, over a fault-injecting memory
//! backing, against a `Vec<u8>` model.
//!
//! The input bytes decode (through [`arbitrary`]) into a cache shape
//! (capacity 128 KiB to 2 MiB, so reclaim and throttling happen; largest
//! folio 4 KiB to 256 KiB; a quiet or an eager background flusher), an
//! initial file, and a sequence of operations on up to three handles of the
//! file (`reopen`ed: each has its own writeback error report): `write_at`
//! (cached or `DONTCACHE`), `read_at` (plain, `DONTCACHE`, `NOWAIT`),
//! `set_len`, `punch_hole`, `collapse_range`/`insert_range`,
//! `sync_data`/`sync_all`, `Cache::sync_all`,
//! eviction (`Cache::shrink`), `advise`, closing every handle and opening
//! the backing again, and arming and clearing the rules of
//! [`FaultyBacking`]: the n-th read/write/sync/set_len/punch failing once or
//! for good, failing read and write ranges, a space limit, a short read.
//!
//! # What is checked (the documented promises, `write_at`, `read_at`,
//! `set_len`, `punch_hole`, `sync_data`, and that bad input is an error,
//! never a panic, with the cache consistent after it)
//!
//! The model is the file's image with, for each byte, the values it may
//! hold: one, except after a failed operation that may have partly applied.
//! A read that returns bytes fixes them (they must be among those allowed).
//! - With no fault rule armed, every operation succeeds, and a read returns
//!   exactly `min(len, size - off)` bytes, the model's.
//! - A successful read, however short (short only while faults are armed),
//!   returns the model's bytes. `len()` is the model's size after every
//!   operation.
//! - A write that returns `Ok` is in the model. A failed write may have
//!   written a prefix of whole folios and extended the file to the end of
//!   what it wrote, no more: the size is the old one or grew past the
//!   write's offset up to its end, and if it grew, every byte from the
//!   offset to the new size is the new data (and the gap before it zeros);
//!   otherwise each byte of the range is old or new.
//! - A failed `set_len` changes nothing. A failed `punch_hole` whose backing
//!   punch was refused changes nothing; one that failed later (an edge
//!   block's read) has punched the whole blocks inside (zeros) and each
//!   edge byte is old or zero.
//! - A `collapse_range` or `insert_range` that the file allows (whole
//!   blocks, a collapse ending before end of file, an insert starting
//!   before it) moves the model's bytes as it says, or fails (faults armed)
//!   having moved nothing; one the file does not allow fails with
//!   `InvalidInput` and changes nothing.
//! - A sync that fails is allowed only while faults are armed or a fault
//!   fired since that handle last synced. A sync that returns `Ok` means
//!   the backing holds the file: its bytes and length must match the model
//!   (no acknowledged write lost).
//! - Closing the last handle writes the dirty data back; if that fails the
//!   cache keeps the file and retries it: with faults cleared,
//!   `Cache::sync_all` reaches the kept file. Once the mapping is gone the
//!   backing must equal the model (bytes and length). The file opened
//!   again has the backing's size and bytes.
//! - At the end, faults are cleared: a sync on each handle may report an
//!   earlier error once, then must succeed; the backing must equal the
//!   model, and the whole file must read back right, cached and after
//!   eviction (the cache still works; a hang is a libFuzzer timeout).

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use backing::aio::{EngineKind, IoEngineConfig};
use backing::{FaultyBacking, MemBacking, Op as BOp, BLOCK};
use foliocache::{Advice, Cache, File, ReadFlags, WriteFlags};
use test_support::cache::{faulty_file, TestCache};

type Faulty = Arc<FaultyBacking<MemBacking>>;

const KIB: u64 = 1024;
/// Offsets stay below this (plus a write's length): a file of up to about
/// 600 KiB, larger than the smaller caches.
const SPAN: u64 = 512 * KIB + 123;
/// At most this many operations per input.
const MAX_OPS: usize = 64;

// ---------------------------------------------------------------------------
// The model.

/// The file's image: for each byte, the value it holds, or the values it
/// may hold after a failed operation (`vals[i]` and `alt[i]`).
#[derive(Default, Debug)]
struct Image {
    vals: Vec<u8>,
    alt: BTreeMap<usize, Vec<u8>>,
}

impl Image {
    fn len(&self) -> u64 {
        self.vals.len() as u64
    }

    fn allows(&self, i: usize, b: u8) -> bool {
        self.vals[i] == b || self.alt.get(&i).is_some_and(|a| a.contains(&b))
    }

    /// Byte `i` is `b` for certain.
    fn fix(&mut self, i: usize, b: u8) {
        self.vals[i] = b;
        if !self.alt.is_empty() {
            self.alt.remove(&i);
        }
    }

    /// Bytes from `off` are `data` for certain.
    fn fix_range(&mut self, off: usize, data: &[u8]) {
        self.vals[off..off + data.len()].copy_from_slice(data);
        if !self.alt.is_empty() {
            let gone: Vec<usize> = self
                .alt
                .range(off..off + data.len())
                .map(|(&i, _)| i)
                .collect();
            for i in gone {
                self.alt.remove(&i);
            }
        }
    }

    /// Byte `i` may also be `b`.
    fn add(&mut self, i: usize, b: u8) {
        if self.vals[i] != b {
            let a = self.alt.entry(i).or_default();
            if !a.contains(&b) {
                a.push(b);
            }
        }
    }

    /// `collapse_range` (the bytes `off..off + len` go, those after move
    /// down) or, `insert`, `insert_range` (zeros for certain at
    /// `off..off + len`, the bytes from `off` move up).
    fn shift(&mut self, insert: bool, off: u64, len: u64) {
        let (off, len) = (off as usize, len as usize);
        let moved = self.alt.split_off(&off);
        if insert {
            self.vals.splice(off..off, std::iter::repeat_n(0, len));
            self.alt
                .extend(moved.into_iter().map(|(i, a)| (i + len, a)));
        } else {
            self.vals.drain(off..off + len);
            self.alt.extend(
                moved
                    .into_iter()
                    .filter(|&(i, _)| i >= off + len)
                    .map(|(i, a)| (i - len, a)),
            );
        }
    }

    fn resize(&mut self, size: u64) {
        let size = size as usize;
        self.vals.resize(size, 0);
        self.alt.retain(|&i, _| i < size);
    }

    fn write(&mut self, off: u64, data: &[u8]) {
        if data.is_empty() {
            // An empty write does nothing, even past the end.
            return;
        }
        let end = off + data.len() as u64;
        if end > self.len() {
            self.resize(end);
        }
        self.fix_range(off as usize, data);
    }

    /// Checks `got` (read at `off`) against the model, then fixes those bytes.
    #[track_caller]
    fn observe(&mut self, off: u64, got: &[u8], what: &str) {
        if got.is_empty() {
            return;
        }
        let off_ = off as usize;
        if self.vals[off_..off_ + got.len()] == *got {
            self.fix_range(off_, got);
            return;
        }
        for (k, &b) in got.iter().enumerate() {
            let i = off as usize + k;
            if !self.allows(i, b) {
                panic!(
                    "{what}: byte {i} reads {b:#04x}, the model allows {:#04x}{}",
                    self.vals[i],
                    self.alt
                        .get(&i)
                        .map(|a| format!(" or {a:02x?}"))
                        .unwrap_or_default()
                );
            }
        }
        self.fix_range(off_, got);
    }

    /// The backing's bytes after a successful sync: they must be the file.
    #[track_caller]
    fn check_durable(&mut self, backing: &[u8], what: &str) {
        assert_eq!(
            backing.len() as u64,
            self.len(),
            "{what}: the backing's length after a successful sync is not the file's size"
        );
        self.observe(
            0,
            backing,
            &format!("{what}: the backing after a successful sync"),
        );
    }
}

/// The bytes a write with `seed` at step `step` writes: never zero, so a
/// hole or a lost write shows.
fn pattern(len: usize, seed: u8, step: usize) -> Vec<u8> {
    let s = u64::from(seed) * 131 + (step as u64 % 1_000_003) * 17;
    (0..len as u64)
        .map(|i| ((s + i * 7 + (i >> 9)) % 255 + 1) as u8)
        .collect()
}

// ---------------------------------------------------------------------------
// Decoding.

/// The cache and file a run starts from.
#[derive(Arbitrary, Debug)]
struct Setup {
    /// 128 KiB, 512 KiB, 2 MiB.
    capacity: u8,
    /// 4 KiB .. 256 KiB.
    max_folio: u8,
    /// The background flusher starts at a quarter of the cache (true) or
    /// never (below the capacity: only syncs and throttled writers write).
    eager_flusher: bool,
    /// Initial file size (scaled to `SPAN / 4`).
    initial: u16,
}

/// One operation, with raw fields, scaled by the `Run` method that applies
/// it (`check_*`, `arm_*`).
#[derive(Arbitrary, Debug)]
enum RawOp {
    Write {
        off: u32,
        len: u16,
        seed: u8,
        uncached: bool,
        handle: u8,
    },
    Read {
        off: u32,
        len: u16,
        flags: u8,
        handle: u8,
    },
    SetLen {
        size: u32,
        handle: u8,
    },
    Punch {
        off: u32,
        len: u32,
        handle: u8,
    },
    Shift {
        insert: bool,
        block: u16,
        blocks: u8,
        handle: u8,
    },
    Sync {
        all: bool,
        handle: u8,
    },
    CacheSyncAll,
    Evict,
    Advise {
        off: u32,
        len: u32,
        dont_need: bool,
    },
    Reopen,
    DropHandle {
        handle: u8,
    },
    CloseAndOpen,
    FailNth {
        op: u8,
        n: u8,
        sticky: bool,
        enospc: bool,
    },
    FailReadsIn {
        off: u32,
        len: u16,
    },
    FailWritesIn {
        off: u32,
        len: u16,
    },
    SpaceLimit {
        limit: u32,
    },
    ShortRead {
        n: u8,
        max: u16,
    },
    Clear,
}

/// An offset below `SPAN`, block-aligned when the top bit says so.
fn pos(raw: u32) -> u64 {
    let v = u64::from(raw & 0x7fff_ffff) % SPAN;
    if raw & 0x8000_0000 != 0 {
        v / BLOCK as u64 * BLOCK as u64
    } else {
        v
    }
}

/// A length up to 64 KiB, mostly small, sometimes whole blocks.
fn length(raw: u16) -> u64 {
    let v = u64::from(raw);
    match v % 4 {
        0 => (v >> 2) % 300,
        1 => (v >> 2) % (16 * KIB),
        2 => (v >> 2) % 17 * BLOCK as u64,
        _ => v,
    }
}

/// The backing operations a countdown may be set on (`Len` is left alone:
/// opening needs it).
const NTH_OPS: [BOp; 6] = [
    BOp::Read,
    BOp::Write,
    BOp::Sync,
    BOp::SetLen,
    BOp::PunchHole,
    BOp::ShiftRange,
];

// ---------------------------------------------------------------------------
// The run.

/// One handle and whether a fault fired since it last synced (so its next
/// sync may report an error).
struct Handle {
    file: File,
    unreported: bool,
}

struct Run {
    cache: Cache,
    backing: Faulty,
    handles: Vec<Handle>,
    image: Image,
    /// Some fault rule is armed (set since the last `clear`).
    armed: bool,
    /// A fault fired since the last successful `Cache::sync_all`.
    cache_unreported: bool,
    /// Faults fired so far (injected errors plus short reads), as last seen.
    fired: u64,
    /// The punch countdown: (fails at this punch call count, sticky).
    punch_rule: Option<(u64, bool)>,
    step: usize,
    /// `FUZZ_DEBUG` is set: trace each step.
    debug: bool,
}

fn fired(b: &Faulty) -> u64 {
    let s = b.stats();
    s.injected_errors + s.short_reads
}

impl Run {
    fn new(setup: &Setup, data: &[u8]) -> Run {
        let capacity = [128 * KIB, 512 * KIB, 2048 * KIB][setup.capacity as usize % 3] as usize;
        let max_folio = (4 * KIB as usize) << (setup.max_folio % 7);
        let background = if setup.eager_flusher {
            capacity / 4
        } else {
            capacity
        };
        let cache = TestCache::bytes(capacity)
            .max_folio(max_folio)
            .dirty_limit(capacity / 2)
            .dirty_background(background)
            // Readahead windows go to one pool thread (a memory backing
            // has no file descriptor for io_uring).
            .io_engine(IoEngineConfig {
                kind: EngineKind::Threads,
                threads: 1,
                ..IoEngineConfig::default()
            })
            .build();
        let initial = u64::from(setup.initial) * (SPAN / 4) / u64::from(u16::MAX);
        let init = pattern(initial as usize, data.len() as u8, usize::MAX / 2);
        let (file, backing) = faulty_file(&cache, &init);
        let mut image = Image::default();
        image.write(0, &init);
        Run {
            cache,
            backing,
            handles: vec![Handle {
                file,
                unreported: false,
            }],
            image,
            armed: false,
            cache_unreported: false,
            fired: 0,
            punch_rule: None,
            step: 0,
            debug: std::env::var_os("FUZZ_DEBUG").is_some(),
        }
    }

    fn handle(&self, h: u8) -> usize {
        h as usize % self.handles.len()
    }

    /// Notes faults that fired (during the last operation or in the
    /// background): every handle's next sync may report one.
    fn note_faults(&mut self) {
        let now = fired(&self.backing);
        if now != self.fired {
            self.fired = now;
            self.cache_unreported = true;
            for h in &mut self.handles {
                h.unreported = true;
            }
        }
    }

    /// An error is allowed only while faults are armed (or, for a sync,
    /// when one fired since that handle's last sync).
    #[track_caller]
    fn allow_error(&self, e: &io::Error, extra: bool, what: &str) {
        assert!(
            self.armed || extra,
            "{what}: failed with no fault armed or pending: {e} ({:?})",
            e.kind()
        );
    }

    #[track_caller]
    fn check_len(&self, what: &str) {
        for (k, h) in self.handles.iter().enumerate() {
            assert_eq!(
                h.file.len(),
                self.image.len(),
                "{what}: len() of handle {k} is not the model's size"
            );
        }
    }

    fn backing_bytes(&self) -> Vec<u8> {
        self.backing.inner().contents().expect("backing contents")
    }

    /// Runs `op` (one `check_*` or `arm_*` per operation, as the kernel's
    /// `test_xarray.c` has one `check_*` per case), then checks every
    /// handle's `len()` against the model.
    fn apply(&mut self, op: &RawOp) {
        let what = format!("step {} {op:?}", self.step);
        match *op {
            RawOp::Write {
                off,
                len,
                seed,
                uncached,
                handle,
            } => self.check_write(off, len, seed, uncached, handle, &what),
            RawOp::Read {
                off,
                len,
                flags,
                handle,
            } => self.check_read(off, len, flags, handle, &what),
            RawOp::SetLen { size, handle } => self.check_set_len(size, handle, &what),
            RawOp::Punch { off, len, handle } => self.check_punch(off, len, handle, &what),
            RawOp::Shift {
                insert,
                block,
                blocks,
                handle,
            } => {
                if !self.check_shift(insert, block, blocks, handle, &what) {
                    return;
                }
            }
            RawOp::Sync { all, handle } => self.check_sync(all, handle, &what),
            RawOp::CacheSyncAll => self.check_cache_sync_all(&what),
            RawOp::Evict => self.evict(),
            RawOp::Advise {
                off,
                len,
                dont_need,
            } => self.check_advise(off, len, dont_need, &what),
            RawOp::Reopen => self.reopen(),
            RawOp::DropHandle { handle } => self.drop_handle(handle),
            RawOp::CloseAndOpen => self.close_and_open(&what),
            RawOp::FailNth {
                op,
                n,
                sticky,
                enospc,
            } => self.arm_fail_nth(op, n, sticky, enospc),
            RawOp::FailReadsIn { off, len } => self.arm_fail_reads_in(off, len),
            RawOp::FailWritesIn { off, len } => self.arm_fail_writes_in(off, len),
            RawOp::SpaceLimit { limit } => self.arm_space_limit(limit),
            RawOp::ShortRead { n, max } => self.arm_short_read(n, max),
            RawOp::Clear => self.clear(),
        }
        self.note_faults();
        if self.debug {
            eprintln!(
                "{what}: size {} (handle 0: {}), armed {}, faults fired {}",
                self.image.len(),
                self.handles[0].file.len(),
                self.armed,
                self.fired
            );
        }
        self.check_len(&what);
    }

    /// `write_at` (cached, or `DONTCACHE`): `Ok` is in the model, all of it;
    /// a failure may have written a prefix of whole folios and extended
    /// the file to its end, no further, or left each byte old or new.
    fn check_write(
        &mut self,
        off: u32,
        len: u16,
        seed: u8,
        uncached: bool,
        handle: u8,
        what: &str,
    ) {
        let off = pos(off);
        let len = length(len);
        let buf = pattern(len as usize, seed, self.step);
        let flags = if uncached {
            WriteFlags::DONTCACHE
        } else {
            WriteFlags::NONE
        };
        let old = self.image.len();
        let h = self.handle(handle);
        let r = self.handles[h].file.write_at_flags(&buf, off, flags);
        self.note_faults();
        match r {
            Ok(n) => {
                assert_eq!(n, buf.len(), "{what}: write_at is never short");
                self.image.write(off, &buf);
            }
            Err(e) => {
                self.allow_error(&e, false, what);
                let new = self.handles[h].file.len();
                if self.debug {
                    eprintln!("{what}: failed: {e}; size {old} -> {new}");
                }
                let end = off + len;
                if new != old {
                    assert!(
                        new > old && new > off && new <= end,
                        "{what}: failed ({e}) and left the size at {new} (was {old}): \
                         a failed write may only extend the file past its offset, to \
                         at most its end"
                    );
                    // A prefix of whole folios went in: the data up to the
                    // new size is the write's.
                    self.image.resize(new);
                    let k = (new - off) as usize;
                    self.image.write(off, &buf[..k]);
                } else {
                    let stop = end.min(old);
                    for i in off..stop {
                        self.image.add(i as usize, buf[(i - off) as usize]);
                    }
                }
            }
        }
    }

    /// `read_at` (plain, `DONTCACHE` or `NOWAIT`), checked by
    /// [`read_check`](Self::read_check).
    fn check_read(&mut self, off: u32, len: u16, flags: u8, handle: u8, what: &str) {
        let off = pos(off);
        let len = length(len) as usize;
        let rf = [ReadFlags::NONE, ReadFlags::DONTCACHE, ReadFlags::NOWAIT][flags as usize % 3];
        let h = self.handle(handle);
        self.read_check(h, off, len, rf, what);
    }

    /// `set_len`: `Ok` sets the model's size; a failure changes nothing.
    fn check_set_len(&mut self, size: u32, handle: u8, what: &str) {
        let size = u64::from(size) % (SPAN + 64 * KIB);
        let h = self.handle(handle);
        let r = self.handles[h].file.set_len(size);
        self.note_faults();
        match r {
            Ok(()) => self.image.resize(size),
            Err(e) => self.allow_error(&e, false, what),
        }
    }

    /// `punch_hole`: `Ok` zeroes the range; a failure whose backing punch
    /// was refused changes nothing, one that failed later has punched the
    /// whole blocks inside, and each edge byte is old or zero.
    fn check_punch(&mut self, off: u32, len: u32, handle: u8, what: &str) {
        let off = pos(off);
        let len = if len & 1 == 0 {
            length(len as u16)
        } else {
            u64::from(len >> 1) % SPAN
        };
        let h = self.handle(handle);
        let punches = self.backing.stats().punch_holes;
        let r = self.handles[h].file.punch_hole(off, len);
        let called = self.backing.stats().punch_holes > punches;
        self.note_faults();
        let end = (off + len).min(self.image.len());
        match r {
            Ok(()) => {
                for i in off..end {
                    self.image.fix(i as usize, 0);
                }
            }
            Err(e) => {
                self.allow_error(&e, false, what);
                let refused = called
                    && self.punch_rule.is_some_and(|(at, sticky)| {
                        let n = punches + 1;
                        n == at || (sticky && n >= at)
                    });
                if !refused {
                    // The whole blocks are punched, the edges may be zeroed.
                    let b = BLOCK as u64;
                    let inner_start = off.div_ceil(b) * b;
                    let inner_end = end / b * b;
                    for i in off..end {
                        if inner_start < inner_end && (inner_start..inner_end).contains(&i) {
                            self.image.fix(i as usize, 0);
                        } else {
                            self.image.add(i as usize, 0);
                        }
                    }
                }
            }
        }
    }

    /// `collapse_range` or `insert_range`: one the file allows moves the
    /// model's bytes or fails (faults armed) having moved nothing; one it
    /// does not allow fails with `InvalidInput`. Returns `false`, having
    /// done nothing, for an insert that would make the file too large.
    fn check_shift(
        &mut self,
        insert: bool,
        block: u16,
        blocks: u8,
        handle: u8,
        what: &str,
    ) -> bool {
        let b = BLOCK as u64;
        // Whole blocks up to just past end of file, now and then an
        // unaligned offset or an empty range.
        let mut off = u64::from(block & 0x7fff) % (SPAN / b + 2) * b;
        if block & 0x8000 != 0 && blocks & 1 != 0 {
            off += 1;
        }
        let len = u64::from(blocks % 33) * b;
        let size = self.image.len();
        if insert && size + len > 4 * SPAN {
            // (The file stays small.)
            return false;
        }
        let valid =
            off.is_multiple_of(b) && len > 0 && if insert { off < size } else { off + len < size };
        let h = self.handle(handle);
        let f = &self.handles[h].file;
        let r = if insert {
            f.insert_range(off, len)
        } else {
            f.collapse_range(off, len)
        };
        self.note_faults();
        match r {
            Ok(()) => {
                assert!(valid, "{what}: done, but the file does not allow it");
                self.image.shift(insert, off, len);
            }
            Err(e) if !valid => assert_eq!(
                e.kind(),
                io::ErrorKind::InvalidInput,
                "{what}: a range the file does not allow: {e}"
            ),
            Err(e) => self.allow_error(&e, false, what),
        }
        true
    }

    /// `sync_data` or `sync_all` of one handle: `Ok` means the backing is
    /// the file; a failure needs a fault armed, or one fired since that
    /// handle last synced.
    fn check_sync(&mut self, all: bool, handle: u8, what: &str) {
        let h = self.handle(handle);
        let f = &self.handles[h].file;
        let r = if all { f.sync_all() } else { f.sync_data() };
        self.note_faults();
        match r {
            Ok(()) => {
                let b = self.backing_bytes();
                self.image.check_durable(&b, what);
            }
            Err(e) => {
                self.allow_error(&e, self.handles[h].unreported, what);
            }
        }
        self.handles[h].unreported = false;
    }

    /// `Cache::sync_all`: as [`check_sync`](Self::check_sync), for the
    /// cache's own report.
    fn check_cache_sync_all(&mut self, what: &str) {
        let r = self.cache.sync_all();
        self.note_faults();
        match r {
            Ok(()) => {
                self.cache_unreported = false;
                let b = self.backing_bytes();
                self.image.check_durable(&b, what);
            }
            Err(e) => self.allow_error(&e, self.cache_unreported, what),
        }
    }

    /// `advise` (`DontNeed` or `WillNeed`) on handle 0: the contents do not
    /// change; an error needs a fault armed.
    fn check_advise(&mut self, off: u32, len: u32, dont_need: bool, what: &str) {
        let advice = if dont_need {
            Advice::DontNeed
        } else {
            Advice::WillNeed
        };
        let r = self.handles[0]
            .file
            .advise(pos(off), u64::from(len) % SPAN, advice);
        self.note_faults();
        if let Err(e) = r {
            self.allow_error(&e, false, what);
        }
    }

    /// A new handle (`reopen`), up to three.
    fn reopen(&mut self) {
        if self.handles.len() < 3 {
            let file = self.handles[0].file.reopen();
            // A new handle reports an error no handle has seen yet
            // (errseq_sample); one may be unseen only if some
            // handle has not synced since a fault fired.
            let unreported = self.handles.iter().any(|h| h.unreported);
            self.handles.push(Handle { file, unreported });
        }
    }

    /// Drops a handle, never the last.
    fn drop_handle(&mut self, handle: u8) {
        if self.handles.len() > 1 {
            let h = self.handle(handle);
            self.handles.remove(h);
        }
    }

    /// Arms the `n`-th call of one backing operation to fail (once, or from
    /// then on) with `EIO` or `ENOSPC`.
    fn arm_fail_nth(&mut self, op: u8, n: u8, sticky: bool, enospc: bool) {
        let bop = NTH_OPS[op as usize % NTH_OPS.len()];
        let n = u64::from(n % 8) + 1;
        let errno = if enospc { libc::ENOSPC } else { libc::EIO };
        if sticky {
            self.backing.fail_from_nth(bop, n, errno);
        } else {
            self.backing.fail_nth(bop, n, errno);
        }
        if bop == BOp::PunchHole {
            self.punch_rule = Some((self.backing.stats().punch_holes + n, sticky));
        }
        self.armed = true;
    }

    /// Fails reads of a range with `EIO`.
    fn arm_fail_reads_in(&mut self, off: u32, len: u16) {
        self.backing
            .fail_reads_in(pos(off), length(len).max(1), libc::EIO);
        self.armed = true;
    }

    /// Fails writes of a range with `EIO`.
    fn arm_fail_writes_in(&mut self, off: u32, len: u16) {
        self.backing
            .fail_writes_in(pos(off), length(len).max(1), libc::EIO);
        self.armed = true;
    }

    /// Limits the backing's space (`ENOSPC` past it).
    fn arm_space_limit(&mut self, limit: u32) {
        self.backing
            .set_space_limit(Some(u64::from(limit) % (SPAN + 64 * KIB)));
        self.armed = true;
    }

    /// Makes the `n`-th read short, at most `max` bytes.
    fn arm_short_read(&mut self, n: u8, max: u16) {
        self.backing
            .short_read_nth(u64::from(n % 8) + 1, usize::from(max) % (2 * BLOCK));
        self.armed = true;
    }

    /// Evicts everything reclaim can (`Cache::shrink`).
    fn evict(&mut self) {
        self.cache.shrink(u64::MAX);
    }

    /// Removes every fault rule, once no readahead IO is in flight.
    fn clear(&mut self) {
        self.backing.clear();
        self.cache.wait_io_idle();
        self.note_faults();
        self.armed = false;
        self.punch_rule = None;
    }

    /// Reads `len` bytes at `off` through handle `h` and checks them.
    fn read_check(&mut self, h: usize, off: u64, len: usize, rf: ReadFlags, what: &str) {
        let mut buf = vec![0xE7u8; len];
        let r = self.handles[h].file.read_at_flags(&mut buf, off, rf);
        self.note_faults();
        let want = (self.image.len().saturating_sub(off)).min(len as u64) as usize;
        match r {
            Ok(n) => {
                assert!(
                    n <= want,
                    "{what}: read {n} bytes, the file has {want} there"
                );
                if n < want {
                    assert!(
                        self.armed || rf == ReadFlags::NOWAIT,
                        "{what}: a short read ({n} of {want} bytes) with no fault armed"
                    );
                }
                self.image.observe(off, &buf[..n], what);
            }
            Err(e) if rf == ReadFlags::NOWAIT && e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => self.allow_error(&e, false, what),
        }
    }

    /// Drops every handle (the last one writes the dirty data back), then
    /// opens the backing again.
    fn close_and_open(&mut self, what: &str) {
        self.note_faults();
        let fired_before = self.fired;
        self.handles.clear();
        self.cache.wait_io_idle();
        self.note_faults();
        if self.fired != fired_before {
            // A fault fired during the close: if its writeback failed, the
            // cache keeps the file (its dirty data, registered) and retries
            // it. With the faults cleared, `Cache::sync_all` reaches it and
            // must write every acknowledged byte.
            self.clear();
            let r = self.cache.sync_all();
            self.note_faults();
            if let Err(e) = r {
                self.allow_error(
                    &e,
                    false,
                    &format!("{what}: Cache::sync_all after the close"),
                );
            }
        }
        // The mapping goes with its last reference: a kept one once the
        // flusher finds it clean (within its 500 ms round), or one the
        // flusher holds for a moment. Wait for it: a second mapping opened
        // over the same backing meanwhile would race with it
        // (`open_backing` has no file identity to find the live mapping by,
        // as opening a path does). Each mapping holds one reference to the
        // backing.
        let t = std::time::Instant::now();
        while Arc::strong_count(&self.backing) > 1 {
            assert!(
                t.elapsed() < std::time::Duration::from_secs(20),
                "{what}: the closed file's mapping is still alive after 20 s"
            );
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        self.note_faults();
        // Every acknowledged byte is on the backing, and its size is the file's.
        let after = self.backing_bytes();
        self.image
            .check_durable(&after, &format!("{what}: the backing after the close"));
        let file = self
            .cache
            .open_backing(self.backing.clone())
            .expect("open the backing again");
        self.handles.push(Handle {
            file,
            unreported: false,
        });
        self.cache_unreported = false;
    }

    /// The final checks: faults cleared, every handle syncs (one may
    /// report an earlier error once), the backing is the file, and the file
    /// reads back right, cached and after eviction.
    fn finish(&mut self) {
        let what = format!("finish after {} steps", self.step);
        self.clear();
        for k in 0..self.handles.len() {
            let f = &self.handles[k].file;
            if let Err(e) = f.sync_data() {
                assert!(
                    self.handles[k].unreported,
                    "{what}: sync of handle {k} failed with nothing to report: {e}"
                );
                f.sync_data().unwrap_or_else(|e| {
                    panic!("{what}: the second sync of handle {k} failed with no fault armed: {e}")
                });
            }
            self.handles[k].unreported = false;
        }
        let b = self.backing_bytes();
        self.image.check_durable(&b, &what);
        self.check_len(&what);
        let size = self.image.len() as usize;
        for pass in ["cached", "after eviction"] {
            let mut buf = vec![0xE7u8; size];
            let n = self.handles[0]
                .file
                .read_at(&mut buf, 0)
                .unwrap_or_else(|e| panic!("{what}: reading the whole file {pass}: {e}"));
            assert_eq!(n, size, "{what}: whole-file read {pass} was short");
            self.image
                .observe(0, &buf, &format!("{what}: whole-file read {pass}"));
            self.cache.shrink(u64::MAX);
        }
        let s = self.cache.stats();
        assert_eq!(
            s.dirty_bytes, 0,
            "{what}: dirty bytes left after sync: {s:?}"
        );
    }
}

/// Decodes `data` into a cache, a file over a fault-injecting memory
/// backing and a sequence of operations, and checks every result against
/// the model (see the module docs). Panics on the first violation, naming
/// the step and the operation.
///
/// ```
/// foliocache_fuzz::file_ops(b"any bytes make a valid program");
/// ```
pub fn file_ops(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(setup) = Setup::arbitrary(&mut u) else {
        return;
    };
    let mut ops = Vec::new();
    while !u.is_empty() && ops.len() < MAX_OPS {
        match RawOp::arbitrary(&mut u) {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
    }
    if std::env::var_os("FUZZ_DEBUG").is_some() {
        eprintln!("{setup:?}\n{ops:#?}");
    }
    let mut run = Run::new(&setup, data);
    for (step, op) in ops.iter().enumerate() {
        run.step = step;
        run.apply(op);
    }
    run.finish();
}
