//! The interposer's state: the configuration, the one cache, the table of
//! intercepted file descriptors, and the guard that lets the library's own
//! calls pass through.
//!
//! Every intercepted fd is a real kernel fd (opened by the real `open`,
//! so `fchmod`, `flock` or `fcntl` locks on it work as ever) with an entry
//! here: a [`Desc`], the open file description's part the cache serves
//! (the foliocache [`File`], the position, the access mode). Duplicated
//! fds share their `Desc`, as the kernel's share an open file description.

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use fc::{AnyFile, Cache, CachedFile, SharedCache, SharedFile, SharedHandle};
use parking_lot::Mutex;

use crate::real::write_stderr;
use crate::table::{Table, MAX_FDS};
use crate::through::on_cache_thread;
pub(crate) use crate::through::{err, holding, inside, pass_through_for_good, passing_through};

mod exit;
mod fork;
mod handed;
mod join;
mod member;
mod open;
use exit::OPENS;
pub(crate) use exit::{ending_now, forked, hand_all_for_exec, hand_all_to_kernel};
pub(crate) use fork::{after_fork, prepare_fork, write_back_all};
use handed::{close_on_exec, handed_on_open, mark_group, Handed, HANDED, STREAM_FDS};
pub(crate) use handed::{
    hand_stream, mapping_plain, release_stream, served_len, take_stream, writing_back,
};
use join::publish_own_reads;
pub(crate) use join::{after_own_read, spawning};
pub(crate) use open::adopt;
use open::{proc_path, served_key};

/// The environment variable naming the directories whose files the cache
/// serves, `:`-separated.
pub const ENV_DIRS: &str = "FOLIOCACHE_PRELOAD_DIRS";
/// The environment variable that, set to anything but empty, has the
/// library print one line of figures on stderr at exit.
pub const ENV_STATS: &str = "FOLIOCACHE_PRELOAD_STATS";
/// The environment variable giving the cache's capacity in bytes (a `k`,
/// `m` or `g` suffix multiplies by 2^10, 2^20, 2^30).
pub const ENV_CAPACITY: &str = "FOLIOCACHE_PRELOAD_CAPACITY";
/// The environment variable naming the memory file of the cache the
/// process group shares (`foliocache run --shared` sets it to its own
/// `/proc/<pid>/fd/<n>`): every process of the group attaches to it, and
/// a forked child keeps serving (docs/preload.md, "Processes"); or the
/// name (or socket path) of a cache `foliocache cache serve` hosts, which
/// each process attaches to by name (docs/preload.md, "Named caches").
pub const ENV_SHARED: &str = "FOLIOCACHE_PRELOAD_SHARED";
/// The environment variable that, set to anything but empty, makes
/// [`ENV_SHARED`]'s cache one a process joins only when it makes another
/// (`foliocache run` without `--shared`: docs/preload.md, "Processes"):
/// until then it serves from a cache of its own; at its first `fork`,
/// `posix_spawn`, `system` or `popen` it joins the group, and every
/// process that starts after that is in the group from the start.
pub const ENV_SHARED_AT_FORK: &str = "FOLIOCACHE_PRELOAD_SHARED_AT_FORK";

/// The configuration, read from the environment once.
struct Config {
    /// The directories served, canonical.
    dirs: Vec<PathBuf>,
    /// The cache's capacity (0: the library's default).
    capacity: usize,
    /// The shared cache's memory file ([`ENV_SHARED`]).
    shared: Option<PathBuf>,
    /// The group is joined at the first process made ([`ENV_SHARED_AT_FORK`]).
    at_fork: bool,
}

/// The cache's capacity from [`ENV_CAPACITY`]'s text, parsed as every front
/// end parses a size ([`fc::parse_size`]: `1.5G` included).
fn parse_capacity(s: &str) -> Result<usize, String> {
    let bytes = fc::parse_size(s)?;
    usize::try_from(bytes).map_err(|_| format!("`{s}`: size too large"))
}

