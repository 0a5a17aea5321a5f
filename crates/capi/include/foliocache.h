/*
 * foliocache.h: the C API of foliocache, a page cache that programs embed
 * (libfoliocache.so, built by the crate crates/capi; docs/capi.md).
 *
 * Conventions
 * - Caches and files are handles: positive integers (fc_cache_t,
 *   fc_file_t), never reused within a process. A handle that is closed,
 *   was never returned, or is of the other kind makes a call fail with
 *   EBADF; it never reaches freed memory.
 * - A function that fails returns -1 and sets errno; fc_last_error()
 *   describes the calling thread's last failure. As with POSIX calls,
 *   errno means something only after a failure (a call that succeeds may
 *   change it, retrying a system call). Errors from the system keep their
 *   errno (ENOENT, EACCES, EIO, ENOSPC, ...); the library's own are listed
 *   with each function. An internal error (a bug: a panic inside the
 *   library) is reported as EIO and never crosses into the caller.
 * - Every function is thread-safe: any thread may call any function on any
 *   handle at any time. A handle closed while another thread is in a call
 *   on it stays usable by that call; the object goes when the call
 *   returns, and later calls get EBADF.
 * - Only pointer arguments are the caller's to get right: a buffer must be
 *   valid for `count` bytes, a path NUL-terminated, a struct as large as
 *   its `size` field says. NULL is caught (EFAULT); a misaligned struct
 *   too (EINVAL); any other bad pointer is undefined behaviour, as in libc.
 * - Structs passed by pointer begin with their size: set it to
 *   sizeof(struct ...) (the *_INIT macros do), so programs built against
 *   an older or newer header keep working.
 * - Data written is in the cache until written back (by the flusher, a
 *   sync, or the close of the file's last handle). The cache lives in this
 *   process: close files, or sync them, before the process exits;
 *   data still dirty at exit is lost (docs/capi.md: what _exit, SIGKILL
 *   and power loss lose).
 * - Handles belong to the process that made them: in a child of fork(),
 *   every call on a handle of its parent fails with EBADF (and changes
 *   nothing: the parent's files stay as the parent has them). A child of
 *   a process that made a cache cannot make caches either (EPERM: the
 *   parent's cache threads may have held the library's locks at the
 *   fork); it may exec a program that does.
 */
#ifndef FOLIOCACHE_H
#define FOLIOCACHE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h> /* ssize_t */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Version ----------------------------------------------------------- */

/* The version of this header (the crate's, semantic versioning). The
 * shared object's SONAME is libfoliocache.so.0. */
#define FOLIOCACHE_VERSION_MAJOR 0
#define FOLIOCACHE_VERSION_MINOR 1
#define FOLIOCACHE_VERSION_PATCH 0

/*
 * The version of the library loaded, as "MAJOR.MINOR.PATCH" (a static
 * string): compare it with the FOLIOCACHE_VERSION_* macros of the header a
 * program was built with.
 */
const char *fc_version(void);

/* A cache: one arena of memory, shared by the files opened through it. */
typedef int64_t fc_cache_t;
/* A file opened through a cache. */
typedef int64_t fc_file_t;

/* ---- Caches ------------------------------------------------------------ */

/* fc_cache_options.flags: fault the whole arena in at build rather than as
 * the cache fills (slower to build; no first-touch cost later). */
#define FC_CACHE_POPULATE_EAGER (1u << 0)
/* fc_cache_options.flags: no transparent huge pages for the arena. */
#define FC_CACHE_NO_HUGE_PAGES (1u << 1)
/* fc_cache_options.flags: no memory-pressure watcher (by default the cache
 * shrinks while the machine or the process's cgroup is short of memory,
 * and grows back afterwards). */
#define FC_CACHE_NO_PRESSURE (1u << 2)

