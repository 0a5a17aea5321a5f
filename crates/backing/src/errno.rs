//! The `errno` a POSIX caller gets for an IO error: what foliocache's C
//! ABI, its interposer and its FUSE mount answer.

use std::io;

/// The `errno` value for `e`: its OS error number when it came from a
/// system call (a backing's `EIO`, `ENOSPC`, `EFBIG`), else the one a
/// local filesystem gives for the same condition, by kind
/// (`FileTooLarge` -> `EFBIG`, `StorageFull` -> `ENOSPC`, `InvalidInput`
/// -> `EINVAL`, `OutOfMemory` -> `ENOMEM`, `WouldBlock` -> `EAGAIN`,
/// `Unsupported` -> `EOPNOTSUPP`, `PermissionDenied` -> `EACCES`,
/// `NotFound` -> `ENOENT`, ...), and `EIO` for a kind with none
/// (`InvalidData`, `UnexpectedEof`, `Other`, kinds added later).
///
/// ```
/// use std::io;
/// assert_eq!(foliocache_backing::errno_of(&io::Error::from_raw_os_error(libc::ENOSPC)), libc::ENOSPC);
/// assert_eq!(foliocache_backing::errno_of(&io::Error::new(io::ErrorKind::FileTooLarge, "x")), libc::EFBIG);
/// assert_eq!(foliocache_backing::errno_of(&io::Error::other("x")), libc::EIO);
/// ```
pub fn errno_of(e: &io::Error) -> i32 {
    use io::ErrorKind as K;
    if let Some(errno) = e.raw_os_error() {
        return errno;
    }
    match e.kind() {
        K::NotFound => libc::ENOENT,
        K::PermissionDenied => libc::EACCES,
        K::AlreadyExists => libc::EEXIST,
        K::WouldBlock => libc::EAGAIN,
        K::InvalidInput => libc::EINVAL,
        K::TimedOut => libc::ETIMEDOUT,
        K::Interrupted => libc::EINTR,
        K::Unsupported => libc::EOPNOTSUPP,
        K::OutOfMemory => libc::ENOMEM,
        K::StorageFull => libc::ENOSPC,
        K::FileTooLarge => libc::EFBIG,
        K::NotADirectory => libc::ENOTDIR,
        K::IsADirectory => libc::EISDIR,
        K::DirectoryNotEmpty => libc::ENOTEMPTY,
        K::ReadOnlyFilesystem => libc::EROFS,
        K::ResourceBusy => libc::EBUSY,
        K::Deadlock => libc::EDEADLK,
        K::CrossesDevices => libc::EXDEV,
        K::TooManyLinks => libc::EMLINK,
        K::InvalidFilename => libc::ENAMETOOLONG,
        K::ArgumentListTooLong => libc::E2BIG,
        K::StaleNetworkFileHandle => libc::ESTALE,
        K::QuotaExceeded => libc::EDQUOT,
        K::BrokenPipe => libc::EPIPE,
        _ => libc::EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_keep_their_errno() {
        for errno in [libc::ENOENT, libc::EIO, libc::ENOSPC, libc::EBADF] {
            assert_eq!(errno_of(&io::Error::from_raw_os_error(errno)), errno);
        }
    }

    #[test]
    fn kinds_map_to_errno() {
        use io::ErrorKind as K;
        for (kind, errno) in [
            (K::NotFound, libc::ENOENT),
            (K::PermissionDenied, libc::EACCES),
            (K::AlreadyExists, libc::EEXIST),
            (K::WouldBlock, libc::EAGAIN),
            (K::InvalidInput, libc::EINVAL),
            (K::OutOfMemory, libc::ENOMEM),
            (K::StorageFull, libc::ENOSPC),
            (K::FileTooLarge, libc::EFBIG),
            (K::Unsupported, libc::EOPNOTSUPP),
            (K::UnexpectedEof, libc::EIO),
            (K::Other, libc::EIO),
        ] {
            assert_eq!(errno_of(&io::Error::new(kind, "x")), errno, "{kind:?}");
        }
    }
}
