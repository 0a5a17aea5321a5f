//! Recovery: what the guardian does once the cache's process is gone.
//! Every unsaved page of the segment is written to its file, then each
//! file's size set (docs/design.md, section 12, "Recovery").
//!
//! The code allocates nothing and takes no lock: it runs in a child
//! `clone`d from a program with threads, where only system calls are safe.
//! Messages go to stderr through a buffer on the stack.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd, RawFd};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::segment::{View, PAGE};
use crate::shm::{Map, SLOT_PATH};

/// An fd closed by the `close` system call when dropped, never by the C
/// library's `close` (which an interposer, foliocache's own among them,
/// may define: in a guardian child it must not run). Every fd the
/// guardian opens is one.
pub(crate) struct Fd(pub(crate) RawFd);

impl Fd {
    /// Takes `fd` over: it is closed (by a system call) on drop.
    pub(crate) fn own(fd: OwnedFd) -> Fd {
        Fd(fd.into_raw_fd())
    }
}

impl AsFd for Fd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd is open while `self` lives.
        unsafe { BorrowedFd::borrow_raw(self.0) }
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: the fd is this value's own, closed once.
        unsafe { rustix::io::close(self.0) };
    }
}

/// What a guardian wrote back ([`Guardian::write_back`]).
///
/// [`Guardian::write_back`]: crate::Guardian::write_back
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WrittenBack {
    /// Files written to.
    pub files: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Files skipped (each said on stderr): gone, replaced by another file
    /// at their path, or a write that failed.
    pub skipped: u64,
}

/// A line for stderr, built on the stack.
pub(crate) struct Line {
    buf: [u8; 512],
    len: usize,
}

impl Line {
    pub(crate) fn new() -> Line {
        Line {
            buf: [0; 512],
            len: 0,
        }
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) -> &mut Line {
        let n = b.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
        self.len += n;
        self
    }

    pub(crate) fn num(&mut self, mut v: u64) -> &mut Line {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.bytes(&digits[i..])
    }

    /// Writes the line and a newline to stderr (errors ignored: there is
    /// nowhere else to say them).
    pub(crate) fn say(&mut self) {
        self.bytes(b"\n");
        // SAFETY: fd 2 is borrowed for the call only; if it is closed the
        // write fails, which is ignored.
        let stderr = unsafe { BorrowedFd::borrow_raw(2) };
        let mut at = 0;
        while at < self.len {
            match rustix::io::write(stderr, &self.buf[at..self.len]) {
                Ok(0) | Err(_) => break,
                Ok(n) => at += n,
            }
        }
    }
}

/// Says on stderr that the file of `path` was skipped, and why.
fn skipped(path: &std::ffi::CStr, why: &[u8], errno: Option<Errno>) {
    let mut l = Line::new();
    l.bytes(b"foliocache guardian: ")
        .bytes(path.to_bytes())
        .bytes(b": ")
        .bytes(why);
    if let Some(e) = errno {
        l.bytes(b" (errno ")
            .num(e.raw_os_error() as u64)
            .bytes(b")");
    }
    l.bytes(b"; its unsaved data is lost").say();
}

/// Writes back what the segment `map` maps (the whole memory file `fd`)
/// holds unsaved.
pub(crate) fn recover(map: &Map, fd: BorrowedFd<'_>) -> WrittenBack {
    let mut done = WrittenBack::default();
    let view = match View::new(map, Some(fd)) {
        Ok(v) => v,
        // A segment no process claimed (a launcher's program that opened
        // no served file): nothing to do.
        Err(_) if map.read_u64(0).is_none_or(|w| w == 0) => return done,
        Err(why) => {
            Line::new()
                .bytes(b"foliocache guardian: the segment is unreadable: ")
                .bytes(why.as_bytes())
                .say();
            return done;
        }
    };
    let mut path = [0u8; SLOT_PATH];
    for slot in 1..view.slots {
        let Some((id, size, path)) = view.slot(slot, &mut path) else {
            continue;
        };
        match recover_file(&view, slot, (id, size), path) {
            Ok(0) => {}
            Ok(n) => {
                done.files += 1;
                done.bytes += n;
            }
            Err(()) => done.skipped += 1,
        }
    }
    done
}

