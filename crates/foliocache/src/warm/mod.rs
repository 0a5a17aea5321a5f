//! Warm restarts: a cache saves which ranges of which files it holds
//! ([`Cache::save_state`]), and a cache in a later process loads them
//! back in the background ([`Cache::warm_from`]), as InnoDB dumps its
//! buffer pool's page list at shutdown and loads it at startup.
//!
//! ```text
//!  save:  LRU lists (active, then inactive; head first) ──> ranges per file
//!         + each file's identity (fstat of the cache's own fd) and path
//!         ──> state file (format.rs), written to a temporary, fsynced, renamed
//!
//!  load:  state file ──decode──> ranges, most recent first
//!         loader thread: per range, open its file by path (once), compare
//!         its identity, read the range through readahead (the IO engine,
//!         2 MiB windows), one batch in flight at a time; stop when the
//!         arena has no free pages
//!         loaded files no one opened yet ──> `Warm::pending`, (dev, ino) ->
//!         handle; a program's open of the file adopts it (and drops its
//!         folios if the file changed since)
//! ```
//!
//! No stale byte: a file whose identity (device, inode, size, mtime,
//! ctime) differs from the saved one is skipped; one that changes after
//! it was loaded and before a program opens it is found changed at that
//! open (its identity then against the one loaded) and its folios are
//! dropped. A file open for writing is written back (and its backing's
//! size fixed) before its identity is taken, as its close would.

// Public for the parser's tests through `internals`.
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
pub(crate) mod format;
mod shared;

use std::collections::HashMap;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use format::{SavedFile, SavedRange, State};

use crate::arena::PAGE_SIZE;
use crate::cache::Cache;
use crate::file::File;
use crate::filemap::Mapping;
use crate::loaded::{self, Identity, Listed, Loaded, Remembered, WarmProgress};
use crate::lru::NIL;
use crate::mm::CacheInner;

/// Bytes the loader reads before it waits for the cache's IO to go idle:
/// one batch in flight at a time, so a program's reads queue behind at
/// most this much of the loader's.
const BATCH_BYTES: u64 = 8 << 20;

/// The longest the loader pauses after a batch during which the program
/// missed (its reads go first).
const YIELD: Duration = Duration::from_millis(1);

/// Closed files a cache keeps for a later open
/// ([`Cache::close_keeping`]): each holds a descriptor of its file.
const MAX_KEPT: usize = 64;

/// Files a state file may name and ranges it may hold: a save stops
/// there (the most recently used are kept).
const MAX_FILES: usize = 1 << 16;
const MAX_RANGES: usize = 1 << 22;

/// What a save wrote, from [`Cache::save_state`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct WarmSaved {
    /// Files named.
    pub files: u64,
    /// Ranges (runs of cached pages) listed.
    pub ranges: u64,
    /// Bytes those ranges cover.
    pub bytes: u64,
    /// Files cached but not saved: dirty ones, memory files, unlinked
    /// ones, and those past the limit of files.
    pub files_left_out: u64,
    /// Whether the file was written: `false` when it listed the same
    /// ranges of the same files already (nothing changed).
    pub written: bool,
}

/// What [`Cache::warm_from`] found: the warning to print, if any, and
/// what the loader will try to load.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct WarmStart {
    /// Why the cache starts cold: the state file is unreadable, truncated,
    /// corrupt or of another version (`None` when it was read, or when
    /// there was none: a first start is not worth a warning).
    pub warning: Option<String>,
    /// Whether a state file was found and decoded.
    pub found: bool,
    /// Files it names.
    pub files: u64,
    /// Ranges it lists.
    pub ranges: u64,
    /// Bytes they cover.
    pub bytes: u64,
}

