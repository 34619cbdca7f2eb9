/* libperfex and libhwperf across a restart of the daemon (docs/restart.md):
 *
 *   lib_restart perfex   start_counters(0, 0) (cycles); after 0.5 s of CPU
 *                        time "ready", then on a line of stdin 0.3 s more and
 *                        read_counters: "final GEN CYCLES USER_NS"
 *   lib_restart syssgi   (root) system mode on cycles in kernel mode through
 *                        syssgi(SGI_EVENTCTR, HWPERF_ENSYSCNTRS); "ready GEN";
 *                        on a line of stdin HWPERF_GET_SYSCNTRS, "final GEN
 *                        CYCLES", and the release.
 * Any failed call prints "error" and exits 2. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/hwperftypes.h>
#include <sys/hwperfmacros.h>
#include <sys/syssgi.h>
#include <time.h>
#include <unistd.h>
#include <perfex.h>

static long long cpu_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

static void spin(long ms)
{
    long long end = cpu_ns() + ms * 1000000LL;
    while (cpu_ns() < end)
        for (volatile int k = 0; k < 100000; k++)
            ;
}

static long long user_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (long long)ru.ru_utime.tv_sec * 1000000000LL + ru.ru_utime.tv_usec * 1000LL;
}

static long long system_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (long long)ru.ru_stime.tv_sec * 1000000000LL + ru.ru_stime.tv_usec * 1000LL;
}

int main(int argc, char **argv)
{
    char go[16];

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && strcmp(argv[1], "perfex") == 0) {
        long long c0, c1;
        int gen = start_counters(0, 0);
        if (gen < 0) {
            printf("error start_counters %d\n", errno);
            return 2;
        }
        spin(500);
        printf("ready %d\n", gen);
        if (!fgets(go, sizeof go, stdin))
            return 2;
        spin(300);
        gen = read_counters(0, &c0, 0, &c1);
        if (gen < 0) {
            printf("error read_counters %d\n", errno);
            return 2;
        }
        printf("final %d %lld %lld %lld\n", gen, c0, user_ns(), system_ns());
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "syssgi") == 0) {
        hwperf_profevctrarg_t args;
        hwperf_cntr_t counts;
        int gen, got;
        memset(&args, 0, sizeof args);
        args.hwp_evctrargs.hwp_evctrl[0].hwperf_spec = (short)((0 << HWPERF_EVSHIFT) | HWPERF_CNTEN_K);
        gen = syssgi(SGI_EVENTCTR, HWPERF_ENSYSCNTRS, &args);
        if (gen < 0) {
            printf("error HWPERF_ENSYSCNTRS %d\n", errno);
            return 2;
        }
        printf("ready %d\n", gen);
        if (!fgets(go, sizeof go, stdin))
            return 2;
        got = syssgi(SGI_EVENTCTR, HWPERF_GET_SYSCNTRS, &counts);
        if (got < 0) {
            printf("error HWPERF_GET_SYSCNTRS %d\n", errno);
            return 2;
        }
        printf("final %d %llu\n", got, (unsigned long long)counts.hwp_evctr[0]);
        if (syssgi(SGI_EVENTCTR, HWPERF_RELSYSCNTRS) < 0) {
            printf("error HWPERF_RELSYSCNTRS %d\n", errno);
            return 2;
        }
        return 0;
    }
    fprintf(stderr, "usage: lib_restart perfex|syssgi\n");
    return 1;
}
