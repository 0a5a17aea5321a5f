//! The IO layer under foliocache: where a folio's bytes come from and go to.
//!
//! # The problem
//! foliocache is a page cache in user space. Its memory must be the only
//! cache of a file's data, so files are opened with `O_DIRECT`: reads and
//! writes move between the device and the cache's folios without a second
//! copy in the kernel's page cache. `O_DIRECT` has rules (aligned addresses,
//! lengths and offsets; not every filesystem accepts it) and the cache wants
//! to be tested against failing, slow and short IO without a failing disk.
//! This crate hides both behind one trait.
//!
//! # Concepts
//! - [`BLOCK`] (4 KiB) is the unit of all IO: file offsets, buffer addresses
//!   and buffer lengths are multiples of it.
//! - [`IoBufMut`] / [`IoBuf`] are aligned buffers; alignment is checked once,
//!   when one is built, and is a property of the type after that.
//!   [`AlignedBuf`] owns aligned heap memory for callers without an arena;
//!   [`RawBuf`] is aligned memory given by address, for asynchronous reads
//!   that fill it on another thread.
//! - [`Backing`] is the trait the cache uses: vectored block reads and writes
//!   (one call for a run of folios), size, set size, sync, punch hole,
//!   [`info`](Backing::info) saying how the data travels, and
//!   [`raw_file`](Backing::raw_file) for engines that read the file directly.
//! - Implementations:
//!   - [`FileBacking`]: a file opened with `O_DIRECT`, IO by `preadv` /
//!     `pwritev`. Where the filesystem refuses `O_DIRECT` it falls back to
//!     buffered IO and drops what it read or wrote from the kernel's cache
//!     with `POSIX_FADV_DONTNEED`, so data is not cached twice
//!     ([`DataPath::BufferedDontneed`]).
//!   - [`MemBacking`]: a sparse in-memory file, optionally size-limited, for
//!     tests and memory files.
//!   - [`FaultyBacking`]: wraps any backing and injects failures, short
//!     reads, latency and `ENOSPC`, deterministically, configured at run
//!     time.
//!   - [`RecordingBacking`]: wraps any backing and logs every change,
//!     sync and read that reaches it, in order ([`Recorded`]), for crash
//!     tests that build the states a power cut could leave, and tests
//!     that count IO.
//! - [`aio`]: asynchronous, batched reads. An [`aio::IoEngine`] takes a
//!   batch of [`aio::ReadOp`]s (a backing, an offset, [`RawBuf`]s, a
//!   callback), submits it at once through io_uring (one `io_uring_enter`
//!   per batch) or, where io_uring is missing, hands it to a thread pool
//!   calling `read_blocks`, and calls each op's callback from its own
//!   thread with what `read_blocks` would have returned. Backings with a
//!   file descriptor ([`Backing::raw_file`]) are read through the ring;
//!   memory and fault-injecting backings go to the pool, so their rules
//!   apply to asynchronous reads too. [`aio::IoEngine::write_all`] writes
//!   a batch the same way (each write doing what `write_blocks` would)
//!   and returns when all of them completed, so it borrows its buffers
//!   safely.
//! - [`errno_of`]: the `errno` a POSIX caller gets for an [`io::Error`]
//!   (its OS error number, else the one a local filesystem gives for its
//!   kind), for the C ABI, the interposer and the FUSE mount above the
//!   cache.
//!
//! # Locking
//! | type | takes | may sleep | allocates |
//! |---|---|---|---|
//! | [`FileBacking`] | nothing of ours; one or a few system calls per operation | in the kernel (IO) | only an iovec array for more than 16 buffers |
//! | [`MemBacking`] | its `RwLock`: shared for `read_blocks`/`len`, exclusive otherwise | on the lock | pages on `write_blocks` |
//! | [`FaultyBacking`] | its rule mutex, briefly, never across the inner call or an injected delay | injected latency, and whatever the inner backing does | a bounce buffer for an injected short read |
//! | [`RecordingBacking`] | its log mutex, across the inner call of a change or sync (so the log's order is the inner backing's), after a read | on the lock, and whatever the inner backing does | the log's entry (a copy of a write's data) |
//! | [`aio::IoEngine::submit`] | the ring's submission mutex for the batch (io_uring), or the pool's queue mutex briefly | waiting for room when `queue_depth` ops are in flight; in `io_uring_enter` | a box per op, the pool's queue |
//! | [`aio::IoEngine::write_all`] | as `submit`, then the batch's latch until its last write completes | as `submit`, and until the writes complete | a box and a buffer list per write |
//! | [`aio`] completion and pool threads | the submission mutex once per batch of completions; the queue mutex to take an op; neither across a callback or a backing call | in `io_uring_enter(GETEVENTS)`, in `read_blocks` | no |
//!
//! Lock order: the backings' locks are leaves; a backing never calls back
//! into its caller. In [`aio`], the submission mutex comes before the
//! pool's queue mutex, and no engine lock is held while a callback or a
//! backing method runs, so callbacks may submit more ops. All types are
//! `Send + Sync`; concurrent calls on one backing are allowed, and
//! concurrent writes to overlapping ranges leave either write's data per
//! block, as the kernel does.
//!
//! # Example
//! ```
//! use foliocache_backing::{AlignedBuf, Backing, FileBacking, FileOptions, BLOCK};
//!
//! let path = std::env::temp_dir().join(format!("backing-doc-{}", std::process::id()));
//! let file = FileBacking::open(&path, &FileOptions::new().write(true).create(true).truncate(true))?;
//! println!("{}", file.info()); // "file: O_DIRECT via preadv/pwritev: ..."
//!
//! let mut data = AlignedBuf::zeroed(2 * BLOCK)?;
//! data.fill(b'x');
//! file.write_blocks(&[data.io_buf()], 0)?;
//! file.set_len(BLOCK as u64 + 10)?; // a partial last block
//!
//! let (mut a, mut b) = (AlignedBuf::zeroed(BLOCK)?, AlignedBuf::zeroed(BLOCK)?);
//! let n = file.read_blocks(&mut [a.io_buf_mut(), b.io_buf_mut()], 0)?; // one preadv
//! assert_eq!(n, BLOCK + 10); // short only because of EOF
//! assert_eq!(&b[..11], b"xxxxxxxxxx\0"); // zero-padded past EOF
//! std::fs::remove_file(&path)?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! # When not to use it
//! For small or unaligned IO, or when the kernel's page cache is what you
//! want, use `std::fs::File`. [`aio`] reads asynchronously; its writes
//! ([`aio::IoEngine::write_all`]) go out together but the call waits for
//! them. For a general-purpose async runtime over io_uring
//! (sockets, timers, futures), use one (tokio-uring, glommio): [`aio`] is a
//! callback engine for batches of block reads and nothing more.
#![deny(unsafe_code)]
#![warn(missing_docs)]

