/* Every intercepted call, and the defined behaviours, run under
 * libfoliocache_preload.so with FOLIOCACHE_PRELOAD_DIRS naming the
 * directory given as argv[1]. Exits 0 when every check holds; the test
 * harness then checks the files left behind through the kernel.
 *
 * `served(fd)` asks the library whether the cache serves an fd, so each
 * check knows which side answered. Raw system calls (the C library's
 * syscall(2), kernel.h: the library serves its own `syscall`) read what
 * the kernel holds, bypassing the interposer. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernel.h"

#ifndef RWF_DONTCACHE
#define RWF_DONTCACHE 0x00000080 /* Linux 6.14 */
#endif

/* glibc's fortified open, called directly to check its interposition. */
int __open_2(const char *path, int flags);

static const char *dir;
static int failures;

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: check failed: %s (errno %d: %s)\n",        \
                    __FILE__, __LINE__, #cond, errno, strerror(errno));        \
            failures++;                                                        \
        }                                                                      \
    } while (0)

static int served(int fd) {
    static int (*f)(int);
    if (!f)
        f = (int (*)(int))dlsym(RTLD_DEFAULT, "foliocache_preload_served");
    return f ? f(fd) : 0;
}

static char *path_of(const char *name) {
    static char buf[4][PATH_MAX];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, PATH_MAX, "%s/%s", dir, name);
    return p;
}

/* Byte i of the test pattern of a file numbered `seed`. */
static unsigned char pat(int seed, long i) {
    return (unsigned char)(i * 31 + seed * 7 + (i >> 12));
}

static void fill(unsigned char *b, int seed, long off, long n) {
    for (long i = 0; i < n; i++)
        b[i] = pat(seed, off + i);
}

static int matches(const unsigned char *b, int seed, long off, long n) {
    for (long i = 0; i < n; i++)
        if (b[i] != pat(seed, off + i))
            return 0;
    return 1;
}

/* The kernel's view: size and bytes, by raw system calls. */
static long kernel_size(const char *path) {
    struct stat st;
    if (kernel_syscall(SYS_newfstatat, AT_FDCWD, path, &st, 0) != 0)
        return -1;
    return (long)st.st_size;
}

static long kernel_pread(const char *path, void *buf, long n, long off) {
    int fd = (int)kernel_syscall(SYS_openat, AT_FDCWD, path, O_RDONLY);
    if (fd < 0)
        return -1;
    long r = kernel_syscall(SYS_pread64, fd, buf, n, off);
    kernel_syscall(SYS_close, fd);
    return r;
}

static long fsize(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? (long)st.st_size : -1;
}

/* open and its siblings: each fd served; reads and writes at positions
 * and offsets, against a model. */
static void test_open_read_write(void) {
    enum { N = 200000 };
    static unsigned char buf[N], got[N];
    fill(buf, 1, 0, N);

    int fd = open(path_of("rw.bin"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && served(fd));
    CHECK(write(fd, buf, 1000) == 1000);
    CHECK(write(fd, buf + 1000, N - 1000) == N - 1000);
    CHECK(lseek(fd, 0, SEEK_CUR) == N);
    CHECK(lseek(fd, 0, SEEK_SET) == 0);
    CHECK(read(fd, got, 5000) == 5000 && matches(got, 1, 0, 5000));
    CHECK(read(fd, got, N) == N - 5000 && matches(got, 1, 5000, N - 5000));
    CHECK(read(fd, got, 10) == 0);
    CHECK(pread(fd, got, 100, 777) == 100 && matches(got, 1, 777, 100));
    CHECK(pread64(fd, got, 100, N - 50) == 50 && matches(got, 1, N - 50, 50));
    CHECK(pwrite(fd, buf + 10, 10, 10) == 10);
    CHECK(pwrite64(fd, buf + 20, 10, 20) == 10);
    CHECK(lseek64(fd, -10, SEEK_END) == N - 10);
    CHECK(fsize(fd) == N);

    /* Vectored calls. */
    unsigned char a[300], b[700];
    struct iovec iov[2] = {{a, sizeof a}, {b, sizeof b}};
    CHECK(lseek(fd, 4096, SEEK_SET) == 4096);
    CHECK(readv(fd, iov, 2) == 1000 && matches(a, 1, 4096, 300) &&
          matches(b, 1, 4396, 700));
    CHECK(lseek(fd, 0, SEEK_CUR) == 5096);
    CHECK(preadv(fd, iov, 2, 100) == 1000 && matches(a, 1, 100, 300) &&
          matches(b, 1, 400, 700));
    CHECK(preadv64(fd, iov, 2, 200) == 1000 && matches(a, 1, 200, 300));
    CHECK(preadv2(fd, iov, 2, 300, 0) == 1000 && matches(b, 1, 600, 700));
    CHECK(preadv64v2(fd, iov, 2, -1, 0) == 1000 && matches(a, 1, 5096, 300));
    CHECK(lseek(fd, 0, SEEK_CUR) == 6096);
    fill(a, 1, 8000, 300);
    fill(b, 1, 8300, 700);
    CHECK(lseek(fd, 8000, SEEK_SET) == 8000);
    CHECK(writev(fd, iov, 2) == 1000 && lseek(fd, 0, SEEK_CUR) == 9000);
    CHECK(pwritev(fd, iov, 2, 8000) == 1000);
    CHECK(pwritev64(fd, iov, 2, 8000) == 1000);
    CHECK(pwritev2(fd, iov, 2, 8000, RWF_DSYNC) == 1000);
    CHECK(pwritev64v2(fd, iov, 2, 8000, 0) == 1000);
    /* Uncached (the cache's DONTCACHE): the same bytes, read back. */
    CHECK(pwritev2(fd, iov, 2, 8000, RWF_DONTCACHE) == 1000);
    CHECK(preadv2(fd, iov, 2, 8000, RWF_DONTCACHE) == 1000 && matches(a, 1, 8000, 300) &&
          matches(b, 1, 8300, 700));
    CHECK(pread(fd, got, N, 0) == N && memcmp(got, buf, N) == 0);
    CHECK(fsync(fd) == 0);
    CHECK(fdatasync(fd) == 0);
    CHECK(sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE) == 0);
    /* Synced: the kernel holds every byte. */
    memset(got, 0, N);
    CHECK(kernel_size(path_of("rw.bin")) == N);
    CHECK(kernel_pread(path_of("rw.bin"), got, N, 0) == N && memcmp(got, buf, N) == 0);
    /* sync_file_range waiting after the writes: the kernel holds a write
       made since (SYNC_FILE_RANGE_WRITE alone is a hint). */
    buf[5] ^= 0xff;
    CHECK(pwrite(fd, buf + 5, 1, 5) == 1);
    CHECK(sync_file_range(fd, 0, 0,
                          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                              SYNC_FILE_RANGE_WAIT_AFTER) == 0);
    CHECK(kernel_pread(path_of("rw.bin"), got, N, 0) == N && memcmp(got, buf, N) == 0);
    CHECK(sync_file_range(fd, 0, 0, 8) == -1 && errno == EINVAL);
    CHECK(close(fd) == 0);

    /* The other opens. */
    int fds[7];
    fds[0] = open64(path_of("rw.bin"), O_RDONLY);
    fds[1] = openat(AT_FDCWD, path_of("rw.bin"), O_RDONLY);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK(dfd >= 0 && !served(dfd));
    fds[2] = openat64(dfd, "rw.bin", O_RDONLY);
    fds[3] = __open_2(path_of("rw.bin"), O_RDONLY);
    fds[4] = creat(path_of("creat.bin"), 0644);
    fds[5] = creat64(path_of("creat64.bin"), 0644);
    fds[6] = openat(dfd, "new.bin", O_RDWR | O_CREAT | O_EXCL, 0600);
    for (int i = 0; i < 7; i++) {
        CHECK(fds[i] >= 0 && served(fds[i]));
        if (i < 4)
            CHECK(pread(fds[i], got, 10, 1234) == 10 && matches(got, 1, 1234, 10));
    }
    CHECK(write(fds[4], "creat", 5) == 5);
    CHECK(read(fds[4], got, 1) == -1 && errno == EBADF); /* O_WRONLY */
    CHECK(write(fds[0], "x", 1) == -1 && errno == EBADF); /* O_RDONLY */
    CHECK(ftruncate(fds[0], 0) == -1 && errno == EINVAL);
    for (int i = 0; i < 7; i++)
        CHECK(close(fds[i]) == 0);
    close(dfd);

    /* Errors keep their errno; an fd outside the directories is not
     * served. */
    CHECK(open(path_of("rw.bin"), O_RDWR | O_CREAT | O_EXCL, 0644) == -1 && errno == EEXIST);
    CHECK(open(path_of("missing"), O_RDONLY) == -1 && errno == ENOENT);
    fd = open("/proc/self/status", O_RDONLY);
    CHECK(fd >= 0 && !served(fd));
    close(fd);
    fd = open(path_of("rw.bin"), O_RDONLY);
    CHECK(lseek(fd, -1, SEEK_SET) == -1 && errno == EINVAL);
    CHECK(lseek(fd, 0, 12345) == -1 && errno == EINVAL);
    CHECK(pread(fd, got, 1, -5) == -1 && errno == EINVAL);
    CHECK(lseek(fd, 10, SEEK_DATA) == 10 && lseek(fd, 10, SEEK_HOLE) == N);
    CHECK(lseek(fd, N, SEEK_DATA) == -1 && errno == ENXIO);
    close(fd);
    /* A closed fd is the kernel's EBADF. */
    CHECK(read(fd, got, 1) == -1 && errno == EBADF);
}

