//! Work an async call hands to the cache's writeback pool, and the tasks
//! waiting for its end (module documentation: `future/mod.rs`; design:
//! `docs/async.md`, "How a sync, a throttled write and set_len wait").
//!
//! A [`Done`] is one job's end: its result once the job ran, and the
//! wakers of the tasks waiting for it. The job, on a pool thread, sets the
//! result and wakes every queued waker after letting go of the lock (a
//! woken task may poll at once, on any thread). A task's [`Wait`] polls
//! it: the result if it is there, else its waker queued (a waker of the
//! same task replaced) and `Pending`; the registration and the result are
//! set under the same lock, so a waker is never lost. A dropped `Wait`
//! takes its waker back. Many tasks wait on one `Done` (syncs of a file
//! sharing one writeback, throttled writers of a file sharing one), and
//! all wake at its end.
//!
//! A file's jobs not yet started ([`Jobs`]) are shared: a sync joins the
//! file's queued sync of the same kind (it has not started, so it covers
//! every write that returned before the join), a throttled writer joins
//! the queued throttle of its file, adding its pages. One pool thread at
//! a time runs a file's syncs (and one its throttles), taking each queued
//! job out of the queue as it starts it; calls meanwhile queue the next
//! one. A burst of syncs of a file thus costs two jobs or so, and holds
//! one pool thread, not every one of them waiting on the file's
//! `wb_lock`.
//!
//! A cache's memory job ([`Jobs::memory`]) is joined by every async read
//! or write that found no memory without waiting while it runs: it waits
//! as a blocking allocation waits for reclaim (`CacheInner::wait_for_room`),
//! on one pool thread however many tasks wait (`docs/async.md`, "Waiting
//! for memory").

use std::collections::BTreeMap;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::file::File;
use crate::sync::Mutex;

/// A copy of an [`io::Error`] that many waiters can each turn back into
/// one: the OS error number if it has one, else the kind and the message.
#[derive(Clone, Debug)]
pub(crate) struct SharedError {
    kind: io::ErrorKind,
    os: Option<i32>,
    msg: String,
}

impl SharedError {
    fn new(e: &io::Error) -> SharedError {
        SharedError {
            kind: e.kind(),
            os: e.raw_os_error(),
            msg: e.to_string(),
        }
    }

    fn to_io(&self) -> io::Error {
        match self.os {
            Some(n) => io::Error::from_raw_os_error(n),
            None => io::Error::new(self.kind, self.msg.clone()),
        }
    }
}

/// A job's result, shared by its waiters.
type Shared = Result<(), SharedError>;

/// One job's end: its result, and the tasks waiting for it.
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
pub struct Done {
    state: Mutex<DoneState>,
}

#[derive(Default)]
struct DoneState {
    result: Option<Shared>,
    /// The waiting tasks, by their `Wait`'s number.
    wakers: Vec<(u64, Waker)>,
    next: u64,
}

#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
impl Done {
    /// A job's end, not yet reached.
    pub fn new() -> Arc<Done> {
        Arc::new(Done {
            state: Mutex::new(DoneState::default()),
        })
    }

    /// The job's end: its result kept, every waiting task woken (after
    /// the lock is let go).
    pub fn complete(&self, r: &io::Result<()>) {
        let wakers = {
            let mut st = self.state.lock();
            st.result = Some(r.as_ref().map(|_| ()).map_err(SharedError::new));
            std::mem::take(&mut st.wakers)
        };
        for (_, w) in wakers {
            w.wake();
        }
    }

    /// Tasks waiting now.
    #[cfg(any(test, loom))]
    pub fn waiting(&self) -> usize {
        self.state.lock().wakers.len()
    }
}

/// A task's wait for a [`Done`]: polled until the job ended; dropped, it
/// takes its waker back.
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
pub struct Wait {
    done: Arc<Done>,
    /// The number of this wait's queued waker, once it queued one.
    id: Option<u64>,
}

#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
impl Wait {
    /// A wait for `done`.
    pub fn new(done: Arc<Done>) -> Wait {
        Wait { done, id: None }
    }

