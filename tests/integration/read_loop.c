/* A program that reads its own counters in a tight loop, as IRIX programs
 * that sample themselves do:
 *
 *   read_loop MOUNT N          PIOCENEVCTRS on MOUNT/%05d (cycles, user mode,
 *                              slot 0), then N PIOCGETEVCTRS, every third
 *                              followed by a PIOCGETEVCTRL
 *   read_loop MOUNT N MS       the same, then a forked child spins MS ms of
 *                              CPU time and exits, and the parent reads again
 *                              once it has waited for it
 *
 * Exits 1 if a count ever went backwards.  Prints "reads N GEN COUNT" and,
 * with MS, "child BEFORE AFTER" (the parent's cycles around the child). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/procfs.h>
#include <sys/hwperftypes.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Mostly user-mode time: the CPU clock is a system call, asked rarely. */
static void spin_ms(long ms)
{
    struct timespec start, now;
    volatile unsigned long x = 0;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
    do {
        for (int i = 0; i < 100000; i++)
            x += i;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < ms);
}

static unsigned long long read_cycles(int fd, int *gen)
{
    hwperf_cntr_t counts;
    int got = ioctl(fd, PIOCGETEVCTRS, (void *)&counts);
    if (got < 0) {
        perror("PIOCGETEVCTRS");
        exit(3);
    }
    *gen = got;
    return counts.hwp_evctr[0];
}

int main(int argc, char **argv)
{
    hwperf_profevctrarg_t args;
    hwperf_eventctrl_t ctl;
    char path[4096];
    unsigned long long last = 0, now, before;
    int fd, gen, enabled, n;

    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: read_loop MOUNT N [MS]\n");
        return 2;
    }
    n = atoi(argv[2]);
    snprintf(path, sizeof path, "%s/%05d", argv[1], (int)getpid());
    fd = open(path, O_RDWR);
    if (fd < 0) {
        perror(path);
        return 2;
    }
    memset(&args, 0, sizeof args);
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_spec = HWPERF_CNTEN_U; /* event 0: cycles */
    enabled = ioctl(fd, PIOCENEVCTRS, (void *)&args);
    if (enabled < 0) {
        perror("PIOCENEVCTRS");
        return 3;
    }
    for (int i = 0; i < n; i++) {
        now = read_cycles(fd, &gen);
        if (now < last || gen != enabled) {
            printf("backwards at %d: %llu after %llu (generation %d)\n", i, now, last, gen);
            return 1;
        }
        last = now;
        if (i % 3 == 2 && ioctl(fd, PIOCGETEVCTRL, (void *)&ctl) < 0) {
            perror("PIOCGETEVCTRL");
            return 3;
        }
    }
    printf("reads %d %d %llu\n", n, gen, last);
    if (argc == 4) {
        long ms = atol(argv[3]);
        pid_t child;
        before = read_cycles(fd, &gen);
        before = read_cycles(fd, &gen);
        child = fork();
        if (child == 0) {
            spin_ms(ms);
            _exit(0);
        }
        if (child < 0 || waitpid(child, NULL, 0) != child) {
            perror("fork/waitpid");
            return 3;
        }
        now = read_cycles(fd, &gen);
        printf("child %llu %llu\n", before, now);
    }
    return 0;
}
