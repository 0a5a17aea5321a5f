//! One small durable commit, the IO of a database transaction that
//! changes a few pages and syncs (redb's individual writes,
//! `docs/redb.md`): 8 scattered 4 KiB page writes in 6 runs (a header
//! page, a run of 3 pages where the file's tail is reused, 4 pages at
//! random), then a data sync. Four ways, each on its own pre-written
//! 16 MiB file, side by side in one run:
//! - `kernel`: a buffered `pwrite` per page and `fdatasync`: the kernel's
//!   page cache, the contender (`fdatasync` writes the pages back and
//!   flushes the device's cache in one call);
//! - `engine`: the same runs written with `O_DIRECT` in one batch through
//!   foliocache's IO engine (`IoEngine::write_all`: the calling thread's
//!   own io_uring), then `fdatasync` for the flush: the IO any cache over
//!   `O_DIRECT` files has to do for the commit, with no cache at all, the
//!   limit of `foliocache`;
//! - `foliocache`: `File::write_all_at` per page into a cache that holds
//!   the file, and `File::sync_data` (the dirty pages written back
//!   through the same engine, then `fdatasync`);
//! - `direct`: one synchronous `O_DIRECT` `pwrite` per run and
//!   `fdatasync`: what a database does over `O_DIRECT` without a cache
//!   (redb's `FileBackend` on such a file).
//!
//! The interleaved report times blocks of commits of each way in turn,
//! round after round, and prints the quartiles of a commit's wall time,
//! the calling thread's CPU per commit (`getrusage(RUSAGE_THREAD)`, user
//! and system) and the ratio of medians against `kernel` from the same
//! rounds. The wall time less the CPU is the commit's wait: the device,
//! and the wakeups between its completions and the thread. The host
//! caches a virtio disk, so the device is fast and noisy: read ratios
//! from one run.
//!
//! Reproduce: `cargo bench -p foliocache --bench commit` (`-- --test` is a
//! smoke run; `-- interleaved` runs the interleaved report alone, and
//! ways named after it, `-- interleaved foliocache engine`, alone too,
//! the first of them the base of the ratios).

use std::fs;
use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use backing::aio::{EngineKind, IoEngine, IoEngineConfig, WriteReq};
use backing::{AlignedBuf, Backing, FileBacking, FileOptions};
use criterion::Criterion;
use foliocache::{Cache, File, Populate};

const PAGE: u64 = 4096;
/// Each way's file.
const FILE: u64 = 16 << 20;
const PAGES: u64 = FILE / PAGE;
/// Runs of one commit: (first page, pages).
type Commit = [(u64, u64); 6];
/// Pages one commit writes.
const COMMIT_PAGES: u64 = 8;
/// The interleaved report: rounds, and commits of each way per round.
const ROUNDS: usize = 60;
const BLOCK: usize = 50;

/// `n` commits: page 0 (a header), 3 pages at a tail that moves through
/// the file's second half, and 4 pages drawn from its first half
/// (xorshift64, fixed seed: every way writes the same pages).
fn commits(n: usize) -> Vec<Commit> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut tail = PAGES / 2;
    (0..n)
        .map(|_| {
            tail = if tail + 6 > PAGES {
                PAGES / 2
            } else {
                tail + 3
            };
            let mut c = [(0, 1), (tail, 3), (0, 1), (0, 1), (0, 1), (0, 1)];
            for run in &mut c[2..] {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                run.0 = 1 + x % (PAGES / 2 - 1);
            }
            c
        })
        .collect()
}

fn path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("commit-bench-{name}-{}", std::process::id()))
}

/// One way of committing, and its file.
enum Way {
    Kernel(fs::File),
    Engine(Arc<dyn Backing>, IoEngine),
    Folio(File),
    Direct(Arc<dyn Backing>),
}

