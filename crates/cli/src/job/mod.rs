//! The measured run: `numjobs` threads, each looping over reads or writes
//! of `bs` bytes on its engine, timed per operation.
//!
//! ```text
//!   coordinator                 thread 0..numjobs
//!   spawn ───────────────────>  buffer (aligned + --buf-offset, touched), offsets
//!   barrier.wait() <────────>   barrier.wait()
//!   getrusage, progress bar     loop { off = next(); io(buf, off); t = clock();
//!     (polls each thread's             hist[t - prev]; prev = t;
//!      published byte count)           every 100 ms: publish bytes, stop?, timeline }
//!   join, getrusage             return bytes, ops, histogram, timeline, start/end
//! ```
//!
//! Timing: one clock read per operation ([`crate::clock`]: the TSC, or
//! `Instant::now()`; the report states what a read costs, and
//! `docs/bench.md` what it costs here). An operation's latency is the
//! time between the end of the previous operation and the end of this one, so it includes the loop's
//! own few nanoseconds (the next offset, the histogram increment) and
//! nothing else; every engine runs the very same loop, monomorphised for
//! its IO call, with one buffer per thread and no allocation.
//! Bandwidth is bytes over the wall time from the first thread's start to
//! the last thread's end, and for a write job on files the final sync
//! after it (`fsync`, `msync`, `File::sync_all`: written data counts once
//! it is durable). CPU time is `getrusage(RUSAGE_SELF)` around the
//! run (the threads of one engine run together, engines one after another).

use std::collections::VecDeque;
use std::hint::black_box;
use std::io;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::clock::{Clock, ClockKind, Mono, Tsc};
use crate::data::{self, Generator, FILE_SEED};
use crate::engine::{
    AnonIo, BlockIo, DontcacheIo, FolioIo, MmapIo, PreadIo, Prepared, SharedMapIo,
};
use crate::hist::Histogram;
use crate::spec::{Dist, JobSpec};
use crate::sys::ring::DirectRing;
use crate::sys::{self, AlignedBuf};
use crate::units::fmt_bw;
use crate::zipf::Zipf;

/// How often a thread publishes its progress and looks at the stop flag.
const TICK: Duration = Duration::from_millis(100);
/// A partial last second shorter than this is left out of the timeline
/// when there are full seconds (its bytes still count in the totals).
const MIN_TAIL: f64 = 0.1;

/// How one engine's run is done, beyond the job.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    /// Check every block read (or, for writes, write checkable content).
    pub verify: bool,
    /// Bytes past a page boundary where each thread's buffer starts.
    pub buf_offset: usize,
    /// `--consume`: every read's bytes are summed (`crate::consume`).
    pub consume: bool,
    /// The seed of the content a verifying write run writes.
    pub write_seed: u64,
    /// The clock that times operations (resolved: `Tsc` or `Instant`).
    pub clock: ClockKind,
}

/// A run's figures.
#[derive(Debug)]
pub struct Measured {
    /// Bytes read or written.
    pub bytes: u64,
    /// Operations done.
    pub ops: u64,
    /// Wall time, first thread's start to last thread's end, and for a
    /// write job on files the final sync after it ([`Measured::sync_s`]).
    pub seconds: f64,
    /// The final sync of a write job on files, timed from the last
    /// thread's end (in `seconds`).
    pub sync_s: Option<f64>,
    /// Latencies of every operation of every thread, in clock ticks.
    pub hist: Histogram,
    /// Nanoseconds per tick of the histogram's clock, measured over the
    /// run.
    pub ns_per_tick: f64,
    /// Bytes per second for each second of the run.
    pub timeline: Vec<f64>,
    /// Bytes per second for each full interval of the job's finer
    /// timeline ([`JobSpec::bins_per_second`] above 1; empty otherwise).
    pub fine_timeline: Vec<f64>,
    /// User CPU seconds of the process during the run.
    pub cpu_user: f64,
    /// System CPU seconds of the process during the run.
    pub cpu_sys: f64,
    /// For a verifying write run: which blocks of each file were written.
    pub written: Vec<Vec<bool>>,
    /// Operations done by each thread, in thread order.
    pub thread_ops: Vec<u64>,
}

/// A thread's published progress, alone on its cache lines.
#[repr(align(128))]
#[derive(Default)]
struct Slot(AtomicU64);

/// The offsets one thread visits: a block cursor that walks and wraps,
/// uniformly random blocks (splitmix64 mapped onto the blocks by a
/// multiply), or zipfian blocks ([`crate::zipf`], from the same
/// splitmix64 bits).
pub(crate) struct Offsets {
    mode: Mode,
    bs: u64,
    blocks: u64,
    next: u64,
}

/// How [`Offsets`] draws.
#[derive(Clone, Copy)]
enum Mode {
    Sequential,
    Uniform,
    Zipf(Zipf),
}

