//! `syscall(2)`: a program, or the C library on its behalf, can make a
//! system call by number (`syscall(SYS_copy_file_range, ...)`, as stock
//! fsx does), which no interposed function sees. The library defines
//! `syscall` too: the numbers of the calls it serves run the same code as
//! their functions (the `-1` and `errno` of the C library's `syscall`
//! included), and every other number goes to the C library's `syscall`.
//!
//! `syscall` is variadic in C: the exported function is a naked jump to
//! `c/syscall.c`, which reads six arguments, as the C library's own does,
//! and calls [`foliocache_preload_route_syscall`]; a call from the library
//! itself (which calls `syscall` where it must reach the kernel: the
//! guardian's `clone`d child, its writeback) is made there as the system
//! call itself, routed nowhere.

use std::ffi::{c_char, c_int, c_long, c_uint, c_ulong, c_void};

use libc::{iovec, loff_t, off_t};

use crate::copy::{copy_file_range, ioctl, sendfile, splice, truncate};
use crate::fds::{close, close_range, dup, dup3, fcntl, openat};
use crate::handoff::{execve, execveat, mmap};
use crate::io::{
    fallocate, fdatasync, fsync, ftruncate, lseek, posix_fadvise, pread, preadv, preadv2, pwrite,
    pwritev, pwritev2, read, readahead, readv, sync, sync_file_range, syncfs, write, writev,
};
use crate::limit::{getrlimit, prlimit, setrlimit};
use crate::real::real;
use crate::stat::{fstat, fstatat, statx};

/// `syscall(2)`: as the C library's, with the system calls the library
/// serves run as their functions ([`foliocache_preload_route_syscall`]).
///
/// # Safety
/// As `syscall(2)`: the arguments are what system call `number` takes.
// SAFETY: the body is a jump to a C function of the same signature,
// which returns to this function's caller.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn syscall(number: c_long) -> c_long {
    extern "C" {
        fn foliocache_preload_syscall(number: c_long, ...) -> c_long;
    }
    #[cfg(target_arch = "x86_64")]
    ::std::arch::naked_asm!("jmp {}", sym foliocache_preload_syscall);
    #[cfg(target_arch = "aarch64")]
    ::std::arch::naked_asm!("b {}", sym foliocache_preload_syscall);
}

/// `copy_file_range`'s and `splice`'s type.
type CopyFn = unsafe extern "C" fn(c_int, *mut loff_t, c_int, *mut loff_t, usize, c_uint) -> isize;

/// A word of a system call's arguments as a pointer.
fn ptr<T>(word: c_long) -> *mut T {
    word as usize as *mut T
}

/// The body of [`syscall`] (`c/syscall.c` calls it with the six
/// arguments read): system call `number` on arguments `a`..`f`, run as
/// the library's function of the same call where it defines one, else by
/// the C library's `syscall`. Returns what the function does (`-1` and
/// `errno` on an error), as `syscall` does.
///
/// # Safety
/// As `syscall(2)`: the arguments the call takes are what it expects
/// (those it does not take are ignored).
#[no_mangle]
pub unsafe extern "C" fn foliocache_preload_route_syscall(
    number: c_long,
    a: c_long,
    b: c_long,
    c: c_long,
    d: c_long,
    e: c_long,
    f: c_long,
) -> c_long {
    let fd = a as c_int;
    // SAFETY: in every arm, the caller's promise, passed on to the
    // function of the same system call, whose arguments these words are.
    unsafe {
        match number {
            libc::SYS_read => read(fd, ptr(b), c as usize) as c_long,
            libc::SYS_write => write(fd, ptr(b), c as usize) as c_long,
            libc::SYS_pread64 => pread(fd, ptr(b), c as usize, d as off_t) as c_long,
            libc::SYS_pwrite64 => pwrite(fd, ptr(b), c as usize, d as off_t) as c_long,
            libc::SYS_readv => readv(fd, ptr(b), c as c_int) as c_long,
            libc::SYS_writev => writev(fd, ptr(b), c as c_int) as c_long,
            // (The offset's high word, `e`, is 0 on a 64-bit target.)
            libc::SYS_preadv => preadv(fd, ptr::<iovec>(b), c as c_int, d as off_t) as c_long,
            libc::SYS_pwritev => pwritev(fd, ptr::<iovec>(b), c as c_int, d as off_t) as c_long,
            libc::SYS_preadv2 => {
                preadv2(fd, ptr::<iovec>(b), c as c_int, d as off_t, f as c_int) as c_long
            }
            libc::SYS_pwritev2 => {
                pwritev2(fd, ptr::<iovec>(b), c as c_int, d as off_t, f as c_int) as c_long
            }
            libc::SYS_lseek => lseek(fd, b as off_t, c as c_int) as c_long,
            libc::SYS_fsync => fsync(fd).into(),
            libc::SYS_fdatasync => fdatasync(fd).into(),
            libc::SYS_ftruncate => ftruncate(fd, b as off_t).into(),
            libc::SYS_truncate => truncate(ptr::<c_char>(a), b as off_t).into(),
            libc::SYS_fallocate => fallocate(fd, b as c_int, c as off_t, d as off_t).into(),
            libc::SYS_fadvise64 => match posix_fadvise(fd, b as off_t, c as off_t, d as c_int) {
                0 => 0,
                errno => {
                    // The function returns the error; the call sets errno.
                    *libc::__errno_location() = errno;
                    -1
                }
            },
            libc::SYS_readahead => readahead(fd, b as off_t, c as usize) as c_long,
            libc::SYS_sync_file_range => {
                sync_file_range(fd, b as off_t, c as off_t, d as c_uint).into()
            }
            libc::SYS_sync => {
                sync();
                0
            }
            libc::SYS_syncfs => syncfs(fd).into(),
            libc::SYS_copy_file_range | libc::SYS_splice => {
                // The two take the same arguments.
                let call: CopyFn = if number == libc::SYS_splice {
                    splice
                } else {
                    copy_file_range
                };
                call(fd, ptr(b), c as c_int, ptr(d), e as usize, f as c_uint) as c_long
            }
            libc::SYS_sendfile => sendfile(fd, b as c_int, ptr::<off_t>(c), d as usize) as c_long,
            libc::SYS_ioctl => ioctl(fd, b as c_ulong, c as c_ulong).into(),
            _ => files(number, [a, b, c, d, e, f]),
        }
    }
}