impl Cache {
    /// Writes the list of what the cache holds to `path`: for each file
    /// with cached folios, its path and identity (device, inode, size,
    /// mtime, ctime), and the runs of cached pages, in LRU order (most
    /// recently used first); then the files closed since they were noted
    /// ([`remember`](Self::remember)), and, if a load of a state file
    /// ([`warm_from`](Self::warm_from)) has not ended, the ranges of its
    /// list it has not loaded yet (up to the capacity), so that a program
    /// that ends before its load does leaves the list as long as it found
    /// it. Ranges, not data: a few bytes per run. The file is written to
    /// a temporary beside `path` (made new, mode 0600, following no
    /// symlink), synced and renamed over it, so a crash leaves the old
    /// list or the new one. Nothing is written if `path` lists the same
    /// ranges of the same files already, in whatever order
    /// ([`WarmSaved::written`]): a program that reads what it loaded
    /// leaves its list as it was.
    ///
    /// A file opened for writing is first brought to what its close would
    /// leave (its dirty data written back, no `fsync`, and the backing's
    /// size made the file's), so that its identity is the one it keeps.
    /// Left out: files whose writeback fails, memory files, files
    /// unlinked since they were opened, and those opened other than by
    /// path.
    ///
    /// # Locking
    /// Walks the LRU lists under the LRU lock (reclaim and new folios
    /// wait for the walk: about a millisecond per 100 000 folios).
    ///
    /// # Errors
    /// The OS error of creating, writing, syncing or renaming the file.
    pub fn save_state(&self, path: impl AsRef<Path>) -> io::Result<WarmSaved> {
        self.save(path.as_ref(), true)
    }

    /// [`save_state`](Self::save_state) without its two `fsync`s (of the
    /// file, then of its directory): the new list is renamed over the old
    /// one, which the rename leaves whole or replaces whole, but a power
    /// cut soon after may leave the directory or the file's blocks as they
    /// were (the old list, or a torn file that its checksum refuses: a
    /// cold start, never a wrong byte, since every file's identity is
    /// checked at the load). For a caller on a program's way out, where
    /// the two `fsync`s cost milliseconds of the program's run: the list
    /// is a hint, the kernel's own cache keeps none across a reboot.
    ///
    /// # Errors
    /// The OS error of creating, writing or renaming the file.
    pub fn save_state_unsynced(&self, path: impl AsRef<Path>) -> io::Result<WarmSaved> {
        self.save(path.as_ref(), false)
    }

    /// [`save_state`](Self::save_state), its syncs with `sync`.
    fn save(&self, path: &Path, sync: bool) -> io::Result<WarmSaved> {
        let (state, left_out) = self.snapshot();
        let bytes = state
            .ranges
            .iter()
            .map(|r| u64::from(r.pages) * PAGE_SIZE as u64)
            .sum();
        let written = write_unless_same(path, &state, sync)?;
        Ok(WarmSaved {
            files: state.files.len() as u64,
            ranges: state.ranges.len() as u64,
            bytes,
            files_left_out: left_out,
            written,
        })
    }

    /// The state to save, and how many cached files it leaves out.
    fn snapshot(&self) -> (State, u64) {
        let live = self.inner.live_mappings();
        let mut state = State::default();
        let mut ids = HashMap::new();
        let mut left_out = 0;
        for m in &live {
            if m.nr_folios() == 0 {
                continue;
            }
            match (state.files.len() < MAX_FILES)
                .then(|| saved_file(m))
                .flatten()
            {
                Some(f) => {
                    ids.insert(m.id(), state.files.len() as u32);
                    state.files.push(f);
                }
                None => left_out += 1,
            }
        }
        self.walk_lru(&ids, &mut state.ranges);
        drop(live);
        // Then the files closed since they were noted, least recently used
        // as a group (their folios are gone from this cache); then what the
        // load has not reached of the last list, up to the capacity.
        add_notes(&mut state, self.warm.remembered(), u64::MAX);
        let listed: u64 = state.ranges.iter().map(|r| u64::from(r.pages)).sum();
        let room = (self.inner.mem.arena.capacity_pages() as u64).saturating_sub(listed);
        add_notes(&mut state, self.warm.unloaded(), room);
        (state, left_out)
    }

