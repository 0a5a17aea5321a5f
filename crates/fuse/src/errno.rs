//! From `io::Error` and `nix::Error` to the errno a FUSE reply carries.
//!
//! An OS error keeps its number. An error the cache made itself (no OS
//! number) is mapped by its kind to the errno a local filesystem gives
//! for the same condition; anything else is `EIO`.

use std::io;

use fuser::Errno;

/// The errno for `e`: its OS error number if it has one, else one chosen
/// by its kind (`FileTooLarge` -> `EFBIG`, `StorageFull` -> `ENOSPC`,
/// `InvalidInput` -> `EINVAL`, `OutOfMemory` -> `ENOMEM`, `WouldBlock` ->
/// `EAGAIN`, `Unsupported` -> `EOPNOTSUPP`, `PermissionDenied` ->
/// `EACCES`, `NotFound` -> `ENOENT`, ...), `EIO` for the rest.
pub fn io_errno(e: &io::Error) -> Errno {
    if let Some(n) = e.raw_os_error() {
        return Errno::from_i32(n);
    }
    use io::ErrorKind as K;
    let n = match e.kind() {
        K::NotFound => libc::ENOENT,
        K::PermissionDenied => libc::EACCES,
        K::AlreadyExists => libc::EEXIST,
        K::WouldBlock => libc::EAGAIN,
        K::InvalidInput => libc::EINVAL,
        K::InvalidData => libc::EIO,
        K::Interrupted => libc::EINTR,
        K::Unsupported => libc::EOPNOTSUPP,
        K::OutOfMemory => libc::ENOMEM,
        K::FileTooLarge => libc::EFBIG,
        K::StorageFull => libc::ENOSPC,
        K::NotADirectory => libc::ENOTDIR,
        K::IsADirectory => libc::EISDIR,
        K::DirectoryNotEmpty => libc::ENOTEMPTY,
        K::ReadOnlyFilesystem => libc::EROFS,
        K::CrossesDevices => libc::EXDEV,
        K::TooManyLinks => libc::EMLINK,
        K::InvalidFilename => libc::ENAMETOOLONG,
        K::ResourceBusy => libc::EBUSY,
        K::Deadlock => libc::EDEADLK,
        K::ArgumentListTooLong => libc::E2BIG,
        K::UnexpectedEof => libc::EIO,
        _ => libc::EIO,
    };
    Errno::from_i32(n)
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
            n(io_errno(&io::Error::from_raw_os_error(libc::ENOTEMPTY))),
            libc::ENOTEMPTY
        );
    }

    #[test]
    fn a_cache_error_is_mapped_by_kind() {
        let e = |k| n(io_errno(&io::Error::new(k, "x")));
        assert_eq!(e(io::ErrorKind::FileTooLarge), libc::EFBIG);
        assert_eq!(e(io::ErrorKind::StorageFull), libc::ENOSPC);
        assert_eq!(e(io::ErrorKind::InvalidInput), libc::EINVAL);
        assert_eq!(e(io::ErrorKind::OutOfMemory), libc::ENOMEM);
        assert_eq!(e(io::ErrorKind::WouldBlock), libc::EAGAIN);
        assert_eq!(e(io::ErrorKind::Unsupported), libc::EOPNOTSUPP);
        assert_eq!(e(io::ErrorKind::Other), libc::EIO);
    }
}
