/* A thread's own vperfctr that runs its TSC alone, kept by libperfctr until
   the thread asks more of it.  Commands on stdin, each run in a new thread
   (not the process's main thread) unless it starts with "main ":
     "register N"  N registrations as PAPI makes them: vperfctr_open, a
                   TSC-only control, vperfctr_unlink, vperfctr_close
     "tsc MS"      open, TSC-only control, MS ms of CPU, a second
                   vperfctr_open (EEXIST), a read of the TSC, a read through
                   a second descriptor (vperfctr_open_mode(0))
     "unlinked MS" open, TSC-only control, MS ms of CPU, unlink, MS ms more,
                   then two reads of the TSC with MS ms between
     "counters MS" open, TSC-only control, MS ms of CPU, then a control with
                   the TSC and one a-mode counter (cycles), MS ms, a read
   Each answers one line: CPU-clock stamps (ns) around the calls, for the
   test to bound the counts by. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <libperfctr.h>

static long long cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void spin(long ms)
{
    long long end = cpu_ns() + ms * 1000000LL;

    while (cpu_ns() < end)
	;
}

static struct vperfctr *open_tsc(long long *before, long long *after)
{
    struct vperfctr *perfctr = vperfctr_open();
    struct vperfctr_control control;

    if (perfctr == NULL)
	return NULL;
    memset(&control, 0, sizeof control);
    control.cpu_control.tsc_on = 1;
    control.flags = VPERFCTR_CONTROL_CLOEXEC;
    *before = cpu_ns();
    if (vperfctr_control(perfctr, &control) < 0) {
	int saved = errno;
	vperfctr_close(perfctr);
	errno = saved;
	return NULL;
    }
    *after = cpu_ns();
    return perfctr;
}

struct job {
    char cmd[16];
    long n;
    char out[512];
};

static void run(struct job *job)
{
    long long c0, c1, r0, r1, u0, u1;
    struct vperfctr *perfctr, *again;
    unsigned long long tsc, tsc2;
    long i;

    if (strcmp(job->cmd, "register") == 0) {
	for (i = 0; i < job->n; i++) {
	    perfctr = open_tsc(&c0, &c1);
	    if (perfctr == NULL || vperfctr_unlink(perfctr) < 0)
		break;
	    vperfctr_close(perfctr);
	}
	snprintf(job->out, sizeof job->out, "registered=%ld errno=%d", i, i < job->n ? errno : 0);
    } else if (strcmp(job->cmd, "tsc") == 0) {
	perfctr = open_tsc(&c0, &c1);
	if (perfctr == NULL)
	    goto failed;
	spin(job->n);
	again = vperfctr_open();
	int twice = again == NULL ? errno : 0;
	r0 = cpu_ns();
	tsc = vperfctr_read_tsc(perfctr);
	r1 = cpu_ns();
	again = vperfctr_open_mode(0);
	if (again == NULL)
	    goto failed;
	tsc2 = vperfctr_read_tsc(again);
	vperfctr_close(again);
	vperfctr_unlink(perfctr);
	vperfctr_close(perfctr);
	snprintf(job->out, sizeof job->out, "tsc lo=%lld hi=%lld tsc=%llu twice=%d second=%llu",
		 r0 - c1, r1 - c0, tsc, twice, tsc2);
    } else if (strcmp(job->cmd, "unlinked") == 0) {
	perfctr = open_tsc(&c0, &c1);
	if (perfctr == NULL)
	    goto failed;
	spin(job->n);
	u0 = cpu_ns();
	if (vperfctr_unlink(perfctr) < 0)
	    goto failed;
	u1 = cpu_ns();
	spin(job->n);
	tsc = vperfctr_read_tsc(perfctr);
	spin(job->n);
	tsc2 = vperfctr_read_tsc(perfctr);
	vperfctr_close(perfctr);
	snprintf(job->out, sizeof job->out, "unlinked lo=%lld hi=%lld tsc=%llu later=%llu",
		 u0 - c1, u1 - c0, tsc, tsc2);
    } else if (strcmp(job->cmd, "counters") == 0) {
	struct vperfctr_control control;
	struct perfctr_sum_ctrs sum;

	perfctr = open_tsc(&c0, &c1);
	if (perfctr == NULL)
	    goto failed;
	spin(job->n);
	memset(&control, 0, sizeof control);
	control.cpu_control.tsc_on = 1;
	control.cpu_control.nractrs = 1;
	control.cpu_control.pmc_map[0] = 0;
	control.cpu_control.evntsel[0] = 0x0043003C;	/* unhalted core cycles, both modes, EN */
	u0 = cpu_ns();
	if (vperfctr_control(perfctr, &control) < 0)
	    goto failed;
	u1 = cpu_ns();
	spin(job->n);
	r0 = cpu_ns();
	if (vperfctr_read_ctrs(perfctr, &sum) < 0)
	    goto failed;
	r1 = cpu_ns();
	vperfctr_unlink(perfctr);
	vperfctr_close(perfctr);
	/* the TSC runs on through the second control, from the first */
	snprintf(job->out, sizeof job->out, "counters lo=%lld hi=%lld tsclo=%lld tschi=%lld tsc=%llu pmc0=%llu",
		 r0 - u1, r1 - u0, r0 - c1, r1 - c0, sum.tsc, sum.pmc[0]);
    } else {
	snprintf(job->out, sizeof job->out, "unknown %s", job->cmd);
    }
    return;
 failed:
    snprintf(job->out, sizeof job->out, "%s failed errno=%d %s", job->cmd, errno, strerror(errno));
}

static void *in_thread(void *arg)
{
    run(arg);
    return NULL;
}

int main(void)
{
    char line[128];

    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
	struct job job;
	int main_thread = strncmp(line, "main ", 5) == 0;
	pthread_t thread;

	memset(&job, 0, sizeof job);
	if (sscanf(line + (main_thread ? 5 : 0), "%15s %ld", job.cmd, &job.n) != 2) {
	    printf("unknown %s", line);
	    continue;
	}
	if (main_thread)
	    run(&job);
	else if (pthread_create(&thread, NULL, in_thread, &job) == 0)
	    pthread_join(thread, NULL);
	else
	    snprintf(job.out, sizeof job.out, "pthread_create failed");
	printf("%s\n", job.out);
    }
    return 0;
}
