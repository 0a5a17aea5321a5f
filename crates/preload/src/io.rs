//! Reads, writes, positions, sizes, syncs and advice on intercepted fds.
//! Every single-buffer call is its vectored form with one buffer, and
//! every vectored call comes to [`read_iov`] or [`write_iov`].

use std::ffi::{c_int, c_uint, c_void};
use std::io;
use std::os::fd::BorrowedFd;

use fc::{Advice, CachedFile, ReadFlags, WriteFlags};
use libc::{iovec, off_t};

use crate::real::real;
use crate::state::{err, hand_to_kernel, inside, lookup, Desc};

/// Runs `body` on the description of `fd` when the cache serves it
/// (inside the library; an error returns `fail` with `errno` set), else
/// `pass`. A file another process of the group handed to the kernel
/// (a mapping, a stdio stream, its inode flags changed) since the
/// description's open is handed over here too, and the call passes
/// through: the kernel may hold writes the cache does not. So is a file
/// the group's cache cannot serve for want of a slot in its table
/// (`SharedCache::out_of_slots`; the call changed nothing): the kernel
/// serves it whole from then on, what the group held of it written back
/// first ([`hand_to_kernel`]), and this call is the kernel's.
pub(crate) fn on_fd<T>(
    fd: c_int,
    fail: T,
    pass: impl FnOnce() -> T,
    body: impl FnOnce(&Desc) -> io::Result<T>,
) -> T {
    let d = match lookup(fd) {
        None => return pass(),
        Some(d) if !d.file.handed_elsewhere() => {
            let mut unslotted = false;
            let r = inside(fail, || {
                body(&d).inspect_err(|e| unslotted = fc::SharedCache::out_of_slots(e))
            });
            if !unslotted {
                return r;
            }
            d
        }
        Some(d) => d,
    };
    let key = d.key;
    drop(d);
    hand_to_kernel(key);
    pass()
}

/// The most buffers a vectored call takes (the kernel's `UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

/// A non-negative offset, size or length (`EINVAL` for a negative one).
fn unsigned(v: i64) -> io::Result<u64> {
    u64::try_from(v).map_err(|_| err(libc::EINVAL))
}

/// The buffers of a vectored call, checked as the kernel does: at most
/// `IOV_MAX` of them, their total within `ssize_t`.
///
/// # Safety
/// `iov` points to `cnt` readable `iovec`s (when `cnt > 0`), unchanged for
/// `'a`.
unsafe fn iovecs<'a>(iov: *const iovec, cnt: c_int) -> io::Result<&'a [iovec]> {
    let cnt = usize::try_from(cnt).map_err(|_| err(libc::EINVAL))?;
    if cnt > IOV_MAX {
        return Err(err(libc::EINVAL));
    }
    if cnt == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(err(libc::EFAULT));
    }
    // SAFETY: the caller's promise, `cnt` entries.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt) };
    let total = v
        .iter()
        .try_fold(0usize, |t, b| t.checked_add(b.iov_len))
        .filter(|&t| t <= isize::MAX as usize);
    match total {
        Some(_) => Ok(v),
        None => Err(err(libc::EINVAL)),
    }
}

