/*
 * Time PIOCGETEVCTRS round trips on one file.
 *
 *     ioctl_client [-n CALLS] [-w WARMUP] [-z SETTLE_US] [-e [-s]] PATH
 *
 * PATH is the file to open; if it is a directory (an hwperfd mount), the
 * client opens PATH/%05d of its own pid.  With -e it first enables the
 * counters on that file (PIOCENEVCTRS: event 0, cycles, in user mode in
 * slot 0), so that each PIOCGETEVCTRS does real work in hwperfd.  Then
 * With -s it then maps its state page (HWPERFD_PIOCSTATEPAGE) and times
 * reads of its own counters from it (lib/state.c) instead of the ioctl;
 * a read the page sends to the ioctl (EAGAIN: the daemon is writing it, or
 * it cannot show the counts) takes the ioctl, as the libraries do, and is
 * counted (fallbacks=).
 * With -z it sleeps SETTLE_US microseconds once set up, before the first
 * call (bench/hotreads.py: where the scheduler places client and server).
 * WARMUP untimed and CALLS timed ioctls; each round trip is timed with
 * clock_gettime(CLOCK_MONOTONIC), and with the calling thread's CPU clock
 * (what the trip costs the caller itself: cpu_median_us).  Output: one
 * machine-readable line
 *
 *     RESULT calls=N median_us=.. p90_us=.. p99_us=.. mean_us=.. min_us=.. max_us=.. cpu_median_us=.. fallbacks=N
 *
 * and one line for people.  Exit status 0 only if every call succeeded.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/procfs.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hwperfd/state.h"

static int cmp_u64(const void *a, const void *b)
{
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted values, p in 0..100. */
static double pct_us(const unsigned long long *v, long n, double p)
{
    long k = (long)(p / 100.0 * n + 0.5);
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    return v[k - 1] / 1000.0;
}

static unsigned long long clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static unsigned long long now_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

static long fallbacks;

/* One read of our own counters from the state page, or from the ioctl where
 * the page sends the reader there. */
static int read_state(int fd, struct hwperfd_state_reader *reader, hwperf_cntr_t *cnts)
{
    int generation;
    if (hwperfd_state_read(reader, &generation, cnts->hwp_evctr, HWPERF_EVENTMAX) == 0)
        return generation;
    if (errno != EAGAIN)
        return -1;
    fallbacks++;
    return ioctl(fd, PIOCGETEVCTRS, (void *)cnts);
}

static int enable_counters(int fd)
{
    hwperf_profevctrarg_t args;
    int gen;

    memset(&args, 0, sizeof args);
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_mode = HWPERF_CNTEN_U;
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_ev = 0; /* cycles */
    gen = ioctl(fd, PIOCENEVCTRS, (void *)&args);
    if (gen < 0) {
        perror("PIOCENEVCTRS");
        return -1;
    }
    return gen;
}

int main(int argc, char **argv)
{
    long calls = 20000, warmup = -1, settle_us = 0, i;
    int enable = 0, state = 0, opt, fd, gen = 0;
    struct hwperfd_state_reader reader;
    char path[4096];
    struct stat st;
    hwperf_cntr_t cnts;
    unsigned long long *t, *cpu, sum = 0;

    while ((opt = getopt(argc, argv, "n:w:z:es")) != -1) {
        switch (opt) {
        case 'n': calls = atol(optarg); break;
        case 'w': warmup = atol(optarg); break;
        case 'z': settle_us = atol(optarg); break;
        case 'e': enable = 1; break;
        case 's': state = 1; break;
        default:
            fprintf(stderr, "usage: %s [-n CALLS] [-w WARMUP] [-z SETTLE_US] [-e [-s]] PATH\n", argv[0]);
            return 2;
        }
    }
    if (optind != argc - 1 || calls < 1 || settle_us < 0 || (state && !enable)) {
        fprintf(stderr, "usage: %s [-n CALLS] [-w WARMUP] [-z SETTLE_US] [-e [-s]] PATH\n", argv[0]);
        return 2;
    }
    if (warmup < 0)
        warmup = calls;
    if (stat(argv[optind], &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(path, sizeof path, "%s/%05d", argv[optind], (int)getpid());
    else
        snprintf(path, sizeof path, "%s", argv[optind]);

    fd = open(path, O_RDWR);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    if (enable && (gen = enable_counters(fd)) < 0)
        return 1;
    if (state && hwperfd_state_open(fd, &reader) != 0) {
        perror("HWPERFD_PIOCSTATEPAGE");
        return 1;
    }
    if (settle_us > 0)
        usleep((useconds_t)settle_us);
    t = malloc(sizeof *t * calls);
    cpu = malloc(sizeof *cpu * calls);
    if (t == NULL || cpu == NULL) {
        perror("malloc");
        return 1;
    }
    for (i = 0; i < warmup; i++) {
        int r = state ? read_state(fd, &reader, &cnts) : ioctl(fd, PIOCGETEVCTRS, (void *)&cnts);
        if (r < 0 || (enable && r != gen)) {
            fprintf(stderr, "warm-up PIOCGETEVCTRS: returned %d (generation %d): %s\n", r, gen,
                    r < 0 ? strerror(errno) : "generation changed");
            return 1;
        }
    }
    for (i = 0; i < calls; i++) {
        unsigned long long c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), t0 = now_ns();
        int r = state ? read_state(fd, &reader, &cnts) : ioctl(fd, PIOCGETEVCTRS, (void *)&cnts);
        t[i] = now_ns() - t0;
        cpu[i] = clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
        if (r < 0) {
            perror(state ? "state page" : "PIOCGETEVCTRS");
            return 1;
        }
        sum += t[i];
    }
    qsort(t, calls, sizeof *t, cmp_u64);
    qsort(cpu, calls, sizeof *cpu, cmp_u64);
    printf("RESULT calls=%ld median_us=%.3f p90_us=%.3f p99_us=%.3f mean_us=%.3f min_us=%.3f max_us=%.3f"
           " cpu_median_us=%.3f fallbacks=%ld\n",
           calls, pct_us(t, calls, 50), pct_us(t, calls, 90), pct_us(t, calls, 99),
           sum / 1000.0 / calls, t[0] / 1000.0, t[calls - 1] / 1000.0, pct_us(cpu, calls, 50), fallbacks);
    printf("%s: %ld %s: median %.3f us, p90 %.3f us, p99 %.3f us"
           " (slot 0 count %llu)\n",
           path, calls, state ? "reads from the state page" : "PIOCGETEVCTRS round trips", pct_us(t, calls, 50), pct_us(t, calls, 90), pct_us(t, calls, 99),
           (unsigned long long)cnts.hwp_evctr[0]);
    close(fd);
    free(t);
    free(cpu);
    return 0;
}