impl Offsets {
    /// Offsets of `bs`-byte blocks among `blocks`: from `start_block` on,
    /// or (`random`) uniformly random from `seed`.
    pub(crate) fn new(random: bool, bs: u64, blocks: u64, start_block: u64, seed: u64) -> Self {
        Offsets {
            mode: if random {
                Mode::Uniform
            } else {
                Mode::Sequential
            },
            bs,
            blocks,
            next: if random { seed } else { start_block % blocks },
        }
    }

    /// The offsets of job thread `j`: `job`'s pattern and distribution,
    /// with the thread's own seed ([`thread_seed`]) and, sharing a file,
    /// its own start.
    pub(crate) fn of_thread(job: &JobSpec, j: usize) -> Self {
        let blocks = job.nblocks();
        // Threads sharing a file start spread over it; each random stream
        // has its own seed.
        let start_block = if job.shared {
            j as u64 * blocks / job.numjobs.max(1) as u64
        } else {
            0
        };
        let mut o = Offsets::new(
            job.rw.is_random(),
            job.bs,
            blocks,
            start_block,
            thread_seed(j),
        );
        if let (true, Dist::Zipf(z)) = (job.rw.is_random(), job.dist) {
            o.mode = Mode::Zipf(z);
        }
        o
    }

    /// The next block's byte offset.
    #[inline(always)]
    pub(crate) fn next(&mut self) -> u64 {
        match self.mode {
            Mode::Uniform => {
                self.next = self.next.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let z = data::mix(self.next);
                (((z as u128 * self.blocks as u128) >> 64) as u64) * self.bs
            }
            Mode::Zipf(zipf) => {
                self.next = self.next.wrapping_add(0x9e37_79b9_7f4a_7c15);
                zipf.draw(data::mix(self.next)) * self.bs
            }
            Mode::Sequential => {
                let b = self.next;
                self.next = if b + 1 == self.blocks { 0 } else { b + 1 };
                b * self.bs
            }
        }
    }
}

