//! The asynchronous engine (`foliocache_backing::aio`): every test of the suite runs
//! on both engines (`mod uring`, `mod threads` at the bottom), against real
//! `O_DIRECT` files on CARGO_TARGET_TMPDIR, memory and fault injection.
//! io_uring missing is "skipped" here and a failure under CI=true.

use crate::common;

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::{kernel_cached_pages, random_bytes, TempDir, B};
use foliocache_backing::aio::{EngineKind, IoEngine, IoEngineConfig, ReadOp, MAX_QUEUE_DEPTH};
use foliocache_backing::{
    AlignedBuf, Backing, BackingInfo, DataPath, FaultyBacking, FileBacking, FileOptions, IoBuf,
    IoBufMut, MemBacking, Op, RawBuf, BLOCK,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use test_support::skip_or_fail;

/// How long a test waits for callbacks before it calls the engine stuck.
const PATIENCE: Duration = Duration::from_secs(30);

/// An engine of `kind`, or `None` (skipped) where io_uring is missing.
pub(crate) fn engine_with(
    kind: EngineKind,
    depth: u32,
    threads: usize,
    test: &str,
) -> Option<IoEngine> {
    let cfg = IoEngineConfig::new()
        .kind(kind)
        .queue_depth(depth)
        .threads(threads);
    match IoEngine::new(cfg) {
        Ok(e) => {
            assert_eq!(e.kind(), kind);
            Some(e)
        }
        Err(e) if kind == EngineKind::Uring => {
            skip_or_fail(test, format!("io_uring is not available: {e}"));
            None
        }
        Err(e) => panic!("{test}: cannot start the {kind} engine: {e}"),
    }
}

/// A result as the tests compare it: the count, or the error's kind and
/// errno.
type Outcome = Result<usize, (io::ErrorKind, Option<i32>)>;

/// Collects the callbacks of numbered ops and checks that each runs once.
struct Results {
    slots: Mutex<Vec<(usize, Option<Outcome>)>>,
    cv: Condvar,
}

impl Results {
    fn new(n: usize) -> Arc<Results> {
        Arc::new(Results {
            slots: Mutex::new(vec![(0, None); n]),
            cv: Condvar::new(),
        })
    }

    /// The callback of op `i`.
    fn callback(self: &Arc<Self>, i: usize) -> impl FnOnce(io::Result<usize>) + Send + 'static {
        let me = self.clone();
        move |res| {
            let mut slots = me.slots.lock().unwrap();
            slots[i].0 += 1;
            slots[i].1 = Some(res.map_err(|e| (e.kind(), e.raw_os_error())));
            me.cv.notify_all();
        }
    }

    /// Whether every op completed (without waiting).
    fn all_done(&self) -> bool {
        self.slots.lock().unwrap().iter().all(|s| s.0 > 0)
    }

    /// Waits for every op, then checks each callback ran exactly once.
    fn wait(&self) -> Vec<Outcome> {
        let deadline = Instant::now() + PATIENCE;
        let mut slots = self.slots.lock().unwrap();
        while slots.iter().any(|s| s.0 == 0) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "ops never completed: {:?}",
                slots
                    .iter()
                    .enumerate()
                    .filter(|s| s.1 .0 == 0)
                    .map(|s| s.0)
                    .collect::<Vec<_>>()
            );
            slots = self.cv.wait_timeout(slots, left).unwrap().0;
        }
        for (i, s) in slots.iter().enumerate() {
            assert_eq!(s.0, 1, "op {i}: callback ran {} times", s.0);
        }
        slots.iter().map(|s| s.1.unwrap()).collect()
    }
}

/// Aligned memory that ops' buffers are carved from; it must outlive the
/// ops (every test waits for the callbacks before dropping it).
struct Arena {
    mem: AlignedBuf,
    next: usize,
}

impl Arena {
    /// `len` bytes filled with `sentinel`, to see what a read left.
    fn new(len: usize, sentinel: u8) -> Arena {
        let mut mem = AlignedBuf::zeroed(len).unwrap();
        mem.fill(sentinel);
        Arena { mem, next: 0 }
    }

    /// The next `len` bytes as a buffer, and where they start.
    fn take(&mut self, len: usize) -> (RawBuf, usize) {
        let at = self.next;
        assert!(at + len <= self.mem.len(), "arena too small");
        self.next += len;
        let ptr = self.mem[at..].as_mut_ptr();
        // SAFETY: `[at, at + len)` is inside `mem`, handed out once, and
        // `mem` is neither read nor freed until every op using it has
        // completed (the tests wait for the callbacks first).
        let buf = unsafe { RawBuf::new(ptr, len) }.unwrap();
        (buf, at)
    }

