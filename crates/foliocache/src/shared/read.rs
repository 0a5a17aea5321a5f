//! A file's reads in the group's cache: a hit copies from the page with
//! no lock (a seqlock on the page's state word); a miss claims the run of
//! missing pages from it to the end of the read (and a readahead window
//! past it after a sequential one) under the file's inode lock, then
//! reads them in one IO with only the pages held (docs/design.md, section
//! 13, "Misses: one IO per run, outside the inode lock").

use std::io;
use std::sync::atomic::Ordering;

use super::crash::point;
use super::figures::{PUBLISH_HITS, PUBLISH_MISSES};
use super::index::{self, Found, Hold, Key};
use super::lock;
use super::seg::{read_pages, Slot, F_FRESH, F_UPTODATE, PAGE};
use super::SharedFile;

/// The most pages one miss loads (256 KiB): the request's run of missing
/// pages and the readahead window past it, in one IO.
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

/// Whether a counter that went up by `added` to `now` passed a multiple
/// of `period`.
fn crossed(now: u64, added: u64, period: u64) -> bool {
    now / period != now.wrapping_sub(added) / period
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
            if self.copy_hit(key, in_page, &mut buf[done..done + len])? {
                done += len;
                continue;
            }
            let (copied, pages) = self.read_miss(key, in_page, &mut buf[done..n])?;
            let misses = self.cache.inner.misses.add_get(pages);
            if crossed(misses, pages, PUBLISH_MISSES) {
                self.cache.inner.publish();
            }
            done += copied;
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
                        let (fresh, age) = index::touch(seg, d);
                        if fresh {
                            // Readahead's page, read now: from the file.
                            self.cache.inner.first_read_bytes.add(PAGE);
                        } else {
                            self.cache.inner.aged.add(age);
                        }
                        self.sample(key.index, !fresh);
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

    /// The slow path of a read of `dst` (the rest of the read, from byte
    /// `in_page` of `key`'s page, which was not cached): a hit after all
    /// (another process loaded the page meanwhile), or a load of the run
    /// of missing pages from `key` on ([`claim_run`](Self::claim_run)).
    /// Returns the bytes of `dst` copied and the pages loaded for them.
    fn read_miss(&self, key: Key, in_page: usize, dst: &mut [u8]) -> io::Result<(usize, u64)> {
        let first = (PAGE as usize - in_page).min(dst.len());
        let last = key.index + ((in_page + dst.len()).div_ceil(PAGE as usize) as u64 - 1);
        loop {
            match self.claim_run(key, last)? {
                Some(holds) => return self.fill_run(key, holds, in_page, dst),
                // Cached, or being loaded by another process: its hold is
                // waited for without the inode lock.
                None if self.copy_hit(key, in_page, &mut dst[..first])? => return Ok((first, 0)),
                None => {}
            }
        }
    }

    /// Under the file's inode lock, gives `key` and the missing pages
    /// after it, up to the request's last page `last` and the readahead
    /// window past it ([`window`](Self::window)), at most [`RA_MAX`] and
    /// inside the file, pages of their own, held, not uptodate, in the
    /// index (the run ends at the first page cached or held, or when no
    /// page is free). `None` if `key` is cached or held after all.
    ///
    /// The inode lock orders the claim against size changes: a cut that
    /// follows finds the held pages (`cut_cache` waits for each hold and
    /// drops the page); one that came before has moved the size, which
    /// bounds the run, and cut the file, which the IO then reads.
    fn claim_run(&self, key: Key, last: u64) -> io::Result<Option<Vec<Hold<'_>>>> {
        let seg = self.seg();
        let me = self.me()?;
        let (_inode, slot, ..) = self.inode_lock()?;
        let Some((_index, first)) = self.claim(key, slot)? else {
            return Ok(None);
        };
        let end = self
            .window(key.index, last)
            .min(key.index + (RA_MAX.min(seg.pages / 4).max(1) - 1));
        let size = slot.size.load(Ordering::Relaxed);
        let mut holds = vec![first];
        for index in key.index + 1..=end {
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
        Ok(Some(holds))
    }

    /// Reads the file into the held pages `holds` (file pages from
    /// `key`'s on) in one `preadv`, marks them uptodate, and copies the
    /// read's bytes from them into `dst` (from byte `in_page` of the
    /// first); returns the bytes copied and the pages they came from. An
    /// IO error drops the pages and reads `key`'s page alone, so that the
    /// error is that page's, never the readahead's (as
    /// `filemap_read_folio` retries a failed readahead's page).
    fn fill_run(
        &self,
        key: Key,
        holds: Vec<Hold<'_>>,
        in_page: usize,
        dst: &mut [u8],
    ) -> io::Result<(usize, u64)> {
        let seg = self.seg();
        // No process reads the held pages until we let go (readers check
        // the state word).
        let read = holds
            .iter()
            .map(|h| h.page(seg))
            .collect::<io::Result<Vec<_>>>()
            .and_then(|pages| Ok((read_pages(&self.file, &pages, key.index * PAGE)?, pages)));
        if let Ok((n, _)) = &read {
            self.cache.inner.loaded_bytes.add(*n as u64);
        }
        let Ok((mut left, pages)) = read else {
            let locked = index::index_lock(seg, self.me()?)?;
            holds.iter().for_each(|h| index::forget(seg, h));
            drop(locked);
            drop(holds);
            return self.read_one(key, in_page, dst);
        };
        let (mut copied, mut from) = (0, 0);
        for ((h, page), index) in holds.iter().zip(pages).zip(key.index..) {
            let n = left.min(PAGE as usize);
            left -= n;
            page.zero_from(n)?;
            if copied < dst.len() {
                h.d.flags.fetch_or(F_UPTODATE, Ordering::Relaxed);
                let at = if copied == 0 { in_page } else { 0 };
                let len = (PAGE as usize - at).min(dst.len() - copied);
                page.copy_out(at, &mut dst[copied..copied + len])?;
                copied += len;
                from += 1;
                // This read's page, from the file (up to its end).
                self.cache.inner.first_read_bytes.add(n as u64);
                self.sample(index, false);
            } else {
                // Readahead's page: counted as read from the file when a
                // read first finds it (`index::touch`).
                h.d.flags.fetch_or(F_UPTODATE | F_FRESH, Ordering::Relaxed);
            }
        }
        Ok((copied, from))
    }

    /// `key`'s page alone, under the inode lock (waiting for a holder
    /// there): a hit, or a load of it; its bytes from `in_page` copied
    /// into `dst`. Returns the bytes copied and whether it loaded (0 or 1
    /// page).
    fn read_one(&self, key: Key, in_page: usize, dst: &mut [u8]) -> io::Result<(usize, u64)> {
        let len = (PAGE as usize - in_page).min(dst.len());
        let dst = &mut dst[..len];
        let (_inode, slot, ..) = self.inode_lock()?;
        if self.copy_hit(key, in_page, dst)? {
            return Ok((len, 0));
        }
        let (hold, loaded) = match index::hold_key(self.seg(), key, self.me()?)? {
            Some(hold) => {
                let fresh = hold.d.flags.fetch_and(!F_FRESH, Ordering::Relaxed) & F_FRESH != 0;
                let age = index::age(self.seg(), hold.d);
                if fresh {
                    // Readahead's page, read now (as `copy_hit` counts it).
                    self.cache.inner.first_read_bytes.add(PAGE);
                } else {
                    self.cache.inner.aged.add(age);
                }
                self.sample(key.index, !fresh);
                (hold, 0)
            }
            None => {
                let hold = self.load(key, slot, Fill::File)?;
                // This read's page, from the file (up to its end).
                let size = slot.size.load(Ordering::Relaxed);
                let bytes = size.saturating_sub(key.index * PAGE).min(PAGE);
                self.cache.inner.first_read_bytes.add(bytes);
                self.sample(key.index, false);
                (hold, 1)
            }
        };
        // The page is held: no one changes it.
        hold.page(self.seg())?.copy_out(in_page, dst)?;
        Ok((len, loaded))
    }

    /// The last page a miss at file page `index` loads, the read wanting
    /// pages up to `last`: `last`, or past it the readahead window, which
    /// grows from 4 pages to [`RA_MAX`] while the misses are sequential
    /// (each at the page after the last load, or at page 0) and is none
    /// for a random one (`ondemand_readahead`'s rule, without its marker).
    fn window(&self, index: u64, last: u64) -> u64 {
        let ra = self.ra.load(Ordering::Relaxed);
        let (next, prev) = (ra >> 8, ra & 0xff);
        let window = if index == 0 || index == next {
            (prev * 2).clamp(4, RA_MAX).min(self.seg().pages / 4)
        } else {
            0
        };
        let end = last.max(index + window);
        self.ra.store((end + 1) << 8 | window, Ordering::Relaxed);
        end
    }

    /// Gives `key` a page from the clock, held, not uptodate, in the
    /// index, and returns it with the index lock still held; `None` if
    /// `key` is cached or held. With no page to reuse (every page dirty or
    /// held), writes back the file's dirty pages and tries once more. The
    /// inode lock is held.
    fn claim(&self, key: Key, slot: &Slot) -> io::Result<Option<(lock::Held<'_>, Hold<'_>)>> {
        let seg = self.seg();
        let me = self.me()?;
        let mut wrote_back = false;
        loop {
            let locked = index::index_lock(seg, me)?;
            if !matches!(index::find(seg, key), Found::Absent) {
                return Ok(None);
            }
            if let Some(hold) = index::victim(seg, me) {
                index::assign(seg, &hold, key);
                point();
                return Ok(Some((locked, hold)));
            }
            drop(locked);
            if wrote_back {
                return Err(io::Error::other(
                    "shared cache: every page is dirty or in use",
                ));
            }
            wrote_back = true;
            self.write_back_locked(slot, key.slot, key.generation)?;
        }
    }

    /// Gives `key` a page, held, filled from the file (uptodate), or with
    /// zeros if `zero` (not uptodate: the write that fills it makes it so
    /// once its bytes are in, as `write_end` does, so that a writer killed
    /// before its copy leaves no page of zeros for others to read). The
    /// inode lock is held.
    pub(super) fn load(&self, key: Key, slot: &Slot, fill: Fill<'_>) -> io::Result<Hold<'_>> {
        let seg = self.seg();
        let me = self.me()?;
        // Under the inode lock no one else gives the file a page: the
        // caller found `key` absent.
        let (index, hold) = self
            .claim(key, slot)?
            .ok_or_else(|| io::Error::other("shared cache: a page loaded twice"))?;
        drop(index);
        point();
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
