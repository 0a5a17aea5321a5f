/*
 * The checks of the C tests: CHECK(cond) and CHECK_ERR(call, errno) print
 * what failed and count it in `failures`; a program exits 1 if any did.
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

#endif /* CHECK_H */
