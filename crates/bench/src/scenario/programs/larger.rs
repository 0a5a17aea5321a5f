//! The `programs` scenario's database larger than memory: one database
//! of [`Larger::keys`] keys (`fillseq`; 3.3 times the limit on disk,
//! twice with `--quick`), filled once outside any limit, then read at random by
//! [`THREADS`] threads (`readrandom`), each way's process in a memory
//! cgroup of its own limited to the same L, as a user with a memory
//! limit would run it:
//!
//! ```text
//!   ext4        buffered: the kernel's page cache     RocksDB's block cache L/32
//!   direct      use_direct_reads                      RocksDB's block cache B
//!   interposer  foliocache run --capacity B + L/32    RocksDB's block cache L/32
//!
//!   B = 3/4 L, and at most L - 40 MiB (RocksDB's own heap beside it)
//! ```
//!
//! Each way reads the same files (the interposer serves their
//! directory), their page cache dropped before each run so that no way
//! finds pages charged elsewhere, in two passes in one process: the first
//! fills the caches, which start empty, the second (other keys: each
//! thread of a benchmark draws from a seed of its own) is measured. The
//! ways interleave, in alternating order, round after round.
//!
//! A RocksDB data block of `block_size` 4096 holds about 4,014 bytes, laid
//! end to end, so nearly every block straddles two 4 KiB pages: a page
//! cache (the kernel's, the interposer's) holds two pages for each block
//! it caches where the block cache holds the block. Without `--quick` the
//! job runs a second time on a database filled with RocksDB's
//! `block_align` ([`LARGER_ALIGNED`]: each block padded to a page of its
//! own), which shows what that costs the page caches.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

use super::super::tell;
use super::command::{checked, interposed, interposer_note, plain, DbRun};
use super::Place;
use super::{db_record, one_line, DIRECT, EXT4, INTERPOSER, KV_BYTES, PROGRAM};
use crate::cgroup::{Availability, MemCgroup};
use crate::report::{MemoryLimit, RunRecord};
use crate::scenario::FullQuick;
use crate::targets::JobRuns;
use crate::units::{fmt_size, fmt_size_approx};

/// The job: readrandom of a database larger than the memory limit.
pub const LARGER: &str = "readrandom-larger";
/// The same on a database of blocks aligned to pages (`block_align`).
pub const LARGER_ALIGNED: &str = "readrandom-larger-aligned";
/// Threads reading.
pub const THREADS: u32 = 2;
/// Keys (full, and with `--quick`): 4M keys are 855 MB on disk, 3.3
/// times the limit; 900k, twice the quick limit.
const KEYS: FullQuick<u64> = FullQuick(4_000_000, 900_000);
/// The memory limit L of each way's cgroup (full, and with `--quick`).
const LIMIT: FullQuick<u64> = FullQuick(256 << 20, 96 << 20);
/// What RocksDB's own heap (table readers' indexes and filters, the
/// memtable, the allocator's arenas) is left beside its block cache, at
/// least: with a quarter of a small limit the cgroup's OOM killer ended
/// `direct` runs (docs/bench/programs.md).
const HEAP: u64 = 40 << 20;
/// Reads of each thread in each pass (full, and with `--quick`).
const READS: FullQuick<u64> = FullQuick(100_000, 10_000);

/// The job's settings.
#[derive(Debug, Clone)]
pub struct Larger {
    /// Keys filled.
    pub keys: u64,
    /// The memory limit of each way's cgroup.
    pub limit: u64,
    /// Reads of each thread in each pass.
    pub reads: u64,
    /// Whether [`LARGER_ALIGNED`] runs too.
    pub aligned: bool,
}

impl Larger {
    /// The full job, or with `quick` the small one (seconds).
    pub fn new(quick: bool) -> Larger {
        Larger {
            keys: KEYS.get(quick),
            limit: LIMIT.get(quick),
            reads: READS.get(quick),
            aligned: !quick,
        }
    }

