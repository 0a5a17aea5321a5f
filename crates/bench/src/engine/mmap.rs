//! `mmap`: copies out of (and into) a `MAP_SHARED` mapping of each data
//! file, whose pages are the kernel's page cache: warmed by a buffered
//! pass and pre-faulted before a warm run. Also [`SharedMapIo`], the
//! read-only copy out of a mapping several threads read (a shared `mmap`
//! or `anon` job, and `memcpy`).

use std::fs::File;
use std::io;

use anyhow::{Context, Result};

use super::io::{copy_and_sum, lend_mut, summed, BlockIo, OpenFiles, ThreadIo};
use super::{Engine, Kept, PageCache, Run, Setup};
use crate::sys::{huge_mapped_all, Mapping, Mmap};

/// Copies out of and into a mapping this job thread owns: `&mut`, so no
/// other thread reads or writes it meanwhile.
pub struct MmapIo<'a>(pub &'a mut Mmap);

/// Reads as [`SharedMapIo`] does, summing in place; writes too, since the
/// mapping is this thread's alone.
impl BlockIo for MmapIo<'_> {
    #[inline]
    fn read(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        SharedMapIo(self.0, true).read(buf, off)
    }
    #[inline]
    fn read_consume(&mut self, buf: &mut [u8], off: u64) -> io::Result<(usize, u64)> {
        SharedMapIo(self.0, true).read_consume(buf, off)
    }
    #[inline]
    fn write(&mut self, buf: &[u8], off: u64) -> io::Result<usize> {
        self.0.copy_in(off as usize, buf)?;
        Ok(buf.len())
    }
}

/// Copies out of a mapping that all the job's threads read (`--shared`
/// with several threads, `mmap` or `anon`; `memcpy`'s anonymous copy of
/// the file): read-only, since a write would race the other threads'
/// copies (`validate` refuses such write jobs before they get here).
/// `--consume` sums the bytes in place if the second field says so
/// (`mmap`), else in the buffer copied to (`memcpy`, a copy engine).
pub struct SharedMapIo<'a>(pub &'a Mapping, pub bool);

impl BlockIo for SharedMapIo<'_> {
    #[inline]
    fn read(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.0.copy_out(off as usize, buf)?;
        Ok(buf.len())
    }
    #[inline]
    fn read_consume(&mut self, buf: &mut [u8], off: u64) -> io::Result<(usize, u64)> {
        if !self.1 {
            return copy_and_sum(self, buf, off);
        }
        Ok(summed(self.0.slice(off as usize, buf.len())?))
    }
    fn write(&mut self, _: &[u8], _: u64) -> io::Result<usize> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "threads writing one shared mapping would race: drop --shared for mmap writes",
        ))
    }
}

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
