/* syscall: variadic in C, which stable Rust cannot define. The exported
 * `syscall` is a naked trampoline in Rust (src/syscall.rs) that jumps here
 * with the caller's registers and stack untouched. This reads the six
 * arguments a system call takes at most, as the C library's own `syscall`
 * does (those the call does not take are words the caller left there,
 * never used), and hands them to the library's router, which runs the
 * system calls the library serves as their functions and passes the rest
 * to the C library's `syscall`. */
#include <stdarg.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* src/syscall.rs. */
long foliocache_preload_route_syscall(long number, long a1, long a2, long a3,
                                      long a4, long a5, long a6);

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
    return foliocache_preload_route_syscall(number, a1, a2, a3, a4, a5, a6);
}