    /// The `direct` way's block cache: 3/4 of the limit (192 MiB of
    /// 256), and at most the limit less [`HEAP`] (56 MiB of 96), the rest
    /// left to the program.
    pub fn block_cache(&self) -> u64 {
        (self.limit / 4 * 3).min(self.limit.saturating_sub(HEAP))
    }

    /// The interposer's capacity: the `direct` way's block cache and the
    /// small block cache the interposer's program keeps beside it
    /// (200 MiB of 256: 25/32), so that both leave the program the same.
    pub fn capacity(&self) -> u64 {
        self.block_cache() + self.small_cache()
    }

    /// The `ext4` and `interposer` ways' block cache: L/32 (RocksDB's
    /// default 8 MiB, of 256).
    pub fn small_cache(&self) -> u64 {
        self.limit / 32
    }

    /// The job in a sentence, for the scenario's description.
    pub fn describe(&self) -> String {
        format!(
            "{LARGER}, a database larger than memory: {} keys ({} raw; fillseq, once) read \
             at random by {THREADS} threads, {} reads each in a pass, the second pass \
             measured, each way's process in a memory cgroup of {}: {EXT4} (the kernel's page \
             cache, dropped before each run; a block cache of {}), {DIRECT} (RocksDB's block \
             cache of {} over use_direct_reads) and {INTERPOSER} (`foliocache run --capacity \
             {}`; a block cache of {}).{}",
            self.keys,
            fmt_size_approx(self.keys * KV_BYTES),
            self.reads,
            fmt_size(self.limit),
            fmt_size(self.small_cache()),
            fmt_size(self.block_cache()),
            fmt_size(self.capacity()),
            fmt_size(self.small_cache()),
            if self.aligned {
                format!(
                    " {LARGER_ALIGNED}: the same on a database of blocks aligned to pages \
                     (RocksDB's block_align)."
                )
            } else {
                String::new()
            }
        )
    }

    /// The jobs that run: their names, and whether their blocks are
    /// aligned to pages.
    fn jobs(&self) -> Vec<(&'static str, bool)> {
        let mut jobs = vec![(LARGER, false)];
        if self.aligned {
            jobs.push((LARGER_ALIGNED, true));
        }
        jobs
    }
}

/// Runs the job `at.repeat` rounds with `db_bench` in a directory of `at.root`:
/// its runs, none (with a note) where no memory cgroup can be made.
///
/// # Errors
/// The program or a way failed, or a cgroup could not be made or entered.
pub fn run(
    db_bench: &Path,
    lg: &Larger,
    at: Place<'_>,
    notes: &mut Vec<String>,
    say: &dyn Fn(&str),
) -> Result<Vec<JobRuns>> {
    if let Availability::Unavailable(why) = at.avail {
        let n = format!("programs: {LARGER} left out: no memory cgroup: {why}");
        tell(notes, say, n);
        return Ok(Vec::new());
    }
    let mut runs = Vec::new();
    for (name, align) in lg.jobs() {
        let dir = at.root.join(name);
        fs::create_dir(&dir).with_context(|| format!("programs: creating {}", dir.display()))?;
        let job = Job {
            db_bench,
            lg,
            name,
            align,
            db: dir.join("db"),
            dir,
            avail: at.avail,
        };
        job.fill()?;
        let labels = [EXT4, DIRECT, INTERPOSER];
        runs.extend(super::super::rounds::rounds(
            "programs",
            &labels,
            &[name],
            at.repeat,
            say,
            |w| job.read(labels[w]).map(|r| vec![r]),
        )?);
        fs::remove_dir_all(&job.dir)
            .with_context(|| format!("programs: removing {}", job.dir.display()))?;
    }
    Ok(runs)
}

/// The job's database and how to run the program on it.
struct Job<'a> {
    db_bench: &'a Path,
    lg: &'a Larger,
    /// The job's name, and whether its blocks are aligned to pages.
    name: &'static str,
    align: bool,
    /// The interposer's directory, and the database in it.
    dir: PathBuf,
    db: PathBuf,
    avail: &'a Availability,
}

