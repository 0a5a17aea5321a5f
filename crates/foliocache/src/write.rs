//! Writing through the cache: [`OpenOptions`], [`File::write_at`],
//! `set_len`, `punch_hole`, `sync_*`, and memory files.
//!
//! # The write path (the kernel's `generic_perform_write`)
//! 1. The file's `inode_lock`: shared for a write inside the file,
//!    exclusive for one that extends it (and for `set_len`, `punch_hole`).
//! 2. Over the cache's dirty limit, the writer first writes back its own
//!    file (`writeback::throttle`), before each piece of the write.
//! 3. For each piece of up to [`WRITE_CHUNK_PAGES`], the folios are found or
//!    created and locked in one go ([`Mapping::grab_folios`], the kernel's
//!    `filemap_grab_folios`:
//!    large aligned folios in the gaps, one index lock hold per gap).
//! 4. A created folio the write does not cover wholly is read first (or
//!    zeroed, when it lies past end of file or in a memory file); then the
//!    bytes are copied in, the folios are marked uptodate and dirty (flag
//!    and index mark, one lock hold), the size grows if the write extends
//!    the file (before the folios unlock, so writeback sees it), and the
//!    folios unlock.
//! 5. With [`WriteFlags::DONTCACHE`], the writeback of the range each
//!    piece wrote is started (`writeback::kick_uncached`: queued for a job
//!    on the writeback pool, batched with its neighbours) and the write
//!    goes on without waiting for it; the folios the write created leave
//!    the cache when that writeback completes.

use std::io;
use std::path::Path;
use std::sync::Arc;

use backing::{Backing, BackingInfo, DataPath, FileOptions, IoBuf, IoBufMut};

use crate::cache::Cache;
use crate::file::File;
use crate::filemap::Mapping;
use crate::folio::FolioFlags;
use crate::mm::AllocWait;
use crate::truncate::{self, InvalidateLocked};
use crate::writeback;

use crate::arena::PAGE;

/// The most pages one step of a write grabs and locks at once (4 MiB, and
/// never more than an eighth of the cache): a large write goes in pieces,
/// so it never holds more than this locked.
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
pub const WRITE_CHUNK_PAGES: u64 = 1024;

bitflags::bitflags! {
    /// Flags of one write ([`File::write_at_flags`]). Combine with `|`;
    /// [`from_bits`](Self::from_bits) refuses unknown bits (`None`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct WriteFlags: u32 {
        /// Uncached (the kernel's `RWF_DONTCACHE` on `pwritev2`, 6.14): the
        /// write copies into the cache and returns; the writeback of the
        /// written range is started at once, on the cache's writeback pool
        /// (batched with the file's other uncached writes), and the folios
        /// this write created are dropbehind: they leave the cache when
        /// that writeback completes, unless a cached read or write took them
        /// meanwhile. Folios that were cached before stay cached. An
        /// uncached stream holds about 8 MiB of the cache per file (a
        /// quarter of a smaller cache) kicked and under writeback: past it
        /// the writer waits for the writeback. The data
        /// is durable after a `sync_data`/`sync_all`, as any write's. A
        /// writeback that fails does not fail the write (the kernel's does
        /// not either): the pages stay dirty and cached, and the next
        /// `sync_data`/`sync_all` reports the error.
        const DONTCACHE = 1 << 0;
    }
}

impl WriteFlags {
    /// No flags: a normal buffered write.
    pub const NONE: WriteFlags = WriteFlags::empty();
}

impl std::fmt::Debug for WriteFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::flags::fmt_names(self, false, f)
    }
}

/// Options for opening a file through a [`Cache`], as
/// [`std::fs::OpenOptions`]; from [`Cache::open_options`].
///
/// ```no_run
/// let cache = foliocache::Cache::builder().capacity(64 << 20).build()?;
/// let file = cache.open_options().read(true).write(true).create(true).open("log.bin")?;
/// file.write_at(b"hello", 0)?;
/// file.sync_data()?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct OpenOptions {
    cache: Cache,
    read: bool,
    write: bool,
    append: bool,
    truncate: bool,
    create: bool,
    create_new: bool,
    mode: u32,
}

