//! The `programs` scenario's PostgreSQL larger than its memory: a
//! cluster made once (`pgbench -i -s S`, outside any limit, its page
//! cache dropped before each run), then, for each way, the server
//! started in a memory cgroup of L and `pgbench -S` and the default
//! TPC-B-like run against it, 2 clients each, three ways interleaved
//! round after round at equal memory:
//!
//! ```text
//!   ext4-25      the kernel's page cache, shared_buffers L/4     (192 MiB of 768)
//!   ext4-75      the kernel's page cache, shared_buffers 3/4 L   (576 MiB of 768)
//!   interposer   foliocache run --capacity L - L/6 - L/10, shared_buffers L/6 (563, 128 of 768)
//! ```
//!
//! The issue's sizes (issue 86): `-s 100` (`-3x`) and `-s 200` (`-10x`)
//! in 768 MiB; with `--quick` the 3x job alone, at `-s 16` in 128 MiB
//! (the same ratios). Each record says its cgroup's limit, peak, limit
//! hits and OOM kills, and what the run read from storage: the bytes
//! the server's processes read (`/proc/PID/io` `read_bytes`, the same
//! count for every way: the kernel's readahead and foliocache's reads are
//! both submitted by the reading backend), per transaction, and the
//! reads of the data's block device. A run past its deadline is killed
//! with everything in its cgroup, and the job fails saying so (and the
//! OOM killer's kills, where it killed): it never hangs. TPC-B's writes
//! stay in the cluster from one way's run to the next (the ways
//! alternate their order). See docs/bench/programs.md.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::super::tell;
use super::larger::{drop_page_cache, spawn_in};
use super::pgbench::{parsed, pg_record, PgRun, Server, CLIENTS, SELECT};
use super::{Place, INTERPOSER};
use crate::cgroup::{Availability, MemCgroup};
use crate::report::{MemoryLimit, RunRecord};
use crate::scenario::FullQuick;
use crate::targets::JobRuns;
use crate::units::{fmt_size, fmt_size_approx};

/// The job's name in `FOLIOCACHE_PROGRAMS_JOBS`.
pub const JOB: &str = "pgbench-larger";
/// `pgbench -S` and TPC-B, the database about 3 times the limit (the
/// issue's `-s 100` in 768 MiB).
pub const SELECT_3X: &str = "pgbench-select-3x";
/// TPC-B at 3x.
pub const TPCB_3X: &str = "pgbench-tpcb-3x";
/// `pgbench -S` at 10x (the issue's `-s 200` in 768 MiB).
pub const SELECT_10X: &str = "pgbench-select-10x";
/// TPC-B at 10x.
pub const TPCB_10X: &str = "pgbench-tpcb-10x";
/// The kernel's page cache, `shared_buffers` a quarter of the limit.
pub const EXT4_25: &str = "ext4-25";
/// The kernel's page cache, `shared_buffers` three quarters.
pub const EXT4_75: &str = "ext4-75";
/// The memory limit L of each way's cgroup (full, and with `--quick`).
const LIMIT: FullQuick<u64> = FullQuick(768 << 20, 128 << 20);
/// What the server's processes (the postmaster, its background
/// processes, the backends, pgbench and the shell) and the cache's own
/// memory are left at least beside the interposer's cache and
/// `shared_buffers`: with a sixth of a 128 MiB limit (21 MiB) the
/// cgroup's OOM killer ended a backend.
const HEAP: u64 = 64 << 20;
/// The scales at 3x and at 10x (full); with `--quick`, 3x only.
const SCALE_3X: FullQuick<u32> = FullQuick(100, 16);
const SCALE_10X: u32 = 200;
/// Seconds of each measured run.
const SECONDS: FullQuick<u32> = FullQuick(30, 2);
/// What a run may take beyond its two measured runs (the server's start,
/// the size query, its stop) before it is killed.
const SLACK: Duration = Duration::from_secs(120);

