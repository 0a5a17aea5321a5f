//! What a warm restart's load leaves in the cache for the program: the
//! files it loaded that no program opened yet, and the load's progress.
//! The load itself and the state file are `warm/`, above the handle; this
//! is what the cache (which holds it) and an open (which takes a loaded
//! file over) reach.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use crate::filemap::Mapping;
use crate::sync::{AtomicU64, Mutex, Ordering};

/// A file as the cache's registry knows it: (device, inode).
type FileKey = (u64, u64);

/// What says a file is the one that was saved: if any field differs at
/// load, the file changed (or was replaced) and none of its saved ranges
/// is loaded. A write changes `ctime` (and `mtime`), a truncation `size`,
/// a rename over it `ino`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// The device the file is on.
    pub dev: u64,
    /// Its inode number.
    pub ino: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Its modification time, in nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Its status change time, in nanoseconds since the epoch.
    pub ctime_ns: i64,
}

impl Identity {
    /// The identity of a file as `fstat` or `stat` describes it.
    pub fn of(md: &std::fs::Metadata) -> Identity {
        use std::os::unix::fs::MetadataExt;
        let ns = |s: i64, n: i64| s.saturating_mul(1_000_000_000).saturating_add(n);
        Identity {
            dev: md.dev(),
            ino: md.ino(),
            size: md.size(),
            mtime_ns: ns(md.mtime(), md.mtime_nsec()),
            ctime_ns: ns(md.ctime(), md.ctime_nsec()),
        }
    }
}

/// The background load's progress, from [`Cache::warm_progress`](crate::Cache::warm_progress).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct WarmProgress {
    /// Whether a load was started on this cache.
    pub started: bool,
    /// Whether it has ended: every range tried, the arena full, or the
    /// cache dropped.
    pub done: bool,
    /// Whether it stopped because the arena had no free memory left
    /// (the rest of the list, the least recently used, was not loaded).
    pub stopped_at_capacity: bool,
    /// Ranges in the state file.
    pub ranges: u64,
    /// Ranges read (or found cached already).
    pub ranges_loaded: u64,
    /// Bytes in the state file's ranges.
    pub bytes: u64,
    /// Bytes the loader asked to read (what was cached already included).
    pub bytes_loaded: u64,
    /// Files in the state file.
    pub files: u64,
    /// Files opened and found unchanged.
    pub files_loaded: u64,
    /// Files skipped: changed since the save (identity), gone, or not
    /// openable.
    pub files_skipped: u64,
}

/// A file held for the program's next open: its key, mapping and the
/// identity it had.
type Pending = (FileKey, Arc<Mapping>, Identity);

/// A closed file's ranges, noted for the next save.
#[derive(Clone)]
pub(crate) struct Remembered {
    /// Its path.
    pub(crate) path: PathBuf,
    /// Its identity when noted.
    pub(crate) identity: Identity,
    /// Its runs of cached pages: first page, pages.
    pub(crate) ranges: Vec<(u64, u32)>,
}

/// Whether `mapping`'s file still has a name (`fstat`'s link count).
fn linked(mapping: &Mapping) -> bool {
    use std::os::unix::fs::MetadataExt;
    mapping
        .backing()
        .raw_file()
        .and_then(|f| f.metadata().ok())
        .is_some_and(|md| md.nlink() > 0)
}

/// The runs of pages (first page, pages) in `a` or `b` (each sorted by
/// first page, as `Cache::remember` notes them), sorted, overlapping and
/// touching runs joined (a run at most `u32::MAX` pages).
pub(crate) fn union(a: &[(u64, u32)], b: &[(u64, u32)]) -> Vec<(u64, u32)> {
    let mut all: Vec<(u64, u32)> = a.iter().chain(b).copied().collect();
    all.sort_unstable();
    let mut out: Vec<(u64, u32)> = Vec::with_capacity(all.len());
    for (first, pages) in all {
        let end = first.saturating_add(u64::from(pages));
        match out.last_mut() {
            Some(last) if first <= last.0 + u64::from(last.1) => {
                let joined = end.max(last.0 + u64::from(last.1)) - last.0;
                match u32::try_from(joined) {
                    Ok(n) => last.1 = n,
                    Err(_) => {
                        // Too long for one run: the rest starts a new one.
                        let rest_first = last.0 + u64::from(last.1);
                        out.push((rest_first, (end - rest_first) as u32));
                    }
                }
            }
            _ => out.push((first, pages)),
        }
    }
    out
}

