//! Sequential small hits under every arm of the per-thread tuning
//! (`seqtune.rs`): the routine and the prefetch ahead change how bytes are
//! copied, never which.

use std::fs;
use std::io::Write;
use std::path::PathBuf;

use foliocache::internals::seqtune::{self, Arm};
use foliocache::{Cache, Populate};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn temp_file(name: &str, len: usize) -> (PathBuf, Vec<u8>) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("foliocache-seqtune");
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}-{}", std::process::id()));
    let mut rng = StdRng::seed_from_u64(len as u64);
    let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
    let mut f = fs::File::create(&path).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    (path, data)
}

/// Reads all of `f` in order in pieces of the lengths `sizes` cycles
/// through (each piece continues the last: sequential hits once cached),
/// checking every piece against `data`; returns how many pieces it read.
fn read_through(f: &foliocache::File, data: &[u8], sizes: &[usize]) -> usize {
    let mut buf = vec![0u8; 8192];
    let (mut pos, mut n) = (0usize, 0usize);
    while pos < data.len() {
        let want = sizes[n % sizes.len()];
        let got = f.read_at(&mut buf[..want], pos as u64).unwrap();
        assert!(
            got > 0,
            "a read at {pos} of {} returned nothing",
            data.len()
        );
        let end = pos + got;
        assert_eq!(&buf[..got], &data[pos..end], "bytes {pos}..{end}");
        pos = end;
        n += 1;
    }
    n
}

#[test]
fn every_arm_copies_the_bytes_of_the_file() {
    // Past 4 MiB and an odd length: large folios, their ends, and a
    // prefetch ahead running into the end of a folio and of the file.
    let (path, data) = temp_file("arms", (5 << 20) + 1234);
    let c = Cache::builder()
        .capacity(16 << 20)
        .populate(Populate::Lazy)
        .build()
        .unwrap();
    let f = c.open(&path).unwrap();
    // Odd sizes, a page, a page less one byte: every copy class under 4 KiB.
    let sizes = [4096, 512, 1000, 4095, 1, 3000, 64, 4096, 2048, 255, 256];
    read_through(&f, &data, &sizes);
    for arm in seqtune::arms() {
        seqtune::force(Some(arm));
        for round in 0..2 {
            let hits = c.stats().hits;
            read_through(&f, &data, &sizes[round..]);
            assert!(c.stats().hits > hits, "{arm:?}: the file was cached");
        }
        assert_eq!(seqtune::chosen(), Some(arm), "a forced arm stays");
    }
    seqtune::force(None);
    fs::remove_file(path).unwrap();
}

#[test]
fn a_thread_settles_on_an_arm_while_its_reads_stay_right() {
    let (path, data) = temp_file("settle", 2 << 20);
    let c = Cache::builder()
        .capacity(8 << 20)
        .populate(Populate::Lazy)
        .build()
        .unwrap();
    let f = c.open(&path).unwrap();
    seqtune::force(None);
    assert_eq!(seqtune::chosen(), None, "a thread starts by exploring");
    // One exploration is 4 arms x 8 turns x 64 hits: 2048 sequential hits.
    let mut reads = 0;
    for _ in 0..6 {
        reads += read_through(&f, &data, &[4096]);
    }
    assert!(reads >= 3000, "{reads}");
    let chosen: Option<Arm> = seqtune::chosen();
    assert!(chosen.is_some(), "after {reads} sequential hits");
    assert!(seqtune::arms().contains(&chosen.unwrap()));
    fs::remove_file(path).unwrap();
}
