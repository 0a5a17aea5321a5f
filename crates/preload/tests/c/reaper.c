/* Runs a program and reaps every process it leaves behind.
 *
 *   reaper PROGRAM [ARG...]
 *
 * As the subreaper of its descendants it waits for the program (its
 * child) and for every process the program left that outlived it (a
 * guardian), until none is left; prints a line for each as it ends:
 * "child exit N" or "child signal N" for the program, "orphan exit N" or
 * "orphan signal N" for each other. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
        perror("prctl");
        return 2;
    }
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 2;
    }
    if (child == 0) {
        execv(argv[1], argv + 1);
        perror("execv");
        _exit(127);
    }
    for (;;) {
        int st;
        pid_t p = waitpid(-1, &st, __WALL);
        if (p < 0) {
            if (errno == EINTR)
                continue;
            if (errno == ECHILD)
                break;
            perror("waitpid");
            return 2;
        }
        const char *who = p == child ? "child" : "orphan";
        if (WIFEXITED(st))
            printf("%s exit %d\n", who, WEXITSTATUS(st));
        else
            printf("%s signal %d\n", who, WTERMSIG(st));
        fflush(stdout);
    }
    return 0;
}
