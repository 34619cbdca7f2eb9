/*
 * Time PIOCSETEVCTRL round trips on one's own process file: each call
 * changes what is counted (the generation moves), so each is written to the
 * set-up store before it answers (docs/restart.md).
 *
 *     setctrl_client [-n CALLS] MOUNT
 *
 * Enables cycles in slot 0, then alternates slot 0 between cycles and
 * graduated instructions.  Output: "RESULT calls=N median_us=.. p90_us=..".
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

int main(int argc, char **argv)
{
    hwperf_profevctrarg_t args[2];
    char path[4096];
    long n = 2000, i;
    int fd, opt;
    unsigned long long *took;

    while ((opt = getopt(argc, argv, "n:")) != -1)
        if (opt == 'n')
            n = atol(optarg);
    if (optind >= argc || n <= 0) {
        fprintf(stderr, "usage: setctrl_client [-n CALLS] MOUNT\n");
        return 2;
    }
    snprintf(path, sizeof path, "%s/%05d", argv[optind], (int)getpid());
    if ((fd = open(path, O_RDWR)) < 0) {
        perror(path);
        return 1;
    }
    memset(args, 0, sizeof args);
    args[0].hwp_evctrargs.hwp_evctrl[0].hwperf_spec = (short)((0 << HWPERF_EVSHIFT) | HWPERF_CNTEN_U);
    args[1].hwp_evctrargs.hwp_evctrl[0].hwperf_spec = (short)((15 << HWPERF_EVSHIFT) | HWPERF_CNTEN_U);
    if (ioctl(fd, PIOCENEVCTRS, &args[0]) < 0) {
        perror("PIOCENEVCTRS");
        return 1;
    }
    took = calloc((size_t)n, sizeof *took);
    for (i = -200; i < n; i++) { /* 200 untimed first */
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        if (ioctl(fd, PIOCSETEVCTRL, &args[(i + 1) & 1]) < 0) {
            perror("PIOCSETEVCTRL");
            return 1;
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (i >= 0)
            took[i] = (unsigned long long)((b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
    }
    ioctl(fd, PIOCRELEVCTRS);
    qsort(took, (size_t)n, sizeof *took, cmp_u64);
    printf("RESULT calls=%ld median_us=%.2f p90_us=%.2f\n", n, took[n / 2] / 1e3, took[n * 9 / 10] / 1e3);
    return 0;
}