    fn bytes(&self, at: usize, len: usize) -> &[u8] {
        &self.mem[at..at + len]
    }
}

/// What most tests start from: an engine, and a file of random bytes in a
/// temporary directory (removed when `dir` drops).
pub(crate) struct Fx {
    pub(crate) engine: IoEngine,
    pub(crate) file: Arc<FileBacking>,
    pub(crate) data: Vec<u8>,
    pub(crate) dir: TempDir,
}

/// An engine of `kind` (see [`engine_with`]) and a `len`-byte file.
pub(crate) fn fixture(
    kind: EngineKind,
    depth: u32,
    threads: usize,
    test: &str,
    len: usize,
    seed: u64,
) -> Option<Fx> {
    let engine = engine_with(kind, depth, threads, test)?;
    let dir = TempDir::new(&format!("aio-{}", test.replace('_', "-")));
    let (file, data) = data_file(&dir, "f", len, seed);
    Some(Fx {
        engine,
        file,
        data,
        dir,
    })
}

/// `n` reads of `blocks` blocks each, one after the other from the start
/// of `file`, into buffers taken from `arena`; read `i` reports to
/// `results.callback(i)`.
fn consecutive_reads(
    file: &Arc<FileBacking>,
    arena: &mut Arena,
    results: &Arc<Results>,
    n: usize,
    blocks: usize,
) -> Vec<ReadOp> {
    (0..n)
        .map(|i| {
            let (buf, _) = arena.take(blocks * BLOCK);
            ReadOp::new(
                file.clone(),
                (i * blocks * BLOCK) as u64,
                vec![buf],
                results.callback(i),
            )
        })
        .collect()
}

/// What a read of `len` bytes at `off` of a file holding `data` returns:
/// the count and the bytes (zeros past EOF).
fn expected(data: &[u8], off: usize, len: usize) -> (usize, Vec<u8>) {
    let n = data.len().saturating_sub(off).min(len);
    let mut v = vec![0u8; len];
    if n > 0 {
        v[..n].copy_from_slice(&data[off..off + n]);
    }
    (n, v)
}

/// A file on CARGO_TARGET_TMPDIR (O_DIRECT) holding `len` random bytes.
pub(crate) fn data_file(
    dir: &TempDir,
    name: &str,
    len: usize,
    seed: u64,
) -> (Arc<FileBacking>, Vec<u8>) {
    data_file_with(dir, name, len, seed, false)
}

pub(crate) fn data_file_with(
    dir: &TempDir,
    name: &str,
    len: usize,
    seed: u64,
    buffered: bool,
) -> (Arc<FileBacking>, Vec<u8>) {
    let data = random_bytes(seed, len);
    let opts = FileOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .force_buffered(buffered);
    let f = FileBacking::open(dir.join(name), &opts).unwrap();
    let mut buf = AlignedBuf::zeroed(len.div_ceil(BLOCK) * BLOCK).unwrap();
    buf[..len].copy_from_slice(&data);
    f.write_blocks(&[buf.io_buf()], 0).unwrap();
    f.set_len(len as u64).unwrap();
    if !buffered {
        assert!(f.is_direct(), "CARGO_TARGET_TMPDIR should take O_DIRECT");
    }
    (Arc::new(f), data)
}

/// One op of a random batch: where it reads and where its buffers are.
struct Planned {
    off: usize,
    bufs: Vec<(usize, usize)>,
}