/// The runs of `a` less the pages of `b` (both sorted by first page, `b`'s
/// runs apart), sorted.
pub(crate) fn minus(a: &[(u64, u32)], b: &[(u64, u32)]) -> Vec<(u64, u32)> {
    let mut out = Vec::new();
    let mut j = 0;
    for &(first, pages) in a {
        let end = first + u64::from(pages);
        let mut at = first;
        while j < b.len() && b[j].0 + u64::from(b[j].1) <= at {
            j += 1;
        }
        let mut k = j;
        while at < end {
            match b.get(k) {
                Some(&(bf, bn)) if bf < end => {
                    if bf > at {
                        out.push((at, (bf - at) as u32));
                    }
                    at = at.max(bf + u64::from(bn));
                    k += 1;
                }
                _ => {
                    out.push((at, (end - at) as u32));
                    at = end;
                }
            }
        }
    }
    out
}

impl Remembered {
    /// The file's (device, inode).
    fn key(&self) -> FileKey {
        (self.identity.dev, self.identity.ino)
    }
}

/// A state file's list as a load works through it: its files (path and
/// identity as saved) and its ranges (file, first page, pages), most
/// recently used first.
#[derive(Debug, Default)]
pub(crate) struct Listed {
    /// The files the ranges name.
    pub(crate) files: Vec<(PathBuf, Identity)>,
    /// The ranges: an index into `files`, the first page, pages.
    pub(crate) ranges: Vec<(u32, u64, u32)>,
}

/// The notes of closed files, most recent first, and the files they
/// name: an open asks whether its file has a note without a walk.
#[derive(Default)]
struct Notes {
    list: VecDeque<Remembered>,
    keys: std::collections::HashSet<FileKey>,
}

/// A cache's warm-restart state: the loader's progress and the loaded
/// files no one opened yet.
pub(crate) struct Loaded {
    /// Loaded files no program opened yet, by (device, inode): each is
    /// kept (its folios too, until reclaim takes them) for the program's
    /// first open, which takes it out.
    pending: Mutex<HashMap<FileKey, (Arc<Mapping>, Identity)>>,
    /// Files whose ranges were noted as they closed
    /// (`Cache::remember`), most recent first, at most a capacity's
    /// worth of pages: their folios left the cache with them, but the
    /// next save lists them.
    remembered: Mutex<Notes>,
    /// Files closed and kept cached (`Cache::close_keeping`), most
    /// recent first: a later open takes one over as it takes a loaded
    /// file, if unchanged.
    kept: Mutex<VecDeque<Pending>>,
    /// The list the load works through, until it ends, and the first of
    /// its ranges the loader has not finished: a save before the load
    /// ends lists the rest of it ([`unloaded`](Self::unloaded)), so that
    /// a program that exits before its load is done leaves the list as
    /// long as it found it.
    listed: Mutex<Option<Arc<Listed>>>,
    next_range: AtomicU64,
    started: AtomicU64,
    done: AtomicU64,
    at_capacity: AtomicU64,
    ranges: AtomicU64,
    ranges_loaded: AtomicU64,
    bytes: AtomicU64,
    bytes_loaded: AtomicU64,
    files: AtomicU64,
    files_loaded: AtomicU64,
    files_skipped: AtomicU64,
}

impl Loaded {
    /// No load started, nothing pending.
    pub(crate) fn new() -> Loaded {
        Loaded {
            pending: Mutex::new(HashMap::new()),
            remembered: Mutex::new(Notes::default()),
            kept: Mutex::new(VecDeque::new()),
            listed: Mutex::new(None),
            next_range: AtomicU64::default(),
            started: AtomicU64::default(),
            done: AtomicU64::default(),
            at_capacity: AtomicU64::default(),
            ranges: AtomicU64::default(),
            ranges_loaded: AtomicU64::default(),
            bytes: AtomicU64::default(),
            bytes_loaded: AtomicU64::default(),
            files: AtomicU64::default(),
            files_loaded: AtomicU64::default(),
            files_skipped: AtomicU64::default(),
        }
    }

