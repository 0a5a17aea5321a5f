//! `anon`: a `memset` of fresh anonymous memory for every write, the
//! populate scenario's floor (what first touch costs); memory jobs only.
//! With `anon[thp]` the mapping asks for transparent huge pages and with
//! `anon[populate]` it is faulted in (`MADV_POPULATE_WRITE`) in the run's
//! setup, as foliocache's arena does.

use std::io;

use anyhow::{bail, Context, Result};

use super::base::{Engine, Kept};
use super::page_cache::PageCache;
use super::setup::{Run, Setup};
use super::thread_io::{lend_mut, AnonIo, SharedMapIo, ThreadIo};
use crate::sys::AnonMap;
use crate::units::fmt_size;

/// The `anon` engine: a fresh anonymous mapping per job thread.
#[derive(Default)]
pub(super) struct Anon {
    maps: Vec<AnonMap>,
}

impl Engine for Anon {
    fn page_cache(&self) -> PageCache {
        PageCache::Leave
    }

    fn prepare(&mut self, _: &mut Kept, _: &Run<'_>, _: &mut Setup) -> Result<()> {
        bail!("anon engine: it only populates memory (--scenario populate)")
    }

    fn prepare_memory(&mut self, _: &mut Kept, run: &Run<'_>, _: &mut Setup) -> Result<()> {
        let (job, opts) = (run.job, run.spec.anon);
        let size = run.size()?;
        self.maps = (0..job.nfiles())
            .map(|_| {
                let m = AnonMap::new(size)?;
                if opts.thp {
                    m.advise_huge_pages()?;
                }
                if opts.populate {
                    m.populate_write()?;
                }
                Ok(m)
            })
            .collect::<io::Result<_>>()
            .with_context(|| format!("anon engine: mapping {}", fmt_size(job.file_size)))?;
        Ok(())
    }

    /// Each thread its own mapping by `&mut`, or, where several threads
    /// share one, lent to each read-only.
    fn threads(&mut self, n: usize, shared: bool) -> Vec<ThreadIo<'_>> {
        lend_mut(
            &mut self.maps,
            n,
            shared,
            |m| ThreadIo::Anon(AnonIo(m)),
            |m| ThreadIo::SharedMap(SharedMapIo(m, false)),
        )
    }
}
