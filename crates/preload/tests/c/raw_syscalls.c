/* System calls made by number (`syscall(2)`), as stock fsx makes
 * `copy_file_range` and the C library makes some on a program's behalf,
 * on files the library serves: run under libfoliocache_preload.so:
 *
 *   raw_syscalls DIR
 *
 * 1. DIR/src is written with `write` (cached, not written back) and
 *    copied to DIR/dst by syscall(SYS_copy_file_range): the copy has the
 *    cache's bytes (the kernel's own copy would find an empty file).
 * 2. syscall(SYS_pwrite64) writes into DIR/dst; syscall(SYS_pread64),
 *    `pread` and syscall(SYS_fstat) see it and its size.
 * 3. syscall(SYS_ftruncate), syscall(SYS_fsync), syscall(SYS_lseek) and
 *    syscall(SYS_read) on a served fd; syscall(SYS_close) closes it.
 * 4. Errors are -1 and errno (EBADF on a closed fd), and a number the
 *    library does not serve (getpid) is the kernel's.
 *
 * Exit status 0 when every check held; else the number of the check. */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "served.h"

int main(int argc, char **argv) {
    preload_test_start(argc);
    char src_path[4096], dst_path[4096];
    snprintf(src_path, sizeof src_path, "%s/src", argv[1]);
    snprintf(dst_path, sizeof dst_path, "%s/dst", argv[1]);
    static char data[10000], got[20000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (char)('a' + i % 23);

    int src = open(src_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    int dst = open(dst_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (src < 0 || dst < 0 || !served(src) || !served(dst))
        return 10;
    if (write(src, data, sizeof data) != (ssize_t)sizeof data)
        return 11;
    long long in = 0, out = 0;
    long n = syscall(SYS_copy_file_range, src, &in, dst, &out, sizeof data, 0);
    if (n != (long)sizeof data || in != (long long)sizeof data || out != n)
        return 12;
    if (pread(dst, got, sizeof got, 0) != (ssize_t)sizeof data || memcmp(got, data, sizeof data))
        return 13;

    if (syscall(SYS_pwrite64, dst, "RAW", 3, 9000L) != 3)
        return 20;
    memset(got, 0, sizeof got);
    if (syscall(SYS_pread64, dst, got, 5, 8999L) != 5 || memcmp(got + 1, "RAW", 3) != 0)
        return 21;
    if (got[0] != data[8999] || got[4] != data[9003])
        return 22;
    if (pread(dst, got, 3, 9000) != 3 || memcmp(got, "RAW", 3) != 0)
        return 23;
    struct stat st;
    if (syscall(SYS_fstat, dst, &st) != 0 || st.st_size != (off_t)sizeof data)
        return 24;

    if (syscall(SYS_ftruncate, dst, 9002L) != 0 || syscall(SYS_fsync, dst) != 0)
        return 30;
    if (syscall(SYS_lseek, dst, 8998L, SEEK_SET) != 8998)
        return 31;
    memset(got, 0, sizeof got);
    if (syscall(SYS_read, dst, got, 100) != 4 || memcmp(got + 2, "RA", 2) != 0)
        return 32;
    if (syscall(SYS_close, dst) != 0 || served(dst))
        return 33;

    errno = 0;
    if (syscall(SYS_pread64, dst, got, 1, 0L) != -1 || errno != EBADF)
        return 40;
    if (syscall(SYS_getpid) != getpid())
        return 41;
    if (close(src) != 0)
        return 42;
    return 0;
}