impl Config {
    fn from_env() -> Config {
        let mut dirs = Vec::new();
        if let Some(list) = std::env::var_os(ENV_DIRS) {
            for dir in list
                .as_bytes()
                .split(|&b| b == b':')
                .filter(|d| !d.is_empty())
            {
                let dir = Path::new(std::ffi::OsStr::from_bytes(dir));
                match std::fs::canonicalize(dir) {
                    Ok(d) => dirs.push(d),
                    Err(e) => warn(&format!("{ENV_DIRS}: {}: {e}; not served", dir.display())),
                }
            }
        }
        let capacity = match std::env::var(ENV_CAPACITY) {
            Err(_) => 0,
            Ok(s) => parse_capacity(&s).unwrap_or_else(|e| {
                warn(&format!("{ENV_CAPACITY}: {e}; the default is used"));
                0
            }),
        };
        let shared = std::env::var_os(ENV_SHARED)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let at_fork =
            shared.is_some() && std::env::var_os(ENV_SHARED_AT_FORK).is_some_and(|v| !v.is_empty());
        Config {
            dirs,
            capacity,
            shared,
            at_fork,
        }
    }
}

/// A line on stderr, prefixed with the library's name.
pub(crate) fn warn(msg: &str) {
    write_stderr(format!("foliocache-preload: {msg}\n").as_bytes());
}

/// The configuration (read on first use, inside the library).
fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(Config::from_env)
}

/// Reads the configuration now (the library's constructor), so that no
/// open, from a signal handler perhaps, is the first to read it (which
/// allocates).
pub(crate) fn configure() {
    forked();
    inside((), || {
        if !config().dirs.is_empty() {
            // Before the library opens anything of its own: the room
            // above the program's open-file limit is the cache's.
            crate::limit::take();
        }
        // A process of a group attaches now, before `main`: a `stat` (from
        // a signal handler, say) then finds the group's cache with no
        // allocation, and a program that only stats its files sees the
        // group's sizes. A process of a group joined at its first fork
        // is in it from the start once a process joined it.
        if config().at_fork {
            join::if_joined(shared_cache());
        }
        if in_group() {
            shared_cache();
        }
        Ok(())
    });
}

/// Whether any directory is served: when none is, every open passes
/// through at once.
pub(crate) fn serving() -> bool {
    !passing_through() && inside(false, || Ok(!config().dirs.is_empty()))
}

/// The cache: built on first use, `None` if it could not be (said once
/// on stderr; every file then passes through).
static CACHE: OnceLock<Option<Cache>> = OnceLock::new();

/// The cache, built now if it was not yet.
fn cache() -> Option<&'static Cache> {
    let mut built = false;
    let cache = CACHE
        .get_or_init(|| {
            built = true;
            let mut b = Cache::builder().on_thread_start(on_cache_thread);
            if config().capacity > 0 {
                b = b.capacity(config().capacity);
            }
            crate::guard::build_guarded(b)
                .map_err(|e| warn(&format!("building the cache: {e}; files pass through")))
                .ok()
        })
        .as_ref();
    if let (true, Some(c)) = (built, cache) {
        crate::warm::start(c);
        crate::metrics::start(c);
    }
    cache
}

/// The cache if it was built (at exit and fork, building one would be
/// pointless).
fn built_cache() -> Option<&'static Cache> {
    CACHE.get().and_then(Option::as_ref)
}

/// The group's shared cache, attached on first use; `None` if it could
/// not be (said once on stderr: every file then passes through, never a
/// private cache, which would not see the group's writes).
static SHARED: OnceLock<Option<SharedCache>> = OnceLock::new();

/// Whether the process is one of a group sharing a cache ([`ENV_SHARED`];
/// with [`ENV_SHARED_AT_FORK`], once it joined it: [`join::group`]).
pub(crate) fn in_group() -> bool {
    let c = config();
    c.shared.is_some() && (!c.at_fork || join::JOINED.load(Ordering::Acquire))
}

/// The group's cache if the process is in a group and attached it (never
/// attaching: for calls a signal handler may make).
fn group_cache() -> Option<&'static SharedCache> {
    if in_group() {
        SHARED.get().and_then(Option::as_ref)
    } else {
        None
    }
}

/// The group's shared cache, attached now if it was not yet.
fn shared_cache() -> Option<&'static SharedCache> {
    SHARED
        .get_or_init(|| {
            let path = config().shared.as_ref()?;
            let attach = || -> io::Result<SharedCache> {
                // A cache's name or its socket (`foliocache cache serve`).
                if !path.is_absolute() || path.metadata()?.file_type().is_socket() {
                    let name = path.to_str().ok_or_else(|| err(libc::EINVAL))?;
                    return SharedCache::attach_named(name);
                }
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(path)?;
                SharedCache::attach(file.into())
            };
            attach()
                .map_err(|e| {
                    // A member of the cache's group, not of its host's
                    // user: it does not map the cache (`member.rs`).
                    if SharedCache::member_only(&e) {
                        member::MEMBER.store(true, Ordering::Release);
                        return;
                    }
                    warn(&format!(
                        "{ENV_SHARED}: attaching {}: {e}; files pass through",
                        path.display()
                    ))
                })
                .ok()
        })
        .as_ref()
}

