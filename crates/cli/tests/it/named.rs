//! `foliocache cache serve NAME` and `foliocache run --cache NAME`: the
//! processes of separate runs share one cache; what one run left unsaved,
//! the next reads from the cache and the host writes back when stopped.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use super::launch::{build_library, stdout_ending};

const BIN: &str = env!("CARGO_BIN_EXE_foliocache");

/// What the first run runs: a file written through served calls, nothing
/// synced, and the process gone without closing it (a close would write
/// it back); it says whether it was served.
const WRITER: &str = r#"
import ctypes, os, sys
served = ctypes.CDLL(None).foliocache_preload_served
fd = os.open(f"{sys.argv[1]}/data", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"from the first run\n" * 1000)
print("served", served(fd), flush=True)
os._exit(0)
"#;

/// What a program attached by the library's variable alone runs.
const READER: &str = r#"
import ctypes, os, sys
served = ctypes.CDLL(None).foliocache_preload_served
fd = os.open(f"{sys.argv[1]}/data", os.O_RDONLY)
print("served", served(fd), len(os.read(fd, 100000)), "bytes")
"#;

/// A `foliocache cache serve` of the test's: killed if the test ends
/// before stopping it (a failed assertion leaves no host behind).
struct Host(Option<std::process::Child>);

impl Host {
    /// Starts a host at `sock` and waits for its first line.
    fn start(sock: &str, capacity: &str) -> Host {
        Host::start_with(sock, capacity, &[]).0
    }

    /// [`Host::start`] with more options: the host and its first line.
    fn start_with(sock: &str, capacity: &str, more: &[&str]) -> (Host, String) {
        let mut child = Command::new(BIN)
            .args(["cache", "serve", sock, "--capacity", capacity])
            .args(more)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting foliocache cache serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the host's first line");
        let host = Host(Some(child));
        assert!(line.contains("serving") && line.contains(sock), "{line}");
        (host, line)
    }

    /// Stops the host by SIGTERM: how it ended and what it said.
    fn stop(mut self) -> std::process::Output {
        let child = self.0.take().expect("a host");
        // SAFETY: sends SIGTERM to our own child.
        let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(sent, 0);
        child.wait_with_output().expect("the host's end")
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The library built, a temporary directory and a socket's path in it.
fn setup() -> (tempfile::TempDir, String) {
    build_library();
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir
        .path()
        .join("c.sock")
        .to_str()
        .expect("utf-8")
        .to_owned();
    (dir, sock)
}

/// The text the metrics endpoint at `addr` (`HOST:PORT`) serves.
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).expect("connecting to the metrics");
    c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .expect("asking");
    let mut text = String::new();
    c.read_to_string(&mut text).expect("the metrics");
    assert!(
        text.starts_with("HTTP/1.1 200") || text.starts_with("HTTP/1.0 200"),
        "{text}"
    );
    text
}

