//! Writes through the asynchronous engine (`IoEngine::write_all`): every
//! test runs on both engines (`mod uring`, `mod threads` at the bottom),
//! against real `O_DIRECT` files, memory and fault injection, with the
//! file's bytes checked against a model afterwards.

use crate::aio::{data_file, data_file_with, engine_with, fixture, suite};
use crate::common;

use std::sync::{Arc, Barrier};

use common::{kernel_cached_pages, random_bytes, TempDir};
use foliocache_backing::aio::{EngineKind, IoEngine, ReadOp, WriteReq};
use foliocache_backing::{
    AlignedBuf, Backing, FaultyBacking, FileBacking, FileOptions, IoBuf, IoBufMut, MemBacking, Op,
    RawBuf, BLOCK,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The file's bytes, read back with `read_blocks` (whole blocks).
fn contents(b: &dyn Backing) -> Vec<u8> {
    let len = b.len().unwrap() as usize;
    let mut buf = AlignedBuf::zeroed(len.div_ceil(BLOCK) * BLOCK).unwrap();
    let n = b
        .read_blocks(&mut [IoBufMut::new(&mut buf[..]).unwrap()], 0)
        .unwrap();
    assert_eq!(n, len);
    buf[..len].to_vec()
}

/// One planned write: its offset and its buffers' ranges in the source.
struct Planned {
    offset: usize,
    bufs: Vec<(usize, usize)>,
}

/// `n` writes at disjoint, shuffled places of a file of `blocks` blocks
/// (some past its end), each of 1-4 buffers of 1-8 blocks taken from
/// scattered places of a source of `src_len` bytes.
fn plan(rng: &mut StdRng, n: usize, blocks: usize, src_len: usize) -> Vec<Planned> {
    let mut at = 0usize;
    let mut out = Vec::new();
    for _ in 0..n {
        at += rng.gen_range(0..4) * BLOCK; // a gap of 0-3 blocks
        let bufs: Vec<(usize, usize)> = (0..rng.gen_range(1..=4))
            .map(|_| {
                let len = rng.gen_range(1..=8) * BLOCK;
                (rng.gen_range(0..(src_len - len) / BLOCK) * BLOCK, len)
            })
            .collect();
        let len: usize = bufs.iter().map(|b| b.1).sum();
        out.push(Planned { offset: at, bufs });
        at += len;
    }
    // Past the end of the file for some: the writes extend it.
    assert!(at > blocks * BLOCK / 2);
    for i in (1..out.len()).rev() {
        let j = rng.gen_range(0..=i);
        out.swap(i, j);
    }
    out
}

/// Runs `plans` as one `write_all` over `backing` (a file of `data`) and
/// checks every result and every byte against the model.
fn write_and_check(
    engine: &IoEngine,
    backing: &Arc<dyn Backing>,
    data: &mut Vec<u8>,
    plans: &[Planned],
    src: &[u8],
) {
    let bufs: Vec<Vec<IoBuf<'_>>> = plans
        .iter()
        .map(|p| {
            p.bufs
                .iter()
                .map(|&(s, len)| IoBuf::new(&src[s..s + len]).unwrap())
                .collect()
        })
        .collect();
    let reqs: Vec<WriteReq<'_>> = plans
        .iter()
        .zip(&bufs)
        .map(|(p, b)| WriteReq {
            backing,
            offset: p.offset as u64,
            bufs: b,
        })
        .collect();
    let results = engine.write_all(&reqs);
    assert_eq!(results.len(), plans.len());
    for (p, r) in plans.iter().zip(results) {
        let len: usize = p.bufs.iter().map(|b| b.1).sum();
        assert_eq!(r.unwrap(), len, "write at {}", p.offset);
        let mut at = p.offset;
        if data.len() < at + len {
            data.resize(at + len, 0);
        }
        for &(s, l) in &p.bufs {
            data[at..at + l].copy_from_slice(&src[s..s + l]);
            at += l;
        }
    }
    assert!(
        contents(&**backing) == *data,
        "the file's bytes differ from the model"
    );
}

/// An aligned source of `len` random bytes.
fn source(seed: u64, len: usize) -> AlignedBuf {
    let mut src = AlignedBuf::zeroed(len).unwrap();
    src.copy_from_slice(&random_bytes(seed, len));
    src
}

fn random_writes_land_every_byte(kind: EngineKind) {
    let Some(engine) = engine_with(kind, 16, 2, "write_random") else {
        return;
    };
    let dir = TempDir::new("aio-write-random");
    let src = source(1, 256 * BLOCK);
    for seed in 0..8 {
        let (file, data) = data_file(&dir, &format!("f{seed}"), 200 * BLOCK, seed);
        let backing: Arc<dyn Backing> = file;
        let mut data = data;
        let mut rng = StdRng::seed_from_u64(seed);
        // More writes than the queue's depth, in two batches.
        for _ in 0..2 {
            let plans = plan(&mut rng, 40, 200, src.len());
            write_and_check(&engine, &backing, &mut data, &plans, &src);
        }
    }
    let s = engine.stats();
    assert_eq!(s.writes, 8 * 2 * 40);
    if kind == EngineKind::Uring {
        assert!(s.uring_ops >= s.writes && s.pool_ops == 0, "{s:?}");
        // From this thread's own ring, which it waits in.
        assert_eq!(s.caller_ring_ops, s.writes, "{s:?}");
    } else {
        assert_eq!(s.pool_ops, s.writes, "{s:?}");
    }
}

fn memory_writes_go_through_write_blocks(kind: EngineKind) {
    let Some(engine) = engine_with(kind, 16, 2, "write_memory") else {
        return;
    };
    let data = random_bytes(2, 100 * BLOCK);
    let backing: Arc<dyn Backing> = Arc::new(MemBacking::with_data(data.clone()));
    let src = source(3, 64 * BLOCK);
    let mut data = data;
    let plans = plan(&mut StdRng::seed_from_u64(2), 30, 100, src.len());
    write_and_check(&engine, &backing, &mut data, &plans, &src);
    assert_eq!(engine.stats().pool_ops, 30);
}

fn errors_reach_their_write_only(kind: EngineKind) {
    let Some(fx) = fixture(kind, 16, 2, "write_errors", 16 * BLOCK, 4) else {
        return;
    };
    let (engine, file, data, dir) = (fx.engine, fx.file, fx.data, fx.dir);
    let file: Arc<dyn Backing> = file;
    // The same file open read-only: the kernel refuses the write (EBADF).
    let ro: Arc<dyn Backing> =
        Arc::new(FileBacking::open(dir.join("f"), &FileOptions::new()).unwrap());
    // Fault injection: the second write to it fails with EIO.
    let faulty = Arc::new(FaultyBacking::new(MemBacking::with_data(vec![
        0;
        8 * BLOCK
    ])));
    faulty.fail_nth(Op::Write, 2, libc::EIO);
    let faulty_dyn: Arc<dyn Backing> = faulty.clone();
    let src = source(5, 8 * BLOCK);
    let one = |i: usize| [IoBuf::new(&src[i * BLOCK..(i + 1) * BLOCK]).unwrap()];
    let (b0, b1, b2, b3, b4, b5) = (one(0), one(1), one(2), one(3), one(4), one(5));
    let misaligned = [IoBuf::new(&src[..BLOCK]).unwrap()];
    let reqs = [
        WriteReq {
            backing: &file,
            offset: 0,
            bufs: &b0,
        },
        WriteReq {
            backing: &ro,
            offset: BLOCK as u64,
            bufs: &b1,
        },
        WriteReq {
            backing: &file,
            offset: 2 * BLOCK as u64,
            bufs: &b2,
        },
        WriteReq {
            backing: &faulty_dyn,
            offset: 0,
            bufs: &b3,
        },
        WriteReq {
            backing: &faulty_dyn,
            offset: BLOCK as u64,
            bufs: &b4,
        },
        WriteReq {
            backing: &file,
            offset: 100,
            bufs: &misaligned,
        },
        WriteReq {
            backing: &file,
            offset: 3 * BLOCK as u64,
            bufs: &[],
        },
        WriteReq {
            backing: &file,
            offset: 4 * BLOCK as u64,
            bufs: &b5,
        },
    ];
    let got: Vec<Result<usize, (std::io::ErrorKind, Option<i32>)>> = engine
        .write_all(&reqs)
        .into_iter()
        .map(|r| r.map_err(|e| (e.kind(), e.raw_os_error())))
        .collect();
    assert_eq!(got[0], Ok(BLOCK));
    assert_eq!(got[1].unwrap_err().1, Some(libc::EBADF));
    assert_eq!(got[2], Ok(BLOCK));
    // Which of the two faulty writes is the second depends on the order
    // they ran in: exactly one failed.
    let faulty_got = [got[3], got[4]];
    assert_eq!(
        faulty_got.iter().filter(|r| r.is_ok()).count(),
        1,
        "{faulty_got:?}"
    );
    assert_eq!(
        faulty_got
            .iter()
            .filter(|r| matches!(r, Err((_, Some(libc::EIO)))))
            .count(),
        1,
        "{faulty_got:?}"
    );
    assert_eq!(got[5].unwrap_err().0, std::io::ErrorKind::InvalidInput);
    assert_eq!(got[6], Ok(0));
    assert_eq!(got[7], Ok(BLOCK));
    let mut want = data;
    want[..BLOCK].copy_from_slice(&src[..BLOCK]);
    want[2 * BLOCK..3 * BLOCK].copy_from_slice(&src[2 * BLOCK..3 * BLOCK]);
    want[4 * BLOCK..5 * BLOCK].copy_from_slice(&src[5 * BLOCK..6 * BLOCK]);
    assert!(
        contents(&*file) == want,
        "only the writes that succeeded changed the file"
    );
}

fn more_buffers_than_iov_max_write_in_parts(kind: EngineKind) {
    let Some(fx) = fixture(kind, 8, 2, "write_iov_max", 1100 * BLOCK, 6) else {
        return;
    };
    let (engine, file, data) = (fx.engine, fx.file, fx.data);
    let backing: Arc<dyn Backing> = file;
    let src = source(7, 1100 * BLOCK);
    let mut data = data;
    // 1100 one-block buffers in reverse order of the source: one write.
    let plans = [Planned {
        offset: 0,
        bufs: (0..1100).rev().map(|i| (i * BLOCK, BLOCK)).collect(),
    }];
    write_and_check(&engine, &backing, &mut data, &plans, &src);
    if kind == EngineKind::Uring {
        assert!(engine.stats().resubmits >= 1, "{:?}", engine.stats());
    }
}

fn concurrent_callers_all_land(kind: EngineKind) {
    let Some(fx) = fixture(kind, 8, 2, "write_concurrent", 256 * BLOCK, 8) else {
        return;
    };
    let (engine, file) = (fx.engine, fx.file);
    let backing: Arc<dyn Backing> = file;
    let src = source(9, 256 * BLOCK);
    let threads = 4;
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (engine, backing, src, barrier) = (&engine, &backing, &src, &barrier);
            s.spawn(move || {
                // Thread t owns the blocks t, t + 4, ... t + 60 and writes
                // each of them 8 times over, in batches of 16 one-block
                // writes, each round from other places of the source.
                barrier.wait();
                for round in 0..8 {
                    let bufs: Vec<[IoBuf<'_>; 1]> = (0..16)
                        .map(|k| {
                            let from = ((k * 4 + t + round * 7) % 256) * BLOCK;
                            [IoBuf::new(&src[from..from + BLOCK]).unwrap()]
                        })
                        .collect();
                    let reqs: Vec<WriteReq<'_>> = (0..16)
                        .map(|k| WriteReq {
                            backing,
                            offset: ((k * 4 + t) * BLOCK) as u64,
                            bufs: &bufs[k],
                        })
                        .collect();
                    for r in engine.write_all(&reqs) {
                        assert_eq!(r.unwrap(), BLOCK);
                    }
                }
            });
        }
    });
    // The last round (7) of every thread is what the file holds.
    let got = contents(&*backing);
    for t in 0..threads {
        for k in 0..16 {
            let at = (k * 4 + t) * BLOCK;
            let from = ((k * 4 + t + 7 * 7) % 256) * BLOCK;
            assert!(
                got[at..at + BLOCK] == src[from..from + BLOCK],
                "thread {t}, write {k}"
            );
        }
    }
}

