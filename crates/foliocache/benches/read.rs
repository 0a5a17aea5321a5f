//! Cached read throughput: foliocache `File::read_at` against the kernel
//! page cache, read two ways: buffered `pread` (`std`'s `FileExt::read_at`
//! on a normally opened file) and a copy out of a `MAP_SHARED` mapping; and
//! against the floor of any cache, `bare_copy`: the same copy routine
//! ([`foliocache::internals::copy`]) from the file's bytes held in arena memory of
//! the same kind, with no lookup at all; and `indexed_copy`: that copy with
//! its block found by a walk of an `xarray` index of the mapping's shape
//! (one order-9 entry per 2 MiB block) under an epoch pin, as a hit finds
//! its folio: what the index alone costs, with no descriptor, no check and
//! no count. foliocache's distance from `indexed_copy` is the rest of its
//! hit.
//!
//! Reproduce: `cargo bench -p foliocache --bench read`
//! (`FOLIOCACHE_BENCH_SIZE=<bytes, or with a K/M/G suffix>` shrinks the
//! file; `-- --test` is a smoke run on 16 MiB unless the variable says
//! otherwise).
//!
//! # Setup
//! One file of 1 GiB of pseudo-random bytes under `CARGO_TARGET_TMPDIR`
//! (ext4 here), written once and reused while its size is right. The cache
//! has 1.25x the file's size, is populated eagerly (its
//! [`CacheStats::populate_time`](foliocache::CacheStats) is printed at start:
//! first touch of guest memory costs 3-13 us per page on our VMs, which a
//! hit never pays) and is warmed by one pass of 2 MiB reads, so it holds the
//! whole file in 2 MiB folios. The kernel page cache is warmed by a full
//! buffered pass right before each kernel measurement (an idle-memory
//! reclaimer evicts page cache untouched for 60 s), and the mapping is
//! pre-faulted then too, so the mmap figure is copies, not page faults.
//! Every measurement reads cached data only: the bench asserts that the
//! foliocache run did no IO, and warns if `mincore` finds a page of the file
//! missing from the kernel page cache after a warming pass.
//!
//! # Workloads (one criterion group each, every reader in it)
//! - `read_4k_seq`: 4 KiB reads walking the file, wrapping at its end;
//! - `read_4k_rand`: 4 KiB reads at uniformly random page offsets;
//! - `read_64k_seq`: 64 KiB reads walking the file.
//!
//! each into a page-aligned destination (`aligned`) and into one 8 bytes
//! past a page boundary (`dst+8`): callers' buffers are not always aligned,
//! and glibc's `memcpy` can be much slower when
//! source and destination disagree in alignment on some CPUs (on others,
//! for copies out of DRAM, the misaligned case is the faster one: measure
//! both). One iteration is a batch of [`BATCH`] reads; throughput is in
//! bytes read.

use std::fs::{self, File as StdFile};
use std::hint::black_box;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{BenchmarkGroup, Criterion, Throughput};
use foliocache::internals::arena::{Arena, PageId};
use foliocache::internals::copy;
use foliocache::{Cache, Populate};
use test_support::mapped::ReadMap;
use xarray::{Entry, EntryRef, XArray};

/// Reads per criterion iteration.
const BATCH: usize = 256;
/// The file's size unless `FOLIOCACHE_BENCH_SIZE` says otherwise.
const FULL_SIZE: u64 = 1 << 30;
/// The default size of a `--test` (smoke) run.
const SMOKE_SIZE: u64 = 16 << 20;
/// File sizes are rounded down to this (whole 2 MiB folios, and no read of
/// the workloads straddles the end).
const GRAIN: u64 = 2 << 20;
const PAGE: u64 = 4096;
/// Destination offset of the misaligned case.
const MISALIGN: usize = 8;
const REPRODUCE: &str = "cd /work/main && CARGO_TARGET_DIR=/work/main/target/h-rbench \
                         cargo bench -p foliocache --bench read";

#[derive(Clone, Copy)]
enum Pattern {
    Sequential,
    Random,
}

struct Workload {
    group: &'static str,
    len: usize,
    pattern: Pattern,
}

const WORKLOADS: [Workload; 3] = [
    Workload {
        group: "read_4k_seq",
        len: 4096,
        pattern: Pattern::Sequential,
    },
    Workload {
        group: "read_4k_rand",
        len: 4096,
        pattern: Pattern::Random,
    },
    Workload {
        group: "read_64k_seq",
        len: 64 << 10,
        pattern: Pattern::Sequential,
    },
];