/// Opens the file at `path` (a served fd's `/proc/self/fd/N`, or a
/// program's path) in the group's shared cache: a descriptor of
/// the cache's own (`O_DIRECT` where the filesystem takes it; read and
/// write where this process may, so that it can write back what others
/// of the group wrote).
fn open_shared(cache: &SharedCache, path: &Path) -> io::Result<SharedFile> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut last = None;
    for (write, direct) in [(true, true), (true, false), (false, true), (false, false)] {
        let mut o = std::fs::OpenOptions::new();
        o.read(true).write(write);
        if direct {
            o.custom_flags(libc::O_DIRECT);
        }
        match o.open(path) {
            Ok(f) => return cache.open(f),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| err(libc::EACCES)))
}

/// The group's `file` as a description's: writes at the end for an
/// `O_APPEND` description (`append`), changes allowed as its descriptor
/// allows them (the description's own mode is checked by each call).
fn group_file(file: SharedFile, append: bool) -> AnyFile {
    let writable = file.is_writable();
    AnyFile::Shared(SharedHandle::new(Arc::new(file), writable, append))
}

/// An intercepted open file description.
pub(crate) struct Desc {
    /// The file in the cache (dropped by `Desc`'s drop, inside the
    /// library: the last handle writes back).
    pub(crate) file: ManuallyDrop<AnyFile>,
    /// Device and inode.
    pub(crate) key: (u64, u64),
    /// The file position, locked for the whole of a read or write that
    /// uses it (the kernel's `f_pos_lock`, within this process).
    pub(crate) pos: Mutex<u64>,
    /// Set once the description is shared with another process of the
    /// group (a `fork` in shared mode): the position is then the
    /// kernel's, read and set on the fd of each call ([`Desc::at_position`]).
    pub(crate) kernel_pos: AtomicBool,
    /// Opened for reading (`O_RDONLY` or `O_RDWR`).
    pub(crate) readable: bool,
    /// Opened for writing (`O_WRONLY` or `O_RDWR`).
    pub(crate) writable: bool,
    /// `O_APPEND`.
    pub(crate) append: bool,
    /// `O_DSYNC` or `O_SYNC`: every write is written back and synced
    /// before it returns.
    pub(crate) sync_writes: bool,
}

impl Drop for Desc {
    fn drop(&mut self) {
        key_bucket(self.key).fetch_sub(1, Ordering::AcqRel);
        // SAFETY: taken once, here; `file` is not used afterwards.
        let file = unsafe { ManuallyDrop::take(&mut self.file) };
        holding(|| match (built_cache(), file) {
            (Some(cache), AnyFile::Private(file)) => {
                crate::warm::closing(cache, &file);
                cache.close_keeping(file);
                publish_own_reads();
            }
            (_, file) => drop(file),
        });
    }
}

impl Desc {
    /// Runs `f` at the description's position, which it moves to where
    /// `f` says (its result's second part), with the position locked
    /// meanwhile. `fd` is the call's fd: once the description is shared
    /// with other processes ([`Desc::kernel_pos`]) the position is the
    /// kernel's, read from and set on it.
    pub(crate) fn at_position<T>(
        &self,
        fd: c_int,
        f: impl FnOnce(u64) -> io::Result<(T, u64)>,
    ) -> io::Result<T> {
        let mut pos = self.pos.lock();
        if !self.kernel_pos.load(Ordering::Relaxed) {
            let (r, new) = f(*pos)?;
            *pos = new;
            return Ok(r);
        }
        // SAFETY: the call's fd, open on this description, borrowed for
        // the calls below.
        let kfd = unsafe { BorrowedFd::borrow_raw(fd) };
        let now = rustix::fs::seek(kfd, rustix::fs::SeekFrom::Current(0))?;
        let (r, new) = f(now)?;
        rustix::fs::seek(kfd, rustix::fs::SeekFrom::Start(new))?;
        *pos = new;
        Ok(r)
    }
}

/// Buckets of the filter of served files' keys ([`KEYS`]).
const KEY_BUCKETS: usize = 4096;

static TABLE: Table<Desc> = Table::new();

