/* The same loop counted four times, as PAPI's first ctest counts it:
 *
 *   same_work MOUNT
 *
 * PIOCENEVCTRS on MOUNT/%05d (cycles in user mode, slot 0; an event of
 * counter 1 besides, slot 21), then: 20 000 000 multiply-adds, a read; a
 * reset (PIOCGETEVCTRL, PIOCSETEVCTRL with the same control: counts from
 * zero); three times more the loop and a read.  Every call is a request to
 * the daemon (the file is the mount's own: no state page answers it), so
 * the program waits on the daemon between loops.  Prints, for every loop,
 * "loop CYCLES CPU_NS": the cycles it counted and its process CPU clock. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/procfs.h>
#include <sys/hwperftypes.h>
#include <time.h>
#include <unistd.h>

#define ITERATIONS 20000000 /* PAPI's NUM_FLOPS */

static double a = 0.5, b = 2.2;

/* PAPI's dummy(): the sum goes through memory every iteration. */
static void dummy(void *p)
{
    __asm__ volatile("" : : "r"(p) : "memory");
}

static void multiply_adds(int n)
{
    double c = 0.11;
    for (int i = 0; i < n; i++) {
        c += a * b;
        dummy(&c);
    }
}

static long long cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long cycles(int fd)
{
    hwperf_cntr_t counts;
    if (ioctl(fd, PIOCGETEVCTRS, &counts) < 0) {
        perror("PIOCGETEVCTRS");
        exit(1);
    }
    return (long long)counts.hwp_evctr[0];
}

int main(int argc, char **argv)
{
    hwperf_profevctrarg_t args;
    hwperf_eventctrl_t control;
    long long count[4], cpu[5], first_end;
    char path[4096];
    int fd, i;

    if (argc != 2) {
        fprintf(stderr, "usage: same_work MOUNT\n");
        return 2;
    }
    snprintf(path, sizeof path, "%s/%05d", argv[1], (int)getpid());
    if ((fd = open(path, O_RDWR)) < 0) {
        perror(path);
        return 1;
    }
    memset(&args, 0, sizeof args);
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_spec = (short)HWPERF_CNTEN_U;
    args.hwp_evctrargs.hwp_evctrl[21].hwperf_spec = (short)(HWPERF_CNTEN_U | (5 << 5));
    if (ioctl(fd, PIOCENEVCTRS, &args) < 0) {
        perror("PIOCENEVCTRS");
        return 1;
    }
    cpu[0] = cpu_ns();
    multiply_adds(ITERATIONS);
    count[0] = cycles(fd);
    first_end = cpu_ns();
    if (ioctl(fd, PIOCGETEVCTRL, &control) < 0 || ioctl(fd, PIOCSETEVCTRL, &args) < 0) {
        perror("PIOCSETEVCTRL");
        return 1;
    }
    cpu[1] = cpu_ns();
    for (i = 1; i < 4; i++) {
        multiply_adds(ITERATIONS);
        count[i] = cycles(fd);
        cpu[i + 1] = cpu_ns();
    }
    printf("loop %lld %lld\n", count[0], first_end - cpu[0]);
    printf("loop %lld %lld\n", count[1], cpu[2] - cpu[1]);
    for (i = 2; i < 4; i++)
        printf("loop %lld %lld\n", count[i] - count[i - 1], cpu[i + 1] - cpu[i]);
    return 0;
}
