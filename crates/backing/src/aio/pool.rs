//! The thread pool: threads that take ops from a queue, call
//! [`Backing::read_blocks`](crate::Backing::read_blocks) (or
//! `write_blocks`, for the writes of `IoEngine::write_all`) and then the
//! op's callback. The whole engine where io_uring is missing; under io_uring,
//! the path of ops whose backing has no file descriptor (memory, fault
//! injection), started on first use.
//!
//! ```text
//!  submit ──> queue (VecDeque, mutex + condvar) ──> thread 1: read/write_blocks, callback
//!                                              └──> thread 2: ...
//! ```

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use super::{mark_engine_thread, Op, Stats};
use crate::sync::{bump, lock, wait, AtomicBool, Condvar, Mutex, Ordering};
use crate::ThreadStart;

/// A pool of reader threads; dropping it finishes the queued ops and joins
/// the threads.
pub(super) struct Pool {
    shared: Arc<Shared>,
    /// The threads started so far (at most `want`).
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Whether all `want` threads run (so `submit` need not look).
    started: AtomicBool,
    want: usize,
    /// Run first on each thread.
    on_start: ThreadStart,
}

struct Shared {
    queue: Mutex<Queue>,
    work: Condvar,
    stats: Arc<Stats>,
}

struct Queue {
    ops: VecDeque<Op>,
    closing: bool,
}

impl Pool {
    /// A pool of `threads` threads, none started yet; each runs `on_start`
    /// first.
    pub(super) fn new(threads: usize, stats: Arc<Stats>, on_start: ThreadStart) -> Pool {
        Pool {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue {
                    ops: VecDeque::new(),
                    closing: false,
                }),
                work: Condvar::new(),
                stats,
            }),
            threads: Mutex::new(Vec::new()),
            started: AtomicBool::new(false),
            want: threads,
            on_start,
        }
    }

    /// Starts the threads not started yet.
    ///
    /// # Errors
    /// The OS's error when a thread cannot be spawned (the threads started
    /// before it keep running).
    pub(super) fn start(&self) -> io::Result<()> {
        if self.started.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut threads = lock(&self.threads);
        while threads.len() < self.want {
            let shared = self.shared.clone();
            let handle = self
                .on_start
                .spawn(format!("aio-pool-{}", threads.len()), move || {
                    worker(&shared)
                })?;
            threads.push(handle);
        }
        self.started.store(true, Ordering::Release);
        Ok(())
    }

    /// Queues `ops` for the pool's threads, starting them if needed. If no
    /// thread can be started at all, runs the ops here, callbacks included
    /// (and logs why).
    pub(super) fn submit(&self, ops: Vec<Op>) {
        if ops.is_empty() {
            return;
        }
        if let Err(e) = self.start() {
            if lock(&self.threads).is_empty() {
                log::error!(
                    "aio: cannot start a pool thread ({e}); running {} ops on the \
                     submitting thread",
                    ops.len()
                );
                for op in ops {
                    run(&self.shared.stats, op);
                }
                return;
            }
            log::warn!("aio: cannot start another pool thread ({e}); going on with fewer");
        }
        let n = ops.len();
        lock(&self.shared.queue).ops.extend(ops);
        if n == 1 {
            self.shared.work.notify_one();
        } else {
            self.shared.work.notify_all();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        lock(&self.shared.queue).closing = true;
        self.shared.work.notify_all();
        let me = thread::current().id();
        for handle in lock(&self.threads).drain(..) {
            // Dropped from a callback on one of our threads: that thread
            // finishes the queue and exits by itself.
            if handle.thread().id() == me {
                continue;
            }
            if handle.join().is_err() {
                log::error!("aio: a pool thread panicked outside a callback");
            }
        }
    }
}

/// A pool thread: runs queued ops until the pool closes and the queue is
/// empty.
fn worker(shared: &Shared) {
    mark_engine_thread();
    loop {
        let op = {
            let mut q = lock(&shared.queue);
            loop {
                if let Some(op) = q.ops.pop_front() {
                    break op;
                }
                if q.closing {
                    return;
                }
                q = wait(&shared.work, q);
            }
        };
        run(&shared.stats, op);
    }
}

/// Runs `op` with `read_blocks` or `write_blocks` and completes it.
fn run(stats: &Stats, op: Op) {
    bump(&stats.pool_ops, 1);
    op.run(stats);
}
