//! Marks: per-entry bits, summarised up the tree for fast marked searches.

use crate::tree::NR_MARKS;

/// One of the [`NR_MARKS`](crate::NR_MARKS) marks an entry can carry.
///
/// The page cache names them: mark 0 dirty, mark 1 writeback, mark 2 towrite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mark(u8);

impl Mark {
    /// Mark 0.
    pub const MARK_0: Mark = Mark(0);
    /// Mark 1.
    pub const MARK_1: Mark = Mark(1);
    /// Mark 2.
    pub const MARK_2: Mark = Mark(2);

    /// Mark number `n`, or `None` if `n >= NR_MARKS`.
    pub const fn new(n: usize) -> Option<Mark> {
        if n < NR_MARKS {
            Some(Mark(n as u8))
        } else {
            None
        }
    }

    /// This mark's number.
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// Every mark.
    pub fn all() -> impl Iterator<Item = Mark> {
        (0..NR_MARKS as u8).map(Mark)
    }
}
