//! Adopting an fd the real `open` returned: whether its file is a
//! regular one under a served directory (read with no allocation, so an
//! open of any other file is as async-signal-safe as the C library's),
//! and its description in the table.

use super::*;

/// Filesystems that store data but give their files a device number of
/// major 0 (an anonymous one, as procfs and sysfs have): tmpfs, btrfs,
/// overlayfs, ZFS, bcachefs.
pub(super) const ANONYMOUS_DEVICE_STORES: [i64; 5] = [
    0x0102_1994,
    0x9123_683e,
    0x794c_7630,
    0x2fc1_2fc1,
    0xca45_1a4e,
];

/// The fd's device and inode, if it is a regular file of a filesystem
/// that stores data: one on a block device (major number not 0), or one
/// of [`ANONYMOUS_DEVICE_STORES`]. Files of procfs, sysfs and the like
/// (generated on each read, with sizes of 0 or 4096 that do not bound
/// their data), and of network or FUSE filesystems, are not.
pub(super) fn regular_key(fd: BorrowedFd<'_>) -> Option<(u64, u64)> {
    let st = rustix::fs::fstat(fd).ok()?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return None;
    }
    if rustix::fs::major(st.st_dev) == 0 {
        let fs = rustix::fs::fstatfs(fd).ok()?;
        if !ANONYMOUS_DEVICE_STORES.contains(&(fs.f_type as i64)) {
            return None;
        }
    }
    Some((st.st_dev, st.st_ino))
}

/// `/proc/self/fd/<fd>`: the fd's file, whatever its name now.
pub(super) fn proc_path(fd: c_int) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{fd}"))
}

/// Writes `n` in decimal at the start of `buf` (10 bytes hold any).
pub(super) fn decimal(mut n: u32, buf: &mut [u8]) {
    let mut digits = [0u8; 10];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf[..digits.len() - i].copy_from_slice(&digits[i..]);
}

/// Whether the file open at `fd` lies under a served directory: its
/// name read from `/proc/self/fd/<fd>` into buffers on the stack (no
/// allocation: an open of a file outside the directories is as
/// async-signal-safe as the C library's).
pub(super) fn under_dirs(fd: c_int) -> bool {
    let mut link = *b"/proc/self/fd/\0\0\0\0\0\0\0\0\0\0\0\0";
    decimal(fd.unsigned_abs(), &mut link[14..24]);
    let mut target = [0u8; libc::PATH_MAX as usize];
    // SAFETY: `link` is NUL-terminated (the digits of a c_int leave NULs
    // after them); `target` is valid for writes of its length.
    let n = unsafe {
        libc::readlink(
            link.as_ptr().cast(),
            target.as_mut_ptr().cast(),
            target.len(),
        )
    };
    let Ok(n) = usize::try_from(n) else {
        return false;
    };
    let target = Path::new(std::ffi::OsStr::from_bytes(&target[..n]));
    config().dirs.iter().any(|d| target.starts_with(d))
}

/// The fd's key if it is a regular file under a served directory.
pub(super) fn served_key(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: `fd` is open (just returned by `open`), borrowed for the
    // calls below only.
    let key = regular_key(unsafe { BorrowedFd::borrow_raw(fd) })?;
    under_dirs(fd).then_some(key)
}

/// Opens the file of `fd`, under a served directory, in the process's
/// cache or its group's; `None` where it is not to be served (no cache,
/// an error, said on stderr, or no slot for it in the group's table or no
/// fd left for the cache's own: the kernel's then, silently, as any file
/// past a limit of ours).
fn open_in_cache(fd: c_int, writable: bool, append: bool) -> Option<AnyFile> {
    let opened = if in_group() {
        let sc = shared_cache()?;
        open_shared(sc, &proc_path(fd)).map(|file| group_file(file, append && writable))
    } else {
        let cache = cache()?;
        let mut options = cache.open_options();
        options
            .read(true)
            .write(writable)
            .append(append && writable);
        // The kernel's open did the rest (creating, truncating): the
        // cache opens the very file the fd holds.
        options.open(proc_path(fd)).map(|file| {
            if !writable {
                crate::warm::opened(cache, &file);
            }
            AnyFile::Private(file)
        })
    };
    match opened {
        Ok(f) => Some(f),
        // No slot, or no fd left for the cache's own (the program's
        // limit with no room above it: docs/preload.md, "Open-file
        // limits"): the kernel's, as at any limit of ours.
        Err(e) if SharedCache::out_of_slots(&e) => None,
        Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => None,
        Err(e) => {
            warn(&format!("fd {fd}: {e}; passed through"));
            None
        }
    }
}

