//! The `restart` job of the `objectstore` scenario: a child process (this
//! binary again, told what to run by [`CHILD_ENV`]) reads through an
//! engine with a disk tier until the tier holds data, says `READY`, reads
//! on (writing the tier) and is killed with SIGKILL a random moment
//! later; a new engine reopens the tier. Measured: the time the tier's
//! index takes to recover (opening it), and the time from the start of
//! the reopen to the first read served by the disk tier, every byte
//! checked; then what one task reads in the second after that hit (how
//! many reads, served by the tier or not, and the HEADs they waited for
//! or sent).
//!
//! With [`Spec::fill`] the child first fills its tier with every chunk of
//! the point reads' data ([`fill`]), at no latency (the remote's
//! bandwidth still paces each GET), so that a tier of gigabytes fills in
//! minutes; the reads after the restart meet the remote's latency.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::engines::{Engine, Objects};
use super::remote::Remote;
use super::{check, point, RESTART};
use crate::report::{RunJob, RunRecord};
use crate::scenario::rounds::scatter;
use crate::zipf::Zipf;

/// The variable that makes this binary the child.
pub const CHILD_ENV: &str = "FOLIOCACHE_OBJSTORE_CHILD";
/// Reads after the restart before giving up on a disk hit.
const MAX_READS: u64 = 5_000;

/// What the child runs.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The engine.
    pub label: String,
    /// The remote's directory.
    pub remote: PathBuf,
    /// The tier's file.
    pub disk: PathBuf,
    /// Memory and disk.
    pub m: u64,
    /// The disk tier's bytes.
    pub d: u64,
    /// The remote's latency.
    pub latency: Duration,
    /// Objects (small, then 2 scanned).
    pub objects: u64,
    /// A scanned object's size.
    pub scan_object: u64,
    /// Point reads (the `memory` job's reader reads twice as many).
    pub ops: u64,
    /// Whether the child fills its tier first, at no latency ([`fill`]).
    pub fill: bool,
}

impl Spec {
    /// The spec as the child's variable holds it.
    pub(super) fn encode(&self) -> String {
        format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.label,
            self.remote.display(),
            self.disk.display(),
            self.m,
            self.d,
            self.latency.as_millis(),
            self.objects,
            self.scan_object,
            self.ops,
            u8::from(self.fill)
        )
    }

    /// The spec [`encode`](Self::encode) gave.
    pub(super) fn decode(s: &str) -> Result<Spec> {
        let f: Vec<&str> = s.split('\t').collect();
        if f.len() != 10 {
            bail!("objectstore child: 10 fields, not {s:?}");
        }
        Ok(Spec {
            label: f[0].into(),
            remote: f[1].into(),
            disk: f[2].into(),
            m: f[3].parse()?,
            d: f[4].parse()?,
            latency: Duration::from_millis(f[5].parse()?),
            objects: f[6].parse()?,
            scan_object: f[7].parse()?,
            ops: f[8].parse()?,
            fill: f[9] == "1",
        })
    }

    /// The objects, as `write_objects` named them.
    pub(super) fn objects(&self) -> Objects {
        let small = self.objects - 2;
        let list = (0..self.objects)
            .map(|i| match i < small {
                true => (format!("small/{i}").into(), super::OBJECT),
                false => (format!("scan/{i}").into(), self.scan_object),
            })
            .collect();
        Objects { list }
    }

    /// The spec's engine over a new remote.
    pub(super) fn engine(&self, objects: Objects) -> Result<Engine> {
        let remote = Remote::new(&self.remote, self.latency)?;
        Engine::new(&self.label, remote, objects, self.m, &self.disk, self.d)
    }

    /// The point reads' distribution.
    pub(super) fn zipf(&self) -> Result<Zipf> {
        Zipf::new((self.objects - 2) * super::OBJECT / super::PAGE, 0.99)
            .map_err(anyhow::Error::msg)
    }
}

