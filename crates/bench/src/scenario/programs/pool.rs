//! The `programs` scenario's forked pool: Python's `multiprocessing`
//! pool of [`PROCS`] forked processes reading one file twice the size of
//! the memory at random, as a new user would try it, five ways at equal
//! memory, interleaved round after round:
//!
//! ```text
//!   ext4        the kernel's page cache, the pool in a memory cgroup of C
//!   mount       through a foliocache FUSE mount of a cache of C
//!   interposer  foliocache run --capacity C: the group joined at the fork
//!   shared      foliocache run --shared --capacity C: one cache from the start
//!   private     foliocache run --capacity C, one process doing the reads
//! ```
//!
//! Every run starts cold: the file's page cache dropped, a fresh mount, a
//! fresh cache in each launch. The time is the script's own, from before
//! the pool is made to after its last read (the forks, and the group's
//! join, among it). Every way reads the same offsets and must report the
//! same checksum of what it read.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{bail, Context, Result};

use super::super::tell;
use super::command::{succeeded, tail};
use super::larger::{drop_page_cache, spawn_in};
use super::output::preload_figures;
use super::pgbench::SHARED;
use super::Place;
use super::{program_record, EXT4, INTERPOSER, MOUNT, PRELOAD_STATS};
use crate::cgroup::{Availability, MemCgroup};
use crate::engine::FuseMount;
use crate::report::{Latency, MemoryLimit, RunJob, RunRecord};
use crate::scenario::rounds::scatter;
use crate::scenario::FullQuick;
use crate::targets::JobRuns;
use crate::units::fmt_size;

/// The job: random reads of a forked pool.
pub const POOL: &str = "pool";
/// `foliocache run`, the reads in the one process (no fork).
pub const PRIVATE: &str = "private";
/// Processes of the pool.
pub const PROCS: u32 = 8;
/// Bytes of each read.
const BS: u64 = 64 << 10;
/// The file (full, and with `--quick`): twice the cache.
const FILE: FullQuick<u64> = FullQuick(512 << 20, 128 << 20);
/// The cache, and the cgroup's limit (with `--quick`, room for the
/// interpreters' own memory, which the cgroup counts too).
const CAPACITY: FullQuick<u64> = FullQuick(256 << 20, 64 << 20);
/// Reads in all (full, and with `--quick`).
const READS: FullQuick<u64> = FullQuick(32_768, 4_096);
/// The offsets' seed: every way reads the same blocks.
const SEED: u64 = 86;

/// The job's settings.
#[derive(Debug, Clone)]
pub struct Pool {
    /// The file's size.
    pub file: u64,
    /// Every way's memory: the caches' capacity, the cgroup's limit.
    pub capacity: u64,
    /// Reads in all.
    pub reads: u64,
}

impl Pool {
    /// The full job, or with `quick` the small one.
    pub fn new(quick: bool) -> Pool {
        Pool {
            file: FILE.get(quick),
            capacity: CAPACITY.get(quick),
            reads: READS.get(quick),
        }
    }

    /// The job in a sentence, for the scenario's description.
    pub fn describe(&self) -> String {
        format!(
            "{POOL}: Python's multiprocessing pool of {PROCS} forked processes, {} random \
             reads of {} of a file of {} (twice the memory), cold, five ways at {}: {EXT4} \
             (the pool in a memory cgroup), {MOUNT} (a FUSE mount), {INTERPOSER} (`foliocache \
             run`: the group's cache joined at the fork), {SHARED} (`foliocache run --shared`) \
             and {PRIVATE} (`foliocache run`, the reads in one process); the time is the \
             script's, the pool's making included.",
            self.reads,
            fmt_size(BS),
            fmt_size(self.file),
            fmt_size(self.capacity),
        )
    }
}

