//! The jobs of the `objectstore` scenario that run a real client built
//! outside the workspace, only when named (`FOLIOCACHE_OBJSTORE_JOBS`):
//!
//! - `datafusion`: DataFusion 55 running a SQL query (`SELECT ... WHERE
//!   ... GROUP BY`) over a Parquet file of many row groups through the
//!   local file, the bare throttled store and `CachedStore` (in memory and
//!   with its disk tier, cold then warm) ([`DATAFUSION_CLIENT`]);
//! - `slatedb`: SlateDB 0.18 reading a database by random gets and a scan
//!   through its own `CachedObjectStore` and through `CachedStore` with
//!   its disk tier, at the same memory and disk ([`SLATEDB_CLIENT`]).
//!
//! Each in one run, the contenders interleaved. Neither client is in the
//! workspace: each crate, under `clients/`, has a workspace and a lock of
//! its own, so that neither the quick start's build nor the test command
//! pays its build (DataFusion's is more than an hour on a small host:
//! docs/measurements/2026-11-30-objectstore-datafusion.md; SlateDB's:
//! docs/measurements/2026-11-30-objectstore-slatedb.md). The job builds
//! it here with `cargo build --release --manifest-path
//! clients/NAME/Cargo.toml` (saying so on stderr first, and how long it
//! takes), runs its binary, and folds the binary's report into a record:
//! its `note: ` lines become the record's notes, its `record` line the
//! record's figures.

use std::path::{Path as FsPath, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};

use super::{named, ObjectBench, DATAFUSION, SLATEDB};
use crate::report::{RunJob, RunRecord};
use crate::targets::JobName;

/// A client under `clients/`.
#[derive(Debug, Clone, Copy)]
pub struct Client {
    /// Its job.
    pub job: JobName,
    /// What it is, in the messages.
    what: &'static str,
    /// Its binary, under its crate's `target/release`.
    binary: &'static str,
    /// What its build costs, said before it starts.
    build_cost: &'static str,
    /// Its record's `dist`.
    dist: &'static str,
    /// The engine in whose runs it runs, and whose figures its record
    /// carries.
    engine: &'static str,
}

/// DataFusion 55's client (`clients/datafusion`).
pub const DATAFUSION_CLIENT: Client = Client {
    job: DATAFUSION,
    what: "DataFusion 55's client",
    binary: "foliocache-datafusion-client",
    build_cost: "the longest of the clients from scratch, its cost measured in docs/measurements/2026-11-30-objectstore-datafusion.md; seconds once built",
    dist: "DataFusion SQL: WHERE and GROUP BY over Parquet",
    engine: super::FOLIO,
};

/// SlateDB 0.18's client (`clients/slatedb`).
pub const SLATEDB_CLIENT: Client = Client {
    job: SLATEDB,
    what: "SlateDB 0.18's client",
    binary: "foliocache-slatedb-client",
    build_cost: "minutes from scratch, its cost measured in docs/measurements/2026-11-30-objectstore-slatedb.md; seconds once built",
    dist: "SlateDB: random gets and a scan",
    engine: super::FOLIO_DISK,
};

/// The clients named in `FOLIOCACHE_OBJSTORE_JOBS` whose engine is
/// `label`, run with `b`'s sizes under `root`: their records.
///
/// # Errors
/// [`Client::run`]'s.
pub fn run_named(label: &str, b: &ObjectBench, root: &FsPath) -> Result<Vec<RunRecord>> {
    let mut records = Vec::new();
    for c in [DATAFUSION_CLIENT, SLATEDB_CLIENT] {
        if c.engine == label && named(c.job) {
            records.push(c.run(&c.args(b), root)?);
        }
    }
    Ok(records)
}

impl Client {
    /// Its command line's arguments at `b`'s sizes (and the remote's
    /// latency, for SlateDB's), beside `--dir`.
    fn args(&self, b: &ObjectBench) -> Vec<(&'static str, String)> {
        if self.job == DATAFUSION {
            return vec![("--file", b.datafusion_file.to_string())];
        }
        vec![
            ("--data", b.slatedb_data.to_string()),
            ("--latency-ms", b.latency.as_millis().to_string()),
            ("--rounds", b.slatedb_rounds.0.to_string()),
            ("--gets", b.slatedb_rounds.1.to_string()),
        ]
    }

    /// Its crate, in the checkout the bench was built from.
    fn crate_dir(&self) -> PathBuf {
        FsPath::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../clients")
            .join(self.job)
    }

    /// Builds the client (if it is not built, or is stale): its binary.
    fn build(&self) -> Result<PathBuf> {
        let (job, what) = (self.job, self.what);
        let dir = self.crate_dir();
        let manifest = dir.join("Cargo.toml");
        ensure!(
            manifest.is_file(),
            "objectstore {job}: {} not found: the job builds {what} from a checkout of the \
             repository",
            manifest.display()
        );
        let target = dir.join("target");
        eprintln!(
            "objectstore {job}: building {what}: cargo build --release --manifest-path {} ({})",
            manifest.display(),
            self.build_cost
        );
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let t = Instant::now();
        let status = Command::new(cargo)
            .args(["build", "--release", "--manifest-path"])
            .arg(&manifest)
            .arg("--target-dir")
            .arg(&target)
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .status()
            .with_context(|| format!("objectstore {job}: running cargo"))?;
        if !status.success() {
            bail!("objectstore {job}: the client's build failed ({status})");
        }
        eprintln!(
            "objectstore {job}: built in {:.0} s",
            t.elapsed().as_secs_f64()
        );
        Ok(target.join("release").join(self.binary))
    }

