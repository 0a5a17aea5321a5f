//! What the workspace's tests share (a dev-dependency, never published).
//!
//! - **The skip-or-fail rule** ([`skip_or_fail`], [`under_ci`]): a test
//!   that needs something this machine may lack (io_uring, `RWF_DONTCACHE`,
//!   root, FUSE, fio, `cmp`) prints why it skips and passes on a laptop,
//!   and fails under `CI=true`, where the test command installs everything.
//! - **Test data and knobs** ([`nonzero_bytes`], [`random_bytes`],
//!   [`env_or`], [`proptest_cases`]).
//! - **Re-running the test binary** on one test in a child process
//!   ([`test_path`]).
//! - **The xarray's reference model** ([`model`]), shared by the xarray's
//!   proptest model and the fuzz target.
//!
//! `docs/testing.md` describes how the tests are organised.

use std::fmt::Display;
use std::io::Write;
use std::str::FromStr;

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

pub mod model;

/// Whether the tests run under CI (`CI=true`), where a missing kernel
/// feature or tool fails the test instead of skipping it.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// The skip convention for a test that cannot run here: panics under
/// `CI=true` (where everything must be there), and otherwise prints
/// "`test`: skipped: `reason`" straight to stderr (so the test harness
/// does not swallow it) and returns, for the test to return.
#[track_caller]
pub fn skip_or_fail(test: &str, reason: impl Display) {
    if under_ci() {
        panic!("{test}: cannot run, and every test must run under CI=true: {reason}");
    }
    let _ = writeln!(std::io::stderr(), "{test}: skipped: {reason}");
}

/// The environment variable `name` parsed as a `T`, or `default` when it
/// is unset or does not parse (the tests' knobs: durations, operation
/// counts, seeds).
pub fn env_or<T: FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// `PROPTEST_CASES` if set, else `default`: the property tests pick small
/// defaults so they run in seconds, and a longer run raises them.
pub fn proptest_cases(default: u32) -> u32 {
    env_or("PROPTEST_CASES", default)
}

/// `len` random bytes, none of them zero (so a zero in a result is never
/// data), from `seed`.
pub fn nonzero_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.gen_range(1..=255u8)).collect()
}

/// `len` random bytes from `seed` (zeros included).
pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// The name the test harness gives the test function `name` of the module
/// whose `module_path!()` is `module`: the module path without the crate's
/// name (`write::durability::child_reports_a_file`), as `--exact` wants it
/// when a test re-runs its own binary on one test in a child process.
pub fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}
