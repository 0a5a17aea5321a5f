//! The redb scenario's own storage backends: [`Aligned`], what a redb
//! user writes to run redb on an `O_DIRECT` file (`file[direct]`), and
//! [`MemBound`], the bounds (`memory[bound]`, `direct[bound]`) that
//! measure what redb's miss path and a commit's IO allow any backend.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use backing::aio::{IoEngine, IoEngineConfig, WriteReq};
use backing::{AlignedBuf, Backing, FileBacking, FileOptions, IoBuf};
use redb::StorageBackend;

use super::DIRECT_BOUND;

/// A `StorageBackend` over an `O_DIRECT` file, as a redb user must write
/// one: redb's `FileBackend` hands the kernel redb's own buffers, which
/// `O_DIRECT` refuses (`EINVAL`) unless they are aligned; this one reads
/// and writes the whole 4 KiB blocks around each request through a
/// page-aligned buffer of the thread's (an anonymous mapping, grown as
/// needed), and a write of part of a block reads the block first.
#[derive(Debug)]
pub(super) struct Aligned {
    file: std::fs::File,
    len: std::sync::Mutex<u64>,
}

/// `O_DIRECT`'s alignment here.
const BLOCK: u64 = 4096;

impl Aligned {
    pub(super) fn new(file: std::fs::File) -> Aligned {
        let len = file.metadata().map_or(0, |m| m.len());
        Aligned {
            file,
            len: std::sync::Mutex::new(len),
        }
    }

    fn len_lock(&self) -> std::sync::MutexGuard<'_, u64> {
        self.len.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Calls `f` with the blocks covering `offset..offset + n` (their
    /// start and an aligned buffer of their size, zeroed or not).
    fn with_blocks<R>(
        offset: u64,
        n: usize,
        f: impl FnOnce(u64, &mut [u8]) -> std::io::Result<R>,
    ) -> std::io::Result<R> {
        thread_local! {
            static BUF: std::cell::RefCell<Option<memmap2::MmapMut>> =
                const { std::cell::RefCell::new(None) };
        }
        let start = offset / BLOCK * BLOCK;
        let len = ((offset + n as u64).div_ceil(BLOCK) * BLOCK - start) as usize;
        BUF.with(|cell| {
            let mut buf = cell.borrow_mut();
            if buf.as_ref().is_none_or(|m| m.len() < len) {
                *buf = Some(memmap2::MmapMut::map_anon(len.next_power_of_two())?);
            }
            match buf.as_mut() {
                Some(m) => f(start, &mut m[..len]),
                None => Err(std::io::Error::other("no buffer")),
            }
        })
    }
}

impl Aligned {
    /// Reads the blocks at `start` into `b`, zeros past the end on disk
    /// (a file grown by `set_len`).
    fn read_blocks(&self, start: u64, b: &mut [u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let mut got = 0;
        while got < b.len() {
            match self.file.read_at(&mut b[got..], start + got as u64)? {
                0 => break,
                k => got += k,
            }
        }
        b[got..].fill(0);
        Ok(())
    }
}

impl StorageBackend for Aligned {
    fn len(&self) -> std::io::Result<u64> {
        Ok(*self.len_lock())
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        if offset
            .checked_add(out.len() as u64)
            .is_none_or(|end| end > *self.len_lock())
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "read past the end of the storage",
            ));
        }
        Aligned::with_blocks(offset, out.len(), |start, b| {
            self.read_blocks(start, b)?;
            let from = (offset - start) as usize;
            out.copy_from_slice(&b[from..from + out.len()]);
            Ok(())
        })
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        let mut l = self.len_lock();
        self.file.set_len(len)?;
        *l = len;
        Ok(())
    }

    fn sync_data(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        Aligned::with_blocks(offset, data.len(), |start, b| {
            let from = (offset - start) as usize;
            if from != 0 || data.len() != b.len() {
                self.read_blocks(start, b)?;
            }
            b[from..from + data.len()].copy_from_slice(data);
            self.file.write_all_at(b, start)
        })?;
        let mut l = self.len_lock();
        *l = (*l).max(offset + data.len() as u64);
        Ok(())
    }
}

