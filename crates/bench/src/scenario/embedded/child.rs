//! A configuration's child process: what the bench tells it to run
//! ([`ChildRun`], through [`CHILD_ENV`]), what it does ([`child_main`]),
//! and how the bench starts it under the memory limit and reads its
//! figures back ([`run_child`]). See the parent module for the picture.

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

use anyhow::{bail, Context, Result};

use super::{add_note, process_io_note, Measured};
use crate::cgroup::{Availability, MemCgroup};
use crate::report::MemoryLimit;
use crate::targets::JobName;
use crate::units::fmt_size;

/// The variable that makes the binary a configuration's child process:
/// a [`ChildRun`], its fields separated by tabs.
pub const CHILD_ENV: &str = "FOLIOCACHE_EMBEDDED_RUN";

/// One configuration's run at one size, as the child process gets it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildRun {
    /// The scenario: `redb` or `sqlite`.
    pub scenario: String,
    /// The configuration's label.
    pub config: String,
    /// The database file (made fresh, removed after).
    pub path: PathBuf,
    /// M.
    pub limit: u64,
    /// The size: 0 fits M, 1 is 4x.
    pub size: usize,
    /// Entries or rows.
    pub n: u64,
    /// Operations of the read (and change) workloads.
    pub ops: u64,
}

impl ChildRun {
    fn encode(&self) -> String {
        format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.scenario,
            self.config,
            self.path.display(),
            self.limit,
            self.size,
            self.n,
            self.ops
        )
    }

    fn decode(s: &str) -> Result<ChildRun> {
        let f: Vec<&str> = s.split('\t').collect();
        let [scenario, config, path, limit, size, n, ops] = f[..] else {
            bail!("{CHILD_ENV}: 7 fields separated by tabs, not {s:?}");
        };
        Ok(ChildRun {
            scenario: scenario.into(),
            config: config.into(),
            path: path.into(),
            limit: limit.parse()?,
            size: size.parse()?,
            n: n.parse()?,
            ops: ops.parse()?,
        })
    }
}

/// In the child process ([`CHILD_ENV`] set): runs the configuration with
/// `one_run` (the scenario's, which `scenario::child_main` picks by
/// [`ChildRun::scenario`]) and prints a line per workload, and the exit
/// code; `None` in any other process.
pub fn child_main(one_run: impl FnOnce(&ChildRun) -> Result<Vec<Measured>>) -> Option<ExitCode> {
    let spec = std::env::var(CHILD_ENV).ok()?;
    one_malloc_arena();
    let r = ChildRun::decode(&spec).and_then(|run| one_run(&run));
    Some(match r {
        Ok(mut ms) => {
            // (Not on workloads a configuration does not run.)
            if let (Some(m), Some(io)) = (ms.last_mut().filter(|m| m.ops > 0), process_io_note()) {
                add_note(m, io);
            }
            for m in ms {
                let note = m.note.unwrap_or_default().replace(['\t', '\n'], " ");
                println!("{}\t{}\t{}\t{note}", m.job, m.ops, m.seconds);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    })
}

/// Limits glibc's malloc to one arena in this (the child) process, for
/// every configuration alike. With an arena per thread (glibc's default,
/// up to 8 per CPU), the pages a database caches from its reader threads
/// are allocated in those threads' arenas; once the readers end, what the
/// main thread frees goes back to those arenas, which it never allocates
/// from again, while its own arena grows anew: redb's `FileBackend` with
/// its cache at 3/4 of M (24 MiB of 32, data 4x M) peaked at 75 MiB
/// resident, over twice M, and the cgroup's OOM killer ended it. One
/// arena reuses what was freed: 34 MiB resident (the cache, redb's own
/// structures, the binary). A redb user bounding memory must do the same
/// (`MALLOC_ARENA_MAX=1`).
#[allow(unsafe_code)]
fn one_malloc_arena() {
    #[cfg(target_env = "gnu")]
    // SAFETY: `mallopt` only sets a malloc parameter; called before this
    // process starts any thread of its own.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Runs `run` in a child process inside a fresh memory cgroup of
/// `run.limit` (where one can be made; otherwise unlimited, and the
/// figures say why): its workloads' figures (by their names in `jobs`),
/// or why it has none (killed by the OOM killer, failed), and the
/// limit's figures.
///
/// # Errors
/// The child could not be started or waited for, or its output did not
/// parse.
pub fn run_child(
    avail: &Availability,
    run: &ChildRun,
    jobs: &[JobName],
) -> Result<(Result<Vec<Measured>, String>, MemoryLimit)> {
    let mut figures = MemoryLimit::of_scenario(avail, run.limit);
    let mut cmd = Command::new(std::env::current_exe().context("the bench's own binary")?);
    cmd.env(CHILD_ENV, run.encode())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (out, cg) = match avail {
        Availability::Available { .. } => {
            let cg = MemCgroup::create(avail, run.limit)?;
            let child = {
                let _inside = cg.enter()?;
                cmd.spawn()
            }
            .context("starting a configuration's process")?;
            (child.wait_with_output()?, Some(cg))
        }
        Availability::Unavailable(_) => (cmd.output()?, None),
    };
    if let Some(cg) = &cg {
        let usage = cg.usage();
        figures.cgroup = Some(cg.path().display().to_string());
        figures.peak_bytes = usage.peak_bytes;
        figures.limit_hits = usage.limit_hits;
    }
    drop(cg);
    let what = format!("{} ({}, size {})", run.scenario, run.config, run.size);
    if !out.status.success() {
        use std::os::unix::process::ExitStatusExt;
        let why = if out.status.signal() == Some(libc::SIGKILL) {
            format!(
                "{what}: killed (SIGKILL), the memory cgroup's OOM killer: it outgrew M = {}",
                fmt_size(run.limit)
            )
        } else {
            let err = String::from_utf8_lossy(&out.stderr);
            format!("{what}: failed ({}): {}", out.status, err.trim())
        };
        return Ok((Err(why), figures));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let measured = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.splitn(4, '\t').collect();
            let [job, ops, seconds, note] = f[..] else {
                bail!("{what}: a line that is not job, ops, seconds, note: {l:?}");
            };
            let job = jobs
                .iter()
                .find(|j| **j == job)
                .with_context(|| format!("{what}: no job {job:?}"))?;
            Ok(Measured {
                job,
                ops: ops.parse()?,
                seconds: seconds.parse()?,
                note: (!note.is_empty()).then(|| note.to_string()),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((Ok(measured), figures))
}
