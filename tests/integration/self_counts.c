/* An IRIX-style program that counts itself through its own /proc file:
 *
 *   self_counts          PIOCENEVCTRS on "/proc/%05d" (the hwperfd-run shim
 *                        sends it to the mount), then PIOCGETEVCTRS
 *   self_counts spin N   the same, spinning N ms of CPU time between reads,
 *                        and printing each read's cycles
 *   self_counts fork     the same, but a forked child reads (the parent's file)
 *
 * Without "spin" the region is "wait for SIGUSR1" (after saying "counting
 * PID" on stderr), so a test can advance the manual clock in between. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/procfs.h>
#include <sys/hwperftypes.h>
#include <sys/hwperfmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void spin(long ms)
{
    struct timespec start, now;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
    do
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < ms);
}

int main(int argc, char **argv)
{
    hwperf_profevctrarg_t args;
    hwperf_cntr_t counts;
    char path[64];
    int fd, gen, sig, i;
    sigset_t usr1;

    snprintf(path, sizeof path, "/proc/%05d", (int)getpid());
    fd = open(path, O_RDWR);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    memset(&args, 0, sizeof args);
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_spec = (short)((0 << HWPERF_EVSHIFT) | HWPERF_CNTEN_U);  /* cycles */
    args.hwp_evctrargs.hwp_evctrl[16].hwperf_spec = (short)((9 << HWPERF_EVSHIFT) | HWPERF_CNTEN_U); /* primary data cache misses */
    gen = ioctl(fd, PIOCENEVCTRS, &args);
    if (gen < 0) {
        perror("PIOCENEVCTRS");
        return 1;
    }
    if (argc > 2 && strcmp(argv[1], "spin") == 0) {
        for (i = 0; i < 5; i++) {
            spin(atol(argv[2]));
            if (ioctl(fd, PIOCGETEVCTRS, &counts) < 0) {
                perror("PIOCGETEVCTRS");
                return 2;
            }
            printf("c0: %llu\n", (unsigned long long)counts.hwp_evctr[0]);
        }
        return 0;
    }
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, NULL);
    fprintf(stderr, "counting %d\n", (int)getpid());
    fflush(stderr);
    sigwait(&usr1, &sig);
    if (argc > 1 && strcmp(argv[1], "fork") == 0) {
        int status;
        pid_t child = fork();
        if (child > 0) {
            waitpid(child, &status, 0);
            return WIFEXITED(status) ? WEXITSTATUS(status) : 3;
        }
    }
    gen = ioctl(fd, PIOCGETEVCTRS, &counts);
    if (gen < 0) {
        perror("PIOCGETEVCTRS");
        return 2;
    }
    printf("generation: %d\n", gen);
    printf("c0: %llu\n", (unsigned long long)counts.hwp_evctr[0]);
    printf("c16: %llu\n", (unsigned long long)counts.hwp_evctr[16]);
    return 0;
}