    /// Runs the client with `args` and `--dir` a directory under `root`:
    /// its record (every comparison in its notes).
    ///
    /// # Errors
    /// The client could not be built or failed (a store, the engine, or
    /// an answer that differed from the one expected), or its report
    /// could not be read.
    pub fn run(&self, args: &[(&str, String)], root: &FsPath) -> Result<RunRecord> {
        let job = self.job;
        let bin = self.build()?;
        let dir = root.join(job);
        std::fs::create_dir_all(&dir)?;
        let mut cmd = Command::new(&bin);
        cmd.arg("--dir").arg(&dir);
        for (flag, value) in args {
            cmd.arg(flag).arg(value);
        }
        let out = cmd
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("objectstore {job}: running {}", bin.display()))?;
        let _ = std::fs::remove_dir_all(&dir);
        if !out.status.success() {
            bail!("objectstore {job}: the client failed ({})", out.status);
        }
        self.fold(&String::from_utf8_lossy(&out.stdout))
    }

    /// The client's report (its stdout) as a record: `size` (the job's
    /// `bs`), `seconds`, `bytes` and, if given, `ops` (else 1),
    /// `amplification` and the latencies `p50` and `p99` (in seconds).
    fn fold(&self, report: &str) -> Result<RunRecord> {
        let job = self.job;
        let mut r = RunRecord {
            engine: self.engine.to_string(),
            ..RunRecord::default()
        };
        let mut size = None;
        r.perf.ops = 1;
        for line in report.lines() {
            if let Some(note) = line.strip_prefix("note: ") {
                r.notes.push(note.to_string());
            } else if let Some(fields) = line.strip_prefix("record ") {
                for (k, v) in fields.split_whitespace().filter_map(|f| f.split_once('=')) {
                    let num = || {
                        v.parse::<f64>()
                            .with_context(|| format!("objectstore {job}: {k}={v}"))
                    };
                    match k {
                        "size" => size = Some(num()? as u64),
                        "seconds" => r.perf.seconds = num()?,
                        "bytes" => r.perf.bytes = num()? as u64,
                        "amplification" => r.cache.read_amplification = Some(num()?),
                        "ops" => r.perf.ops = num()? as u64,
                        "p50" => r.perf.lat_ns.p50 = (num()? * 1e9) as u64,
                        "p99" => r.perf.lat_ns.p99 = (num()? * 1e9) as u64,
                        _ => {}
                    }
                }
            }
        }
        let Some(size) = size else {
            bail!("objectstore {job}: the client's report has no record line");
        };
        r.perf.bw_bytes = r.perf.bytes as f64 / r.perf.seconds.max(1e-9);
        r.perf.iops = r.perf.ops as f64 / r.perf.seconds.max(1e-9);
        r.perf.cpu_us_per_op = f64::NAN;
        r.perf.cpu_s_per_gib = f64::NAN;
        r.job = RunJob {
            rw: job,
            bs: size,
            numjobs: 1,
            dist: Some(self.dist.into()),
            ..RunJob::default()
        };
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_folded_into_a_record() {
        let r = DATAFUSION_CLIENT
            .fold(
                "note: datafusion group-by: foliocache warm 0.1 s\n\
                 note: datafusion group-by: foliocache+disk warm 0.1 s\n\
                 record size=268435456 seconds=0.25 bytes=1000 amplification=0.5\n",
            )
            .unwrap();
        assert_eq!(r.notes.len(), 2);
        assert_eq!(r.job.bs, 268_435_456);
        assert_eq!(r.job.rw, DATAFUSION);
        assert_eq!(r.perf.bytes, 1000);
        assert_eq!(r.cache.read_amplification, Some(0.5));
        assert!((r.perf.bw_bytes - 4000.0).abs() < 1e-6);
    }

    #[test]
    fn a_record_with_latencies_and_no_amplification() {
        let r = SLATEDB_CLIENT
            .fold(
                "note: slatedb: p99\n\
                 record size=300000000 seconds=2 ops=2000 bytes=4096 p50=0.001 p99=0.025\n",
            )
            .unwrap();
        assert_eq!(r.job.rw, SLATEDB);
        assert_eq!(r.engine, super::super::FOLIO_DISK);
        assert_eq!(r.perf.ops, 2000);
        assert!((r.perf.iops - 1000.0).abs() < 1e-6);
        assert_eq!(r.perf.lat_ns.p50, 1_000_000);
        assert_eq!(r.perf.lat_ns.p99, 25_000_000);
        assert_eq!(r.job.bs, 300_000_000);
        assert_eq!(r.cache.read_amplification, None);
        assert_eq!(r.notes.len(), 1);
    }

    #[test]
    fn a_report_without_its_record_is_an_error() {
        for c in [DATAFUSION_CLIENT, SLATEDB_CLIENT] {
            assert!(c.fold("note: something\n").is_err());
            assert!(c.fold("record size=x seconds=1\n").is_err());
        }
    }

    #[test]
    fn each_client_is_a_crate_of_the_checkout() {
        for c in [DATAFUSION_CLIENT, SLATEDB_CLIENT] {
            assert!(c.crate_dir().join("Cargo.toml").is_file(), "{}", c.job);
        }
    }
}