    /// The job's result once it ended; else this task's waker queued.
    pub fn poll(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = self.done.state.lock();
        if let Some(r) = &st.result {
            let r = r.as_ref().map(|_| ()).map_err(SharedError::to_io);
            // (The completion took every waker.)
            self.id = None;
            return Poll::Ready(r);
        }
        match self.id {
            Some(id) => {
                if let Some((_, w)) = st.wakers.iter_mut().find(|(i, _)| *i == id) {
                    if !w.will_wake(cx.waker()) {
                        w.clone_from(cx.waker());
                    }
                }
            }
            None => {
                let id = st.next;
                st.next += 1;
                st.wakers.push((id, cx.waker().clone()));
                self.id = Some(id);
            }
        }
        Poll::Pending
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            let w = {
                let mut st = self.done.state.lock();
                let at = st.wakers.iter().position(|(i, _)| *i == id);
                at.map(|k| st.wakers.swap_remove(k))
            };
            // (The waker drops with no lock held: dropping a task's last
            // waker may run its executor's code.)
            drop(w);
        }
    }
}

/// Runs `work` on the cache's writeback pool with a handle of its own on
/// the file (so the job outlives the future that started it, and the
/// file, the cache with it, lives until the job ends).
fn spawn(file: &File, work: impl FnOnce(&File) + Send + 'static) {
    let f = file.clone();
    file.mapping().inner().bdi.pool().spawn(Box::new(move || {
        work(&f);
        // The handle goes last, after the waiters were woken (a last
        // handle's close writes back).
        drop(f);
    }));
}

/// Runs `work` and ends `done` with its result, a panic's included.
fn finish(done: &Done, work: impl FnOnce() -> io::Result<()>) {
    let r = catch_unwind(AssertUnwindSafe(work))
        .unwrap_or_else(|_| Err(io::Error::other("foliocache: an async job panicked")));
    done.complete(&r);
}

/// Runs `work` on the writeback pool; the wait for its end.
pub(crate) fn run(
    file: &File,
    work: impl FnOnce(&File) -> io::Result<()> + Send + 'static,
) -> Wait {
    let done = Done::new();
    let d = done.clone();
    spawn(file, move |f| finish(&d, || work(f)));
    Wait::new(done)
}

/// A file's async syncs and throttles: queued ones, which later calls
/// join, and whether a pool thread is running the file's syncs (or its
/// throttles). One thread at a time runs a file's jobs of a kind, one
/// after another, so that a burst of syncs takes one or two pool threads,
/// not all of them waiting for the file's `wb_lock` side by side.
#[derive(Default)]
struct Pending {
    /// A queued `sync_data` (0) and `sync_all` (1).
    sync: [Option<Arc<Done>>; 2],
    /// A queued throttle, and the pages its writers are about to dirty.
    throttle: Option<(Arc<Done>, u64)>,
    /// A pool thread runs the file's syncs ([`SYNCS`]), its throttles
    /// ([`THROTTLES`]).
    running: [bool; 2],
}

/// The files' [`Pending`] jobs, by the address of their mapping, present
/// only while a runner runs (it holds a handle, so the mapping lives and
/// its address names no other) or a job is queued (a queued job has a
/// runner): an idle file's entry goes. One table for every cache (the
/// calls that reach it are syncs, and writers over the dirty limit), a
/// std mutex: a static, which no loom model reaches (they model a job's
/// end, `Done`).
#[allow(clippy::disallowed_types)]
static QUEUED: std::sync::Mutex<BTreeMap<usize, Pending>> = std::sync::Mutex::new(BTreeMap::new());

/// Runs `f` on `file`'s queued jobs (an idle file's entry dropped after).
fn with_pending<R>(file: &File, f: impl FnOnce(&mut Pending) -> R) -> R {
    let key = Arc::as_ptr(&file.mapping) as usize;
    // (A panic never leaves the table half changed: `f` only sets fields.)
    let mut t = QUEUED.lock().unwrap_or_else(|e| e.into_inner());
    let p = t.entry(key).or_default();
    let r = f(p);
    if !p.running.contains(&true) && p.sync.iter().all(Option::is_none) && p.throttle.is_none() {
        t.remove(&key);
    }
    r
}