/* The fortified reads, which -D_FORTIFY_SOURCE=2 calls where a buffer's
 * size is known and the length is not, and the stat functions a program
 * linked against glibc before 2.33 calls (kept by glibc as compatibility
 * symbols, bound here by version as such a program binds them): called
 * directly, each serves the cache's bytes and size. */
ssize_t __read_chk(int fd, void *buf, size_t nbytes, size_t buflen);
ssize_t __pread_chk(int fd, void *buf, size_t nbytes, off_t offset, size_t buflen);
ssize_t __pread64_chk(int fd, void *buf, size_t nbytes, off64_t offset, size_t buflen);
#if defined(__x86_64__)
#define OLD_GLIBC "GLIBC_2.2.5"
#define OLD_GLIBC_AT "GLIBC_2.4"
#elif defined(__aarch64__)
#define OLD_GLIBC "GLIBC_2.17"
#define OLD_GLIBC_AT "GLIBC_2.17"
#endif
int __fxstat64(int ver, int fd, struct stat64 *buf);
int __xstat64(int ver, const char *path, struct stat64 *buf);
int __lxstat64(int ver, const char *path, struct stat64 *buf);
int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *buf, int flags);
int __fxstat(int ver, int fd, struct stat *buf);
int __xstat(int ver, const char *path, struct stat *buf);
__asm__(".symver __fxstat64, __fxstat64@" OLD_GLIBC);
__asm__(".symver __xstat64, __xstat64@" OLD_GLIBC);
__asm__(".symver __lxstat64, __lxstat64@" OLD_GLIBC);
__asm__(".symver __fxstatat64, __fxstatat64@" OLD_GLIBC_AT);
__asm__(".symver __fxstat, __fxstat@" OLD_GLIBC);
__asm__(".symver __xstat, __xstat@" OLD_GLIBC);

/* A length the compiler cannot see: a fortified read of it into a buffer
 * of known size is __read_chk. */
static size_t opaque(size_t n) {
    volatile size_t v = n;
    return v;
}

static void test_fortified_and_old_stat(void) {
    const char *p = path_of("fortified.bin");
    unsigned char buf[8192], got[4096];
    fill(buf, 9, 0, sizeof buf);
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(served(fd) && write(fd, buf, sizeof buf) == sizeof buf);
    CHECK(lseek(fd, 100, SEEK_SET) == 100);
    CHECK(__read_chk(fd, got, 1000, sizeof got) == 1000 && matches(got, 9, 100, 1000));
    CHECK(lseek(fd, 0, SEEK_CUR) == 1100);
    CHECK(__pread_chk(fd, got, 2000, 3000, sizeof got) == 2000 && matches(got, 9, 3000, 2000));
    CHECK(__pread64_chk(fd, got, 4096, 4096, sizeof got) == 4096 && matches(got, 9, 4096, 4096));
    CHECK(read(fd, got, opaque(500)) == 500 && matches(got, 9, 1100, 500));
    CHECK(pread(fd, got, opaque(600), 7000) == 600 && matches(got, 9, 7000, 600));
    struct stat64 st64;
    struct stat st;
    CHECK(__fxstat64(1, fd, &st64) == 0 && st64.st_size == 8192);
    CHECK(__xstat64(1, p, &st64) == 0 && st64.st_size == 8192);
    CHECK(__lxstat64(1, p, &st64) == 0 && st64.st_size == 8192);
    CHECK(__fxstatat64(1, AT_FDCWD, p, &st64, 0) == 0 && st64.st_size == 8192);
    CHECK(__fxstat(1, fd, &st) == 0 && st.st_size == 8192);
    CHECK(__xstat(1, p, &st) == 0 && st.st_size == 8192);
    close(fd);
}

/* What the kernel refuses is refused: copy_file_range of overlapping
 * ranges in one file or with flags (EINVAL), a copy whose write fails
 * (neither offset moved), a buffer no process could map (EFAULT), and a
 * vectored append whose total cannot be gathered in memory (ENOMEM, where
 * overcommit does not promise any size). */