/// Submits `nops` random ops (1-4 buffers of 1-8 blocks, offsets up to a
/// little past EOF) over `backing` in one batch and checks every byte.
fn random_batch(
    engine: &IoEngine,
    backing: &Arc<dyn Backing>,
    data: &[u8],
    rng: &mut StdRng,
    nops: usize,
) {
    let blocks = data.len().div_ceil(BLOCK) + 2;
    let mut arena = Arena::new(nops * 32 * BLOCK, 0xa5);
    let results = Results::new(nops);
    let mut plan = Vec::new();
    let mut ops = Vec::new();
    for i in 0..nops {
        let off = rng.gen_range(0..blocks) * BLOCK;
        let mut bufs = Vec::new();
        let mut raws = Vec::new();
        for _ in 0..rng.gen_range(1..=4) {
            let len = rng.gen_range(1..=8) * BLOCK;
            let (raw, at) = arena.take(len);
            raws.push(raw);
            bufs.push((at, len));
        }
        ops.push(ReadOp::new(
            backing.clone(),
            off as u64,
            raws,
            results.callback(i),
        ));
        plan.push(Planned { off, bufs });
    }
    engine.submit(ops);
    let got = results.wait();
    for (i, (p, res)) in plan.iter().zip(got).enumerate() {
        let total: usize = p.bufs.iter().map(|b| b.1).sum();
        let (n, want) = expected(data, p.off, total);
        assert_eq!(res, Ok(n), "op {i} at {}: count", p.off);
        let mut pos = 0;
        for &(at, len) in &p.bufs {
            assert!(
                arena.bytes(at, len) == &want[pos..pos + len],
                "op {i} at {}: bytes of a buffer differ",
                p.off
            );
            pos += len;
        }
    }
}

fn random_batches_of_a_file_read_the_right_bytes(kind: EngineKind) {
    let Some(fx) = fixture(kind, 16, 2, "random_batches_of_a_file", (1 << 20) + 1234, 1) else {
        return;
    };
    let (engine, file, data) = (fx.engine, fx.file, fx.data);
    let backing: Arc<dyn Backing> = file;
    let mut rng = StdRng::seed_from_u64(7);
    for round in 0..20 {
        // Up to and beyond the queue depth of 16.
        let nops = [1, 5, 16, 40][round % 4];
        random_batch(&engine, &backing, &data, &mut rng, nops);
    }
    let s = engine.stats();
    assert_eq!(s.completed, s.ops);
    if kind == EngineKind::Uring {
        assert_eq!(
            s.uring_ops, s.ops,
            "a file with an fd goes through the ring"
        );
        assert_eq!(s.pool_ops, 0);
    }
}

fn random_batches_of_memory_read_the_right_bytes(kind: EngineKind) {
    let Some(engine) = engine_with(kind, 16, 2, "random_batches_of_memory") else {
        return;
    };
    let data = random_bytes(2, 300 * BLOCK + 77);
    let backing: Arc<dyn Backing> = Arc::new(MemBacking::with_data(data.clone()));
    let mut rng = StdRng::seed_from_u64(8);
    for round in 0..8 {
        random_batch(&engine, &backing, &data, &mut rng, [3, 30][round % 2]);
    }
    let s = engine.stats();
    assert_eq!((s.pool_ops, s.uring_ops), (s.ops, 0), "memory has no fd");
}

fn eof_inside_a_block_is_short_and_zero_filled(kind: EngineKind) {
    let Some(fx) = fixture(kind, 8, 2, "eof_short", 3 * BLOCK + 100, 3) else {
        return;
    };
    let (engine, file, data) = (fx.engine, fx.file, fx.data);
    let mut arena = Arena::new(8 * BLOCK, 0xee);
    let (a, at_a) = arena.take(2 * BLOCK);
    let (b, at_b) = arena.take(4 * BLOCK);
    let results = Results::new(1);
    engine.submit(vec![ReadOp::new(
        file,
        BLOCK as u64,
        vec![a, b],
        results.callback(0),
    )]);
    assert_eq!(results.wait(), vec![Ok(2 * BLOCK + 100)]);
    assert_eq!(arena.bytes(at_a, 2 * BLOCK), &data[BLOCK..3 * BLOCK]);
    assert_eq!(arena.bytes(at_b, 100), &data[3 * BLOCK..]);
    assert!(
        arena
            .bytes(at_b + 100, 4 * BLOCK - 100)
            .iter()
            .all(|&x| x == 0),
        "bytes past EOF are zeroed"
    );
}

fn eof_at_a_block_boundary_is_short_and_zero_filled(kind: EngineKind) {
    let Some(fx) = fixture(kind, 8, 2, "eof_boundary", 2 * BLOCK, 4) else {
        return;
    };
    let (engine, file, data) = (fx.engine, fx.file, fx.data);
    let mut arena = Arena::new(4 * BLOCK, 0xee);
    let (a, at) = arena.take(4 * BLOCK);
    let results = Results::new(1);
    engine.submit(vec![ReadOp::new(file, 0, vec![a], results.callback(0))]);
    assert_eq!(results.wait(), vec![Ok(2 * BLOCK)]);
    assert_eq!(arena.bytes(at, 2 * BLOCK), &data[..]);
    assert!(arena
        .bytes(at + 2 * BLOCK, 2 * BLOCK)
        .iter()
        .all(|&x| x == 0));
}

