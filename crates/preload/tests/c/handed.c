/* A file handed to the kernel by one process of a group sharing one
 * cache (a mapping here) is handed over by the others at their next call
 * on it: run under libfoliocache_preload.so with FOLIOCACHE_PRELOAD_SHARED
 * set:
 *
 *   handed DIR
 *
 * 1. The parent writes a page of 'A' to DIR/f (no sync), served, and
 *    forks.
 * 2. The child opens DIR/f (served) and maps it shared: the file is
 *    handed to the kernel (the group's dirty data written back first).
 * 3. The parent reads the page (from the cache or the file: 'A').
 * 4. The child writes 'B' over the page through its mapping.
 * 5. The parent reads the page again: 'B', as on ext4 (a cache that kept
 *    serving it would give the 'A' it loaded in step 3); then it writes
 *    'C' at byte 100, which the child's mapping sees.
 *
 * Exit status 0 when every check held; else the number of the check. */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <sys/wait.h>

#include "served.h"
#include "steps.h"

int main(int argc, char **argv) {
    preload_test_start(argc);
    char path[4096], page[4096], got[4096];
    snprintf(path, sizeof path, "%s/f", argv[1]);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    memset(page, 'A', sizeof page);
    if (fd < 0 || pwrite(fd, page, sizeof page, 0) != (ssize_t)sizeof page || !served(fd))
        return 10;
    int to_child[2], to_parent[2];
    if (pipe(to_child) || pipe(to_parent))
        return 11;
    pid_t pid = fork();
    if (pid < 0)
        return 12;
    if (pid == 0) {
        /* Only the ends it uses: a parent gone early ends its reads. */
        close(to_child[1]);
        close(to_parent[0]);
        int g = open(path, O_RDWR);
        if (g < 0 || !served(g))
            _exit(20);
        char *m = mmap(NULL, sizeof page, PROT_READ | PROT_WRITE, MAP_SHARED, g, 0);
        if (m == MAP_FAILED || m[0] != 'A')
            _exit(21);
        say(to_parent[1]); /* mapped */
        hear(to_child[0]); /* the parent read */
        memset(m, 'B', sizeof page);
        say(to_parent[1]); /* written */
        hear(to_child[0]); /* the parent wrote */
        _exit(m[100] == 'C' && m[0] == 'B' ? 0 : 22);
    }
    close(to_child[0]);
    close(to_parent[1]);
    hear(to_parent[0]);
    if (pread(fd, got, sizeof got, 0) != (ssize_t)sizeof got || got[0] != 'A')
        return 30;
    say(to_child[1]);
    hear(to_parent[0]);
    if (pread(fd, got, sizeof got, 0) != (ssize_t)sizeof got)
        return 31;
    memset(page, 'B', sizeof page);
    if (memcmp(got, page, sizeof page) != 0)
        return 32;
    if (served(fd))
        return 33;
    if (pwrite(fd, "C", 1, 100) != 1)
        return 34;
    say(to_child[1]);
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return 35;
    return WEXITSTATUS(status) == 0 ? 0 : 40 + WEXITSTATUS(status) % 50;
}
