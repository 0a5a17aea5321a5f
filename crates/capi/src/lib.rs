//! The C ABI of foliocache: `libfoliocache.so`, declared by
//! `include/foliocache.h`, which documents every function for C; the
//! conventions are in `docs/capi.md`. Nothing here but the translation to
//! and from the Rust API underneath:
//!
//! - caches and files are integer handles into tables (module `handle`), so a
//!   stale or bogus handle is `EBADF`, never a dangling pointer;
//! - a failing call returns -1 and sets `errno`, and the thread's last
//!   error message (module `error`); a panic is caught and reported as `EIO`;
//! - structs passed by pointer begin with their size, so old and new
//!   headers interoperate (module `sized`).
//!
//! Only the functions taking a pointer (a path, a buffer, a struct) are
//! `unsafe`: the pointer is the caller's to get right. Every other one is
//! safe whatever its arguments.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::sync::Arc;

use fc::{Cache, CacheBuilder, File, Populate, PressureConfig};

mod error;
mod handle;
mod sized;

use error::{call, Error, Result};
use handle::Table;
use sized::{read_in, write_out, SizedStruct};

/// Every live cache handle.
static CACHES: Table<Cache> = Table::new("cache");
/// Every live file handle.
static FILES: Table<File> = Table::new("file");

/// `fc_cache_options.flags`: fault the whole arena in at build
/// (`Populate::Eager`) rather than as the cache fills.
pub const FC_CACHE_POPULATE_EAGER: u32 = 1 << 0;
/// `fc_cache_options.flags`: no transparent huge pages for the arena.
pub const FC_CACHE_NO_HUGE_PAGES: u32 = 1 << 1;
/// `fc_cache_options.flags`: no memory-pressure watcher (the cache keeps
/// its capacity whatever happens).
pub const FC_CACHE_NO_PRESSURE: u32 = 1 << 2;
/// Every flag `fc_cache_options.flags` may hold.
const FC_CACHE_FLAGS: u32 = FC_CACHE_POPULATE_EAGER | FC_CACHE_NO_HUGE_PAGES | FC_CACHE_NO_PRESSURE;

/// `struct fc_cache_options`: how to build a cache. Zero in a field means
/// the library's default.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct CacheOptions {
    /// The struct's size in bytes as the caller knows it.
    pub size: u32,
    /// `FC_CACHE_*` flags.
    pub flags: u32,
    /// Bytes of folio memory (default 256 MiB).
    pub capacity: u64,
    /// The largest folio, in bytes (default 2 MiB).
    pub max_folio_size: u64,
    /// Dirty bytes above which writers are throttled (default half the
    /// capacity).
    pub dirty_limit: u64,
    /// Dirty bytes above which the flusher writes back (default a quarter
    /// of the capacity).
    pub dirty_background: u64,
    /// Bytes of index nodes eviction shadows may hold (default about
    /// 0.6 % of the capacity).
    pub shadow_budget: u64,
}

// SAFETY: `repr(C)`, the size first, then a `u32` and `u64`s: no padding,
// integers only.
unsafe impl SizedStruct for CacheOptions {}

/// Declares `CacheStats` with these `u64` fields, in this order (the C
/// layout), each that of [`fc::CacheStats`] of the same name, and its
/// conversion from it.
macro_rules! cache_stats {
    ($($field:ident),* $(,)?) => {
        /// `struct fc_cache_stats`: a cache's figures, each field that of
        /// [`fc::CacheStats`] of the same name.
        #[repr(C)]
        #[derive(Clone, Copy, Default, Debug)]
        pub struct CacheStats {
            /// The struct's size in bytes as the caller knows it; the
            /// library sets it to the bytes it wrote.
            pub size: u32,
            /// Zero.
            pub reserved: u32,
            $(
                #[doc = concat!("[`fc::CacheStats::", stringify!($field), "`]")]
                pub $field: u64,
            )*
        }

        impl From<fc::CacheStats> for CacheStats {
            fn from(s: fc::CacheStats) -> Self {
                CacheStats {
                    size: 0,
                    reserved: 0,
                    $($field: s.$field,)*
                }
            }
        }
    };
}