fn reads_past_eof_return_0_with_zeroed_buffers(kind: EngineKind) {
    let Some(fx) = fixture(kind, 8, 2, "past_eof", 2 * BLOCK, 5) else {
        return;
    };
    let (engine, file) = (fx.engine, fx.file);
    let mem: Arc<dyn Backing> = Arc::new(MemBacking::with_data(vec![1; 2 * BLOCK]));
    let mut arena = Arena::new(8 * BLOCK, 0xee);
    let results = Results::new(3);
    let (a, _) = arena.take(2 * BLOCK);
    let (b, _) = arena.take(2 * BLOCK);
    let (c, _) = arena.take(2 * BLOCK);
    engine.submit(vec![
        ReadOp::new(file.clone(), 2 * B, vec![a], results.callback(0)),
        ReadOp::new(file, 100 * B, vec![b], results.callback(1)),
        ReadOp::new(mem, 5 * B, vec![c], results.callback(2)),
    ]);
    assert_eq!(results.wait(), vec![Ok(0), Ok(0), Ok(0)]);
    assert!(arena.bytes(0, 6 * BLOCK).iter().all(|&x| x == 0));
}

fn empty_and_invalid_ops_complete_with_their_result(kind: EngineKind) {
    let Some(fx) = fixture(kind, 8, 2, "empty_invalid", 4 * BLOCK, 6) else {
        return;
    };
    let (engine, file) = (fx.engine, fx.file);
    let mut arena = Arena::new(4 * BLOCK, 0);
    let (a, _) = arena.take(BLOCK);
    let (b, _) = arena.take(BLOCK);
    let results = Results::new(3);
    engine.submit(vec![
        ReadOp::new(file.clone(), 0, vec![], results.callback(0)),
        ReadOp::new(file.clone(), 100, vec![a], results.callback(1)),
        ReadOp::new(file, u64::MAX - B + 1, vec![b], results.callback(2)),
    ]);
    let got = results.wait();
    assert_eq!(got[0], Ok(0));
    assert_eq!(got[1].unwrap_err().0, io::ErrorKind::InvalidInput);
    assert_eq!(got[2].unwrap_err().0, io::ErrorKind::InvalidInput);
}

fn injected_errors_reach_their_op_only(kind: EngineKind) {
    let Some(fx) = fixture(kind, 8, 2, "injected_errors", 64 * BLOCK, 7) else {
        return;
    };
    let (engine, file, data) = (fx.engine, fx.file, fx.data);
    let faulty = Arc::new(FaultyBacking::new(file));
    faulty.fail_reads_in(10 * B, B, libc::EIO);
    let backing: Arc<dyn Backing> = faulty.clone();
    let mut arena = Arena::new(32 * BLOCK, 0xee);
    let results = Results::new(8);
    let mut ops = Vec::new();
    for i in 0..8 {
        let (buf, _) = arena.take(4 * BLOCK);
        ops.push(ReadOp::new(
            backing.clone(),
            (i * 4 * BLOCK) as u64,
            vec![buf],
            results.callback(i),
        ));
    }
    engine.submit(ops);
    let got = results.wait();
    for (i, res) in got.iter().enumerate() {
        if i == 2 {
            assert_eq!(res.unwrap_err().1, Some(libc::EIO), "op {i}");
        } else {
            assert_eq!(res, &Ok(4 * BLOCK), "op {i}");
            assert_eq!(
                arena.bytes(i * 4 * BLOCK, 4 * BLOCK),
                &data[i * 4 * BLOCK..(i + 1) * 4 * BLOCK]
            );
        }
    }
    // The countdown rule: the 3rd read from now fails, once.
    faulty.clear();
    faulty.fail_nth(Op::Read, 3, libc::ENOSPC);
    let results = Results::new(5);
    let mut arena = Arena::new(5 * BLOCK, 0);
    let ops = (0..5)
        .map(|i| {
            let (buf, _) = arena.take(BLOCK);
            ReadOp::new(backing.clone(), 0, vec![buf], results.callback(i))
        })
        .collect();
    // One pool thread: the ops run in order.
    let engine1 = engine_with(kind, 8, 1, "injected_errors").unwrap();
    engine1.submit(ops);
    let got = results.wait();
    let failed: Vec<usize> = (0..5).filter(|&i| got[i].is_err()).collect();
    assert_eq!(failed, vec![2]);
    assert_eq!(got[2].unwrap_err().1, Some(libc::ENOSPC));
    drop(engine);
}