/// Live descriptions by a hash of their file's key: a stat of a file
/// whose bucket is 0 is not corrected, with no lock taken (a stat from a
/// signal handler is as safe as the C library's).
static KEYS: [AtomicUsize; KEY_BUCKETS] = [const { AtomicUsize::new(0) }; KEY_BUCKETS];

/// The [`KEYS`] bucket of a file.
fn key_bucket(key: (u64, u64)) -> &'static AtomicUsize {
    let h = key.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ key.1;
    &KEYS[(h as usize) % KEY_BUCKETS]
}

/// The entry of an fd the cache serves; `None` for any other fd, and
/// always while passing through.
pub(crate) fn lookup(fd: c_int) -> Option<Arc<Desc>> {
    if fd < 0 || passing_through() {
        return None;
    }
    TABLE.get(fd)
}

/// Whether `fd` is served by the cache (for tests and diagnostics).
pub(crate) fn is_served(fd: c_int) -> bool {
    lookup(fd).is_some()
}

/// Drops descriptions inside the library (the last handle of a file
/// writes it back), `errno` kept.
fn drop_inside<T>(old: T) {
    inside((), || {
        drop(old);
        Ok(())
    });
}

/// Whether `fd`'s entry is to be left alone: while passing through (in a
/// child of `fork` the table is the parent's copy, and closing its files
/// there would run the parent's close: set the file's size to the one
/// cached at the fork, take locks the parent's threads held), or when it
/// has none (no lock taken).
fn untouched(fd: c_int) -> bool {
    passing_through() || !TABLE.marked(fd)
}

/// Runs `dup`, the real call that duplicates `from` onto `to` (`dup2`,
/// `dup3`), with `to`'s entry replaced by `from`'s, or removed, as
/// [`Table::set_around`] does; its result. With neither served, the
/// call alone.
pub(crate) fn dup_onto(from: c_int, to: c_int, dup: impl FnOnce() -> c_int) -> c_int {
    if to < 0 {
        return dup();
    }
    let desc = servable(lookup(from), to);
    if desc.is_none() && untouched(to) {
        return dup();
    }
    let (r, old) = TABLE.set_around(to, desc, || {
        let r = dup();
        (r, r >= 0 && r != from)
    });
    drop_inside(old);
    r
}

/// Gives `to`, an fd the kernel just made a duplicate of `from` (`dup`,
/// `F_DUPFD`: a number that was free), the entry of `from`, or none.
pub(crate) fn dup_entry(from: c_int, to: c_int) {
    if to < 0 || to == from {
        return;
    }
    let desc = servable(lookup(from), to);
    if desc.is_some() || !untouched(to) {
        drop_inside(TABLE.set(to, desc));
    }
}

/// The fds of the three standard streams: the C library's `stdin`,
/// `stdout` and `stderr` exist before `main` and read and write them with
/// internal calls no interposer sees (`__write` from `printf`, `__read`
/// from `fgets`), as a stream from `fopen` does.
const STD_STREAMS: std::ops::RangeInclusive<c_int> = 0..=2;

/// The description a duplicate numbered `to` gets: `desc`, unless `to` is
/// [`MAX_FDS`] or more, which the table cannot hold, or the fd of a
/// standard stream ([`STD_STREAMS`]), which stdio reaches behind the
/// library: then the file is handed to the kernel for good (its dirty data
/// written back first), so that both fds are plain and coherent.
fn servable(desc: Option<Arc<Desc>>, to: c_int) -> Option<Arc<Desc>> {
    match desc {
        Some(d) if STD_STREAMS.contains(&to) || usize::try_from(to).is_ok_and(|n| n >= MAX_FDS) => {
            hand_to_kernel(d.key);
            None
        }
        d => d,
    }
}

/// Runs `close`, the real call that closes `fd`, with `fd`'s entry
/// removed in the same hold of its shard ([`Table::set_around`]): a
/// write racing with the close either goes through the cache or finds the
/// fd closed, never the kernel's fd behind the cache. The description
/// goes when its last fd does, writing the file back if it was the
/// file's last. The table is left alone while passing through.
pub(crate) fn closing(fd: c_int, close: impl FnOnce() -> c_int) -> c_int {
    if untouched(fd) {
        return close();
    }
    let (r, old) = TABLE.set_around(fd, None, || (close(), true));
    let r = match &old {
        Some(d) if r == 0 && d.writable && Arc::strong_count(d) == 1 => {
            inside(-1, || write_back_closed(fd, d).map(|()| 0))
        }
        _ => r,
    };
    drop_inside(old);
    r
}

