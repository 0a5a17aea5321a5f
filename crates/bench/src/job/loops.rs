//! The loops of a job thread over its engine's IO, after the barrier:
//! one synchronous operation at a time on a [`BlockIo`] ([`run_loop`]),
//! or a queue-depth engine's reads ([`Queued`], [`Ringed`]). Each is
//! compiled per IO type and per [`Mode`] (clock, write, verify:
//! [`thread_main`]), and [`spawn`] picks the one for a thread's
//! [`ThreadIo`] once, before the thread starts.

use std::collections::VecDeque;
use std::hint::black_box;
use std::io;
use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::thread;

use super::offsets::Offsets;
use super::recorder::{LoopState, Recorder, Shared, Slot, ThreadOut};
use crate::clock::{Clock, ClockKind, Mono, Tsc};
use crate::data::{self, Generator, FILE_SEED};
use crate::engine::{BlockIo, TaskRead, ThreadIo};
use crate::hist::Histogram;
use crate::sys::ring::DirectRing;
use crate::sys::AlignedBuf;

/// Spawns job thread `slot`'s loop over `io` in `s`: the loop compiled
/// for `io`'s type (one match, here, before the thread starts).
pub(super) fn spawn<'scope, 'env>(
    s: &'scope thread::Scope<'scope, 'env>,
    io: ThreadIo<'env>,
    (write, bs): (bool, u64),
    offs: Offsets,
    sh: &'env Shared<'env>,
    slot: &'env Slot,
) -> thread::ScopedJoinHandle<'scope, io::Result<ThreadOut>> {
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
    match io {
        ThreadIo::Pread(io) => one!(io),
        ThreadIo::Dontcache(io) => one!(io),
        ThreadIo::Mmap(io) => one!(io),
        ThreadIo::Anon(io) => one!(io),
        ThreadIo::SharedMap(io) => one!(io),
        ThreadIo::Folio(io) => one!(io),
        ThreadIo::Shared(io) => one!(io),
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
        ThreadIo::FolioTasks(io, tasks) => spawn!(Tasks::new(io, tasks)),
        ThreadIo::TokioFs(io, tasks) => spawn!(Tasks::new(io, tasks)),
    }
}

/// What a loop is compiled for: its clock, and whether it writes and
/// verifies, all type-level, so that each combination is compiled without
/// the others' branches ([`thread_main`] picks one).
trait Mode {
    /// The clock the loop reads.
    type C: Clock;
    /// Writes (else reads).
    const WRITE: bool;
    /// Checks the bytes read, or fills what it writes with the job's data.
    const VERIFY: bool;
}

/// The [`Mode`] of clock `C`, `WRITE` and `VERIFY`.
struct Compiled<C, const WRITE: bool, const VERIFY: bool>(PhantomData<C>);

impl<C: Clock, const WRITE: bool, const VERIFY: bool> Mode for Compiled<C, WRITE, VERIFY> {
    type C = C;
    const WRITE: bool = WRITE;
    const VERIFY: bool = VERIFY;
}

/// A job thread's loop over its engine: one synchronous operation at a
/// time on a [`BlockIo`] ([`OneAtATime`]), or a queue-depth engine's reads
/// ([`Queued`], [`Ringed`]). Each is monomorphised per [`Mode`] by
/// [`thread_main`].
trait ThreadLoop: Send {
    /// Whether the loop only reads: a write job on it fails at its setup
    /// (refused before a job gets here: `scenario::check_job`).
    const READ_ONLY: bool = false;

    /// What the loop needs before the barrier: its buffers (aligned, at
    /// `buf_offset` past a page boundary, touched), a ring.
    ///
    /// # Errors
    /// A buffer or a ring that cannot be had.
    fn setup(&mut self, bs: usize, buf_offset: usize) -> io::Result<()>;