/// The offsets one reader visits: a cursor that walks and wraps, or a
/// random page number (splitmix64, mapped onto the pages by a multiply).
struct Offsets {
    pattern: Pattern,
    len: u64,
    size: u64,
    next: u64,
}

impl Offsets {
    fn new(pattern: Pattern, len: usize, size: u64) -> Self {
        Offsets {
            pattern,
            len: len as u64,
            size,
            next: match pattern {
                Pattern::Sequential => 0,
                Pattern::Random => 0x2545_f491_4f6c_dd1d,
            },
        }
    }

    #[inline(always)]
    fn next(&mut self) -> u64 {
        match self.pattern {
            Pattern::Sequential => {
                let off = self.next % self.size;
                self.next = off + self.len;
                off
            }
            Pattern::Random => {
                self.next = self.next.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = self.next;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^= z >> 31;
                let pages = (self.size - self.len) / PAGE + 1;
                (((z >> 32) * pages) >> 32) * PAGE
            }
        }
    }
}

/// A destination buffer: a page-aligned one, or one [`MISALIGN`] bytes past
/// a page boundary, inside a `Vec` touched once (no first-touch faults in
/// the measurement).
struct Dest {
    mem: Vec<u8>,
    start: usize,
    len: usize,
}

impl Dest {
    fn new(len: usize, misalign: usize) -> Self {
        let mem = vec![0x5a_u8; len + 2 * PAGE as usize];
        let start = mem.as_ptr().align_offset(PAGE as usize) + misalign;
        Dest { mem, start, len }
    }

    fn buf(&mut self) -> &mut [u8] {
        &mut self.mem[self.start..self.start + self.len]
    }
}

/// The file's bytes in an arena of their own, in 2 MiB blocks: the same
/// kind of memory as the cache's folios (huge pages, populated up front).
struct Bare {
    arena: Arena,
    blocks: Vec<PageId>,
}

impl Bare {
    fn new(file: &StdFile, size: u64) -> io::Result<Bare> {
        let mut bare = Bare {
            arena: Arena::new(size as usize, Populate::Eager)?,
            blocks: Vec::new(),
        };
        for (i, off) in (0..size).step_by(GRAIN as usize).enumerate() {
            let page = bare.arena.alloc(9).expect("the arena holds the file");
            bare.blocks.push(page);
            // SAFETY: the block is ours alone (allocated just now) and
            // `GRAIN` bytes long; nothing else refers to it.
            let dst = unsafe { std::slice::from_raw_parts_mut(bare.block(i), GRAIN as usize) };
            file.read_exact_at(dst, off)?;
        }
        Ok(bare)
    }

    fn block(&self, i: usize) -> *mut u8 {
        self.arena.page_ptr(self.blocks[i]).as_ptr()
    }

    /// An index of the blocks of the same shape as a mapping's: one
    /// order-9 value entry per block, holding its first arena page.
    fn index(&self) -> XArray<&'static u64> {
        let xa = XArray::new();
        for (i, p) in self.blocks.iter().enumerate() {
            let first = (i as u64) * (GRAIN / 4096);
            xa.store_order(first, 9, Entry::Value(u64::from(p.index())))
                .expect("storing a block");
        }
        xa
    }

    /// [`read`](Self::read) of a read inside one block, the block found by
    /// a walk of `index` under an epoch pin, as a hit finds its folio: the
    /// floor of a cache with this index, with no descriptor, check or
    /// count.
    fn read_indexed(&self, index: &XArray<&'static u64>, dst: &mut [u8], off: u64) -> usize {
        let guard = index.pin();
        let Some((EntryRef::Value(first_page), start)) =
            index.load_ref_with_start(off / 4096, &guard)
        else {
            panic!("no block at {off}");
        };
        let within = (off - start * 4096) as usize;
        assert!(within + dst.len() <= GRAIN as usize, "a read across blocks");
        let base = self.arena.page_ptr(PageId::new(first_page as u32)).as_ptr();
        // SAFETY: inside the block whose first page the index holds,
        // written once in `new`, only read since.
        let src = unsafe { std::slice::from_raw_parts(base.add(within), dst.len()) };
        copy::copy_from_slice(dst, src);
        dst.len()
    }

    /// Copies `dst.len()` bytes at file offset `off` (the workloads' reads
    /// lie inside one block; the content check's may straddle two).
    fn read(&self, dst: &mut [u8], off: u64) -> usize {
        let mut done = 0;
        while done < dst.len() {
            let at = off + done as u64;
            let (i, within) = ((at / GRAIN) as usize, (at % GRAIN) as usize);
            let n = (dst.len() - done).min(GRAIN as usize - within);
            // SAFETY: inside block `i`, written once in `new`, only read since.
            let src = unsafe { std::slice::from_raw_parts(self.block(i).add(within), n) };
            copy::copy_from_slice(&mut dst[done..done + n], src);
            done += n;
        }
        done
    }
}

