//! `foliocache run` as a user runs it: without the library beside the
//! binary it says what to build; with it, the program runs under it with
//! the variables set, and its exit status is the launcher's.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_foliocache");

/// Builds `libfoliocache_preload.so`, `libfoliocache.so` and the SQLite
/// extension beside the
/// binary (its target directory and profile).
pub(crate) fn build_library() {
    let out = Path::new(BIN).parent().expect("the binary's directory");
    let profile = match out.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(p) => p,
        None => panic!("no profile in {}", out.display()),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "foliocache-preload", "-p", "foliocache-capi"])
        .args(["-p", "foliocache-sqlite-ext"])
        .args(["--profile", profile])
        .env(
            "CARGO_TARGET_DIR",
            out.parent().expect("the target directory"),
        )
        .status()
        .expect("running cargo build");
    assert!(status.success(), "cargo build of the two libraries failed");
}

/// A finished program's stdout, after checking it exited with `code`
/// (its output in the failure's message).
pub(crate) fn stdout_ending(out: &std::process::Output, code: i32) -> String {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn run_without_the_library_says_what_to_build() {
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("foliocache");
    std::fs::copy(BIN, &copy).expect("copying the binary");
    let out = Command::new(&copy)
        .args(["run", "--dir"])
        .arg(dir.path())
        .args(["--", "true"])
        .output()
        .expect("running foliocache run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cargo build --release"), "{err}");
}

/// The root's `cargo build --release` builds what `foliocache run` loads:
/// the workspace's default members are the binary and both libraries.
#[test]
fn the_default_build_includes_both_libraries() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        // At the root: inside a member's directory, cargo's default is
        // that member.
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let id_of = |name: &str| {
        meta["packages"]
            .as_array()
            .expect("packages")
            .iter()
            .find(|p| p["name"] == name)
            .map(|p| p["id"].clone())
            .unwrap_or_else(|| panic!("no package {name}"))
    };
    let defaults = meta["workspace_default_members"]
        .as_array()
        .expect("workspace_default_members");
    for name in ["foliocache-cli", "foliocache-preload", "foliocache-capi"] {
        assert!(
            defaults.contains(&id_of(name)),
            "{name} not a default member"
        );
    }
}

/// scripts/install.sh into a temporary prefix: the installed binary finds
/// the installed interposer (PREFIX/lib/foliocache) and a program runs
/// under it, reading what the cache serves.
#[test]
fn the_installed_binary_runs_a_program_under_the_installed_library() {
    build_library();
    let prefix = tempfile::tempdir().expect("tempdir");
    let out_dir = Path::new(BIN).parent().expect("the binary's directory");
    let install = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install.sh");
    let status = Command::new("sh")
        .arg(&install)
        .arg("--no-build")
        .arg(prefix.path())
        .env("BUILD_DIR", out_dir)
        .status()
        .expect("running scripts/install.sh");
    assert!(status.success(), "scripts/install.sh failed");
    for f in [
        "bin/foliocache",
        "lib/foliocache/libfoliocache_preload.so",
        "lib/foliocache/libfoliocache_sqlite_ext.so",
        "lib/libfoliocache.so.0",
        "include/foliocache.h",
        "lib/pkgconfig/foliocache.pc",
    ] {
        assert!(prefix.path().join(f).exists(), "{f} not installed");
    }
    // Stripped, as a package's files are (the build keeps its symbols).
    for f in ["bin/foliocache", "lib/foliocache/libfoliocache_preload.so"] {
        let installed = prefix.path().join(f);
        for section in [".symtab", ".debug_info"] {
            assert!(
                !test_support::elf_has_section(&installed, section),
                "{f} installed with {section}"
            );
        }
    }
    let data = tempfile::tempdir().expect("tempdir");
    std::fs::write(data.path().join("f"), b"served\n").expect("writing f");
    let out = Command::new(prefix.path().join("bin/foliocache"))
        .args(["run", "--capacity", "16M", "--dir"])
        .arg(data.path())
        .args(["--", "sh", "-c", "echo \"$LD_PRELOAD\"; cat \"$0\"/f"])
        .arg(data.path())
        .output()
        .expect("running the installed foliocache");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = text.lines();
    let preload = lines.next().unwrap_or_default();
    assert_eq!(
        Path::new(preload.split(':').next().unwrap_or_default())
            .canonicalize()
            .expect("the preloaded library exists"),
        prefix
            .path()
            .join("lib/foliocache/libfoliocache_preload.so")
            .canonicalize()
            .unwrap()
    );
    assert_eq!(lines.next(), Some("served"));
}

