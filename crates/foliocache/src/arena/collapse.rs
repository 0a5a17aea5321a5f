//! Huge pages for shared memory where the host gives it none by itself.
//!
//! A memory file's pages are 4 KiB unless the host's `shmem_enabled` says
//! otherwise, and many hosts say `never`: a cache in shared memory (the
//! group's segment, `crate::shared`; the guardian's arena) then maps every
//! 4 KiB page by its own page table entry, and a random hit pays a TLB miss
//! that the in-process arena's 2 MiB pages do not. `MADV_COLLAPSE` (Linux
//! 6.1: `madvise_collapse`, then `collapse_file` for shared memory) builds
//! a 2 MiB folio of a range whatever that setting (only `deny` refuses):
//! it locks and unmaps the range's pages, copies them into the new folio,
//! fills its holes with zeros, and replaces them in the memory file, so
//! every process whose mapping is aligned maps it by one entry at its next
//! fault. The bytes are kept: a page some IO holds (an `O_DIRECT` read in
//! flight into it) makes the collapse give up (`EAGAIN`) rather than copy
//! under it, so it may run on memory in use. A block with no page at all
//! is refused, so one page of it is faulted in first
//! (`MADV_POPULATE_WRITE`, which changes no byte).

use std::io;
use std::time::Duration;

use rustix::io::Errno;
use rustix::mm::Advice;

/// A huge page's bytes: the unit collapsed.
pub(crate) const HUGE_BLOCK: usize = 2 << 20;

/// `MADV_COLLAPSE` (not in every libc's bindings).
const MADV_COLLAPSE: libc::c_int = 25;

/// Tries of a block some IO held.
const BUSY_TRIES: u32 = 4;

/// What a collapse of one block came to.
#[derive(Debug)]
pub(crate) enum Collapsed {
    /// The block is one 2 MiB page.
    Huge,
    /// Left in small pages this time (pages held by IO each try, or no
    /// huge page free): the next block may still be collapsed.
    Skipped,
    /// The kernel collapses no shared memory here (before 6.1, or
    /// `shmem_enabled` is `deny`): no block will be.
    Refused(io::Error),
}

/// Collapses the 2 MiB block at `addr` into one huge page.
///
/// # Safety
/// `addr` is 2 MiB aligned, and `[addr, addr + HUGE_BLOCK)` lies in a
/// shared, writable mapping of a memory file (at an offset that is a
/// multiple of 2 MiB) that lives for the call. The block's bytes are not
/// changed; only how they are mapped.
pub(crate) unsafe fn collapse_block(addr: *mut u8) -> Collapsed {
    debug_assert_eq!(addr as usize % HUGE_BLOCK, 0);
    if cfg!(miri) {
        return Collapsed::Refused(Errno::NOSYS.into());
    }
    // SAFETY: the first page of the caller's mapping (above); populating
    // faults it in as a write would, without changing its bytes.
    let first = unsafe { rustix::mm::madvise(addr.cast(), 4096, Advice::LinuxPopulateWrite) };
    if let Err(e) = first {
        return Collapsed::Refused(e.into());
    }
    for tries in 1..=BUSY_TRIES {
        // SAFETY: the block lies in the caller's mapping (above); the
        // advice changes how its pages are mapped, never their bytes.
        let r = unsafe { libc::madvise(addr.cast(), HUGE_BLOCK, MADV_COLLAPSE) };
        if r == 0 {
            return Collapsed::Huge;
        }
        let e = io::Error::last_os_error();
        match Errno::from_io_error(&e) {
            Some(Errno::AGAIN) if tries < BUSY_TRIES => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Some(Errno::AGAIN | Errno::NOMEM) => return Collapsed::Skipped,
            _ => return Collapsed::Refused(e),
        }
    }
    Collapsed::Skipped
}

/// Faults in `len` bytes of `region` from byte `start` (whole 2 MiB
/// blocks of a shared region: the guardian's segment), each block as one
/// huge page where the kernel collapses it (counted in `huge_bytes`), else
/// as small pages (`populate_range`). True while collapsing is still
/// worth trying: false once the kernel refused, and the caller stops
/// asking.
pub(super) fn populate_huge(
    region: &super::region::Region,
    huge_bytes: &crate::sync::AtomicUsize,
    start: usize,
    len: usize,
) -> bool {
    debug_assert!(region.shared && start + len <= region.len);
    let base = region.ptr.as_ptr();
    let mut collapse = true;
    for off in (start..start + len).step_by(HUGE_BLOCK) {
        let n = HUGE_BLOCK.min(start + len - off);
        if collapse && n == HUGE_BLOCK {
            // SAFETY: the block lies in the region (the caller's range), a
            // shared writable mapping of a memory file, 2 MiB aligned in
            // memory (`map_shared_aligned`) and in the file (the segment
            // aligns the arena), which the caller holds for the call.
            match unsafe { collapse_block(base.wrapping_add(off)) } {
                Collapsed::Huge => {
                    huge_bytes.fetch_add(HUGE_BLOCK, crate::sync::Ordering::Relaxed);
                    continue;
                }
                Collapsed::Skipped => {}
                Collapsed::Refused(e) => {
                    log::info!("arena: its shared pages stay 4 KiB (MADV_COLLAPSE refused: {e})");
                    collapse = false;
                }
            }
        }
        if let Err(e) = super::region::populate_range(base as usize + off, n) {
            log::debug!(
                "arena: MADV_POPULATE_WRITE of {} KiB failed ({e}); pages fault in on first write",
                n >> 10
            );
        }
    }
    collapse
}