/// The value of the sample `name` (no labels) in `text`.
fn sample(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// The cache's `stat` line.
fn stat(sock: &str) -> String {
    let out = Command::new(BIN)
        .args(["cache", "stat", sock])
        .output()
        .expect("running foliocache cache stat");
    stdout_ending(&out, 0)
}

#[test]
fn separate_runs_share_a_named_cache_and_its_host_writes_it_back() {
    let (dir, sock) = setup();
    let run = |program: &[&str]| {
        Command::new(BIN)
            .args(["run", "--cache", &sock, "--dir"])
            .arg(dir.path())
            .arg("--")
            .args(program)
            .arg(dir.path())
            .output()
            .expect("running foliocache run --cache")
    };
    // No host yet: the run is refused, and says what hosts one.
    let out = run(&["true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cache serve"), "{err}");

    let (host, line) = Host::start_with(&sock, "16M", &["--metrics", "0"]);
    let metrics = line
        .split("its metrics at http://")
        .nth(1)
        .and_then(|r| r.split("/metrics").next())
        .unwrap_or_else(|| panic!("no metrics address: {line}"))
        .to_owned();
    let line = stat(&sock);
    assert!(
        line.contains("4096 pages (16 MiB, ") && line.contains("in 2 MiB pages), 0 cached"),
        "{line}"
    );

    let text = stdout_ending(&run(&["python3", "-c", WRITER]), 0);
    assert_eq!(text, "served 1\n");
    // The run is over; its bytes are in the host's cache, not on disk.
    let after = stat(&sock);
    assert!(after.contains("5 cached, 5 dirty"), "{after}");
    assert_eq!(
        std::fs::metadata(dir.path().join("data"))
            .expect("data")
            .len(),
        0
    );
    // A second run reads them, through the cache.
    let want = "from the first run\n".repeat(1000);
    let text = stdout_ending(&run(&["sh", "-c", "cat \"$1\"/data", "sh"]), 0);
    assert_eq!(text, want);
    // So does a program started without `foliocache run`, the library's
    // variable naming the cache's socket.
    let lib = std::path::Path::new(BIN).with_file_name("libfoliocache_preload.so");
    let out = Command::new("python3")
        .args(["-c", READER])
        .arg(dir.path())
        .env("LD_PRELOAD", &lib)
        .env("FOLIOCACHE_PRELOAD_DIRS", dir.path())
        .env("FOLIOCACHE_PRELOAD_SHARED", &sock)
        .output()
        .expect("running python3 under the library");
    assert_eq!(stdout_ending(&out, 0), "served 1 19000 bytes\n");
    // Every process's reads are the group's: `cat`'s 5 pages and
    // python's, each published at its close, in the host's figures.
    let text = scrape(&metrics);
    let hits = sample(&text, "foliocache_shared_hits_total");
    assert!(hits >= 10, "{text}");
    assert_eq!(sample(&text, "foliocache_shared_cached_pages"), 5, "{text}");
    assert_eq!(
        sample(&text, "foliocache_shared_capacity_pages"),
        4096,
        "{text}"
    );
    assert!(
        stat(&sock).contains(&format!("{hits} hits")),
        "{}",
        stat(&sock)
    );
    // The group's curve, kept by the host over every process's reads:
    // its 1x point (the share the group had) in the metrics, and in
    // `cache stat` as the host last published it.
    let one = "foliocache_shared_predicted_hit_ratio{capacity_ratio=\"1\"} ";
    assert!(text.contains(one), "{text}");
    let line = stat(&sock);
    assert!(
        line.contains("the group's predicted hit ratio (bytes from memory) at capacity: ")
            && !line.contains("1x not yet known"),
        "{line}"
    );

    let out = host.stop();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("5 pages written back"), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("data")).expect("data"),
        want
    );
    assert!(!std::path::Path::new(&sock).exists(), "the socket removed");
}

