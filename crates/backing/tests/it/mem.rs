//! MemBacking: short reads past len, writes extend, holes read as zeros,
//! set_len, punch_hole, the size limit, bad input; and a property test of
//! random operations against a plain `Vec<u8>` image.

use crate::common;

use std::io;

use common::{aligned_from, filled, random_bytes, B};
use foliocache_backing::{
    AlignedBuf, Backing, DataPath, IoBufMut, MemBacking, BLOCK, MAX_FILE_SIZE,
};
use proptest::prelude::*;

#[test]
fn new_is_empty() {
    let m = MemBacking::new();
    assert_eq!(m.len().unwrap(), 0);
    assert!(m.is_empty().unwrap());
    assert_eq!(m.resident_bytes(), 0);
    assert_eq!(m.contents().unwrap(), Vec::<u8>::new());
    let info = m.info();
    assert_eq!(
        (info.kind, info.data_path, info.engine),
        ("memory", DataPath::Memory, "memory")
    );
}

#[test]
fn with_data_reads_back_with_a_short_partial_last_block() {
    let data = random_bytes(1, 2 * BLOCK + 77);
    let m = MemBacking::with_data(data.clone());
    assert_eq!(m.len().unwrap(), data.len() as u64);
    assert_eq!(m.contents().unwrap(), data);
    let mut buf = filled(4 * BLOCK, 0xEE);
    let n = m.read_blocks(&mut [buf.io_buf_mut()], 0).unwrap();
    assert_eq!(n, data.len());
    assert_eq!(&buf[..n], &data[..]);
    assert!(buf[n..].iter().all(|&b| b == 0), "zeros past the count");
}

#[test]
fn reads_at_or_past_len_return_zero() {
    let m = MemBacking::with_data(vec![1; BLOCK]);
    let mut buf = filled(BLOCK, 0xEE);
    assert_eq!(m.read_blocks(&mut [buf.io_buf_mut()], B).unwrap(), 0);
    assert_eq!(m.read_blocks(&mut [buf.io_buf_mut()], 1000 * B).unwrap(), 0);
    assert!(buf.iter().all(|&b| b == 0));
}

#[test]
fn reads_fill_several_buffers_in_order() {
    let data = random_bytes(2, 6 * BLOCK);
    let m = MemBacking::with_data(data.clone());
    let (mut a, mut b) = (filled(BLOCK, 0), filled(2 * BLOCK, 0));
    let mut empty: [u8; 0] = [];
    let mut bufs = [
        a.io_buf_mut(),
        IoBufMut::new(&mut empty).unwrap(),
        b.io_buf_mut(),
    ];
    assert_eq!(m.read_blocks(&mut bufs, 2 * B).unwrap(), 3 * BLOCK);
    assert_eq!(&a[..], &data[2 * BLOCK..3 * BLOCK]);
    assert_eq!(&b[..], &data[3 * BLOCK..5 * BLOCK]);
}

#[test]
fn writes_extend_len_to_the_end_of_the_last_block() {
    let m = MemBacking::new();
    let d = random_bytes(3, 2 * BLOCK);
    assert_eq!(
        m.write_blocks(&[aligned_from(&d).io_buf()], 3 * B).unwrap(),
        2 * BLOCK
    );
    assert_eq!(m.len().unwrap(), 5 * B);
    // A write inside the file does not change len.
    m.write_blocks(&[filled(BLOCK, 1).io_buf()], 0).unwrap();
    assert_eq!(m.len().unwrap(), 5 * B);
}

#[test]
fn holes_read_as_zeros_and_take_no_memory() {
    let m = MemBacking::new();
    m.write_blocks(&[filled(BLOCK, 7).io_buf()], 10 * B)
        .unwrap();
    assert_eq!(m.resident_bytes(), B, "only the written block is held");
    let mut buf = filled(11 * BLOCK, 0xEE);
    assert_eq!(
        m.read_blocks(&mut [buf.io_buf_mut()], 0).unwrap(),
        11 * BLOCK
    );
    assert!(buf[..10 * BLOCK].iter().all(|&b| b == 0));
    assert!(buf[10 * BLOCK..].iter().all(|&b| b == 7));
}