impl Way {
    fn name(&self) -> &'static str {
        match self {
            Way::Kernel(_) => "kernel",
            Way::Engine(..) => "engine",
            Way::Folio(_) => "foliocache",
            Way::Direct(_) => "direct",
        }
    }

    /// Writes the commit's runs from `data` (aligned, at least 3 pages)
    /// and syncs.
    fn commit(&self, c: &Commit, data: &AlignedBuf) {
        let page = &data[..PAGE as usize];
        match self {
            Way::Kernel(f) => {
                for at in page_offsets(c) {
                    f.write_all_at(page, at).expect("pwrite");
                }
                f.sync_data().expect("fdatasync");
            }
            Way::Engine(b, engine) => {
                let bufs: Vec<[backing::IoBuf<'_>; 1]> =
                    c.iter().map(|&(_, n)| [split(data, n)]).collect();
                let reqs: Vec<WriteReq<'_>> = c
                    .iter()
                    .zip(&bufs)
                    .map(|(&(first, _), bufs)| WriteReq {
                        backing: b,
                        offset: first * PAGE,
                        bufs,
                    })
                    .collect();
                for r in engine.write_all(&reqs) {
                    r.expect("engine write");
                }
                b.sync_data().expect("fdatasync");
            }
            Way::Folio(f) => {
                for at in page_offsets(c) {
                    f.write_all_at(page, at).expect("write");
                }
                f.sync_data().expect("sync_data");
            }
            Way::Direct(b) => {
                for &(first, n) in c {
                    b.write_blocks(&[split(data, n)], first * PAGE)
                        .expect("O_DIRECT pwrite");
                }
                b.sync_data().expect("fdatasync");
            }
        }
    }
}

/// The offset of each page of the commit, page by page (as a database
/// writes its pages one call each).
fn page_offsets(c: &Commit) -> impl Iterator<Item = u64> + '_ {
    c.iter()
        .flat_map(|&(first, n)| (first..first + n).map(|p| p * PAGE))
}

/// The first `pages` pages of `data`.
fn split(data: &AlignedBuf, pages: u64) -> backing::IoBuf<'_> {
    data.io_buf()
        .split_at((pages * PAGE) as usize)
        .expect("the commit's data holds its longest run")
        .0
}

/// A file of `FILE` bytes, written and synced, opened with `O_DIRECT`.
fn direct_file(name: &str, data: &AlignedBuf) -> Arc<dyn Backing> {
    let opts = FileOptions::new().write(true).create(true).truncate(true);
    let f = FileBacking::open(path(name), &opts).expect("opening a bench file");
    assert!(f.is_direct(), "the bench wants O_DIRECT: {}", f.info());
    for off in (0..FILE).step_by(data.len()) {
        f.write_blocks(&[data.io_buf()], off).expect("first write");
    }
    f.sync_all().expect("sync");
    Arc::new(f)
}

/// The four ways, each on its own file; the cache holds `foliocache`'s.
fn ways(data: &AlignedBuf) -> (Vec<Way>, Cache) {
    let k = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path("kernel"))
        .expect("opening the kernel's file");
    // Page by page, as a database writes its pages: the page cache then
    // holds the file in 4 KiB folios, as it holds redb's (ext4 gives a
    // larger write a larger folio, and every later 4 KiB write into it
    // costs more: its writeback walks the folio's blocks).
    for off in (0..FILE).step_by(PAGE as usize) {
        k.write_all_at(&data[..PAGE as usize], off)
            .expect("first write");
    }
    k.sync_all().expect("sync");
    let engine = IoEngine::new(IoEngineConfig::new().kind(EngineKind::Uring))
        .expect("the io_uring engine (the bench measures it)");
    let cache = Cache::builder()
        .capacity(4 * FILE as usize)
        .populate(Populate::Eager)
        .build()
        .expect("cache");
    direct_file("folio", data);
    let f = cache
        .open_options()
        .read(true)
        .write(true)
        .open(path("folio"))
        .expect("opening through the cache");
    let mut page = vec![0u8; PAGE as usize];
    for off in (0..FILE).step_by(PAGE as usize) {
        f.read_exact_at(&mut page, off).expect("caching the file");
    }
    let ways = vec![
        Way::Kernel(k),
        Way::Engine(direct_file("engine", data), engine),
        Way::Folio(f),
        Way::Direct(direct_file("direct", data)),
    ];
    (ways, cache)
}

