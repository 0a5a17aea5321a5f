//! The guardian child of a program with no launcher (docs/design.md,
//! section 12, "The guardian process"): `clone`d at the cache's build, it
//! sleeps until the program dies or drops its cache, then writes back
//! what the segment holds unsaved.
//!
//! The child is a copy of a program that may have threads, so it only
//! makes system calls: nothing allocates, nothing locks, and the calls an
//! interposer defines (foliocache's own defines `syscall`, `pwrite`,
//! `close_range`, `_exit`) are made by the instruction
//! ([`raw`](super::raw)), from the `clone` on. Its copy of the
//! program's private anonymous memory (the heap, the other threads'
//! stacks) is dropped at once (`MADV_DONTNEED`), so the program's later
//! writes to that memory copy nothing: only the child's own stack stays.

use std::ffi::c_int;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::raw;
use super::recover::{recover, Fd, Line};

/// The guardian child, from the program's side.
pub(crate) struct Child {
    pid: libc::pid_t,
    /// A byte written here tells the child the cache is gone with nothing
    /// unsaved.
    wake: OwnedFd,
    /// The process that spawned it: a forked copy of the program does not
    /// tell it anything.
    parent: u32,
}

fn last_os_error(what: &str) -> io::Error {
    error(what, io::Error::last_os_error())
}

/// `e`, said to be `what` failing as the guardian started.
fn error(what: &str, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("starting the cache's guardian: {what}: {e}"),
    )
}

/// Starts the guardian of the segment in the memory file `segment`.
pub(crate) fn spawn(segment: BorrowedFd<'_>) -> io::Result<Child> {
    let parent = std::process::id();
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, parent as libc::pid_t, 0) };
    if pidfd < 0 {
        return Err(last_os_error("pidfd_open"));
    }
    // SAFETY: a fresh fd, owned from here.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
    let mut fds = [0 as c_int; 2];
    // SAFETY: `fds` has room for the two fds pipe2 returns.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(last_os_error("pipe2"));
    }
    // SAFETY: two fresh fds, owned from here.
    let (wait_end, wake) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: a clone with no flags and no exit signal is a fork whose
    // child no `wait()` of the program sees and whose end sends the
    // program no SIGCHLD; no fork handler runs (the program's, or an
    // interposer's), nor an interposer's `syscall` (the instruction
    // itself). The child runs `child_main`, which makes only system calls
    // and never returns.
    let pid = unsafe { raw::call(libc::SYS_clone, [0; 4]) };
    if pid < 0 {
        return Err(error("clone", io::Error::from_raw_os_error(-pid as i32)));
    }
    if pid == 0 {
        child_main(segment.as_raw_fd(), pidfd.as_raw_fd(), wait_end.as_raw_fd());
    }
    Ok(Child {
        pid: pid as libc::pid_t,
        wake,
        parent,
    })
}

impl Drop for Child {
    /// The cache is gone, everything written back: the child ends without
    /// writing, and is reaped.
    fn drop(&mut self) {
        if std::process::id() != self.parent {
            return;
        }
        let _ = rustix::io::write(&self.wake, &[1]);
        let mut status = 0;
        // SAFETY: waits for our own child (a clone child: `__WCLONE`).
        unsafe { libc::waitpid(self.pid, &mut status, libc::__WCLONE) };
    }
}

/// The signals a guardian ignores: a terminal's, a pipe's, a service
/// manager's stop (it ends when the program does).
const IGNORED: [c_int; 10] = [
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGHUP,
    libc::SIGTERM,
    libc::SIGPIPE,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
    libc::SIGTSTP,
    libc::SIGTTOU,
];