#[test]
fn run_starts_the_program_under_the_library() {
    build_library();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(BIN)
        .args(["run", "--capacity", "16M", "--dir"])
        .arg(dir.path())
        .args([
            "--",
            "sh",
            "-c",
            "printf data > \"$1/f\" && cat \"$1/f\" && \
             printf ' %s %s' \"$FOLIOCACHE_PRELOAD_CAPACITY\" \"$LD_PRELOAD\"; exit 7",
            "sh",
        ])
        .arg(dir.path())
        .output()
        .expect("running foliocache run");
    let text = stdout_ending(&out, 7);
    assert!(text.starts_with("data 16777216 "), "{text}");
    assert!(
        text.trim_end().ends_with("libfoliocache_preload.so"),
        "{text}"
    );
    assert_eq!(std::fs::read(dir.path().join("f")).expect("f"), b"data");
}

/// `foliocache run --metrics`: the launcher serves the group's figures
/// while the program runs, and a program of one process, which serves
/// from a cache of its own until it forks, is in them (a Python that
/// opens a served file, reads from it, and sleeps while the test
/// scrapes). (Not a shell: its `read <&3` moves the file onto fd 0,
/// which hands it to the kernel: the standard streams are never served,
/// docs/preload.md.)
#[test]
fn run_serves_the_programs_metrics_while_it_runs() {
    use std::io::{Read, Write};
    build_library();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("f"), b"a line\n").expect("writing f");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut child = Command::new(BIN)
        .args(["run", "--no-state", "--capacity", "16M", "--metrics"])
        .arg(port.to_string())
        .arg("--dir")
        .arg(dir.path())
        .args([
            "--",
            // (Not `python3` by the PATH, which may be a shell script
            // that forks first: the program would then be in the group
            // from its start, whose reads are published every 64 misses
            // and at a close, not at the first.)
            "/usr/bin/python3",
            "-c",
            "import os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); \
             assert os.read(fd, 100) == b'a line\\n'; time.sleep(3)",
        ])
        .arg(dir.path().join("f"))
        .spawn()
        .expect("running foliocache run");
    // The server starts with the run, the read is published at once:
    // wait for both (a bounded wait, not a timed assertion).
    let mut text = String::new();
    for _ in 0..100 {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            write!(s, "GET /metrics HTTP/1.0\r\n\r\n").expect("request");
            s.read_to_string(&mut text).expect("response");
            if text.contains("foliocache_shared_returned_bytes_total 7") {
                break;
            }
            text.clear();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(child.wait().expect("waiting for the program").success());
    assert!(
        text.starts_with("HTTP/1.0 200") || text.starts_with("HTTP/1.1 200"),
        "{text}"
    );
    for line in [
        "foliocache_shared_returned_bytes_total 7",
        "foliocache_shared_misses_total 1",
        "foliocache_shared_capacity_pages 4096",
    ] {
        assert!(text.contains(line), "no `{line}` in:\n{text}");
    }
}

/// A copy of the binary with an empty `libfoliocache_preload.so` beside
/// it: enough for `foliocache run` to get as far as starting the program
/// (the dynamic loader skips a library it cannot load, and says so).
fn with_a_stand_in_library(dir: &Path) -> std::path::PathBuf {
    let copy = dir.join("foliocache");
    std::fs::copy(BIN, &copy).expect("copying the binary");
    std::fs::write(dir.join("libfoliocache_preload.so"), b"").expect("the stand-in");
    copy
}