/// Parses `FOLIOCACHE_BENCH_SIZE`: bytes, optionally with K, M or G (binary).
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, shift) = match s.as_bytes().last()?.to_ascii_uppercase() {
        b'K' => (&s[..s.len() - 1], 10),
        b'M' => (&s[..s.len() - 1], 20),
        b'G' => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    num.trim().parse::<u64>().ok()?.checked_shl(shift)
}

/// The bench file of `size` bytes: reused if present at that size, else
/// written (to a temporary name, then renamed, so a torn write is never
/// reused).
fn bench_file(size: u64) -> io::Result<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    fs::create_dir_all(dir)?;
    let path = dir.join(format!("foliocache-read-bench-{size}.bin"));
    if fs::metadata(&path).is_ok_and(|m| m.len() == size) {
        return Ok(path);
    }
    let t = Instant::now();
    let tmp = path.with_extension("tmp");
    let mut f = StdFile::create(&tmp)?;
    let mut chunk = vec![0u8; 1 << 20];
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut left = size;
    while left > 0 {
        for w in chunk.chunks_exact_mut(8) {
            // xorshift64*: never zero, so neither is the content as a whole.
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            w.copy_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
        }
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    f.sync_all()?;
    fs::rename(&tmp, &path)?;
    eprintln!(
        "wrote {} ({size} bytes) in {:.1?}",
        path.display(),
        t.elapsed()
    );
    Ok(path)
}

/// Reads the whole file with buffered `pread` (the kernel page cache then
/// holds it), touches every page of the mapping (its page tables then map
/// it), and checks with `mincore` that every page is resident.
fn warm_kernel(file: &StdFile, map: &ReadMap) {
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    while off < map.len() as u64 {
        let n = file.read_at(&mut buf, off).expect("warming pread");
        assert!(n > 0, "file shorter than its size");
        off += n as u64;
    }
    let mut sum = 0u8;
    for page in map.bytes().chunks(PAGE as usize) {
        sum ^= page[0];
    }
    black_box(sum);
    let resident = map.resident_pages().expect("mincore");
    let pages = map.len().div_ceil(PAGE as usize);
    if resident != pages {
        eprintln!("warning: kernel page cache holds {resident} of {pages} pages after warming");
    }
}