/// The child: leave the program's session and memory, sleep until the
/// program is gone or says so, write back, exit.
fn child_main(segment: RawFd, pidfd: RawFd, wait_end: RawFd) -> ! {
    // Its own session, away from the terminal's signals; the signals
    // above ignored; no signal blocked.
    // SAFETY: plain system calls on this process's own state (glibc's
    // wrappers take no lock).
    unsafe {
        libc::setsid();
        // The program's handlers are the program's: every signal back to
        // its default action (its code must not run here), then the ones
        // above ignored.
        for sig in 1..libc::SIGRTMAX() {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        for sig in IGNORED {
            libc::signal(sig, libc::SIG_IGN);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_NAME, c"fc-guardian".as_ptr());
    }
    keep_only_fds(&mut [segment, pidfd, wait_end]);
    drop_private_memory();
    // SAFETY: the fds are this process's, kept above.
    let (pidfd, wait_end) = unsafe {
        (
            BorrowedFd::borrow_raw(pidfd),
            BorrowedFd::borrow_raw(wait_end),
        )
    };
    // The program is gone when its pidfd is readable, or when the pipe's
    // every write end closed (the program's, at its death or its `exec`,
    // and those of its forked children) without a byte: then what it left
    // unsaved is written. A byte on the pipe: its cache was dropped with
    // everything written back.
    let program_gone = loop {
        let mut fds = [
            rustix::event::PollFd::new(&pidfd, rustix::event::PollFlags::IN),
            rustix::event::PollFd::new(&wait_end, rustix::event::PollFlags::IN),
        ];
        match rustix::event::poll(&mut fds, None) {
            Ok(_) if !fds[0].revents().is_empty() => break true,
            Ok(_) if !fds[1].revents().is_empty() => {
                let mut byte = [0u8; 1];
                match rustix::io::read(wait_end, &mut byte) {
                    Ok(1) => break false,
                    Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => continue,
                    Ok(_) | Err(_) => break true,
                }
            }
            Ok(_) | Err(rustix::io::Errno::INTR) => continue,
            Err(_) => break true,
        }
    };
    if program_gone {
        // SAFETY: the segment's fd, kept above.
        recover_from(unsafe { BorrowedFd::borrow_raw(segment) });
    }
    super::raw::exit(0)
}

/// Writes back what the segment in the memory file `fd` holds unsaved,
/// and says what it wrote on stderr. (Allocation-free.)
pub(crate) fn recover_from(fd: BorrowedFd<'_>) -> super::recover::WrittenBack {
    let Ok(st) = rustix::fs::fstat(fd) else {
        return Default::default();
    };
    let len = st.st_size.max(0) as usize;
    if len == 0 {
        return Default::default();
    }
    let Ok(map) = crate::shm::Map::new(fd, 0, len as u64, false) else {
        Line::new()
            .bytes(b"foliocache guardian: cannot map the segment; unsaved data is lost")
            .say();
        return Default::default();
    };
    let done = recover(&map, fd);
    if done.bytes > 0 {
        Line::new()
            .bytes(b"foliocache guardian: wrote back ")
            .num(done.bytes)
            .bytes(b" bytes the program left unsaved in ")
            .num(done.files)
            .bytes(b" files")
            .say();
    }
    done
}

/// Closes every fd but 0, 1, 2 and `keep` (0 and 1 go to /dev/null: the
/// guardian holds no pipe a reader of the program's output waits on).
fn keep_only_fds(keep: &mut [RawFd]) {
    keep.sort_unstable();
    let mut from: u32 = 3;
    for &fd in keep.iter() {
        let fd = fd as u32;
        if fd > from {
            // SAFETY: closes fds of this process only.
            unsafe {
                raw::call(
                    libc::SYS_close_range,
                    [from as usize, fd as usize - 1, 0, 0],
                )
            };
        }
        from = from.max(fd + 1);
    }
    // SAFETY: as above.
    unsafe {
        raw::call(
            libc::SYS_close_range,
            [from as usize, u32::MAX as usize, 0, 0],
        )
    };
    // System calls, not the C library's functions: an interposer of
    // `open` or `dup2` (foliocache's own, loaded with LD_PRELOAD) must not
    // run in this child ([`raw`]).
    if let Ok(null) = rustix::fs::open(
        c"/dev/null",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map(Fd::own)
    {
        for std_fd in [0, 1] {
            // SAFETY: dup3 onto this process's fd 0 or 1 (no other thread
            // runs in this child); `null` stays open until dropped.
            unsafe { raw::call(libc::SYS_dup3, [null.0 as usize, std_fd, 0, 0]) };
        }
    }
}

/// Drops this process's copy of the program's private anonymous memory
/// (all but the stack it runs on): the program then writes its pages
/// without copying them. Reads `/proc/self/maps` into a buffer on the
/// stack, a line at a time.
fn drop_private_memory() {
    let marker = 0u8;
    let here = std::hint::black_box(std::ptr::addr_of!(marker)) as usize;
    let Ok(maps) = rustix::fs::open(
        c"/proc/self/maps",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map(Fd::own) else {
        return;
    };
    let mut buf = [0u8; 8192];
    let mut have = 0usize;
    loop {
        let n = match rustix::io::read(&maps, &mut buf[have..]) {
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => 0,
        };
        have += n;
        let mut start = 0;
        while let Some(nl) = buf[start..have].iter().position(|&c| c == b'\n') {
            if let Some((lo, hi)) = private_anonymous(&buf[start..start + nl]) {
                if !(lo..hi).contains(&here) {
                    // SAFETY: drops this process's pages of a private
                    // anonymous range it does not run on; the range stays
                    // mapped (reading zeros), and nothing here reads it.
                    let _ = unsafe {
                        rustix::mm::madvise(
                            lo as *mut _,
                            hi - lo,
                            rustix::mm::Advice::LinuxDontNeed,
                        )
                    };
                }
            }
            start += nl + 1;
        }
        buf.copy_within(start..have, 0);
        have -= start;
        if n == 0 || have == buf.len() {
            break;
        }
    }
}

/// The range of a `/proc/self/maps` line if it is private, writable and
/// anonymous (inode 0: the heap, anonymous mappings, stacks).
pub(crate) fn private_anonymous(line: &[u8]) -> Option<(usize, usize)> {
    let mut fields = line.split(|&c| c == b' ').filter(|f| !f.is_empty());
    let range = fields.next()?;
    let perms = fields.next()?;
    let _offset = fields.next()?;
    let _dev = fields.next()?;
    let inode = fields.next()?;
    if perms.len() < 4 || perms[1] != b'w' || perms[3] != b'p' || inode != b"0" {
        return None;
    }
    let dash = range.iter().position(|&c| c == b'-')?;
    let hex = |s: &[u8]| -> Option<usize> {
        let mut v = 0usize;
        for &c in s {
            v = v
                .checked_mul(16)?
                .checked_add((c as char).to_digit(16)? as usize)?;
        }
        Some(v)
    };
    let (lo, hi) = (hex(&range[..dash])?, hex(&range[dash + 1..])?);
    (lo < hi).then_some((lo, hi))
}
