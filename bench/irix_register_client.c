/*
 * Time what PAPI's IRIX substrate does at each thread it registers: open the
 * process file "/proc/%05d" of getpid(), PIOCGETEVCTRL (PIOCENEVCTRS at the
 * thread's first, when it has no counters yet), close - in a thread of its
 * own, as an OpenMP thread registers at each parallel region.  Run under
 * hwperfd-run's shim (LD_PRELOAD), which sends the open to the mount.
 *
 *     irix_register_client [-n REGISTRATIONS] [-w WARMUP]
 *
 * Output: RESULT reg_ns=.. reg_p99_ns=.. (the median and 99th percentile of
 * one registration's wall time).  Exit status 0 only if every call succeeded.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/procfs.h>
#include <time.h>
#include <unistd.h>

static long calls = 2000, warmup = 200;
static unsigned long long *t;
static int failed;

static unsigned long long now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

static int register_once(const char *path)
{
    hwperf_eventctrl_t control;
    hwperf_profevctrarg_t args;
    int fd = open(path, O_RDONLY), gen, i;

    if (fd < 0)
        return -1;
    gen = ioctl(fd, PIOCGETEVCTRL, &control);
    if (gen < 0) {
        memset(&args, 0, sizeof args);
        for (i = 0; i < HWPERF_EVENTMAX; i++)
            args.hwp_evctrargs.hwp_evctrl[i].hwperf_creg.hwp_mode = HWPERF_CNTEN_U;
        gen = ioctl(fd, PIOCENEVCTRS, &args);
    }
    close(fd);
    return gen < 1 ? -1 : 0;
}

static void *registering(void *unused)
{
    char path[64];
    long i;

    (void)unused;
    snprintf(path, sizeof path, "/proc/%05d", (int)getpid());
    for (i = 0; i < warmup + calls; i++) {
        unsigned long long t0 = now_ns();

        if (register_once(path) < 0) {
            perror(path);
            failed = 1;
            return NULL;
        }
        if (i >= warmup)
            t[i - warmup] = now_ns() - t0;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t thread;
    int opt;

    while ((opt = getopt(argc, argv, "n:w:")) != -1) {
        switch (opt) {
        case 'n': calls = atol(optarg); break;
        case 'w': warmup = atol(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-n REGISTRATIONS] [-w WARMUP]\n", argv[0]);
            return 2;
        }
    }
    if (calls < 1 || warmup < 0 || (t = malloc(sizeof *t * calls)) == NULL)
        return 2;
    if (pthread_create(&thread, NULL, registering, NULL) != 0 || pthread_join(thread, NULL) != 0 || failed)
        return 1;
    qsort(t, calls, sizeof *t, cmp_u64);
    printf("RESULT reg_ns=%llu reg_p99_ns=%llu\n", t[calls / 2], t[(calls * 99) / 100 < calls ? (calls * 99) / 100 : calls - 1]);
    return 0;
}
