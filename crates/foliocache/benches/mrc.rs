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
//! Reproduce: `cargo bench -p foliocache --bench mrc` (`-- --test` is a
//! smoke run). At the end it prints the ns per read of each, the
//! difference and the ratio estimator / bare, from this run (a whole hit
//! through the cache costs more than the copy: `--bench read`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use foliocache::internals::MrcProbe;

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
    c.final_summary();

    summary(&means.into_inner());
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
