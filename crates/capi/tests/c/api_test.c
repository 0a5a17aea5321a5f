/*
 * The C API's test, through include/foliocache.h and libfoliocache.so:
 * run by tests/c_api.rs as `api_test DIR` (DIR: an empty temporary
 * directory). Exits 0 when every check passes; otherwise prints each
 * failing check and exits 1.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "foliocache.h"
#include "check.h"

/* The expected content of the file under test, and its size. */
static unsigned char model[2 << 20];
static int64_t model_size;

static void fill(unsigned char *buf, size_t len, unsigned seed) {
    for (size_t i = 0; i < len; i++) {
        seed = seed * 1103515245u + 12345u;
        buf[i] = (unsigned char)(seed >> 16);
    }
}

/* Writes `len` pattern bytes at `offset` through `file` and the model. */
static void write_both(fc_file_t file, int64_t offset, size_t len, unsigned seed) {
    unsigned char *buf = malloc(len);
    fill(buf, len, seed);
    CHECK(fc_pwrite(file, buf, len, offset) == (ssize_t)len);
    memcpy(model + offset, buf, len);
    if (offset + (int64_t)len > model_size) {
        model_size = offset + (int64_t)len;
    }
    free(buf);
}

/* Reads the whole file through `file` in odd-sized pieces and compares it
 * with the model; then checks the read at end of file returns 0. */
static void check_content(fc_file_t file) {
    static unsigned char got[sizeof model];
    CHECK(fc_size(file) == model_size);
    int64_t off = 0;
    while (off < model_size) {
        ssize_t n = fc_pread(file, got + off, 12345, off);
        CHECK(n > 0);
        if (n <= 0) {
            return;
        }
        off += n;
    }
    CHECK(off == model_size);
    CHECK(memcmp(got, model, (size_t)model_size) == 0);
    CHECK(fc_pread(file, got, 100, model_size) == 0);
    CHECK(fc_pread(file, got, 100, model_size + 100000) == 0);
}

/* The backing file, read with plain POSIX calls, matches the model. */
static void check_backing(const char *path) {
    static unsigned char got[sizeof model];
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    CHECK(pread(fd, got, sizeof got, 0) == (ssize_t)model_size);
    CHECK(memcmp(got, model, (size_t)model_size) == 0);
    close(fd);
}

/* The library loaded is the version of the header compiled against. */
static void test_version(void) {
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", FOLIOCACHE_VERSION_MAJOR, FOLIOCACHE_VERSION_MINOR,
             FOLIOCACHE_VERSION_PATCH);
    CHECK(strcmp(fc_version(), want) == 0);
}

static void test_options(void) {
    /* The sizes the library's struct have (its Rust tests check them). */
    CHECK(sizeof(struct fc_cache_options) == 48);
    CHECK(sizeof(struct fc_cache_stats) == 8 + 24 * 8);
    struct fc_cache_options o = FC_CACHE_OPTIONS_INIT;
    o.flags = 1u << 31;
    CHECK_ERR(fc_cache_new_with(&o), EINVAL);
    CHECK(strstr(fc_last_error(), "flags") != NULL);
    o.flags = 0;
    o.size = 2;
    CHECK_ERR(fc_cache_new_with(&o), EINVAL);
    CHECK_ERR(fc_cache_new(100), EINVAL); /* under one page */

    /* A caller built with a newer header: known fields, then zeros. */
    struct {
        struct fc_cache_options o;
        uint64_t newer;
    } big;
    memset(&big, 0, sizeof big);
    big.o.size = sizeof big;
    big.o.capacity = 4 << 20;
    big.newer = 1;
    CHECK_ERR(fc_cache_new_with(&big.o), E2BIG);
    big.newer = 0;
    big.o.shadow_budget = 1 << 20; /* the last field: known to the library */
    fc_cache_t c = fc_cache_new_with(&big.o);
    CHECK(c > 0);
    struct fc_cache_stats s = FC_CACHE_STATS_INIT;
    CHECK(fc_cache_stats(c, &s) == 0);
    CHECK(s.size == sizeof s);
    CHECK(s.capacity_bytes == 4 << 20);
    CHECK(fc_cache_destroy(c) == 0);

    /* A caller built with an older header: its size, only the fields it
     * has written. */
    struct {
        uint32_t size, reserved;
        uint64_t hits, misses;
        uint64_t canary;
    } small;
    c = fc_cache_new_with(NULL);
    CHECK(c > 0);
    small.size = 24;
    small.canary = 0x5a5a5a5a;
    CHECK(fc_cache_stats(c, (struct fc_cache_stats *)(void *)&small) == 0);
    CHECK(small.size == 24);
    CHECK(small.canary == 0x5a5a5a5a);
    CHECK_ERR(fc_cache_stats(c, NULL), EFAULT);
    CHECK(fc_cache_destroy(c) == 0);
}

