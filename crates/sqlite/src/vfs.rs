//! The VFS's C side: the `sqlite3_vfs` and `sqlite3_io_methods` tables
//! SQLite calls, each entry a thin `extern "C"` function over the safe
//! parts ([`Fetched`], [`Inode`], foliocache's [`File`]).
//!
//! # Which files go through foliocache
//! ```text
//!   xOpen(flags)
//!     MAIN_DB (with a name)              ──> FcFile: foliocache File + lock table
//!     anything else (the rollback journal, temp databases and journals,
//!     statement journals, super-journals, WAL)
//!                                        ──> the default VFS's xOpen, into the same memory
//! ```
//! The rollback journal gains nothing from a cache: SQLite writes it once
//! per transaction, syncs it, and deletes (or truncates) it at commit; it
//! is read back only to roll back a hot journal. Through foliocache, each
//! transaction paid a file open through the cache (`O_DIRECT`), space
//! reservation and a writeback of the journal's folios before its
//! `fdatasync`; through `unix` it is a buffered write and an `fdatasync`,
//! and its durability (the directory `fsync`ed at the journal's first
//! sync) is that VFS's own. Measured in
//! docs/measurements/2026-11-26-embedded-databases-2.md.
//! A file handed to the default VFS gets that VFS's methods (SQLite calls
//! them directly); `szOsFile` is the larger of the two so both fit. The
//! VFS-level calls that are not about one file (`xDelete`, `xAccess`,
//! `xFullPathname`, randomness, time, sleep, shared libraries) are the
//! default VFS's, called with its own `sqlite3_vfs`, except that the
//! existence of an open database's journal and WAL is answered from
//! memory once known (`sidecar.rs`), and kept known by `xOpen` and
//! `xDelete`.
//!
//! # Memory
//! SQLite allocates `szOsFile` bytes per open file and calls `xOpen` on
//! them; an [`FcFile`] there points at a boxed [`FileState`], freed by
//! `xClose`. A VFS's table and state are never freed (a connection closed
//! late may still call its VFS-level methods): [`unregister`] takes it out
//! of SQLite's list and drops its cache, once no file of it is open, and
//! leaves the few bytes of the table behind, whose `xOpen` then fails.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use foliocache::{Cache, File};
use rusqlite::ffi;

use crate::fetch::Fetched;
use crate::lock::{Inode, Inodes, Level};
use crate::sidecar::{Lookup, Sidecars};

/// The sector size the VFS reports: foliocache's page.
const SECTOR: c_int = 4096;

/// What the VFS keeps (`sqlite3_vfs::pAppData`).
struct VfsState {
    /// `None` once unregistered.
    cache: Mutex<Option<Cache>>,
    /// Files of its own open now (not those handed to the base VFS).
    open_files: AtomicUsize,
    /// The default VFS when this one was registered (`unix` on Linux).
    base: *mut ffi::sqlite3_vfs,
    inodes: Inodes,
    /// Whether the open databases' journals and WALs exist.
    sidecars: Sidecars,
    /// Numbers the files opened, for the lock tables.
    next_conn: AtomicU64,
}

/// SQLite's file object, as the VFS lays it out in the `szOsFile` bytes
/// SQLite gives `xOpen`.
#[repr(C)]
struct FcFile {
    base: ffi::sqlite3_file,
    state: *mut FileState,
}

/// One open file of the VFS's own.
struct FileState {
    /// Its VFS (leaked: lives for the process).
    vfs: &'static VfsState,
    fetched: Fetched,
    /// The database's lock table.
    inode: Arc<Inode>,
    /// This file's number in the lock table.
    conn: u64,
    /// Its lock level.
    level: Mutex<Level>,
    /// Removed at close (`SQLITE_OPEN_DELETEONCLOSE`).
    delete_on_close: Option<PathBuf>,
    /// `PRAGMA mmap_size` as SQLite last set it (`SQLITE_FCNTL_MMAP_SIZE`).
    mmap_size: Mutex<i64>,
}

impl FileState {
    fn file(&self) -> &File {
        self.fetched.file()
    }
}

/// Registers a VFS named `name` over `cache`; see the crate documentation.
pub(crate) fn register(name: &str, cache: Cache, make_default: bool) -> io::Result<()> {
    register_on(name, cache, make_default, None)
}

