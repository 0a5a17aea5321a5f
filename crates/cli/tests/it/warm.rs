//! Warm restarts of `foliocache mount`: the list of cached ranges saved
//! at unmount is loaded by the next mount, whose `foliocache stat` shows
//! the load and the file cached before any read through the mount; a
//! file changed between the mounts is skipped. Skipped where FUSE is
//! missing, unless `CI=true`.

use std::fs;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::mount::{fuse_dirs, spawn_mounted, stop, Dirs};

const BIN: &str = env!("CARGO_BIN_EXE_foliocache");

/// A mount server, killed if the test fails before it unmounts.
struct Server(Option<Child>);

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `foliocache mount --foreground --state STATE`, up.
fn start(d: &Dirs, state: &Path) -> Server {
    let mut cmd = Command::new(BIN);
    cmd.arg("mount")
        .arg(&d.backing)
        .arg(&d.mnt)
        .args(["--capacity", "64M", "--foreground", "--state"])
        .arg(state);
    Server(Some(spawn_mounted(&mut cmd, &d.mnt)))
}

/// `foliocache stat --json MNT FILE`, parsed.
fn stat(d: &Dirs, file: &str) -> serde_json::Value {
    let out = Command::new(BIN)
        .arg("stat")
        .arg(&d.mnt)
        .arg(d.mnt.join(file))
        .arg("--json")
        .output()
        .expect("foliocache stat");
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// The stat once the warm load has ended (bounded wait).
fn loaded(d: &Dirs, file: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = stat(d, file);
        if v["warm"]["done"].as_bool() == Some(true) {
            return v;
        }
        assert!(Instant::now() < deadline, "the load never ended: {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn unmount(mut server: Server) {
    stop(&mut server.0.take().expect("running"));
}

#[test]
fn a_remount_starts_with_the_last_mounts_files_cached() {
    let Some(d) = fuse_dirs("a_remount_starts_with_the_last_mounts_files_cached") else {
        return;
    };
    let state = d.backing.parent().unwrap().join("mount.state");
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i * 13 + i / 4096) as u8).collect();
    fs::write(d.backing.join("data"), &data).unwrap();
    fs::write(d.backing.join("other"), &data).unwrap();

    let child = start(&d, &state);
    assert_eq!(fs::read(d.mnt.join("data")).unwrap(), data);
    assert_eq!(fs::read(d.mnt.join("other")).unwrap(), data);
    unmount(child);
    assert!(state.exists(), "the unmount saved the list");

    // "other" changes while nothing serves it.
    fs::write(d.backing.join("other"), vec![7u8; 4096]).unwrap();
    let child = start(&d, &state);
    let v = loaded(&d, "data");
    let w = &v["warm"];
    assert_eq!(w["files_loaded"], 1, "{v}");
    assert_eq!(w["files_skipped"], 1, "the changed file: {v}");
    assert_eq!(v["files"][0]["cached"], 256, "cached before any read: {v}");
    let text = Command::new(BIN).arg("stat").arg(&d.mnt).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("warm start (done)"), "{text}");
    assert_eq!(fs::read(d.mnt.join("data")).unwrap(), data);
    let after = stat(&d, "data");
    assert_eq!(
        after["cache"]["misses"], v["cache"]["misses"],
        "reading the loaded file missed nothing: {after}"
    );
    assert_eq!(fs::read(d.mnt.join("other")).unwrap(), vec![7u8; 4096]);
    unmount(child);
}
