//! The segment's bookkeeping and recovery, on real files: a segment is
//! filled as a cache fills it, its arena written through a mapping of
//! the memory file, then recovered as a guardian would.

use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;

use super::child::{private_anonymous, recover_from};
use super::recover::WrittenBack;
use super::segment::{Segment, PAGE};
use super::{Guard, Guardian};
use crate::shm::Map;

/// A fresh read-write shared mapping of `len` bytes of the segment's
/// memory file from `offset`, unmapped on drop.
fn map_rw(seg: &Segment, offset: u64, len: usize) -> Map {
    Map::new(seg.fd(), offset, len as u64, true).expect("mapping the segment")
}

/// A writable mapping of the segment's arena (as the arena maps it).
struct ArenaMap(Map);

impl ArenaMap {
    fn new(seg: &Segment) -> ArenaMap {
        ArenaMap(map_rw(
            seg,
            seg.arena_offset(),
            (seg.pages() * PAGE) as usize,
        ))
    }

    fn page(&mut self, page: u64) -> &mut [u8] {
        let (ptr, len) = self.0.range();
        assert!(((page + 1) * PAGE) as usize <= len);
        // SAFETY: inside the mapping, borrowed mutably from `self`.
        unsafe { std::slice::from_raw_parts_mut(ptr.add((page * PAGE) as usize), PAGE as usize) }
    }
}

/// A directory of this test's own, removed on drop.
struct Dir(std::path::PathBuf);

