//! Every process of a launch killed by SIGKILL, `foliocache run` itself
//! too: what `write(2)` accepted outlives them all, as the kernel's page
//! cache outlives every process, in the launch's files on tmpfs (mode
//! 0600, the user's), until `foliocache recover DIR` or the next
//! `foliocache run` on the directory writes it back; a file replaced
//! meanwhile gets none of the old file's pages.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::guard::{pat, writer};
use crate::launch::build_library;

const BIN: &str = env!("CARGO_BIN_EXE_foliocache");

/// How a trial's launch runs and is recovered.
#[derive(Clone, Copy, Debug)]
struct Trial {
    /// `--shared`.
    shared: bool,
    /// Writers in processes a shell forked (the group's cache), or one
    /// writer the shell execs (its private cache and the guardian's
    /// segment).
    group: bool,
    /// Recovered by the next `foliocache run`, not `foliocache recover`.
    by_run: bool,
    /// The first file is unlinked and made anew before the recovery.
    replace: bool,
}

/// The last complete line of the log `path`: the end of the file its
/// writer's last `write(2)` that returned accepted.
fn accepted(path: &Path) -> (usize, u64) {
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        f.read_to_string(&mut text).unwrap();
    }
    let done = text.rsplit_once('\n').map_or("", |(done, _)| done);
    let lines = done.lines().count();
    let last = done.lines().last().map_or(0, |l| l.parse().unwrap());
    (lines, last)
}

/// The persisted files whose `.run` names `dir`.
fn persisted_of(dir: &Path) -> Vec<PathBuf> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let base = PathBuf::from(format!("/dev/shm/foliocache-{uid}"));
    let want = format!("dir {}\n", dir.display());
    let Ok(entries) = std::fs::read_dir(&base) else {
        return Vec::new();
    };
    let mut stems = Vec::new();
    for e in entries {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "run")
            && std::fs::read_to_string(&p).is_ok_and(|t| t.contains(&want))
        {
            stems.push(p.file_stem().unwrap().to_owned());
        }
    }
    let mut out = Vec::new();
    for ext in ["run", "guard", "group"] {
        for s in &stems {
            let p = base.join(format!("{}.{ext}", s.to_string_lossy()));
            if p.exists() {
                out.push(p);
            }
        }
    }
    out
}