/// [`register`], over `base` (a registered VFS) rather than SQLite's
/// default VFS where given.
fn register_on(
    name: &str,
    cache: Cache,
    make_default: bool,
    base: Option<*mut ffi::sqlite3_vfs>,
) -> io::Result<()> {
    static REGISTERING: Mutex<()> = Mutex::new(());
    let _one = REGISTERING.lock().unwrap_or_else(|e| e.into_inner());
    let cname = CString::new(name).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a VFS name cannot contain a NUL byte",
        )
    })?;
    // SAFETY: `sqlite3_initialize` may be called at any time, from any
    // thread; it is a no-op once SQLite is initialised.
    let rc = unsafe { ffi::sqlite3_initialize() };
    if rc != ffi::SQLITE_OK {
        return Err(io::Error::other(format!("sqlite3_initialize failed: {rc}")));
    }
    // SAFETY: a NUL-terminated name; `sqlite3_vfs_find` only reads it.
    if !unsafe { ffi::sqlite3_vfs_find(cname.as_ptr()) }.is_null() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("a SQLite VFS named {name:?} is registered already"),
        ));
    }
    // SAFETY: a null name asks for the default VFS.
    let base = base.unwrap_or_else(|| unsafe { ffi::sqlite3_vfs_find(std::ptr::null()) });
    if base.is_null() {
        return Err(io::Error::other("SQLite has no default VFS to build on"));
    }
    // SAFETY: `base` is a registered VFS, which SQLite never frees.
    let (base_sz, base_path) = unsafe { ((*base).szOsFile, (*base).mxPathname) };
    let state = Box::into_raw(Box::new(VfsState {
        cache: Mutex::new(Some(cache)),
        open_files: AtomicUsize::new(0),
        base,
        inodes: Inodes::default(),
        sidecars: Sidecars::default(),
        next_conn: AtomicU64::new(1),
    }));
    let vfs = Box::into_raw(Box::new(ffi::sqlite3_vfs {
        iVersion: 2,
        szOsFile: base_sz.max(std::mem::size_of::<FcFile>() as c_int),
        mxPathname: base_path,
        pNext: std::ptr::null_mut(),
        // Leaked with the VFS: SQLite keeps the pointer.
        zName: cname.into_raw(),
        pAppData: state.cast(),
        xOpen: Some(x_open),
        xDelete: Some(x_delete),
        xAccess: Some(x_access),
        xFullPathname: Some(x_full_pathname),
        xDlOpen: Some(x_dl_open),
        xDlError: Some(x_dl_error),
        xDlSym: Some(x_dl_sym),
        xDlClose: Some(x_dl_close),
        xRandomness: Some(x_randomness),
        xSleep: Some(x_sleep),
        xCurrentTime: Some(x_current_time),
        xGetLastError: Some(x_get_last_error),
        xCurrentTimeInt64: Some(x_current_time_int64),
        xSetSystemCall: None,
        xGetSystemCall: None,
        xNextSystemCall: None,
    }));
    // SAFETY: `vfs` is a complete table that lives for the rest of the
    // process (leaked), as SQLite requires of a registered VFS.
    let rc = unsafe { ffi::sqlite3_vfs_register(vfs, c_int::from(make_default)) };
    if rc != ffi::SQLITE_OK {
        return Err(io::Error::other(format!(
            "sqlite3_vfs_register failed: {rc}"
        )));
    }
    ours().push((name.to_string(), Ours(vfs)));
    Ok(())
}

/// A VFS [`register`] made (the pointer, leaked, lives for the process).
struct Ours(*mut ffi::sqlite3_vfs);

// SAFETY: the pointer is only compared and handed to SQLite's thread-safe
// registration calls; its `VfsState` is `Sync` in what it shares (a
// mutex, atomics, the base VFS's immutable table).
unsafe impl Send for Ours {}

/// The VFSs registered and not unregistered, by name.
fn ours() -> std::sync::MutexGuard<'static, Vec<(String, Ours)>> {
    static OURS: Mutex<Vec<(String, Ours)>> = Mutex::new(Vec::new());
    OURS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes the VFS named `name` out of SQLite's list and drops its cache;
/// see the crate documentation.
pub(crate) fn unregister(name: &str) -> io::Result<()> {
    let mut ours = ours();
    let Some(at) = ours.iter().position(|(n, _)| n == name) else {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no VFS named {name:?} was registered by foliocache_sqlite::register"),
        ));
    };
    let vfs = ours[at].1 .0;
    // SAFETY: a VFS `register` made, never freed.
    let st = unsafe { vfs_state(vfs) };
    let mut cache = st.cache.lock().unwrap_or_else(|e| e.into_inner());
    let open = st.open_files.load(Ordering::Acquire);
    if open > 0 {
        return Err(io::Error::new(
            io::ErrorKind::ResourceBusy,
            format!("the VFS {name:?} has {open} files open: close its connections first"),
        ));
    }
    // SAFETY: a registered VFS; SQLite only unlinks it from its list.
    unsafe { ffi::sqlite3_vfs_unregister(vfs) };
    *cache = None;
    ours.remove(at);
    Ok(())
}

