//! `memcpy`: copies (`copy_from_slice`) out of anonymous memory holding
//! the data file's bytes, read in before the run: the limit of a cached
//! read, a bare memory copy into the same buffer. Reads only. With
//! `memcpy[inplace]` and `--consume`, each read's bytes are summed where
//! they lie instead: the limit of a zero-copy read.

use std::io;

use anyhow::{bail, Context, Result};

use super::base::{Engine, Kept};
use super::page_cache::PageCache;
use super::setup::{Run, Setup};
use super::thread_io::{lend, OpenFiles, SharedMapIo, ThreadIo};
use crate::sys::{huge_mapped_all, AnonMap};
use crate::units::fmt_size;

/// The `memcpy` engine: anonymous mappings holding the data files' bytes,
/// and whether `--consume` sums them in place (`memcpy[inplace]`).
#[derive(Default)]
pub(super) struct Memcpy {
    maps: Vec<AnonMap>,
    inplace: bool,
}

impl Engine for Memcpy {
    fn page_cache(&self) -> PageCache {
        PageCache::Leave
    }

    /// Reads each data file into anonymous memory (transparent huge pages
    /// asked for) and counts its 2 MiB entries.
    fn prepare(&mut self, _: &mut Kept, run: &Run<'_>, setup: &mut Setup) -> Result<()> {
        let (spec, job) = (run.spec, run.job);
        if run.write() {
            bail!("memcpy engine: it copies out of memory holding the file: read jobs only");
        }
        let len = run.size()?;
        let maps = OpenFiles::open(run.files, false, false)?
            .0
            .iter()
            .map(|f| {
                let mut m = AnonMap::new(len)?;
                m.advise_huge_pages()?;
                m.load(f)?;
                Ok(m)
            })
            .collect::<io::Result<Vec<AnonMap>>>()
            .context("memcpy engine: reading the data file into memory")?;
        setup.huge_mapped =
            Some(huge_mapped_all(maps.iter().map(|m| &**m)).context("reading /proc/self/smaps")?);
        let read = if spec.inplace && run.mode.consume {
            "each read's bytes are summed where they lie (zero copy's limit)"
        } else {
            "each read is a copy_from_slice out of it"
        };
        setup.notes.push(format!(
            "{}: the data file's {} in anonymous memory (transparent huge pages asked \
             for), read in before the run; {read}",
            spec.label,
            fmt_size(job.file_size)
        ));
        self.maps = maps;
        self.inplace = spec.inplace;
        Ok(())
    }

    /// Every thread copies out of its file's memory, read only.
    fn threads(&mut self, n: usize, shared: bool) -> Vec<ThreadIo<'_>> {
        let inplace = self.inplace;
        lend(&self.maps, n, shared, |m| {
            ThreadIo::SharedMap(SharedMapIo(m, inplace))
        })
    }
}
