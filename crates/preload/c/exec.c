/* execl, execle, execlp: the exec functions that take their arguments as
 * a variadic list, which stable Rust cannot define. glibc's own execl,
 * execle and execlp collect the list into an argv and call __execve or
 * __execvpe, its internal names, which an interposed execve never sees
 * (docs/preload.md, "exec"). These do what glibc's do, argv on the stack
 * as glibc's are (no allocation: async-signal-safe, usable after vfork),
 * then call execve or execvpe by their public names, which bind to the
 * library's own (an LD_PRELOAD object comes before the C library in the
 * lookup order): every file is handed to the kernel first.
 *
 * The exported execl, execle and execlp are naked trampolines in Rust
 * (src/handoff.rs) that jump here with the caller's registers and stack
 * untouched: a cdylib exports only the symbols Rust defines. */
#define _GNU_SOURCE /* execvpe */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#define HIDDEN __attribute__((visibility("hidden")))

extern char **environ;

/* The number of arguments after `arg` up to the NULL ending the list, plus
 * one for `arg`; -1 with errno E2BIG past INT_MAX, as glibc's execl. */
static ptrdiff_t count(va_list ap) {
    ptrdiff_t argc = 1;
    while (va_arg(ap, const char *) != NULL) {
        if (argc == INT_MAX) {
            errno = E2BIG;
            return -1;
        }
        argc++;
    }
    return argc;
}

/* Fills argv[0..=argc] from `arg` and the list (argv[argc] is the NULL
 * that ends it), leaving `ap` past that NULL. */
static void collect(char **argv, ptrdiff_t argc, const char *arg, va_list *ap) {
    argv[0] = (char *)arg;
    for (ptrdiff_t i = 1; i <= argc; i++)
        argv[i] = va_arg(*ap, char *);
}

/* Declares `argv` (on the stack, sized for the list) holding `arg` and
 * the list after it, and `ap` left past the list's NULL (va_end'ed by the
 * caller); returns -1 from the caller for an overlong list. */
#define COLLECT_ARGV(argv, ap, arg)                                            \
    va_list ap;                                                                \
    va_start(ap, arg);                                                         \
    ptrdiff_t argc = count(ap);                                                \
    va_end(ap);                                                                \
    if (argc < 0)                                                              \
        return -1;                                                             \
    char *argv[argc + 1];                                                      \
    va_start(ap, arg);                                                         \
    collect(argv, argc, arg, &ap)

HIDDEN int foliocache_preload_execl(const char *path, const char *arg, ...) {
    COLLECT_ARGV(argv, ap, arg);
    va_end(ap);
    return execve(path, argv, environ);
}

HIDDEN int foliocache_preload_execle(const char *path, const char *arg, ...) {
    COLLECT_ARGV(argv, ap, arg);
    /* The environment follows the NULL. */
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, argv, envp);
}

HIDDEN int foliocache_preload_execlp(const char *file, const char *arg, ...) {
    COLLECT_ARGV(argv, ap, arg);
    va_end(ap);
    return execvpe(file, argv, environ);
}