/// Runs a callback's body, turning a panic into `SQLITE_IOERR` (a panic
/// must not unwind into SQLite's C frames).
fn guard(f: impl FnOnce() -> c_int) -> c_int {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(ffi::SQLITE_IOERR)
}

/// The VFS's state.
///
/// # Safety
/// `vfs` is a VFS that [`register`] made.
unsafe fn vfs_state(vfs: *mut ffi::sqlite3_vfs) -> &'static VfsState {
    // SAFETY: `register` set `pAppData` to a leaked `VfsState`, never
    // freed.
    unsafe { &*(*vfs).pAppData.cast::<VfsState>() }
}

/// The base VFS's table.
///
/// # Safety
/// As [`vfs_state`].
unsafe fn base<'a>(vfs: *mut ffi::sqlite3_vfs) -> (&'a ffi::sqlite3_vfs, *mut ffi::sqlite3_vfs) {
    // SAFETY: the base VFS is registered, so it lives for the process.
    unsafe {
        let b = vfs_state(vfs).base;
        (&*b, b)
    }
}

/// The state of a file that `x_open` opened.
///
/// # Safety
/// `file` is an `FcFile` that `x_open` filled and `x_close` has not
/// closed (SQLite calls our methods only on such files).
unsafe fn file_state<'a>(file: *mut ffi::sqlite3_file) -> Option<&'a FileState> {
    // SAFETY: per the contract, `file` points at an `FcFile` whose `state`
    // is a live box or null.
    unsafe { (*file.cast::<FcFile>()).state.as_ref() }
}

/// The SQLite code for an IO error of `op` (`SQLITE_FULL` for a full disk).
fn io_code(e: &io::Error, op: c_int) -> c_int {
    if e.raw_os_error() == Some(libc::ENOSPC) || e.kind() == io::ErrorKind::StorageFull {
        ffi::SQLITE_FULL
    } else {
        op
    }
}

static IO_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    // No shared memory: WAL is refused (see the crate documentation).
    xShmMap: None,
    xShmLock: None,
    xShmBarrier: None,
    xShmUnmap: None,
    xFetch: Some(x_fetch),
    xUnfetch: Some(x_unfetch),
};

/// Opens a database through the cache, anything else (its journal among
/// them) through the base VFS.
unsafe extern "C" fn x_open(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // The database only: see the module documentation for the journal.
    let ours = flags & ffi::SQLITE_OPEN_MAIN_DB != 0;
    if !ours || name.is_null() {
        // SAFETY: SQLite's arguments, passed on; `file` has `szOsFile`
        // bytes, at least the base VFS's.
        let rc = unsafe {
            let (b, bp) = base(vfs);
            match b.xOpen {
                Some(open) => open(bp, name, file, flags, out_flags),
                None => ffi::SQLITE_CANTOPEN,
            }
        };
        if !name.is_null() {
            // SAFETY: SQLite's NUL-terminated name, live through the call;
            // the VFS is ours.
            let (n, st) = unsafe { (CStr::from_ptr(name).to_bytes(), vfs_state(vfs)) };
            if rc == ffi::SQLITE_OK && flags & ffi::SQLITE_OPEN_DELETEONCLOSE == 0 {
                st.sidecars.created(n);
            } else {
                // Failed (it may or may not be there), or to go at close
                // without our `xDelete`.
                st.sidecars.unknown(n);
            }
        }
        return rc;
    }
    // SAFETY: `file` points at `szOsFile` writable bytes; until xOpen
    // succeeds SQLite reads only `pMethods`, null here.
    unsafe {
        (*file).pMethods = std::ptr::null();
        (*file.cast::<FcFile>()).state = std::ptr::null_mut();
    }
    // SAFETY: SQLite passes a NUL-terminated name that lives through the
    // call; the VFS is ours.
    let (path, st) = unsafe {
        (
            PathBuf::from(std::ffi::OsStr::from_bytes(CStr::from_ptr(name).to_bytes())),
            vfs_state(vfs),
        )
    };
    let rc = guard(|| match open_state(st, &path, flags) {
        Ok(fs) => {
            let fs = Box::into_raw(Box::new(fs));
            // SAFETY: as above; the box is freed by `x_close`.
            unsafe {
                (*file.cast::<FcFile>()).state = fs;
                (*file).pMethods = &IO_METHODS;
            }
            ffi::SQLITE_OK
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            log_error(ffi::SQLITE_BUSY, &e.to_string());
            ffi::SQLITE_BUSY
        }
        Err(e) => {
            log_error(ffi::SQLITE_CANTOPEN, &format!("{}: {e}", path.display()));
            ffi::SQLITE_CANTOPEN
        }
    });
    if rc == ffi::SQLITE_OK && !out_flags.is_null() {
        // SAFETY: SQLite's out-parameter, when not null.
        unsafe { *out_flags = flags };
    }
    rc
}

