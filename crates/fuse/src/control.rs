//! The control file: how `foliocache stat` asks a running mount for its
//! figures.
//!
//! The mount's root has a hidden regular file, [`CONTROL_NAME`]
//! (`.foliocache-control`, mode 0600, owned by the server's user, not
//! listed by readdir; a backing file of that name at the root is hidden by
//! it). Protocol, per open file description:
//! 1. optionally write requests, one path per line, each relative to the
//!    mount root (components are looked up without following symlinks,
//!    `..` is refused);
//! 2. read from offset 0 (seek back after writing) to end of file: one
//!    JSON object,
//!    `{"cache": {...CacheStats..., "hit_ratio": f}, "io_engine": s,
//!    "dontcache": b, "shared_mmap": b, "files": [{"path": s, "cached": n, "dirty": n,
//!    "writeback": n, "evicted": n, "recently_evicted": n} | {"path": s,
//!    "error": s}]}` and a newline. With a named shared cache, `"cache"`
//!    has the shared cache's figures ([`shared_stats_json`]), `"shared"`
//!    is `{"name": s}`, and each file has an `"error"` (a shared cache
//!    keeps no per-file figures). An object store's mount
//!    (`ObjectFs`, read-only: the file is opened for reading and no
//!    request is written) adds `"object_store": {...}`, the store's
//!    figures. The figures are taken at the read at offset 0; later
//!    offsets read the same snapshot.
//!
//! The file is opened with direct IO, so the kernel asks the server for
//! every read whatever size the file claims (0).

use std::time::UNIX_EPOCH;

use foliocache::{Cache, CacheFigures, CacheStats, SharedStats};
use fuser::{Errno, FileAttr, FileType, INodeNo};

/// The control file's name at the mount root.
pub const CONTROL_NAME: &str = ".foliocache-control";

/// The control file's node id (never handed to a backing inode: those
/// count up from 2).
pub const CONTROL_INO: u64 = 0x7fff_ffff_ffff_fff0;

/// The most request bytes one open control file takes.
const MAX_REQUEST: usize = 1 << 20;

