//! The `memory` job of the `objectstore` scenario: issue 68's bound, "the
//! process never OOM-killed in a memory cgroup of the bound plus 10 %".
//!
//! The bound of a process reading through foliocache is what it held
//! before the cache was built (its *baseline*: the runtime, the remote
//! store's client, the bench's tables) plus the cache's **configured**
//! memory ([`Configured`]): the arena (the capacity), the cache's fixed
//! bookkeeping beside it, an allowance for index nodes and shadows, the
//! tracked objects at `max_objects`, the disk tier's memory (its
//! slots' tags and its ghosts, [`DiskTier::memory_bound`]), and the
//! store's budget of GET bytes in flight (`CachedStore::get_budget`: the
//! bodies streaming into folios, the read-around windows waiting for
//! their tier writes). The file of the tier is on disk, opened
//! `O_DIRECT`: not memory.
//!
//! ```text
//!   parent (the bench)                 child (this binary, MEMORY_ENV set)
//!   cgroup made, no limit yet   ──>    sh: joins the cgroup, execs the child
//!                                      runtime, remote, tables; RSS = baseline
//!                                      cache (+ tier) built: configured
//!                               <──    READY baseline configured
//!   limit = 1.1 x (baseline + configured)
//!                               ──>    GO
//!                                      2 x ops zipf point reads beside scans
//!                                      of the large objects, every byte checked
//!                               <──    DONE (its VmHWM, the cache's overhead)
//!   peak, limit hits, OOM kills read; the cgroup removed
//! ```
//!
//! The child joins the cgroup before it runs (the shell writes its own
//! pid to `cgroup.procs`, then execs it), so everything it faults in is
//! charged there, its baseline included. The data set (the point reads'
//! objects, 4 M, and the scanned ones) is larger than the cache. Where no
//! memory cgroup can be made the job says why and measures nothing.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use foliocache_object_store::DiskTier;

use super::engines::Engine;
use super::restart::Spec;
use super::{point_reads, MEMORY, TASKS};
use crate::cgroup::{Availability, MemCgroup};
use crate::report::{MemoryLimit, RunJob, RunRecord};

/// The variable that makes this binary the job's reader.
pub const MEMORY_ENV: &str = "FOLIOCACHE_OBJSTORE_MEMORY";
/// The limit of the cgroup while the child builds its cache (before the
/// bound is known): none in effect.
const UNLIMITED: u64 = 1 << 50;
/// The bound's slack: the limit is the bound plus 10 %.
const SLACK_PERCENT: u64 = 10;
/// The index nodes' and shadows' allowance, a fraction of the capacity:
/// 1 % (the default shadow budget is 0.6 %, a densely filled cache's
/// index nodes 0.2 %: `foliocache::Cache::memory`).
const INDEX_PERMILLE: u64 = 10;
/// The bytes a tracked object may take: its entry (about 200) and its
/// mapping's state (a few hundred: `MemoryUsage::file_bytes`), rounded
/// up (docs/object-store.md, "Bounds").
const OBJECT_BYTES: u64 = 1024;
/// The OOM killer's signal (SIGKILL on Linux).
const SIGKILL: i32 = 9;

/// The configured memory of an engine's cache: what it may hold.
#[derive(Debug, Clone, Copy)]
struct Configured {
    /// The arena: the cache's capacity.
    arena: u64,
    /// The cache's bookkeeping fixed at build: folio descriptors, the
    /// allocator's bitmaps, the dirty bitmap.
    fixed: u64,
    /// Index nodes and shadows ([`INDEX_PERMILLE`] of the arena).
    index: u64,
    /// Tracked objects at `max_objects` ([`OBJECT_BYTES`] each).
    objects: u64,
    /// The disk tier's memory ([`DiskTier::memory_bound`]; 0 without).
    tier: u64,
    /// The store's budget of GET bytes in flight
    /// (`CachedStore::get_budget`).
    gets: u64,
}

