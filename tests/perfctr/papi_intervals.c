/* What PAPI's ctests `zero`, `first` and `high-level` check of a counter,
   with perfctr's own calls: user-mode cycles and instructions on the Core 2's
   fixed-function counters (where PAPI's Core 2 tables put PAPI_TOT_CYC and
   PAPI_TOT_INS), the vperfctr started once and read after each interval of
   pure user-mode work, beside the thread's own CPU clock.
   Before it opens the vperfctr the program spends SYS_MS of CPU time in
   system calls, as PAPI_library_init does (it reads /proc and sysfs files
   and loads libpfm's tables), so the thread's CPU time so far is not all
   user time.
   Usage: papi_intervals INTERVALS MS SYS_MS; prints one line per interval. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>
#include "libperfctr.h"

static long long thread_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    int intervals = argc > 1 ? atoi(argv[1]) : 5, i;
    long long ms = argc > 2 ? atoll(argv[2]) : 50, sys_ms = argc > 3 ? atoll(argv[3]) : 0, t0, t1;
    struct vperfctr *self;
    struct vperfctr_control control;
    struct perfctr_sum_ctrs before, after;
    volatile double x = 0.0;
    char buf[4096];

    t0 = thread_ns();
    while (thread_ns() - t0 < sys_ms * 1000000) {
	int fd = open("/proc/self/status", O_RDONLY);

	if (fd >= 0) {
	    while (read(fd, buf, sizeof buf) > 0)
		;
	    close(fd);
	}
    }
    self = vperfctr_open();
    if (self == NULL) {
	perror("vperfctr_open");
	return 1;
    }
    memset(&control, 0, sizeof control);
    control.cpu_control.tsc_on = 1;
    control.cpu_control.nractrs = 2;
    control.cpu_control.pmc_map[0] = 0x40000001;				/* FIXED_CTR1: core cycles */
    control.cpu_control.evntsel[0] = 0x3C | (1 << 16) | (1 << 22);	/* USR, EN */
    control.cpu_control.pmc_map[1] = 0x40000000;				/* FIXED_CTR0: instructions */
    control.cpu_control.evntsel[1] = 0xC0 | (1 << 16) | (1 << 22);
    if (vperfctr_control(self, &control) < 0) {
	perror("vperfctr_control");
	return 1;
    }
    for (i = 0; i < intervals; i++) {
	vperfctr_read_ctrs(self, &before);
	t0 = thread_ns();
	do
	    x += 1.0;
	while (thread_ns() - t0 < ms * 1000000);
	t1 = thread_ns();
	vperfctr_read_ctrs(self, &after);
	printf("interval cpu_ns=%lld cycles=%llu instructions=%llu\n", t1 - t0,
	       after.pmc[0] - before.pmc[0], after.pmc[1] - before.pmc[1]);
    }
    vperfctr_close(self);
    return 0;
}
