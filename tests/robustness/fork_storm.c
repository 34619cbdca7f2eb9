/* A counted fork storm: the parent counts cycles in user mode through its
 * /proc file, then W workers each fork C children that burn about 1 ms of
 * user time and exit; everyone waits for their children.  Prints the
 * parent's cycles and what getrusage says the whole tree used in user mode
 * (self + waited-for children), in microseconds.
 * Usage: fork_storm MOUNT W C */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/procfs.h>
#include <sys/hwperftypes.h>
#include <time.h>
#include <unistd.h>

static void burn_user_ms(double ms)
{
    struct timespec t0, t;
    volatile unsigned long x = 0;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    do {
        for (int i = 0; i < 10000; i++)
            x += i;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1e3 + (t.tv_nsec - t0.tv_nsec) / 1e6 < ms);
}

static long long user_us(int who)
{
    struct rusage ru;
    getrusage(who, &ru);
    return ru.ru_utime.tv_sec * 1000000LL + ru.ru_utime.tv_usec;
}

int main(int argc, char **argv)
{
    hwperf_profevctrarg_t args;
    hwperf_cntr_t cnts;
    char path[4096];
    int fd, gen, workers, children;

    if (argc != 4) { fprintf(stderr, "usage: fork_storm MOUNT W C\n"); return 2; }
    workers = atoi(argv[2]);
    children = atoi(argv[3]);
    snprintf(path, sizeof path, "%s/%05d", argv[1], (int)getpid());
    fd = open(path, O_RDWR);
    if (fd < 0) { perror(path); return 2; }
    memset(&args, 0, sizeof args);
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_spec = HWPERF_CNTEN_U; /* cycles */
    gen = ioctl(fd, PIOCENEVCTRS, (void *)&args);
    if (gen < 0) { perror("PIOCENEVCTRS"); return 3; }

    for (int w = 0; w < workers; w++) {
        if (fork() == 0) {
            for (int c = 0; c < children; c++) {
                if (fork() == 0) {
                    burn_user_ms(1.0);
                    _exit(0);
                }
            }
            while (wait(NULL) > 0)
                ;
            _exit(0);
        }
    }
    while (wait(NULL) > 0)
        ;
    if (ioctl(fd, PIOCGETEVCTRS, (void *)&cnts) < 0) { perror("PIOCGETEVCTRS"); return 4; }
    printf("%llu %lld\n", (unsigned long long)cnts.hwp_evctr[0],
           user_us(RUSAGE_SELF) + user_us(RUSAGE_CHILDREN));
    return 0;
}
