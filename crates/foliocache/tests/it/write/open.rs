//! Opening a file for writing: `OpenOptions` (`append`, `create`,
//! `create_new`, `truncate`, `mode`, the combinations `std` refuses) and
//! what a handle may do (a read-only handle refuses writes and can sync;
//! a write-only one writes); concurrent appends each land whole at an
//! offset of their own.

use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;

use foliocache::WriteFlags;

use crate::common::write as wcommon;
use test_support::cache::TestCache;
use test_support::TempPath;
use wcommon::{assert_same, disk, nonzero_bytes, read_all, read_vec, Model};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

#[test]
fn a_file_opened_read_only_refuses_writes() {
    let data = nonzero_bytes(10_000, 14);
    let tmp = TempPath::with_data("ro", &data);
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    for f in [
        c.open(&tmp.path).unwrap(),
        c.open_options().read(true).open(&tmp.path).unwrap(),
    ] {
        assert!(!f.is_writable());
        let e = f.write_at(b"x", 0).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
        let e = f
            .write_at_flags(b"x", 0, WriteFlags::DONTCACHE)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
        assert!(f.set_len(0).is_err(), "set_len on a read-only file");
        assert!(
            f.punch_hole(0, 100).is_err(),
            "punch_hole on a read-only file"
        );
        assert_eq!(f.len(), 10_000);
        assert_eq!(read_all(&f), data);
    }
    assert_eq!(disk(&tmp.path), data);
}

#[test]
fn a_file_opened_write_only_is_writable() {
    let tmp = TempPath::new("wronly");
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    let f = c
        .open_options()
        .write(true)
        .create(true)
        .open(&tmp.path)
        .unwrap();
    assert!(f.is_writable());
    f.write_all_at(b"abc", 0).unwrap();
    f.sync_all().unwrap();
    assert_eq!(disk(&tmp.path), b"abc");
}

#[test]
fn a_read_only_handle_can_sync() {
    let tmp = TempPath::with_data("ro-sync", b"hello");
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    let f = c.open(&tmp.path).unwrap();
    f.sync_data().unwrap();
    f.sync_all().unwrap();
    c.sync_all().unwrap();
}

#[test]
fn append_writes_at_the_end_whatever_the_offset() {
    let data = nonzero_bytes(5000, 20);
    let tmp = TempPath::with_data("append", &data);
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    let f = c
        .open_options()
        .read(true)
        .append(true)
        .open(&tmp.path)
        .unwrap();
    assert!(f.is_writable(), "append implies write");
    let mut model = Model { data };
    for (i, off) in [0u64, 100, 1 << 20].into_iter().enumerate() {
        let buf = nonzero_bytes(3000 + i, 21 + i as u64);
        assert_eq!(f.write_at(&buf, off).unwrap(), buf.len());
        let end = model.len();
        model.write(end, &buf);
        assert_eq!(f.len(), model.len(), "append {i} at offset {off}");
    }
    assert_same("appended", &read_all(&f), &model.data);
    f.sync_all().unwrap();
    assert_same("on disk", &disk(&tmp.path), &model.data);
}

