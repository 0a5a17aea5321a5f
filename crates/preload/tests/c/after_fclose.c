/* A shared object loaded after libfoliocache_preload.so (LD_PRELOAD="lib
 * this"): the library's "real" fclose, found with dlsym(RTLD_NEXT), is
 * this one. It calls the C library's fclose, then `after_fclose_hook` if
 * a program set it: code that runs just after the real fclose freed the
 * stream's fd and before the library's fclose returns, as another thread
 * would in a race, but every time. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

void (*after_fclose_hook)(void);

int fclose(FILE *f) {
    static int (*real)(FILE *);
    if (!real)
        real = (int (*)(FILE *))dlsym(RTLD_NEXT, "fclose");
    int r = real(f);
    void (*hook)(void) = after_fclose_hook;
    after_fclose_hook = NULL;
    if (hook)
        hook();
    return r;
}
