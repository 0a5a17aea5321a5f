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

use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{Criterion, Throughput};
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

criterion::criterion_group!(benches, bench);
criterion::criterion_main!(benches);
