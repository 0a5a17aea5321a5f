//! `mmap`: copies out of (and into) a `MAP_SHARED` mapping of each data
//! file, whose pages are the kernel's page cache: warmed by a buffered
//! pass and pre-faulted before a warm run. Its threads' IO is
//! `thread_io::MmapIo`, or `thread_io::SharedMapIo` where several threads
//! read one mapping (a shared `mmap` or `anon` job, and `memcpy`).

use std::fs::File;
use std::io;

use anyhow::{Context, Result};

use super::base::{Engine, Kept};
use super::page_cache::PageCache;
use super::setup::{Run, Setup};
use super::thread_io::{lend_mut, MmapIo, OpenFiles, SharedMapIo, ThreadIo};
use crate::sys::{huge_mapped_all, Mmap};

/// The `mmap` engine: a mapping of each data file.
#[derive(Default)]
pub(super) struct MmapEngine {
    maps: Vec<Mmap>,
}

impl Engine for MmapEngine {
    fn page_cache(&self) -> PageCache {
        PageCache::Warm
    }

    /// Maps the files (writable for a write job); for a warm run,
    /// pre-faults the mappings and counts their residency and their
    /// 2 MiB entries.
    fn prepare(&mut self, _: &mut Kept, run: &Run<'_>, setup: &mut Setup) -> Result<()> {
        let write = run.write();
        let fds = OpenFiles::open(run.files, write, false)?;
        let maps = map_data_files(&fds.0, run.job.file_size as usize, write)
            .context("mmap engine: mapping the data file")?;
        if !run.mode.cold {
            // Residency is what the mapping sees once faulted in.
            let (mut resident, mut pages) = (0, 0);
            for m in &maps {
                m.prefault(write);
                let (r, n) = m.resident_pages().context("mincore")?;
                resident += r;
                pages += n;
            }
            setup.residency = Some((resident, pages, "after warming"));
            setup.huge_mapped = Some(
                huge_mapped_all(maps.iter().map(|m| &**m)).context("reading /proc/self/smaps")?,
            );
        }
        self.maps = maps;
        Ok(())
    }

    /// Each thread its own mapping by `&mut`, or, where several threads
    /// share one, lent to each read-only (summed in place by
    /// `--consume`).
    fn threads(&mut self, n: usize, shared: bool) -> Vec<ThreadIo<'_>> {
        lend_mut(
            &mut self.maps,
            n,
            shared,
            |m| ThreadIo::Mmap(MmapIo(m)),
            |m| ThreadIo::SharedMap(SharedMapIo(m, true)),
        )
    }

    /// `msync(MS_SYNC)` of each mapping.
    fn sync(&self) -> io::Result<()> {
        self.maps.iter().try_for_each(Mmap::sync)
    }

    /// `MADV_RANDOM`: a fault reads the page it wants.
    fn advise_random(&self) -> io::Result<bool> {
        self.maps.iter().try_for_each(Mmap::advise_random)?;
        Ok(true)
    }
}

/// Maps each of the bench's data files (the `mmap` engine), `len` bytes,
/// writable if `write`. The crate's one use of an unsafe function outside
/// `sys`: whether a file may be mapped depends on what the bench does with
/// it, which only the engines know.
#[allow(unsafe_code)]
fn map_data_files(fds: &[File], len: usize, write: bool) -> io::Result<Vec<Mmap>> {
    fds.iter()
        // SAFETY: `Mmap::new`'s contract holds: these are the bench's own
        // data files (`DataSet`), which nothing outside it writes, mapped for
        // one job (the mappings drop with the prepared engine before the next
        // engine is prepared). Within the job only a mapping's own thread
        // writes it (`MmapEngine::threads` hands each writing thread its
        // mapping by `&mut`). No other engine writes the files meanwhile:
        // engines run one at a time, and every write job ends with its sync
        // (`job::run`; a failed one stops the bench), so no engine's cache
        // (foliocache's, the FUSE server's) holds dirty data to write back
        // into them later; the hot reader only reads, another file. The
        // files are `file_size` long (`DataSet::files`) and nothing
        // truncates them.
        .map(|f| unsafe { Mmap::new(f, len, write) })
        .collect()
}
