//! The folio lock: a bit in the flags, sleepers parked in
//! `parking_lot_core`'s hashed wait table (the kernel's hashed folio wait
//! queues), and tasks that wait without a thread in a hashed table of
//! wakers (`folio_wait_bit` with a wake function).

use std::fmt;

#[cfg(not(loom))]
use parking_lot_core::{DEFAULT_PARK_TOKEN, DEFAULT_UNPARK_TOKEN};

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::sync::Ordering;

use super::{Folio, FolioFlags};

/// One bucket of the async wait table: the wakers of the tasks waiting for
/// a folio's lock, each with its folio's key.
pub(super) type WaiterList = crate::sync::Mutex<Vec<(usize, Waker)>>;

/// log2 of the buckets in the async wait table.
#[cfg(not(loom))]
const ASYNC_WAIT_BITS: u32 = 8;

/// The async wait table: buckets of wakers hashed by folio (shared by every
/// cache, as the parking lot's table is). A bucket is locked only by a task
/// that registers or takes back its waker and by an unlock that saw
/// `ASYNC_WAITERS`.
#[cfg(not(loom))]
static ASYNC_WAIT_TABLE: [WaiterList; 1 << ASYNC_WAIT_BITS] =
    [const { WaiterList::new(Vec::new()) }; 1 << ASYNC_WAIT_BITS];

/// The future of [`Folio::wait_unlocked_async`]: ready once the folio's
/// lock is free.
#[must_use = "futures do nothing unless polled"]
pub struct WaitUnlocked<'a> {
    folio: &'a Folio,
    /// The waker this future queued, while it may still be queued.
    queued: Option<Waker>,
}

impl Future for WaitUnlocked<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let folio = self.folio;
        // A task polled from another waker than the one it queued takes the
        // old one back (the unlock would wake it for nothing).
        if let Some(old) = self.queued.take() {
            if !old.will_wake(cx.waker()) {
                folio.unregister_waker(&old);
            }
        }
        if !folio.is_locked() || !folio.register_waker(cx.waker()) {
            return Poll::Ready(());
        }
        self.queued = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for WaitUnlocked<'_> {
    fn drop(&mut self) {
        if let Some(w) = self.queued.take() {
            self.folio.unregister_waker(&w);
        }
    }
}

impl fmt::Debug for WaitUnlocked<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitUnlocked")
            .field("flags", &self.folio.flags())
            .field("queued", &self.queued.is_some())
            .finish()
    }
}

impl Folio {
    // ---- the lock ----------------------------------------------------------

    #[cfg(not(loom))]
    fn key(&self) -> usize {
        self as *const Folio as usize
    }

    /// Takes the lock if it is free; never sleeps.
    pub(super) fn trylock(&self) -> bool {
        self.flags
            .fetch_or(FolioFlags::LOCKED.bits(), Ordering::Acquire)
            & FolioFlags::LOCKED.bits()
            == 0
    }

    /// Is the folio locked (by anyone)?
    pub fn is_locked(&self) -> bool {
        self.test(FolioFlags::LOCKED)
    }

    /// Takes the lock, sleeping while another thread holds it.
    ///
    /// # Locking
    /// May sleep. Never call it holding an index lock or another folio's
    /// lock out of file order.
    pub(super) fn lock(&self) {
        while !self.trylock() {
            self.sleep_while_locked();
        }
    }

    /// Sleeps until the lock is free, without taking it (a reader waiting
    /// for a read in progress to finish).
    pub fn wait_unlocked(&self) {
        while self.is_locked() {
            self.sleep_while_locked();
        }
    }

    fn sleep_while_locked(&self) {
        let locked_waiting = FolioFlags::LOCKED.bits() | FolioFlags::WAITERS.bits();
        // Announce a waiter, then sleep only if the lock is still held with
        // the announcement in place: an unlock between the two clears
        // WAITERS, the validation fails and we retry instead of sleeping
        // through the wake-up.
        self.flags
            .fetch_or(FolioFlags::WAITERS.bits(), Ordering::AcqRel);
        let validate = || self.flags.load(Ordering::Acquire) & locked_waiting == locked_waiting;
        // SAFETY: the key is this descriptor's address, which stays valid
        // for the cache's lifetime; `validate` and `before_sleep` neither
        // panic nor call into the parking lot.
        #[cfg(not(loom))]
        unsafe {
            parking_lot_core::park(
                self.key(),
                validate,
                || {},
                |_, _| {},
                DEFAULT_PARK_TOKEN,
                None,
            );
        }
        // Under loom, the same protocol with the parking lot modelled: the
        // sleeper samples the wake-up count, then validates, then waits
        // (yielding) for a wake-up counted after the sample, which only
        // `unlock` gives. `park` validates and enqueues under its bucket's
        // lock, which `unpark_all` takes too; sampling before validating
        // gives the same guarantee (an unlock that clears the flags after
        // the validation counts its wake-up after the sample). A wake-up
        // lost (an unlock that does not see WAITERS, or a lock released
        // without `unlock`) leaves the sleeper waiting forever, and the
        // model fails instead of passing because the sleeper happened to
        // re-check the flag.
        #[cfg(loom)]
        {
            let enqueued = self.wakeups.load(Ordering::SeqCst);
            if !validate() {
                return;
            }
            while self.wakeups.load(Ordering::SeqCst) == enqueued {
                loom::thread::yield_now();
            }
        }
    }

