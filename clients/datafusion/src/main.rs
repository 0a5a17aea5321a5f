//! `foliocache-datafusion-client`: the `datafusion` job of `foliocache
//! bench --scenario objectstore` (see the library's `job` module), run
//! by the bench after it builds this crate.
//!
//! ```text
//! foliocache-datafusion-client --dir DIR [--file BYTES] [--rounds N]
//!     [--warm-passes N] [--latency-ms MS]
//! ```
//!
//! Its report on stdout: a `note: ` line for each cache's figures, then
//! one `record` line of `key=value` pairs (the file's size, the memory
//! cache's median warm time, the bytes a warm pass asked, its remote
//! bytes over them) that the bench folds into its own. Progress on
//! stderr.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use foliocache_datafusion_client::job::{median, Job};

/// The usage line.
const USAGE: &str = "usage: foliocache-datafusion-client --dir DIR [--file BYTES] \
                     [--rounds N] [--warm-passes N] [--latency-ms MS]";

/// The job the command line names.
fn parse(args: &[String]) -> Result<Job, String> {
    let mut job = Job::new(256 << 20, PathBuf::new());
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let n = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("{flag} {value}: {e}\n{USAGE}"))
        };
        match flag.as_str() {
            "--dir" => job.dir = PathBuf::from(value),
            "--file" => job.file = n()?,
            "--rounds" => job.rounds = n()?.max(1) as usize,
            "--warm-passes" => job.warm_passes = n()?.max(1) as usize,
            "--latency-ms" => job.latency = Duration::from_millis(n()?),
            _ => return Err(format!("unknown argument {flag}\n{USAGE}")),
        }
    }
    if job.dir.as_os_str().is_empty() {
        return Err(format!("--dir is needed\n{USAGE}"));
    }
    Ok(job)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let job = match parse(&args) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("datafusion: tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let say = |line: &str| eprintln!("{line}");
    match rt.block_on(job.run(&say)) {
        Ok(r) => {
            for line in r.lines(&job) {
                println!("note: {line}");
            }
            let m = &r.memory;
            let passes = m.warm.len().max(1) as u64;
            println!(
                "record size={} seconds={} bytes={} amplification={}",
                r.size,
                median(&m.warm),
                m.asked_warm / passes,
                m.remote_warm as f64 / m.asked_warm.max(1) as f64
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("datafusion: {e}");
            ExitCode::FAILURE
        }
    }
}