/// Reads into the buffers at `offset`; short only at end of file (or an
/// error after some bytes, reported by the next call).
///
/// # Safety
/// Each buffer is valid for writes of its length and not otherwise
/// accessed during the call.
unsafe fn read_at(d: &Desc, iov: &[iovec], offset: u64, flags: ReadFlags) -> io::Result<usize> {
    if !d.readable {
        return Err(err(libc::EBADF));
    }
    let mut done = 0usize;
    for v in iov.iter().filter(|v| v.iov_len > 0) {
        // SAFETY: the caller's promise; a non-empty buffer is non-NULL
        // (else the kernel's read would fail: so does this one).
        let buf = unsafe { buffer_mut(v)? };
        match d.file.read_at_flags(buf, offset + done as u64, flags) {
            Ok(n) => {
                done += n;
                if n < v.iov_len {
                    break;
                }
            }
            Err(_) if done > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// The highest address of user memory any process of the target can
/// map: 57-bit virtual addresses on x86_64 (five-level paging), 52-bit on
/// aarch64.
#[cfg(target_arch = "x86_64")]
const USER_END: usize = 1 << 56;
#[cfg(target_arch = "aarch64")]
const USER_END: usize = 1 << 52;

/// `EFAULT` for a non-empty buffer no process could have mapped: in the
/// first page (NULL, or a small integer passed as a pointer) or past the
/// end of user memory, where the kernel's copy would fail. (A buffer in
/// user memory that is not mapped is not detected: the copy faults as a
/// program's own would.)
fn user_buffer(v: &iovec) -> io::Result<()> {
    let base = v.iov_base as usize;
    if base < 4096 || base.checked_add(v.iov_len).is_none_or(|end| end > USER_END) {
        return Err(err(libc::EFAULT));
    }
    Ok(())
}

/// The bytes of a non-empty buffer.
///
/// # Safety
/// The buffer is valid for writes of its length, not otherwise accessed
/// while the slice lives.
unsafe fn buffer_mut<'a>(v: &iovec) -> io::Result<&'a mut [u8]> {
    user_buffer(v)?;
    // SAFETY: the caller's promise; the length is within `isize::MAX`
    // (checked by `iovecs`).
    Ok(unsafe { std::slice::from_raw_parts_mut(v.iov_base.cast::<u8>(), v.iov_len) })
}

/// Reads at `at`, or at the position (which moves) when `None`.
///
/// # Safety
/// As [`read_at`].
pub(crate) unsafe fn read_iov(
    fd: c_int,
    d: &Desc,
    iov: &[iovec],
    at: Option<u64>,
    flags: ReadFlags,
) -> io::Result<usize> {
    let r = match at {
        // SAFETY: the caller's promise.
        Some(offset) => unsafe { read_at(d, iov, offset, flags) },
        None => d.at_position(fd, |pos| {
            // SAFETY: the caller's promise.
            let n = unsafe { read_at(d, iov, pos, flags) }?;
            Ok((n, pos + n as u64))
        }),
    };
    if d.file.private().is_some() {
        crate::state::after_own_read();
    }
    r
}

/// Writes the buffers at `offset`, with `flags` (at the end of the file for an
/// `O_APPEND` fd: the cache's append is atomic). On an `O_APPEND` fd
/// several buffers are gathered into one write, so that they land
/// together (`ENOMEM` when their total cannot be allocated); elsewhere
/// they are written one after the other, the count of those written
/// returned if one fails after some.
///
/// # Safety
/// Each buffer is valid for reads of its length and not written during
/// the call.
unsafe fn write_at(d: &Desc, iov: &[iovec], offset: u64, flags: WriteFlags) -> io::Result<usize> {
    let bufs: Vec<&[u8]> = iov
        .iter()
        .filter(|v| v.iov_len > 0)
        .map(|v| {
            user_buffer(v)?;
            // SAFETY: the caller's promise; the length is within
            // `isize::MAX` (checked by `iovecs`).
            Ok(unsafe { std::slice::from_raw_parts(v.iov_base.cast::<u8>(), v.iov_len) })
        })
        .collect::<io::Result<_>>()?;
    match bufs.as_slice() {
        [] => Ok(0),
        [one] => d.file.write_at_flags(one, offset, flags),
        more if d.append => {
            let mut all = Vec::new();
            all.try_reserve_exact(more.iter().map(|b| b.len()).sum())
                .map_err(|_| err(libc::ENOMEM))?;
            more.iter().for_each(|b| all.extend_from_slice(b));
            d.file.write_at_flags(&all, offset, flags)
        }
        more => {
            let mut done = 0usize;
            for b in more {
                match d.file.write_at_flags(b, offset + done as u64, flags) {
                    Ok(n) if n < b.len() => return Ok(done + n),
                    Ok(n) => done += n,
                    Err(_) if done > 0 => break,
                    Err(e) => return Err(e),
                }
            }
            Ok(done)
        }
    }
}

/// How a write goes.
#[derive(Clone, Copy, Default)]
pub(crate) struct WriteHow {
    /// Written back and synced before the call returns (`RWF_DSYNC`,
    /// `RWF_SYNC`).
    pub(crate) sync: bool,
    /// At the end of the file (`RWF_APPEND`).
    pub(crate) append: bool,
    /// Uncached (`RWF_DONTCACHE`: the cache's `WriteFlags::DONTCACHE`).
    pub(crate) dontcache: bool,
}

/// Writes at `at`, or at the position (which moves) when `None`.
///
/// # Safety
/// As [`write_at`].
pub(crate) unsafe fn write_iov(
    fd: c_int,
    d: &Desc,
    iov: &[iovec],
    at: Option<u64>,
    how: WriteHow,
) -> io::Result<usize> {
    if !d.writable {
        return Err(err(libc::EBADF));
    }
    let flags = if how.dontcache {
        WriteFlags::DONTCACHE
    } else {
        WriteFlags::NONE
    };
    // SAFETY: the call's fd, open on `d`, borrowed for this call.
    let kfd = unsafe { BorrowedFd::borrow_raw(fd) };
    let n = match at {
        Some(offset) => {
            let offset = if how.append { d.file.len()? } else { offset };
            // SAFETY: the caller's promise.
            let n = unsafe { write_at(d, iov, offset, flags) }?;
            between();
            n
        }
        None => d.at_position(fd, |pos| {
            let offset = if how.append { d.file.len()? } else { pos };
            // SAFETY: the caller's promise.
            let n = unsafe { write_at(d, iov, offset, flags) }?;
            between();
            let pos = if d.append || how.append {
                after_write(d.file.len(), || Ok(rustix::fs::fstat(kfd)?.st_size as u64))?
            } else {
                offset + n as u64
            };
            Ok((n, pos))
        })?,
    };
    if how.sync || d.sync_writes {
        after_write(d.file.sync_data(), || Ok(rustix::fs::fdatasync(kfd)?))?;
    }
    Ok(n)
}

/// The step after a write whose bytes went into the group's cache (the
/// position an append leaves, the sync of `O_DSYNC`/`O_SYNC` or
/// `RWF_DSYNC`), made by `kernel` on the call's fd where the group found
/// no slot for the file any more ([`fc::SharedCache::out_of_slots`]): a
/// file's slot is taken back only once nothing of it is unsaved
/// (`SharedFile::recycle_slot`), so the write's bytes are in the kernel's
/// file by then, and the kernel's size and sync are the file's. The
/// write is done: it is not handed to the kernel to be made again
/// (`on_fd`); the fd's next call finds the file a slot or hands it over.
fn after_write<T>(step: io::Result<T>, kernel: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    match step {
        Err(e) if fc::SharedCache::out_of_slots(&e) => kernel(),
        r => r,
    }
}

#[cfg(test)]
thread_local! {
    /// Run once between a write and its step after ([`after_write`]):
    /// tests take the file's slot back there.
    static BETWEEN: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
}

/// Between a write and its step after: nothing, but in tests ([`BETWEEN`]).
#[inline(always)]
fn between() {
    #[cfg(test)]
    if let Some(f) = BETWEEN.with(|b| b.borrow_mut().take()) {
        f();
    }
}

/// A byte count as `ssize_t`.
fn count(n: io::Result<usize>) -> io::Result<isize> {
    // At most the buffers' total, which `iovecs` bounds by `isize::MAX`.
    n.map(|n| n as isize)
}

/// One buffer as a vector.
fn one(buf: *const c_void, len: usize) -> iovec {
    iovec {
        iov_base: buf.cast_mut(),
        iov_len: len,
    }
}

/// The body of every read: the buffers, at `at` (`None`: the position),
/// with `RWF_*` flags.
///
/// # Safety
/// `iov` holds `cnt` buffers, each valid for writes of its length and not
/// otherwise accessed during the call.
unsafe fn serve_read(
    fd: c_int,
    d: &Desc,
    iov: *const iovec,
    cnt: c_int,
    at: Option<off_t>,
    flags: c_int,
) -> io::Result<isize> {
    let flags = read_flags(flags)?;
    let at = at.map(unsigned).transpose()?;
    // SAFETY: the caller's promise.
    count(unsafe { iovecs(iov, cnt).and_then(|v| read_iov(fd, d, v, at, flags)) })
}

/// The body of every write: the buffers, at `at` (`None`: the position),
/// with `RWF_*` flags.
///
/// # Safety
/// `iov` holds `cnt` buffers, each valid for reads of its length and not
/// written during the call.
unsafe fn serve_write(
    fd: c_int,
    d: &Desc,
    iov: *const iovec,
    cnt: c_int,
    at: Option<off_t>,
    flags: c_int,
) -> io::Result<isize> {
    let how = write_how(flags)?;
    let at = at.map(unsigned).transpose()?;
    // SAFETY: the caller's promise.
    count(unsafe { iovecs(iov, cnt).and_then(|v| write_iov(fd, d, v, at, how)) })
}

/// An offset of `preadv2`/`pwritev2`: -1 is the position.
fn at_or_position(offset: off_t) -> Option<off_t> {
    (offset != -1).then_some(offset)
}

/// The `RWF_*` flags a read takes: `RWF_NOWAIT` (the cache's `NOWAIT`),
/// `RWF_DONTCACHE` (its `DONTCACHE`), `RWF_HIPRI` (no meaning here).
fn read_flags(flags: c_int) -> io::Result<ReadFlags> {
    if flags & !(libc::RWF_HIPRI | libc::RWF_NOWAIT | libc::RWF_DONTCACHE) != 0 {
        return Err(err(libc::EOPNOTSUPP));
    }
    let mut f = ReadFlags::NONE;
    if flags & libc::RWF_NOWAIT != 0 {
        f |= ReadFlags::NOWAIT;
    }
    if flags & libc::RWF_DONTCACHE != 0 {
        f |= ReadFlags::DONTCACHE;
    }
    Ok(f)
}

/// The `RWF_*` flags a write takes: `RWF_DSYNC` and `RWF_SYNC` (written
/// back and synced), `RWF_APPEND`, `RWF_DONTCACHE` (uncached: the cache's
/// `WriteFlags::DONTCACHE`), `RWF_HIPRI` (no meaning here).
fn write_how(flags: c_int) -> io::Result<WriteHow> {
    let known =
        libc::RWF_HIPRI | libc::RWF_DSYNC | libc::RWF_SYNC | libc::RWF_APPEND | libc::RWF_DONTCACHE;
    if flags & !known != 0 {
        return Err(err(libc::EOPNOTSUPP));
    }
    Ok(WriteHow {
        sync: flags & (libc::RWF_DSYNC | libc::RWF_SYNC) != 0,
        append: flags & libc::RWF_APPEND != 0,
        dontcache: flags & libc::RWF_DONTCACHE != 0,
    })
}

/// `lseek` on a served description, with `SEEK_DATA` and `SEEK_HOLE` as on
/// a filesystem without holes (data up to the end, a hole there).
fn seek(fd: c_int, d: &Desc, offset: off_t, whence: c_int) -> io::Result<off_t> {
    d.at_position(fd, |pos| {
        let len = i64::try_from(d.file.len()?).map_err(|_| err(libc::EOVERFLOW))?;
        let new = match whence {
            libc::SEEK_SET => Some(offset),
            libc::SEEK_CUR => (pos as i64).checked_add(offset),
            libc::SEEK_END => len.checked_add(offset),
            libc::SEEK_DATA | libc::SEEK_HOLE if offset >= len => return Err(err(libc::ENXIO)),
            libc::SEEK_DATA => Some(offset),
            libc::SEEK_HOLE => Some(len),
            _ => return Err(err(libc::EINVAL)),
        };
        let new = new.filter(|&n| n >= 0).ok_or_else(|| err(libc::EINVAL))?;
        Ok((new, new as u64))
    })
}

/// Allocates `len` bytes at `offset` of a served file (`File::allocate`:
/// the backing reserves the blocks, and the size grows to the end of the
/// range, unless `keep_size`, in one hold of the file's lock, so a write
/// that extends the file meanwhile is not cut back). With
/// `reserve_optional`, a filesystem that cannot reserve blocks is no error
/// (`posix_fallocate`): the size still grows.
fn allocate(
    d: &Desc,
    offset: off_t,
    len: off_t,
    keep_size: bool,
    reserve_optional: bool,
) -> io::Result<()> {
    if !d.writable {
        return Err(err(libc::EBADF));
    }
    if len <= 0 {
        return Err(err(libc::EINVAL));
    }
    let (offset, len) = (unsigned(offset)?, len as u64);
    match d.file.allocate(offset, len, keep_size) {
        Err(e) if reserve_optional && e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
            // (Where nothing can be reserved, the size alone, as glibc's
            // emulation leaves it; a write extending the file between the
            // check and the growth would be cut back: filesystems without
            // `fallocate` only.)
            let end = offset.checked_add(len).ok_or_else(|| err(libc::EFBIG))?;
            if !keep_size && end > d.file.len()? {
                d.file.set_len(end)?;
            }
            Ok(())
        }
        r => r,
    }
}

/// Zeroes `len` bytes at `offset` of a served file
/// (`fallocate(FALLOC_FL_ZERO_RANGE)`): through the cache (its hole punch
/// deallocates the whole blocks and writes zeros over the partial ones),
/// then the blocks are reserved as [`allocate`] does (the size growing to
/// the end of the range, unless `keep_size`).
fn zero_range(d: &Desc, keep_size: bool, offset: off_t, len: off_t) -> io::Result<()> {
    if !d.writable {
        return Err(err(libc::EBADF));
    }
    if len <= 0 {
        return Err(err(libc::EINVAL));
    }
    d.file.punch_hole(unsigned(offset)?, len as u64)?;
    allocate(d, offset, len, keep_size, false)
}

/// `fallocate` on a served description: mode 0 and `KEEP_SIZE`
/// ([`allocate`]), `PUNCH_HOLE | KEEP_SIZE` (through the cache), `ZERO_RANGE` with or without `KEEP_SIZE` ([`zero_range`]),
/// `COLLAPSE_RANGE` and `INSERT_RANGE` (the cache's `collapse_range` and
/// `insert_range`: dirty data written back, the backing's data moved, the
/// cache dropped from the range on); any other mode `EOPNOTSUPP`, as the
/// filesystem would give.
fn fallocate_served(d: &Desc, mode: c_int, offset: off_t, len: off_t) -> io::Result<c_int> {
    const KEEP: c_int = libc::FALLOC_FL_KEEP_SIZE;
    const PUNCH: c_int = libc::FALLOC_FL_PUNCH_HOLE | KEEP;
    const ZERO: c_int = libc::FALLOC_FL_ZERO_RANGE;
    const ZERO_KEEP: c_int = ZERO | KEEP;
    const COLLAPSE: c_int = libc::FALLOC_FL_COLLAPSE_RANGE;
    const INSERT: c_int = libc::FALLOC_FL_INSERT_RANGE;
    if matches!(mode, PUNCH | COLLAPSE | INSERT) && !d.writable {
        return Err(err(libc::EBADF));
    }
    match mode {
        0 => allocate(d, offset, len, false, false)?,
        KEEP => allocate(d, offset, len, true, false)?,
        PUNCH => d.file.punch_hole(unsigned(offset)?, unsigned(len)?)?,
        ZERO | ZERO_KEEP => zero_range(d, mode == ZERO_KEEP, offset, len)?,
        COLLAPSE => d.file.collapse_range(unsigned(offset)?, unsigned(len)?)?,
        INSERT => d.file.insert_range(unsigned(offset)?, unsigned(len)?)?,
        _ => return Err(err(libc::EOPNOTSUPP)),
    }
    Ok(0)
}

crate::fd_calls! {
    /// `read(2)`.
    ///
    /// # Safety
    /// As `read(2)`: `buf` is valid for writes of `count` bytes.
    fn read(fd: c_int, buf: *mut c_void, count: usize) -> isize =
        |d| serve_read(fd, d, &one(buf, count), 1, None, 0);

    /// `pread(2)`.
    ///
    /// # Safety
    /// As `pread(2)`: `buf` is valid for writes of `count` bytes.
    fn pread(fd: c_int, buf: *mut c_void, count: usize, offset: off_t) -> isize =
        |d| serve_read(fd, d, &one(buf, count), 1, Some(offset), 0);

    /// `readv(2)`.
    ///
    /// # Safety
    /// As `readv(2)`: `iov` holds `cnt` buffers, each valid for writes.
    fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> isize =
        |d| serve_read(fd, d, iov, cnt, None, 0);

    /// `preadv(2)`.
    ///
    /// # Safety
    /// As `preadv(2)`: `iov` holds `cnt` buffers, each valid for writes.
    fn preadv(fd: c_int, iov: *const iovec, cnt: c_int, offset: off_t) -> isize =
        |d| serve_read(fd, d, iov, cnt, Some(offset), 0);

    /// `preadv2(2)`: an offset of -1 reads at the position.
    ///
    /// # Safety
    /// As `preadv2(2)`: `iov` holds `cnt` buffers, each valid for writes.
    fn preadv2(fd: c_int, iov: *const iovec, cnt: c_int, offset: off_t, flags: c_int) -> isize =
        |d| serve_read(fd, d, iov, cnt, at_or_position(offset), flags);

    /// `write(2)`.
    ///
    /// # Safety
    /// As `write(2)`: `buf` is valid for reads of `count` bytes.
    fn write(fd: c_int, buf: *const c_void, count: usize) -> isize =
        |d| serve_write(fd, d, &one(buf, count), 1, None, 0);

    /// `pwrite(2)`. On an `O_APPEND` fd the data goes to the end of the
    /// file, as Linux's does.
    ///
    /// # Safety
    /// As `pwrite(2)`: `buf` is valid for reads of `count` bytes.
    fn pwrite(fd: c_int, buf: *const c_void, count: usize, offset: off_t) -> isize =
        |d| serve_write(fd, d, &one(buf, count), 1, Some(offset), 0);

    /// `writev(2)`.
    ///
    /// # Safety
    /// As `writev(2)`: `iov` holds `cnt` buffers, each valid for reads.
    fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> isize =
        |d| serve_write(fd, d, iov, cnt, None, 0);

    /// `pwritev(2)`.
    ///
    /// # Safety
    /// As `pwritev(2)`: `iov` holds `cnt` buffers, each valid for reads.
    fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, offset: off_t) -> isize =
        |d| serve_write(fd, d, iov, cnt, Some(offset), 0);

    /// `pwritev2(2)`: an offset of -1 writes at the position.
    ///
    /// # Safety
    /// As `pwritev2(2)`: `iov` holds `cnt` buffers, each valid for reads.
    fn pwritev2(fd: c_int, iov: *const iovec, cnt: c_int, offset: off_t, flags: c_int) -> isize =
        |d| serve_write(fd, d, iov, cnt, at_or_position(offset), flags);

    /// `lseek(2)` (see `seek`).
    ///
    /// # Safety
    /// None beyond `lseek(2)`'s (integers only).
    fn lseek(fd: c_int, offset: off_t, whence: c_int) -> off_t = |d| seek(fd, d, offset, whence);

    /// `ftruncate(2)`.
    ///
    /// # Safety
    /// None beyond `ftruncate(2)`'s (integers only).
    fn ftruncate(fd: c_int, length: off_t) -> c_int = |d| {
        if !d.writable {
            return Err(err(libc::EINVAL));
        }
        d.file.set_len(unsigned(length)?).map(|()| 0)
    };

    /// `fallocate(2)` (see `fallocate_served`).
    ///
    /// # Safety
    /// None beyond `fallocate(2)`'s (integers only).
    fn fallocate(fd: c_int, mode: c_int, offset: off_t, len: off_t) -> c_int =
        |d| fallocate_served(d, mode, offset, len);

    /// `fsync(2)`: the file's dirty data written back, then synced.
    ///
    /// # Safety
    /// None beyond `fsync(2)`'s (an integer only).
    fn fsync(fd: c_int) -> c_int = |d| d.file.sync_all().map(|()| 0);

    /// `fdatasync(2)`.
    ///
    /// # Safety
    /// None beyond `fdatasync(2)`'s (an integer only).
    fn fdatasync(fd: c_int) -> c_int = |d| d.file.sync_data().map(|()| 0);

    /// `sync_file_range(2)`: with `SYNC_FILE_RANGE_WAIT_AFTER`, the whole
    /// file's dirty data written back (more than asked, never less),
    /// waiting for the writes, without a flush of the device: what the
    /// call gives on any filesystem (it never syncs metadata or the
    /// device's cache). Without it the call asks only that writeback
    /// start, and promises nothing a crash would keep: a hint, which the
    /// cache's own writeback rules answer (the flusher in a process, the
    /// dirty limit and the holder's final writeback in a group).
    /// PostgreSQL's checkpointer and background writer send it every 256
    /// and 512 KiB written; a synchronous writeback of the file each
    /// time, under its inode lock, held the backends' writes behind it.
    ///
    /// # Safety
    /// None beyond `sync_file_range(2)`'s (integers only).
    fn sync_file_range(fd: c_int, offset: off_t, nbytes: off_t, flags: c_uint) -> c_int = |d| {
        if offset < 0 || nbytes < 0 || flags & !7 != 0 {
            return Err(err(libc::EINVAL));
        }
        if flags & libc::SYNC_FILE_RANGE_WAIT_AFTER == 0 {
            return Ok(0);
        }
        d.file.write_back().map(|()| 0)
    };

    /// `readahead(2)`: the range read into the cache.
    ///
    /// # Safety
    /// None beyond `readahead(2)`'s (integers only).
    fn readahead(fd: c_int, offset: off_t, count: usize) -> isize = |d| {
        let len = u64::try_from(count).map_err(|_| err(libc::EINVAL))?;
        d.file.advise(unsigned(offset)?, len.max(1), Advice::WillNeed).map(|()| 0)
    };
}

/// A function that returns an error number rather than setting `errno`
/// (`posix_fallocate`, `posix_fadvise`): runs `body` as [`on_fd`] does,
/// keeping `errno` as it was.
fn returning_errno(
    fd: c_int,
    pass: impl FnOnce() -> c_int,
    body: impl FnOnce(&Desc) -> io::Result<()>,
) -> c_int {
    // SAFETY: `__errno_location` returns this thread's errno.
    let saved = unsafe { *libc::__errno_location() };
    let r = on_fd(fd, -1, pass, |d| body(d).map(|()| 0));
    if r == -1 {
        // SAFETY: as above.
        let errno = unsafe { *libc::__errno_location() };
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = saved };
        return errno;
    }
    r
}