static void test_refusals(void) {
    const char *p = path_of("refuse.bin");
    const char *q = path_of("refuse-out.bin");
    unsigned char buf[8192], got[8192];
    fill(buf, 10, 0, sizeof buf);
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(served(fd) && write(fd, buf, sizeof buf) == sizeof buf);
    loff_t in = 0, out = 100;
    CHECK(copy_file_range(fd, &in, fd, &out, 1000, 0) == -1 && errno == EINVAL && in == 0 &&
          out == 100);
    CHECK(lseek(fd, 500, SEEK_SET) == 500);
    CHECK(copy_file_range(fd, NULL, fd, NULL, 1000, 0) == -1 && errno == EINVAL);
    in = 0, out = 4096;
    CHECK(copy_file_range(fd, &in, fd, &out, 1000, 0) == 1000 && in == 1000 && out == 5096);
    CHECK(pread(fd, got, 1000, 4096) == 1000 && matches(got, 10, 0, 1000));
    int other = open(q, O_RDWR | O_CREAT | O_TRUNC, 0644);
    in = 0, out = 0;
    CHECK(copy_file_range(fd, &in, other, &out, 1000, 1) == -1 && errno == EINVAL);
    CHECK(fsize(other) == 0);
    int ro = open(q, O_RDONLY);
    CHECK(served(ro));
    CHECK(copy_file_range(fd, &in, ro, &out, 1000, 0) == -1 && errno == EBADF && in == 0 &&
          out == 0);
    CHECK(lseek(fd, 10, SEEK_SET) == 10);
    CHECK(copy_file_range(fd, NULL, ro, NULL, 1000, 0) == -1 && errno == EBADF &&
          lseek(fd, 0, SEEK_CUR) == 10);
    close(ro);
    close(other);

    void *bad = (void *)opaque(1);
    CHECK(read(fd, bad, 10) == -1 && errno == EFAULT);
    CHECK(pread(fd, bad, 10, 0) == -1 && errno == EFAULT);
    CHECK(write(fd, bad, 10) == -1 && errno == EFAULT);
    struct iovec badv[2] = {{buf, 10}, {bad, 10}};
    CHECK(readv(fd, badv, 2) == -1 && errno == EFAULT);
    CHECK(lseek(fd, 0, SEEK_CUR) == 10 && fsize(fd) == 8192);

    char mode = 0;
    int oc = open("/proc/sys/vm/overcommit_memory", O_RDONLY);
    CHECK(oc >= 0 && read(oc, &mode, 1) == 1);
    close(oc);
    size_t each = (size_t)64 << 30;
    void *big = mmap(NULL, each, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(big != MAP_FAILED);
    int ap = open(p, O_WRONLY | O_APPEND);
    if (mode == '1') {
        printf("refusals: vm.overcommit_memory is 1, the vectored append of 64 TiB not tried\n");
    } else if (big != MAP_FAILED) {
        static struct iovec v[1024];
        for (int i = 0; i < 1024; i++)
            v[i] = (struct iovec){big, each};
        CHECK(served(ap) && writev(ap, v, 1024) == -1 && errno == ENOMEM);
        CHECK(fsize(ap) == 8192);
    }
    munmap(big, each);
    close(ap);
    close(fd);
}

/* O_DSYNC: each write is on the file when it returns. */
static void test_dsync(void) {
    const char *p = path_of("dsync.bin");
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_DSYNC, 0644);
    CHECK(served(fd) && write(fd, "durable", 7) == 7);
    char got[8] = {0};
    CHECK(kernel_pread(p, got, 7, 0) == 7 && memcmp(got, "durable", 7) == 0);
    close(fd);
}

/* Another process's view (raw system calls: what it would see) and its
 * writes: coherent at sync, at close, and at the next open after the last
 * close (docs/preload.md, "Coherence with other processes"). */
static void test_other_process(void) {
    const char *p = path_of("shared.bin");
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(served(fd) && write(fd, "mine", 4) == 4);
    CHECK(fdatasync(fd) == 0);
    char got[8] = {0};
    CHECK(kernel_pread(p, got, 4, 0) == 4 && memcmp(got, "mine", 4) == 0);
    /* The other process writes inside the file, where this one holds
     * nothing dirty: its bytes survive this one's close... */
    int raw = (int)kernel_syscall(SYS_openat, AT_FDCWD, p, O_RDWR);
    CHECK(kernel_syscall(SYS_pwrite64, raw, "XY", 2, 1) == 2);
    CHECK(close(fd) == 0);
    /* ...and an open after the last close reads afresh. */
    fd = open(p, O_RDONLY);
    CHECK(served(fd) && fsize(fd) == 4);
    CHECK(pread(fd, got, 8, 0) == 4 && memcmp(got, "mXYe", 4) == 0);
    close(fd);
    /* Growth by the other process while this one has the file open for
     * writing is not seen by this one's reads (the cache keeps the size
     * from the open on: docs/preload.md), but its last close keeps it: a
     * file never shrinks unless someone truncates it. */
    fd = open(p, O_RDWR);
    CHECK(kernel_syscall(SYS_pwrite64, raw, "more", 4, 4) == 4);
    CHECK(fsize(fd) == 4 && pread(fd, got, 8, 0) == 4);
    close(fd);
    CHECK(kernel_size(p) == 8);
    kernel_syscall(SYS_close, raw);
}