impl OpenOptions {
    /// Read access.
    pub fn read(&mut self, v: bool) -> &mut Self {
        self.read = v;
        self
    }

    /// Write access.
    pub fn write(&mut self, v: bool) -> &mut Self {
        self.write = v;
        self
    }

    /// Append mode (implies write): every write goes to the end of the
    /// file, whatever offset it names (as `pwrite` on a file opened with
    /// `O_APPEND` does on Linux).
    pub fn append(&mut self, v: bool) -> &mut Self {
        self.append = v;
        self
    }

    /// Truncate the file to 0 bytes when it is opened (needs write).
    pub fn truncate(&mut self, v: bool) -> &mut Self {
        self.truncate = v;
        self
    }

    /// Create the file if it does not exist (needs write).
    pub fn create(&mut self, v: bool) -> &mut Self {
        self.create = v;
        self
    }

    /// Create the file, failing with `AlreadyExists` if it exists.
    pub fn create_new(&mut self, v: bool) -> &mut Self {
        self.create_new = v;
        self
    }

    /// The permission bits of a created file (default `0o666`, less the
    /// umask).
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = mode;
        self
    }

    /// Opens `path` with these options. The file is opened with `O_DIRECT`
    /// (with the buffered fallback where the filesystem refuses it) and,
    /// when writable, for reading too: the cache reads the rest of a folio
    /// a write covers only in part. Write-only options on a file the
    /// caller may not read open it write-only: then reads, and writes
    /// into part of a block that is neither cached nor past the end of
    /// the file, fail with the backing's `EBADF`.
    ///
    /// # Errors
    /// `InvalidInput` for a combination `std::fs::OpenOptions` refuses
    /// (no access mode; truncate or create without write); the OS error of
    /// `open(2)` (`NotFound`, `AlreadyExists`, `PermissionDenied`, ...).
    pub fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        let path = path.as_ref();
        let writable = self.write || self.append;
        if !self.read && !writable {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "open_options: neither read nor write access asked for",
            ));
        }
        if !writable && (self.truncate || self.create || self.create_new) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "open_options: truncate and create need write (or append) access",
            ));
        }
        if self.append && self.truncate {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "open_options: append and truncate together",
            ));
        }
        let opts = FileOptions::new()
            .read(true)
            .write(writable)
            .create(self.create)
            .create_new(self.create_new)
            .truncate(self.truncate)
            .mode(self.mode);
        let file = match self.cache.open_path(path, &opts, writable, self.truncate) {
            // Write-only access, as `open(2)`'s `O_WRONLY`, needs no read
            // permission: without it the backing is opened write-only, and
            // a write into part of a block neither cached nor past the end
            // fails (`EBADF`: the cache cannot read the rest of the block).
            Err(e) if !self.read && e.kind() == io::ErrorKind::PermissionDenied => self
                .cache
                .open_path(path, &opts.read(false), writable, self.truncate)?,
            r => r?,
        };
        Ok(file.with_access(writable, self.append))
    }
}

/// The backing of a memory file: it has none. Nothing reaches it (a memory
/// file's folios are never read, written back or evicted); every method
/// fails or reports nothing, in case something does.
struct NoBacking {
    name: String,
}

impl NoBacking {
    fn none(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "foliocache: memory file `{}` has no backing store",
                self.name
            ),
        )
    }
}

