/* A setuid-root program for the credential tests (installed 04755 root by
 * the test).  "full": becomes root in every uid, as a daemon that drops the
 * caller's identity does; "half": keeps the caller's real uid.  Either way
 * it counts SIGUSR1 until its stdin ends, then prints the count. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t got;

static void on_usr1(int sig) { (void)sig; got++; }

int main(int argc, char **argv)
{
    char line[64];
    if (argc > 1 && strcmp(argv[1], "full") == 0 && setresuid(0, 0, 0) != 0) {
        perror("setresuid");
        return 2;
    }
    signal(SIGUSR1, on_usr1);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    while (fgets(line, sizeof line, stdin) != NULL)
        ;
    printf("%d\n", (int)got);
    return 0;
}