/// A `StorageBackend` in memory, for the bound of what any backend could
/// give redb ([`MEM_BOUND`](super::MEM_BOUND)): a read is a shared lock and a copy. The
/// storage is chunks of [`CHUNK`] bytes that are never moved, so growth
/// costs only the new chunks (redb's `InMemoryBackend`, one `Vec` resized,
/// briefly holds twice the database while it grows, and outgrew M).
///
/// [`MemBound::on_disk`] keeps a file too ([`DIRECT_BOUND`]): the bound
/// of a commit over a write-back cache on `O_DIRECT`. A write marks its
/// pages; a sync writes the marked pages, runs of adjacent ones as one
/// write each, straight from the chunks (aligned, so no bounce copy)
/// through the IO engine in one batch ([`IoEngine::write_all`], the
/// thread's own io_uring as foliocache's writeback uses it), then
/// `fdatasync`s; `set_len` sets the file's length too. That is the IO a
/// commit over foliocache does, without any of a cache's own work.
#[derive(Debug, Default)]
pub(super) struct MemBound {
    /// The chunks, and the storage's length.
    data: std::sync::RwLock<(Vec<AlignedBuf>, u64)>,
    /// The file behind the memory, for [`DIRECT_BOUND`].
    disk: Option<Disk>,
}

/// [`MemBound`]'s file: where its syncs write, and what they write.
struct Disk {
    file: Arc<dyn Backing>,
    engine: IoEngine,
    /// The pages written since the last sync.
    dirty: std::sync::Mutex<std::collections::BTreeSet<u64>>,
}

/// [`MemBound`]'s chunk.
const CHUNK: usize = 1 << 16;

impl std::fmt::Debug for Disk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Disk")
            .field("file", &self.file.info())
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

impl MemBound {
    /// An empty storage over a new `O_DIRECT` file at `path`.
    pub(super) fn on_disk(path: &Path) -> Result<MemBound> {
        let opts = FileOptions::new().write(true).create(true).truncate(true);
        let file = FileBacking::open(path, &opts)
            .with_context(|| format!("redb: opening {} with O_DIRECT", path.display()))?;
        if !file.is_direct() {
            bail!(
                "{DIRECT_BOUND}: {} is not O_DIRECT: {}",
                path.display(),
                file.info()
            );
        }
        Ok(MemBound {
            data: Default::default(),
            disk: Some(Disk {
                file: Arc::new(file),
                engine: IoEngine::new(IoEngineConfig::new()).context("redb: the IO engine")?,
                dirty: Default::default(),
            }),
        })
    }

    /// Writes the pages marked since the last sync to the file, and
    /// flushes it. On an error the pages stay marked, for the next sync.
    fn sync_disk(&self, disk: &Disk) -> std::io::Result<()> {
        let pages = std::mem::take(&mut *disk.dirty.lock().unwrap_or_else(|e| e.into_inner()));
        let r = self.write_pages(disk, &pages);
        if r.is_err() {
            disk.dirty
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(pages);
        }
        r
    }