/// `foliocache run` refuses, as `mount` does, a capacity above the
/// machine's memory and a metrics port that is taken, before the program
/// starts; a capacity with a fraction is a size, and a free port is let go
/// for the program's library.
#[test]
fn run_refuses_what_mount_refuses_before_the_program_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = with_a_stand_in_library(dir.path());
    let marker = dir.path().join("ran");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let taken_port = taken.local_addr().expect("addr").port().to_string();
    let run = |extra: &[&str]| {
        let _ = std::fs::remove_file(&marker);
        let out = Command::new(&bin)
            .args(["run", "--no-state", "--dir"])
            .arg(dir.path())
            .args(extra)
            .args(["--", "touch"])
            .arg(&marker)
            .output()
            .expect("running foliocache run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--capacity", "1000T"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--capacity") && err.contains("more than"),
        "{err}"
    );
    assert!(!marker.exists(), "the program ran");
    let (code, err) = run(&["--metrics", &taken_port]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--metrics") && err.contains(&taken_port),
        "{err}"
    );
    assert!(!marker.exists(), "the program ran");
    drop(taken);
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
        .to_string();
    let (code, err) = run(&["--capacity", "1.5M", "--metrics", &free]);
    assert_eq!(code, Some(0), "{err}");
    assert!(marker.exists(), "the program did not run: {err}");
}

/// `foliocache run [--shared] --capacity 16M --dir DIR -- PROGRAM...`,
/// with `DIR` as the program's last argument; its output. Without
/// `--shared` the program's processes join the group at their first fork.
fn run_16m(dir: &Path, shared: bool, program: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .arg("run")
        .args(shared.then_some("--shared"))
        .args(["--no-state", "--capacity", "16M", "--dir"])
        .arg(dir)
        .arg("--")
        .args(program)
        .arg(dir)
        .output()
        .expect("running foliocache run")
}

/// What the test program of [`run_serves_a_process_tree_as_one_cache`]
/// runs: a parent that writes a file (nothing synced) and forks four
/// workers; each reads the parent's bytes through its served fd and
/// appends a record to a shared log (`O_APPEND`); the last kills itself
/// right after. The parent then prints the log.
const FORKED_WORKERS: &str = r#"
import ctypes, os, signal, sys
d = sys.argv[1]
served = ctypes.CDLL(None).foliocache_preload_served
fd = os.open(f"{d}/data", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"x" * 100000)
kids = []
for i in range(4):
    pid = os.fork()
    if pid == 0:
        g = os.open(f"{d}/data", os.O_RDONLY)
        ok = os.pread(g, 200000, 0) == b"x" * 100000
        a = os.open(f"{d}/log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(a, f"worker {i} read {ok} served {served(g)} {served(fd)}\n".encode())
        if i == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(0)
    kids.append(pid)
    os.waitpid(pid, 0)
log = os.open(f"{d}/log", os.O_RDONLY)
sys.stdout.write(os.read(log, 10000).decode())
"#;

/// `foliocache run`, with `--shared` and without: one cache for the
/// program's process tree. Forked workers keep serving from it and read
/// the parent's unsynced bytes (without `--shared`: the parent's
/// description, served by its own cache until the fork, moved into the
/// group's at it); their appends land one after another in one file;
/// what the worker killed after its write left unsaved, the launcher
/// writes back; `sort -o` and a shell's later readers see each other's
/// output.
#[test]
fn run_serves_a_process_tree_as_one_cache() {
    build_library();
    for shared in [true, false] {
        a_process_tree_is_served_as_one_cache(shared);
    }
}

fn a_process_tree_is_served_as_one_cache(shared: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run_16m(dir.path(), shared, &["python3", "-c", FORKED_WORKERS]);
    let text = stdout_ending(&out, 0);
    let want: String = (0..4)
        .map(|i| format!("worker {i} read True served 1 1\n"))
        .collect();
    assert_eq!(text, want);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("log")).expect("log"),
        want
    );
    assert_eq!(
        std::fs::read(dir.path().join("data")).expect("data"),
        vec![b'x'; 100_000]
    );

    let lines: Vec<String> = (0..5000)
        .map(|i| format!("{}\n", (i * 7919) % 5000))
        .collect();
    std::fs::write(dir.path().join("in"), lines.concat()).expect("in");
    let out = Command::new(BIN)
        .arg("run")
        .args(shared.then_some("--shared"))
        .args(["--no-state", "--dir"])
        .arg(dir.path())
        .args([
            "--",
            "sh",
            "-c",
            "cd \"$1\" && sort -n -o out in && wc -l out && head -c 8 out | od -c | head -1 \
             && cat out | sort -rn > rev && tail -n 1 rev",
            "sh",
        ])
        .arg(dir.path())
        .output()
        .expect("running foliocache run");
    let text = stdout_ending(&out, 0);
    let want: String = (0..5000).map(|n| format!("{n}\n")).collect();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out")).expect("out"),
        want
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.first(), Some(&"5000 out"), "{text}");
    assert!(
        lines[1].contains("0  \\n   1  \\n   2  \\n   3  \\n"),
        "{text}"
    );
    assert_eq!(lines.last(), Some(&"0"), "{text}");
}