/* How to build a cache. A field left 0 takes the library's default. */
struct fc_cache_options {
    uint32_t size;             /* sizeof(struct fc_cache_options) */
    uint32_t flags;            /* FC_CACHE_* flags, or 0 */
    uint64_t capacity;         /* bytes of cache memory (256 MiB); a hard
                                  limit, rounded down to 4 KiB pages */
    uint64_t max_folio_size;   /* the largest folio, in bytes (2 MiB); a
                                  power of two pages, from 4 KiB to 2 MiB */
    uint64_t dirty_limit;      /* dirty bytes above which writers write back
                                  before writing more (half the capacity) */
    uint64_t dirty_background; /* dirty bytes above which the flusher writes
                                  back (a quarter of the capacity) */
    uint64_t shadow_budget;    /* bytes of index memory for the shadows of
                                  evicted pages (about 0.6 % of capacity) */
};

/* Every option at its default: `struct fc_cache_options o =
 * FC_CACHE_OPTIONS_INIT;` then set the fields wanted. */
#define FC_CACHE_OPTIONS_INIT { sizeof(struct fc_cache_options), 0, 0, 0, 0, 0, 0 }

/*
 * Builds a cache of `capacity` bytes (0: 256 MiB), every other option at
 * its default. The memory is mapped now and faulted in as the cache fills.
 * Also starts the cache's flusher thread (and its memory-pressure watcher).
 *
 * Returns the cache's handle, or -1 with errno set:
 * EINVAL a capacity under one page; EPERM in a child of fork() made after
 * this library made a cache; ENOMEM a capacity above what the
 * process may use (its cgroup's limit, the machine's available memory) or
 * a refused mapping; EMFILE no handles left.
 */
fc_cache_t fc_cache_new(uint64_t capacity);

/*
 * Builds a cache with `opts` (NULL: every default). Unknown flags are
 * EINVAL; so is a `size` under 4. A `size` larger than this library's
 * struct is accepted if the extra bytes are zero, else E2BIG (a field the
 * library does not know); a `size` above 4096 (a page) is E2BIG without
 * reading past this library's struct. Other errors as fc_cache_new.
 */
fc_cache_t fc_cache_new_with(const struct fc_cache_options *opts);

/*
 * Closes a cache handle. Files opened through it stay open and usable; the
 * cache's memory and threads go when the last of them is closed.
 * Returns 0, or -1 with errno EBADF (not a live cache handle).
 */
int fc_cache_destroy(fc_cache_t cache);

/*
 * Writes back every open file of the cache and makes each durable
 * (fsync). Returns 0, or -1 with errno set: EBADF, or the first file's
 * writeback or sync error (every file is tried).
 */
int fc_cache_sync_all(fc_cache_t cache);

/* A cache's figures, from fc_cache_stats. Counters count from the cache's
 * build; the others are the state now. */
struct fc_cache_stats {
    uint32_t size;     /* set by the caller to sizeof(struct fc_cache_stats);
                          the library sets it to the bytes it filled */
    uint32_t reserved; /* 0 */
    uint64_t hits;              /* folio lookups that found the data cached */
    uint64_t misses;            /* folios a read had to create and fill */
    uint64_t folios;            /* folios cached now */
    uint64_t bytes_cached;      /* bytes of those folios */
    uint64_t evictions;         /* folios evicted by reclaim */
    uint64_t io_reads;          /* reads issued to backing files */
    uint64_t io_bytes;          /* bytes those reads returned */
    uint64_t capacity_bytes;    /* the cache's capacity */
    uint64_t free_bytes;        /* capacity not holding a folio */
    uint64_t allowed_bytes;     /* what the cache may hold now (less than the
                                   capacity while memory pressure shrank it) */
    uint64_t populated_bytes;   /* cache memory faulted in */
    uint64_t refaults;          /* folios read again after their eviction */
    uint64_t activations;       /* folios moved to the active LRU list */
    uint64_t shadows;           /* eviction shadows in open files' indexes */
    uint64_t dirty_bytes;       /* bytes written and not yet written back */
    uint64_t writeback_bytes;   /* bytes being written back now */
    uint64_t io_writes;         /* writes issued to backing files */
    uint64_t io_write_bytes;    /* bytes those writes wrote */
    uint64_t writeback_errors;  /* writebacks that failed (data kept dirty) */
    uint64_t throttled;         /* writes made to write back first, the
                                   cache being over its dirty limit */
    uint64_t readahead_windows; /* readahead windows read */
    uint64_t dropbehind_drops;  /* folios dropped after uncached IO */
    /* Bytes (appended: a program built with an older header passes a
     * smaller size and gets the fields above). `hits` counts folio
     * lookups, whoever read the folio in; these say where the bytes reads
     * returned came from. Bytes reads got from memory:
     * read_bytes - first_read_bytes. */
    uint64_t read_bytes;        /* bytes reads returned (hits and misses) */
    uint64_t first_read_bytes;  /* of those, bytes of folios read from the
                                   backing (by a miss or by readahead),
                                   counted whole at the first read that
                                   copied from each */
};

