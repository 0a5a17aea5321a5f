//! From `io::Error` and `nix::Error` to the errno a FUSE reply carries.
//!
//! An OS error keeps its number. An error the cache made itself (no OS
//! number) is mapped by its kind to the errno a local filesystem gives
//! for the same condition; anything else is `EIO`.

use std::io;

use fuser::Errno;

/// The errno for `e`: the library's mapping ([`backing::errno_of`]):
/// its OS error number if it has one, else one chosen by its kind, `EIO`
/// for the rest.
pub fn io_errno(e: &io::Error) -> Errno {
    Errno::from_i32(backing::errno_of(e))
}

/// The errno of a failed `nix` call.
pub fn nix_errno(e: nix::Error) -> Errno {
    Errno::from_i32(e as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(e: Errno) -> i32 {
        i32::from(e)
    }

    #[test]
    fn an_os_error_keeps_its_number() {
        assert_eq!(
            n(io_errno(&io::Error::from_raw_os_error(n(Errno::ENOTEMPTY)))),
            n(Errno::ENOTEMPTY)
        );
    }

    #[test]
    fn a_cache_error_is_mapped_by_kind() {
        let e = |k| n(io_errno(&io::Error::new(k, "x")));
        assert_eq!(e(io::ErrorKind::FileTooLarge), n(Errno::EFBIG));
        assert_eq!(e(io::ErrorKind::StorageFull), n(Errno::ENOSPC));
        assert_eq!(e(io::ErrorKind::InvalidInput), n(Errno::EINVAL));
        assert_eq!(e(io::ErrorKind::OutOfMemory), n(Errno::ENOMEM));
        assert_eq!(e(io::ErrorKind::WouldBlock), n(Errno::EAGAIN));
        assert_eq!(e(io::ErrorKind::Unsupported), n(Errno::EOPNOTSUPP));
        assert_eq!(e(io::ErrorKind::Other), n(Errno::EIO));
    }
}