    /// Notes a closing file's ranges, and forgets the oldest notes past
    /// `max_pages` pages. An older note of the same file is merged in if
    /// the file is unchanged since (its identity the same: the pages it
    /// noted are the file's still, as the kernel keeps a file's pages
    /// cached across its closes), else replaced. So a file written, closed
    /// and opened again to read a little of it (what RocksDB does with
    /// each table it writes) keeps the note of all it wrote.
    pub(crate) fn remember(&self, mut r: Remembered, max_pages: u64) {
        let mut notes = self.remembered.lock();
        let Notes { list, keys } = &mut *notes;
        let key = (r.identity.dev, r.identity.ino);
        if let Some(i) = keys
            .contains(&key)
            .then(|| list.iter().position(|o| o.key() == key))
            .flatten()
        {
            if let Some(old) = list.remove(i) {
                if old.identity == r.identity {
                    r.ranges = union(&old.ranges, &r.ranges);
                }
            }
        }
        list.push_front(r);
        keys.insert(key);
        let mut pages = 0u64;
        let keep = list
            .iter()
            .take_while(|o| {
                pages += o.ranges.iter().map(|&(_, n)| u64::from(n)).sum::<u64>();
                pages <= max_pages
            })
            .count()
            .max(1);
        for gone in list.drain(keep..) {
            keys.remove(&gone.key());
        }
    }

    /// Keeps `mapping`, whose last handle closed, for a later open (as the
    /// kernel keeps a closed file's pages), with its identity now
    /// (`identity`, `None` for a file not to keep: dirty, unlinked, a
    /// memory file), unless it was opened again meanwhile. At most `max`
    /// files are kept, the most recently closed; one whose folios all
    /// left the cache, or whose file was unlinked since, is let go (its
    /// descriptor closed, so an unlinked file's blocks are freed).
    ///
    /// The check that no handle is open and the identity are taken under
    /// the lock that an open's [`adopt`](Self::adopt) takes after its
    /// handle counts: an open either counts before (nothing is kept) or
    /// finds the file kept and compares the identity taken here.
    pub(crate) fn keep(
        &self,
        mapping: Arc<Mapping>,
        max: usize,
        identity: impl FnOnce(&Mapping) -> Option<Identity>,
    ) {
        let mut gone = Vec::new();
        let mut kept = self.kept.lock();
        if !mapping.has_handles() {
            if let Some(id) = identity(&mapping) {
                let key = (id.dev, id.ino);
                while let Some(i) = kept.iter().position(|k| k.0 == key) {
                    gone.extend(kept.remove(i));
                }
                kept.push_front((key, mapping, id));
            }
        }
        let mut i = 0;
        while i < kept.len() {
            if i >= max || kept[i].1.nr_folios() == 0 || !linked(&kept[i].1) {
                gone.extend(kept.remove(i));
            } else {
                i += 1;
            }
        }
        drop(kept);
        // The mappings let go are dropped here, outside the lock.
        drop(gone);
    }

    /// The note of the file `key`, if there is one.
    pub(crate) fn noted(&self, key: FileKey) -> Option<Remembered> {
        let notes = self.remembered.lock();
        if !notes.keys.contains(&key) {
            return None;
        }
        notes.list.iter().find(|r| r.key() == key).cloned()
    }

    /// The notes of closed files, most recent first.
    pub(crate) fn remembered(&self) -> Vec<Remembered> {
        self.remembered.lock().list.iter().cloned().collect()
    }