/// The file's device and inode, as a message names them.
fn file_name(key: (u64, u64)) -> String {
    format!(
        "the file of device {}:{}, inode {}",
        rustix::fs::major(key.0),
        rustix::fs::minor(key.0),
        key.1
    )
}

/// The last fd of a description open for writing closed: the file's
/// dirty data is written back now (no `fsync`), so that a failure (a full
/// filesystem: `ENOSPC`, `EIO`) fails this `close`, as the kernel's
/// `write` would have, and is said on stderr.
fn write_back_closed(fd: c_int, d: &Desc) -> io::Result<()> {
    writing_back(d.key, || d.file.write_back()).inspect_err(|e| {
        warn(&format!(
            "close of fd {fd}: writing back {}: {e}; the close fails, the data not written \
             stays cached and is retried while the process runs",
            file_name(d.key)
        ));
    })
}

/// Runs `close`, the real call that closes every fd in `first..=last`
/// (`close_range`, `closefrom`), with their entries removed in the same
/// hold of the table ([`Table::take_around`]), as [`closing`] does.
pub(crate) fn closing_range(first: c_int, last: c_int, close: impl FnOnce() -> c_int) -> c_int {
    if passing_through() || !TABLE.any_marked(first, last) {
        return close();
    }
    let (r, taken) = TABLE.take_around(|fd, _| (first..=last).contains(&fd), close);
    drop_inside(taken);
    r
}

/// Sets the kernel's position of `fd` to the description's, so the fd
/// reads on where the program left it once the kernel serves it.
fn sync_position(fd: c_int, desc: &Desc) {
    if desc.kernel_pos.load(Ordering::Relaxed) {
        // The kernel's already, moved by every process sharing it.
        return;
    }
    set_kernel_position(fd, *desc.pos.lock());
}

/// Sets the kernel's position of `fd`, an open served fd, to `pos`.
fn set_kernel_position(fd: c_int, pos: u64) {
    // SAFETY: `fd` is the description's open fd, borrowed for the call.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    if let Err(e) = rustix::fs::seek(fd, rustix::fs::SeekFrom::Start(pos)) {
        warn(&format!(
            "setting the kernel's position of a served fd: {e}"
        ));
    }
}

/// Hands the file `key` to the kernel for the rest of the process: its
/// fds leave the table, its dirty data is written back, the kernel's
/// position of each is set to the program's, and later opens of it pass
/// through.
pub(crate) fn hand_to_kernel(key: (u64, u64)) {
    inside((), || {
        HANDED.lock().insert(key, Handed::ForGood);
        let taken = TABLE.take(|_, d| d.key == key);
        // Through a handle that may write the file: one of the group's
        // that may not (the file's mode refused its write open) has
        // nothing of this process's unsaved, and cannot write back others'.
        let writer = taken
            .iter()
            .find(|(_, d)| d.file.shared().is_none_or(|h| h.file().is_writable()));
        if let Some((_, desc)) = writer {
            if let Err(e) = writing_back(key, || desc.file.hand_over()) {
                warn(&format!("writing back a file handed to the kernel: {e}"));
            }
        }
        for (fd, desc) in &taken {
            sync_position(*fd, desc);
        }
        if let Some(sc) = in_group().then(shared_cache).flatten() {
            sc.handed_to_kernel(key.0, key.1);
        }
        Ok(())
    });
}

/// Where the cache's descriptors count against the program's open-file
/// limit (no room above it: `limit.rs`), hands one served file to the
/// kernel, its unsaved data written first, which closes the cache's
/// descriptor of it (a private cache's, or this process's of the
/// group's): true if one was handed, false if none is left (or there is
/// room, and the cache's descriptors count for nothing).
pub(crate) fn free_own_fd() -> bool {
    if passing_through() || crate::limit::has_room() {
        return false;
    }
    let key = TABLE
        .shards
        .iter()
        .find_map(|s| holding(|| s.read().values().next().map(|d| d.key)));
    key.inspect(|&key| hand_to_kernel(key)).is_some()
}

/// A description of the file `key` this process serves, if any.
fn desc_of(key: (u64, u64)) -> Option<Arc<Desc>> {
    if key_bucket(key).load(Ordering::Acquire) == 0 {
        return None;
    }
    TABLE
        .shards
        .iter()
        .find_map(|s| holding(|| s.read().values().find(|d| d.key == key).cloned()))
}

