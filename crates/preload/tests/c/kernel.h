/* The C library's own syscall(2), past the library's (which serves the
 * system calls it knows by number as their functions): the kernel's
 * answer, for a check that must know which side answered.
 *
 *   kernel_syscall(SYS_pread64, fd, buf, n, off)
 *
 * Needs _GNU_SOURCE (RTLD_NOLOAD) and -ldl. */
#ifndef FOLIOCACHE_TEST_KERNEL_H
#define FOLIOCACHE_TEST_KERNEL_H

#include <dlfcn.h>
#include <unistd.h>

typedef long (*syscall_fn)(long, ...);

static syscall_fn libc_syscall(void) {
    static syscall_fn f;
    if (!f) {
        void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
        f = libc ? (syscall_fn)dlsym(libc, "syscall") : NULL;
        if (!f)
            _exit(92);
    }
    return f;
}

#define kernel_syscall(...) (libc_syscall()(__VA_ARGS__))

#endif