/// Declares `$counters`, a struct of `AtomicU64` counters (relaxed: each
/// counts on its own, none orders anything), one for each field of
/// `$figures`, the public plain struct of `u64`s a caller gets, with
/// `snapshot` (every counter read) and `reset` (every counter zeroed):
/// the counters of the IO engine ([`aio::EngineStats`]) and of
/// [`FaultyBacking`].
macro_rules! counters {
    ($(#[$m:meta])* $vis:vis struct $counters:ident => $figures:ident { $($f:ident),* $(,)? }) => {
        $(#[$m])*
        #[derive(Default)]
        $vis struct $counters {
            $($f: crate::sync::AtomicU64,)*
        }

        impl $counters {
            /// Every counter now.
            fn snapshot(&self) -> $figures {
                $figures {
                    $($f: self.$f.load(crate::sync::Ordering::Relaxed),)*
                }
            }

            /// Sets every counter to zero.
            #[allow(dead_code)]
            fn reset(&self) {
                $(self.$f.store(0, crate::sync::Ordering::Relaxed);)*
            }
        }
    };
}

pub mod aio;
#[allow(unsafe_code)]
mod buf;
mod errno;
mod faulty;
mod file;
mod mem;
mod place;
mod record;
mod sync;
#[allow(unsafe_code)]
mod sys;
mod thread;

use std::fmt;
use std::fs::File;
use std::io;
use std::sync::Arc;

pub use buf::{AlignedBuf, IoBuf, IoBufMut, Misaligned, MisalignedKind, RawBuf};
pub use errno::errno_of;
pub use faulty::{FaultStats, FaultyBacking, Op};
pub use file::{FileBacking, FileOptions};
pub use mem::MemBacking;
pub use place::{descriptor_floor, place_descriptor, set_descriptor_floor};
pub use record::{Recorded, RecordingBacking};
pub use thread::ThreadStart;

/// The unit of all IO, in bytes: file offsets, buffer addresses and buffer
/// lengths are multiples of it. It equals the page size, and is a multiple
/// of every logical block size `O_DIRECT` asks for in practice.
pub const BLOCK: usize = 4096;

/// The largest file offset (and so file size) any backing accepts: the
/// largest `off_t`.
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;

/// How a backing's data travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DataPath {
    /// `O_DIRECT`: between the caller's buffers and the device, bypassing
    /// the kernel's page cache.
    Direct,
    /// Buffered IO through the kernel's page cache, which is told to drop
    /// each range after it is read or written (`POSIX_FADV_DONTNEED`; dirty
    /// pages are dropped once written back, at the latest after a sync).
    /// The fallback where `O_DIRECT` is refused, or on request.
    BufferedDontneed,
    /// No IO at all: the data lives in process memory.
    Memory,
}

impl fmt::Display for DataPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DataPath::Direct => "O_DIRECT",
            DataPath::BufferedDontneed => "buffered+DONTNEED",
            DataPath::Memory => "memory",
        })
    }
}

