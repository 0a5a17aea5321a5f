/* A writer that says what write(2) accepted: appends records of 1 byte
 * to 64 KiB of the pattern (byte i of the file is pat(i)) to FILE, and
 * after each write returns prints the file's end on stdout, one write(2)
 * a line:
 *
 *   logged_writer FILE SEED
 *
 * Or a group of them (the crash scenario's group trials, group.rs):
 *
 *   logged_writer -g DIR SEED N
 *
 * forks N writers; writer K of generation G appends to DIR/wK.G, prints
 * "K G PID" when it starts and "K G END E" after each write returns. When
 * a writer dies (the bench kills them at random) the parent starts
 * generation G+1 of it.
 *
 * It never syncs and never ends: the test kills it. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static unsigned char pat(long i) {
    return (unsigned char)(i * 131 + (i >> 16)) | 1;
}

/* Appends to fd for ever, printing PREFIX and the file's end after each
 * write; exits 4 (a short write) or 5 (stdout gone). */
static void append(int fd, const char *prefix) {
    static unsigned char buf[64 << 10];
    char line[96];
    long end = 0;
    for (;;) {
        long n = 1 + random() % (long)sizeof buf;
        for (long i = 0; i < n; i++)
            buf[i] = pat(end + i);
        if (write(fd, buf, (size_t)n) != n)
            _exit(4);
        end += n;
        int len = snprintf(line, sizeof line, "%s%ld\n", prefix, end);
        if (write(1, line, (size_t)len) != len)
            _exit(5);
    }
}

static void writer(const char *dir, unsigned seed, int k, int g) {
    char path[4096], prefix[64];
    snprintf(path, sizeof path, "%s/w%d.%d", dir, k, g);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        _exit(3);
    srandom(seed * 7919u + (unsigned)k * 104729u + (unsigned)g);
    int len = snprintf(prefix, sizeof prefix, "%d %d %d\n", k, g, (int)getpid());
    if (write(1, prefix, (size_t)len) != len)
        _exit(5);
    snprintf(prefix, sizeof prefix, "%d %d END ", k, g);
    append(fd, prefix);
}

static int group(const char *dir, unsigned seed, int n) {
    pid_t pids[64];
    int gens[64];
    if (n < 1 || n > 64)
        return 2;
    for (int k = 0; k < n; k++) {
        gens[k] = 0;
        pids[k] = fork();
        if (pids[k] == 0)
            writer(dir, seed, k, 0);
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
                writer(dir, seed, k, gens[k]);
        }
    }
}

int main(int argc, char **argv) {
    if (argc == 5 && argv[1][0] == '-' && argv[1][1] == 'g')
        return group(argv[2], (unsigned)atol(argv[3]), atoi(argv[4]));
    if (argc != 3)
        return 2;
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return 3;
    srandom((unsigned)atol(argv[2]));
    append(fd, "");
    return 0;
}
