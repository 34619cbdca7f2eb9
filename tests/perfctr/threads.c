/* Two threads, each monitoring itself with its own vperfctr: perfctr's
   counters are per thread. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "libperfctr.h"

static pthread_barrier_t ready, go, done;

static struct vperfctr *open_and_start(void)
{
    struct vperfctr_control control;
    struct vperfctr *self = vperfctr_open();

    if (!self) {
	perror("vperfctr_open");
	exit(1);
    }
    memset(&control, 0, sizeof control);
    control.cpu_control.tsc_on = 1;
    control.cpu_control.nractrs = 1;
    control.cpu_control.pmc_map[0] = 0;
    control.cpu_control.evntsel[0] = 0x3C | (1 << 16) | (1 << 17) | (1 << 22);
    if (vperfctr_control(self, &control) < 0) {
	perror("vperfctr_control");
	exit(1);
    }
    return self;
}

static void report(const char *who, struct vperfctr *self)
{
    struct perfctr_sum_ctrs sum;

    if (vperfctr_read_ctrs(self, &sum) < 0) {
	perror("vperfctr_read_ctrs");
	exit(1);
    }
    printf("%s tsc=%llu pmc0=%llu\n", who, sum.tsc, sum.pmc[0]);
    fflush(stdout);
}

static void *worker(void *arg)
{
    struct vperfctr *self = open_and_start();

    (void)arg;
    printf("worker tid=%ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    pthread_barrier_wait(&ready);
    pthread_barrier_wait(&go);
    report("worker", self);
    pthread_barrier_wait(&done);
    vperfctr_close(self);
    return NULL;
}

int main(void)
{
    pthread_t thread;
    struct vperfctr *self;
    char line[16];

    pthread_barrier_init(&ready, NULL, 2);
    pthread_barrier_init(&go, NULL, 2);
    pthread_barrier_init(&done, NULL, 2);
    self = open_and_start();
    pthread_create(&thread, NULL, worker, NULL);
    pthread_barrier_wait(&ready);
    printf("main tid=%ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
	return 1;
    pthread_barrier_wait(&go);
    pthread_barrier_wait(&done);
    report("main", self);
    pthread_join(thread, NULL);
    vperfctr_close(self);
    return 0;
}
