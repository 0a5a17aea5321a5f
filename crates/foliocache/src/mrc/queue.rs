//! The sample's queue: where a read in the sample leaves its key for the
//! estimator, so that the simulations run in batches off the read's path
//! (`mrc.rs`, "Cost").
//!
//! A bounded queue of many writers and one reader at a time (Vyukov's
//! bounded queue): each slot carries a sequence number that says whose
//! turn it is. A writer claims the position at the head whose slot's
//! sequence equals it (one compare-and-swap), writes the entry, and sets
//! the sequence one past the position; the reader takes the slot at the
//! tail while its sequence says written, and gives it back a lap later.
//! No writer waits: with no slot free, a push fails (the caller drains or
//! drops the read), and a writer stopped between its claim and its write
//! holds up the reader at that slot only (the entries after it wait).
//!
//! A position is also the read's time: the sample's reads in order of
//! their claims, so the clock that ages hits (`Mrc::now`) moves with the
//! pushes, not with the drains.

use crate::sync::{Ordering, StatU64};

/// The queue's slots: about 4 ms of one thread's hits at 1 in 16 (the
/// curve thread looks every millisecond while an eighth of them fills
/// between two looks; a read drains at half: `Mrc::push`). 48 KiB.
pub(super) const ENTRIES: u64 = 2048;

/// One entry.
struct Slot {
    /// The position whose turn it is to write it (`seq == pos`), or to
    /// read it (`seq == pos + 1`).
    seq: StatU64,
    /// What the estimator is given (`Mrc::push`'s word and file).
    word: StatU64,
    file: StatU64,
}

/// A counter alone on its line: the writers' head and the reader's tail
/// are written by different threads.
#[repr(align(128))]
struct Alone(StatU64);

/// The queue.
pub(super) struct Queue {
    head: Alone,
    tail: Alone,
    slots: Box<[Slot]>,
}

impl Default for Queue {
    fn default() -> Self {
        Queue {
            head: Alone(StatU64::new(0)),
            tail: Alone(StatU64::new(0)),
            slots: (0..ENTRIES)
                .map(|i| Slot {
                    seq: StatU64::new(i),
                    word: StatU64::new(0),
                    file: StatU64::new(0),
                })
                .collect(),
        }
    }
}

impl Queue {
    fn slot(&self, pos: u64) -> &Slot {
        &self.slots[(pos % ENTRIES) as usize]
    }

    /// Puts `(word, file)` at the head: its position, or `None` when no
    /// slot is free (the one at the head not yet taken).
    #[inline]
    pub(super) fn push(&self, word: u64, file: u64) -> Option<u64> {
        let mut pos = self.head.0.load(Ordering::Relaxed);
        loop {
            let slot = self.slot(pos);
            let seq = slot.seq.load(Ordering::Acquire);
            match seq.wrapping_sub(pos) as i64 {
                0 => match self.head.0.compare_exchange_weak(
                    pos,
                    pos + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        slot.word.store(word, Ordering::Relaxed);
                        slot.file.store(file, Ordering::Relaxed);
                        slot.seq.store(pos + 1, Ordering::Release);
                        return Some(pos);
                    }
                    Err(now) => pos = now,
                },
                // A lap behind: the reader has not taken it.
                d if d < 0 => return None,
                // Another writer took it: look at the head again.
                _ => pos = self.head.0.load(Ordering::Relaxed),
            }
        }
    }

    /// The entries pushed and not yet taken (at the moment of asking).
    #[inline]
    pub(super) fn len(&self) -> u64 {
        let head = self.head.0.load(Ordering::Relaxed);
        head.saturating_sub(self.tail.0.load(Ordering::Relaxed))
    }

    /// Takes the written entries from the tail, in order, at most a lap,
    /// giving each to `f` with its position; returns how many. One reader
    /// at a time (the caller holds the estimator's lock).
    pub(super) fn take(&self, mut f: impl FnMut(u64, u64, u64)) -> u64 {
        let start = self.tail.0.load(Ordering::Relaxed);
        let mut pos = start;
        while pos - start < ENTRIES {
            let slot = self.slot(pos);
            if slot.seq.load(Ordering::Acquire) != pos + 1 {
                break;
            }
            let word = slot.word.load(Ordering::Relaxed);
            let file = slot.file.load(Ordering::Relaxed);
            slot.seq.store(pos + ENTRIES, Ordering::Release);
            f(pos, word, file);
            pos += 1;
        }
        self.tail.0.store(pos, Ordering::Relaxed);
        pos - start
    }
}
