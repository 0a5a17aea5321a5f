//! fio's random reads on two skewed distributions the other workloads do
//! not use, under `foliocache run --capacity C --metrics PORT`: the
//! group's curve as a user reads it, from the endpoint, during the run.
//!
//! fio reads 4 KiB pages of a file of 8 C at random
//! (`--random_distribution`, `psync`, one job: a process fio forks, so
//! the reads are the group's cache's), a fixed count of reads with a
//! fixed seed, so that every run reads the same pages in the same order.
//! The bench scrapes the endpoint every [`INTERVAL`] while fio runs:
//! each scrape gives the group's bytes returned and from memory, the
//! curve's window (page reads) and the points known then
//! (`foliocache_shared_predicted_hit_ratio{capacity_ratio}`, absent while
//! a point is not known). The same job runs again at each other size
//! (`--capacity` r C), scraped the same way; the hit ratio measured at r C
//! over the reads a scrape's window covered is read off that run's
//! scrapes ([`Series::hit_ratio`]: the same reads, as the trace is the
//! same). Each point is compared at every scrape where it is known
//! ([`Check`]), as a user may read it at any of them: the worst gap, and
//! the read from which it was known; the row shows the last scrape's.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use foliocache::CAPACITY_RATIOS;

use super::PAGE;

/// The distributions (fio's `--random_distribution`).
pub const DISTRIBUTIONS: [&str; 2] = ["zipf:1.1", "pareto:0.9"];

/// The file, in capacities.
const FILE_CAPACITIES: u64 = 8;

/// The reads of a run, in capacities (of pages): the far points are
/// known once the warm-up's first reads have settled and left the
/// window (two epochs of 16 C at most), which 96 C leaves room for.
pub const READ_CAPACITIES: u64 = 96;

/// How often the endpoint is scraped.
const INTERVAL: Duration = Duration::from_millis(100);

/// The group's figures one scrape gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Scrape {
    /// Bytes reads returned (`foliocache_shared_returned_bytes_total`).
    pub returned: u64,
    /// Of them, from memory (`foliocache_shared_from_memory_bytes_total`).
    pub memory: u64,
    /// The page reads the curve's window holds (0: no curve yet).
    pub window: u64,
    /// Each of [`CAPACITY_RATIOS`]' points: `None` while not known.
    pub points: [Option<f64>; CAPACITY_RATIOS.len()],
}

/// The value of the sample named `name` (the whole name, labels
/// included) in OpenMetrics text.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let (n, v) = l.rsplit_once(' ')?;
        (n == name).then(|| v.parse().ok()).flatten()
    })
}

/// The group's figures in a scrape's text; `None` where it has not the
/// group's byte counters (the endpoint not serving the group yet).
pub fn parse(text: &str) -> Option<Scrape> {
    let returned = sample(text, "foliocache_shared_returned_bytes_total")?;
    let memory = sample(text, "foliocache_shared_from_memory_bytes_total")?;
    let window = sample(text, "foliocache_shared_predicted_hit_ratio_window_reads").unwrap_or(0.0);
    let points = CAPACITY_RATIOS.map(|r| {
        let name = format!("foliocache_shared_predicted_hit_ratio{{capacity_ratio=\"{r}\"}}");
        sample(text, &name).filter(|h| (0.0..=1.0).contains(h))
    });
    Some(Scrape {
        returned: returned as u64,
        memory: memory as u64,
        window: window as u64,
        points,
    })
}

/// The scrapes of one run, in order.
#[derive(Debug, Default)]
pub struct Series(pub Vec<Scrape>);

impl Series {
    /// Bytes from memory when `at` bytes had been returned: interpolated
    /// between the scrapes around it (the reads between two scrapes are
    /// a tenth of a second's), the first or last scrape's outside them.
    fn memory_at(&self, at: u64) -> f64 {
        let s = &self.0;
        let Some(i) = s.iter().position(|x| x.returned >= at) else {
            return s.last().map_or(0.0, |x| x.memory as f64);
        };
        let hi = &s[i];
        if i == 0 || hi.returned == at {
            return hi.memory as f64 * (at as f64 / hi.returned.max(1) as f64).min(1.0);
        }
        let lo = &s[i - 1];
        let f = (at - lo.returned) as f64 / (hi.returned - lo.returned) as f64;
        lo.memory as f64 + f * (hi.memory as f64 - lo.memory as f64)
    }

