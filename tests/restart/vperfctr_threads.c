/* Many threads, each with its own vperfctr (as PAPI's pthrtough2 has 2 000),
 * and a few of them changing their controls: what the set-up store does for
 * such a call must not grow with the threads the process holds
 * (docs/restart.md, "When").
 *
 *   vperfctr_threads THREADS CALLS
 *
 * Each of THREADS threads opens a vperfctr and counts cycles (a-mode); then
 * "ready".  On a line on stdin, the main thread and the first worker each
 * change their control CALLS times (cycles in user mode, then user and
 * system mode, in turn), one after the other; then "done".  On a second
 * line every thread closes its vperfctr and the program exits 0.  A failed
 * call prints "error ..." and exits 2. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <libperfctr.h>

static pthread_barrier_t opened, work, worked, closing;
static long calls;
static int first_worker_done;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn = PTHREAD_COND_INITIALIZER;

static void fail(const char *what)
{
    printf("error %s: %s\n", what, strerror(errno));
    fflush(stdout);
    exit(2);
}

static void control(struct vperfctr *self, int system)
{
    struct vperfctr_control c;

    memset(&c, 0, sizeof c);
    c.cpu_control.tsc_on = 1;
    c.cpu_control.nractrs = 1;
    c.cpu_control.pmc_map[0] = 0;
    c.cpu_control.evntsel[0] = 0x3C | (1 << 16) | (system ? 1 << 17 : 0) | (1 << 22);
    if (vperfctr_control(self, &c) < 0)
        fail("vperfctr_control");
}

static void changes(struct vperfctr *self)
{
    for (long i = 0; i < calls; i++)
        control(self, (int)(i & 1));
}

static void *worker(void *arg)
{
    struct vperfctr *self = vperfctr_open();

    if (!self)
        fail("vperfctr_open");
    control(self, 1);
    pthread_barrier_wait(&opened);
    pthread_barrier_wait(&work);
    if (arg) {
        changes(self);
        pthread_mutex_lock(&lock);
        first_worker_done = 1;
        pthread_cond_signal(&turn);
        pthread_mutex_unlock(&lock);
    }
    pthread_barrier_wait(&worked);
    pthread_barrier_wait(&closing);
    vperfctr_close(self);
    return NULL;
}

int main(int argc, char **argv)
{
    char line[16];
    long threads, i;
    pthread_t *tid;
    pthread_attr_t attr;
    struct vperfctr *self;

    if (argc != 3 || (threads = atol(argv[1])) < 1 || (calls = atol(argv[2])) < 1) {
        fprintf(stderr, "usage: vperfctr_threads THREADS CALLS\n");
        return 2;
    }
    if (!(self = vperfctr_open()))
        fail("vperfctr_open");
    control(self, 1);
    tid = calloc((size_t)threads, sizeof *tid);
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_barrier_init(&opened, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&work, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&worked, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&closing, NULL, (unsigned)threads + 1);
    for (i = 0; i < threads; i++)
        if ((errno = pthread_create(&tid[i], &attr, worker, i == 0 ? (void *)1 : NULL)))
            fail("pthread_create");
    pthread_barrier_wait(&opened);
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        return 1;
    pthread_barrier_wait(&work);
    pthread_mutex_lock(&lock); /* the first worker's calls, then the main thread's */
    while (!first_worker_done)
        pthread_cond_wait(&turn, &lock);
    pthread_mutex_unlock(&lock);
    changes(self);
    pthread_barrier_wait(&worked);
    printf("done\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        return 1;
    pthread_barrier_wait(&closing);
    for (i = 0; i < threads; i++)
        pthread_join(tid[i], NULL);
    vperfctr_close(self);
    return 0;
}
