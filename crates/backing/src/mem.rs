//! [`MemBacking`]: a sparse file in process memory, like a tmpfs file
//! without the kernel.
//!
//! ```text
//!  len ──────────────────────────────────────────────┐
//!  pages: [0] [1]  .   .  [4]   .   .   .  [9]        │  (BTreeMap, BLOCK each)
//!                 hole: reads as zeros, costs nothing ┘
//! ```
//!
//! Invariant: every byte of an allocated page at or past `len` is zero, so
//! growing the file (by `set_len`) exposes zeros, as on a real filesystem.

use std::collections::BTreeMap;
use std::fmt;
use std::io;

use crate::buf::{IoBuf, IoBufMut};
use crate::sync::{read, write, RwLock};
use crate::{check_end, check_io, check_io_range, Backing, BackingInfo, DataPath, Shift, BLOCK};

const B: u64 = BLOCK as u64;

struct Inner {
    len: u64,
    pages: BTreeMap<u64, Box<[u8]>>,
}

/// An in-memory file read and written in blocks: for tests, and for memory
/// files (shmem-like: there is no store behind it).
///
/// - Reads past `len` are short (0 bytes at or past it; a partial block at
///   the end), with zeros past the count.
/// - Writes extend `len` to the end of the last block written.
/// - Holes, whether never written, grown by [`set_len`](Backing::set_len) or
///   punched, read as zeros and take no memory: data is kept in one
///   [`BLOCK`]-sized page per written block.
/// - An optional limit on the bytes of pages held makes writes fail with
///   `ENOSPC` when they would need more, like a full tmpfs.
/// - `sync_data`/`sync_all` do nothing and succeed.
///
/// ```
/// use foliocache_backing::{AlignedBuf, Backing, MemBacking, BLOCK};
///
/// let mem = MemBacking::with_limit(BLOCK as u64);
/// let data = AlignedBuf::zeroed(BLOCK)?;
/// mem.write_blocks(&[data.io_buf()], 0)?;
/// let err = mem.write_blocks(&[data.io_buf()], BLOCK as u64).unwrap_err();
/// assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
/// assert_eq!(mem.len()?, BLOCK as u64);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct MemBacking {
    inner: RwLock<Inner>,
    limit: u64,
}

impl Default for MemBacking {
    fn default() -> Self {
        Self::new()
    }
}

impl MemBacking {
    /// An empty file with no size limit.
    pub fn new() -> Self {
        Self::with_limit(u64::MAX)
    }

    /// An empty file whose pages may hold at most `limit` bytes (rounded
    /// down to whole blocks); writes that need more fail with `ENOSPC`.
    /// Holes do not count, so `len` may exceed the limit.
    pub fn with_limit(limit: u64) -> Self {
        MemBacking {
            inner: RwLock::new(Inner {
                len: 0,
                pages: BTreeMap::new(),
            }),
            limit,
        }
    }

    /// A file holding `data` (of any length: the last block may be
    /// partial), with no size limit.
    pub fn with_data(data: Vec<u8>) -> Self {
        let mut pages = BTreeMap::new();
        for (i, chunk) in data.chunks(BLOCK).enumerate() {
            let mut page = vec![0u8; BLOCK].into_boxed_slice();
            page[..chunk.len()].copy_from_slice(chunk);
            pages.insert(i as u64, page);
        }
        MemBacking {
            inner: RwLock::new(Inner {
                len: data.len() as u64,
                pages,
            }),
            limit: u64::MAX,
        }
    }

    /// The limit on the bytes of pages held (`u64::MAX`: none).
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The bytes of pages held now (holes excluded).
    pub fn resident_bytes(&self) -> u64 {
        read(&self.inner).pages.len() as u64 * B
    }

    /// A copy of the whole file, `len` bytes, holes as zeros. Meant for
    /// tests that compare the file with a model.
    ///
    /// # Errors
    /// [`io::ErrorKind::OutOfMemory`] if `len` bytes cannot be allocated
    /// (a sparse file of huge `len` cannot be copied out).
    pub fn contents(&self) -> io::Result<Vec<u8>> {
        let inner = read(&self.inner);
        let oom = || {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("cannot copy out a memory file of {} bytes", inner.len),
            )
        };
        let len = usize::try_from(inner.len).map_err(|_| oom())?;
        let mut out = Vec::new();
        out.try_reserve_exact(len).map_err(|_| oom())?;
        out.resize(len, 0);
        for (&idx, page) in inner.pages.range(..inner.len.div_ceil(B)) {
            let start = (idx * B) as usize;
            let n = (len - start).min(BLOCK);
            out[start..start + n].copy_from_slice(&page[..n]);
        }
        Ok(out)
    }
}

