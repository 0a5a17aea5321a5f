//! Filling a locked folio from the backing (the kernel's
//! `filemap_read_folio`): one folio's read, retried when it stopped
//! short, its pages zeroed past the end of the file.

use std::io;

use super::{FolioFlags, FolioRef, LockedFolio, Mapping};
use crate::arena::PAGE;
use crate::sync::Ordering;

/// How many times a read that stopped short of a backing that is longer
/// than where it stopped is tried again before it is an error.
const SHORT_READ_RETRIES: u32 = 2;

impl Mapping {
    /// Reads a locked folio of this mapping that is not uptodate from the
    /// backing with one IO (`filemap_read_folio`), zeroes what lies past end
    /// of file, marks it uptodate and unlocks it; returns the reference. An
    /// uptodate folio is only unlocked. On error the folio leaves the
    /// mapping (no uptodate folio is left behind), is unlocked, and the
    /// error is returned.
    ///
    /// # Errors
    /// The backing's error; `InvalidInput` if the folio is not this
    /// mapping's.
    pub fn read_folio<'m>(&self, mut f: LockedFolio<'m>) -> io::Result<FolioRef<'m>> {
        self.fill_folio(&mut f)?;
        Ok(f.unlock())
    }

    /// [`read_folio`](Self::read_folio) without the unlock: the folio stays
    /// locked, uptodate on success, out of the mapping on error (a write
    /// fills a partial folio this way before copying into it).
    pub(crate) fn fill_folio(&self, f: &mut LockedFolio<'_>) -> io::Result<()> {
        if f.mapping() != self.id() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "read_folio needs a folio of this mapping",
            ));
        }
        if f.test(FolioFlags::UPTODATE) {
            // Readers may be copying out of it: nothing to write.
            return Ok(());
        }
        let cache = self.inner();
        let len = (f.nr_pages() * PAGE) as usize;
        let pos = f.index() * PAGE;
        // The bytes the file has for this folio: all of it, or up to EOF.
        let want = if self.memfile {
            0
        } else {
            len.min(self.size().saturating_sub(pos) as usize)
        };
        let mut got = 0usize;
        let mut failure = None;
        let mut short_retries = 0;
        while got < want {
            // Re-read from the block that holds the first missing byte: a
            // backing may (wrongly) stop short mid-file; what it returned
            // before that block is kept.
            let from = got / backing::BLOCK * backing::BLOCK;
            // (Locked and not uptodate, checked above: its memory is this
            // read's. `from` is a block boundary inside it.)
            let (_, mut buf) = f.fill_buf().split_at(from).expect("a block boundary");
            let r = self
                .backing()
                .read_blocks(std::slice::from_mut(&mut buf), pos + from as u64);
            cache.stats.io_reads.add(1);
            match r {
                Ok(n) if from + n > got => {
                    cache.stats.io_bytes.add(n as u64);
                    got = (from + n).min(len);
                }
                Ok(n) => {
                    // No progress. The file may have grown in the cache
                    // past what the backing holds yet (a write past end of
                    // file, not written back): past the backing's end the
                    // file reads as zeros.
                    let at = pos + (from + n) as u64;
                    if matches!(self.backing().len(), Ok(blen) if blen <= at) {
                        break;
                    }
                    // Longer now: a writeback may have extended it since
                    // the read (past a hole that reads as zeros). Read
                    // again, a few times, before calling it EIO.
                    if short_retries < SHORT_READ_RETRIES {
                        short_retries += 1;
                        continue;
                    }
                    // Else the backing ends before the size it reports. A
                    // read that cannot fill a folio is EIO, as in the
                    // kernel; caching zeros would return wrong bytes.
                    log::warn!(
                        "foliocache: backing read at {} returned {n} bytes where {} remain \
                         before end of file ({}); failing the read with EIO",
                        pos + from as u64,
                        want - from,
                        self.info
                    );
                    cache.stats.read_errors.fetch_add(1, Ordering::Relaxed);
                    failure = Some(io::Error::from(rustix::io::Errno::IO));
                    break;
                }
                Err(e) => {
                    cache.stats.read_errors.fetch_add(1, Ordering::Relaxed);
                    failure = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failure {
            f.test_and_set(FolioFlags::ERROR);
            self.remove_locked(f);
            return Err(e);
        }
        // Zeroes the part past end of file, and any bytes a previous owner
        // of this memory left there.
        f.fill_buf()[got..].fill(0);
        f.test_and_clear(FolioFlags::ERROR);
        if got > 0 {
            // Read from the backing: its first read counts it so.
            f.test_and_set(FolioFlags::FRESH);
        }
        f.mark_uptodate();
        Ok(())
    }
}
