//! How `db_bench` is started and checked: its arguments ([`DbRun`]), run
//! plainly ([`plain`]) or under the interposer ([`interposed`]), and what
//! its output and the interposer's figures say ([`checked`],
//! [`interposer_note`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{bail, Context, Result};

use super::output::{parse, preload_figures, warm_line, DbResult};
use super::{KEY_BYTES, PRELOAD_STATS, SEED, VALUE_BYTES};
use crate::preload::{preloaded, Preload};
use crate::state_path::StateArgs;

/// One invocation's settings: its benchmarks (joined by commas), on a
/// fresh database or the existing one, of `keys` keys, with a block cache
/// of `cache` bytes, in `threads` threads.
pub(super) struct DbRun<'a> {
    pub(super) benchmarks: &'a str,
    pub(super) existing: bool,
    pub(super) keys: u64,
    pub(super) cache: u64,
    pub(super) threads: u32,
}

impl DbRun<'_> {
    /// The program `db_bench` and its arguments, on the database in
    /// `dir`: no compression, every block's checksum verified, readrandom's
    /// keys of [`SEED`], the latency histogram.
    pub(super) fn args(&self, db_bench: &Path, dir: &Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![db_bench.into()];
        let mut db = OsString::from("--db=");
        db.push(dir);
        args.push(db);
        args.extend(
            [
                format!("--benchmarks={}", self.benchmarks),
                format!("--use_existing_db={}", u8::from(self.existing)),
                format!("--num={}", self.keys),
                format!("--key_size={KEY_BYTES}"),
                format!("--value_size={VALUE_BYTES}"),
                format!("--cache_size={}", self.cache),
                format!("--seed={SEED}"),
                "--compression_type=none".into(),
                "--verify_checksum=1".into(),
                format!("--threads={}", self.threads),
                "--progress_reports=0".into(),
                "--histogram=1".into(),
            ]
            .map(OsString::from),
        );
        args
    }
}

/// `args` run as they are, without the interposer.
pub(super) fn plain(args: &[OsString]) -> Command {
    let mut cmd = Command::new(&args[0]);
    cmd.args(&args[1..]).env_remove("LD_PRELOAD");
    cmd
}

/// The figures of `benchmarks` in the program's output `out`, and its
/// standard error, checked: the program succeeded, every benchmark
/// reported, readrandom found every key. `what` names the invocation.
pub(super) fn checked(
    what: &str,
    out: &Output,
    benchmarks: &[&str],
) -> Result<(Vec<DbResult>, String)> {
    let (stdout, stderr) = succeeded(what, out)?;
    let results = parse(&stdout).with_context(|| what.to_string())?;
    let names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
    if names != benchmarks {
        bail!(
            "{what}: reported {names:?}, not {benchmarks:?}:\n{}",
            tail(&stdout)
        );
    }
    for r in &results {
        if let Some((found, of)) = r.found.filter(|(f, n)| f != n) {
            bail!("{what}: {} found {found} of {of} keys", r.name);
        }
    }
    Ok((results, stderr))
}

/// A program's standard output and error, `out`'s, once checked that it
/// succeeded (else an error with the end of both). `what` names the
/// invocation.
pub(super) fn succeeded(what: &str, out: &Output) -> Result<(String, String)> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}\n{}",
            out.status,
            tail(&stderr),
            tail(&stdout)
        );
    }
    Ok((stdout, stderr))
}

/// The interposer's figures in its standard error `stderr`, as a note on
/// `list`; an error where it printed none or served no file.
pub(super) fn interposer_note(what: &str, list: &str, stderr: &str) -> Result<String> {
    let (line, opens) = preload_figures(stderr)
        .with_context(|| format!("{what}: no figures from the interposer:\n{}", tail(stderr)))?;
    if opens == 0 {
        bail!("{what}: the interposer served none of its files: {line}");
    }
    let warm = warm_line(stderr)
        .map(|w| format!("; {w}"))
        .unwrap_or_default();
    Ok(format!("{list}: {line}{warm}"))
}

/// The last lines of a program's output.
pub(super) fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// `args` run under the interposer with a cache of `capacity` bytes over
/// `dir`, warm restarts from the state file `state` (`None`: none, the
/// invocation starts cold), and the interposer's figures printed at exit
/// (`FOLIOCACHE_PRELOAD_STATS`).
///
/// # Errors
/// No interposer beside this binary, or `dir` cannot be passed on.
pub(super) fn interposed(
    args: Vec<OsString>,
    capacity: u64,
    dir: &Path,
    state: Option<PathBuf>,
) -> Result<Command> {
    let no_state = state.is_none();
    let mut cmd = preloaded(&Preload {
        capacity: Some(capacity),
        dirs: vec![dir.to_path_buf()],
        state: StateArgs { state, no_state },
        metrics: None,
        command: args,
    })?;
    cmd.env(PRELOAD_STATS, "1");
    Ok(cmd)
}