/// The seed of job thread `j`'s random offsets (the same in every run, so
/// the offsets a run read can be replayed: [`crate::lru::replay`]).
pub(crate) fn thread_seed(j: usize) -> u64 {
    0x2545_f491_4f6c_dd1d ^ (j as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// What one thread's loop needs besides its IO.
struct Shared<'a> {
    barrier: &'a Barrier,
    stop: &'a AtomicBool,
    runtime: Option<Duration>,
    max_ops: u64,
    opts: RunOptions,
    ticks_per_sec: f64,
    /// The timeline's interval (a second, or a fraction of one).
    interval: Duration,
}

/// One thread's figures.
struct ThreadOut {
    bytes: u64,
    ops: u64,
    hist: Histogram,
    /// Clock ticks from `start` to `end`.
    ticks: u64,
    /// Bytes completed in each full timeline interval since `start`.
    timeline: Vec<u64>,
    start: Instant,
    end: Instant,
    written: Vec<bool>,
}

/// One job thread's engine: a borrow of the prepared engine's file or
/// mapping.
enum ThreadIo<'a> {
    Pread(PreadIo<'a>),
    Dontcache(DontcacheIo<'a>),
    /// The thread's own mapping (`&mut`): it may write it.
    Mmap(MmapIo<'a>),
    /// The thread's own anonymous mapping (`&mut`).
    Anon(AnonIo<'a>),
    /// One mapping read by all the threads (a shared job of several).
    SharedMap(SharedMapIo<'a>),
    Folio(FolioIo<'a>),
    /// `foliocache[qd=N]`: the file and `N`.
    Queued(&'a foliocache::File, usize),
    /// `direct[qd=N]`: the `O_DIRECT` file and `N`.
    Ring(&'a std::fs::File, usize),
}

/// The engines of a job's `n` threads: thread `j` uses file `j`, or file 0
/// for all in a `shared` job. A mapping goes to its thread by `&mut`, so
/// no other thread can read or write it while that thread writes; only
/// where several threads share one mapping is it lent to each read-only.
///
/// # Errors
/// Fewer files or mappings than threads need (a bug in `prepare`).
fn thread_ios(prepared: &mut Prepared, n: usize, shared: bool) -> Result<Vec<ThreadIo<'_>>> {
    /// `io` of `items[j]` for each thread `j`, or of `items[0]` for all.
    fn lend<'a, T>(
        items: &'a [T],
        n: usize,
        shared: bool,
        io: impl Fn(&'a T) -> ThreadIo<'a>,
    ) -> Vec<ThreadIo<'a>> {
        (0..n)
            .filter_map(|j| items.get(if shared { 0 } else { j }))
            .map(io)
            .collect()
    }
    let own = !shared || n == 1;
    let ios = match prepared {
        Prepared::Mmap(ms) => {
            if own {
                ms.iter_mut()
                    .take(n)
                    .map(|m| ThreadIo::Mmap(MmapIo(m)))
                    .collect()
            } else {
                lend(ms, n, true, |m| ThreadIo::SharedMap(SharedMapIo(m, true)))
            }
        }
        Prepared::Anon(ms) => {
            if own {
                ms.iter_mut()
                    .take(n)
                    .map(|m| ThreadIo::Anon(AnonIo(m)))
                    .collect()
            } else {
                lend(ms, n, true, |m| ThreadIo::SharedMap(SharedMapIo(m, false)))
            }
        }
        // Read only: every thread copies out of its file's memory.
        Prepared::Memcpy(ms, inplace) => {
            let inplace = *inplace;
            lend(ms, n, shared, |m| {
                ThreadIo::SharedMap(SharedMapIo(m, inplace))
            })
        }
        Prepared::Pread(fs) => lend(fs, n, shared, |f| ThreadIo::Pread(PreadIo(f))),
        Prepared::Dontcache(fs) => lend(fs, n, shared, |f| ThreadIo::Dontcache(DontcacheIo(f))),
        Prepared::Folio(fs, mode) => {
            let mode = *mode;
            lend(fs, n, shared, |f| ThreadIo::Folio(FolioIo(f, mode)))
        }
        Prepared::Queued(fs, depth) => {
            let depth = *depth;
            lend(fs, n, shared, |f| ThreadIo::Queued(f, depth))
        }
        Prepared::Ring(fs, depth) => {
            let depth = *depth;
            lend(fs, n, shared, |f| ThreadIo::Ring(f, depth))
        }
    };
    if ios.len() != n {
        bail!("{n} job threads but only {} files or mappings", ios.len());
    }
    Ok(ios)
}

/// Runs `job` on a prepared engine and measures it (`&mut`: each thread
/// that writes a mapping gets its own, see `thread_ios`).
///
/// # Errors
/// The first IO or verification error of any thread (the others stop at
/// their next tick).
pub fn run(
    prepared: &mut Prepared,
    job: &JobSpec,
    opts: RunOptions,
    label: &str,
) -> Result<Measured> {
    let n = job.numjobs;
    let barrier = Barrier::new(n + 1);
    let stop = AtomicBool::new(false);
    let slots: Vec<Slot> = (0..n).map(|_| Slot::default()).collect();
    let blocks = job.nblocks();
    let shared = Shared {
        barrier: &barrier,
        stop: &stop,
        runtime: job.runtime,
        max_ops: if job.runtime.is_some() {
            u64::MAX
        } else {
            blocks
        },
        opts,
        ticks_per_sec: opts.clock.ticks_per_sec(),
        interval: job.interval(),
    };
    let ios = thread_ios(prepared, n, job.shared)?;
    let (outs, cpu0) = thread::scope(|s| -> Result<_> {
        let mut handles = Vec::with_capacity(n);
        for ((j, slot), io) in slots.iter().enumerate().zip(ios) {
            let offs = Offsets::of_thread(job, j);
            let (sh, write, bs) = (&shared, job.rw.is_write(), job.bs);
            // One monomorphised loop per engine type.
            macro_rules! spawn {
                ($lp:expr) => {{
                    let lp = $lp;
                    s.spawn(move || thread_main(lp, write, bs, offs, sh, slot))
                }};
            }
            macro_rules! one {
                ($io:expr) => {
                    spawn!(OneAtATime { io: $io, buf: None })
                };
            }
            let h = match io {
                ThreadIo::Pread(io) => one!(io),
                ThreadIo::Dontcache(io) => one!(io),
                ThreadIo::Mmap(io) => one!(io),
                ThreadIo::Anon(io) => one!(io),
                ThreadIo::SharedMap(io) => one!(io),
                ThreadIo::Folio(io) => one!(io),
                ThreadIo::Queued(file, depth) => spawn!(Queued {
                    file,
                    depth,
                    buf: None
                }),
                ThreadIo::Ring(file, depth) => spawn!(Ringed {
                    file,
                    depth,
                    ring: None
                }),
            };
            handles.push(h);
        }
        barrier.wait();
        let cpu0 = sys::cpu_times();
        watch(&handles, &slots, job, label);
        let mut outs = Vec::with_capacity(n);
        for (j, h) in handles.into_iter().enumerate() {
            let out = h
                .join()
                .map_err(|_| anyhow!("job thread {j} panicked"))?
                .with_context(|| format!("{label}: job thread {j}"))?;
            outs.push(out);
        }
        Ok((outs, cpu0))
    })?;
    // A write job's figures include making its data durable.
    let sync = if job.rw.is_write() && !job.memory {
        let t = Instant::now();
        prepared
            .sync()
            .with_context(|| format!("{label}: the sync after the writes"))?;
        Some(t.elapsed())
    } else {
        None
    };
    let cpu1 = sys::cpu_times();
    Ok(merge(outs, job, cpu0, cpu1, sync))
}

/// Waits for the threads, drawing a progress bar on a terminal for a run
/// longer than a second.
fn watch<T>(
    handles: &[thread::ScopedJoinHandle<'_, T>],
    slots: &[Slot],
    job: &JobSpec,
    label: &str,
) {
    let t0 = Instant::now();
    let total_bytes = job.nblocks() * job.bs * job.numjobs as u64;
    let mut bar: Option<ProgressBar> = None;
    while !handles.iter().all(|h| h.is_finished()) {
        thread::sleep(Duration::from_millis(20));
        let elapsed = t0.elapsed();
        let long = job.runtime.map_or(elapsed >= Duration::from_secs(1), |r| {
            r >= Duration::from_secs(1)
        });
        if !long {
            continue;
        }
        let bytes: u64 = slots.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
        let b = bar.get_or_insert_with(|| {
            let (len, tmpl) = match job.runtime {
                Some(r) => (r.as_millis() as u64, "{prefix} [{bar:30}] {elapsed}/{msg}"),
                None => (total_bytes, "{prefix} [{bar:30}] {percent:>3}% {msg}"),
            };
            let style = ProgressStyle::with_template(tmpl)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
            let b = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr())
                .with_style(style);
            b.set_prefix(format!("{label:>12} {}", job.title()));
            b
        });
        let secs = elapsed.as_secs_f64();
        match job.runtime {
            Some(r) => {
                b.set_position(elapsed.as_millis() as u64);
                b.set_message(format!(
                    "{:.0}s {}",
                    r.as_secs_f64(),
                    fmt_bw(bytes as f64 / secs)
                ));
            }
            None => {
                b.set_position(bytes);
                b.set_message(fmt_bw(bytes as f64 / secs));
            }
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}

/// A job thread's loop over its engine: one synchronous operation at a
/// time on a [`BlockIo`] ([`OneAtATime`]), or a queue-depth engine's reads
/// ([`Queued`], [`Ringed`]). Each is monomorphised, per clock and per
/// `WRITE`/`VERIFY`, by [`thread_main`].
trait ThreadLoop: Send {
    /// What the loop needs before the barrier: its buffers (aligned, at
    /// `buf_offset` past a page boundary, touched), a ring.
    ///
    /// # Errors
    /// A buffer or a ring that cannot be had.
    fn setup(&mut self, bs: usize, buf_offset: usize) -> io::Result<()>;

    /// The measured loop, after the barrier.
    ///
    /// # Errors
    /// The first IO or verification error.
    fn run<C: Clock, const WRITE: bool, const VERIFY: bool>(
        &mut self,
        offs: &mut Offsets,
        st: &mut LoopState<'_>,
    ) -> io::Result<ThreadOut>;
}

/// One operation at a time on `IO`, into one buffer: every engine without
/// `qd=N`.
struct OneAtATime<IO> {
    io: IO,
    buf: Option<AlignedBuf>,
}

impl<IO: BlockIo> ThreadLoop for OneAtATime<IO> {
    fn setup(&mut self, bs: usize, buf_offset: usize) -> io::Result<()> {
        self.buf = Some(AlignedBuf::new(bs, buf_offset)?);
        Ok(())
    }

    fn run<C: Clock, const WRITE: bool, const VERIFY: bool>(
        &mut self,
        offs: &mut Offsets,
        st: &mut LoopState<'_>,
    ) -> io::Result<ThreadOut> {
        let buf = self.buf.as_mut().ok_or_else(no_setup)?.as_mut_slice();
        run_loop::<IO, C, WRITE, VERIFY>(&mut self.io, buf, offs, st)
    }
}

/// `foliocache[qd=N]`: `N` reads in flight through a
/// `foliocache::ReadQueue`, one popped and one pushed at a time.
struct Queued<'a> {
    file: &'a foliocache::File,
    depth: usize,
    buf: Option<AlignedBuf>,
}

/// `direct[qd=N]`: an io_uring of depth `N` on the `O_DIRECT` descriptor
/// ([`DirectRing`]), kept full.
struct Ringed<'a> {
    file: &'a std::fs::File,
    depth: usize,
    ring: Option<DirectRing<'a>>,
}

/// The error of a queue-depth engine asked to write (refused before a job
/// gets here: `scenario::check_job`).
fn read_only() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "qd=N engines only read: use them in read jobs",
    )
}

/// The error of a loop whose setup did not run (a bug in `thread_main`).
fn no_setup() -> io::Error {
    io::Error::other("the job thread's loop ran without its setup")
}

/// `e`, the error of a read of `bs` bytes at `off`, with that context.
fn read_error(e: io::Error, bs: usize, off: u64) -> io::Error {
    io::Error::new(e.kind(), format!("read of {bs} bytes at offset {off}: {e}"))
}

/// Checks a completed read of `bs` bytes at `off` that gave `got` into
/// `buf`: whole, and with `VERIFY` the file's bytes.
fn check_read<const VERIFY: bool>(
    st: &mut LoopState<'_>,
    got: io::Result<usize>,
    bs: usize,
    off: u64,
    buf: &[u8],
) -> io::Result<()> {
    match got {
        Ok(k) if k == bs => {}
        Ok(k) => return Err(short(k, bs, off)),
        Err(e) => return Err(read_error(e, bs, off)),
    }
    if VERIFY {
        st.gen.check(FILE_SEED, off, buf)?;
    }
    if st.sh.opts.consume {
        black_box(crate::consume::sum_words(buf));
    }
    black_box(buf);
    Ok(())
}

impl ThreadLoop for Queued<'_> {
    fn setup(&mut self, bs: usize, buf_offset: usize) -> io::Result<()> {
        self.buf = Some(AlignedBuf::new(bs, buf_offset)?);
        Ok(())
    }

    /// Queues `N` reads (each starts its IO when queued), then takes the
    /// oldest, counts it and queues the next offset: `N` reads queued all
    /// along, as `direct[qd=N]` keeps its ring full. Each read's latency
    /// runs from its push to the end of its pop (the copy into the
    /// buffer).
    fn run<C: Clock, const WRITE: bool, const VERIFY: bool>(
        &mut self,
        offs: &mut Offsets,
        st: &mut LoopState<'_>,
    ) -> io::Result<ThreadOut> {
        if WRITE {
            return Err(read_only());
        }
        let buf = self.buf.as_mut().ok_or_else(no_setup)?.as_mut_slice();
        let bs = buf.len();
        let mut rec = Recorder::<C>::start(st, bs as u64);
        let max_ops = st.sh.max_ops;
        let mut queue = self.file.read_queue();
        // The push time of every queued read, oldest first.
        let mut pushed = VecDeque::with_capacity(self.depth);
        let mut queued = 0u64;
        while queued < max_ops && pushed.len() < self.depth {
            pushed.push_back(C::now());
            queue.push(offs.next(), bs);
            queued += 1;
        }
        while let Some(t0) = pushed.pop_front() {
            let done = queue.pop(buf).ok_or_else(no_setup)?;
            let now = C::now();
            check_read::<VERIFY>(st, done.result, bs, done.offset, buf)?;
            if rec.done(now, now.wrapping_sub(t0), 1) {
                break;
            }
            if queued < max_ops {
                pushed.push_back(C::now());
                queue.push(offs.next(), bs);
                queued += 1;
            }
        }
        Ok(rec.finish())
    }
}

impl ThreadLoop for Ringed<'_> {
    fn setup(&mut self, bs: usize, _buf_offset: usize) -> io::Result<()> {
        // O_DIRECT: page-aligned buffers (`--buf-offset` is refused for
        // direct by `scenario::check_job`).
        self.ring = Some(DirectRing::new(self.file, self.depth, bs)?);
        Ok(())
    }

    /// Fills the ring, then, as each read completes, counts it and queues
    /// the next offset in its slot: `N` reads in flight all along (true
    /// queue depth, not batch and wait). Each read's latency runs from
    /// the `io_uring_enter` that submitted it (give or take the reads
    /// queued with it) to the reap of its completion.
    fn run<C: Clock, const WRITE: bool, const VERIFY: bool>(
        &mut self,
        offs: &mut Offsets,
        st: &mut LoopState<'_>,
    ) -> io::Result<ThreadOut> {
        if WRITE {
            return Err(read_only());
        }
        let ring = self.ring.as_mut().ok_or_else(no_setup)?;
        let depth = ring.depth();
        let bs = ring.bs();
        let max_ops = st.sh.max_ops;
        // Per slot: the offset it reads, and when it was queued.
        let mut at = vec![(0u64, 0u64); depth];
        let mut done = Vec::with_capacity(depth);
        let mut rec = Recorder::<C>::start(st, bs as u64);
        let mut issued = 0u64;
        let t = C::now();
        for (slot, a) in at.iter_mut().enumerate() {
            if issued == max_ops {
                break;
            }
            let off = offs.next();
            ring.queue(slot, off)?;
            *a = (off, t);
            issued += 1;
        }
        let mut stop = false;
        while !stop {
            done.clear();
            ring.wait(&mut done)?;
            if done.is_empty() {
                break;
            }
            let now = C::now();
            for &(slot, res) in &done {
                let (off, queued) = at[slot];
                let got = usize::try_from(res).map_err(|_| io::Error::from_raw_os_error(-res));
                check_read::<VERIFY>(st, got, bs, off, ring.buf(slot)?)?;
                stop |= rec.done(now, now.wrapping_sub(queued), 1);
                if !stop && issued < max_ops {
                    let off = offs.next();
                    ring.queue(slot, off)?;
                    at[slot] = (off, now);
                    issued += 1;
                }
            }
        }
        // Reads still in flight after a stop are waited for (not counted)
        // when the ring drops.
        Ok(rec.finish())
    }
}

fn thread_main<L: ThreadLoop>(
    mut lp: L,
    write: bool,
    bs: u64,
    mut offs: Offsets,
    sh: &Shared<'_>,
    slot: &Slot,
) -> io::Result<ThreadOut> {
    // Set up before the barrier; a failure still meets the barrier so the
    // others are not left waiting.
    let setup = lp.setup(bs as usize, sh.opts.buf_offset);
    let written = if write && sh.opts.verify {
        vec![false; offs.blocks as usize]
    } else {
        Vec::new()
    };
    let gen = Generator::new(if sh.opts.verify { bs as usize } else { 0 });
    let hist = Histogram::new();
    sh.barrier.wait();
    setup.inspect_err(|_| sh.stop.store(true, Ordering::Relaxed))?;
    let mut st = LoopState {
        hist: Some(hist),
        gen,
        written,
        slot,
        sh,
    };
    let o = &mut offs;
    let tsc = sh.opts.clock == ClockKind::Tsc;
    let r = match (tsc, write, sh.opts.verify) {
        (true, false, false) => lp.run::<Tsc, false, false>(o, &mut st),
        (true, false, true) => lp.run::<Tsc, false, true>(o, &mut st),
        (true, true, false) => lp.run::<Tsc, true, false>(o, &mut st),
        (true, true, true) => lp.run::<Tsc, true, true>(o, &mut st),
        (false, false, false) => lp.run::<Mono, false, false>(o, &mut st),
        (false, false, true) => lp.run::<Mono, false, true>(o, &mut st),
        (false, true, false) => lp.run::<Mono, true, false>(o, &mut st),
        (false, true, true) => lp.run::<Mono, true, true>(o, &mut st),
    };
    if r.is_err() {
        sh.stop.store(true, Ordering::Relaxed);
    }
    let mut out = r?;
    out.written = st.written;
    Ok(out)
}

struct LoopState<'a> {
    /// The histogram, made before the barrier; the loop takes it.
    hist: Option<Histogram>,
    gen: Generator,
    written: Vec<bool>,
    slot: &'a Slot,
    sh: &'a Shared<'a>,
}

fn short(n: usize, want: usize, off: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("short IO: {n} of {want} bytes at offset {off}"),
    )
}