/// A backing whose fd is a directory: reads of it fail in the kernel
/// (EISDIR), through io_uring as through `read_blocks`.
struct DirBacking(Arc<File>);

impl Backing for DirBacking {
    fn len(&self) -> io::Result<u64> {
        Ok(1 << 20)
    }
    fn read_blocks(&self, _: &mut [IoBufMut<'_>], _: u64) -> io::Result<usize> {
        Err(io::Error::from_raw_os_error(libc::EISDIR))
    }
    fn write_blocks(&self, _: &[IoBuf<'_>], _: u64) -> io::Result<usize> {
        Err(io::Error::from_raw_os_error(libc::EISDIR))
    }
    fn set_len(&self, _: u64) -> io::Result<()> {
        Ok(())
    }
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }
    fn punch_hole(&self, _: u64, _: u64) -> io::Result<()> {
        Ok(())
    }
    fn info(&self) -> BackingInfo {
        BackingInfo::new("dir", DataPath::Direct, "test", "a directory")
    }
    fn raw_file(&self) -> Option<Arc<File>> {
        Some(self.0.clone())
    }
}

fn kernel_errors_reach_their_op_only(kind: EngineKind) {
    let Some(fx) = fixture(kind, 8, 2, "kernel_errors", 8 * BLOCK, 8) else {
        return;
    };
    let (engine, file, data, dir) = (fx.engine, fx.file, fx.data, fx.dir);
    let bad: Arc<dyn Backing> = Arc::new(DirBacking(Arc::new(File::open(dir.path()).unwrap())));
    let mut arena = Arena::new(8 * BLOCK, 0xee);
    let results = Results::new(4);
    let mut ops = Vec::new();
    for i in 0..4 {
        let (buf, _) = arena.take(2 * BLOCK);
        let b: Arc<dyn Backing> = if i == 1 { bad.clone() } else { file.clone() };
        ops.push(ReadOp::new(
            b,
            (i * 2 * BLOCK) as u64,
            vec![buf],
            results.callback(i),
        ));
    }
    engine.submit(ops);
    let got = results.wait();
    assert_eq!(got[1].unwrap_err().1, Some(libc::EISDIR));
    for i in [0, 2, 3] {
        assert_eq!(got[i], Ok(2 * BLOCK));
        assert_eq!(
            arena.bytes(i * 2 * BLOCK, 2 * BLOCK),
            &data[i * 2 * BLOCK..(i + 1) * 2 * BLOCK]
        );
    }
    assert_eq!(engine.stats().errors, 1);
}

fn short_reads_injected_by_fault_rules_reach_the_op(kind: EngineKind) {
    let Some(engine) = engine_with(kind, 8, 1, "short_injected") else {
        return;
    };
    let data = random_bytes(9, 8 * BLOCK);
    let faulty = Arc::new(FaultyBacking::new(MemBacking::with_data(data.clone())));
    faulty.short_read_nth(1, 100);
    let mut arena = Arena::new(8 * BLOCK, 0);
    let (buf, _) = arena.take(8 * BLOCK);
    let results = Results::new(1);
    engine.submit(vec![ReadOp::new(faulty, 0, vec![buf], results.callback(0))]);
    assert_eq!(
        results.wait(),
        vec![Ok(100)],
        "the fault rule applies to async reads"
    );
    assert_eq!(arena.bytes(0, 100), &data[..100]);
}

fn more_buffers_than_iov_max_read_in_parts(kind: EngineKind) {
    let Some(engine) = engine_with(kind, 8, 2, "iov_max") else {
        return;
    };
    let dir = TempDir::new("aio-iov");
    let nbufs = 1100;
    let (file, data) = data_file(&dir, "f", nbufs * BLOCK, 10);
    let mut arena = Arena::new(nbufs * BLOCK, 0xee);
    let bufs = (0..nbufs).map(|_| arena.take(BLOCK).0).collect();
    let results = Results::new(1);
    engine.submit(vec![ReadOp::new(file, 0, bufs, results.callback(0))]);
    assert_eq!(results.wait(), vec![Ok(nbufs * BLOCK)]);
    assert!(arena.bytes(0, nbufs * BLOCK) == &data[..]);
}

fn batches_larger_than_the_queue_depth_all_complete(kind: EngineKind) {
    let Some(fx) = fixture(kind, 4, 2, "beyond_depth", 100 * BLOCK, 11) else {
        return;
    };
    let (engine, file, data) = (fx.engine, fx.file, fx.data);
    let mut arena = Arena::new(100 * BLOCK, 0xee);
    let results = Results::new(100);
    let ops = consecutive_reads(&file, &mut arena, &results, 100, 1);
    engine.submit(ops);
    assert!(results.wait().iter().all(|r| *r == Ok(BLOCK)));
    assert!(arena.bytes(0, 100 * BLOCK) == &data[..]);
    if kind == EngineKind::Uring {
        let s = engine.stats();
        assert!(s.enters >= 25, "100 ops through 4 slots: {s:?}");
    }
}

fn dropping_the_engine_completes_ops_in_flight(kind: EngineKind) {
    let Some(fx) = fixture(kind, 32, 2, "drop_in_flight", 64 * 32 * BLOCK, 12) else {
        return;
    };
    let (engine, file, data) = (fx.engine, fx.file, fx.data);
    let slow = Arc::new(FaultyBacking::new(MemBacking::with_data(vec![
        3;
        8 * BLOCK
    ])));
    slow.set_read_latency(Duration::from_millis(5));
    let n = 64;
    let mut arena = Arena::new((n * 32 + 8 * 4) * BLOCK, 0xee);
    let results = Results::new(n + 4);
    let mut ops: Vec<ReadOp> = consecutive_reads(&file, &mut arena, &results, n, 32);
    for i in 0..4 {
        let (buf, _) = arena.take(8 * BLOCK);
        ops.push(ReadOp::new(
            slow.clone(),
            0,
            vec![buf],
            results.callback(n + i),
        ));
    }
    engine.submit(ops);
    drop(engine);
    assert!(
        results.all_done(),
        "drop returned before every callback ran"
    );
    let got = results.wait();
    assert!(got[..n].iter().all(|r| *r == Ok(32 * BLOCK)));
    assert!(got[n..].iter().all(|r| *r == Ok(8 * BLOCK)));
    assert!(arena.bytes(0, n * 32 * BLOCK) == &data[..]);
}

fn concurrent_submitters_all_get_their_bytes(kind: EngineKind) {
    let Some(fx) = fixture(kind, 8, 2, "concurrent", (2 << 20) + 999, 13) else {
        return;
    };
    let (engine, file, data) = (fx.engine, fx.file, fx.data);
    let mem_data = random_bytes(14, 100 * BLOCK);
    let mem: Arc<dyn Backing> = Arc::new(MemBacking::with_data(mem_data.clone()));
    let backing: Arc<dyn Backing> = file;
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (engine, backing, data) = (&engine, &backing, &data);
            let (mem, mem_data) = (&mem, &mem_data);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(100 + t);
                for round in 0..15 {
                    if round % 5 == 4 {
                        random_batch(engine, mem, mem_data, &mut rng, 6);
                    } else {
                        random_batch(engine, backing, data, &mut rng, 12);
                    }
                }
            });
        }
    });
    let s = engine.stats();
    assert_eq!(s.completed, s.ops);
    assert_eq!(s.callback_panics, 0);
}

