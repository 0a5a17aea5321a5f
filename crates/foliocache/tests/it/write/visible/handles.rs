//! To whom a write is visible: every handle and every open of one path in
//! a cache share one file (one mapping), so a read-only handle sees the
//! writes of a writable one, an open with `truncate` empties the file for
//! the handles already open, and threads opening and closing the path see
//! their own writes; a path replaced on disk opens the new file. Handles
//! and caches are `Send` and `Sync`.

// The tests drive and count their own threads with std atomics and locks;
// the shim rule (clippy.toml) is for the crate's protocols.
#![allow(clippy::disallowed_types)]

use std::io::ErrorKind;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;

use foliocache::{Cache, File};

use crate::common::write as wcommon;
use test_support::cache::TestCache;
use test_support::TempPath;
use wcommon::{
    assert_same, disk, nonzero_bytes, open_rw, pat, read_all, read_vec, stress_secs, Model, HANG,
};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

#[test]
fn every_open_of_a_file_shares_one_mapping() {
    let c = TestCache::bytes(8 << 20).build();
    let p = TempPath::new("every-open");
    std::fs::write(&p, vec![b'a'; 10000]).unwrap();
    // Read-only first: its folios are cached.
    let r = c.open(&p).unwrap();
    let mut back = vec![0u8; 10000];
    r.read_exact_at(&mut back, 0).unwrap();
    // A writable open of the same file: the reader sees its writes, and
    // the writes reach the file through the writable descriptor.
    let w = c.open_options().read(true).write(true).open(&p).unwrap();
    w.write_at(b"zz", 100).unwrap();
    r.read_exact_at(&mut back, 0).unwrap();
    assert_eq!(&back[99..103], b"azza");
    assert_eq!(r.len(), 10000);
    w.sync_data().unwrap();
    assert_eq!(&std::fs::read(&p).unwrap()[99..103], b"azza");
    // An O_TRUNC open empties the shared cache too.
    let t = c
        .open_options()
        .write(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    assert_eq!(r.len(), 0);
    assert_eq!(r.read_at(&mut back, 0).unwrap(), 0);
    t.write_at(b"new", 0).unwrap();
    drop((t, w));
    // The last writable handle is gone, the data is not.
    let mut three = [0u8; 3];
    r.read_exact_at(&mut three, 0).unwrap();
    assert_eq!(&three, b"new");
    c.sync_all().unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"new");
}

#[test]
fn two_opens_of_one_path_in_one_cache_see_each_others_writes() {
    let data = nonzero_bytes(100_000, 30);
    let tmp = TempPath::with_data("two-opens", &data);
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    // A read-only handle first, with the data cached.
    let r = c.open(&tmp.path).unwrap();
    assert_eq!(read_all(&r), data);
    let w = open_rw(&c, &tmp.path);
    let mut model = Model { data };
    w.write_all_at(b"written through w", 5000).unwrap();
    model.write(5000, b"written through w");
    w.write_all_at(b"tail", 100_000).unwrap();
    model.write(100_000, b"tail");
    assert_eq!(
        r.len(),
        model.len(),
        "the read-only handle sees the new size"
    );
    assert_same(
        "the read-only handle sees the writes",
        &read_all(&r),
        &model.data,
    );
    assert!(!r.is_writable(), "and stays read-only");
    assert_eq!(
        r.write_at(b"x", 0).unwrap_err().kind(),
        ErrorKind::PermissionDenied
    );
    // A second writable open shares it too.
    let w2 = open_rw(&c, &tmp.path);
    w2.write_all_at(b"w2", 0).unwrap();
    model.write(0, b"w2");
    assert_same("w sees w2's write", &read_all(&w), &model.data);
    w2.set_len(50_000).unwrap();
    model.set_len(50_000);
    assert_eq!(w.len(), 50_000);
    assert_eq!(r.len(), 50_000);
    drop(w);
    drop(w2);
    // The read-only handle keeps the file open (and its dirty data cached,
    // as the kernel keeps a closed fd's dirty pages); a sync through it
    // writes the file, as fsync on an O_RDONLY fd does.
    r.sync_all().unwrap();
    assert_same(
        "on disk after the writers closed",
        &disk(&tmp.path),
        &model.data,
    );
    assert_same("r at the end", &read_all(&r), &model.data);
}