/// A loop's figures as it goes, and its events: what every loop
/// ([`run_loop`], [`Queued`], [`Ringed`]) does per completed operation
/// ([`Recorder::done`]) and at the end ([`Recorder::finish`]).
///
/// The fast path per completion: one histogram increment, two additions,
/// one compare against the next event. Events (every [`TICK`], and the
/// deadline) take the slow path ([`Recorder::event`]): `Instant` for real
/// time, publish progress, look at the stop flag, close finished
/// intervals of the timeline. Events fall on the timeline's interval
/// boundaries too, so an interval holds the bytes of its own time (give or
/// take one operation), not of the tick that noticed its end.
struct Recorder<'s, C: Clock> {
    hist: Histogram,
    bytes: u64,
    ops: u64,
    /// Bytes per operation.
    bs: u64,
    timeline: Vec<u64>,
    start: Instant,
    t_start: u64,
    deadline: Option<Instant>,
    next_bin: Instant,
    interval: Duration,
    /// The clock's time of the next event.
    event: u64,
    bin_base: u64,
    rate: f64,
    slot: &'s Slot,
    sh: &'s Shared<'s>,
    clock: PhantomData<C>,
}

impl<'s, C: Clock> Recorder<'s, C> {
    /// Starts the clock: the loop's first operation (of `bs` bytes, as
    /// every one) comes next. Takes the histogram `st` made before the
    /// barrier.
    fn start(st: &mut LoopState<'s>, bs: u64) -> Self {
        let sh = st.sh;
        let hist = st.hist.take().unwrap_or_default();
        let interval = sh.interval;
        let per_sec = (Duration::from_secs(1).as_nanos() / interval.as_nanos().max(1)) as usize;
        let secs = sh.runtime.map_or(60, |d| d.as_secs() as usize + 2);
        let timeline = Vec::with_capacity(secs * per_sec.max(1));
        let rate = sh.ticks_per_sec;
        let start = Instant::now();
        let t_start = C::now();
        let first = sh.runtime.map_or(TICK, |d| d.min(TICK)).min(interval);
        Recorder {
            hist,
            bytes: 0,
            ops: 0,
            bs,
            timeline,
            start,
            t_start,
            deadline: sh.runtime.map(|d| start + d),
            next_bin: start + interval,
            interval,
            event: t_start + (first.as_secs_f64() * rate) as u64,
            bin_base: 0,
            rate,
            slot: st.slot,
            sh,
            clock: PhantomData,
        }
    }

