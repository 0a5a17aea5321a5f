//! What the miss-ratio curve's estimator (`mrc.rs`, docs/design.md "How
//! big should the cache be") adds to a read: `estimator`, a loop over
//! page reads, each a 4 KiB copy out of a 256 KiB buffer (the least a hit
//! does) shown to the estimator as a hit does (its page's stamp touched
//! and its age's bin counted, `Stats::observe_read`: the key's hash and
//! the gate on every read; the simulations and the stack on the sampled
//! ones), against `bare`, the same loop without the
//! estimator, side by side in one run. A cache of 16 MiB
//! (4,096 pages: the rate is 1 in 16, the highest) and of 1 GiB (1 in
//! 64), reads uniform over four times the capacity in pages.
//!
//! Then `mrc_hit`: a 4 KiB hit through a whole cache (`File::read_at` of a
//! page cached, uniform over a file of 32 MiB in a cache of 64 MiB, the
//! file in memory), the estimator `on` and `off`
//! (`CacheBuilder::hit_ratio_curve`, the two caches side by side), to say
//! what the estimator costs a hit: the target is at most 1 %. Criterion
//! times each in turn; the summary's figures for it come from rounds of
//! the two interleaved (on, off, on, off, ...: a loaded host moves both
//! alike), their median, in wall time and in the reading thread's CPU
//! time (`/proc`'s `schedstat`: on a loaded host the thread's own cost,
//! without the time it waited for a CPU), and the CPU the cache's curve
//! thread spent a hit on the simulations it runs off the hits' path.
//! (The `mrc_read` loop has no cache and so no curve thread: its reads
//! drain the queue themselves, so its `estimator` is the whole cost.)
//!
//! Reproduce: `cargo bench -p foliocache --bench mrc` (`-- --test` is a
//! smoke run). At the end it prints the ns per read of each, the
//! difference and the ratio estimator / bare, from this run (a whole hit
//! through the cache costs more than the copy: `--bench read`), and the
//! hit's with the estimator on and off.

use std::hint::black_box;
use std::time::{Duration, Instant};

use backing::MemBacking;
use foliocache::internals::MrcProbe;
use foliocache::{Cache, File};

mod common;

/// Reads per timed round.
const READS: usize = 1 << 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Variant {
    Bare,
    Estimator,
}

/// Page indexes uniform over `4 * pages` (splitmix64 of a counter).
fn keys(pages: u64) -> Vec<u64> {
    (0..READS as u64)
        .map(|i| {
            let mut z = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) % (4 * pages)
        })
        .collect()
}

/// The buffer the reads copy from, in pages.
const SOURCE_PAGES: u64 = 64;

/// One round: every key read once (a page copied out of `source`),
/// through the estimator or not.
fn round(probe: &MrcProbe, keys: &[u64], source: &[u8], v: Variant) -> Duration {
    let mut page = [0u8; 4096];
    let t = Instant::now();
    for &k in keys {
        let k = black_box(k);
        let at = (k % SOURCE_PAGES) as usize * 4096;
        page.copy_from_slice(&source[at..at + 4096]);
        black_box(&mut page);
        if v == Variant::Estimator {
            probe.read(0x7f00_1234_5000, k, k & 1 == 0);
        }
    }
    t.elapsed()
}

type Means = common::Means<(u64, Variant)>;

fn main() {
    let mut c = common::criterion("mrc");
    let means = Means::default();
    let source = vec![1u8; (SOURCE_PAGES * 4096) as usize];
    let mut g = c.benchmark_group("mrc_read");
    g.throughput(criterion::Throughput::Elements(READS as u64));
    for pages in [4096u64, 262_144] {
        let probe = MrcProbe::new(pages);
        let keys = keys(pages);
        for v in [Variant::Bare, Variant::Estimator] {
            g.bench_function(format!("{v:?}/{pages}pages"), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += round(&probe, &keys, &source, v);
                    }
                    common::record(&means, (pages, v), total, iters * READS as u64);
                    total
                })
            });
        }
    }
    g.finish();
    hit_group(&mut c);
    c.final_summary();

    summary(&means.into_inner());
    hit_summary();
}

/// The caches' capacities (`mrc_hit`): the sample's highest rate (1 in
/// 16) and its lowest (1 in 64); the file read is half of each.
const HIT_CAPACITIES: [u64; 2] = [16 << 20, 64 << 20];

/// A cache of `capacity` bytes with the estimator `on` or off holding the
/// whole of a file of half that (read twice: every later read of it is a
/// hit), and the pages to read (uniform over the file).
fn cached_file(capacity: u64, on: bool) -> (Cache, File, Vec<u64>) {
    let cache = Cache::builder()
        .capacity(capacity as usize)
        .hit_ratio_curve(on)
        .build()
        .expect("a cache");
    let size = capacity / 2;
    let f = cache
        .open_backing(MemBacking::with_data(vec![7u8; size as usize]))
        .expect("a file");
    let mut buf = vec![0u8; 2 << 20];
    // The second pass: every folio's first read (its bytes from below)
    // done by the first.
    for _ in 0..2 {
        for at in (0..size).step_by(buf.len()) {
            f.read_at(&mut buf, at).expect("a read");
        }
    }
    (cache, f, keys(size / 4096 / 4))
}

