//! `foliocache run` at its limits: a program holding more files open
//! than the group's slot table holds sees every size, byte and close as
//! the kernel gives them, and its `copy_file_range` from a file that lost
//! its slot is the kernel's; a program that daemonizes keeps its launcher
//! (the guardian, the group's cache and flusher) until its last process
//! ends.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use crate::launch::{build_library, stdout_ending};

const BIN: &str = env!("CARGO_BIN_EXE_foliocache");

/// `foliocache run [--shared] [--capacity C] --no-state --dir DIR --
/// python3 -c SCRIPT DIR ARGS...`: its output.
fn run_python(
    dir: &Path,
    shared: bool,
    capacity: Option<&str>,
    script: &str,
    args: &[&str],
) -> std::process::Output {
    Command::new(BIN)
        .arg("run")
        .args(shared.then_some("--shared"))
        .args(capacity.map(|c| ["--capacity", c]).into_iter().flatten())
        .args(["--no-state", "--dir"])
        .arg(dir)
        .args(["--", "python3", "-c", script])
        .arg(dir)
        .args(args)
        .output()
        .expect("running foliocache run")
}

/// What [`more_files_than_the_table_holds_are_the_kernels`] runs: one
/// file written and synced, then `N - 1` more written and held open; each
/// fd's size (`fstat`), bytes (`pread`), a write at its position and its
/// close checked against what was written. Prints the count of what
/// differed, then the first few.
const MANY_FILES: &str = r#"
import os, resource, sys
d, n = sys.argv[1], int(sys.argv[2])
# Room for the program's fds and the cache's own (one a file it serves),
# which count against the same limit where the soft limit is the hard one
# (docs/preload.md, "Open-file limits").
want = 2 * n + 64
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
except (ValueError, OSError):
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, want)), hard))
def body(i):
    return (b"%d," % i) * (1 + (i % 7) * 150)
fds = []
for i in range(n):
    fd = os.open(f"{d}/f{i}", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, body(i))
    if i == 0:
        os.fsync(fd)
    fds.append(fd)
bad = []
for i, fd in enumerate(fds):
    want = body(i)
    size = os.fstat(fd).st_size
    if size != len(want):
        bad.append(f"f{i}: fstat size {size}, wrote {len(want)}")
    got = os.pread(fd, len(want) + 100, 0)
    if got != want:
        bad.append(f"f{i}: pread gave {len(got)} bytes, not those written")
    os.write(fd, b"+")
for i, fd in enumerate(fds):
    try:
        os.close(fd)
    except OSError as e:
        bad.append(f"f{i}: close: {e}")
print(len(bad))
print("\n".join(bad[:10]))
"#;

/// The story: under `--shared --capacity 8M` (127 file slots), a program
/// that wrote and synced one file, then wrote 200 more and held them
/// open, found the first file's slot taken back while it was clean, and
/// then its `fstat` said size 0, its `pread` failed with EIO and so did
/// its `close`, each with a line on stderr. Now a file the group cannot
/// serve for want of a slot is the kernel's, silently: with 10,000 files
/// (the issue's target) at 8M and at the default capacity (whose table
/// holds 4,096), in both modes, every size, byte and close is right,
/// nothing is said on stderr, and the files hold what was written. (The
/// files are small, up to 5 KiB, so that the four runs stay cheap; each
/// crosses a page boundary once it passes 4 KiB.)
#[test]
fn more_files_than_the_table_holds_are_the_kernels() {
    build_library();
    for capacity in [Some("8M"), None] {
        for shared in [true, false] {
            many_files(shared, capacity, 10_000);
        }
    }
}

fn many_files(shared: bool, capacity: Option<&str>, n: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run_python(dir.path(), shared, capacity, MANY_FILES, &[&n.to_string()]);
    let text = stdout_ending(&out, 0);
    assert!(
        text.starts_with("0\n"),
        "shared {shared}, {n} files: {text}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("foliocache-preload"),
        "shared {shared}, {n} files: {stderr}"
    );
    for i in 0..n {
        let mut want = format!("{i},").repeat(1 + (i % 7) * 150).into_bytes();
        want.push(b'+');
        let got = std::fs::read(dir.path().join(format!("f{i}"))).expect("a file");
        assert!(
            got == want,
            "shared {shared}: f{i} holds {} bytes, not those written",
            got.len()
        );
    }
}

/// What [`a_daemonized_process_keeps_its_launcher`] runs: the program
/// forks a child that starts a new session and forks again (a daemon's
/// double fork), then exits with 3; the daemon, once its parent and the
/// program are gone, writes a file and dies by SIGKILL, leaving its data
/// unsaved in the group's cache.
const DAEMON: &str = r#"
import os, signal, sys, time
d = sys.argv[1]
if os.fork() == 0:
    os.setsid()
    parent = os.getpid()
    if os.fork() == 0:
        while os.getppid() == parent:
            time.sleep(0.05)
        time.sleep(0.5)
        fd = os.open(f"{d}/daemon", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, b"d" * 100000)
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(0)
os.wait()
os._exit(3)
"#;