    /// The hit ratio (bytes from memory over bytes returned) over the
    /// bytes returned from `from` to `to`.
    pub fn hit_ratio(&self, from: u64, to: u64) -> f64 {
        let to = to.min(self.0.last().map_or(0, |x| x.returned));
        if to <= from {
            return 0.0;
        }
        (self.memory_at(to) - self.memory_at(from)) / (to - from) as f64
    }
}

/// One point of one distribution, over every scrape of the curve's run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Check {
    /// The read (in pages) at the first scrape where the point was known.
    pub known_from: Option<u64>,
    /// The largest gap, in points of hit ratio, over the scrapes where it
    /// was known.
    pub worst: f64,
    /// The read (in pages) at the scrape of the largest gap.
    pub worst_at: u64,
    /// The scrapes where it was known.
    pub scrapes: usize,
    /// At the last scrape: predicted (`None`: not known) and measured.
    pub last: Option<(Option<f64>, f64)>,
}

/// Each point's check: the curve's run's scrapes (`curve`) against the
/// runs at the point's size (`measured[i]` for `CAPACITY_RATIOS[i]`;
/// `None`: not run, the point left unchecked). The 1x point is measured
/// from the curve's own run.
pub fn check(curve: &Series, measured: &[Option<&Series>]) -> Vec<Option<Check>> {
    let page = PAGE;
    CAPACITY_RATIOS
        .iter()
        .enumerate()
        .map(|(i, &r)| {
            let run = if r == 1.0 { Some(curve) } else { measured[i] };
            let run = run?;
            let mut c = Check::default();
            for s in curve.0.iter().filter(|s| s.window > 0) {
                let from = s.returned.saturating_sub(s.window * page);
                let meas = run.hit_ratio(from, s.returned);
                if let Some(h) = s.points[i] {
                    c.known_from.get_or_insert(s.returned / page);
                    let gap = 100.0 * (h - meas).abs();
                    if gap > c.worst {
                        (c.worst, c.worst_at) = (gap, s.returned / page);
                    }
                    c.scrapes += 1;
                }
                c.last = Some((s.points[i], meas));
            }
            Some(c)
        })
        .collect()
}