/// The kinds of a file's shared jobs (indices of `Pending::running`).
const SYNCS: usize = 0;
const THROTTLES: usize = 1;

/// One queued job of a kind, taken to run.
enum Queued {
    Sync(bool),
    Throttle(u64),
}

impl Pending {
    /// The next queued job of `kind`, taken out of the queue; none: the
    /// runner of that kind stops (under the same lock, so a later call
    /// starts another).
    fn next(&mut self, kind: usize) -> Option<(Arc<Done>, Queued)> {
        let next = if kind == SYNCS {
            let all = self.sync[1].is_some();
            self.sync[usize::from(all)]
                .take()
                .map(|d| (d, Queued::Sync(all)))
        } else {
            self.throttle
                .take()
                .map(|(d, pages)| (d, Queued::Throttle(pages)))
        };
        if next.is_none() {
            self.running[kind] = false;
        }
        next
    }
}

/// The shared jobs of a file: its syncs and throttles (see the module
/// documentation).
pub(crate) struct Jobs;

impl Jobs {
    /// The wait for a sync of `file` (`all`: `sync_all`): the file's queued
    /// one of that kind, or a new one.
    pub(crate) fn sync(file: &File, all: bool) -> Wait {
        Self::queue(file, SYNCS, |p| {
            let slot = &mut p.sync[usize::from(all)];
            slot.get_or_insert_with(Done::new).clone()
        })
    }

    /// The wait for a throttle of `file` by a writer about to dirty
    /// `pages` pages (`writeback::throttle`): the file's queued one, its
    /// pages added, or a new one.
    pub(crate) fn throttle(file: &File, pages: u64) -> Wait {
        Self::queue(file, THROTTLES, |p| {
            let (d, debt) = p.throttle.get_or_insert_with(|| (Done::new(), 0));
            *debt = debt.saturating_add(pages);
            d.clone()
        })
    }

    /// Queues (or joins) a job of `kind` with `join`, and starts the
    /// file's runner of that kind if none runs: a job on the pool that
    /// runs the queued jobs of that kind until none is left.
    fn queue(file: &File, kind: usize, join: impl FnOnce(&mut Pending) -> Arc<Done>) -> Wait {
        let (done, start) = with_pending(file, |p| {
            let done = join(p);
            (done, !std::mem::replace(&mut p.running[kind], true))
        });
        if start {
            spawn(file, move |f| {
                while let Some((done, job)) = with_pending(f, |p| p.next(kind)) {
                    finish(&done, || match job {
                        Queued::Sync(all) => f.sync_unreported(all),
                        Queued::Throttle(pages) => crate::writeback::throttle(f.mapping(), pages),
                    });
                }
            });
        }
        Wait::new(done)
    }
}

/// Each cache's job making room for the async reads and writes that found
/// no memory without waiting, by the address of the cache's shared state
/// (`CacheInner`): present only while the job runs (it holds a handle on
/// a file, so the cache lives and its address names no other). Joined by
/// every task short of memory meanwhile: one pool thread per cache waits
/// for reclaim, however many tasks wait for it. A std mutex, for the
/// reasons of [`QUEUED`]'s.
#[allow(clippy::disallowed_types)]
static MEMORY: std::sync::Mutex<BTreeMap<usize, Arc<Done>>> =
    std::sync::Mutex::new(BTreeMap::new());

/// Takes a cache's memory job out of [`MEMORY`] when dropped: at the
/// job's end (a panic's included), before its waiters wake, so that a task
/// that comes after the end starts a job of its own.
struct Unlist(usize);

impl Drop for Unlist {
    fn drop(&mut self) {
        let mut t = MEMORY.lock().unwrap_or_else(|e| e.into_inner());
        t.remove(&self.0);
    }
}