/// Reports `msg` through SQLite's error log (`SQLITE_CONFIG_LOG`).
fn log_error(code: c_int, msg: &str) {
    if let Ok(m) = CString::new(format!("foliocache VFS: {msg}")) {
        // SAFETY: a "%s" format with one NUL-terminated string argument.
        unsafe { ffi::sqlite3_log(code, c"%s".as_ptr(), m.as_ptr()) };
    }
}

/// Opens `path` through the cache as SQLite's `flags` ask.
fn open_state(st: &'static VfsState, path: &Path, flags: c_int) -> io::Result<FileState> {
    let write = flags & ffi::SQLITE_OPEN_READWRITE != 0;
    let create = flags & ffi::SQLITE_OPEN_CREATE != 0;
    let exclusive = flags & ffi::SQLITE_OPEN_EXCLUSIVE != 0;
    let cache = st.cache.lock().unwrap_or_else(|e| e.into_inner());
    let Some(cache) = cache.as_ref() else {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "the foliocache VFS was unregistered",
        ));
    };
    let file = cache
        .open_options()
        .read(true)
        .write(write)
        .create(write && create && !exclusive)
        .create_new(write && create && exclusive)
        .open(path)?;
    let md = std::fs::metadata(path)?;
    let inode = st.inodes.get((md.dev(), md.ino()), path)?;
    st.sidecars.opened(path.as_os_str().as_bytes(), &inode);
    // Counted under the cache's lock: `unregister` sees it.
    st.open_files.fetch_add(1, Ordering::AcqRel);
    Ok(FileState {
        vfs: st,
        fetched: Fetched::new(file),
        inode,
        conn: st.next_conn.fetch_add(1, Ordering::Relaxed),
        level: Mutex::new(Level::None),
        delete_on_close: (flags & ffi::SQLITE_OPEN_DELETEONCLOSE != 0).then(|| path.to_path_buf()),
        mmap_size: Mutex::new(0),
    })
}

unsafe extern "C" fn x_close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite closes a file `x_open` opened, once.
    let fc = unsafe { &mut *file.cast::<FcFile>() };
    let state = std::mem::replace(&mut fc.state, std::ptr::null_mut());
    if state.is_null() {
        return ffi::SQLITE_OK;
    }
    // SAFETY: made by `Box::into_raw` in `x_open`, taken once (nulled).
    let state = unsafe { Box::from_raw(state) };
    guard(move || {
        {
            let mut level = state.level.lock().unwrap_or_else(|e| e.into_inner());
            *level = state.inode.unlock(state.conn, *level, Level::None);
        }
        let delete = state.delete_on_close.clone();
        let vfs = state.vfs;
        // The last handle writes its dirty data back (`File`'s drop).
        drop(state);
        vfs.open_files.fetch_sub(1, Ordering::AcqRel);
        if let Some(p) = delete {
            let _ = std::fs::remove_file(p);
        }
        ffi::SQLITE_OK
    })
}

/// Runs `f` on the file's state; `SQLITE_IOERR` for a file with none.
///
/// # Safety
/// As [`file_state`].
unsafe fn with_file(file: *mut ffi::sqlite3_file, f: impl FnOnce(&FileState) -> c_int) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { file_state(file) } {
        Some(s) => guard(|| f(s)),
        None => ffi::SQLITE_IOERR,
    }
}

unsafe extern "C" fn x_read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amt: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    let (Ok(len), Ok(at)) = (usize::try_from(amt), u64::try_from(offset)) else {
        return ffi::SQLITE_IOERR_READ;
    };
    // SAFETY: SQLite passes `amt` writable bytes at `buf`, and a file of ours.
    unsafe {
        let out = std::slice::from_raw_parts_mut(buf.cast::<u8>(), len);
        with_file(file, |s| {
            let mut done = 0;
            while done < len {
                match s.file().read_at(&mut out[done..], at + done as u64) {
                    Ok(0) => break,
                    Ok(n) => done += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return ffi::SQLITE_IOERR_READ,
                }
            }
            if done < len {
                // SQLite's rule: a short read zero-fills the rest.
                out[done..].fill(0);
                return ffi::SQLITE_IOERR_SHORT_READ;
            }
            ffi::SQLITE_OK
        })
    }
}

