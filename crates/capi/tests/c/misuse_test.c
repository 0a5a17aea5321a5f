/*
 * Misuse the C API must refuse, as the kernel refuses it: run by
 * tests/it/c_api.rs as `misuse_test DIR` (DIR: an empty temporary
 * directory). Exits 0 when every check passes; otherwise prints each
 * failing check and exits 1. An alarm kills it if a call blocks.
 */
#define _DEFAULT_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "foliocache.h"
#include "check.h"

/* A cache of 1 MiB with no pressure watcher, from options at `o`. */
static fc_cache_t small_cache(struct fc_cache_options *o) {
    o->capacity = 1 << 20;
    o->flags = FC_CACHE_NO_PRESSURE;
    return fc_cache_new_with(o);
}

/* A struct size above a page is E2BIG without a read past the struct:
 * the struct ends a page followed by an inaccessible one. */
static void test_struct_size(void) {
    long page = sysconf(_SC_PAGESIZE);
    unsigned char *map = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(map != MAP_FAILED);
    if (map == MAP_FAILED) {
        return;
    }
    CHECK(mprotect(map + page, (size_t)page, PROT_NONE) == 0);
    struct fc_cache_options *o =
        (struct fc_cache_options *)(map + page - sizeof(struct fc_cache_options));
    memset(o, 0, sizeof *o);
    o->size = 2 * (uint32_t)page;
    CHECK_ERR(small_cache(o), E2BIG);
    o->size = UINT32_MAX;
    CHECK_ERR(small_cache(o), E2BIG);
    /* Its own size, at the very end of the page, is read and no further. */
    o->size = sizeof *o;
    fc_cache_t cache = small_cache(o);
    CHECK(cache > 0);
    CHECK(fc_cache_destroy(cache) == 0);
    /* A page-sized struct from a newer header: zeros are fine, a nonzero
     * byte at its end is a field this library does not know. */
    o = (struct fc_cache_options *)map;
    memset(map, 0, (size_t)page);
    o->size = (uint32_t)page;
    cache = small_cache(o);
    CHECK(cache > 0);
    CHECK(fc_cache_destroy(cache) == 0);
    map[page - 1] = 1;
    CHECK_ERR(small_cache(o), E2BIG);
    munmap(map, 2 * (size_t)page);
}

/* Only regular files: a FIFO is refused at once (open(2) of one would
 * block until a writer came), a directory is EISDIR. */
static void test_special_files(fc_cache_t cache, const char *dir) {
    CHECK(mkfifo(path_in(dir, "fifo"), 0644) == 0);
    CHECK_ERR(fc_open(cache, path_in(dir, "fifo"), O_RDONLY, 0), EINVAL);
    CHECK(strstr(fc_last_error(), "FIFO") != NULL);
    CHECK_ERR(fc_open(cache, path_in(dir, "fifo"), O_WRONLY, 0), EINVAL);
    CHECK_ERR(fc_open(cache, path_in(dir, "fifo"), O_RDWR | O_CREAT, 0644), EINVAL);
    CHECK_ERR(fc_open(cache, dir, O_RDONLY, 0), EISDIR);
    CHECK_ERR(fc_open(cache, dir, O_RDWR, 0), EISDIR);
    CHECK_ERR(fc_open(cache, "/dev/null", O_RDWR, 0), EINVAL);
}

/* A child of fork() gets a clear error from the parent's handles, and
 * its calls change nothing of the parent's file. */
