//! The cache as a good neighbour: how much memory the process may use, a
//! check of the capacity against it at build, and a watcher that gives
//! memory back while memory is short and takes it again afterwards.
//!
//! # Limits
//! The process may use at most its memory cgroup's limit (v1
//! `memory.limit_in_bytes` and the `hierarchical_memory_limit` of
//! `memory.stat`; v2 `memory.max` of its cgroup and of every ancestor, as
//! the kernel's `mem_cgroup_*` charging applies them), found through
//! `/proc/self/cgroup` and `/proc/self/mountinfo`, and at most what the
//! machine has available (`MemAvailable` of `/proc/meminfo`, the kernel's
//! `si_mem_available`). [`check_capacity`] refuses a capacity above
//! either at build. With [`Populate::Lazy`](crate::Populate::Lazy) the
//! capacity is reserved, not used, at build; it is still refused: the
//! cache fills it as it caches, and a capacity it could never fill would
//! end in the OOM killer.
//!
//! # The watcher
//! A thread per cache ([`PressureConfig`], on by default) wakes every
//! interval, or as soon as the kernel reports a memory stall (a PSI
//! trigger on the v2 cgroup's `memory.pressure` or `/proc/pressure/memory`,
//! the kernel's `psi_trigger_create`, waited on with `poll(POLLPRI)`). It
//! measures the *headroom*: the cgroup's limit less its usage (less its
//! inactive file pages, which the kernel reclaims first), or
//! `MemAvailable`, whichever is smaller. Below the reserve, or with less
//! than twice the reserve left on a stall or when the cgroup reached its
//! limit since the last look (v1 `memory.failcnt`, v2 `max` of
//! `memory.events`: the kernel reclaiming the program's last file pages,
//! its code among them, to charge memory it cannot reclaim), memory is
//! short ([`is_short`]): it lowers the arena's
//! limit (what the cache may hold) by what is missing, never below the
//! floor, evicts clean folios through reclaim (`shrink_node`'s work, the
//! inactive list first) until the cache fits, and gives the free arena
//! blocks back to the OS (`MADV_DONTNEED`). Once memory has not been short
//! for [`CALM`] and the headroom is above twice the reserve, it raises the
//! limit again, by what the headroom allows, up to the capacity. The
//! thread holds only a weak reference while it sleeps and exits as soon as
//! the cache is dropped (the drop wakes it: [`WatchStop`]), as the flusher
//! does.

// Under loom there is no watcher thread (the models cannot run it).
#![cfg_attr(loom, allow(dead_code, unused_imports))]

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::arena::PAGE_SIZE;
use crate::mm::CacheInner;
use crate::sync::Ordering;

/// How long memory must have stayed plentiful before the watcher lets the
/// cache grow again.
pub(crate) const CALM: Duration = Duration::from_secs(2);

/// The PSI trigger the watcher arms: woken when tasks stalled on memory
/// for 150 ms within 1 s (`psi_trigger_create`: "some", stall, window, in
/// microseconds).
const PSI_TRIGGER: &str = "some 150000 1000000";

/// The memory-pressure watcher's settings ([`CacheBuilder::pressure`]).
///
/// On by default: an embedded cache should give memory back when its
/// machine or its cgroup runs short, as the kernel's page cache does,
/// rather than leave the OOM killer to choose. Its cost is a thread that
/// reads two or three small `/proc` or cgroup files per interval.
///
/// [`CacheBuilder::pressure`]: crate::CacheBuilder::pressure
///
/// # Example
/// ```
/// use foliocache::{Cache, PressureConfig};
/// use std::time::Duration;
/// let cache = Cache::builder()
///     .capacity(8 << 20)
///     .pressure(
///         PressureConfig::default()
///             .floor(2 << 20)
///             .reserve(32 << 20)
///             .interval(Duration::from_millis(100)),
///     )
///     .build()?;
/// assert_eq!(cache.stats().allowed_bytes, 8 << 20);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PressureConfig {
    pub(crate) enabled: bool,
    pub(crate) floor: Option<usize>,
    pub(crate) reserve: Option<usize>,
    pub(crate) interval: Duration,
    pub(crate) psi: bool,
}

impl Default for PressureConfig {
    fn default() -> Self {
        PressureConfig {
            enabled: true,
            floor: None,
            reserve: None,
            interval: Duration::from_millis(250),
            psi: true,
        }
    }
}

