//! `crash`: what a program killed at a random moment loses. A writer
//! (`crash/logged_writer.c`, compiled with the system's `cc`) appends
//! records of 1 byte to 64 KiB with `write(2)`, never syncing, and prints
//! the file's end after each write returns; it is sent SIGKILL (as the OOM
//! killer sends it) after a random number of writes, and once its way has
//! ended the file is compared with what `write(2)` accepted. Four ways,
//! the same kills for each, interleaved: `ext4` (the program alone: the
//! kernel's page cache keeps every accepted byte), `foliocache run` (the
//! interposer, `foliocache run` its guardian: docs/design.md, section 12),
//! `foliocache run` killed with the writer, then `foliocache recover` (the
//! launch's persisted files) and `foliocache run --no-guardian` (what the
//! interposer lost before the guardian). Then [`group`]'s trials: a group
//! of writers under one launch killed one at a time, then every process,
//! the launcher too, then `foliocache recover`. The figures are bytes, not speed: the scenario prints
//! its own table, and its notes carry it into the JSON report.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use super::rounds::scatter;
use super::{FullQuick, Program, Scenario};
use crate::args::BenchArgs;

/// A group of writers killed at random, then every process: [`group`].
mod group;

/// The writer's source.
const WRITER_C: &str = include_str!("crash/logged_writer.c");

/// Kills per way (full, and with `--quick`): the full figure is the one
/// the guardian's guarantee is stated at.
const KILLS: FullQuick<u64> = FullQuick(1000, 100);
/// Group trials (full, and with `--quick`), each [`group::KILLS`] kills
/// and then every process's.
const TRIALS: FullQuick<u64> = FullQuick(1000, 3);
/// The most writes a writer makes before its kill.
const MAX_WRITES: u32 = 800;

/// The ways, in the table's order.
pub const WAYS: [Way; 4] = [Way::Ext4, Way::Guardian, Way::AllKilled, Way::NoGuardian];

/// How the writer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// Alone, on the data directory's filesystem.
    Ext4,
    /// Under `foliocache run`, its guardian.
    Guardian,
    /// Under `foliocache run`, killed with the writer (one `SIGKILL` to
    /// their process group), then `foliocache recover` on the directory:
    /// what the launch's persisted files kept.
    AllKilled,
    /// Under `foliocache run --no-guardian`.
    NoGuardian,
}

impl Way {
    /// Its label in the table.
    pub fn label(self) -> &'static str {
        match self {
            Way::Ext4 => "ext4",
            Way::Guardian => "foliocache run",
            Way::AllKilled => "run killed too, then recover",
            Way::NoGuardian => "foliocache run --no-guardian",
        }
    }
}

/// What the scenario runs.
#[derive(Debug, Clone)]
pub struct Kills {
    /// Kills per way.
    pub kills: u64,
    /// Group trials ([`group`]).
    pub trials: u64,
}

/// The scenario: [`KILLS`] kills per way and [`TRIALS`] group trials
/// (`--trials` for both).
///
/// # Errors
/// `--engine` given (the ways are fixed).
pub fn scenario(args: &BenchArgs, quick: bool) -> Result<Scenario, String> {
    if !args.engines.is_empty() {
        return Err(
            "crash scenario: --engine does not apply: it runs a writer four ways \
                    (ext4, foliocache run, foliocache run killed with it, \
                    foliocache run --no-guardian)"
                .into(),
        );
    }
    let kills = args.kills.or(args.trials).unwrap_or(KILLS.get(quick));
    let trials = args.trials.unwrap_or(TRIALS.get(quick));
    Ok(Scenario {
        name: "crash".into(),
        description: format!(
            "What a program killed at a random moment loses: a writer appends records of 1 byte \
             to 64 KiB with write(2), never syncing, and is sent SIGKILL after 1 to {MAX_WRITES} \
             writes, {kills} times each way, the same kills for every way; once the way has \
             ended, the file's bytes are checked against what write(2) accepted. Ways: ext4 \
             (the program alone: the kernel's page cache keeps what it accepted), foliocache run \
             (the interposer with its guardian), foliocache run killed with the writer (one \
             SIGKILL to both) then foliocache recover, foliocache run --no-guardian. Lost: \
             accepted bytes not in the file with their values. Then {trials} group trials: \
             {} writers under one foliocache run, {} of them killed one at a time at \
             random (each replaced by a new writer on a new file), then every process, the \
             launcher too, then foliocache recover: the bytes lost in every file.",
            group::WRITERS,
            group::KILLS,
        ),
        jobs: Vec::new(),
        ratios: Vec::new(),
        targets: Vec::new(),
        detailed: false,
        programs: Some(Program::Kills(Kills { kills, trials })),
    })
}

