//! `File::allocate` (`fallocate` mode 0 and `KEEP_SIZE`): the backing's
//! blocks reserved, the size grown (or kept), the data untouched, and a
//! write that extends the file meanwhile never cut back.

use std::io::ErrorKind;

use crate::common::write::{allocated, assert_same, disk, nonzero_bytes, open_rw, read_all, Model};
use test_support::cache::TestCache;
use test_support::TempPath;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

#[test]
fn allocate_reserves_and_grows_keep_size_only_reserves() {
    let tmp = TempPath::with_data("allocate", &nonzero_bytes(10_000, 1));
    let c = TestCache::bytes(8 * MIB as usize)
        .max_folio(64 * KIB as usize)
        .build();
    let f = open_rw(&c, &tmp.path);
    let mut m = Model {
        data: disk(&tmp.path),
    };
    // Dirty data inside the range stays.
    let buf = nonzero_bytes(3000, 2);
    f.write_all_at(&buf, 5000).unwrap();
    m.write(5000, &buf);
    f.allocate(0, MIB, false).unwrap();
    m.set_len(MIB);
    assert_eq!(f.len(), MIB);
    assert!(
        allocated(&tmp.path) >= MIB,
        "{} bytes allocated",
        allocated(&tmp.path)
    );
    assert_same("after allocate", &read_all(&f), &m.data);
    // KEEP_SIZE: blocks past the end, the size kept.
    f.allocate(MIB, MIB, true).unwrap();
    assert_eq!(f.len(), MIB);
    assert!(
        allocated(&tmp.path) >= 2 * MIB,
        "{} bytes allocated",
        allocated(&tmp.path)
    );
    // A range inside the file changes nothing.
    f.allocate(100, 200, false).unwrap();
    assert_eq!(f.len(), MIB);
    f.sync_all().unwrap();
    assert_same("the backing file", &disk(&tmp.path), &m.data);
}

#[test]
fn allocate_refuses_bad_input_and_read_only_handles() {
    let tmp = TempPath::with_data("allocate-bad", &nonzero_bytes(4096, 3));
    let c = TestCache::bytes(4 * MIB as usize)
        .max_folio(64 * KIB as usize)
        .build();
    let f = open_rw(&c, &tmp.path);
    assert_eq!(
        f.allocate(0, 0, false).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        f.allocate(u64::MAX - 10, 100, false).unwrap_err().kind(),
        ErrorKind::FileTooLarge
    );
    assert_eq!(
        f.allocate(backing::MAX_FILE_SIZE, 1, false)
            .unwrap_err()
            .kind(),
        ErrorKind::FileTooLarge
    );
    let ro = c.open(&tmp.path).unwrap();
    assert_eq!(
        ro.allocate(0, 4096, false).unwrap_err().kind(),
        ErrorKind::PermissionDenied
    );
    assert_eq!(f.len(), 4096);
    // A memory file has nothing to reserve: its size grows.
    let mem = c.memfile("allocate-mem", 0).unwrap();
    mem.allocate(0, 100 * KIB, false).unwrap();
    assert_eq!(mem.len(), 100 * KIB);
    mem.allocate(0, 200 * KIB, true).unwrap();
    assert_eq!(mem.len(), 100 * KIB);
    assert!(read_all(&mem).iter().all(|&b| b == 0));
}

#[test]
fn an_extending_write_beside_an_allocate_is_never_cut_back() {
    // The size is checked and grown under the file's lock: an allocate that
    // read the old size cannot set a smaller one over a write's.
    let tmp = TempPath::with_data("allocate-race", &[]);
    let c = TestCache::bytes(8 * MIB as usize)
        .max_folio(64 * KIB as usize)
        .build();
    let f = open_rw(&c, &tmp.path);
    for round in 0..200u64 {
        f.set_len(0).unwrap();
        let far = 2 * MIB + round;
        std::thread::scope(|s| {
            let g = f.reopen();
            s.spawn(move || g.write_all_at(&[7], far).unwrap());
            f.allocate(0, MIB, false).unwrap();
        });
        assert_eq!(f.len(), far + 1, "round {round}: the write was cut back");
        let mut b = [0u8];
        f.read_exact_at(&mut b, far).unwrap();
        assert_eq!(b[0], 7, "round {round}");
    }
}
