//! Random operation sequences through a [`File`] over a
//! [`RecordingBacking`], noted in its log for the crash check
//! (`test_support::crash`).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use backing::{Backing, MemBacking, Recorded, RecordingBacking};
use foliocache::{Cache, File, WriteFlags};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use test_support::cache::TestCache;
use test_support::crash::{check, Checked, Explore, Program};

const B: usize = 4096;

/// The largest file a sequence makes: 16 blocks, more than the cache, so
/// reads and writes evict and writeback happens at any point.
pub const MAX_FILE: usize = 16 * B;

/// The recording backing under each file.
pub type Rec = RecordingBacking<MemBacking>;

/// How a test puts something between the cache and the recording (a
/// broken backing), or nothing.
pub type Wrap<'a> = &'a dyn Fn(Arc<Rec>) -> Arc<dyn Backing>;

/// The cache a sequence runs in: 12 pages, folios up to 8 KiB, at most
/// 2 pages dirty before a writer writes back; `flusher` gives the
/// background flusher a threshold of 1 page, so it writes back at times
/// the program does not choose; without it, only syncs, closes, eviction
/// and throttled writers write back.
///
/// Dirty pages, with a write's (up to 3 pages), leave room for a read's
/// folio: the cache counts dirty pages but evicts whole folios, and its
/// flusher, kicked by reclaim, writes back only above its threshold, so
/// a few dirty pages in large folios can hold all of a small cache (an
/// allocation then fails after 2 s).
pub fn cache(flusher: bool) -> Cache {
    TestCache::pages(12)
        .max_folio(2 * B)
        .dirty_limit(2 * B)
        .dirty_background(if flusher { 1 } else { 2 } * B)
        .build()
}

/// One sequence: the program's versions, the log, and the operations it
/// did (for a failure's message).
pub struct Sequence {
    /// The file as the program saw it.
    pub program: Program,
    /// What reached the backing, with the program's notes.
    pub log: Vec<Recorded>,
    /// The operations, one a line.
    pub trace: String,
}