/// One way's figures.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    kills: u64,
    accepted: u64,
    lost: u64,
    kills_losing: u64,
    seconds: f64,
}

/// Runs the kills, prints the table, and leaves it in `notes`. Where
/// there is no `cc`, or no interposer to run, says so and runs what it
/// can.
///
/// # Errors
/// The writer's build, a way that fails to start or to run its writer.
pub fn run(k: &Kills, dir: &Path, notes: &mut Vec<String>, say: &dyn Fn(&str)) -> Result<()> {
    let mut note = |line: String| notes.push(line);
    say(&format!(
        "crash: {} kills each of {} ways",
        k.kills,
        WAYS.len()
    ));
    let work = tempfile::Builder::new()
        .prefix("crash-")
        .tempdir_in(dir)
        .context("crash: a directory for the writer's files")?;
    let Some(writer) = build_writer(work.path())? else {
        note("crash: no C compiler (`cc`) on PATH to build the writer: nothing run".into());
        return Ok(());
    };
    let foliocache = std::env::current_exe().context("crash: this program's path")?;
    let mut ways: Vec<Way> = WAYS.to_vec();
    if let Err(e) = crate::preload::library_for(&foliocache) {
        note(format!("crash: the interposer ways left out: {e:#}"));
        ways.retain(|w| *w == Way::Ext4);
    }
    let mut tallies = vec![Tally::default(); ways.len()];
    for round in 0..k.kills {
        // The same kills every run: the writer's seed and its writes.
        let seed = 1 + scatter(2 * round) % u64::from(u32::MAX - 1);
        let after = 1 + (scatter(2 * round + 1) % u64::from(MAX_WRITES - 1)) as u32;
        // Alternating order, so that neither way always goes first.
        let order: Vec<usize> = if round % 2 == 0 {
            (0..ways.len()).collect()
        } else {
            (0..ways.len()).rev().collect()
        };
        for i in order {
            let file = work.path().join(format!("killed-{i}.bin"));
            let t0 = Instant::now();
            let (accepted, lost) = kill_once(
                ways[i],
                &foliocache,
                &writer,
                &file,
                seed,
                after,
                work.path(),
            )
            .with_context(|| format!("crash: {} kill {round}", ways[i].label()))?;
            let t = &mut tallies[i];
            t.kills += 1;
            t.accepted += accepted;
            t.lost += lost;
            t.kills_losing += u64::from(lost > 0);
            t.seconds += t0.elapsed().as_secs_f64();
            std::fs::remove_file(&file).ok();
        }
    }
    note(format!(
        "{:<30} {:>6} {:>16} {:>14} {:>13} {:>8}",
        "way", "kills", "accepted (MiB)", "lost (MiB)", "kills losing", "time (s)"
    ));
    let mut rows: Vec<(&str, Tally)> = ways.iter().map(|w| w.label()).zip(tallies).collect();
    if ways.len() > 1 && k.trials > 0 {
        say(&format!("crash: {} group trials", k.trials));
        let t = group::run(k.trials, &foliocache, &writer, work.path(), say)?;
        rows.push((group::LABEL, t));
    }
    for (label, t) in rows {
        note(format!(
            "{:<30} {:>6} {:>16.1} {:>14.3} {:>13} {:>8.1}",
            label,
            t.kills,
            t.accepted as f64 / (1u64 << 20) as f64,
            t.lost as f64 / (1u64 << 20) as f64,
            t.kills_losing,
            t.seconds,
        ));
    }
    Ok(())
}