    /// Notes the ranges of `file` cached now, and its identity, for the
    /// next [`save_state`](Self::save_state) to list even if the file has
    /// closed by then (its folios gone from the cache): for a caller whose
    /// files leave the cache as they close, as the interposer's do, which
    /// calls this before their close. Notes are kept, most recent first,
    /// up to the capacity in pages; a file noted again replaces its note.
    /// A file opened for writing is written back first, as
    /// [`save_state`](Self::save_state) does; nothing is noted for a file
    /// it would leave out.
    ///
    /// # Locking
    /// Walks the file's index without a lock (its answer is a snapshot).
    pub fn remember(&self, file: &File) {
        let m = file.mapping();
        let Some(saved) = saved_file(m) else {
            return;
        };
        let mut ranges: Vec<(u64, u32)> = Vec::new();
        let mut index = 0;
        while let Some(first) = Some(m.next_present(index, u64::MAX)).filter(|&i| i != u64::MAX) {
            let (start, n) = m.span_at(first).unwrap_or((first, 1));
            let start = start.max(index);
            let end = (start + n).max(first + 1);
            match ranges.last_mut() {
                Some(last) if last.0 + u64::from(last.1) == start && last.1 < u32::MAX / 2 => {
                    last.1 += (end - start) as u32
                }
                _ => ranges.push((start, (end - start) as u32)),
            }
            index = end;
        }
        if ranges.is_empty() {
            return;
        }
        let max_pages = self.inner.mem.arena.capacity_pages() as u64;
        self.warm.remember(
            Remembered {
                path: saved.path,
                identity: saved.identity,
                ranges,
            },
            max_pages,
        );
    }

    /// Closes `file`, keeping its cached folios for a later open of the
    /// file in this cache, as the kernel keeps a closed file's pages: for
    /// a caller that closes and opens files again (RocksDB writes a table,
    /// closes it and opens it to read), whose opens would otherwise find
    /// nothing cached once the last handle closed (a caller that saves
    /// state files [`remember`](Self::remember)s it first). Drops the
    /// handle; if that was the file's last, the cache keeps the file, with
    /// its identity (device, inode, size, mtime, ctime), if this cache never
    /// opened it for writing and it is unchanged since the cache first
    /// opened it (another process did not write it meanwhile), and it is
    /// not unlinked. A file this cache wrote is not kept (its own
    /// writebacks change the times, so a foreign write between two of them
    /// would go unseen); its [`remember`](Self::remember)ed note still
    /// lists it for the next process. An open that finds it takes
    /// it over and drops its folios if the identity changed (another
    /// process wrote, truncated or replaced the file), as a warm-loaded
    /// file's. At most 64 files are kept, the most recently closed; reclaim
    /// takes their folios as any others', and a kept file whose folios are
    /// all gone, or that was unlinked, is let go at the next close.
    ///
    /// # Locking
    /// Takes the identity (two `fstat`s and a `readlink`) under the lock
    /// an open of a kept file takes.
    pub fn close_keeping(&self, file: File) {
        let mapping = file.mapping.clone();
        drop(file);
        self.warm.keep(mapping, MAX_KEPT, keepable);
    }

    /// Reads back into the cache, in the background (readahead: windows
    /// of up to 2 MiB through the IO engine), the ranges
    /// [`remember`](Self::remember) noted of `file` at its last close, if
    /// the file is unchanged since (its identity now, from `fstat` of the
    /// cache's descriptor, the one noted): for a file closed and opened
    /// again that [`close_keeping`](Self::close_keeping) could not keep
    /// (one this cache wrote), where the kernel would still hold its pages.
    /// The bytes come from the file as it is now, so nothing stale is
    /// read; what is cached already is skipped. Returns the bytes asked
    /// for (0: no note, or the file changed).
    pub fn reload_noted(&self, file: &File) -> u64 {
        let m = file.mapping();
        let Some(note) = m.inode.key.and_then(|key| self.warm.noted(key)) else {
            return 0;
        };
        let now = m.backing().raw_file().and_then(|f| f.metadata().ok());
        if now.map(|md| Identity::of(&md)) != Some(note.identity) {
            return 0;
        }
        let size = file.len();
        let page = PAGE_SIZE as u64;
        let mut asked = 0;
        for (first, pages) in note.ranges {
            let start = first.saturating_mul(page);
            if start >= size {
                break;
            }
            let len = (u64::from(pages) * page).min(size - start);
            // Errors are left for the program's reads of those bytes.
            let _ = file.readahead(start, len);
            asked += len;
        }
        asked
    }

