/* A served file made a standard stream's fd: the C library's stdin,
 * stdout and stderr read and write it with internal calls no interposer
 * sees, so what the program wrote with write(2) and what stdio writes or
 * reads must meet in one copy of the file. Run under
 * libfoliocache_preload.so serving the directory argv[2]; argv[1] names
 * the case:
 *
 *   printf-dup2 FILE   write(2) a header, dup2 onto stdout, printf lines
 *   stderr-dupfd FILE  write(2) a header, fcntl(F_DUPFD) onto a closed 2,
 *                      fprintf(stderr) lines
 *   open-as-stdout FILE  close(1), open the file (it becomes fd 1), write(2)
 *                      a header through it, printf lines
 *   fgets-dup2 FILE    write(2) lines (dirty in the cache), dup2 onto
 *                      stdin, read them back with fgets; exits 1 on a
 *                      mismatch
 *
 * The harness checks each file through the kernel. Exits 0 when every
 * check here holds. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LINES 100000
#define HEADER "header written with write(2)\n"

static int served(int fd) {
    int (*f)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "foliocache_preload_served");
    return f ? f(fd) : 0;
}

static int fail(const char *what) {
    fprintf(stderr, "std_streams: %s\n", what);
    return 1;
}

/* Opens `path` for writing, served, with the header written through it. */
static int open_with_header(const char *path, int flags) {
    int fd = open(path, flags | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || !served(fd))
        return -1;
    if (write(fd, HEADER, strlen(HEADER)) != (ssize_t)strlen(HEADER))
        return -1;
    return fd;
}

static int lines_to(FILE *out) {
    for (int i = 0; i < LINES; i++)
        if (fprintf(out, "line %d of the stream\n", i) < 0)
            return 1;
    return fflush(out) != 0;
}

int main(int argc, char **argv) {
    if (argc != 3)
        return fail("usage: std_streams CASE FILE");
    const char *c = argv[1], *path = argv[2];
    if (strcmp(c, "printf-dup2") == 0) {
        int fd = open_with_header(path, O_WRONLY);
        if (fd < 0)
            return fail("open");
        if (dup2(fd, 1) != 1 || close(fd) != 0)
            return fail("dup2");
        if (served(1))
            return fail("stdout's fd is still served");
        return lines_to(stdout);
    }
    if (strcmp(c, "stderr-dupfd") == 0) {
        int fd = open_with_header(path, O_WRONLY);
        if (fd < 0)
            return fail("open");
        if (close(2) != 0 || fcntl(fd, F_DUPFD, 2) != 2)
            return 1;
        if (served(2) || served(fd))
            return 1;
        return lines_to(stderr);
    }
    if (strcmp(c, "open-as-stdout") == 0) {
        if (close(1) != 0)
            return fail("close");
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd != 1)
            return fail("open did not return fd 1");
        if (served(1))
            return fail("fd 1 is served");
        if (write(1, HEADER, strlen(HEADER)) != (ssize_t)strlen(HEADER))
            return fail("write");
        return lines_to(stdout);
    }
    if (strcmp(c, "fgets-dup2") == 0) {
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || !served(fd))
            return fail("open");
        char line[64];
        for (int i = 0; i < LINES; i++) {
            int n = snprintf(line, sizeof line, "line %d of the stream\n", i);
            if (write(fd, line, n) != n)
                return fail("write");
        }
        if (lseek(fd, 0, SEEK_SET) != 0 || dup2(fd, 0) != 0)
            return fail("dup2");
        char want[64];
        for (int i = 0; i < LINES; i++) {
            snprintf(want, sizeof want, "line %d of the stream\n", i);
            if (!fgets(line, sizeof line, stdin))
                return fail("fgets: end of file before the last line written");
            if (strcmp(line, want) != 0)
                return fail("fgets: a line differs from the one written");
        }
        if (fgets(line, sizeof line, stdin))
            return fail("fgets: more lines than written");
        return 0;
    }
    return fail("unknown case");
}