/// `posix_fallocate(3)`: the kernel reserves what it can; the size grows.
#[no_mangle]
pub extern "C" fn posix_fallocate(fd: c_int, offset: off_t, len: off_t) -> c_int {
    returning_errno(
        fd,
        // SAFETY: integers only.
        || unsafe {
            real!(posix_fallocate: unsafe extern "C" fn(c_int, off_t, off_t) -> c_int)(
                fd, offset, len,
            )
        },
        |d| allocate(d, offset, len, false, true),
    )
}

/// `posix_fadvise(2)`: the cache's own advice for the file.
#[no_mangle]
pub extern "C" fn posix_fadvise(fd: c_int, offset: off_t, len: off_t, advice: c_int) -> c_int {
    returning_errno(
        fd,
        // SAFETY: integers only.
        || unsafe {
            real!(posix_fadvise: unsafe extern "C" fn(c_int, off_t, off_t, c_int) -> c_int)(
                fd, offset, len, advice,
            )
        },
        |d| {
            let advice = match advice {
                libc::POSIX_FADV_NORMAL => Advice::Normal,
                libc::POSIX_FADV_RANDOM => Advice::Random,
                libc::POSIX_FADV_SEQUENTIAL => Advice::Sequential,
                libc::POSIX_FADV_WILLNEED => Advice::WillNeed,
                libc::POSIX_FADV_DONTNEED => Advice::DontNeed,
                libc::POSIX_FADV_NOREUSE => Advice::NoReuse,
                _ => return Err(err(libc::EINVAL)),
            };
            d.file.advise(unsigned(offset)?, unsigned(len)?, advice)
        },
    )
}