unsafe extern "C" fn x_write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amt: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    let (Ok(len), Ok(at)) = (usize::try_from(amt), u64::try_from(offset)) else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    // SAFETY: SQLite passes `amt` readable bytes at `buf`, and a file of ours.
    unsafe {
        let data = std::slice::from_raw_parts(buf.cast::<u8>(), len);
        with_file(file, |s| match s.file().write_all_at(data, at) {
            Ok(()) => ffi::SQLITE_OK,
            Err(e) => io_code(&e, ffi::SQLITE_IOERR_WRITE),
        })
    }
}

unsafe extern "C" fn x_truncate(file: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    let Ok(size) = u64::try_from(size) else {
        return ffi::SQLITE_IOERR_TRUNCATE;
    };
    // SAFETY: a file of ours.
    unsafe {
        with_file(file, |s| match s.file().set_len(size) {
            Ok(()) => ffi::SQLITE_OK,
            Err(e) => io_code(&e, ffi::SQLITE_IOERR_TRUNCATE),
        })
    }
}

unsafe extern "C" fn x_sync(file: *mut ffi::sqlite3_file, _flags: c_int) -> c_int {
    // SAFETY: a file of ours.
    unsafe {
        with_file(file, |s| {
            if s.file().sync_data().is_err() {
                return ffi::SQLITE_IOERR_FSYNC;
            }
            ffi::SQLITE_OK
        })
    }
}

unsafe extern "C" fn x_file_size(
    file: *mut ffi::sqlite3_file,
    size: *mut ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: a file of ours, and SQLite's out-parameter.
    unsafe {
        with_file(file, |s| match i64::try_from(s.file().len()) {
            Ok(n) => {
                *size = n;
                ffi::SQLITE_OK
            }
            Err(_) => ffi::SQLITE_IOERR_FSTAT,
        })
    }
}

unsafe extern "C" fn x_lock(file: *mut ffi::sqlite3_file, raw: c_int) -> c_int {
    let Some(want) = Level::from_raw(raw) else {
        return ffi::SQLITE_IOERR_LOCK;
    };
    // SAFETY: a file of ours.
    unsafe {
        with_file(file, |s| {
            let mut level = s.level.lock().unwrap_or_else(|e| e.into_inner());
            let (now, r) = s.inode.lock(s.conn, *level, want);
            *level = now;
            match r {
                Ok(()) => ffi::SQLITE_OK,
                Err(_) => ffi::SQLITE_BUSY,
            }
        })
    }
}

unsafe extern "C" fn x_unlock(file: *mut ffi::sqlite3_file, raw: c_int) -> c_int {
    let Some(to) = Level::from_raw(raw) else {
        return ffi::SQLITE_IOERR_UNLOCK;
    };
    // SAFETY: a file of ours.
    unsafe {
        with_file(file, |s| {
            let mut level = s.level.lock().unwrap_or_else(|e| e.into_inner());
            *level = s.inode.unlock(s.conn, *level, to);
            ffi::SQLITE_OK
        })
    }
}

unsafe extern "C" fn x_check_reserved_lock(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    // SAFETY: a file of ours, and SQLite's out-parameter.
    unsafe {
        with_file(file, |s| {
            *out = c_int::from(s.inode.reserved());
            ffi::SQLITE_OK
        })
    }
}

/// The message of a refused `PRAGMA journal_mode=WAL`.
const NO_WAL: &str = "the foliocache VFS does not support WAL (it has no shared-memory methods): \
                      use journal_mode DELETE, TRUNCATE or PERSIST";

unsafe extern "C" fn x_file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: a file of ours; `arg` is what SQLite documents for `op`.
    unsafe {
        with_file(file, |s| match op {
            ffi::SQLITE_FCNTL_PRAGMA => {
                // [error message out, pragma name, argument or null]
                let args = arg.cast::<*mut c_char>();
                let (name, value) = (*args.add(1), *args.add(2));
                let is = |p: *mut c_char, want: &str| {
                    !p.is_null()
                        && CStr::from_ptr(p)
                            .to_bytes()
                            .eq_ignore_ascii_case(want.as_bytes())
                };
                if is(name, "journal_mode") && is(value, "wal") {
                    if let Ok(m) = CString::new(NO_WAL) {
                        *args = ffi::sqlite3_mprintf(c"%s".as_ptr(), m.as_ptr());
                    }
                    return ffi::SQLITE_ERROR;
                }
                ffi::SQLITE_NOTFOUND
            }
            ffi::SQLITE_FCNTL_MMAP_SIZE => {
                let p = arg.cast::<i64>();
                let mut size = s.mmap_size.lock().unwrap_or_else(|e| e.into_inner());
                let new = *p;
                *p = *size;
                if new >= 0 {
                    *size = new;
                }
                ffi::SQLITE_OK
            }
            _ => ffi::SQLITE_NOTFOUND,
        })
    }
}

