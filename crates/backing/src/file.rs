//! [`FileBacking`]: a file opened with `O_DIRECT`, read with `preadv` and
//! written with `pwritev`, with a buffered fallback (the diagram is on
//! [`FileBacking`]).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::OFlags;

use crate::buf::{IoBuf, IoBufMut};
use crate::sync::{AtomicU64, Ordering};
use crate::{
    check_end, check_io, check_io_range, sys, Backing, BackingInfo, DataPath, BLOCK, MAX_FILE_SIZE,
};

/// How to open a [`FileBacking`]: `std::fs::OpenOptions` plus the choice of
/// buffered IO.
///
/// The fields are public; the builder methods set them one at a time.
/// [`FileOptions::new`] (and `Default`) is read-only, `O_DIRECT`.
///
/// ```
/// use foliocache_backing::FileOptions;
///
/// let opts = FileOptions::new().write(true).create(true).mode(0o600);
/// assert!(opts.read && opts.write && opts.create && !opts.force_buffered);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileOptions {
    /// Open for reading (`O_RDONLY`/`O_RDWR`). Default: true.
    pub read: bool,
    /// Open for writing. Default: false.
    pub write: bool,
    /// Create the file if it does not exist (`O_CREAT`; needs `write`).
    pub create: bool,
    /// Create the file, failing if it exists (`O_CREAT|O_EXCL`; needs
    /// `write`; overrides `create` and `truncate`).
    pub create_new: bool,
    /// Truncate to size 0 on open (`O_TRUNC`; needs `write`).
    pub truncate: bool,
    /// Use buffered IO with `POSIX_FADV_DONTNEED` instead of `O_DIRECT`
    /// even where `O_DIRECT` works: for comparisons, and for callers that
    /// want the kernel's write-behind.
    pub force_buffered: bool,
    /// Permission bits for a created file, before the umask. Default 0o666.
    pub mode: u32,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            read: true,
            write: false,
            create: false,
            create_new: false,
            truncate: false,
            force_buffered: false,
            mode: 0o666,
        }
    }
}

impl FileOptions {
    /// Read-only, `O_DIRECT`, no create, no truncate, mode 0o666.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`read`](Self::read).
    pub fn read(mut self, v: bool) -> Self {
        self.read = v;
        self
    }

    /// Sets [`write`](Self::write).
    pub fn write(mut self, v: bool) -> Self {
        self.write = v;
        self
    }

    /// Sets [`create`](Self::create).
    pub fn create(mut self, v: bool) -> Self {
        self.create = v;
        self
    }

    /// Sets [`create_new`](Self::create_new).
    pub fn create_new(mut self, v: bool) -> Self {
        self.create_new = v;
        self
    }

    /// Sets [`truncate`](Self::truncate).
    pub fn truncate(mut self, v: bool) -> Self {
        self.truncate = v;
        self
    }

    /// Sets [`force_buffered`](Self::force_buffered).
    pub fn force_buffered(mut self, v: bool) -> Self {
        self.force_buffered = v;
        self
    }

    /// Sets [`mode`](Self::mode).
    pub fn mode(mut self, v: u32) -> Self {
        self.mode = v;
        self
    }

    fn std_options(&self, create_new: bool, direct: bool) -> OpenOptions {
        let mut o = OpenOptions::new();
        o.read(self.read)
            .write(self.write)
            .mode(self.mode)
            // std adds O_CLOEXEC itself. O_NONBLOCK so that the open of a
            // FIFO returns at once (to be refused by `FileBacking::open`)
            // instead of waiting for its other end; cleared once the
            // file is known to be regular.
            .custom_flags(
                (if direct {
                    OFlags::DIRECT
                } else {
                    OFlags::empty()
                } | OFlags::NONBLOCK)
                    .bits() as i32,
            );
        if create_new {
            o.create_new(true);
        } else {
            o.create(self.create).truncate(self.truncate);
        }
        o
    }
}

/// Why a file is not using `O_DIRECT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fallback {
    /// `FileOptions::force_buffered`.
    Requested,
    /// `open(O_DIRECT)` failed with EINVAL.
    Refused,
    /// statx says direct IO needs larger alignment than `BLOCK`.
    Alignment { mem: u32, offset: u32 },
    /// statx says this file cannot do direct IO.
    Unsupported,
}