static void test_read_write(fc_cache_t cache, const char *dir) {
    const char *path = path_in(dir, "data.bin");
    fc_file_t f = fc_open(cache, path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(f > 0);
    CHECK(fc_size(f) == 0);
    write_both(f, 0, 10000, 1);
    write_both(f, 4093, 5000, 2);       /* over the first, across pages */
    write_both(f, (1 << 20) + 17, 1, 3); /* past the end: a hole before */
    write_both(f, 3 << 19, 300000, 4);   /* a large one, across folios */
    CHECK(fc_pwrite(f, "", 0, 0) == 0);
    check_content(f);

    CHECK(fc_fdatasync(f) == 0);
    CHECK(fc_fsync(f) == 0);
    check_backing(path);

    /* Truncate: shrink, then grow with zeros. */
    CHECK(fc_ftruncate(f, 6000) == 0);
    model_size = 6000;
    check_content(f);
    CHECK(fc_ftruncate(f, 20000) == 0);
    memset(model + 6000, 0, 14000);
    model_size = 20000;
    check_content(f);

    /* A hole in the middle reads as zeros; the size stays. */
    int r = fc_punch_hole(f, 100, 4096);
    CHECK(r == 0 || errno == EOPNOTSUPP);
    if (r == 0) {
        memset(model + 100, 0, 4096);
    }
    check_content(f);
    CHECK(fc_fsync(f) == 0);
    check_backing(path);

    /* Moving data: a block collapsed out, two inserted (dirty data before
     * and after), each as the model moves it. */
    memset(model + 8192, 0x5a, 3000);
    CHECK(fc_pwrite(f, model + 8192, 3000, 8192) == 3000);
    r = fc_collapse_range(f, 4096, 4096);
    CHECK(r == 0 || errno == EOPNOTSUPP);
    if (r == 0) {
        memmove(model + 4096, model + 8192, model_size - 8192);
        model_size -= 4096;
        check_content(f);
        CHECK(fc_insert_range(f, 8192, 8192) == 0);
        memmove(model + 16384, model + 8192, model_size - 8192);
        memset(model + 8192, 0, 8192);
        model_size += 8192;
        check_content(f);
        CHECK_ERR(fc_collapse_range(f, 100, 4096), EINVAL);
        CHECK_ERR(fc_collapse_range(f, 0, model_size), EINVAL);
        CHECK_ERR(fc_insert_range(f, model_size, 4096), EINVAL);
        CHECK_ERR(fc_insert_range(f, 4096, 0), EINVAL);
        check_content(f);
        CHECK(fc_fsync(f) == 0);
        check_backing(path);
    }

    /* Another handle, read-only, sees the same data; it cannot write. */
    fc_file_t ro = fc_open(cache, path, O_RDONLY, 0);
    CHECK(ro > 0);
    check_content(ro);
    CHECK_ERR(fc_pwrite(ro, "x", 1, 0), EACCES);
    CHECK_ERR(fc_ftruncate(ro, 0), EACCES);
    CHECK_ERR(fc_punch_hole(ro, 0, 1), EACCES);
    CHECK_ERR(fc_collapse_range(ro, 0, 4096), EACCES);
    CHECK_ERR(fc_insert_range(ro, 0, 4096), EACCES);
    CHECK(fc_close(ro) == 0);

    /* Append: writes go to the end, whatever the offset. */
    fc_file_t ap = fc_open(cache, path, O_WRONLY | O_APPEND, 0);
    CHECK(ap > 0);
    write_both(ap, model_size, 10, 5);
    CHECK(fc_pwrite(ap, model + 50, 10, 0) == 10);
    memcpy(model + model_size, model + 50, 10);
    model_size += 10;
    CHECK(fc_close(ap) == 0);
    check_content(f);

    struct fc_cache_stats s = FC_CACHE_STATS_INIT;
    CHECK(fc_cache_stats(cache, &s) == 0);
    CHECK(s.size == sizeof s);
    CHECK(s.reserved == 0);
    CHECK(s.capacity_bytes == 16 << 20);
    CHECK(s.hits > 0);
    CHECK(s.read_bytes > 0 && s.first_read_bytes <= s.read_bytes);
    CHECK(s.io_writes > 0 && s.io_write_bytes > 0);
    CHECK(s.folios > 0 && s.bytes_cached > 0);
    CHECK(s.free_bytes + s.bytes_cached <= s.capacity_bytes);
    CHECK(fc_cache_sync_all(cache) == 0);

    CHECK(fc_close(f) == 0);
    /* Use after close and double close: EBADF, never a crash. */
    char b[8];
    CHECK_ERR(fc_pread(f, b, sizeof b, 0), EBADF);
    CHECK_ERR(fc_close(f), EBADF);
    CHECK(strstr(fc_last_error(), "not an open file handle") != NULL);

    /* Reopened, the data is there. */
    f = fc_open(cache, path, O_RDONLY, 0);
    CHECK(f > 0);
    check_content(f);
    CHECK(fc_close(f) == 0);
}

/* Where the bytes of reads came from: a file written with POSIX calls,
 * read whole twice through a new cache: the first pass all from the file
 * (first_read_bytes), the second all from memory. */
static void test_read_bytes(const char *dir) {
    const char *path = path_in(dir, "bytes.bin");
    static unsigned char data[3 * 4096], got[sizeof data];
    fill(data, sizeof data, 7);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, data, sizeof data) == (ssize_t)sizeof data);
    CHECK(close(fd) == 0);
    struct fc_cache_options o = FC_CACHE_OPTIONS_INIT;
    o.capacity = 4 << 20;
    o.flags = FC_CACHE_NO_PRESSURE;
    fc_cache_t c = fc_cache_new_with(&o);
    CHECK(c > 0);
    fc_file_t f = fc_open(c, path, O_RDONLY, 0);
    CHECK(f > 0);
    struct fc_cache_stats s = FC_CACHE_STATS_INIT;
    CHECK(fc_pread(f, got, sizeof got, 0) == (ssize_t)sizeof got);
    CHECK(memcmp(got, data, sizeof data) == 0);
    CHECK(fc_cache_stats(c, &s) == 0);
    CHECK(s.read_bytes == sizeof data);
    CHECK(s.first_read_bytes == sizeof data);
    CHECK(fc_pread(f, got, sizeof got, 0) == (ssize_t)sizeof got);
    CHECK(fc_cache_stats(c, &s) == 0);
    CHECK(s.read_bytes == 2 * sizeof data);
    CHECK(s.first_read_bytes == sizeof data);
    CHECK(fc_close(f) == 0);
    CHECK(fc_cache_destroy(c) == 0);
}

