//! `foliocache mount` and `foliocache stat` as a user runs them: the built
//! binary mounts a temporary directory; SIGTERM, SIGINT and `fusermount3
//! -u` each end it with the written data on the backing, and a restart
//! serves it. Skipped (with the reason printed) where FUSE is missing,
//! unless `CI=true`, where that fails.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use test_support::skip_or_fail;

const BIN: &str = env!("CARGO_BIN_EXE_foliocache");

pub(crate) fn fuse_ok(test: &str) -> bool {
    test_support::available(test, "FUSE", foliocache_fuse::unavailable())
}

/// A fresh backing directory and mount point for `test`, or `None`
/// where FUSE is unavailable (skipped with the reason).
pub(crate) fn fuse_dirs(test: &str) -> Option<Dirs> {
    fuse_ok(test).then(dirs)
}

/// [`fuse_dirs`] with the mount's server started on them ([`start`]).
fn mounted(test: &str) -> Option<(Dirs, Child)> {
    let d = fuse_dirs(test)?;
    let child = start(&d);
    Some((d, child))
}

/// Unmounts `mnt` with `fusermount3 -u` (else `umount`), which must
/// succeed.
fn unmount(mnt: &Path) {
    let st = Command::new("fusermount3")
        .arg("-u")
        .arg(mnt)
        .status()
        .or_else(|_| Command::new("umount").arg(mnt).status())
        .expect("unmount");
    assert!(st.success());
}

/// Ends a mount's server with SIGTERM, which unmounts it: it exits 0.
pub(crate) fn stop(child: &mut Child) {
    signal(child, nix::sys::signal::Signal::SIGTERM);
    assert!(wait(child).success());
}

pub(crate) fn is_mounted(mnt: &Path) -> bool {
    let mnt = mnt.canonicalize().unwrap_or_else(|_| mnt.to_path_buf());
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(mnt.to_str().unwrap_or("")))
}

pub(crate) struct Dirs {
    _tmp: tempfile::TempDir,
    pub(crate) backing: PathBuf,
    pub(crate) mnt: PathBuf,
}

pub(crate) fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().expect("tempdir");
    let backing = tmp.path().join("backing");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&backing).expect("mkdir");
    fs::create_dir(&mnt).expect("mkdir");
    Dirs {
        _tmp: tmp,
        backing,
        mnt,
    }
}

/// Starts `foliocache mount --foreground` and waits for it to be up.
fn start(d: &Dirs) -> Child {
    start_with_stderr(d, Stdio::inherit())
}

/// [`start`], the server's messages sent to `stderr`.
fn start_with_stderr(d: &Dirs, stderr: Stdio) -> Child {
    start_with(d, stderr, &[])
}

/// [`start_with_stderr`], with more options.
pub(crate) fn start_with(d: &Dirs, stderr: Stdio, extra: &[&str]) -> Child {
    let mut cmd = Command::new(BIN);
    cmd.arg("mount")
        .arg(&d.backing)
        .arg(&d.mnt)
        .args(["--capacity", "64M", "--foreground"])
        .args(extra)
        .stderr(stderr);
    spawn_mounted(&mut cmd, &d.mnt)
}

/// Spawns `cmd`, a `foliocache mount --foreground` at `mnt`, and waits
/// for it to say the mount is up.
pub(crate) fn spawn_mounted(cmd: &mut Command, mnt: &Path) -> Child {
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn foliocache mount");
    let out = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(out)
        .read_line(&mut line)
        .expect("ready line");
    assert_eq!(line.trim(), "foliocache-mount-ready");
    assert!(is_mounted(mnt));
    child
}

pub(crate) fn wait(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the mount server did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, sig).expect("kill");
}

