//! tokio's IO traits (the `tokio` feature) over a position in a [`File`]:
//! [`Cursor`], which borrows the file, and [`AsyncFile`], which owns a
//! handle and can move into a task. Both read through
//! [`File::read_at_async`]'s machinery and write through
//! [`File::write_at_async`]'s.
//!
//! Between two polls they keep no borrow of the file nor of a folio: a
//! read that returned `Pending` keeps whether it started IO and the memory
//! job it waits for (`ReadProgress`), and its task's waker stays queued on
//! the lock of the folio being read until the unlock wakes it; the next
//! poll, with the buffer it brings, finds that folio still locked and
//! waits again, or finds it uptodate and copies it, never starting its IO
//! twice. A write keeps the waits of its next piece the same way
//! (`WriteProgress`).

use std::fmt;
use std::io::{self, SeekFrom};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

use super::read::{ReadProgress, ReadState};
use super::write::{WriteProgress, WriteState};
use crate::file::File;

/// A cursor over a [`File`]: `tokio::io::AsyncRead + AsyncWrite +
/// AsyncSeek` at its position, which `AsyncSeek` moves (`SeekFrom::End`
/// from the file's size when the seek starts). A read fills what it can of
/// the caller's buffer without waiting once some bytes are copied, and
/// otherwise waits for the first folio it needs as
/// [`File::read_at_async`] does, without a thread. A write goes as
/// [`File::write_at_async`]'s pieces (in append mode, at the end of the
/// file) and returns what it wrote once the next piece would wait; see
/// [`AsyncFile`] for what flush and shutdown do. Dropped or moved to
/// another position while a read waits, it leaves the read's IO to
/// complete into the cache.
///
/// To move the position into a task (`tokio::spawn`), use [`AsyncFile`],
/// which owns its handle.
pub struct Cursor<'a> {
    file: &'a File,
    at: Position,
}

/// An owned handle on a [`File`] at a position, as `tokio::fs::File` is:
/// `tokio::io::AsyncRead + AsyncWrite + AsyncSeek`, `Send + 'static`, so
/// it moves into a task. Made by [`File::into_async`] (a
/// [`clone`](Clone::clone) of a `File` is cheap, and shares its readahead
/// state and error report, as a duplicated descriptor does).
///
/// Reads and writes are [`Cursor`]'s. Unlike `tokio::fs::File`, a write
/// is not buffered on the side: `poll_write` returns `Ready(n)` once its
/// `n` bytes are in the cache, seen by every reader of the file, as
/// [`File::write_at`] returns; when its first piece must wait (the dirty
/// limit's writeback, the read of a page it covers in part, room in the
/// cache) it returns `Pending` and has written nothing. So `poll_flush`
/// and `poll_shutdown` have no write to complete and are ready at once;
/// they make nothing durable: as with `tokio::fs::File`, durability is
/// [`File::sync_data_async`] (or [`File::sync_all_async`]), through
/// [`file`](Self::file).
///
/// ```
/// # fn main() -> std::io::Result<()> {
/// use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
/// # let cache = foliocache::Cache::builder().capacity(1 << 20).build()?;
/// # let file = cache.memfile("f", 0)?;
/// let mut a = file.into_async();
/// let rt = tokio::runtime::Builder::new_current_thread().build()?;
/// rt.block_on(async {
///     a.write_all(b"hello").await?;
///     a.rewind().await?;
///     let mut s = String::new();
///     a.read_to_string(&mut s).await?;
///     assert_eq!(s, "hello");
///     a.file().sync_data_async().await
/// })
/// # }
/// ```
pub struct AsyncFile {
    file: File,
    at: Position,
}

/// The position of a [`Cursor`] or an [`AsyncFile`] and what its last
/// read or write that did not complete keeps for the next poll.
#[derive(Default)]
struct Position {
    pos: u64,
    read: Option<ReadProgress>,
    write: Option<WriteProgress>,
}

impl<'a> Cursor<'a> {
    /// A cursor at byte `pos` of `file`.
    pub fn new(file: &'a File, pos: u64) -> Self {
        Cursor {
            file,
            at: Position::at(pos),
        }
    }

    /// The position.
    pub fn position(&self) -> u64 {
        self.at.pos
    }
}

