//! The writeback pool: a few threads per cache, started with the flusher
//! and joined when the cache goes, that carry the writes of one writeback
//! run side by side, so scattered dirty pages keep several writes in
//! flight (the kernel's flusher, `wb_workfn`, gets that from the block
//! layer's queue). It serves backings without a file descriptor (memory,
//! fault injection) and hosts without io_uring: a file with a descriptor
//! writes back through the cache's ring instead (`IoEngine::write_all`).
//! See docs/design.md, section 9.
//!
//! [`WbPool::run`] runs jobs `0..n` of one closure and returns once every
//! one has returned. The caller takes part: it posts at most one ticket
//! per idle-able worker to a bounded queue (none when the queue is full)
//! and then claims jobs itself, like any worker, until none is left. So a
//! batch never waits for a free worker: with every worker busy (many files
//! writing back at once) or the queue full, its caller runs all of it.
//!
//! [`WbPool::spawn`] queues one detached job (an async call's sync,
//! throttle or size change: `future/job.rs`), run by the first idle
//! worker after the batches' tickets; with no worker it runs on the
//! caller.
//!
//! # Deadlock freedom
//! A job is one backing write of buffers its caller holds: it takes no
//! lock of the cache (no folio lock, no `wb_lock`, no index lock) and
//! waits for no writer. The caller waits holding its folio locks and its
//! `wb_lock`, but only for jobs already running, each of which finishes
//! on its own; jobs nobody has claimed it runs itself. A throttled writer
//! (`balance_dirty_pages`) or the flusher waiting in `run` therefore never
//! waits for something only a waiting writer could give up. A detached
//! job takes the locks a blocking sync, throttled writer or `set_len`
//! takes, in their order, and waits for no other job: a batch's caller
//! never waits for a worker a job holds (it runs unclaimed jobs itself),
//! and no async task holds a folio lock or the inode lock while it waits
//! for a job.

// (A plain lock, condition variables and atomics, even under loom: there
// is no worker thread under loom, and `run` then calls the jobs in turn.)
#![allow(clippy::disallowed_types)]

use backing::ThreadStart;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Threads a cache's pool starts (the caller of [`WbPool::run`] is one
/// more): up to eight writes of a run in flight.
pub(crate) const WB_WORKERS: usize = 7;

/// Tickets waiting in the queue at most: past it a caller runs its batch
/// alone rather than queue behind other batches.
const QUEUE_CAP: usize = 4 * WB_WORKERS;

/// The jobs `0..n` of one [`WbPool::run`]: the caller's closure, borrowed
/// for the call's length (see `run`'s SAFETY).
struct Batch {
    job: *const (dyn Fn(usize) + Sync),
    n: usize,
    /// The next job nobody has claimed.
    next: AtomicUsize,
    /// Jobs that returned.
    done: parking_lot::Mutex<usize>,
    all_done: parking_lot::Condvar,
}

// SAFETY: `job` points to a `Sync` closure, called through a shared
// reference only; every other field is `Send + Sync`.
unsafe impl Send for Batch {}
// SAFETY: as for `Send`.
unsafe impl Sync for Batch {}

impl Batch {
    /// Claims and runs jobs until none is left. A job that panics counts as
    /// done (the caller's closure sees its result missing).
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.n {
                return;
            }
            // SAFETY: job `i < n` was claimed before `done` reached `n`, and
            // `run` does not return (so the closure lives) until it has.
            let job = unsafe { &*self.job };
            let _ = catch_unwind(AssertUnwindSafe(|| job(i)));
            let mut d = self.done.lock();
            *d += 1;
            if *d == self.n {
                self.all_done.notify_all();
            }
        }
    }
}

/// A detached job of [`WbPool::spawn`].
pub(crate) type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Queue {
    tickets: std::collections::VecDeque<Arc<Batch>>,
    /// Detached jobs, taken after the tickets.
    jobs: std::collections::VecDeque<Job>,
    stop: bool,
}

#[derive(Default)]
struct Shared {
    queue: parking_lot::Mutex<Queue>,
    wake: parking_lot::Condvar,
}

