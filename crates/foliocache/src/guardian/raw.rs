//! System calls a guardian child makes by the instruction itself, never
//! through the C library's `syscall`, `pwrite`, `close_range`, `dup3` or
//! `_exit`: an interposer defines those (foliocache's own,
//! `libfoliocache_preload.so`, defines every one), and its code must not
//! run in the child. The child is a copy of a program with threads, so a
//! lock another thread held at the `clone` stays held in it; and once the
//! child has dropped its copy of the program's private memory
//! (`drop_private_memory`) the interposer's statics and the dynamic
//! linker's tables read as zeros, so the interposer's lookup of the C
//! library's function (`dlsym`) faults in `_dl_fixup`.
//!
//! On x86-64 and AArch64 the instruction itself; elsewhere the C library's
//! `syscall` (which no interposer of ours defines there).

use std::ffi::c_long;

/// System call `nr` on four word arguments (the rest zero). Returns what
/// the kernel does: the result, or minus the error number.
///
/// # Safety
/// As `syscall(2)`: `nr` is a system call, and the words are the
/// arguments it takes (pointers valid for what it does with them).
pub(crate) unsafe fn call(nr: c_long, args: [usize; 4]) -> isize {
    let ret: isize;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the `syscall` instruction with the kernel's x86-64 calling
    // convention (number in rax, arguments in rdi, rsi, rdx, r10; rcx and
    // r11 clobbered); the caller's promise for what the call does.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") args[0],
            in("rsi") args[1],
            in("rdx") args[2],
            in("r10") args[3],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `svc 0` with the kernel's AArch64 calling convention
    // (number in x8, arguments in x0-x3, the result in x0); the caller's
    // promise for what the call does.
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") nr,
            inlateout("x0") args[0] as isize => ret,
            in("x1") args[1],
            in("x2") args[2],
            in("x3") args[3],
            options(nostack),
        );
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        // SAFETY: the caller's promise, passed on.
        let r = unsafe { libc::syscall(nr, args[0], args[1], args[2], args[3]) };
        ret = if r < 0 {
            -(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO) as isize)
        } else {
            r as isize
        };
    }
    ret
}

/// Ends this process with status `status` (`exit_group`), running nothing
/// of it: no exit handler, no interposer's `_exit`.
pub(crate) fn exit(status: i32) -> ! {
    loop {
        // SAFETY: `exit_group` takes a status and does not return.
        unsafe { call(libc::SYS_exit_group, [status as usize, 0, 0, 0]) };
    }
}