impl PressureConfig {
    /// No watcher: the cache keeps its capacity whatever happens around it
    /// ([`Cache::shrink`](crate::Cache::shrink) still gives memory back on
    /// the program's own signal).
    pub fn off() -> Self {
        PressureConfig {
            enabled: false,
            ..Self::default()
        }
    }

    /// The size the cache never shrinks below (rounded down to pages).
    /// Default: an eighth of the capacity, so the hottest data stays.
    pub fn floor(mut self, bytes: usize) -> Self {
        self.floor = Some(bytes);
        self
    }

    /// The headroom to keep free: memory is short when the cgroup's limit
    /// less its usage, or the machine's `MemAvailable`, is below it.
    /// Default: 1/32 of the smaller of the cgroup's limit and the
    /// machine's memory, between 16 MiB and 512 MiB.
    pub fn reserve(mut self, bytes: usize) -> Self {
        self.reserve = Some(bytes);
        self
    }

    /// How often the headroom is measured (default 250 ms; at least 1 ms).
    /// A PSI stall wakes the watcher at once.
    pub fn interval(mut self, every: Duration) -> Self {
        self.interval = every.max(Duration::from_millis(1));
        self
    }

    /// Whether to arm a PSI trigger (default yes, where the kernel allows
    /// it): on the v2 cgroup's `memory.pressure`, else on
    /// `/proc/pressure/memory`. A stall wakes the watcher at once, and
    /// counts as pressure when the headroom is under twice the reserve.
    pub fn psi(mut self, on: bool) -> Self {
        self.psi = on;
        self
    }
}

// ---------------------------------------------------------------------------
// Limits.

/// A memory cgroup's figures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CgroupMemory {
    /// The cgroup's directory.
    pub(crate) dir: PathBuf,
    /// The file the limit came from (`memory.limit_in_bytes`, `memory.max`).
    pub(crate) limit_file: &'static str,
    /// The smallest limit of the cgroup and its ancestors, if any.
    pub(crate) limit: Option<u64>,
    /// Bytes charged now (`memory.usage_in_bytes`, `memory.current`).
    pub(crate) usage: u64,
    /// Of them, inactive file pages (reclaimed first).
    pub(crate) inactive_file: u64,
    /// How many times the cgroup's usage reached its limit so far, so
    /// that the kernel had to reclaim within it to charge more (v1
    /// `memory.failcnt`, v2 `max` of `memory.events`), if readable.
    pub(crate) limit_hits: Option<u64>,
}

/// What the process may use now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MemoryLimits {
    /// The process's memory cgroup, if one with a controller is mounted.
    pub(crate) cgroup: Option<CgroupMemory>,
    /// `MemTotal` of `/proc/meminfo`.
    pub(crate) total: Option<u64>,
    /// `MemAvailable` of `/proc/meminfo`.
    pub(crate) available: Option<u64>,
}

impl MemoryLimits {
    /// Reads them from `/proc` and the cgroup filesystems; a figure that
    /// cannot be read is `None`.
    pub(crate) fn read() -> MemoryLimits {
        let (total, available) = fs::read_to_string("/proc/meminfo")
            .map(|s| parse_meminfo(&s))
            .unwrap_or((None, None));
        MemoryLimits {
            cgroup: read_cgroup(),
            total,
            available,
        }
    }

    /// Bytes the process may still take: the smaller of the cgroup's limit
    /// less its usage (inactive file pages counted as free) and
    /// `MemAvailable`; `None` when neither is known.
    pub(crate) fn headroom(&self) -> Option<u64> {
        let cgroup = self.cgroup.as_ref().and_then(|c| {
            c.limit
                .map(|l| l.saturating_sub(c.usage.saturating_sub(c.inactive_file)))
        });
        match (cgroup, self.available) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// `(MemTotal, MemAvailable)` in bytes from the text of `/proc/meminfo`.
pub(crate) fn parse_meminfo(text: &str) -> (Option<u64>, Option<u64>) {
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
            kib.checked_mul(1024)
        })
    };
    (field("MemTotal"), field("MemAvailable"))
}

