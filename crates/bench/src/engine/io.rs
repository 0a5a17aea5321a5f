//! What a job thread does IO with, at the bottom of the engines: the
//! traits [`BlockIo`] (the synchronous read and write of one block) and
//! [`TaskRead`] (one task's of an async engine), which each engine's IO
//! type implements (`thread_io`), `--consume`'s sums, and [`At`], a file
//! read and written at offsets.

use std::fs::File;
use std::future::Future;
use std::io;
use std::os::unix::fs::FileExt;

/// One thread's way of doing IO on its file. The job loop is generic over
/// it, so each engine's loop is compiled separately with no dynamic
/// dispatch: the same loop, the same timing, only the IO call differs.
pub trait BlockIo: Send {
    /// Reads `buf.len()` bytes at `off`; the bytes read.
    ///
    /// # Errors
    /// The engine's IO error.
    fn read(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize>;
    /// Writes `buf` at `off`; the bytes written.
    ///
    /// # Errors
    /// The engine's IO error.
    fn write(&mut self, buf: &[u8], off: u64) -> io::Result<usize>;

    /// A read for `--consume`: the bytes read, and their
    /// [`sum_words`](crate::consume::sum_words). A copy engine (this
    /// default) reads into `buf` and sums it; an engine that can reach
    /// the bytes where they lie sums them there and leaves `buf` alone.
    ///
    /// # Errors
    /// The engine's IO error.
    #[inline]
    fn read_consume(&mut self, buf: &mut [u8], off: u64) -> io::Result<(usize, u64)> {
        copy_and_sum(self, buf, off)
    }
}

/// One task's IO of an async engine (`tasks=N`): `job` runs `N` of
/// them on one current-thread runtime per job thread, each reading (or
/// writing) one block at a time from its own buffer.
pub trait TaskRead: Send {
    /// Reads `buf.len()` bytes at `off`; the bytes read. `scratch` is the
    /// task's own, for an engine whose reads need an owned buffer.
    fn read<'a>(
        &'a self,
        buf: &'a mut [u8],
        scratch: &'a mut Vec<u8>,
        off: u64,
    ) -> impl Future<Output = io::Result<usize>> + 'a;

    /// Writes `buf` at `off`; the bytes written. An engine that only reads
    /// (refused before a write job starts: `Engines::prepare`) fails.
    fn write<'a>(
        &'a self,
        buf: &'a [u8],
        off: u64,
    ) -> impl Future<Output = io::Result<usize>> + 'a {
        let _ = (buf, off);
        std::future::ready(Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this async engine only reads",
        )))
    }
}

/// `--consume` for a copy: reads into `buf` and sums what was read.
#[inline]
pub(super) fn copy_and_sum<B: BlockIo + ?Sized>(
    io: &mut B,
    buf: &mut [u8],
    off: u64,
) -> io::Result<(usize, u64)> {
    let n = io.read(buf, off)?;
    Ok(summed(&buf[..n]))
}

/// `--consume`'s result for `bytes`: their count and their sum.
#[inline]
pub(super) fn summed(bytes: &[u8]) -> (usize, u64) {
    (bytes.len(), crate::consume::sum_words(bytes))
}

/// A file read and written at offsets.
pub trait At: Sync {
    /// Reads into `buf` at `off`.
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize>;
    /// Writes `buf` at `off`.
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<usize>;
}

impl At for File {
    #[inline]
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, off)
    }
    #[inline]
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        FileExt::write_at(self, buf, off)
    }
}