unsafe extern "C" fn x_sector_size(_file: *mut ffi::sqlite3_file) -> c_int {
    SECTOR
}

unsafe extern "C" fn x_device_characteristics(_file: *mut ffi::sqlite3_file) -> c_int {
    // As the `unix` VFS on an ordinary filesystem.
    ffi::SQLITE_IOCAP_POWERSAFE_OVERWRITE
}

unsafe extern "C" fn x_fetch(
    file: *mut ffi::sqlite3_file,
    offset: ffi::sqlite3_int64,
    amt: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: SQLite's out-parameter.
    unsafe { *out = std::ptr::null_mut() };
    let Ok(len) = usize::try_from(amt) else {
        return ffi::SQLITE_OK;
    };
    // SAFETY: a file of ours, and SQLite's out-parameter.
    unsafe {
        with_file(file, |s| {
            // A failed pin is a decline: SQLite reads with xRead, which
            // reports the error.
            if let Ok(Some(p)) = s.fetched.fetch(offset, len) {
                // SQLite only reads through it (as it reads a read-only
                // mmap), until `x_unfetch`.
                *out = p.cast_mut().cast();
            }
            ffi::SQLITE_OK
        })
    }
}

unsafe extern "C" fn x_unfetch(
    file: *mut ffi::sqlite3_file,
    offset: ffi::sqlite3_int64,
    p: *mut c_void,
) -> c_int {
    // SAFETY: a file of ours.
    unsafe {
        with_file(file, |s| {
            if s.fetched.unfetch(offset, p.cast_const().cast()) {
                ffi::SQLITE_OK
            } else {
                ffi::SQLITE_IOERR_MMAP
            }
        })
    }
}

// The VFS-level calls: the base VFS's.

unsafe extern "C" fn x_delete(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    sync_dir: c_int,
) -> c_int {
    // SAFETY: SQLite's arguments, passed on to the base VFS.
    let rc = unsafe {
        let (b, bp) = base(vfs);
        b.xDelete
            .map_or(ffi::SQLITE_IOERR_DELETE, |f| f(bp, name, sync_dir))
    };
    if !name.is_null() {
        // SAFETY: SQLite's NUL-terminated name, live through the call; the
        // VFS is ours.
        let (n, st) = unsafe { (CStr::from_ptr(name).to_bytes(), vfs_state(vfs)) };
        match rc {
            ffi::SQLITE_OK | ffi::SQLITE_IOERR_DELETE_NOENT => st.sidecars.deleted(n),
            _ => st.sidecars.unknown(n),
        }
    }
    rc
}

/// Whether a file exists, or may be read or written. The journal and WAL
/// of a database open through the VFS are answered from what the VFS
/// knows of them (`sidecar.rs`), with no system call after the first;
/// anything else is the base VFS's.
unsafe extern "C" fn x_access(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    flags: c_int,
    out: *mut c_int,
) -> c_int {
    let tracked =
        (flags == ffi::SQLITE_ACCESS_EXISTS && !name.is_null() && !out.is_null()).then(|| {
            // SAFETY: SQLite's NUL-terminated name, live through the call;
            // the VFS is ours.
            let (n, st) = unsafe { (CStr::from_ptr(name).to_bytes(), vfs_state(vfs)) };
            (n, st, st.sidecars.exists(n))
        });
    let token = match tracked {
        Some((_, _, Lookup::Known(exists))) => {
            // SAFETY: SQLite's out-parameter, not null.
            unsafe { *out = c_int::from(exists) };
            return ffi::SQLITE_OK;
        }
        Some((n, st, Lookup::Ask(Some(t)))) => Some((n, st, t)),
        _ => None,
    };
    // SAFETY: as `x_delete`.
    let rc = unsafe {
        let (b, bp) = base(vfs);
        b.xAccess
            .map_or(ffi::SQLITE_IOERR_ACCESS, |f| f(bp, name, flags, out))
    };
    if let (ffi::SQLITE_OK, Some((n, st, t))) = (rc, token) {
        // SAFETY: the base VFS set the out-parameter, not null.
        st.sidecars.learned(n, t, unsafe { *out } != 0);
    }
    rc
}

unsafe extern "C" fn x_full_pathname(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    // SAFETY: as `x_delete`.
    unsafe {
        let (b, bp) = base(vfs);
        b.xFullPathname
            .map_or(ffi::SQLITE_CANTOPEN, |f| f(bp, name, n, out))
    }
}

unsafe extern "C" fn x_dl_open(vfs: *mut ffi::sqlite3_vfs, name: *const c_char) -> *mut c_void {
    // SAFETY: as `x_delete`.
    unsafe {
        let (b, bp) = base(vfs);
        b.xDlOpen.map_or(std::ptr::null_mut(), |f| f(bp, name))
    }
}