/// Writes back the unsaved pages of slot `slot` (its file's identity,
/// device, inode and generation, and its size, at `path`), then sets the
/// file's size. Returns the bytes written, or `Err` (said on stderr) if
/// the file was skipped.
fn recover_file(
    view: &View,
    slot: u64,
    ((dev, ino, version), size): ((u64, u64, u64), u64),
    path: &std::ffi::CStr,
) -> Result<u64, ()> {
    let fd = match rustix::fs::open(
        path,
        OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    ) {
        Ok(fd) => Fd::own(fd),
        Err(e) => {
            skipped(path, b"cannot open it", Some(e));
            return Err(());
        }
    };
    let st = match rustix::fs::fstat(&fd) {
        Ok(st) => st,
        Err(e) => {
            skipped(path, b"cannot stat it", Some(e));
            return Err(());
        }
    };
    if st.st_dev != dev
        || st.st_ino != ino
        || !super::persist::same_version(version, super::persist::file_version(fd.as_fd()))
    {
        skipped(path, b"another file is at its path now", None);
        return Err(());
    }
    let written = write_pages(view, slot, size, fd.as_fd())
        .map_err(|e| skipped(path, b"a write failed", Some(e)))?;
    // The size: a file shorter than the cache's grows to it (writes past
    // its end that never reached it); one longer by less than a page is
    // cut to it (an O_DIRECT writeback of the last page rounded it up
    // before the close would have fixed it); one longer than that keeps
    // its size (another writer appended).
    let on_disk = st.st_size.max(0) as u64;
    let now = on_disk.max(written.1);
    let fix = (written.0 > 0 && now < size) || (size < now && now <= size.next_multiple_of(PAGE));
    if fix {
        if let Err(e) = rustix::fs::ftruncate(&fd, size) {
            skipped(path, b"setting its size failed", Some(e));
            return Err(());
        }
    }
    Ok(written.0)
}

/// Writes each run of unsaved pages that slot `slot` owns to `fd`, cut at
/// `size`. Returns the bytes written and the end of the last write.
fn write_pages(view: &View, slot: u64, size: u64, fd: BorrowedFd<'_>) -> Result<(u64, u64), Errno> {
    let size_pages = size.div_ceil(PAGE);
    let (mut bytes, mut end) = (0u64, 0u64);
    // A run: arena pages from `start`, file pages from `file`, `n` long.
    let mut run: Option<(u64, u64, u64)> = None;
    for w in 0..view.unsaved_words() {
        let mut bits = view.unsaved_word(w);
        while bits != 0 {
            let page = w * 64 + u64::from(bits.trailing_zeros());
            bits &= bits - 1;
            let (owner, file_page) = view.owner(page);
            if owner != slot || file_page >= size_pages {
                continue;
            }
            run = match run {
                Some((s, f, n)) if s + n == page && f + n == file_page => Some((s, f, n + 1)),
                other => {
                    if let Some(r) = other {
                        let (b, e) = write_run(view, r, size, fd)?;
                        bytes += b;
                        end = end.max(e);
                    }
                    Some((page, file_page, 1))
                }
            };
        }
    }
    if let Some(r) = run {
        let (b, e) = write_run(view, r, size, fd)?;
        bytes += b;
        end = end.max(e);
    }
    Ok((bytes, end))
}

/// Writes one run (arena page, file page, pages), its end cut at `size`,
/// straight from the mapping (a system call reads it: no Rust reference
/// to memory another process may write).
fn write_run(
    view: &View,
    (start, file, n): (u64, u64, u64),
    size: u64,
    fd: BorrowedFd<'_>,
) -> Result<(u64, u64), Errno> {
    let at = file * PAGE;
    let len = (n * PAGE).min(size - at);
    let data = view.arena_ptr(start, n).ok_or(Errno::INVAL)?;
    let mut done = 0u64;
    while done < len {
        // SAFETY: `data..data + len` is inside the mapping (`arena_ptr`),
        // which the caller keeps mapped; pwrite64 only reads it. The
        // system call itself, not the C library's `pwrite` or `syscall`,
        // which an interposer defines (`super::raw`).
        let r = unsafe {
            super::raw::call(
                libc::SYS_pwrite64,
                [
                    fd.as_raw_fd() as usize,
                    data.add(done as usize) as usize,
                    (len - done) as usize,
                    (at + done) as usize,
                ],
            )
        };
        match r {
            0 => return Err(Errno::IO),
            k if k > 0 => done += k as u64,
            e => match Errno::from_raw_os_error(-e as i32) {
                Errno::INTR => {}
                e => return Err(e),
            },
        }
    }
    Ok((len, at + len))
}
