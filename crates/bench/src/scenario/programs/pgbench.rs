//! The `programs` scenario's PostgreSQL job: Debian's `postgresql`,
//! `initdb` and the server, `pgbench -i`, then `pgbench -S` (read-only)
//! and the default TPC-B-like run, 2 clients each, two ways in one run,
//! interleaved round after round:
//!
//! ```text
//!   ext4    the cluster on the data's filesystem: the kernel's page cache
//!   shared  foliocache run --shared: one cache for the server's processes
//! ```
//!
//! `shared_buffers` is a quarter of the database, so the page cache
//! serves most of what the server reads; the cache holds the whole
//! database ([`Pgbench::capacity`]). Each run makes a fresh cluster, so no
//! way finds the database cached by an earlier one. PostgreSQL refuses to
//! run as root: as root, the job runs it as the `postgres` user (the
//! package makes it), the `foliocache` binary and its library copied
//! where that user can run them. Where PostgreSQL is not installed, or
//! its user cannot reach the data directory, the job says so and runs
//! nothing. See docs/preload.md, "Processes".

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::report::{Latency, RunJob, RunRecord};
use crate::scenario::FullQuick;
use crate::targets::JobRuns;
use crate::units::{fmt_size, fmt_size_approx};

use super::super::tell;
use super::command::tail;
use super::{program_record, EXT4};

/// `pgbench -S`: read-only, a primary-key select per transaction.
pub const SELECT: &str = "pgbench-select";
/// The default TPC-B-like run: three updates, a select and an insert per
/// transaction, each commit a WAL `fdatasync`.
pub const TPCB: &str = "pgbench-tpcb";
/// Under `foliocache run --shared`.
pub const SHARED: &str = "shared";
/// Clients (and pgbench threads) of each run.
pub(super) const CLIENTS: u32 = 2;
/// pgbench's scale (full, and with `--quick`): 100,000 accounts, about
/// 15 MB, a unit.
const SCALE: FullQuick<u32> = FullQuick(16, 2);
/// Seconds of each measured run.
const SECONDS: FullQuick<u32> = FullQuick(15, 3);
/// The bytes a transaction is counted as in the table's bandwidth: a
/// PostgreSQL page (so bandwidth ratios are transaction-rate ratios).
const PAGE: u64 = 8192;
/// The package that has PostgreSQL.
const PACKAGE: &str = "postgresql";
/// Where Debian's packages put each version's programs.
const VERSIONS: &str = "/usr/lib/postgresql";

/// The job's settings.
#[derive(Debug, Clone)]
pub struct Pgbench {
    /// pgbench's scale.
    pub scale: u32,
    /// Seconds of each measured run.
    pub seconds: u32,
}

impl Pgbench {
    /// The full job, or with `quick` the small one.
    pub fn new(quick: bool) -> Pgbench {
        Pgbench {
            scale: SCALE.get(quick),
            seconds: SECONDS.get(quick),
        }
    }

    /// The database's size, about (pgbench's 100,000 accounts a unit,
    /// with their indexes and the other tables).
    fn database(&self) -> u64 {
        u64::from(self.scale) * 15_000_000
    }

    /// `shared_buffers`: a quarter of the database, at least 16 MiB.
    fn shared_buffers(&self) -> u64 {
        (self.database() / 4).max(16 << 20) >> 20 << 20
    }

    /// The cache of the `shared` way: four times the database (its WAL
    /// and the indexes built by `pgbench -i` besides), at least 256 MiB.
    pub fn capacity(&self) -> u64 {
        (self.database() * 4).max(256 << 20).div_ceil(1 << 20) << 20
    }

    /// The job in a sentence, for the scenario's description.
    pub fn describe(&self) -> String {
        format!(
            "{SELECT} and {TPCB}: PostgreSQL (Debian's {PACKAGE}): a fresh cluster, \
             `pgbench -i -s {}` (about {}), `shared_buffers` {}, then `pgbench -S` and the \
             default TPC-B-like run, {CLIENTS} clients, {} s each; two ways: {EXT4} (the \
             kernel's page cache) and {SHARED} (`foliocache run --shared --capacity {}`, one \
             cache for the server's processes). IOPS is transactions per second, bandwidth \
             those times {} (a PostgreSQL page), latency pgbench's average.",
            self.scale,
            fmt_size_approx(self.database()),
            fmt_size(self.shared_buffers()),
            self.seconds,
            fmt_size(self.capacity()),
            fmt_size(PAGE),
        )
    }
}

