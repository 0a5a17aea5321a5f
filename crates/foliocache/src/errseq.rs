//! A file's writeback error sequence (the kernel's `lib/errseq.c`): every
//! handle on a file reports each writeback error once, whichever handle's
//! writeback met it.

use std::io;

use rustix::io::Errno;

use crate::sync::{AtomicU64, Ordering};

/// A file's writeback error sequence (the kernel's `errseq_t`): the last
/// error's errno, whether any handle has seen it, and a counter that moves
/// on every new error. Handles sample it and report each new error once.
#[derive(Default)]
pub(crate) struct ErrSeq(AtomicU64);

const ERRNO_MASK: u64 = 0xffff;
const SEEN: u64 = 1 << 16;
const COUNTER_ONE: u64 = 1 << 17;

impl ErrSeq {
    /// Records a writeback error.
    pub(crate) fn record(&self, e: &io::Error) {
        let errno = e.raw_os_error().unwrap_or(Errno::IO.raw_os_error()) as u64 & ERRNO_MASK;
        let mut cur = self.0.load(Ordering::Relaxed);
        loop {
            let new = ((cur & !(ERRNO_MASK | SEEN)) + COUNTER_ONE) | errno;
            match self
                .0
                .compare_exchange(cur, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(v) => cur = v,
            }
        }
    }

    /// The sample a new handle starts from: now, unless the latest error
    /// was never seen by anyone (then the new handle reports it, as the
    /// kernel's `errseq_sample` arranges).
    pub(crate) fn sample(&self) -> u64 {
        let v = self.0.load(Ordering::Acquire);
        if v & ERRNO_MASK != 0 && v & SEEN == 0 {
            0
        } else {
            v & !SEEN
        }
    }

    /// The error recorded since `since` (a handle's sample), if any; moves
    /// the sample on and marks the error seen.
    pub(crate) fn check_and_advance(&self, since: &AtomicU64) -> Option<io::Error> {
        let v = self.0.load(Ordering::Acquire);
        let old = since.load(Ordering::Relaxed);
        if v & !SEEN == old {
            return None;
        }
        since.store(v & !SEEN, Ordering::Relaxed);
        self.0.fetch_or(SEEN, Ordering::AcqRel);
        match v & ERRNO_MASK {
            0 => None,
            errno => Some(io::Error::from_raw_os_error(errno as i32)),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn errseq_reports_each_error_once_per_sample() {
        let e = ErrSeq::default();
        let a = AtomicU64::new(e.sample());
        assert!(e.check_and_advance(&a).is_none());
        e.record(&io::Error::from(Errno::NOSPC));
        // A handle opened after an unseen error still gets it.
        let late = AtomicU64::new(e.sample());
        assert_eq!(
            e.check_and_advance(&a).unwrap().raw_os_error(),
            Some(Errno::NOSPC.raw_os_error())
        );
        assert!(e.check_and_advance(&a).is_none());
        assert_eq!(late.load(Ordering::Relaxed), 0);
        assert!(e.check_and_advance(&late).is_some());
        // Seen now: a new handle starts past it.
        let new = AtomicU64::new(e.sample());
        assert!(e.check_and_advance(&new).is_none());
        e.record(&io::Error::from(Errno::IO));
        assert_eq!(
            e.check_and_advance(&new).unwrap().raw_os_error(),
            Some(Errno::IO.raw_os_error())
        );
    }
}
