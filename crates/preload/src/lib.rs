//! `libfoliocache_preload.so`: an `LD_PRELOAD` interposer that serves the
//! POSIX file calls of an unmodified program on files under chosen
//! directories from one foliocache [`Cache`](fc::Cache) inside the
//! process, with no FUSE crossing and no system call on a hit.
//! `docs/preload.md` in the repository is the user's guide: what is
//! intercepted, the defined behaviours, coherence, limits.
//!
//! - `FOLIOCACHE_PRELOAD_DIRS` (`dir1:dir2`) names the directories;
//!   `FOLIOCACHE_PRELOAD_CAPACITY` the cache's bytes. Both are read once,
//!   at the first open. `foliocache run` sets them.
//! - Every served fd is a real kernel fd on its file (so calls this
//!   library does not intercept, `fchmod`, `flock`, locks, work on it)
//!   with an entry in a table (module `state`): the foliocache file, the
//!   position (shared by duplicates, as an open file description's), the
//!   access mode.
//! - Intercepted calls on other fds, and every call the library itself
//!   makes (the cache opens its own `O_DIRECT` fd on each file with the
//!   Rust standard library, which calls `open64`), pass through to the C
//!   library's definition (`dlsym(RTLD_NEXT)`, module `real`).
//! - What the cache cannot serve (a mapping, a stdio stream, a child of
//!   `fork`, an `exec`) is handed to the kernel with the data written back
//!   first (module `handoff`).
//! - Under `foliocache run --shared` (`FOLIOCACHE_PRELOAD_SHARED`) the
//!   processes of the program's tree share one `SharedCache` instead, and
//!   a forked child keeps serving (module `served`; docs/preload.md,
//!   "Processes").

#[cfg(not(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64")))]
compile_error!("foliocache-preload interposes glibc on 64-bit Linux only");
// `open` and `fcntl` are variadic in C and defined here with a fixed third
// argument: that reads it where the caller put it on these targets only.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("foliocache-preload reads variadic arguments as x86_64 and aarch64 pass them");

/// Defines interposed calls whose first argument is an fd:
/// `fn name(fd: c_int, args...) -> ret = |d| body;` runs `body` on the
/// fd's description when the cache serves it (inside the library; an
/// error returns -1 with `errno` set), and the C library's `name`
/// otherwise. The attributes before `fn` (the documentation, with its
/// `# Safety`) go on the function.
macro_rules! fd_calls {
    ($(
        $(#[$attr:meta])*
        fn $name:ident($fd:ident: c_int $(, $arg:ident: $ty:ty)*) -> $ret:ty = |$d:ident| $body:expr;
    )*) => {$(
        $(#[$attr])*
        #[no_mangle]
        #[allow(unused_unsafe)]
        pub unsafe extern "C" fn $name($fd: ::std::ffi::c_int $(, $arg: $ty)*) -> $ret {
            $crate::io::on_fd(
                $fd,
                -1,
                // SAFETY: the caller's promise (this function's), passed on.
                || unsafe {
                    $crate::real::real!($name: unsafe extern "C" fn(::std::ffi::c_int $(, $ty)*) -> $ret)(
                        $fd $(, $arg)*
                    )
                },
                // SAFETY: the caller's promise (this function's).
                |$d| unsafe { $body },
            )
        }
    )*};
}
pub(crate) use fd_calls;

/// Defines interposed calls that run `$first` (given the arguments), then
/// the C library's own, then `$last` if given: `first => fn name(args...)
/// -> ret;` or `first, then last => ...`. The attributes before `fn` go on
/// the function.
macro_rules! after {
    ($first:expr, then $last:expr => $(
        $(#[$attr:meta])*
        fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;
    )*) => {$(
        $(#[$attr])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            $first;
            // SAFETY: the caller's promise (this function's), passed on.
            let r = unsafe {
                $crate::real::real!($name: unsafe extern "C" fn($($ty),*) -> $ret)($($arg),*)
            };
            $last;
            r
        }
    )*};
    ($first:expr => $($fns:tt)*) => {
        $crate::after! { $first, then {} => $($fns)* }
    };
}
pub(crate) use after;

mod copy;
mod fds;
mod guard;
mod handoff;
mod io;
mod limit;
mod metrics;
mod real;
mod stat;
mod state;
mod syscall;
mod table;
mod through;
mod warm;

pub use guard::{ENV_GUARD, ENV_GUARDIAN};
pub use state::{ENV_CAPACITY, ENV_DIRS, ENV_SHARED, ENV_STATS};
pub use warm::{ENV_STATE, ENV_STATE_WAIT};

/// Defines `$alias` as a call of `$name` with the same arguments: the
/// `*64` names glibc exports beside the calls that take an offset or a
/// stat buffer, the same functions on a 64-bit target (`off_t` and
/// `off64_t`, `struct stat` and `struct stat64` are one).
macro_rules! aliases {
    ($($alias:ident => $name:ident ($($arg:ident : $ty:ty),*) -> $ret:ty;)*) => {$(
        #[doc = concat!("`", stringify!($alias), "`: [`", stringify!($name), "`].")]
        ///
        /// # Safety
        #[doc = concat!("As [`", stringify!($name), "`].")]
        #[no_mangle]
        pub unsafe extern "C" fn $alias($($arg: $ty),*) -> $ret {
            // SAFETY: the caller's promise, passed on.
            #[allow(unused_unsafe)]
            unsafe { $name($($arg),*) }
        }
    )*};
}
pub(crate) use aliases;

/// 1 if the cache serves `fd`, else 0: for tests and diagnostics (a
/// program finds it with `dlsym(RTLD_DEFAULT,
/// "foliocache_preload_served")`).
#[no_mangle]
pub extern "C" fn foliocache_preload_served(fd: std::ffi::c_int) -> std::ffi::c_int {
    state::is_served(fd).into()
}

/// The library's constructor: registers the fork and exit handlers and
/// reads the configuration. (The cache waits for the first open.)
extern "C" fn init() {
    handoff::register();
    state::configure();
}

/// Runs [`init`] when the library is loaded.
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