    /// Writes `pages` to the file in one batch, and flushes it.
    fn write_pages(
        &self,
        disk: &Disk,
        pages: &std::collections::BTreeSet<u64>,
    ) -> std::io::Result<()> {
        let d = self.data.read().unwrap_or_else(|e| e.into_inner());
        // Runs of adjacent pages: (offset, the pages' memory).
        let mut runs: Vec<(u64, Vec<IoBuf<'_>>)> = Vec::new();
        for &p in pages {
            let at = p * BLOCK;
            if at >= d.1 {
                break;
            }
            let within = (at % CHUNK as u64) as usize;
            let chunk = &d.0[(at / CHUNK as u64) as usize];
            let page = IoBuf::new(&chunk[within..within + BLOCK as usize])
                .map_err(std::io::Error::from)?;
            match runs.last_mut() {
                Some((start, bufs)) if *start + bufs.len() as u64 * BLOCK == at => bufs.push(page),
                _ => runs.push((at, vec![page])),
            }
        }
        let reqs: Vec<WriteReq<'_>> = runs
            .iter()
            .map(|(offset, bufs)| WriteReq {
                backing: &disk.file,
                offset: *offset,
                bufs,
            })
            .collect();
        for r in disk.engine.write_all(&reqs) {
            r?;
        }
        if runs
            .last()
            .is_some_and(|(at, bufs)| at + bufs.len() as u64 * BLOCK > d.1)
        {
            // The last page went past the length.
            disk.file.set_len(d.1)?;
        }
        disk.file.sync_data()
    }

    /// Calls `f` on each chunk's part of `offset..offset + n`, with that
    /// part's position in the range.
    fn each(offset: u64, n: usize, mut f: impl FnMut(usize, usize, std::ops::Range<usize>)) {
        let mut done = 0;
        while done < n {
            let at = offset + done as u64;
            let (c, within) = ((at / CHUNK as u64) as usize, (at % CHUNK as u64) as usize);
            let k = (CHUNK - within).min(n - done);
            f(c, done, within..within + k);
            done += k;
        }
    }

    /// `offset..offset + n` lies within a storage of `len` bytes.
    fn within(len: u64, offset: u64, n: usize) -> std::io::Result<()> {
        if offset.checked_add(n as u64).is_none_or(|end| end > len) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "past the end of the storage",
            ));
        }
        Ok(())
    }
}

impl StorageBackend for MemBound {
    fn len(&self) -> std::io::Result<u64> {
        Ok(self.data.read().unwrap_or_else(|e| e.into_inner()).1)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        let d = self.data.read().unwrap_or_else(|e| e.into_inner());
        MemBound::within(d.1, offset, out.len())?;
        MemBound::each(offset, out.len(), |c, at, r| {
            out[at..at + r.len()].copy_from_slice(&d.0[c][r]);
        });
        Ok(())
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        let mut d = self.data.write().unwrap_or_else(|e| e.into_inner());
        if let Some(disk) = &self.disk {
            // The file first: if it fails, nothing changed.
            disk.file.set_len(len)?;
        }
        let chunks = len.div_ceil(CHUNK as u64) as usize;
        while d.0.len() < chunks {
            d.0.push(AlignedBuf::zeroed(CHUNK)?);
        }
        d.0.truncate(chunks);
        if len < d.1 {
            // What a later growth exposes again reads as zeros.
            let tail = (len % CHUNK as u64) as usize;
            if let Some(last) = d.0.last_mut().filter(|_| tail != 0) {
                last[tail..].fill(0);
            }
        }
        d.1 = len;
        if let Some(disk) = &self.disk {
            let first = len.div_ceil(BLOCK);
            disk.dirty
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .split_off(&first);
        }
        Ok(())
    }

