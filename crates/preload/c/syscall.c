/* syscall: variadic in C, which stable Rust cannot define. The exported
 * `syscall` is a naked trampoline in Rust (src/syscall.rs) that jumps here
 * with the caller's registers and stack untouched. This reads the six
 * arguments a system call takes at most, as the C library's own `syscall`
 * does (those the call does not take are words the caller left there,
 * never used), and hands them to the library's router, which runs the
 * system calls the library serves as their functions and passes the rest
 * to the C library's `syscall`.
 *
 * A call from the library itself (its Rust code calls `syscall` where it
 * must reach the kernel and no interposed function: the guardian's
 * `clone`d child, which may run nothing but system calls and has zeroed
 * the program's writable memory, this library's data and the thread's
 * TLS block included, and its writeback) is made here as the system call
 * itself: its caller's address lies in this shared object, whose extent
 * its own ELF header gives (`__ehdr_start`, which the linker defines),
 * read with no lock and no writable data. */
#include <errno.h>
#include <link.h>
#include <stdarg.h>
#include <stdint.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* src/syscall.rs. */
long foliocache_preload_route_syscall(long number, long a1, long a2, long a3,
                                      long a4, long a5, long a6);

/* This shared object's ELF header, at the start of its first segment. */
extern const ElfW(Ehdr) __ehdr_start HIDDEN;

/* System call `n` on six arguments: the kernel's return (-errno on an
 * error). */
static long raw_syscall(long n, long a1, long a2, long a3, long a4, long a5, long a6) {
#if defined(__x86_64__)
    register long r10 __asm__("r10") = a4;
    register long r8 __asm__("r8") = a5;
    register long r9 __asm__("r9") = a6;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a1;
    register long x1 __asm__("x1") = a2;
    register long x2 __asm__("x2") = a3;
    register long x3 __asm__("x3") = a4;
    register long x4 __asm__("x4") = a5;
    register long x5 __asm__("x5") = a6;
    __asm__ volatile("svc 0"
                     : "+r"(x0)
                     : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                     : "memory");
    return x0;
#else
#error "x86_64 and aarch64 only"
#endif
}

/* Whether `addr` lies in this shared object's loaded segments. */
static int in_this_object(uintptr_t addr) {
    const ElfW(Ehdr) *eh = &__ehdr_start;
    const ElfW(Phdr) *ph = (const ElfW(Phdr) *)((const char *)eh + eh->e_phoff);
    uintptr_t first = UINTPTR_MAX, end = 0;
    for (int i = 0; i < eh->e_phnum; i++) {
        if (ph[i].p_type != PT_LOAD)
            continue;
        if (ph[i].p_offset == 0)
            first = ph[i].p_vaddr;
        if (ph[i].p_vaddr + ph[i].p_memsz > end)
            end = ph[i].p_vaddr + ph[i].p_memsz;
    }
    if (first == UINTPTR_MAX)
        return 0;
    uintptr_t base = (uintptr_t)eh - first;
    return addr >= base + first && addr < base + end;
}

HIDDEN long foliocache_preload_syscall(long number, ...) {
    va_list ap;
    va_start(ap, number);
    long a1 = va_arg(ap, long);
    long a2 = va_arg(ap, long);
    long a3 = va_arg(ap, long);
    long a4 = va_arg(ap, long);
    long a5 = va_arg(ap, long);
    long a6 = va_arg(ap, long);
    va_end(ap);
    if (in_this_object((uintptr_t)__builtin_return_address(0))) {
        long r = raw_syscall(number, a1, a2, a3, a4, a5, a6);
        if (r < 0 && r > -4096) {
            /* As the C library's `syscall` (errno, in the TLS block, is
             * written only on an error). */
            errno = (int)-r;
            return -1;
        }
        return r;
    }
    return foliocache_preload_route_syscall(number, a1, a2, a3, a4, a5, a6);
}