cache_stats!(
    hits,
    misses,
    folios,
    bytes_cached,
    evictions,
    io_reads,
    io_bytes,
    capacity_bytes,
    free_bytes,
    allowed_bytes,
    populated_bytes,
    refaults,
    activations,
    shadows,
    dirty_bytes,
    writeback_bytes,
    io_writes,
    io_write_bytes,
    writeback_errors,
    throttled,
    readahead_windows,
    dropbehind_drops,
    // Appended (ABI: a caller built with an older header passes a smaller
    // size and gets the fields it has).
    read_bytes,
    first_read_bytes,
);

// SAFETY: `repr(C)`, the size first, then a `u32` and `u64`s: no padding,
// integers only.
unsafe impl SizedStruct for CacheStats {}

fn einval(message: impl Into<String>) -> Error {
    Error::new(libc::EINVAL, message)
}

/// A non-negative offset or size from C (`EINVAL` for a negative one).
fn unsigned(value: i64, what: &str) -> Result<u64> {
    u64::try_from(value).map_err(|_| einval(format!("foliocache: a negative {what} ({value})")))
}

/// Applies one byte-count option, unless it is 0 (the default).
fn option(
    builder: CacheBuilder,
    bytes: u64,
    set: fn(CacheBuilder, usize) -> CacheBuilder,
) -> Result<CacheBuilder> {
    if bytes == 0 {
        return Ok(builder);
    }
    let bytes = usize::try_from(bytes)
        .map_err(|_| einval(format!("foliocache: {bytes} bytes do not fit in memory")))?;
    Ok(set(builder, bytes))
}

/// Before a fork: takes every table's locks (`handle::at_fork`).
extern "C" fn lock_tables_for_fork() {
    CACHES.lock_for_fork();
    FILES.lock_for_fork();
}

/// Builds a cache from options and gives it a handle.
fn new_cache(o: &CacheOptions) -> Result<i64> {
    handle::check_not_forked()?;
    // Before the first handle: every other is opened through a cache.
    handle::at_fork(lock_tables_for_fork)?;
    if o.flags & !FC_CACHE_FLAGS != 0 {
        return Err(einval(format!(
            "foliocache: unknown cache flags {:#x}",
            o.flags & !FC_CACHE_FLAGS
        )));
    }
    let mut b = Cache::builder();
    b = option(b, o.capacity, CacheBuilder::capacity)?;
    b = option(b, o.max_folio_size, CacheBuilder::max_folio_size)?;
    b = option(b, o.dirty_limit, CacheBuilder::dirty_limit)?;
    b = option(b, o.dirty_background, CacheBuilder::dirty_background)?;
    b = option(b, o.shadow_budget, CacheBuilder::shadow_budget)?;
    if o.flags & FC_CACHE_POPULATE_EAGER != 0 {
        b = b.populate(Populate::Eager);
    }
    if o.flags & FC_CACHE_NO_HUGE_PAGES != 0 {
        b = b.huge_pages(false);
    }
    if o.flags & FC_CACHE_NO_PRESSURE != 0 {
        b = b.pressure(PressureConfig::off());
    }
    CACHES.insert(b.build()?)
}

/// `fc_cache_new`: a cache of `capacity` bytes (0: the default), with
/// every other option at its default. Returns its handle, or -1 with
/// `errno` set.
#[no_mangle]
pub extern "C" fn fc_cache_new(capacity: u64) -> i64 {
    call(-1, || {
        new_cache(&CacheOptions {
            capacity,
            ..CacheOptions::default()
        })
    })
}

/// `fc_cache_new_with`: a cache built with `opts` (NULL: every default).
/// Returns its handle, or -1 with `errno` set.
///
/// # Safety
/// `opts` is NULL, or points to a `struct fc_cache_options` whose `size`
/// bytes are readable and not written during the call.
#[no_mangle]
pub unsafe extern "C" fn fc_cache_new_with(opts: *const CacheOptions) -> i64 {
    call(-1, || {
        let o = if opts.is_null() {
            CacheOptions::default()
        } else {
            // SAFETY: the caller's promise.
            unsafe { read_in(opts) }?
        };
        new_cache(&o)
    })
}

/// `fc_cache_destroy`: closes a cache handle. Files open under it keep
/// working, and its memory goes when the last of them is closed.
#[no_mangle]
pub extern "C" fn fc_cache_destroy(cache: i64) -> c_int {
    call(-1, || {
        drop(CACHES.remove(cache)?);
        Ok(0)
    })
}