/// In the child ([`CHILD_ENV`] set): reads until killed.
pub(super) fn child_main() -> Option<ExitCode> {
    let spec = std::env::var(CHILD_ENV).ok()?;
    let go = || -> Result<()> {
        let mut spec = Spec::decode(&spec)?;
        if spec.fill {
            spec.latency = Duration::ZERO;
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let e = Arc::new(spec.engine(spec.objects())?);
        let zipf = Arc::new(spec.zipf()?);
        rt.block_on(async {
            if spec.fill {
                fill(&e, &spec).await?;
            }
            // Eight readers, as the bench's; `READY` once the tier holds
            // data, then on until killed.
            let tasks: Vec<_> = (0..super::TASKS)
                .map(|t| {
                    let (e, zipf) = (e.clone(), zipf.clone());
                    tokio::spawn(async move {
                        for i in (t..).step_by(super::TASKS as usize) {
                            let (obj, range) = point(&zipf, i);
                            e.read(obj, range).await?;
                        }
                        anyhow::Ok(())
                    })
                })
                .collect();
            while e.disk_writes() == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            println!("READY");
            for t in tasks {
                t.await??;
            }
            anyhow::Ok(())
        })
    };
    Some(match go() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("objectstore child: {e:#}");
            ExitCode::FAILURE
        }
    })
}

/// Objects of the point reads filled at once: their pages (one per
/// chunk) are more than any M the bench runs at (16 of them per MiB of
/// M), and their chunks fewer than the tier's ghosts remember (65,536),
/// so that the second pass misses memory and is admitted.
const FILL_GROUP: u64 = 2 << 30;

/// Fills the tier: for each group of the point reads' objects
/// ([`FILL_GROUP`]), reads one page of each 64 KiB chunk in a scattered
/// order from [`TASKS`](super::TASKS) tasks, twice for foliocache (its
/// tier admits a chunk at its second miss), once for the others (foyer
/// writes what memory evicts); every byte checked.
async fn fill(e: &Arc<Engine>, spec: &Spec) -> Result<()> {
    const CHUNK: u64 = 64 << 10;
    const STEP: u64 = 1_000_003;
    let small = spec.objects - 2;
    let per_group = (FILL_GROUP / super::OBJECT).max(1);
    let passes = if spec.label == super::FOLIO_DISK {
        2
    } else {
        1
    };
    let t = Instant::now();
    for first in (0..small).step_by(per_group as usize) {
        let objs = per_group.min(small - first);
        let n = objs * super::OBJECT / CHUNK;
        anyhow::ensure!(!n.is_multiple_of(STEP), "objectstore fill: {n} chunks");
        for _ in 0..passes {
            let tasks: Vec<_> = (0..super::TASKS)
                .map(|t| {
                    let e = e.clone();
                    tokio::spawn(async move {
                        for i in (t..n).step_by(super::TASKS as usize) {
                            // A permutation of the group's chunks (STEP is
                            // a prime that does not divide n).
                            let c = (i * STEP) % n;
                            let obj = (first + c / (super::OBJECT / CHUNK)) as u32;
                            let at = c % (super::OBJECT / CHUNK) * CHUNK;
                            let range = at..at + super::PAGE;
                            let got = e.read(obj, range.clone()).await?;
                            check(obj, &range, &got)?;
                        }
                        anyhow::Ok(())
                    })
                })
                .collect();
            for task in tasks {
                task.await??;
            }
        }
    }
    eprintln!(
        "objectstore restart child: filled in {:.1} s: {}",
        t.elapsed().as_secs_f64(),
        e.note()
    );
    Ok(())
}

/// How long the reads after the first disk hit go on.
const AFTER_HIT: Duration = Duration::from_secs(1);

/// What the reads after the first disk hit did.
struct After {
    reads: u64,
    /// Chunks (blocks) the tier served.
    disk_hits: u64,
    heads: u64,
}