static void test_bad_arguments(fc_cache_t cache, const char *dir) {
    char b[16];
    const fc_file_t bad[] = {0, -1, 123456789, INT64_MIN, INT64_MAX, cache};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fc_file_t h = bad[i];
        CHECK_ERR(fc_pread(h, b, sizeof b, 0), EBADF);
        CHECK_ERR(fc_pwrite(h, b, sizeof b, 0), EBADF);
        CHECK_ERR(fc_fsync(h), EBADF);
        CHECK_ERR(fc_fdatasync(h), EBADF);
        CHECK_ERR(fc_ftruncate(h, 0), EBADF);
        CHECK_ERR(fc_punch_hole(h, 0, 1), EBADF);
        CHECK_ERR(fc_collapse_range(h, 0, 4096), EBADF);
        CHECK_ERR(fc_insert_range(h, 0, 4096), EBADF);
        CHECK_ERR(fc_size(h), EBADF);
        CHECK_ERR(fc_close(h), EBADF);
    }
    fc_file_t f = fc_open(cache, path_in(dir, "args.bin"), O_RDWR | O_CREAT | O_EXCL, 0600);
    CHECK(f > 0);
    /* A file's handle is no cache's. */
    struct fc_cache_stats s = FC_CACHE_STATS_INIT;
    CHECK_ERR(fc_cache_stats(f, &s), EBADF);
    CHECK_ERR(fc_cache_destroy(f), EBADF);
    CHECK_ERR(fc_open(f, path_in(dir, "x"), O_RDONLY, 0), EBADF);

    CHECK_ERR(fc_pread(f, b, sizeof b, -1), EINVAL);
    CHECK_ERR(fc_pwrite(f, b, sizeof b, -4096), EINVAL);
    CHECK_ERR(fc_pread(f, NULL, 1, 0), EFAULT);
    CHECK_ERR(fc_pwrite(f, NULL, 1, 0), EFAULT);
    CHECK(fc_pread(f, NULL, 0, 0) == 0);
    CHECK(fc_pwrite(f, NULL, 0, 0) == 0);
    CHECK_ERR(fc_pread(f, b, SIZE_MAX, 0), EINVAL);
    CHECK_ERR(fc_pwrite(f, b, (size_t)SSIZE_MAX + 1, 0), EINVAL);
    CHECK_ERR(fc_pwrite(f, b, 1, INT64_MAX), EFBIG);
    CHECK_ERR(fc_ftruncate(f, -1), EINVAL);
    CHECK_ERR(fc_punch_hole(f, -1, 1), EINVAL);
    CHECK_ERR(fc_punch_hole(f, 0, -1), EINVAL);
    CHECK_ERR(fc_collapse_range(f, -4096, 4096), EINVAL);
    CHECK_ERR(fc_insert_range(f, 0, -4096), EINVAL);
    CHECK(fc_close(f) == 0);

    CHECK_ERR(fc_open(cache, NULL, O_RDONLY, 0), EFAULT);
    CHECK_ERR(fc_open(cache, path_in(dir, "missing"), O_RDONLY, 0), ENOENT);
    CHECK_ERR(fc_open(cache, path_in(dir, "args.bin"), O_RDWR | O_CREAT | O_EXCL, 0600), EEXIST);
    CHECK_ERR(fc_open(cache, dir, O_RDWR, 0), EISDIR);
    CHECK_ERR(fc_open(cache, path_in(dir, "args.bin"), O_RDWR | O_EXCL, 0), EINVAL);
    CHECK_ERR(fc_open(cache, path_in(dir, "args.bin"), O_RDONLY | O_TRUNC, 0), EINVAL);
    CHECK_ERR(fc_open(cache, path_in(dir, "args.bin"), O_RDWR | O_ACCMODE, 0), EINVAL);
    CHECK_ERR(fc_open(cache, path_in(dir, "args.bin"), O_RDWR | O_NOFOLLOW, 0), EINVAL);
    CHECK_ERR(fc_open(cache, path_in(dir, "args.bin"), O_RDWR | O_SYNC, 0), EINVAL);
    CHECK_ERR(fc_open(cache, path_in(dir, "new.bin"), O_RDWR | O_CREAT, 010000), EINVAL);
}