/// `fc_cache_sync_all`: writes back and syncs every open file of a cache.
#[no_mangle]
pub extern "C" fn fc_cache_sync_all(cache: i64) -> c_int {
    call(-1, || {
        CACHES.get(cache)?.sync_all()?;
        Ok(0)
    })
}

/// `fc_cache_stats`: fills `out` with a cache's figures.
///
/// # Safety
/// `out` is NULL, or points to a `struct fc_cache_stats` whose `size`
/// bytes are writable and not otherwise accessed during the call.
#[no_mangle]
pub unsafe extern "C" fn fc_cache_stats(cache: i64, out: *mut CacheStats) -> c_int {
    call(-1, || {
        let stats = CacheStats::from(CACHES.get(cache)?.stats());
        // SAFETY: the caller's promise.
        unsafe { write_out(out, stats) }?;
        Ok(0)
    })
}

/// The `open(2)` flags `fc_open` takes: the access mode, creation and
/// truncation, append; `O_CLOEXEC` and `O_DIRECT` are what the cache does
/// anyway.
const OPEN_FLAGS: c_int = libc::O_ACCMODE
    | libc::O_CREAT
    | libc::O_EXCL
    | libc::O_TRUNC
    | libc::O_APPEND
    | libc::O_CLOEXEC
    | libc::O_DIRECT
    | libc::O_LARGEFILE;

/// Refuses what is at `path` unless it is a regular file (or nothing yet,
/// for `O_CREAT` to make one): a directory is `EISDIR`, anything else
/// (a FIFO, a socket, a device) `EINVAL`, with a message that names it.
/// The backing's open checks again what it opened (with `O_NONBLOCK`, so
/// that a FIFO swapped in meanwhile cannot block it).
fn regular_file(path: &Path) -> Result<()> {
    let kind = match std::fs::metadata(path) {
        Ok(md) => md.file_type(),
        // The open reports it (ENOENT, EACCES, ...), or creates the file.
        Err(_) => return Ok(()),
    };
    if kind.is_file() {
        return Ok(());
    }
    if kind.is_dir() {
        return Err(Error::new(
            libc::EISDIR,
            format!("foliocache: {} is a directory", path.display()),
        ));
    }
    let what = if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() {
        "a block device"
    } else {
        "a character device"
    };
    Err(einval(format!(
        "foliocache: {} is {what}: only regular files are cached",
        path.display()
    )))
}

/// Opens `path` under `cache` with `open(2)`'s flags and mode.
fn open(cache: i64, path: &Path, flags: c_int, mode: c_uint) -> Result<i64> {
    if flags & !OPEN_FLAGS != 0 {
        return Err(einval(format!(
            "foliocache: unsupported open flags {:#o}",
            flags & !OPEN_FLAGS
        )));
    }
    let (read, write) = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => (true, false),
        libc::O_WRONLY => (false, true),
        libc::O_RDWR => (true, true),
        _ => return Err(einval("foliocache: an invalid access mode")),
    };
    let create = flags & libc::O_CREAT != 0;
    let exclusive = flags & libc::O_EXCL != 0;
    if exclusive && !create {
        return Err(einval("foliocache: O_EXCL without O_CREAT"));
    }
    if mode & !0o7777 != 0 {
        return Err(einval(format!("foliocache: an invalid mode {mode:#o}")));
    }
    let cache = CACHES.get(cache)?;
    regular_file(path)?;
    let mut options = cache.open_options();
    options
        .read(read)
        .write(write)
        .append(flags & libc::O_APPEND != 0)
        .truncate(flags & libc::O_TRUNC != 0)
        .create(create && !exclusive)
        .create_new(exclusive)
        .mode(mode);
    FILES.insert(options.open(path)?)
}

