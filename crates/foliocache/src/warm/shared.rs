//! Warm restarts of a cache many processes share ([`SharedCache`]): its
//! holder (`foliocache run --shared`'s launcher) saves which ranges of
//! which files the group's cache holds when the group ends, in the state
//! file format of the in-process cache, and loads them back into the next
//! group's cache in the background while the program starts.

use std::collections::HashMap;
use std::io;
use std::path::Path;

use super::format::{SavedFile, SavedRange, State};
use super::{
    cold, read_state_file, write_unless_same, WarmSaved, WarmStart, MAX_FILES, MAX_RANGES,
};
use crate::loaded::Identity;
use crate::shared::{SharedCache, SharedFile};

/// Bytes the loader reads at a time.
const CHUNK: usize = 1 << 20;
/// The shared cache's page size.
const PAGE: u64 = 4096;

impl SharedCache {
    /// Writes the list of what the cache holds to `path`, as
    /// [`Cache::save_state`](crate::Cache::save_state) does for an
    /// in-process cache: for each file with uptodate pages, its path (as
    /// the first process to open it named it) and identity, and its runs
    /// of pages, those read since the clock last passed first. For the
    /// end of a group, once its processes are gone and its dirty data
    /// written back ([`write_back_all`](Self::write_back_all)): the
    /// identity is the file's as it is then. Left out: files handed to
    /// the kernel, and files no longer at their path (renamed, unlinked).
    /// Nothing is written if the file at `path` lists the same pages of
    /// the same files already, in whatever order (`WarmSaved::written` is
    /// then `false`): a group that reads what it loaded, run again and
    /// again, never rewrites its list.
    ///
    /// # Errors
    /// The OS error of creating, writing, syncing or renaming the file.
    pub fn save_state(&self, path: impl AsRef<Path>) -> io::Result<WarmSaved> {
        self.save(path.as_ref(), true)
    }

    /// [`save_state`](Self::save_state) without its two `fsync`s, as
    /// [`Cache::save_state_unsynced`](crate::Cache::save_state_unsynced):
    /// for the launcher's save once the group is gone, which the command
    /// that ran it waits for. A power cut soon after may leave the old
    /// list or a torn file, which its checksum refuses (a cold start,
    /// never a wrong byte).
    ///
    /// # Errors
    /// The OS error of creating, writing or renaming the file.
    pub fn save_state_unsynced(&self, path: impl AsRef<Path>) -> io::Result<WarmSaved> {
        self.save(path.as_ref(), false)
    }

    /// [`save_state`](Self::save_state), its syncs with `sync`.
    fn save(&self, path: &Path, sync: bool) -> io::Result<WarmSaved> {
        let (files, runs) = self.cached_runs();
        let mut state = State::default();
        let mut numbers = HashMap::new();
        let mut left_out = 0;
        for (n, f) in files.iter().enumerate() {
            use std::os::unix::fs::MetadataExt;
            let at_path = std::fs::metadata(&f.path)
                .ok()
                .filter(|md| md.is_file() && md.dev() == f.dev && md.ino() == f.ino);
            match at_path {
                Some(md) if state.files.len() < MAX_FILES => {
                    numbers.insert(n as u32, state.files.len() as u32);
                    state.files.push(SavedFile {
                        path: f.path.clone(),
                        identity: Identity::of(&md),
                    });
                }
                _ => left_out += 1,
            }
        }
        for (file, first, pages) in runs {
            if state.ranges.len() >= MAX_RANGES {
                break;
            }
            if let Some(&file) = numbers.get(&file) {
                state.ranges.push(SavedRange { file, first, pages });
            }
        }
        let written = write_unless_same(path, &state, sync)?;
        Ok(WarmSaved {
            files: state.files.len() as u64,
            ranges: state.ranges.len() as u64,
            bytes: state.ranges.iter().map(|r| u64::from(r.pages) * PAGE).sum(),
            files_left_out: left_out,
            written,
        })
    }

    /// Starts loading the state file at `path` into this cache on a
    /// thread of its own, as [`Cache::warm_from`](crate::Cache::warm_from)
    /// does: the ranges in the order saved, each file opened by its path
    /// once and skipped if its identity changed since the save (or it was
    /// handed to the kernel meanwhile), until the list ends or the cache
    /// is full. Returns at once with what the file holds, or the warning
    /// that explains a cold start; a missing file is a cold start with no
    /// warning. The loader's reads go through the cache as any process's
    /// (they count as the group's misses).
    pub fn warm_from(&self, path: impl AsRef<Path>) -> WarmStart {
        let path = path.as_ref();
        let bytes = match read_state_file(path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return WarmStart::default(),
            Err(e) => return cold(path, &e),
        };
        let state = match State::decode(&bytes) {
            Ok(s) => s,
            Err(e) => return cold(path, &e),
        };
        let start = WarmStart {
            warning: None,
            found: true,
            files: state.files.len() as u64,
            ranges: state.ranges.len() as u64,
            bytes: state.ranges.iter().map(|r| u64::from(r.pages) * PAGE).sum(),
        };
        let cache = self.clone();
        let spawned = std::thread::Builder::new()
            .name("foliocache-warm".into())
            .spawn(move || load(&cache, &state));
        match spawned {
            Ok(_) => start,
            Err(e) => cold(path, &e),
        }
    }
}

/// The loader: reads the state's ranges into `cache` until the list ends
/// or the pages free at its start are filled. Returns the bytes loaded.
fn load(cache: &SharedCache, state: &State) -> u64 {
    let free = cache
        .pages()
        .saturating_sub(cache.stats().cached)
        .saturating_mul(PAGE);
    let mut opened: HashMap<u32, Option<SharedFile>> = HashMap::new();
    let mut buf = vec![0u8; CHUNK];
    let mut loaded = 0u64;
    for r in &state.ranges {
        let Some(saved) = state.files.get(r.file as usize) else {
            continue;
        };
        let file = opened
            .entry(r.file)
            .or_insert_with(|| open_saved(cache, saved));
        let Some(file) = file else { continue };
        let mut at = r.first.saturating_mul(PAGE);
        let end = at.saturating_add(u64::from(r.pages) * PAGE);
        while at < end {
            if loaded >= free || file.handed_elsewhere() {
                return loaded;
            }
            let len = (end - at).min(CHUNK as u64) as usize;
            match file.read_at(&mut buf[..len], at) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    at += n as u64;
                    loaded += n as u64;
                }
            }
        }
    }
    loaded
}

/// Opens a saved file by its path, direct where the filesystem takes it,
/// in the cache, if it is the file saved (its identity unchanged) and not
/// handed to the kernel.
fn open_saved(cache: &SharedCache, saved: &SavedFile) -> Option<SharedFile> {
    let file = crate::shared::open_direct(&saved.path, true).ok()?;
    let md = file.metadata().ok()?;
    if Identity::of(&md) != saved.identity {
        return None;
    }
    let file = cache.open(file).ok()?;
    (!file.handed_elsewhere()).then_some(file)
}