impl AsyncFile {
    /// An owned handle on `file` at byte `pos`.
    pub fn new(file: File, pos: u64) -> Self {
        AsyncFile {
            file,
            at: Position::at(pos),
        }
    }

    /// The position.
    pub fn position(&self) -> u64 {
        self.at.pos
    }

    /// The file, for what the traits do not cover: syncs, `set_len`,
    /// positioned reads and writes (which leave the position alone).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The file back. A read or write that returned `Pending` is left to
    /// its IO, as a dropped handle leaves it.
    pub fn into_file(self) -> File {
        self.file
    }
}

impl File {
    /// A [`Cursor`] at byte `pos` of this file, implementing
    /// `tokio::io::AsyncRead + AsyncWrite + AsyncSeek` (the `tokio`
    /// feature).
    pub fn cursor(&self, pos: u64) -> Cursor<'_> {
        Cursor::new(self, pos)
    }

    /// This handle as an [`AsyncFile`] at byte 0, owning it: for a task
    /// (`tokio::spawn`), as `tokio::fs::File` (the `tokio` feature). Keep
    /// a [`clone`](Clone::clone) to go on using the file here.
    pub fn into_async(self) -> AsyncFile {
        AsyncFile::new(self, 0)
    }
}

impl Position {
    fn at(pos: u64) -> Position {
        Position {
            pos,
            ..Position::default()
        }
    }

    fn poll_read(
        &mut self,
        file: &File,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.write = None;
        let dst = buf.initialize_unfilled();
        let mut st = ReadState::resume(self.read.take(), file, dst, self.pos, true);
        match st.poll_read(cx) {
            Poll::Pending => {
                self.read = Some(st.park());
                Poll::Pending
            }
            Poll::Ready(r) => {
                drop(st);
                let n = r?;
                buf.advance(n);
                self.pos += n as u64;
                Poll::Ready(Ok(()))
            }
        }
    }

    fn poll_write(
        &mut self,
        file: &File,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.read = None;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let mut st = WriteState::resume(self.write.take(), file, buf, self.pos);
        let r = match st.poll_write(cx) {
            Poll::Pending => Poll::Pending,
            // What was written is the write's count, as `io::Write`'s
            // convention has it; the next write meets the error again.
            Poll::Ready(Err(_)) if st.written() > 0 => Poll::Ready(Ok(st.written())),
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Ready(Ok(n)) => Poll::Ready(Ok(n)),
        };
        if r.is_ready() {
            self.pos = st.end();
        }
        self.write = Some(st.park());
        r
    }

    fn start_seek(&mut self, file: &File, to: SeekFrom) -> io::Result<()> {
        let (base, delta) = match to {
            SeekFrom::Start(p) => (p, 0),
            SeekFrom::End(d) => (file.len(), d),
            SeekFrom::Current(d) => (self.pos, d),
        };
        self.pos = base.checked_add_signed(delta).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "foliocache cursor: a seek to a negative or overflowing position",
            )
        })?;
        Ok(())
    }

    fn fmt(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(name)
            .field("pos", &self.pos)
            .field("reading", &self.read.is_some())
            .finish()
    }
}

/// tokio's traits for a type with `file` (`&File` or `File`) and `at` (its
/// [`Position`]).
macro_rules! tokio_io {
    ($ty:ty, $name:literal) => {
        impl AsyncRead for $ty {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                let this = self.get_mut();
                this.at.poll_read(&this.file, cx, buf)
            }
        }

        impl AsyncWrite for $ty {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                let this = self.get_mut();
                this.at.poll_write(&this.file, cx, buf)
            }

            /// Ready at once: a write that returned its count is in the
            /// cache (see [`AsyncFile`]); not a sync.
            fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }

            /// As `poll_flush`.
            fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }
        }

        impl AsyncSeek for $ty {
            fn start_seek(self: Pin<&mut Self>, to: SeekFrom) -> io::Result<()> {
                let this = self.get_mut();
                this.at.start_seek(&this.file, to)
            }

            fn poll_complete(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<u64>> {
                Poll::Ready(Ok(self.at.pos))
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.at.fmt($name, f)
            }
        }
    };
}

tokio_io!(Cursor<'_>, "Cursor");
tokio_io!(AsyncFile, "AsyncFile");