    fn sync_data(&self) -> std::io::Result<()> {
        match &self.disk {
            Some(disk) => self.sync_disk(disk),
            None => Ok(()),
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let mut d = self.data.write().unwrap_or_else(|e| e.into_inner());
        MemBound::within(d.1, offset, data.len())?;
        MemBound::each(offset, data.len(), |c, at, r| {
            let n = r.len();
            d.0[c][r].copy_from_slice(&data[at..at + n]);
        });
        if let Some(disk) = self.disk.as_ref().filter(|_| !data.is_empty()) {
            let (first, last) = (offset / BLOCK, (offset + data.len() as u64 - 1) / BLOCK);
            disk.dirty
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(first..=last);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::{Database, ReadableDatabase, ReadableTableMetadata, TableDefinition};

    /// A [`MemBound`] on an `O_DIRECT` file in a fresh directory, or `None`
    /// where the directory's filesystem has no `O_DIRECT` (skipped with a
    /// reason; under CI it fails).
    fn on_disk(dir: &tempfile::TempDir) -> Option<(MemBound, std::path::PathBuf)> {
        let path = dir.path().join("bound.db");
        match MemBound::on_disk(&path) {
            Ok(m) => Some((m, path)),
            Err(e) => {
                test_support::skip_or_fail("direct[bound]", format!("{e:#}"));
                None
            }
        }
    }

    #[test]
    fn the_o_direct_bound_writes_what_a_sync_covers_and_nothing_past_its_length() {
        let dir = tempfile::tempdir().unwrap();
        let Some((m, path)) = on_disk(&dir) else {
            return;
        };
        m.set_len(5 * BLOCK).unwrap();
        // A run of two pages, a page alone, and part of a page.
        m.write(BLOCK, &[1; 2 * BLOCK as usize]).unwrap();
        m.write(4 * BLOCK, &[2; BLOCK as usize]).unwrap();
        m.write(10, &[3; 20]).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), vec![0; 5 * BLOCK as usize]);
        m.sync_data().unwrap();
        let mut want = vec![0u8; 5 * BLOCK as usize];
        want[BLOCK as usize..3 * BLOCK as usize].fill(1);
        want[4 * BLOCK as usize..].fill(2);
        want[10..30].fill(3);
        assert_eq!(std::fs::read(&path).unwrap(), want);
        // Written, then cut off before the sync: the page is not written
        // (the file ends before it), and growth reads as zeros again.
        m.write(4 * BLOCK, &[4; BLOCK as usize]).unwrap();
        m.set_len(4 * BLOCK).unwrap();
        m.sync_data().unwrap();
        want.truncate(4 * BLOCK as usize);
        assert_eq!(std::fs::read(&path).unwrap(), want);
        m.set_len(5 * BLOCK).unwrap();
        let mut out = [9u8; BLOCK as usize];
        m.read(4 * BLOCK, &mut out).unwrap();
        assert_eq!(out, [0; BLOCK as usize]);
        // A length that ends inside a page: the file ends there too.
        m.set_len(5 * BLOCK - 100).unwrap();
        m.write(4 * BLOCK, &[5; 8]).unwrap();
        m.sync_data().unwrap();
        let file = std::fs::read(&path).unwrap();
        assert_eq!(file.len() as u64, 5 * BLOCK - 100);
        assert_eq!(
            &file[4 * BLOCK as usize..][..9],
            &[5, 5, 5, 5, 5, 5, 5, 5, 0]
        );
        // Past the end: an error, as redb's contract asks.
        assert!(m.read(5 * BLOCK - 100, &mut [0; 1]).is_err());
        assert!(m.write(5 * BLOCK - 100, &[0; 1]).is_err());
    }

    #[test]
    fn redb_commits_on_the_o_direct_bound_reach_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let Some((m, path)) = on_disk(&dir) else {
            return;
        };
        let mut b = Database::builder();
        b.set_cache_size(1 << 20);
        let db = b.create_with_backend(m).unwrap();
        let table: TableDefinition<u64, &[u8]> = TableDefinition::new("t");
        for i in 0..50u64 {
            let tx = db.begin_write().unwrap();
            tx.open_table(table)
                .unwrap()
                .insert(i, &[7u8; 150][..])
                .unwrap();
            tx.commit().unwrap();
        }
        let len = db
            .begin_read()
            .unwrap()
            .open_table(table)
            .unwrap()
            .len()
            .unwrap();
        assert_eq!(len, 50);
        drop(db);
        // What the commits synced is on the file: redb opens it with its
        // own FileBackend and finds every entry.
        let db = Database::open(&path).unwrap();
        let t = db.begin_read().unwrap().open_table(table).unwrap();
        assert_eq!(t.len().unwrap(), 50);
        assert_eq!(t.get(49).unwrap().unwrap().value(), &[7u8; 150][..]);
    }
}