    /// Counts `n` operations that completed at `now` (clock ticks), each
    /// of `latency` ticks; true when the loop is to stop (the deadline
    /// passed, or another thread failed).
    #[inline(always)]
    fn done(&mut self, now: u64, latency: u64, n: u64) -> bool {
        if n == 1 {
            self.hist.record(latency);
        } else {
            self.hist.record_n(latency, n);
        }
        self.bytes += n * self.bs;
        self.ops += n;
        now >= self.event && self.event(now)
    }

    /// The slow path of [`done`](Self::done): an event.
    #[inline(never)]
    fn event(&mut self, now: u64) -> bool {
        let real = Instant::now();
        if self.deadline.is_some_and(|d| real >= d) {
            return true;
        }
        self.slot.0.store(self.bytes, Ordering::Relaxed);
        if self.sh.stop.load(Ordering::Relaxed) {
            return true;
        }
        while real >= self.next_bin {
            self.timeline.push(self.bytes - self.bin_base);
            self.bin_base = self.bytes;
            self.next_bin += self.interval;
        }
        let until = self
            .deadline
            .map_or(TICK, |d| d.saturating_duration_since(real).min(TICK))
            .min(self.next_bin.saturating_duration_since(real));
        self.event = now + (until.as_secs_f64() * self.rate) as u64;
        false
    }

