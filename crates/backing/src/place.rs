//! Where a process's cache keeps its own descriptors: at or above a floor
//! the process sets, so that they leave the numbers below it to the
//! program (the interposer sets it to the program's open-file limit,
//! whose room above is the cache's: docs/preload.md, "Open-file limits").
//! A descriptor made elsewhere is moved there once made
//! ([`place_descriptor`]); the files a backing opens by path, the
//! interposer moves as it sees their `open`.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};

/// The floor; 0: descriptors stay where the kernel puts them.
static FLOOR: AtomicI32 = AtomicI32::new(0);

/// Sets the least number of the descriptors the cache makes from now on
/// (those it holds keep theirs); 0 (the default) or less: the kernel's
/// choice, the lowest free.
pub fn set_descriptor_floor(floor: i32) {
    FLOOR.store(floor.max(0), Ordering::Release);
}

/// The floor [`set_descriptor_floor`] set (0: none).
pub fn descriptor_floor() -> i32 {
    FLOOR.load(Ordering::Acquire)
}

/// `fd`, moved to the lowest free number at or above the floor (close-on-
/// exec), if it is below it; as it is where there is no floor, or no free
/// number above it (`fcntl(F_DUPFD_CLOEXEC)` failed: past the process's
/// limit).
pub fn place_descriptor(fd: OwnedFd) -> OwnedFd {
    let floor = descriptor_floor();
    if floor == 0 || fd.as_raw_fd() >= floor {
        return fd;
    }
    rustix::io::fcntl_dupfd_cloexec(&fd, floor).unwrap_or(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Moved above the floor once set; left where it is without one, or
    /// above it already. (The floor is the process's: one test sets it.)
    #[test]
    fn descriptors_go_above_the_floor() {
        let open = || OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let low = open();
        assert!(place_descriptor(low).as_raw_fd() < 900);
        set_descriptor_floor(900);
        let placed = place_descriptor(open());
        assert!(placed.as_raw_fd() >= 900, "{}", placed.as_raw_fd());
        let again = place_descriptor(placed.try_clone().unwrap());
        assert!(again.as_raw_fd() > 900);
        set_descriptor_floor(-5);
        assert_eq!(descriptor_floor(), 0);
        assert!(place_descriptor(open()).as_raw_fd() < 900);
    }
}
