//! Buffered overwrites of a cached file: foliocache `File::write_at`
//! against the kernel's `pwrite` into its page cache, no sync: the cost of
//! the write path itself (lookup, lock, copy in, dirty marking), the
//! write-side twin of the `read` bench's hits.
//!
//! Reproduce: `cargo bench -p foliocache --bench write`.
//!
//! One file of 64 MiB under `CARGO_TARGET_TMPDIR`, written once; the
//! foliocache engine opens it through a 256 MiB cache (faulted in at build)
//! with a dirty limit above the file's size, and writes every page once
//! before measuring, so its folios are present and the measured writes
//! find them (no allocation, no read, no throttle; the dirty marks are set
//! already after the first pass, as the kernel's are on a dirty page). The
//! kernel's file is a normal buffered one, written once before too, so its
//! page cache holds the file dirty or clean. Workloads: 4 KiB and 64 KiB
//! writes walking the file, wrapping at its end. Both engines run in the
//! same process; throughput is in bytes written.
//!
//! `copy_bulk_256k` and `copy_bulk_2048k`: the bulk class of foliocache's
//! copies (`copy::copy_to_fresh` of `copy::BULK` bytes or more: new folios
//! a write fills whole), every routine that may copy shared bytes
//! (`copy::routines`) side by side, copying 256 KiB or 2 MiB from one
//! source buffer (a write's data, in the CPU caches) into a 512 MiB region
//! walked in order and faulted in first: each copy's destination was last
//! touched a whole walk before, out of the caches, as a fresh folio's
//! memory is. Throughput is in bytes copied. `cargo bench -p foliocache
//! --bench write -- copy_bulk` runs these alone (what decided the bulk
//! class's routine: `docs/measurements/2026-11-26-copy-routine.md`).

use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{Criterion, Throughput};
use foliocache::internals::copy;
use foliocache::{Cache, Populate};

const FILE: u64 = 64 << 20;

fn path(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    dir.join(format!("write-bench-{name}-{}", std::process::id()))
}

fn bench(c: &mut Criterion) {
    let smoke = std::env::args().any(|a| a == "--test");
    let data = vec![0x5au8; 64 << 10];
    let cache = Cache::builder()
        .capacity(256 << 20)
        .dirty_limit(128 << 20)
        .dirty_background(128 << 20)
        .populate(Populate::Eager)
        .build()
        .expect("cache");
    let fc_path = path("fc");
    let fc = cache
        .open_options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&fc_path)
        .expect("open through the cache");
    let k_path = path("kernel");
    let kernel = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&k_path)
        .expect("open for the kernel");
    for off in (0..FILE).step_by(data.len()) {
        fc.write_at(&data, off).expect("first pass");
        kernel.write_all_at(&data, off).expect("first pass");
    }
    for bs in [4096usize, 64 << 10] {
        let mut g = c.benchmark_group(format!("write_{}k", bs / 1024));
        g.throughput(Throughput::Bytes(bs as u64));
        if !smoke {
            g.measurement_time(Duration::from_secs(4));
        }
        let buf = &data[..bs];
        let mut off = 0u64;
        g.bench_function("foliocache", |b| {
            b.iter(|| {
                fc.write_at(black_box(buf), off).expect("write");
                off = (off + bs as u64) % FILE;
            })
        });
        let mut off = 0u64;
        g.bench_function("kernel_pwrite", |b| {
            b.iter(|| {
                kernel.write_all_at(black_box(buf), off).expect("write");
                off = (off + bs as u64) % FILE;
            })
        });
        g.finish();
    }
    let s = cache.stats();
    assert_eq!(s.io_reads, 0, "the measured writes read nothing: {s:?}");
    drop(fc);
    let _ = std::fs::remove_file(&fc_path);
    let _ = std::fs::remove_file(&k_path);
}

/// The `copy_bulk_*` groups (see the module docs).
fn bulk_copy(c: &mut Criterion) {
    const REGION: usize = 512 << 20;
    const PAGE: usize = 4096;
    let smoke = std::env::args().any(|a| a == "--test");
    let src: Vec<u8> = (0..2usize << 20).map(|i| (i * 7 + 1) as u8).collect();
    // Written whole: every page faulted in before anything is timed.
    let mut region = vec![0x5au8; REGION + PAGE];
    let at = region.as_ptr().align_offset(PAGE);
    let dst = region[at..].as_mut_ptr();
    for len in [256usize << 10, 2 << 20] {
        let mut g = c.benchmark_group(format!("copy_bulk_{}k", len >> 10));
        g.throughput(Throughput::Bytes(len as u64));
        if !smoke {
            g.measurement_time(Duration::from_secs(3));
        }
        for (name, f) in copy::routines() {
            let mut off = 0;
            g.bench_function(name, |b| {
                b.iter(|| {
                    // SAFETY: `src` has `len` bytes; `dst + off` has `len`
                    // bytes inside `region` (`off + len <= REGION`), a
                    // distinct buffer; nothing else accesses either.
                    unsafe { f(src.as_ptr(), dst.add(off), len) };
                    off = (off + len) % REGION;
                })
            });
        }
        g.finish();
    }
    black_box(&region);
}

criterion::criterion_group!(benches, bench, bulk_copy);
criterion::criterion_main!(benches);