/// The server and the script each run executes: `$1` `init` (a cluster,
/// `pgbench -i -s $5` and a checkpoint), `run` (the size, then `pgbench
/// -S` and TPC-B for `$6` s each, their read counters around them) or
/// `fresh` (a cluster, `pgbench -i -s $5`, then as `run`), `$2`
/// PostgreSQL's programs, `$3` the cluster, `$4` the run's directory, `$7`
/// `shared_buffers` in MiB, `$8` the data's block device's stat file
/// (`-`: none). The server stops however the script ends.
pub(super) const SCRIPT: &str = r#"#!/bin/sh
set -e
B=$2 C=$3 D=$4 S=$8
[ "$1" = run ] || "$B/initdb" -D "$C" -A trust > /dev/null
"$B/postgres" -D "$C" -c shared_buffers=$7MB -c listen_addresses= \
  -c unix_socket_directories="$D" -c max_wal_size=1GB > "$D/log" 2>&1 &
pid=$!
trap 'kill -INT $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
i=0
until "$B/pg_isready" -h "$D" -q; do
  i=$((i + 1))
  if [ $i -gt 300 ]; then echo "the server did not start:" >&2; cat "$D/log" >&2; exit 1; fi
  sleep 0.2
done
if [ "$1" != run ]; then
  "$B/pgbench" -h "$D" -i -q -s $5 postgres > "$D/init" 2>&1 || { cat "$D/init" >&2; exit 1; }
fi
if [ "$1" = init ]; then
  "$B/psql" -h "$D" -q -c checkpoint postgres
  exit 0