/// A cgroup limit file's value: `max` (v2) or a v1 value of about
/// `i64::MAX` rounded to pages is no limit.
pub(crate) fn parse_limit(text: &str) -> Option<u64> {
    let text = text.trim();
    if text == "max" {
        return None;
    }
    let v: u64 = text.parse().ok()?;
    // v1 writes "no limit" as PAGE_COUNTER_MAX pages in bytes.
    (v < 1 << 62).then_some(v)
}

/// `key`'s value in a `memory.stat` text (`key value` lines).
pub(crate) fn parse_stat(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Which hierarchy a cgroup path lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hierarchy {
    /// A v1 hierarchy with the memory controller.
    V1,
    /// The v2 unified hierarchy.
    V2,
}

/// The process's memory cgroup path from the text of `/proc/self/cgroup`:
/// the v1 line whose controllers include `memory`, else the v2 line
/// (`0::path`).
pub(crate) fn parse_proc_cgroup(text: &str) -> Option<(Hierarchy, String)> {
    let mut v2 = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.split(',').any(|c| c == "memory") {
            return Some((Hierarchy::V1, path.to_string()));
        }
        if id == "0" && controllers.is_empty() {
            v2 = Some((Hierarchy::V2, path.to_string()));
        }
    }
    v2
}

/// Where the hierarchy is mounted, from the text of `/proc/self/mountinfo`:
/// `(mount root, mount point)` of a `cgroup2` mount, or of a `cgroup` mount
/// whose options include `memory`.
pub(crate) fn parse_mountinfo(text: &str, which: Hierarchy) -> Option<(String, String)> {
    text.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let fields: Vec<&str> = left.split(' ').collect();
        let mut r = right.split(' ');
        let (fstype, _source, options) = (r.next()?, r.next()?, r.next().unwrap_or(""));
        let ok = match which {
            Hierarchy::V2 => fstype == "cgroup2",
            Hierarchy::V1 => fstype == "cgroup" && options.split(',').any(|o| o == "memory"),
        };
        ok.then(|| Some((fields.get(3)?.to_string(), fields.get(4)?.to_string())))
            .flatten()
    })
}

/// The process's memory cgroup's figures, if it has one.
fn read_cgroup() -> Option<CgroupMemory> {
    let (which, path) = parse_proc_cgroup(&fs::read_to_string("/proc/self/cgroup").ok()?)?;
    let (root, mount) = parse_mountinfo(&fs::read_to_string("/proc/self/mountinfo").ok()?, which)?;
    let rel = path.strip_prefix(root.as_str()).unwrap_or(&path);
    let mount = PathBuf::from(mount);
    let dir = mount.join(rel.trim_start_matches('/'));
    let read = |dir: &Path, file: &str| fs::read_to_string(dir.join(file)).ok();
    match which {
        Hierarchy::V1 => {
            let stat = read(&dir, "memory.stat").unwrap_or_default();
            let own = read(&dir, "memory.limit_in_bytes").and_then(|s| parse_limit(&s));
            let hier = parse_stat(&stat, "hierarchical_memory_limit")
                .and_then(|v| parse_limit(&v.to_string()));
            let limit = match (own, hier) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            Some(CgroupMemory {
                usage: read(&dir, "memory.usage_in_bytes")?.trim().parse().ok()?,
                inactive_file: parse_stat(&stat, "total_inactive_file").unwrap_or(0),
                limit_hits: read(&dir, "memory.failcnt").and_then(|s| s.trim().parse().ok()),
                limit_file: "memory.limit_in_bytes",
                limit,
                dir,
            })
        }
        Hierarchy::V2 => {
            let mut limit: Option<u64> = None;
            let mut d = dir.as_path();
            while d.starts_with(&mount) {
                if let Some(l) = read(d, "memory.max").and_then(|s| parse_limit(&s)) {
                    limit = Some(limit.map_or(l, |m| m.min(l)));
                }
                match d.parent() {
                    Some(p) if d != mount => d = p,
                    _ => break,
                }
            }
            let stat = read(&dir, "memory.stat").unwrap_or_default();
            Some(CgroupMemory {
                usage: read(&dir, "memory.current")?.trim().parse().ok()?,
                inactive_file: parse_stat(&stat, "inactive_file").unwrap_or(0),
                limit_hits: read(&dir, "memory.events").and_then(|s| parse_stat(&s, "max")),
                limit_file: "memory.max",
                limit,
                dir,
            })
        }
    }
}