/// What a backing is and how its data travels, for logs, `foliocache stat`
/// and benchmark reports. Returned by [`Backing::info`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackingInfo {
    /// The kind of backing: `"file"`, `"memory"`, `"faulty"`, ...
    pub kind: &'static str,
    /// Whether data goes direct, buffered with drop-behind, or stays in
    /// memory.
    pub data_path: DataPath,
    /// The IO engine: `"preadv/pwritev"`, `"memory"`, ...
    pub engine: &'static str,
    /// A sentence for humans: why this path was chosen, alignment the
    /// filesystem reported, what is wrapped.
    pub note: String,
}

impl BackingInfo {
    /// Builds an info record (the struct is `#[non_exhaustive]`, so
    /// implementors outside this crate use this).
    pub fn new(
        kind: &'static str,
        data_path: DataPath,
        engine: &'static str,
        note: impl Into<String>,
    ) -> Self {
        BackingInfo {
            kind,
            data_path,
            engine,
            note: note.into(),
        }
    }

    /// Whether data bypasses the kernel's page cache (`O_DIRECT`).
    pub fn is_direct(&self) -> bool {
        self.data_path == DataPath::Direct
    }
}

impl fmt::Display for BackingInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} via {}: {}",
            self.kind, self.data_path, self.engine, self.note
        )
    }
}

