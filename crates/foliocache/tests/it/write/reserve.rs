//! Space reserved at write, as ext4's delayed allocation reserves blocks
//! at `write(2)`: a write that extends a file reserves the backing's
//! space first (`Backing::reserve`), so a full filesystem fails that
//! write with `StorageFull`, not the writeback at the next sync or close;
//! an appending writer's reservations run ahead of it, and what is past
//! the size goes back when the last handle closes.

use std::io::ErrorKind;

use crate::common::write::allocated;
use backing::Op;
use foliocache::File;
use test_support::cache::{faulty_file, open_rw, TestCache};
use test_support::{TempPath, Tmpfs};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// A store that refuses the reservation (`ENOSPC`) fails the extending
/// write itself, which writes nothing; a write inside the file reserves
/// nothing and goes on.
#[test]
fn a_full_store_fails_the_extending_write() {
    let c = TestCache::pages(64).build();
    let (f, b) = faulty_file(&c, &[1u8; 8192]);
    b.fail_from_nth(Op::Reserve, 1, libc::ENOSPC);
    let e = f.write_at(&[2u8; 100], 8150).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StorageFull, "{e}");
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
    assert_eq!(f.len(), 8192);
    let mut buf = vec![0u8; 8192];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 8192);
    assert!(buf.iter().all(|&x| x == 1));
    f.write_at(&[3u8; 10], 0).unwrap();
    assert_eq!(b.stats().reserves, 1);
    f.sync_all().unwrap();
}

/// 64 KiB writes appended to a file on a tmpfs of 1 MiB: the write that
/// does not fit fails with `StorageFull` before any sync or close, and
/// every write acknowledged before it is written back and synced without
/// an error; the file holds them all, and no space stays reserved past
/// its end once closed.
#[test]
fn a_full_filesystem_fails_the_write_not_the_close() {
    let dir = TempPath::new("reserve-full");
    let Some(fs) = Tmpfs::mount(
        &dir.path,
        "1m",
        "a_full_filesystem_fails_the_write_not_the_close",
    ) else {
        return;
    };
    let path = fs.path.join("x");
    let c = TestCache::bytes(8 * MIB).build();
    let f = open_rw(&c, &path);
    let chunk: Vec<u8> = (0..64 * KIB).map(|i| (i * 7 + i / 4096) as u8).collect();
    let mut written = 0u64;
    let err = loop {
        match f.write_at(&chunk, written) {
            Ok(_) => written += chunk.len() as u64,
            Err(e) => break e,
        }
        assert!(
            written <= MIB as u64,
            "{written} bytes written to a 1 MiB tmpfs"
        );
    };
    assert_eq!(err.kind(), ErrorKind::StorageFull, "{err}");
    assert!(written > 0);
    assert_eq!(f.len(), written);
    f.sync_all().unwrap();
    drop(f);
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(on_disk.len() as u64, written);
    assert!(on_disk.chunks(chunk.len()).all(|c| c == chunk));
    assert!(
        allocated(&path) <= written,
        "{} bytes allocated",
        allocated(&path)
    );
}

/// An appending writer's first write reserves well past its end (at least
/// 1 MiB), so the next writes need no system call; the last close gives
/// back what is past the size.
#[test]
fn an_appending_writer_reserves_ahead_and_the_close_gives_it_back() {
    let tmp = TempPath::new("reserve-ahead");
    let c = TestCache::bytes(8 * MIB).quiet().build();
    let probe = TempPath::new("reserve-probe");
    let p = std::fs::File::create(&probe.path).unwrap();
    let flags = nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE;
    if let Err(e) = nix::fcntl::fallocate(&p, flags, 0, 4096) {
        test_support::skip_or_fail(
            "an_appending_writer_reserves_ahead_and_the_close_gives_it_back",
            format!("the target's filesystem cannot reserve: fallocate: {e}"),
        );
        return;
    }
    let f: File = open_rw(&c, &tmp.path);
    f.write_at(&[9u8; 4096], 0).unwrap();
    assert!(
        allocated(&tmp.path) >= MIB as u64,
        "{} bytes",
        allocated(&tmp.path)
    );
    for i in 1..64u64 {
        f.write_at(&[9u8; 4096], i * 4096).unwrap();
    }
    drop(f);
    assert_eq!(std::fs::metadata(&tmp.path).unwrap().len(), 64 * 4096);
    assert!(
        allocated(&tmp.path) <= 64 * 4096,
        "{} bytes allocated after the close",
        allocated(&tmp.path)
    );
}