#[test]
fn set_len_shrink_then_grow_reads_zeros() {
    let data = random_bytes(4, 3 * BLOCK);
    let m = MemBacking::with_data(data.clone());
    m.set_len(B + 5).unwrap();
    assert_eq!(m.len().unwrap(), B + 5);
    assert_eq!(m.resident_bytes(), 2 * B, "pages past the end are freed");
    m.set_len(3 * B).unwrap();
    let c = m.contents().unwrap();
    assert_eq!(&c[..BLOCK + 5], &data[..BLOCK + 5]);
    assert!(
        c[BLOCK + 5..].iter().all(|&b| b == 0),
        "old bytes do not come back"
    );
    // Growing a huge sparse file is fine and costs nothing.
    m.set_len(MAX_FILE_SIZE).unwrap();
    assert_eq!(m.resident_bytes(), 2 * B);
    let e = m.set_len(MAX_FILE_SIZE + 1).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn punch_hole_zeros_frees_and_keeps_len() {
    let data = random_bytes(5, 4 * BLOCK);
    let m = MemBacking::with_data(data.clone());
    m.punch_hole(B, 2 * B).unwrap();
    assert_eq!(m.len().unwrap(), 4 * B);
    assert_eq!(m.resident_bytes(), 2 * B);
    let c = m.contents().unwrap();
    assert_eq!(&c[..BLOCK], &data[..BLOCK]);
    assert!(c[BLOCK..3 * BLOCK].iter().all(|&b| b == 0));
    assert_eq!(&c[3 * BLOCK..], &data[3 * BLOCK..]);
    m.punch_hole(3 * B, 100 * B).unwrap(); // past EOF
    m.punch_hole(0, 0).unwrap(); // nothing
    assert_eq!(m.len().unwrap(), 4 * B);
    assert_eq!(m.resident_bytes(), B);
}

#[test]
fn syncs_succeed() {
    let m = MemBacking::new();
    m.sync_data().unwrap();
    m.sync_all().unwrap();
}

#[test]
fn limit_gives_enospc_and_writes_nothing() {
    let m = MemBacking::with_limit(2 * B);
    assert_eq!(m.limit(), 2 * B);
    m.write_blocks(&[filled(BLOCK, 1).io_buf()], 0).unwrap();
    let e = m
        .write_blocks(&[filled(2 * BLOCK, 2).io_buf()], B)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
    assert_eq!(m.len().unwrap(), B, "all or nothing");
    assert!(m.contents().unwrap().iter().all(|&b| b == 1));
    // Overwriting held pages needs no new space; holes do not count.
    m.write_blocks(&[filled(BLOCK, 3).io_buf()], 0).unwrap();
    m.write_blocks(&[filled(BLOCK, 4).io_buf()], 100 * B)
        .unwrap();
    assert_eq!(m.resident_bytes(), 2 * B);
    assert!(
        m.info().note.contains("limited to 8192 bytes"),
        "{}",
        m.info()
    );
    // Punching frees space again.
    m.punch_hole(0, B).unwrap();
    m.write_blocks(&[filled(BLOCK, 5).io_buf()], 50 * B)
        .unwrap();
}

#[test]
fn bad_input_is_rejected_without_panic() {
    let m = MemBacking::new();
    let mut buf = filled(BLOCK, 0);
    for e in [
        m.read_blocks(&mut [buf.io_buf_mut()], 1).unwrap_err(),
        m.write_blocks(&[buf.io_buf()], 4095).unwrap_err(),
        m.punch_hole(7, B).unwrap_err(),
        m.punch_hole(0, 7).unwrap_err(),
        m.read_blocks(&mut [buf.io_buf_mut()], u64::MAX / B * B)
            .unwrap_err(),
        m.write_blocks(&[buf.io_buf()], MAX_FILE_SIZE / B * B)
            .unwrap_err(),
        m.punch_hole(B, u64::MAX / B * B).unwrap_err(),
    ] {
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    }
    assert_eq!(m.len().unwrap(), 0);
}

#[test]
fn far_sparse_write_works_and_contents_refuses_politely() {
    let m = MemBacking::new();
    let off = MAX_FILE_SIZE / B * B - B; // the last whole block
    m.write_blocks(&[filled(BLOCK, 9).io_buf()], off).unwrap();
    assert_eq!(m.len().unwrap(), off + B);
    assert_eq!(m.resident_bytes(), B);
    let mut buf = filled(BLOCK, 0);
    assert_eq!(m.read_blocks(&mut [buf.io_buf_mut()], off).unwrap(), BLOCK);
    assert!(buf.iter().all(|&b| b == 9));
    let e = m.contents().unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::OutOfMemory);
}