/// `sync(2)`: the cache's dirty data written back and synced first.
#[no_mangle]
pub extern "C" fn sync() {
    crate::state::write_back_all();
    // SAFETY: no arguments.
    unsafe { real!(sync: unsafe extern "C" fn())() }
}

/// `syncfs(2)`: the cache's dirty data written back and synced first.
#[no_mangle]
pub extern "C" fn syncfs(fd: c_int) -> c_int {
    crate::state::write_back_all();
    // SAFETY: an integer only.
    unsafe { real!(syncfs: unsafe extern "C" fn(c_int) -> c_int)(fd) }
}

extern "C" {
    /// glibc's report of a fortified call's overflow: prints
    /// `*** buffer overflow detected ***` and aborts.
    fn __chk_fail() -> !;
}

/// Defines the fortified reads `_FORTIFY_SOURCE` calls where a buffer's
/// size is known and the length is not: `chk => name(args) checking
/// len;` takes the buffer's size (`buflen`) after `args`, checks `len`
/// against it as glibc's does (`__chk_fail` past it), then is `name`.
macro_rules! fortified {
    ($($chk:ident => $name:ident($($arg:ident: $ty:ty),*) checking $len:ident;)*) => {$(
        #[doc = concat!("`", stringify!($chk), "`: [`", stringify!($name), "`] after glibc's")]
        /// check that the length fits the buffer's size.
        ///
        /// # Safety
        #[doc = concat!("As [`", stringify!($name), "`]; `buflen` is at most the buffer's size.")]
        #[no_mangle]
        pub unsafe extern "C" fn $chk($($arg: $ty,)* buflen: usize) -> isize {
            if $len > buflen {
                // SAFETY: no arguments; it does not return.
                unsafe { __chk_fail() }
            }
            // SAFETY: the caller's promise, passed on.
            unsafe { $name($($arg),*) }
        }
    )*};
}