/// The job's settings.
#[derive(Debug, Clone)]
pub struct PgLarger {
    /// The memory limit of each way's cgroup.
    pub limit: u64,
    /// The databases: the scale, and the names of its two jobs.
    pub sizes: Vec<(u32, [&'static str; 2])>,
    /// Seconds of each measured run.
    pub seconds: u32,
}

impl PgLarger {
    /// The full job, or with `quick` the small one.
    pub fn new(quick: bool) -> PgLarger {
        let mut sizes = vec![(SCALE_3X.get(quick), [SELECT_3X, TPCB_3X])];
        if !quick {
            sizes.push((SCALE_10X, [SELECT_10X, TPCB_10X]));
        }
        PgLarger {
            limit: LIMIT.get(quick),
            sizes,
            seconds: SECONDS.get(quick),
        }
    }

    /// Keeps the databases `wanted` selects: all where it wants [`JOB`],
    /// else those whose `-select` job it wants by its size
    /// (`pgbench-larger-3x`: [`SELECT_3X`] and [`TPCB_3X`]).
    pub fn select(&mut self, wanted: impl Fn(&str) -> bool) {
        if !wanted(JOB) {
            self.sizes
                .retain(|(_, [sel, _])| wanted(&sel.replace("-select", "-larger")));
        }
    }

    /// `shared_buffers` of `way`, in whole MiB.
    pub fn shared_buffers(&self, way: &str) -> u64 {
        let b = match way {
            EXT4_25 => self.limit / 4,
            EXT4_75 => self.limit / 4 * 3,
            _ => self.limit / 6,
        };
        b >> 20 << 20
    }

    /// The interposer's cache: the limit less its `shared_buffers` (L/6)
    /// and what is neither (L/10, at least [`HEAP`]): 563 MiB of 768,
    /// 43 of 128.
    ///
    /// Every way's cgroup holds the same L, and the ext4 ways fill all
    /// of it (the kernel's page cache takes what `shared_buffers` and
    /// the processes leave). What the interposer cannot give its cache
    /// is what no limit may reclaim beside it: the server's processes'
    /// own memory (their heaps, PostgreSQL's shared memory past
    /// `shared_buffers`), pgbench's, and the cache's bookkeeping in its
    /// segment (a 32-byte descriptor and 8 to 16 bytes of index a page,
    /// `Layout::of`, docs/design.md section 13) and the page tables of
    /// each process mapping it. Measured with L/6 for all of it
    /// (docs/measurements/2026-12-01-pgbench-larger.md): the cgroup
    /// peaked at 691 MiB of 768 beside a 512 MiB cache and 128 MiB of
    /// `shared_buffers`, 51 MiB theirs, at 3x and at 10x, never at the
    /// limit: 77 MiB the interposer held less than the ext4 ways. L/10
    /// (77 MiB of 768) leaves those 51 MiB, the bookkeeping of the
    /// larger cache (under 2 MiB more: 0.4 MiB of descriptors, the index
    /// doubled to 2 MiB) and about 24 MiB of margin against the cgroup's
    /// OOM killer, since without swap none of it is reclaimable; at a
    /// small L the processes' memory, which does not shrink with L, is
    /// the floor ([`HEAP`]).
    pub fn capacity(&self) -> u64 {
        let heap = (self.limit / 10).max(HEAP);
        (self.limit - self.shared_buffers(INTERPOSER) - heap) >> 20 << 20
    }

    /// The job in a sentence, for the scenario's description.
    pub fn describe(&self) -> String {
        let sizes: Vec<String> = self
            .sizes
            .iter()
            .map(|(s, [sel, tpcb])| format!("{sel} and {tpcb} (`pgbench -i -s {s}`)"))
            .collect();
        format!(
            "{}: PostgreSQL larger than its memory, a cluster made once and its page cache \
             dropped before each run, the server in a memory cgroup of {} each run, \
             `pgbench -S` then TPC-B, {CLIENTS} clients, {} s each; three ways: {EXT4_25} and \
             {EXT4_75} (the kernel's page cache, `shared_buffers` {} and {}) and {INTERPOSER} \
             (`foliocache run --capacity {}`, `shared_buffers` {}); each record says the \
             bytes the server's processes read from storage per transaction.",
            sizes.join(", "),
            fmt_size(self.limit),
            self.seconds,
            fmt_size(self.shared_buffers(EXT4_25)),
            fmt_size(self.shared_buffers(EXT4_75)),
            fmt_size(self.capacity()),
            fmt_size(self.shared_buffers(INTERPOSER)),
        )
    }
}

/// Runs the job `at.repeat` rounds in a directory of `at.root`: its runs,
/// none (with a note) where PostgreSQL is missing or no memory cgroup can
/// be made.
///
/// # Errors
/// A run failed (the OOM killer's kills said), outlived its deadline, or
/// its output did not parse.
pub fn run(
    pg: &PgLarger,
    at: Place<'_>,
    notes: &mut Vec<String>,
    say: &dyn Fn(&str),
) -> Result<Vec<JobRuns>> {
    let left_out = |why: String| format!("programs: {JOB} left out: {why}");
    if let Availability::Unavailable(why) = at.avail {
        tell(notes, say, left_out(format!("no memory cgroup: {why}")));
        return Ok(Vec::new());
    }
    let server = match Server::new(at.root, JOB) {
        Ok(server) => server,
        Err(why) => {
            tell(notes, say, left_out(format!("{why:#}")));
            return Ok(Vec::new());
        }
    };
    let mut runs = Vec::new();
    for &(scale, names) in &pg.sizes {
        let job = Job {
            pg,
            cluster: server.fresh_dir(&format!("s{scale}"))?,
            server: &server,
            scale,
            names,
            avail: at.avail,
        };
        job.init()?;
        let labels = [EXT4_25, EXT4_75, INTERPOSER];
        runs.extend(super::super::rounds::rounds(
            "programs",
            &labels,
            &names,
            at.repeat,
            say,
            |w| job.round(labels[w]),
        )?);
        fs::remove_dir_all(&job.cluster)
            .with_context(|| format!("programs: removing {}", job.cluster.display()))?;
    }
    fs::remove_dir_all(&server.dir)
        .with_context(|| format!("programs: removing {}", server.dir.display()))?;
    Ok(runs)
}

/// One database's job: its cluster and how to run the server on it.
struct Job<'a> {
    pg: &'a PgLarger,
    server: &'a Server,
    cluster: PathBuf,
    scale: u32,
    names: [&'static str; 2],
    avail: &'a Availability,
}

impl Job<'_> {
    /// The script's arguments after the mode: programs, cluster, run
    /// directory, scale, seconds, `shared_buffers` of `way`, stat file.
    fn args(&self, run_dir: &Path, way: &str) -> Vec<String> {
        let stat = crate::disk::stat_path(&self.cluster);
        vec![
            self.server.bin.display().to_string(),
            self.cluster.join("data").display().to_string(),
            run_dir.display().to_string(),
            self.scale.to_string(),
            self.pg.seconds.to_string(),
            (self.pg.shared_buffers(way) >> 20).to_string(),
            stat.map_or("-".into(), |p| p.display().to_string()),
        ]
    }

    /// Makes the cluster and its database, outside any limit.
    fn init(&self) -> Result<()> {
        let d = self.server.fresh_dir(&format!("s{}-init", self.scale))?;
        let out = self
            .server
            .script(None)
            .arg("init")
            .args(self.args(&d, EXT4_25))
            .output()
            .context("programs: pgbench -i")?;
        let what = format!("programs: pgbench -i -s {} ({JOB})", self.scale);
        if !out.status.success() {
            bail!(
                "{what} failed ({}):\n{}",
                out.status,
                super::command::tail(&String::from_utf8_lossy(&out.stderr))
            );
        }
        fs::remove_dir_all(&d).with_context(|| format!("programs: removing {}", d.display()))
    }

    /// One run of `way`: the cluster's page cache dropped, the server in
    /// a cgroup of the limit, both benchmarks; their records.
    fn round(&self, way: &str) -> Result<Vec<RunRecord>> {
        drop_page_cache(&self.cluster.join("data"))?;
        let d = self.server.fresh_dir(way)?;
        let run = [
            format!("--capacity={}", self.pg.capacity()),
            "--no-state".to_string(),
            "--dir".to_string(),
            self.cluster.display().to_string(),
        ];
        let mut cmd = self.server.script((way == INTERPOSER).then_some(&run[..]));
        cmd.arg("run").args(self.args(&d, way));
        let what = format!("programs: pgbench -s {} ({way}, {JOB})", self.scale);
        let cg = MemCgroup::create(self.avail, self.pg.limit)?;
        let deadline = Duration::from_secs(2 * u64::from(self.pg.seconds)) + SLACK;
        let (out, killed) = within(&cg, &mut cmd, deadline).with_context(|| what.clone())?;
        let oom = cg.usage().oom_kills.unwrap_or(0);
        if killed > 0 || !out.status.success() {
            let log = fs::read_to_string(d.join("log")).unwrap_or_default();
            bail!(
                "{what}: {}; the cgroup's OOM killer killed {oom} processes; the server's log \
                 ends:\n{}\n{}",
                if killed > 0 {
                    format!("past its deadline of {deadline:?}: killed {killed} processes")
                } else {
                    format!("failed ({})", out.status)
                },
                super::command::tail(&log),
                super::command::tail(&String::from_utf8_lossy(&out.stderr)),
            );
        }
        let results = parsed(&what, &out)?;
        let limit = MemoryLimit::of_run(&cg);
        drop(cg);
        fs::remove_dir_all(&d).with_context(|| format!("programs: removing {}", d.display()))?;
        Ok(results
            .runs
            .iter()
            .map(|r| self.record(way, r, results.size, (&limit, oom)))
            .collect())
    }

    /// The record of run `r` on `way`, of a database of `size` bytes, in
    /// a cgroup of `limit` whose OOM killer killed `oom` processes.
    fn record(
        &self,
        way: &str,
        r: &PgRun,
        size: u64,
        (limit, oom): (&MemoryLimit, u64),
    ) -> RunRecord {
        let name = if r.name == SELECT {
            self.names[0]
        } else {
            self.names[1]
        };
        let mut notes = vec![
            format!(
                "{}; database {} ({:.1}x the limit), shared_buffers {}",
                r.line(self.pg.seconds),
                fmt_size_approx(size),
                size as f64 / self.pg.limit as f64,
                fmt_size(self.pg.shared_buffers(way)),
            ),
            read_note(r),
            format!("the cgroup's OOM kills: {oom}"),
        ];
        if way == INTERPOSER {
            notes.push(format!(
                "foliocache run --capacity {} --no-state",
                fmt_size(self.pg.capacity())
            ));
        }
        let mut rec = pg_record(way, name, r, (size, self.pg.seconds), notes);
        rec.memory.capacity = (way == INTERPOSER).then_some(self.pg.capacity());
        rec.memory.memory_limit = Some(limit.clone());
        rec
    }
}

/// What run `r` read from storage, per transaction: `reads: the server's
/// processes read B bytes from storage, P per transaction; the device
/// read ...`.
fn read_note(r: &PgRun) -> String {
    let per = |x: u64| x as f64 / r.transactions.max(1) as f64;
    let Some(c) = r.read() else {
        return "reads: not counted".into();
    };
    let server = c
        .server_bytes
        .map_or("not counted (no /proc/PID/io)".into(), |b| {
            format!("{b} bytes, {:.0} per transaction", per(b))
        });
    let device = match (c.device_reads, c.device_sectors) {
        (Some(n), Some(s)) => format!(
            "{n} reads of {} bytes, {:.2} reads and {:.0} bytes per transaction (the whole \
             device's, other processes' among them)",
            s * 512,
            per(n),
            per(s * 512)
        ),
        _ => "not counted (no block device)".into(),
    };
    format!("reads: the server's processes read from storage {server}; the data's device: {device}")
}

/// Runs `cmd` in `cg` (its output piped) until it exits or `deadline`
/// passes, when everything in `cg` is killed: its output, and how many
/// processes were killed (0: it exited by itself).
fn within(
    cg: &MemCgroup,
    cmd: &mut std::process::Command,
    deadline: Duration,
) -> Result<(Output, usize)> {
    let child = spawn_in(cg, cmd)?;
    let (done, wait) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        let watchdog = s.spawn(move || match wait.recv_timeout(deadline) {
            Err(mpsc::RecvTimeoutError::Timeout) => cg.kill_all(),
            _ => 0,
        });
        let out = child.wait_with_output();
        let _ = done.send(());
        let killed = watchdog.join().unwrap_or(0);
        Ok((out?, killed))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_way_has_the_same_memory_and_the_database_is_larger() {
        for quick in [false, true] {
            let pg = PgLarger::new(quick);
            // The interposer's cache and shared_buffers leave the
            // server's processes and the cache's bookkeeping a tenth of
            // the limit, at least HEAP, and take the rest but a MiB.
            let ours = pg.capacity() + pg.shared_buffers(INTERPOSER);
            let left = (pg.limit / 10).max(HEAP);
            assert!(ours + left <= pg.limit, "{ours}");
            assert!(ours + left + (1 << 20) > pg.limit, "{ours}");
            assert_eq!(pg.shared_buffers(EXT4_75), 3 * pg.shared_buffers(EXT4_25));
            // About 16 MB a unit of scale (measured): near twice the limit.
            let (scale, names) = pg.sizes[0];
            assert!(
                u64::from(scale) * 16_000_000 >= 18 * pg.limit / 10,
                "{scale}"
            );
            assert_eq!(names, [SELECT_3X, TPCB_3X]);
            assert_eq!(pg.sizes.len(), if quick { 1 } else { 2 });
        }
        let full = PgLarger::new(false);
        assert_eq!(full.limit, 768 << 20);
        assert_eq!(
            (full.shared_buffers(INTERPOSER), full.capacity()),
            (128 << 20, 563 << 20)
        );
        // With --quick the floor: 43 MiB of 128, as before.
        assert_eq!(PgLarger::new(true).capacity(), 43 << 20);
        assert_eq!(full.sizes[1].0, 200);
        let mut only = full.clone();
        only.select(|j| j == "pgbench-larger-10x");
        assert_eq!(only.sizes, [(200, [SELECT_10X, TPCB_10X])]);
        let mut all = full.clone();
        all.select(|j| j == JOB);
        assert_eq!(all.sizes.len(), 2);
    }

    const OUT: &str = "== size 255000000
== pgbench-select
== reads 1000 50 100
tps = 900.5 (without initial connection time)
number of transactions actually processed: 2000
latency average = 2.2 ms
== reads 16385000 2050 32100
== pgbench-tpcb
== reads 16385000 2050 32100
number of transactions actually processed: 100
latency average = 20 ms
tps = 33.3 (without initial connection time)
== reads 16385000 - -
";

    #[test]
    fn a_run_says_what_it_read_per_transaction() {
        let out = std::process::Output {
            status: std::os::unix::process::ExitStatusExt::from_raw(0),
            stdout: OUT.into(),
            stderr: Vec::new(),
        };
        let r = parsed("test", &out).unwrap();
        assert_eq!(r.size, 255_000_000);
        let select = read_note(&r.runs[0]);
        assert!(
            select.contains("read from storage 16384000 bytes, 8192 per transaction"),
            "{select}"
        );
        assert!(
            select.contains("2000 reads of 16384000 bytes, 1.00 reads and 8192 bytes"),
            "{select}"
        );
        // The device's counters unknown at the end: not counted.
        let tpcb = read_note(&r.runs[1]);
        assert!(
            tpcb.contains("storage 0 bytes, 0 per transaction"),
            "{tpcb}"
        );
        assert!(tpcb.contains("not counted (no block device)"), "{tpcb}");
    }
}
