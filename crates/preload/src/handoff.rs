//! What the cache cannot serve, handed to the kernel with the data
//! written back first: mappings and stdio streams of served files (the
//! file leaves the cache for the rest of the process), children of `fork`
//! (they pass through, but in a group sharing a cache, where they keep
//! serving: `state::prepare_fork`), programs started by `exec` (every file
//! leaves the cache), by `posix_spawn`, `system` or `popen` (they see the
//! data written back), and the process's exit.

use std::ffi::{c_char, c_int, c_void};

use libc::{off_t, pid_t, FILE};

use crate::real::real;
use crate::state::{
    hand_all_for_exec, hand_all_to_kernel, hand_path, hand_stream, hand_to_kernel, lookup,
    mapping_plain, prepare_fork, release_stream, spawning, take_stream,
};

/// `mmap(2)`: a mapping of a served file hands the file to the kernel
/// first (written back; its fds plain from then on), so the mapping and
/// every later call see the same data; in a group, for every process of
/// it, as does a mapping of a plain fd of a file under a served directory.
///
/// # Safety
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: off_t,
) -> *mut c_void {
    if fd >= 0 && flags & libc::MAP_ANONYMOUS == 0 {
        match lookup(fd) {
            Some(d) => hand_to_kernel(d.key),
            None => mapping_plain(fd),
        }
    }
    // SAFETY: the caller's promise, passed on.
    unsafe {
        real!(mmap: unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, c_int, off_t) -> *mut c_void)(
            addr, len, prot, flags, fd, offset,
        )
    }
}

/// The fd of a stream (-1 for NULL).
fn stream_fd(f: *mut FILE) -> c_int {
    if f.is_null() {
        -1
    } else {
        // SAFETY: a non-NULL `f` is an open stream (the caller's promise
        // to the stdio function interposed).
        unsafe { libc::fileno(f) }
    }
}

/// A stream just opened: its file, if under a served directory, is the
/// kernel's while the stream is open (`state::hand_stream`), since stdio
/// reads and writes its fd with the C library's internal calls.
fn stream(f: *mut FILE) -> *mut FILE {
    if !f.is_null() {
        hand_stream(stream_fd(f));
    }
    f
}

/// `fopen(3)`: a file the cache serves is handed to the kernel before the
/// open (`state::hand_path`: its dirty data must not land after a
/// truncating mode's cut); then see [`stream`].
///
/// # Safety
/// As `fopen(3)`.
#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: the caller's promise, passed on.
    stream(unsafe {
        hand_path(path);
        real!(fopen: unsafe extern "C" fn(*const c_char, *const c_char) -> *mut FILE)(path, mode)
    })
}

/// `freopen(3)`: the old stream released as [`fclose`] does, then as
/// [`fopen`].
///
/// # Safety
/// As `freopen(3)`.
#[no_mangle]
pub unsafe extern "C" fn freopen(
    path: *const c_char,
    mode: *const c_char,
    f: *mut FILE,
) -> *mut FILE {
    let old = take_stream(stream_fd(f));
    // SAFETY: the caller's promise, passed on.
    let new = unsafe {
        hand_path(path);
        real!(freopen: unsafe extern "C" fn(*const c_char, *const c_char, *mut FILE) -> *mut FILE)(
            path, mode, f,
        )
    };
    release_stream(old);
    stream(new)
}

/// `fclose(3)`: when the stream was the last on a file it handed to the
/// kernel, the cache serves the file's later opens again. (The stream's
/// record goes before the real call, while its fd is open; its file's
/// count after, once the stream is flushed and closed.)
///
/// # Safety
/// As `fclose(3)`.
#[no_mangle]
pub unsafe extern "C" fn fclose(f: *mut FILE) -> c_int {
    let key = take_stream(stream_fd(f));
    // SAFETY: the caller's promise, passed on.
    let r = unsafe { real!(fclose: unsafe extern "C" fn(*mut FILE) -> c_int)(f) };
    release_stream(key);
    r
}

crate::after! { hand_stream(fd) =>
    /// `fdopen(3)`: as [`stream`] says, first (a served fd's file is handed
    /// to the kernel with the fd's kernel position set to the program's),
    /// then the stream made.
    ///
    /// # Safety
    /// As `fdopen(3)`.
    fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE;
}