    /// The thread's figures, the clock stopped now.
    fn finish(mut self) -> ThreadOut {
        let t_end = C::now();
        let end = Instant::now();
        // Intervals the loop crossed without an event (a stall) still count.
        while end >= self.next_bin {
            self.timeline.push(self.bytes - self.bin_base);
            self.bin_base = self.bytes;
            self.next_bin += self.interval;
        }
        self.slot.0.store(self.bytes, Ordering::Relaxed);
        ThreadOut {
            bytes: self.bytes,
            ops: self.ops,
            hist: self.hist,
            ticks: t_end.wrapping_sub(self.t_start),
            timeline: self.timeline,
            start: self.start,
            end,
            written: Vec::new(),
        }
    }
}

/// The synchronous loop ([`OneAtATime`]). The clock `C`, `WRITE` and
/// `VERIFY` are type-level, so each combination is compiled without the
/// others' branches.
///
/// Per operation: next offset, the IO, one clock read, and
/// [`Recorder::done`]. An operation's latency is the time from the end of
/// the previous one to the end of this one.
#[inline(never)]
fn run_loop<IO: BlockIo, C: Clock, const WRITE: bool, const VERIFY: bool>(
    io: &mut IO,
    buf: &mut [u8],
    offs: &mut Offsets,
    st: &mut LoopState<'_>,
) -> io::Result<ThreadOut> {
    let bs = buf.len() as u64;
    let max_ops = st.sh.max_ops;
    // (`--consume` and `--verify` do not go together: `check_job`.)
    let consume = st.sh.opts.consume && !VERIFY;
    let mut rec = Recorder::<C>::start(st, bs);
    let mut prev = rec.t_start;
    while rec.ops < max_ops {
        let off = offs.next();
        if WRITE {
            if VERIFY {
                data::fill(st.sh.opts.write_seed, off, buf);
                st.written[(off / bs) as usize] = true;
            }
            let n = io.write(buf, off)?;
            if n != buf.len() {
                return Err(short(n, buf.len(), off));
            }
        } else if consume {
            let (n, sum) = io.read_consume(buf, off)?;
            if n != buf.len() {
                return Err(short(n, buf.len(), off));
            }
            black_box(sum);
        } else {
            let n = io.read(buf, off)?;
            if n != buf.len() {
                return Err(short(n, buf.len(), off));
            }
            if VERIFY {
                st.gen.check(FILE_SEED, off, buf)?;
            }
        }
        black_box(&mut *buf);
        let now = C::now();
        let latency = now.wrapping_sub(prev);
        prev = now;
        if rec.done(now, latency, 1) {
            break;
        }
    }
    Ok(rec.finish())
}