/// The reader, run by `python3`: `PATH PROCS READS BS SEED`; `PROCS` 0
/// reads in this process. Prints the seconds and a checksum of the bytes.
const SCRIPT: &str = r#"import multiprocessing, os, random, sys, time
path, procs, reads, bs, seed = sys.argv[1], *map(int, sys.argv[2:6])
blocks = os.path.getsize(path) // bs
rng = random.Random(seed)
offsets = [rng.randrange(blocks) * bs for _ in range(reads)]
chunks = [offsets[i::64] for i in range(64)]
fd = None
def opened():
    global fd
    fd = os.open(path, os.O_RDONLY)
def work(chunk):
    x = 0
    for o in chunk:
        b = os.pread(fd, bs, o)
        if len(b) != bs:
            raise SystemExit(f"short read at {o}: {len(b)}")
        x ^= int.from_bytes(b[:8], "little") ^ int.from_bytes(b[-8:], "little")
    return x
if __name__ == "__main__":
    t = time.monotonic()
    x = 0
    if procs == 0:
        opened()
        for c in chunks:
            x ^= work(c)
    else:
        with multiprocessing.get_context("fork").Pool(procs, initializer=opened) as pool:
            for r in pool.map(work, chunks):
                x ^= r
    print(f"== pool {time.monotonic() - t:.6f} {x:016x}")
"#;

/// Runs the job `at.repeat` rounds in a directory of `at.root`: its runs, none
/// (with a note) where `python3` is missing.
///
/// # Errors
/// A way failed, its output did not parse, or two ways read different
/// bytes.
pub fn run(
    pool: &Pool,
    at: Place<'_>,
    notes: &mut Vec<String>,
    say: &dyn Fn(&str),
) -> Result<Vec<JobRuns>> {
    let Some(python) = python() else {
        let n = format!("programs: {POOL} left out: no python3 on PATH");
        tell(notes, say, n);
        return Ok(Vec::new());
    };
    let dir = at.root.join(POOL);
    let data = dir.join("data");
    fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;
    let data = data.canonicalize()?;
    write_file(&data.join("pool.bin"), pool.file)?;
    fs::write(dir.join("pool.py"), SCRIPT)?;
    let mut labels = vec![INTERPOSER, SHARED, PRIVATE];
    match foliocache_fuse::unavailable() {
        Some(why) => notes.push(format!("programs: {POOL}: {MOUNT} left out: {why}")),
        None => labels.push(MOUNT),
    }
    match at.avail {
        Availability::Unavailable(why) => {
            notes.push(format!(
                "programs: {POOL}: {EXT4} left out: no memory cgroup: {why}"
            ));
        }
        _ => labels.push(EXT4),
    }
    let job = Job {
        pool,
        python,
        script: dir.join("pool.py"),
        data,
        foliocache: std::env::current_exe().context("the foliocache binary")?,
        avail: at.avail,
        checksum: std::cell::RefCell::new(None),
    };
    let runs = super::super::rounds::rounds("programs", &labels, &[POOL], at.repeat, say, |w| {
        job.run(labels[w]).map(|r| vec![r])
    })?;
    fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    Ok(runs)
}

/// The Python interpreter itself (`sys.executable`: not a wrapper script
/// on `PATH`, which would run under the interposer too).
fn python() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    (out.status.success() && path.is_file()).then_some(path)
}

/// Writes `size` bytes of scattered numbers to `path`.
fn write_file(path: &Path, size: u64) -> Result<()> {
    let mut f = std::io::BufWriter::new(fs::File::create(path)?);
    for i in 0..size / 8 {
        f.write_all(&scatter(i).to_le_bytes())?;
    }
    f.into_inner()?.sync_all()?;
    Ok(())
}

/// What each run needs.
struct Job<'a> {
    pool: &'a Pool,
    python: PathBuf,
    script: PathBuf,
    /// The file's directory (the mount's backing, the launcher's `--dir`).
    data: PathBuf,
    foliocache: PathBuf,
    avail: &'a Availability,
    /// The first run's checksum, which every later one must give.
    checksum: std::cell::RefCell<Option<String>>,
}

