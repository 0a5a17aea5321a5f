//! The FUSE engines' mounts ([`FuseMount`]), kept across their runs: the
//! `fuse` engine's (a fresh one for a cold run, a write job, or after
//! another engine wrote the files) and the `fuse-null` engine's.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use super::fuse_mount::{FuseFigures, FuseMount};
use super::setup::{RunMode, Setup};
use crate::spec::EngineKind;
use crate::units::fmt_size;

/// The FUSE engines' mounts, kept across their runs.
#[derive(Default)]
pub(super) struct Mounts {
    /// The `fuse` engine's mount.
    fuse: Option<FuseMount>,
    /// The `fuse-null` engine's mount.
    null: Option<FuseMount>,
    /// Another engine wrote the data files since the `fuse` mount was
    /// made (its cache may hold what they were before).
    stale: bool,
}

impl Mounts {
    /// Notes that the engine `kind` is about to write the data files: a
    /// `fuse` mount's cache made before may then hold what they were
    /// before (unless `fuse` writes them itself, through its mount).
    pub(super) fn writing(&mut self, kind: EngineKind) {
        if kind != EngineKind::Fuse {
            self.stale = true;
        }
    }

    /// The `fuse` engine's mount (kept from an earlier run, or made now:
    /// always new for a cold run, a write job, or after another engine
    /// wrote the files), warmed by one read pass through the mount for a
    /// warm run; the data files' paths under the mount.
    pub(super) fn fuse(
        &mut self,
        files: &[PathBuf],
        mode: RunMode,
        write: bool,
        setup: &mut Setup,
    ) -> Result<Vec<PathBuf>> {
        let backing = common_dir(files)?;
        let reuse = self.fuse.as_ref().is_some_and(|m| {
            !mode.cold
                && !write
                && !self.stale
                && m.capacity() == Some(mode.capacity)
                && m.backing() == backing
        });
        if !reuse {
            if let Some(m) = self.fuse.take() {
                m.unmount()?;
            }
            self.fuse = Some(FuseMount::new(&backing, Some(mode.capacity))?);
            self.stale = false;
        }
        let m = self.fuse.as_ref().context("fuse engine: no mount")?;
        let paths = files
            .iter()
            .map(|p| m.path_of(p))
            .collect::<Result<Vec<_>>>()?;
        setup.notes.push(format!(
            "fuse: {} served at {} by foliocache-fuse in this process ({} threads, a cache of {}; \
             the server's CPU time is in the run's figures)",
            backing.display(),
            m.mountpoint().display(),
            m.threads(),
            fmt_size(mode.capacity)
        ));
        if !mode.cold {
            let t = Instant::now();
            warm(&paths)?;
            setup.notes.push(format!(
                "fuse: warmed by one read pass through the mount in {:.2} s",
                t.elapsed().as_secs_f64()
            ));
        }
        if let Some(s) = m.cache_figures() {
            setup.fuse_before = Some(s);
        }
        Ok(paths)
    }

    /// The `fuse-null` engine's mount of `files`' directory (kept from an
    /// earlier run; the files' sizes are read at the mount); the data
    /// files' paths under it.
    pub(super) fn null(&mut self, files: &[PathBuf], setup: &mut Setup) -> Result<Vec<PathBuf>> {
        let backing = common_dir(files)?;
        if self.null.as_ref().is_some_and(|m| m.backing() != backing) {
            if let Some(m) = self.null.take() {
                m.unmount()?;
            }
        }
        if self.null.is_none() {
            self.null = Some(FuseMount::new(&backing, None)?);
        }
        let m = self.null.as_ref().context("fuse-null engine: no mount")?;
        setup.notes.push(format!(
            "fuse-null: {}'s files as zeros served at {} by foliocache_fuse::NullFs in this \
             process ({} threads, no cache: the FUSE crossing alone)",
            backing.display(),
            m.mountpoint().display(),
            m.threads(),
        ));
        files.iter().map(|p| m.path_of(p)).collect()
    }

    /// The `fuse` engine's cache figures now (the mount's control file),
    /// if it is mounted.
    pub(super) fn figures(&self) -> Option<FuseFigures> {
        self.fuse.as_ref().and_then(FuseMount::cache_figures)
    }

    /// Unmounts the mount of the engine `label`, if it is a FUSE engine
    /// (after a cold run, whose mount the next run would not reuse).
    pub(super) fn release(&mut self, label: &str) {
        let mount = if label == EngineKind::Fuse.name() {
            self.fuse.take()
        } else if label == EngineKind::FuseNull.name() {
            self.null.take()
        } else {
            None
        };
        if let Some(m) = mount {
            // An unmount's failure is reported by the next mount's.
            let _ = m.unmount();
        }
    }

    /// Unmounts both mounts.
    ///
    /// # Errors
    /// An unmount's (or the writeback of the `fuse` mount's dirty data).
    pub(super) fn clear(&mut self) -> Result<()> {
        let null = self.null.take().map_or(Ok(()), FuseMount::unmount);
        self.fuse.take().map_or(Ok(()), FuseMount::unmount)?;
        null
    }
}

/// One read pass over each of `paths` (1 MiB reads).
fn warm(paths: &[PathBuf]) -> Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    for p in paths {
        let f = File::open(p).with_context(|| format!("opening {}", p.display()))?;
        let len = f.metadata()?.len();
        let mut off = 0;
        while off < len {
            let n = f.read_at(&mut buf, off).context("fuse engine: warm pass")?;
            if n == 0 {
                break;
            }
            off += n as u64;
        }
    }
    Ok(())
}

/// The one directory all of `files` are in, canonical.
fn common_dir(files: &[PathBuf]) -> Result<PathBuf> {
    let mut dir: Option<PathBuf> = None;
    for p in files {
        let d = p
            .parent()
            .with_context(|| format!("fuse engine: {} has no directory", p.display()))?
            .canonicalize()
            .with_context(|| format!("fuse engine: {}", p.display()))?;
        match &dir {
            Some(x) if *x != d => bail!(
                "fuse engine: the data files are in two directories ({} and {})",
                x.display(),
                d.display()
            ),
            _ => dir = Some(d),
        }
    }
    dir.context("fuse engine: no data files")
}