    /// Appends the LRU lists' folios of the files `ids` names, as runs,
    /// active list first, then the inactive and the streamed ones, each
    /// from its head (most recently used).
    fn walk_lru(&self, ids: &HashMap<usize, u32>, ranges: &mut Vec<SavedRange>) {
        let lru = self.inner.lru();
        let lists = lru.lock();
        for list in [&lists.active, &lists.inactive, &lists.streamed] {
            let mut page = list.head;
            while page != NIL && ranges.len() < MAX_RANGES {
                let f = self.inner.mem.folio(page);
                if let Some(&file) = ids.get(&f.mapping()) {
                    add_run(ranges, file, f.index(), f.nr_pages() as u32);
                }
                page = f.lru_links().1;
            }
        }
    }

    /// Starts loading the state file at `path` in the background (see
    /// the module documentation of `warm`): the ranges most recently used
    /// first, through the IO engine, one batch in flight at a time, until
    /// the list ends or the arena has no free memory. Returns at once with
    /// what the file holds, or the warning that explains a cold start.
    /// [`warm_progress`](Self::warm_progress) follows the load.
    ///
    /// A file whose identity changed since the save (rewritten, truncated,
    /// replaced) is skipped; a loaded file that changes before the program
    /// opens it is dropped at that open. A missing state file is a cold
    /// start without a warning.
    pub fn warm_from(&self, path: impl AsRef<Path>) -> WarmStart {
        let (start, load) = self.warm_load(path.as_ref());
        let Some(load) = load else {
            return start;
        };
        let spawned = std::thread::Builder::new()
            .name("foliocache-warm".into())
            .spawn(move || load.run());
        match spawned {
            Ok(_) => start,
            Err(e) => {
                self.warm.finish();
                cold(path.as_ref(), &e)
            }
        }
    }

    /// [`warm_from`](Self::warm_from) with the load handed to the caller
    /// to run on a thread of its choosing ([`WarmLoad::run`]): an
    /// interposer runs it on a thread whose file calls it passes through.
    /// The load is `None` on a cold start (the report says why).
    pub fn warm_load(&self, path: impl AsRef<Path>) -> (WarmStart, Option<WarmLoad>) {
        let path = path.as_ref();
        let bytes = match read_state_file(path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return (WarmStart::default(), None),
            Err(e) => return (cold(path, &e), None),
        };
        let state = match State::decode(&bytes) {
            Ok(s) => s,
            Err(e) => return (cold(path, &e), None),
        };
        let bytes = state
            .ranges
            .iter()
            .map(|r| u64::from(r.pages) * PAGE_SIZE as u64)
            .sum();
        let start = WarmStart {
            warning: None,
            found: true,
            files: state.files.len() as u64,
            ranges: state.ranges.len() as u64,
            bytes,
        };
        let listed = Arc::new(Listed {
            files: state
                .files
                .into_iter()
                .map(|f| (f.path, f.identity))
                .collect(),
            ranges: state
                .ranges
                .iter()
                .map(|r| (r.file, r.first, r.pages))
                .collect(),
        });
        if !self.warm.start(&listed, start.bytes) {
            let warning = format!(
                "foliocache: {}: this cache has loaded a state file already; not loaded",
                path.display()
            );
            return (
                WarmStart {
                    warning: Some(warning),
                    ..WarmStart::default()
                },
                None,
            );
        }
        let load = WarmLoad {
            inner: Arc::downgrade(&self.inner),
            warm: Arc::downgrade(&self.warm),
            listed,
        };
        (start, Some(load))
    }

    /// The page cache state of the whole file at `path` as this cache
    /// holds it now ([`File::cachestat`] of all of it), found by device
    /// and inode without opening the file: a warm-loaded file no program
    /// opened yet stays the loader's (an open takes it over, and its
    /// folios then go with that handle's close). All zeros when the cache
    /// holds no mapping of the file.
    ///
    /// # Errors
    /// The OS error of `stat(2)` on `path`.
    pub fn cachestat_file(&self, path: impl AsRef<Path>) -> io::Result<crate::CacheStat> {
        use std::os::unix::fs::MetadataExt;
        let md = std::fs::metadata(path)?;
        let key = Some((md.dev(), md.ino()));
        let live = self.inner.live_mappings();
        let cs = live
            .iter()
            .find(|m| m.inode.key == key)
            .map(|m| m.cachestat(0, u64::MAX))
            .unwrap_or_default();
        drop(live);
        Ok(cs)
    }