/// What [`a_groups_unsaved_writes_reach_stat_and_stdio_readers`] runs
/// (`sh -c`, the directory its `$1`): a background process writes a file
/// and keeps it open, unsynced; the shell's next programs, its siblings,
/// read it every way: `stat` by path (the group's size), `cat` (served
/// reads), `sort` (a stdio stream, opened by `fopen`: the group's data is
/// written back first). Without `--shared` they see an empty file.
const UNSAVED_READERS: &str = r#"
cd "$1"
python3 -c '
import os, time
fd = os.open("f", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"".join(b"%d\n" % (i * 7 % 1000) for i in range(1000)))
open("ready", "w").close()
time.sleep(3)
' &
while [ ! -e ready ]; do sleep 0.05; done
stat -c %s f
cat f | wc -l
sort -n f | tail -n 1
wait
"#;

/// `foliocache run`, with `--shared` and without (the shell joins the
/// group at its first fork): a file one process wrote and has not
/// written back is seen whole by its siblings, through the cache
/// (`cat`), by size (`stat` by path) and through the kernel (a stdio
/// `sort`, which the group's writeback before its `fopen` serves).
#[test]
fn a_groups_unsaved_writes_reach_stat_and_stdio_readers() {
    build_library();
    for shared in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = run_16m(dir.path(), shared, &["sh", "-c", UNSAVED_READERS, "sh"]);
        let text = stdout_ending(&out, 0);
        let size: usize = (0..1000).map(|i| format!("{}\n", i * 7 % 1000).len()).sum();
        assert_eq!(
            text,
            format!("{size}\n1000\n999\n"),
            "shared {shared}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// What [`a_program_joins_the_group_at_its_first_fork`] runs: a parent
/// that reads a file and writes another through two fds of one
/// description (unsynced) in its own cache, then forks a child that
/// writes at the shared position through the inherited duplicate; the
/// parent writes on after it and reads the file back, then says whether
/// each fd is served and, after the child, from which cache.
const JOIN_AT_FORK: &str = r#"
import ctypes, os, sys
d = sys.argv[1]
served = ctypes.CDLL(None).foliocache_preload_served
r = os.open(f"{d}/in", os.O_RDONLY)
assert os.read(r, 100) == b"input"
fd = os.open(f"{d}/out", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"0123456789")
fd2 = os.dup(fd)
print("before", served(r), served(fd), served(fd2))
pid = os.fork()
if pid == 0:
    os.write(fd2, b"abc")
    os.lseek(r, 0, 0)
    ok = os.read(r, 100) == b"input" and os.pread(fd, 100, 0) == b"0123456789abc"
    os._exit(0 if ok and served(fd) and served(r) else 1)
_, status = os.waitpid(pid, 0)
os.write(fd, b"XYZ")
print("child", status, os.pread(fd2, 100, 0).decode(), served(r), served(fd), served(fd2))
"#;

/// `foliocache run` without `--shared`: a program of one process serves
/// from a cache of its own (its figures at exit are its own cache's);
/// at its first fork it joins the group, its open descriptions moved
/// into the group's cache with their unsynced bytes, their duplicates
/// and their shared position, so the child reads and writes what the
/// parent sees, through the cache.
#[test]
fn a_program_joins_the_group_at_its_first_fork() {
    build_library();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("in"), b"input").expect("in");
    let run = |program: &str, shared: bool| {
        Command::new(BIN)
            .arg("run")
            .args(shared.then_some("--shared"))
            .args(["--no-state", "--capacity", "16M", "--dir"])
            .arg(dir.path())
            // (Not `python3` by the PATH, which may be a shell script
            // that forks: a version manager's shim.)
            .args(["--", "/usr/bin/python3", "-c", program])
            .arg(dir.path())
            .env("FOLIOCACHE_PRELOAD_STATS", "1")
            .output()
            .expect("running foliocache run")
    };
    let alone = run(
        "import os, sys\nos.read(os.open(sys.argv[1] + '/in', os.O_RDONLY), 9)",
        false,
    );
    stdout_ending(&alone, 0);
    let err = String::from_utf8_lossy(&alone.stderr);
    assert!(
        err.contains("1 opens served") && !err.contains("group"),
        "one process, its own cache: {err}"
    );
    // With `--shared` the same: the fork takes each description's
    // position lock once, however many fds share it (it took a shared
    // one twice, and the fork never returned).
    for shared in [false, true] {
        let out = run(JOIN_AT_FORK, shared);
        let text = stdout_ending(&out, 0);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            text, "before 1 1 1\nchild 0 0123456789abcXYZ 1 1 1\n",
            "shared {shared}: {err}"
        );
        assert!(err.contains("from the group's shared cache"), "{err}");
        assert_eq!(
            std::fs::read(dir.path().join("out")).expect("out"),
            b"0123456789abcXYZ"
        );
    }
}

