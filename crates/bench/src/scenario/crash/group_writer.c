/* A group of writers that say what write(2) accepted:
 *
 *   group_writer DIR SEED N
 *
 * forks N writers; writer K of generation G appends records of 1 byte to
 * 64 KiB of the pattern (byte i of a file is pat(i), as in
 * logged_writer.c) to DIR/wK.G, never syncing, and prints "K G PID" when
 * it starts and "K G END" after each write returns, each line one
 * write(2) to stdout. When a writer dies (the bench kills them at random)
 * the parent starts generation G+1 of it. Nothing ends by itself: the
 * bench kills every process at the end. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static unsigned char pat(long i) {
    return (unsigned char)(i * 131 + (i >> 16)) | 1;
}

static void writer(const char *dir, unsigned seed, int k, int g) {
    char path[4096];
    snprintf(path, sizeof path, "%s/w%d.%d", dir, k, g);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        _exit(3);
    srandom(seed * 7919u + (unsigned)k * 104729u + (unsigned)g);
    char line[64];
    int len = snprintf(line, sizeof line, "%d %d %d\n", k, g, (int)getpid());
    if (write(1, line, (size_t)len) != len)
        _exit(5);
    static unsigned char buf[64 << 10];
    long end = 0;
    for (;;) {
        long n = 1 + random() % (long)sizeof buf;
        for (long i = 0; i < n; i++)
            buf[i] = pat(end + i);
        if (write(fd, buf, (size_t)n) != n)
            _exit(4);
        end += n;
        len = snprintf(line, sizeof line, "%d %d END %ld\n", k, g, end);
        if (write(1, line, (size_t)len) != len)
            _exit(5);
    }
}

int main(int argc, char **argv) {
    if (argc != 4)
        return 2;
    unsigned seed = (unsigned)atol(argv[2]);
    int n = atoi(argv[3]);
    if (n < 1 || n > 64)
        return 2;
    pid_t pids[64];
    int gens[64];
    for (int k = 0; k < n; k++) {
        gens[k] = 0;
        pids[k] = fork();
        if (pids[k] == 0)
            writer(argv[1], seed, k, 0);
    }
    for (;;) {
        int status;
        pid_t dead = wait(&status);
        if (dead < 0)
            return 6;
        for (int k = 0; k < n; k++) {
            if (pids[k] != dead)
                continue;
            gens[k]++;
            pids[k] = fork();
            if (pids[k] == 0)
                writer(argv[1], seed, k, gens[k]);
        }
    }
}
