//! A running mount's control file (`MOUNTPOINT/.foliocache-control`, see
//! `foliocache_fuse::control`): the request written to it and the JSON
//! answer read back, for `stat` and `stat --watch`.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use anyhow::{bail, Context, Result};
use foliocache_fuse::CONTROL_NAME;

/// The mount's answer (JSON) to `request` (file paths relative to the
/// mount root, a line each; empty for the cache's figures alone), through
/// its control file.
pub fn query(mnt: &Path, request: &str) -> Result<String> {
    let control = mnt.join(CONTROL_NAME);
    // Opened for writing only to send a request: an object store's mount
    // is read-only, and answers the figures without one.
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(!request.is_empty())
        .open(&control);
    let mut file = match opened {
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => bail!(
            "{} is a read-only mount (an object store's), which keeps no figures per file: \
             `foliocache stat {}` shows the cache's",
            mnt.display(),
            mnt.display()
        ),
        r => r.with_context(|| {
            format!(
                "opening {} (is a `foliocache mount` running there?)",
                control.display()
            )
        })?,
    };
    if !request.is_empty() {
        file.write_all(request.as_bytes())?;
        // The answer is read from offset 0 (the write moved the offset).
        file.seek(SeekFrom::Start(0))?;
    }
    let mut answer = String::new();
    file.read_to_string(&mut answer)?;
    Ok(answer)
}

/// The hit ratio the mount's cache predicts at `capacity_ratio` times its
/// capacity (`Cache::hit_ratio_curve`), from `cache.hit_ratio_curve` of
/// its answer (`{"points": [[ratio, hit ratio], ...], "accesses": n}`);
/// `None` where the answer has none, or where the point is not yet known
/// (its hit ratio `null`).
pub fn predicted(c: &serde_json::Value, capacity_ratio: f64) -> Option<f64> {
    c["hit_ratio_curve"]["points"]
        .as_array()?
        .iter()
        .find(|p| p[0].as_f64() == Some(capacity_ratio))?[1]
        .as_f64()
}
