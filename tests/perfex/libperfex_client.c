/* An IRIX-era libperfex(3C) client: counts two events around a region,
 * prints them with print_counters and print_costs, and reports on stdout.
 *
 *   libperfex_client E0 E1 [COSTFILE]
 *
 * The region is "wait for SIGUSR1" (after saying "counting PID" on stderr),
 * so a test can advance the manual clock by an exact amount in between. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <perfex.h>

int main(int argc, char **argv)
{
    int e0 = argc > 1 ? atoi(argv[1]) : 0, e1 = argc > 2 ? atoi(argv[2]) : 25;
    long long c0 = -1, c1 = -1;
    int gen1, gen2, sig;
    sigset_t usr1;

    if (argc > 3 && load_costs(argv[3]) < 0)
        return 3;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, NULL);
    gen1 = start_counters(e0, e1);
    if (gen1 < 0)
        return 1;
    fprintf(stderr, "counting %d\n", (int)getpid());
    fflush(stderr);
    sigwait(&usr1, &sig);
    gen2 = read_counters(e0, &c0, e1, &c1);
    if (gen2 < 0)
        return 2;
    printf("generation: %d %d\n", gen1, gen2);
    printf("c0: %lld\n", c0);
    printf("c1: %lld\n", c1);
    fflush(stdout);
    print_counters(e0, c0, e1, c1);
    fprintf(stderr, "--\n");
    print_costs(e0, c0, e1, c1);
    return 0;
}