unsafe extern "C" fn x_dl_error(vfs: *mut ffi::sqlite3_vfs, n: c_int, out: *mut c_char) {
    // SAFETY: as `x_delete`.
    unsafe {
        let (b, bp) = base(vfs);
        if let Some(f) = b.xDlError {
            f(bp, n, out);
        }
    }
}

/// The symbol type `xDlSym` returns.
type DlSym = Option<unsafe extern "C" fn(*mut ffi::sqlite3_vfs, *mut c_void, *const c_char)>;

unsafe extern "C" fn x_dl_sym(
    vfs: *mut ffi::sqlite3_vfs,
    h: *mut c_void,
    sym: *const c_char,
) -> DlSym {
    // SAFETY: as `x_delete`.
    unsafe {
        let (b, bp) = base(vfs);
        b.xDlSym.and_then(|f| f(bp, h, sym))
    }
}

unsafe extern "C" fn x_dl_close(vfs: *mut ffi::sqlite3_vfs, h: *mut c_void) {
    // SAFETY: as `x_delete`.
    unsafe {
        let (b, bp) = base(vfs);
        if let Some(f) = b.xDlClose {
            f(bp, h);
        }
    }
}

unsafe extern "C" fn x_randomness(vfs: *mut ffi::sqlite3_vfs, n: c_int, out: *mut c_char) -> c_int {
    // SAFETY: as `x_delete`.
    unsafe {
        let (b, bp) = base(vfs);
        b.xRandomness.map_or(0, |f| f(bp, n, out))
    }
}

unsafe extern "C" fn x_sleep(vfs: *mut ffi::sqlite3_vfs, micros: c_int) -> c_int {
    // SAFETY: as `x_delete`.
    unsafe {
        let (b, bp) = base(vfs);
        b.xSleep.map_or(0, |f| f(bp, micros))
    }
}

unsafe extern "C" fn x_current_time(vfs: *mut ffi::sqlite3_vfs, out: *mut f64) -> c_int {
    // SAFETY: as `x_delete`.
    unsafe {
        let (b, bp) = base(vfs);
        b.xCurrentTime.map_or(ffi::SQLITE_ERROR, |f| f(bp, out))
    }
}

unsafe extern "C" fn x_get_last_error(
    vfs: *mut ffi::sqlite3_vfs,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    // SAFETY: as `x_delete`.
    unsafe {
        let (b, bp) = base(vfs);
        b.xGetLastError.map_or(0, |f| f(bp, n, out))
    }
}