/* `struct fc_cache_stats s = FC_CACHE_STATS_INIT;` before fc_cache_stats. */
#define FC_CACHE_STATS_INIT { sizeof(struct fc_cache_stats), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
                              0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/*
 * Fills `*out` with the cache's figures: the first out->size bytes of the
 * struct, as far as this library's struct goes, and out->size set to the
 * bytes filled. Returns 0, or -1 with errno set: EBADF; EFAULT for a NULL
 * `out`; EINVAL for a misaligned one or an out->size under 4.
 */
int fc_cache_stats(fc_cache_t cache, struct fc_cache_stats *out);

/* ---- Files ------------------------------------------------------------- */

/*
 * Opens `path` through `cache`, as open(2) with `flags` and `mode` (mode is
 * used only with O_CREAT, less the umask, as open's). Every handle of a
 * file opened through one cache shares its cached data. The file is opened
 * with O_DIRECT underneath (with a buffered fallback where the filesystem
 * refuses it).
 *
 * Flags: one of O_RDONLY, O_WRONLY, O_RDWR, and any of O_CREAT, O_EXCL
 * (with O_CREAT), O_TRUNC (not with O_RDONLY or O_APPEND), O_APPEND (every
 * write goes to the end of the file); O_CLOEXEC, O_DIRECT and O_LARGEFILE
 * are accepted and change nothing (the library always uses them). Any
 * other flag is EINVAL. A file opened O_WRONLY can also be read through
 * its handle, if the caller may read it; O_WRONLY needs no read permission
 * (as open(2)'s), but then the cache cannot read the file: reads fail with
 * EBADF, and so does a write into part of a 4 KiB block that is neither
 * cached nor past the end of the file (whole blocks, appends and a file
 * being written from empty work).
 *
 * Only regular files are cached: a directory is EISDIR, anything else (a
 * FIFO, a socket, a device) EINVAL, refused before it is opened (an
 * open(2) of a FIFO would block until a writer came).
 *
 * Returns the file's handle, or -1 with errno set: the error of open(2)
 * (ENOENT, EEXIST, EACCES, ...); EISDIR (a directory); EBADF (not a live
 * cache handle); EFAULT (NULL path); EINVAL (not a regular file; flags or
 * mode: an unsupported flag, O_EXCL without O_CREAT, O_CREAT or O_TRUNC
 * without write access, O_TRUNC with O_APPEND, mode bits beyond 07777).
 */
fc_file_t fc_open(fc_cache_t cache, const char *path, int flags, unsigned int mode);

/*
 * Closes a file handle. The file's dirty data is written back when its
 * last handle goes (once no other thread's call is using it); an error
 * then is not returned here: the cache keeps the data and retries, and
 * the file's next sync reports it. To know the data is durable, call
 * fc_fdatasync or fc_fsync before closing.
 * Returns 0, or -1 with errno EBADF (not a live file handle).
 */
int fc_close(fc_file_t file);

/*
 * Reads up to `count` bytes at `offset` into `buf`, as pread(2): fewer
 * only at end of file (or when an error stops the read after some bytes:
 * the next call reports it), 0 at or past it. A hit is a memory copy, with
 * no system call. Returns the bytes read, or -1 with errno set: EBADF;
 * EINVAL (a negative offset, a count above SSIZE_MAX); EFAULT (NULL `buf`
 * with a nonzero count); EIO or another error of the backing file's read;
 * ENOMEM (every folio of the cache in use).
 */
ssize_t fc_pread(fc_file_t file, void *buf, size_t count, int64_t offset);