/// `fc_open`: opens `path` through `cache` as `open(2)` would with
/// `flags` and `mode`. Returns the file's handle, or -1 with `errno` set.
///
/// # Safety
/// `path` is NULL, or points to a NUL-terminated string, readable and not
/// written during the call.
#[no_mangle]
pub unsafe extern "C" fn fc_open(
    cache: i64,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> i64 {
    call(-1, || {
        if path.is_null() {
            return Err(Error::new(libc::EFAULT, "foliocache: a NULL path"));
        }
        // SAFETY: `path` is a NUL-terminated string (the caller's promise).
        let path = unsafe { CStr::from_ptr(path) };
        open(
            cache,
            Path::new(OsStr::from_bytes(path.to_bytes())),
            flags,
            mode,
        )
    })
}

/// `fc_close`: closes a file handle. Its dirty data is written back as it
/// goes (once no other call is using it); an error doing so is kept for
/// the file's next sync, not returned here.
#[no_mangle]
pub extern "C" fn fc_close(file: i64) -> c_int {
    call(-1, || {
        drop(FILES.remove(file)?);
        Ok(0)
    })
}

/// The arguments of a positioned read or write, checked: the file of the
/// handle, the buffer's length (it fits a slice, and the buffer is
/// non-NULL unless empty) and the offset.
fn io_args(
    file: i64,
    buf: *const c_void,
    count: usize,
    offset: i64,
) -> Result<(Arc<File>, usize, u64)> {
    if count > isize::MAX as usize {
        return Err(einval(format!("foliocache: a count of {count} bytes")));
    }
    if buf.is_null() && count > 0 {
        return Err(Error::new(libc::EFAULT, "foliocache: a NULL buffer"));
    }
    let offset = unsigned(offset, "offset")?;
    Ok((FILES.get(file)?, count, offset))
}

/// `fc_pread`: reads up to `count` bytes at `offset` into `buf`, as
/// `pread(2)`: short only at end of file, 0 at or past it. Returns the
/// bytes read, or -1 with `errno` set.
///
/// # Safety
/// `buf` is valid for writes of `count` bytes and not otherwise accessed
/// during the call (NULL only with a count of 0).
#[no_mangle]
pub unsafe extern "C" fn fc_pread(file: i64, buf: *mut c_void, count: usize, offset: i64) -> isize {
    call(-1, || {
        let (file, count, offset) = io_args(file, buf, count, offset)?;
        let buf: &mut [u8] = if count == 0 {
            &mut []
        } else {
            // SAFETY: `buf` is non-NULL, valid for writes of `count`
            // bytes and not otherwise accessed (the caller's promise);
            // `count` is at most `isize::MAX`.
            unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), count) }
        };
        // At most `count`, which is at most `isize::MAX`.
        Ok(file.read_at(buf, offset)? as isize)
    })
}

/// `fc_pwrite`: writes the `count` bytes at `buf` at `offset`, as
/// `pwrite(2)` but never short. Returns `count`, or -1 with `errno` set.
///
/// # Safety
/// `buf` is valid for reads of `count` bytes and not written during the
/// call (NULL only with a count of 0).
#[no_mangle]
pub unsafe extern "C" fn fc_pwrite(
    file: i64,
    buf: *const c_void,
    count: usize,
    offset: i64,
) -> isize {
    call(-1, || {
        let (file, count, offset) = io_args(file, buf, count, offset)?;
        let buf: &[u8] = if count == 0 {
            &[]
        } else {
            // SAFETY: `buf` is non-NULL, valid for reads of `count` bytes
            // and not written during the call (the caller's promise);
            // `count` is at most `isize::MAX`.
            unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), count) }
        };
        // At most `count`, which is at most `isize::MAX`.
        Ok(file.write_at(buf, offset)? as isize)
    })
}

/// Runs `op` on the file of a handle; 0, or -1 with `errno` set.
fn on_file(file: i64, op: impl FnOnce(&File) -> Result<()>) -> c_int {
    call(-1, || {
        op(&*FILES.get(file)?)?;
        Ok(0)
    })
}

/// `fc_fsync`: writes the file's dirty data back and makes it and the
/// file's metadata durable, as `fsync(2)`.
#[no_mangle]
pub extern "C" fn fc_fsync(file: i64) -> c_int {
    on_file(file, |f| Ok(f.sync_all()?))
}

/// `fc_fdatasync`: writes the file's dirty data back and makes it durable
/// with the metadata needed to read it, as `fdatasync(2)`.
#[no_mangle]
pub extern "C" fn fc_fdatasync(file: i64) -> c_int {
    on_file(file, |f| Ok(f.sync_data()?))
}

/// `fc_ftruncate`: sets the file's size, as `ftruncate(2)`.
#[no_mangle]
pub extern "C" fn fc_ftruncate(file: i64, size: i64) -> c_int {
    on_file(file, |f| Ok(f.set_len(unsigned(size, "size")?)?))
}

