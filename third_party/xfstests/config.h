/*
 * Written for foliocache (not from xfstests): what xfstests' `configure`
 * finds on a Debian host with xfslibs-dev, given to global.h so that
 * fsstress.c and fsx.c build with one `cc` call each (build.sh). AIO and
 * io_uring are left out: foliocache's interposer does not serve them
 * (docs/preload.md, "Limits"), so their operations would test the kernel.
 */
#define HAVE_XFS_XFS_H 1
#define HAVE_SYS_TYPES_H 1
#define HAVE_SYS_STAT_H 1
#define HAVE_SYS_STATVFS_H 1
#define HAVE_SYS_TIME_H 1
#define HAVE_SYS_IOCTL_H 1
#define HAVE_SYS_WAIT_H 1
#define HAVE_MALLOC_H 1
#define HAVE_DIRENT_H 1
#define HAVE_STDLIB_H 1
#define HAVE_UNISTD_H 1
#define HAVE_ERRNO_H 1
#define HAVE_STRING_H 1
#define HAVE_SYS_FCNTL_H 1
#define HAVE_SYS_PARAM_H 1
#define HAVE_LIBGEN_H 1
#define HAVE_ASSERT_H 1
#define STDC_HEADERS 1
#define HAVE_STRINGS_H 1
#define HAVE_LINUX_FALLOC_H 1
#define HAVE_LINUX_FIEMAP_H 1
#define HAVE_SYS_PRCTL_H 1
#define HAVE_SYS_MMAN_H 1
#define HAVE_ERR_H 1
#define HAVE_COPY_FILE_RANGE 1
#define HAVE_RENAMEAT2 1
#define HAVE_REALLOCARRAY 1