fortified! {
    __read_chk => read(fd: c_int, buf: *mut c_void, count: usize) checking count;
    __pread_chk => pread(fd: c_int, buf: *mut c_void, count: usize, offset: off_t) checking count;
    __pread64_chk => pread(fd: c_int, buf: *mut c_void, count: usize, offset: off_t) checking count;
}

crate::aliases! {
    pread64 => pread(fd: c_int, buf: *mut c_void, count: usize, offset: off_t) -> isize;
    preadv64 => preadv(fd: c_int, iov: *const iovec, cnt: c_int, offset: off_t) -> isize;
    preadv64v2 => preadv2(fd: c_int, iov: *const iovec, cnt: c_int, offset: off_t, flags: c_int) -> isize;
    pwrite64 => pwrite(fd: c_int, buf: *const c_void, count: usize, offset: off_t) -> isize;
    pwritev64 => pwritev(fd: c_int, iov: *const iovec, cnt: c_int, offset: off_t) -> isize;
    pwritev64v2 => pwritev2(fd: c_int, iov: *const iovec, cnt: c_int, offset: off_t, flags: c_int) -> isize;
    lseek64 => lseek(fd: c_int, offset: off_t, whence: c_int) -> off_t;
    ftruncate64 => ftruncate(fd: c_int, length: off_t) -> c_int;
    fallocate64 => fallocate(fd: c_int, mode: c_int, offset: off_t, len: off_t) -> c_int;
    posix_fallocate64 => posix_fallocate(fd: c_int, offset: off_t, len: off_t) -> c_int;
    posix_fadvise64 => posix_fadvise(fd: c_int, offset: off_t, len: off_t, advice: c_int) -> c_int;
}

