//! `foliocache-slatedb-client`: the `slatedb` job of `foliocache bench
//! --scenario objectstore` (see the library's `job` module), run by the
//! bench after it builds this crate.
//!
//! ```text
//! foliocache-slatedb-client --dir DIR [--data BYTES] [--rounds N]
//!     [--gets N] [--disk BYTES] [--latency-ms MS] [--read-around BYTES]
//! ```
//!
//! Its report on stdout: a `note: ` line for each contender's figures and
//! one comparing them, then one `record` line of `key=value` pairs that
//! the bench folds into its own: the database's SSTs' bytes in the store
//! (`size`), and for `CachedStore` a round's measured gets (`ops`), their
//! wall seconds, the remote bytes they made (`bytes`), their p50 and p99
//! in seconds. Progress on stderr.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use foliocache_slatedb_client::job::Job;

/// The usage line.
const USAGE: &str = "usage: foliocache-slatedb-client --dir DIR [--data BYTES] [--rounds N] \
                     [--gets N] [--disk BYTES] [--latency-ms MS] \
                     [--read-around BYTES]";

/// The job the command line names.
fn parse(args: &[String]) -> Result<Job, String> {
    let mut job = Job::new(256 << 20, PathBuf::new());
    let mut disk = None;
    let mut read_around = None;
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
            "--data" => {
                let data = n()?.max(1 << 20);
                job = Job::new(data, std::mem::take(&mut job.dir));
            }
            "--rounds" => job.rounds = n()?.max(1) as usize,
            "--gets" => job.gets = n()?.max(1),
            "--disk" => disk = Some(n()?.max(1 << 20)),
            "--latency-ms" => job.latency = Duration::from_millis(n()?),
            "--read-around" => read_around = Some(n()?),
            _ => return Err(format!("unknown argument {flag}\n{USAGE}")),
        }
    }
    if job.dir.as_os_str().is_empty() {
        return Err(format!("--dir is needed\n{USAGE}"));
    }
    if let Some(d) = disk {
        job.disk = d;
    }
    job.read_around = read_around;
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
            eprintln!("slatedb: tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let say = |line: &str| eprintln!("{line}");
    match rt.block_on(job.run(&say)) {
        Ok(r) => {
            for line in r.lines(&job) {
                println!("note: {line}");
            }
            let rounds = job.rounds.max(1) as u64;
            let f = &r.folio;
            println!(
                "record size={} seconds={} ops={} bytes={} p50={} p99={}",
                r.size,
                f.gets_seconds / rounds as f64,
                f.gets.len() as u64 / rounds,
                f.remote_bytes / rounds,
                f.quantile(0.5),
                f.quantile(0.99)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("slatedb: {e}");
            ExitCode::FAILURE
        }
    }
}