/// Waits until no process of the process group `pgid` is left (the
/// killed ones reaped; a zombie's files are closed already).
fn wait_gone(pgid: i32) {
    for _ in 0..2000 {
        // SAFETY: signal 0 sends nothing; it asks whether any process of
        // the group exists.
        if unsafe { libc::kill(-pgid, 0) } != 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Runs `t`'s writers under `foliocache run` in a process group of their
/// own, kills every process of it (the launcher too) once each writer's
/// `write(2)` returned `after` times, checks the launch's files, recovers
/// them as `t` says, and checks every accepted byte is in its file.
fn trial(t: Trial, seed: u64, after: usize) {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let dir = data.path().canonicalize().unwrap();
    let exe = writer(logs.path());
    let writers = if t.group { 2 } else { 1 };
    let file = |i: usize| dir.join(format!("w{i}.bin"));
    let log = |i: usize| logs.path().join(format!("w{i}.log"));
    let one = |i: usize| {
        format!(
            "'{}' '{}' {} > '{}'",
            exe.display(),
            file(i).display(),
            seed + i as u64,
            log(i).display()
        )
    };
    let script = if t.group {
        format!("{} & {} & wait", one(0), one(1))
    } else {
        format!("exec {}", one(0))
    };
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "--no-state", "--capacity", "32M"]);
    if t.shared {
        cmd.arg("--shared");
    }
    let mut run = cmd
        .arg("--dir")
        .arg(&dir)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("running foliocache run");
    let pgid = run.id() as i32;
    while (0..writers).any(|i| accepted(&log(i)).0 < after) {
        assert!(
            run.try_wait().unwrap().is_none(),
            "{t:?}: the launch ended before its writers wrote"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    // SAFETY: SIGKILL to the process group this test made: the launcher,
    // the shell, the writers.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    run.wait().unwrap();
    wait_gone(pgid);
    let ends: Vec<u64> = (0..writers).map(|i| accepted(&log(i)).1).collect();
    let files = persisted_of(&dir);
    assert!(
        files.len() >= 2,
        "{t:?}: the launch's files outlive it: {files:?}"
    );
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    for f in &files {
        let md = std::fs::symlink_metadata(f).unwrap();
        assert_eq!(md.mode() & 0o7777, 0o600, "{}", f.display());
        assert_eq!(md.uid(), uid, "{}", f.display());
    }
    if t.replace {
        std::fs::remove_file(file(0)).unwrap();
        std::fs::write(file(0), b"fresh").unwrap();
    }
    let out = if t.by_run {
        Command::new(BIN)
            .args(["run", "--no-state", "--dir"])
            .arg(&dir)
            .args(["--", "true"])
            .output()
    } else {
        Command::new(BIN).arg("recover").arg(&dir).output()
    }
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{t:?}: {stderr}");
    assert_eq!(
        persisted_of(&dir),
        Vec::<PathBuf>::new(),
        "{t:?}: the files go once written back: {stderr}"
    );
    for (i, &end) in ends.iter().enumerate() {
        let got = std::fs::read(file(i)).unwrap();
        if t.replace && i == 0 {
            assert_eq!(got, b"fresh", "{t:?}: the new file got old pages");
            assert!(
                stderr.contains("another file"),
                "{t:?}: one line says so: {stderr}"
            );
            continue;
        }
        assert!(
            got.len() as u64 >= end,
            "{t:?} seed {seed}: {} bytes in {}, write(2) accepted {end}: {stderr}",
            got.len(),
            file(i).display()
        );
        if let Some(at) = got
            .iter()
            .enumerate()
            .position(|(j, &b)| b != pat(j as u64))
        {
            panic!(
                "{t:?} seed {seed}: byte {at} of {} in {} is {} ({stderr})",
                got.len(),
                file(i).display(),
                got[at]
            );
        }
    }
}

/// Three trials of writers (`shared`, `group`) with seeds from `seed`:
/// recovered by `foliocache recover`, by the next run, and with a file
/// replaced before `foliocache recover`.
fn three_trials(shared: bool, group: bool, seed: u64) {
    build_library();
    let t = Trial {
        shared,
        group,
        by_run: false,
        replace: false,
    };
    trial(t, seed, 300);
    trial(Trial { by_run: true, ..t }, seed + 2, 200);
    trial(Trial { replace: true, ..t }, seed + 4, 100);
}

/// The private cache of a one-process program, and the guardian's
/// segment that keeps what it leaves.
#[test]
fn a_program_and_its_launcher_killed_lose_nothing_of_a_private_cache() {
    three_trials(false, false, 11);
}

/// The group's cache a program's processes join at their first fork
/// (the default).
#[test]
fn a_group_and_its_launcher_killed_lose_nothing_of_the_joined_cache() {
    three_trials(false, true, 21);
}

/// `--shared`: the group's cache from the start.
#[test]
fn a_shared_group_and_its_launcher_killed_lose_nothing() {
    three_trials(true, true, 31);
}

/// `foliocache bench --scenario crash --trials 2`: the crash scenario's
/// ways (2 kills each) and 2 group trials (four writers under one launch,
/// 120 of them killed one at a time, each replaced, then every process,
/// the launcher too, then `foliocache recover`). The full job (1,000
/// trials) is the bench's; here every row of its table must show 0 bytes
/// lost but `--no-guardian`'s, which loses what it loses.
#[test]
fn the_crash_benchs_group_trials_lose_nothing() {
    build_library();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(BIN)
        .args(["bench", "--scenario", "crash", "--trials", "2", "--dir"])
        .arg(dir.path())
        .output()
        .expect("running foliocache bench");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| {
            [
                "foliocache run  ",
                "run killed too",
                "group trials",
                "ext4  ",
            ]
            .iter()
            .any(|w| l.trim_start().starts_with(w))
        })
        .collect();
    assert_eq!(rows.len(), 4, "{text}");
    for row in rows {
        let cols: Vec<&str> = row.split_whitespace().collect();
        // ... accepted (MiB), lost (MiB), kills losing, time (s).
        let n = cols.len();
        assert_eq!((cols[n - 3], cols[n - 2]), ("0.000", "0"), "{row}\n{text}");
    }
}