/// Checks a capacity against what this process may use now, as
/// [`CacheBuilder::build`](crate::CacheBuilder::build) checks it (the
/// capacity rounded down to whole pages, against the memory cgroup's limit
/// and `MemAvailable`), without building a cache: for a front end that
/// hands the capacity to a cache built elsewhere (`foliocache run`, whose
/// program's interposer builds it) and must refuse it before it starts.
///
/// # Errors
/// `OutOfMemory`, naming the capacity and the figure it exceeds, and where
/// that came from.
pub fn capacity_fits(capacity: usize) -> io::Result<()> {
    check_capacity(capacity / PAGE_SIZE * PAGE_SIZE, &MemoryLimits::read())
}

/// Refuses a capacity above what the process may use: its memory cgroup's
/// limit, or the machine's `MemAvailable`. The error (`OutOfMemory`) names
/// the capacity and the figure it exceeds, and where that came from.
pub(crate) fn check_capacity(capacity: usize, limits: &MemoryLimits) -> io::Result<()> {
    let capacity = capacity as u64;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    if let Some(c) = &limits.cgroup {
        if let Some(limit) = c.limit.filter(|&l| capacity > l) {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!(
                    "foliocache: a capacity of {capacity} bytes ({:.1} MiB) is more than this \
                     process's memory cgroup allows: {limit} bytes ({:.1} MiB, {} of {}); \
                     choose a capacity below the limit, leaving room for the program",
                    mib(capacity),
                    mib(limit),
                    c.limit_file,
                    c.dir.display()
                ),
            ));
        }
    }
    if let Some(avail) = limits.available.filter(|&a| capacity > a) {
        return Err(io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!(
                "foliocache: a capacity of {capacity} bytes ({:.1} MiB) is more than the memory \
                 this machine has available: {avail} bytes ({:.1} MiB, MemAvailable of \
                 /proc/meminfo{}); choose a smaller capacity",
                mib(capacity),
                mib(avail),
                limits
                    .total
                    .map(|t| format!(", of {t} bytes MemTotal"))
                    .unwrap_or_default()
            ),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The watcher.

#[cfg(not(loom))]
/// The watcher's resolved settings, in pages.
struct Watch {
    floor: usize,
    reserve: u64,
    interval: Duration,
}

/// A PSI trigger: the open pressure file whose `POLLPRI` says tasks
/// stalled on memory past the trigger's threshold.
#[cfg(not(loom))]
struct Psi(fs::File);

#[cfg(not(loom))]
impl Psi {
    /// Arms the trigger on `path`; `None` where PSI is missing or not
    /// allowed.
    fn arm(path: &Path) -> Option<Psi> {
        use std::io::Write;
        let mut f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .ok()?;
        // The trigger must be written whole, NUL included, in one write.
        let trigger = format!("{PSI_TRIGGER}\0");
        match f.write(trigger.as_bytes()) {
            Ok(n) if n == trigger.len() => Some(Psi(f)),
            Ok(n) => {
                log::debug!("foliocache: PSI trigger written short ({n} bytes)");
                None
            }
            Err(e) => {
                log::debug!("foliocache: no PSI trigger on {}: {e}", path.display());
                None
            }
        }
    }
}

/// The watcher's wake-up at its cache's drop: an eventfd, polled beside
/// the PSI trigger, that the drop writes ([`WatchStop::stop`]), so the
/// thread exits at once rather than at the end of its interval.
pub(crate) struct WatchStop(rustix::fd::OwnedFd);

impl WatchStop {
    fn new() -> io::Result<WatchStop> {
        use rustix::event::{eventfd, EventfdFlags};
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(WatchStop(backing::place_descriptor(fd)))
    }

    /// Wakes the watcher for the last time.
    pub(crate) fn stop(&self) {
        let _ = rustix::io::write(&self.0, &1u64.to_ne_bytes());
    }
}

/// How a watcher's wait ended.
#[cfg(not(loom))]
enum Woken {
    /// The interval passed.
    Timeout,
    /// The PSI trigger fired: tasks stalled on memory.
    Stall,
    /// The cache was dropped.
    Stop,
}

/// Waits up to `timeout` for the PSI trigger (if armed) or the stop.
#[cfg(not(loom))]
fn wait(psi: Option<&Psi>, stop: &WatchStop, timeout: Duration) -> Woken {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let ts = Timespec {
        tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: timeout.subsec_nanos().into(),
    };
    // The stop first; the trigger second, where there is one.
    let mut fds = [
        PollFd::new(&stop.0, PollFlags::IN),
        match psi {
            Some(p) => PollFd::new(&p.0, PollFlags::PRI),
            None => PollFd::new(&stop.0, PollFlags::empty()),
        },
    ];
    let fds = &mut fds[..1 + usize::from(psi.is_some())];
    match poll(fds, Some(&ts)) {
        Ok(0) => Woken::Timeout,
        Ok(_) if fds[0].revents().contains(PollFlags::IN) => Woken::Stop,
        Ok(_)
            if fds
                .get(1)
                .is_some_and(|f| f.revents().contains(PollFlags::PRI)) =>
        {
            Woken::Stall
        }
        Ok(_) => Woken::Timeout,
        Err(_) => {
            std::thread::sleep(timeout);
            Woken::Timeout
        }
    }
}

#[cfg(not(loom))]
/// The default reserve for `limits`: 1/32 of the smaller of the cgroup's
/// limit and the machine's memory, between 16 MiB and 512 MiB.
fn default_reserve(limits: &MemoryLimits) -> u64 {
    let cg = limits.cgroup.as_ref().and_then(|c| c.limit);
    let base = match (cg, limits.total) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b).unwrap_or(1 << 30),
    };
    (base / 32).clamp(16 << 20, 512 << 20)
}

