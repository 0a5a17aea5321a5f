//! Warm restarts under the interposer: a program reads a file and exits;
//! a second run with the same state file finds it cached before its
//! first read, and a file changed in between is read afresh.

use std::path::Path;
use std::process::Command;

use crate::support::{checked, compile, preloaded, Build};
use test_support::{random_bytes, target_tmpdir};

/// The number before `what` in the library's figures line.
fn figure(stderr: &str, what: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("foliocache-preload: pid") && l.contains("opens served"))
        .unwrap_or_else(|| panic!("no figures in {stderr:?}"));
    let before = line.split(what).next().expect("a split");
    let n = before.trim_end().rsplit([' ', '(']).next().expect("a word");
    n.parse()
        .unwrap_or_else(|_| panic!("no {what} in {line:?}"))
}

/// The warm line of the library's figures.
fn warm_line(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| l.contains("warm start:"))
        .unwrap_or_else(|| panic!("no warm line in {stderr:?}"))
}

/// `tests/c/readall.c` reading `file` to stdout under the library
/// serving `dir`, with the state file `state` (none: no warm restart),
/// waiting for its load and printing the figures. Returns stdout and
/// stderr.
fn read_file(dir: &Path, file: &Path, state: Option<&Path>) -> (Vec<u8>, String) {
    let exe = compile("readall", dir.parent().expect("a parent"), Build::Plain);
    let mut cmd: Command = preloaded(exe, dir);
    cmd.arg(file)
        .env("FOLIOCACHE_PRELOAD_STATS", "1")
        .env("FOLIOCACHE_PRELOAD_STATE_WAIT", "1");
    match state {
        Some(s) => cmd.env("FOLIOCACHE_PRELOAD_STATE", s),
        None => cmd.env_remove("FOLIOCACHE_PRELOAD_STATE"),
    };
    let out = checked(&mut cmd);
    (
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn setup(tag: &str, data: &[u8]) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    std::fs::create_dir_all(target_tmpdir()).unwrap();
    let dir = tempfile::Builder::new()
        .prefix(tag)
        .tempdir_in(target_tmpdir())
        .unwrap();
    let served = dir.path().join("served");
    std::fs::create_dir(&served).unwrap();
    let file = served.join("data");
    std::fs::write(&file, data).unwrap();
    let state = dir.path().join("cache.state");
    (dir, file, state)
}

#[test]
fn a_second_run_finds_the_first_runs_file_cached() {
    let data = random_bytes(11, 1 << 20);
    let (_dir, file, state) = setup("warm-second-run", &data);
    let served = file.parent().unwrap();

    let (out, err) = read_file(served, &file, Some(&state));
    assert!(out == data, "the first run reads the file");
    assert!(
        figure(&err, "misses") > 0,
        "the first run starts cold: {err}"
    );
    assert!(state.exists(), "the exit saved the state file");
    let saved = std::fs::metadata(&state).unwrap();

    let (out, err) = read_file(served, &file, Some(&state));
    assert!(out == data, "the second run reads the file");
    assert_eq!(figure(&err, "misses"), 0, "every read a hit: {err}");
    assert!(figure(&err, "hits") > 0, "{err}");
    assert!(
        warm_line(&err).contains("1 files loaded, 0 skipped"),
        "{err}"
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(&state).unwrap().ino(),
        saved.ino(),
        "the second run's list is the first's: not written again"
    );

    let (_, err) = read_file(served, &file, None);
    assert!(
        figure(&err, "misses") > 0,
        "without the state file, cold: {err}"
    );
}

#[test]
fn a_file_changed_between_runs_is_read_afresh() {
    let data = random_bytes(12, 256 << 10);
    let (_dir, file, state) = setup("warm-changed", &data);
    let served = file.parent().unwrap();
    read_file(served, &file, Some(&state));

    let new = random_bytes(13, data.len());
    std::fs::write(&file, &new).unwrap();
    let (out, err) = read_file(served, &file, Some(&state));
    assert!(out == new, "the new bytes, not the listed ones");
    assert!(
        warm_line(&err).contains("0 files loaded, 1 skipped"),
        "{err}"
    );
}

#[test]
fn a_corrupt_state_file_is_a_warning_and_a_cold_start() {
    let data = random_bytes(14, 64 << 10);
    let (_dir, file, state) = setup("warm-corrupt", &data);
    std::fs::write(&state, b"FCWARM\0\0garbage").unwrap();
    let (out, err) = read_file(file.parent().unwrap(), &file, Some(&state));
    assert!(out == data);
    assert!(
        err.contains("cannot load the state file") && err.contains("starting with an empty cache"),
        "{err}"
    );
}