/// A free port on 127.0.0.1.
fn free_port() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// `GET /metrics` at `addr`: the body, or `None` where nothing answers
/// (the endpoint not up yet, or gone).
fn get(addr: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

/// What every run of the workload shares.
pub struct Fio {
    /// fio.
    pub fio: PathBuf,
    /// The `foliocache` binary (`foliocache run`).
    pub foliocache: PathBuf,
    /// The file's directory (the run's `--dir`).
    pub dir: PathBuf,
    /// C, in bytes.
    pub capacity: u64,
}

impl Fio {
    /// The file's size: 8 C, in whole pages.
    fn file_bytes(&self) -> u64 {
        FILE_CAPACITIES * self.capacity / PAGE * PAGE
    }

    /// The file fio reads.
    fn file(&self) -> PathBuf {
        self.dir.join("fio.bin")
    }

    /// Writes the file (8 C of scattered bytes; what it holds does not
    /// matter to a hit ratio, only that it is real data on disk).
    pub fn prepare(&self) -> Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let mut f = std::io::BufWriter::new(std::fs::File::create(self.file())?);
        let block: Vec<u8> = (0..1u32 << 20)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        let mut left = self.file_bytes();
        while left > 0 {
            let n = left.min(block.len() as u64);
            f.write_all(&block[..n as usize])?;
            left -= n;
        }
        f.into_inner()?.sync_all()?;
        Ok(())
    }

    /// fio's random reads on `dist` under `foliocache run` with a cache
    /// of `capacity` bytes: the endpoint's scrapes.
    ///
    /// # Errors
    /// `foliocache run` or fio failing, or no scrape of the group's
    /// figures.
    pub fn run(&self, dist: &str, capacity: u64) -> Result<Series> {
        let addr = free_port()?;
        // To a file, not a pipe: a pipe nobody reads while the run lasts
        // could fill and stop it.
        let err_path = self.dir.join("run.err");
        let err_file = std::fs::File::create(&err_path)?;
        let reads = READ_CAPACITIES * self.capacity / PAGE;
        let mut child = Command::new(&self.foliocache)
            .args(["run", "--no-state", "--capacity"])
            .arg(capacity.to_string())
            .arg("--dir")
            .arg(&self.dir)
            .arg("--metrics")
            .arg(addr.to_string())
            .arg("--")
            .arg(&self.fio)
            .args([
                "--name=advisor",
                "--rw=randread",
                "--bs=4k",
                "--ioengine=psync",
            ])
            .args(["--norandommap", "--randrepeat=1", "--randseed=85"])
            .arg(format!("--random_distribution={dist}"))
            .arg(format!("--size={}", self.file_bytes()))
            .arg(format!("--io_size={}", reads * PAGE))
            .arg(format!("--filename={}", self.file().display()))
            .stdout(Stdio::null())
            .stderr(err_file)
            .spawn()
            .context("advisor: starting foliocache run -- fio")?;
        let mut series = Series::default();
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if let Some(s) = get(addr).as_deref().and_then(parse) {
                if s.returned > series.0.last().map_or(0, |l| l.returned) {
                    series.0.push(s);
                }
            }
            std::thread::sleep(INTERVAL);
        };
        let err = std::fs::read_to_string(&err_path).unwrap_or_default();
        if !status.success() {
            bail!("advisor: foliocache run -- fio {dist} failed ({status}): {err}");
        }
        ensure!(
            series.0.len() >= 2,
            "advisor: fio {dist} at {capacity} bytes: {} scrapes of the group's figures (fio \
             too quick, or the endpoint never served): {err}",
            series.0.len()
        );
        Ok(series)
    }

    /// Removes the file.
    pub fn clean(&self) -> Result<()> {
        std::fs::remove_dir_all(&self.dir)
            .with_context(|| format!("removing {}", self.dir.display()))
    }
}

/// Where fio is, if on `PATH`.
pub fn find() -> Option<PathBuf> {
    super::super::traces::dbtrace::find("fio")
}

/// The directory the workload's file goes in, in `dir`.
pub fn dir_in(dir: &Path) -> PathBuf {
    dir.join("advisor-fio")
}

/// The sizes run besides C, as indexes of [`CAPACITY_RATIOS`] (all but
/// 1x, which the curve's own run measures).
fn others() -> impl Iterator<Item = usize> {
    (0..CAPACITY_RATIOS.len()).filter(|&i| CAPACITY_RATIOS[i] != 1.0)
}

/// A distribution's table row (the last scrape's points beside the hit
/// ratios measured over its window; `n/k` where not known) and the line
/// of its check over every scrape.
pub fn lines(
    dist: &str,
    curve: &Series,
    checks: &[Option<Check>],
    gaps: &mut super::Gaps,
) -> (String, String) {
    let mut cells = Vec::new();
    let mut worst_last = 0.0f64;
    let mut over = Vec::new();
    for (c, r) in checks.iter().zip(CAPACITY_RATIOS) {
        let Some(c) = c else {
            cells.push(format!("{:>13}", "-"));
            continue;
        };
        match c.last {
            Some((Some(h), m)) => {
                let gap = 100.0 * (h - m).abs();
                worst_last = worst_last.max(gap / 100.0);
                gaps.known.push(gap);
                cells.push(format!("{h:>6.3}/{m:<6.3}"));
            }
            Some((None, m)) => {
                gaps.unknown += 1;
                cells.push(format!("{:>6}/{m:<6.3}", "n/k"));
            }
            None => cells.push(format!("{:>13}", "-")),
        }
        over.push(match c.known_from {
            Some(from) => format!(
                "{r}x known from read {from}, worst {:.3} at read {} ({} scrapes)",
                c.worst, c.worst_at, c.scrapes
            ),
            None => format!("{r}x never known"),
        });
    }
    let last = curve.0.last();
    let row = format!(
        "{:<18} {}  {:>9.3}   (window {} reads at read {}, {} scrapes)",
        format!("fio {dist}"),
        cells.join(" "),
        worst_last,
        last.map_or(0, |s| s.window),
        last.map_or(0, |s| s.returned / PAGE),
        curve.0.len()
    );
    let every = checks.iter().flatten().filter(|c| c.known_from.is_some());
    let worst = every.map(|c| c.worst).fold(0.0, f64::max);
    let verdict = if worst <= 2.0 { "met" } else { "not met" };
    let line = format!(
        "fio {dist}: each point at every scrape where it was known, against the hit ratio \
         measured at its size over that scrape's window: {}; worst {worst:.3} points (target: \
         within 2: {verdict})",
        over.join(", ")
    );
    (row, line)
}