crate::aliases! {
    mmap64 => mmap(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, offset: off_t) -> *mut c_void;
    fopen64 => fopen(path: *const c_char, mode: *const c_char) -> *mut FILE;
    freopen64 => freopen(path: *const c_char, mode: *const c_char, f: *mut FILE) -> *mut FILE;
}

/// Argument and environment vectors.
type Vector = *const *const c_char;

/// Before an `exec`: every file handed to the kernel, and the kernel's
/// open-file limit the program's again (`limit::lower`).
fn for_exec() {
    hand_all_for_exec();
    crate::limit::lower();
}

crate::after! { for_exec() =>
    /// `execve(2)`: every file is handed to the kernel first (written
    /// back, positions set), and the library passes through from then on
    /// (also if the call fails); the program started inherits the
    /// program's open-file limit (`limit.rs`).
    ///
    /// # Safety
    /// As `execve(2)`.
    fn execve(path: *const c_char, argv: Vector, envp: Vector) -> c_int;

    /// `execv(3)`: as [`execve`].
    ///
    /// # Safety
    /// As `execv(3)`.
    fn execv(path: *const c_char, argv: Vector) -> c_int;

    /// `execvp(3)`: as [`execve`].
    ///
    /// # Safety
    /// As `execvp(3)`.
    fn execvp(file: *const c_char, argv: Vector) -> c_int;

    /// `execvpe(3)`: as [`execve`].
    ///
    /// # Safety
    /// As `execvpe(3)`.
    fn execvpe(file: *const c_char, argv: Vector, envp: Vector) -> c_int;

    /// `fexecve(3)`: as [`execve`].
    ///
    /// # Safety
    /// As `fexecve(3)`.
    fn fexecve(fd: c_int, argv: Vector, envp: Vector) -> c_int;

    /// `execveat(2)`: as [`execve`].
    ///
    /// # Safety
    /// As `execveat(2)`.
    fn execveat(dirfd: c_int, path: *const c_char, argv: Vector, envp: Vector, flags: c_int) -> c_int;
}

