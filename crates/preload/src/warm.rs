//! Warm restarts for the interposer: with [`ENV_STATE`] naming a state
//! file, the cache loads it in the background once it is built (the
//! program's first served open), saves it every [`PERIOD`] while the
//! program runs, and saves it at exit (and before an `exec`), after
//! writing back what is dirty so that those files are listed too; a
//! file's ranges are noted as each of its descriptions closes (the cache
//! keeps only so many closed files, and none it wrote), so the list
//! holds the files the program closed too, and a read-only open of a
//! file noted and unchanged reads its noted ranges back. So a
//! program that runs again finds its files cached as the last run left
//! them (`docs/preload.md`, "Warm restarts"). A crash loses at most the
//! last period's list; a file changed meanwhile is never served from it
//! (the cache checks each file's identity).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use fc::{Cache, File};

use crate::state::{inside, passing_through, warn};

/// The environment variable naming the state file (unset or empty: no
/// warm restarts). `foliocache run` sets it unless `--no-state`.
pub const ENV_STATE: &str = "FOLIOCACHE_PRELOAD_STATE";

/// The environment variable that, set to anything but empty, has the
/// program's first served open wait until the state file is loaded: for
/// a program that would rather start late than cold, and for tests.
pub const ENV_STATE_WAIT: &str = "FOLIOCACHE_PRELOAD_STATE_WAIT";

/// How often the list is saved while the program runs.
const PERIOD: Duration = Duration::from_secs(30);

/// The state file, from the environment (read once).
fn state_path() -> Option<&'static Path> {
    static PATH: OnceLock<Option<PathBuf>> = OnceLock::new();
    PATH.get_or_init(|| {
        std::env::var_os(ENV_STATE)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
    })
    .as_deref()
}

/// Once the cache is built (inside the library): starts loading the
/// state file, on a thread of the library's whose file calls pass
/// through (or on this one, with [`ENV_STATE_WAIT`]), and the periodic
/// save.
pub(crate) fn start(cache: &'static Cache) {
    let Some(path) = state_path() else {
        return;
    };
    let (start, load) = cache.warm_load(path);
    if let Some(w) = &start.warning {
        warn(w);
    }
    if let Some(load) = load {
        if std::env::var_os(ENV_STATE_WAIT).is_some_and(|v| !v.is_empty()) {
            load.run();
        } else {
            let spawned = std::thread::Builder::new()
                .name("foliocache-warm".into())
                .spawn(move || {
                    inside((), || {
                        load.run();
                        Ok(())
                    })
                });
            if let Err(e) = spawned {
                warn(&format!("starting the warm load: {e}; starting cold"));
            }
        }
    }
    let saver = std::thread::Builder::new()
        .name("foliocache-save".into())
        .spawn(move || loop {
            std::thread::sleep(PERIOD);
            if passing_through() {
                // The process is exiting or executing: its last save is
                // the exit's.
                return;
            }
            inside((), || {
                save(cache, path);
                Ok(())
            });
        });
    if let Err(e) = saver {
        warn(&format!(
            "starting the periodic save: {e}; saved at exit only"
        ));
    }
}

/// Saves the list, saying on stderr why not if it cannot: unsynced
/// (`Cache::save_state_unsynced`: two `fsync`s are milliseconds of a
/// short program's run), and not at all when the list is unchanged.
fn save(cache: &Cache, path: &Path) {
    if let Err(e) = cache.save_state_unsynced(path) {
        warn(&format!("saving the state file {}: {e}", path.display()));
    }
}

/// At exit and before an `exec`, with the program's files still open
/// (`files`): writes back their dirty data (as their closes would next,
/// with no `fsync`), so that they are listed too, then saves the list.
pub(crate) fn save_at_exit<'f>(cache: Option<&Cache>, files: impl Iterator<Item = &'f File>) {
    let (Some(cache), Some(path)) = (cache, state_path()) else {
        return;
    };
    for f in files {
        // A failure is reported by the close that follows.
        let _ = f.mapping().writeback(0, u64::MAX);
    }
    save(cache, path);
}

/// A description of `file` closing (the cache keeps a file after its
/// last close, `Cache::close_keeping`, but not one it wrote, nor more than
/// so many): notes the file's cached ranges, for the next save and for
/// [`opened`].
pub(crate) fn closing(cache: &Cache, file: &File) {
    cache.remember(file);
}

/// A file opened read-only: what its last close noted is read back in
/// the background if the file is unchanged since (`Cache::reload_noted`):
/// a file this process wrote, closed and opens again to read (RocksDB's
/// tables) finds its pages coming, as the kernel would still hold them.
pub(crate) fn opened(cache: &Cache, file: &File) {
    cache.reload_noted(file);
}

/// The load's progress, for the figures line at exit (`None` when no
/// state file was loaded).
pub(crate) fn progress_line(cache: &Cache) -> Option<String> {
    let p = cache.warm_progress();
    p.started.then(|| {
        format!(
            "warm start: {} of {} ranges ({} of {} bytes) loaded{}, {} files loaded, {} skipped",
            p.ranges_loaded,
            p.ranges,
            p.bytes_loaded,
            p.bytes,
            if p.done { "" } else { " so far" },
            p.files_loaded,
            p.files_skipped
        )
    })
}
