/* A writer that dies right after its writes, with nothing synced: run
 * under libfoliocache_preload.so serving the file's directory.
 *
 *   killed_writer HOW FILE MIB
 *
 * writes MIB MiB of the test pattern to FILE with write(2), 64 KiB at a
 * time (a few pages rewritten in place on the way), then dies by HOW:
 * `kill` (SIGKILL), `abort`, `segv` (a fatal signal), `exit` (_exit, no
 * atexit handler). What write(2) accepted is in the kernel's page cache
 * without the library; the harness checks it is in the file with it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned char pat(long i) {
    return (unsigned char)(i * 31 + (i >> 12)) | 1;
}

int main(int argc, char **argv) {
    if (argc != 4)
        return 2;
    const char *how = argv[1];
    long total = atol(argv[3]) << 20;
    int (*served)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "foliocache_preload_served");
    int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || !served || !served(fd))
        return 3;
    static unsigned char buf[64 << 10];
    for (long at = 0; at < total; at += sizeof buf) {
        for (long i = 0; i < (long)sizeof buf; i++)
            buf[i] = pat(at + i);
        if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf)
            return 4;
    }
    /* A rewrite in place of a page in the middle, with the same bytes but
     * its first, which is the pattern's too: the file stays the pattern. */
    unsigned char b = pat(total / 2);
    if (pwrite(fd, &b, 1, total / 2) != 1)
        return 5;
    if (strcmp(how, "kill") == 0)
        raise(SIGKILL);
    if (strcmp(how, "abort") == 0)
        abort();
    if (strcmp(how, "segv") == 0)
        raise(SIGSEGV);
    if (strcmp(how, "exit") == 0)
        _exit(0);
    return 6;
}
