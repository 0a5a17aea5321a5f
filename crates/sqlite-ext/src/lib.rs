//! `libfoliocache_sqlite_ext.so`: the foliocache SQLite VFS
//! ([`foliocache_sqlite`]) as a SQLite loadable extension, for programs
//! that are not Rust: the `sqlite3` shell's `.load`, C's
//! `sqlite3_load_extension`, Python's `Connection.load_extension`.
//!
//! Loading it builds one foliocache cache for the process and registers a
//! VFS named `foliocache` over it; it stays loaded for the process's life
//! (`SQLITE_OK_LOAD_PERMANENTLY`), so every later connection can open a
//! database with it (`file:app.db?vfs=foliocache`, or `sqlite3_open_v2`'s
//! `zVfs`). Loading it again, from another connection, finds the VFS
//! there and does nothing more.
//!
//! - `FOLIOCACHE_SQLITE_CAPACITY`: the cache's bytes (`256M`, `1.5G`, as
//!   [`foliocache::parse_size`] reads them); default 256 MiB.
//! - `FOLIOCACHE_SQLITE_DEFAULT`: non-empty (and not `0`), the VFS is made
//!   SQLite's default: connections that name no VFS use it.
//!
//! The extension calls the SQLite it is linked with (the system's
//! `libsqlite3.so.0`), which must be the one the loading program uses, as
//! it is for the `sqlite3` shell and Debian's Python; a program with its
//! own SQLite built in (statically) would get the VFS registered in
//! another SQLite, and its load fails with a message saying so.
//! docs/sqlite.md has the whole story.

#![deny(unsafe_code)]

use std::ffi::{c_char, c_int, CString};
use std::sync::OnceLock;

use foliocache::Cache;
use rusqlite::ffi;

/// The VFS's name.
const VFS: &str = "foliocache";
/// The cache's capacity.
const ENV_CAPACITY: &str = "FOLIOCACHE_SQLITE_CAPACITY";
/// Whether the VFS is made SQLite's default.
const ENV_DEFAULT: &str = "FOLIOCACHE_SQLITE_DEFAULT";
/// The capacity without [`ENV_CAPACITY`].
const DEFAULT_CAPACITY: u64 = 256 << 20;

/// The process's cache and VFS, made by the first load.
static LOADED: OnceLock<Result<Cache, String>> = OnceLock::new();

/// Builds the cache and registers the VFS, once per process.
fn load() -> Result<(), String> {
    LOADED
        .get_or_init(|| {
            let capacity = match std::env::var(ENV_CAPACITY) {
                Ok(s) => foliocache::parse_size(&s).map_err(|e| format!("{ENV_CAPACITY}: {e}"))?,
                Err(_) => DEFAULT_CAPACITY,
            };
            let cache = Cache::builder()
                .capacity(capacity as usize)
                .build()
                .map_err(|e| format!("foliocache: building a cache of {capacity} bytes: {e}"))?;
            let make_default = std::env::var(ENV_DEFAULT).is_ok_and(|v| !v.is_empty() && v != "0");
            let registered = if make_default {
                foliocache_sqlite::register_default(VFS, &cache)
            } else {
                foliocache_sqlite::register(VFS, &cache)
            };
            registered
                .map_err(|e| format!("foliocache: registering the SQLite VFS `{VFS}`: {e}"))?;
            Ok(cache)
        })
        .as_ref()
        .map(|_| ())
        .map_err(Clone::clone)
}

/// Whether the SQLite that loads the extension (whose routines `api`
/// points to) is the one the extension calls. The routine table is a C
/// struct of function pointers that SQLite only ever appends to: its
/// first entry has been `sqlite3_aggregate_context` since 3.0, the same
/// function as the extension's own when the SQLite is the same.
#[allow(unsafe_code)]
fn same_sqlite(api: *const ffi::sqlite3_api_routines) -> bool {
    if api.is_null() {
        return true;
    }
    // SAFETY: `api` is the routine table SQLite passes an extension's
    // entry point, valid while the entry point runs, and it starts with a
    // function pointer (`aggregate_context`), read here as an address.
    let theirs = unsafe { api.cast::<usize>().read() };
    let ours: unsafe extern "C" fn(*mut ffi::sqlite3_context, c_int) -> *mut std::ffi::c_void =
        ffi::sqlite3_aggregate_context;
    theirs == ours as usize
}

/// The entry point: loads the VFS, or sets `*err` (allocated with
/// `sqlite3_mprintf`, as SQLite frees it) and returns `SQLITE_ERROR`.
#[allow(unsafe_code)]
fn init(err: *mut *mut c_char, api: *const ffi::sqlite3_api_routines) -> c_int {
    let result = if same_sqlite(api) {
        load()
    } else {
        Err(
            "foliocache: the loading program has its own SQLite built in; this extension \
             registers its VFS in the system's libsqlite3 (use a program linked with it)"
                .to_string(),
        )
    };
    match result {
        Ok(()) => ffi::SQLITE_OK_LOAD_PERMANENTLY,
        Err(msg) => {
            if !err.is_null() {
                let msg = CString::new(msg.replace('\0', " ")).unwrap_or_default();
                // SAFETY: `err` is SQLite's out-parameter for the message;
                // "%s" with a NUL-terminated string is what mprintf takes.
                unsafe { *err = ffi::sqlite3_mprintf(c"%s".as_ptr(), msg.as_ptr()) };
            }
            ffi::SQLITE_ERROR
        }
    }
}

/// SQLite's default entry point name.
///
/// # Safety
/// Called by SQLite's extension loader with its arguments.
#[allow(unsafe_code)]
#[no_mangle]
pub unsafe extern "C" fn sqlite3_extension_init(
    _db: *mut ffi::sqlite3,
    err: *mut *mut c_char,
    api: *const ffi::sqlite3_api_routines,
) -> c_int {
    init(err, api)
}

/// The entry point SQLite derives from the file's name
/// (`libfoliocache_sqlite_ext.so`).
///
/// # Safety
/// As [`sqlite3_extension_init`].
#[allow(unsafe_code)]
#[no_mangle]
pub unsafe extern "C" fn sqlite3_foliocachesqliteext_init(
    _db: *mut ffi::sqlite3,
    err: *mut *mut c_char,
    api: *const ffi::sqlite3_api_routines,
) -> c_int {
    init(err, api)
}
