//! The reads RocksDB's `db_bench
//! readrandom` (Debian's `rocksdb-tools`) asks of its files, which is
//! what the interposer hands the cache when the program runs under
//! `foliocache run` (one `pread64` a data block).
//!
//! Recorded once a run: `db_bench` fills a database of about 4 C
//! (`fillseq`, then `flush`: about eight level-0 tables of disjoint keys, no
//! compression, no compaction), then reads it at random (`readrandom`,
//! a fixed seed, no block cache of its own, so every `Get` reads its data
//! block from the file) under `strace -e trace=pread64 -y`, which logs
//! each read's file, length and offset at the system call, the boundary
//! where the interposer's `pread64` stands. The log, read back, becomes a
//! trace of pages: the files of the database side by side in one address
//! space (each at a page boundary), each read the pages it covers.
//!
//! The recording needs `db_bench` and `strace` on `PATH`, and `ptrace`
//! allowed; where one is missing [`record`] says why and the scenario
//! skips the workload.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{bail, Context, Result};

use super::super::tell;
use super::PAGE;

/// The program, and the Debian package that has it.
const DB_BENCH: (&str, &str) = ("db_bench", "rocksdb-tools");
/// The tracer, and its package.
const STRACE: (&str, &str) = ("strace", "strace");

/// A value's bytes: about four entries a 4 KiB block (small values make
/// the fill slower, not the reads different: one block a `Get`).
const VALUE_BYTES: u64 = 1000;
/// A key's bytes.
const KEY_BYTES: u64 = 16;
/// The level-0 tables the fill leaves, about: the memtable's size is the
/// database's over this (its overhead makes one more at 16 MiB).
const TABLES: u64 = 8;
/// readrandom's seed: the same keys every run.
const SEED: u64 = 1;

/// A recorded trace: the pages read, in order, and the pages of the
/// files they lie in (side by side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbTrace {
    /// The page of each read, in order (a read over two pages is two).
    pub pages: Vec<u64>,
    /// The address space's pages: every file of the database read,
    /// each rounded up to a page.
    pub file_pages: u64,
    /// The `pread64` calls on the database's files.
    pub preads: u64,
    /// The files they read.
    pub files: usize,
}

/// A trace [`record`] could not record (`why`), for the scenario
/// `scenario` whose row `row` it was: under `CI=true`, whose test command
/// installs its programs, an error; else a note that the row is skipped.
///
/// # Errors
/// Under `CI=true`.
pub fn skipped(
    scenario: &str,
    row: &str,
    why: &str,
    notes: &mut Vec<String>,
    say: &dyn Fn(&str),
) -> Result<()> {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        bail!("{scenario}: the db_bench trace cannot be recorded under CI=true: {why}");
    }
    let n = format!("{row}: skipped: {why}");
    tell(notes, say, n);
    Ok(())
}