unsafe extern "C" fn x_current_time_int64(
    vfs: *mut ffi::sqlite3_vfs,
    out: *mut ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: as `x_delete`; the base VFS's `iVersion` says whether it
    // has the call.
    unsafe {
        let (b, bp) = base(vfs);
        match b.xCurrentTimeInt64 {
            Some(f) if b.iVersion >= 2 => f(bp, out),
            _ => ffi::SQLITE_ERROR,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::{c_char, c_int, CStr};
    use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

    use rusqlite::{Connection, OpenFlags};

    use super::{ffi, vfs_state};

    /// The foliocache files of the VFS named `name` open now.
    fn open_files(name: &std::ffi::CStr) -> usize {
        // SAFETY: a NUL-terminated name; `sqlite3_vfs_find` only reads it.
        let vfs = unsafe { ffi::sqlite3_vfs_find(name.as_ptr()) };
        assert!(!vfs.is_null(), "the VFS is registered");
        // SAFETY: a VFS that `register` made (the name is this test's).
        unsafe { vfs_state(vfs) }.open_files.load(Ordering::Acquire)
    }

    #[test]
    fn the_rollback_journal_goes_to_the_base_vfs_and_rolls_back() {
        let cache = foliocache::Cache::builder()
            .capacity(4 << 20)
            .build()
            .unwrap();
        crate::register("foliocache-journal-test", &cache).unwrap();
        let tmp = test_support::TempPath::new("journal");
        let mut journal = tmp.path.clone().into_os_string();
        journal.push("-journal");
        let c = Connection::open_with_flags_and_vfs(
            &tmp.path,
            OpenFlags::default(),
            "foliocache-journal-test",
        )
        .unwrap();
        c.execute_batch(
            "PRAGMA journal_mode=DELETE;
             CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);
             INSERT INTO t VALUES (1, 'one');",
        )
        .unwrap();
        c.execute_batch("BEGIN; UPDATE t SET b = 'two' WHERE a = 1;")
            .unwrap();
        // In the transaction: the journal holds the original page, written
        // through `unix` (so on disk at once), and only the database is a
        // foliocache file.
        let on_disk = std::fs::metadata(&journal).map(|m| m.len()).unwrap_or(0);
        assert!(on_disk > 0, "the journal is written through unix");
        assert_eq!(
            open_files(c"foliocache-journal-test"),
            1,
            "the database only"
        );
        c.execute_batch("ROLLBACK").unwrap();
        let b: String = c.query_row("SELECT b FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(b, "one", "rolled back from the journal");
        assert!(std::fs::metadata(&journal).is_err(), "deleted at the end");
        drop(c);
        crate::unregister("foliocache-journal-test").unwrap();
    }

    /// The `unix` VFS, and the sidecar checks made through a copy of it.
    static UNIX: AtomicPtr<ffi::sqlite3_vfs> = AtomicPtr::new(std::ptr::null_mut());
    static SIDECAR_CHECKS: AtomicUsize = AtomicUsize::new(0);

    /// `unix`'s `xAccess`, counting the checks of journals and WALs.
    unsafe extern "C" fn counting_access(
        _vfs: *mut ffi::sqlite3_vfs,
        name: *const c_char,
        flags: c_int,
        out: *mut c_int,
    ) -> c_int {
        // SAFETY: SQLite's NUL-terminated name.
        let n = unsafe { CStr::from_ptr(name) }.to_bytes();
        if n.ends_with(b"-journal") || n.ends_with(b"-wal") {
            SIDECAR_CHECKS.fetch_add(1, Ordering::Relaxed);
        }
        let unix = UNIX.load(Ordering::Acquire);
        // SAFETY: `unix` is the registered `unix` VFS; SQLite's arguments.
        unsafe { ((*unix).xAccess.unwrap())(unix, name, flags, out) }
    }

    #[test]
    fn read_transactions_check_the_journal_and_wal_once_then_from_memory() {
        // A copy of `unix` that counts its sidecar checks, as the base.
        // SAFETY: a registered VFS, never freed.
        let unix = unsafe { ffi::sqlite3_vfs_find(c"unix".as_ptr()) };
        assert!(!unix.is_null());
        UNIX.store(unix, Ordering::Release);
        // SAFETY: `unix` is a complete table; the copy is leaked, as a
        // base VFS lives for the process.
        let counting = Box::into_raw(Box::new(ffi::sqlite3_vfs {
            xAccess: Some(counting_access),
            pNext: std::ptr::null_mut(),
            ..unsafe { std::ptr::read(unix) }
        }));
        let cache = foliocache::Cache::builder()
            .capacity(4 << 20)
            .build()
            .unwrap();
        super::register_on("foliocache-sidecar-test", cache, false, Some(counting)).unwrap();
        let tmp = test_support::TempPath::new("sidecar");
        let mut journal = tmp.path.clone().into_os_string();
        journal.push("-journal");
        let open = || {
            Connection::open_with_flags_and_vfs(
                &tmp.path,
                OpenFlags::default(),
                "foliocache-sidecar-test",
            )
            .unwrap()
        };
        let b_of = |c: &Connection| -> String {
            c.query_row("SELECT b FROM t", [], |r| r.get(0)).unwrap()
        };
        let c = open();
        c.execute_batch(
            "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);
             INSERT INTO t VALUES (1, 'one');",
        )
        .unwrap();
        let checks = || SIDECAR_CHECKS.load(Ordering::Relaxed);
        let first = checks();
        assert!(
            first <= 2,
            "{first} checks: the journal and the WAL once each"
        );
        for _ in 0..100 {
            assert_eq!(b_of(&c), "one");
        }
        assert_eq!(checks(), first, "100 read transactions, no check");
        // A write transaction creates and deletes the journal through the
        // VFS: still known, and SQLite sees it while it exists.
        c.execute_batch("BEGIN; UPDATE t SET b = 'two' WHERE a = 1;")
            .unwrap();
        assert!(std::fs::metadata(&journal).is_ok(), "the journal exists");
        // A second connection reads past the writer's RESERVED lock: the
        // journal exists but is not hot (SQLite checks the lock).
        let c2 = open();
        assert_eq!(b_of(&c2), "one", "the committed row, not the writer's");
        c.execute_batch("COMMIT").unwrap();
        assert!(std::fs::metadata(&journal).is_err(), "deleted at commit");
        assert_eq!(b_of(&c2), "two");
        assert_eq!(checks(), first, "the journal's create and delete were seen");
        drop((c, c2));
        // Once the last connection closed, a new one asks again (another
        // process may have left a hot journal meanwhile).
        let c = open();
        assert_eq!(b_of(&c), "two");
        assert!(checks() > first, "checked again after the reopen");
        drop(c);
        crate::unregister("foliocache-sidecar-test").unwrap();
    }
}