/// `fc_punch_hole`: deallocates `len` bytes at `offset`, keeping the
/// size, as `fallocate(2)` with `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`.
#[no_mangle]
pub extern "C" fn fc_punch_hole(file: i64, offset: i64, len: i64) -> c_int {
    on_file(file, |f| {
        Ok(f.punch_hole(unsigned(offset, "offset")?, unsigned(len, "length")?)?)
    })
}

/// `fc_collapse_range`: removes `len` bytes at `offset`, moving the data
/// after them down, as `fallocate(2)` with `FALLOC_FL_COLLAPSE_RANGE`.
#[no_mangle]
pub extern "C" fn fc_collapse_range(file: i64, offset: i64, len: i64) -> c_int {
    on_file(file, |f| {
        Ok(f.collapse_range(unsigned(offset, "offset")?, unsigned(len, "length")?)?)
    })
}

/// `fc_insert_range`: inserts a hole of `len` bytes at `offset`, moving
/// the data from there up, as `fallocate(2)` with
/// `FALLOC_FL_INSERT_RANGE`.
#[no_mangle]
pub extern "C" fn fc_insert_range(file: i64, offset: i64, len: i64) -> c_int {
    on_file(file, |f| {
        Ok(f.insert_range(unsigned(offset, "offset")?, unsigned(len, "length")?)?)
    })
}

/// `fc_size`: the file's size in bytes, or -1 with `errno` set.
#[no_mangle]
pub extern "C" fn fc_size(file: i64) -> i64 {
    call(-1, || {
        let len = FILES.get(file)?.len();
        i64::try_from(len).map_err(|_| Error::new(libc::EOVERFLOW, "foliocache: a size past i64"))
    })
}

/// The crate's version, NUL-terminated, for `fc_version`.
const VERSION: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(v) => v,
        Err(_) => panic!("the crate's version holds a NUL"),
    };

/// `fc_version`: the library's version, `"MAJOR.MINOR.PATCH"` (the
/// crate's), a static string.
#[no_mangle]
pub extern "C" fn fc_version() -> *const c_char {
    VERSION.as_ptr()
}

/// `fc_last_error`: the message of the calling thread's last failed call
/// (an empty string before one), valid until its next failed call.
#[no_mangle]
pub extern "C" fn fc_last_error() -> *const c_char {
    error::last_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sizes `include/foliocache.h` declares (its C test checks
    /// them too): a field added on one side only fails here or there.
    #[test]
    fn struct_sizes_match_the_header() {
        assert_eq!(std::mem::size_of::<CacheOptions>(), 48);
        assert_eq!(std::mem::size_of::<CacheStats>(), 8 + 24 * 8);
    }

    /// Any option value builds a cache or fails with an error of its own,
    /// never a panic (reported as `EIO`).
    #[test]
    fn extreme_options_are_no_panics() {
        let base = CacheOptions {
            capacity: 1 << 20,
            flags: FC_CACHE_NO_PRESSURE,
            ..CacheOptions::default()
        };
        let fields: [fn(&mut CacheOptions) -> &mut u64; 5] = [
            |o| &mut o.capacity,
            |o| &mut o.max_folio_size,
            |o| &mut o.dirty_limit,
            |o| &mut o.dirty_background,
            |o| &mut o.shadow_budget,
        ];
        for field in fields {
            for value in [1, 4095, 4097, u64::MAX / 2, u64::MAX] {
                let mut o = base;
                *field(&mut o) = value;
                let r = call(-2, || new_cache(&o));
                if r > 0 {
                    assert_eq!(fc_cache_destroy(r), 0);
                } else {
                    let errno = std::io::Error::last_os_error().raw_os_error();
                    assert_ne!(errno, Some(libc::EIO), "{o:?}");
                }
            }
        }
    }

    #[test]
    fn the_version_is_the_crates() {
        // SAFETY: `fc_version` returns a static NUL-terminated string.
        let v = unsafe { CStr::from_ptr(fc_version()) };
        assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn stats_mirror_the_rust_api() {
        let cache = Cache::builder().capacity(1 << 20).build().unwrap();
        let s = CacheStats::from(cache.stats());
        assert_eq!(s.capacity_bytes, 1 << 20);
        assert_eq!(s.free_bytes, 1 << 20);
        assert_eq!((s.size, s.reserved, s.hits), (0, 0, 0));
    }
}