/// Runs the workload for C of `capacity` bytes in a directory of `dir`:
/// each distribution's row and check line, said and kept in `notes`;
/// fio missing is said and skipped (outside CI, as the db_bench trace).
///
/// # Errors
/// A run failing; fio missing under `CI=true`.
pub fn rows(
    capacity: u64,
    dir: &Path,
    gaps: &mut super::Gaps,
    notes: &mut Vec<String>,
    say: &dyn Fn(&str),
) -> Result<()> {
    let Some(fio) = find() else {
        let why = "fio is not installed (Debian's fio)";
        return super::super::traces::dbtrace::skipped("advisor", "fio", why, notes, say);
    };
    let job = Fio {
        fio,
        foliocache: std::env::current_exe().context("advisor: the foliocache binary")?,
        dir: dir_in(dir),
        capacity,
    };
    job.prepare()?;
    for dist in DISTRIBUTIONS {
        let curve = job.run(dist, capacity)?;
        let mut runs: Vec<Option<Series>> = CAPACITY_RATIOS.iter().map(|_| None).collect();
        for i in others() {
            let size = (capacity as f64 * CAPACITY_RATIOS[i]) as u64;
            runs[i] = Some(job.run(dist, size)?);
        }
        let measured: Vec<Option<&Series>> = runs.iter().map(Option::as_ref).collect();
        let (row, line) = lines(dist, &curve, &check(&curve, &measured), gaps);
        super::tell(notes, say, row);
        super::tell(notes, say, line);
    }
    job.clean()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scrape's text as `foliocache run --metrics` writes it: the
    /// group's counters, the window and the points `known`.
    fn text(returned: u64, memory: u64, window: u64, known: &[(&str, f64)]) -> String {
        let mut t = String::from(
            "# HELP foliocache_shared_returned_bytes Bytes reads returned.\n\
             # TYPE foliocache_shared_returned_bytes counter\n",
        );
        t += &format!("foliocache_shared_returned_bytes_total {returned}\n");
        t += &format!("foliocache_shared_from_memory_bytes_total {memory}\n");
        t += "foliocache_shared_loaded_bytes_total 99\n";
        t += "# TYPE foliocache_shared_predicted_hit_ratio gauge\n";
        for (r, h) in known {
            t += &format!("foliocache_shared_predicted_hit_ratio{{capacity_ratio=\"{r}\"}} {h}\n");
        }
        t += &format!("foliocache_shared_predicted_hit_ratio_window_reads {window}\n# EOF\n");
        t
    }

    #[test]
    fn a_scrape_gives_the_groups_bytes_and_only_the_points_present() {
        let s = parse(&text(
            8192,
            4096,
            2,
            &[("0.5", 0.25), ("1", 0.5), ("4", 0.75)],
        ))
        .unwrap();
        assert_eq!((s.returned, s.memory, s.window), (8192, 4096, 2));
        assert_eq!(s.points, [None, Some(0.25), Some(0.5), None, Some(0.75)]);
        // The private cache's figures are not the group's; out of range
        // reads as unknown.
        let private = "foliocache_returned_bytes_total 10\nfoliocache_from_memory_bytes_total 5\n";
        assert_eq!(parse(private), None);
        let odd = parse(&text(1, 1, 1, &[("2", 1.5)])).unwrap();
        assert_eq!(odd.points[3], None);
    }

    /// A run's scrapes: `(reads, hits)` in pages, each a scrape.
    fn series(at: &[(u64, u64)], window: u64, known: &[[Option<f64>; 5]]) -> Series {
        Series(
            at.iter()
                .enumerate()
                .map(|(i, &(r, h))| Scrape {
                    returned: r * PAGE,
                    memory: h * PAGE,
                    window,
                    points: known.get(i).copied().unwrap_or([None; 5]),
                })
                .collect(),
        )
    }

    #[test]
    fn a_hit_ratio_is_read_between_scrapes() {
        // 100 reads, 0 hits; then 100 reads, 50 hits; then 100, 100.
        let s = series(&[(100, 0), (200, 50), (300, 150)], 0, &[]);
        assert_eq!(s.hit_ratio(100 * PAGE, 300 * PAGE), 0.75);
        assert_eq!(s.hit_ratio(200 * PAGE, 300 * PAGE), 1.0);
        // Half way through a tenth of a second's reads: interpolated.
        assert_eq!(s.hit_ratio(150 * PAGE, 250 * PAGE), 0.75);
        // Past the last scrape: up to it.
        assert_eq!(s.hit_ratio(200 * PAGE, 900 * PAGE), 1.0);
        assert_eq!(s.hit_ratio(300 * PAGE, 300 * PAGE), 0.0);
    }

    #[test]
    fn each_point_is_checked_at_every_scrape_where_it_was_known() {
        let k = |h: [f64; 5], known: [bool; 5]| {
            let mut p = [None; 5];
            for i in 0..5 {
                p[i] = known[i].then_some(h[i]);
            }
            p
        };
        let reads = [(100, 50), (200, 100), (300, 150)];
        // 1x (0.5) known throughout; 2x from the second scrape, 0.70
        // then 0.80; 4x never; 0.25x not run.
        let curve = series(
            &reads,
            100,
            &[
                k(
                    [0.0, 0.0, 0.5, 0.0, 0.0],
                    [false, false, true, false, false],
                ),
                k([0.0, 0.3, 0.5, 0.7, 0.0], [false, true, true, true, false]),
                k([0.0, 0.3, 0.5, 0.8, 0.0], [false, true, true, true, false]),
            ],
        );
        let half = series(&[(100, 30), (200, 60), (300, 90)], 0, &[]);
        let twice = series(&[(100, 70), (200, 150), (300, 230)], 0, &[]);
        let four = series(&[(100, 90), (200, 180), (300, 270)], 0, &[]);
        let checks = check(
            &curve,
            &[None, Some(&half), None, Some(&twice), Some(&four)],
        );
        assert_eq!(checks[0], None);
        let one = checks[2].clone().unwrap();
        assert_eq!((one.known_from, one.scrapes), (Some(100), 3));
        assert!(one.worst < 1e-9, "{one:?}");
        let two = checks[3].clone().unwrap();
        // Measured at 2x over the last 100 reads: 0.8, at the second
        // scrape's window 0.8 too: 10 points off there, 0 at the last.
        assert_eq!((two.known_from, two.scrapes), (Some(200), 2));
        assert!((two.worst - 10.0).abs() < 1e-9, "{two:?}");
        assert_eq!(two.last, Some((Some(0.8), 0.8)));
        let four = checks[4].clone().unwrap();
        assert_eq!((four.known_from, four.scrapes, four.worst), (None, 0, 0.0));
        assert_eq!(four.last, Some((None, 0.9)));

        let mut gaps = crate::scenario::advisor::Gaps::default();
        let (row, line) = lines("zipf:1.1", &curve, &checks, &mut gaps);
        assert!(row.starts_with("fio zipf:1.1"), "{row}");
        assert!(row.contains("n/k/0.900"), "{row}");
        assert!(line.contains("4x never known"), "{line}");
        let two = "2x known from read 200, worst 10.000 at read 200 (2 scrapes)";
        assert!(line.contains(two), "{line}");
        assert!(
            row.ends_with("(window 100 reads at read 300, 3 scrapes)"),
            "{row}"
        );
        assert!(line.ends_with("not met)"), "{line}");
        // The last scrape's known points counted (0.5x, 1x, 2x), 4x not.
        assert_eq!((gaps.known.len(), gaps.unknown), (3, 1));
    }
}