/* Threads reading one file while the main thread closes its handle: each
 * read returns the right bytes or fails with EBADF. */
struct reader {
    fc_file_t file;
    int bad;
};

static void *read_loop(void *arg) {
    struct reader *r = arg;
    unsigned char buf[4096];
    for (int i = 0; i < 20000; i++) {
        int64_t off = (int64_t)(i * 4099) % (model_size - (int64_t)sizeof buf);
        ssize_t n = fc_pread(r->file, buf, sizeof buf, off);
        if (n == -1 && errno == EBADF) {
            break;
        }
        if (n != (ssize_t)sizeof buf || memcmp(buf, model + off, sizeof buf) != 0) {
            r->bad++;
        }
    }
    return NULL;
}

static void test_threads(fc_cache_t cache, const char *dir) {
    const char *path = path_in(dir, "threads.bin");
    fc_file_t f = fc_open(cache, path, O_RDWR | O_CREAT, 0600);
    CHECK(f > 0);
    model_size = 0;
    write_both(f, 0, 1 << 20, 6);
    struct reader readers[4];
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) {
        readers[i].file = f;
        readers[i].bad = 0;
        CHECK(pthread_create(&threads[i], NULL, read_loop, &readers[i]) == 0);
    }
    struct timespec pause = {0, 2000000};
    nanosleep(&pause, NULL);
    CHECK(fc_close(f) == 0);
    for (int i = 0; i < 4; i++) {
        CHECK(pthread_join(threads[i], NULL) == 0);
        CHECK(readers[i].bad == 0);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    CHECK(strcmp(fc_last_error(), "") == 0);
    test_version();
    test_options();

    struct fc_cache_options o = FC_CACHE_OPTIONS_INIT;
    o.capacity = 16 << 20;
    o.flags = FC_CACHE_NO_PRESSURE;
    fc_cache_t cache = fc_cache_new_with(&o);
    CHECK(cache > 0);
    if (cache <= 0) {
        return 1;
    }
    test_read_write(cache, dir);
    test_read_bytes(dir);
    test_bad_arguments(cache, dir);
    test_threads(cache, dir);

    /* A file outlives its cache's handle. */
    fc_file_t f = fc_open(cache, path_in(dir, "data.bin"), O_RDONLY, 0);
    CHECK(f > 0);
    CHECK(fc_cache_destroy(cache) == 0);
    CHECK_ERR(fc_cache_destroy(cache), EBADF);
    CHECK_ERR(fc_open(cache, path_in(dir, "data.bin"), O_RDONLY, 0), EBADF);
    char b[4];
    CHECK(fc_pread(f, b, sizeof b, 0) == (ssize_t)sizeof b);
    CHECK(fc_close(f) == 0);

    return finish();
}
