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

/// `value`, the number `flag` gives.
fn number(flag: &str, value: &str) -> Result<u64, String> {
    value
        .parse()
        .map_err(|e| format!("{flag} {value}: {e}\n{USAGE}"))
}

/// The job the command line names: flags and values in pairs.
fn parse(args: &[String]) -> Result<Job, String> {
    let mut job = Job::new(256 << 20, PathBuf::new());
    let (mut disk, mut read_around) = (None, None);
    for pair in args.chunks(2) {
        let [flag, value] = pair else {
            return Err(format!("{} needs a value\n{USAGE}", pair[0]));
        };
        let n = || number(flag, value);
        match flag.as_str() {
            "--dir" => job.dir = PathBuf::from(value),
            "--data" => job = Job::new(n()?.max(1 << 20), std::mem::take(&mut job.dir)),
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
    job.disk = disk.unwrap_or(job.disk);
    job.read_around = read_around;
    Ok(job)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Ok(job) = parse(&args).map_err(|e| eprintln!("{e}")) else {
        return ExitCode::from(2);
    };
    let r = match job.run(&|line| eprintln!("{line}")).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("slatedb: {e}");
            return ExitCode::FAILURE;
        }
    };
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