#[cfg(test)]
mod tests {
    use std::mem::ManuallyDrop;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    use fc::{AnyFile, SharedCache, SharedHandle};
    use parking_lot::Mutex;

    use super::*;

    /// A write of "defg" to a file holding "abc", through a description
    /// of the group's cache (`append`: an `O_APPEND` one, else one of
    /// `O_DSYNC` at its position), whose file's slot is taken back
    /// between the write and its step after (`between`): the file
    /// written back, as the flusher does, then every slot given to a
    /// file with unsaved data. The call returns the write's count, the
    /// position is past its bytes, and the file holds them once.
    fn slot_taken_back_after_the_write(append: bool) {
        let dir = tempfile::tempdir().unwrap();
        let sc = SharedCache::new(1 << 20).unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, b"abc").unwrap();
        let rw = |p: &std::path::Path| {
            let mut o = std::fs::OpenOptions::new();
            o.read(true).write(true).create(true);
            o.open(p).unwrap()
        };
        // The program's own fd, on which the kernel makes the step.
        let program = rw(&path);
        let meta = program.metadata().unwrap();
        let shared = sc.open(rw(&path)).unwrap();
        // Never dropped: the description was never in the table.
        let d = ManuallyDrop::new(Desc {
            file: ManuallyDrop::new(AnyFile::Shared(SharedHandle::new(
                Arc::new(shared),
                true,
                append,
            ))),
            key: (meta.dev(), meta.ino()),
            pos: Mutex::new(3),
            kernel_pos: AtomicBool::new(false),
            readable: true,
            writable: true,
            append,
            sync_writes: !append,
        });
        let (group, others) = (sc.clone(), dir.path().to_owned());
        BETWEEN.with(|b| {
            *b.borrow_mut() = Some(Box::new(move || {
                assert_eq!(group.write_back_all().unwrap(), 1);
                let mut filled = 0;
                loop {
                    match group.open(rw(&others.join(filled.to_string()))) {
                        Ok(f) => assert_eq!(f.write_at(b"x", 0).unwrap(), 1),
                        Err(e) if SharedCache::out_of_slots(&e) => break,
                        Err(e) => panic!("{e}"),
                    }
                    filled += 1;
                }
                // One slot more than were free: this file's was taken.
                assert!(filled > 1, "{filled} files filled the table");
            }))
        });
        let buf = b"defg";
        // SAFETY: `buf` is read for the call only.
        let n = unsafe {
            write_iov(
                program.as_raw_fd(),
                &d,
                &[one(buf.as_ptr().cast(), buf.len())],
                None,
                WriteHow::default(),
            )
        };
        assert_eq!(n.unwrap(), 4);
        assert!(BETWEEN.with(|b| b.borrow().is_none()), "the window was met");
        assert!(fc::SharedCache::out_of_slots(&d.file.len().unwrap_err()));
        assert_eq!(*d.pos.lock(), 7);
        assert_eq!(std::fs::read(&path).unwrap(), b"abcdefg");
    }

    #[test]
    fn an_append_whose_slot_is_taken_back_after_its_write_lands_once() {
        slot_taken_back_after_the_write(true);
    }

    #[test]
    fn a_dsync_write_whose_slot_is_taken_back_after_its_write_lands_once() {
        slot_taken_back_after_the_write(false);
    }
}