/// Whether the direct IO alignment that statx reported rules out
/// `O_DIRECT` with [`BLOCK`]-aligned IO.
fn dio_fallback(dio: Option<sys::DioAlign>) -> Option<Fallback> {
    let d = dio?;
    if d.mem == 0 || d.offset == 0 {
        Some(Fallback::Unsupported)
    } else if d.mem as usize > BLOCK || d.offset as usize > BLOCK {
        Some(Fallback::Alignment {
            mem: d.mem,
            offset: d.offset,
        })
    } else {
        None
    }
}

/// A file read and written in blocks with `O_DIRECT` (`preadv`/`pwritev`),
/// or buffered with `POSIX_FADV_DONTNEED` where `O_DIRECT` is refused.
///
/// The file descriptor is owned (closed on drop) and opened `O_CLOEXEC`.
/// [`info`](Backing::info) says which path a file took and why:
///
/// ```text
///  open(O_DIRECT|O_CLOEXEC) ──ok──> statx DIOALIGN ──fits BLOCK──> Direct
///        │                               │
///      EINVAL (fs refuses)          needs more / says unsupported
///        │                               │ fcntl(F_SETFL, ~O_DIRECT)
///        v                               v
///  open(O_CLOEXEC) ─────────────────> BufferedDontneed: after each read or
///                                     write, posix_fadvise(DONTNEED) on it
/// ```
///
/// In the fallback the kernel's page cache holds the data only while the IO
/// is in flight: `POSIX_FADV_DONTNEED` drops clean pages at once and starts
/// writeback of dirty ones, which `sync_data`/`sync_all` then wait for and
/// drop. The advice is best effort: if the kernel refuses it the IO still
/// succeeds (a `log::debug!` line says so).
///
/// A read that stops at end of file inside a block returns there: a direct
/// read cannot resume at an unaligned offset, and the kernel only stops
/// inside a block at end of file.
///
/// ```
/// use foliocache_backing::{AlignedBuf, Backing, FileBacking, FileOptions, BLOCK};
///
/// let path = std::env::temp_dir().join(format!("backing-file-doc-{}", std::process::id()));
/// let f = FileBacking::open(&path, &FileOptions::new().write(true).create_new(true))?;
/// let mut buf = AlignedBuf::zeroed(BLOCK)?;
/// buf[..5].copy_from_slice(b"hello");
/// f.write_blocks(&[buf.io_buf()], 4 * BLOCK as u64)?;
/// assert_eq!(f.len()?, 5 * BLOCK as u64);
/// f.punch_hole(4 * BLOCK as u64, BLOCK as u64)?;
/// assert_eq!(f.read_blocks(&mut [buf.io_buf_mut()], 4 * BLOCK as u64)?, BLOCK);
/// assert!(buf.iter().all(|&b| b == 0));
/// std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct FileBacking {
    /// Shared with the asynchronous reads in flight ([`Backing::raw_file`]).
    file: Arc<File>,
    path: PathBuf,
    fallback: Option<Fallback>,
    dio: Option<sys::DioAlign>,
    /// A file size its filesystem was found to allow
    /// ([`check_size`](Backing::check_size)'s probes): anything up to it
    /// is.
    size_ok: AtomicU64,
    /// Where the space [`reserve`](Backing::reserve) took ends (0: none
    /// past the size; [`CANNOT_RESERVE`]: the filesystem refuses).
    reserved: AtomicU64,
}

/// [`FileBacking::reserved`] of a file whose filesystem cannot reserve.
const CANNOT_RESERVE: u64 = u64::MAX;

/// The least a reservation takes past the write's end: 1 MiB, so an
/// appending writer of 4 KiB pays one `fallocate` per 256 writes at first.
const RESERVE_AHEAD_MIN: u64 = 1 << 20;

/// The most: 64 MiB, the space a closed file holds past its size until
/// its last handle closes (then it goes back).
const RESERVE_AHEAD_MAX: u64 = 64 << 20;