/// The size the cache holds for the file `key`: if this process serves
/// it, or, in a group, if the group's cache holds data of it not yet
/// written back (`SharedCache::unsaved_len`: a lookup with no lock or
/// allocation, made only once this process has attached the cache, so a
/// `stat` from a signal handler stays as safe as the C library's).
pub(crate) fn cached_size(key: (u64, u64)) -> Option<u64> {
    if passing_through() {
        return None;
    }
    if let Some(desc) = desc_of(key) {
        return served_len(&desc);
    }
    group_cache().and_then(|sc| sc.unsaved_len(key.0, key.1))
}

/// The path of a file the cache serves, and the file's key; `None` for
/// any other path.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string, unchanged for `'a`.
unsafe fn served_path<'a>(path: *const std::ffi::c_char) -> Option<(&'a Path, (u64, u64))> {
    if path.is_null() || passing_through() {
        return None;
    }
    if in_group() {
        // (Attached now, if not yet: the group may hold the file's data.)
        inside((), || {
            shared_cache();
            Ok(())
        });
    } else if TABLE.count.load(Ordering::Acquire) == 0 {
        return None;
    }
    // SAFETY: the caller's promise.
    let path = Path::new(std::ffi::OsStr::from_bytes(
        unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes(),
    ));
    let st = inside(None, || Ok(rustix::fs::stat(path).ok()))?;
    let key = (st.st_dev, st.st_ino);
    cached_size(key)?;
    Some((path, key))
}

/// Before a stream is opened on `path` (`fopen`, `freopen`): a file the
/// cache serves is handed to the kernel first, so its dirty data is
/// written back before the open (which may truncate it), never after.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
pub(crate) unsafe fn hand_path(path: *const std::ffi::c_char) {
    // SAFETY: the caller's promise.
    unsafe { member_before_change(path) };
    // SAFETY: the caller's promise.
    let Some((path, key)) = (unsafe { served_path(path) }) else {
        return;
    };
    if desc_of(key).is_some() {
        hand_to_kernel(key);
    }
    // What the group holds unsaved of it (other processes' writes), too;
    // and no process of the group serves it after.
    inside((), || {
        mark_group(key, path);
        Ok(())
    });
}

/// In a process that uses its group's cache as a member
/// ([`member::hand_at`]): the file at `path` handed to the kernel
/// for the group before a call changes it by its path.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
unsafe fn member_before_change(path: *const std::ffi::c_char) {
    if path.is_null() || passing_through() || !in_group() {
        return;
    }
    // SAFETY: the caller's promise.
    let path = Path::new(std::ffi::OsStr::from_bytes(
        unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes(),
    ));
    inside((), || {
        member::hand_at(path);
        Ok(())
    });
}

/// `truncate` of a path whose file the cache serves: through the cache (a
/// writable handle opened on the path, sharing the file's cached data).
/// `None` when the cache does not serve the file, or the group's cannot
/// for want of a slot (it then holds nothing of it).
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
pub(crate) unsafe fn truncate_served(
    path: *const std::ffi::c_char,
    length: libc::off_t,
) -> Option<c_int> {
    // SAFETY: the caller's promise.
    unsafe { member_before_change(path) };
    // SAFETY: the caller's promise.
    let (path, _) = unsafe { served_path(path) }?;
    inside(Some(-1), || {
        let len = u64::try_from(length).map_err(|_| err(libc::EINVAL))?;
        if let Some(sc) = group_cache() {
            let file = std::fs::OpenOptions::new().write(true).open(path)?;
            return match sc.open(file).and_then(|f| f.set_len(len)) {
                // No slot for the file: the group holds nothing of it,
                // and the kernel cuts it.
                Err(e) if SharedCache::out_of_slots(&e) => Ok(None),
                r => r.map(|()| Some(0)),
            };
        }
        let Some(cache) = built_cache() else {
            return Err(err(libc::EIO));
        };
        cache
            .open_options()
            .read(true)
            .write(true)
            .open(path)?
            .set_len(len)?;
        Ok(Some(0))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_the_cli_parses_them() {
        // foliocache::parse_size, fractions included; errors say why.
        assert_eq!(parse_capacity(" 1.5G"), Ok(3 << 29));
        let e = parse_capacity("12x").unwrap_err();
        assert!(e.contains("unknown size suffix"), "{e}");
        assert!(parse_capacity("99999999999999999999g").is_err());
    }
}