    /// The background load's progress (all zeros when no load was
    /// started): ranges and bytes loaded, files skipped.
    pub fn warm_progress(&self) -> WarmProgress {
        self.warm.progress()
    }
}

/// A cold start's report.
fn cold(path: &Path, e: &dyn std::fmt::Display) -> WarmStart {
    WarmStart {
        warning: Some(format!(
            "foliocache: cannot load the state file {}: {e}; starting with an empty cache",
            path.display()
        )),
        ..WarmStart::default()
    }
}

/// The saved form of a mapping's file: its path now (from the cache's
/// own descriptor, so a rename since the open is followed) and identity.
/// `None` for what cannot be saved: a memory file, dirty data, a file
/// unlinked or opened other than by path.
fn saved_file(m: &Mapping) -> Option<SavedFile> {
    if m.is_memfile() {
        return None;
    }
    if m.backing_writable() {
        // What its close will do, first: the data written back and the
        // backing's size made the file's (a writeback past the end writes
        // whole pages), so that the identity taken next is the one the
        // file keeps once it is closed.
        crate::writeback::close(m).ok()?;
    }
    if m.dirty_bytes() > 0 {
        return None;
    }
    let file = m.backing().raw_file()?;
    let md = file.metadata().ok()?;
    let identity = Identity::of(&md);
    if identity.size != m.size() {
        return None;
    }
    let path = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
    // The path must still name this file (not unlinked, not replaced).
    let now = std::fs::metadata(&path).ok()?;
    if !path.is_absolute() || Identity::of(&now) != identity {
        return None;
    }
    Some(SavedFile { path, identity })
}

/// The identity of a closed file to keep (`Cache::close_keeping`): one
/// never opened for writing in this cache, unchanged since its mapping was
/// made. Another process's write meanwhile changed its `ctime` (a fresh
/// one: its times were read at the open, docs/warm.md), so its next open
/// here must read afresh. A file this cache wrote is not kept: its own
/// writebacks change the times too, and a foreign write between two of
/// them would go unseen.
fn keepable(m: &Mapping) -> Option<Identity> {
    if m.backing_writable() {
        return None;
    }
    let saved = saved_file(m)?;
    (m.opened_as().map(Identity::of) == Some(saved.identity)).then_some(saved.identity)
}

/// Whether a noted file's path still names it, unchanged: a file
/// deleted (a database's log once flushed) or rewritten since is left out
/// of the list rather than skipped at every load.
fn still_at_path(r: &Remembered) -> bool {
    std::fs::metadata(&r.path).is_ok_and(|md| Identity::of(&md) == r.identity)
}

/// Appends to `state` the ranges of `notes` (files closed, or a load's
/// rest), at most `room` pages: of a file listed and unchanged, the pages
/// noted that it does not hold now; of one changed, or gone from its
/// path, nothing.
fn add_notes(state: &mut State, notes: Vec<Remembered>, mut room: u64) {
    let mut listed: HashMap<(u64, u64), u32> = state
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| ((f.identity.dev, f.identity.ino), i as u32))
        .collect();
    for r in notes {
        let key = (r.identity.dev, r.identity.ino);
        let (file, ranges) = match listed.get(&key) {
            Some(&i) if state.files[i as usize].identity == r.identity => {
                let held: Vec<(u64, u32)> = loaded::union(
                    &[],
                    &state
                        .ranges
                        .iter()
                        .filter(|s| s.file == i)
                        .map(|s| (s.first, s.pages))
                        .collect::<Vec<_>>(),
                );
                (i, loaded::minus(&r.ranges, &held))
            }
            Some(_) => continue,
            None if state.files.len() < MAX_FILES && still_at_path(&r) => {
                let file = state.files.len() as u32;
                listed.insert(key, file);
                state.files.push(SavedFile {
                    path: r.path,
                    identity: r.identity,
                });
                (file, r.ranges)
            }
            None => continue,
        };
        for (first, pages) in ranges {
            if state.ranges.len() >= MAX_RANGES || room == 0 {
                return;
            }
            let pages = pages.min(u32::try_from(room).unwrap_or(u32::MAX));
            room -= u64::from(pages);
            state.ranges.push(SavedRange { file, first, pages });
        }
    }
}