/// Starts the watcher thread of a cache (see the module documentation).
#[cfg(not(loom))]
pub(crate) fn spawn(
    inner: &Arc<CacheInner>,
    cfg: &PressureConfig,
    limits: &MemoryLimits,
    on_start: &backing::ThreadStart,
) -> io::Result<()> {
    if !cfg.enabled {
        return Ok(());
    }
    let capacity = inner.mem.arena.capacity_pages();
    let watch = Watch {
        floor: cfg
            .floor
            .map_or(capacity / 8, |b| b / PAGE_SIZE)
            .min(capacity),
        reserve: cfg
            .reserve
            .map_or_else(|| default_reserve(limits), |b| b as u64),
        interval: cfg.interval,
    };
    // A v2 cgroup has its own stall figures; under v1 only the machine's.
    let psi_file = match &limits.cgroup {
        Some(c) if c.limit_file == "memory.max" => c.dir.join("memory.pressure"),
        _ => PathBuf::from("/proc/pressure/memory"),
    };
    let psi = cfg.psi.then(|| Psi::arm(&psi_file)).flatten();
    let stop = Arc::new(WatchStop::new()?);
    let on_drop = stop.clone();
    inner.set_on_drop(Box::new(move || on_drop.stop()));
    let weak = Arc::downgrade(inner);
    on_start.spawn("foliocache-pressure".into(), move || {
        watch_loop(&weak, &watch, psi.as_ref(), &stop)
    })?;
    Ok(())
}

/// The watcher's loop: wait, measure, shrink or grow; until the cache goes.
#[cfg(not(loom))]
fn watch_loop(weak: &Weak<CacheInner>, w: &Watch, psi: Option<&Psi>, stop: &WatchStop) {
    let mut last_short: Option<Instant> = None;
    let mut hits_seen: Option<u64> = None;
    loop {
        let stalled = match wait(psi, stop, w.interval) {
            Woken::Stop => return,
            Woken::Stall => true,
            Woken::Timeout => false,
        };
        let Some(inner) = weak.upgrade() else { return };
        let limits = MemoryLimits::read();
        let headroom = limits.headroom();
        let hits = limits.cgroup.as_ref().and_then(|c| c.limit_hits);
        let hit = matches!((hits_seen, hits), (Some(a), Some(b)) if b > a);
        hits_seen = hits;
        if is_short(headroom, w.reserve, stalled || hit) {
            last_short = Some(Instant::now());
            // What is missing, or a sixteenth of the cache when pressed.
            let missing = match headroom {
                Some(h) if h < w.reserve => (w.reserve - h).div_ceil(PAGE_SIZE as u64) as usize,
                _ => inner.mem.arena.capacity_pages() / 16,
            };
            shrink_for_pressure(&inner, missing, w.floor);
        } else if last_short.is_none_or(|t| t.elapsed() >= CALM) {
            let spare = headroom.map_or(u64::MAX, |h| h.saturating_sub(2 * w.reserve));
            grow_after_pressure(&inner, (spare / PAGE_SIZE as u64) as usize);
        }
    }
}

