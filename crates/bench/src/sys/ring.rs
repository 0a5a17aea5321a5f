//! An io_uring of one job thread's own, for the `direct[qd=N]` engine:
//! `N` reads of `bs` bytes on an `O_DIRECT` descriptor in flight from the
//! thread, each in a buffer of its own (a slot), with no other thread
//! involved (the library's `backing::aio` engine completes its reads on a
//! thread of its own: a different shape, for a cache).
//!
//! ```text
//!  queue(slot, off)  push an IORING_OP_READ SQE (user_data = slot), not yet entered
//!  wait(out)         ONE io_uring_enter(to_submit, min_complete 1) ──> kernel
//!                    reap every CQE into `out`: (slot, res); the slots are free again
//! ```
//!
//! # Invariants
//! - A slot's buffer is read into by the kernel only between its `queue`
//!   and the reap of its CQE; `busy` marks those slots and `in_flight`
//!   counts them. A busy slot cannot be queued again nor its buffer
//!   borrowed ([`DirectRing::queue`], [`DirectRing::buf`] refuse), so no
//!   Rust reference to a buffer lives while the kernel may write it. [`Drop`]
//!   waits for every one of them before the buffers are freed (or leaks
//!   the buffers if it cannot wait), so the kernel never writes freed
//!   memory.
//! - The descriptor is borrowed for the ring's lifetime (`'a`), so it stays
//!   open while any read names it.
//! - At most `depth` slots exist and the SQ has `depth` entries, so a push
//!   never finds the SQ full (every `wait` enters what was pushed), and
//!   the CQ (twice the SQ) never overflows.

use std::fs::File;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::AsRawFd;

use io_uring::{opcode, types, IoUring};

use super::AlignedBuf;

/// One thread's ring of `depth` reads of `bs` bytes on one file. See the
/// module's documentation.
pub struct DirectRing<'a> {
    ring: IoUring,
    file: &'a File,
    /// One buffer per slot, page-aligned (`O_DIRECT`). `ManuallyDrop`:
    /// [`Drop`] frees them only once no read is in flight.
    bufs: ManuallyDrop<Vec<AlignedBuf>>,
    /// Per slot: queued or in the kernel (its buffer is the kernel's).
    busy: Vec<bool>,
    /// Slots queued or in the kernel.
    in_flight: usize,
    /// Bytes per read.
    bs: usize,
}