/// One round of hits: a 4 KiB read at each of `keys` (pages of the file).
fn hits(f: &File, keys: &[u64]) -> Duration {
    let mut page = [0u8; 4096];
    let t = Instant::now();
    for &k in keys {
        f.read_at(&mut page, black_box(k) * 4096).expect("a hit");
        black_box(&mut page);
    }
    t.elapsed()
}

/// `mrc_hit`: a 4 KiB hit with the estimator on and off.
fn hit_group(c: &mut criterion::Criterion) {
    let mut g = c.benchmark_group("mrc_hit");
    g.throughput(criterion::Throughput::Elements(READS as u64));
    for capacity in HIT_CAPACITIES {
        for on in [false, true] {
            let (cache, f, keys) = cached_file(capacity, on);
            let misses = cache.stats().misses;
            let name = format!("{}/{}MiB", if on { "on" } else { "off" }, capacity >> 20);
            g.bench_function(name, |b| {
                b.iter_custom(|iters| (0..iters).map(|_| hits(&f, &keys)).sum())
            });
            assert_eq!(cache.stats().misses, misses, "the bench's reads all hit");
        }
    }
    g.finish();
}

/// Interleaved rounds of [`hits`] with the estimator off and on, per
/// capacity: their median ns per hit, in wall time and in the reading
/// thread's CPU time (a loaded host's other work is not in it), the
/// ratios, and what the cache's curve thread spent per hit on the
/// simulations it ran off the hits' path (`foliocache-curve`).
fn hit_summary() {
    let rounds = if std::env::args().any(|a| a == "--test") {
        2
    } else {
        100
    };
    eprintln!(
        "\n4 KiB hit, median of {rounds} interleaved rounds of {READS} (target: on / off at \
         most 1.01), wall and the reading thread's CPU; the curve thread's CPU a hit:\n\
         {:<9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "capacity", "off ns", "on ns", "on/off", "off cpu", "on cpu", "on/off", "curve"
    );
    for capacity in HIT_CAPACITIES {
        let made = [cached_file(capacity, false), cached_file(capacity, true)];
        let mut wall: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let mut cpu: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let curve0 = cpu_ns(CURVE_THREAD);
        for _ in 0..rounds {
            for (i, (_, f, keys)) in made.iter().enumerate() {
                let c0 = cpu_ns("");
                wall[i].push(hits(f, keys).as_nanos() as f64 / READS as f64);
                cpu[i].push((cpu_ns("") - c0) as f64 / READS as f64);
            }
        }
        let curve = (cpu_ns(CURVE_THREAD) - curve0) as f64 / (rounds * READS) as f64;
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let [off, on] = wall.map(median);
        let [off_cpu, on_cpu] = cpu.map(median);
        eprintln!(
            "{:<9} {off:>8.2} {on:>8.2} {:>8.4} {off_cpu:>8.2} {on_cpu:>8.2} {:>8.4} {curve:>8.2}",
            format!("{}MiB", capacity >> 20),
            on / off,
            on_cpu / off_cpu
        );
    }
}

/// The name (as `/proc` shows it: 15 bytes) of a cache's curve thread.
const CURVE_THREAD: &str = "foliocache-curv";

/// Nanoseconds on a CPU so far (`/proc`'s `schedstat`) of this thread
/// (`name` empty), or of this process's threads named `name`.
fn cpu_ns(name: &str) -> u64 {
    let on_cpu = |dir: &std::path::Path| {
        std::fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    if name.is_empty() {
        return on_cpu("/proc/thread-self".as_ref());
    }
    std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .map(|e| on_cpu(&e.path()))
        .sum()
}

/// The table this run's means give: per capacity, ns per read bare and
/// with the estimator, what it added, and the ratio.
fn summary(means: &std::collections::BTreeMap<(u64, Variant), (Duration, u64)>) {
    let rows: Vec<String> = [4096u64, 262_144]
        .iter()
        .map(|&pages| {
            let bare = common::mean_ns(means, &(pages, Variant::Bare));
            let with = common::mean_ns(means, &(pages, Variant::Estimator));
            let cells = [
                common::ns_text(bare),
                common::ns_text(with),
                common::ns_text(bare.zip(with).map(|(b, e)| e - b)),
                common::ratio_text(bare, with),
            ];
            format!("{pages:<8} {}", cells.map(|c| format!("{c:>9}")).join(" "))
        })
        .collect();
    eprintln!(
        "\nns per read, bare loop and with the estimator, the difference, estimator / bare:\n\
         {:<8} {:>9} {:>9} {:>9} {:>9}\n{}",
        "pages",
        "bare",
        "estimator",
        "added",
        "ratio",
        rows.join("\n")
    );
}
