/* The rate of the host's TSC, read with rdtsc over the wall clock, beside
 * the rates of the thread's own vperfctr over its CPU time: its TSC and a
 * cycles counter (event select argv[1], hex), over a CPU-bound loop.  On a
 * Core 2 or a K8 the three tick together; PAPI's zero compares them.
 * Prints "host_tsc TICKS WALL_NS" and "vperfctr TSC CYCLES CPU_NS". */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>
#include <libperfctr.h>

static uint64_t ns(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv)
{
    struct vperfctr *self;
    struct vperfctr_control control;
    struct perfctr_sum_ctrs before, after;
    uint64_t wall0, wall1, cpu0, cpu1, tsc0, tsc1;
    volatile uint64_t spin = 0;

    if (argc != 2)
	return 2;
    self = vperfctr_open();
    if (self == NULL) {
	perror("vperfctr_open");
	return 1;
    }
    memset(&control, 0, sizeof control);
    control.cpu_control.tsc_on = 1;
    control.cpu_control.nractrs = 1;
    control.cpu_control.pmc_map[0] = 0;
    control.cpu_control.evntsel[0] = (unsigned)strtoul(argv[1], NULL, 16);
    if (vperfctr_control(self, &control) < 0) {
	perror("vperfctr_control");
	return 1;
    }
    vperfctr_read_ctrs(self, &before);
    cpu0 = ns(CLOCK_THREAD_CPUTIME_ID);
    wall0 = ns(CLOCK_MONOTONIC);
    tsc0 = __rdtsc();
    /* 50 ms of CPU time, however long the wall clock takes beside other
       work: each rate is taken over its own clock. */
    while (ns(CLOCK_THREAD_CPUTIME_ID) - cpu0 < 50000000u)
	for (int i = 0; i < 10000; i++)
	    spin += (uint64_t)i;
    tsc1 = __rdtsc();
    wall1 = ns(CLOCK_MONOTONIC);
    cpu1 = ns(CLOCK_THREAD_CPUTIME_ID);
    vperfctr_read_ctrs(self, &after);
    printf("host_tsc %llu %llu\n", (unsigned long long)(tsc1 - tsc0), (unsigned long long)(wall1 - wall0));
    printf("vperfctr %llu %llu %llu\n", (unsigned long long)(after.tsc - before.tsc),
	   (unsigned long long)(after.pmc[0] - before.pmc[0]), (unsigned long long)(cpu1 - cpu0));
    vperfctr_unlink(self);
    vperfctr_close(self);
    return 0;
}
