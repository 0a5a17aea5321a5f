//! Warm restarts for the mount: with a state file
//! ([`MountOptions::state`](crate::MountOptions::state)), the cache loads
//! it in the background as the mount starts, saves it every [`PERIOD`]
//! while it serves and at unmount (after the writeback, before the
//! cached files go: [`FolioFs::shutdown`](crate::FolioFs::shutdown)). The
//! control file's `"warm"` object shows the load's progress.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use foliocache::{Cache, WarmProgress};

/// How often the list is saved while the mount serves.
pub(crate) const PERIOD: Duration = Duration::from_secs(30);

/// The periodic save: dropping it stops the thread.
pub(crate) struct Saver {
    _stop: mpsc::Sender<()>,
}

/// Starts loading the state file at `path` into `cache` and the periodic
/// save; a state file that cannot be loaded is a warning on the log and
/// a cold start.
///
/// # Errors
/// The OS error of starting the saving thread.
pub(crate) fn start(cache: &Cache, path: &Path) -> io::Result<Saver> {
    let start = cache.warm_from(path);
    match &start.warning {
        Some(w) => log::warn!("{w}"),
        None if start.found => log::info!(
            "foliocache-fuse: loading {} ranges ({} bytes) of {} files from {}",
            start.ranges,
            start.bytes,
            start.files,
            path.display()
        ),
        None => {}
    }
    let (tx, rx) = mpsc::channel::<()>();
    let cache = cache.clone();
    let path: PathBuf = path.into();
    std::thread::Builder::new()
        .name("foliocache-save".into())
        .spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(PERIOD) {
                save(&cache, &path);
            }
        })?;
    Ok(Saver { _stop: tx })
}

/// Saves the list, logging why not if it cannot.
pub(crate) fn save(cache: &Cache, path: &Path) {
    if let Err(e) = cache.save_state(path) {
        log::warn!(
            "foliocache-fuse: saving the state file {}: {e}",
            path.display()
        );
    }
}

/// The load's progress as the control file's `"warm"` object.
pub(crate) fn progress_json(p: &WarmProgress) -> serde_json::Value {
    serde_json::json!({
        "started": p.started,
        "done": p.done,
        "stopped_at_capacity": p.stopped_at_capacity,
        "ranges": p.ranges,
        "ranges_loaded": p.ranges_loaded,
        "bytes": p.bytes,
        "bytes_loaded": p.bytes_loaded,
        "files": p.files,
        "files_loaded": p.files_loaded,
        "files_skipped": p.files_skipped,
    })
}