#[test]
fn an_open_with_truncate_empties_the_file_for_handles_already_open() {
    let data = nonzero_bytes(30_000, 31);
    let tmp = TempPath::with_data("trunc-shared", &data);
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    assert_eq!(read_all(&f), data);
    f.write_all_at(b"dirty", 10).unwrap();
    let _t = c
        .open_options()
        .write(true)
        .truncate(true)
        .open(&tmp.path)
        .unwrap();
    assert_eq!(f.len(), 0, "O_TRUNC through another open empties the file");
    assert_eq!(read_vec(&f, 0, 100).unwrap(), b"");
    f.write_all_at(b"x", 3).unwrap();
    f.sync_all().unwrap();
    assert_eq!(disk(&tmp.path), b"\0\0\0x", "no stale byte comes back");
}

#[test]
fn a_path_replaced_on_disk_opens_the_new_file_not_the_open_one() {
    // Opens share a file by its identity (device, inode), not its name.
    let tmp = TempPath::with_data("replaced", b"old file");
    let c = TestCache::bytes(MIB).max_folio(16 * KIB).build();
    let f = open_rw(&c, &tmp.path);
    f.write_all_at(b"OLD", 0).unwrap(); // dirty in the cache
    std::fs::remove_file(&tmp.path).unwrap();
    std::fs::write(&tmp.path, b"new file!").unwrap();
    let g = open_rw(&c, &tmp.path);
    assert_eq!(read_all(&g), b"new file!", "the new file, not the open one");
    assert_eq!(read_all(&f), b"OLD file", "the open one keeps its data");
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(
        disk(&tmp.path),
        b"new file!",
        "the old file's writeback went to the old inode"
    );
    // A rename keeps the identity: an open of the new name shares.
    let renamed = TempPath::new("renamed");
    std::fs::rename(&tmp.path, &renamed.path).unwrap();
    g.write_all_at(b"NEW", 0).unwrap();
    let h = open_rw(&c, &renamed.path);
    assert_eq!(
        read_all(&h),
        b"NEW file!",
        "a renamed open file is the same file"
    );
}

/// Threads open one path, write their own region, read it back, and drop
/// the handle, over and over: the last handle's writeback races new opens
/// (which must share the file still registered, or read what that
/// writeback wrote). Every read sees the thread's own last write; at the
/// end the file on disk holds every region's last version.
#[test]
fn threads_opening_and_closing_one_path_see_their_own_writes() {
    const THREADS: usize = 4;
    const REGION: u64 = 30_001;
    let tmp = TempPath::with_data("open-close", &vec![0u8; THREADS * REGION as usize]);
    let c = TestCache::bytes(512 * KIB).max_folio(16 * KIB).build();
    let stop = Arc::new(AtomicBool::new(false));
    let run = stress_secs();
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (c, stop, path) = (c.clone(), stop.clone(), tmp.path.clone());
            std::thread::spawn(move || {
                let base = t as u64 * REGION;
                let mut v = 0u64;
                while !stop.load(SeqCst) {
                    let f = open_rw(&c, &path);
                    let got = wcommon::read_vec(&f, base, REGION as usize).unwrap();
                    let want: Vec<u8> = if v == 0 {
                        vec![0; REGION as usize]
                    } else {
                        (0..REGION).map(|o| pat(t, v, o)).collect()
                    };
                    assert_same(&format!("thread {t} after reopening, at v{v}"), &got, &want);
                    v += 1;
                    let bytes: Vec<u8> = (0..REGION).map(|o| pat(t, v, o)).collect();
                    f.write_all_at(&bytes, base).unwrap();
                    drop(f);
                }
                v
            })
        })
        .collect();
    std::thread::sleep(run);
    stop.store(true, SeqCst);
    let versions = wcommon::within(HANG, "the openers to stop", move || {
        threads.into_iter().map(|h| h.join()).collect::<Vec<_>>()
    });
    let mut want = Vec::new();
    for (t, v) in versions.into_iter().enumerate() {
        let v = v.unwrap_or_else(|p| std::panic::resume_unwind(p));
        want.extend((0..REGION).map(|o| pat(t, v, o)));
    }
    // Every handle is gone: the data must be in the file.
    assert_same(
        "the file after every handle closed",
        &disk(&tmp.path),
        &want,
    );
}

fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<File>();
    is::<Cache>();
}
