//! The caller's ring: [`IoEngine::write_all`](super::IoEngine::write_all)
//! under io_uring submits its writes to a small ring of the calling
//! thread's own and sleeps in that ring's `io_uring_enter` until the last
//! one completes.
//!
//! # Why
//! A write submitted through the engine's shared ring completes after
//! three wake-ups: the kernel completes a direct write as task work of the
//! thread that submitted it, so the caller, asleep on its latch, is woken
//! to post the CQE; the completion thread wakes in
//! `io_uring_enter(GETEVENTS)` to reap it; and it wakes the caller. A
//! sync's writeback of a few scattered pages (a database commit) pays
//! that on every commit. On the caller's own ring the caller waits in
//! `io_uring_enter(GETEVENTS, min_complete = all in flight)`: the task
//! work runs in that wait, and the caller wakes once, when the batch is
//! done, as the kernel's own sync waits for its writeback
//! (`filemap_fdatawait_range`).
//!
//! The ring is set up with `IORING_SETUP_DEFER_TASKRUN` (6.1+, which
//! needs `IORING_SETUP_SINGLE_ISSUER`: one thread submits, as here) where
//! the kernel has it. Without it each write's completion queues task work
//! and wakes the waiting thread, which posts that one CQE, finds fewer
//! than `min_complete` and sleeps again: a batch of 8 writes woke it 8
//! times. Deferred, the completions wait on the ring's own list and the
//! thread is woken once, when they number `min_complete` (docs/design.md,
//! "Through io_uring", links the measurements).
//!
//! ```text
//!  write_all ──> this thread's ring (made at its first write_all,
//!                deferred task work where the kernel has it)
//!                push an SQE per write (up to DEPTH at once)
//!                ONE io_uring_enter(to_submit = n, GETEVENTS, min = in flight)
//!                reap: done ──> the op's callback (its latch slot)
//!                      short or EAGAIN/EINTR ──> pushed again
//! ```
//!
//! # Limits
//! - One ring per thread, of [`DEPTH`] entries, made at the thread's first
//!   batch and closed when the thread exits; at most [`MAX_RINGS`] in the
//!   process. A thread beyond that, or one whose ring cannot be set up
//!   (`EMFILE`, a memory-lock limit), uses the shared ring, as before.
//! - A ring belongs to the process that made it: after `fork`, a child's
//!   thread makes its own rather than share its parent's queues, and
//!   leaves the inherited one unclosed (its descriptor number may name
//!   another file by then).
//! - If `io_uring_enter` fails for good, the thread gives its ring up: the
//!   writes the kernel took are waited for (the completion queue polled),
//!   the others run with `write_blocks` on this thread, and the thread's
//!   later batches use the shared ring.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use io_uring::IoUring;

use super::uring::{setup, InFlight, Settled, SUBMIT_TRIES};
use super::{Op, Stats};
use crate::sync::{bump, AtomicU64, Ordering};

/// Entries of a caller's ring: the most writes in flight from one call (a
/// larger batch goes in parts, each once the one before completed). The
/// engine's default depth: writeback's batches of scattered pages (up to
/// 256 runs) keep the device's queue as full as through the engine's ring.
const DEPTH: u32 = 256;

/// The most callers' rings in the process at once.
const MAX_RINGS: u64 = 256;

/// Callers' rings alive now.
static RINGS: AtomicU64 = AtomicU64::new(0);

/// A thread's ring, and the process that made it.
struct OwnRing {
    /// Closed and unmapped on drop only in the process that made it.
    ring: ManuallyDrop<IoUring>,
    pid: u32,
    /// Set up with `IORING_SETUP_DEFER_TASKRUN`: completions are posted
    /// only inside this thread's `io_uring_enter(GETEVENTS)`.
    deferred: bool,
}

