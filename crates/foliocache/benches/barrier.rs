//! What the atomic read-modify-writes of a hit cost beside its copy: a
//! 4 KiB copy alone, and with one, three and four locked operations per
//! copy, placed as a hit places them (the epoch pin of its lookup and the
//! folio reference before the copy, the reference's drop after it, and a
//! counter's add, which a hit no longer makes with a lock: its counter
//! shard is its thread's own).
//!
//! The question it answers (docs/design.md, "What a hit costs"): is the
//! locked instruction itself what a reference costs a hit? On x86 one
//! waits for the thread's earlier stores to drain, and after a copy those
//! are the copy's 64 lines.
//!
//! Reproduce: `cargo bench -p foliocache --bench barrier`
//! (`-- --test` is a smoke run on a 16 MiB source).
//!
//! # Setup
//! A 512 MiB source (past the CPU caches: one host of ours has a 260 MiB
//! L3), read 4 KiB at a time into one page-aligned destination, walking
//! it (`seq`) or jumping by a prime number of pages (`rand`); each locked
//! operation is a `fetch_add` on a counter line of the page read, one line
//! per page, as a folio descriptor's would be. One iteration is [`BATCH`]
//! copies.

// The std atomics measured are the subject here, not a protocol the loom
// models would check.
#![allow(clippy::disallowed_types)]

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{Criterion, Throughput};

/// Copies per criterion iteration.
const BATCH: usize = 256;
const PAGE: usize = 4096;
const SOURCE: usize = 512 << 20;
const SMOKE_SOURCE: usize = 16 << 20;

/// A counter alone on its cache line, as a descriptor's count would be.
#[repr(align(128))]
struct Line(AtomicU64);

/// Page-aligned destination.
#[repr(align(4096))]
struct Dst([u8; PAGE]);

/// `BATCH` copies from `pages` (walked from `*at` by `stride`), each with
/// `before` locked adds before the copy and `after` after it.
fn batch(
    src: &[u8],
    dst: &mut Dst,
    lines: &[Line],
    at: &mut usize,
    stride: usize,
    (before, after): (usize, usize),
) {
    let pages = src.len() / PAGE;
    for _ in 0..BATCH {
        let line = &lines[*at];
        for _ in 0..before {
            line.0.fetch_add(1, Ordering::Relaxed);
        }
        dst.0.copy_from_slice(&src[*at * PAGE..(*at + 1) * PAGE]);
        black_box(&mut dst.0);
        for _ in 0..after {
            line.0.fetch_add(1, Ordering::Relaxed);
        }
        *at = (*at + stride) % pages;
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    // Criterion smoke-runs with `--test`, or without `--bench`.
    let smoke = has("--test") || !has("--bench") || has("--list");
    let size = if smoke { SMOKE_SOURCE } else { SOURCE };
    let src: Vec<u8> = (0..size).map(|i| (i * 131 % 251) as u8).collect();
    let lines: Vec<Line> = (0..size / PAGE).map(|_| Line(AtomicU64::new(0))).collect();
    let mut dst = Box::new(Dst([0; PAGE]));
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
        .configure_from_args();
    // (name, locked adds before the copy, after it): a hit today is the
    // pin and the reference before, the reference's drop after.
    let shapes = [
        ("copy", (0, 0)),
        ("pin+copy", (1, 0)),
        ("pin+get+copy+put", (2, 1)),
        ("pin+get+copy+put+count", (2, 2)),
    ];
    for (group, stride) in [("barrier_4k_seq", 1), ("barrier_4k_rand", 7919)] {
        let mut g = c.benchmark_group(group);
        g.throughput(Throughput::Bytes((BATCH * PAGE) as u64));
        for (name, shape) in shapes {
            let mut at = 0;
            g.bench_function(name, |b| {
                b.iter(|| batch(&src, &mut dst, &lines, &mut at, stride, shape))
            });
        }
        g.finish();
    }
    c.final_summary();
    black_box(
        lines
            .iter()
            .map(|l| l.0.load(Ordering::Relaxed))
            .sum::<u64>(),
    );
}
