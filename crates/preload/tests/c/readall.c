/* Reads the file argv[1] with read(2), 64 KiB at a time, and writes it to
 * stdout: a reader that, unlike coreutils, leaves stderr open at exit (the
 * library's figures line goes there). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    static char buf[65536];
    if (argc != 2) {
        fprintf(stderr, "usage: readall FILE\n");
        return 2;
    }
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) {
        perror(argv[1]);
        return 1;
    }
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0) {
            perror("read");
            return 1;
        }
        if (n == 0)
            break;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(1, buf + off, (size_t)(n - off));
            if (w < 0) {
                perror("write");
                return 1;
            }
            off += w;
        }
    }
    return close(fd) == 0 ? 0 : 1;
}
