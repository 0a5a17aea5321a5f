//! A file's reads in the group's cache: a hit copies from the page with
//! no lock (a seqlock on the page's state word), a miss loads it under the
//! file's inode lock and reads ahead a window after a sequential one
//! (docs/design.md, section 13).

use std::io;
use std::sync::atomic::Ordering;

use super::crash::point;
use super::figures::{PUBLISH_HITS, PUBLISH_MISSES};
use super::index::{self, Found, Hold, Key};
use super::lock;
use super::seg::{read_pages, Slot, F_FRESH, F_UPTODATE, PAGE};
use super::SharedFile;

/// The largest readahead window, in pages (256 KiB).
const RA_MAX: u64 = 64;

/// What a page [`SharedFile::load`] gives out holds.
#[derive(Clone, Copy)]
pub(super) enum Fill<'a> {
    /// The file's bytes, read from it.
    File,
    /// Zeros, not yet uptodate (a write fills it).
    Zero,
    /// These bytes (the file's, the caller says), then zeros.
    Bytes(&'a [u8]),
}

impl SharedFile {
    /// Reads into `buf` from `offset`: the bytes every process's last
    /// completed write left there, short at the end of the file.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let (_, i, generation, size) = self.sized()?;
        if offset >= size {
            return Ok(0);
        }
        let n = buf
            .len()
            .min((size - offset).min(usize::MAX as u64) as usize);
        let mut done = 0;
        while done < n {
            let at = offset + done as u64;
            let in_page = (at % PAGE) as usize;
            let len = (PAGE as usize - in_page).min(n - done);
            let key = Key {
                slot: i,
                generation,
                index: at / PAGE,
            };
            let dst = &mut buf[done..done + len];
            if !self.copy_hit(key, in_page, dst)? {
                if self
                    .cache
                    .inner
                    .misses
                    .add_get(1)
                    .is_multiple_of(PUBLISH_MISSES)
                {
                    self.cache.inner.publish();
                }
                self.read_miss(key, in_page, dst)?;
            }
            done += len;
        }
        self.cache.inner.read_bytes.add(n as u64);
        Ok(n)
    }

    /// Copies from the cached page of `key`, if cached: `false` if not.
    #[inline]
    pub(super) fn copy_hit(&self, key: Key, in_page: usize, dst: &mut [u8]) -> io::Result<bool> {
        let seg = self.seg();
        let mut spins = 0;
        loop {
            match index::find(seg, key) {
                Found::Absent => return Ok(false),
                Found::Held(p, h) => {
                    if !lock::nap_on_holder(seg, h, &mut spins) {
                        index::repair_dead(seg, p, h, self.me()?)?;
                    }
                }
                Found::Page(p, state) => {
                    let (Some(page), Some(d)) = (seg.page(p), seg.desc(p)) else {
                        return Ok(false);
                    };
                    // Another process may write those bytes meanwhile: the
                    // state check below discards such a copy.
                    page.copy_out(in_page, dst)?;
                    std::sync::atomic::fence(Ordering::Acquire);
                    if d.state.load(Ordering::Relaxed) == state {
                        if index::touch(d) {
                            // Readahead's page, read now: from the file.
                            self.cache.inner.first_read_bytes.add(PAGE);
                        }
                        if self
                            .cache
                            .inner
                            .hits
                            .add_get(1)
                            .is_multiple_of(PUBLISH_HITS)
                        {
                            self.cache.inner.publish();
                        }
                        return Ok(true);
                    }
                    spins += 1;
                    if spins > 1000 {
                        return Ok(false);
                    }
                }
            }
        }
    }

    /// The slow path of a read: under the inode lock, a hit after all
    /// (another process loaded the page meanwhile) or a load.
    fn read_miss(&self, key: Key, in_page: usize, dst: &mut [u8]) -> io::Result<()> {
        let (_inode, slot, ..) = self.inode_lock()?;
        if self.copy_hit(key, in_page, dst)? {
            return Ok(());
        }
        let me = self.me()?;
        let hold = match index::hold_key(self.seg(), key, me)? {
            Some(hold) => {
                if hold.d.flags.fetch_and(!F_FRESH, Ordering::Relaxed) & F_FRESH != 0 {
                    // Readahead's page, read now (as `copy_hit` counts it).
                    self.cache.inner.first_read_bytes.add(PAGE);
                }
                hold
            }
            None => {
                let hold = self.load(key, slot, Fill::File)?;
                // This read's page, from the file (up to its end).
                let size = slot.size.load(Ordering::Relaxed);
                let bytes = size.saturating_sub(key.index * PAGE).min(PAGE);
                self.cache.inner.first_read_bytes.add(bytes);
                hold
            }
        };
        // The page is held: no one changes it.
        hold.page(self.seg())?.copy_out(in_page, dst)?;
        drop(hold);
        let window = self.window(key.index);
        if window > 0 {
            self.read_ahead(key, slot, window)?;
        }
        Ok(())
    }

    /// The readahead window for a miss at file page `index`: growing
    /// from 4 pages to [`RA_MAX`] while the misses are sequential (each
    /// at the page after the last window, or at page 0), nothing for a
    /// random one (`ondemand_readahead`'s rule, without its marker).
    fn window(&self, index: u64) -> u64 {
        let ra = self.ra.load(Ordering::Relaxed);
        let (next, last) = (ra >> 8, ra & 0xff);
        let window = if index == 0 || index == next {
            (last * 2).clamp(4, RA_MAX)
        } else {
            0
        };
        self.ra
            .store((index + window + 1) << 8 | window, Ordering::Relaxed);
        window.min(self.seg().pages / 4)
    }

    /// Loads the up to `window` pages after `key` that are not cached and
    /// lie inside the file, in one `preadv` into the pages themselves.
    /// The inode lock is held.
    fn read_ahead(&self, key: Key, slot: &Slot, window: u64) -> io::Result<()> {
        let seg = self.seg();
        let me = self.me()?;
        let size = slot.size.load(Ordering::Relaxed);
        let mut holds = Vec::new();
        {
            let _index = index::index_lock(seg, me)?;
            for index in key.index + 1..=key.index + window {
                let k = Key { index, ..key };
                if index * PAGE >= size || !matches!(index::find(seg, k), Found::Absent) {
                    break;
                }
                let Some(hold) = index::victim(seg, me) else {
                    break;
                };
                index::assign(seg, &hold, k);
                point();
                holds.push(hold);
            }
        }
        let Some(first) = holds.first() else {
            return Ok(());
        };
        let first = first.d.index.load(Ordering::Relaxed);
        // No process reads the held pages until we let go (readers check
        // the state word).
        let read = holds
            .iter()
            .map(|h| h.page(seg))
            .collect::<io::Result<Vec<_>>>()
            .and_then(|pages| Ok((read_pages(&self.file, &pages, first * PAGE)?, pages)));
        if let Ok((n, _)) = &read {
            self.cache.inner.loaded_bytes.add(*n as u64);
        }
        let Ok((mut left, pages)) = read else {
            // Readahead is a hint: the pages leave, the read that wanted
            // them will load them itself.
            let _index = index::index_lock(seg, me)?;
            holds.iter().for_each(|h| index::forget(seg, h));
            return Ok(());
        };
        for (h, page) in holds.iter().zip(pages) {
            let n = left.min(PAGE as usize);
            left -= n;
            page.zero_from(n)?;
            h.d.flags.fetch_or(F_UPTODATE | F_FRESH, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Gives `key` a page, held, filled from the file (uptodate), or with
    /// zeros if `zero` (not uptodate: the write that fills it makes it so
    /// once its bytes are in, as `write_end` does, so that a writer killed
    /// before its copy leaves no page of zeros for others to read). The
    /// inode lock is held.
    pub(super) fn load(&self, key: Key, slot: &Slot, fill: Fill<'_>) -> io::Result<Hold<'_>> {
        let seg = self.seg();
        let me = self.me()?;
        let mut wrote_back = false;
        let hold = loop {
            let index = index::index_lock(seg, me)?;
            if let Some(hold) = index::victim(seg, me) {
                index::assign(seg, &hold, key);
                point();
                drop(index);
                point();
                break hold;
            }
            drop(index);
            if wrote_back {
                return Err(io::Error::other(
                    "shared cache: every page is dirty or in use",
                ));
            }
            wrote_back = true;
            self.write_back_locked(slot, key.slot, key.generation)?;
        };
        let page = hold.page(seg)?;
        let filled = match fill {
            Fill::Zero => Ok(0),
            Fill::File => page.read_file(&self.file, key.index * PAGE),
            Fill::Bytes(b) => {
                let b = &b[..b.len().min(PAGE as usize)];
                page.copy_in(0, b).map(|()| b.len())
            }
        };
        match filled {
            Ok(n) => {
                if matches!(fill, Fill::File) {
                    self.cache.inner.loaded_bytes.add(n as u64);
                }
                point();
                page.zero_from(n)?;
                if !matches!(fill, Fill::Zero) {
                    hold.d.flags.fetch_or(F_UPTODATE, Ordering::Relaxed);
                }
                Ok(hold)
            }
            Err(e) => {
                let _index = index::index_lock(seg, me)?;
                index::forget(seg, &hold);
                Err(e)
            }
        }
    }
}
