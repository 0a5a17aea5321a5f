/* A random exerciser: a seeded sequence of file operations on a few files
 * (opens with each access mode, O_APPEND and O_TRUNC, duplicates, closes,
 * positioned and positional reads and writes, vectored ones, seeks,
 * truncation, hole punching, zeroing, collapsing and inserting ranges,
 * syncs, stats), each checked against a model
 * of the files' bytes, sizes and descriptions' positions. At the end every
 * fd is closed and each file is compared with the model through raw
 * system calls (the kernel's view: the data must have been written back).
 *
 * Usage: exerciser DIR SEED OPS. Exits 0 when every check holds. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "kernel.h"

enum { FILES = 3, MAXSZ = 1 << 20, FDS = 8, DESCS = FDS };

static unsigned char model[FILES][MAXSZ];
static long size[FILES];
static int exists[FILES];
static char path[FILES][4096];

/* An open file description: what fds duplicated from one share. */
struct desc {
    int file, readable, writable, append, refs;
    long pos;
};
static struct desc descs[DESCS];
static int fds[FDS], fd_desc[FDS]; /* fd number (-1: none), its desc */

static unsigned long long rng;
static unsigned long next(void) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned long)(rng >> 33);
}
static long below(long n) { return n > 0 ? (long)(next() % (unsigned long)n) : 0; }

static long op_no;
#define FAIL(...)                                                              \
    do {                                                                       \
        fprintf(stderr, "op %ld: ", op_no);                                    \
        fprintf(stderr, __VA_ARGS__);                                          \
        fprintf(stderr, " (errno %d)\n", errno);                               \
        exit(1);                                                               \
    } while (0)

static unsigned char buf[MAXSZ], got[MAXSZ];

static void fill(long n) {
    unsigned char b = (unsigned char)next();
    for (long i = 0; i < n; i++)
        buf[i] = (unsigned char)(b + i * 7 + (i >> 9));
}

/* The model's write of buf[0..n) at off (the end for append). */
static long model_write(int f, long off, long n) {
    if (off + n > MAXSZ)
        n = MAXSZ - off;
    if (off > size[f])
        memset(model[f] + size[f], 0, off - size[f]);
    memcpy(model[f] + off, buf, n);
    if (off + n > size[f])
        size[f] = off + n;
    return n;
}

static void model_truncate(int f, long n) {
    if (n > size[f])
        memset(model[f] + size[f], 0, n - size[f]);
    size[f] = n;
}

static void check_read(int f, long off, long want, long r) {
    long expect = off >= size[f] ? 0 : (size[f] - off < want ? size[f] - off : want);
    if (r != expect)
        FAIL("read of %ld at %ld returned %ld, want %ld", want, off, r, expect);
    if (memcmp(got, model[f] + off, expect) != 0)
        FAIL("read of %ld at %ld: wrong bytes", want, off);
}

static int pick_fd(void) {
    int start = (int)below(FDS);
    for (int i = 0; i < FDS; i++)
        if (fds[(start + i) % FDS] >= 0)
            return (start + i) % FDS;
    return -1;
}

static int free_slot(void) {
    for (int i = 0; i < FDS; i++)
        if (fds[i] < 0)
            return i;
    return -1;
}

static int new_desc(void) {
    for (int i = 0; i < DESCS; i++)
        if (descs[i].refs == 0)
            return i;
    return -1;
}

static void op_open(void) {
    int slot = free_slot(), d = new_desc();
    if (slot < 0 || d < 0)
        return;
    int f = (int)below(FILES);
    static const int modes[] = {O_RDWR, O_RDWR | O_APPEND, O_RDONLY, O_WRONLY,
                                O_RDWR | O_TRUNC, O_WRONLY | O_APPEND};
    int flags = modes[below(6)];
    if (!exists[f])
        flags = (flags & ~O_ACCMODE) | O_RDWR;
    int fd = open(path[f], flags | O_CREAT, 0644);
    if (fd < 0)
        FAIL("open %s", path[f]);
    if (!exists[f]) {
        exists[f] = 1;
        size[f] = 0;
    }
    if (flags & O_TRUNC)
        model_truncate(f, 0);
    int acc = flags & O_ACCMODE;
    descs[d] = (struct desc){f, acc != O_WRONLY, acc != O_RDONLY, !!(flags & O_APPEND), 1, 0};
    fds[slot] = fd;
    fd_desc[slot] = d;
}

static void op_close(int s) {
    if (close(fds[s]) != 0)
        FAIL("close");
    descs[fd_desc[s]].refs--;
    fds[s] = -1;
}

