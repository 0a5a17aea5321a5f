//! The `datafusion` job of the `objectstore` scenario, run only when
//! named (`FOLIOCACHE_OBJSTORE_JOBS=datafusion`): DataFusion 55, a real
//! client, running a SQL query (`SELECT ... WHERE ... GROUP BY`) over a
//! Parquet file of many row groups through the local file, the bare
//! throttled store and `CachedStore` (in memory and with its disk tier,
//! cold then warm), in one run, the contenders interleaved.
//!
//! DataFusion is not in the workspace: its crate, `clients/datafusion`,
//! has a workspace and a lock of its own, so that neither the quick
//! start's build nor the test command pays its build (more than an hour on
//! a small host: docs/measurements/2026-11-30-objectstore-datafusion.md).
//! The job builds it here with `cargo build --release --manifest-path
//! clients/datafusion/Cargo.toml` (saying so on stderr first, and how
//! long it takes), runs its binary, and folds the binary's report into a
//! record: its `note: ` lines become the record's notes, its `record`
//! line the memory cache's warm figures.

use std::path::{Path as FsPath, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};

use super::DATAFUSION;
use crate::report::{RunJob, RunRecord};

/// The client's crate, in the checkout the bench was built from.
fn crate_dir() -> PathBuf {
    FsPath::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/datafusion")
}

/// What the build costs, said before it starts.
const BUILD_COST: &str = "more than an hour from scratch on a loaded 2-vCPU host, \
                          seconds once built";

/// Builds the client (if it is not built, or is stale): its binary.
fn build() -> Result<PathBuf> {
    let dir = crate_dir();
    let manifest = dir.join("Cargo.toml");
    ensure!(
        manifest.is_file(),
        "objectstore datafusion: {} not found: the job builds the DataFusion client from a \
         checkout of the repository",
        manifest.display()
    );
    let target = dir.join("target");
    eprintln!(
        "objectstore datafusion: building DataFusion 55's client: cargo build --release \
         --manifest-path {} ({BUILD_COST})",
        manifest.display()
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
        .context("objectstore datafusion: running cargo")?;
    if !status.success() {
        bail!("objectstore datafusion: the client's build failed ({status})");
    }
    eprintln!(
        "objectstore datafusion: built in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    Ok(target.join("release/foliocache-datafusion-client"))
}

/// Runs the job over a file of about `file` bytes written under `root`:
/// its record (the memory cache's warm query, every comparison in its
/// notes).
///
/// # Errors
/// The client could not be built or failed (a store, DataFusion, or an
/// answer that differed from the local file's), or its report could not
/// be read.
pub fn run(file: u64, root: &FsPath) -> Result<RunRecord> {
    let bin = build()?;
    let dir = root.join("datafusion");
    std::fs::create_dir_all(&dir)?;
    let out = Command::new(&bin)
        .arg("--dir")
        .arg(&dir)
        .arg("--file")
        .arg(file.to_string())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("objectstore datafusion: running {}", bin.display()))?;
    let _ = std::fs::remove_dir_all(&dir);
    if !out.status.success() {
        bail!("objectstore datafusion: the client failed ({})", out.status);
    }
    fold(&String::from_utf8_lossy(&out.stdout))
}

/// The client's report (its stdout) as a record.
fn fold(report: &str) -> Result<RunRecord> {
    let mut r = RunRecord {
        engine: super::FOLIO.to_string(),
        ..RunRecord::default()
    };
    let mut size = None;
    for line in report.lines() {
        if let Some(note) = line.strip_prefix("note: ") {
            r.notes.push(note.to_string());
        } else if let Some(fields) = line.strip_prefix("record ") {
            for (k, v) in fields.split_whitespace().filter_map(|f| f.split_once('=')) {
                let num = || {
                    v.parse::<f64>()
                        .with_context(|| format!("objectstore datafusion: {k}={v}"))
                };
                match k {
                    "size" => size = Some(num()? as u64),
                    "seconds" => r.perf.seconds = num()?,
                    "bytes" => r.perf.bytes = num()? as u64,
                    "amplification" => r.cache.read_amplification = Some(num()?),
                    _ => {}
                }
            }
        }
    }
    let Some(size) = size else {
        bail!("objectstore datafusion: the client's report has no record line");
    };
    r.perf.bw_bytes = r.perf.bytes as f64 / r.perf.seconds.max(1e-9);
    r.perf.ops = 1;
    r.perf.cpu_us_per_op = f64::NAN;
    r.perf.cpu_s_per_gib = f64::NAN;
    r.job = RunJob {
        rw: DATAFUSION,
        bs: size,
        numjobs: 1,
        dist: Some("DataFusion SQL: WHERE and GROUP BY over Parquet".into()),
        ..RunJob::default()
    };
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_folded_into_a_record() {
        let r = fold(
            "note: datafusion group-by: foliocache warm 0.1 s\n\
             note: datafusion group-by: foliocache+disk warm 0.1 s\n\
             record size=268435456 seconds=0.25 bytes=1000 amplification=0.5\n",
        )
        .unwrap();
        assert_eq!(r.notes.len(), 2);
        assert_eq!(r.job.bs, 268_435_456);
        assert_eq!(r.perf.bytes, 1000);
        assert_eq!(r.cache.read_amplification, Some(0.5));
        assert!((r.perf.bw_bytes - 4000.0).abs() < 1e-6);
    }

    #[test]
    fn a_report_without_its_record_is_an_error() {
        assert!(fold("note: something\n").is_err());
        assert!(fold("record size=x seconds=1\n").is_err());
    }
}
