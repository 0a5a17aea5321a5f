//! The group's table of file slots at its limits: a file it cannot serve
//! for want of a slot is refused with an error the interposer recognizes
//! (and then hands the file to the kernel), having changed nothing; an
//! unlinked file's pages are dropped by the writeback once no process
//! holds the file.

use std::fs::OpenOptions;

use foliocache::SharedCache;
use test_support::TempPath;

use super::open;

/// The story: under `foliocache run --shared --capacity 8M`, a program
/// that synced one file and then wrote 200 more, held open, found the
/// first's slot taken back (it was clean) and every call on it failing
/// with EIO, which the interposer passed on: `fstat` said size 0, `pread`
/// and `close` failed. The call's error now says why
/// (`SharedCache::out_of_slots`), so that the caller can serve the file
/// through the kernel; and once slots are free again (the others written
/// back) the handle is served again, with the file's bytes.
#[test]
fn a_full_table_is_an_out_of_slots_error_and_changes_nothing() {
    // 1,024 pages: 64 slots (63 for files), far below the dirty limit.
    let cache = SharedCache::new(4 << 20).unwrap();
    let files: Vec<TempPath> = (0..64).map(|_| TempPath::new("shared-full")).collect();
    let first = open(&cache, &files[0].path, false);
    first.write_at(b"first", 0).unwrap();
    first.sync_data().unwrap();
    // 63 more, each with unsaved data: the last takes the first's slot.
    let held: Vec<_> = files[1..]
        .iter()
        .map(|t| {
            let f = open(&cache, &t.path, false);
            f.write_at(b"unsaved", 0).unwrap();
            f
        })
        .collect();
    let e = first.len().unwrap_err();
    assert!(SharedCache::out_of_slots(&e), "{e}");
    let e = first.write_at(b"X", 0).unwrap_err();
    assert!(SharedCache::out_of_slots(&e), "{e}");
    assert_eq!(std::fs::read(&files[0].path).unwrap(), b"first");
    let extra = TempPath::new("shared-full");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&extra.path)
        .unwrap();
    let Err(e) = cache.open(file) else {
        panic!("a file served past a full table");
    };
    assert!(SharedCache::out_of_slots(&e), "{e}");
    // An error of another kind is not one.
    assert!(!SharedCache::out_of_slots(&std::io::Error::other("x")));

    cache.write_back_all().unwrap();
    assert_eq!(first.len().unwrap(), 5);
    let mut buf = [0u8; 16];
    assert_eq!(first.read_at(&mut buf, 0).unwrap(), 5);
    assert_eq!(&buf[..5], b"first");
    for (f, t) in held.iter().zip(&files[1..]) {
        assert_eq!(f.len().unwrap(), 7);
        assert_eq!(std::fs::read(&t.path).unwrap(), b"unsaved");
    }
    cache.verify().unwrap();
}

/// The story: a PostgreSQL group's writeback after a kill printed `not:
/// slot N: No such file or directory` for a file PostgreSQL had unlinked
/// (the writeback opens each dirty file by the path it was opened with).
/// The kernel drops an unlinked file's pages once its last user is gone,
/// with nothing said; so does the group: kept while a process holds the
/// file open (this one, here), dropped once none does, the writeback
/// succeeding both times.
#[test]
fn an_unlinked_files_pages_go_once_no_process_holds_it() {
    let cache = SharedCache::new(4 << 20).unwrap();
    let t = TempPath::new("shared-unlinked");
    let f = open(&cache, &t.path, false);
    f.write_at(&[7; 8192], 0).unwrap();
    assert_eq!(cache.dirty_pages(), 2);
    std::fs::remove_file(&t.path).unwrap();
    assert_eq!(cache.write_back_all().unwrap(), 0);
    assert_eq!(cache.dirty_pages(), 2, "kept while held open");
    let mut buf = [0u8; 8192];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 8192);
    assert!(buf.iter().all(|&b| b == 7));
    drop(f);
    assert_eq!(cache.write_back_all().unwrap(), 0);
    assert_eq!(cache.dirty_pages(), 0, "dropped once no process holds it");
    cache.verify().unwrap();
}
