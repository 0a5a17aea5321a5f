/* What a test program run under libfoliocache_preload.so starts with: the
 * C library's headers every such test uses, the check of its one argument
 * and of the library (`preload_test_start`), and the library's own
 * question, `foliocache_preload_served(fd)`: whether it serves `fd` from
 * its cache.
 *
 * Needs _GNU_SOURCE (RTLD_DEFAULT) and -ldl. */
#ifndef FOLIOCACHE_TEST_SERVED_H
#define FOLIOCACHE_TEST_SERVED_H

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int (*served_fn)(int);

/* The library's function, NULL where the library is not loaded. */
static served_fn served_lookup(void) {
    static served_fn f;
    if (!f)
        f = (served_fn)dlsym(RTLD_DEFAULT, "foliocache_preload_served");
    return f;
}

/* A test of one argument (a directory) run under the library: exits
 * with 2 for another count of arguments, 3 where the library is not
 * loaded. */
static void preload_test_start(int argc) {
    if (argc != 2)
        exit(2);
    if (!served_lookup())
        exit(3);
}

/* Whether the library serves `fd` (0 where it is not loaded). */
static int served(int fd) {
    served_fn f = served_lookup();
    return f ? f(fd) : 0;
}

#endif
