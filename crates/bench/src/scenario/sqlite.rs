//! `sqlite`: SQLite through its default `unix` VFS and through the
//! foliocache VFS (`foliocache-sqlite`), a speedtest1-like mix through
//! rusqlite, every configuration under one memory limit M. See
//! `docs/bench/databases.md` and `docs/sqlite.md`.
//!
//! Configurations (the table's engines), each with SQLite's default page
//! cache (`cache_size` -2000, about 2 MiB):
//! - `unix`: SQLite's default VFS, the kernel's page cache under it;
//! - `foliocache`: the foliocache VFS over a cache of most of M;
//! - `foliocache[mmap]`: the same with `PRAGMA mmap_size` set, so that
//!   SQLite reads pages in place, pinned in the cache (`xFetch`).
//!
//! The mix, on a fresh database `t1(a INTEGER PRIMARY KEY, b INTEGER, c
//! TEXT)` with an index on `b`: inserts in transactions of 10,000 rows,
//! indexed lookups by `b`, range scans of 100 rows by `a`, updates and
//! deletes of random rows in transactions of 1,000; each part is a job,
//! and `mix` is their total (its bandwidth ratio is the inverse of the
//! total times' ratio). Two sizes: data that fits M, and data 4x M.
//! Every database passes `PRAGMA integrity_check` after its run, or the
//! scenario fails.

use std::path::Path;

use anyhow::{bail, Result};
use rusqlite::{params, Connection, OpenFlags};

use super::embedded::{self, ChildRun, Embedded, EmbeddedBench, Measured};
use super::rounds::scatter;
use super::FullQuick;
use crate::targets::{bandwidth, JobName, Target};
use crate::units::{fmt_size, fmt_size_approx};

/// Bytes of a row's text.
const TEXT: usize = 100;
/// A row's raw bytes: its text and two integers.
const ROW: u64 = TEXT as u64 + 16;
/// Rows per insert transaction, and per update or delete transaction.
const INSERT_TX: u64 = 10_000;
const CHANGE_TX: u64 = 1_000;
/// Rows a range scan reads.
const SCAN: i64 = 100;
/// The foliocache VFS's name while a configuration runs.
const VFS: &str = "foliocache-bench";

/// The configurations, by label.
pub const UNIX: &str = "unix";
/// The foliocache VFS.
pub const FOLIO: &str = "foliocache";
/// The foliocache VFS with `mmap_size` set (`xFetch` pins).
pub const FOLIO_MMAP: &str = "foliocache[mmap]";

/// One size's jobs: the mix's parts, in the order they run, and its
/// total.
#[derive(Debug, Clone, Copy)]
pub struct Jobs {
    /// Inserts in transactions of [`INSERT_TX`] rows.
    pub inserts: JobName,
    /// Indexed lookups by `b`.
    pub lookups: JobName,
    /// Range scans of [`SCAN`] rows by `a`.
    pub scans: JobName,
    /// Updates of random rows, in transactions of [`CHANGE_TX`].
    pub updates: JobName,
    /// Deletes of random rows, in transactions of [`CHANGE_TX`].
    pub deletes: JobName,
    /// The parts' total.
    pub mix: JobName,
}

impl Jobs {
    /// The jobs in the order they are reported.
    const fn all(&self) -> [JobName; 6] {
        [
            self.inserts,
            self.lookups,
            self.scans,
            self.updates,
            self.deletes,
            self.mix,
        ]
    }
}

/// The jobs with data that fits M.
pub const FITS: Jobs = Jobs {
    inserts: "inserts, fits",
    lookups: "lookups, fits",
    scans: "scans, fits",
    updates: "updates, fits",
    deletes: "deletes, fits",
    mix: "mix, fits",
};
/// The jobs with data 4x M.
pub const BIG: Jobs = Jobs {
    inserts: "inserts, 4x",
    lookups: "lookups, 4x",
    scans: "scans, 4x",
    updates: "updates, 4x",
    deletes: "deletes, 4x",
    mix: "mix, 4x",
};

