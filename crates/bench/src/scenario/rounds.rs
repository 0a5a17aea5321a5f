//! What several scenarios share, in a module no scenario owns: the runs
//! of every configuration in rounds of alternating order ([`rounds`]:
//! `redb`, `sqlite`, `programs`, `objectstore`), and a bijection that
//! scatters neighbouring numbers ([`scatter`]: the databases' keys, the
//! objects read, the crash scenario's seeds).

use std::fmt::Write as _;

use anyhow::Result;

use crate::report::RunRecord;
use crate::targets::{JobName, JobRuns};

/// SplitMix64's finaliser: a bijection of `u64` that scatters neighbours
/// (the workloads' keys and their random choices, the same in every
/// configuration).
pub fn scatter(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Runs every configuration or way (`labels`, by index) `repeat` rounds,
/// the order reversed from one round to the next, and files each run's
/// records under their jobs (`jobs`, in order). `run` gives a
/// configuration's records for one round; `say` gets a line per run
/// (`LABEL: SCENARIO (round R of N): JOB OPS ops/s MB MB/s; ...`).
///
/// # Errors
/// The first run that failed.
pub fn rounds(
    scenario: &str,
    labels: &[&str],
    jobs: &[JobName],
    repeat: u32,
    say: &dyn Fn(&str),
    mut run: impl FnMut(usize) -> Result<Vec<RunRecord>>,
) -> Result<Vec<JobRuns>> {
    let mut runs: Vec<JobRuns> = jobs
        .iter()
        .map(|&job| JobRuns {
            job,
            engines: vec![Vec::new(); labels.len()],
        })
        .collect();
    for round in 0..repeat {
        let mut order: Vec<usize> = (0..labels.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for c in order {
            let records = run(c)?;
            let mut line = format!(
                "{}: {scenario} (round {} of {repeat}):",
                labels[c],
                round + 1
            );
            for r in records {
                let _ = write!(
                    line,
                    " {} {:.0} ops/s {:.1} MB/s;",
                    r.job.rw,
                    r.perf.iops,
                    r.perf.bw_bytes / f64::from(1 << 20)
                );
                if let Some(j) = runs.iter_mut().find(|j| j.job == r.job.rw) {
                    j.engines[c].push(r);
                }
            }
            line.pop();
            say(&line);
        }
    }
    Ok(runs)
}