/// Defines exported `execl`-style functions (variadic in C) as jumps to
/// their bodies in `c/exec.c`: `name => body;`. A naked function's jump
/// leaves the caller's registers and stack as they came, so the C body
/// reads the variadic list as the caller passed it; the body collects the
/// list into an argv, as glibc's own does, and calls this library's
/// `execve` or `execvpe`. (glibc's `execl`, `execle`, `execlp` call its
/// internal `__execve`/`__execvpe`, which interposing `execve` does not
/// catch.)
macro_rules! variadic_execs {
    ($($(#[$attr:meta])* $name:ident => $body:ident;)*) => {$(
        $(#[$attr])*
        ///
        /// # Safety
        #[doc = concat!("As `", stringify!($name), "(3)`: a NULL-terminated list of")]
        /// NUL-terminated strings follows `arg`.
        // SAFETY: the body is a jump to a C function of the same
        // signature, which returns to this function's caller.
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, arg: *const c_char) -> c_int {
            extern "C" {
                fn $body(path: *const c_char, arg: *const c_char, ...) -> c_int;
            }
            #[cfg(target_arch = "x86_64")]
            ::std::arch::naked_asm!("jmp {}", sym $body);
            #[cfg(target_arch = "aarch64")]
            ::std::arch::naked_asm!("b {}", sym $body);
        }
    )*};
}

variadic_execs! {
    /// `execl(3)`: as [`execve`] with the arguments listed and `environ`.
    execl => foliocache_preload_execl;
    /// `execle(3)`: as [`execve`] with the arguments listed and the
    /// environment after them.
    execle => foliocache_preload_execle;
    /// `execlp(3)`: as [`execvpe`] with the arguments listed and `environ`.
    execlp => foliocache_preload_execlp;
}

// The kernel's open-file limit the program's while the C library starts
// a program (`limit::lower`), raised again after (`limit::lift`).
crate::after! { { spawning(); crate::limit::lower() }, then crate::limit::lift() =>
    /// `posix_spawn(3)`: the data written back (and synced) and positions
    /// set first, so the program it starts sees them; this process keeps
    /// its cache. (File actions and attributes as opaque pointers.)
    ///
    /// # Safety
    /// As `posix_spawn(3)`.
    fn posix_spawn(
        pid: *mut pid_t,
        path: *const c_char,
        actions: *const c_void,
        attr: *const c_void,
        argv: Vector,
        envp: Vector
    ) -> c_int;

    /// `posix_spawnp(3)`: as [`posix_spawn`].
    ///
    /// # Safety
    /// As `posix_spawnp(3)`.
    fn posix_spawnp(
        pid: *mut pid_t,
        file: *const c_char,
        actions: *const c_void,
        attr: *const c_void,
        argv: Vector,
        envp: Vector
    ) -> c_int;

    /// `system(3)`: as [`posix_spawn`].
    ///
    /// # Safety
    /// As `system(3)`.
    fn system(command: *const c_char) -> c_int;

    /// `popen(3)`: as [`posix_spawn`].
    ///
    /// # Safety
    /// As `popen(3)`.
    fn popen(command: *const c_char, mode: *const c_char) -> *mut FILE;
}

/// `fork`'s prepare handler: a child sees every byte written back, and
/// the files it could write are the kernel's (`state::prepare_fork`).
extern "C" fn before_fork() {
    prepare_fork();
}

/// `vfork(2)`: a `fork`. A child of `vfork` shares the parent's memory,
/// and with it the table: a close in it would take the parent's entries
/// (and run the parent's close of its files), an `exec` would turn the
/// library off in the parent. A `fork` child has its own copy and passes
/// through; POSIX allows a `vfork` to be a `fork` (a child of `vfork`
/// may only call `_exit` or an `exec`, which behave the same in both).
#[no_mangle]
pub extern "C" fn vfork() -> pid_t {
    // SAFETY: no arguments; the C library's `fork`, which runs the
    // handlers `register` installs.
    unsafe { libc::fork() }
}

/// `_Fork` (glibc 2.34): a `fork` that runs no fork handlers (it may be
/// called from a signal handler), so its child is turned to pass through
/// here, as `fork`'s is by [`in_child`]. Nothing is written back or
/// handed over first (not safe where `_Fork` may run): the child sees the
/// data written back so far, and the parent keeps serving the files it
/// shares with the child.
#[no_mangle]
#[allow(non_snake_case)]
pub extern "C" fn _Fork() -> pid_t {
    // SAFETY: no arguments.
    let pid = unsafe { real!(_Fork: unsafe extern "C" fn() -> pid_t)() };
    if pid == 0 {
        crate::state::pass_through_for_good();
    }
    pid
}

/// `_exit(2)`: a process that ends without its exit handlers (every
/// `multiprocessing` worker, a forked child's `os._exit`) still has its
/// figures line ([`ENV_STATS`](crate::ENV_STATS)) and its reads in the
/// group's figures (`state::ending_now`). Nothing is written back here,
/// as nothing is flushed by `_exit`: what it leaves unsaved is its
/// guardian's, or its group's launcher's, to write back.
#[no_mangle]
pub extern "C" fn _exit(status: c_int) -> ! {
    crate::state::ending_now();
    // SAFETY: an integer argument; the C library's `_exit`.
    unsafe { real!(_exit: unsafe extern "C" fn(c_int) -> !)(status) }
}

/// `_Exit`: as [`_exit`].
#[no_mangle]
#[allow(non_snake_case)]
pub extern "C" fn _Exit(status: c_int) -> ! {
    crate::state::ending_now();
    // SAFETY: an integer argument; the C library's `_Exit`.
    unsafe { real!(_Exit: unsafe extern "C" fn(c_int) -> !)(status) }
}

/// `fork`'s parent handler: the locks the prepare handler took are let go.
extern "C" fn in_parent() {
    crate::state::after_fork();
}

/// `fork`'s child handler: in a group sharing a cache the child keeps
/// serving (`state::after_fork`); otherwise it passes through (the
/// cache's threads did not follow it).
extern "C" fn in_child() {
    crate::state::forked();
    if !crate::state::after_fork() {
        crate::state::pass_through_for_good();
    }
}

/// At exit: the figures if asked for, and every file handed to the
/// kernel, written back.
extern "C" fn at_exit() {
    crate::state::ending_now();
    hand_all_to_kernel();
}

/// Registers the fork and exit handlers (the library's constructor).
pub(crate) fn register() {
    // SAFETY: the handlers are `extern "C"` functions of this library,
    // which is never unloaded (a preloaded object).
    unsafe {
        libc::pthread_atfork(Some(before_fork), Some(in_parent), Some(in_child));
        libc::atexit(at_exit);
    }
}
