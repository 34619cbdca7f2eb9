#define _GNU_SOURCE
/* What PAPI's software multiplexing does to a vperfctr (its only kind on
   perfctr: ctests multiplex*, reset_multiplex, sdsc*-mpx): a SIGPROF every
   SLICE_MS of the process's CPU time; the handler reads the counters, stops
   them, programs the next event beside the cycles and starts again
   (vperfctr_read_ctrs, vperfctr_stop, vperfctr_control, as PAPI_stop and
   PAPI_start do).  PAPI scales each event by the cycles counted in its own
   slices, so the slices' cycles must add up to the thread's CPU time and
   each slice must count at the event's own rate.
   Usage: mpx_slices SLICE_MS TOTAL_MS; the counters are user mode, counter 0
   the cycles, counter 1 in turn instructions and branches. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include "libperfctr.h"

static struct vperfctr *self;
static struct vperfctr_control control;
static struct perfctr_sum_ctrs start;
static unsigned int events[2];
static unsigned long long cycles[2], counts[2];
static int current, slices[2], failed;

static long long thread_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void program(int which)
{
    current = which;
    control.cpu_control.evntsel[1] = events[which] | (1 << 16) | (1 << 22);
    if (vperfctr_control(self, &control) < 0 || vperfctr_read_ctrs(self, &start) < 0)
	failed = 1;
}

static void slice_end(int next)
{
    struct perfctr_sum_ctrs now;

    if (vperfctr_read_ctrs(self, &now) < 0 || vperfctr_stop(self) < 0) {
	failed = 1;
	return;
    }
    cycles[current] += now.pmc[0] - start.pmc[0];
    counts[current] += now.pmc[1] - start.pmc[1];
    slices[current]++;
    if (next >= 0)
	program(next);
}

static void on_prof(int sig)
{
    (void)sig;
    slice_end(current ^ 1);
}

int main(int argc, char **argv)
{
    long long slice_ms = argc > 1 ? atoll(argv[1]) : 10, total_ms = argc > 2 ? atoll(argv[2]) : 200, t0, cpu_ns;
    struct itimerval timer, off;
    struct rusage before, after;
    struct perfctr_info info;
    volatile double x = 0.0;
    sigset_t prof;
    int i;

    self = vperfctr_open();
    if (!self || vperfctr_info(self, &info) < 0) {
	perror("vperfctr_open");
	return 1;
    }
    memset(&control, 0, sizeof control);
    control.cpu_control.tsc_on = 1;
    control.cpu_control.nractrs = 2;
    control.cpu_control.pmc_map[0] = 0;
    control.cpu_control.pmc_map[1] = 1;
    if (info.cpu_type == PERFCTR_X86_AMD_K8) {
	control.cpu_control.evntsel[0] = 0x76 | (1 << 16) | (1 << 22);	/* cycles not halted */
	events[0] = 0xC0, events[1] = 0xC2;	/* retired instructions, branches */
    } else {
	control.cpu_control.evntsel[0] = 0x3C | (1 << 16) | (1 << 22);	/* CPU_CLK_UNHALTED */
	events[0] = 0xC0, events[1] = 0xC4;	/* INST_RETIRED, BR_INST_RETIRED */
    }
    signal(SIGPROF, on_prof);
    memset(&timer, 0, sizeof timer);
    memset(&off, 0, sizeof off);
    timer.it_interval.tv_usec = timer.it_value.tv_usec = slice_ms * 1000;
    getrusage(RUSAGE_THREAD, &before);
    t0 = thread_ns();
    program(0);
    setitimer(ITIMER_PROF, &timer, NULL);
    /* User-mode work (the thread's CPU clock is a system call, looked at
       seldom), and on until each event has had three slices: the kernel
       looks at a CPU-time timer only at a tick that finds the process
       running, so on a busy machine SIGPROF comes less often than every
       SLICE_MS of CPU time. */
    do
	for (i = 0; i < 100000; i++)
	    x += 1.0;
    while ((cpu_ns = thread_ns() - t0) < total_ms * 1000000
	   || ((slices[0] < 3 || slices[1] < 3) && cpu_ns < 20 * total_ms * 1000000));
    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    sigprocmask(SIG_BLOCK, &prof, NULL);
    setitimer(ITIMER_PROF, &off, NULL);
    slice_end(-1);
    cpu_ns = thread_ns() - t0;
    getrusage(RUSAGE_THREAD, &after);
    if (failed) {
	perror("vperfctr");
	return 1;
    }
    printf("slices cpu_ns=%lld user_us=%lld cycles=%llu slices0=%d slices1=%d cycles0=%llu count0=%llu cycles1=%llu count1=%llu\n",
	   cpu_ns, (after.ru_utime.tv_sec - before.ru_utime.tv_sec) * 1000000LL + after.ru_utime.tv_usec - before.ru_utime.tv_usec,
	   cycles[0] + cycles[1], slices[0], slices[1], cycles[0], counts[0], cycles[1], counts[1]);
    vperfctr_unlink(self);
    vperfctr_close(self);
    return 0;
}