/// The writer, compiled into `dir`; `None` without `cc`.
fn build_writer(dir: &Path) -> Result<Option<PathBuf>> {
    let src = dir.join("logged_writer.c");
    let exe = dir.join("logged_writer");
    std::fs::write(&src, WRITER_C).context("crash: writing the writer's source")?;
    let out = match Command::new("cc")
        .args(["-std=c11", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).context("crash: running cc"),
    };
    if !out.status.success() {
        bail!(
            "crash: cc failed to build the writer:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(Some(exe))
}

/// The command running `writer` on `file` `way`'s way.
fn command(
    way: Way,
    foliocache: &Path,
    writer: &Path,
    file: &Path,
    seed: u64,
    dir: &Path,
) -> Command {
    let mut cmd = match way {
        Way::Ext4 => Command::new(writer),
        Way::Guardian | Way::AllKilled | Way::NoGuardian => {
            let mut c = Command::new(foliocache);
            // A process group of its own: one signal kills the launch.
            c.process_group(0);
            c.args(["run", "--no-state", "--capacity", "64M", "--dir"])
                .arg(dir);
            if way == Way::NoGuardian {
                c.arg("--no-guardian");
            }
            c.arg("--").arg(writer);
            c
        }
    };
    cmd.arg(file)
        .arg(seed.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    cmd
}

/// The writer's process: `foliocache run`'s child under its guardian,
/// the launch's process group (negative) when the launcher dies too,
/// else the process started (the writer, or `foliocache run` executed
/// into it).
fn writer_pid(way: Way, child: &Child) -> Result<i32> {
    let pid = child.id();
    if way == Way::AllKilled {
        // The process group: the launcher and the writer.
        return Ok(-(pid as i32));
    }
    if way != Way::Guardian {
        return Ok(pid as i32);
    }
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .context("the guardian's children")?;
    children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .context("the guardian has no child")
}

/// One kill: the writer of `seed` run `way`'s way, killed once `after`
/// writes returned; the bytes `write(2)` accepted, and those of them not
/// in the file once the way has ended.
fn kill_once(
    way: Way,
    foliocache: &Path,
    writer: &Path,
    file: &Path,
    seed: u64,
    after: u32,
    dir: &Path,
) -> Result<(u64, u64)> {
    let mut child = command(way, foliocache, writer, file, seed, dir)
        .spawn()
        .context("starting the writer")?;
    let mut lines = BufReader::new(child.stdout.take().context("the writer's stdout")?).lines();
    let mut accepted = 0u64;
    let mut reported = |line: std::io::Result<String>| -> Result<()> {
        accepted = line?.trim().parse().context("the writer's line")?;
        Ok(())
    };
    for _ in 0..after {
        match lines.next() {
            Some(line) => reported(line)?,
            None => {
                let status = child.wait()?;
                bail!("the writer stopped before its kill: {status}");
            }
        }
    }
    let pid = writer_pid(way, &child)?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .context("killing the writer")?;
    for line in lines {
        reported(line)?;
    }
    child.wait().context("waiting for the way to end")?;
    if way == Way::AllKilled {
        recover_after(foliocache, child.id() as i32, dir)?;
    }
    let got = std::fs::read(file).context("reading the killed writer's file")?;
    let kept = got
        .iter()
        .enumerate()
        .position(|(i, &b)| b != pattern(i as u64))
        .unwrap_or(got.len()) as u64;
    Ok((accepted, accepted.saturating_sub(kept)))
}

/// Once every process of the group `pgid` is gone (or, a zombie left
/// unreaped, 10 s later: its files are closed), `foliocache recover dir`.
fn recover_after(foliocache: &Path, pgid: i32, dir: &Path) -> Result<()> {
    let group = nix::unistd::Pid::from_raw(-pgid);
    for _ in 0..10_000 {
        if nix::sys::signal::kill(group, None).is_err() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let out = Command::new(foliocache)
        .arg("recover")
        .arg(dir)
        .stderr(Stdio::piped())
        .output()
        .context("running foliocache recover")?;
    if !out.status.success() {
        bail!(
            "foliocache recover failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Byte `i` of the writer's file (as `logged_writer.c` makes it).
fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(131).wrapping_add(i >> 16) as u8) | 1
}
