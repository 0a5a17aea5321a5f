//! `foliocache mount --cache NAME`: the mount's server attached to a
//! named cache that `foliocache cache serve` hosts, beside a `foliocache
//! run --cache NAME` program on the backing directory: each side reads
//! what the other wrote, sizes included, from the cache (the file on
//! disk still empty), and the host's SIGTERM writes it back. Skipped
//! (with the reason printed) where FUSE is missing, unless `CI=true`.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::launch::{build_library, stdout_ending};
use super::mount::{fuse_dirs, spawn_mounted, stop};

const BIN: &str = env!("CARGO_BIN_EXE_foliocache");

/// What the `run --cache` program runs: the mount's bytes read, the file
/// cut and appended to through served calls, nothing synced, and the
/// process gone without closing it (a close would write it back).
const PROGRAM: &str = r#"
import ctypes, os, sys
served = ctypes.CDLL(None).foliocache_preload_served
fd = os.open(f"{sys.argv[1]}/data", os.O_RDWR)
seen = os.read(fd, 100000)
os.ftruncate(fd, 12000)
os.lseek(fd, 0, os.SEEK_END)
os.write(fd, b"from the run\n" * 100)
print("served", served(fd), "read", len(seen), seen[:14].decode(), flush=True)
os._exit(0)
"#;

/// Starts `foliocache cache serve SOCK` and waits for it to serve.
fn host(sock: &str) -> Child {
    let mut host = Command::new(BIN)
        .args(["cache", "serve", sock, "--capacity", "16M"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting foliocache cache serve");
    let mut line = String::new();
    BufReader::new(host.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the host's first line");
    assert!(line.contains("serving"), "{line}");
    host
}

/// Starts `foliocache mount --cache SOCK --foreground` and waits for the
/// mount.
fn mount(backing: &Path, mnt: &Path, sock: &str) -> Child {
    let mut cmd = Command::new(BIN);
    cmd.arg("mount")
        .arg(backing)
        .arg(mnt)
        .args(["--cache", sock, "--foreground"]);
    spawn_mounted(&mut cmd, mnt)
}

/// Kills a child left running when a test fails.
struct Reap(Option<Child>);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn a_mount_and_a_run_share_a_named_cache() {
    let Some(d) = fuse_dirs("a_mount_and_a_run_share_a_named_cache") else {
        return;
    };
    build_library();
    let sock_dir = tempfile::tempdir().expect("tempdir");
    let sock = sock_dir
        .path()
        .join("c.sock")
        .to_str()
        .expect("utf-8")
        .to_owned();
    let mut host = Reap(Some(host(&sock)));
    let mut server = Reap(Some(mount(&d.backing, &d.mnt, &sock)));
    let on_disk = || fs::read(d.backing.join("data")).expect("data");

    // Written through the mount, read by the run from the cache.
    let mine = "from the mount\n".repeat(1000);
    fs::write(d.mnt.join("data"), &mine).expect("write through the mount");
    assert_eq!(on_disk().len(), 0);
    let out = Command::new(BIN)
        .args(["run", "--cache", &sock, "--dir"])
        .arg(&d.backing)
        .args(["--", "python3", "-c", PROGRAM])
        .arg(&d.backing)
        .output()
        .expect("running foliocache run --cache");
    assert_eq!(
        stdout_ending(&out, 0),
        "served 1 read 15000 from the mount\n"
    );

    // The run's cut and append, read through the mount: size and bytes.
    let want = format!("{}{}", &mine[..12000], "from the run\n".repeat(100));
    assert_eq!(
        fs::metadata(d.mnt.join("data")).expect("stat").len(),
        want.len() as u64
    );
    assert_eq!(
        fs::read_to_string(d.mnt.join("data")).expect("read through the mount"),
        want
    );
    // (The run's cut reached the file's size on disk: no byte.)
    let disk = on_disk();
    assert!(
        disk.iter().all(|&b| b == 0),
        "read from the cache, not the disk"
    );

    // The host's stat counts the mount's server among its processes.
    let stat = Command::new(BIN)
        .args(["cache", "stat", &sock])
        .output()
        .expect("cache stat");
    assert!(
        stdout_ending(&stat, 0).contains("2 processes attached"),
        "{}",
        String::from_utf8_lossy(&stat.stdout)
    );
    // And the mount's says which cache it serves.
    let text = Command::new(BIN)
        .arg("stat")
        .arg(&d.mnt)
        .output()
        .expect("stat");
    assert!(
        stdout_ending(&text, 0).contains(&format!("named cache {sock}")),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );

    // The host's SIGTERM writes the cache back, the mount still up.
    let mut host = host.0.take().expect("the host");
    // SAFETY: sends SIGTERM to our own child.
    let sent = unsafe { libc::kill(host.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(sent, 0);
    assert!(host.wait().expect("the host's end").success());
    assert_eq!(
        fs::read_to_string(d.backing.join("data")).expect("data"),
        want
    );
    stop(server.0.as_mut().expect("the server"));
    server.0 = None;
}

#[test]
fn mount_cache_refuses_the_own_caches_options() {
    let d = super::mount::dirs();
    for extra in [
        &["--capacity", "16M"][..],
        &["--dontcache"],
        &["--max-folio", "64k"],
        &["--metrics", "9100"],
        &["--state", "/tmp/x"],
    ] {
        let out = Command::new(BIN)
            .arg("mount")
            .arg(&d.backing)
            .arg(&d.mnt)
            .args(["--cache", "c", "--foreground"])
            .args(extra)
            .output()
            .expect("foliocache mount");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {err}");
        assert!(err.contains(extra[0]) && err.contains("--cache"), "{err}");
    }
    // Without --cache, --capacity is still asked for.
    let out = Command::new(BIN)
        .arg("mount")
        .arg(&d.backing)
        .arg(&d.mnt)
        .output()
        .expect("foliocache mount");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--capacity"));
}