fn a_callback_may_write(kind: EngineKind) {
    // A read's callback runs on an engine thread; a write_all there must
    // not wait for the engine it holds up.
    let Some(fx) = fixture(kind, 2, 1, "write_in_callback", 8 * BLOCK, 10) else {
        return;
    };
    let (engine, file, data) = (fx.engine, fx.file, fx.data);
    let backing: Arc<dyn Backing> = file;
    let mut mem = AlignedBuf::zeroed(BLOCK).unwrap();
    // SAFETY: `mem` lives, untouched, until the callback ran (`rx.recv`).
    let buf = unsafe { RawBuf::new(mem.as_mut_ptr(), BLOCK) }.unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (e2, b2) = (engine.clone(), backing.clone());
    engine.submit(vec![ReadOp::new(backing.clone(), 0, vec![buf], move |r| {
        let src = source(11, 4 * BLOCK);
        let bufs: Vec<[IoBuf<'_>; 1]> = (0..4)
            .map(|i| [IoBuf::new(&src[i * BLOCK..(i + 1) * BLOCK]).unwrap()])
            .collect();
        let reqs: Vec<WriteReq<'_>> = (0..4)
            .map(|i| WriteReq {
                backing: &b2,
                offset: ((4 + i) * BLOCK) as u64,
                bufs: &bufs[i],
            })
            .collect();
        let w: Vec<usize> = e2
            .write_all(&reqs)
            .into_iter()
            .map(Result::unwrap)
            .collect();
        tx.send((r.unwrap(), w, src[..].to_vec())).unwrap();
    })]);
    let (read, written, src) = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the callback's write_all never returned");
    assert_eq!(read, BLOCK);
    assert_eq!(&mem[..], &data[..BLOCK]);
    assert_eq!(written, vec![BLOCK; 4]);
    assert!(contents(&*backing)[4 * BLOCK..] == src[..]);
}

fn buffered_fallback_writes_are_dropped_behind(kind: EngineKind) {
    let Some(engine) = engine_with(kind, 8, 2, "write_buffered") else {
        return;
    };
    let dir = TempDir::new("aio-write-buffered");
    let (file, data) = data_file_with(&dir, "f", 64 * BLOCK, 12, true);
    assert!(!file.is_direct());
    file.sync_all().unwrap();
    let path = file.path().to_path_buf();
    let backing: Arc<dyn Backing> = file;
    let src = source(13, 64 * BLOCK);
    let mut data = data;
    let plans: Vec<Planned> = (0..8)
        .map(|i| Planned {
            offset: i * 8 * BLOCK,
            bufs: vec![((7 - i) * 8 * BLOCK, 8 * BLOCK)],
        })
        .collect();
    write_and_check(&engine, &backing, &mut data, &plans, &src);
    backing.sync_all().unwrap();
    // Written through the engine, then read back by `contents`: both drop
    // what they touched from the kernel's cache once written back.
    assert_eq!(
        kernel_cached_pages(&path),
        0,
        "the kernel's cache keeps nothing written"
    );
}

/// Every test of this suite, per engine.
macro_rules! write_suite {
    ($module:ident, $kind:expr) => {
        suite!($module, $kind;
            random_writes_land_every_byte,
            memory_writes_go_through_write_blocks,
            errors_reach_their_write_only,
            more_buffers_than_iov_max_write_in_parts,
            concurrent_callers_all_land,
            a_callback_may_write,
            buffered_fallback_writes_are_dropped_behind,
        );
    };
}

write_suite!(uring, EngineKind::Uring);
write_suite!(threads, EngineKind::Threads);