#[test]
fn sigterm_and_sigint_write_dirty_data_back_and_unmount() {
    let Some(d) = fuse_dirs("sigterm_and_sigint_write_dirty_data_back_and_unmount") else {
        return;
    };
    for (i, sig) in [
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGINT,
    ]
    .into_iter()
    .enumerate()
    {
        let mut child = start(&d);
        let data: Vec<u8> = (0..(1 << 20) + 17).map(|j| (j * 7 + i) as u8).collect();
        let name = format!("f{i}");
        fs::write(d.mnt.join(&name), &data).expect("write through the mount");
        signal(&child, sig);
        let status = wait(&mut child);
        assert!(status.success(), "{sig}: {status}");
        assert!(!is_mounted(&d.mnt), "{sig}: still mounted");
        assert_eq!(
            fs::read(d.backing.join(&name)).expect("backing"),
            data,
            "{sig}"
        );
    }
    // A restart serves what is there.
    let mut child = start(&d);
    assert_eq!(
        fs::read(d.mnt.join("f0")).expect("read").len(),
        (1 << 20) + 17
    );
    stop(&mut child);
}

#[test]
fn sigterm_drops_an_unlinked_open_files_data_and_unmounts_cleanly() {
    let Some(d) = fuse_dirs("sigterm_drops_an_unlinked_open_files_data_and_unmounts_cleanly")
    else {
        return;
    };
    // The flusher writes everything dirty every few seconds and may do so
    // between a try's write and the signal: then that try proves nothing.
    // Without the drop every try writes the data back.
    for attempt in 0..3 {
        let mut child = start(&d);
        let name = format!("open-unlinked{attempt}");
        let f = fs::File::create(d.mnt.join(&name)).expect("create");
        // The backing inode, seen from outside the mount.
        let outside = fs::File::open(d.backing.join(&name)).expect("open backing");
        std::io::Write::write_all(&mut &f, &vec![5u8; 2 << 20]).expect("write");
        fs::remove_file(d.mnt.join(&name)).expect("unlink");
        // Still open through the mount when the server is told to go: it
        // unmounts lazily, and serves until that last file closes.
        signal(&child, nix::sys::signal::Signal::SIGTERM);
        std::thread::sleep(Duration::from_millis(100));
        drop(f);
        let status = wait(&mut child);
        assert!(status.success(), "{status}");
        let size = outside.metadata().expect("fstat").len();
        if size == 0 {
            return;
        }
        eprintln!("try {attempt}: the unlinked file's backing holds {size} bytes");
    }
    panic!("an unlinked file's dirty data was written back at unmount in every try");
}

/// Makes a file immutable (`chattr +i`) until dropped: ext4 then refuses
/// writes through descriptors opened before (`EPERM`).
struct Immutable(PathBuf);

