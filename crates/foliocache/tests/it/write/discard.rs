//! `File::discard`: every cached folio of a file goes, dirty ones unwritten,
//! and the file reads as its backing holds it (the mount's drop of an
//! unlinked file's data at its last close, as the kernel's
//! `truncate_inode_pages_final`).

use std::io::ErrorKind;

use crate::common::write as wcommon;
use test_support::cache::TestCache;
use test_support::TempPath;
use wcommon::{assert_same, disk, nonzero_bytes, open_rw, read_all, PAGE};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

#[test]
fn discard_drops_unwritten_writes_and_the_file_reads_its_backing() {
    for max_folio in [PAGE, 64 * KIB] {
        let data = nonzero_bytes(5 * PAGE + 100, 11);
        let tmp = TempPath::with_data("discard", &data);
        let c = TestCache::bytes(4 * MIB).max_folio(max_folio).build();
        let f = open_rw(&c, &tmp.path);
        let what = format!("max folio {max_folio}");
        // Cached and clean, then overwritten and extended: dirty.
        assert_same(&what, &read_all(&f), &data);
        let new = nonzero_bytes(3 * 64 * KIB, 12);
        f.write_all_at(&new, 1000).unwrap();
        assert_eq!(f.len(), 1000 + new.len() as u64, "{what}");
        let before = c.stats();
        f.discard().unwrap();
        let after = c.stats();
        // Nothing cached, nothing dirty, and the discard wrote nothing.
        let cs = f.cachestat(0, 0).unwrap();
        assert_eq!(
            (cs.cached, cs.dirty, cs.writeback),
            (0, 0, 0),
            "{what}: {cs:?}"
        );
        assert_eq!(after.dirty_bytes, 0, "{what}: {after:?}");
        assert_eq!(after.io_writes, before.io_writes, "{what}: {after:?}");
        // The file is its backing again: its size and bytes. (The flusher
        // may have written the new bytes back before the discard: then the
        // backing has them, and so does the file.)
        let on_disk = disk(&tmp.path);
        assert_eq!(f.len(), on_disk.len() as u64, "{what}");
        assert_same(&format!("{what}: after discard"), &read_all(&f), &on_disk);
        if after.io_writes == 0 {
            assert_same(&format!("{what}: backing untouched"), &on_disk, &data);
        }
        // A sync then has nothing to write.
        f.sync_all().unwrap();
        assert_eq!(c.stats().io_writes, after.io_writes, "{what}");
        assert_same(&format!("{what}: after sync"), &disk(&tmp.path), &on_disk);
    }
}

#[test]
fn discard_rereads_a_file_another_program_changed() {
    let data = nonzero_bytes(3 * PAGE, 13);
    let tmp = TempPath::with_data("discard-reread", &data);
    let c = TestCache::bytes(4 * MIB).max_folio(64 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    assert_same("cached", &read_all(&f), &data);
    // Changed and grown behind the cache's back: the cache still has the
    // old bytes and size.
    let changed = nonzero_bytes(7 * PAGE + 5, 14);
    std::fs::write(&tmp.path, &changed).unwrap();
    assert_same("stale before", &read_all(&f), &data);
    f.discard().unwrap();
    assert_eq!(f.len(), changed.len() as u64);
    assert_same("reread", &read_all(&f), &changed);
    // And shrunk.
    std::fs::write(&tmp.path, &changed[..100]).unwrap();
    f.discard().unwrap();
    assert_same("shrunk", &read_all(&f), &changed[..100]);
}

#[test]
fn a_pin_keeps_its_bytes_through_a_discard() {
    let data = nonzero_bytes(16 * KIB, 15);
    let tmp = TempPath::with_data("discard-pin", &data);
    let c = TestCache::bytes(4 * MIB).max_folio(16 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    f.write_all_at(&[0xAB; 8 * KIB], 0).unwrap();
    let pin = f.pin(0, 16 * KIB).unwrap();
    let pinned = pin.to_vec();
    f.discard().unwrap();
    assert_eq!(&pin[..], &pinned[..], "the pin's bytes changed");
    drop(pin);
    assert_same("after", &read_all(&f), &disk(&tmp.path));
}

#[test]
fn a_memory_file_refuses_discard_and_keeps_its_data() {
    let c = TestCache::bytes(4 * MIB).max_folio(64 * KIB).build();
    let f = c.memfile("discard-mem", 0).unwrap();
    f.write_all_at(&[7u8; 10_000], 0).unwrap();
    let e = f.discard().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert_eq!(read_all(&f), vec![7u8; 10_000]);
}
