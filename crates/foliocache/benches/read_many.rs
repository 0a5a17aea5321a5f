//! One thread, random 4 KiB misses: `File::read_many` at queue depth 32
//! against one `File::read_at` at a time, and against `O_DIRECT` reads
//! with no cache: `pread` one at a time, and 32 at a time through the
//! cache's own IO engine (io_uring), the floor at that depth.
//!
//! Reproduce: `cargo bench -p foliocache --bench read_many`
//! (`FOLIOCACHE_BENCH_SIZE=<bytes, or with a K/M/G suffix>` sets the file's
//! size, 512 MiB by default; `-- --test` is a smoke run on 16 MiB).
//!
//! # Setup
//! One file of pseudo-random bytes under `CARGO_TARGET_TMPDIR`, written
//! once and reused while its size is right; a cache of a 64th of it (at
//! least 4 MiB), so nearly every read misses, with readahead off (a random
//! reader's windows are one folio anyway). Each engine reads for a fixed
//! time from its own random offsets; the figures are reads per second and
//! the ratio of batched to one-at-a-time reads, and the user CPU time
//! per read of the whole process (`getrusage`). A plain program rather than
//! a criterion group: an iteration is a device round trip whose time drifts
//! with the host, and what counts is the ratio of two runs side by side.

use std::fs::{self, File as StdFile};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use foliocache::{Cache, Populate, ReadReq, ReadaheadConfig};

const PAGE: u64 = 4096;
const QD: usize = 32;

fn size_from_env(smoke: bool) -> u64 {
    let parse = |s: &str| -> Option<u64> {
        let s = s.trim();
        let (num, mul) = match s.chars().last()? {
            'k' | 'K' => (&s[..s.len() - 1], 1 << 10),
            'm' | 'M' => (&s[..s.len() - 1], 1 << 20),
            'g' | 'G' => (&s[..s.len() - 1], 1 << 30),
            _ => (s, 1),
        };
        num.parse::<u64>().ok().map(|n| n * mul)
    };
    match std::env::var("FOLIOCACHE_BENCH_SIZE") {
        Ok(v) => parse(&v).expect("FOLIOCACHE_BENCH_SIZE: a size"),
        Err(_) if smoke => 16 << 20,
        Err(_) => 512 << 20,
    }
}

/// The data file, written unless one of the right size is there.
fn data_file(size: u64) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("read_many-{size}.bin"));
    if fs::metadata(&path).map(|m| m.len()).ok() == Some(size) {
        return path;
    }
    let mut f = StdFile::create(&path).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut chunk = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        for b in chunk.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.copy_from_slice(&x.to_le_bytes()[..b.len()]);
        }
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n]).unwrap();
        left -= n as u64;
    }
    f.sync_all().unwrap();
    path
}

/// A random page offset below `pages` pages (xorshift).
struct Offsets(u64, u64);

impl Offsets {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % self.1) * PAGE
    }
}

/// The process's user CPU time so far (the IO engine's threads included).
fn user_cpu() -> Duration {
    // SAFETY: getrusage writes the struct it is given, nothing else.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    Duration::new(ru.ru_utime.tv_sec as u64, ru.ru_utime.tv_usec as u32 * 1000)
}

/// Reads per second of `step` (which does `k` reads per call) over
/// `time`, and the user CPU microseconds per read.
fn rate(time: Duration, mut step: impl FnMut() -> usize) -> (f64, f64) {
    let start = Instant::now();
    let cpu = user_cpu();
    let mut reads = 0;
    while start.elapsed() < time {
        reads += step();
    }
    let per_read = (user_cpu() - cpu).as_secs_f64() * 1e6 / reads as f64;
    (reads as f64 / start.elapsed().as_secs_f64(), per_read)
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--test");
    let size = size_from_env(smoke);
    let time = if smoke {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(5)
    };
    let path = data_file(size);
    let pages = size / PAGE;
    let cache = Cache::builder()
        .capacity(((size / 64) as usize).max(4 << 20))
        .populate(Populate::Lazy)
        .readahead(ReadaheadConfig::disabled())
        .build()
        .unwrap();
    let file = cache.open(&path).unwrap();
    println!(
        "read_many bench: {} MiB file, cache {} MiB, IO engine {}",
        size >> 20,
        cache.stats().capacity_bytes >> 20,
        cache.io_engine_name()
    );

    let mut off = Offsets(1, pages);
    let mut buf = vec![0u8; PAGE as usize];
    let sync = rate(time, || {
        file.read_at(&mut buf, off.next()).unwrap();
        1
    });

    let mut bufs = vec![vec![0u8; PAGE as usize]; QD];
    let batched = rate(time, || {
        let mut reqs: Vec<ReadReq<'_>> = bufs
            .iter_mut()
            .map(|b| ReadReq::new(off.next(), b))
            .collect();
        file.read_many(&mut reqs).unwrap();
        for r in &mut reqs {
            assert_eq!(r.result.take().unwrap().unwrap(), PAGE as usize);
        }
        QD
    });

    let direct = StdFile::options()
        .read(true)
        .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
        .open(&path)
        .unwrap();
    let mut aligned = backing::AlignedBuf::zeroed(PAGE as usize).unwrap();
    let pread = rate(time, || {
        direct.read_at(&mut aligned, off.next()).unwrap();
        1
    });
    // The floor at queue depth 32: the same O_DIRECT reads through the
    // IO engine the cache uses (io_uring), 32 at a time, no cache.
    let engine = backing::aio::IoEngine::new(backing::aio::IoEngineConfig::default()).unwrap();
    let raw: Arc<dyn backing::Backing> = Arc::new(
        backing::FileBacking::open(&path, &backing::FileOptions::new().read(true)).unwrap(),
    );
    let mut mem = backing::AlignedBuf::zeroed(QD * PAGE as usize).unwrap();
    let (tx, rx) = mpsc::channel();
    let engine_qd = rate(time, || {
        let ops = mem
            .chunks_mut(PAGE as usize)
            .map(|chunk| {
                // SAFETY: `mem` is neither used nor freed until every
                // callback of this batch ran (the `recv`s below).
                let buf = unsafe { backing::RawBuf::new(chunk.as_mut_ptr(), chunk.len()) }.unwrap();
                let tx = tx.clone();
                backing::aio::ReadOp::new(raw.clone(), off.next(), vec![buf], move |r| {
                    let _ = tx.send(r.is_ok());
                })
            })
            .collect();
        engine.submit(ops);
        for _ in 0..QD {
            assert!(rx.recv().unwrap());
        }
        QD
    });
    println!(
        "  O_DIRECT via the IO engine, queue depth {QD}: {:>9.0} reads/s, {:.2} us user CPU per read",
        engine_qd.0, engine_qd.1
    );
    let s = cache.stats();
    println!(
        "  O_DIRECT pread, one at a time: {:>9.0} reads/s, {:.2} us user CPU per read",
        pread.0, pread.1
    );
    println!(
        "  read_at, one at a time:        {:>9.0} reads/s, {:.2} us user CPU per read",
        sync.0, sync.1
    );
    println!(
        "  read_many, queue depth {QD}:     {:>9.0} reads/s, {:.2} us user CPU per read ({:.2}x read_at)",
        batched.0,
        batched.1,
        batched.0 / sync.0
    );
    println!("  (cache: {} hits, {} misses)", s.hits, s.misses);
}
