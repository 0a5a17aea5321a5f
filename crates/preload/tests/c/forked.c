/* Forked children in a group sharing one cache (`foliocache run
 * --shared`): run under libfoliocache_preload.so with
 * FOLIOCACHE_PRELOAD_SHARED set:
 *
 *   forked DIR
 *
 * 1. The parent writes 3 pages of 'P' to DIR/a (no sync) and forks.
 * 2. The child still has the fd served, reads the parent's bytes, and
 *    writes a page of 'C' at the shared position (12288); it writes
 *    DIR/b (a file of its own, 5000 bytes of 'B') and ends with _exit
 *    (nothing written back by it).
 * 3. The parent finds the position moved by the child (16384), the
 *    child's page at 12288, and DIR/b's bytes and size, through the cache.
 * 4. A second child writes DIR/c (a page of 'K') and kills itself.
 * 5. The parent reads DIR/c's page back from the cache and exits; the
 *    harness writes back what the group left and checks the files.
 *
 * Exit status 0 when every check held; else the number of the check. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int (*served)(int);

static int all(const char *p, char c, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != c)
            return 0;
    return 1;
}

static int open_in(const char *dir, const char *name, int flags) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return open(path, flags, 0644);
}

static int wait_for(pid_t pid) {
    int status;
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    return status;
}

int main(int argc, char **argv) {
    if (argc != 2)
        return 100;
    served = (int (*)(int))dlsym(RTLD_DEFAULT, "foliocache_preload_served");
    if (!served)
        return 101;
    static char buf[3 * 4096], page[4096];
    int fd = open_in(argv[1], "a", O_RDWR | O_CREAT | O_TRUNC);
    if (fd < 0 || !served(fd))
        return 1;
    memset(buf, 'P', sizeof buf);
    if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf)
        return 2;
    pid_t pid = fork();
    if (pid < 0)
        return 3;
    if (pid == 0) {
        if (!served(fd))
            _exit(10);
        memset(buf, 0, sizeof buf);
        if (pread(fd, buf, sizeof buf, 0) != (ssize_t)sizeof buf || !all(buf, 'P', sizeof buf))
            _exit(11);
        if (lseek(fd, 0, SEEK_CUR) != 12288)
            _exit(12);
        memset(page, 'C', sizeof page);
        if (write(fd, page, sizeof page) != (ssize_t)sizeof page)
            _exit(13);
        int b = open_in(argv[1], "b", O_RDWR | O_CREAT | O_TRUNC);
        if (b < 0 || !served(b))
            _exit(14);
        static char bb[5000];
        memset(bb, 'B', sizeof bb);
        if (write(b, bb, sizeof bb) != (ssize_t)sizeof bb)
            _exit(15);
        _exit(0);
    }
    int status = wait_for(pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return WIFEXITED(status) ? WEXITSTATUS(status) : 20;
    if (lseek(fd, 0, SEEK_CUR) != 16384)
        return 21;
    memset(page, 0, sizeof page);
    if (pread(fd, page, sizeof page, 12288) != (ssize_t)sizeof page || !all(page, 'C', sizeof page))
        return 22;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size != 16384)
        return 23;
    int b = open_in(argv[1], "b", O_RDONLY);
    static char bb[6000];
    if (b < 0 || !served(b) || read(b, bb, sizeof bb) != 5000 || !all(bb, 'B', 5000))
        return 24;
    if (fstat(b, &st) != 0 || st.st_size != 5000)
        return 25;
    pid = fork();
    if (pid < 0)
        return 26;
    if (pid == 0) {
        int c = open_in(argv[1], "c", O_RDWR | O_CREAT | O_TRUNC);
        memset(page, 'K', sizeof page);
        if (c < 0 || write(c, page, sizeof page) != (ssize_t)sizeof page)
            _exit(27);
        raise(SIGKILL);
        _exit(28);
    }
    status = wait_for(pid);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
        return WIFEXITED(status) ? WEXITSTATUS(status) : 29;
    int c = open_in(argv[1], "c", O_RDONLY);
    memset(page, 0, sizeof page);
    if (c < 0 || !served(c) || read(c, page, sizeof page) != (ssize_t)sizeof page || !all(page, 'K', sizeof page))
        return 30;
    return 0;
}