    /// Releases the lock and wakes every waiter (they race for it again;
    /// the losers go back to sleep).
    ///
    /// Unlocking a folio the caller did not lock is a bug, caught in debug
    /// builds.
    pub(super) fn unlock(&self) {
        let mask = !(FolioFlags::LOCKED.bits()
            | FolioFlags::WAITERS.bits()
            | FolioFlags::ASYNC_WAITERS.bits());
        let old = self.flags.fetch_and(mask, Ordering::Release);
        debug_assert!(
            old & FolioFlags::LOCKED.bits() != 0,
            "unlock of an unlocked folio"
        );
        // Under loom, `unpark_all` is a wake-up counted on the queue.
        #[cfg(loom)]
        if old & FolioFlags::WAITERS.bits() != 0 {
            self.wakeups.fetch_add(1, Ordering::SeqCst);
        }
        #[cfg(not(loom))]
        if old & FolioFlags::WAITERS.bits() != 0 {
            // SAFETY: unpark_all with this descriptor's address as the key,
            // as parked above.
            unsafe {
                parking_lot_core::unpark_all(self.key(), DEFAULT_UNPARK_TOKEN);
            }
        }
        if old & FolioFlags::ASYNC_WAITERS.bits() != 0 {
            self.wake_async();
        }
    }

    // ---- waiting without a thread ------------------------------------------

    /// This folio's list in the async wait table: a static table of
    /// buckets hashed by the descriptor's address (as the parking lot's),
    /// or under loom the folio's own.
    fn waiters(&self) -> &WaiterList {
        #[cfg(not(loom))]
        {
            let k = (self as *const Folio as usize as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            &ASYNC_WAIT_TABLE[(k >> (64 - ASYNC_WAIT_BITS)) as usize]
        }
        #[cfg(loom)]
        {
            &self.async_waiters
        }
    }

    /// The key of this folio's entries in its bucket.
    fn wait_key(&self) -> usize {
        self as *const Folio as usize
    }

    /// Queues `waker` to be woken when the lock bit clears, if it is set.
    /// Returns `false` when the folio is unlocked (nothing queued: look
    /// again). A waker already queued for this folio (`will_wake`) is
    /// replaced, so a task polled again while it waits stays queued once.
    ///
    /// Under the bucket's lock: announce `ASYNC_WAITERS`, and queue only if
    /// the lock bit was still set then. An unlock clears both bits in one
    /// step, so either it comes after the announcement and sees it (and
    /// takes the bucket's lock, after this queued, to wake), or it came
    /// before and this sees the folio unlocked and takes its announcement
    /// back (no other registration can be running: they hold the bucket's
    /// lock), leaving no stale bit.
    pub(crate) fn register_waker(&self, waker: &Waker) -> bool {
        let mut list = self.waiters().lock();
        let old = self
            .flags
            .fetch_or(FolioFlags::ASYNC_WAITERS.bits(), Ordering::AcqRel);
        if old & FolioFlags::LOCKED.bits() == 0 {
            self.flags
                .fetch_and(!FolioFlags::ASYNC_WAITERS.bits(), Ordering::Relaxed);
            return false;
        }
        let key = self.wait_key();
        match list
            .iter_mut()
            .find(|(k, w)| *k == key && w.will_wake(waker))
        {
            Some((_, w)) => w.clone_from(waker),
            None => list.push((key, waker.clone())),
        }
        true
    }

    /// Takes back a waker queued by [`register_waker`](Self::register_waker)
    /// for this folio, if it is still queued (a future dropped while it
    /// waited).
    pub(crate) fn unregister_waker(&self, waker: &Waker) {
        let key = self.wait_key();
        let mut list = self.waiters().lock();
        if let Some(i) = list
            .iter()
            .position(|(k, w)| *k == key && w.will_wake(waker))
        {
            list.swap_remove(i);
        }
    }

    /// Wakes every waker queued for this folio (an unlock that saw
    /// `ASYNC_WAITERS`), after letting go of the bucket's lock: a waker
    /// may run code that polls again.
    #[cold]
    fn wake_async(&self) {
        let key = self.wait_key();
        let mut woken = Vec::new();
        {
            let mut list = self.waiters().lock();
            let mut i = 0;
            while i < list.len() {
                if list[i].0 == key {
                    woken.push(list.swap_remove(i).1);
                } else {
                    i += 1;
                }
            }
        }
        for w in woken {
            w.wake();
        }
    }

    /// Waits for the lock to be free without a thread: the async form of
    /// [`wait_unlocked`](Self::wait_unlocked). The future is ready at once
    /// when the folio is unlocked (no waker registered); otherwise its
    /// task's waker is queued and woken by the unlock, together with every
    /// other task waiting on this folio. Dropped while it waits, it takes
    /// its waker back.
    pub fn wait_unlocked_async(&self) -> WaitUnlocked<'_> {
        WaitUnlocked {
            folio: self,
            queued: None,
        }
    }
}
