/* A writer that says what write(2) accepted: appends records of 1 byte
 * to 64 KiB of the pattern (byte i of the file is pat(i)) to FILE, and
 * after each write returns prints the file's end on stdout, flushed:
 *
 *   logged_writer FILE SEED
 *
 * It never syncs and never ends: the test kills it. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static unsigned char pat(long i) {
    return (unsigned char)(i * 131 + (i >> 16)) | 1;
}

int main(int argc, char **argv) {
    if (argc != 3)
        return 2;
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return 3;
    srandom((unsigned)atol(argv[2]));
    static unsigned char buf[64 << 10];
    long end = 0;
    for (;;) {
        long n = 1 + random() % (long)sizeof buf;
        for (long i = 0; i < n; i++)
            buf[i] = pat(end + i);
        if (write(fd, buf, (size_t)n) != n)
            return 4;
        end += n;
        printf("%ld\n", end);
        fflush(stdout);
    }
}
