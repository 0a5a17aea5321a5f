//! Memory: a cache builds without faulting its capacity in and holds what
//! it caches; a capacity above what the process may use is refused at
//! build; under memory pressure the cache gives memory back, and takes it
//! again afterwards (`docs/design.md`, "Memory: population and pressure").
//!
//! The tests that measure the process's resident memory, or move it into a
//! memory cgroup, run in a child process of their own (the test binary
//! re-run on one test, told its part by an environment variable): the
//! other tests of this binary run beside them and fill caches of their own.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use foliocache::{Cache, PressureConfig};
use test_support::{rerun_test, skip_or_fail};

use test_support::cache::TestCache;
use test_support::TempPath;

const MIB: usize = 1 << 20;
/// The environment variable that tells a re-run test binary its part.
const ROLE: &str = "FOLIOCACHE_MEMORY_ROLE";
/// The memory cgroup directory of the pressure test.
const CGROUP: &str = "FOLIOCACHE_MEMORY_CGROUP";
/// The pressure test's data file.
const DATA: &str = "FOLIOCACHE_MEMORY_DATA";

/// Resident memory of this process, from `/proc/self/statm`.
fn rss() -> usize {
    let statm = fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// `field` of `/proc/meminfo`, in bytes.
fn meminfo(field: &str) -> u64 {
    let text = fs::read_to_string("/proc/meminfo").unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Re-runs this test binary on test `name` with `role` (and `env`) and
/// returns the child.
fn rerun(name: &str, role: &str, env: &[(&str, &Path)]) -> Child {
    let mut cmd = rerun_test(module_path!(), name);
    cmd.env(ROLE, role);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("re-running the test binary")
}

/// In a re-run test binary (its [`ROLE`] set), runs the part of `parts`
/// named by the role (nothing for another test's role) and returns true;
/// false in the test's own process.
fn child_part(parts: &[(&str, fn())]) -> bool {
    let Ok(role) = std::env::var(ROLE) else {
        return false;
    };
    if let Some((_, part)) = parts.iter().find(|(r, _)| *r == role) {
        part();
    }
    true
}

/// Waits for `child` at most `limit`; kills it and fails past that.
fn wait(child: &mut Child, what: &str, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A file of `bytes` whose every 4 KiB page starts with its index.
fn data_file(tag: &str, bytes: usize) -> TempPath {
    let file = TempPath::with_data(tag, &[]);
    let mut f = io::BufWriter::new(fs::File::create(&file.path).unwrap());
    let mut page = vec![0xa5u8; 4096];
    for i in 0..bytes / 4096 {
        page[..8].copy_from_slice(&(i as u64).to_le_bytes());
        f.write_all(&page).unwrap();
    }
    f.into_inner().unwrap().sync_all().unwrap();
    file
}

/// Reads `bytes` of `file` from its start through the cache, 1 MiB at a
/// time, checking each page's index.
fn read_through(file: &foliocache::File, bytes: usize) {
    let mut buf = vec![0u8; MIB];
    for off in (0..bytes).step_by(MIB) {
        let n = file.read_at(&mut buf, off as u64).unwrap();
        assert_eq!(n, MIB.min(bytes - off));
        for (i, page) in buf[..n].chunks(4096).enumerate() {
            let want = (off / 4096 + i) as u64;
            assert_eq!(page[..8], want.to_le_bytes(), "page {want}");
        }
    }
}

#[test]
#[cfg_attr(miri, ignore = "maps a 16 GiB arena")]
fn large_cache_builds_small_and_grows_with_data() {
    match std::env::var(ROLE).as_deref() {
        Ok("lazy") => {}
        Ok(_) => return,
        Err(_) => {
            let mut child = rerun("large_cache_builds_small_and_grows_with_data", "lazy", &[]);
            let status = wait(&mut child, "the lazy-build child", Duration::from_secs(120));
            assert!(status.success(), "the lazy-build child failed: {status}");
            return;
        }
    }
    const DATA_BYTES: usize = 64 * MIB;
    let file = data_file("lazy-build", DATA_BYTES);
    // 16 GiB where the machine has it available (a capacity above
    // MemAvailable is refused); half of what is available otherwise.
    let avail = meminfo("MemAvailable") as usize;
    let capacity = if avail > 17 << 30 {
        16 << 30
    } else {
        avail / 2
    };
    let before = rss();
    let start = Instant::now();
    let cache = TestCache::bytes(capacity).build();
    let took = start.elapsed();
    let built = rss();
    let stats = cache.stats();
    eprintln!(
        "built a {} MiB cache in {:.1} ms; resident memory +{:.1} MiB",
        capacity / MIB,
        took.as_secs_f64() * 1e3,
        built.saturating_sub(before) as f64 / MIB as f64
    );
    assert_eq!(stats.capacity_bytes, capacity as u64 / 4096 * 4096);
    assert_eq!(stats.populated_bytes, 0);
    assert!(stats.populate_time.is_zero());
    assert!(
        built.saturating_sub(before) < 64 * MIB,
        "a {} MiB cache took {} MiB resident at build: it was populated",
        capacity / MIB,
        built.saturating_sub(before) / MIB
    );

    let f = cache.open(&file.path).unwrap();
    read_through(&f, DATA_BYTES);
    cache.wait_io_idle();
    let read = rss();
    let stats = cache.stats();
    let grown = read.saturating_sub(built);
    eprintln!(
        "after reading {} MiB: resident memory +{:.1} MiB, populated {} MiB, cached {} MiB",
        DATA_BYTES / MIB,
        grown as f64 / MIB as f64,
        stats.populated_bytes / MIB as u64,
        stats.bytes_cached / MIB as u64
    );
    assert!(stats.bytes_cached >= DATA_BYTES as u64);
    assert!(stats.populated_bytes >= DATA_BYTES as u64);
    assert!(
        grown >= DATA_BYTES * 3 / 4,
        "resident memory grew {} MiB for {} MiB cached",
        grown / MIB,
        DATA_BYTES / MIB
    );
    assert!(
        grown < DATA_BYTES + 64 * MIB,
        "resident memory grew {} MiB for {} MiB cached",
        grown / MIB,
        DATA_BYTES / MIB
    );
}

#[test]
fn a_lazy_cache_faults_memory_in_ahead_of_its_misses() {
    const DATA_BYTES: usize = 16 * MIB;
    let file = data_file("ahead", DATA_BYTES);
    let cache = TestCache::bytes(256 * MIB).build();
    let f = cache.open(&file.path).unwrap();
    read_through(&f, DATA_BYTES);
    cache.wait_io_idle();
    // The populater (another thread) faults in the chunks allocation takes
    // next: a few MiB beyond what the reads took.
    let deadline = Instant::now() + Duration::from_secs(10);
    let ahead = loop {
        let s = cache.stats();
        let ahead = s.populated_bytes.saturating_sub(s.bytes_cached);
        if ahead >= 4 * MIB as u64 || Instant::now() > deadline {
            break ahead;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let s = cache.stats();
    assert!(
        ahead >= 4 * MIB as u64,
        "populated {} MiB for {} MiB cached: nothing ahead",
        s.populated_bytes / MIB as u64,
        s.bytes_cached / MIB as u64
    );
    assert!(
        s.populated_bytes <= s.bytes_cached + 16 * MIB as u64,
        "populated {} MiB for {} MiB cached: too far ahead",
        s.populated_bytes / MIB as u64,
        s.bytes_cached / MIB as u64
    );
}

#[test]
fn capacity_above_memory_fails_naming_both_figures() {
    let total = meminfo("MemTotal");
    let capacity = total + (1 << 30);
    let err = TestCache::bytes(capacity as usize).try_build().unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::OutOfMemory, "{err}");
    let msg = err.to_string();
    assert!(msg.contains(&capacity.to_string()), "{msg}");
    // The other figure: the cgroup's limit or MemAvailable, named with
    // where it came from and with a number below the capacity.
    assert!(
        msg.contains("MemAvailable")
            || msg.contains("memory.limit_in_bytes")
            || msg.contains("memory.max"),
        "{msg}"
    );
    let figures: Vec<u64> = msg
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        figures
            .iter()
            .any(|&f| f > 0 && f < capacity && f > 1 << 20),
        "no figure below the capacity in {msg}"
    );
}

// ---------------------------------------------------------------------------
// Pressure: a cache and a memory hog in one memory cgroup.

/// The cgroup's limit.
const LIMIT: usize = 512 * MIB;
/// The cache's capacity, filled before the hog starts.
const CAPACITY: usize = 256 * MIB;
/// What the hog allocates: with the cache full, more than fits.
const HOG: usize = 300 * MIB;
/// The hog's allocation step.
const STEP: usize = 4 * MIB;
/// Headroom the hog leaves before each step (less than the cache's
/// reserve, 1/32 of the limit: 16 MiB).
const MARGIN: usize = 8 * MIB;

/// The process's v1 memory cgroup directory, if the hierarchy is mounted
/// at the usual place.
fn own_v1_memory_cgroup() -> Option<PathBuf> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = text.lines().find_map(|l| {
        let mut p = l.splitn(3, ':');
        let (_, ctl, path) = (p.next()?, p.next()?, p.next()?);
        ctl.split(',')
            .any(|c| c == "memory")
            .then(|| path.to_string())
    })?;
    let dir = Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/'));
    dir.join("memory.limit_in_bytes").exists().then_some(dir)
}

/// Bytes the cgroup at `dir` can still charge: its limit less its usage
/// (inactive file pages counted as free).
fn cgroup_headroom(dir: &Path) -> usize {
    let read = |f: &str| fs::read_to_string(dir.join(f)).unwrap();
    let limit: usize = read("memory.limit_in_bytes").trim().parse().unwrap();
    let usage: usize = read("memory.usage_in_bytes").trim().parse().unwrap();
    let inactive: usize = read("memory.stat")
        .lines()
        .find_map(|l| l.strip_prefix("total_inactive_file "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    limit.saturating_sub(usage.saturating_sub(inactive))
}

/// The `oom_kill` count of the cgroup at `dir`.
fn oom_kills(dir: &Path) -> u64 {
    fs::read_to_string(dir.join("memory.oom_control"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Removes the cgroup directory on drop (its processes gone by then).
struct CgroupDir(PathBuf);

/// A fresh memory cgroup of `limit` bytes under this process's own, for
/// test `name`; `None` (skipped, or failed under `CI=true`) where there is
/// no v1 hierarchy or no right to make one.
fn new_cgroup(name: &str, tag: &str, limit: usize) -> Option<CgroupDir> {
    let Some(parent) = own_v1_memory_cgroup() else {
        skip_or_fail(
            name,
            "no v1 memory cgroup hierarchy at /sys/fs/cgroup/memory",
        );
        return None;
    };
    let dir = parent.join(format!("foliocache-{tag}-{}", std::process::id()));
    if let Err(e) = fs::create_dir(&dir) {
        skip_or_fail(name, format!("cannot create {}: {e}", dir.display()));
        return None;
    }
    let cgroup = CgroupDir(dir);
    fs::write(cgroup.0.join("memory.limit_in_bytes"), limit.to_string()).unwrap();
    Some(cgroup)
}

/// Joins the cgroup named by [`CGROUP`] and builds a cache of `capacity`
/// bytes whose watcher looks every 50 ms, keeps `reserve` free (`None`:
/// the default) and never shrinks below `floor`.
fn cache_in_cgroup(capacity: usize, reserve: Option<usize>, floor: usize) -> (PathBuf, Cache) {
    let dir = PathBuf::from(std::env::var_os(CGROUP).unwrap());
    fs::write(dir.join("cgroup.procs"), std::process::id().to_string()).unwrap();
    let mut pressure = PressureConfig::default()
        .interval(Duration::from_millis(50))
        .floor(floor);
    if let Some(r) = reserve {
        pressure = pressure.reserve(r);
    }
    (dir, TestCache::bytes(capacity).pressure(pressure).build())
}

impl Drop for CgroupDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.0);
    }
}

#[test]
#[cfg_attr(miri, ignore = "processes and cgroups")]
fn cache_gives_memory_back_to_a_hog_in_its_cgroup() {
    const NAME: &str = "cache_gives_memory_back_to_a_hog_in_its_cgroup";
    if child_part(&[
        ("pressure-cache", pressure_cache),
        ("pressure-hog", pressure_hog),
    ]) {
        return;
    }
    let Some(cgroup) = new_cgroup(NAME, "pressure", LIMIT) else {
        return;
    };
    // The data is written from outside the cgroup: its page cache is not
    // charged there.
    let file = data_file("pressure", CAPACITY + 64 * MIB);
    let mut child = rerun(
        NAME,
        "pressure-cache",
        &[(CGROUP, &cgroup.0), (DATA, &file.path)],
    );
    let status = wait(&mut child, "the cache's process", Duration::from_secs(300));
    assert!(status.success(), "the cache's process failed: {status}");
    assert_eq!(oom_kills(&cgroup.0), 0, "the OOM killer ran in the cgroup");
}

/// The cache's side: joins the cgroup, fills a cache, starts the hog, and
/// checks the cache shrank, the hog got its memory, and the cache grew
/// back once the hog was gone.
fn pressure_cache() {
    let data = PathBuf::from(std::env::var_os(DATA).unwrap());
    let (dir, cache) = cache_in_cgroup(CAPACITY, None, 32 * MIB);
    let f = cache.open(&data).unwrap();
    read_through(&f, CAPACITY + 64 * MIB);
    cache.wait_io_idle();
    let full = cache.stats();
    eprintln!(
        "cache full: {} MiB cached, headroom {} MiB",
        full.bytes_cached >> 20,
        cgroup_headroom(&dir) >> 20
    );
    assert!(full.bytes_cached >= (CAPACITY * 3 / 4) as u64);

    let mut hog = rerun(
        "cache_gives_memory_back_to_a_hog_in_its_cgroup",
        "pressure-hog",
        &[(CGROUP, &dir)],
    );
    let status = wait(&mut hog, "the hog", Duration::from_secs(200));
    let shrunk = cache.stats();
    eprintln!(
        "hog done ({status}): cache allowed {} MiB, cached {} MiB, {} shrinks, {} MiB given back",
        shrunk.allowed_bytes >> 20,
        shrunk.bytes_cached >> 20,
        shrunk.pressure_shrinks,
        shrunk.released_bytes >> 20
    );
    assert!(status.success(), "the hog failed: {status}");
    assert_eq!(oom_kills(&dir), 0, "the OOM killer ran in the cgroup");
    assert!(shrunk.pressure_shrinks > 0);
    assert!(shrunk.allowed_bytes < CAPACITY as u64);
    assert!(shrunk.released_bytes > 0);
    assert!(shrunk.bytes_cached < full.bytes_cached);

    // The hog is gone: the cache may fill again, and its data is intact.
    let start = Instant::now();
    while cache.stats().allowed_bytes < CAPACITY as u64 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the cache did not grow back: {:?}",
            cache.stats()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    read_through(&f, CAPACITY + 64 * MIB);
    eprintln!("grew back to {} MiB", cache.stats().allowed_bytes >> 20);
}

/// The hog: allocates and touches [`HOG`] bytes a step at a time, each
/// step once the cgroup has room for it and [`MARGIN`] more: it gets there
/// only if the cache gives memory back.
fn pressure_hog() {
    let dir = PathBuf::from(std::env::var_os(CGROUP).unwrap());
    let mut held: Vec<Vec<u8>> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(150);
    while held.len() * STEP < HOG {
        while cgroup_headroom(&dir) < STEP + MARGIN {
            assert!(
                Instant::now() < deadline,
                "the hog waited in vain: {} MiB held, headroom {} MiB",
                (held.len() * STEP) >> 20,
                cgroup_headroom(&dir) >> 20
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut block = vec![0u8; STEP];
        for b in block.iter_mut().step_by(4096) {
            *b = 1;
        }
        held.push(block);
    }
    eprintln!("hog: holding {} MiB", (held.len() * STEP) >> 20);
}

// ---------------------------------------------------------------------------
// The limit reached: a cgroup that keeps reaching its limit, its headroom
// above the reserve.

/// The cgroup's limit.
const HITS_LIMIT: usize = 256 * MIB;
/// The cache's capacity, filled first.
const HITS_CAPACITY: usize = 96 * MIB;
/// The cache's reserve.
const HITS_RESERVE: usize = 16 * MIB;
/// The file the streamer reads through the kernel's page cache: more
/// than the cgroup has room for.
const STREAM: usize = 160 * MIB;

#[test]
#[cfg_attr(miri, ignore = "processes and cgroups")]
fn cache_gives_room_back_when_its_cgroup_keeps_reaching_its_limit() {
    const NAME: &str = "cache_gives_room_back_when_its_cgroup_keeps_reaching_its_limit";
    if child_part(&[("hits-cache", hits_cache), ("hits-streamer", hits_streamer)]) {
        return;
    }
    let Some(cgroup) = new_cgroup(NAME, "limit-hits", HITS_LIMIT) else {
        return;
    };
    let file = data_file("limit-hits", HITS_CAPACITY);
    let stream = data_file("limit-hits-stream", STREAM);
    let mut child = rerun(
        NAME,
        "hits-cache",
        &[
            (CGROUP, &cgroup.0),
            (DATA, &file.path),
            (STREAM_DATA, &stream.path),
        ],
    );
    let status = wait(&mut child, "the cache's process", Duration::from_secs(300));
    assert!(status.success(), "the cache's process failed: {status}");
    assert_eq!(oom_kills(&cgroup.0), 0, "the OOM killer ran in the cgroup");
}

/// The streamer's file.
const STREAM_DATA: &str = "FOLIOCACHE_MEMORY_STREAM";

/// The `memory.failcnt` of the cgroup at `dir`.
fn failcnt(dir: &Path) -> u64 {
    fs::read_to_string(dir.join("memory.failcnt"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The cache's side: fills its cache, then runs the streamer beside it,
/// and checks that the cache gave room back although the headroom never
/// fell below the reserve.
fn hits_cache() {
    let data = PathBuf::from(std::env::var_os(DATA).unwrap());
    let stream = PathBuf::from(std::env::var_os(STREAM_DATA).unwrap());
    let (dir, cache) = cache_in_cgroup(HITS_CAPACITY, Some(HITS_RESERVE), 16 * MIB);
    let f = cache.open(&data).unwrap();
    read_through(&f, HITS_CAPACITY);
    cache.wait_io_idle();
    let full = cache.stats();
    assert_eq!(full.pressure_shrinks, 0, "{full:?}");
    let hits = failcnt(&dir);
    let mut streamer = rerun(
        "cache_gives_room_back_when_its_cgroup_keeps_reaching_its_limit",
        "hits-streamer",
        &[(CGROUP, &dir), (STREAM_DATA, &stream)],
    );
    let status = wait(&mut streamer, "the streamer", Duration::from_secs(200));
    assert!(status.success(), "the streamer failed: {status}");
    let after = cache.stats();
    eprintln!(
        "limit reached {} times: cache allowed {} MiB, {} shrinks",
        failcnt(&dir) - hits,
        after.allowed_bytes >> 20,
        after.pressure_shrinks
    );
    assert!(failcnt(&dir) > hits, "the cgroup never reached its limit");
    assert!(after.pressure_shrinks > 0, "{after:?}");
    assert!(after.allowed_bytes < HITS_CAPACITY as u64, "{after:?}");
    read_through(&f, HITS_CAPACITY);
}

/// The streamer: takes memory it cannot give back until the cgroup's
/// headroom is between the cache's reserve and twice it, then reads a
/// file larger than the rest through the kernel's page cache, pass after
/// pass: the cgroup reaches its limit over and over, the kernel reclaiming
/// the file's pages, while the headroom (inactive file pages counted as
/// free) stays above the reserve. At least 3 passes and 1.5 s.
fn hits_streamer() {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let dir = PathBuf::from(std::env::var_os(CGROUP).unwrap());
    let stream = PathBuf::from(std::env::var_os(STREAM_DATA).unwrap());
    let mut held: Vec<Vec<u8>> = Vec::new();
    while cgroup_headroom(&dir) >= HITS_RESERVE * 3 / 2 + STEP {
        let mut block = vec![0u8; STEP];
        for b in block.iter_mut().step_by(4096) {
            *b = 1;
        }
        held.push(block);
    }
    eprintln!(
        "streamer: holding {} MiB, headroom {} MiB",
        (held.len() * STEP) >> 20,
        cgroup_headroom(&dir) >> 20
    );
    let mut buf = vec![0u8; MIB];
    // For many of the watcher's looks (every 50 ms).
    let start = Instant::now();
    for pass in 0.. {
        if pass >= 3 && start.elapsed() > Duration::from_millis(1500) {
            break;
        }
        let mut f = fs::File::open(&stream).unwrap();
        // Its pages are read again, and charged here.
        // SAFETY: a valid descriptor; the call only drops clean pages.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        while f.read(&mut buf).unwrap() > 0 {}
    }
    drop(held);
}