/// The scenario's ratios and targets. The bound is on the mix's
/// total time (at most 0.9x `unix`'s with data that fits, 1.0x with data
/// 4x M): as a bandwidth ratio, its inverse.
#[rustfmt::skip]
pub const TARGETS: &[Target<&str>] = &[
    bandwidth(FOLIO, UNIX).of(FITS.mix).at_least(1.0 / 0.9),
    bandwidth(FOLIO, UNIX).of(BIG.mix).at_least(1.0),
    bandwidth(FOLIO_MMAP, UNIX).of(FITS.mix),
    bandwidth(FOLIO_MMAP, UNIX).of(BIG.mix),
    bandwidth(FOLIO, UNIX).of(FITS.inserts),
    bandwidth(FOLIO, UNIX).of(FITS.lookups),
    bandwidth(FOLIO, UNIX).of(FITS.scans),
    bandwidth(FOLIO, UNIX).of(FITS.updates),
    bandwidth(FOLIO, UNIX).of(FITS.deletes),
    bandwidth(FOLIO, UNIX).of(BIG.inserts),
    bandwidth(FOLIO, UNIX).of(BIG.lookups),
    bandwidth(FOLIO, UNIX).of(BIG.scans),
    bandwidth(FOLIO, UNIX).of(BIG.updates),
    bandwidth(FOLIO, UNIX).of(BIG.deletes),
];

/// The scenario's shape: M 256 MiB (32 MiB with `--quick`, at least
/// 16 MiB); 100,000 lookups, scans, updates and deletes each (5,000 with
/// `--quick`).
pub static DB: Embedded = Embedded {
    name: "sqlite",
    configs: &[UNIX, FOLIO, FOLIO_MMAP],
    jobs: [FITS.all(), BIG.all()],
    m: FullQuick(256 << 20, 32 << 20),
    min_m: 16 << 20,
    bytes_per_op: ROW,
    min_n: 1000,
    ops: FullQuick(100_000, 5_000),
    targets: TARGETS,
    unlimited: &[],
    capacity: |config, m| (config != UNIX).then(|| folio_capacity(m)),
    describe: description,
    better: None,
    baseline: UNIX,
};

/// What the scenario runs, in a paragraph.
fn description(b: &EmbeddedBench) -> String {
    let (ops, rows, limit) = (b.ops, b.n, b.limit);
    format!(
        "SQLite through rusqlite, a speedtest1-like mix on t1(a INTEGER PRIMARY KEY, b \
         INTEGER, c TEXT) indexed on b: inserts (transactions of {INSERT_TX}), {ops} indexed \
         lookups, {ops} range scans of {SCAN} rows, {ops} updates and {ops} deletes of random \
         rows (transactions of {CHANGE_TX}); mix is their total. Two sizes: {} rows ({} raw: \
         fits M) and {} ({} raw: 4x M). Every configuration has SQLite's default page cache \
         and runs in a memory cgroup of M = {} (--capacity): {UNIX} (the default VFS, the \
         kernel's page cache), {FOLIO} (the foliocache VFS over a cache of {}), {FOLIO_MMAP} \
         (the same, mmap_size set: pages read in place, pinned). Bandwidth is operations \
         times {ROW} bytes (a row); mix's ratio is the inverse of the total times' ratio. \
         Each database passes PRAGMA integrity_check after its run.",
        rows[0],
        fmt_size_approx(rows[0] * ROW),
        rows[1],
        fmt_size_approx(rows[1] * ROW),
        fmt_size(limit),
        fmt_size(folio_capacity(limit)),
    )
}

/// The foliocache VFS's cache for M = `m`: M less SQLite's page cache and
/// the process's own memory ([`embedded::headroom`]), in whole MiB (at
/// least 1 MiB).
pub fn folio_capacity(m: u64) -> u64 {
    m.saturating_sub((2 << 20) + embedded::headroom(m))
        .max(1 << 20)
        >> 20
        << 20
}

/// One configuration's run at one size, in its child process
/// ([`embedded::child_main`]): the mix on a fresh database of `run.n`
/// rows, then the integrity check; the database is removed after.
///
/// # Errors
/// SQLite's, or the check failed.
pub fn one_run(run: &ChildRun) -> Result<Vec<Measured>> {
    let (config, path, rows) = (run.config.as_str(), run.path.as_path(), run.n);
    let jobs = match run.size {
        0 => FITS,
        1 => BIG,
        _ => bail!("sqlite: no size {}", run.size),
    };
    remove_db(path);
    let cache = if config == UNIX {
        None
    } else {
        let c = embedded::folio_cache(folio_capacity(run.limit), run.limit)?;
        foliocache_sqlite::register(VFS, &c)?;
        Some(c)
    };
    let result = (|| {
        let conn = match cache {
            Some(_) => Connection::open_with_flags_and_vfs(path, OpenFlags::default(), VFS)?,
            None => Connection::open(path)?,
        };
        if config == FOLIO_MMAP {
            conn.execute_batch("PRAGMA mmap_size = 1099511627776")?;
        }
        let mut out = mix(&conn, &jobs, rows, run.ops)?;
        if let (Some(m), Some(c)) = (out.last_mut(), &cache) {
            embedded::add_note(m, embedded::cache_note(c));
        }
        let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
        if check != "ok" {
            bail!("sqlite ({config}): integrity_check after the run: {check}");
        }
        Ok(out)
    })();
    if cache.is_some() {
        foliocache_sqlite::unregister(VFS)?;
    }
    drop(cache);
    remove_db(path);
    result
}