/// `foliocache run --shared --metrics PORT`: the launcher serves the
/// group's figures while the program runs (the program's processes serve
/// none: the port is free for the launcher). A forked child reads a file
/// its parent wrote, closes it (publishing its reads) and exits; the
/// parent then scrapes the endpoint: the child's hits are there.
#[test]
fn run_shared_serves_the_groups_metrics() {
    build_library();
    let dir = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
        .to_string();
    let program = r#"
import os, sys, urllib.request
d, port = sys.argv[1], sys.argv[2]
with open(os.path.join(d, "f"), "wb") as f:
    f.write(b"x" * 40960)
pid = os.fork()
if pid == 0:
    with open(os.path.join(d, "f"), "rb") as f:
        for _ in range(50):
            f.seek(0)
            assert f.read() == b"x" * 40960
    os._exit(0)
os.waitpid(pid, 0)
text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port).read().decode()
for line in text.splitlines():
    if line.startswith(("foliocache_shared_hits_total ", "foliocache_shared_cached_pages ")):
        print(line)
"#;
    let out = Command::new(BIN)
        .args([
            "run",
            "--shared",
            "--capacity",
            "16M",
            "--metrics",
            &port,
            "--dir",
        ])
        .arg(dir.path())
        .args(["--", "python3", "-c", program])
        .arg(dir.path())
        .arg(&port)
        .output()
        .expect("running foliocache run");
    let text = stdout_ending(&out, 0);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0], "foliocache_shared_cached_pages 10", "{text}");
    let hits: u64 = lines[1]
        .strip_prefix("foliocache_shared_hits_total ")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    // 50 reads of 10 pages, each read whole.
    assert!(hits >= 500, "{text}");
}