/// Writes `state` to `path` ([`write_atomically`], synced with `sync`)
/// unless the state file there lists the same pages of the same files
/// already ([`same_list`]); whether it wrote. A program that reads what it
/// loaded, run again and again, never rewrites its list.
pub(super) fn write_unless_same(path: &Path, state: &State, sync: bool) -> io::Result<bool> {
    let unchanged = read_state_file(path)
        .ok()
        .and_then(|b| State::decode(&b).ok())
        .is_some_and(|old| same_list(&old, state));
    if !unchanged {
        write_atomically(path, &state.encode(), sync)?;
    }
    Ok(!unchanged)
}

/// Whether two lists name the same files (path and identity) with the
/// same pages of each, whatever their order.
fn same_list(a: &State, b: &State) -> bool {
    type Pages = HashMap<(PathBuf, u64, u64), (Identity, Vec<(u64, u32)>)>;
    let pages = |s: &State| -> Pages {
        let mut runs: Vec<Vec<(u64, u32)>> = vec![Vec::new(); s.files.len()];
        for r in &s.ranges {
            if let Some(v) = runs.get_mut(r.file as usize) {
                v.push((r.first, r.pages));
            }
        }
        s.files
            .iter()
            .zip(runs)
            .filter(|(_, v)| !v.is_empty())
            .map(|(f, v)| {
                let key = (f.path.clone(), f.identity.dev, f.identity.ino);
                (key, (f.identity, loaded::union(&[], &v)))
            })
            .collect()
    };
    pages(a) == pages(b)
}

/// Adds a folio of `pages` at `index` to the last run if it extends it
/// (either way: the lists run from newest to oldest, and a sequential
/// reader's newest folio is its highest), else starts a run.
fn add_run(ranges: &mut Vec<SavedRange>, file: u32, index: u64, pages: u32) {
    if let Some(last) = ranges.last_mut() {
        if last.file == file && last.pages.checked_add(pages).is_some() {
            if last.first + u64::from(last.pages) == index {
                last.pages += pages;
                return;
            }
            if index + u64::from(pages) == last.first {
                last.first = index;
                last.pages += pages;
                return;
            }
        }
    }
    ranges.push(SavedRange {
        file,
        first: index,
        pages,
    });
}

/// The largest state file a load reads: 16 bytes a range, so a few
/// million ranges (a state file's own saves stay far below).
const MAX_STATE_BYTES: u64 = 256 << 20;

