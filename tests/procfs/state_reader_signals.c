/* lib/state.c's reader interrupted by a signal whose handler reads the same
 * page (a library's overflow handler sampling its counters: cpc_set_sample in
 * a SIGEMT handler, PAPI reading a vperfctr in its SIGIO handler).  The page
 * is marked dead, as a restarted daemon marks its predecessor's, so whichever
 * read sees it first gives it up; another thread interrupts the reader all
 * the time.  A read under way must never have the page unmapped beneath it.
 *
 *   state_reader_signals SECONDS   prints "trials N stale-in-handler M", exits 0
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "hwperfd/state.h"

static struct hwperfd_state_reader reader;
static pthread_t main_thread;
static volatile int done;
static volatile long stale_in_handler;

static void on_signal(int sig)
{
    uint64_t counts[4];
    int generation, saved = errno;

    (void)sig;
    if (hwperfd_state_read(&reader, &generation, counts, 4) < 0 && errno == ESTALE)
        stale_in_handler++;
    errno = saved;
}

static void *interrupter(void *arg)
{
    (void)arg;
    while (!done)
        pthread_kill(main_thread, SIGUSR1);
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    double end = now() + (argc > 1 ? atof(argv[1]) : 1.0);
    struct hwperfd_state *page;
    struct sigaction sa;
    pthread_t other;
    long trials = 0;
    int fd = memfd_create("page", MFD_CLOEXEC);

    if (fd < 0 || ftruncate(fd, HWPERFD_STATE_SIZE) < 0)
        return perror("memfd"), 1;
    page = mmap(NULL, HWPERFD_STATE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (page == MAP_FAILED)
        return perror("mmap"), 1;
    page->hs_magic = HWPERFD_STATE_MAGIC;
    page->hs_version = HWPERFD_STATE_VERSION;
    page->hs_nslots = 4;
    page->hs_clock = HWPERFD_STATE_CLOCK_MANUAL;
    page->hs_flags = HWPERFD_STATE_DEAD | HWPERFD_STATE_FALLBACK;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    main_thread = pthread_self();
    pthread_create(&other, NULL, interrupter, NULL);
    while (now() < end) {
        uint64_t counts[4];
        int generation, copy = dup(fd);

        if (copy < 0 || hwperfd_state_map_fd(copy, &reader) < 0)
            return perror("hwperfd_state_map_fd"), 1;
        /* A moment outside any read, as a program has between two: a
           handler's read there is the outermost and gives the page up. */
        for (volatile int k = 0; k < 20000; k++)
            ;
        /* until a read sees the page dead, or a handler between two reads
           (the outermost read then) gave it up */
        while (hwperfd_state_read(&reader, &generation, counts, 4) == 0 || errno != ESTALE)
            if (reader.page == NULL)
                break;
        hwperfd_state_close(&reader);
        trials++;
    }
    done = 1;
    pthread_join(other, NULL);
    printf("trials %ld stale-in-handler %ld\n", trials, stale_in_handler);
    return 0;
}