impl Configured {
    fn of(e: &Engine) -> Result<Configured> {
        let Engine::Folio(s, ..) = e else {
            bail!("objectstore memory job: only foliocache's engines have a configured bound");
        };
        let m = s.cache().memory();
        Ok(Configured {
            arena: m.arena_bytes,
            fixed: m.overhead_bytes(),
            index: m.arena_bytes * INDEX_PERMILLE / 1000,
            objects: s.stats().max_objects * OBJECT_BYTES,
            tier: s.disk_tier().map_or(0, |t| DiskTier::memory_bound(t)),
            gets: s.get_budget(),
        })
    }

    fn total(&self) -> u64 {
        self.arena + self.fixed + self.index + self.objects + self.tier + self.gets
    }

    fn encode(&self) -> String {
        let Configured {
            arena,
            fixed,
            index,
            objects,
            tier,
            gets,
        } = self;
        format!("{arena} {fixed} {index} {objects} {tier} {gets}")
    }

    fn decode(f: &[&str]) -> Result<Configured> {
        let n = |i: usize| -> Result<u64> {
            f.get(i)
                .context("objectstore memory child: a short READY line")?
                .parse()
                .context("objectstore memory child: READY")
        };
        Ok(Configured {
            arena: n(0)?,
            fixed: n(1)?,
            index: n(2)?,
            objects: n(3)?,
            tier: n(4)?,
            gets: n(5)?,
        })
    }
}

/// A field of `/proc/self/status`, in bytes (`VmRSS`, `VmHWM`).
fn status_bytes(field: &str) -> Result<u64> {
    let s = std::fs::read_to_string("/proc/self/status")?;
    let kib = s
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        .with_context(|| format!("/proc/self/status has no {field}"))?;
    Ok(kib << 10)
}

/// In the reader ([`MEMORY_ENV`] set): see the module documentation.
pub(super) fn child_main() -> Option<ExitCode> {
    let spec = std::env::var(MEMORY_ENV).ok()?;
    Some(match reader(&spec) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("objectstore memory child: {e:#}");
            ExitCode::FAILURE
        }
    })
}

fn reader(spec: &str) -> Result<()> {
    let spec = Spec::decode(spec)?;
    // As the bench's own runtime.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()?;
    let objects = spec.objects();
    let zipf = Arc::new(spec.zipf()?);
    let baseline = status_bytes("VmRSS")?;
    let e = Arc::new(spec.engine(objects.clone())?);
    let configured = Configured::of(&e)?;
    println!("READY {baseline} {}", configured.encode());
    std::io::stdout().flush()?;
    let mut go = String::new();
    std::io::stdin().read_line(&mut go)?;
    if go.trim() != "GO" {
        bail!("told {go:?}, not GO");
    }
    let m = rt.block_on(point_reads(&e, &zipf, &objects, 0, 2 * spec.ops, true))?;
    let Engine::Folio(s, ..) = &*e else {
        bail!("not a foliocache engine");
    };
    let mem = s.cache().memory();
    println!(
        "DONE {} {} {} {} {} {} {} {}",
        status_bytes("VmHWM")?,
        mem.index_bytes,
        mem.file_bytes,
        mem.files,
        m.lat.len(),
        m.gets,
        m.remote_bytes,
        m.bytes
    );
    std::io::stdout().flush()?;
    // Ends here, the cache and the runtime with it: readahead the reads
    // started may still be in flight on the cache's IO threads, and a GET
    // of theirs driven through a runtime shutting down panics in tokio's
    // timer (the reader's figures are out already).
    std::process::exit(0)
}

/// What the reader said when it ended.
struct Done {
    /// Its peak RSS.
    hwm: u64,
    /// The cache's index nodes (shadows included) at the end.
    index: u64,
    /// Its mappings' own state at the end.
    file_bytes: u64,
    /// Mappings open at the end.
    files: u64,
    reads: u64,
    gets: u64,
    remote_bytes: u64,
    bytes: u64,
}

