//! The descriptor table: one [`Folio`] per arena page, mapped as zero
//! pages so it is faulted in as the arena is used (the kernel's `struct
//! page` array).

use std::io;
use std::ptr::NonNull;

use super::Folio;

/// One descriptor per arena page; a folio of order `n` starting at arena
/// page `p` is described by entry `p`.
pub(crate) struct FolioTable {
    folios: NonNull<Folio>,
    len: usize,
    /// The descriptors' memory: zero pages mapped on demand (all-zero bytes
    /// are a free descriptor), so a table is faulted in as its pages are
    /// used, not at build. Under loom, whose atomics are not plain bytes, a
    /// heap block of written descriptors.
    #[cfg(not(loom))]
    _memory: crate::arena::Region,
    #[cfg(loom)]
    layout: std::alloc::Layout,
}

// SAFETY: the table owns its descriptors (as a `Box<[Folio]>` would), and
// `Folio` is `Send + Sync` (its state is atomics).
unsafe impl Send for FolioTable {}
// SAFETY: as above; shared access hands out `&Folio` only.
unsafe impl Sync for FolioTable {}

/// Tables this large are 2 MiB aligned and advised for huge pages.
#[cfg_attr(loom, allow(dead_code))]
const HUGE: usize = 2 << 20;

impl FolioTable {
    /// A table for `pages` arena pages, every descriptor free.
    ///
    /// A cache hit reads the descriptor of a folio picked by the file offset:
    /// on a large cache (40 bytes per 4 KiB page: 12.5 MiB of descriptors
    /// for 1.25 GiB) random hits would miss the TLB on the table as well as on
    /// the data, so a table of 2 MiB or more is mapped 2 MiB aligned and
    /// advised for transparent huge pages, as the arena is. Nothing is
    /// written at build: a free descriptor is all zeros (its LRU links are
    /// set when it goes on a list), so the table's memory is faulted in as
    /// the arena's is: with use, or all at build with [`Populate::Eager`].
    ///
    /// [`Populate::Eager`]: crate::arena::Populate::Eager
    #[cfg(test)]
    pub(crate) fn new(pages: usize) -> io::Result<Self> {
        Self::with_huge_pages(pages, true, crate::arena::Populate::Lazy)
    }

    /// [`new`](Self::new), asking for huge pages only if `huge` (a cache
    /// built without them for its arena does without them here too), and
    /// faulted in at once with [`Populate::Eager`], as the arena is (else
    /// each of a cache's first allocations that reaches a new page of
    /// descriptors traps into the kernel: a populated cache's first writes
    /// would pay a fault for about every hundred 4 KiB folios).
    ///
    /// [`Populate::Eager`]: crate::arena::Populate::Eager
    ///
    /// # Errors
    /// The OS refusing the mapping (`ENOMEM`), or the populate failing.
    pub(crate) fn with_huge_pages(
        pages: usize,
        huge: bool,
        populate: crate::arena::Populate,
    ) -> io::Result<Self> {
        let size =
            (std::mem::size_of::<Folio>() * pages.max(1)).next_multiple_of(crate::arena::PAGE_SIZE);
        #[cfg(not(loom))]
        {
            let align = if huge && size >= HUGE {
                HUGE
            } else {
                crate::arena::PAGE_SIZE
            };
            let memory = crate::arena::Region::map_aligned(size, align)?;
            if align == HUGE {
                memory.advise_huge_pages();
            }
            if populate == crate::arena::Populate::Eager {
                memory.populate("folio descriptor table", false)?;
            }
            // A `Folio` is integer atomics (outside loom): the mapping's
            // zero bytes are valid descriptors, free ones.
            Ok(FolioTable {
                folios: memory.ptr.cast(),
                len: pages,
                _memory: memory,
            })
        }
        #[cfg(loom)]
        {
            let _ = (huge, populate);
            let layout = std::alloc::Layout::from_size_align(size, std::mem::align_of::<Folio>())
                .map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
            // SAFETY: `layout` has a non-zero size.
            let raw = unsafe { std::alloc::alloc(layout) };
            let Some(folios) = NonNull::new(raw.cast::<Folio>()) else {
                std::alloc::handle_alloc_error(layout)
            };
            for i in 0..pages {
                // SAFETY: `i < pages`, inside the allocation; each slot is
                // written once before any read.
                unsafe { folios.as_ptr().add(i).write(Folio::default()) };
            }
            Ok(FolioTable {
                folios,
                len: pages,
                layout,
            })
        }
    }

    fn as_slice(&self) -> &[Folio] {
        // SAFETY: `len` descriptors were initialised in `new` and live until
        // drop; shared references only.
        unsafe { std::slice::from_raw_parts(self.folios.as_ptr(), self.len) }
    }

    /// How many descriptors: the arena's pages.
    #[cfg(feature = "internals")]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The descriptor of arena page `page`, if in range.
    pub(crate) fn get(&self, page: usize) -> Option<&Folio> {
        self.as_slice().get(page)
    }

    /// The arena page a descriptor of this table describes.
    pub(crate) fn page_of(&self, folio: &Folio) -> Option<usize> {
        self.page_of_addr(folio as *const Folio as usize)
    }

    /// The arena page whose descriptor sits at `addr`, if one of this table's.
    pub(crate) fn page_of_addr(&self, addr: usize) -> Option<usize> {
        let base = self.folios.as_ptr() as usize;
        let size = std::mem::size_of::<Folio>();
        let off = addr.checked_sub(base)?;
        (off % size == 0 && off / size < self.len).then_some(off / size)
    }

    /// Bytes of descriptors per arena page.
    pub(crate) const fn bytes_per_page() -> usize {
        std::mem::size_of::<Folio>()
    }
}

impl Drop for FolioTable {
    fn drop(&mut self) {
        // SAFETY: the `len` descriptors are initialised (zero bytes are a
        // free descriptor; under loom each was written) and nothing borrows
        // the table any more. The memory goes with `_memory` (under loom,
        // the block allocated with `layout`).
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.folios.as_ptr(),
                self.len,
            ));
            #[cfg(loom)]
            std::alloc::dealloc(self.folios.as_ptr().cast(), self.layout);
        }
    }
}