/// A cache's writeback threads (see the module documentation).
pub(crate) struct WbPool {
    shared: Arc<Shared>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

impl WbPool {
    /// A pool without threads: [`run`](Self::run) calls the jobs in turn
    /// (under loom, and where the OS refuses threads).
    pub(crate) fn inline() -> WbPool {
        WbPool {
            shared: Arc::default(),
            workers: Vec::new(),
        }
    }

    /// A pool of `workers` threads. If the OS refuses some, the pool has
    /// fewer (at worst none: callers run their jobs alone). Each runs
    /// `on_start` first.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn new(workers: usize, on_start: &ThreadStart) -> WbPool {
        let mut pool = WbPool::inline();
        for k in 0..workers {
            let shared = pool.shared.clone();
            match on_start.spawn(format!("foliocache-wb{k}"), move || worker(&shared)) {
                Ok(h) => pool.workers.push(h),
                Err(e) => {
                    log::warn!("foliocache: writeback pool: only {k} threads ({e})");
                    break;
                }
            }
        }
        pool
    }

    /// Threads of the pool.
    #[cfg(test)]
    pub(crate) fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Runs `job(0)`, ..., `job(n - 1)`, on the pool's threads and the
    /// caller's, and returns once each has returned (a job that panicked,
    /// too: its panic is caught, and its result is whatever the closure
    /// recorded, i.e. nothing).
    pub(crate) fn run(&self, n: usize, job: &(dyn Fn(usize) + Sync)) {
        let helpers = self.workers.len().min(n.saturating_sub(1));
        if helpers == 0 {
            for i in 0..n {
                let _ = catch_unwind(AssertUnwindSafe(|| job(i)));
            }
            return;
        }
        // SAFETY: the borrow's lifetime is erased so that worker threads can
        // hold the batch; they call `job` only for a claimed index below
        // `n` (`Batch::work`), and this function returns only once `done`
        // reached `n`, i.e. after every such call returned (the wait below
        // cannot be skipped: nothing between here and it unwinds, `work`
        // catches the jobs' panics). A ticket a worker pops later finds no
        // job left and never touches `job`.
        let job: *const (dyn Fn(usize) + Sync + 'static) = unsafe {
            std::mem::transmute::<
                *const (dyn Fn(usize) + Sync + '_),
                *const (dyn Fn(usize) + Sync + 'static),
            >(job)
        };
        let batch = Arc::new(Batch {
            job,
            n,
            next: AtomicUsize::new(0),
            done: parking_lot::Mutex::new(0),
            all_done: parking_lot::Condvar::new(),
        });
        {
            let mut q = self.shared.queue.lock();
            let room = QUEUE_CAP.saturating_sub(q.tickets.len()).min(helpers);
            for _ in 0..room {
                q.tickets.push_back(batch.clone());
            }
            for _ in 0..room {
                self.shared.wake.notify_one();
            }
        }
        batch.work();
        let mut d = batch.done.lock();
        while *d < n {
            batch.all_done.wait(&mut d);
        }
    }

    /// Runs `job` on a worker, after the tickets queued, and returns at
    /// once; with no worker (an inline pool), runs it on the caller first.
    /// A job that panics is caught (it must report its own end: see
    /// `future/job.rs`).
    pub(crate) fn spawn(&self, job: Job) {
        if self.workers.is_empty() {
            let _ = catch_unwind(AssertUnwindSafe(job));
            return;
        }
        self.shared.queue.lock().jobs.push_back(job);
        self.shared.wake.notify_one();
    }
}

/// What a worker takes next.
enum Work {
    Ticket(Arc<Batch>),
    Job(Job),
}

/// A worker: takes tickets until the pool stops.
fn worker(shared: &Shared) {
    loop {
        let work = {
            let mut q = shared.queue.lock();
            loop {
                if let Some(t) = q.tickets.pop_front() {
                    break Work::Ticket(t);
                }
                if let Some(j) = q.jobs.pop_front() {
                    break Work::Job(j);
                }
                if q.stop {
                    return;
                }
                shared.wake.wait(&mut q);
            }
        };
        match work {
            Work::Ticket(t) => t.work(),
            Work::Job(j) => {
                let _ = catch_unwind(AssertUnwindSafe(j));
            }
        }
    }
}

impl Drop for WbPool {
    /// Stops and joins the threads. No batch is running: each holds the
    /// cache that owns the pool until it returns. A detached job holds the
    /// cache too (through its file): when it held the last reference, the
    /// pool is dropped on that worker, which cannot join itself; it is
    /// left to exit on its own (it sees `stop` once the job returns).
    fn drop(&mut self) {
        self.shared.queue.lock().stop = true;
        self.shared.wake.notify_all();
        let me = std::thread::current().id();
        for h in self.workers.drain(..) {
            if h.thread().id() != me {
                let _ = h.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Barrier;

    #[test]
    fn runs_every_job_once_and_waits_for_all() {
        let pool = WbPool::new(3, &ThreadStart::default());
        assert_eq!(pool.workers(), 3);
        for n in [0, 1, 2, 7, 100] {
            let hits: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
            pool.run(n, &|i| {
                std::thread::sleep(std::time::Duration::from_micros(100));
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn jobs_run_side_by_side() {
        // Four jobs that each wait for all four: only done if the three
        // workers and the caller run them at once.
        let pool = WbPool::new(3, &ThreadStart::default());
        let b = Barrier::new(4);
        pool.run(4, &|_| {
            b.wait();
        });
    }

    #[test]
    fn a_panicking_job_does_not_stop_the_others_or_the_pool() {
        let pool = WbPool::new(2, &ThreadStart::default());
        let ok = AtomicU64::new(0);
        pool.run(10, &|i| {
            assert!(i != 3, "job 3 fails");
            ok.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(ok.load(Ordering::Relaxed), 9);
        pool.run(5, &|_| {
            ok.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(ok.load(Ordering::Relaxed), 14);
    }

    #[test]
    fn many_callers_at_once_all_finish() {
        let pool = WbPool::new(2, &ThreadStart::default());
        let total = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..50 {
                        pool.run(9, &|_| {
                            total.fetch_add(1, Ordering::Relaxed);
                        });
                    }
                });
            }
        });
        assert_eq!(total.load(Ordering::Relaxed), 8 * 50 * 9);
    }

    #[test]
    fn drop_joins_the_workers() {
        let pool = WbPool::new(4, &ThreadStart::default());
        let shared = Arc::downgrade(&pool.shared);
        pool.run(16, &|_| {});
        drop(pool);
        // Each worker held the shared state until it returned.
        assert!(shared.upgrade().is_none(), "every worker exited");
    }

    #[test]
    fn spawned_jobs_run_on_a_worker_and_may_drop_the_pool() {
        let pool = WbPool::new(2, &ThreadStart::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let me = std::thread::current().id();
        for i in 0..10 {
            let tx = tx.clone();
            pool.spawn(Box::new(move || {
                assert_ne!(std::thread::current().id(), me);
                tx.send(i).unwrap();
            }));
        }
        let mut got: Vec<i32> = (0..10).map(|_| rx.recv().unwrap()).collect();
        got.sort_unstable();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        // A job that holds the pool's last reference drops it on its
        // worker: no self-join (which would fail), the others joined.
        let (tx, rx) = std::sync::mpsc::channel();
        let holder = Arc::new(parking_lot::Mutex::new(Some(pool)));
        let h2 = holder.clone();
        holder.lock().as_ref().unwrap().spawn(Box::new(move || {
            let p = h2.lock().take();
            drop(p);
            tx.send(()).unwrap();
        }));
        rx.recv().unwrap();
        assert!(holder.lock().is_none());
    }

    #[test]
    fn an_inline_pool_runs_spawned_jobs_on_the_caller() {
        let pool = WbPool::inline();
        let me = std::thread::current().id();
        let ran = Arc::new(AtomicU64::new(0));
        let r = ran.clone();
        pool.spawn(Box::new(move || {
            assert_eq!(std::thread::current().id(), me);
            r.fetch_add(1, Ordering::Relaxed);
        }));
        assert_eq!(ran.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn an_inline_pool_runs_jobs_on_the_caller() {
        let pool = WbPool::inline();
        let me = std::thread::current().id();
        pool.run(3, &|_| assert_eq!(std::thread::current().id(), me));
    }
}