fi
reads() {
  sleep 0.2
  s=$(sed -n 's/^read_bytes: *//p' /proc/$pid/io 2>/dev/null) || s=
  if [ -n "$s" ]; then
    for p in $(cat /proc/$pid/task/*/children 2>/dev/null); do
      r=$(sed -n 's/^read_bytes: *//p' /proc/$p/io 2>/dev/null) || r=
      s=$((s + ${r:-0}))
    done
  fi
  dev="- -"
  [ -r "$S" ] && dev=$(awk '{print $1, $3}' "$S")
  echo "== reads ${s:--} $dev"
}
echo "== size $("$B/psql" -h "$D" -At -c "select pg_database_size('postgres')" postgres)"
echo "== pgbench-select"
reads
"$B/pgbench" -h "$D" -S -c 2 -j 2 -T $6 postgres
reads
echo "== pgbench-tpcb"
reads
"$B/pgbench" -h "$D" -c 2 -j 2 -T $6 postgres
reads
"#;

/// Runs the job `repeat` rounds in a directory of `root`: its runs, none
/// (with a note) where PostgreSQL is missing or cannot run here.
///
/// # Errors
/// A run failed, or its output did not parse.
pub fn run(
    pg: &Pgbench,
    root: &Path,
    repeat: u32,
    notes: &mut Vec<String>,
    say: &dyn Fn(&str),
) -> Result<Vec<JobRuns>> {
    let job = match Server::new(root, "pgbench") {
        Ok(server) => Job { pg, server },
        Err(why) => {
            let n = format!("programs: {SELECT} and {TPCB} left out: {why:#}");
            tell(notes, say, n);
            return Ok(Vec::new());
        }
    };
    let labels = [EXT4, SHARED];
    let runs =
        super::super::rounds::rounds("programs", &labels, &[SELECT, TPCB], repeat, say, |w| {
            job.round(labels[w])
        })?;
    fs::remove_dir_all(&job.server.dir)
        .with_context(|| format!("programs: removing {}", job.server.dir.display()))?;
    Ok(runs)
}

/// PostgreSQL's programs, a job's directory and how to run in it (as
/// PostgreSQL's user where this process is root).
pub(super) struct Server {
    pub(super) bin: PathBuf,
    pub(super) dir: PathBuf,
    /// The `foliocache` binary the ways under it run (beside its library).
    pub(super) foliocache: PathBuf,
    /// The user PostgreSQL runs as (`None`: this process's).
    user: Option<&'static str>,
}

impl Server {
    /// Finds PostgreSQL and makes the job's directory `root/name` with
    /// [`SCRIPT`] in it (`run.sh`); an error says why the job cannot run
    /// here.
    pub(super) fn new(root: &Path, name: &str) -> Result<Server> {
        let bin = postgres_bin()?;
        let dir = root.join(name);
        fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let root_user = rustix::process::geteuid().is_root();
        let mut server = Server {
            bin,
            foliocache: std::env::current_exe().context("the foliocache binary")?,
            dir,
            user: root_user.then_some("postgres"),
        };
        fs::write(server.dir.join("run.sh"), SCRIPT)?;
        if root_user {
            // Reachable by the server's user: the job's directories
            // (traversable, not listable), and copies of the binary and
            // its library.
            for d in [root, &server.dir] {
                fs::set_permissions(d, fs::Permissions::from_mode(0o711))?;
            }
            let copies = server.dir.join("bin");
            fs::create_dir(&copies)?;
            let lib = crate::preload::library_for(&server.foliocache)?;
            for from in [&server.foliocache, &lib] {
                let name = from.file_name().context("a file without a name")?;
                fs::copy(from, copies.join(name))
                    .with_context(|| format!("copying {}", from.display()))?;
            }
            server.foliocache = copies.join("foliocache");
            let script = server.dir.join("run.sh");
            let reach = server.as_user("test").arg("-r").arg(&script).status()?;
            if !reach.success() {
                bail!(
                    "the postgres user cannot reach {} (a directory above it closed to \
                     other users?)",
                    script.display()
                );
            }
        }
        Ok(server)
    }

    /// `program` as PostgreSQL's user.
    pub(super) fn as_user(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        match self.user {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(program);
                c
            }
            None => Command::new(program),
        }
    }

    /// A fresh directory `name` of the job's, PostgreSQL's user's.
    pub(super) fn fresh_dir(&self, name: &str) -> Result<PathBuf> {
        let d = self.dir.join(name);
        match fs::remove_dir_all(&d) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("programs: removing {}", d.display()))
            }
            _ => {}
        }
        fs::create_dir(&d)?;
        if let Some(user) = self.user {
            let owner = Command::new("chown").arg(user).arg(&d).status()?;
            if !owner.success() {
                bail!("programs: chown {user} {}: {owner}", d.display());
            }
        }
        Ok(d)
    }

    /// The job's script (`run.sh`) with `args`, under `foliocache run
    /// FOLIOCACHE_ARGS --` where `run` is given, as PostgreSQL's user.
    pub(super) fn script(&self, run: Option<&[String]>) -> Command {
        let mut cmd = match run {
            Some(args) => {
                let mut c = self.as_user(&self.foliocache);
                c.arg("run").args(args).arg("--").arg("sh");
                c
            }
            None => self.as_user("sh"),
        };
        cmd.arg(self.dir.join("run.sh"));
        cmd
    }
}

/// The output of a script's run (`what`) that succeeded, parsed; an error
/// with its output's tail where it failed or did not parse.
pub(super) fn parsed(what: &str, out: &std::process::Output) -> Result<PgResults> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}\n{}",
            out.status,
            tail(&String::from_utf8_lossy(&out.stderr)),
            tail(&stdout)
        );
    }
    parse(&stdout).with_context(|| format!("{what}:\n{}", tail(&stdout)))
}

/// The fitting database's job: its settings and its server.
struct Job<'a> {
    pg: &'a Pgbench,
    server: Server,
}

impl Job<'_> {
    /// One run of `way`: a fresh cluster, both benchmarks; their records.
    fn round(&self, way: &str) -> Result<Vec<RunRecord>> {
        let d = self.server.fresh_dir(way)?;
        let run = [
            "--shared".to_string(),
            format!("--capacity={}", self.pg.capacity()),
            "--dir".to_string(),
            d.display().to_string(),
        ];
        let mut cmd = self.server.script((way == SHARED).then_some(&run[..]));
        cmd.arg("fresh")
            .arg(&self.server.bin)
            .arg(d.join("data"))
            .arg(&d)
            .arg(self.pg.scale.to_string())
            .arg(self.pg.seconds.to_string())
            .arg((self.pg.shared_buffers() >> 20).to_string())
            .arg("-");
        let what = format!("programs: pgbench ({way})");
        let out = cmd.output().with_context(|| what.clone())?;
        let results = parsed(&what, &out)?;
        fs::remove_dir_all(&d).with_context(|| format!("programs: removing {}", d.display()))?;
        Ok(results
            .runs
            .iter()
            .map(|r| self.record(way, r, results.size))
            .collect())
    }

    /// The record of run `r` on `way`, of a database of `size` bytes.
    fn record(&self, way: &str, r: &PgRun, size: u64) -> RunRecord {
        let mut notes = vec![format!(
            "{}; database {}, shared_buffers {}",
            r.line(self.pg.seconds),
            fmt_size_approx(size),
            fmt_size(self.pg.shared_buffers()),
        )];
        if way == SHARED {
            notes.push(format!(
                "foliocache run --shared --capacity {}",
                fmt_size(self.pg.capacity())
            ));
        }
        let mut rec = pg_record(way, r.name, r, (size, self.pg.seconds), notes);
        rec.memory.capacity = (way == SHARED).then_some(self.pg.capacity());
        rec
    }
}

