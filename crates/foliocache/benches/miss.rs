//! The CPU of a cache miss, with the device taken out: random 4 KiB reads
//! of a file 256 times the cache, so nearly every read misses, from a
//! backing that "reads" a block by writing its number into the block's
//! first 8 bytes and nothing else. A device's DMA costs the CPU nothing;
//! here the rest of each block keeps whatever the memory held, so the copy
//! out of the cache reads memory the CPU has not just written, as after a
//! device read. Side by side in one run:
//! - `backing`: the backing's `read_blocks` into the reader's buffer, the
//!   limit: what an `O_DIRECT` read costs in user space here;
//! - `foliocache`: `File::read_at` through the cache, each read a miss
//!   that allocates a folio (evicting one, leaving a shadow), inserts it,
//!   reads into it and copies out; readahead as built (a random reader's
//!   window is the one folio it asked for).
//!
//! The difference of the two is foliocache's own cost per miss, the
//! figure that `foliocache bench --scenario larger` reports as CPU per read
//! over `direct`'s; here it is free of the device's noise.
//!
//! `miss_4k_2_threads` does the same from two threads sharing the file,
//! each with its own offsets, and reports the process's CPU time (user and
//! system, `getrusage`) per miss rather than the wall time: what the
//! misses cost when two CPUs take the cache's locks at once (index,
//! LRU, arena), as the scenario's threads do.
//!
//! Reproduce: `cargo bench -p foliocache --bench miss` (`-- --test` is a
//! smoke run). Under `valgrind --tool=callgrind` with `-- --profile-time 5`
//! it counts the instructions of a miss.

use std::hint::black_box;
use std::io;
use std::time::Duration;

use backing::{Backing, BackingInfo, DataPath, IoBuf, IoBufMut};
use criterion::{Criterion, Throughput};
use foliocache::{Cache, Populate};

const PAGE: u64 = 4096;
/// The synthetic file: 4 GiB, never stored.
const FILE: u64 = 4 << 30;
/// The cache: a 256th of the file.
const CAPACITY: usize = 16 << 20;

/// A read-only file of `FILE` bytes whose blocks start with their number
/// (8 bytes, little-endian); the rest of a block reads as whatever the
/// buffer held.
struct Synthetic;

impl Backing for Synthetic {
    fn len(&self) -> io::Result<u64> {
        Ok(FILE)
    }

    fn read_blocks(&self, bufs: &mut [IoBufMut<'_>], offset: u64) -> io::Result<usize> {
        let mut pos = offset;
        for b in bufs.iter_mut() {
            for block in b.chunks_mut(PAGE as usize) {
                block[..8].copy_from_slice(&(pos / PAGE).to_le_bytes());
                pos += PAGE;
            }
        }
        Ok((pos - offset) as usize)
    }

    fn write_blocks(&self, _bufs: &[IoBuf<'_>], _offset: u64) -> io::Result<usize> {
        Err(io::ErrorKind::Unsupported.into())
    }

    fn set_len(&self, _len: u64) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }

    fn punch_hole(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }

    fn info(&self) -> BackingInfo {
        BackingInfo::new(
            "synthetic",
            DataPath::Memory,
            "none",
            "each block's number in its first 8 bytes, written on read",
        )
    }
}

/// A random page offset of the file (xorshift).
struct Offsets(u64);

impl Offsets {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % (FILE / PAGE)) * PAGE
    }
}

fn bench(c: &mut Criterion) {
    let cache = Cache::builder()
        .capacity(CAPACITY)
        .populate(Populate::Eager)
        .build()
        .unwrap();
    let file = cache.open_backing(Synthetic).unwrap();
    let mut buf = backing::AlignedBuf::zeroed(PAGE as usize).unwrap();

    let mut g = c.benchmark_group("miss_4k");
    g.throughput(Throughput::Bytes(PAGE));
    let mut off = Offsets(1);
    g.bench_function("backing", |b| {
        b.iter(|| {
            let o = off.next();
            let n = Synthetic
                .read_blocks(&mut [buf.io_buf_mut()], black_box(o))
                .unwrap();
            assert_eq!(buf[..8], (o / PAGE).to_le_bytes());
            n
        })
    });
    let mut off = Offsets(2);
    g.bench_function("foliocache", |b| {
        b.iter(|| {
            let o = off.next();
            let n = file.read_at(&mut buf, black_box(o)).unwrap();
            assert_eq!(buf[..8], (o / PAGE).to_le_bytes());
            n
        })
    });
    g.finish();

    let mut g = c.benchmark_group("miss_4k_2_threads");
    g.throughput(Throughput::Bytes(PAGE));
    g.bench_function("backing", |b| {
        b.iter_custom(|iters| {
            on_threads(iters, |off, buf| {
                let o = off.next();
                Synthetic
                    .read_blocks(&mut [buf.io_buf_mut()], black_box(o))
                    .unwrap();
                assert_eq!(buf[..8], (o / PAGE).to_le_bytes());
            })
        })
    });
    g.bench_function("foliocache", |b| {
        b.iter_custom(|iters| {
            on_threads(iters, |off, buf| {
                let o = off.next();
                file.read_at(buf, black_box(o)).unwrap();
                assert_eq!(buf[..8], (o / PAGE).to_le_bytes());
            })
        })
    });
    g.finish();
    let s = cache.stats();
    println!(
        "miss_4k: foliocache {} hits, {} misses, {} evictions",
        s.hits, s.misses, s.evictions
    );
}

/// Runs `read` `iters` times in all from [`THREADS`] threads, each with
/// its own offsets and buffer, and returns the process's CPU time (user
/// and system) the runs took.
fn on_threads(
    iters: u64,
    read: impl Fn(&mut Offsets, &mut backing::AlignedBuf) + Sync,
) -> Duration {
    let before = process_cpu();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let read = &read;
            s.spawn(move || {
                let mut off = Offsets(0x9e37_79b9 + t);
                let mut buf = backing::AlignedBuf::zeroed(PAGE as usize).unwrap();
                for _ in 0..iters.div_ceil(THREADS) {
                    read(&mut off, &mut buf);
                }
            });
        }
    });
    process_cpu().saturating_sub(before)
}

/// Threads of the two-thread group.
const THREADS: u64 = 2;

/// The CPU time this process has used, user and system.
fn process_cpu() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    let ru = getrusage(UsageWho::RUSAGE_SELF).unwrap();
    let t =
        |v: nix::sys::time::TimeVal| Duration::new(v.tv_sec() as u64, v.tv_usec() as u32 * 1000);
    t(ru.user_time()) + t(ru.system_time())
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
