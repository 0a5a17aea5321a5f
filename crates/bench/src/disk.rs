//! The block device under the data files, seen through its sysfs counters
//! (`/sys/dev/block/MAJ:MIN/stat`): how many reads the device completed
//! during a run and how large they were, after every layer above it
//! (the kernel's readahead, foliocache's windows, the block layer's
//! merging and splitting). The counters are the whole device's, so other
//! processes' IO during a run is counted too; beside them, the bytes this
//! process alone had read from storage (`/proc/self/io`'s `read_bytes`,
//! which the kernel counts as each read is submitted, `submit_bio`), which
//! nobody else's IO moves. Also the device's readahead window
//! ([`readahead_bytes`]).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The sysfs `stat` file of the device holding `path`, if there is one (a
/// tmpfs or overlay directory has none).
pub fn stat_path(path: &Path) -> Option<PathBuf> {
    let dev = std::fs::metadata(path).ok()?.dev();
    // glibc's encoding of dev_t (gnu_dev_major / gnu_dev_minor).
    let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff);
    let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0xff);
    let p = PathBuf::from(format!("/sys/dev/block/{major}:{minor}/stat"));
    p.exists().then_some(p)
}

/// The largest readahead window of the device holding `path`, in bytes
/// (its `queue/read_ahead_kb`, the kernel's `bdi->ra_pages`), if it has
/// one (a partition's is its disk's).
pub fn readahead_bytes(path: &Path) -> Option<u64> {
    let dir = stat_path(path)?.parent()?.to_path_buf();
    [dir.join("queue"), dir.join("../queue")]
        .iter()
        .find_map(|q| std::fs::read_to_string(q.join("read_ahead_kb")).ok())
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map(|kb| kb << 10)
}

/// The device's read counters at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    path: PathBuf,
    at: Instant,
    reads: u64,
    sectors: u64,
    read_ms: u64,
    process_bytes: Option<u64>,
}

/// The bytes this process has had read from storage so far (its
/// `/proc/self/io` `read_bytes`: every thread's, device reads it submitted
/// for buffered, direct and mapped IO alike), where the kernel keeps the
/// count.
pub fn process_read_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/io").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))
        .and_then(|v| v.trim().parse().ok())
}

impl Snapshot {
    /// The counters of the device whose stat file is `path`, now.
    pub fn take(path: &Path) -> Option<Snapshot> {
        let text = std::fs::read_to_string(path).ok()?;
        let f: Vec<u64> = text
            .split_whitespace()
            .map(|w| w.parse().unwrap_or(0))
            .collect();
        // Fields: reads completed, reads merged, sectors read, ms reading, ...
        (f.len() >= 4).then(|| Snapshot {
            path: path.to_path_buf(),
            at: Instant::now(),
            reads: f[0],
            sectors: f[2],
            read_ms: f[3],
            process_bytes: process_read_bytes(),
        })
    }

    /// What the device read between `self` and now.
    pub fn since(&self) -> Option<DeviceReads> {
        let now = Snapshot::take(&self.path)?;
        let reads = now.reads.saturating_sub(self.reads);
        let bytes = now.sectors.saturating_sub(self.sectors) * 512;
        let wall_ms = now.at.duration_since(self.at).as_secs_f64() * 1e3;
        Some(DeviceReads {
            device: device_name(&self.path),
            reads,
            bytes,
            avg_read_bytes: bytes.checked_div(reads).unwrap_or(0),
            process_bytes: now
                .process_bytes
                .zip(self.process_bytes)
                .map(|(a, b)| a.saturating_sub(b)),
            reads_in_flight: if wall_ms > 0.0 {
                now.read_ms.saturating_sub(self.read_ms) as f64 / wall_ms
            } else {
                0.0
            },
        })
    }
}

/// `vda` from `/sys/dev/block/254:0/stat` (the link's target's name).
fn device_name(stat: &Path) -> String {
    stat.parent()
        .and_then(|d| std::fs::canonicalize(d).ok())
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "?".into())
}

/// Reads a device completed during a run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceReads {
    /// The device's name (`vda`).
    pub device: String,
    /// Reads completed.
    pub reads: u64,
    /// Bytes they read.
    pub bytes: u64,
    /// Their average size.
    pub avg_read_bytes: u64,
    /// Bytes this process had read from storage over the same time (see
    /// [`process_read_bytes`]): the run's own device reads, whatever else
    /// the device served; null where the kernel does not count them.
    pub process_bytes: Option<u64>,
    /// Reads in flight on average over the run (the time reads spent in
    /// the device, summed, over the wall time).
    pub reads_in_flight: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_a_read_of_the_device_does_not_break() {
        // Where the temporary directory is on a block device, the counters
        // parse and never go backwards; elsewhere there is nothing.
        let dir = tempfile::tempdir().unwrap();
        if let Some(p) = stat_path(dir.path()) {
            let s = Snapshot::take(&p).unwrap();
            let d = s.since().unwrap();
            assert!(!d.device.is_empty());
            assert!(d.reads_in_flight >= 0.0);
        }
    }

    #[test]
    fn counts_this_process_reading_around_the_page_cache() {
        // An O_DIRECT read goes to the device whatever is cached, and the
        // process's own counter moves by at least its size. Skipped where
        // the kernel keeps no per-process IO counts or the directory's
        // filesystem takes no O_DIRECT.
        use std::os::unix::fs::{FileExt, OpenOptionsExt};
        let Some(before) = process_read_bytes() else {
            return;
        };
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 1 << 16]).unwrap();
        let Ok(f) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
        else {
            return;
        };
        let mut buf = crate::sys::AlignedBuf::new(1 << 16, 0).unwrap();
        f.read_exact_at(buf.as_mut_slice(), 0).unwrap();
        let after = process_read_bytes().unwrap();
        assert!(after - before >= 1 << 16, "{before} -> {after}");
    }
}