static void op_dup(int s) {
    int slot = free_slot();
    if (slot < 0)
        return;
    int fd = below(2) ? dup(fds[s]) : fcntl(fds[s], F_DUPFD_CLOEXEC, 20);
    if (fd < 0)
        FAIL("dup");
    fds[slot] = fd;
    fd_desc[slot] = fd_desc[s];
    descs[fd_desc[s]].refs++;
}

static void op_write(int s, int positioned, int vectored) {
    struct desc *d = &descs[fd_desc[s]];
    int f = d->file;
    long n = 1 + below(below(4) ? 9000 : 200000);
    long off = positioned ? below(size[f] + 10000) : d->pos;
    if ((d->append ? size[f] : off) + n > MAXSZ)
        return;
    fill(n);
    long r;
    if (vectored) {
        long a = below(n);
        struct iovec v[2] = {{buf, (size_t)a}, {buf + a, (size_t)(n - a)}};
        r = positioned ? pwritev(fds[s], v, 2, off) : writev(fds[s], v, 2);
    } else {
        r = positioned ? pwrite(fds[s], buf, n, off) : write(fds[s], buf, n);
    }
    if (!d->writable) {
        if (r != -1 || errno != EBADF)
            FAIL("write on a read-only fd returned %ld", r);
        return;
    }
    if (r != n)
        FAIL("write of %ld at %ld returned %ld", n, off, r);
    long at = d->append ? size[f] : off;
    model_write(f, at, n);
    if (!positioned)
        d->pos = at + n;
}

static void op_read(int s, int positioned, int vectored) {
    struct desc *d = &descs[fd_desc[s]];
    int f = d->file;
    long n = 1 + below(below(4) ? 9000 : 300000);
    long off = positioned ? below(size[f] + 5000) : d->pos;
    if (n > MAXSZ)
        n = MAXSZ;
    long r;
    if (vectored) {
        long a = below(n);
        struct iovec v[2] = {{got, (size_t)a}, {got + a, (size_t)(n - a)}};
        r = positioned ? preadv(fds[s], v, 2, off) : readv(fds[s], v, 2);
    } else {
        r = positioned ? pread(fds[s], got, n, off) : read(fds[s], got, n);
    }
    if (!d->readable) {
        if (r != -1 || errno != EBADF)
            FAIL("read on a write-only fd returned %ld", r);
        return;
    }
    check_read(f, off, n, r);
    if (!positioned)
        d->pos = off + r;
}

static void op_seek(int s) {
    struct desc *d = &descs[fd_desc[s]];
    int whence = (int)below(3);
    long base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? d->pos : size[d->file];
    long off = below(20000) - 10000;
    long want = base + off;
    long r = lseek(fds[s], off, whence);
    if (want < 0) {
        if (r != -1 || errno != EINVAL)
            FAIL("lseek to %ld returned %ld", want, r);
        return;
    }
    if (r != want)
        FAIL("lseek returned %ld, want %ld", r, want);
    d->pos = want;
}

static void op_truncate(int s) {
    struct desc *d = &descs[fd_desc[s]];
    long n = below(MAXSZ / 2);
    int r = ftruncate(fds[s], n);
    if (!d->writable) {
        if (r != -1)
            FAIL("ftruncate on a read-only fd succeeded");
        return;
    }
    if (r != 0)
        FAIL("ftruncate to %ld", n);
    model_truncate(d->file, n);
}

static void op_punch(int s) {
    struct desc *d = &descs[fd_desc[s]];
    int f = d->file;
    long off = below(size[f] + 1000), n = 1 + below(100000);
    int r = fallocate(fds[s], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, n);
    if (!d->writable)
        return;
    if (r != 0)
        FAIL("punch %ld at %ld", n, off);
    if (off < size[f])
        memset(model[f] + off, 0, (off + n < size[f] ? off + n : size[f]) - off);
}

/* fallocate(ZERO_RANGE), with or without KEEP_SIZE: zeros, and the size
 * grows to the range's end unless kept. */
static void op_zero(int s) {
    struct desc *d = &descs[fd_desc[s]];
    int f = d->file;
    int keep = (int)below(2);
    long off = below(size[f] + 5000), n = 1 + below(100000);
    if (off + n > MAXSZ)
        return;
    int r = fallocate(fds[s], FALLOC_FL_ZERO_RANGE | (keep ? FALLOC_FL_KEEP_SIZE : 0), off, n);
    if (!d->writable) {
        if (r != -1 || errno != EBADF)
            FAIL("zero range on a read-only fd returned %d", r);
        return;
    }
    if (r != 0)
        FAIL("zero range %ld at %ld (keep size %d): errno %d", n, off, keep, errno);
    if (!keep && off + n > size[f])
        model_truncate(f, off + n);
    if (off < size[f])
        memset(model[f] + off, 0, (off + n < size[f] ? off + n : size[f]) - off);
}