/// Whether memory is short, with `headroom` left (`None`: unknown) and
/// `reserve` to keep: the headroom is below the reserve, or the process
/// is `pressed` (tasks stalled on memory, or the cgroup reached its limit
/// since the last look) with less than twice the reserve left. A stall or
/// a limit reached with plenty of headroom is not the cache's to answer:
/// another cgroup's stall, or a cgroup full of the program's own file
/// pages, which the kernel reclaims at no cost. Near the limit, a limit
/// reached means the kernel is taking the program's last file pages (its
/// own code among them) to make room for memory it cannot reclaim, which
/// is where the OOM killer comes next: the cache gives room back.
pub(crate) fn is_short(headroom: Option<u64>, reserve: u64, pressed: bool) -> bool {
    match headroom {
        Some(h) => h < reserve || (pressed && h < reserve.saturating_mul(2)),
        None => pressed,
    }
}

/// Lowers the cache's limit by `pages` below what it holds now (never
/// below `floor`), evicts until it fits, and gives the free arena
/// memory back to the OS. Counted in [`CacheStats::pressure_shrinks`].
///
/// [`CacheStats::pressure_shrinks`]: crate::CacheStats::pressure_shrinks
pub(crate) fn shrink_for_pressure(cache: &CacheInner, pages: usize, floor: usize) {
    let a = &cache.mem.arena;
    let used = a.capacity_pages() - a.free_pages();
    let target = used.min(a.limit_pages()).saturating_sub(pages).max(floor);
    if target < a.limit_pages() {
        a.set_limit_pages(target);
    }
    let mut used = a.capacity_pages() - a.free_pages();
    while used > target {
        if crate::vmscan::reclaim(cache, (used - target) as u64) == 0 {
            break;
        }
        used = a.capacity_pages() - a.free_pages();
    }
    let released = a.release_free();
    cache.stats.pressure_shrinks.fetch_add(1, Ordering::Relaxed);
    log::info!(
        "foliocache: memory is short: limit {} MiB, {} MiB cached, {} MiB given back",
        (a.limit_pages() * PAGE_SIZE) >> 20,
        (used * PAGE_SIZE) >> 20,
        released >> 20
    );
}