impl OwnRing {
    /// A ring for this thread, if the process has room for one and the
    /// kernel sets it up.
    fn new() -> Option<Box<OwnRing>> {
        if RINGS.fetch_add(1, Ordering::Relaxed) >= MAX_RINGS {
            RINGS.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        match setup_deferred(DEPTH) {
            Ok((ring, deferred)) => Some(Box::new(OwnRing {
                ring: ManuallyDrop::new(ring),
                pid: std::process::id(),
                deferred,
            })),
            Err(e) => {
                RINGS.fetch_sub(1, Ordering::Relaxed);
                log::debug!(
                    "aio: no ring of this thread's own ({e}); its writes use the shared ring"
                );
                None
            }
        }
    }
}

/// Sets up a ring of `depth` entries for this thread alone: with
/// `IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN` (and
/// `SUBMIT_ALL`) where the kernel has them (6.1+), as [`setup`] where not.
/// Returns the ring and whether its task work is deferred.
fn setup_deferred(depth: u32) -> io::Result<(IoUring, bool)> {
    #[cfg(test)]
    if NO_DEFER.with(std::cell::Cell::get) {
        return setup(depth).map(|r| (r, false));
    }
    match IoUring::builder()
        .setup_submit_all()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(depth)
    {
        Ok(ring) => Ok((super::uring::placed(ring)?, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => setup(depth).map(|r| (r, false)),
        Err(e) => Err(e),
    }
}

impl Drop for OwnRing {
    fn drop(&mut self) {
        RINGS.fetch_sub(1, Ordering::Relaxed);
        // A child of a `fork` inherited the ring: its descriptor number
        // may have been closed and reused for another file since (a child
        // often closes what it does not know), so it is left alone, not
        // closed: the mapping and the descriptor (close-on-exec) go with
        // the process.
        if self.pid == std::process::id() {
            // SAFETY: the ring is dropped once, here, and never used
            // after (this is the owner's drop).
            unsafe { ManuallyDrop::drop(&mut self.ring) };
        }
    }
}

/// A thread's state: no ring yet, its ring, or none to be had.
enum Slot {
    Unset,
    Ready(Box<OwnRing>),
    Unavailable,
}

thread_local! {
    static OWN: RefCell<Slot> = const { RefCell::new(Slot::Unset) };
    /// Test hook: this thread's `io_uring_enter`s that submit fail with
    /// this errno.
    #[cfg(test)]
    static FAIL_ENTER: std::cell::Cell<i32> = const { std::cell::Cell::new(0) };
    /// Test hook: this thread's next enter submits without waiting (as
    /// one that a signal cut short) and without failing, so the ring can
    /// fail with writes in flight.
    #[cfg(test)]
    static NO_WAIT_ONCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Test hook: set by the enter `NO_WAIT_ONCE` cut short, so the reap
    /// after it looks at no completion (an undeferred ring may have posted
    /// every one already): the writes are still in flight at the next
    /// enter, whatever the kernel's timing.
    #[cfg(test)]
    static HOLD_ONCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Test hook: this thread's ring is set up without deferred task work.
    #[cfg(test)]
    static NO_DEFER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// One `io_uring_enter`: submits what is pushed and waits for `want`
/// completions.
fn enter(ring: &IoUring, want: usize) -> io::Result<usize> {
    #[cfg(test)]
    if NO_WAIT_ONCE.with(|w| w.replace(false)) {
        HOLD_ONCE.with(|h| h.set(true));
        return ring.submit();
    }
    #[cfg(test)]
    {
        let errno = FAIL_ENTER.with(std::cell::Cell::get);
        if errno != 0 {
            return Err(io::Error::from_raw_os_error(errno));
        }
    }
    ring.submit_and_wait(want)
}

/// `IORING_ENTER_GETEVENTS` (the uapi's value; the `io-uring` crate keeps
/// its constants private).
const ENTER_GETEVENTS: u32 = 1;

/// An `io_uring_enter` that submits nothing and waits for `want`
/// completions: after the ring was given up, with entries pushed that it
/// must never take. On a deferred ring it is also what posts the CQEs of
/// the writes the kernel took.
fn reap(ring: &IoUring, want: usize) -> io::Result<usize> {
    let want = u32::try_from(want).unwrap_or(u32::MAX);
    // SAFETY: no submission (`to_submit` 0) and no argument: the call only
    // runs this ring's completions and waits for them.
    unsafe {
        ring.submitter()
            .enter::<libc::sigset_t>(0, want, ENTER_GETEVENTS, None)
    }
}

/// Runs every write of `ops` through this thread's ring and returns once
/// each has completed (its callback called), or hands `ops` back untouched
/// when this thread has no ring. `one`: the kernel has `IORING_OP_WRITE`.
pub(super) fn write_all(
    ops: Vec<(Op, Arc<File>)>,
    one: bool,
    stats: &Stats,
) -> Result<(), Vec<(Op, Arc<File>)>> {
    // A thread whose locals are being destroyed (the main thread in
    // `exit`, whose atexit handlers run after glibc's thread-local
    // destructors) has no ring: the engine's takes the writes.
    // (`ops` stays here unless the closure runs and takes it.)
    let mut ops = Some(ops);
    let ran = OWN.try_with(|slot| -> Result<(), Vec<(Op, Arc<File>)>> {
        let ops = ops.take().unwrap_or_default();
        let Ok(mut slot) = slot.try_borrow_mut() else {
            return Err(ops);
        };
        if matches!(&*slot, Slot::Ready(r) if r.pid != std::process::id()) {
            // Made by the parent of this process (inherited through
            // `fork`): its queues are shared with the parent. This process
            // makes its own; the inherited one is left alone (its drop).
            *slot = Slot::Unset;
        }
        if matches!(*slot, Slot::Unset) {
            *slot = OwnRing::new().map_or(Slot::Unavailable, Slot::Ready);
        }
        let Slot::Ready(own) = &mut *slot else {
            return Err(ops);
        };
        if !run(&mut own.ring, own.deferred, ops, one, stats) {
            *slot = Slot::Unavailable;
        }
        Ok(())
    });
    ran.unwrap_or_else(|_| Err(ops.take().unwrap_or_default()))
}

/// Writes `ops` through `ring` (`deferred`: its task work is) until each
/// is done. Returns false if the ring failed (then every op was still
/// completed, the ones it did not take with `write_blocks`).
fn run(
    ring: &mut IoUring,
    deferred: bool,
    ops: Vec<(Op, Arc<File>)>,
    one: bool,
    stats: &Stats,
) -> bool {
    let mut slots: Vec<Option<Box<InFlight>>> = ops
        .into_iter()
        .map(|(op, file)| Some(InFlight::new(op, file)))
        .collect();
    // Ops to push, ops pushed that the kernel has not taken (oldest
    // first), and ops pushed or in the kernel.
    let mut todo: VecDeque<usize> = (0..slots.len()).collect();
    let mut pushed: VecDeque<usize> = VecDeque::new();
    let mut in_flight = InKernel(0);
    let mut broken = false;
    let mut tries = 0;
    while in_flight.0 > 0 || !todo.is_empty() {
        if broken {
            // Only ops the kernel took are left in flight: their CQEs come.
            // Undeferred, the task work that posts them runs as this thread
            // returns from the sleep; deferred, only inside an enter with
            // GETEVENTS, which (submitting nothing) may work where the
            // failed one did not.
            if !deferred || reap(ring, in_flight.0).is_err() {
                thread::sleep(Duration::from_millis(1));
            }
        } else {
            push(
                ring,
                &mut slots,
                &mut todo,
                &mut pushed,
                &mut in_flight,
                one,
            );
            broken = !submit(ring, &mut pushed, &in_flight, &mut tries, stats);
            if broken {
                // Never taken, and never will be: the ring is given up.
                for i in pushed.drain(..).rev() {
                    in_flight.0 -= 1;
                    todo.push_front(i);
                }
            }
        }
        complete(ring, &mut slots, &mut todo, &mut in_flight, stats);
        if broken {
            for i in todo.drain(..) {
                if let Some(f) = slots[i].take() {
                    bump(&stats.pool_ops, 1);
                    f.op.run(stats);
                }
            }
        }
    }
    !broken
}

/// Pushes ops from `todo` into the submission queue while fewer than
/// [`DEPTH`] are pushed or in the kernel; each pushed one goes to the back
/// of `pushed` and counts in `in_flight`.
fn push(
    ring: &mut IoUring,
    slots: &mut [Option<Box<InFlight>>],
    todo: &mut VecDeque<usize>,
    pushed: &mut VecDeque<usize>,
    in_flight: &mut InKernel,
    one: bool,
) {
    while in_flight.0 < DEPTH as usize {
        let Some(i) = todo.pop_front() else {
            break;
        };
        let f = slots[i].as_mut().expect("an op to push is in its slot");
        let entry = f.entry(one).user_data(i as u64);
        // SAFETY: this thread owns the ring (a thread-local of its
        // own process), so no other submission queue of it exists.
        // The entry points at the op's buffers (borrowed, unwritten,
        // by the `write_all` call that waits for every op's callback
        // before it returns) and at the iovec array in the op's box,
        // and names the descriptor of the box's `Arc<File>`; the box
        // stays in `slots` until the entry's CQE is reaped, and [`run`]
        // returns only when no entry the kernel took is
        // left (`in_flight` at 0; a panic that would unwind with any
        // left aborts first: `in_flight`, declared after `slots`, is
        // dropped before it), so all of it outlives the operation.
        if unsafe { ring.submission().push(&entry) }.is_err() {
            // Not expected: `in_flight < DEPTH` leaves room.
            todo.push_front(i);
            break;
        }
        pushed.push_back(i);
        in_flight.0 += 1;
    }
}

/// Enters the kernel to submit what is queued, and drops from `pushed`
/// what it took. Returns false when the ring is to be given up: the enter
/// failed, or left entries untaken, past [`SUBMIT_TRIES`] transient tries
/// (`tries` counts them, reset by a submission that took everything).
fn submit(
    ring: &mut IoUring,
    pushed: &mut VecDeque<usize>,
    in_flight: &InKernel,
    tries: &mut u32,
    stats: &Stats,
) -> bool {
    let res = enter(ring, in_flight.0);
    // The kernel takes entries in order: what is left in the SQ is
    // the newest of `pushed`.
    let left = ring.submission().len();
    while pushed.len() > left {
        pushed.pop_front();
    }
    if matches!(res, Ok(n) if n > 0) {
        bump(&stats.enters, 1);
    }
    // Transient: an interrupted or refused enter, or one that left
    // entries untaken (the kernel short of memory); tried again,
    // 100 us apart, before the ring is given up.
    let errno = res.as_ref().err().and_then(io::Error::raw_os_error);
    let transient = match &res {
        Ok(_) => left > 0,
        Err(_) => matches!(errno, Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)),
    };
    if res.is_ok() && left == 0 {
        *tries = 0;
    } else if transient && *tries < SUBMIT_TRIES {
        *tries += 1;
        if errno != Some(libc::EINTR) {
            thread::sleep(Duration::from_micros(100));
        }
    } else {
        let why = res
            .err()
            .unwrap_or_else(|| io::Error::other("the kernel takes no entries"));
        log::error!(
            "aio: io_uring_enter on this thread's ring failed ({why}); its writes \
             run on this thread, and its later ones go through the shared ring"
        );
        return false;
    }
    true
}

/// Reaps the completions posted so far: an op done is finished (its
/// callback runs), one to go again (a short write) goes back to the front
/// of `todo`.
fn complete(
    ring: &mut IoUring,
    slots: &mut [Option<Box<InFlight>>],
    todo: &mut VecDeque<usize>,
    in_flight: &mut InKernel,
    stats: &Stats,
) {
    #[cfg(test)]
    if HOLD_ONCE.with(|h| h.replace(false)) {
        return;
    }
    let cqes: Vec<(u64, i32)> = ring
        .completion()
        .map(|c| (c.user_data(), c.result()))
        .collect();
    for (ud, res) in cqes {
        let Some(f) = slots.get_mut(ud as usize).and_then(Option::take) else {
            continue;
        };
        in_flight.0 -= 1;
        match f.settle(res) {
            Settled::Done(f, r) => {
                bump(&stats.uring_ops, 1);
                bump(&stats.caller_ring_ops, 1);
                f.op.finish(r, stats, true);
            }
            Settled::Again(f) => {
                bump(&stats.resubmits, 1);
                slots[ud as usize] = Some(f);
                todo.push_front(ud as usize);
            }
        }
    }
}

/// How many of a call's entries are pushed or in the kernel. Were a
/// panic to unwind out of [`run`] with any (an invariant broken, or a
/// backing's `write_blocks` panicking after the ring failed), the caller's
/// buffers would be freed while the kernel may still read them, and an
/// entry left in the queue would go out with a later batch: the process
/// aborts instead.
struct InKernel(usize);

impl Drop for InKernel {
    fn drop(&mut self) {
        if self.0 > 0 {
            log::error!(
                "aio: unwinding with {} writes in this thread's ring; aborting",
                self.0
            );
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aio::{IoEngine, IoEngineConfig, WriteReq};
    use crate::{AlignedBuf, Backing, FileBacking, FileOptions, IoBuf, IoBufMut, BLOCK};

    /// An io_uring engine and a fresh `O_DIRECT` file; `None` (skipped)
    /// where io_uring is missing.
    fn setup_file(test: &str) -> Option<(IoEngine, Arc<dyn Backing>, std::path::PathBuf)> {
        let engine = match IoEngine::new(IoEngineConfig::new().kind(crate::aio::EngineKind::Uring))
        {
            Ok(e) => e,
            Err(e) => {
                test_support::skip_or_fail(test, format_args!("io_uring missing: {e}"));
                return None;
            }
        };
        let path =
            std::env::temp_dir().join(format!("backing-caller-{test}-{}", std::process::id()));
        let file = FileBacking::open(
            &path,
            &FileOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true),
        )
        .unwrap();
        Some((engine, Arc::new(file), path))
    }

    /// Writes block `i` of a source to block `n - 1 - i` of the file,
    /// for each of its `n` blocks, in one `write_all`; checks every result
    /// and the file's bytes.
    fn write_reversed(engine: &IoEngine, file: &Arc<dyn Backing>, n: usize, seed: usize) {
        let mut src = AlignedBuf::zeroed(n * BLOCK).unwrap();
        for (i, b) in src.iter_mut().enumerate() {
            *b = (i / BLOCK * 7 + i % 251 + seed) as u8;
        }
        let bufs: Vec<[IoBuf<'_>; 1]> = src
            .chunks(BLOCK)
            .map(|c| [IoBuf::new(c).unwrap()])
            .collect();
        let reqs: Vec<WriteReq<'_>> = (0..n)
            .map(|i| WriteReq {
                backing: file,
                offset: ((n - 1 - i) * BLOCK) as u64,
                bufs: &bufs[i],
            })
            .collect();
        for r in engine.write_all(&reqs) {
            assert_eq!(r.unwrap(), BLOCK);
        }
        let mut got = AlignedBuf::zeroed(n * BLOCK).unwrap();
        let read = file
            .read_blocks(&mut [IoBufMut::new(&mut got[..]).unwrap()], 0)
            .unwrap();
        assert_eq!(read, n * BLOCK);
        for i in 0..n {
            let at = (n - 1 - i) * BLOCK;
            assert!(
                got[at..at + BLOCK] == src[i * BLOCK..(i + 1) * BLOCK],
                "block {i}"
            );
        }
    }

    /// Runs `f` on a thread of its own (its thread-locals fresh).
    fn on_new_thread(f: impl FnOnce() + Send) {
        std::thread::scope(|s| {
            s.spawn(f);
        });
    }

    /// Runs `f` with an io_uring engine and a fresh file, removed after;
    /// skipped where io_uring is missing.
    fn with_file(test: &str, f: impl FnOnce(&IoEngine, &Arc<dyn Backing>)) {
        if let Some((engine, file, path)) = setup_file(test) {
            f(&engine, &file);
            std::fs::remove_file(path).unwrap();
        }
    }

    #[test]
    fn a_batch_larger_than_the_ring_goes_through_it_in_parts() {
        with_file("larger_than_ring", |engine, file| {
            let n = 3 * DEPTH as usize + 5;
            on_new_thread(|| write_reversed(engine, file, n, 0));
            let s = engine.stats();
            assert_eq!(
                (s.writes, s.caller_ring_ops, s.pool_ops),
                (n as u64, n as u64, 0),
                "{s:?}"
            );
            assert!(s.enters >= 4, "{s:?}");
        });
    }

    #[test]
    fn a_thread_without_a_ring_of_its_own_writes_through_the_engines() {
        with_file("no_own_ring", |engine, file| {
            on_new_thread(|| {
                OWN.with(|s| *s.borrow_mut() = Slot::Unavailable);
                write_reversed(engine, file, 20, 0);
            });
            let s = engine.stats();
            assert_eq!((s.uring_ops, s.caller_ring_ops), (20, 0), "{s:?}");
        });
    }

    #[test]
    fn the_ring_defers_its_task_work_where_the_kernel_can() {
        with_file("deferred", |engine, file| {
            on_new_thread(|| {
                write_reversed(engine, file, 4, 0);
                OWN.with(|s| match &*s.borrow() {
                    Slot::Ready(own) => {
                        // 6.1 has it; older kernels set the ring up without.
                        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
                            .unwrap_or_default();
                        let mut v = release.split(['.', '-']).map(|p| p.parse::<u32>());
                        if let (Some(Ok(major)), Some(Ok(minor))) = (v.next(), v.next()) {
                            assert!(own.deferred || (major, minor) < (6, 1), "kernel {release}");
                        }
                    }
                    _ => panic!("no ring of this thread's own"),
                });
            });
        });
    }

    /// Writes through a ring that fails with every write in flight: the
    /// first enter submits them without waiting, the next fails for good.
    /// Each write is still reaped and lands; `deferred` picks the ring.
    fn ring_failing_with_writes_in_flight(test: &str, deferred: bool) {
        with_file(test, |engine, file| {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::scope(|s| {
                s.spawn(move || {
                    NO_DEFER.with(|d| d.set(!deferred));
                    write_reversed(engine, file, 4, 0);
                    OWN.with(|s| match &*s.borrow() {
                        Slot::Ready(own) => assert!(own.deferred || !deferred),
                        _ => panic!("no ring of this thread's own"),
                    });
                    NO_WAIT_ONCE.with(|w| w.set(true));
                    FAIL_ENTER.with(|e| e.set(libc::EFAULT));
                    write_reversed(engine, file, 12, 1);
                    OWN.with(|s| assert!(matches!(*s.borrow(), Slot::Unavailable)));
                    tx.send(()).unwrap();
                });
                // A deferred ring whose CQEs are never posted would leave
                // the writer waiting for good, and the scope with it: the
                // test binary fails rather than hang. (A writer that
                // panicked drops `tx`: the scope passes its panic on.)
                if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    rx.recv_timeout(Duration::from_secs(60))
                {
                    eprintln!(
                        "{test}: the writes in flight when the ring failed were never reaped"
                    );
                    std::process::abort();
                }
            });
            let s = engine.stats();
            assert_eq!((s.caller_ring_ops, s.pool_ops), (16, 0), "{s:?}");
        });
    }

    #[test]
    fn a_deferred_ring_that_fails_with_writes_in_flight_still_reaps_them() {
        ring_failing_with_writes_in_flight("failed_in_flight_deferred", true);
    }

    #[test]
    fn a_ring_that_fails_with_writes_in_flight_still_reaps_them() {
        ring_failing_with_writes_in_flight("failed_in_flight", false);
    }

    #[test]
    fn a_failed_enter_gives_the_ring_up_and_every_write_still_lands() {
        with_file("failed_enter", |engine, file| {
            on_new_thread(|| {
                // The ring works, then its enter fails for good: the writes
                // it never took run on this thread.
                write_reversed(engine, file, 10, 0);
                assert_eq!(engine.stats().caller_ring_ops, 10);
                FAIL_ENTER.with(|e| e.set(libc::EFAULT));
                write_reversed(engine, file, 10, 1);
                let s = engine.stats();
                assert_eq!((s.caller_ring_ops, s.pool_ops), (10, 10), "{s:?}");
                OWN.with(|s| assert!(matches!(*s.borrow(), Slot::Unavailable)));
                // Later batches of this thread go through the engine's ring.
                FAIL_ENTER.with(|e| e.set(0));
                write_reversed(engine, file, 10, 2);
                let s = engine.stats();
                assert_eq!(
                    (s.caller_ring_ops, s.pool_ops, s.uring_ops),
                    (10, 10, 20),
                    "{s:?}"
                );
            });
        });
    }
}