/// `foliocache run --shared --state FILE`: the launcher saves what the
/// group's cache held once the program is gone, and the next run's
/// launcher loads it back before the program reads: a `cat` of the file
/// in the second run is served from the cache without a miss.
#[test]
fn run_shared_restarts_warm_from_its_state_file() {
    build_library();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let bytes: Vec<u8> = (0..2 << 20).map(|i: u32| (i % 251) as u8).collect();
    std::fs::write(data.join("f"), &bytes).unwrap();
    let state = dir.path().join("group.state");
    let run = |wait: &str| {
        Command::new(BIN)
            .args(["run", "--shared", "--capacity", "16M", "--state"])
            .arg(&state)
            .arg("--dir")
            .arg(&data)
            .args(["--", "python3", "-c", READ_AND_SUM, wait])
            .arg(data.join("f"))
            .env("FOLIOCACHE_PRELOAD_STATS", "1")
            .output()
            .expect("running foliocache run")
    };
    let first = run("0");
    let sum = stdout_ending(&first, 0);
    assert!(state.exists(), "{}", String::from_utf8_lossy(&first.stderr));
    let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let saved = inode(&state);
    // The second run's reader waits for the launcher's load.
    let second = run("1");
    assert_eq!(stdout_ending(&second, 0), sum);
    // It read what the list held: the launcher left the list as it was,
    // not rewritten (a new list is renamed over the old one).
    assert_eq!(inode(&state), saved, "the unchanged list was written again");
    let stderr = String::from_utf8_lossy(&second.stderr);
    let reader = stderr
        .lines()
        .find(|l| l.contains("1 opens served"))
        .unwrap_or_else(|| panic!("no line of the reader's: {stderr}"));
    assert!(reader.contains(" 512 hits, 0 misses"), "{stderr}");
}

/// [`run_shared_restarts_warm_from_its_state_file`]'s reader: after
/// `argv[1]` seconds, reads the file `argv[2]` whole in one call and
/// prints its CRC.
const READ_AND_SUM: &str = "import os, sys, time, zlib
time.sleep(float(sys.argv[1]))
fd = os.open(sys.argv[2], os.O_RDONLY)
print(zlib.crc32(os.read(fd, 4 << 20)))
os.close(fd)";

/// `foliocache run --shared`: the group's cache faults in what its
/// programs use, not its whole capacity (its pages made 2 MiB pages as
/// the use comes near them, as `run`'s group once joined). The program
/// reads 1 MiB of a file, then watches the cache's memory file (named
/// to it in `FOLIOCACHE_PRELOAD_SHARED`) for up to 5 s: it must stay
/// below half the 256 MiB capacity (where a cache made whole, collapsed
/// in the background, grows to all of it).
#[test]
fn run_shared_faults_in_what_it_uses() {
    build_library();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("f"), vec![7u8; 1 << 20]).unwrap();
    let limit = 128u64 << 20;
    let out = Command::new(BIN)
        .args([
            "run",
            "--shared",
            "--no-state",
            "--capacity",
            "256M",
            "--dir",
        ])
        .arg(dir.path())
        .args(["--", "python3", "-c", WATCH_MEMORY])
        .arg(dir.path().join("f"))
        .arg(limit.to_string())
        .output()
        .expect("running foliocache run");
    let text = stdout_ending(&out, 0);
    let held: u64 = text.trim().parse().unwrap_or_else(|_| panic!("{text}"));
    assert!(held > 0, "{text}");
    assert!(
        held < limit,
        "the group's cache holds {held} bytes of memory"
    );
}

/// [`run_shared_faults_in_what_it_uses`]'s program: reads the file
/// `argv[1]`, then prints the bytes the memory file holds once they pass
/// `argv[2]` or 5 s have gone.
const WATCH_MEMORY: &str = "import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
os.read(fd, 1 << 20)
os.close(fd)
memory = os.environ['FOLIOCACHE_PRELOAD_SHARED']
end = time.monotonic() + 5
while True:
    held = os.stat(memory).st_blocks * 512
    if held > int(sys.argv[2]) or time.monotonic() > end:
        break
    time.sleep(0.05)
print(held)";