/* Close writes back: the kernel holds the data after the last close. */
static void test_close_writes_back(void) {
    enum { N = 3 * 65536 + 123 };
    static unsigned char buf[N], got[N];
    fill(buf, 2, 0, N);
    int fd = open(path_of("close.bin"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fd2 = dup(fd);
    CHECK(served(fd) && served(fd2));
    CHECK(write(fd, buf, N) == N);
    CHECK(close(fd) == 0);
    CHECK(served(fd2));
    CHECK(close(fd2) == 0);
    CHECK(kernel_size(path_of("close.bin")) == N);
    CHECK(kernel_pread(path_of("close.bin"), got, N, 0) == N && memcmp(got, buf, N) == 0);
}

/* Duplicates share the position, as an open file description. */
static void test_dup(void) {
    int fd = open(path_of("dup.bin"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(write(fd, "0123456789", 10) == 10);
    int d1 = dup(fd);
    int d2 = dup2(fd, 100);
    int d3 = dup3(fd, 101, O_CLOEXEC);
    int d4 = fcntl(fd, F_DUPFD, 200);
    int d5 = fcntl(fd, F_DUPFD_CLOEXEC, 300);
    int d6 = fcntl64(fd, F_DUPFD, 400);
    CHECK(d2 == 100 && d3 == 101 && d4 >= 200 && d5 >= 300 && d6 >= 400);
    int all[] = {d1, d2, d3, d4, d5, d6};
    for (int i = 0; i < 6; i++)
        CHECK(served(all[i]));
    CHECK(lseek(d1, 2, SEEK_SET) == 2);
    char c;
    CHECK(read(d2, &c, 1) == 1 && c == '2');
    CHECK(read(d5, &c, 1) == 1 && c == '3');
    CHECK(lseek(fd, 0, SEEK_CUR) == 4);
    CHECK((fcntl(d3, F_GETFD) & FD_CLOEXEC) && !(fcntl(d2, F_GETFD) & FD_CLOEXEC));
    CHECK((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDWR);
    /* dup2 over a served fd with another fd: the target is no longer
     * served, its old file still is through the others. */
    int p[2];
    CHECK(pipe(p) == 0);
    CHECK(dup2(p[0], d2) == d2 && !served(d2));
    CHECK(served(d1));
    close(p[0]);
    close(p[1]);
    close(d2);
    /* close_range forgets what it closes. */
    int hi = fcntl(fd, F_DUPFD, 500);
    CHECK(served(hi));
    CHECK(close_range(hi, hi, 0) == 0 && !served(hi));
    for (int i = 0; i < 6; i++)
        if (all[i] != d2)
            close(all[i]);
    close(fd);
}

/* O_APPEND: every write at the end, whatever the position or offset. */
static void test_append(void) {
    int fd = open(path_of("append.bin"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(write(fd, "abc", 3) == 3);
    int ap = open(path_of("append.bin"), O_RDWR | O_APPEND);
    CHECK(served(ap));
    CHECK(write(ap, "def", 3) == 3);
    CHECK(lseek(ap, 0, SEEK_CUR) == 6);
    CHECK(lseek(ap, 0, SEEK_SET) == 0);
    CHECK(write(ap, "ghi", 3) == 3);
    CHECK(lseek(ap, 0, SEEK_CUR) == 9);
    CHECK(pwrite(ap, "jk", 2, 0) == 2); /* Linux: at the end too */
    CHECK(pwrite(fd, "X", 1, 0) == 1);
    CHECK(fcntl(ap, F_GETFL) & O_APPEND);
    char got[16] = {0};
    CHECK(pread(ap, got, 16, 0) == 11 && memcmp(got, "Xbcdefghijk", 11) == 0);
    /* RWF_APPEND on a plain fd. */
    struct iovec v = {"L", 1};
    CHECK(pwritev2(fd, &v, 1, 0, RWF_APPEND) == 1);
    CHECK(fsize(fd) == 12);
    close(fd);
    close(ap);
    CHECK(kernel_pread(path_of("append.bin"), got, 16, 0) == 12 &&
          memcmp(got, "XbcdefghijkL", 12) == 0);
}

/* Sizes: truncate, allocate, punch, and the stat family. */
static void test_sizes_and_stat(void) {
    const char *p = path_of("size.bin");
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
    unsigned char buf[8192], got[8192];
    fill(buf, 3, 0, sizeof buf);
    CHECK(write(fd, buf, sizeof buf) == sizeof buf);
    struct stat st;
    struct stat64 st64;
    struct statx stx;
    CHECK(fstat(fd, &st) == 0 && st.st_size == 8192);
    CHECK(fstat64(fd, &st64) == 0 && st64.st_size == 8192);
    CHECK(stat(p, &st) == 0 && st.st_size == 8192);
    CHECK(stat64(p, &st64) == 0 && st64.st_size == 8192);
    CHECK(lstat(p, &st) == 0 && st.st_size == 8192);
    CHECK(lstat64(p, &st64) == 0 && st64.st_size == 8192);
    CHECK(fstatat(AT_FDCWD, p, &st, 0) == 0 && st.st_size == 8192);
    CHECK(fstatat64(AT_FDCWD, p, &st64, 0) == 0 && st64.st_size == 8192);
    CHECK(fstatat(fd, "", &st, AT_EMPTY_PATH) == 0 && st.st_size == 8192);
    CHECK(statx(AT_FDCWD, p, 0, STATX_SIZE, &stx) == 0 && stx.stx_size == 8192);

    CHECK(ftruncate(fd, 5000) == 0 && fsize(fd) == 5000);
    CHECK(pread(fd, got, sizeof got, 0) == 5000 && matches(got, 3, 0, 5000));
    CHECK(ftruncate64(fd, 10000) == 0 && fsize(fd) == 10000);
    CHECK(pread(fd, got, 100, 5000) == 100);
    for (int i = 0; i < 100; i++)
        CHECK(got[i] == 0);
    CHECK(ftruncate(fd, -1) == -1 && errno == EINVAL);
    CHECK(fallocate(fd, 0, 0, 20000) == 0 && fsize(fd) == 20000);
    CHECK(fallocate64(fd, FALLOC_FL_KEEP_SIZE, 0, 40000) == 0 && fsize(fd) == 20000);
    CHECK(posix_fallocate(fd, 0, 30000) == 0 && fsize(fd) == 30000);
    CHECK(posix_fallocate64(fd, 30000, 2000) == 0 && fsize(fd) == 32000);
    CHECK(posix_fallocate(fd, -1, 10) == EINVAL);
    CHECK(pwrite(fd, buf, 8192, 0) == 8192);
    CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4096, 4096) == 0);
    CHECK(pread(fd, got, 8192, 0) == 8192 && matches(got, 3, 0, 4096));
    for (int i = 4096; i < 8192; i++)
        CHECK(got[i] == 0);
    /* Zeroing, then moving data: collapse a block out, insert one back. */
    CHECK(fallocate(fd, FALLOC_FL_ZERO_RANGE, 100, 200) == 0 && fsize(fd) == 32000);
    CHECK(pread(fd, got, 4096, 0) == 4096 && matches(got, 3, 0, 100) &&
          matches(got + 300, 3, 300, 3796));
    for (int i = 100; i < 300; i++)
        CHECK(got[i] == 0);
    CHECK(fallocate(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 32000, 5000) == 0 &&
          fsize(fd) == 32000);
    CHECK(fallocate(fd, FALLOC_FL_ZERO_RANGE, 32000, 1000) == 0 && fsize(fd) == 33000);
    CHECK(pwrite(fd, buf, 8192, 8192) == 8192);
    CHECK(fallocate(fd, FALLOC_FL_COLLAPSE_RANGE, 4096, 4096) == 0 && fsize(fd) == 33000 - 4096);
    CHECK(pread(fd, got, 8192, 4096) == 8192 && matches(got, 3, 0, 8192));
    CHECK(fallocate(fd, FALLOC_FL_INSERT_RANGE, 4096, 8192) == 0 && fsize(fd) == 33000 + 4096);
    CHECK(pread(fd, got, 8192, 4096) == 8192);
    for (int i = 0; i < 8192; i++)
        CHECK(got[i] == 0);
    CHECK(pread(fd, got, 8192, 12288) == 8192 && matches(got, 3, 0, 8192));
    CHECK(fallocate(fd, FALLOC_FL_COLLAPSE_RANGE, 100, 4096) == -1 && errno == EINVAL);
    CHECK(fallocate(fd, FALLOC_FL_COLLAPSE_RANGE, 36864, 4096) == -1 && errno == EINVAL);
    CHECK(fallocate(fd, FALLOC_FL_INSERT_RANGE, 40960, 4096) == -1 && errno == EINVAL);
    fsync(fd);
    CHECK(kernel_size(p) == 33000 + 4096);
    CHECK(kernel_pread(p, got, 8192, 12288) == 8192 && matches(got, 3, 0, 8192));
    CHECK(pwrite(fd, buf, 4096, 0) == 4096); /* the first block as before, for the checks below */
    CHECK(truncate(p, 6000) == 0 && fsize(fd) == 6000);
    CHECK(truncate64(p, 7000) == 0 && fsize(fd) == 7000);

    /* Advice and readahead. */
    CHECK(posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL) == 0);
    CHECK(posix_fadvise64(fd, 0, 0, POSIX_FADV_WILLNEED) == 0);
    CHECK(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
    CHECK(posix_fadvise(fd, 0, 0, 99) == EINVAL);
    CHECK(readahead(fd, 0, 4096) == 0);
    CHECK(pread(fd, got, 4096, 0) == 4096 && matches(got, 3, 0, 4096));
    sync();
    CHECK(syncfs(fd) == 0);
    CHECK(kernel_size(p) == 7000);
    close(fd);
}

/* copy_file_range and sendfile copy through the cache; a reflink onto a
 * served file is refused (cp then copies). */
static void test_copies(void) {
    enum { N = 300000 };
    static unsigned char buf[N], got[N];
    fill(buf, 4, 0, N);
    int src = open(path_of("copy-src.bin"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(write(src, buf, N) == N); /* dirty in the cache */
    int dst = open(path_of("copy-dst.bin"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    loff_t in = 0, out = 0;
    CHECK(copy_file_range(src, &in, dst, &out, N, 0) == N && in == N && out == N);
    CHECK(pread(dst, got, N, 0) == N && memcmp(got, buf, N) == 0);
    CHECK(lseek(src, 1000, SEEK_SET) == 1000);
    off_t off = 0;
    int out2 = open(path_of("sendfile.bin"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(sendfile(out2, src, &off, 5000) == 5000 && off == 5000);
    CHECK(sendfile(out2, src, NULL, 5000) == 5000 && lseek(src, 0, SEEK_CUR) == 6000);
    CHECK(fsize(out2) == 10000);
    CHECK(ioctl(dst, 0x40049409 /* FICLONE */, src) == -1 && errno == EOPNOTSUPP);
    close(out2);
    CHECK(kernel_pread(path_of("sendfile.bin"), got, 10000, 0) == 10000 &&
          matches(got, 4, 0, 5000) && matches(got + 5000, 4, 1000, 5000));
    close(src);
    close(dst);
    CHECK(kernel_pread(path_of("copy-dst.bin"), got, N, 0) == N && memcmp(got, buf, N) == 0);
}

/* An inode's flags (`chattr +i`): the file is written back and handed
 * to the kernel before they change, so that what was written before
 * reaches the file and a write after meets the flag, as on ext4. Needs
 * CAP_LINUX_IMMUTABLE and a filesystem with the flags. */
static void test_inode_flags(void) {
    int fd = open(path_of("flags.bin"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(pwrite(fd, "before", 6, 0) == 6 && served(fd));
    long flags = 0;
    if (ioctl(fd, 0x80086601 /* FS_IOC_GETFLAGS */, &flags) != 0) {
        printf("inode flags: skipped, FS_IOC_GETFLAGS: %s\n", strerror(errno));
        close(fd);
        return;
    }
    long immutable = flags | 0x10 /* FS_IMMUTABLE_FL */;
    if (ioctl(fd, 0x40086602 /* FS_IOC_SETFLAGS */, &immutable) != 0) {
        printf("inode flags: skipped, FS_IOC_SETFLAGS: %s\n", strerror(errno));
        close(fd);
        return;
    }
    CHECK(!served(fd));
    errno = 0;
    CHECK(pwrite(fd, "x", 1, 0) == -1 && errno == EPERM);
    CHECK(ioctl(fd, 0x40086602 /* FS_IOC_SETFLAGS */, &flags) == 0);
    char got[6];
    CHECK(kernel_pread(path_of("flags.bin"), got, 6, 0) == 6 && memcmp(got, "before", 6) == 0);
    CHECK(close(fd) == 0);
}

/* stdio: a stream's file goes to the kernel, written back first. */
static void test_stdio(void) {
    const char *p = path_of("stdio.bin");
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(served(fd));
    CHECK(write(fd, "through the cache\n", 18) == 18);
    FILE *f = fopen(p, "r");
    CHECK(f != NULL && !served(fd));
    char line[64] = {0};
    CHECK(fgets(line, sizeof line, f) && strcmp(line, "through the cache\n") == 0);
    fclose(f);
    /* The fd goes on where it was, through the kernel. */
    CHECK(lseek(fd, 0, SEEK_CUR) == 18);
    CHECK(write(fd, "then the kernel\n", 16) == 16);
    close(fd);
    /* Later opens of the file pass through too. */
    fd = open(p, O_RDONLY);
    CHECK(fd >= 0 && !served(fd));
    close(fd);

    /* fdopen of a served fd: its position carries over. */
    const char *q = path_of("fdopen.bin");
    fd = open(q, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(served(fd) && write(fd, "head ", 5) == 5);
    f = fdopen(fd, "r+");
    CHECK(f != NULL && !served(fd));
    CHECK(fputs("tail", f) >= 0);
    CHECK(fclose(f) == 0);
    CHECK(kernel_pread(q, line, sizeof line, 0) == 9 && memcmp(line, "head tail", 9) == 0);

    /* A stream opened and closed while no fd of its file was served: the
     * cache serves the file again afterwards. */
    const char *t = path_of("fopen-closed.bin");
    f = fopen(t, "w");
    CHECK(f != NULL && fputs("by stdio", f) >= 0 && fclose(f) == 0);
    fd = open(t, O_RDWR);
    CHECK(fd >= 0 && served(fd));
    CHECK(read(fd, line, 8) == 8 && memcmp(line, "by stdio", 8) == 0);
    close(fd);

    /* A stream open when the file is opened: that open is the kernel's,
     * and so is the file from then on. */
    const char *r = path_of("fopen-first.bin");
    f = fopen(r, "w");
    CHECK(f != NULL && fputs("stream", f) >= 0 && fflush(f) == 0);
    fd = open(r, O_RDONLY);
    CHECK(fd >= 0 && !served(fd));
    CHECK(read(fd, line, 6) == 6 && memcmp(line, "stream", 6) == 0);
    close(fd);
    fclose(f);
    fd = open(r, O_RDONLY);
    CHECK(fd >= 0 && !served(fd));
    close(fd);

    /* freopen of a stream onto another file releases the first: with no
     * stream left on it, the cache serves it again. */
    const char *fa = path_of("freopen-a.bin"), *fb = path_of("freopen-b.bin");
    f = fopen(fa, "w");
    CHECK(f != NULL && fputs("a", f) >= 0);
    f = freopen(fb, "w", f);
    CHECK(f != NULL && fputs("b", f) >= 0 && fclose(f) == 0);
    fd = open(fa, O_RDONLY);
    CHECK(fd >= 0 && served(fd));
    close(fd);
    fd = open(fb, O_RDONLY);
    CHECK(fd >= 0 && served(fd) && read(fd, line, 2) == 1 && line[0] == 'b');
    close(fd);

    /* fopen "w" of a file with dirty data in the cache: the stream's
     * truncation holds (the data is written back before the open, not
     * after it). */
    const char *w = path_of("fopen-truncates.bin");
    unsigned char big[8192];
    fill(big, 8, 0, sizeof big);
    fd = open(w, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(served(fd) && write(fd, big, sizeof big) == sizeof big);
    f = fopen(w, "w");
    CHECK(f != NULL && !served(fd) && fputs("x", f) >= 0 && fclose(f) == 0);
    CHECK(kernel_size(w) == 1 && fsize(fd) == 1);
    close(fd);
}

/* A stream closed while another thread opens one on the fd number it
 * frees: the library's fclose once released its file's count after the
 * real fclose, by fd number, so it released the new stream's file (served
 * again while its stream was open) and never the old one's (never served
 * again). The shim loaded after the library (tests/c/after_fclose.c) runs
 * the other thread's fopen just after the real fclose, every time. */
static const char *race_b;
static FILE *race_stream;

static void fopen_b(void) { race_stream = fopen(race_b, "w"); }

static void test_fclose_racing_fopen(void) {
    void (**hook)(void) = dlsym(RTLD_DEFAULT, "after_fclose_hook");
    CHECK(hook != NULL);
    if (!hook)
        return;
    const char *a = path_of("race-a.bin");
    race_b = path_of("race-b.bin");
    FILE *fa = fopen(a, "w");
    CHECK(fa != NULL && fputs("a", fa) >= 0);
    int n = fileno(fa);
    *hook = fopen_b;
    CHECK(fclose(fa) == 0);
    /* The new stream took the number the old one freed. */
    CHECK(race_stream != NULL && fileno(race_stream) == n);
    /* Its file is the kernel's while it is open (this open makes that for
     * good); the old stream's file is served again. */
    int fd = open(race_b, O_RDONLY);
    CHECK(fd >= 0 && !served(fd));
    close(fd);
    fd = open(a, O_RDONLY);
    CHECK(fd >= 0 && served(fd));
    close(fd);
    CHECK(race_stream && fclose(race_stream) == 0);
}

/* mmap: the file goes to the kernel, written back first. */
static void test_mmap(void) {
    const char *p = path_of("mmap.bin");
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
    unsigned char buf[8192];
    fill(buf, 5, 0, sizeof buf);
    CHECK(write(fd, buf, sizeof buf) == sizeof buf);
    int other = open(p, O_RDONLY);
    CHECK(served(fd) && served(other));
    unsigned char *m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(m != MAP_FAILED);
    CHECK(!served(fd) && !served(other));
    CHECK(matches(m, 5, 0, 8192));
    m[100] = 'M';
    unsigned char c = 0;
    CHECK(pread(other, &c, 1, 100) == 1 && c == 'M');
    CHECK(lseek(fd, 0, SEEK_CUR) == 8192); /* the position carried over */
    munmap(m, 8192);
    close(fd);
    close(other);
}

/* fork: the child sees the parent's data written back, through plain
 * fds, at the parent's position. */
static void test_fork(void) {
    const char *p = path_of("fork.bin");
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(write(fd, "parent data", 11) == 11);
    CHECK(lseek(fd, 7, SEEK_SET) == 7);
    pid_t pid = fork();
    if (pid == 0) {
        char b[8] = {0};
        int bad = served(fd);
        bad |= read(fd, b, 4) != 4 || memcmp(b, "data", 4) != 0;
        int fd2 = open(p, O_RDONLY);
        bad |= fd2 < 0 || served(fd2);
        bad |= pread(fd2, b, 6, 0) != 6 || memcmp(b, "parent", 6) != 0;
        _exit(bad);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* The child could write through the fd it inherited: the file is the
     * kernel's in the parent from the fork on, and the position is the
     * one the child moved, shared as an open file description's. */
    CHECK(!served(fd) && lseek(fd, 0, SEEK_CUR) == 11);
    close(fd);
}

/* A child of fork that writes to an inherited served fd and closes it (by
 * close, dup2 over it, or close_range) runs no close of the parent's
 * cache: the file holds the parent's writes and the child's, as with the
 * kernel alone. A read-only fd stays served in the parent. */
static void test_fork_child_closes(void) {
    static const char *const how[] = {"close", "dup2", "close_range"};
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "fork-log.%s.bin", how[i]);
        const char *p = path_of(name);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
        CHECK(served(fd) && write(fd, "p\n", 2) == 2);
        int ro = open(p, O_RDONLY);
        CHECK(served(ro));
        pid_t pid = fork();
        if (pid == 0) {
            int bad = write(fd, "c\n", 2) != 2;
            if (i == 0)
                bad |= close(fd) != 0;
            else if (i == 1)
                bad |= dup2(2, fd) != fd;
            else
                bad |= close_range(3, ~0U, 0) != 0;
            _exit(bad);
        }
        int status;
        CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
        CHECK(write(fd, "P\n", 2) == 2);
        CHECK(close(fd) == 0);
        char got[16] = {0};
        CHECK(kernel_size(p) == 6 && kernel_pread(p, got, sizeof got, 0) == 6 &&
              memcmp(got, "p\nc\nP\n", 6) == 0);
        CHECK(fsize(ro) == 6);
        close(ro);
    }
}

/* _Fork (no fork handlers): the child passes through all the same. */
static void test_underscore_fork(void) {
    const char *p = path_of("underscore-fork.bin");
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(served(fd) && write(fd, "kept", 4) == 4);
    pid_t pid = _Fork();
    if (pid == 0) {
        int bad = served(fd);
        bad |= close(fd) != 0;
        _exit(bad);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char got[8] = {0};
    CHECK(served(fd) && pread(fd, got, 8, 0) == 4 && memcmp(got, "kept", 4) == 0);
    close(fd);
    CHECK(kernel_size(p) == 4);
}

/* vfork: a child that closes every fd leaves the parent's table as it
 * was (the child is a fork's, with its own table). */
static void test_vfork_close_range(void) {
    const char *p = path_of("vfork.bin");
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(served(fd) && write(fd, "vforked", 7) == 7);
    close(fd);
    int ro = open(p, O_RDONLY);
    CHECK(served(ro));
    pid_t pid = vfork();
    if (pid == 0) {
        close_range(3, ~0U, 0);
        _exit(0);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
    char got[8] = {0};
    CHECK(served(ro) && pread(ro, got, 8, 0) == 7 && memcmp(got, "vforked", 7) == 0);
    close(ro);
    CHECK(kernel_size(p) == 7);
}

/* exec: every file goes to the kernel first; the new program finds the
 * data and the position on the inherited fd, whichever exec function
 * started it. Each runs as a fresh program ("exec-writer": a fork child
 * would pass through already), which writes through the cache and execs
 * "exec-reader" with the function named. glibc's execl, execle, execlp,
 * execv and execvp reach the kernel through its internal __execve and
 * __execvpe, which no interposer sees: each needs its own. */
extern char **environ;

static const char *const EXECS[] = {"execve", "execv",  "execvp",  "execvpe", "execl",
                                    "execle", "execlp", "fexecve", "execveat"};

static void test_exec(const char *self) {
    for (size_t i = 0; i < sizeof EXECS / sizeof EXECS[0]; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            execl(self, self, "exec-writer", dir, EXECS[i], (char *)NULL);
            _exit(127);
        }
        int status;
        CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
        if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
            fprintf(stderr, "%s: exec-writer or exec-reader failed with %d\n", EXECS[i],
                    WEXITSTATUS(status));
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
}

/* exec.<how>.bin: the file the writer writes and the reader checks. */
static const char *exec_file(const char *how) {
    static char name[64];
    snprintf(name, sizeof name, "exec.%s.bin", how);
    return path_of(name);
}

static int exec_writer(const char *self, const char *how) {
    int fd = open(exec_file(how), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || !served(fd))
        return 1;
    if (write(fd, "written before exec", 19) != 19 || lseek(fd, 8, SEEK_SET) != 8)
        return 2;
    char fdarg[16];
    snprintf(fdarg, sizeof fdarg, "%d", fd);
    char *d = (char *)dir, *h = (char *)how;
    char *argv[] = {(char *)self, "exec-reader", d, h, fdarg, NULL};
    if (strcmp(how, "execve") == 0)
        execve(self, argv, environ);
    else if (strcmp(how, "execv") == 0)
        execv(self, argv);
    else if (strcmp(how, "execvp") == 0)
        execvp(self, argv);
    else if (strcmp(how, "execvpe") == 0)
        execvpe(self, argv, environ);
    else if (strcmp(how, "execl") == 0)
        execl(self, self, "exec-reader", d, h, fdarg, (char *)NULL);
    else if (strcmp(how, "execle") == 0)
        execle(self, self, "exec-reader", d, h, fdarg, (char *)NULL, environ);
    else if (strcmp(how, "execlp") == 0)
        execlp(self, self, "exec-reader", d, h, fdarg, (char *)NULL);
    else if (strcmp(how, "fexecve") == 0) {
        int exe = open(self, O_RDONLY | O_CLOEXEC);
        fexecve(exe, argv, environ);
    } else if (strcmp(how, "execveat") == 0)
        execveat(AT_FDCWD, self, argv, environ, 0);
    return 3;
}

static int exec_reader(const char *how, int fd) {
    char b[32] = {0};
    if (served(fd))
        return 4;
    if (read(fd, b, 6) != 6 || memcmp(b, "before", 6) != 0) /* at 8 */
        return 5;
    if (kernel_size(exec_file(how)) != 19)
        return 6;
    return 0;
}

/* posix_spawn and system: the program started sees the data written
 * through the cache; this process keeps serving the file. */

static void test_spawn(void) {
    const char *p = path_of("spawn.bin");
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(served(fd) && write(fd, "spawned\n", 8) == 8);
    char *argv[] = {"grep", "-q", "spawned", (char *)p, NULL};
    pid_t pid;
    int status;
    CHECK(posix_spawnp(&pid, "grep", NULL, NULL, argv, environ) == 0);
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(pwrite(fd, "systemd\n", 8, 8) == 8);
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "grep -q systemd '%s'", p);
    CHECK(system(cmd) == 0);
    CHECK(served(fd));
    close(fd);
}

/* splice: the file goes to the kernel first. */
static void test_splice(void) {
    const char *p = path_of("splice.bin");
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(served(fd) && write(fd, "spliced", 7) == 7);
    int pp[2];
    CHECK(pipe(pp) == 0);
    loff_t off = 0;
    CHECK(splice(fd, &off, pp[1], NULL, 7, 0) == 7 && !served(fd));
    char got[8] = {0};
    CHECK(read(pp[0], got, 7) == 7 && memcmp(got, "spliced", 7) == 0);
    close(pp[0]);
    close(pp[1]);
    close(fd);
}

/* Threads: disjoint writes and reads at once, then checked. */
enum { THREADS = 4, PER = 64, BS = 4096 };
static int tfd;

static void *worker(void *arg) {
    long t = (long)arg;
    unsigned char b[BS], g[BS];
    for (int i = 0; i < PER; i++) {
        long off = ((long)i * THREADS + t) * BS;
        fill(b, 6, off, BS);
        if (pwrite(tfd, b, BS, off) != BS)
            return (void *)1;
        if (pread(tfd, g, BS, off) != BS || memcmp(g, b, BS) != 0)
            return (void *)2;
    }
    return NULL;
}

/* Threads writing records through one shared position: no two land on
 * each other, none is torn. */
static int shared_fd;

static void *appender(void *arg) {
    unsigned char rec[BS];
    memset(rec, (int)(long)arg + 1, BS);
    for (int i = 0; i < PER; i++)
        if (write(shared_fd, rec, BS) != BS)
            return (void *)1;
    return NULL;
}

static void test_threads_share_a_position(void) {
    shared_fd = open(path_of("shared-pos.bin"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++)
        CHECK(pthread_create(&th[t], NULL, appender, (void *)t) == 0);
    for (int t = 0; t < THREADS; t++) {
        void *r;
        CHECK(pthread_join(th[t], &r) == 0 && r == NULL);
    }
    CHECK(lseek(shared_fd, 0, SEEK_CUR) == (long)THREADS * PER * BS);
    int count[THREADS + 1] = {0};
    unsigned char rec[BS];
    for (int i = 0; i < THREADS * PER; i++) {
        CHECK(pread(shared_fd, rec, BS, (long)i * BS) == BS);
        int ok = rec[0] >= 1 && rec[0] <= THREADS;
        for (int j = 1; j < BS && ok; j++)
            ok = rec[j] == rec[0];
        CHECK(ok);
        if (ok)
            count[rec[0]]++;
    }
    for (int t = 1; t <= THREADS; t++)
        CHECK(count[t] == PER);
    close(shared_fd);
}

/* A close racing with writes on the same fd from another thread: each
 * write either lands through the cache at the shared position or fails
 * with EBADF (none goes to the kernel's fd behind the cache's back). */
static int race_fd;
static volatile int race_started;
static long race_ok;

static void *race_writer(void *arg) {
    (void)arg;
    for (;;) {
        ssize_t r = write(race_fd, "Z", 1);
        if (r != 1)
            return r == -1 && errno == EBADF ? NULL : (void *)1;
        race_ok++;
        __atomic_store_n(&race_started, 1, __ATOMIC_RELEASE);
    }
}

static void test_close_races(void) {
    enum { N = 12 << 20 };
    static unsigned char buf[N];
    for (int round = 0; round < 5; round++) {
        const char *p = path_of("close-race.bin");
        fill(buf, 11, 0, N);
        race_fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
        CHECK(served(race_fd) && write(race_fd, buf, N) == N);
        race_ok = 0;
        race_started = 0;
        pthread_t th;
        CHECK(pthread_create(&th, NULL, race_writer, NULL) == 0);
        while (!__atomic_load_n(&race_started, __ATOMIC_ACQUIRE))
            ;
        CHECK(close(race_fd) == 0);
        void *r;
        CHECK(pthread_join(th, &r) == 0 && r == NULL);
        CHECK(kernel_size(p) == N + race_ok);
        CHECK(kernel_pread(p, buf, 4096, 0) == 4096 && matches(buf, 11, 0, 4096));
    }

}

static void test_threads(void) {
    tfd = open(path_of("threads.bin"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++)
        CHECK(pthread_create(&th[t], NULL, worker, (void *)t) == 0);
    for (int t = 0; t < THREADS; t++) {
        void *r;
        CHECK(pthread_join(th[t], &r) == 0 && r == NULL);
    }
    CHECK(fsize(tfd) == (long)THREADS * PER * BS);
    close(tfd);
}

/* A signal handler's calls on fds and files the cache does not serve
 * (open and close of a file outside the directories, a write to a
 * self-pipe) while the interrupted code opens and closes served files
 * (holding the table's locks, allocating): as async-signal-safe as the C
 * library's, so no deadlock. A watchdog thread ends the process if the
 * loop does not finish. */
static const char *signal_self;
static int signal_pipe[2];
static volatile long signals;

static void on_alarm(int sig) {
    (void)sig;
    int saved = errno;
    int fd = open(signal_self, O_RDONLY);
    if (fd >= 0)
        close(fd);
    if (write(signal_pipe[1], "s", 1) == 1)
        signals++;
    errno = saved;
}

static void *watchdog(void *arg) {
    (void)arg;
    sleep(60);
    static const char msg[] = "signals: the loop did not finish in 60 s (a deadlock)\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(3);
}

static void test_signal_safety(const char *self) {
    signal_self = self;
    CHECK(pipe2(signal_pipe, O_NONBLOCK) == 0);
    /* The pipe's write end in the served fds' shards (16 of them). */
    int hi = fcntl(signal_pipe[1], F_DUPFD, 64);
    CHECK(hi >= 64);
    close(signal_pipe[1]);
    signal_pipe[1] = hi;
    CHECK(write(signal_pipe[1], "s", 1) == 1);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pthread_t dog;
    CHECK(pthread_create(&dog, NULL, watchdog, NULL) == 0);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
    struct itimerval every = {{0, 200}, {0, 200}};
    CHECK(setitimer(ITIMER_REAL, &every, NULL) == 0);
    const char *p = path_of("signals.bin");
    char drain[4096];
    for (int i = 0; i < 3000; i++) {
        int fds[16];
        for (int j = 0; j < 16; j++)
            fds[j] = open(p, O_RDWR | O_CREAT, 0644);
        CHECK(pwrite(fds[0], "x", 1, i) == 1);
        for (int j = 0; j < 16; j++)
            close(fds[j]);
        while (read(signal_pipe[0], drain, sizeof drain) > 0)
            ;
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    signal(SIGALRM, SIG_DFL);
    pthread_cancel(dog);
    pthread_join(dog, NULL);
    CHECK(signals > 0);
    CHECK(kernel_size(p) == 3000);
    close(signal_pipe[0]);
    close(signal_pipe[1]);
}

/* A signal sent to the process while its own (only) thread blocks it
 * waits for that thread: the cache's threads take none of the program's
 * signals. Run on one of them, the handler's write on a served fd passed
 * through to the kernel behind the cache's back (the cache's threads pass
 * every call through), and the cache's later writeback of the same bytes
 * overwrote it. */
static int usr1_fd;
static volatile pid_t usr1_tid;

static void on_usr1(int sig) {
    (void)sig;
    int saved = errno;
    if (pwrite(usr1_fd, "S", 1, 0) == 1)
        __atomic_store_n(&usr1_tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
    errno = saved;
}

static void test_signals_skip_cache_threads(void) {
    const char *p = path_of("usr1.bin");
    usr1_fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(served(usr1_fd) && write(usr1_fd, "abc", 3) == 3);
    struct sigaction sa = {0};
    sa.sa_handler = on_usr1;
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    sigset_t usr1, old;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    CHECK(pthread_sigmask(SIG_BLOCK, &usr1, &old) == 0);
    CHECK(kill(getpid(), SIGUSR1) == 0);
    /* Pending here unless another thread took it: delivered now. */
    CHECK(pthread_sigmask(SIG_SETMASK, &old, NULL) == 0);
    while (!__atomic_load_n(&usr1_tid, __ATOMIC_ACQUIRE))
        ;
    CHECK(usr1_tid == (pid_t)syscall(SYS_gettid));
    signal(SIGUSR1, SIG_DFL);
    char got[3] = {0};
    CHECK(pread(usr1_fd, got, 3, 0) == 3 && memcmp(got, "Sbc", 3) == 0);
    CHECK(close(usr1_fd) == 0);
    CHECK(kernel_pread(p, got, 3, 0) == 3 && memcmp(got, "Sbc", 3) == 0);
}

/* Left open and dirty: written back at exit (the harness checks). */
static void test_exit_writes_back(void) {
    enum { N = 100000 };
    static unsigned char buf[N];
    fill(buf, 7, 0, N);
    int fd = open(path_of("exit.bin"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(served(fd) && write(fd, buf, N) == N);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    if (strcmp(argv[1], "exec-writer") == 0 && argc == 4 && (dir = argv[2]))
        return exec_writer(argv[0], argv[3]);
    if (strcmp(argv[1], "exec-reader") == 0 && argc == 5 && (dir = argv[2]))
        return exec_reader(argv[3], atoi(argv[4]));
    if (!dlsym(RTLD_DEFAULT, "foliocache_preload_served")) {
        fprintf(stderr, "not running under libfoliocache_preload.so\n");
        return 2;
    }
    test_open_read_write();
    test_fortified_and_old_stat();
    test_refusals();
    test_dsync();
    test_other_process();
    test_close_writes_back();
    test_dup();
    test_append();
    test_sizes_and_stat();
    test_copies();
    test_inode_flags();
    test_stdio();
    test_fclose_racing_fopen();
    test_mmap();
    test_fork();
    test_fork_child_closes();
    test_vfork_close_range();
    test_underscore_fork();
    test_exec(argv[0]);
    test_spawn();
    test_splice();
    test_threads();
    test_close_races();
    test_signal_safety(argv[0]);
    test_signals_skip_cache_threads();
    test_threads_share_a_position();
    test_exit_writes_back();
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("all checks passed\n");
    return 0;
}
