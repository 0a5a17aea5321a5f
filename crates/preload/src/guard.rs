//! The interposer's guardian (docs/preload.md, "Death"): what the program
//! leaves unsaved when it dies is written back by `foliocache run`, which
//! passes its memory file down, or by a guardian child the library starts.

use std::ffi::c_int;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use fc::{Cache, CacheBuilder, Guardian};

use crate::state::warn;

/// The guardian's memory file a launcher (`foliocache run`) made and
/// passed down: its fd number.
pub const ENV_GUARD: &str = "FOLIOCACHE_PRELOAD_GUARD";
/// `off`: no guardian (what the process leaves unsaved when it dies is
/// lost, as before).
pub const ENV_GUARDIAN: &str = "FOLIOCACHE_PRELOAD_GUARDIAN";

/// Builds the cache with its guardian (docs/preload.md, "What a program
/// loses"): the launcher's segment where one was passed down and this
/// process can claim it (the program, or an image it executes; not
/// another process of its tree), else a guardian child of its own, unless
/// turned off.
pub(crate) fn build_guarded(b: CacheBuilder) -> io::Result<Cache> {
    if std::env::var(ENV_GUARDIAN).is_ok_and(|v| v == "off" || v == "0") {
        return b.guardian(Guardian::Off).build();
    }
    if let Some(fd) = std::env::var(ENV_GUARD)
        .ok()
        .and_then(|v| v.parse::<c_int>().ok())
    {
        // A duplicate: the inherited fd stays for the images this process
        // executes; a bad number is refused by the build, closing nothing
        // of the program's.
        // SAFETY: the fd is borrowed for the dup only (it may be any of the
        // program's; fcntl on a closed number fails).
        // (Above the program's open-file limit where there is room.)
        let dup = rustix::io::fcntl_dupfd_cloexec(
            unsafe { BorrowedFd::borrow_raw(fd) },
            backing::descriptor_floor().max(3),
        );
        if let Ok(dup) = dup {
            match b.clone().guardian(Guardian::Segment(Arc::new(dup))).build() {
                Ok(c) => return Ok(c),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => {}
                Err(e) => warn(&format!(
                    "the launcher's guardian: {e}; starting one of its own"
                )),
            }
        }
    }
    b.guardian(Guardian::Child).build()
}
