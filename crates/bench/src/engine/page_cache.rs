//! The kernel's page cache under the data files before a run: warmed for
//! the engines that read through it, dropped for a cold run and for
//! `dontcache`, and checked with `mincore` afterwards
//! ([`Setup::residency`], a warning where it is not what the run needs).
//!
//! Warming is a buffered pass over each file (1 MiB reads), repeated
//! until `mincore` finds it all resident, at most [`WARM_PASSES`] times:
//! an idle-memory reclaimer may evict page cache untouched for a while,
//! so it is done again before every run, right before the measurement.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use anyhow::{Context, Result};

use super::setup::Setup;
use crate::sys;

/// Buffered passes at most, to get a file fully into the page cache.
const WARM_PASSES: u32 = 3;

/// What an engine needs of the kernel's page cache before a warm run
/// ([`Engine::page_cache`](super::Engine::page_cache)); a cold run drops
/// the files for every engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageCache {
    /// The files fully cached: the engine reads through the page cache
    /// (`kernel`, `mmap`).
    Warm,
    /// The files dropped: the engine's reads are the uncached reads it
    /// exists for (`dontcache`).
    Drop,
    /// Left as it is: the engine does not read through it, or warms its
    /// own cache.
    Leave,
}

/// Brings the page cache under `files` to what `want` says (every file
/// dropped if `cold`), noting the residency and the passes in `setup`.
///
/// # Errors
/// Opening, reading, syncing or advising a file, or `mincore`.
pub(super) fn settle(
    want: PageCache,
    cold: bool,
    files: &[PathBuf],
    setup: &mut Setup,
) -> Result<()> {
    match (cold, want) {
        (true, _) | (false, PageCache::Drop) => setup.residency = Some(drop_files(files)?),
        (false, PageCache::Warm) => {
            let (residency, passes) = warm_kernel(files)?;
            if passes > 1 {
                setup.notes.push(format!(
                    "the kernel page cache took {passes} buffered passes to warm"
                ));
            }
            setup.residency = Some(residency);
        }
        (false, PageCache::Leave) => {}
    }
    Ok(())
}

/// A warning in `setup` where the residency found after warming or
/// dropping is not what the run needs (all of it, or none).
pub(super) fn warn_residency(setup: &mut Setup) {
    if let Some((resident, pages, when)) = setup.residency {
        let want_all = when == "after warming";
        if want_all && resident < pages {
            setup.notes.push(format!(
                "warning: kernel page cache holds {resident} of {pages} pages after warming: \
                 the run is not fully cached"
            ));
        } else if !want_all && resident > 0 {
            setup.notes.push(format!(
                "warning: {resident} of {pages} pages still in the kernel page cache after the drop"
            ));
        }
    }
}

/// Reads every file through the kernel page cache (1 MiB buffered reads)
/// until `mincore` finds it all resident, at most [`WARM_PASSES`] times
/// (a folio left over from an `RWF_DONTCACHE` read is dropped again by
/// the first buffered read that touches it); the resident pages after the
/// last pass, and the number of passes.
///
/// # Errors
/// Opening or reading a file, or `mincore`.
fn warm_kernel(files: &[PathBuf]) -> Result<((usize, usize, &'static str), u32)> {
    let mut buf = vec![0u8; 1 << 20];
    let mut pass = 0;
    loop {
        pass += 1;
        let (mut resident, mut pages) = (0, 0);
        for p in files {
            let f = File::open(p)?;
            let len = f.metadata()?.len();
            let mut off = 0;
            while off < len {
                let n = f.read_at(&mut buf, off)?;
                if n == 0 {
                    break;
                }
                off += n as u64;
            }
            let (r, n) = sys::resident_pages(&f, len).context("mincore")?;
            resident += r;
            pages += n;
        }
        if resident == pages || pass == WARM_PASSES {
            return Ok(((resident, pages, "after warming"), pass));
        }
    }
}

/// Syncs every file and drops it from the kernel page cache, then counts
/// the resident pages left: (resident pages, pages, "after drop").
///
/// # Errors
/// Opening, syncing or advising a file, or `mincore`.
pub fn drop_files(files: &[PathBuf]) -> Result<(usize, usize, &'static str)> {
    let (mut resident, mut pages) = (0, 0);
    for p in files {
        let f = File::open(p)?;
        f.sync_data()?;
        sys::drop_cache(&f).context("posix_fadvise(DONTNEED)")?;
        let (r, n) = sys::resident_pages(&f, f.metadata()?.len()).context("mincore")?;
        resident += r;
        pages += n;
    }
    Ok((resident, pages, "after drop"))
}
