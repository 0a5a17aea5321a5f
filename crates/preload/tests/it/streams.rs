//! A served file reached by a second path in the same process: the
//! standard streams (`tests/c/std_streams.c`), which the C library reads
//! and writes with internal calls no interposer sees, and `sort -o`,
//! which writes its output through stdout. What the program wrote with
//! `write(2)` and what stdio wrote land in one file, as on ext4. And the
//! exit hand-over, which runs after the main thread's thread-locals are
//! gone (`tests/c/exit_after_tls.c`).

use std::path::Path;
use std::process::Command;

use crate::support::{checked, compile, preloaded, Build};

/// What `std_streams.c` writes: its header, then its lines.
fn written(header: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if header {
        out.extend_from_slice(b"header written with write(2)\n");
    }
    for i in 0..100_000 {
        out.extend_from_slice(format!("line {i} of the stream\n").as_bytes());
    }
    out
}

/// Runs `std_streams CASE FILE` under the library serving `dir`.
fn run_case(exe: &Path, dir: &Path, case: &str, file: &Path) {
    checked(preloaded(exe, dir).arg(case).arg(file));
}

fn assert_file(path: &Path, want: &[u8]) {
    let got = std::fs::read(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    assert_eq!(got.len(), want.len(), "{path:?}: its size");
    assert!(got == want, "{path:?}: its bytes differ from those written");
}

/// `printf` to a served file `dup2`'d onto stdout keeps every byte, after
/// the header written with `write(2)`.
#[test]
fn printf_to_a_dup2_stdout_keeps_every_byte() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("std_streams", dir.path(), Build::Plain);
    let out = dir.path().join("out.txt");
    run_case(&exe, dir.path(), "printf-dup2", &out);
    assert_file(&out, &written(true));
}

/// `fprintf(stderr)` to a served file made fd 2 by `fcntl(F_DUPFD)`.
#[test]
fn fprintf_to_an_f_dupfd_stderr_keeps_every_byte() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("std_streams", dir.path(), Build::Plain);
    let out = dir.path().join("err.txt");
    run_case(&exe, dir.path(), "stderr-dupfd", &out);
    assert_file(&out, &written(true));
}

/// A file opened as fd 1 after `close(1)`: `write(2)` and `printf` on it
/// meet in order.
#[test]
fn a_file_opened_as_fd_1_is_one_file_for_write_and_printf() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("std_streams", dir.path(), Build::Plain);
    let out = dir.path().join("as_stdout.txt");
    run_case(&exe, dir.path(), "open-as-stdout", &out);
    assert_file(&out, &written(true));
}

/// Lines written with `write(2)`, still dirty in the cache, read back
/// with `fgets` through the file `dup2`'d onto stdin (the program checks
/// each line).
#[test]
fn fgets_from_a_dup2_stdin_reads_what_write_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("std_streams", dir.path(), Build::Plain);
    let file = dir.path().join("in.txt");
    run_case(&exe, dir.path(), "fgets-dup2", &file);
    assert_file(&file, &written(false));
}

/// `sort -n -o OUT IN` with both files served: OUT holds the sorted lines
/// (sort `dup2`s OUT onto stdout and writes it with stdio).
#[test]
fn sort_o_writes_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    let output = dir.path().join("out");
    let mut numbers: Vec<u64> = (0..50_000u64).map(|i| (i * 7_919 + 13) % 100_003).collect();
    let text: String = numbers.iter().map(|n| format!("{n}\n")).collect();
    std::fs::write(&input, text).unwrap();
    let run = checked(
        preloaded("sort", dir.path())
            .env("FOLIOCACHE_PRELOAD_STATS", "1")
            .args(["-n", "-o"])
            .arg(&output)
            .arg(&input),
    );
    let stats = String::from_utf8_lossy(&run.stderr);
    assert!(
        !stats.contains(" 0 opens served"),
        "sort ran with nothing served: {stats}"
    );
    numbers.sort_unstable();
    let want: String = numbers.iter().map(|n| format!("{n}\n")).collect();
    assert_file(&output, want.as_bytes());
    // The same through the kernel alone, as a reference for the test itself.
    let plain = dir.path().join("plain");
    checked(
        Command::new("sort")
            .args(["-n", "-o"])
            .arg(&plain)
            .arg(&input),
    );
    assert_file(&plain, want.as_bytes());
}

/// A file left open and dirty is written back by the exit hand-over,
/// which runs after glibc destroyed the main thread's thread-locals (its
/// own io_uring ring among them, made by an earlier `fsync`): every byte
/// is in the file once the program is gone.
#[test]
fn exit_after_thread_locals_are_destroyed_writes_back() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("exit_after_tls", dir.path(), Build::Plain);
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    let run = checked(preloaded(&exe, dir.path()).arg(&first).arg(&second));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        !stderr.contains("internal error"),
        "the exit hand-over panicked: {stderr}"
    );
    // Every other page of the pattern, the last one's end the size.
    let want: Vec<u8> = (0..(8u64 << 20) - 4096)
        .map(|i| {
            if (i / 4096) % 2 == 0 {
                (i * 31 + (i >> 12)) as u8
            } else {
                0
            }
        })
        .collect();
    assert_file(&first, &want);
    assert_file(&second, &want);
}

/// Another process appends 1 MiB to a served file while this one has it
/// open: the close keeps it (before, the close cut the file back to the
/// 4,096 bytes its cache knew); and after this process truncated it, the
/// file is the truncation followed by the append, as on ext4.
#[test]
fn another_process_append_is_kept_at_close() {
    use std::io::{BufRead, Write as _};
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("grown_meanwhile", dir.path(), Build::Plain);
    for (how, kept) in [("write", 4096usize), ("truncate", 100)] {
        let file = dir.path().join(format!("{how}.bin"));
        let mut child = preloaded(&exe, dir.path())
            .arg(&file)
            .arg(how)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n", "{how}");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        f.write_all(&vec![b'B'; 1 << 20]).unwrap();
        drop(f);
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        assert!(child.wait().unwrap().success(), "{how}");
        let mut want = vec![b'A'; kept];
        want.extend(std::iter::repeat_n(b'B', 1 << 20));
        assert_file(&file, &want);
    }
}
