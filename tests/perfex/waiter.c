/* A command for the perfex tests, whose counts the manual clock predicts.
 *
 * It says "counting PID" on stderr, then waits until it receives SIGUSR1,
 * so that the test can advance its CPU time by an exact amount in between;
 * then it exits with the status given as its argument (default 0), or,
 * with -k SIG, kills itself with signal SIG.  It consumes no stdin, so it
 * can stand anywhere in a shell pipeline. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    sigset_t usr1;
    int sig, status = 0, kill_with = 0;

    if (argc > 2 && strcmp(argv[1], "-k") == 0)
        kill_with = atoi(argv[2]);
    else if (argc > 1)
        status = atoi(argv[1]);
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, NULL);
    fprintf(stderr, "counting %d\n", (int)getpid());
    fflush(stderr);
    if (sigwait(&usr1, &sig) != 0)
        return 99;
    if (kill_with) {
        signal(kill_with, SIG_DFL);
        sigprocmask(SIG_UNBLOCK, &usr1, NULL);
        raise(kill_with);
    }
    return status;
}