#[test]
fn concurrent_readers_and_writers() {
    let m = std::sync::Arc::new(MemBacking::new());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let m = m.clone();
            std::thread::spawn(move || {
                for i in 0..200u64 {
                    let block = (i * 4 + t) % 64;
                    m.write_blocks(&[filled(BLOCK, block as u8).io_buf()], block * B)
                        .unwrap();
                    let mut buf = filled(BLOCK, 0);
                    m.read_blocks(&mut [buf.io_buf_mut()], block * B).unwrap();
                    assert!(buf.iter().all(|&b| b == block as u8));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(m.len().unwrap(), 64 * B);
}

// ---- property test against a Vec<u8> model ----

const MAX_BLOCKS: u64 = 24;

#[derive(Debug, Clone)]
enum Action {
    Write {
        block: u64,
        blocks: usize,
        seed: u64,
    },
    Read {
        block: u64,
        split: Vec<usize>,
    },
    SetLen {
        len: u64,
    },
    Punch {
        block: u64,
        blocks: u64,
    },
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        (0..MAX_BLOCKS, 1..4usize, any::<u64>()).prop_map(|(block, blocks, seed)| Action::Write {
            block,
            blocks,
            seed
        }),
        (0..MAX_BLOCKS + 2, prop::collection::vec(0..3usize, 1..4))
            .prop_map(|(block, split)| Action::Read { block, split }),
        (0..(MAX_BLOCKS * B + 100)).prop_map(|len| Action::SetLen { len }),
        (0..MAX_BLOCKS, 0..4u64).prop_map(|(block, blocks)| Action::Punch { block, blocks }),
    ]
}

fn check_against_model(actions: &[Action]) {
    let m = MemBacking::new();
    let mut model: Vec<u8> = Vec::new();
    for a in actions {
        match a {
            Action::Write {
                block,
                blocks,
                seed,
            } => {
                let data = random_bytes(*seed, blocks * BLOCK);
                let off = (block * B) as usize;
                m.write_blocks(&[aligned_from(&data).io_buf()], block * B)
                    .unwrap();
                if model.len() < off + data.len() {
                    model.resize(off + data.len(), 0);
                }
                model[off..off + data.len()].copy_from_slice(&data);
            }
            Action::Read { block, split } => {
                let mut mems: Vec<AlignedBuf> =
                    split.iter().map(|&n| filled(n * BLOCK, 0xEE)).collect();
                let mut bufs: Vec<IoBufMut<'_>> = mems.iter_mut().map(|b| b.io_buf_mut()).collect();
                let n = m.read_blocks(&mut bufs, block * B).unwrap();
                drop(bufs);
                let off = ((block * B) as usize).min(model.len());
                let total: usize = split.iter().sum::<usize>() * BLOCK;
                let want = &model[off..(off + total).min(model.len())];
                assert_eq!(n, want.len());
                let got: Vec<u8> = mems.iter().flat_map(|b| b.iter().copied()).collect();
                assert_eq!(&got[..n], want);
                assert!(got[n..].iter().all(|&b| b == 0));
            }
            Action::SetLen { len } => {
                m.set_len(*len).unwrap();
                model.resize(*len as usize, 0);
            }
            Action::Punch { block, blocks } => {
                m.punch_hole(block * B, blocks * B).unwrap();
                let s = ((block * B) as usize).min(model.len());
                let e = (((block + blocks) * B) as usize).min(model.len());
                model[s..e].fill(0);
            }
        }
        assert_eq!(m.len().unwrap(), model.len() as u64);
    }
    assert_eq!(m.contents().unwrap(), model);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn mem_backing_matches_a_vec_model(actions in prop::collection::vec(action(), 1..40)) {
        check_against_model(&actions);
    }
}