impl Immutable {
    fn set(path: &Path) -> Result<Immutable, String> {
        let out = Command::new("chattr")
            .arg("+i")
            .arg(path)
            .output()
            .map_err(|e| format!("running chattr: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "chattr +i {}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Immutable(path.to_path_buf()))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

/// One file whose writeback fails at unmount (its backing made immutable
/// under the server, which has it open: ext4 refuses the writes with
/// `EPERM`) does not keep the others' data from the backing: the server
/// still unmounts, names the file in its error and exits with a failure.
#[test]
fn a_failed_writeback_at_unmount_names_its_file_and_the_others_are_written() {
    let test = "a_failed_writeback_at_unmount_names_its_file_and_the_others_are_written";
    let Some(d) = fuse_dirs(test) else {
        return;
    };
    let log = d.backing.with_file_name("server.log");
    let mut child = start_with_stderr(&d, fs::File::create(&log).expect("log").into());
    let names = ["before", "refused", "after"];
    // Created through the mount first, so that the server holds each
    // backing open for writing before one is made immutable.
    let files: Vec<fs::File> = names
        .iter()
        .map(|n| fs::File::create(d.mnt.join(n)).expect("create"))
        .collect();
    let data = |i: usize| -> Vec<u8> { (0..300_000).map(|j| (j * 13 + i) as u8).collect() };
    // Written (their space reserved on the backings) before the one is
    // made immutable: an extending write to an immutable file fails at
    // the write, as the kernel's does; this test is about the unmount.
    for (i, f) in files.iter().enumerate() {
        std::io::Write::write_all(&mut &*f, &data(i)).expect("write through the mount");
    }
    let immutable = match Immutable::set(&d.backing.join("refused")) {
        Ok(g) => g,
        Err(why) => {
            signal(&child, nix::sys::signal::Signal::SIGTERM);
            wait(&mut child);
            skip_or_fail(test, format!("cannot make a backing file immutable: {why}"));
            return;
        }
    };
    // Closing may already report the refused file's error (a flush that
    // writes back): the unmount's report is what is checked here.
    drop(files);
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    let status = wait(&mut child);
    drop(immutable);
    let said = fs::read_to_string(&log).expect("server log");
    assert!(!status.success(), "the exit status hid the failure: {said}");
    assert!(!is_mounted(&d.mnt), "still mounted");
    let refused = d.backing.join("refused").canonicalize().expect("path");
    assert!(
        said.contains("not written back") && said.contains(refused.to_str().unwrap()),
        "the refused file is not named: {said}"
    );
    for (i, n) in names.iter().enumerate() {
        if *n != "refused" {
            assert!(!said.contains(&format!("/{n}:")), "{n} named: {said}");
            assert_eq!(
                fs::read(d.backing.join(n)).expect("backing"),
                data(i),
                "{n}"
            );
        }
    }
}

#[test]
fn after_sigkill_a_restart_serves_what_was_synced() {
    let Some((d, mut child)) = mounted("after_sigkill_a_restart_serves_what_was_synced") else {
        return;
    };
    let f = fs::File::create(d.mnt.join("synced")).expect("create");
    std::io::Write::write_all(&mut &f, b"durable").expect("write");
    f.sync_all().expect("fsync");
    drop(f);
    signal(&child, nix::sys::signal::Signal::SIGKILL);
    let _ = wait(&mut child);
    // The dead mount is still there; a restart takes it away and serves.
    let mut child = start(&d);
    assert_eq!(fs::read(d.mnt.join("synced")).expect("read"), b"durable");
    stop(&mut child);
}

#[test]
fn fusermount_unmount_ends_the_server_cleanly() {
    let Some(d) = fuse_dirs("fusermount_unmount_ends_the_server_cleanly") else {
        return;
    };
    let log = d.backing.parent().expect("tmp").join("server.log");
    let file = fs::File::create(&log).expect("log");
    let mut child = start_with_stderr(&d, Stdio::from(file));
    fs::write(d.mnt.join("x"), b"kept").expect("write");
    unmount(&d.mnt);
    assert!(wait(&mut child).success());
    assert_eq!(fs::read(d.backing.join("x")).expect("backing"), b"kept");
    // Unmounted once: the server does not unmount the path again (which
    // failed with EINVAL, or would take a new mount made there since).
    let said = fs::read_to_string(&log).expect("log");
    assert!(
        !said.contains("umount") && !said.contains("Unmount"),
        "{said}"
    );
}

#[test]
fn a_max_open_above_the_open_file_limit_is_refused() {
    let d = dirs();
    let out = Command::new(BIN)
        .arg("mount")
        .arg(&d.backing)
        .arg(&d.mnt)
        .args(["--capacity", "4M", "--foreground", "--max-open"])
        .arg(u64::MAX.to_string())
        .output()
        .expect("mount");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("open-file limit is") && err.contains("at most"),
        "{err}"
    );
    assert!(!is_mounted(&d.mnt));
}

/// `GET path` over HTTP/1.0: the status line and the body.
pub(crate) fn http_get(addr: &str, path: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connecting to the metrics endpoint");
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").expect("request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("response");
    let status = out.lines().next().unwrap_or_default().to_string();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
    (status, body)
}

/// The value of the unlabelled sample `name` in Prometheus text.
fn sample(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
        .parse()
        .expect("an integer sample")
}

#[test]
fn metrics_move_as_a_program_reads_and_writes_through_the_mount() {
    let Some(d) = fuse_dirs("metrics_move_as_a_program_reads_and_writes_through_the_mount") else {
        return;
    };
    // A free port: bound, read, let go, given to the mount.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = start_with(&d, Stdio::inherit(), &["--metrics", &addr]);
    let (status, before) = http_get(&addr, "/metrics");
    assert!(status.contains("200"), "{status}");
    fs::write(d.backing.join("a"), vec![3u8; 1 << 20]).expect("write");
    assert_eq!(fs::read(d.mnt.join("a")).expect("read").len(), 1 << 20);
    assert_eq!(fs::read(d.mnt.join("a")).expect("read").len(), 1 << 20);
    fs::write(d.mnt.join("b"), vec![4u8; 256 << 10]).expect("write");
    fs::File::open(d.mnt.join("b"))
        .and_then(|f| f.sync_all())
        .expect("fsync");
    let (_, after) = http_get(&addr, "/metrics");
    for name in [
        "foliocache_hits_total",
        "foliocache_misses_total",
        "foliocache_read_bytes_total",
    ] {
        assert!(
            sample(&after, name) > sample(&before, name),
            "{name}:\n{after}"
        );
    }
    assert!(
        sample(&after, "foliocache_written_bytes_total") >= 256 << 10,
        "{after}"
    );
    assert_eq!(sample(&after, "foliocache_capacity_bytes"), 64 << 20);
    assert!(
        sample(&after, "foliocache_sync_latency_seconds_count") >= 1,
        "{after}"
    );

    // `stat --watch`: a heading, then a row of numbers per interval.
    let out = Command::new(BIN)
        .args(["stat", "--watch", "0.1", "--count", "3"])
        .arg(&d.mnt)
        .output()
        .expect("stat --watch");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[0].contains("hits/s") && lines[0].contains("dirty MiB"),
        "{text}"
    );
    for l in &lines[1..] {
        let cells: Vec<f64> = l
            .split_whitespace()
            // `-`: a figure not known yet (the 2x point, `CurvePoint::known`).
            .map(|c| match c {
                "-" => f64::NAN,
                c => c.parse().unwrap_or_else(|_| panic!("a number: {c} in {l}")),
            })
            .collect();
        assert_eq!(cells.len(), 11, "{l}");
        // The bytes cached: the files read and written.
        assert!(cells[8] >= 1.0, "{l}");
        // The hit ratio predicted at twice the capacity, in percent.
        assert!(
            cells[9].is_nan() || (0.0..=100.0).contains(&cells[9]),
            "{l}"
        );
        // The share of the bytes read found in memory, in percent.
        assert!((0.0..=100.0).contains(&cells[10]), "{l}");
    }
    stop(&mut child);
}

#[test]
fn stat_shows_the_cache_and_each_file() {
    let Some((d, mut child)) = mounted("stat_shows_the_cache_and_each_file") else {
        return;
    };
    fs::write(d.mnt.join("a"), vec![1u8; 1 << 20]).expect("write");
    let out = Command::new(BIN)
        .arg("stat")
        .arg(&d.mnt)
        .arg(d.mnt.join("a"))
        .output()
        .expect("stat");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Reads in bytes first, then in page lookups.
    assert!(text.contains(" bytes read: "), "{text}");
    assert!(text.contains(" from memory ("), "{text}");
    assert!(text.contains("misses (page lookups)"), "{text}");
    assert!(text.contains("a: cached 256 pages"), "{text}");
    let json = Command::new(BIN)
        .args(["stat", "--json"])
        .arg(&d.mnt)
        .output()
        .expect("stat --json");
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    assert_eq!(v["cache"]["capacity_bytes"].as_u64(), Some(64 << 20));
    // The text says how files can be mapped, as the server told the JSON.
    let shared = v["shared_mmap"].as_bool().expect("shared_mmap in the JSON");
    let mode = if shared {
        "mmap: shared and private]"
    } else {
        "mmap: private only"
    };
    assert!(text.contains(mode), "{text}");
    stop(&mut child);
}

#[test]
fn mount_without_foreground_returns_once_mounted() {
    let Some(d) = fuse_dirs("mount_without_foreground_returns_once_mounted") else {
        return;
    };
    let st = Command::new(BIN)
        .arg("mount")
        .arg(&d.backing)
        .arg(&d.mnt)
        .args(["--capacity", "16M"])
        .status()
        .expect("mount");
    assert!(st.success());
    assert!(is_mounted(&d.mnt));
    fs::write(d.mnt.join("y"), b"bg").expect("write");
    unmount(&d.mnt);
    // The server writes back as it exits; wait for the data.
    let deadline = Instant::now() + Duration::from_secs(20);
    while fs::read(d.backing.join("y")).unwrap_or_default() != b"bg" {
        assert!(Instant::now() < deadline, "data not written back");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_mount_point_inside_the_backing_is_refused() {
    let d = dirs();
    let inner = d.backing.join("m");
    fs::create_dir(&inner).expect("mkdir");
    let out = Command::new(BIN)
        .arg("mount")
        .arg(&d.backing)
        .arg(&inner)
        .args(["--capacity", "16M", "--foreground"])
        .output()
        .expect("mount");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("inside the backing directory"));
    let _ = &d.mnt;
}

/// `stat --watch MOUNTPOINT` as the README gives it: `--watch` takes its
/// interval only after `=`, so the mount point is not read as one.
/// Without a mount there, the error is the mount's, not the command line's.
/// `foliocache stat ARGS`: its exit code, stdout and stderr.
pub(crate) fn stat_cmd<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (Option<i32>, String, String) {
    let out = Command::new(BIN)
        .arg("stat")
        .args(args)
        .output()
        .expect("foliocache stat");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// `stat --watch MOUNTPOINT` as the README gives it: `--watch` takes its
/// interval only after `=`, so the mount point is not read as one.
/// Without a mount there, the error is the mount's, not the command line's.
#[test]
fn stat_watch_takes_the_mount_point_after_it() {
    let d = dirs();
    let mnt = d.mnt.to_str().expect("UTF-8");
    let (code, _, err) = stat_cmd(&["--watch", mnt, "--count", "1"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("is a `foliocache mount` running there?"),
        "{err}"
    );
    // Two intervals, or a file with --watch: errors that say so.
    for extra in [["--watch=1", "--interval", "2"], ["--watch", "a", "b"]] {
        let (code, _, err) = stat_cmd(&[&[mnt][..], &extra].concat());
        assert_eq!(code, Some(1), "{extra:?}: {err}");
        assert!(err.contains("--watch"), "{extra:?}: {err}");
    }
}

/// Every form of `stat --watch` prints a heading and `--count` rows from
/// a live mount: the README's, `--watch=SECS`, `--interval`, and the forms
/// from before `--watch` needed `=` (`--watch SECS MNT`, `MNT --watch SECS`).
#[test]
fn stat_watch_forms_all_print_rows() {
    let Some((d, mut child)) = mounted("stat_watch_forms_all_print_rows") else {
        return;
    };
    let mnt = d.mnt.to_str().expect("UTF-8");
    let forms: [&[&str]; 5] = [
        &["--watch", mnt],
        &["--watch=0.1", mnt],
        &["--watch", "--interval", "0.1", mnt],
        &["--watch", "0.1", mnt],
        &[mnt, "--watch", "0.1"],
    ];
    for form in forms {
        let (code, text, err) = stat_cmd(&[form, &["--count", "2"]].concat());
        assert_eq!(code, Some(0), "{form:?}: {text}{err}");
        assert_eq!(text.lines().count(), 3, "{form:?}: {text}");
        assert!(text.contains("hits/s"), "{form:?}: {text}");
    }
    stop(&mut child);
}