impl Backing for NoBacking {
    fn len(&self) -> io::Result<u64> {
        Ok(0)
    }
    fn read_blocks(&self, _bufs: &mut [IoBufMut<'_>], _offset: u64) -> io::Result<usize> {
        Err(self.none())
    }
    fn write_blocks(&self, _bufs: &[IoBuf<'_>], _offset: u64) -> io::Result<usize> {
        Err(self.none())
    }
    fn set_len(&self, _len: u64) -> io::Result<()> {
        Ok(())
    }
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }
    fn punch_hole(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    fn info(&self) -> BackingInfo {
        BackingInfo::new(
            "memfile",
            DataPath::Memory,
            "none",
            format!("memory file `{}`: data lives only in the cache", self.name),
        )
    }
}

impl Cache {
    /// Options for opening a file for reading and writing through the
    /// cache, as [`std::fs::OpenOptions`].
    pub fn open_options(&self) -> OpenOptions {
        OpenOptions {
            cache: self.clone(),
            read: false,
            write: false,
            append: false,
            truncate: false,
            create: false,
            create_new: false,
            mode: 0o666,
        }
    }

    /// A memory file (the kernel's shmem, memfd or guest_memfd): `size`
    /// bytes, all a hole, readable and writable, with no backing store.
    /// Holes read as zeros without allocating; its data lives only in the
    /// cache's arena, is never evicted nor written anywhere, and goes when
    /// the last handle is dropped. Writes may extend it.
    ///
    /// # Errors
    /// `FileTooLarge` for a size past the largest file size. (Writes fail
    /// with `StorageFull` once its data would exceed what the cache can
    /// hold.)
    pub fn memfile(&self, name: &str, size: u64) -> io::Result<File> {
        check_size(size)?;
        let backing = NoBacking {
            name: name.to_string(),
        };
        let file = self.file(|this| {
            let mut mapping = Mapping::new(this, self.inner.clone(), Arc::new(backing), size);
            mapping.memfile = true;
            mapping.inode.path = Some(name.into());
            mapping
        });
        Ok(file.with_access(true, false))
    }
}

/// `offset + len`, if it is within the largest file size.
fn end_within_limit(offset: u64, len: u64) -> io::Result<u64> {
    offset
        .checked_add(len)
        .filter(|&e| e <= backing::MAX_FILE_SIZE)
        .ok_or_else(|| too_large(format_args!("{offset} + {len}")))
}

fn check_size(end: u64) -> io::Result<()> {
    if end > backing::MAX_FILE_SIZE {
        return Err(too_large(end));
    }
    Ok(())
}

fn too_large(end: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::FileTooLarge,
        format!(
            "foliocache: a file size or write end of {end} bytes is past the largest file \
             size ({} bytes)",
            backing::MAX_FILE_SIZE
        ),
    )
}

/// The inode lock as a write holds it (held for its `Drop`).
#[allow(dead_code)]
enum InodeGuard<'a> {
    Shared(crate::sync::RwLockReadGuard<'a, ()>),
    Exclusive(crate::sync::RwLockWriteGuard<'a, ()>),
}

/// Writing.
impl File {
    pub(crate) fn check_writable(&self) -> io::Result<()> {
        if !self.is_writable() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "foliocache: the file was not opened for writing (use Cache::open_options \
                 with write(true))",
            ));
        }
        Ok(())
    }

    /// Writes all of `buf` at `offset` through the cache, like
    /// [`std::os::unix::fs::FileExt::write_at`] but never short: returns
    /// `buf.len()`. The rest of a folio the write covers only in part is
    /// read first; a write past end of file extends it, and the gap reads
    /// as zeros. The data is dirty in the cache until it is written back
    /// (by the flusher, a throttled writer, or `sync_*`). In append mode
    /// the data goes to the end of the file, whatever `offset` says.
    ///
    /// # Errors
    /// - `PermissionDenied`: not opened for writing.
    /// - `FileTooLarge`: the write would end past `i64::MAX` bytes, or past
    ///   the largest file the backing's filesystem holds (`EFBIG`, as a
    ///   local filesystem's `pwrite` fails; nothing is written).
    /// - `StorageFull`: a memory file's data would exceed the cache; the
    ///   backing's filesystem has no space for an extending write (see
    ///   "Space on the backing").
    /// - A backing read error for a partial folio; a writeback error when
    ///   the writer was throttled (the cache over its dirty limit) and the
    ///   writeback failed; `OutOfMemory` if every folio stayed in use for
    ///   about 200 ms (ten times that while dirty data is written back), or a folio the write covers stayed pinned
    ///   ([`File::pin`]) that long with no free folio to copy it to.
    ///
    /// On an error, the folios before the failing one may have been
    /// written (and the file extended to their end).
    ///
    /// # Space on the backing
    /// A write that extends the file reserves the backing's space for its
    /// bytes first ([`Backing::reserve`](backing::Backing::reserve): a
    /// file on disk takes `fallocate(FALLOC_FL_KEEP_SIZE)`, ahead of the
    /// write by an eighth of the file, 1 MiB to 64 MiB, so an appending
    /// writer pays one system call per many writes; what is past the size
    /// goes back when the last handle closes), as ext4's delayed
    /// allocation reserves blocks at `write(2)`: when the filesystem is
    /// full, this write fails with `StorageFull` (`ENOSPC`) and writes
    /// nothing. Where the filesystem cannot reserve (`EOPNOTSUPP`: FUSE,
    /// NFS before 4.2), and for writes inside the file (into a hole of a
    /// sparse file, say), nothing is reserved: a full disk
    /// (`ENOSPC`) or an IO error appears when the data is written back,
    /// not here. That error is reported
    /// by the next [`sync_data`](Self::sync_data) or
    /// [`sync_all`](Self::sync_all) of every handle (once each, as the
    /// kernel's errseq), by a write that was throttled into that
    /// writeback, and the data stays dirty in the cache meanwhile (the
    /// last handle's close keeps the file for the flusher's retries: see
    /// [`File`]'s `Drop`). A program that must know before it
    /// acknowledges data syncs it; one that must not fail later reserves
    /// the space first with [`allocate`](Self::allocate) (`fallocate`).
    pub fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.write_at_flags(buf, offset, WriteFlags::NONE)
    }

    /// Writes all of `buf` at `offset` ([`write_at`](Self::write_at) never
    /// writes less).
    ///
    /// # Errors
    /// As [`write_at`](Self::write_at).
    pub fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_at(buf, offset).map(|_| ())
    }

    /// [`write_at`](Self::write_at) with per-write [`WriteFlags`].
    ///
    /// # Errors
    /// As [`write_at`](Self::write_at). (The writeback error of an uncached
    /// write is the next sync's: see [`WriteFlags::DONTCACHE`].)
    pub fn write_at_flags(&self, buf: &[u8], offset: u64, flags: WriteFlags) -> io::Result<usize> {
        self.check_writable()?;
        if buf.is_empty() {
            return Ok(0);
        }
        let (offset, guard) = self.lock_for_write(offset, buf.len() as u64, self.is_append())?;
        let dontcache = flags.contains(WriteFlags::DONTCACHE) && !self.mapping().memfile;
        self.write_range(buf, offset, true, dontcache)?;
        drop(guard);
        Ok(buf.len())
    }

    /// Writes `buf` at the end of the file, the size read and moved under
    /// one hold of the inode lock (`O_APPEND`, whatever this handle was
    /// opened with). Returns the offset written at.
    ///
    /// # Errors
    /// As [`write_at`](Self::write_at).
    pub fn append(&self, buf: &[u8]) -> io::Result<u64> {
        self.check_writable()?;
        let (offset, guard) = self.lock_for_write(0, buf.len() as u64, true)?;
        if !buf.is_empty() {
            self.write_range(buf, offset, true, false)?;
        }
        drop(guard);
        Ok(offset)
    }

    /// The file's `inode_lock` as a write of `len` bytes at `offset` takes
    /// it (see the module documentation): shared for a write inside the
    /// file, exclusive for one that extends it (the backing's space then
    /// reserved) or with `append` (at the end of the file, whatever
    /// `offset` says). Returns where the write goes and the lock.
    fn lock_for_write(
        &self,
        offset: u64,
        len: u64,
        append: bool,
    ) -> io::Result<(u64, InodeGuard<'_>)> {
        let m = self.mapping();
        let end_of = |offset: u64| end_within_limit(offset, len);
        // Inside the file: shared; extending or appending: exclusive.
        loop {
            if !append {
                let end = end_of(offset)?;
                if end <= m.size() {
                    let g = m.inode.lock.read();
                    if end <= m.size() {
                        return Ok((offset, InodeGuard::Shared(g)));
                    }
                    // Shrunk meanwhile: extend under the exclusive lock.
                    continue;
                }
            }
            let g = m.inode.lock.write();
            let offset = if append { m.size() } else { offset };
            let end = end_of(offset)?;
            if end > m.size() && !m.memfile {
                // A write the store could never hold fails now, with the
                // error a local filesystem gives (`EFBIG` past its largest
                // file), not at writeback. (Extending writes are
                // serialised by this lock, and `end` is past the file:
                // the backing's probe may punch a hole at `end - 1`.)
                m.backing().check_size(end)?;
                // Space for it, reserved now: a full store fails this
                // write, not its writeback.
                m.backing().reserve(offset, end)?;
            }
            return Ok((offset, InodeGuard::Exclusive(g)));
        }
    }

    /// One piece of an async write (`future/write.rs`): `buf` at `offset`
    /// (at the end of the file with `append`), under the inode lock as
    /// [`write_at`](Self::write_at) takes it, without the throttle (the
    /// future awaited it first); `uncached` as `WriteFlags::DONTCACHE`,
    /// its writeback kicked without waiting (the future awaits the bound
    /// before its next piece). Returns where it went.
    pub(crate) fn write_piece(
        &self,
        buf: &[u8],
        offset: u64,
        append: bool,
        uncached: bool,
    ) -> io::Result<u64> {
        let (offset, guard) = self.lock_for_write(offset, buf.len() as u64, append)?;
        let uncached = uncached && !self.mapping().memfile;
        self.write_range(buf, offset, false, uncached)?;
        drop(guard);
        Ok(offset)
    }

    /// The most pages one piece of a write locks: an eighth of the cache,
    /// at most [`WRITE_CHUNK_PAGES`] (a small cache shared by several
    /// writers and readers must not be locked whole by one of them).
    pub(crate) fn write_piece_pages(&self) -> u64 {
        let m = self.mapping();
        (m.inner().mem.arena.capacity_pages() as u64 / 8).clamp(1, WRITE_CHUNK_PAGES)
    }

    /// A memory file whose folio could not be had is full.
    fn write_error(&self, e: io::Error) -> io::Error {
        if self.mapping().memfile && e.kind() == io::ErrorKind::OutOfMemory {
            return io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "foliocache: no space for memory file {:?}: the cache ({} bytes) is full \
                     (memory files are never evicted)",
                    self.path().unwrap_or(Path::new("")),
                    self.mapping().inner().mem.arena.capacity_bytes()
                ),
            );
        }
        e
    }

    /// Writes back this file's dirty data, then makes it durable with the
    /// metadata needed to read it back (`fdatasync`). Reports, once per
    /// handle (clones share it; [`reopen`](Self::reopen) samples anew),
    /// any writeback error since this handle last reported one, whoever
    /// met it (the flusher, a throttled writer, another handle's sync).
    /// Folios whose writeback failed stay dirty and are written again by
    /// the next writeback, so a sync that succeeds after a failed one has
    /// made all acknowledged data durable.
    ///
    /// # Errors
    /// The writeback or sync error (the backing's errno, e.g. `EIO`,
    /// `ENOSPC`).
    pub fn sync_data(&self) -> io::Result<()> {
        self.sync(false)
    }

    /// [`sync_data`](Self::sync_data), and all metadata (`fsync`).
    ///
    /// # Errors
    /// As [`sync_data`](Self::sync_data).
    pub fn sync_all(&self) -> io::Result<()> {
        self.sync(true)
    }

    fn sync(&self, all: bool) -> io::Result<()> {
        let r = self.sync_unreported(all);
        self.report_sync(r)
    }

    /// The sync itself (timed), its result not yet reported through this
    /// handle's error sequence ([`report_sync`](Self::report_sync)).
    pub(crate) fn sync_unreported(&self, all: bool) -> io::Result<()> {
        let m = self.mapping();
        let start = std::time::Instant::now();
        let r = m.sync(all);
        m.inner().stats.sync_latency.record(start.elapsed());
        r
    }

    /// What a sync that gave `r` reports to this handle: its own error, or
    /// else the first writeback error since this handle last reported one
    /// (whoever met it), once.
    pub(crate) fn report_sync(&self, r: io::Result<()>) -> io::Result<()> {
        let m = self.mapping();
        // This handle's report: the error (ours or anyone's) once.
        let seen = m.wb.err().check_and_advance(self.wb_since());
        match (r, seen) {
            (Err(e), _) => Err(e),
            (Ok(()), Some(e)) => Err(e),
            (Ok(()), None) => Ok(()),
        }
    }

    /// Sets the file's size, as `ftruncate`: shrinking drops the cached
    /// folios past the end (dirty ones included), zeroes the cut part of
    /// the last one, removes eviction shadows there, and truncates the
    /// backing; growing adds a hole that reads as zeros.
    ///
    /// # Errors
    /// `PermissionDenied` if not writable; `FileTooLarge` past `i64::MAX`;
    /// the backing's `set_len` error (then nothing changed).
    pub fn set_len(&self, size: u64) -> io::Result<()> {
        self.check_set_len(size)?;
        truncate::truncate_to(self.mapping(), size)
    }

    /// What `set_len(size)` refuses before it changes anything.
    pub(crate) fn check_set_len(&self, size: u64) -> io::Result<()> {
        self.check_writable()?;
        check_size(size)
    }

    /// Reserves the backing's space for `len` bytes at `offset` and, unless
    /// `keep_size`, grows the file to the range's end if it is shorter, as
    /// `fallocate(2)` with mode 0 (or `FALLOC_FL_KEEP_SIZE`): later writes
    /// there cannot fail for want of space. The data does not change (a
    /// grown part reads as zeros). The size is checked and grown in one
    /// hold of the file's lock, so a write that extends the file meanwhile
    /// is never cut back. A memory file has nothing to reserve (its folios
    /// are made as it is written): only its size grows.
    ///
    /// # Errors
    /// `PermissionDenied` if not writable; `InvalidInput` if `len` is 0;
    /// `FileTooLarge` past `i64::MAX`; the backing's error (`EOPNOTSUPP`
    /// where its filesystem cannot reserve, `ENOSPC`): then nothing changed.
    pub fn allocate(&self, offset: u64, len: u64, keep_size: bool) -> io::Result<()> {
        self.check_writable()?;
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("allocate: 0 bytes at offset {offset}"),
            ));
        }
        end_within_limit(offset, len)?;
        truncate::allocate(self.mapping(), offset, len, keep_size)
    }

    /// Deallocates `len` bytes at `offset`, keeping the size
    /// (`fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)`): the range
    /// reads as zeros afterwards. Any offset and length: for a backed file
    /// the whole blocks inside are punched on the backing first, then the
    /// cached folios wholly inside go (dirty ones included) and the part
    /// inside of the others is zeroed, then the partial blocks at the edges
    /// are written as zeros through the cache (dirty until written back).
    /// The part past end of file is ignored.
    ///
    /// # Errors
    /// `PermissionDenied` if not writable; `InvalidInput` if the range
    /// overflows; the backing's error (e.g. `EOPNOTSUPP` where its
    /// filesystem cannot punch holes: then nothing changed), or a read
    /// error for an edge block (then the whole blocks are punched and the
    /// edges not yet zeroed).
    pub fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        self.check_writable()?;
        let end = offset.checked_add(len).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("punch_hole: offset {offset} + len {len} overflows"),
            )
        })?;
        let m = self.mapping();
        let _i = m.inode.lock.write();
        let end = end.min(m.size());
        if offset >= end {
            return Ok(());
        }
        let block = backing::BLOCK as u64;
        let inner_start = offset.div_ceil(block) * block;
        let inner_end = end / block * block;
        {
            let inv = InvalidateLocked::new(m);
            if m.memfile {
                inv.truncate_bytes(offset, end);
                return Ok(());
            }
            if inner_start < inner_end {
                // The backing first: if it refuses, nothing has changed.
                // Writeback is held off until the cached folios there are
                // gone, so none of them is written back over the hole.
                let _wb = m.wb.lock();
                m.backing()
                    .punch_hole(inner_start, inner_end - inner_start)?;
                inv.truncate_bytes(inner_start, inner_end);
            }
        }
        // The partial blocks at the edges: zeros written through the cache
        // (the backing gets them at writeback).
        let zeros = vec![0u8; backing::BLOCK];
        if inner_start > inner_end {
            // Inside one block.
            self.write_locked(&zeros[..(end - offset) as usize], offset)?;
        } else {
            if offset < inner_start {
                self.write_locked(&zeros[..(inner_start - offset) as usize], offset)?;
            }
            if inner_end < end {
                self.write_locked(&zeros[..(end - inner_end) as usize], inner_end)?;
            }
        }
        Ok(())
    }

    /// A write inside the file by a caller holding `inode_lock`
    /// exclusively (`punch_hole`'s edge blocks): no throttle.
    fn write_locked(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_range(buf, offset, false, false)
    }

    /// The write itself, under `inode_lock` (see the module
    /// documentation), piece by piece (`File::write_folios`): grab, fill
    /// partial folios, copy in, mark dirty, extend the size, unlock.
    /// `throttle`: check the dirty limit before each piece (and wait for
    /// an uncached stream's writeback over its bound). `uncached`: the
    /// folios created are dropbehind, and each piece's writeback is kicked
    /// as soon as it is written (`writeback::kick_uncached`: its
    /// dropbehind folios leave the cache as that writeback ends), so an
    /// uncached stream holds about the writeback in flight.
    fn write_range(
        &self,
        buf: &[u8],
        offset: u64,
        throttle: bool,
        uncached: bool,
    ) -> io::Result<()> {
        let m = self.mapping();
        let end = offset + buf.len() as u64;
        let piece = self.write_piece_pages();
        let mut pos = offset;
        // A folio pinned (`File::pin`, or a mount's reply in flight) with
        // no free folio to copy it to: the write waits, with no folio
        // locked, for memory or for the pins to go, as an allocation does.
        let mut pinned_wait = AllocWait::new();
        while pos < end {
            let index = pos / PAGE;
            let last = (end - 1) / PAGE;
            let count = (last - index + 1).min(piece);
            if throttle {
                // Before each piece, with no folio locked: a write larger
                // than the dirty limit writes back its own data as it goes.
                writeback::throttle(m, count)?;
            }
            let piece_start = pos;
            let written = self.write_folios(buf, offset, pos, count, uncached)?;
            pos = written.pos;
            if let Some(e) = written.failed {
                return Err(e);
            }
            if uncached && pos > piece_start {
                // The piece is written (copied in, dirty): as the kernel's
                // RWF_DONTCACHE write, its writeback is kicked, and the
                // write succeeds whatever that writeback meets (its error
                // is the next sync's to report: `kick_uncached`).
                let last_page = (pos - 1) / PAGE;
                let pages = last_page - index + 1;
                writeback::kick_uncached(&self.mapping, index, last_page, pages, throttle);
            }
            if pos > piece_start {
                pinned_wait = AllocWait::new();
            }
            if let Some(e) = written.pinned {
                // Nothing is locked now: wait, then go on from `pos`.
                if !pinned_wait.wait(m.inner()) {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("{e} (waited {:?})", pinned_wait.waited()),
                    ));
                }
            }
        }
        Ok(())
    }

    /// One piece of `File::write_range`: the `count` pages from `pos`'s
    /// grabbed and locked, partial new folios filled, `buf`'s bytes for
    /// them copied in, the folios marked uptodate and dirty, the size
    /// extended, the folios unlocked. Stops at the first folio that cannot
    /// be made ready (see [`Piece`]); what came before it is written.
    /// `offset` is where `buf` starts in the file.
    #[inline]
    fn write_folios(
        &self,
        buf: &[u8],
        offset: u64,
        mut pos: u64,
        count: u64,
        uncached: bool,
    ) -> io::Result<Piece> {
        let m = self.mapping();
        let end = offset + buf.len() as u64;
        let mut folios = Vec::new();
        let insert = self.insert_mode();
        if let Err(e) = m.grab(pos / PAGE, count, &mut folios, insert, uncached) {
            return Err(self.write_error(e));
        }
        let size = m.size();
        let mut failed = None;
        let mut pinned = None;
        // The folios to write, where in each, and which bytes of `buf`:
        // copied together once all are ready (folios adjacent in memory
        // take one copy: `Mapping::copy_in`).
        let mut ready = Vec::with_capacity(folios.len());
        let mut parts = Vec::with_capacity(folios.len());
        let mut folios = folios.into_iter();
        for f in folios.by_ref() {
            // A folio a pin borrows is copied, and the copy written.
            let mut f = match m.writable(f) {
                Ok(f) => f,
                Err(e) => {
                    pinned = Some(e);
                    break;
                }
            };
            let fs = f.index() * PAGE;
            let fe = fs + f.nr_pages() * PAGE;
            let ws = pos.max(fs);
            let we = end.min(fe);
            // A new folio the write covers only in part: the rest from
            // the backing, or zeros past end of file. One it covers
            // whole is fresh: nothing but this copy touches its memory.
            let fresh = !f.test(FolioFlags::UPTODATE);
            if fresh && (ws > fs || we < fe) {
                if m.memfile || fs >= size {
                    m.zero_folio(&f, 0, (fe - fs) as usize);
                } else if let Err(e) = f.fill_from(m) {
                    // The folio left the mapping (and unlocks here).
                    failed = Some(e);
                    break;
                }
            }
            parts.push((
                (ws - fs) as usize,
                (ws - offset) as usize..(we - offset) as usize,
                fresh && ws == fs && we == fe,
            ));
            pos = we;
            ready.push(f);
        }
        m.copy_in(&ready, &parts, buf);
        let done: Vec<_> = ready
            .into_iter()
            .map(|f| {
                f.mark_uptodate();
                f.into_locked()
            })
            .collect();
        // The pages written are dirty (a large folio written in one
        // place writes back only there).
        let pages = parts.iter().map(|(from, r, _)| {
            let first = (*from as u64) / PAGE;
            (first, ((*from + r.len()) as u64).div_ceil(PAGE) - first)
        });
        m.mark_dirty(done.iter().zip(pages));
        // (`pos` starts at the write's offset: a piece whose first
        // folio failed wrote nothing and must not extend the file.)
        if !done.is_empty() && pos > m.size() {
            // Before the folios unlock: writeback that locks them sees
            // the size their data needs.
            m.set_size(pos);
        }
        drop(done);
        drop(folios);
        Ok(Piece {
            pos,
            failed,
            pinned,
        })
    }
}

/// What one piece of a write did (`File::write_folios`).
struct Piece {
    /// Where the write got to: past the last byte copied in.
    pos: u64,
    /// A partial folio's fill from the backing failed: the write stops,
    /// with the error.
    failed: Option<io::Error>,
    /// A folio is pinned and no free folio could be had to copy it to: the
    /// write waits (nothing locked), then goes on from `pos`.
    pinned: Option<io::Error>,
}