/// Reads on through `e` from read `from` of the sequence, from one task,
/// for [`AFTER_HIT`] (at most [`MAX_READS`] reads), every byte checked.
async fn read_on(e: &Engine, zipf: &Zipf, from: u64) -> Result<After> {
    let heads = || {
        e.remote()
            .seen
            .heads
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let (hits0, heads0) = (e.disk_hits(), heads());
    let t = Instant::now();
    let mut reads = 0;
    while t.elapsed() < AFTER_HIT && reads < MAX_READS {
        let (obj, range) = point(zipf, from + reads);
        let got = e.read(obj, range.clone()).await?;
        check(obj, &range, &got)?;
        reads += 1;
    }
    Ok(After {
        reads,
        disk_hits: e.disk_hits() - hits0,
        heads: heads() - heads0,
    })
}

/// Runs the child, kills it, reopens the tier: the job's record.
///
/// # Errors
/// The child could not run, or a read after the restart failed or was
/// wrong.
pub fn run(
    spec: &Spec,
    objects: &Objects,
    zipf: &Arc<Zipf>,
    rt: &tokio::runtime::Runtime,
) -> Result<RunRecord> {
    let mut child = Command::new(std::env::current_exe()?)
        .env(CHILD_ENV, spec.encode())
        .stdout(Stdio::piped())
        .spawn()
        .context("objectstore: starting the restart's child")?;
    let out = child.stdout.take().context("the child's stdout")?;
    let ready = std::io::BufReader::new(out)
        .lines()
        .any(|l| l.is_ok_and(|l| l == "READY"));
    // A random moment within the child's writes.
    std::thread::sleep(Duration::from_millis(
        scatter(std::process::id().into()) % 200,
    ));
    child.kill()?;
    let status = child.wait()?;
    if !ready {
        bail!("objectstore: the restart's child ended before it was ready: {status}");
    }
    let t = Instant::now();
    let e = spec.engine(objects.clone())?;
    let recovered = t.elapsed();
    let (reads, first_hit) = rt.block_on(async {
        for i in 0..MAX_READS {
            let (obj, range) = point(zipf, i);
            let got = e.read(obj, range.clone()).await?;
            check(obj, &range, &got)?;
            if e.disk_hits() > 0 {
                return anyhow::Ok((i + 1, Some(t.elapsed())));
            }
        }
        anyhow::Ok((MAX_READS, None))
    })?;
    let after = match first_hit {
        Some(_) => Some(rt.block_on(read_on(&e, zipf, reads))?),
        None => None,
    };
    let mut r = RunRecord {
        engine: spec.label.clone(),
        ..RunRecord::default()
    };
    r.job = RunJob {
        rw: RESTART,
        numjobs: 1,
        file_size: spec.d,
        ..RunJob::default()
    };
    r.perf.ops = reads;
    r.perf.seconds = first_hit.unwrap_or(t.elapsed()).as_secs_f64();
    r.perf.iops = reads as f64 / r.perf.seconds.max(1e-9);
    r.perf.cpu_us_per_op = f64::NAN;
    r.perf.cpu_s_per_gib = f64::NAN;
    r.notes.push(format!(
        "index recovered in {:.3} ms (a disk tier of {} MiB); first disk hit {} after {reads} reads",
        recovered.as_secs_f64() * 1e3,
        spec.d >> 20,
        match first_hit {
            Some(h) => format!("{:.3} ms after the reopen began", h.as_secs_f64() * 1e3),
            None => "never".into(),
        },
    ));
    if let Some(a) = after {
        r.notes.push(format!(
            "in the {:.0} ms after its first disk hit: {} reads, {} disk tier hits (of 64 KiB \
             chunks or blocks: a read may take two), {} HEADs sent",
            AFTER_HIT.as_secs_f64() * 1e3,
            a.reads,
            a.disk_hits,
            a.heads
        ));
    }
    if spec.fill {
        r.notes.push(format!(
            "the child filled its tier with every chunk of the {} MiB of data first, at no \
             latency (the remote's bandwidth still pacing each GET)",
            spec.d >> 20
        ));
    }
    r.notes.push(e.note());
    Ok(r)
}