fn merge(
    outs: Vec<ThreadOut>,
    job: &JobSpec,
    cpu0: (Duration, Duration),
    cpu1: (Duration, Duration),
    sync: Option<Duration>,
) -> Measured {
    let start = outs.iter().map(|o| o.start).min();
    let end = outs.iter().map(|o| o.end).max();
    let loop_seconds = match (start, end) {
        (Some(s), Some(e)) => e.duration_since(s).as_secs_f64(),
        _ => 0.0,
    };
    let sync_s = sync.map(|d| d.as_secs_f64());
    let seconds = loop_seconds + sync_s.unwrap_or(0.0);
    let mut hist = Histogram::new();
    let mut per_bin: Vec<u64> = Vec::new();
    let (mut bytes, mut ops) = (0, 0);
    let (mut ns, mut ticks) = (0.0, 0.0);
    let mut written: Vec<Vec<bool>> = vec![Vec::new(); job.nfiles()];
    let thread_ops: Vec<u64> = outs.iter().map(|o| o.ops).collect();
    for (j, o) in outs.into_iter().enumerate() {
        bytes += o.bytes;
        ops += o.ops;
        ns += o.end.duration_since(o.start).as_nanos() as f64;
        ticks += o.ticks as f64;
        hist.merge(&o.hist);
        if per_bin.len() < o.timeline.len() {
            per_bin.resize(o.timeline.len(), 0);
        }
        for (a, b) in per_bin.iter_mut().zip(&o.timeline) {
            *a += b;
        }
        let f = if job.shared { 0 } else { j };
        if written[f].is_empty() {
            written[f] = o.written;
        } else {
            for (a, b) in written[f].iter_mut().zip(o.written) {
                *a |= b;
            }
        }
    }
    // Whole seconds from whole intervals; the finer timeline as it is.
    let k = job.bins_per_second.max(1) as usize;
    let per_sec: Vec<u64> = per_bin.chunks_exact(k).map(|c| c.iter().sum()).collect();
    let fine_timeline = if k > 1 {
        let secs = job.interval().as_secs_f64();
        per_bin.iter().map(|&b| b as f64 / secs).collect()
    } else {
        Vec::new()
    };
    let full = per_sec.len();
    let mut timeline: Vec<f64> = per_sec.iter().map(|&b| b as f64).collect();
    // The timeline covers the IO; a final sync is in `seconds` only.
    let tail_secs = loop_seconds - full as f64;
    let tail_bytes = bytes - per_sec.iter().sum::<u64>();
    if tail_secs > 0.0 && (full == 0 || tail_secs >= MIN_TAIL) {
        timeline.push(tail_bytes as f64 / tail_secs);
    } else if full == 0 {
        timeline.push(0.0);
    }
    Measured {
        bytes,
        ops,
        seconds,
        sync_s,
        hist,
        ns_per_tick: if ticks > 0.0 { ns / ticks } else { 1.0 },
        timeline,
        fine_timeline,
        cpu_user: cpu1.0.saturating_sub(cpu0.0).as_secs_f64(),
        cpu_sys: cpu1.1.saturating_sub(cpu0.1).as_secs_f64(),
        written,
        thread_ops,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_offsets_walk_and_wrap() {
        let mut o = Offsets::new(false, 4096, 3, 1, 0);
        let got: Vec<u64> = (0..5).map(|_| o.next()).collect();
        assert_eq!(got, [4096, 8192, 0, 4096, 8192]);
    }

    /// A queue-depth engine's job on a small file: a pass counts every
    /// read once, in the histogram too, and `--verify` checks every
    /// block; a time-based run stops with reads in flight.
    #[test]
    fn qd_engines_count_and_verify_every_read() {
        use crate::data::DataSet;
        use crate::engine::{Engines, RunMode};
        use crate::spec::{EngineSpec, Rw};

        let dir = tempfile::tempdir().unwrap();
        let mut data = DataSet::new(dir.path().to_path_buf(), true);
        let (size, bs) = (4u64 << 20, 4096u64);
        let files = data.files(size, 1, false).unwrap();
        let mut engines = Engines::default();
        let opts = RunOptions {
            verify: true,
            buf_offset: 0,
            consume: false,
            write_seed: 0,
            clock: ClockKind::Instant,
        };
        let mode = RunMode {
            cold: true,
            capacity: 2 * size,
            consume: false,
        };
        for (text, runtime) in [
            ("foliocache[qd=32]", None),
            ("foliocache[qd=5]", None),
            ("direct[qd=32]", None),
            ("direct[qd=1]", None),
            ("direct[qd=32]", Some(Duration::from_millis(200))),
            ("foliocache[qd=32]", Some(Duration::from_millis(200))),
        ] {
            let spec = EngineSpec::parse(text).unwrap();
            let job = JobSpec {
                runtime,
                cold: true,
                ..JobSpec::new(Rw::Randread, bs, size, vec![spec.clone()])
            };
            let mut prepared = match engines.prepare(&spec, &job, &files, mode) {
                Ok((p, _)) => p,
                Err(e) if spec.kind == crate::spec::EngineKind::Direct => {
                    return test_support::skip_or_fail(
                        "qd_engines_count_and_verify_every_read",
                        format!("{e:#}"),
                    );
                }
                Err(e) => panic!("{text}: {e:#}"),
            };
            let m = match run(&mut prepared, &job, opts, &spec.label) {
                Err(e) if spec.kind == crate::spec::EngineKind::Direct => {
                    // io_uring may be disabled here (EPERM, ENOSYS).
                    return test_support::skip_or_fail(
                        "qd_engines_count_and_verify_every_read",
                        format!("{e:#}"),
                    );
                }
                r => r.unwrap(),
            };
            if runtime.is_none() {
                assert_eq!(m.ops, size / bs, "{text}: one pass");
            } else {
                assert!(m.ops > 0, "{text}");
            }
            assert_eq!(m.bytes, m.ops * bs, "{text}");
            assert_eq!(m.hist.len(), m.ops, "{text}");
            assert_eq!(m.thread_ops, [m.ops], "{text}");
        }
        engines.clear().unwrap();
    }

    #[test]
    fn random_offsets_are_aligned_in_range_and_spread() {
        let mut o = Offsets::new(true, 4096, 100, 0, 42);
        let mut seen = [false; 100];
        for _ in 0..10_000 {
            let off = o.next();
            assert_eq!(off % 4096, 0);
            assert!(off < 100 * 4096);
            seen[(off / 4096) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s), "every block is visited");
    }
}
