//! `foliocache run --metrics`: the launcher serves the group's figures
//! from the start of the run, in every mode, and changes nothing else.
//! The story: a forked pool of workers under `run --metrics` ran
//! uncached (the switch turned the group off), its endpoint never
//! started when the first process opened no served file, the workers'
//! lines were missing (`_exit`), and its "hits" were page lookups that
//! counted readahead: 84.6 % hits while most of its bytes came from disk.

use std::process::Command;

use crate::launch::{build_library, stdout_ending};

const BIN: &str = env!("CARGO_BIN_EXE_foliocache");

/// A free port on 127.0.0.1, as text.
fn free_port() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
        .to_string()
}

/// The pool: the parent scrapes the endpoint before it reads anything
/// (no served file open: the launcher's endpoint is up), then a pool of
/// 4 forked workers reads a 4 MiB file in 64 KiB pieces, each once, and
/// the parent scrapes; then the pool reads it all again and the parent
/// scrapes a third time. Each scrape prints the group's bytes read, from
/// memory, and hits, on a line of its own.
const POOL: &str = r#"
import multiprocessing as mp, os, sys, urllib.request
d, port = sys.argv[1], sys.argv[2]
path = os.path.join(d, "f")

def work(i):
    fd = os.open(path, os.O_RDONLY)
    try:
        return len(os.pread(fd, 65536, i * 65536))
    finally:
        os.close(fd)

def scrape():
    text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port).read().decode()
    want = ("foliocache_shared_returned_bytes_total", "foliocache_shared_from_memory_bytes_total",
            "foliocache_shared_hits_total")
    values = dict(l.split() for l in text.splitlines() if l.startswith(want))
    print(" ".join(values[w] for w in want))

if __name__ == "__main__":
    scrape()
    for _ in range(2):
        pool = mp.get_context("fork").Pool(4)
        assert sum(pool.map(work, range(64))) == 4 << 20
        pool.close()
        pool.join()
        scrape()
"#;

/// The figures a line of `foliocache run`'s or the interposer's gives
/// before `what` (`bytes read`, `hits`): the number just before it.
fn before(line: &str, what: &str) -> u64 {
    let head = line.split(what).next().expect("a split");
    head.trim_end()
        .rsplit([' ', '('])
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {what} in {line}"))
}

#[test]
fn run_metrics_serves_a_forked_pools_reads_from_one_cache_in_bytes() {
    build_library();
    let dir = tempfile::tempdir().expect("tempdir");
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.path().join("f"), &data).expect("f");
    let port = free_port();
    let out = Command::new(BIN)
        .args([
            "run",
            "--no-state",
            "--capacity",
            "64M",
            "--metrics",
            &port,
            "--dir",
        ])
        .arg(dir.path())
        .args(["--", "/usr/bin/python3", "-c", POOL])
        .arg(dir.path())
        .arg(&port)
        .env("FOLIOCACHE_PRELOAD_STATS", "1")
        .output()
        .expect("running foliocache run");
    let text = stdout_ending(&out, 0);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let scrapes: Vec<Vec<u64>> = text
        .lines()
        .map(|l| l.split(' ').map(|v| v.parse().expect("a number")).collect())
        .collect();
    // Up before any file was served; nothing read yet.
    assert_eq!(scrapes[0], [0, 0, 0], "{text}");
    // The first pass: every byte from the file, none from memory (a page
    // readahead brought in counts where it is read, not as a hit in bytes).
    let [read, memory, hits] = scrapes[1][..] else {
        panic!("{text}")
    };
    assert_eq!((read, memory), (4 << 20, 0), "{text}{stderr}");
    // Page lookups: a miss loads the run of pages its read wants in one
    // IO, so a pass may find none cached; counted, never more than pages.
    assert!(hits <= read / 4096, "{text}");
    // The second: all from memory, in one cache for the workers.
    assert_eq!(scrapes[2][..2], [8 << 20, 4 << 20], "{text}{stderr}");
    // Every worker ended with `_exit` and printed its line, from the
    // group's cache: the lines' bytes read add up to the group's.
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("foliocache-preload: pid "))
        .collect();
    assert!(
        lines
            .iter()
            .all(|l| l.contains("; from the group's shared cache (")),
        "{stderr}"
    );
    let serving = lines.iter().filter(|l| before(l, " opens served") > 0);
    assert!(serving.count() >= 2, "the workers served: {stderr}");
    let sum: u64 = lines.iter().map(|l| before(l, " bytes read")).sum();
    assert_eq!(sum, 8 << 20, "{stderr}");
    // The launcher's line at the end: the figures the endpoint served.
    let last = stderr
        .lines()
        .find(|l| l.starts_with("foliocache run: the group's shared cache"))
        .unwrap_or_else(|| panic!("no line of the launcher's: {stderr}"));
    assert_eq!(before(last, " bytes read"), 8 << 20, "{last}");
    assert_eq!(before(last, " hits,"), scrapes[2][2], "{last}\n{text}");
}

/// `--metrics` with `--no-guardian` is refused, with the reason, before
/// the program runs: no launcher stays to serve the figures.
#[test]
fn run_metrics_without_a_guardian_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("ran");
    let out = Command::new(BIN)
        .args([
            "run",
            "--no-state",
            "--no-guardian",
            "--metrics",
            &free_port(),
            "--dir",
        ])
        .arg(dir.path())
        .args(["--", "touch"])
        .arg(&marker)
        .output()
        .expect("running foliocache run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--metrics with --no-guardian") && err.contains("served by `foliocache run`"),
        "{err}"
    );
    assert!(!marker.exists(), "the program ran");
}
