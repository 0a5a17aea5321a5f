/*
 * What the C tests share: CHECK(cond) and CHECK_ERR(call, errno) print
 * what failed and count it in `failures`; finish() is a program's exit
 * status (1 if any did); path_in(dir, name) joins a path.
 * Include after <errno.h>, <stdio.h>, <string.h> and "foliocache.h".
 */
#ifndef CHECK_H
#define CHECK_H

static int failures;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: check failed: %s (errno %d, last error: %s)\n", \
                    __FILE__, __LINE__, #cond, errno, fc_last_error());               \
            failures++;                                                               \
        }                                                                             \
    } while (0)

/* `call` fails with -1 and errno `err`. */
#define CHECK_ERR(call, err)                                                       \
    do {                                                                           \
        errno = 0;                                                                 \
        long long r_ = (long long)(call);                                          \
        if (r_ != -1 || errno != (err)) {                                          \
            fprintf(stderr, "%s:%d: %s returned %lld, errno %d (%s), wanted %s\n", \
                    __FILE__, __LINE__, #call, r_, errno, strerror(errno), #err);  \
            failures++;                                                            \
        }                                                                          \
    } while (0)

/* DIR/NAME, in a buffer the next call reuses. */
static char path_buf[4096];

static const char *path_in(const char *dir, const char *name) {
    snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
    return path_buf;
}

/* Says how many checks failed, if any: the program's exit status. */
static int finish(void) {
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("all checks passed\n");
    return 0;
}

#endif /* CHECK_H */