    /// The measured loop, after the barrier, over the offsets `o`.
    ///
    /// # Errors
    /// The first IO or verification error.
    fn run<M: Mode>(&mut self, o: &mut Offsets, st: &mut LoopState<'_>) -> io::Result<ThreadOut>;
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

    fn run<M: Mode>(&mut self, o: &mut Offsets, st: &mut LoopState<'_>) -> io::Result<ThreadOut> {
        let buf = self.buf.as_mut().ok_or_else(no_setup)?.as_mut_slice();
        run_loop::<IO, M>(&mut self.io, buf, o, st)
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

/// An async engine's reads (`foliocache[async,tasks=N]`, `tokio-fs`):
/// `N` tasks on one current-thread tokio runtime, built by the job
/// thread, each with its own buffer.
struct Tasks<IO> {
    io: IO,
    tasks: usize,
    bs: usize,
    bufs: Vec<(AlignedBuf, Vec<u8>)>,
    rt: Option<tokio::runtime::Runtime>,
}

impl<IO> Tasks<IO> {
    fn new(io: IO, tasks: usize) -> Self {
        Tasks {
            io,
            tasks,
            bs: 0,
            bufs: Vec::new(),
            rt: None,
        }
    }
}

/// What the tasks of a [`Tasks`] loop share (on one thread).
struct TaskShared<'o, 'l, 's, C: Clock> {
    offs: &'o mut Offsets,
    st: &'l mut LoopState<'s>,
    rec: Recorder<'s, C>,
    issued: u64,
    stop: bool,
}

impl<IO: TaskRead> ThreadLoop for Tasks<IO> {
    fn setup(&mut self, bs: usize, buf_offset: usize) -> io::Result<()> {
        self.bs = bs;
        self.bufs = (0..self.tasks)
            .map(|_| Ok((AlignedBuf::new(bs, buf_offset)?, Vec::new())))
            .collect::<io::Result<_>>()?;
        self.rt = Some(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?,
        );
        Ok(())
    }

    /// Runs the tasks until the job's operations are issued or its time
    /// is up: each takes the next offset, reads it, counts it with the
    /// time from the read's start to its completion as its latency, and
    /// takes the next. The runtime polls only the tasks woken.
    fn run<M: Mode>(&mut self, o: &mut Offsets, st: &mut LoopState<'_>) -> io::Result<ThreadOut> {
        use futures_util::stream::{FuturesUnordered, StreamExt};
        use std::cell::RefCell;
        let rt = self.rt.as_ref().ok_or_else(no_setup)?;
        let bs = self.bs;
        let rec = Recorder::<M::C>::start(st, bs as u64);
        let max_ops = st.sh.max_ops;
        let shared = RefCell::new(TaskShared {
            offs: o,
            st,
            rec,
            issued: 0,
            stop: false,
        });
        let io = &self.io;
        let mut running: FuturesUnordered<_> = self
            .bufs
            .iter_mut()
            .map(|(b, scratch)| task::<IO, M>(io, b.as_mut_slice(), scratch, &shared, max_ops))
            .collect();
        rt.block_on(async {
            while let Some(r) = running.next().await {
                r?;
            }
            Ok::<_, io::Error>(())
        })?;
        drop(running);
        Ok(shared.into_inner().rec.finish())
    }
}

/// One task of a [`Tasks`] loop: takes the next offset, reads it into
/// `buf` (with [`Mode::WRITE`], writes `buf` there: the job's data with
/// [`Mode::VERIFY`]), counts it, until the job's operations are issued or
/// a task stopped the run.
async fn task<IO: TaskRead, M: Mode>(
    io: &IO,
    buf: &mut [u8],
    scratch: &mut Vec<u8>,
    shared: &std::cell::RefCell<TaskShared<'_, '_, '_, M::C>>,
    max_ops: u64,
) -> io::Result<()> {
    let bs = buf.len();
    loop {
        let off = {
            let mut sh = shared.borrow_mut();
            if sh.stop || sh.issued >= max_ops {
                return Ok(());
            }
            sh.issued += 1;
            let off = sh.offs.next();
            if M::WRITE && M::VERIFY {
                data::fill(sh.st.sh.opts.write_seed, off, buf);
                sh.st.written[(off / bs as u64) as usize] = true;
            }
            off
        };
        let t0 = M::C::now();
        let got = if M::WRITE {
            io.write(buf, off).await
        } else {
            io.read(buf, scratch, off).await
        };
        let now = M::C::now();
        let mut sh = shared.borrow_mut();
        if M::WRITE {
            match got {
                Ok(n) if n == bs => {}
                Ok(n) => return Err(short(n, bs, off)),
                Err(e) => return Err(e),
            }
        } else {
            check_read::<M>(&mut *sh.st, got, bs, off, buf)?;
        }
        if sh.rec.done(now, now.wrapping_sub(t0), 1) {
            sh.stop = true;
        }
    }
}

/// The error of a read-only loop asked to write ([`ThreadLoop::READ_ONLY`]).
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
/// `buf`: whole, and with [`Mode::VERIFY`] the file's bytes.
fn check_read<M: Mode>(
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
    if M::VERIFY {
        st.gen.check(FILE_SEED, off, buf)?;
    }
    if st.sh.opts.consume {
        black_box(crate::consume::sum_words(buf));
    }
    black_box(buf);
    Ok(())
}

impl ThreadLoop for Queued<'_> {
    const READ_ONLY: bool = true;

    fn setup(&mut self, bs: usize, buf_offset: usize) -> io::Result<()> {
        self.buf = Some(AlignedBuf::new(bs, buf_offset)?);
        Ok(())
    }

    /// Queues `N` reads (each starts its IO when queued), then takes the
    /// oldest, counts it and queues the next offset: `N` reads queued all
    /// along, as `direct[qd=N]` keeps its ring full. Each read's latency
    /// runs from its push to the end of its pop (the copy into the
    /// buffer).
    fn run<M: Mode>(&mut self, o: &mut Offsets, st: &mut LoopState<'_>) -> io::Result<ThreadOut> {
        let buf = self.buf.as_mut().ok_or_else(no_setup)?.as_mut_slice();
        let bs = buf.len();
        let mut rec = Recorder::<M::C>::start(st, bs as u64);
        let max_ops = st.sh.max_ops;
        let mut queue = self.file.read_queue();
        // The push time of every queued read, oldest first.
        let mut pushed = VecDeque::with_capacity(self.depth);
        let mut queued = 0u64;
        while queued < max_ops && pushed.len() < self.depth {
            pushed.push_back(M::C::now());
            queue.push(o.next(), bs);
            queued += 1;
        }
        while let Some(t0) = pushed.pop_front() {
            let done = queue.pop(buf).ok_or_else(no_setup)?;
            let now = M::C::now();
            check_read::<M>(st, done.result, bs, done.offset, buf)?;
            if rec.done(now, now.wrapping_sub(t0), 1) {
                break;
            }
            if queued < max_ops {
                pushed.push_back(M::C::now());
                queue.push(o.next(), bs);
                queued += 1;
            }
        }
        Ok(rec.finish())
    }
}

impl ThreadLoop for Ringed<'_> {
    const READ_ONLY: bool = true;

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
    fn run<M: Mode>(&mut self, o: &mut Offsets, st: &mut LoopState<'_>) -> io::Result<ThreadOut> {
        let ring = self.ring.as_mut().ok_or_else(no_setup)?;
        let depth = ring.depth();
        let bs = ring.bs();
        let max_ops = st.sh.max_ops;
        // Per slot: the offset it reads, and when it was queued.
        let mut at = vec![(0u64, 0u64); depth];
        let mut done = Vec::with_capacity(depth);
        let mut rec = Recorder::<M::C>::start(st, bs as u64);
        let mut issued = 0u64;
        let t = M::C::now();
        for (slot, a) in at.iter_mut().enumerate() {
            if issued == max_ops {
                break;
            }
            let off = o.next();
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
            let now = M::C::now();
            for &(slot, res) in &done {
                let (off, queued) = at[slot];
                let got = usize::try_from(res).map_err(|_| io::Error::from_raw_os_error(-res));
                check_read::<M>(st, got, bs, off, ring.buf(slot)?)?;
                stop |= rec.done(now, now.wrapping_sub(queued), 1);
                if !stop && issued < max_ops {
                    let off = o.next();
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
    let setup = if write && L::READ_ONLY {
        Err(read_only())
    } else {
        lp.setup(bs as usize, sh.opts.buf_offset)
    };
    let written = if write && sh.opts.verify {
        vec![false; offs.blocks() as usize]
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
        (true, false, false) => lp.run::<Compiled<Tsc, false, false>>(o, &mut st),
        (true, false, true) => lp.run::<Compiled<Tsc, false, true>>(o, &mut st),
        (true, true, false) => lp.run::<Compiled<Tsc, true, false>>(o, &mut st),
        (true, true, true) => lp.run::<Compiled<Tsc, true, true>>(o, &mut st),
        (false, false, false) => lp.run::<Compiled<Mono, false, false>>(o, &mut st),
        (false, false, true) => lp.run::<Compiled<Mono, false, true>>(o, &mut st),
        (false, true, false) => lp.run::<Compiled<Mono, true, false>>(o, &mut st),
        (false, true, true) => lp.run::<Compiled<Mono, true, true>>(o, &mut st),
    };
    if r.is_err() {
        sh.stop.store(true, Ordering::Relaxed);
    }
    let mut out = r?;
    out.written = st.written;
    Ok(out)
}

fn short(n: usize, want: usize, off: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("short IO: {n} of {want} bytes at offset {off}"),
    )
}

/// The synchronous loop ([`OneAtATime`]), compiled per [`Mode`].
///
/// Per operation: next offset, the IO, one clock read, and
/// [`Recorder::done`]. An operation's latency is the time from the end of
/// the previous one to the end of this one.
#[inline(never)]
fn run_loop<IO: BlockIo, M: Mode>(
    io: &mut IO,
    buf: &mut [u8],
    offs: &mut Offsets,
    st: &mut LoopState<'_>,
) -> io::Result<ThreadOut> {
    let bs = buf.len() as u64;
    let max_ops = st.sh.max_ops;
    // (`--consume` and `--verify` do not go together: `check_job`.)
    let consume = st.sh.opts.consume && !M::VERIFY;
    let mut rec = Recorder::<M::C>::start(st, bs);
    let mut prev = rec.t_start;
    while rec.ops < max_ops {
        let off = offs.next();
        if M::WRITE {
            if M::VERIFY {
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
            if M::VERIFY {
                st.gen.check(FILE_SEED, off, buf)?;
            }
        }
        black_box(&mut *buf);
        let now = M::C::now();
        let latency = now.wrapping_sub(prev);
        prev = now;
        if rec.done(now, latency, 1) {
            break;
        }
    }
    Ok(rec.finish())
}