#[test]
fn concurrent_appends_each_land_whole_at_a_distinct_offset() {
    const REC: usize = 1000;
    const PER: usize = 200;
    let tmp = TempPath::new("append-mt");
    let c = TestCache::bytes(512 * KIB).max_folio(16 * KIB).build();
    let f = c
        .open_options()
        .read(true)
        .append(true)
        .create(true)
        .open(&tmp.path)
        .unwrap();
    let threads: Vec<_> = (1..=4u8)
        .map(|t| {
            let f = f.clone();
            std::thread::spawn(move || {
                for i in 0..PER {
                    // Every byte of a record says who wrote it.
                    let rec = vec![t.wrapping_mul(16) | (i % 16) as u8; REC];
                    assert_eq!(f.write_at(&rec, 0).unwrap(), REC);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(f.len(), (4 * PER * REC) as u64);
    let check = |what: &str, all: &[u8]| {
        let mut per_thread = [0usize; 5];
        for (k, rec) in all.chunks(REC).enumerate() {
            assert!(
                rec.iter().all(|&b| b == rec[0]),
                "{what}: record {k} at {} is torn",
                k * REC
            );
            let t = (rec[0] / 16) as usize;
            assert!(
                (1..=4).contains(&t),
                "{what}: record {k} has byte {:#x}",
                rec[0]
            );
            per_thread[t] += 1;
        }
        assert_eq!(&per_thread[1..], &[PER; 4], "{what}: records per thread");
    };
    check("cache", &read_all(&f));
    f.sync_all().unwrap();
    check("disk", &disk(&tmp.path));
}

#[test]
fn create_new_on_an_existing_path_fails_already_exists() {
    let tmp = TempPath::with_data("create-new", b"hello");
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    let e = c
        .open_options()
        .write(true)
        .create_new(true)
        .open(&tmp.path)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    assert_eq!(disk(&tmp.path), b"hello", "nothing was touched");
    // On a new path it creates an empty file.
    let fresh = TempPath::new("create-new-fresh");
    let f = c
        .open_options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&fresh.path)
        .unwrap();
    assert_eq!(f.len(), 0);
    assert!(fresh.path.exists());
}

#[test]
fn without_create_a_missing_path_is_not_found() {
    let tmp = TempPath::new("missing");
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    let e = c
        .open_options()
        .read(true)
        .write(true)
        .open(&tmp.path)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(!tmp.path.exists());
}

#[test]
fn truncate_empties_an_existing_file() {
    let tmp = TempPath::with_data("truncate", &nonzero_bytes(50_000, 22));
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    let f = c
        .open_options()
        .read(true)
        .write(true)
        .truncate(true)
        .open(&tmp.path)
        .unwrap();
    assert_eq!(f.len(), 0);
    assert_eq!(read_vec(&f, 0, 100).unwrap(), b"");
    assert_eq!(disk(&tmp.path).len(), 0, "O_TRUNC empties the file at open");
    f.write_all_at(b"new", 10).unwrap();
    f.sync_all().unwrap();
    assert_eq!(disk(&tmp.path), b"\0\0\0\0\0\0\0\0\0\0new");
}

#[test]
fn mode_sets_the_permissions_of_a_created_file() {
    let tmp = TempPath::new("mode");
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    let _f = c
        .open_options()
        .write(true)
        .create(true)
        .mode(0o600)
        .open(&tmp.path)
        .unwrap();
    let mode = std::fs::metadata(&tmp.path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn open_options_refuse_the_combinations_std_refuses() {
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    let existing = TempPath::with_data("opts", b"keep");
    let fresh = TempPath::new("opts-fresh");
    // As std::fs::OpenOptions: no access mode; create or truncate without
    // write access.
    let cases: [(&str, foliocache::OpenOptions); 4] = [
        ("nothing set", c.open_options()),
        ("create without write", {
            let mut o = c.open_options();
            o.read(true).create(true);
            o
        }),
        ("create_new without write", {
            let mut o = c.open_options();
            o.read(true).create_new(true);
            o
        }),
        ("truncate without write", {
            let mut o = c.open_options();
            o.read(true).truncate(true);
            o
        }),
    ];
    for (what, o) in cases {
        let std_err = {
            let mut s = std::fs::OpenOptions::new();
            match what {
                "nothing set" => {}
                "create without write" => {
                    s.read(true).create(true);
                }
                "create_new without write" => {
                    s.read(true).create_new(true);
                }
                _ => {
                    s.read(true).truncate(true);
                }
            }
            s.open(&existing.path).unwrap_err().kind()
        };
        for p in [&existing.path, &fresh.path] {
            let e = o.open(p).unwrap_err();
            assert_eq!(e.kind(), std_err, "{what} on {}: {e}", p.display());
        }
    }
    assert_eq!(disk(&existing.path), b"keep");
    assert!(!fresh.path.exists());
}