impl Job<'_> {
    /// The script's arguments after the interpreter: reading `file` with
    /// `procs` processes.
    fn script(&self, cmd: &mut Command, file: &Path, procs: u32) {
        cmd.arg(&self.script)
            .arg(file)
            .arg(procs.to_string())
            .arg(self.pool.reads.to_string())
            .arg(BS.to_string())
            .arg(SEED.to_string());
    }

    /// `foliocache run` with `flags`, the script after it.
    fn launched(&self, flags: &[&str], procs: u32) -> Command {
        let mut cmd = Command::new(&self.foliocache);
        cmd.arg("run")
            .args(flags)
            .arg(format!("--capacity={}", self.pool.capacity))
            .arg("--no-state")
            .arg("--dir")
            .arg(&self.data)
            .arg("--")
            .arg(&self.python)
            .env(PRELOAD_STATS, "1");
        self.script(&mut cmd, &self.data.join("pool.bin"), procs);
        cmd
    }

    /// The script reading `file` without the interposer.
    fn plain(&self, file: &Path) -> Command {
        let mut cmd = Command::new(&self.python);
        cmd.env_remove("LD_PRELOAD");
        self.script(&mut cmd, file, PROCS);
        cmd
    }

    /// One cold run of `way`: its record.
    fn run(&self, way: &str) -> Result<RunRecord> {
        drop_page_cache(&self.data)?;
        let what = format!("programs: {POOL} ({way})");
        let mut limit = None;
        let out: Result<Output> = match way {
            INTERPOSER => self.launched(&[], PROCS).output().map_err(Into::into),
            SHARED => self
                .launched(&["--shared"], PROCS)
                .output()
                .map_err(Into::into),
            PRIVATE => self.launched(&[], 0).output().map_err(Into::into),
            MOUNT => {
                let m = FuseMount::new(&self.data, Some(self.pool.capacity))
                    .with_context(|| format!("{what}: the mount"))?;
                let out = self.plain(&m.mountpoint().join("pool.bin")).output();
                m.unmount().with_context(|| format!("{what}: the mount"))?;
                out.map_err(Into::into)
            }
            _ => {
                let cg = MemCgroup::create(self.avail, self.pool.capacity)?;
                let mut cmd = self.plain(&self.data.join("pool.bin"));
                let out = spawn_in(&cg, &mut cmd).and_then(|c| Ok(c.wait_with_output()?));
                limit = Some(MemoryLimit::of_run(&cg));
                out
            }
        };
        let out = out.with_context(|| what.clone())?;
        let (seconds, sum, notes) = self.parsed(&what, &out)?;
        let ops = self.pool.reads;
        let job = RunJob {
            rw: POOL,
            bs: BS,
            numjobs: if way == PRIVATE { 1 } else { PROCS as usize },
            file_size: self.pool.file,
            ..RunJob::default()
        };
        let per_s = ops as f64 / seconds;
        let mut rec = program_record(way, job, (ops, seconds, per_s), Latency::default(), notes);
        rec.memory.capacity = (way != EXT4).then_some(self.pool.capacity);
        rec.memory.memory_limit = limit;
        let mut first = self.checksum.borrow_mut();
        match first.as_deref() {
            Some(s) if s != sum => bail!("{what}: read bytes of checksum {sum}, not {s}"),
            _ => *first = Some(sum),
        }
        Ok(rec)
    }

    /// The script's seconds and checksum in `out`, and the notes (the
    /// interposer's figures), checked: the script succeeded.
    fn parsed(&self, what: &str, out: &Output) -> Result<(f64, String, Vec<String>)> {
        let (stdout, stderr) = succeeded(what, out)?;
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix("== pool "))
            .with_context(|| format!("{what}: no result:\n{}", tail(&stdout)))?;
        let mut words = line.split_whitespace();
        let seconds: f64 = words
            .next()
            .and_then(|s| s.parse().ok())
            .filter(|&s: &f64| s > 0.0)
            .with_context(|| format!("{what}: no time in {line:?}"))?;
        let sum = words.next().unwrap_or_default().to_string();
        let mut notes = vec![format!("{PROCS} processes, {seconds:.3} s")];
        notes.extend(preload_figures(&stderr).map(|(l, _)| l));
        Ok((seconds, sum, notes))
    }
}