/*
 * Writes the `count` bytes at `buf` at `offset` (at end of file with
 * O_APPEND), as pwrite(2) but never short: the data is dirty in the cache
 * until written back. Writing past the end extends the file; the gap reads
 * as zeros. Returns `count`, or -1 with errno set: EBADF; EACCES (the file
 * was opened O_RDONLY: pwrite(2) would say EBADF); EINVAL and EFAULT as
 * fc_pread; EFBIG (past the largest file size); ENOSPC (a write that
 * extends the file reserves its space on the backing's filesystem first,
 * as ext4's delayed allocation does: a full filesystem fails it, writing
 * nothing; where the filesystem cannot reserve, a full one fails the
 * writeback instead, at the next sync); an error of the backing file
 * (reading the rest of a partly written page, or a writeback when the
 * cache was over its dirty limit); ENOMEM. After an error, part of the
 * data may have been written.
 */
ssize_t fc_pwrite(fc_file_t file, const void *buf, size_t count, int64_t offset);

/*
 * Writes the file's dirty data back and makes it durable with all its
 * metadata, as fsync(2). Reports, once per handle, a writeback error met
 * since this handle last reported one (by anyone: the flusher, another
 * handle); data whose writeback failed stays dirty and is written again,
 * so a sync that succeeds after a failed one made everything durable.
 * Returns 0, or -1 with errno set: EBADF, or the writeback or sync error
 * (EIO, ENOSPC, ...).
 */
int fc_fsync(fc_file_t file);

/* As fc_fsync, with the metadata needed to read the data back only, as
 * fdatasync(2). */
int fc_fdatasync(fc_file_t file);

/*
 * Sets the file's size, as ftruncate(2): shrinking drops the cached data
 * past the end (dirty data included); growing adds a hole that reads as
 * zeros. Returns 0, or -1 with errno set: EBADF; EACCES (opened O_RDONLY);
 * EINVAL (negative size); EFBIG; the backing file's error (then nothing
 * changed).
 */
int fc_ftruncate(fc_file_t file, int64_t size);

/*
 * Deallocates `len` bytes at `offset`, keeping the size, as fallocate(2)
 * with FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE: the range reads as
 * zeros afterwards; the part past end of file is ignored. Returns 0, or
 * -1 with errno set: EBADF; EACCES (opened O_RDONLY); EINVAL (a negative
 * offset or length); the backing file's error (EOPNOTSUPP where its
 * filesystem cannot punch holes).
 */
int fc_punch_hole(fc_file_t file, int64_t offset, int64_t len);

/*
 * Removes `len` bytes at `offset` and moves the data after them down, so
 * the file shrinks by `len`, as fallocate(2) with FALLOC_FL_COLLAPSE_RANGE.
 * The file's dirty data from `offset` on is written back first, and what
 * the cache holds from there is dropped once the backing file has moved.
 * Returns 0, or -1 with errno set: EBADF; EACCES (opened O_RDONLY); EINVAL
 * (a negative value, `offset` or `len` not a multiple of 4096, `len` 0, or
 * a range that reaches end of file; then nothing is done); EOPNOTSUPP (a
 * filesystem that cannot move data); a writeback or the backing file's
 * error (then nothing has moved).
 */
int fc_collapse_range(fc_file_t file, int64_t offset, int64_t len);

/*
 * Inserts a hole of `len` bytes at `offset` and moves the data from there
 * up, so the file grows by `len`, as fallocate(2) with
 * FALLOC_FL_INSERT_RANGE; as fc_collapse_range otherwise. EINVAL also for
 * an `offset` at or past end of file; EFBIG past the largest file size.
 */
int fc_insert_range(fc_file_t file, int64_t offset, int64_t len);

/* The file's size in bytes (as the cache knows it: writes past the end and
 * fc_ftruncate change it at once), or -1 with errno EBADF. */
int64_t fc_size(fc_file_t file);

/* ---- Errors ------------------------------------------------------------ */

/*
 * A description of the calling thread's last failed call (an empty string
 * before one). The string belongs to the library and stays valid until the
 * thread's next failed call, or its exit; copy it to keep it.
 */
const char *fc_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* FOLIOCACHE_H */