fn a_panicking_callback_does_not_stop_the_engine(kind: EngineKind) {
    let Some(fx) = fixture(kind, 8, 1, "panicking_callback", 4 * BLOCK, 15) else {
        return;
    };
    let (engine, file) = (fx.engine, fx.file);
    let mut arena = Arena::new(4 * BLOCK, 0);
    let (a, _) = arena.take(BLOCK);
    let (b, _) = arena.take(BLOCK);
    let results = Results::new(1);
    engine.submit(vec![ReadOp::new(file.clone(), 0, vec![a], |_| {
        panic!("a callback that panics (on purpose)")
    })]);
    engine.submit(vec![ReadOp::new(file, B, vec![b], results.callback(0))]);
    assert_eq!(results.wait(), vec![Ok(BLOCK)]);
    let deadline = Instant::now() + PATIENCE;
    while engine.stats().callback_panics < 1 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(engine.stats().callback_panics, 1);
}

fn callbacks_may_submit_more_ops(kind: EngineKind) {
    // Depth 2: a callback on the completion thread that submits a batch of
    // 4 finds no room and must not wait for itself.
    let Some(fx) = fixture(kind, 2, 2, "callbacks_submit", 64 * BLOCK, 16) else {
        return;
    };
    let (engine, file, data) = (fx.engine, fx.file, fx.data);
    let backing: Arc<dyn Backing> = file;
    let rounds = 10;
    let mut arena = Arena::new(rounds * 4 * BLOCK, 0xee);
    let bufs: Vec<RawBuf> = (0..rounds * 4).map(|_| arena.take(BLOCK).0).collect();
    let results = Results::new(rounds * 4);
    let bufs = Arc::new(Mutex::new(bufs.into_iter().enumerate().collect::<Vec<_>>()));

    fn batch(
        engine: &IoEngine,
        backing: &Arc<dyn Backing>,
        bufs: &Arc<Mutex<Vec<(usize, RawBuf)>>>,
        results: &Arc<Results>,
    ) {
        let take: Vec<(usize, RawBuf)> = {
            let mut b = bufs.lock().unwrap();
            let k = b.len().min(4);
            b.drain(..k).collect()
        };
        let mut ops = Vec::new();
        for (j, (i, buf)) in take.into_iter().enumerate() {
            let done = results.callback(i);
            // The first op of each batch submits the next batch.
            let next = (j == 0).then(|| {
                (
                    engine.clone(),
                    backing.clone(),
                    bufs.clone(),
                    results.clone(),
                )
            });
            ops.push(ReadOp::new(
                backing.clone(),
                ((i % 64) * BLOCK) as u64,
                vec![buf],
                move |res| {
                    if let Some((e, b, bufs, r)) = next {
                        batch(&e, &b, &bufs, &r);
                    }
                    done(res);
                },
            ));
        }
        if !ops.is_empty() {
            engine.submit(ops);
        }
    }
    batch(&engine, &backing, &bufs, &results);
    let got = results.wait();
    assert!(got.iter().all(|r| *r == Ok(BLOCK)));
    for i in 0..rounds * 4 {
        assert_eq!(
            arena.bytes(i * BLOCK, BLOCK),
            &data[(i % 64) * BLOCK..][..BLOCK]
        );
    }
}

