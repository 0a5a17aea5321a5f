//! The operator's side of `foliocache mount`: a second mount on a live
//! one refused, `foliocache umount` and its errors, the server's log on
//! stderr (the journal's priorities under systemd) and no log file left
//! in the temporary directory.

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::mount::{fuse_dirs, is_mounted, signal, start_with, wait};

const BIN: &str = env!("CARGO_BIN_EXE_foliocache");

/// How many mounts `/proc/self/mountinfo` lists at `mnt`.
fn mounts_at(mnt: &std::path::Path) -> usize {
    let mnt = mnt.canonicalize().expect("canonical");
    fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .filter(|l| l.split(' ').nth(4) == mnt.to_str())
        .count()
}

/// `foliocache umount MNT`: its exit code and stderr.
fn umount(mnt: &std::path::Path, extra: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .arg("umount")
        .args(extra)
        .arg(mnt)
        .output()
        .expect("foliocache umount");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_second_mount_on_a_live_mount_is_refused() {
    let Some(d) = fuse_dirs("a_second_mount_on_a_live_mount_is_refused") else {
        return;
    };
    let mut first = start_with(&d, Stdio::inherit(), &[]);
    let other = tempfile::tempdir().expect("tempdir");
    for background in [false, true] {
        let mut second = Command::new(BIN)
            .arg("mount")
            .arg(other.path())
            .arg(&d.mnt)
            .args(["--capacity", "16M"])
            .args(if background {
                &[][..]
            } else {
                &["--foreground"]
            })
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("a second mount");
        // Stacked, it would serve until killed (`wait` fails the test).
        let status = wait(&mut second);
        let mut err = String::new();
        std::io::Read::read_to_string(&mut second.stderr.take().expect("stderr"), &mut err)
            .expect("stderr");
        assert_eq!(status.code(), Some(1), "{err}");
        assert!(err.contains("already has a foliocache mount"), "{err}");
        assert!(err.contains("foliocache umount"), "{err}");
    }
    assert_eq!(mounts_at(&d.mnt), 1);
    // `foliocache umount` ends it: the server writes back and exits 0.
    fs::write(d.mnt.join("kept"), b"data").expect("write");
    assert_eq!(umount(&d.mnt, &[]), (Some(0), String::new()));
    assert!(wait(&mut first).success());
    assert!(!is_mounted(&d.mnt));
    assert_eq!(fs::read(d.backing.join("kept")).expect("backing"), b"data");
}

#[test]
fn umount_says_what_is_wrong() {
    let Some(d) = fuse_dirs("umount_says_what_is_wrong") else {
        return;
    };
    let (code, err) = umount(&d.mnt, &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("not mounted"), "{err}");
    let (code, err) = umount(std::path::Path::new("/proc"), &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("not a foliocache mount"), "{err}");
    assert!(is_mounted(std::path::Path::new("/proc")));

    // Busy while a file is open on it; `--lazy` detaches it anyway.
    let mut child = start_with(&d, Stdio::inherit(), &[]);
    let open = fs::File::create(d.mnt.join("open")).expect("create");
    let (code, err) = umount(&d.mnt, &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("is busy"), "{err}");
    assert!(err.contains("--lazy"), "{err}");
    assert!(is_mounted(&d.mnt));
    assert_eq!(umount(&d.mnt, &["--lazy"]), (Some(0), String::new()));
    assert!(!is_mounted(&d.mnt));
    drop(open);
    assert!(wait(&mut child).success());
}

#[test]
fn the_server_logs_on_stderr_with_the_journals_priorities_under_systemd() {
    let Some(d) = fuse_dirs("the_server_logs_on_stderr_with_the_journals_priorities_under_systemd")
    else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    for (journal, want) in [
        (false, "foliocache-fuse: SIGTERM: unmounting"),
        (true, "<6>"),
    ] {
        let log = tmp.path().join(format!("stderr-{journal}"));
        let file = fs::File::create(&log).expect("log");
        let mut cmd = Command::new(BIN);
        cmd.arg("mount")
            .arg(&d.backing)
            .arg(&d.mnt)
            .args(["--capacity", "16M", "--foreground"])
            .stdout(Stdio::piped())
            .stderr(file);
        if journal {
            cmd.env("JOURNAL_STREAM", "1:1");
        } else {
            cmd.env_remove("JOURNAL_STREAM");
        }
        let mut child = cmd.spawn().expect("mount");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
            &mut line,
        )
        .expect("ready");
        signal(&child, nix::sys::signal::Signal::SIGTERM);
        assert!(wait(&mut child).success());
        let said = fs::read_to_string(&log).expect("log");
        assert!(said.contains(want), "{said}");
    }
}

#[test]
fn a_background_mount_leaves_no_log_file_behind() {
    let Some(d) = fuse_dirs("a_background_mount_leaves_no_log_file_behind") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let log = fs::File::create(tmp.path().join("stderr")).expect("log");
    let mut launcher = Command::new(BIN)
        .arg("mount")
        .arg(&d.backing)
        .arg(&d.mnt)
        .args(["--capacity", "16M"])
        .stderr(log)
        .spawn()
        .expect("mount");
    let pid = launcher.id();
    assert!(wait(&mut launcher).success());
    assert!(is_mounted(&d.mnt));
    let old_log = std::env::temp_dir().join(format!("foliocache-mount-{pid}.log"));
    let left = old_log.exists();
    let _ = fs::remove_file(&old_log);
    fs::write(d.mnt.join("y"), b"bg").expect("write");
    assert_eq!(umount(&d.mnt, &[]), (Some(0), String::new()));
    let deadline = Instant::now() + Duration::from_secs(20);
    while fs::read(d.backing.join("y")).unwrap_or_default() != b"bg" {
        assert!(Instant::now() < deadline, "data not written back");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!left, "{} was created", old_log.display());
}