    /// Marks the load of `listed` started (`bytes`: what its ranges
    /// cover); `false` if one was started already.
    pub(crate) fn start(&self, listed: &Arc<Listed>, bytes: u64) -> bool {
        if self.started.swap(1, Ordering::Relaxed) != 0 {
            return false;
        }
        self.files
            .store(listed.files.len() as u64, Ordering::Relaxed);
        self.ranges
            .store(listed.ranges.len() as u64, Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
        *self.listed.lock() = Some(listed.clone());
        true
    }

    /// The loader starts on range `i` of the list: those before it are
    /// loaded (or skipped).
    pub(crate) fn loading(&self, i: usize) {
        self.next_range.store(i as u64, Ordering::Relaxed);
    }

    /// The ranges of the list the loader has not finished (none once the
    /// load has ended), as notes of their files, in the list's order of
    /// files (each file's ranges sorted and joined): what a save before
    /// the load ends lists after what the cache holds.
    pub(crate) fn unloaded(&self) -> Vec<Remembered> {
        let Some(listed) = self.listed.lock().clone() else {
            return Vec::new();
        };
        let next = self.next_range.load(Ordering::Relaxed) as usize;
        let mut order: Vec<u32> = Vec::new();
        let mut by_file: HashMap<u32, Vec<(u64, u32)>> = HashMap::new();
        for &(file, first, pages) in listed.ranges.iter().skip(next) {
            by_file
                .entry(file)
                .or_insert_with(|| {
                    order.push(file);
                    Vec::new()
                })
                .push((first, pages));
        }
        order
            .into_iter()
            .filter_map(|file| {
                let (path, identity) = listed.files.get(file as usize)?;
                Some(Remembered {
                    path: path.clone(),
                    identity: *identity,
                    ranges: union(&[], &by_file.remove(&file).unwrap_or_default()),
                })
            })
            .collect()
    }

    /// A file found unchanged, and kept for the program's open if the
    /// loader opened it first (`pending`: its mapping and identity).
    pub(crate) fn file_loaded(&self, pending: Option<(Arc<Mapping>, Identity)>) {
        self.files_loaded.fetch_add(1, Ordering::Relaxed);
        if let Some((m, id)) = pending {
            self.pending.lock().insert((id.dev, id.ino), (m, id));
        }
    }

    /// A file skipped: changed, gone, or not openable.
    pub(crate) fn file_skipped(&self) {
        self.files_skipped.fetch_add(1, Ordering::Relaxed);
    }

    /// A range read (`bytes` of it asked for).
    pub(crate) fn range_loaded(&self, bytes: u64) {
        self.ranges_loaded.fetch_add(1, Ordering::Relaxed);
        self.bytes_loaded.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The load stopped at the capacity, after asking for `bytes` of its
    /// last range.
    pub(crate) fn at_capacity(&self, bytes: u64) {
        self.bytes_loaded.fetch_add(bytes, Ordering::Relaxed);
        self.at_capacity.store(1, Ordering::Relaxed);
    }

    /// The load has ended: its list goes.
    pub(crate) fn finish(&self) {
        self.done.store(1, Ordering::Relaxed);
        *self.listed.lock() = None;
    }

    /// The progress counters now.
    pub(crate) fn progress(&self) -> WarmProgress {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WarmProgress {
            started: l(&self.started) != 0,
            done: l(&self.done) != 0,
            stopped_at_capacity: l(&self.at_capacity) != 0,
            ranges: l(&self.ranges),
            ranges_loaded: l(&self.ranges_loaded),
            bytes: l(&self.bytes),
            bytes_loaded: l(&self.bytes_loaded),
            files: l(&self.files),
            files_loaded: l(&self.files_loaded),
            files_skipped: l(&self.files_skipped),
        }
    }

    /// A program's open of the file `key`, whose mapping `mapping` it
    /// found in the cache: if the loader holds the file, the open takes
    /// it over, and if the file changed since it was loaded (`md`, the
    /// open's own `fstat`, against the identity loaded), its folios go.
    pub(crate) fn adopt(&self, key: FileKey, md: &std::fs::Metadata, mapping: &Mapping) {
        let loaded = self.pending.lock().remove(&key);
        let held = loaded.or_else(|| {
            let mut kept = self.kept.lock();
            let i = kept.iter().position(|k| k.0 == key)?;
            kept.remove(i).map(|(_, m, id)| (m, id))
        });
        let Some((held, identity)) = held else {
            return;
        };
        if Identity::of(md) != identity {
            if let Err(e) = crate::truncate::discard(mapping) {
                log::warn!("foliocache: a warm-loaded file changed and could not be dropped: {e}");
            }
        }
        drop(held);
    }
}

#[cfg(test)]
mod tests {
    use super::{minus, union};

    #[test]
    fn union_joins_overlapping_and_touching_runs_in_order() {
        assert_eq!(union(&[(10, 5)], &[(0, 3)]), [(0, 3), (10, 5)]);
        assert_eq!(union(&[(0, 10)], &[(3, 1)]), [(0, 10)]);
        assert_eq!(union(&[(0, 10)], &[(10, 2), (5, 10)]), [(0, 15)]);
        assert_eq!(union(&[], &[(7, 1), (2, 2)]), [(2, 2), (7, 1)]);
        // A run cannot pass u32::MAX pages: the rest starts another.
        let big = union(&[(0, u32::MAX)], &[(1, u32::MAX)]);
        assert_eq!(big, [(0, u32::MAX), (u64::from(u32::MAX), 1)]);
    }

    #[test]
    fn minus_takes_out_the_pages_held() {
        assert_eq!(minus(&[(0, 10)], &[(2, 3)]), [(0, 2), (5, 5)]);
        assert_eq!(minus(&[(0, 10)], &[(0, 10)]), []);
        assert_eq!(minus(&[(0, 4), (8, 4)], &[(2, 8)]), [(0, 2), (10, 2)]);
        assert_eq!(minus(&[(5, 5)], &[(0, 1), (20, 1)]), [(5, 5)]);
        assert_eq!(minus(&[(0, 3), (4, 3)], &[]), [(0, 3), (4, 3)]);
    }
}