/// The control file's attributes: a 0600 regular file of the server's
/// user, size 0.
pub(crate) fn attr(owner: (u32, u32)) -> FileAttr {
    FileAttr {
        ino: INodeNo(CONTROL_INO),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0o600,
        nlink: 1,
        uid: owner.0,
        gid: owner.1,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// One open control file: the request written, the answer being read.
#[derive(Default)]
pub(crate) struct Session {
    request: Vec<u8>,
    answer: Option<Vec<u8>>,
}

impl Session {
    pub(crate) fn write(&mut self, data: &[u8]) -> Result<usize, Errno> {
        if self.request.len() + data.len() > MAX_REQUEST {
            return Err(Errno::EFBIG);
        }
        self.request.extend_from_slice(data);
        self.answer = None;
        Ok(data.len())
    }

    /// `size` bytes at `offset` of the answer, which `answer` makes (from
    /// the paths requested) at a read at offset 0 or the first read.
    pub(crate) fn read(
        &mut self,
        offset: u64,
        size: usize,
        answer: impl FnOnce(&[String]) -> serde_json::Value,
    ) -> Vec<u8> {
        if offset == 0 || self.answer.is_none() {
            let paths: Vec<String> = String::from_utf8_lossy(&self.request)
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect();
            let mut out = answer(&paths).to_string().into_bytes();
            out.push(b'\n');
            self.answer = Some(out);
        }
        let a = self.answer.as_deref().unwrap_or_default();
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(a.len());
        let end = start.saturating_add(size).min(a.len());
        a[start..end].to_vec()
    }
}

/// The cache's figures as JSON, with the hit ratio.
pub fn cache_stats_json(s: &CacheStats) -> serde_json::Value {
    let ratio = hit_ratio(s.hits, s.misses);
    serde_json::json!({
        "hits": s.hits,
        "misses": s.misses,
        "hit_ratio": ratio,
        "read_bytes": s.read_bytes,
        "memory_bytes": s.memory_bytes(),
        "reads_line": CacheFigures::of_cache(s).reads_line(),
        "folios": s.folios,
        "bytes_cached": s.bytes_cached,
        "dirty_bytes": s.dirty_bytes,
        "writeback_bytes": s.writeback_bytes,
        "capacity_bytes": s.capacity_bytes,
        "free_bytes": s.free_bytes,
        "evictions": s.evictions,
        "refaults": s.refaults,
        "activations": s.activations,
        "shadows": s.shadows,
        "shadow_bytes": s.shadow_bytes,
        "dropbehind_drops": s.dropbehind_drops,
        "io_reads": s.io_reads,
        "io_bytes": s.io_bytes,
        "io_writes": s.io_writes,
        "io_write_bytes": s.io_write_bytes,
        "writeback_errors": s.writeback_errors,
        "throttled": s.throttled,
        "readahead_windows": s.readahead_windows,
    })
}

/// A named shared cache's figures as JSON: the fields of
/// [`cache_stats_json`] it has (its pages counted as folios and bytes;
/// hits and misses are the server's own reads, the bytes and
/// `"reads_line"` every process's, as `"group_hits"` and
/// `"group_misses"`), and its own
/// (`"pages"`, `"recoveries"`, `"processes"`, `"huge_bytes"`: the pages
/// in 2 MiB pages).
pub fn shared_stats_json(s: &SharedStats) -> serde_json::Value {
    const PAGE: u64 = 4096;
    let ratio = hit_ratio(s.hits, s.misses);
    let group = CacheFigures::of_group(s);
    serde_json::json!({
        "hits": s.hits,
        "misses": s.misses,
        "hit_ratio": ratio,
        "group_hits": s.group_hits,
        "group_misses": s.group_misses,
        "read_bytes": group.read_bytes,
        "memory_bytes": group.memory_bytes,
        "reads_line": group.reads_line(),
        "folios": s.cached,
        "bytes_cached": s.cached * PAGE,
        "dirty_bytes": s.dirty * PAGE,
        "capacity_bytes": s.pages * PAGE,
        "free_bytes": s.pages.saturating_sub(s.cached) * PAGE,
        "evictions": s.evictions,
        "pages": s.pages,
        "recoveries": s.recoveries,
        "processes": s.processes,
        "huge_bytes": s.huge_bytes,
    })
}

/// The figures of a mount's own cache: its statistics with the
/// predicted hit ratios, its IO engine, the warm start's progress.
pub(crate) fn own_cache_json(cache: &Cache) -> serde_json::Value {
    let mut stats = cache_stats_json(&cache.stats());
    stats["hit_ratio_curve"] = curve_json(&cache.hit_ratio_curve());
    serde_json::json!({
        "cache": stats,
        "io_engine": cache.io_engine_name(),
        "warm": crate::warm::progress_json(&cache.warm_progress()),
    })
}

/// A hit-ratio curve as JSON (`"hit_ratio_curve"` of a cache's figures,
/// the mount's own or the group's: `SharedCache::hit_ratio_curve`):
/// `"points"`, `[capacity ratio, hit ratio]` each, the hit ratio `null`
/// while the point is not yet known (`CurvePoint::known`); `"bounds"`,
/// how far above each point's the ratio may lie; `"accesses"`, the page
/// reads of its window.
pub fn curve_json(curve: &foliocache::HitRatioCurve) -> serde_json::Value {
    serde_json::json!({
        "points": curve
            .points
            .iter()
            .map(|p| serde_json::json!([p.capacity_ratio, p.known()]))
            .collect::<Vec<_>>(),
        "bounds": curve.points.iter().map(|p| p.bound).collect::<Vec<_>>(),
        "accesses": curve.accesses,
    })
}

/// Hits over lookups (0 with none).
fn hit_ratio(hits: u64, misses: u64) -> f64 {
    let lookups = hits + misses;
    if lookups == 0 {
        0.0
    } else {
        hits as f64 / lookups as f64
    }
}