impl Done {
    fn parse(line: &str) -> Option<Done> {
        let f: Vec<u64> = line
            .strip_prefix("DONE ")?
            .split(' ')
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        let [hwm, index, file_bytes, files, reads, gets, remote_bytes, bytes] = f[..] else {
            return None;
        };
        Some(Done {
            hwm,
            index,
            file_bytes,
            files,
            reads,
            gets,
            remote_bytes,
            bytes,
        })
    }
}

/// One run of the reader in a cgroup of its own.
struct Outcome {
    baseline: u64,
    /// The cgroup's charge at the baseline.
    charged: Option<u64>,
    configured: Configured,
    /// The cgroup's limit (unlimited for the first run).
    limit: MemoryLimit,
    peak: u64,
    killed: bool,
    seconds: f64,
    done: Option<Done>,
}

impl Outcome {
    fn bound(&self) -> u64 {
        self.baseline + self.configured.total()
    }
}

/// glibc's limit on malloc arenas, and what every engine's reader runs
/// with unless the environment sets its own: the deployment the
/// documentation advises for a bound with little slack. With glibc's
/// default (an arena per allocating thread: tokio's blocking pool, the IO
/// engine's threads), what each thread frees stays resident in its arena:
/// 14 to 22 MiB past the bound at 8 MiB (measurements/2026-11-28-objectstore-memory.md).
const ARENA_ENV: &str = "MALLOC_ARENA_MAX";
const ARENAS: &str = "2";

