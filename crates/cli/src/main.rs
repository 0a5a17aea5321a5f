//! `foliocache`: the command-line tool of the foliocache page cache.
//!
//! `foliocache run` runs a program with its file calls served by a
//! foliocache inside it ([`launch`], as its guardian: [`guard`]);
//! `foliocache cache` hosts a named cache many runs share ([`named`]);
//! `foliocache mount` serves a directory through the cache over FUSE
//! ([`mount`]), `foliocache stat` shows a running mount's figures
//! ([`stat`], `--watch`: [`watch`], both through the mount's control file:
//! [`control`]) and `foliocache umount` ends a mount
//! ([`mounted`]). [`args`] is the command line.
//!
//! `foliocache bench` (the default feature `bench`) is the benchmark
//! harness of crate `foliocache-bench`, which this dispatches to; built
//! with `--no-default-features`, the binary is the operator's commands
//! alone, without the harness's dependencies.
//!
//! Exit codes: 0 done, 1 the run failed, 2 bad command line.
#![deny(unsafe_code)]

mod args;
mod control;
// Unsafe: the signal mask, waiting for signals and raising one.
#[allow(unsafe_code)]
mod guard;
mod launch;
mod mount;
mod mounted;
mod named;
mod recover;
mod stat;
mod watch;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use args::{Cli, Command};

fn main() -> ExitCode {
    // A process the bench started from this binary (a configuration of
    // the redb or sqlite scenario, the objectstore scenario's reader).
    #[cfg(feature = "bench")]
    if let Some(code) = foliocache_bench::child_main() {
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
        #[cfg(feature = "bench")]
        Command::Bench(a) => bench(&a, &argv),
        Command::Mount(a) => run_plain(mount::mount(&a)),
        Command::Stat(a) => run_plain(stat::stat(&a)),
        Command::Umount(a) => run_plain(mounted::umount(&a)),
        Command::Run(a) => run_plain(launch::run(&a)),
        Command::Cache(a) => run_plain(named::run(&a)),
        Command::Recover(a) => run_plain(recover::run(&a)),
    }
}

/// Runs `foliocache bench`: exit code 0, 2 with the usage line for options
/// that cannot run together, 1 with the error for a failed run.
#[cfg(feature = "bench")]
fn bench(a: &foliocache_bench::BenchArgs, argv: &[String]) -> ExitCode {
    use foliocache_bench::Failure;
    match foliocache_bench::run(a, argv) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(msg)) => {
            usage_error(&msg);
            ExitCode::from(2)
        }
        Err(Failure::Run(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
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
    // Without the feature `bench`, the binary's own usage.
    let usage = match cmd.find_subcommand_mut(&sub) {
        Some(b) => b.render_usage().to_string(),
        None => cmd.render_usage().to_string(),
    };
    match text.split_once("\n\n") {
        Some((msg, rest)) => eprint!("{msg}\n\n{usage}\n\n{rest}"),
        None => eprint!("{text}\n{usage}\n"),
    }
}

/// Prints a usage error the way clap prints its own: the message, the
/// usage line of `foliocache bench`, and where to find more.
#[cfg(feature = "bench")]
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