impl FileBacking {
    /// Opens `path` with `O_DIRECT | O_CLOEXEC` (unless
    /// `opts.force_buffered`).
    ///
    /// If the filesystem refuses `O_DIRECT` (open fails with `EINVAL`, as on
    /// ramfs), it opens the file again without it, logs a `log::warn!`, and
    /// uses buffered IO with `POSIX_FADV_DONTNEED`. It does the same,
    /// clearing `O_DIRECT` on the open file, when `statx` reports that direct
    /// IO on this file needs an alignment larger than [`BLOCK`] or is not
    /// supported. [`info`](Backing::info) says which path was taken and why.
    ///
    /// With `create_new` and a refused `O_DIRECT`, the first attempt has
    /// already created the file (Linux creates it before checking
    /// `O_DIRECT`), so the second opens it without `O_EXCL`.
    ///
    /// # Errors
    /// What `open(2)` returns (`NotFound`, `PermissionDenied`,
    /// `AlreadyExists` for `create_new`, ...), and `InvalidInput` for
    /// inconsistent options (e.g. `create` without `write`, or neither
    /// `read` nor `write`), as `std::fs::OpenOptions` reports them.
    /// Only regular files: a directory is `EISDIR` (`IsADirectory`), a
    /// FIFO, a socket or a device `InvalidInput`. The open is made with
    /// `O_NONBLOCK`, so that a FIFO is refused at once rather than waited
    /// on, and the flag is cleared once the file is known to be regular.
    pub fn open(path: impl AsRef<Path>, opts: &FileOptions) -> io::Result<FileBacking> {
        let path = path.as_ref();
        let (file, mut fallback) = if opts.force_buffered {
            (
                opts.std_options(opts.create_new, false).open(path)?,
                Some(Fallback::Requested),
            )
        } else {
            match opts.std_options(opts.create_new, true).open(path) {
                Ok(f) => (f, None),
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                    let f = opts.std_options(false, false).open(path)?;
                    (f, Some(Fallback::Refused))
                }
                Err(e) => return Err(e),
            }
        };
        sys::only_regular(file.as_fd(), path)?;
        let dio = sys::dio_align(file.as_fd()).unwrap_or(None);
        if fallback.is_none() {
            if let Some(needs) = dio_fallback(dio) {
                sys::clear_o_direct(file.as_fd())?;
                fallback = Some(needs);
            }
        }
        let fb = FileBacking {
            file: Arc::new(file),
            path: path.to_path_buf(),
            fallback,
            dio,
            size_ok: AtomicU64::new(0),
            reserved: AtomicU64::new(0),
        };
        match fallback {
            None | Some(Fallback::Requested) => {}
            Some(_) => log::warn!("{}: {}", path.display(), fb.note()),
        }
        Ok(fb)
    }

    /// The path the file was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether IO bypasses the kernel's page cache (`O_DIRECT`); false in
    /// the buffered fallback.
    pub fn is_direct(&self) -> bool {
        self.fallback.is_none()
    }

    /// Whether `O_DIRECT` is set on the open file right now, asked of the
    /// kernel (`fcntl(F_GETFL)`); for tests and diagnostics.
    ///
    /// # Errors
    /// `fcntl`'s error (not expected on an open fd).
    pub fn kernel_says_direct(&self) -> io::Result<bool> {
        sys::has_o_direct(self.file.as_fd())
    }

    /// The underlying `std::fs::File`, e.g. for `fstat` details. Do not
    /// change its flags or read through it with unaligned buffers: it may be
    /// in `O_DIRECT` mode.
    pub fn file(&self) -> &File {
        &self.file
    }

    fn note(&self) -> String {
        let dio = match self.dio {
            Some(d) => format!(
                "the filesystem reports direct IO alignment of {} bytes for memory and {} for offsets",
                d.mem, d.offset
            ),
            None => "the filesystem reports no direct IO alignment".to_string(),
        };
        match self.fallback {
            None => format!(
                "reads and writes bypass the kernel page cache, one system call per \
                 batch of buffers; {dio}"
            ),
            Some(Fallback::Requested) => format!(
                "buffered IO by request (force_buffered): the kernel page cache is \
                 told to drop each range after IO (POSIX_FADV_DONTNEED); {dio}"
            ),
            Some(Fallback::Refused) => "the filesystem refused O_DIRECT (open returned \
                 EINVAL); falling back to buffered IO through the kernel page cache, \
                 dropping each range after IO with POSIX_FADV_DONTNEED"
                .to_string(),
            Some(Fallback::Alignment { mem, offset }) => format!(
                "direct IO here needs {mem}-byte memory and {offset}-byte offset \
                 alignment, more than BLOCK ({BLOCK}); falling back to buffered IO \
                 with POSIX_FADV_DONTNEED"
            ),
            Some(Fallback::Unsupported) => "the filesystem reports that this file \
                 cannot do direct IO; falling back to buffered IO with \
                 POSIX_FADV_DONTNEED"
                .to_string(),
        }
    }

    /// In the fallback, drops `[offset, offset + len)` from the kernel's
    /// page cache (`len == 0`: to end of file). Best effort.
    fn drop_behind(&self, offset: u64, len: u64) {
        if self.fallback.is_none() {
            return;
        }
        if let Err(e) = sys::fadvise_dontneed(self.file.as_fd(), offset, len) {
            log::debug!(
                "{}: posix_fadvise(DONTNEED) at {offset}+{len} failed: {e}",
                self.path.display()
            );
        }
    }
}

