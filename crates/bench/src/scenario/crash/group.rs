//! The crash scenario's group trials: a group of writers
//! (`logged_writer.c -g`) under one `foliocache run`, [`KILLS`] of them sent
//! SIGKILL one at a time at random moments (each replaced by a new one
//! on a new file), then every process of the launch, the launcher too;
//! then `foliocache recover`, and every file checked against what
//! `write(2)` accepted. The kernel's page cache outlives every process;
//! the group's persisted cache (docs/preload.md, "What a program loses")
//! is to do the same.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::{pattern, recover_after, Tally};
use crate::scenario::rounds::scatter;

/// Writers in the group.
pub const WRITERS: u32 = 4;
/// Writers killed one at a time in a trial, before every process is.
pub const KILLS: u64 = 120;
/// The most lines the writers print between two kills.
const LINES_BETWEEN: u64 = 12;

/// The row's label in the crash table.
pub const LABEL: &str = "group trials: 120 kills + all";

/// Runs `trials` trials in `dir` with `foliocache` and the `writers`
/// (`logged_writer`); their tally (kills counted one per trial, the kills
/// losing those of a trial losing bytes), each trial's said by `say` as
/// it ends (a long run's figures so far).
///
/// # Errors
/// A launch that fails, `foliocache recover` failing.
pub fn run(
    trials: u64,
    foliocache: &Path,
    writers: &Path,
    dir: &Path,
    say: &dyn Fn(&str),
) -> Result<Tally> {
    let mut tally = Tally::default();
    for trial in 0..trials {
        let t0 = std::time::Instant::now();
        let work = dir.join(format!("group-{trial}"));
        std::fs::create_dir(&work).context("crash: the group's directory")?;
        let (accepted, lost) = trial_once(foliocache, writers, &work, trial)
            .with_context(|| format!("crash: group trial {trial}"))?;
        tally.kills += 1;
        tally.accepted += accepted;
        tally.lost += lost;
        tally.kills_losing += u64::from(lost > 0);
        tally.seconds += t0.elapsed().as_secs_f64();
        say(&format!(
            "crash: group trial {trial}: {accepted} bytes accepted, {lost} lost; \
             {} trials, {} bytes lost so far",
            trial + 1,
            tally.lost
        ));
        std::fs::remove_dir_all(&work).context("crash: removing the group's files")?;
    }
    Ok(tally)
}

/// What the writers said: each file's end as last acknowledged, and each
/// writer's live process.
#[derive(Default)]
struct Said {
    ends: HashMap<(u32, u32), u64>,
    live: HashMap<u32, i32>,
}

impl Said {
    /// Takes one line ("K G PID" or "K G END E").
    fn take(&mut self, line: &str) -> Result<()> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| -> Result<u64> {
            words
                .get(i)
                .and_then(|w| w.parse().ok())
                .with_context(|| format!("the writers' line {line:?}"))
        };
        let (k, g) = (num(0)? as u32, num(1)? as u32);
        if words.get(2) == Some(&"END") {
            self.ends.insert((k, g), num(3)?);
        } else {
            self.ends.entry((k, g)).or_insert(0);
            self.live.insert(k, num(2)? as i32);
        }
        Ok(())
    }
}

/// One trial; the bytes `write(2)` accepted and those of them not in the
/// files after `foliocache recover`.
fn trial_once(foliocache: &Path, writers: &Path, work: &Path, trial: u64) -> Result<(u64, u64)> {
    let mut child = Command::new(foliocache)
        .process_group(0)
        .args(["run", "--no-state", "--capacity", "64M", "--dir"])
        .arg(work)
        .arg("--")
        .arg(writers)
        .arg("-g")
        .arg(work)
        .arg((1 + trial).to_string())
        .arg(WRITERS.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the group")?;
    let pgid = child.id() as i32;
    let mut lines = BufReader::new(child.stdout.take().context("the group's stdout")?).lines();
    let mut said = Said::default();
    let mut kills = 0u64;
    let mut step = 0u64;
    let mut next = 1 + scatter(trial << 20) % LINES_BETWEEN;
    while kills < KILLS {
        let Some(line) = lines.next() else {
            bail!("the group stopped after {kills} kills");
        };
        said.take(&line?)?;
        next -= 1;
        if next > 0 {
            continue;
        }
        step += 1;
        next = 1 + scatter((trial << 20) + step) % LINES_BETWEEN;
        let k = (scatter((trial << 20) ^ (step << 1)) % u64::from(WRITERS)) as u32;
        if let Some(pid) = said.live.remove(&k) {
            kill(Pid::from_raw(pid), Signal::SIGKILL).context("killing a writer")?;
            kills += 1;
        }
    }
    // Every process of the launch: the launcher, the writers' parent,
    // the writers.
    kill(Pid::from_raw(-pgid), Signal::SIGKILL).context("killing the launch")?;
    for line in lines {
        said.take(&line?)?;
    }
    child.wait().context("waiting for the launcher")?;
    recover_after(foliocache, pgid, work)?;
    let mut accepted = 0;
    let mut lost = 0;
    for (&(k, g), &end) in &said.ends {
        let got = std::fs::read(work.join(format!("w{k}.{g}"))).unwrap_or_default();
        let kept = got
            .iter()
            .enumerate()
            .position(|(i, &b)| b != pattern(i as u64))
            .unwrap_or(got.len()) as u64;
        accepted += end;
        lost += end.saturating_sub(kept);
    }
    Ok((accepted, lost))
}