/// The bytes of the state file at `path`, read as ssh reads a key: opened
/// without blocking (a FIFO put there must not hang the program), and
/// refused unless it is a regular file, owned by this process's user (or
/// root), and writable by no one else (anyone who can write it chooses
/// which files the cache reads and keeps).
fn read_state_file(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let md = f.metadata()?;
    let refuse = |why: String| Err(io::Error::new(io::ErrorKind::PermissionDenied, why));
    if !md.file_type().is_file() {
        return refuse("not a regular file".into());
    }
    let me = rustix::process::geteuid().as_raw();
    if md.uid() != me && md.uid() != 0 {
        return refuse(format!(
            "owned by user {}, not by this process's user {me}",
            md.uid()
        ));
    }
    if md.mode() & 0o022 != 0 {
        return refuse(format!(
            "writable by others (mode {:o}): make it 0600",
            md.mode() & 0o7777
        ));
    }
    if md.len() > MAX_STATE_BYTES {
        return refuse(format!("{} bytes, more than a state file holds", md.len()));
    }
    let mut bytes = Vec::with_capacity(md.len() as usize);
    Read::by_ref(&mut f)
        .take(MAX_STATE_BYTES)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Writes `bytes` to `path` through a temporary beside it: written,
/// synced (with `sync`), renamed over `path`, and the directory synced
/// (with `sync`). The temporary is
/// made new (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600): whatever stands
/// at its name (a file, a symlink planted by another user) is never
/// followed, reused nor written; another name is tried instead. The state
/// lists the path of every file cached: it is its owner's alone to read.
fn write_atomically(path: &Path, bytes: &[u8], sync: bool) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let base = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a state file needs a name"))?
        .to_os_string();
    let (tmp, mut f) = {
        let mut attempt = 0u32;
        loop {
            let mut name = base.clone();
            name.push(format!(".tmp.{}.{attempt}", std::process::id()));
            let tmp = dir.join(name);
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&tmp)
            {
                Ok(f) => break (tmp, f),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 100 => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    };
    let result = (|| {
        f.write_all(bytes)?;
        if sync {
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        if sync {
            std::fs::File::open(&dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A warm load to run, from [`Cache::warm_load`]: it holds the cache
/// weakly, and ends early if the cache goes.
pub struct WarmLoad {
    inner: Weak<CacheInner>,
    warm: Weak<Loaded>,
    listed: Arc<Listed>,
}

impl std::fmt::Debug for WarmLoad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmLoad")
            .field("files", &self.listed.files.len())
            .field("ranges", &self.listed.ranges.len())
            .finish()
    }
}

/// A file as the loader found it: open (its handle) or skipped.
type Opened = Option<File>;

impl WarmLoad {
    /// Runs the load on this thread, to its end (see
    /// [`Cache::warm_from`]); [`Cache::warm_progress`] says how far it
    /// got.
    pub fn run(self) {
        let listed = self.listed;
        let mut opened: HashMap<u32, Opened> = HashMap::new();
        let mut batch = 0u64;
        let mut misses = None;
        for (i, &(file, first, pages)) in listed.ranges.iter().enumerate() {
            let (Some(inner), Some(warm)) = (self.inner.upgrade(), self.warm.upgrade()) else {
                return;
            };
            warm.loading(i);
            let cache = Cache {
                inner: inner.clone(),
                warm: warm.clone(),
            };
            if batch >= BATCH_BYTES {
                // One batch in flight at a time: wait for the cache's reads
                // (ours and the program's) to finish, and give the program
                // the device a moment if it missed meanwhile.
                cache.wait_io_idle();
                let now = inner.stats.misses.sum();
                if misses.is_some_and(|m| m != now) {
                    std::thread::sleep(YIELD);
                }
                misses = Some(now);
                batch = 0;
            }
            let Some(file) = opened
                .entry(file)
                .or_insert_with(|| open_saved(&cache, &listed.files[file as usize]))
            else {
                continue;
            };
            let size = file.len();
            let start = first * PAGE_SIZE as u64;
            if start >= size {
                warm.range_loaded(0);
                continue;
            }
            let mut len = (u64::from(pages) * PAGE_SIZE as u64).min(size - start);
            let free = inner.mem.arena.free_pages() as u64 * PAGE_SIZE as u64;
            let full = free < len.next_multiple_of(PAGE_SIZE as u64);
            if full {
                len = free;
            }
            if len > 0 {
                // Errors are left for the program's reads of those bytes.
                let _ = file.readahead(start, len);
                batch += len;
            }
            if full {
                warm.at_capacity(len);
                break;
            }
            warm.range_loaded(len);
        }
        drop(opened);
        if let (Some(inner), Some(warm)) = (self.inner.upgrade(), self.warm.upgrade()) {
            Cache {
                inner,
                warm: warm.clone(),
            }
            .wait_io_idle();
            warm.finish();
        }
    }
}

/// Opens a saved file by path and checks its identity; a file first
/// opened here is held in the cache's pending table for the program's
/// open. `None` (and counted as skipped) if it cannot be opened or
/// changed.
fn open_saved(cache: &Cache, (path, identity): &(PathBuf, Identity)) -> Opened {
    let warm = &cache.warm;
    let opened = cache.open_new(path).and_then(|(f, new)| {
        let md = f.mapping().backing().raw_file().map(|r| r.metadata());
        Ok((f, new, md.transpose()?))
    });
    match opened {
        Ok((f, new, Some(md))) if Identity::of(&md) == *identity => {
            warm.file_loaded(new.then(|| (f.mapping.clone(), *identity)));
            Some(f)
        }
        _ => {
            warm.file_skipped();
            None
        }
    }
}
