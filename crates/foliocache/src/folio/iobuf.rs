//! A locked folio's memory handed to IO: the buffers a read fills and a
//! write sends, and runs of locked folios read through the cache's IO
//! engine in one submission (the kernel's `read_pages`).

use std::fmt;
use std::io;
use std::sync::Arc;

use backing::aio::{IoEngine, ReadOp};
use backing::{Backing, IoBuf, IoBufMut, RawBuf};

use crate::arena::PageId;

use super::{Folio, FolioFlags, LockedFolio, MemoryOwner};

/// A locked folio's memory, handed to IO: a read fills a folio that is not
/// uptodate, a write sends one's bytes.
///
/// The lock and the `UPTODATE` flag make this safe. Readers copy out of a
/// folio only once it is uptodate (`Mapping::copy_out`, a pin), which only
/// its lock holder marks it; every writer of its bytes holds its lock (this
/// guard, or the `WritableFolio` that owns it). So while the guard is
/// borrowed mutably, nothing else writes the folio's memory, and a folio
/// that is not uptodate is not read either. The reference keeps the folio
/// from being freed, and the arena's memory stays mapped (initialised:
/// zero pages, or a heap block allocated zeroed under Miri) while the
/// cache lives, which outlives `'m`.
impl<'m> LockedFolio<'m> {
    /// The folio's memory, for a read to fill (`read_folio`, `read_pages`).
    /// Its bytes are whatever the memory held: zeros when fresh, else a
    /// previous folio's.
    ///
    /// # Panics
    /// If the folio is uptodate: readers may be copying out of it.
    pub(crate) fn fill_buf(&mut self) -> IoBufMut<'_> {
        assert!(
            !self.folio.test(FolioFlags::UPTODATE),
            "fill_buf: the folio is uptodate, readers may copy out of it"
        );
        let len = (self.folio.nr_pages() * crate::arena::PAGE) as usize;
        let ptr = self.mem.arena.page_ptr(self.page()).as_ptr();
        // SAFETY: the folio is locked by this guard and not uptodate (see
        // the `impl`'s comment): no other thread reads or writes its
        // memory, and the `&mut` borrow of the guard keeps this thread from
        // writing it otherwise while the buffer lives. The arena gives the
        // folio `len` bytes at `ptr`, 4 KiB aligned, initialised and mapped
        // for longer than the borrow.
        unsafe { IoBufMut::from_raw_parts(ptr, len) }.expect("arena folios are block aligned")
    }

    /// The folio's bytes, for a write to send (writeback).
    pub(crate) fn bytes_buf(&mut self) -> IoBuf<'_> {
        let len = (self.folio.nr_pages() * crate::arena::PAGE) as usize;
        let ptr = self.mem.arena.page_ptr(self.page()).as_ptr();
        // SAFETY: the folio is locked by this guard (see the `impl`'s
        // comment): no other thread writes its memory (readers only read
        // it), and the `&mut` borrow of the guard keeps this thread from
        // writing it while the bytes are borrowed. The arena gives the
        // folio `len` bytes at `ptr`, 4 KiB aligned, initialised and mapped
        // for longer than the borrow.
        unsafe { IoBuf::from_raw_parts(ptr, len) }.expect("arena folios are block aligned")
    }
}

/// Runs of locked folios read through the cache's IO engine, gathered to go
/// as one submission (the kernel's `read_pages`, for many runs at once).
/// Each run's guards go with its read: the engine fills the folios' memory
/// on its own thread, and the run's completion gets the guards back after
/// the engine dropped the buffers (the contract of
/// [`ReadOp`](backing::aio::ReadOp)), to finish the folios as a bio's
/// end_io does. The ops never leave this type but to the engine: that is
/// what lets the buffers' contract be kept here.
pub(crate) struct EngineReads {
    ops: Vec<ReadOp>,
}

/// A run's guards while its read is in flight: the folios' pages, each
/// still locked and referenced by the guard given up for it, and the cache
/// (with the arena's memory) kept alive until the completion.
struct InFlight<O> {
    owner: Arc<O>,
    pages: Vec<PageId>,
}

impl EngineReads {
    /// An empty batch with room for `n` runs.
    pub(crate) fn with_capacity(n: usize) -> Self {
        EngineReads {
            ops: Vec::with_capacity(n),
        }
    }

    /// The runs gathered.
    pub(crate) fn len(&self) -> usize {
        self.ops.len()
    }

    /// Adds the read of `run`, locked folios of `cache` that are not
    /// uptodate and cover contiguous pages, from byte `offset` of
    /// `backing`. `done` runs on the engine's thread with the guards given
    /// back and the read's result (as [`Backing::read_blocks`] gives it),
    /// after the engine dropped the buffers.
    ///
    /// # Panics
    /// If a folio is another cache's, or uptodate.
    pub(crate) fn push<O: MemoryOwner, F>(
        &mut self,
        owner: &Arc<O>,
        backing: Arc<dyn Backing>,
        offset: u64,
        run: Vec<LockedFolio<'_>>,
        done: F,
    ) where
        F: for<'c> FnOnce(&'c O, Vec<LockedFolio<'c>>, io::Result<usize>) + Send + 'static,
    {
        let mem = owner.memory();
        let mut bufs = Vec::with_capacity(run.len());
        let mut pages = Vec::with_capacity(run.len());
        for f in &run {
            assert!(
                std::ptr::eq(f.mem, mem),
                "EngineReads: a folio of another cache"
            );
            assert!(
                !f.folio.test(FolioFlags::UPTODATE),
                "EngineReads: the folio is uptodate, readers may copy out of it"
            );
            let page = f.page();
            let len = (f.folio.nr_pages() * crate::arena::PAGE) as usize;
            let ptr = mem.arena.page_ptr(page).as_ptr();
            // SAFETY: the folio is locked and not uptodate, so no other
            // thread reads or writes its memory (see `LockedFolio::fill_buf`)
            // until the completion below gets its guard back, which is after
            // the engine dropped this buffer (`ReadOp`'s contract; the op
            // goes nowhere but to the engine); the guard's reference, held
            // by `InFlight` meanwhile, keeps it from being freed; the
            // arena's memory stays mapped while the cache lives, which the
            // `Arc` in the completion guarantees (dropped after the
            // buffers). Arena pages are 4 KiB aligned.
            bufs.push(unsafe { RawBuf::new(ptr, len) }.expect("arena folios are block aligned"));
            pages.push(page);
        }
        for f in run {
            // (The lock and the reference go with the read.)
            std::mem::forget(f);
        }
        let held = InFlight {
            owner: owner.clone(),
            pages,
        };
        self.ops.push(ReadOp::new(backing, offset, bufs, move |r| {
            let owner = &*held.owner;
            let mem = owner.memory();
            let run = held
                .pages
                .iter()
                .map(|&page| LockedFolio {
                    mem,
                    folio: mem.folio(page.index()),
                })
                .collect();
            done(owner, run, r);
        }));
    }

    /// Submits the runs to `engine`, without waiting.
    pub(crate) fn submit(self, engine: &IoEngine) {
        engine.submit(self.ops);
    }
}

impl std::ops::Deref for LockedFolio<'_> {
    type Target = Folio;
    fn deref(&self) -> &Folio {
        self.folio
    }
}

impl Drop for LockedFolio<'_> {
    fn drop(&mut self) {
        self.folio.unlock();
        self.mem.put(self.folio);
    }
}

impl fmt::Debug for LockedFolio<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.folio.fmt(f)
    }
}