impl Backing for FileBacking {
    fn len(&self) -> io::Result<u64> {
        sys::file_size(self.file.as_fd())
    }

    fn read_blocks(&self, bufs: &mut [IoBufMut<'_>], offset: u64) -> io::Result<usize> {
        let total = check_io(bufs, offset)?;
        let mut done = 0;
        while done < total {
            let n = sys::preadv(self.file.as_fd(), bufs, done, offset + done as u64)?;
            if n == 0 {
                break; // end of file
            }
            done += n;
            // A direct read that ends inside a block stopped at end of file
            // (and could not go on from there: the offset is unaligned).
            if self.is_direct() && done % BLOCK != 0 {
                break;
            }
        }
        if done < total {
            crate::zero_from(bufs, done);
        }
        if done > 0 {
            self.drop_behind(offset, done as u64);
        }
        Ok(done)
    }

    fn write_blocks(&self, bufs: &[IoBuf<'_>], offset: u64) -> io::Result<usize> {
        let total = check_io(bufs, offset)?;
        let mut done = 0;
        let res = loop {
            if done == total {
                break Ok(done);
            }
            match sys::pwritev(self.file.as_fd(), bufs, done, offset + done as u64) {
                Ok(0) => {
                    break Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!(
                            "{}: the kernel wrote 0 bytes at offset {}",
                            self.path.display(),
                            offset + done as u64
                        ),
                    ))
                }
                Ok(n) => done += n,
                Err(e) => break Err(e),
            }
            if self.is_direct() && done % BLOCK != 0 && done < total {
                break Err(io::Error::other(format!(
                    "{}: direct write stopped inside a block ({done} of {total} bytes at \
                     offset {offset}) and cannot be resumed there",
                    self.path.display()
                )));
            }
        };
        if done > 0 {
            self.drop_behind(offset, done as u64);
        }
        res
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        check_end(len, 0)?;
        self.file.set_len(len)?;
        // A cut frees the blocks past it, the reserved ones too.
        let _ = self
            .reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                (r != CANNOT_RESERVE).then_some(0)
            });
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()?;
        self.drop_behind(0, 0);
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()?;
        self.drop_behind(0, 0);
        Ok(())
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        check_io_range(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        sys::punch_hole(self.file.as_fd(), offset, len)
    }

    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        crate::check_allocate(offset, len)?;
        sys::allocate(self.file.as_fd(), offset, len)
    }

    /// `fallocate(FALLOC_FL_KEEP_SIZE)` from `offset` (or the end of what
    /// is reserved already) to past `end`: an eighth of `end` more, 1 MiB
    /// to 64 MiB, so the reservations of an appending writer grow with
    /// its file and it pays about one system call per many writes. When
    /// that much does not fit, exactly `[offset, end)`: only a write that
    /// does not fit itself fails, with `ENOSPC`. A filesystem that cannot
    /// (`EOPNOTSUPP`: FUSE, NFS before 4.2, ...) is not asked again, and
    /// writes go on unreserved.
    fn reserve(&self, offset: u64, end: u64) -> io::Result<()> {
        let have = self.reserved.load(Ordering::Acquire);
        if end <= have {
            return Ok(());
        }
        let from = offset.max(have);
        check_end(from, end - from)?;
        let ahead = (end / 8).clamp(RESERVE_AHEAD_MIN, RESERVE_AHEAD_MAX);
        let want = end.saturating_add(ahead).min(crate::MAX_FILE_SIZE);
        let fd = self.file.as_fd();
        let got = match sys::allocate(fd, from, want - from) {
            Ok(()) => want,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                sys::allocate(fd, from, end - from)?;
                end
            }
            Err(e) if [libc::EOPNOTSUPP, libc::ENOSYS].contains(&e.raw_os_error().unwrap_or(0)) => {
                log::debug!(
                    "{}: cannot reserve space ({e}); writes go unreserved",
                    self.path.display()
                );
                CANNOT_RESERVE
            }
            Err(e) => return Err(e),
        };
        self.reserved.fetch_max(got, Ordering::AcqRel);
        Ok(())
    }

    /// A truncation to `size`, if the file is that long (it is, after its
    /// last handle's close set it) and space is reserved past it: ext4
    /// and tmpfs free the blocks past the size even when it does not
    /// change.
    fn release_reserved(&self, size: u64) -> io::Result<()> {
        let have = self.reserved.load(Ordering::Acquire);
        if have == CANNOT_RESERVE || have <= size || self.len()? != size {
            return Ok(());
        }
        self.set_len(size)
    }

    fn collapse_range(&self, offset: u64, len: u64) -> io::Result<()> {
        // The kernel checks the range against the file (`EINVAL`).
        check_io_range(offset, len)?;
        sys::shift_range(self.file.as_fd(), crate::Shift::Collapse, offset, len)
    }

    fn insert_range(&self, offset: u64, len: u64) -> io::Result<()> {
        check_io_range(offset, len)?;
        sys::shift_range(self.file.as_fd(), crate::Shift::Insert, offset, len)
    }

    /// Probes the filesystem's largest file size: the kernel checks the
    /// end of an `fallocate` range against it for every mode before
    /// anything else (`vfs_fallocate`), and a hole punched past end of
    /// file changes nothing. One probe at the next power of two covers
    /// every size below it, so a growing file pays a probe per doubling.
    /// A filesystem that cannot punch holes cannot say: the size is
    /// allowed, and a write past its limit fails at writeback.
    fn check_size(&self, size: u64) -> io::Result<()> {
        if size > MAX_FILE_SIZE {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        }
        if size <= self.size_ok.load(Ordering::Relaxed) || size <= self.len()? {
            return Ok(());
        }
        let probe = |end: u64| {
            // A byte at `end - 1`: past end of file (the caller's promise).
            match sys::punch_hole(self.file.as_fd(), end - 1, 1) {
                Ok(()) => Ok(true),
                Err(e) if e.raw_os_error() == Some(libc::EFBIG) => Err(e),
                Err(_) => Ok(false),
            }
        };
        let wide = size
            .checked_next_power_of_two()
            .unwrap_or(MAX_FILE_SIZE)
            .min(MAX_FILE_SIZE);
        let ok = match probe(wide) {
            Ok(true) => wide,
            Ok(false) => return Ok(()),
            Err(_) if wide > size => match probe(size)? {
                true => size,
                false => return Ok(()),
            },
            Err(e) => return Err(e),
        };
        self.size_ok.fetch_max(ok, Ordering::Relaxed);
        Ok(())
    }

    fn info(&self) -> BackingInfo {
        BackingInfo::new(
            "file",
            if self.is_direct() {
                DataPath::Direct
            } else {
                DataPath::BufferedDontneed
            },
            "preadv/pwritev",
            self.note(),
        )
    }

    /// The file, on both data paths: `O_DIRECT` reads and writes of it need
    /// nothing else, and in the buffered fallback
    /// [`after_raw_io`](Backing::after_raw_io) drops what was read or
    /// written.
    fn raw_file(&self) -> Option<Arc<File>> {
        Some(self.file.clone())
    }

    /// In the buffered fallback, drops the range just read or written from
    /// the kernel's page cache (`POSIX_FADV_DONTNEED`), as `read_blocks` and
    /// `write_blocks` do after their system calls; nothing for `O_DIRECT`.
    fn after_raw_io(&self, offset: u64, len: u64) {
        self.drop_behind(offset, len);
    }
}

impl AsFd for FileBacking {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl fmt::Debug for FileBacking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileBacking")
            .field("path", &self.path)
            .field("direct", &self.is_direct())
            .field("fallback", &self.fallback)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sys::DioAlign;

    #[test]
    fn statx_alignment_decides_the_fallback() {
        let d = |mem, offset| Some(DioAlign { mem, offset });
        assert_eq!(dio_fallback(None), None, "nothing reported: trust open");
        assert_eq!(dio_fallback(d(512, 512)), None);
        assert_eq!(dio_fallback(d(4096, 4096)), None);
        assert_eq!(dio_fallback(d(0, 0)), Some(Fallback::Unsupported));
        assert_eq!(
            dio_fallback(d(512, 16384)),
            Some(Fallback::Alignment {
                mem: 512,
                offset: 16384
            })
        );
    }
}