impl Jobs {
    /// The wait for room in `file`'s cache: its memory job running, or a
    /// new one that waits until `pages` pages are free as an allocation
    /// waits for reclaim (`CacheInner::wait_for_room`: direct reclaim, the
    /// flusher kicked, the bounded wait for folios to become clean). The
    /// task then allocates on its own poll, without waiting; if another
    /// task took the room first it finds none and waits again. The job's
    /// error is the blocking allocation's `OutOfMemory` (its wait ran out):
    /// its tasks then allocate as the blocking calls do.
    pub(crate) fn memory(file: &File, pages: u64) -> Wait {
        let key = std::ptr::from_ref(file.mapping().inner()) as usize;
        let (done, start) = {
            let mut t = MEMORY.lock().unwrap_or_else(|e| e.into_inner());
            match t.get(&key) {
                Some(d) => (d.clone(), false),
                None => {
                    let d = Done::new();
                    t.insert(key, d.clone());
                    (d, true)
                }
            }
        };
        if start {
            let d = done.clone();
            spawn(file, move |f| {
                finish(&d, || {
                    let _unlisted = Unlist(key);
                    f.mapping().inner().wait_for_room(pages)
                });
            });
        }
        Wait::new(done)
    }
}

#[cfg(all(test, not(loom)))]
// The test's waker counts with std's atomic: test code, not a protocol
// of the crate's (the loom models are below).
#[allow(clippy::disallowed_types)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    #[derive(Default)]
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn every_waiter_wakes_at_the_end_and_gets_the_error() {
        let done = Done::new();
        let counts: Vec<Arc<Count>> = (0..3).map(|_| Arc::default()).collect();
        let mut waits: Vec<Wait> = (0..3).map(|_| Wait::new(done.clone())).collect();
        for (w, c) in waits.iter_mut().zip(&counts) {
            let waker = Waker::from(c.clone());
            assert!(w.poll(&mut Context::from_waker(&waker)).is_pending());
            // A second poll with the same waker queues nothing more.
            assert!(w.poll(&mut Context::from_waker(&waker)).is_pending());
        }
        assert_eq!(done.waiting(), 3);
        // A dropped wait takes its waker back.
        drop(waits.pop());
        assert_eq!(done.waiting(), 2);
        done.complete(&Err(io::Error::from_raw_os_error(libc::EIO)));
        assert_eq!(done.waiting(), 0);
        for c in &counts[..2] {
            assert_eq!(c.0.load(Ordering::SeqCst), 1);
        }
        assert_eq!(counts[2].0.load(Ordering::SeqCst), 0);
        for mut w in waits {
            let waker = Waker::from(counts[0].clone());
            match w.poll(&mut Context::from_waker(&waker)) {
                Poll::Ready(Err(e)) => assert_eq!(e.raw_os_error(), Some(libc::EIO)),
                r => panic!("{r:?}"),
            }
        }
        // A wait that starts after the end is ready at once.
        let mut late = Wait::new(done.clone());
        let waker = Waker::from(counts[0].clone());
        assert!(late.poll(&mut Context::from_waker(&waker)).is_ready());
        assert_eq!(done.waiting(), 0);
    }

    /// Tasks short of memory while the cache's memory job runs join it;
    /// its error (nothing can be freed: every folio is a memory file's)
    /// is every waiter's, and the next call after its end starts another.
    #[test]
    #[cfg_attr(miri, ignore = "waits out the allocation's bounded wait")]
    fn tasks_short_of_memory_join_the_caches_one_memory_job() {
        let cache = crate::Cache::builder().capacity(64 * 4096).build().unwrap();
        let file = cache.memfile("full", 0).unwrap();
        file.write_all_at(&vec![7u8; 64 * 4096], 0).unwrap();
        let arena = &file.mapping().inner().mem.arena;
        assert_eq!(arena.free_pages(), 0, "the cache has room");
        let mut first = Jobs::memory(&file, 1);
        let mut second = Jobs::memory(&file, 4);
        assert!(Arc::ptr_eq(&first.done, &second.done), "two memory jobs");
        let count = Arc::new(Count::default());
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        for w in [&mut first, &mut second] {
            let r = loop {
                match w.poll(&mut cx) {
                    Poll::Ready(r) => break r,
                    Poll::Pending => std::thread::sleep(std::time::Duration::from_millis(5)),
                }
            };
            assert_eq!(r.unwrap_err().kind(), io::ErrorKind::OutOfMemory);
        }
        let third = Jobs::memory(&file, 1);
        assert!(
            !Arc::ptr_eq(&first.done, &third.done),
            "a job ended is joined"
        );
    }
}