/// After the real `open` returned `fd` with `flags`: if the file is a
/// regular one under a served directory, opens it in the cache and
/// records the fd. Any failure leaves the fd a plain kernel fd.
pub(crate) fn adopt(fd: c_int, flags: c_int) {
    if flags & (libc::O_PATH | libc::O_DIRECTORY) != 0 || fd as usize >= MAX_FDS {
        return;
    }
    inside((), || {
        let Some(key) = served_key(fd) else {
            return Ok(());
        };
        if super::member::member() {
            // The kernel's, handed over for the group first (and cut again
            // after the group's writeback, if this open cut it).
            let cut = flags & libc::O_TRUNC != 0 && flags & libc::O_ACCMODE != libc::O_RDONLY;
            super::member::hand(fd, cut);
            return Ok(());
        }
        if STD_STREAMS.contains(&fd) {
            // A standard stream's fd (a program that closed fd 1 and
            // opened a file): stdio writes it behind the library, so the
            // file is the kernel's for good, the data of its other fds
            // written back first.
            hand_to_kernel(key);
            mark_group(key, &proc_path(fd));
            return Ok(());
        }
        if handed_on_open(key) {
            return Ok(());
        }
        let (readable, writable) = match flags & libc::O_ACCMODE {
            libc::O_RDONLY => (true, false),
            libc::O_WRONLY => (false, true),
            _ => (true, true),
        };
        let append = flags & libc::O_APPEND != 0;
        let Some(file) = open_in_cache(fd, writable, append) else {
            return Ok(());
        };
        if file.handed_elsewhere() && !file.take_back_from_kernel().unwrap_or(false) {
            // Another live process of the group holds the file in the
            // kernel (a mapping, a stream): the kernel's here too, for
            // good, and this plain fd is one more holder. A cut the open
            // made drops what the group held of it, as below.
            if flags & libc::O_TRUNC != 0 && writable {
                file.set_len(0)?;
            }
            drop(file);
            HANDED.lock().insert(key, Handed::ForGood);
            mark_group(key, &proc_path(fd));
            return Ok(());
        }
        if flags & libc::O_TRUNC != 0 && writable {
            // The open cut the file: the cache follows, if it held it.
            file.set_len(0)?;
        }
        key_bucket(key).fetch_add(1, Ordering::AcqRel);
        let local = file.private().is_some();
        let desc = Desc {
            file: ManuallyDrop::new(file),
            key,
            pos: Mutex::new(0),
            kernel_pos: AtomicBool::new(false),
            readable,
            writable,
            append,
            sync_writes: flags & libc::O_DSYNC != 0,
        };
        drop(TABLE.set(fd, Some(Arc::new(desc))));
        OPENS.fetch_add(1, Ordering::Relaxed);
        if local && in_group() {
            // The process joined its group meanwhile (another thread's
            // fork), after handing its private files over: this one too.
            join::hand_over(fd, key);
        }
        Ok(())
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_fill_a_buffer() {
        for (n, text) in [(0, "0"), (7, "7"), (1234, "1234"), (u32::MAX, "4294967295")] {
            let mut buf = [0u8; 10];
            decimal(n, &mut buf);
            assert_eq!(&buf[..text.len()], text.as_bytes());
            assert!(buf[text.len()..].iter().all(|&b| b == 0));
        }
    }
}