/// Where the cache's folios come from and go to: a file-like store read and
/// written in whole [`BLOCK`]s.
///
/// # Contract
/// - Offsets are multiples of [`BLOCK`], and so are the buffers (by their
///   types). A misaligned offset, or a range whose end is past
///   [`MAX_FILE_SIZE`], is an [`io::ErrorKind::InvalidInput`] error with a
///   message saying what to fix; no input makes an implementation panic.
/// - [`read_blocks`](Self::read_blocks) returns fewer bytes than asked
///   **only at end of file**: an implementation loops over the short reads
///   and `EINTR`s of its system calls. (Only [`FaultyBacking`] breaks this,
///   on purpose, to test callers.)
/// - [`write_blocks`](Self::write_blocks) writes everything or fails.
/// - After an error, the buffers of a read hold unspecified bytes, and a
///   write may have written any prefix of its data.
/// - Implementations are `Send + Sync`; calls may run concurrently.
///
/// # Example
/// ```
/// use foliocache_backing::{AlignedBuf, Backing, MemBacking, BLOCK};
///
/// fn first_block(b: &dyn Backing) -> std::io::Result<(usize, AlignedBuf)> {
///     let mut buf = AlignedBuf::zeroed(BLOCK)?;
///     buf.fill(0xff); // stale contents
///     let n = b.read_blocks(&mut [buf.io_buf_mut()], 0)?;
///     Ok((n, buf))
/// }
/// let mem = MemBacking::with_data(b"hello".to_vec());
/// let (n, buf) = first_block(&mem)?;
/// assert_eq!(n, 5); // short: end of file
/// assert_eq!(&buf[..6], b"hello\0"); // zeros past the count
/// # Ok::<(), std::io::Error>(())
/// ```
pub trait Backing: Send + Sync + 'static {
    /// The current size in bytes.
    ///
    /// # Errors
    /// Whatever the store reports (for a file, `fstat`'s error).
    fn len(&self) -> io::Result<u64>;

    /// Whether the size is 0.
    ///
    /// # Errors
    /// As for [`len`](Self::len).
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Reads the contiguous bytes starting at `offset` into `bufs`, in
    /// order, as one vectored read (one `preadv` for a file), and returns
    /// the number of bytes read.
    ///
    /// The count is the sum of the buffers' lengths unless end of file came
    /// first: then it is the bytes up to end of file (0 at or past it),
    /// possibly ending inside a block. **Bytes of the buffers past the count
    /// are set to zero**, so a block that straddles end of file comes back
    /// zero-padded, as in the kernel's page cache, and no stale bytes from
    /// the device or the buffer's previous use survive there. (Leaving them
    /// untouched cannot be promised: for `O_DIRECT` reads past end of file
    /// the kernel itself writes into the buffers past the count it returns;
    /// ext4 on Linux 6.18 zeroes all of them.)
    ///
    /// # Errors
    /// - [`io::ErrorKind::InvalidInput`] if `offset` is not a multiple of
    ///   [`BLOCK`] (carrying [`Misaligned`]) or the range ends past
    ///   [`MAX_FILE_SIZE`].
    /// - The store's IO error (for a file, the `preadv` errno, e.g. `EIO`);
    ///   the buffers then hold unspecified bytes.
    fn read_blocks(&self, bufs: &mut [IoBufMut<'_>], offset: u64) -> io::Result<usize>;

    /// Writes all of `bufs`, in order, to the contiguous bytes starting at
    /// `offset`, as one vectored write (one `pwritev` for a file), and
    /// returns the number of bytes written, which is always their total
    /// length. Writing past end of file extends the file to the end of the
    /// last block written; use [`set_len`](Self::set_len) for a size that
    /// is not a multiple of [`BLOCK`].
    ///
    /// # Errors
    /// - [`io::ErrorKind::InvalidInput`] as for
    ///   [`read_blocks`](Self::read_blocks).
    /// - The store's IO error (e.g. `ENOSPC`, `EIO`); a prefix of the data
    ///   may have been written.
    fn write_blocks(&self, bufs: &[IoBuf<'_>], offset: u64) -> io::Result<usize>;

    /// Sets the size to `len` bytes (any value, not only whole blocks):
    /// shrinking drops the data past `len`, growing adds a hole that reads
    /// as zeros.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] past [`MAX_FILE_SIZE`]; the store's
    /// error (for a file, `ftruncate`'s, e.g. `EFBIG`).
    fn set_len(&self, len: u64) -> io::Result<()>;

    /// Makes the data written so far durable, with the metadata needed to
    /// read it back (`fdatasync`).
    ///
    /// # Errors
    /// The store's error, e.g. `EIO` for a failed writeback.
    fn sync_data(&self) -> io::Result<()>;

    /// Makes the data and all metadata durable (`fsync`).
    ///
    /// # Errors
    /// The store's error, e.g. `EIO` for a failed writeback.
    fn sync_all(&self) -> io::Result<()>;

    /// Deallocates `[offset, offset + len)`: it reads as zeros afterwards
    /// and the size does not change (`fallocate(PUNCH_HOLE | KEEP_SIZE)`).
    /// `len == 0` does nothing. The range may extend past end of file.
    ///
    /// # Errors
    /// - [`io::ErrorKind::InvalidInput`] if `offset` or `len` is not a
    ///   multiple of [`BLOCK`], or the range ends past [`MAX_FILE_SIZE`].
    /// - The store's error, e.g. `EOPNOTSUPP` where the filesystem cannot
    ///   punch holes.
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()>;

    /// Reserves the store's space for `[offset, offset + len)` without
    /// changing the size or the data (`fallocate(FALLOC_FL_KEEP_SIZE)`),
    /// so later writes there cannot fail for want of space. The default
    /// refuses (`EOPNOTSUPP`), as a filesystem that cannot reserve does.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] if `len` is 0 or the range ends past
    /// [`MAX_FILE_SIZE`]; `EOPNOTSUPP` where the store cannot reserve; the
    /// store's error (`ENOSPC`).
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
    }

    /// A write of `[offset, end)` that extends the file is coming: reserves
    /// the store's space for it, so that writing it back cannot fail for
    /// want of space, as ext4's delayed allocation reserves blocks at
    /// `write(2)`. A store may reserve ahead of `end` (so an appending
    /// writer pays a system call per many writes), never failing for that
    /// part; [`release_reserved`](Self::release_reserved) gives back what
    /// is past the size. The default reserves nothing (a memory store has
    /// no space to run out of). A store that cannot reserve (its
    /// filesystem refuses `fallocate`) returns `Ok` and writes go on as
    /// before: a full store then fails their writeback.
    ///
    /// # Errors
    /// `ENOSPC` (kind `StorageFull`) when the store cannot hold
    /// `[offset, end)`; the store's error (`EIO`).
    fn reserve(&self, offset: u64, end: u64) -> io::Result<()> {
        let _ = (offset, end);
        Ok(())
    }

    /// The file's size is `size` for now (its last handle closed, its
    /// data written back): gives back the space
    /// [`reserve`](Self::reserve) took past it. The default has nothing to
    /// give back.
    ///
    /// # Errors
    /// The store's error; the space then stays reserved (the data is
    /// unharmed).
    fn release_reserved(&self, size: u64) -> io::Result<()> {
        let _ = size;
        Ok(())
    }

    /// Removes `[offset, offset + len)` from the file and moves the data
    /// after it down by `len` bytes: the file shrinks by `len`
    /// (`fallocate(FALLOC_FL_COLLAPSE_RANGE)`). The default refuses
    /// (`EOPNOTSUPP`), as a filesystem without the mode does.
    ///
    /// # Errors
    /// - [`io::ErrorKind::InvalidInput`] (`EINVAL`) if `offset` or `len` is
    ///   not a multiple of [`BLOCK`], `len` is 0, or the range reaches end
    ///   of file (the kernel's rule: a collapse that would cut the end off
    ///   is a truncate).
    /// - `EOPNOTSUPP` where the store cannot shift data; the store's error.
    ///
    /// Either way nothing has changed.
    fn collapse_range(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
    }

    /// Moves the data from `offset` up by `len` bytes, leaving a hole of
    /// `len` bytes at `offset`: the file grows by `len`
    /// (`fallocate(FALLOC_FL_INSERT_RANGE)`). The default refuses
    /// (`EOPNOTSUPP`).
    ///
    /// # Errors
    /// - [`io::ErrorKind::InvalidInput`] (`EINVAL`) if `offset` or `len` is
    ///   not a multiple of [`BLOCK`], `len` is 0, or `offset` is at or past
    ///   end of file (growing a file is `set_len`'s).
    /// - `EFBIG` if the file would grow past [`MAX_FILE_SIZE`] (or its
    ///   filesystem's largest size).
    /// - `EOPNOTSUPP` where the store cannot shift data; the store's error.
    ///
    /// Either way nothing has changed.
    fn insert_range(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
    }

    /// Whether the store can hold a file of `size` bytes: `Ok`, or the
    /// error a write that made the file that large would get (for a file,
    /// `EFBIG` past its filesystem's largest file size). A cache calls it
    /// before it takes a write that extends the file, so that a write the
    /// store could never hold fails when it is made, not at writeback.
    /// The default accepts anything up to [`MAX_FILE_SIZE`].
    ///
    /// It never changes the data. The caller makes sure that no byte at or
    /// past `size - 1` is written meanwhile (the file's extending writes
    /// are serialised, and it is larger than the file): a probe may punch
    /// a hole there.
    ///
    /// # Errors
    /// [`io::ErrorKind::FileTooLarge`] past [`MAX_FILE_SIZE`]; the store's
    /// error for a size it cannot hold.
    fn check_size(&self, size: u64) -> io::Result<()> {
        if size > MAX_FILE_SIZE {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        }
        Ok(())
    }

    /// What this backing is and how its data travels.
    fn info(&self) -> BackingInfo;

    /// The open file that an asynchronous engine ([`aio::IoEngine`]) may
    /// read and write directly instead of calling
    /// [`read_blocks`](Self::read_blocks) and
    /// [`write_blocks`](Self::write_blocks), or `None` (the default) to have
    /// every read and write go through those.
    ///
    /// Return `Some` only if a plain positional read of the file's
    /// descriptor (`preadv`, io_uring `READV`) at [`BLOCK`]-aligned offsets
    /// into [`BLOCK`]-aligned buffers, looped over short reads until end of
    /// file and followed by [`after_raw_io`](Self::after_raw_io), gives
    /// what `read_blocks` would, and a positional write (`pwritev`, io_uring
    /// `WRITEV`), looped over short writes and followed by `after_raw_io`,
    /// does what `write_blocks` would.
    ///
    /// The engine keeps the returned `Arc` until the read is done, so the
    /// descriptor it reads stays open, and the same file, whatever the
    /// backing does meanwhile: an engine never acts on a descriptor nobody
    /// owns (a bare `RawFd` here would let a safe implementation hand it a
    /// closed or reused number). Handing out a number does not compile:
    ///
    /// ```compile_fail
    /// use std::{io, os::fd::RawFd};
    /// use foliocache_backing::{Backing, BackingInfo, DataPath, IoBuf, IoBufMut};
    ///
    /// struct AnyFd(RawFd);
    /// impl Backing for AnyFd {
    ///     fn len(&self) -> io::Result<u64> { Ok(0) }
    ///     fn read_blocks(&self, _: &mut [IoBufMut<'_>], _: u64) -> io::Result<usize> { Ok(0) }
    ///     fn write_blocks(&self, _: &[IoBuf<'_>], _: u64) -> io::Result<usize> { Ok(0) }
    ///     fn set_len(&self, _: u64) -> io::Result<()> { Ok(()) }
    ///     fn sync_data(&self) -> io::Result<()> { Ok(()) }
    ///     fn sync_all(&self) -> io::Result<()> { Ok(()) }
    ///     fn punch_hole(&self, _: u64, _: u64) -> io::Result<()> { Ok(()) }
    ///     fn info(&self) -> BackingInfo { BackingInfo::new("any", DataPath::Memory, "-", "") }
    ///     // Any number, open or not, for the engine to read after this returns.
    ///     fn raw_file(&self) -> Option<RawFd> { Some(self.0) }
    /// }
    /// ```
    ///
    /// [`FileBacking`] returns its file, on both data paths; wrappers that
    /// change what a read does ([`FaultyBacking`]) return `None`, so their
    /// rules apply to asynchronous reads as well.
    fn raw_file(&self) -> Option<Arc<File>> {
        None
    }

    /// Called by an asynchronous engine after it read or wrote `len > 0`
    /// bytes at `offset` through [`raw_file`](Self::raw_file), for whatever
    /// `read_blocks` or `write_blocks` does after its system call. The
    /// default does nothing; [`FileBacking`]'s buffered fallback drops the
    /// range from the kernel's page cache (`POSIX_FADV_DONTNEED`), as its
    /// `read_blocks` and `write_blocks` do. Runs on the engine's completion
    /// thread: keep it short and do not block.
    fn after_raw_io(&self, offset: u64, len: u64) {
        let _ = (offset, len);
    }
}

macro_rules! forward_backing {
    ($ty:ty) => {
        impl<B: Backing + ?Sized> Backing for $ty {
            fn len(&self) -> io::Result<u64> {
                (**self).len()
            }
            fn is_empty(&self) -> io::Result<bool> {
                (**self).is_empty()
            }
            fn read_blocks(&self, bufs: &mut [IoBufMut<'_>], offset: u64) -> io::Result<usize> {
                (**self).read_blocks(bufs, offset)
            }
            fn write_blocks(&self, bufs: &[IoBuf<'_>], offset: u64) -> io::Result<usize> {
                (**self).write_blocks(bufs, offset)
            }
            fn set_len(&self, len: u64) -> io::Result<()> {
                (**self).set_len(len)
            }
            fn sync_data(&self) -> io::Result<()> {
                (**self).sync_data()
            }
            fn sync_all(&self) -> io::Result<()> {
                (**self).sync_all()
            }
            fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
                (**self).punch_hole(offset, len)
            }
            fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
                (**self).allocate(offset, len)
            }
            fn reserve(&self, offset: u64, end: u64) -> io::Result<()> {
                (**self).reserve(offset, end)
            }
            fn release_reserved(&self, size: u64) -> io::Result<()> {
                (**self).release_reserved(size)
            }
            fn collapse_range(&self, offset: u64, len: u64) -> io::Result<()> {
                (**self).collapse_range(offset, len)
            }
            fn insert_range(&self, offset: u64, len: u64) -> io::Result<()> {
                (**self).insert_range(offset, len)
            }
            fn check_size(&self, size: u64) -> io::Result<()> {
                (**self).check_size(size)
            }
            fn info(&self) -> BackingInfo {
                (**self).info()
            }
            fn raw_file(&self) -> Option<Arc<File>> {
                (**self).raw_file()
            }
            fn after_raw_io(&self, offset: u64, len: u64) {
                (**self).after_raw_io(offset, len)
            }
        }
    };
}

forward_backing!(Arc<B>);
forward_backing!(Box<B>);

/// Checks a block IO range as every [`Backing`] method must: `offset` and
/// `len` multiples of [`BLOCK`], and `offset + len` at most
/// [`MAX_FILE_SIZE`]. For implementors of [`Backing`] outside this crate.
///
/// ```
/// use foliocache_backing::{check_io_range, BLOCK};
///
/// assert!(check_io_range(BLOCK as u64, 2 * BLOCK as u64).is_ok());
/// let err = check_io_range(100, BLOCK as u64).unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
/// assert!(err.to_string().contains("file offset 100"));
/// ```
///
/// # Errors
/// [`io::ErrorKind::InvalidInput`], carrying [`Misaligned`] for an alignment
/// problem, or a message naming the range when it is too large.
pub fn check_io_range(offset: u64, len: u64) -> io::Result<()> {
    if !offset.is_multiple_of(BLOCK as u64) {
        return Err(Misaligned::new(MisalignedKind::Offset, offset).into());
    }
    if !len.is_multiple_of(BLOCK as u64) {
        return Err(Misaligned::new(MisalignedKind::Length, len).into());
    }
    check_end(offset, len)
}

/// InvalidInput unless `offset + len <= MAX_FILE_SIZE`.
pub(crate) fn check_end(offset: u64, len: u64) -> io::Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= MAX_FILE_SIZE => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "range of {len} bytes at offset {offset} ends past the largest file size \
                 ({MAX_FILE_SIZE} bytes)"
            ),
        )),
    }
}