/* fallocate(COLLAPSE_RANGE) or fallocate(INSERT_RANGE): whole blocks,
 * mostly, moved down or up; a range the file does not allow (unaligned, a
 * collapse reaching end of file, an insert at or past it) fails with
 * EINVAL and changes nothing. */
static void op_shift(int s) {
    struct desc *d = &descs[fd_desc[s]];
    int f = d->file;
    int insert = (int)below(2);
    long n = 4096 * (1 + below(below(4) ? 4 : 64));
    long off = 4096 * below(size[f] / 4096 + 2);
    if (below(8) == 0)
        off += 1 + below(4095);
    if (insert && size[f] + n > MAXSZ)
        return;
    int r = fallocate(fds[s], insert ? FALLOC_FL_INSERT_RANGE : FALLOC_FL_COLLAPSE_RANGE, off, n);
    if (!d->writable) {
        if (r != -1 || errno != EBADF)
            FAIL("shift on a read-only fd returned %d", r);
        return;
    }
    int ok = off % 4096 == 0 && (insert ? off < size[f] : off + n < size[f]);
    if (!ok) {
        if (r != -1 || errno != EINVAL)
            FAIL("shift (insert %d) of %ld at %ld in %ld bytes: returned %d, errno %d, want EINVAL",
                 insert, n, off, size[f], r, errno);
        return;
    }
    if (r != 0)
        FAIL("shift (insert %d) of %ld at %ld in %ld bytes: errno %d", insert, n, off, size[f], errno);
    if (insert) {
        memmove(model[f] + off + n, model[f] + off, size[f] - off);
        memset(model[f] + off, 0, n);
        size[f] += n;
    } else {
        memmove(model[f] + off, model[f] + off + n, size[f] - off - n);
        size[f] -= n;
    }
}

static void op_stat(int s) {
    struct stat st;
    int f = descs[fd_desc[s]].file;
    if ((below(2) ? fstat(fds[s], &st) : stat(path[f], &st)) != 0)
        FAIL("stat");
    if (st.st_size != size[f])
        FAIL("stat size %ld, want %ld", (long)st.st_size, size[f]);
}

static void op_sync(int s) {
    if ((below(2) ? fsync(fds[s]) : fdatasync(fds[s])) != 0)
        FAIL("sync");
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s DIR SEED OPS\n", argv[0]);
        return 2;
    }
    rng = strtoull(argv[2], NULL, 10) * 2654435761ULL + 1;
    long ops = atol(argv[3]);
    for (int f = 0; f < FILES; f++)
        snprintf(path[f], sizeof path[f], "%s/x%d.bin", argv[1], f);
    for (int i = 0; i < FDS; i++)
        fds[i] = -1;
    for (op_no = 0; op_no < ops; op_no++) {
        int s = pick_fd();
        long k = below(20);
        if (s < 0 || k == 0) {
            op_open();
            continue;
        }
        switch (k) {
        case 1: op_close(s); break;
        case 2: op_dup(s); break;
        case 3: case 4: op_write(s, 1, 0); break;
        case 5: op_write(s, 0, 0); break;
        case 6: op_write(s, below(2), 1); break;
        case 7: case 8: op_read(s, 1, 0); break;
        case 9: op_read(s, 0, 0); break;
        case 10: op_read(s, below(2), 1); break;
        case 11: case 12: op_seek(s); break;
        case 13: op_truncate(s); break;
        case 14: op_punch(s); break;
        case 15: op_stat(s); break;
        case 16: op_sync(s); break;
        case 17: op_zero(s); break;
        case 18: op_shift(s); break;
        default: op_read(s, 1, 0); break;
        }
    }
    for (int i = 0; i < FDS; i++)
        if (fds[i] >= 0)
            op_close(i);
    /* The kernel's view, every fd closed. */
    for (int f = 0; f < FILES; f++) {
        if (!exists[f])
            continue;
        int fd = (int)kernel_syscall(SYS_openat, AT_FDCWD, path[f], O_RDONLY);
        long r = kernel_syscall(SYS_pread64, fd, got, (long)MAXSZ, 0L);
        kernel_syscall(SYS_close, fd);
        if (r != size[f] || memcmp(got, model[f], size[f]) != 0)
            FAIL("file %d: the kernel holds %ld bytes, want %ld, or other bytes", f, r, size[f]);
    }
    printf("%ld operations checked\n", ops);
    return 0;
}
