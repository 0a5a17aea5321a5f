//! Batched asynchronous reads against a loop of synchronous ones: one
//! readahead-sized window of `O_DIRECT` reads, issued
//! - `uring`: as ONE batch through the io_uring engine (`foliocache_backing::aio`,
//!   one `io_uring_enter`), waiting for every callback;
//! - `threads`: as one batch through the thread-pool engine (2 threads
//!   calling `preadv`);
//! - `sync`: as a plain loop of `Backing::read_blocks` calls (one `preadv`
//!   each), the baseline.
//!
//! Windows: 32 ops of 128 KiB (a 4 MiB window of large folios) and 512 ops
//! of 4 KiB (a 2 MiB window of small ones). Throughput is in bytes read.
//!
//! Reproduce: `cd /work/main && CARGO_TARGET_DIR=/work/main/target/h-aio
//! cargo bench -p foliocache-backing --bench aio` (`-- --test` is a smoke run on a
//! 16 MiB file).
//!
//! # Setup and noise
//! One 256 MiB file of pseudo-random bytes under `CARGO_TARGET_TMPDIR`
//! (ext4), written once and reused while its size is right, read with
//! `O_DIRECT`, so the guest's page cache plays no part. Each variant walks
//! the file window by window, wrapping at its end. The host caches the
//! virtio disk, so these "cold" reads mostly measure the IO path, not a
//! device, and the machine is shared: besides criterion's groups (which
//! run the variants one after the other), an interleaved report times one
//! window of each variant in turn, round after round, and prints medians
//! and quartiles with ratios against `sync` from the same rounds.

use std::fs;
use std::hint::black_box;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use foliocache_backing::aio::{EngineKind, IoEngine, IoEngineConfig, ReadOp};
use foliocache_backing::{AlignedBuf, Backing, FileBacking, FileOptions, IoBufMut, RawBuf, BLOCK};

const FULL_SIZE: usize = 256 << 20;
const SMOKE_SIZE: usize = 16 << 20;
const REPRODUCE: &str = "cd /work/main && CARGO_TARGET_DIR=/work/main/target/h-aio \
                         cargo bench -p foliocache-backing --bench aio";
/// Rounds of the interleaved report (each reads one window per variant).
const ROUNDS: usize = 200;

/// A window: `ops` reads of `op_len` bytes, contiguous.
#[derive(Clone, Copy)]
struct Window {
    name: &'static str,
    ops: usize,
    op_len: usize,
}

impl Window {
    fn len(&self) -> usize {
        self.ops * self.op_len
    }
}

const WINDOWS: [Window; 2] = [
    Window {
        name: "window_32x128k",
        ops: 32,
        op_len: 128 << 10,
    },
    Window {
        name: "window_512x4k",
        ops: 512,
        op_len: 4 << 10,
    },
];

/// The bench file: `size` pseudo-random bytes, written once.
fn bench_file(size: usize) -> io::Result<PathBuf> {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("backing-aio-{size}.dat"));
    if fs::metadata(&path).is_ok_and(|m| m.len() == size as u64) {
        return Ok(path);
    }
    let t = Instant::now();
    let f = FileBacking::open(
        &path,
        &FileOptions::new().write(true).create(true).truncate(true),
    )?;
    let chunk = 4 << 20;
    let mut buf = AlignedBuf::zeroed(chunk)?;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for off in (0..size).step_by(chunk) {
        for w in buf.chunks_mut(8) {
            // splitmix64
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            w.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
        }
        let n = chunk.min(size - off);
        f.write_blocks(&[buf.io_buf().split_at(n).unwrap().0], off as u64)?;
    }
    f.sync_all()?;
    eprintln!(
        "wrote {} MiB to {} in {:.2?}",
        size >> 20,
        path.display(),
        t.elapsed()
    );
    Ok(path)
}

/// Counts down completions; the submitter waits for zero.
struct Latch {
    left: Mutex<(usize, usize)>, // (ops left, bytes read)
    cv: Condvar,
}

impl Latch {
    fn new(n: usize) -> Arc<Latch> {
        Arc::new(Latch {
            left: Mutex::new((n, 0)),
            cv: Condvar::new(),
        })
    }

    fn done(&self, res: io::Result<usize>) {
        let n = res.expect("a bench read failed");
        let mut g = self.left.lock().unwrap();
        g.0 -= 1;
        g.1 += n;
        if g.0 == 0 {
            self.cv.notify_one();
        }
    }

    /// Waits for every op; returns the bytes read.
    fn wait(&self) -> usize {
        let mut g = self.left.lock().unwrap();
        while g.0 > 0 {
            g = self.cv.wait(g).unwrap();
        }
        g.1
    }
}

/// One reader: a way to read a window, and where it is in the file.
struct Reader {
    name: &'static str,
    engine: Option<IoEngine>,
    next: usize,
}

struct Setup {
    file: Arc<dyn Backing>,
    size: usize,
    /// Memory for one window (the largest), faulted in once.
    mem: AlignedBuf,
}

