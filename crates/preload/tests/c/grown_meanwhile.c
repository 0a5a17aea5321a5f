/* A served file that another process grows while this one has it open:
 * its close must not cut the other's bytes off (a file never shrinks
 * unless someone truncates it). Run under libfoliocache_preload.so:
 *
 *   grown_meanwhile FILE write|truncate
 *
 * write:    writes 4096 bytes of 'A', fsyncs;
 * truncate: writes 8192 bytes of 'A', truncates to 100, fsyncs;
 * then says "ready" on stdout and waits for a line on stdin (the harness
 * appends to FILE meanwhile), then closes the file and exits. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3)
        return 2;
    int (*served)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "foliocache_preload_served");
    int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || !served || !served(fd))
        return 3;
    static char a[8192];
    memset(a, 'A', sizeof a);
    int truncate = strcmp(argv[2], "truncate") == 0;
    if (write(fd, a, truncate ? 8192 : 4096) != (truncate ? 8192 : 4096))
        return 4;
    if (truncate && ftruncate(fd, 100) != 0)
        return 5;
    if (fsync(fd) != 0)
        return 6;
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        return 7;
    return close(fd) != 0;
}
