/* The exit hand-over runs after the main thread's thread-locals are
 * destroyed: glibc's exit() runs the thread-local destructors
 * (__call_tls_dtors) before the atexit handlers, where the library writes
 * back what the program left dirty. Run under libfoliocache_preload.so
 * serving the directory of argv[1] and argv[2]:
 *
 *   FIRST  written and fsync'd: scattered pages (every other 4 KiB page
 *          of 8 MiB), whose writeback goes through the main thread's own
 *          io_uring ring, a thread-local with a destructor
 *   SECOND written the same way, left open and dirty; then exit(0)
 *
 * The harness checks that both hold every byte written. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N = 8 << 20, PAGE = 4096 };

static int served(int fd) {
    int (*f)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "foliocache_preload_served");
    return f ? f(fd) : 0;
}

static unsigned char buf[N];

/* Every other page of `buf` written to `path`'s new file, served. */
static int scattered(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || !served(fd))
        return -1;
    for (long at = 0; at < N; at += 2 * PAGE)
        if (pwrite(fd, buf + at, PAGE, at) != PAGE)
            return -1;
    return fd;
}

int main(int argc, char **argv) {
    if (argc != 3)
        return 2;
    for (long i = 0; i < N; i++)
        buf[i] = (unsigned char)(i * 31 + (i >> 12));
    int first = scattered(argv[1]);
    if (first < 0 || fsync(first) != 0)
        return 1;
    if (scattered(argv[2]) < 0)
        return 1;
    exit(0);
}