/// Records the trace for a cache of `c` pages, in a directory made (and
/// removed) in `dir`: a database of about 4 C, read with about `reads`
/// `Get`s. `Ok(Err(why))` where it cannot be recorded here (a program
/// missing, tracing not allowed).
///
/// # Errors
/// A directory that cannot be made, or `db_bench` failing.
pub fn record(dir: &Path, c: u64, reads: u64) -> Result<Result<DbTrace, String>> {
    let (Some(db_bench), Some(strace)) = (find(DB_BENCH.0), find(STRACE.0)) else {
        let missing: Vec<String> = [DB_BENCH, STRACE]
            .iter()
            .filter(|(p, _)| find(p).is_none())
            .map(|(p, pkg)| format!("{p} is not on PATH (apt-get install {pkg})"))
            .collect();
        return Ok(Err(missing.join("; ")));
    };
    let root = tempfile::Builder::new()
        .prefix("foliocache-advisor-")
        .tempdir_in(dir)
        .with_context(|| format!("advisor: a directory in {}", dir.display()))?;
    let db = root.path().join("db");
    let bytes = 4 * c * PAGE;
    let keys = bytes / (KEY_BYTES + VALUE_BYTES);
    let mut fill = Command::new(&db_bench);
    fill.args(db_args(&db, keys)).args([
        "--benchmarks=fillseq,flush".to_string(),
        "--use_existing_db=0".into(),
        format!("--write_buffer_size={}", bytes / TABLES),
    ]);
    checked("db_bench fillseq", &fill.env_remove("LD_PRELOAD").output()?)?;
    let log = root.path().join("strace.log");
    let mut read = Command::new(strace);
    read.args([
        "-f",
        "-qq",
        "--seccomp-bpf",
        "-e",
        "trace=pread64",
        "-y",
        "-s",
        "0",
    ])
    .arg("-o")
    .arg(&log)
    .arg(&db_bench)
    .args(db_args(&db, keys))
    .args([
        "--benchmarks=readrandom".to_string(),
        "--use_existing_db=1".into(),
        format!("--reads={reads}"),
        format!("--seed={SEED}"),
        "--threads=1".into(),
    ]);
    let out = read.env_remove("LD_PRELOAD").output()?;
    // strace's own complaint where tracing is denied names ptrace
    // ("ptrace(PTRACE_SEIZE, ...)", "PTRACE_TRACEME": Operation not
    // permitted).
    let err = String::from_utf8_lossy(&out.stderr).to_lowercase();
    if !out.status.success() && err.contains("ptrace") && err.contains("not permitted") {
        return Ok(Err(format!(
            "strace cannot trace here: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    checked("db_bench readrandom under strace", &out)?;
    let text = std::fs::read_to_string(&log).context("advisor: reading strace's log")?;
    // The log names the database's files by the paths `-y` resolved.
    let trace = parse(&text, &db.canonicalize()?);
    if trace.preads < reads {
        bail!(
            "advisor: strace logged {} reads of the database for {reads} Gets",
            trace.preads
        );
    }
    Ok(Ok(trace))
}

/// `db_bench`'s arguments on the database `db` of `keys` keys: no
/// compression, no block cache, no compaction, no progress lines.
fn db_args(db: &Path, keys: u64) -> Vec<OsString> {
    let mut flag = OsString::from("--db=");
    flag.push(db);
    let mut args = vec![flag];
    args.extend(
        [
            format!("--num={keys}"),
            format!("--key_size={KEY_BYTES}"),
            format!("--value_size={VALUE_BYTES}"),
            "--compression_type=none".into(),
            "--cache_size=0".into(),
            "--disable_auto_compactions=1".into(),
            "--progress_reports=0".into(),
        ]
        .map(OsString::from),
    );
    args
}

/// `program` in a directory of `PATH`.
pub(crate) fn find(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// An error, with the end of its output, where `out`'s program failed.
fn checked(what: &str, out: &Output) -> Result<()> {
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().collect();
        bail!(
            "advisor: {what} failed ({}):\n{}",
            out.status,
            lines[lines.len().saturating_sub(10)..].join("\n")
        );
    }
    Ok(())
}

/// The trace in strace's log `text` (`strace -f -y -s 0 -e
/// trace=pread64`): the reads of files under `db`, others (the loader's)
/// left out. A call another thread's interrupted (`<unfinished ...>`,
/// then `<... pread64 resumed>`) is joined by its thread id; a failed
/// read (`= -1`) or one at end of file reads no page.
pub fn parse(text: &str, db: &Path) -> DbTrace {
    let mut pending: HashMap<&str, &str> = HashMap::new();
    // Each read: its file (by first read), offset and bytes.
    let mut reads = Vec::new();
    let mut files: Vec<(String, u64)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let prefix = format!("{}/", db.display());
    for line in text.lines() {
        let (pid, rest) = line.trim().split_once(' ').unwrap_or(("", line));
        let rest = rest.trim_start();
        let call = if let Some(head) = rest.strip_suffix(" <unfinished ...>") {
            pending.insert(pid, head);
            continue;
        } else if let Some(tail) = rest.strip_prefix("<... pread64 resumed>") {
            match pending.remove(pid) {
                Some(head) => format!("{head}{tail}"),
                None => continue,
            }
        } else {
            rest.to_string()
        };
        let Some((path, off, bytes)) = one_read(&call) else {
            continue;
        };
        if !path.starts_with(&prefix) || bytes == 0 {
            continue;
        }
        let f = *index.entry(path.to_string()).or_insert_with(|| {
            files.push((path.to_string(), 0));
            files.len() - 1
        });
        files[f].1 = files[f].1.max(off + bytes);
        reads.push((f, off, bytes));
    }
    // Each file at a page boundary, in the order first read.
    let mut bases = Vec::with_capacity(files.len());
    let mut file_pages = 0;
    for (_, end) in &files {
        bases.push(file_pages);
        file_pages += end.div_ceil(PAGE);
    }
    let pages = reads
        .iter()
        .flat_map(|&(f, off, bytes)| {
            let base = bases[f];
            (off / PAGE..=(off + bytes - 1) / PAGE).map(move |p| base + p)
        })
        .collect();
    DbTrace {
        pages,
        file_pages,
        preads: reads.len() as u64,
        files: files.len(),
    }
}

/// One `pread64(FD<PATH>, BUF, LEN, OFFSET) = RET` call: its path,
/// offset and the bytes it read (0 for a failure).
fn one_read(call: &str) -> Option<(&str, u64, u64)> {
    let args = call.strip_prefix("pread64(")?;
    let (args, ret) = args.rsplit_once(") = ")?;
    let mut fields = args.rsplitn(3, ", ");
    let off: u64 = fields.next()?.trim().parse().ok()?;
    let _len: u64 = fields.next()?.trim().parse().ok()?;
    let fd = fields.next()?;
    let path = fd.split_once('<')?.1.rsplit_once(">, ")?.0;
    let got = ret.split_whitespace().next()?.parse::<i64>().ok()?;
    Some((path, off, got.max(0) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// strace 6.1's log of db_bench 7.8.3's readrandom (Debian's), cut:
    /// the loader's read of libc, a table's footer, a read another thread
    /// interrupted, a failed one.
    const LOG: &str = "\
9498  pread64(3</usr/lib/x86_64-linux-gnu/libc.so.6>, \"\"..., 784, 64) = 784
9501  pread64(7</tmp/a/db/000023.sst>, \"\"..., 53, 5703874) = 53
9501  pread64(7</tmp/a/db/000023.sst>, \"\"..., 4125, 8190) = 4125
9502  pread64(8</tmp/a/db/000009.sst>,  <unfinished ...>
9501  pread64(7</tmp/a/db/000023.sst>, \"\"..., 40, 0) = 40
9502  <... pread64 resumed>\"\"..., 4125, 4096) = 4125
9502  pread64(8</tmp/a/db/000009.sst>, 0x7f00, 4125, 99999999) = -1 EINVAL (Invalid argument)
";

    #[test]
    fn a_log_becomes_the_pages_each_read_covers() {
        let t = parse(LOG, Path::new("/tmp/a/db"));
        assert_eq!((t.preads, t.files), (4, 2));
        // 000023.sst ends at byte 5703874 + 53: 1393 pages, then 000009.sst
        // (two pages: 4096 + 4125 bytes) from page 1393.
        let first = 5_703_874 / PAGE;
        assert_eq!(t.pages, vec![first, 1, 2, 3, 0, 1393 + 1, 1393 + 2]);
        assert_eq!(t.file_pages, 1393 + 3);
    }

    #[test]
    fn a_recorded_trace_reads_the_database_at_random() {
        let dir = tempfile::tempdir().unwrap();
        // C of 256 pages: a database of 4 MiB, 2,000 Gets.
        let t = match record(dir.path(), 256, 2000).unwrap() {
            Ok(t) => t,
            Err(why) => return test_support::skip_or_fail("db_bench trace", why),
        };
        assert!(t.files >= 4, "{t:?}");
        assert!(t.pages.iter().all(|&p| p < t.file_pages));
        // A block a Get, most over two pages.
        let n = t.pages.len() as u64;
        assert!((2000..=3 * 2000 + 100).contains(&n), "{n} pages");
        // Uniform keys over about 4 MiB: most pages read at all.
        let distinct: std::collections::HashSet<_> = t.pages.iter().collect();
        assert!(
            distinct.len() as u64 > t.file_pages / 2,
            "{}",
            distinct.len()
        );
    }
}