impl<'a> DirectRing<'a> {
    /// A ring of `depth` slots of `bs`-byte page-aligned buffers, reading
    /// `file` (opened with `O_DIRECT`).
    ///
    /// # Errors
    /// `io_uring_setup`'s error (`ENOSYS`, `EPERM` where io_uring is
    /// disabled, `ENOMEM`), or a buffer that cannot be allocated.
    pub fn new(file: &'a File, depth: usize, bs: usize) -> io::Result<Self> {
        let entries = u32::try_from(depth)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "queue depth too large"))?;
        let ring = IoUring::new(entries)?;
        let bufs = (0..depth)
            .map(|_| AlignedBuf::new(bs, 0))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(DirectRing {
            ring,
            file,
            bufs: ManuallyDrop::new(bufs),
            busy: vec![false; depth],
            in_flight: 0,
            bs,
        })
    }

    /// The bytes of every read (each slot's buffer).
    pub fn bs(&self) -> usize {
        self.bs
    }

    /// The number of slots.
    pub fn depth(&self) -> usize {
        self.bufs.len()
    }

    /// Slot `slot`'s buffer, holding what its last completed read read.
    ///
    /// # Errors
    /// `InvalidInput` for a slot out of range, or one whose read is
    /// queued or in flight (its buffer is the kernel's until reaped).
    pub fn buf(&mut self, slot: usize) -> io::Result<&mut [u8]> {
        if self.busy.get(slot).copied().unwrap_or(true) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ring slot {slot}: no such slot, or its read is in flight"),
            ));
        }
        Ok(self.bufs[slot].as_mut_slice())
    }

    /// Queues a read of slot `slot`'s buffer at `off`; it is entered into
    /// the kernel by the next [`wait`](Self::wait).
    ///
    /// # Errors
    /// `InvalidInput` for a slot out of range or one whose read is queued
    /// or in flight; an error if the submission queue is full, which it
    /// never is (one entry per slot).
    pub fn queue(&mut self, slot: usize, off: u64) -> io::Result<()> {
        if self.busy.get(slot).copied().unwrap_or(false) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ring slot {slot}: its read is in flight"),
            ));
        }
        let buf = self
            .bufs
            .get_mut(slot)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no such ring slot"))?
            .as_mut_slice();
        let len = u32::try_from(buf.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "block too large"))?;
        let sqe = opcode::Read::new(types::Fd(self.file.as_raw_fd()), buf.as_mut_ptr(), len)
            .offset(off)
            .build()
            .user_data(slot as u64);
        // SAFETY: the entry names `buf`, a buffer of this ring that stays
        // allocated until its CQE is reaped (`Drop` waits for every slot in
        // flight), and `self.file`'s descriptor, borrowed for `'a`, longer
        // than the ring. Nothing else reads or writes the buffer meanwhile:
        // the slot was not busy (so no borrow from `buf` is alive: it takes
        // `&mut self`, as this does) and is busy from here until its CQE
        // is reaped, refusing `buf` and `queue` meanwhile.
        unsafe { self.ring.submission().push(&sqe) }
            .map_err(|_| io::Error::other("io_uring submission queue full"))?;
        self.busy[slot] = true;
        self.in_flight += 1;
        Ok(())
    }

    /// Enters every queued read with one `io_uring_enter` and waits until
    /// at least one read completed, then appends every completion there is
    /// to `out`: (slot, result: bytes read, or a negative errno).
    /// Returns at once, with nothing, when no read is in flight.
    ///
    /// # Errors
    /// `io_uring_enter`'s error (`EINTR` is retried).
    pub fn wait(&mut self, out: &mut Vec<(usize, i32)>) -> io::Result<()> {
        if self.in_flight == 0 {
            return Ok(());
        }
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        for cqe in self.ring.completion() {
            let slot = cqe.user_data() as usize;
            if let Some(b) = self.busy.get_mut(slot) {
                *b = false;
            }
            self.in_flight -= 1;
            out.push((slot, cqe.result()));
        }
        Ok(())
    }
}

impl Drop for DirectRing<'_> {
    fn drop(&mut self) {
        let mut sink = Vec::new();
        while self.in_flight > 0 {
            sink.clear();
            if self.wait(&mut sink).is_err() {
                // The kernel may still write the buffers: leak them.
                return;
            }
        }
        // SAFETY: no read is in flight (the loop above reaped every one),
        // so the kernel holds no pointer into the buffers; dropped once.
        unsafe { ManuallyDrop::drop(&mut self.bufs) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    #[test]
    fn reads_every_slot_at_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let data: Vec<u8> = (0..16 * 4096).map(|i| (i / 4096) as u8 + 1).collect();
        std::fs::write(&path, &data).unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .unwrap();
        let mut ring = match DirectRing::new(&f, 4, 4096) {
            Ok(r) => r,
            Err(e) => return test_support::skip_or_fail("reads_every_slot_at_its_offset", e),
        };
        assert_eq!(ring.depth(), 4);
        for slot in 0..4 {
            ring.queue(slot, (3 * slot as u64) * 4096).unwrap();
        }
        let mut done = Vec::new();
        while done.len() < 4 {
            ring.wait(&mut done).unwrap();
        }
        done.sort();
        for (i, &(slot, res)) in done.iter().enumerate() {
            assert_eq!((slot, res), (i, 4096));
            assert!(ring
                .buf(slot)
                .unwrap()
                .iter()
                .all(|&b| b == 3 * slot as u8 + 1));
        }
        assert!(ring.queue(4, 0).is_err());
        assert!(ring.buf(4).is_err());
        // Dropped with a read in flight: it waits for it. Meanwhile its
        // buffer is the kernel's: neither lent nor queued again.
        ring.queue(0, 0).unwrap();
        assert!(ring.buf(0).is_err());
        assert!(ring.queue(0, 4096).is_err());
    }
}
