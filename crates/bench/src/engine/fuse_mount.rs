//! A FUSE mount served in this process, from mount to unmount: the data
//! directory through `foliocache-fuse` (a cache in front of it), or its
//! files as zeros through `foliocache_fuse::NullFs`, at a temporary mount
//! point. [`FuseMount::new`] mounts (the mount is made when it returns,
//! and served by threads of this process, whose CPU time is the
//! process's); [`FuseMount::cache_figures`] reads the cache's figures from the
//! mount's control file; [`FuseMount::unmount`] unmounts, waits for the
//! server to write every dirty folio back and reports the errors, which
//! dropping the mount ignores.
//!
//! The `fuse` and `fuse-null` engines keep one each ([`super::mounts`]);
//! the `programs` scenario mounts one for `db_bench` to run through.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// A cache's figures as the mount's control file gives them.
#[derive(Debug, Clone, Copy, Default)]
pub struct FuseFigures {
    /// Reads served from the cache.
    pub hits: u64,
    /// Reads that missed.
    pub misses: u64,
    /// Reads from the backing.
    pub io_reads: u64,
}

/// The `fuse` engine's mount: the data directory served by
/// `foliocache-fuse` in this process at a temporary mount point (or the
/// `fuse-null` engine's, by its `NullFs`); also the `programs` scenario's
/// mount, which `db_bench` runs through.
/// Dropping it unmounts (errors ignored); [`FuseMount::unmount`] reports
/// them.
pub(crate) struct FuseMount {
    session: Option<fuser::BackgroundSession>,
    /// The mount point (removed after the unmount: fields drop after
    /// [`Drop::drop`]).
    dir: tempfile::TempDir,
    backing: PathBuf,
    /// The cache's capacity (`None`: a `NullFs` mount).
    capacity: Option<u64>,
    threads: usize,
}

impl FuseMount {
    /// Mounts `backing` with a cache of `capacity` bytes (`None`: its
    /// files as zeros, by `NullFs`) at a new temporary directory (outside
    /// `backing`).
    pub(crate) fn new(backing: &Path, capacity: Option<u64>) -> Result<FuseMount> {
        let mk = |at: &Path| {
            tempfile::Builder::new()
                .prefix("foliocache-bench-mnt-")
                .tempdir_in(at)
        };
        let tmp = std::env::temp_dir();
        let tmp = tmp.canonicalize().unwrap_or(tmp);
        let dir = if tmp.starts_with(backing) {
            // The mount point must not be inside the backing directory.
            let parent = backing
                .parent()
                .context("fuse engine: the data directory is `/`: no place for a mount point")?;
            mk(parent)
        } else {
            mk(&tmp)
        }
        .context("fuse engine: making a temporary mount point")?;
        let opts = foliocache_fuse::MountOptions::new(
            usize::try_from(capacity.unwrap_or(0)).context("fuse engine: capacity too large")?,
        );
        let session = match capacity {
            Some(_) => foliocache_fuse::spawn(backing, dir.path(), &opts),
            None => foliocache_fuse::spawn_null(backing, dir.path(), &opts),
        }
        .with_context(|| {
            format!(
                "fuse engine: mounting {} at {}",
                backing.display(),
                dir.path().display()
            )
        })?;
        Ok(FuseMount {
            session: Some(session),
            dir,
            backing: backing.to_path_buf(),
            capacity,
            threads: opts.threads,
        })
    }

    pub(crate) fn mountpoint(&self) -> &Path {
        self.dir.path()
    }

    /// The directory it serves.
    pub(super) fn backing(&self) -> &Path {
        &self.backing
    }

    /// The cache's capacity (`None`: a `NullFs` mount).
    pub(super) fn capacity(&self) -> Option<u64> {
        self.capacity
    }

    /// The server's threads.
    pub(super) fn threads(&self) -> usize {
        self.threads
    }

    /// `p` (a file of the backing directory) under the mount.
    pub(super) fn path_of(&self, p: &Path) -> Result<PathBuf> {
        let name = p
            .file_name()
            .with_context(|| format!("fuse engine: {} is not a file", p.display()))?;
        Ok(self.mountpoint().join(name))
    }

    /// The cache's figures from the control file (`None` if it cannot be
    /// read).
    pub(crate) fn cache_figures(&self) -> Option<FuseFigures> {
        let text =
            std::fs::read_to_string(self.mountpoint().join(foliocache_fuse::CONTROL_NAME)).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        let n = |k: &str| v["cache"][k].as_u64();
        Some(FuseFigures {
            hits: n("hits")?,
            misses: n("misses")?,
            io_reads: n("io_reads")?,
        })
    }

    /// Unmounts, waits for the server (which writes every dirty folio
    /// back), and removes the mount point.
    pub(crate) fn unmount(mut self) -> Result<()> {
        if let Some(s) = self.session.take() {
            s.umount_and_join().with_context(|| {
                format!("fuse engine: unmounting {}", self.mountpoint().display())
            })?;
        }
        Ok(())
    }
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.umount_and_join();
        }
    }
}
