/* A thread counts itself with a vperfctr, runs, and exits without closing
   it; the process reads the thread's final counts through the descriptor
   afterwards, as a launcher or a thread pool's collector does. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "libperfctr.h"

static struct vperfctr *counted;
static long long ran_ns;

static long long thread_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *worker(void *arg)
{
    struct vperfctr_control control;
    long long start, spin_ns = *(long long *)arg;

    counted = vperfctr_open();
    if (!counted) {
	perror("vperfctr_open");
	exit(1);
    }
    memset(&control, 0, sizeof control);
    control.cpu_control.tsc_on = 1;
    control.cpu_control.nractrs = 1;
    control.cpu_control.pmc_map[0] = 0;
    /* UNHALTED_CORE_CYCLES, user and kernel, enabled */
    control.cpu_control.evntsel[0] = 0x3C | (1 << 16) | (1 << 17) | (1 << 22);
    start = thread_ns();
    if (vperfctr_control(counted, &control) < 0) {
	perror("vperfctr_control");
	exit(1);
    }
    while (thread_ns() - start < spin_ns)
	;
    ran_ns = thread_ns() - start;
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t thread;
    struct perfctr_sum_ctrs sum;
    long long spin_ns = (argc > 1 ? atoll(argv[1]) : 50) * 1000000LL;

    pthread_create(&thread, NULL, worker, &spin_ns);
    pthread_join(thread, NULL);
    usleep(200000); /* the thread's exit reaches the daemon */
    if (vperfctr_read_ctrs(counted, &sum) < 0) {
	perror("vperfctr_read_ctrs");
	return 1;
    }
    printf("ran_ns=%lld pmc0=%llu\n", ran_ns, sum.pmc[0]);
    vperfctr_close(counted);
    return 0;
}
