//! Moving a file's data: collapsing a range out of it and inserting a hole
//! into it (`fallocate(FALLOC_FL_COLLAPSE_RANGE)` and
//! `fallocate(FALLOC_FL_INSERT_RANGE)`), with the cache kept coherent.
//!
//! Every byte from the range's start to end of file changes place, so the
//! cache cannot keep what it holds there. It does what ext4 does for these
//! modes (`ext4_collapse_range`, `ext4_insert_range`): with the file's
//! writers and folio creation shut out, it writes back every dirty page
//! from the range's start on (`filemap_write_and_wait_range` to the end),
//! drops every cached folio and shadow from the range's start on
//! (`truncate_pagecache`, waiting for reads in flight; a large folio across
//! the start goes whole), then asks the backing to move the data and sets
//! the new size. Reads after it read the moved data from the backing.
//!
//! ```text
//!  inode_lock (exclusive)      no writer, no set_len, no punch_hole
//!  check the range against the cache's size   -> EINVAL / EFBIG, nothing done
//!  writeback(start..)          dirty data from the start on reaches the backing
//!  invalidate_lock (exclusive) no reader creates a folio meanwhile
//!  wb_lock                     no writeback meanwhile
//!  drop folios and shadows from the start on (waiting for reads in flight)
//!  backing.collapse_range / insert_range
//!  size -= len / size += len   (after the backing's error: its size, and
//!                               the error)
//! ```
//!
//! A read that runs beside the shift sees each page either before or
//! after it: a page it finds cached is the old data (every read of a folio
//! in flight ends before the backing moves: the drop waits for it), and one
//! it reads in is read after the new size is set (folio creation waits for
//! `invalidate_lock`), so it is the new data, cut at the new size. A reader
//! that slept on a dropped folio's lock finds it out of the mapping and
//! looks again (`filemap_get_pages`'s retry of a folio truncated under it).
//! A read that gathered its folios while a shift began looks again too
//! (the mapping counts shifts): across a collapse and then an insert, a
//! folio it holds may have been filled while the file was shorter (zeros
//! past that end) and the size it sees be the longer one again.
//! A memory file holds its only copy of its data in its folios and refuses
//! both calls (`EOPNOTSUPP`, as tmpfs does).

use std::io;

use backing::Shift;

use crate::arena::PAGE;
use crate::file::File;
use crate::filemap::Mapping;
use crate::truncate::InvalidateLocked;

impl File {
    /// Removes `len` bytes at `offset` from the file and moves the data
    /// after them down, so the file shrinks by `len`
    /// (`fallocate(FALLOC_FL_COLLAPSE_RANGE)`). Dirty data from `offset` on
    /// is written back first; the cached data from `offset` on is dropped
    /// before the backing moves (see `shift.rs`).
    ///
    /// # Errors
    /// - `PermissionDenied` if the handle is not writable.
    /// - `InvalidInput` (`EINVAL`) if `offset` or `len` is not a multiple
    ///   of [`backing::BLOCK`], `len` is 0, or the range reaches end of file
    ///   (use [`set_len`](Self::set_len)): nothing is done.
    /// - `Unsupported` (`EOPNOTSUPP`) for a memory file, or from a backing
    ///   that cannot shift data: nothing has moved.
    /// - A writeback error (nothing has moved; the data stays dirty), or
    ///   the backing's error (a filesystem moves nothing then; the cache
    ///   drops what it held from `offset` on either way, so it serves what
    ///   the backing holds).
    pub fn collapse_range(&self, offset: u64, len: u64) -> io::Result<()> {
        self.check_writable()?;
        shift_range(self.mapping(), Shift::Collapse, offset, len)
    }

    /// Inserts a hole of `len` bytes at `offset`, moving the data from
    /// there up, so the file grows by `len`
    /// (`fallocate(FALLOC_FL_INSERT_RANGE)`). Dirty data from `offset` on
    /// is written back first; the cached data from `offset` on is dropped
    /// before the backing moves (see `shift.rs`).
    ///
    /// # Errors
    /// - `PermissionDenied` if the handle is not writable.
    /// - `InvalidInput` (`EINVAL`) if `offset` or `len` is not a multiple
    ///   of [`backing::BLOCK`], `len` is 0, or `offset` is at or past end
    ///   of file (use [`set_len`](Self::set_len)); `EFBIG` if the file
    ///   would grow past the largest file size: nothing is done.
    /// - `Unsupported` (`EOPNOTSUPP`) for a memory file, or from a backing
    ///   that cannot shift data: nothing has moved.
    /// - A writeback error (nothing has moved; the data stays dirty), or
    ///   the backing's error (as for
    ///   [`collapse_range`](Self::collapse_range)).
    pub fn insert_range(&self, offset: u64, len: u64) -> io::Result<()> {
        self.check_writable()?;
        shift_range(self.mapping(), Shift::Insert, offset, len)
    }
}

/// [`File::collapse_range`] and [`File::insert_range`]'s work.
fn shift_range(m: &Mapping, shift: Shift, offset: u64, len: u64) -> io::Result<()> {
    if m.memfile {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{}: a memory file's folios are its only copy of its data, and they \
                 do not move",
                shift.name()
            ),
        ));
    }
    let _i = m.inode.lock.write();
    let size = m.size();
    shift.check(offset, len, size)?;
    // Everything dirty from the range's start on reaches the backing
    // before the backing moves it. No writer can dirty more: this
    // thread holds `inode_lock`.
    m.writeback(offset / PAGE, u64::MAX)?;
    let inv = InvalidateLocked::new(m);
    let _wb = m.wb.lock();
    // Counted before any folio goes: a read holding folios from before
    // this sees it and looks again (`Mapping::read`).
    m.shift_begins();
    // Written back, the backing holds the file as the cache sees it, to
    // its size (a write's last block cuts the backing back to the size
    // at writeback; `set_len` sets both at once). Made sure of, since
    // the backing's size is what it checks the range against.
    let backing = m.backing();
    if backing.len()? != size {
        backing.set_len(size)?;
    }
    // Nothing from `offset` on stays where it is: every folio and shadow
    // there goes (clean: written back above) before the backing moves, as
    // `ext4_collapse_range` calls `truncate_pagecache` before
    // `ext4_ext_shift_extents`. The drop waits for each folio's lock, so a
    // read in flight there (readahead's, on the IO engine) ends first and
    // reads the data from before the move; the folio then goes, and a
    // reader waiting on it finds it gone and looks again. Dropped after
    // the move instead, such a read could end after it and fill the folio
    // from where the data no longer is (past the backing's new end:
    // zeros), which a reader copied until the drop reached it. A large
    // folio across `offset` goes whole: zeroing its part past `offset`, as
    // a truncate does, would leave zeros where the moved data belongs. (No
    // folio is created until the size is set: `invalidate_lock`.) So after
    // a backing error too the cache holds nothing from `offset` on: a
    // backing that failed should have moved nothing, but the cache does
    // not count on it, and reads what the backing holds now.
    let index = offset / PAGE;
    let span = 1u64 << m.xa.get_order(index);
    inv.truncate_bytes((index & !(span - 1)) * PAGE, u64::MAX);
    let moved = match shift {
        Shift::Collapse => backing.collapse_range(offset, len),
        Shift::Insert => backing.insert_range(offset, len),
    };
    match moved {
        Ok(()) => {
            m.set_size(match shift {
                Shift::Collapse => size - len,
                Shift::Insert => size + len,
            });
            Ok(())
        }
        Err(e) => {
            if let Ok(now) = backing.len() {
                m.set_size(now);
            }
            Err(e)
        }
    }
}