/// Checks a [`Backing::allocate`] range: non-empty, ending within
/// [`MAX_FILE_SIZE`].
pub(crate) fn check_allocate(offset: u64, len: u64) -> io::Result<()> {
    if len == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("allocate of 0 bytes at offset {offset}: the range is empty"),
        ));
    }
    check_end(offset, len)
}

/// Which way [`Backing::collapse_range`] and [`Backing::insert_range`]
/// move a file's data, for the checks they share ([`Shift::check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shift {
    /// Remove a range; the data after it moves down
    /// (`FALLOC_FL_COLLAPSE_RANGE`).
    Collapse,
    /// Insert a hole; the data from it moves up (`FALLOC_FL_INSERT_RANGE`).
    Insert,
}

impl Shift {
    /// The call's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Shift::Collapse => "collapse_range",
            Shift::Insert => "insert_range",
        }
    }

    /// Checks a shift of `len` bytes at `offset` in a file of `size`
    /// bytes, as the kernel's `ext4_collapse_range` and `ext4_insert_range`
    /// do: whole [`BLOCK`]s, a non-empty range, a collapse that ends before
    /// end of file, an insert that starts before it and leaves the file
    /// within [`MAX_FILE_SIZE`].
    ///
    /// ```
    /// use foliocache_backing::{Shift, BLOCK};
    /// let b = BLOCK as u64;
    /// assert!(Shift::Collapse.check(b, b, 3 * b).is_ok());
    /// assert!(Shift::Collapse.check(b, 2 * b, 3 * b).is_err()); // reaches the end
    /// assert!(Shift::Insert.check(3 * b, b, 3 * b).is_err()); // starts at the end
    /// assert!(Shift::Insert.check(b, 100, 3 * b).is_err()); // not whole blocks
    /// ```
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] (`EINVAL`), or `EFBIG` for an insert
    /// past [`MAX_FILE_SIZE`].
    pub fn check(self, offset: u64, len: u64, size: u64) -> io::Result<()> {
        check_io_range(offset, len)?;
        let invalid = |why: String| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} of {len} bytes at offset {offset}: {why}", self.name()),
            )
        };
        if len == 0 {
            return Err(invalid("the range is empty".into()));
        }
        match self {
            Shift::Insert if offset >= size => Err(invalid(format!(
                "it starts at or past end of file ({size} bytes)"
            ))),
            Shift::Insert if size.checked_add(len).is_none_or(|s| s > MAX_FILE_SIZE) => {
                Err(io::Error::from_raw_os_error(libc::EFBIG))
            }
            Shift::Collapse if offset + len >= size => Err(invalid(format!(
                "it reaches end of file ({size} bytes): that is a truncate"
            ))),
            _ => Ok(()),
        }
    }
}

/// The total length of some buffers, or InvalidInput if it overflows (only
/// possible when the same read-only buffer is repeated many times).
pub(crate) fn total_len<T: AsRef<[u8]>>(bufs: &[T]) -> io::Result<usize> {
    bufs.iter()
        .try_fold(0usize, |acc, b| acc.checked_add(b.as_ref().len()))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the buffers' total length overflows usize",
            )
        })
}

/// Sets every byte of `bufs` past the first `from` to zero (the tail of a
/// read that stopped at end of file).
pub(crate) fn zero_from(bufs: &mut [IoBufMut<'_>], mut from: usize) {
    for buf in bufs.iter_mut() {
        if from >= buf.len() {
            from -= buf.len();
            continue;
        }
        buf[from..].fill(0);
        from = 0;
    }
}

/// Validates a block read or write: aligned offset (buffers are aligned by
/// type) and an end within [`MAX_FILE_SIZE`]. Returns the total length.
pub(crate) fn check_io<T: AsRef<[u8]>>(bufs: &[T], offset: u64) -> io::Result<usize> {
    let total = total_len(bufs)?;
    check_io_range(offset, total as u64)?;
    Ok(total)
}