/// The system calls on files and descriptors (stat, open, close, dup,
/// `fcntl`, `mmap`, exec, the open-file limit), as their functions; the rest to [`legacy`].
///
/// # Safety
/// As [`foliocache_preload_route_syscall`].
unsafe fn files(number: c_long, [a, b, c, d, e, f]: [c_long; 6]) -> c_long {
    let fd = a as c_int;
    // SAFETY: in every arm, as in `foliocache_preload_route_syscall`.
    unsafe {
        match number {
            libc::SYS_fstat => fstat(fd, ptr(b)).into(),
            libc::SYS_newfstatat => fstatat(fd, ptr(b), ptr(c), d as c_int).into(),
            libc::SYS_statx => statx(fd, ptr(b), c as c_int, d as c_uint, ptr(e)).into(),
            libc::SYS_openat => openat(fd, ptr(b), c as c_int, d as c_uint).into(),
            libc::SYS_close => close(fd).into(),
            libc::SYS_close_range => close_range(a as c_uint, b as c_uint, c as c_int).into(),
            libc::SYS_dup => dup(fd).into(),
            libc::SYS_dup3 => dup3(fd, b as c_int, c as c_int).into(),
            libc::SYS_fcntl => fcntl(fd, b as c_int, c as c_ulong).into(),
            libc::SYS_prlimit64 => prlimit(a as libc::pid_t, b as _, ptr(c), ptr(d)).into(),
            libc::SYS_getrlimit => getrlimit(a as _, ptr(b)).into(),
            libc::SYS_setrlimit => setrlimit(a as _, ptr(b)).into(),
            libc::SYS_mmap => mmap(
                ptr::<c_void>(a),
                b as usize,
                c as c_int,
                d as c_int,
                e as c_int,
                f as off_t,
            ) as c_long,
            libc::SYS_execve => {
                execve(ptr(a), ptr::<*const c_char>(b), ptr::<*const c_char>(c)).into()
            }
            libc::SYS_execveat => execveat(
                fd,
                ptr(b),
                ptr::<*const c_char>(c),
                ptr::<*const c_char>(d),
                e as c_int,
            )
            .into(),
            _ => legacy(number, [a, b, c, d, e, f]),
        }
    }
}

/// The system calls x86_64 has beside their `*at` forms (`open`, `stat`,
/// `dup2`, ...), as their functions; every other number by the C
/// library's `syscall`.
///
/// # Safety
/// As [`foliocache_preload_route_syscall`].
unsafe fn legacy(number: c_long, [a, b, c, d, e, f]: [c_long; 6]) -> c_long {
    // SAFETY: in every arm, as in `foliocache_preload_route_syscall`.
    unsafe {
        match number {
            #[cfg(target_arch = "x86_64")]
            libc::SYS_open => crate::fds::open(ptr(a), b as c_int, c as c_uint).into(),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_creat => crate::fds::creat(ptr(a), b as libc::mode_t).into(),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_stat => crate::stat::stat(ptr(a), ptr(b)).into(),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_lstat => crate::stat::lstat(ptr(a), ptr(b)).into(),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_dup2 => crate::fds::dup2(a as c_int, b as c_int).into(),
            _ => real!(syscall: unsafe extern "C" fn(c_long, ...) -> c_long)(
                number, a, b, c, d, e, f,
            ),
        }
    }
}