impl Dir {
    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn dir() -> Dir {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let p = std::env::temp_dir().join(format!("foliocache-guardian-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&p).expect("a temporary directory");
    Dir(p)
}

/// A file of `len` bytes of `fill`, and its slot in `guard`.
fn file_with_slot(guard: &Guard, path: &std::path::Path, len: usize, fill: u8, size: u64) -> u32 {
    std::fs::write(path, vec![fill; len]).unwrap();
    let md = std::fs::metadata(path).unwrap();
    guard
        .take_slot(
            (md.dev(), md.ino(), 0),
            size,
            path.as_os_str().as_encoded_bytes(),
        )
        .expect("a slot")
}

fn guard(pages: u64) -> Guard {
    let fd: OwnedFd =
        rustix::fs::memfd_create(super::segment::NAME, rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    Guard::new(Guardian::Segment(std::sync::Arc::new(fd)), pages)
        .unwrap()
        .expect("a guard")
}

#[test]
fn unsaved_pages_are_written_to_their_files_at_their_offsets() {
    let d = dir();
    let g = guard(64);
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    let sa = file_with_slot(&g, &a, 8 * PAGE as usize, b'.', 8 * PAGE);
    let sb = file_with_slot(&g, &b, 2 * PAGE as usize, b'.', 3 * PAGE - 100);
    let mut arena = ArenaMap::new(g.segment());
    // a: arena pages 10..13 hold file pages 4..7 (one run), page 20 holds 1.
    for (i, p) in (10..13).enumerate() {
        arena.page(p).fill(b'A' + i as u8);
    }
    arena.page(20).fill(b'z');
    g.segment().mark_unsaved(10, 3, sa, 4);
    g.segment().mark_unsaved(20, 1, sa, 1);
    // b: grows to 3 pages less 100 bytes; page 2 of it is arena page 5.
    arena.page(5).fill(b'B');
    g.segment().mark_unsaved(5, 1, sb, 2);
    // A page saved since: not written.
    arena.page(30).fill(b'!');
    g.segment().mark_unsaved(30, 1, sa, 0);
    g.segment().clear_unsaved(30, 1);
    assert_eq!(g.segment().unsaved_pages(), 5);
    drop(arena);

    let done = recover_from(g.segment().fd());
    assert_eq!(
        done,
        WrittenBack {
            files: 2,
            bytes: 4 * PAGE + (PAGE - 100),
            skipped: 0
        }
    );
    let a = std::fs::read(&a).unwrap();
    assert_eq!(a.len(), 8 * PAGE as usize);
    let page = |f: &[u8], p: usize| f[p * PAGE as usize..(p + 1) * PAGE as usize].to_vec();
    assert_eq!(
        page(&a, 0),
        vec![b'.'; PAGE as usize],
        "a saved page is not written"
    );
    assert_eq!(page(&a, 1), vec![b'z'; PAGE as usize]);
    for (i, p) in (4..7).enumerate() {
        assert_eq!(page(&a, p), vec![b'A' + i as u8; PAGE as usize]);
    }
    assert_eq!(page(&a, 7), vec![b'.'; PAGE as usize]);
    let b = std::fs::read(&b).unwrap();
    assert_eq!(
        b.len(),
        (3 * PAGE - 100) as usize,
        "the file grows to the cache's size"
    );
    assert_eq!(
        &b[2 * PAGE as usize..],
        &vec![b'B'; (PAGE - 100) as usize][..]
    );
}

#[test]
fn a_file_replaced_at_its_path_is_never_written() {
    let d = dir();
    let g = guard(16);
    let p = d.path().join("f");
    let slot = file_with_slot(&g, &p, PAGE as usize, b'.', PAGE);
    let mut arena = ArenaMap::new(g.segment());
    arena.page(3).fill(b'X');
    g.segment().mark_unsaved(3, 1, slot, 0);
    drop(arena);
    // Another file renamed over the path: another inode.
    let other = d.path().join("other");
    std::fs::write(&other, b"other").unwrap();
    std::fs::rename(&other, &p).unwrap();
    let done = recover_from(g.segment().fd());
    assert_eq!(done.skipped, 1);
    assert_eq!(done.bytes, 0);
    assert_eq!(std::fs::read(&p).unwrap(), b"other");
}

#[test]
fn a_file_of_another_generation_at_the_same_inode_is_never_written() {
    let d = dir();
    let g = guard(16);
    let p = d.path().join("f");
    std::fs::write(&p, b"fresh").unwrap();
    let f = std::fs::File::open(&p).unwrap();
    let now = super::persist::file_version(std::os::fd::AsFd::as_fd(&f));
    if now == 0 {
        // The filesystem tells no generation: device and inode alone.
        return;
    }
    let md = f.metadata().unwrap();
    // The inode number reused by a file made after the slot's.
    let slot = g
        .take_slot(
            (md.dev(), md.ino(), now ^ 1),
            PAGE,
            p.as_os_str().as_encoded_bytes(),
        )
        .unwrap();
    let mut arena = ArenaMap::new(g.segment());
    arena.page(2).fill(b'X');
    g.segment().mark_unsaved(2, 1, slot, 0);
    drop(arena);
    let done = recover_from(g.segment().fd());
    assert_eq!((done.skipped, done.bytes), (1, 0));
    assert_eq!(std::fs::read(&p).unwrap(), b"fresh");
}

#[test]
fn a_persisted_launch_s_segment_is_claimed_and_recovered() {
    let d = dir();
    let owner = super::persist::Owner::Dirs(vec![d.path().to_path_buf()]);
    let Ok(run) = super::persist::Run::create(&owner) else {
        // No tmpfs /dev/shm here.
        return;
    };
    let fd = run.guard_file().unwrap();
    let g = Guard::new(Guardian::Segment(std::sync::Arc::new(fd)), 16)
        .unwrap()
        .expect("a guard");
    let p = d.path().join("f");
    let slot = file_with_slot(&g, &p, 0, b'.', PAGE);
    let mut arena = ArenaMap::new(g.segment());
    arena.page(5).fill(b'P');
    g.segment().mark_unsaved(5, 1, slot, 0);
    drop(arena);
    let done = recover_from(g.segment().fd());
    assert_eq!((done.files, done.bytes), (1, PAGE));
    assert_eq!(std::fs::read(&p).unwrap(), vec![b'P'; PAGE as usize]);
    drop(g);
    run.remove();
}

#[test]
fn a_file_longer_by_less_than_a_page_is_cut_and_one_appended_to_is_kept() {
    let d = dir();
    let g = guard(16);
    let (rounded, appended) = (d.path().join("rounded"), d.path().join("appended"));
    // The cache's size is 5000; an O_DIRECT writeback left 8192.
    let s1 = file_with_slot(&g, &rounded, 2 * PAGE as usize, b'r', 5000);
    // Another writer appended past the cache's 5000 to 3 pages.
    let s2 = file_with_slot(&g, &appended, 3 * PAGE as usize, b'a', 5000);
    let mut arena = ArenaMap::new(g.segment());
    arena.page(0).fill(b'1');
    arena.page(1).fill(b'2');
    g.segment().mark_unsaved(0, 1, s1, 0);
    g.segment().mark_unsaved(1, 1, s2, 0);
    drop(arena);
    recover_from(g.segment().fd());
    let r = std::fs::read(&rounded).unwrap();
    assert_eq!(r.len(), 5000);
    assert!(r[..PAGE as usize].iter().all(|&c| c == b'1'));
    let a = std::fs::read(&appended).unwrap();
    assert_eq!(a.len(), 3 * PAGE as usize);
    assert!(a[..PAGE as usize].iter().all(|&c| c == b'2'));
}

#[test]
fn a_scribbled_segment_writes_nothing_outside_and_never_panics() {
    let g = guard(16);
    // Owners naming slots out of range or free, pages past any size.
    let seg = g.segment();
    seg.mark_unsaved(0, 4, 7, 0);
    seg.mark_unsaved(4, 2, 200, 1 << 40);
    assert_eq!(recover_from(seg.fd()), WrittenBack::default());
    // A header scribbled on: refused whole.
    let len = rustix::fs::fstat(seg.fd()).unwrap().st_size as usize;
    let map = map_rw(seg, 0, len);
    let p = map.range().0;
    for (off, v) in [(24usize, u64::MAX), (40, 1), (32, 1 << 30)] {
        // SAFETY: inside the mapping's first page, 8-byte aligned.
        unsafe { p.add(off).cast::<u64>().write_volatile(v) };
        assert_eq!(recover_from(seg.fd()), WrittenBack::default());
    }
    drop(map);
}

#[test]
fn a_segment_claimed_by_a_live_process_is_refused() {
    let g = guard(16);
    let fd = rustix::io::fcntl_dupfd_cloexec(g.segment().fd(), 0).unwrap();
    // This process claimed it: another claim by the same pid re-lays it
    // out (an exec'd image of the process); a live other owner is refused.
    let seg = g.segment();
    let len = rustix::fs::fstat(seg.fd()).unwrap().st_size as usize;
    let map = map_rw(seg, 0, PAGE as usize);
    let p = map.range().0;
    assert!(len > PAGE as usize);
    // Owner: pid 1, alive.
    // SAFETY: the header's owner word, inside the mapping.
    unsafe { p.add(12).cast::<u32>().write_volatile(1) };
    let err = Guard::new(Guardian::Segment(std::sync::Arc::new(fd)), 16)
        .err()
        .expect("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    drop(map);
}

#[test]
fn an_fd_that_is_not_a_guardians_memory_file_is_refused() {
    let d = dir();
    let f = std::fs::File::create(d.path().join("victim")).unwrap();
    std::fs::write(d.path().join("victim"), b"data").unwrap();
    let err = Guard::new(Guardian::Segment(std::sync::Arc::new(f.into())), 16)
        .err()
        .expect("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(std::fs::read(d.path().join("victim")).unwrap(), b"data");
}

#[test]
fn slots_are_reused_and_run_out() {
    let g = guard(16);
    let n = g.segment().slots() - 1;
    let taken: Vec<u32> = (0..n)
        .map(|i| g.take_slot((1, i, 0), 0, b"/x").expect("a slot"))
        .collect();
    assert!(
        g.take_slot((1, 0, 0), 0, b"/x").is_none(),
        "every slot is taken"
    );
    assert!(!taken.contains(&0), "slot 0 is never handed out");
    g.free_slot(taken[3]);
    assert_eq!(g.take_slot((1, 0, 0), 0, b"/y"), Some(taken[3]));
    let long = vec![b'p'; 5000];
    g.free_slot(taken[4]);
    assert_eq!(
        g.take_slot((1, 0, 0), 0, &long),
        None,
        "a path too long for a slot"
    );
}

#[test]
fn maps_lines_are_parsed_for_private_anonymous_ranges() {
    assert_eq!(
        private_anonymous(b"7f00a000-7f00c000 rw-p 00000000 00:00 0 "),
        Some((0x7f00a000, 0x7f00c000))
    );
    assert_eq!(
        private_anonymous(
            b"55d0e000-55d2f000 rw-p 00000000 00:00 0                          [heap]"
        ),
        Some((0x55d0e000, 0x55d2f000))
    );
    assert_eq!(
        private_anonymous(b"7f00a000-7f00c000 rw-s 00000000 00:01 123 /memfd:x"),
        None
    );
    assert_eq!(
        private_anonymous(b"7f00a000-7f00c000 r--p 00000000 00:00 0"),
        None
    );
    assert_eq!(
        private_anonymous(b"7f00a000-7f00c000 rw-p 00001000 08:01 4242 /lib/x.so"),
        None
    );
    assert_eq!(private_anonymous(b"garbage"), None);
}

#[test]
fn a_child_guardian_writes_back_after_its_program_dies() {
    // The "program" is a forked process that builds the guard (so the
    // child guards it), marks a page unsaved and is killed.
    let d = dir();
    let p = d.path().join("f");
    std::fs::write(&p, vec![b'.'; PAGE as usize]).unwrap();
    let md = std::fs::metadata(&p).unwrap();
    // SAFETY: the forked child makes only the calls below and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let code = (|| -> Option<()> {
            let g = Guard::new(Guardian::Child, 16).ok()??;
            let slot = g.take_slot(
                (md.dev(), md.ino(), 0),
                PAGE,
                p.as_os_str().as_encoded_bytes(),
            )?;
            let mut arena = ArenaMap::new(g.segment());
            arena.page(2).fill(b'K');
            g.segment().mark_unsaved(2, 1, slot, 0);
            std::mem::forget(arena);
            std::mem::forget(g);
            // Killed with the data unsaved.
            // SAFETY: kills this process.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            None
        })();
        let _ = code;
        // SAFETY: ends the forked child.
        unsafe { libc::_exit(3) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL,
        "status {status}"
    );
    // The guardian is the killed process's child, reparented: wait for its write.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let data = std::fs::read(&p).unwrap();
        if data.iter().all(|&c| c == b'K') {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the guardian did not write back"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The writeback of a large cache's segment reads only the slots that
/// were written: the thousands of slots never used are holes of the
/// memory file, which a read of each would fill with a page apiece
/// (`shmem_fault`); the used ones, before and after them, are written
/// back.
#[test]
fn a_writeback_faults_in_no_page_of_the_slots_never_used() {
    let d = dir();
    // 4,096 slots of a page each (a cache of 256 MiB).
    let g = guard(1 << 16);
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    let sa = file_with_slot(&g, &a, PAGE as usize, b'.', PAGE);
    let sb = file_with_slot(&g, &b, PAGE as usize, b'.', PAGE);
    let mut arena = ArenaMap::new(g.segment());
    arena.page(1).fill(b'a');
    arena.page(2).fill(b'b');
    g.segment().mark_unsaved(1, 1, sa, 0);
    g.segment().mark_unsaved(2, 1, sb, 0);
    drop(arena);
    let blocks = || rustix::fs::fstat(g.segment().fd()).unwrap().st_blocks;
    let before = blocks();
    let done = recover_from(g.segment().fd());
    assert_eq!((done.files, done.bytes), (2, 2 * PAGE));
    assert_eq!(std::fs::read(&a).unwrap(), vec![b'a'; PAGE as usize]);
    assert_eq!(std::fs::read(&b).unwrap(), vec![b'b'; PAGE as usize]);
    assert_eq!(
        blocks(),
        before,
        "the writeback filled holes of the segment"
    );
}