/// Raises the cache's limit by at most `pages`, up to the capacity.
pub(crate) fn grow_after_pressure(cache: &CacheInner, pages: usize) {
    let a = &cache.mem.arena;
    let limit = a.limit_pages();
    if limit < a.capacity_pages() && pages > 0 {
        a.set_limit_pages(limit.saturating_add(pages));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo() {
        let text = "MemTotal:       24684096 kB\nMemFree:  100 kB\nMemAvailable:   23132152 kB\n";
        assert_eq!(
            parse_meminfo(text),
            (Some(24684096 * 1024), Some(23132152 * 1024))
        );
        assert_eq!(parse_meminfo("MemTotal: x kB\n"), (None, None));
        assert_eq!(parse_meminfo(""), (None, None));
    }

    #[test]
    fn limits() {
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit("536870912\n"), Some(512 << 20));
        assert_eq!(parse_limit("junk"), None);
        let stat = "cache 4096\nhierarchical_memory_limit 1073741824\ntotal_inactive_file 8192\n";
        assert_eq!(parse_stat(stat, "hierarchical_memory_limit"), Some(1 << 30));
        assert_eq!(parse_stat(stat, "total_inactive_file"), Some(8192));
        assert_eq!(parse_stat(stat, "inactive_file"), None);
    }

    #[test]
    fn proc_cgroup() {
        let v1 = "9:name=systemd:/\n4:memory:/process_api/b34\n0::/\n";
        assert_eq!(
            parse_proc_cgroup(v1),
            Some((Hierarchy::V1, "/process_api/b34".into()))
        );
        let v1b = "5:cpu,memory:/a/b\n";
        assert_eq!(parse_proc_cgroup(v1b), Some((Hierarchy::V1, "/a/b".into())));
        let v2 = "0::/user.slice/app.scope\n";
        assert_eq!(
            parse_proc_cgroup(v2),
            Some((Hierarchy::V2, "/user.slice/app.scope".into()))
        );
        assert_eq!(parse_proc_cgroup("garbage\n"), None);
    }

    #[test]
    fn mountinfo() {
        let text = "\
35 25 0:30 / /sys/fs/cgroup/memory rw,relatime shared:12 - cgroup cgroup rw,memory
36 25 0:31 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
40 25 0:35 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        assert_eq!(
            parse_mountinfo(text, Hierarchy::V1),
            Some(("/".into(), "/sys/fs/cgroup/memory".into()))
        );
        assert_eq!(
            parse_mountinfo(text, Hierarchy::V2),
            Some(("/".into(), "/sys/fs/cgroup/unified".into()))
        );
        assert_eq!(parse_mountinfo("", Hierarchy::V2), None);
    }

    fn cgroup(limit: Option<u64>, usage: u64, inactive_file: u64) -> CgroupMemory {
        CgroupMemory {
            dir: "/sys/fs/cgroup/memory/job".into(),
            limit_file: "memory.limit_in_bytes",
            limit,
            usage,
            inactive_file,
            limit_hits: None,
        }
    }

    #[test]
    fn capacity_checks_name_both_figures() {
        let limits = MemoryLimits {
            cgroup: Some(cgroup(Some(1 << 30), 0, 0)),
            total: Some(24 << 30),
            available: Some(20 << 30),
        };
        assert!(check_capacity(512 << 20, &limits).is_ok());
        let e = check_capacity(2 << 30, &limits).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::OutOfMemory);
        let msg = e.to_string();
        assert!(
            msg.contains("2147483648") && msg.contains("1073741824"),
            "{msg}"
        );
        assert!(msg.contains("memory.limit_in_bytes"), "{msg}");
        let e = check_capacity(
            21 << 30,
            &MemoryLimits {
                cgroup: None,
                ..limits
            },
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains(&(21u64 << 30).to_string()), "{msg}");
        assert!(msg.contains(&(20u64 << 30).to_string()), "{msg}");
        assert!(msg.contains("MemAvailable"), "{msg}");
        let unknown = MemoryLimits {
            cgroup: None,
            total: None,
            available: None,
        };
        assert!(check_capacity(usize::MAX, &unknown).is_ok());
    }

    #[test]
    fn capacity_fits_checks_this_process_as_build_does() {
        assert!(capacity_fits(PAGE_SIZE).is_ok());
        // Where this machine's MemAvailable can be read, no capacity
        // passes that the address space could not hold.
        if MemoryLimits::read().available.is_some() {
            let e = capacity_fits(usize::MAX).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::OutOfMemory);
        }
    }

    #[test]
    fn headroom_is_the_smaller_figure() {
        let limits = MemoryLimits {
            cgroup: Some(cgroup(Some(512 << 20), 300 << 20, 100 << 20)),
            total: Some(24 << 30),
            available: Some(20 << 30),
        };
        assert_eq!(limits.headroom(), Some(312 << 20));
        let no_limit = MemoryLimits {
            cgroup: Some(cgroup(None, 300 << 20, 0)),
            ..limits.clone()
        };
        assert_eq!(no_limit.headroom(), Some(20 << 30));
        assert_eq!(default_reserve(&limits), 16 << 20);
        assert_eq!(default_reserve(&no_limit), 512 << 20);
    }

    #[test]
    fn memory_is_short_below_the_reserve_or_pressed_below_twice_it() {
        let r = 16 << 20;
        assert!(is_short(Some(r - 1), r, false));
        assert!(!is_short(Some(r), r, false));
        // A stall, or the limit reached, near the limit.
        assert!(is_short(Some(2 * r - 1), r, true));
        // ...but not with plenty left.
        assert!(!is_short(Some(2 * r), r, true));
        assert!(is_short(None, r, true));
        assert!(!is_short(None, r, false));
    }

    #[test]
    fn limit_hits_come_from_failcnt_or_the_max_event() {
        let events = "low 0\nhigh 0\nmax 371\noom 0\noom_kill 0\noom_group_kill 0\n";
        assert_eq!(parse_stat(events, "max"), Some(371));
        assert_eq!(parse_stat(events, "oom"), Some(0));
    }
}
