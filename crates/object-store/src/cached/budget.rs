//! The budget of remote GET bytes in flight: a GET of `n` bytes takes `n`
//! from it before it is sent and gives them back once its bytes are where
//! they go (the folios being filled; for a read-around window, the disk
//! tier, once its write is done).
//!
//! Without it, the bytes in flight grow with the readers: each blocking
//! miss, each of the IO engine's threads reading ahead, each read-around
//! window waiting for its tier write holds a GET's bytes at once, and
//! none of it is the cache's memory (docs/object-store.md, "Bounds").
//! With it, what the store holds beside the cache is at most the budget
//! (the kernel bounds its readahead the same way: a window is at most
//! `ra_pages`, and the pages it reads into are the page cache's).
//!
//! ```text
//!   miss ──> take(n) ──> GET ──> chunks copied into folios ──> permit dropped
//!            │  waits while the bytes in flight + n > budget
//!            └─ n > budget: takes the whole budget (the GET goes alone)
//! ```
//!
//! The semaphore is tokio's, fair (first come, first served), so a large
//! GET waiting for room is not passed by small ones forever; it counts
//! 4 KiB pages (`BLOCK`), so budgets up to 16 TiB fit its `u32` requests.
//!
//! # Locking
//! A GET takes its permit with the folio locks of the run it fills held
//! (inside `Backing::read_blocks`). That cannot deadlock: a permit's
//! holder waits for nothing but its GET, its copy, and (a read-around
//! window) its tier write, none of which takes a folio lock.

use super::object_store;
use std::sync::Arc;

use backing::BLOCK;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::remote::STORE;

/// The budget, in pages of [`BLOCK`] bytes.
#[derive(Debug)]
pub(crate) struct GetBudget {
    sem: Arc<Semaphore>,
    /// The budget's pages.
    pages: u32,
}

/// Bytes of a budget taken; given back when dropped.
pub(crate) type Taken = OwnedSemaphorePermit;

impl GetBudget {
    /// A budget of `bytes` (rounded up to a page, at least one).
    pub(crate) fn new(bytes: u64) -> Self {
        let pages = bytes.div_ceil(BLOCK as u64).clamp(1, u64::from(u32::MAX)) as u32;
        GetBudget {
            sem: Arc::new(Semaphore::new(pages as usize)),
            pages,
        }
    }

    /// The budget, in bytes.
    pub(crate) fn bytes(&self) -> u64 {
        u64::from(self.pages) * BLOCK as u64
    }

    /// The bytes not taken now.
    pub(crate) fn available(&self) -> u64 {
        self.sem.available_permits() as u64 * BLOCK as u64
    }

    /// Takes `bytes` as [`take`](Self::take) does if they are free now,
    /// without waiting.
    pub(crate) fn try_take(&self, bytes: u64) -> Option<Taken> {
        self.sem.clone().try_acquire_many_owned(self.pages_of(bytes)).ok()
    }

    /// `bytes` in pages, at most the whole budget.
    fn pages_of(&self, bytes: u64) -> u32 {
        bytes.div_ceil(BLOCK as u64).clamp(1, u64::from(self.pages)) as u32
    }

    /// Takes `bytes` (rounded up to pages; the whole budget if they are
    /// more), waiting until they are free.
    pub(crate) async fn take(&self, bytes: u64) -> object_store::Result<Taken> {
        match self.sem.clone().acquire_many_owned(self.pages_of(bytes)).await {
            Ok(p) => Ok(p),
            // Never closed; an error rather than a panic all the same.
            Err(e) => Err(object_store::Error::Generic {
                store: STORE,
                source: Box::new(e),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// A GET larger than the budget takes all of it, and goes once the
    /// others are back.
    #[test]
    fn an_oversize_take_waits_for_the_whole_budget() {
        run(async {
            let b = GetBudget::new(64 << 10);
            assert_eq!(b.bytes(), 64 << 10);
            let small = b.take(4096).await.unwrap();
            assert_eq!(b.available(), 60 << 10);
            let big = b.take(1 << 20);
            tokio::pin!(big);
            assert!(futures_util::poll!(big.as_mut()).is_pending());
            drop(small);
            let big = big.await.unwrap();
            assert_eq!(b.available(), 0);
            drop(big);
            assert_eq!(b.available(), 64 << 10);
        });
    }
}
