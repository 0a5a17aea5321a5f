//! Copying a folio's bytes: a read's copy out of a referenced folio, a
//! write's copy into its locked folios, and the zeroing of part of one.

use super::pin::WritableFolio;
use super::{FolioFlags, FolioRef, Mapping};
use crate::arena::PAGE;

impl Mapping {
    /// Copies `dst.len()` bytes from byte `from` of an uptodate folio.
    pub(crate) fn copy_out(&self, f: &FolioRef<'_>, from: usize, dst: &mut [u8]) {
        assert!(from + dst.len() <= (f.nr_pages() * PAGE) as usize);
        debug_assert!(f.test(FolioFlags::UPTODATE));
        let src = self.inner().mem.arena.page_ptr(f.page()).as_ptr();
        // SAFETY: the folio is uptodate and referenced: its bytes are
        // initialised, nobody writes them, and reclaim cannot free them;
        // `from + dst.len()` lies inside the folio; `dst` is a distinct
        // caller buffer.
        // A writer may copy into it meanwhile: both sides use `copy`'s
        // shared functions, whose accesses are defined under that race.
        unsafe { crate::copy::copy_from_shared(src.add(from), dst.as_mut_ptr(), dst.len()) };
    }
}

impl Mapping {
    /// Calls `each` with the offset and bytes of every page of the file
    /// this cache holds uptodate, in order, reading nothing from the
    /// backing: for handing a cache's contents to another cache (the
    /// interposer moving a process's files into its group's shared cache
    /// at its first fork). Each page is copied out as a read copies it (a
    /// write racing with the walk may be seen in part, as by a racing
    /// read); the last page is cut at the file's size.
    ///
    /// # Errors
    /// The first error `each` returns, which ends the walk.
    pub fn cached_pages(
        &self,
        mut each: impl FnMut(u64, &[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        // The folios' places first, under one pin, then each by a lookup
        // that takes a reference (the pin is not held across `each`).
        let mut spans = Vec::new();
        {
            let guard = self.xa.pin();
            if let Ok(mut it) = self.xa.iter_ref(0..=u64::MAX, &guard) {
                while let Some((_, e)) = it.next() {
                    if matches!(e, xarray::EntryRef::Item(_)) {
                        spans.push(it.span().0);
                    }
                }
            }
        }
        let mut page = vec![0u8; PAGE as usize];
        for base in spans {
            let Ok(f) = self.get_folio(base, super::FgpFlags::empty()) else {
                continue;
            };
            if !f.test(FolioFlags::UPTODATE) {
                continue;
            }
            let first = f.index();
            for i in 0..f.nr_pages() {
                let offset = (first + i) * PAGE;
                let size = self.size();
                if offset >= size {
                    break;
                }
                let len = (size - offset).min(PAGE) as usize;
                self.copy_out(&f, (i * PAGE) as usize, &mut page[..len]);
                each(offset, &page[..len])?;
            }
        }
        Ok(())
    }
}

/// Writing folio bytes: a write's copy into its locked folios, and the
/// zeroing of part of one.
impl Mapping {
    /// Copies a write's bytes into locked folios that no pin borrows
    /// ([`Mapping::writable`]): `parts[i]` is where folio `i`'s part
    /// starts in it, which bytes of `src` it takes, and whether the folio
    /// is fresh (created by this write, which fills it whole: its memory
    /// came from the free pool, untouched lately). One copy per run of
    /// folios whose parts adjoin both in `src` and in the arena, fresh or
    /// not alike: a batch's new folios are allocated in ascending pages
    /// ([`new_folios_planned`](Self::new_folios_planned)), so a write
    /// across a range of small folios is one long copy, as into one large
    /// folio, rather than one short copy per folio (`docs/design.md`, the
    /// write path). A fresh run copies with `copy::copy_to_fresh` (the
    /// bulk class's routine from `copy::BULK` bytes up).
    pub(crate) fn copy_in(
        &self,
        folios: &[WritableFolio<'_>],
        parts: &[(usize, std::ops::Range<usize>, bool)],
        src: &[u8],
    ) {
        assert_eq!(folios.len(), parts.len(), "copy_in: a part per folio");
        let arena = &self.inner().mem.arena;
        // The run so far: where it goes, which bytes of `src`, and whether
        // its folios are fresh.
        let mut run: Option<(*mut u8, std::ops::Range<usize>, bool)> = None;
        let flush = |dst: *mut u8, r: std::ops::Range<usize>, fresh: bool| {
            let from = src[r.clone()].as_ptr();
            // SAFETY: `dst..dst + r.len()` is the union of adjoining parts,
            // each inside a folio of `folios` (checked below), which the
            // caller holds locked (no other writer), referenced (not freed)
            // and not pinned (no `&[u8]` of a pin reads it:
            // `WritableFolio`), borrowed for this call; `r` lies inside
            // `src` (checked), a caller buffer, distinct from arena memory
            // the caller holds locked. Readers of an uptodate folio copy
            // out without the lock: a read racing a write of the same bytes
            // may see either, as with the kernel's page cache; both sides
            // use `copy`'s shared functions, whose accesses are defined
            // under that race.
            unsafe {
                if fresh {
                    crate::copy::copy_to_fresh(from, dst, r.len());
                } else {
                    crate::copy::copy_to_shared(from, dst, r.len());
                }
            }
        };
        for (f, (from, r, fresh)) in folios.iter().zip(parts) {
            assert!(
                r.start <= r.end
                    && r.end <= src.len()
                    && from + r.len() <= (f.nr_pages() * PAGE) as usize,
                "copy_in past the folio's end or the source's"
            );
            let dst = arena.page_ptr(f.page()).as_ptr().wrapping_add(*from);
            match &mut run {
                Some((d, rr, fr))
                    if d.wrapping_add(rr.len()) == dst && rr.end == r.start && *fr == *fresh =>
                {
                    rr.end = r.end;
                }
                _ => {
                    if let Some((d, rr, fr)) = run.take() {
                        flush(d, rr, fr);
                    }
                    run = Some((dst, r.clone(), *fresh));
                }
            }
        }
        if let Some((d, rr, fr)) = run {
            flush(d, rr, fr);
        }
    }

    /// Zeroes `len` bytes of a locked folio (one no pin borrows) from byte
    /// `from`.
    pub(crate) fn zero_folio(&self, f: &WritableFolio<'_>, from: usize, len: usize) {
        assert!(
            from + len <= (f.nr_pages() * PAGE) as usize,
            "zero_folio past the folio's end"
        );
        let dst = self.inner().mem.arena.page_ptr(f.page()).as_ptr();
        // SAFETY: as in `copy_in`: locked, unpinned, referenced, in bounds; readers
        // may copy the bytes meanwhile (`zero_shared`).
        unsafe { crate::copy::zero_shared(dst.add(from), len) };
    }
}
