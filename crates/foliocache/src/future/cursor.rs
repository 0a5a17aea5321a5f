//! [`Cursor`]: a position in a [`File`] read through tokio's traits
//! (`tokio::io::AsyncRead + AsyncSeek`), for code written against them
//! (the `tokio` feature). Its reads are [`File::read_at_async`]'s.

use std::fmt;
use std::io::{self, SeekFrom};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncSeek, ReadBuf};

use super::read::ReadState;
use crate::file::File;

/// A cursor over a [`File`]: `tokio::io::AsyncRead` from its position,
/// which `AsyncSeek` moves (`SeekFrom::End` from the file's size when the
/// seek starts). A read fills what it can of the caller's buffer without
/// waiting once some bytes are copied, and otherwise waits for the first
/// folio it needs as [`File::read_at_async`] does, without a thread.
/// Dropped or moved to another position while a read waits, it leaves the
/// read's IO to complete into the cache.
pub struct Cursor<'a> {
    file: &'a File,
    pos: u64,
    /// A read that returned `Pending`: what it waits on, resumed by the
    /// next `poll_read` at the same position.
    pending: Option<ReadState<'a, ()>>,
}

impl<'a> Cursor<'a> {
    /// A cursor at byte `pos` of `file`.
    pub fn new(file: &'a File, pos: u64) -> Self {
        Cursor {
            file,
            pos,
            pending: None,
        }
    }

    /// The position.
    pub fn position(&self) -> u64 {
        self.pos
    }
}

impl File {
    /// A [`Cursor`] at byte `pos` of this file, implementing
    /// `tokio::io::AsyncRead + AsyncSeek` (the `tokio` feature).
    pub fn cursor(&self, pos: u64) -> Cursor<'_> {
        Cursor::new(self, pos)
    }
}

impl AsyncRead for Cursor<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let file = this.file;
        let dst = buf.initialize_unfilled();
        let mut st = ReadState::resume(this.pending.take(), file, dst, this.pos, true);
        match st.poll_read(cx) {
            Poll::Pending => {
                this.pending = Some(st.park());
                Poll::Pending
            }
            Poll::Ready(r) => {
                drop(st);
                let n = r?;
                buf.advance(n);
                this.pos += n as u64;
                Poll::Ready(Ok(()))
            }
        }
    }
}

impl AsyncSeek for Cursor<'_> {
    fn start_seek(self: Pin<&mut Self>, to: SeekFrom) -> io::Result<()> {
        let this = self.get_mut();
        let (base, delta) = match to {
            SeekFrom::Start(p) => {
                this.pos = p;
                return Ok(());
            }
            SeekFrom::End(d) => (this.file.len(), d),
            SeekFrom::Current(d) => (this.pos, d),
        };
        this.pos = base.checked_add_signed(delta).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "foliocache cursor: a seek to a negative or overflowing position",
            )
        })?;
        Ok(())
    }

    fn poll_complete(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<u64>> {
        Poll::Ready(Ok(self.pos))
    }
}

impl fmt::Debug for Cursor<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cursor")
            .field("pos", &self.pos)
            .field("waiting", &self.pending.is_some())
            .finish()
    }
}
