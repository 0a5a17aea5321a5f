//! `foliocache`: the command-line tool of the foliocache page cache.
//!
//! `foliocache bench` runs fio-like jobs on several engines in one run
//! (foliocache, the kernel's buffered pread/pwrite, O_DIRECT,
//! RWF_DONTCACHE, a shared mapping; for the populate scenario a memfile, a
//! memfd and fresh anonymous memory) and reports them side by side, with
//! ratios to the kernel, as text, JSON and an SVG chart. Write runs end
//! with a sync inside their figures. With no options it runs the reference
//! scenarios, shortened (`--seeds --quick`).
//!
//! Modules, each using only those listed before it: [`units`] (sizes,
//! bandwidths, durations, ratios), [`sys`] (the OS calls `std` lacks: the
//! only unsafe code, but for `engine`'s call of the unsafe
//! `sys::Mmap::new`, whose contract the bench keeps), [`hist`] (latency
//! histogram), [`clock`] (what times it), [`cgroup`] (the kernel engines'
//! memory limit), [`disk`] (the device's read counters), [`data`]
//! (checkable pseudo-random data files), [`zipf`] (zipfian offsets),
//! [`lru`] (an exact LRU replayed over a run's offsets), [`spec`] (engines and jobs as
//! typed values), [`mount`] (`foliocache mount` and `stat`), [`args`]
//! (the command line), [`engine`] (the engines and their warming), [`job`]
//! (the measured loop), [`hot`] (a hot reader beside a job, counting its
//! hits), [`report`] (text and JSON), [`targets`] (a scenario's ratios and
//! targets), [`scenario`] (what runs, one file per scenario), [`plot`]
//! (SVG), [`run`] (one engine run: setup, measure, record) and
//! [`mod@bench`] (the driver). The scenarios and their figures are
//! described in `docs/bench.md`.
//!
//! `foliocache mount` serves a directory through the cache over FUSE and
//! `foliocache stat` shows a running mount's figures ([`mount`]);
//! `foliocache umount` ends a mount ([`mounted`]).
//!
//! Exit codes: 0 done, 1 the run failed, 2 bad command line.
#![deny(unsafe_code)]

mod args;
mod bench;
mod cgroup;
mod clock;
mod consume;
mod data;
mod disk;
mod engine;
// Unsafe: the signal mask, waiting for signals and raising one.
#[allow(unsafe_code)]
mod guard;
mod hist;
mod hot;
mod job;
mod launch;
mod lru;
mod mount;
mod mounted;
mod named;
mod plot;
mod recover;
mod report;
mod run;
mod scenario;
mod spec;
mod state_path;
#[allow(unsafe_code)]
mod sys;
mod targets;
mod units;
mod watch;
mod zipf;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use args::{Cli, Command};
use bench::Failure;

fn main() -> ExitCode {
    // A configuration of the redb or sqlite scenario, in a process of its
    // own (`scenario::embedded`).
    if let Some(code) = scenario::embedded::child_main() {
        return code;
    }
    // The restart job's reader of the objectstore scenario.
    if let Some(code) = scenario::objectstore::child_main() {
        return code;
    }
    let argv: Vec<String> = std::env::args().collect();
    let cli = match Cli::try_parse_from(&argv) {
        Ok(c) => c,
        // Help and version print to stdout and exit 0.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            print_parse_error(&e);
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Command::Bench(a) => match bench::run(&a, &argv) {
            Ok(()) => ExitCode::SUCCESS,
            Err(Failure::Usage(msg)) => {
                usage_error(&msg);
                ExitCode::from(2)
            }
            Err(Failure::Run(e)) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        },
        Command::Mount(a) => run_plain(mount::mount(&a)),
        Command::Stat(a) => run_plain(mount::stat(&a)),
        Command::Umount(a) => run_plain(mounted::umount(&a)),
        Command::Run(a) => run_plain(launch::run(&a)),
        Command::Cache(a) => run_plain(named::run(&a)),
        Command::Recover(a) => run_plain(recover::run(&a)),
    }
}

/// Exit code 0, or 1 with the error printed.
fn run_plain(r: anyhow::Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Prints clap's error with the usage line, which clap leaves out of
/// errors about a bad value.
fn print_parse_error(e: &clap::Error) {
    let text = e.render().to_string();
    if text.contains("Usage:") {
        eprint!("{text}");
        return;
    }
    let mut cmd = Cli::command();
    cmd.build();
    // The usage of the subcommand named, bench's if none is.
    let sub = std::env::args()
        .nth(1)
        .filter(|a| matches!(a.as_str(), "mount" | "stat" | "umount" | "run" | "cache"))
        .unwrap_or_else(|| "bench".into());
    let usage = cmd
        .find_subcommand_mut(&sub)
        .map(|b| b.render_usage().to_string())
        .unwrap_or_else(|| "Usage: foliocache bench [OPTIONS]".into());
    match text.split_once("\n\n") {
        Some((msg, rest)) => eprint!("{msg}\n\n{usage}\n\n{rest}"),
        None => eprint!("{text}\n{usage}\n"),
    }
}

/// Prints a usage error the way clap prints its own: the message, the
/// usage line of `foliocache bench`, and where to find more.
fn usage_error(msg: &str) {
    let mut cmd = Cli::command();
    cmd.build();
    match cmd.find_subcommand_mut("bench") {
        Some(bench) => {
            let _ = bench
                .error(clap::error::ErrorKind::ArgumentConflict, msg)
                .print();
        }
        None => eprintln!("error: {msg}\n\nUsage: foliocache bench [OPTIONS]"),
    }
}