impl Backing for MemBacking {
    fn len(&self) -> io::Result<u64> {
        Ok(read(&self.inner).len)
    }

    fn read_blocks(&self, bufs: &mut [IoBufMut<'_>], offset: u64) -> io::Result<usize> {
        let total = check_io(bufs, offset)?;
        let inner = read(&self.inner);
        let avail = inner.len.saturating_sub(offset);
        let n = (total as u64).min(avail) as usize;
        let mut done = 0;
        let mut idx = offset / B;
        for buf in bufs.iter_mut() {
            for chunk in buf.chunks_mut(BLOCK) {
                let k = n.saturating_sub(done).min(BLOCK);
                match inner.pages.get(&idx) {
                    Some(page) if k > 0 => chunk[..k].copy_from_slice(&page[..k]),
                    _ => chunk[..k].fill(0),
                }
                // Past end of file: zeros (see the trait's contract).
                chunk[k..].fill(0);
                done += k;
                idx += 1;
            }
        }
        Ok(n)
    }

    fn write_blocks(&self, bufs: &[IoBuf<'_>], offset: u64) -> io::Result<usize> {
        let total = check_io(bufs, offset)?;
        if total == 0 {
            return Ok(0);
        }
        let first = offset / B;
        let blocks = (total / BLOCK) as u64;
        let mut inner = write(&self.inner);
        // All or nothing: check the space before touching anything.
        let present = inner.pages.range(first..first + blocks).count() as u64;
        let after = (inner.pages.len() as u64 + blocks - present).saturating_mul(B);
        if after > self.limit {
            return Err(rustix::io::Errno::NOSPC.into());
        }
        let mut idx = first;
        for buf in bufs {
            for chunk in buf.chunks(BLOCK) {
                inner
                    .pages
                    .entry(idx)
                    .or_insert_with(|| vec![0u8; BLOCK].into_boxed_slice())
                    .copy_from_slice(chunk);
                idx += 1;
            }
        }
        let end = offset + total as u64;
        if end > inner.len {
            inner.len = end;
        }
        Ok(total)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        check_end(len, 0)?;
        let mut inner = write(&self.inner);
        if len < inner.len {
            // Drop whole pages past the new end, zero the tail of the last.
            let keep = len.div_ceil(B);
            drop(inner.pages.split_off(&keep));
            let tail = (len % B) as usize;
            if tail != 0 {
                if let Some(page) = inner.pages.get_mut(&(len / B)) {
                    page[tail..].fill(0);
                }
            }
        }
        inner.len = len;
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        check_io_range(offset, len)?;
        let (first, end) = (offset / B, (offset + len) / B);
        let mut inner = write(&self.inner);
        let doomed: Vec<u64> = inner.pages.range(first..end).map(|(&k, _)| k).collect();
        for k in doomed {
            inner.pages.remove(&k);
        }
        Ok(())
    }

    /// Nothing to reserve: pages are made as they are written (within the
    /// space limit, which is checked then).
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        crate::check_allocate(offset, len)
    }

    fn collapse_range(&self, offset: u64, len: u64) -> io::Result<()> {
        let mut inner = write(&self.inner);
        Shift::Collapse.check(offset, len, inner.len)?;
        let (first, n) = (offset / B, len / B);
        // The pages from the range's end on move down by `n`; the range's
        // own go.
        let moved = inner.pages.split_off(&(first + n));
        drop(inner.pages.split_off(&first));
        inner
            .pages
            .extend(moved.into_iter().map(|(k, p)| (k - n, p)));
        inner.len -= len;
        Ok(())
    }

    fn insert_range(&self, offset: u64, len: u64) -> io::Result<()> {
        let mut inner = write(&self.inner);
        Shift::Insert.check(offset, len, inner.len)?;
        let (first, n) = (offset / B, len / B);
        let moved = inner.pages.split_off(&first);
        inner
            .pages
            .extend(moved.into_iter().map(|(k, p)| (k + n, p)));
        inner.len += len;
        Ok(())
    }

    fn info(&self) -> BackingInfo {
        let limit = if self.limit == u64::MAX {
            "no size limit".to_string()
        } else {
            format!("limited to {} bytes of pages", self.limit)
        };
        BackingInfo::new(
            "memory",
            DataPath::Memory,
            "memory",
            format!("a sparse file in process memory, {limit}"),
        )
    }
}

impl fmt::Debug for MemBacking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = read(&self.inner);
        f.debug_struct("MemBacking")
            .field("len", &inner.len)
            .field("resident_bytes", &(inner.pages.len() as u64 * B))
            .field("limit", &self.limit)
            .finish()
    }
}