/// The calling thread's CPU time so far (user and system).
fn thread_cpu() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    let ru = getrusage(UsageWho::RUSAGE_THREAD).expect("getrusage");
    let t =
        |v: nix::sys::time::TimeVal| Duration::new(v.tv_sec() as u64, v.tv_usec() as u32 * 1000);
    t(ru.user_time()) + t(ru.system_time())
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Runs `block` commits of each way in turn, `rounds` times (the order
/// rotating), and prints each way's quartiles, CPU per commit and ratio
/// of medians against the first (`kernel`, unless ways were chosen).
fn interleaved(ways: &[Way], data: &AlignedBuf, rounds: usize, block: usize) {
    let all = commits(rounds * block);
    let mut wall: Vec<Vec<Duration>> = vec![Vec::with_capacity(all.len()); ways.len()];
    let mut cpu = vec![Duration::ZERO; ways.len()];
    for r in 0..rounds {
        let these = &all[r * block..(r + 1) * block];
        for k in 0..ways.len() {
            let i = (r + k) % ways.len();
            let c0 = thread_cpu();
            for c in these {
                let t = Instant::now();
                ways[i].commit(c, data);
                wall[i].push(t.elapsed());
            }
            cpu[i] += thread_cpu() - c0;
        }
    }
    for w in &mut wall {
        w.sort();
    }
    let base = quantile(&wall[0], 0.5);
    println!(
        "\ninterleaved: {} commits of {COMMIT_PAGES} pages in {} runs per way, {rounds} rounds:",
        all.len(),
        all[0].len()
    );
    println!(
        "  {:<11} {:>8} {:>8} {:>8} {:>10} {:>10} {:>9}",
        "way", "p25 us", "p50 us", "p75 us", "cpu us", "wait us", "x first"
    );
    for ((way, w), cpu) in ways.iter().zip(&wall).zip(&cpu) {
        let p50 = quantile(w, 0.5);
        let mean = w.iter().sum::<Duration>() / w.len() as u32;
        let cpu = *cpu / w.len() as u32;
        println!(
            "  {:<11} {:>8.0} {:>8.0} {:>8.0} {:>10.1} {:>10.1} {:>9.2}",
            way.name(),
            quantile(w, 0.25).as_secs_f64() * 1e6,
            p50.as_secs_f64() * 1e6,
            quantile(w, 0.75).as_secs_f64() * 1e6,
            cpu.as_secs_f64() * 1e6,
            mean.saturating_sub(cpu).as_secs_f64() * 1e6,
            base.as_secs_f64() / p50.as_secs_f64(),
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    // Criterion smoke-runs with `--test`, or without `--bench` (`cargo test
    // --benches`); `--list` runs nothing.
    let smoke = has("--test") || !has("--bench") || has("--list");
    let mut data = AlignedBuf::zeroed(1 << 20).expect("the commit's data");
    data.fill(0x5a);
    let (mut ways, cache) = ways(&data);
    // Ways named on the command line run alone (for a profiler).
    if ways.iter().any(|w| has(w.name())) {
        ways.retain(|w| has(w.name()));
    }
    if !has("interleaved") {
        let mut c = Criterion::default()
            .sample_size(20)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(2))
            .configure_from_args();
        let all = commits(4096);
        let mut g = c.benchmark_group("commit_8x4k");
        for way in &ways {
            let mut i = 0;
            g.bench_function(way.name(), |b| {
                b.iter(|| {
                    i = (i + 1) % all.len();
                    way.commit(black_box(&all[i]), &data)
                })
            });
        }
        g.finish();
        c.final_summary();
    }
    if smoke {
        interleaved(&ways, &data, 1, 2);
    } else {
        interleaved(&ways, &data, ROUNDS, BLOCK);
        eprintln!("foliocache: {:?}", cache.stats());
    }
    drop(ways);
    for name in ["kernel", "engine", "folio", "direct"] {
        let _ = fs::remove_file(path(name));
    }
}