/// Removes a database and its journal.
fn remove_db(path: &Path) {
    let mut journal = path.as_os_str().to_owned();
    journal.push("-journal");
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(journal);
}

/// Row `a`'s `b`: scattered, so the index is written out of order.
fn b_of(a: u64) -> i64 {
    (scatter(a) >> 2) as i64
}

/// The mix on `conn`: its parts, then their total (`jobs.mix`).
fn mix(conn: &Connection, jobs: &Jobs, rows: u64, ops: u64) -> Result<Vec<Measured>> {
    conn.execute_batch(
        "CREATE TABLE t1(a INTEGER PRIMARY KEY, b INTEGER, c TEXT);
         CREATE INDEX t1b ON t1(b);",
    )?;
    let text = "x".repeat(TEXT);
    let mut parts = Vec::new();
    parts.push(embedded::timed(jobs.inserts, rows, || {
        let mut st = conn.prepare_cached("INSERT INTO t1 VALUES (?1, ?2, ?3)")?;
        for first in (0..rows).step_by(INSERT_TX as usize) {
            conn.execute_batch("BEGIN")?;
            for a in first..(first + INSERT_TX).min(rows) {
                st.execute(params![a as i64, b_of(a), text])?;
            }
            conn.execute_batch("COMMIT")?;
        }
        Ok(None)
    })?);
    parts.push(embedded::timed(jobs.lookups, ops, || {
        let mut st = conn.prepare_cached("SELECT a FROM t1 WHERE b = ?1")?;
        let mut found = 0u64;
        for i in 0..ops {
            let a = scatter(i ^ 0x100) % rows;
            let got: i64 = st.query_row([b_of(a)], |r| r.get(0))?;
            found += u64::from(got == a as i64);
        }
        if found != ops {
            bail!("sqlite: {found} of {ops} lookups found their row");
        }
        Ok(Some(format!("{found} of {ops} found")))
    })?);
    parts.push(embedded::timed(jobs.scans, ops, || {
        let mut st = conn
            .prepare_cached("SELECT count(*), sum(length(c)) FROM t1 WHERE a BETWEEN ?1 AND ?2")?;
        let mut seen = 0i64;
        for i in 0..ops {
            let a = (scatter(i ^ 0x200) % rows) as i64;
            let n: i64 = st.query_row([a, a + SCAN - 1], |r| r.get(0))?;
            seen += n;
        }
        Ok(Some(format!("{seen} rows scanned")))
    })?);
    parts.push(embedded::timed(jobs.updates, ops, || {
        let new = "y".repeat(TEXT);
        changes(
            conn,
            "UPDATE t1 SET c = ?2 WHERE a = ?1",
            ops,
            rows,
            0x300,
            Some(&new),
        )
    })?);
    parts.push(embedded::timed(jobs.deletes, ops, || {
        changes(conn, "DELETE FROM t1 WHERE a = ?1", ops, rows, 0x400, None)
    })?);
    let total = Measured {
        job: jobs.mix,
        ops: parts.iter().map(|m| m.ops).sum(),
        seconds: parts.iter().map(|m| m.seconds).sum(),
        note: Some(format!(
            "total time {:.3} s",
            parts.iter().map(|m| m.seconds).sum::<f64>()
        )),
    };
    parts.push(total);
    Ok(parts)
}

/// `ops` runs of `sql` on random rows among `rows` (seeded by `seed`), in
/// transactions of [`CHANGE_TX`], with `text` as the second parameter
/// where given: the rows it changed.
fn changes(
    conn: &Connection,
    sql: &str,
    ops: u64,
    rows: u64,
    seed: u64,
    text: Option<&str>,
) -> Result<Option<String>> {
    let mut st = conn.prepare_cached(sql)?;
    let mut changed = 0;
    conn.execute_batch("BEGIN")?;
    for i in 0..ops {
        let a = (scatter(i ^ seed) % rows) as i64;
        changed += match text {
            Some(t) => st.execute(params![a, t])?,
            None => st.execute([a])?,
        };
        if (i + 1) % CHANGE_TX == 0 {
            conn.execute_batch("COMMIT; BEGIN")?;
        }
    }
    conn.execute_batch("COMMIT")?;
    Ok(Some(format!("{changed} rows changed")))
}