/// The story: `foliocache run -- pg_ctl start` returned at once (the
/// server forked into the background and `pg_ctl` exited), and the
/// launcher, with the group's flusher and its writeback of a killed
/// process's pages, ended with it. Now the launcher is the subreaper of
/// the program's processes: the daemon, orphaned (it waits for that, and
/// half a second more, before it writes), becomes its child, and the
/// launcher ends only when the daemon has, having written back what the
/// daemon left, with the program's exit status.
#[test]
fn a_daemonized_process_keeps_its_launcher() {
    build_library();
    for shared in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = run_python(dir.path(), shared, Some("16M"), DAEMON, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "shared {shared}: {stderr}");
        let data = std::fs::read(dir.path().join("daemon")).unwrap_or_default();
        assert!(
            data == vec![b'd'; 100_000],
            "shared {shared}: the daemon's file holds {} bytes: {stderr}",
            data.len()
        );
    }
}

/// What [`a_copy_from_a_file_without_a_slot_is_the_kernels`] runs: a
/// source file written and synced (clean), then 300 files written and
/// held open (their data unsaved: more than the table's slots, so the
/// source's slot is taken back and no slot is left), then
/// `copy_file_range` from the source into a new file at 100,000. Prints
/// the count copied or the error, and the destination's size.
const COPY_WITHOUT_A_SLOT: &str = r#"
import os, sys
d = sys.argv[1]
data = bytes(range(256)) * 40
src = os.open(f"{d}/src", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(src, data)
os.fsync(src)
fds = []
for i in range(300):
    fd = os.open(f"{d}/f{i}", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b"x" * 100)
    fds.append(fd)
dst = os.open(f"{d}/dst", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
try:
    print("copied", os.copy_file_range(src, dst, len(data), 0, 100000))
except OSError as e:
    print("copy_file_range:", e)
print("size", os.fstat(dst).st_size)
"#;

/// The story: fsstress (`-p 8 -n 1000 -s 2`) under `--shared --capacity
/// 4M` left a file 2.6 MB shorter than on ext4: its `copy_file_range`
/// (through `syscall()`) into the file failed, copying nothing. The check
/// of the ranges read a served side's size from the group's cache, which
/// had no slot left for the file, and returned that error (`EIO`), where
/// the copy's own hands both files to the kernel. This program got `EIO`
/// and an empty destination. Now the kernel checks and copies.
#[test]
fn a_copy_from_a_file_without_a_slot_is_the_kernels() {
    build_library();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run_python(dir.path(), true, Some("8M"), COPY_WITHOUT_A_SLOT, &[]);
    let text = stdout_ending(&out, 0);
    assert_eq!(text, "copied 10240\nsize 110240\n");
    let mut want = vec![0u8; 100_000];
    want.extend((0..=255u8).cycle().take(10_240));
    let got = std::fs::read(dir.path().join("dst")).expect("the copy");
    assert!(
        got == want,
        "dst holds {} bytes, not those copied",
        got.len()
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("foliocache-preload"), "{stderr}");
}

/// What [`a_program_opens_as_many_files_as_its_limit_allows`] runs, under
/// a soft open-file limit of 256 set before it starts: opens files until
/// an open fails, then tries `dup`, `fcntl(F_DUPFD, 300)` and `dup2(_,
/// 300)` at the limit, closes one file and opens it again, writes each
/// file's number into it and closes them all. Prints the count, the
/// errors and the limit as the program sees it, then (a second line) how
/// many of the fds the cache served (`-` without the library).
const TO_THE_LIMIT: &str = r#"
import ctypes, errno, fcntl, os, resource, sys
d = sys.argv[1]
def err(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
fds = []
while True:
    try:
        fds.append(os.open(f"{d}/f{len(fds)}", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644))
    except OSError as e:
        first = errno.errorcode[e.errno]
        break
line = [len(fds), first, err(lambda: os.dup(0)), err(lambda: fcntl.fcntl(0, fcntl.F_DUPFD, 300)),
        err(lambda: os.dup2(0, 300)), resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        os.sysconf("SC_OPEN_MAX")]
os.close(fds[-1])
fds[-1] = os.open(f"{d}/f{len(fds) - 1}", os.O_RDWR)
try:
    served = ctypes.CDLL(None).foliocache_preload_served
    print(*line)
    print(sum(served(fd) for fd in fds))
except AttributeError:
    print(*line)
    print("-")
for i, fd in enumerate(fds):
    os.write(fd, b"%d" % i)
    os.close(fd)
"#;

/// `sh -c 'ulimit -Sn 256 && exec "$@"' sh ARGS...` (`-n`: the hard
/// limit too, where `hard`): its output.
fn under_limit_256(args: &[OsString], hard: bool) -> std::process::Output {
    let script = if hard {
        "ulimit -n 256 && exec \"$@\""
    } else {
        "ulimit -Sn 256 && exec \"$@\""
    };
    Command::new("sh")
        .args(["-c", script, "sh"])
        .args(args)
        .output()
        .expect("running sh")
}

/// `foliocache run [--shared] --no-state --dir DIR -- python3 -c
/// TO_THE_LIMIT DIR` under a limit of 256 ([`under_limit_256`]): its
/// output.
fn run_to_the_limit(dir: &Path, shared: bool, hard: bool) -> std::process::Output {
    let mut run: Vec<OsString> = vec![BIN.into(), "run".into()];
    if shared {
        run.push("--shared".into());
    }
    run.extend(["--no-state".into(), "--dir".into(), dir.into(), "--".into()]);
    run.extend(to_the_limit(dir));
    under_limit_256(&run, hard)
}

/// The first line [`TO_THE_LIMIT`] printed without the library, under a
/// limit of 256.
fn kernel_at_the_limit(hard: bool) -> String {
    let bare = tempfile::tempdir().expect("tempdir");
    let kernel = stdout_ending(&under_limit_256(&to_the_limit(bare.path()), hard), 0);
    let (line, served) = kernel.split_once('\n').expect("two lines");
    assert_eq!(served, "-\n");
    assert!(
        line.contains(" EMFILE EMFILE EINVAL EBADF 256 256"),
        "{line}"
    );
    line.to_owned()
}

/// Checks the files [`TO_THE_LIMIT`] left in `dir`: `f{i}` holds `i`,
/// for each of the `count` it opened.
fn files_hold_their_numbers(dir: &Path, count: usize, what: &str) {
    for i in 0..count {
        let got = std::fs::read(dir.join(format!("f{i}"))).expect("a file");
        assert_eq!(got, i.to_string().into_bytes(), "{what}: f{i}");
    }
}

/// `python3 -c TO_THE_LIMIT DIR`.
fn to_the_limit(dir: &Path) -> Vec<OsString> {
    vec![
        "python3".into(),
        "-c".into(),
        TO_THE_LIMIT.into(),
        dir.into(),
    ]
}

/// The story: the cache's own descriptors (one a file it serves, one a
/// slot of the group's, its rings, its memory files) counted against the
/// program's `RLIMIT_NOFILE`: a program holding 10,000 files under a soft
/// limit of 10,064 got `EMFILE` at its 9,930th open under `--shared`.
/// Now they live above the program's limit (the hard limit leaves room),
/// which the program sees as its own: under a soft limit of 256, in both
/// modes, the program opens exactly as many files as without the
/// library, every one served, and gets the kernel's errors at the limit
/// (`EMFILE` for an open and a `dup`, `EINVAL` for `F_DUPFD` past it,
/// `EBADF` for a `dup2` past it), sees 256 as its limit, and its files
/// hold what it wrote.
#[test]
fn a_program_opens_as_many_files_as_its_limit_allows() {
    build_library();
    let kernel_line = kernel_at_the_limit(false);
    for shared in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = run_to_the_limit(dir.path(), shared, false);
        let text = stdout_ending(&out, 0);
        let (line, served) = text.split_once('\n').expect("two lines");
        assert_eq!(line, kernel_line, "shared {shared}");
        let count: usize = line
            .split(' ')
            .next()
            .unwrap_or("")
            .parse()
            .expect("a count");
        assert_eq!(served.trim(), count.to_string(), "shared {shared}: served");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("foliocache-preload"),
            "shared {shared}: {stderr}"
        );
        files_hold_their_numbers(dir.path(), count, &format!("shared {shared}"));
    }
}

/// The same with no room above the limit (`ulimit -n 256`: the hard limit
/// too, which only a privileged process may raise): the cache's fds count
/// against the program's limit, as before, when a program got half the
/// files (125 of 251 in the default mode: one fd a file served). Now an
/// open that fails with `EMFILE` hands served files to the kernel, their
/// data written first, and is made again, and a file the cache finds no
/// fd for is the kernel's, silently: the program opens all but the few
/// fds the cache holds beside its files (the group's memory file, the
/// guardian's), gets the kernel's errors, and its files hold what it
/// wrote.
#[test]
fn with_no_room_above_the_limit_served_files_go_to_the_kernel() {
    build_library();
    let kernel_line = kernel_at_the_limit(true);
    let (kernel_count, kernel_rest) = kernel_line.split_once(' ').expect("a count");
    let kernel_count: usize = kernel_count.parse().expect("a count");
    for shared in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = run_to_the_limit(dir.path(), shared, true);
        let text = stdout_ending(&out, 0);
        let (count, rest) = text
            .lines()
            .next()
            .unwrap_or("")
            .split_once(' ')
            .expect("a count");
        let count: usize = count.parse().expect("a count");
        assert_eq!(rest, kernel_rest, "shared {shared}");
        assert!(
            count <= kernel_count && count + 4 >= kernel_count,
            "shared {shared}: {count} files, {kernel_count} on ext4"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("foliocache-preload"),
            "shared {shared}: {stderr}"
        );
        files_hold_their_numbers(dir.path(), count, &format!("shared {shared}"));
    }
}