/// The record of run `r` on `way` as job `name`: a database of `size`
/// bytes, `seconds` of pgbench, its transactions counted as
/// [`PAGE`]s.
pub(super) fn pg_record(
    way: &str,
    name: &'static str,
    r: &PgRun,
    (size, seconds): (u64, u32),
    notes: Vec<String>,
) -> RunRecord {
    let job = RunJob {
        rw: name,
        bs: PAGE,
        numjobs: CLIENTS as usize,
        file_size: size,
        ..RunJob::default()
    };
    let lat = Latency {
        mean: r.latency_ms * 1e6,
        ..Latency::default()
    };
    let figures = (r.transactions, f64::from(seconds), r.tps);
    program_record(way, job, figures, lat, notes)
}

/// The newest PostgreSQL's programs under [`VERSIONS`].
fn postgres_bin() -> Result<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = fs::read_dir(VERSIONS)
        .with_context(|| format!("no {VERSIONS} (apt-get install {PACKAGE})"))?
        .filter_map(|e| {
            let e = e.ok()?;
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            ["initdb", "postgres", "pg_isready", "pgbench", "psql"]
                .iter()
                .all(|p| bin.join(p).is_file())
                .then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).with_context(|| {
        format!("no PostgreSQL with pgbench in {VERSIONS} (apt-get install {PACKAGE})")
    })
}

/// One pgbench run's figures.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct PgRun {
    pub(super) name: &'static str,
    pub(super) transactions: u64,
    pub(super) tps: f64,
    pub(super) latency_ms: f64,
    /// The read counters the script printed before and after the run
    /// (`== reads SERVER DEVICE_READS DEVICE_SECTORS`; none where it
    /// prints none).
    counts: Vec<Counts>,
}

/// Read counters at one moment, `None` where unknown (`-`): the bytes
/// the server's processes had read from storage (`/proc/PID/io`
/// `read_bytes` of the postmaster, which holds its reaped children's, and
/// of its live children), and the reads and 512-byte sectors the data's
/// block device had completed.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(super) struct Counts {
    pub(super) server_bytes: Option<u64>,
    pub(super) device_reads: Option<u64>,
    pub(super) device_sectors: Option<u64>,
}

impl PgRun {
    /// `pgbench: N transactions in S s, T tps, latency average L ms`.
    pub(super) fn line(&self, seconds: u32) -> String {
        format!(
            "pgbench: {} transactions in {seconds} s, {:.0} tps, latency average {:.3} ms",
            self.transactions, self.tps, self.latency_ms
        )
    }

    /// What was read during the run: the last counters less the first
    /// (`None` where the script printed fewer than two).
    pub(super) fn read(&self) -> Option<Counts> {
        let (a, b) = (self.counts.first()?, self.counts.last()?);
        let d = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?));
        (self.counts.len() >= 2).then(|| Counts {
            server_bytes: d(a.server_bytes, b.server_bytes),
            device_reads: d(a.device_reads, b.device_reads),
            device_sectors: d(a.device_sectors, b.device_sectors),
        })
    }
}

/// What a run's script printed: the database's size and both runs.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct PgResults {
    pub(super) size: u64,
    pub(super) runs: Vec<PgRun>,
}