/// Benchmarks one reader into an aligned and a misaligned destination.
fn bench_reader<R>(
    g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    w: &Workload,
    size: u64,
    name: &str,
    mut before: impl FnMut(),
    mut read: R,
) where
    R: FnMut(&mut [u8], u64) -> usize,
{
    for (label, misalign) in [("aligned", 0), ("dst+8", MISALIGN)] {
        before();
        let mut dst = Dest::new(w.len, misalign);
        let mut offs = Offsets::new(w.pattern, w.len, size);
        g.bench_function(format!("{name}/{label}"), |b| {
            b.iter(|| {
                let buf = dst.buf();
                for _ in 0..BATCH {
                    let off = offs.next();
                    let n = read(&mut *buf, off);
                    assert_eq!(n, buf.len());
                }
                black_box(&mut *buf);
            })
        });
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    // Criterion runs a smoke test with `--test`, or when not given `--bench`
    // (`cargo test --benches`); `--list` runs nothing.
    let smoke = has("--test") || !has("--bench") || has("--list");
    let size = match std::env::var("FOLIOCACHE_BENCH_SIZE") {
        Ok(s) => parse_size(&s).unwrap_or_else(|| {
            panic!("FOLIOCACHE_BENCH_SIZE={s:?}: want bytes, optionally with K, M or G")
        }),
        Err(_) if smoke => SMOKE_SIZE,
        Err(_) => FULL_SIZE,
    };
    let size = (size / GRAIN).max(1) * GRAIN;
    let capacity = (size + size / 4) as usize;

    eprintln!("reproduce: {REPRODUCE}");
    eprintln!(
        "  (FOLIOCACHE_BENCH_SIZE=<bytes|K|M|G> shrinks the file; `-- --test` smoke-runs {} MiB)",
        SMOKE_SIZE >> 20
    );

    let path = bench_file(size).expect("creating the bench file");
    let cache = Cache::builder()
        .capacity(capacity)
        .populate(Populate::Eager)
        .build()
        .expect("building the cache");
    // The copy routine chosen (`FOLIOCACHE_COPY` forces one: `copy.rs`'s
    // module docs), and every routine timed on the classes of copy.
    eprint!("{}", copy::time_routines());
    let file = cache.open(&path).expect("opening through foliocache");
    let std_file = StdFile::open(&path).expect("opening the file");
    let map = ReadMap::new(&std_file, size as usize).expect("mmap");
    let bare = Bare::new(&std_file, size).expect("the bare copy's arena");
    let index = bare.index();

    // Warm foliocache: one pass of 2 MiB reads (2 MiB folios).
    let t = Instant::now();
    let mut buf = vec![0u8; 2 << 20];
    let mut off = 0;
    while off < size {
        let n = file.read_at(&mut buf, off).expect("warming foliocache");
        assert!(n > 0);
        off += n as u64;
    }
    let warm_time = t.elapsed();
    let warmed = cache.stats();
    eprintln!(
        "file: {} ({size} bytes, {} MiB); foliocache: {}",
        path.display(),
        size >> 20,
        file.info().note
    );
    eprintln!(
        "foliocache arena: capacity {} MiB, populate_time {:.3?} (eager); warm pass {:.3?}: \
         {} folios, {} MiB cached, {} IOs",
        warmed.capacity_bytes >> 20,
        warmed.populate_time,
        warm_time,
        warmed.folios,
        warmed.bytes_cached >> 20,
        warmed.io_reads
    );
    assert_eq!(warmed.bytes_cached, size, "foliocache holds the whole file");

    // The three readers agree on the content.
    warm_kernel(&std_file, &map);
    let mut a = vec![0u8; 64 << 10];
    let mut b = vec![0u8; 64 << 10];
    let mut offs = Offsets::new(Pattern::Random, a.len(), size);
    for _ in 0..64 {
        let o = offs.next();
        assert_eq!(file.read_at(&mut a, o).unwrap(), a.len());
        assert_eq!(std_file.read_at(&mut b, o).unwrap(), b.len());
        assert!(a == b, "foliocache and pread differ at {o}");
        assert!(a[..] == map.bytes()[o as usize..o as usize + a.len()]);
        bare.read(&mut b, o);
        assert!(a == b, "foliocache and the bare copy differ at {o}");
    }
    assert!(a.iter().any(|&x| x != 0), "content is not zero");

    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .configure_from_args();

    for w in &WORKLOADS {
        let mut g = c.benchmark_group(w.group);
        g.throughput(Throughput::Bytes((BATCH * w.len) as u64));
        bench_reader(
            &mut g,
            w,
            size,
            "foliocache",
            || {},
            |dst, off| file.read_at(dst, off).expect("foliocache read"),
        );
        bench_reader(
            &mut g,
            w,
            size,
            "kernel_pread",
            || warm_kernel(&std_file, &map),
            |dst, off| std_file.read_at(dst, off).expect("pread"),
        );
        let bytes = map.bytes();
        bench_reader(
            &mut g,
            w,
            size,
            "mmap_copy",
            || warm_kernel(&std_file, &map),
            |dst, off| {
                let off = off as usize;
                dst.copy_from_slice(&bytes[off..off + dst.len()]);
                dst.len()
            },
        );
        bench_reader(
            &mut g,
            w,
            size,
            "bare_copy",
            || {},
            |dst, off| bare.read(dst, off),
        );
        bench_reader(
            &mut g,
            w,
            size,
            "indexed_copy",
            || {},
            |dst, off| bare.read_indexed(&index, dst, off),
        );
        g.finish();
    }

    let end = cache.stats();
    eprintln!(
        "foliocache after the run: {} hits, {} misses, {} IOs, {} evictions (populate_time {:.3?})",
        end.hits, end.misses, end.io_reads, end.evictions, end.populate_time
    );
    assert_eq!(
        end.io_reads, warmed.io_reads,
        "foliocache did IO during the measurement: not a cached-read figure"
    );
    c.final_summary();
}
