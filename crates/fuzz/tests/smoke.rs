//! The fuzz targets' CI smoke run, on the stable toolchain.
//!
//! Replays every file of the committed corpus (`crates/fuzz/corpus/<target>/`)
//! through its target, then feeds each target random inputs from a seeded
//! RNG until a time budget is spent: `FUZZ_SMOKE_SECS` seconds per target,
//! corpus included (default 12 under `CI`, 3 otherwise; the corpus replay
//! always runs whole). The RNG's seed is fixed per target, so a run is
//! repeatable; `FUZZ_SMOKE_SEED=N` varies it. A failure prints the seed and
//! the input's length; the input is written to
//! `target/fuzz-smoke-failure-<target>` so it can be replayed (`FUZZ_DEBUG=1` prints its decoded operations) and
//! added to the corpus. An input that runs for a minute is a hang: it is
//! saved to `target/fuzz-smoke-hang-<target>` and the process aborts.
//!
//! The real fuzzers (coverage-guided, nightly) are under `crates/fuzz/fuzz`;
//! see `scripts/fuzz.sh`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
}

fn budget() -> Duration {
    let default = if test_support::under_ci() { 12.0 } else { 3.0 };
    Duration::from_secs_f64(test_support::env_or("FUZZ_SMOKE_SECS", default))
}

/// Where a failing input of `target` is saved (`kind`: failure or hang).
fn saved_input(target: &str, kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target")
        .join(format!("fuzz-smoke-{kind}-{target}"))
}

/// One input that takes longer than this is a hang (a deadlock): the
/// watchdog saves it and aborts the test process, which would otherwise
/// never end.
const HANG: Duration = Duration::from_secs(60);

/// Runs `f(input)` with a watchdog; on a panic saves the input and fails
/// naming `what`.
fn run_one(target: &str, f: fn(&[u8]), input: &[u8], what: &str) {
    let done = Arc::new((Mutex::new(false), Condvar::new()));
    let watchdog = {
        let done = done.clone();
        let input = input.to_vec();
        let (target, what) = (target.to_string(), what.to_string());
        std::thread::spawn(move || {
            let (lock, cv) = &*done;
            let g = lock.lock().unwrap();
            let (g, timeout) = cv.wait_timeout_while(g, HANG, |d| !*d).unwrap();
            if timeout.timed_out() && !*g {
                let out = saved_input(&target, "hang");
                let _ = std::fs::write(&out, &input);
                eprintln!(
                    "{target} hung for {HANG:?} on {what}; input saved to {}",
                    out.display()
                );
                std::process::abort();
            }
        })
    };
    let r = catch_unwind(AssertUnwindSafe(|| f(input)));
    *done.0.lock().unwrap() = true;
    done.1.notify_all();
    watchdog.join().unwrap();
    if r.is_err() {
        let out = saved_input(target, "failure");
        let saved = std::fs::write(&out, input).is_ok();
        panic!(
            "{target} failed on {what} ({} bytes){}",
            input.len(),
            if saved {
                format!("; input saved to {}", out.display())
            } else {
                String::new()
            }
        );
    }
}

/// Every corpus file of `target`, in name order; the corpus must not be empty.
fn replay_corpus(target: &str, f: fn(&[u8])) -> usize {
    let dir = corpus_dir(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "corpus {} is empty", dir.display());
    for p in &files {
        let input = match std::fs::read(p) {
            Ok(input) => input,
            // A fuzzer running on the corpus meanwhile replaced it.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => panic!("corpus file {}: {e}", p.display()),
        };
        run_one(target, f, &input, &format!("corpus file {}", p.display()));
    }
    files.len()
}

/// Random inputs until `deadline`: lengths from a few bytes to a few KiB.
fn random_inputs(target: &str, f: fn(&[u8]), seed: u64, deadline: Instant) -> u64 {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut n = 0u64;
    let mut buf = Vec::new();
    // At least a few inputs even on a tiny budget.
    while n < 8 || Instant::now() < deadline {
        let len = match rng.gen_range(0..4) {
            0 => rng.gen_range(0..64),
            1 | 2 => rng.gen_range(64..1024),
            _ => rng.gen_range(1024..4096),
        };
        buf.resize(len, 0);
        rng.fill_bytes(&mut buf);
        run_one(
            target,
            f,
            &buf,
            &format!("random input {n} of seed {seed:#x}"),
        );
        n += 1;
    }
    n
}

/// The corpus, then random inputs, within `budget()` in all.
fn smoke(target: &str, f: fn(&[u8]), seed: u64) {
    let seed = std::env::var("FUZZ_SMOKE_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map_or(seed, |s| s ^ seed);
    let start = Instant::now();
    let files = replay_corpus(target, f);
    let replayed = start.elapsed();
    let n = random_inputs(target, f, seed, start + budget());
    eprintln!(
        "{target}: {files} corpus files ({replayed:.1?}) and {n} random inputs passed in {:.1?}",
        start.elapsed()
    );
}

#[test]
fn xarray_ops_corpus_and_random_inputs() {
    smoke("xarray_ops", foliocache_fuzz::xarray_ops, 0x5eed_0001);
}

#[test]
fn file_ops_corpus_and_random_inputs() {
    smoke("file_ops", foliocache_fuzz::file_ops, 0x5eed_0002);
}
