/* A user-mode loop that reads its own counters every INTERVAL ms of CPU
 * time, as PAPI's consistency tests and a sampling user do:
 *
 *   interval_loop MOUNT READS INTERVAL
 *
 * PIOCENEVCTRS on MOUNT/%05d: cycles in user mode (slot 0, counter 0) and
 * in user mode and exception level (slot 16, counter 1; exception level
 * counts a share of system time).  Prints, for every read, "read BEFORE
 * AFTER GEN U UE" with the process's CPU clock taken just before and just
 * after the read (the daemon takes its own in between), then exits 0. */
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

static long long cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* User-mode work: the CPU clock (a system call) is asked every few ms only. */
static void spin_until(long long end)
{
    volatile unsigned long x = 0;
    while (cpu_ns() < end)
        for (int i = 0; i < 2000000; i++)
            x += i;
}

int main(int argc, char **argv)
{
    hwperf_profevctrarg_t args;
    hwperf_cntr_t counts;
    char path[4096];
    int fd, gen, reads, i;
    long long interval, next;

    if (argc != 4) {
        fprintf(stderr, "usage: interval_loop MOUNT READS INTERVAL_MS\n");
        return 2;
    }
    reads = atoi(argv[2]);
    interval = atoll(argv[3]) * 1000000LL;
    snprintf(path, sizeof path, "%s/%05d", argv[1], (int)getpid());
    fd = open(path, O_RDWR);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    memset(&args, 0, sizeof args);
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_spec = (short)HWPERF_CNTEN_U;
    args.hwp_evctrargs.hwp_evctrl[16].hwperf_spec = (short)(HWPERF_CNTEN_U | HWPERF_CNTEN_E);
    gen = ioctl(fd, PIOCENEVCTRS, &args);
    if (gen < 0) {
        perror("PIOCENEVCTRS");
        return 1;
    }
    next = cpu_ns();
    for (i = 0; i <= reads; i++) {
        long long before = cpu_ns(), after;
        if ((gen = ioctl(fd, PIOCGETEVCTRS, &counts)) < 0) {
            perror("PIOCGETEVCTRS");
            return 1;
        }
        after = cpu_ns();
        printf("read %lld %lld %d %lld %lld\n", before, after, gen, (long long)counts.hwp_evctr[0],
               (long long)counts.hwp_evctr[16]);
        fflush(stdout);
        next += interval;
        spin_until(next);
    }
    return 0;
}
