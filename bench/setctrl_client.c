/*
 * Time PIOCSETEVCTRL round trips on one's own process file: each call
 * changes what is counted (the generation moves), so each is written to the
 * set-up store before it answers (docs/restart.md).
 *
 *     setctrl_client [-n CALLS] MOUNT...
 *
 * Enables cycles in slot 0 on each mount, then alternates slot 0 between
 * cycles and graduated instructions, one call on each mount in turn (each
 * first in turn), so that daemons compared see the machine's load alike.
 * Output, a line a mount: "RESULT mount=M calls=N median_us=.. p90_us=..".
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/procfs.h>
#include <sys/hwperftypes.h>
#include <sys/hwperfmacros.h>
#include <time.h>
#include <unistd.h>

static int cmp_u64(const void *a, const void *b)
{
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

static long long elapsed_ns(const struct timespec *a, const struct timespec *b)
{
    return (b->tv_sec - a->tv_sec) * 1000000000LL + (b->tv_nsec - a->tv_nsec);
}

int main(int argc, char **argv)
{
    hwperf_profevctrarg_t args[2];
    char path[4096];
    long n = 2000, i;
    int opt, m, mounts, fds[8];
    unsigned long long *took[8];

    while ((opt = getopt(argc, argv, "n:")) != -1)
        if (opt == 'n')
            n = atol(optarg);
    mounts = argc - optind;
    if (mounts < 1 || mounts > 8 || n <= 0) {
        fprintf(stderr, "usage: setctrl_client [-n CALLS] MOUNT...\n");
        return 2;
    }
    memset(args, 0, sizeof args);
    args[0].hwp_evctrargs.hwp_evctrl[0].hwperf_spec = (short)((0 << HWPERF_EVSHIFT) | HWPERF_CNTEN_U);
    args[1].hwp_evctrargs.hwp_evctrl[0].hwperf_spec = (short)((15 << HWPERF_EVSHIFT) | HWPERF_CNTEN_U);
    for (m = 0; m < mounts; m++) {
        snprintf(path, sizeof path, "%s/%05d", argv[optind + m], (int)getpid());
        if ((fds[m] = open(path, O_RDWR)) < 0) {
            perror(path);
            return 1;
        }
        if (ioctl(fds[m], PIOCENEVCTRS, &args[0]) < 0) {
            perror("PIOCENEVCTRS");
            return 1;
        }
        took[m] = calloc((size_t)n, sizeof *took[m]);
    }
    for (i = -200; i < n; i++) { /* 200 untimed first */
        for (m = 0; m < mounts; m++) {
            int which = (int)((m + (i < 0 ? -i : i)) % mounts); /* each mount first in turn */
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            if (ioctl(fds[which], PIOCSETEVCTRL, &args[(i + 1) & 1]) < 0) {
                perror("PIOCSETEVCTRL");
                return 1;
            }
            clock_gettime(CLOCK_MONOTONIC, &b);
            if (i >= 0)
                took[which][i] = (unsigned long long)elapsed_ns(&a, &b);
        }
    }
    for (m = 0; m < mounts; m++) {
        ioctl(fds[m], PIOCRELEVCTRS);
        qsort(took[m], (size_t)n, sizeof *took[m], cmp_u64);
        printf("RESULT mount=%s calls=%ld median_us=%.2f p90_us=%.2f\n", argv[optind + m], n,
               took[m][n / 2] / 1e3, took[m][n * 9 / 10] / 1e3);
    }
    return 0;
}
