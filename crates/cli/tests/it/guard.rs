//! `foliocache run` as its program's guardian: a writer killed at random
//! moments (SIGKILL, as the OOM killer does) with nothing synced leaves
//! every byte `write(2)` accepted in the file once `foliocache run` has
//! exited, as on ext4; and `foliocache run` ends as its program did.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rand::{Rng, SeedableRng};

use crate::launch::build_library;

const BIN: &str = env!("CARGO_BIN_EXE_foliocache");

/// Byte `i` of `logged_writer.c`'s file.
pub(crate) fn pat(i: u64) -> u8 {
    (i.wrapping_mul(131).wrapping_add(i >> 16) as u8) | 1
}

/// `crates/bench/src/scenario/crash/logged_writer.c`, compiled into `dir`.
pub(crate) fn writer(dir: &Path) -> PathBuf {
    let exe = dir.join("logged_writer");
    test_support::run_checked(
        Command::new("cc")
            .args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror"])
            .arg(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../bench/src/scenario/crash/logged_writer.c"),
            )
            .arg("-o")
            .arg(&exe),
    );
    exe
}

/// The pid of `parent`'s (only) child.
fn child_of(parent: u32) -> Option<i32> {
    let children =
        std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

/// Runs the writer of `seed` under `foliocache run`, kills the writer
/// (not the launcher) once `after` writes returned, and checks the file
/// once `foliocache run` has exited: every accepted byte is there.
fn kill_and_check(dir: &Path, exe: &Path, seed: u64, after: usize) {
    let file = dir.join(format!("killed-{seed}.bin"));
    let mut run = Command::new(BIN)
        .args(["run", "--no-state", "--capacity", "32M", "--dir"])
        .arg(dir)
        .arg("--")
        .arg(exe)
        .arg(&file)
        .arg(seed.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("running foliocache run");
    let mut lines = BufReader::new(run.stdout.take().unwrap()).lines();
    let mut accepted = 0u64;
    for _ in 0..after {
        match lines.next() {
            Some(Ok(l)) => accepted = l.parse().unwrap(),
            other => panic!("the writer stopped: {other:?}"),
        }
    }
    let program = child_of(run.id()).expect("the writer runs as foliocache run's child");
    // SAFETY: sends SIGKILL to the writer, a process of this test.
    unsafe { libc::kill(program, libc::SIGKILL) };
    for l in lines.map_while(Result::ok) {
        accepted = l.parse().unwrap();
    }
    let status = run.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "foliocache run ends as its program did: {status}"
    );
    let got = std::fs::read(&file).unwrap();
    assert!(
        got.len() as u64 >= accepted,
        "seed {seed}: {} bytes in the file, write(2) accepted {accepted}",
        got.len()
    );
    if let Some(i) = got
        .iter()
        .enumerate()
        .position(|(i, &b)| b != pat(i as u64))
    {
        panic!("seed {seed}: byte {i} of {} is wrong", got.len());
    }
    std::fs::remove_file(&file).unwrap();
}

/// SIGKILLs at random moments (`FOLIOCACHE_TEST_KILLS`, 10 by default;
/// the figure is 1,000): no accepted byte lost.
#[test]
fn a_program_killed_at_random_moments_loses_no_accepted_byte() {
    build_library();
    let dir = tempfile::tempdir().unwrap();
    let exe = writer(dir.path());
    let kills: u64 = test_support::env_or("FOLIOCACHE_TEST_KILLS", 10);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x9d_2b);
    for _ in 0..kills {
        let seed = rng.gen_range(1..u32::MAX as u64);
        let after = rng.gen_range(1..800);
        kill_and_check(dir.path(), &exe, seed, after);
    }
}

/// `foliocache run` ends as its program did: its exit code, or its fatal
/// signal; a signal sent to `foliocache run` alone reaches the program.
#[test]
fn foliocache_run_ends_as_its_program_did() {
    build_library();
    let dir = tempfile::tempdir().unwrap();
    let run = |script: &str| {
        Command::new(BIN)
            .args(["run", "--no-state", "--dir"])
            .arg(dir.path())
            .args(["--", "sh", "-c", script])
            .status()
            .unwrap()
    };
    assert_eq!(run("exit 7").code(), Some(7));
    assert_eq!(run("kill -ABRT $$").signal(), Some(libc::SIGABRT));
    // SIGTERM to foliocache run alone: forwarded, and the program's end
    // by it is foliocache run's.
    let mut sleeper = Command::new(BIN)
        .args(["run", "--no-state", "--dir"])
        .arg(dir.path())
        .args(["--", "sleep", "30"])
        .spawn()
        .unwrap();
    while child_of(sleeper.id()).is_none() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SAFETY: signals a process of this test.
    unsafe { libc::kill(sleeper.id() as i32, libc::SIGTERM) };
    assert_eq!(sleeper.wait().unwrap().signal(), Some(libc::SIGTERM));
}