fn the_last_engine_may_be_dropped_in_a_callback(kind: EngineKind) {
    let Some(fx) = fixture(kind, 8, 2, "drop_in_callback", 4 * BLOCK, 17) else {
        return;
    };
    let (engine, file) = (fx.engine, fx.file);
    let mut arena = Arena::new(2 * BLOCK, 0);
    let (a, _) = arena.take(BLOCK);
    let (b, _) = arena.take(BLOCK);
    let results = Results::new(2);
    let keep = engine.clone();
    let r0 = results.callback(0);
    let r1 = results.callback(1);
    engine.submit(vec![
        ReadOp::new(file.clone(), 0, vec![a], move |res| {
            r0(res);
        }),
        ReadOp::new(file, B, vec![b], move |res| {
            drop(keep); // the last handle, once `engine` is gone
            r1(res);
        }),
    ]);
    drop(engine);
    assert_eq!(results.wait(), vec![Ok(BLOCK), Ok(BLOCK)]);
}

fn buffered_fallback_files_are_dropped_behind(kind: EngineKind) {
    let Some(engine) = engine_with(kind, 8, 2, "buffered_dontneed") else {
        return;
    };
    let dir = TempDir::new("aio-buffered");
    let (file, data) = data_file_with(&dir, "f", 64 * BLOCK, 18, true);
    assert!(!file.is_direct() && file.raw_file().is_some());
    file.sync_all().unwrap(); // written back and dropped
    let mut arena = Arena::new(64 * BLOCK, 0xee);
    let results = Results::new(4);
    let ops = consecutive_reads(&file, &mut arena, &results, 4, 16);
    engine.submit(ops);
    assert!(results.wait().iter().all(|r| *r == Ok(16 * BLOCK)));
    assert!(arena.bytes(0, 64 * BLOCK) == &data[..]);
    assert_eq!(
        kernel_cached_pages(file.path()),
        0,
        "the kernel's cache keeps nothing of what the engine read"
    );

    // A buffered read leaves the bytes past EOF alone; the engine zeroes them.
    let (short, data) = data_file_with(&dir, "short", 2 * BLOCK + 100, 19, true);
    let mut arena = Arena::new(4 * BLOCK, 0xee);
    let (a, _) = arena.take(BLOCK);
    let (b, _) = arena.take(3 * BLOCK);
    let results = Results::new(1);
    engine.submit(vec![ReadOp::new(short, 0, vec![a, b], results.callback(0))]);
    assert_eq!(results.wait(), vec![Ok(2 * BLOCK + 100)]);
    assert_eq!(arena.bytes(0, 2 * BLOCK + 100), &data[..]);
    assert!(arena
        .bytes(2 * BLOCK + 100, 2 * BLOCK - 100)
        .iter()
        .all(|&x| x == 0));
}

