//! The statistics the control file answers with: the cache's, as JSON,
//! and the residency of a file (`cachestat`).

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use nix::fcntl::{self, OFlag};
use nix::sys::stat::{self, Mode, SFlag};

use crate::control::{self};
use crate::inode::ROOT;

use super::{FolioFs, Store};

impl FolioFs {
    /// The figures `foliocache stat` shows, as JSON: the cache's, and
    /// cachestat of each path (relative to the mount root) asked for.
    pub(crate) fn stats_json(&self, paths: &[String]) -> serde_json::Value {
        let files: Vec<serde_json::Value> = paths
            .iter()
            .map(|p| match self.cachestat_of(p) {
                Ok(cs) => serde_json::json!({
                    "path": p,
                    "cached": cs.cached,
                    "dirty": cs.dirty,
                    "writeback": cs.writeback,
                    "evicted": cs.evicted,
                    "recently_evicted": cs.recently_evicted,
                }),
                Err(e) => serde_json::json!({ "path": p, "error": e.to_string() }),
            })
            .collect();
        let mut v = match &self.store {
            Store::Private(cache) => control::own_cache_json(cache),
            Store::Shared { cache, name } => {
                let mut stats = control::shared_stats_json(&cache.stats());
                // The group's curve, as its host last published it.
                if let Some(curve) = cache.hit_ratio_curve() {
                    stats["hit_ratio_curve"] = control::curve_json(&curve);
                }
                serde_json::json!({
                    "cache": stats,
                    "io_engine": "shared",
                    "shared": { "name": name },
                })
            }
        };
        v["dontcache"] = self.dontcache.into();
        v["shared_mmap"] = self.shared_mmap().into();
        v["descriptors"] = self.descriptors_json();
        v["files"] = files.into();
        v
    }

    /// The descriptors the nodes hold and their budgets ([`crate::fds`]).
    fn descriptors_json(&self) -> serde_json::Value {
        let (paths, paths_budget, files, files_budget) = self.descriptors();
        serde_json::json!({
            "paths": paths,
            "paths_budget": paths_budget,
            "files": files,
            "files_budget": files_budget,
        })
    }

    /// cachestat of the whole file at `rel` (below the root, each
    /// component looked up without following symlinks).
    pub(super) fn cachestat_of(&self, rel: &str) -> io::Result<foliocache::CacheStat> {
        let root = self
            .inodes
            .get(ROOT)
            .ok_or_else(|| io::Error::other("no root"))?;
        let root_fd = root
            .fd()
            .map_err(|e| io::Error::from_raw_os_error(i32::from(e)))?;
        let mut cur: Option<OwnedFd> = None;
        for comp in rel.split('/').filter(|c| !c.is_empty() && *c != ".") {
            if comp == ".." {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "`..` is not allowed in a control path",
                ));
            }
            let dir: &OwnedFd = cur.as_ref().unwrap_or(&root_fd);
            let fd = fcntl::openat(
                dir.as_fd(),
                comp,
                OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )?;
            cur = Some(fd);
        }
        let fd = cur.ok_or_else(|| io::Error::from(nix::errno::Errno::EISDIR))?;
        let st = stat::fstat(&fd)?;
        if st.st_mode & SFlag::S_IFMT.bits() != SFlag::S_IFREG.bits() {
            return Err(nix::errno::Errno::EINVAL.into());
        }
        let Some(cache) = self.cache() else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a named cache keeps no per-file figures (`foliocache cache stat` shows its own)",
            ));
        };
        // Not opened through the cache: an open would take a warm-loaded
        // file over, and its folios would go with that handle.
        cache.cachestat_file(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&fd)
        ))
    }
}