/// Runs the reader of `spec` in a new cgroup of `avail`, limited to its
/// bound plus [`SLACK_PERCENT`] once its cache is built if `limited`.
fn reader_run(spec: &Spec, avail: &Availability, limited: bool) -> Result<Outcome> {
    let mut cg = MemCgroup::create(avail, UNLIMITED)?;
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"echo $$ > "$0/cgroup.procs" && exec "$@""#)
        .arg(cg.path())
        .arg(std::env::current_exe()?)
        .env(MEMORY_ENV, spec.encode());
    if std::env::var_os(ARENA_ENV).is_none() {
        cmd.env(ARENA_ENV, ARENAS);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("objectstore: starting the memory job's reader")?;
    let mut lines = BufReader::new(child.stdout.take().context("the reader's stdout")?).lines();
    let mut stdin = child.stdin.take().context("the reader's stdin")?;
    let ready = lines.next().transpose()?.unwrap_or_default();
    let Some(f) = ready.strip_prefix("READY ") else {
        let status = child.wait()?;
        bail!("objectstore: the memory job's reader ended before it was ready: {status}");
    };
    let f: Vec<&str> = f.split(' ').collect();
    let baseline: u64 = f[0].parse().context("READY")?;
    let configured = Configured::decode(&f[1..])?;
    let charged = cg.current();
    let bound = baseline + configured.total();
    if limited {
        cg.set_limit(bound + bound * SLACK_PERCENT / 100)?;
    }
    let t = Instant::now();
    writeln!(stdin, "GO")?;
    let done = lines.find_map(|l| l.ok().and_then(|l| Done::parse(&l)));
    let status = child.wait()?;
    let seconds = t.elapsed().as_secs_f64();
    let usage = cg.usage();
    let killed = status.signal() == Some(SIGKILL) || usage.oom_kills.unwrap_or(0) > 0;
    if !killed && !status.success() {
        bail!("objectstore: the memory job's reader failed: {status}");
    }
    Ok(Outcome {
        baseline,
        charged,
        configured,
        limit: MemoryLimit::of_run(&cg),
        peak: usage.peak_bytes.unwrap_or(0),
        killed,
        seconds,
        done,
    })
}

/// Runs the reader of `spec`'s engine twice, each in a memory cgroup of
/// its own: without a limit (the memory it takes), then limited to its
/// bound plus 10 % (whether the OOM killer comes): the job's record, the
/// limited run's (a note saying why, where no cgroup can be made).
///
/// # Errors
/// The reader could not run, or failed other than by the OOM killer (a
/// wrong byte, an error of the remote).
pub fn run(spec: &Spec, avail: &Availability) -> Result<RunRecord> {
    let mut r = RunRecord {
        engine: spec.label.clone(),
        ..RunRecord::default()
    };
    r.job = RunJob {
        rw: MEMORY,
        numjobs: TASKS as usize,
        file_size: spec.d,
        dist: Some("zipf 0.99".into()),
        ..RunJob::default()
    };
    r.perf.cpu_us_per_op = f64::NAN;
    r.perf.cpu_s_per_gib = f64::NAN;
    r.memory.capacity = Some(spec.m);
    if let Availability::Unavailable(why) = avail {
        r.memory.memory_limit = Some(MemoryLimit::of_scenario(avail, 0));
        r.notes.push(format!("skipped: no memory cgroup: {why}"));
        return Ok(r);
    }
    let free = reader_run(spec, avail, false)?;
    let o = reader_run(spec, avail, true)?;
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let (c, bound) = (&o.configured, o.bound());
    r.notes.push(format!(
        "bound {:.1} MiB: baseline {:.1} MiB (RSS before the cache; the cgroup's charge then {}) \
         + configured {:.1} MiB (arena {:.1}, fixed bookkeeping {:.2}, index and shadows {:.2}, \
         {} objects {:.2}, disk tier {:.2}, GETs in flight {:.2}); limit {:.1} MiB (+{SLACK_PERCENT} %); peak {:.1} MiB \
         ({:.3}x the bound); OOM-killed: {}",
        mib(bound),
        mib(o.baseline),
        o.charged
            .map_or("unknown".into(), |c| format!("{:.1} MiB", mib(c))),
        mib(c.total()),
        mib(c.arena),
        mib(c.fixed),
        mib(c.index),
        c.objects / OBJECT_BYTES,
        mib(c.objects),
        mib(c.tier),
        mib(c.gets),
        mib(o.limit.limit_bytes.unwrap_or(0)),
        mib(o.peak),
        o.peak as f64 / bound.max(1) as f64,
        if o.killed { "yes" } else { "no" },
    ));
    r.notes.push(format!(
        "without a limit (a run before): peak {:.1} MiB, {:.3}x its bound of {:.1} MiB{}",
        mib(free.peak),
        free.peak as f64 / free.bound().max(1) as f64,
        mib(free.bound()),
        free.done.as_ref().map_or(String::new(), |d| d.say(c, mib)),
    ));
    r.perf.seconds = o.seconds;
    if let Some(d) = &o.done {
        r.perf.ops = d.reads;
        r.perf.bytes = d.bytes;
        r.perf.iops = d.reads as f64 / o.seconds.max(1e-9);
        r.perf.bw_bytes = d.bytes as f64 / o.seconds.max(1e-9);
        r.notes.push(format!("limited run{}", d.say(c, mib)));
    }
    r.notes.push(format!(
        "every engine's reader ran with {ARENA_ENV}={} (docs/object-store.md, \"Bounds\")",
        std::env::var(ARENA_ENV).unwrap_or_else(|_| ARENAS.into())
    ));
    r.memory.memory_limit = Some(o.limit);
    Ok(r)
}

impl Done {
    /// What the reader said, for a note.
    fn say(&self, c: &Configured, mib: impl Fn(u64) -> f64) -> String {
        format!(
            ": reader VmHWM {:.1} MiB; at the end the cache's index nodes and shadows {:.3} MiB \
             (allowance {:.2} MiB), {} mappings {:.3} MiB; {} reads, {} remote GETs, {} remote \
             bytes",
            mib(self.hwm),
            mib(self.index),
            mib(c.index),
            self.files,
            mib(self.file_bytes),
            self.reads,
            self.gets,
            self.remote_bytes
        )
    }
}