/// Parses the script's output: `== size N`, then each benchmark's `==
/// NAME` line followed by pgbench's report (and `== reads` lines).
fn parse(out: &str) -> Result<PgResults> {
    let mut size = None;
    let mut runs: Vec<PgRun> = Vec::new();
    for line in out.lines() {
        let field = |prefix: &str| line.strip_prefix(prefix).map(str::trim);
        if let Some(s) = field("== size ") {
            size = Some(
                s.parse()
                    .with_context(|| format!("the database's size: {s}"))?,
            );
        } else if let Some(c) = field("== reads ") {
            let r = runs
                .last_mut()
                .context("read counters before a benchmark")?;
            let mut v = c.split_whitespace().map(|w| w.parse::<u64>().ok());
            r.counts.push(Counts {
                server_bytes: v.next().flatten(),
                device_reads: v.next().flatten(),
                device_sectors: v.next().flatten(),
            });
        } else if let Some(name) = field("== ") {
            let name = [SELECT, TPCB]
                .into_iter()
                .find(|n| *n == name)
                .with_context(|| format!("an unknown benchmark {name}"))?;
            runs.push(PgRun {
                name,
                transactions: 0,
                tps: f64::NAN,
                latency_ms: f64::NAN,
                counts: Vec::new(),
            });
        } else if let Some(r) = runs.last_mut() {
            if let Some(n) = field("number of transactions actually processed:") {
                r.transactions = n.split('/').next().unwrap_or(n).parse()?;
            } else if let Some(l) = field("latency average =") {
                r.latency_ms = l.trim_end_matches("ms").trim().parse()?;
            } else if let Some(t) = field("tps =") {
                r.tps = t.split_whitespace().next().unwrap_or(t).parse()?;
            }
        }
    }
    let names: Vec<&str> = runs.iter().map(|r| r.name).collect();
    if names != [SELECT, TPCB] {
        bail!("reported {names:?}, not [{SELECT}, {TPCB}]");
    }
    for r in &runs {
        let positive = |x: f64| x.is_finite() && x > 0.0;
        if r.transactions == 0 || !positive(r.tps) || !positive(r.latency_ms) {
            bail!("{}: no transactions, tps or latency in its report", r.name);
        }
    }
    Ok(PgResults {
        size: size.context("no database size")?,
        runs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "== size 38395407
== pgbench-select
pgbench (15.14 (Debian 15.14-0+deb12u1))
transaction type: <builtin: select only>
scaling factor: 2
query mode: simple
number of clients: 2
number of threads: 2
maximum number of tries: 1
duration: 3 s
number of transactions actually processed: 120345
number of failed transactions: 0 (0.000%)
latency average = 0.050 ms
initial connection time = 4.377 ms
tps = 40115.666351 (without initial connection time)
== pgbench-tpcb
pgbench (15.14 (Debian 15.14-0+deb12u1))
transaction type: <builtin: TPC-B (sort of)>
number of transactions actually processed: 1234
latency average = 4.862 ms
tps = 411.331 (without initial connection time)
";

    #[test]
    fn parses_pgbench_reports() {
        let r = parse(OUT).unwrap();
        assert_eq!(r.size, 38_395_407);
        assert_eq!(
            r.runs,
            [
                PgRun {
                    name: SELECT,
                    transactions: 120_345,
                    tps: 40115.666351,
                    latency_ms: 0.05,
                    counts: Vec::new(),
                },
                PgRun {
                    name: TPCB,
                    transactions: 1234,
                    tps: 411.331,
                    latency_ms: 4.862,
                    counts: Vec::new(),
                },
            ]
        );
    }

    #[test]
    fn refuses_a_report_without_a_benchmark_or_its_figures() {
        let no_tpcb = &OUT[..OUT.find("== pgbench-tpcb").unwrap()];
        assert!(parse(no_tpcb).unwrap_err().to_string().contains("reported"));
        let no_tps = OUT.replace("tps = 411.331", "tps: none");
        assert!(parse(&no_tps)
            .unwrap_err()
            .to_string()
            .contains("pgbench-tpcb"));
        assert!(parse(&OUT.replace("== size 38395407\n", ""))
            .unwrap_err()
            .to_string()
            .contains("size"));
    }

    #[test]
    fn the_cache_holds_the_database_and_shared_buffers_a_quarter() {
        for quick in [false, true] {
            let pg = Pgbench::new(quick);
            assert!(pg.capacity() >= 4 * pg.database());
            assert!(pg.shared_buffers() >= 16 << 20);
            assert!(pg.shared_buffers() <= pg.database() / 4 || pg.shared_buffers() == 16 << 20);
        }
    }
}
