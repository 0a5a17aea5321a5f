/* A file one process of a group hands to the kernel (a mapping, a stdio
 * stream) is the kernel's for the whole group, also for descriptions
 * opened after the hand-over, by processes that knew nothing of it: run
 * under libfoliocache_preload.so with FOLIOCACHE_PRELOAD_SHARED set:
 *
 *   handed_later DIR
 *
 * The parent P writes a page of 'A' to DIR/f (no sync), served, and forks
 * M and L.
 * 1. M opens DIR/f and maps it shared (and keeps the mapping).
 * 2. L, forked before, opens DIR/f: not served; it reads 'A'.
 * 3. M writes 'B' through its mapping; L reads 'B' (a cache serving L's
 *    description would give the 'A' it loaded in step 2) and writes 'C'
 *    at byte 100, which M's mapping sees.
 * 4. L opens a stdio stream on DIR/s (no process served it) and writes
 *    "one"; P opens DIR/s after: not served; it reads "one". L writes
 *    "two"; P reads "onetwo" at offset 0, as on ext4.
 * 5. X maps DIR/t (which P wrote and closed), writes 'X' through the
 *    mapping and exits: no process holds DIR/t in the kernel any more, so
 *    P's open of it is served again, and reads 'X'.
 * 6. Y maps DIR/u and forks Z, which keeps the mapping, then Y exits: P's
 *    open of DIR/u is not served while Z lives, and reads the 'Z' Z then
 *    writes through the mapping it inherited.
 *
 * Exit status 0 when every check held; else the number of the check. */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <sys/wait.h>

#include "served.h"
#include "steps.h"

static char path[4096], spath[4096];

static int mapper(int in, int out) {
    char page[4096];
    memset(page, 'A', sizeof page);
    int g = open(path, O_RDWR);
    if (g < 0)
        return 20;
    char *m = mmap(NULL, sizeof page, PROT_READ | PROT_WRITE, MAP_SHARED, g, 0);
    close(g);
    if (m == MAP_FAILED || memcmp(m, page, sizeof page) != 0)
        return 21;
    say(out); /* mapped */
    hear(in);
    memset(m, 'B', sizeof page);
    say(out); /* written */
    hear(in);
    return m[100] == 'C' && m[0] == 'B' && m[4095] == 'B' ? 0 : 22;
}

static int later(int in, int out) {
    char got[4096];
    hear(in); /* M mapped the file */
    int g = open(path, O_RDWR);
    if (g < 0)
        return 30;
    if (served(g))
        return 31;
    if (pread(g, got, sizeof got, 0) != (ssize_t)sizeof got || got[0] != 'A' || got[4095] != 'A')
        return 32;
    say(out);
    hear(in); /* M wrote 'B' */
    if (pread(g, got, sizeof got, 0) != (ssize_t)sizeof got || got[0] != 'B' || got[4095] != 'B')
        return 33;
    if (pwrite(g, "C", 1, 100) != 1)
        return 34;
    say(out);
    hear(in);
    FILE *s = fopen(spath, "w");
    if (!s || fputs("one", s) < 0 || fflush(s))
        return 35;
    say(out);
    hear(in);
    if (fputs("two", s) < 0 || fflush(s))
        return 36;
    say(out);
    hear(in);
    return fclose(s) ? 37 : 0;
}

static char tpath[4096];

static int taker(int in, int out) {
    (void)in;
    (void)out;
    int g = open(tpath, O_RDWR);
    if (g < 0)
        return 60;
    char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, g, 0);
    if (m == MAP_FAILED || m[0] != 'A')
        return 61;
    memset(m, 'X', 4096);
    return munmap(m, 4096) || close(g) ? 62 : 0;
}

static char upath[4096];

/* Y: maps DIR/u, forks Z (which keeps the mapping, writes 'Z' through it
 * when told on `in`, says so on `out`), and exits. */
static int inheriting(int in, int out) {
    int g = open(upath, O_RDWR);
    if (g < 0)
        return 80;
    char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, g, 0);
    close(g);
    if (m == MAP_FAILED)
        return 81;
    pid_t z = fork();
    if (z < 0)
        return 82;
    if (z == 0) {
        hear(in);
        memset(m, 'Z', 4096);
        say(out);
        hear(in);
        _exit(0);
    }
    return 0;
}

static pid_t start(int (*body)(int, int), int *to, int *from) {
    int down[2], up[2];
    if (pipe(down) || pipe(up))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(down[1]);
        close(up[0]);
        _exit(body(down[0], up[1]));
    }
    close(down[0]);
    close(up[1]);
    *to = down[1];
    *from = up[0];
    return pid;
}

static int finished(pid_t pid) {
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return 99;
    return WEXITSTATUS(status);
}

int main(int argc, char **argv) {
    preload_test_start(argc);
    char page[4096], got[16];
    snprintf(path, sizeof path, "%s/f", argv[1]);
    snprintf(spath, sizeof spath, "%s/s", argv[1]);
    snprintf(tpath, sizeof tpath, "%s/t", argv[1]);
    snprintf(upath, sizeof upath, "%s/u", argv[1]);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    memset(page, 'A', sizeof page);
    if (fd < 0 || pwrite(fd, page, sizeof page, 0) != (ssize_t)sizeof page || !served(fd))
        return 10;
    int t = open(tpath, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (t < 0 || pwrite(t, page, sizeof page, 0) != (ssize_t)sizeof page || close(t))
        return 12;
    int u = open(upath, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (u < 0 || pwrite(u, page, sizeof page, 0) != (ssize_t)sizeof page || close(u))
        return 14;
    int to_m, from_m, to_l, from_l;
    pid_t l = start(later, &to_l, &from_l);
    pid_t m = start(mapper, &to_m, &from_m);
    if (l < 0 || m < 0)
        return 11;
    hear(from_m); /* 1 */
    say(to_l);
    hear(from_l); /* 2 */
    say(to_m);
    hear(from_m); /* 3: 'B' written */
    say(to_l);
    hear(from_l); /* 'C' written */
    say(to_m);
    int r = finished(m);
    if (r)
        return r;
    say(to_l);
    hear(from_l); /* 4: "one" */
    int h = open(spath, O_RDONLY);
    if (h < 0)
        return 50;
    if (served(h))
        return 51;
    if (pread(h, got, sizeof got, 0) != 3 || memcmp(got, "one", 3) != 0)
        return 52;
    say(to_l);
    hear(from_l); /* "two" */
    if (pread(h, got, sizeof got, 0) != 6 || memcmp(got, "onetwo", 6) != 0)
        return 53;
    say(to_l);
    r = finished(l);
    if (r)
        return r;
    int to_x, from_x;
    pid_t x = start(taker, &to_x, &from_x);
    if (x < 0)
        return 13;
    r = finished(x); /* 5 */
    if (r)
        return r;
    t = open(tpath, O_RDONLY);
    if (t < 0 || !served(t))
        return 70;
    if (pread(t, page, sizeof page, 0) != (ssize_t)sizeof page || page[0] != 'X' || page[4095] != 'X')
        return 71;
    int to_z, from_z;
    pid_t y = start(inheriting, &to_z, &from_z);
    if (y < 0)
        return 15;
    r = finished(y); /* 6: Y gone, Z holds the mapping */
    if (r)
        return r;
    u = open(upath, O_RDWR);
    if (u < 0)
        return 94;
    if (served(u))
        return 95;
    say(to_z);
    hear(from_z);
    if (pread(u, page, sizeof page, 0) != (ssize_t)sizeof page || page[0] != 'Z' || page[4095] != 'Z')
        return 93;
    say(to_z);
    return 0;
}
