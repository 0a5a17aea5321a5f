//! `tokio-fs`: what a tokio program reads a file with today. tokio's
//! `fs::File` has no positional read, so a program reading blocks at
//! offsets does what tokio's file does inside: the blocking call on the
//! runtime's blocking pool (`spawn_blocking` of `FileExt::read_at` on a
//! buffered file, here into the task's own buffer, then copied to the
//! caller's, as `tokio::fs::File` copies out of its buffer). `tasks=N`
//! tasks per job thread on one current-thread runtime (the loop is
//! `job`'s); the kernel's page cache is warmed before a warm run, as for
//! `kernel`. Reads only.

use std::fs::File;
use std::io;
use std::sync::Arc;

use anyhow::{Context, Result};

use super::base::{Engine, Kept};
use super::page_cache::PageCache;
use super::setup::{Run, Setup};
use super::thread_io::{lend, OpenFiles, ThreadIo, TokioFsIo};

/// The `tokio-fs` engine: its files, each also shared with the blocking
/// pool, and the tasks per job thread.
#[derive(Default)]
pub(super) struct TokioFs {
    files: OpenFiles,
    shared: Vec<Arc<File>>,
    tasks: usize,
}

impl Engine for TokioFs {
    fn page_cache(&self) -> PageCache {
        PageCache::Warm
    }

    fn prepare(&mut self, _: &mut Kept, run: &Run<'_>, _: &mut Setup) -> Result<()> {
        self.files = OpenFiles::open(run.files, false, false)?;
        self.shared = self
            .files
            .0
            .iter()
            .map(|f| f.try_clone().map(Arc::new))
            .collect::<io::Result<_>>()
            .context("tokio-fs engine: duplicating the files' descriptors")?;
        self.tasks = run.spec.tasks.unwrap_or(1);
        Ok(())
    }

    fn threads(&mut self, n: usize, shared: bool) -> Vec<ThreadIo<'_>> {
        let tasks = self.tasks;
        lend(&self.shared, n, shared, |f| {
            ThreadIo::TokioFs(TokioFsIo(f.clone()), tasks)
        })
    }

    fn files(&self) -> Option<&OpenFiles> {
        Some(&self.files)
    }
}