static void test_fork(fc_cache_t cache, const char *dir) {
    fc_file_t f = fc_open(cache, path_in(dir, "forked"), O_RDWR | O_CREAT, 0644);
    CHECK(f > 0);
    static char data[8192];
    memset(data, 'p', sizeof data);
    CHECK(fc_pwrite(f, data, sizeof data, 0) == (ssize_t)sizeof data);
    CHECK(fc_fsync(f) == 0);
    CHECK(fc_pwrite(f, "dirty", 5, sizeof data) == 5); /* dirty at fork */
    fflush(NULL);
    pid_t child = fork();
    CHECK(child >= 0);
    int before = failures;
    if (child == 0) {
        alarm(60); /* the parent's alarm is not inherited */
        char b[4];
        CHECK_ERR(fc_pread(f, b, sizeof b, 0), EBADF);
        CHECK(strstr(fc_last_error(), "fork") != NULL);
        CHECK_ERR(fc_pwrite(f, "c", 1, 0), EBADF);
        CHECK_ERR(fc_ftruncate(f, 0), EBADF);
        CHECK_ERR(fc_fsync(f), EBADF);
        CHECK_ERR(fc_size(f), EBADF);
        CHECK_ERR(fc_close(f), EBADF);
        CHECK_ERR(fc_cache_sync_all(cache), EBADF);
        CHECK_ERR(fc_cache_destroy(cache), EBADF);
        /* Nor can it make caches: the parent's cache threads may have
         * held the library's locks at the fork. */
        struct fc_cache_options o = FC_CACHE_OPTIONS_INIT;
        CHECK_ERR(small_cache(&o), EPERM);
        CHECK(strstr(fc_last_error(), "fork") != NULL);
        _exit(failures > before);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* The parent's file is as the parent left it. */
    CHECK(fc_size(f) == (int64_t)sizeof data + 5);
    char b[5];
    CHECK(fc_pread(f, b, 5, sizeof data) == 5 && memcmp(b, "dirty", 5) == 0);
    CHECK(fc_close(f) == 0);
    struct stat st;
    CHECK(stat(path_in(dir, "forked"), &st) == 0 && st.st_size == (off_t)sizeof data + 5);
}

/* Opens and closes a file until `*stop`: handles made and taken out of
 * the tables, each under its table's lock, while the main thread forks. */
struct churn {
    fc_cache_t cache;
    const char *path;
    volatile int stop;
};

static void *churn_loop(void *arg) {
    struct churn *c = arg;
    while (!c->stop) {
        fc_file_t f = fc_open(c->cache, c->path, O_RDONLY, 0);
        if (f <= 0 || fc_close(f) != 0) {
            return (void *)1;
        }
    }
    return NULL;
}

/* A fork while other threads are inside calls: the child's calls on
 * every shard of the tables return (a lock a parent's thread held at the
 * fork would block them forever; the child's alarm says so). */
static void test_fork_while_busy(fc_cache_t cache, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/busy", dir);
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    CHECK(fd >= 0 && write(fd, "x", 1) == 1);
    close(fd);
    struct churn c = {cache, path, 0};
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) {
        CHECK(pthread_create(&threads[i], NULL, churn_loop, &c) == 0);
    }
    fflush(NULL);
    for (int round = 0; round < 200 && !failures; round++) {
        pid_t child = fork();
        CHECK(child >= 0);
        if (child == 0) {
            alarm(5);
            /* Handles are numbered in order: 64 in a row cover every
             * shard of both tables. */
            fc_file_t first = fc_open(cache, path, O_RDONLY, 0);
            for (int64_t h = 1; h < first + 64; h++) {
                fc_size(h);
                fc_cache_sync_all(h);
            }
            _exit(0);
        }
        int status = 0;
        CHECK(waitpid(child, &status, 0) == child);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    c.stop = 1;
    for (int i = 0; i < 2; i++) {
        void *r = NULL;
        CHECK(pthread_join(threads[i], &r) == 0 && r == NULL);
    }
}

/* The uid and gid of nobody, to drop root's permission bypass. */
#define NOBODY 65534

/* O_WRONLY needs no read permission, as open(2)'s: run as a user who may
 * write the file and not read it (root reads anything, so as root the
 * check runs in a child as nobody). Whole blocks and writes past the end
 * work; a write into part of a block neither cached nor past the end
 * (which the cache would have to read) fails, leaving the file as it was. */
static void test_write_only(const char *dir) {
    char sub[4096], path[4096];
    snprintf(sub, sizeof sub, "%s/wo", dir);
    snprintf(path, sizeof path, "%s/wo/file", dir);
    CHECK(chmod(dir, 0711) == 0 && mkdir(sub, 0700) == 0);
    static char block[4096];
    memset(block, 'a', sizeof block);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0200);
    CHECK(fd >= 0 && write(fd, block, sizeof block) == (ssize_t)sizeof block);
    CHECK(write(fd, block, sizeof block) == (ssize_t)sizeof block);
    close(fd);
    int root = geteuid() == 0;
    if (root) {
        CHECK(chown(sub, NOBODY, NOBODY) == 0 && chown(path, NOBODY, NOBODY) == 0);
    }
    fflush(NULL);
    pid_t child = root ? fork() : 0;
    CHECK(child >= 0);
    int before = failures;
    if (child == 0) {
        if (root) {
            alarm(60);
            CHECK(setgroups(0, NULL) == 0 && setgid(NOBODY) == 0 && setuid(NOBODY) == 0);
        }
        CHECK_ERR(open(path, O_RDONLY), EACCES); /* what is under test */
        struct fc_cache_options o = FC_CACHE_OPTIONS_INIT;
        fc_cache_t cache = small_cache(&o);
        CHECK(cache > 0);
        CHECK_ERR(fc_open(cache, path, O_RDWR, 0), EACCES);
        fc_file_t f = fc_open(cache, path, O_WRONLY, 0);
        CHECK(f > 0);
        memset(block, 'b', sizeof block);
        CHECK(fc_pwrite(f, block, sizeof block, sizeof block) == (ssize_t)sizeof block);
        CHECK(fc_pwrite(f, "tail", 4, 2 * sizeof block) == 4);
        CHECK(fc_pwrite(f, "B", 1, sizeof block + 1) == 1); /* cached */
        CHECK_ERR(fc_pwrite(f, "x", 1, 1), EBADF); /* would need a read */
        char b[1];
        CHECK_ERR(fc_pread(f, b, 1, 0), EBADF);
        CHECK(fc_fsync(f) == 0);
        CHECK(fc_close(f) == 0);
        CHECK(fc_cache_destroy(cache) == 0);
        if (root) {
            _exit(failures > before);
        }
    } else {
        int status = 0;
        CHECK(waitpid(child, &status, 0) == child);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    /* The file, as plain calls see it (as root, or after a chmod). */
    CHECK(chmod(path, 0600) == 0);
    static char got[2 * 4096 + 8];
    fd = open(path, O_RDONLY);
    CHECK(fd >= 0 && read(fd, got, sizeof got) == 2 * 4096 + 4);
    close(fd);
    CHECK(got[0] == 'a' && got[1] == 'a' && got[4095] == 'a');
    CHECK(got[4096] == 'b' && got[4097] == 'B' && got[8191] == 'b');
    CHECK(memcmp(got + 8192, "tail", 4) == 0);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    alarm(60);
    /* First: its child makes a cache, which a child of a process that made
     * one may not. */
    test_write_only(dir);
    test_struct_size();
    struct fc_cache_options o = FC_CACHE_OPTIONS_INIT;
    fc_cache_t cache = small_cache(&o);
    CHECK(cache > 0);
    if (cache <= 0) {
        return 1;
    }
    test_special_files(cache, dir);
    test_fork(cache, dir);
    test_fork_while_busy(cache, dir);
    CHECK(fc_cache_destroy(cache) == 0);
    return finish();
}