/// stress-ng's file stressors (Debian's `stress-ng`; xfstests' fsstress
/// is not packaged here), `--verify`, eight forked workers at once under
/// `foliocache run --cache`: every worker served (counted as processes
/// attached to the cache while they run), no error, no failed check.
/// (Not `--iomix`: one of its workers makes the file immutable for an
/// instant while the others write it, which docs/preload.md's "Named
/// caches" names as a limit of the group.)
#[test]
fn stress_ngs_forked_file_workers_are_served_and_verify() {
    let test = "named: stress-ng";
    if Command::new("stress-ng").arg("--version").output().is_err() {
        test_support::skip_or_fail(test, "stress-ng is not installed");
        return;
    }
    let (dir, sock) = setup();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("data dir");
    let host = Host::start(&sock, "64M");
    let run = Command::new(BIN)
        .args(["run", "--cache", &sock, "--dir"])
        .arg(&data)
        .args([
            "--",
            "stress-ng",
            "--verify",
            "--timeout",
            "4",
            "--temp-path",
        ])
        .arg(&data)
        .args([
            "--hdd",
            "2",
            "--hdd-bytes",
            "8M",
            "--seek",
            "2",
            "--seek-size",
            "8M",
        ])
        .args([
            "--readahead",
            "2",
            "--readahead-bytes",
            "8M",
            "--sync-file",
            "2",
        ])
        .args(["--sync-file-bytes", "8M"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting stress-ng");
    // The most processes attached at once while it runs (the host is one).
    let mut run = run;
    let mut most = 0;
    while run.try_wait().expect("stress-ng").is_none() {
        let s = stat(&sock);
        let n: u64 = s
            .split("; ")
            .nth(1)
            .and_then(|p| p.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{s}"));
        most = most.max(n);
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = run.wait_with_output().expect("stress-ng's end");
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("successful run completed"), "{text}");
    assert!(!text.contains("fail"), "{text}");
    eprintln!("{test}: {most} processes attached at most");
    assert!(
        most > 8,
        "{most} processes attached at most: the 8 workers and the host"
    );
    assert!(host.stop().status.success());
}

/// What root's run writes: a file only root may read or write and one any
/// user may read, both left unsaved in the cache (the process gone
/// without closing them).
const ROOT_WRITER: &str = r#"
import os, sys
for name, mode in (("secret", 0o600), ("public", 0o644)):
    fd = os.open(f"{sys.argv[1]}/{name}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    os.write(fd, f"root's {name}\n".encode())
os._exit(0)
"#;

/// What a member of the cache's group runs: it reads root's unsaved
/// public bytes, is refused root's secret file both ways, as on ext4, and
/// writes a file of its own, which the kernel serves.
const MEMBER: &str = r#"
import ctypes, os, sys
served = ctypes.CDLL(None).foliocache_preload_served
d = sys.argv[1]
fd = os.open(f"{d}/public", os.O_RDONLY)
print("public", os.read(fd, 100).decode(), end="")
for mode in (os.O_RDONLY, os.O_WRONLY | os.O_TRUNC):
    try:
        os.open(f"{d}/secret", mode)
        print("secret opened")
    except PermissionError:
        print("secret refused")
fd = os.open(f"{d}/mine", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"the member's\n")
print("mine served", served(fd))
"#;

/// A member of the cache's group (`nobody`, with the group) under
/// `foliocache run --cache`, the host and another run root's: its program
/// maps nothing of the cache, reads the group's unsaved bytes of a file
/// it may read (handed to the kernel, written back first), is refused a
/// file only root may use, and its writes are read by root's next run;
/// root's files keep root's bytes, in the cache and on disk.
#[test]
fn a_member_of_the_group_is_served_by_the_kernel_and_changes_nothing_of_roots() {
    // SAFETY: a plain system call.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("named: a member: skipped, needs root to run a program as another user");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let (dir, sock) = setup();
    let chmod = |path: &std::path::Path, mode| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod")
    };
    chmod(dir.path(), 0o755);
    // The binary and the library where `nobody` may run them.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    chmod(&bin, 0o755);
    let lib = std::path::Path::new(BIN).with_file_name("libfoliocache_preload.so");
    for from in [std::path::Path::new(BIN), lib.as_path()] {
        std::fs::copy(from, bin.join(from.file_name().expect("a name"))).expect("copy");
    }
    let data = dir.path().join("data");
    let home = dir.path().join("home");
    for d in [&data, &home] {
        std::fs::create_dir(d).expect("a directory");
        chmod(d, 0o777);
    }
    let host = Host::start_with(&sock, "16M", &["--group", "43212"]).0;
    let run = |program: &[&str], member: bool| {
        let mut cmd = Command::new(bin.join("foliocache"));
        cmd.args(["run", "--cache", &sock, "--dir"])
            .arg(&data)
            .arg("--")
            .args(program)
            .arg(&data)
            .current_dir(dir.path())
            .env_remove("XDG_RUNTIME_DIR");
        if member {
            cmd.env("HOME", &home);
            // SAFETY: plain system calls changing the child's credentials
            // between its fork and its exec.
            unsafe {
                cmd.pre_exec(|| {
                    let groups = [43_212];
                    if libc::setgroups(1, groups.as_ptr()) != 0
                        || libc::setgid(65_534) != 0
                        || libc::setuid(65_534) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                })
            };
        }
        cmd.output().expect("running foliocache run --cache")
    };
    assert_eq!(
        stdout_ending(&run(&["python3", "-c", ROOT_WRITER], false), 0),
        ""
    );
    assert!(stat(&sock).contains("2 dirty"), "{}", stat(&sock));
    let text = stdout_ending(&run(&["python3", "-c", MEMBER], true), 0);
    assert_eq!(
        text,
        "public root's public\nsecret refused\nsecret refused\nmine served 0\n"
    );
    let text = stdout_ending(
        &run(&["sh", "-c", "cat \"$1\"/mine \"$1\"/secret", "sh"], false),
        0,
    );
    assert_eq!(text, "the member's\nroot's secret\n");
    let out = host.stop();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (name, want) in [("secret", "root's secret\n"), ("public", "root's public\n")] {
        let got = std::fs::read_to_string(data.join(name)).expect("a file of root's");
        assert_eq!(got, want, "{name}");
    }
}