/// Runs `ops` random operations from `seed` on a new file in `cache`,
/// through `wrap`'s backing; checks that every call succeeds and, with
/// `check_reads`, every read against the program's view (a broken
/// backing's tests leave that to the crash check).
pub fn run(cache: &Cache, seed: u64, ops: usize, wrap: Wrap<'_>, check_reads: bool) -> Sequence {
    let mut rng = StdRng::seed_from_u64(seed);
    let initial = test_support::nonzero_bytes(rng.gen_range(0..=MAX_FILE / 2), seed);
    let rec = Arc::new(RecordingBacking::new(MemBacking::with_data(
        initial.clone(),
    )));
    let mut program = Program::new(initial);
    let open = |rec: &Arc<Rec>| {
        cache
            .open_backing(wrap(rec.clone()))
            .unwrap_or_else(|e| panic!("open_backing: {e}"))
    };
    let mut file: File = open(&rec);
    let mut trace = format!("sequence of seed {seed}\n");
    for n in 0..ops {
        let mut img = program.image().to_vec();
        let size = img.len();
        let what = rng.gen_range(0..100);
        let _ = write!(trace, "{n}: ");
        match what {
            // A write, sometimes uncached; bytes unique to this op.
            0..=39 => {
                let off = rng.gen_range(0..MAX_FILE - 1);
                let len = rng.gen_range(1..=(2 * B).min(MAX_FILE - off));
                let data = test_support::nonzero_bytes(len, seed ^ (n as u64) << 32);
                let flags = if rng.gen_ratio(1, 8) {
                    WriteFlags::DONTCACHE
                } else {
                    WriteFlags::NONE
                };
                let _ = writeln!(trace, "write_at_flags({len} bytes, {off}, {flags:?})");
                if img.len() < off + len {
                    img.resize(off + len, 0);
                }
                img[off..off + len].copy_from_slice(&data);
                program.begin(&rec, img);
                let wrote = file
                    .write_at_flags(&data, off as u64, flags)
                    .unwrap_or_else(|e| panic!("{trace}{e}"));
                assert_eq!(wrote, len, "{trace}");
            }
            40..=49 => {
                let to = rng.gen_range(0..=MAX_FILE);
                let _ = writeln!(trace, "set_len({to})");
                img.resize(to, 0);
                program.begin(&rec, img);
                file.set_len(to as u64)
                    .unwrap_or_else(|e| panic!("{trace}{e}"));
            }
            50..=56 => {
                let off = rng.gen_range(0..MAX_FILE);
                let len = rng.gen_range(1..=3 * B);
                let _ = writeln!(trace, "punch_hole({off}, {len})");
                let end = (off + len).min(size);
                if off < end {
                    img[off..end].fill(0);
                }
                program.begin(&rec, img);
                file.punch_hole(off as u64, len as u64)
                    .unwrap_or_else(|e| panic!("{trace}{e}"));
            }
            57..=71 => {
                let all = rng.gen_bool(0.5);
                let _ = writeln!(trace, "{}", if all { "sync_all" } else { "sync_data" });
                program.sync_begins(&rec);
                let r = if all {
                    file.sync_all()
                } else {
                    file.sync_data()
                };
                r.unwrap_or_else(|e| panic!("{trace}{e}"));
                program.acked(&rec, all);
            }
            72..=89 => {
                let off = rng.gen_range(0..MAX_FILE);
                let len = rng.gen_range(1..=4 * B);
                let _ = writeln!(trace, "read_at({len}, {off})");
                let mut buf = vec![0xa5; len];
                let got = file
                    .read_at(&mut buf, off as u64)
                    .unwrap_or_else(|e| panic!("{trace}{e}"));
                let want = &img[off.min(size)..(off + len).min(size)];
                if check_reads {
                    assert_eq!(&buf[..got], want, "read through the cache\n{trace}");
                }
            }
            90..=94 => {
                let _ = writeln!(trace, "close, reopen");
                drop(file);
                file = open(&rec);
                assert_eq!(file.len(), size as u64, "size after reopen\n{trace}");
            }
            95..=97 => {
                let off = rng.gen_range(0..MAX_FILE - 1);
                let len = rng.gen_range(1..=(2 * B).min(MAX_FILE - off));
                let keep_size = rng.gen_bool(0.5);
                let _ = writeln!(trace, "allocate({off}, {len}, keep_size: {keep_size})");
                if !keep_size && off + len > size {
                    img.resize(off + len, 0);
                }
                program.begin(&rec, img);
                file.allocate(off as u64, len as u64, keep_size)
                    .unwrap_or_else(|e| panic!("{trace}{e}"));
            }
            _ => {
                let _ = writeln!(trace, "sleep 1 ms");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    let _ = writeln!(trace, "close");
    drop(file);
    Sequence {
        program,
        log: rec.log(),
        trace,
    }
}

/// Runs sequences from `seed` on, half of them with the flusher, until
/// `states` crash states are checked (or `max_sequences` ran); returns
/// what was checked, or the first violation with its sequence. Reads are
/// checked unless a `wrap` is broken on purpose (`check_reads`).
pub fn explore(
    seed: u64,
    ops: usize,
    (states, max_sequences): (u64, u64),
    explore: Explore,
    wrap: Wrap<'_>,
    check_reads: bool,
) -> Result<(Checked, u64), String> {
    let caches = [cache(false), cache(true)];
    let mut total = Checked::default();
    let mut n = 0;
    while total.states < states && n < max_sequences {
        let s = seed.wrapping_add(n);
        let seq = run(&caches[n as usize % 2], s, ops, wrap, check_reads);
        let cfg = Explore { seed: s, ..explore };
        match check(&seq.program, &seq.log, &cfg) {
            Ok(c) => total += c,
            Err(v) => {
                return Err(format!(
                    "sequence seed {s} (flusher: {}): {v}\n--- operations\n{}--- log\n{:?}",
                    n % 2 == 1,
                    seq.trace,
                    seq.log
                ))
            }
        }
        n += 1;
    }
    Ok((total, n))
}