/// Generates one `#[test]` per suite function in a module for `kind`
/// (`aio_write.rs` uses it too).
macro_rules! suite {
    ($module:ident, $kind:expr; $($name:ident),* $(,)?) => {
        mod $module {
            use super::*;
            $(
                #[test]
                fn $name() {
                    super::$name($kind);
                }
            )*
        }
    };
}
pub(crate) use suite;

/// Every test of this suite, per engine.
macro_rules! read_suite {
    ($module:ident, $kind:expr) => {
        suite!($module, $kind;
            random_batches_of_a_file_read_the_right_bytes,
            random_batches_of_memory_read_the_right_bytes,
            eof_inside_a_block_is_short_and_zero_filled,
            eof_at_a_block_boundary_is_short_and_zero_filled,
            reads_past_eof_return_0_with_zeroed_buffers,
            empty_and_invalid_ops_complete_with_their_result,
            injected_errors_reach_their_op_only,
            kernel_errors_reach_their_op_only,
            short_reads_injected_by_fault_rules_reach_the_op,
            more_buffers_than_iov_max_read_in_parts,
            batches_larger_than_the_queue_depth_all_complete,
            dropping_the_engine_completes_ops_in_flight,
            concurrent_submitters_all_get_their_bytes,
            a_panicking_callback_does_not_stop_the_engine,
            callbacks_may_submit_more_ops,
            the_last_engine_may_be_dropped_in_a_callback,
            buffered_fallback_files_are_dropped_behind,
        );
    };
}

read_suite!(uring, EngineKind::Uring);
read_suite!(threads, EngineKind::Threads);

#[test]
fn auto_picks_io_uring_here() {
    let engine = IoEngine::new(IoEngineConfig::default()).unwrap();
    if engine.kind() != EngineKind::Uring {
        skip_or_fail("auto_picks_io_uring_here", "Auto fell back to threads");
        return;
    }
    assert_eq!(engine.name(), "io_uring (depth 256)");
}

#[test]
fn threads_engine_says_so() {
    let engine = IoEngine::new(IoEngineConfig::new().kind(EngineKind::Threads)).unwrap();
    assert_eq!(engine.kind(), EngineKind::Threads);
    assert_eq!(engine.name(), "threads (2)");
}

#[test]
fn bad_configurations_are_refused_with_a_reason() {
    for cfg in [
        IoEngineConfig::new().queue_depth(0),
        IoEngineConfig::new().queue_depth(MAX_QUEUE_DEPTH + 1),
        IoEngineConfig::new().threads(0),
    ] {
        let err = IoEngine::new(cfg.clone()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{cfg:?}");
        assert!(err.to_string().contains("default"), "{err}");
    }
}

#[test]
fn one_batch_is_one_io_uring_enter() {
    let Some(engine) = engine_with(EngineKind::Uring, 256, 2, "one_enter") else {
        return;
    };
    let dir = TempDir::new("aio-enter");
    let (file, _) = data_file(&dir, "f", 32 * 32 * BLOCK, 19);
    let mut arena = Arena::new(32 * 32 * BLOCK, 0);
    let results = Results::new(32);
    let ops = consecutive_reads(&file, &mut arena, &results, 32, 32);
    engine.submit(ops);
    results.wait();
    let s = engine.stats();
    assert_eq!(s.batches, 1);
    assert_eq!(s.enters, 1 + s.resubmits, "{s:?}");
}

#[test]
fn ops_counted_once_each() {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let engine = IoEngine::new(IoEngineConfig::default()).unwrap();
    let mem: Arc<dyn Backing> = Arc::new(MemBacking::with_data(vec![1; BLOCK]));
    let mut arena = Arena::new(10 * BLOCK, 0);
    let ops = (0..10)
        .map(|_| {
            ReadOp::new(mem.clone(), 0, vec![arena.take(BLOCK).0], |_| {
                CALLS.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    engine.submit(ops);
    drop(engine);
    assert_eq!(CALLS.load(Ordering::SeqCst), 10);
}