impl Reader {
    /// Reads the next window; returns the bytes read.
    fn read_window(&mut self, s: &mut Setup, w: Window) -> usize {
        let off = if self.next + w.len() > s.size {
            0
        } else {
            self.next
        };
        self.next = off + w.len();
        match &self.engine {
            Some(engine) => {
                let latch = Latch::new(w.ops);
                let ops = s.mem[..w.len()]
                    .chunks_mut(w.op_len)
                    .enumerate()
                    .map(|(i, c)| {
                        // SAFETY: `s.mem` is borrowed mutably for this whole
                        // call and nothing else touches it until every
                        // callback ran (`latch.wait()` below).
                        let buf = unsafe { RawBuf::new(c.as_mut_ptr(), c.len()) }
                            .expect("aligned window memory");
                        let latch = latch.clone();
                        ReadOp::new(
                            s.file.clone(),
                            (off + i * w.op_len) as u64,
                            vec![buf],
                            move |res| latch.done(res),
                        )
                    })
                    .collect();
                engine.submit(ops);
                latch.wait()
            }
            None => {
                let mut total = 0;
                for (i, c) in s.mem[..w.len()].chunks_mut(w.op_len).enumerate() {
                    let buf = IoBufMut::new(c).expect("aligned window memory");
                    total += s
                        .file
                        .read_blocks(&mut [buf], (off + i * w.op_len) as u64)
                        .expect("a bench read failed");
                }
                total
            }
        }
    }
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Times one window of each reader in turn, `rounds` times, and prints
/// the quartiles and the ratio of medians against `sync` (the last).
fn interleaved(readers: &mut [Reader], s: &mut Setup, w: Window, rounds: usize) {
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(rounds); readers.len()];
    for r in 0..rounds {
        // Rotate the order so no variant always runs first.
        for k in 0..readers.len() {
            let i = (r + k) % readers.len();
            let t = Instant::now();
            let n = readers[i].read_window(s, w);
            times[i].push(t.elapsed());
            assert_eq!(n, w.len());
        }
    }
    let mib = w.len() as f64 / (1 << 20) as f64;
    let medians: Vec<Duration> = times
        .iter_mut()
        .map(|t| {
            t.sort();
            quantile(t, 0.5)
        })
        .collect();
    let base = medians[medians.len() - 1];
    println!(
        "\ninterleaved, {} ({} x {} KiB), {rounds} rounds:",
        w.name,
        w.ops,
        w.op_len >> 10
    );
    println!(
        "  {:<10} {:>10} {:>10} {:>10} {:>10} {:>8}",
        "reader", "p25 us", "p50 us", "p75 us", "MiB/s p50", "x sync"
    );
    for (reader, t) in readers.iter().zip(&times) {
        let p50 = quantile(t, 0.5);
        println!(
            "  {:<10} {:>10.0} {:>10.0} {:>10.0} {:>10.0} {:>8.2}",
            reader.name,
            quantile(t, 0.25).as_secs_f64() * 1e6,
            p50.as_secs_f64() * 1e6,
            quantile(t, 0.75).as_secs_f64() * 1e6,
            mib / p50.as_secs_f64(),
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
    eprintln!("reproduce: {REPRODUCE}");
    let size = if smoke { SMOKE_SIZE } else { FULL_SIZE };
    let path = bench_file(size).expect("creating the bench file");
    let file = FileBacking::open(&path, &FileOptions::new()).expect("opening the bench file");
    assert!(
        file.is_direct(),
        "the bench wants O_DIRECT: {}",
        file.info()
    );
    let max = WINDOWS.iter().map(Window::len).max().unwrap_or(BLOCK);
    let mut mem = AlignedBuf::zeroed(max).expect("window memory");
    mem.fill(1); // fault it in
    let mut setup = Setup {
        file: Arc::new(file),
        size,
        mem,
    };

    let uring = IoEngine::new(IoEngineConfig::new().kind(EngineKind::Uring));
    let uring = match uring {
        Ok(e) => Some(e),
        Err(e) => {
            eprintln!("io_uring is not available ({e}): its variant is left out");
            None
        }
    };
    let threads = IoEngine::new(IoEngineConfig::new().kind(EngineKind::Threads))
        .expect("starting the threads engine");
    let mut readers: Vec<Reader> = Vec::new();
    if let Some(u) = uring {
        eprintln!("engine: {}", u.name());
        readers.push(Reader {
            name: "uring",
            engine: Some(u),
            next: 0,
        });
    }
    eprintln!("engine: {}", threads.name());
    readers.push(Reader {
        name: "threads",
        engine: Some(threads),
        next: size / 3 / BLOCK * BLOCK,
    });
    readers.push(Reader {
        name: "sync",
        engine: None,
        next: 2 * size / 3 / BLOCK * BLOCK,
    });

    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    for w in WINDOWS {
        let mut g = c.benchmark_group(w.name);
        g.throughput(Throughput::Bytes(w.len() as u64));
        for reader in readers.iter_mut() {
            let name = reader.name;
            g.bench_function(name, |b| {
                b.iter(|| black_box(reader.read_window(&mut setup, w)))
            });
        }
        g.finish();
    }
    c.final_summary();

    if smoke {
        // One round, to check the report runs.
        for w in WINDOWS {
            interleaved(&mut readers, &mut setup, w, 1);
        }
    } else {
        for w in WINDOWS {
            interleaved(&mut readers, &mut setup, w, ROUNDS);
        }
        for r in &readers {
            if let Some(e) = &r.engine {
                eprintln!("{}: {:?}", r.name, e.stats());
            }
        }
    }
}