impl Job<'_> {
    /// Fills the database, its memtable flushed and its compactions done
    /// (so that no reader changes it), outside any limit.
    fn fill(&self) -> Result<()> {
        let run = DbRun {
            benchmarks: "fillseq,flush,waitforcompaction",
            existing: false,
            keys: self.lg.keys,
            cache: self.lg.small_cache(),
            threads: 1,
        };
        let what = format!("programs: {PROGRAM} fillseq ({})", self.name);
        let mut args = run.args(self.db_bench, &self.db);
        if self.align {
            args.push("--block_align=1".into());
        }
        let out = plain(&args).output().with_context(|| what.clone())?;
        checked(&what, &out, &["fillseq"])?;
        Ok(())
    }

    /// `way`'s run: the page cache of the database dropped, then two
    /// passes of readrandom in a cgroup of the limit; the second's record.
    fn read(&self, way: &str) -> Result<RunRecord> {
        drop_page_cache(&self.db)?;
        let cache = if way == DIRECT {
            self.lg.block_cache()
        } else {
            self.lg.small_cache()
        };
        let run = DbRun {
            benchmarks: "readrandom,readrandom",
            existing: true,
            keys: self.lg.keys,
            cache,
            threads: THREADS,
        };
        let mut args = run.args(self.db_bench, &self.db);
        args.push(format!("--reads={}", self.lg.reads).into());
        if way == DIRECT {
            args.push("--use_direct_reads=1".into());
        }
        let mut cmd = if way == INTERPOSER {
            interposed(args, self.lg.capacity(), &self.dir, None)?
        } else {
            plain(&args)
        };
        let what = format!("programs: {PROGRAM} readrandom ({}, {way})", self.name);
        let cg = MemCgroup::create(self.avail, self.lg.limit)?;
        let out = spawn_in(&cg, &mut cmd)
            .and_then(|c| Ok(c.wait_with_output()?))
            .with_context(|| what.clone())?;
        let (results, stderr) = checked(&what, &out, &["readrandom", "readrandom"])?;
        let r = &results[1];
        let mut notes = vec![
            format!("{PROGRAM}: {}", one_line(r)),
            format!(
                "the first readrandom pass, in the same process: {}",
                one_line(&results[0])
            ),
        ];
        if way == INTERPOSER {
            notes.push(interposer_note(&what, "readrandom,readrandom", &stderr)?);
        }
        let capacity = match way {
            DIRECT => Some(self.lg.block_cache()),
            INTERPOSER => Some(self.lg.capacity()),
            _ => None,
        };
        let mut rec = db_record(way, self.name, r, self.lg.keys * KV_BYTES, THREADS, notes);
        rec.memory.capacity = capacity;
        rec.memory.memory_limit = Some(MemoryLimit::of_run(&cg));
        Ok(rec)
    }
}

/// Starts `cmd` (its output piped) with this process inside `cg`, so
/// that the child starts there (a child begins in its parent's cgroup),
/// and leaves it: the child's memory, the page cache its reads bring in
/// among it, is charged to `cg` (`get_mem_cgroup_from_mm`).
pub(super) fn spawn_in(cg: &MemCgroup, cmd: &mut Command) -> Result<std::process::Child> {
    let inside = cg.enter()?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    drop(inside);
    Ok(child?)
}

/// Writes back and drops the page cache of every file under `dir`, its
/// subdirectories' too (`POSIX_FADV_DONTNEED`), so that the next way
/// finds none of it.
pub(super) fn drop_page_cache(dir: &Path) -> Result<()> {
    for e in fs::read_dir(dir).with_context(|| format!("programs: reading {}", dir.display()))? {
        let e = e?;
        let path = e.path();
        let kind = e.file_type()?;
        if kind.is_dir() {
            drop_page_cache(&path)?;
            continue;
        }
        if !kind.is_file() {
            continue;
        }
        let f = fs::File::open(&path)
            .with_context(|| format!("programs: opening {}", path.display()))?;
        f.sync_all()
            .with_context(|| format!("programs: syncing {}", path.display()))?;
        crate::sys::drop_cache(&f)
            .with_context(|| format!("programs: dropping the page cache of {}", path.display()))?;
    }
    Ok(())
}
