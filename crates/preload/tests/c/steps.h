/* Steps of a test's processes, told through pipes: one byte a step
 * done. A pipe that breaks (the other side gone) ends the process with
 * 90 (a write) or 91 (a read). */
#ifndef FOLIOCACHE_TEST_STEPS_H
#define FOLIOCACHE_TEST_STEPS_H

#include <unistd.h>

static void say(int fd) {
    char c = 1;
    if (write(fd, &c, 1) != 1)
        _exit(90);
}

static void hear(int fd) {
    char c;
    if (read(fd, &c, 1) != 1)
        _exit(91);
}

#endif
