/* The restart reproducer (docs/restart.md): an IRIX program counting its
 * own user-mode cycles through "/proc/%05d" (the hwperfd-run shim sends it to
 * the mount), reading PIOCGETEVCTRS every 50 ms of CPU time, while the
 * daemon behind it is killed and started again.
 *
 *   irix_restart [THRESHOLD [quiet]]
 *
 * Prints "counting GEN" once enabled (with THRESHOLD, cycles overflow every
 * THRESHOLD events and SIGUSR2 is counted), spins, and after 1 s of CPU time
 * prints "ready SIGNALS" and reads on (with "quiet", spins without a call)
 * until a line arrives on stdin; then it spins 0.5 s more and prints
 * "final GEN CYCLES USER_NS SIGNALS SYSTEM_NS".  Any failed call
 * prints its errno and exits 2: a restart must cost a pause, never an error.
 *
 * With IRIX_RESTART_STORM in the environment, a fork storm: after each read
 * it forks a child that spins 2 ms of CPU time (counting, as it inherits
 * the counters) and exits, and waits for it, so a waited-for child's counts
 * are the parent's (r10k_counters(5)); USER_NS and SYSTEM_NS then include
 * the children's. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/procfs.h>
#include <sys/hwperftypes.h>
#include <sys/hwperfmacros.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t signals;

static void on_overflow(int sig)
{
    (void)sig;
    signals++;
}

static long long cpu_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

static int storm;

static long long times_ns(int system)
{
    struct rusage ru;
    long long ns = 0;
    int who[2] = {RUSAGE_SELF, RUSAGE_CHILDREN};
    for (int i = 0; i < 1 + storm; i++) {
        getrusage(who[i], &ru);
        ns += system ? (long long)ru.ru_stime.tv_sec * 1000000000LL + ru.ru_stime.tv_usec * 1000LL
                     : (long long)ru.ru_utime.tv_sec * 1000000000LL + ru.ru_utime.tv_usec * 1000LL;
    }
    return ns;
}

static long long user_ns(void)
{
    return times_ns(0);
}

static long long system_ns(void)
{
    return times_ns(1);
}

/* One child of the storm: it counts 2 ms of CPU time and exits. */
static void fork_one(void)
{
    pid_t child = fork();
    if (child < 0) {
        printf("error fork %d %s\n", errno, strerror(errno));
        exit(2);
    }
    if (child == 0) {
        long long end = cpu_ns() + 2000000LL;
        while (cpu_ns() < end)
            for (volatile int k = 0; k < 10000; k++)
                ;
        _exit(0);
    }
    while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
        ;
}

static int fd, gen;

/* Spin `ms` of CPU time, reading the counters every 50 ms of it. */
static void spin_reading(long ms)
{
    hwperf_cntr_t counts;
    long long end = cpu_ns() + ms * 1000000LL, next = cpu_ns();
    while (cpu_ns() < end) {
        for (volatile int k = 0; k < 100000; k++) /* user time: CPU clocks are system calls */
            ;
        if (cpu_ns() >= next) {
            int got = ioctl(fd, PIOCGETEVCTRS, &counts);
            if (got < 0) {
                printf("error PIOCGETEVCTRS %d %s\n", errno, strerror(errno));
                exit(2);
            }
            if (got != gen) {
                printf("error generation %d became %d\n", gen, got);
                exit(2);
            }
            next = cpu_ns() + 50000000LL;
            if (storm)
                fork_one();
        }
    }
}

int main(int argc, char **argv)
{
    hwperf_profevctrarg_t args;
    hwperf_cntr_t counts;
    char path[64];
    struct pollfd in = {0, POLLIN, 0};

    setvbuf(stdout, NULL, _IOLBF, 0);
    storm = getenv("IRIX_RESTART_STORM") != NULL;
    signal(SIGUSR2, on_overflow);
    snprintf(path, sizeof path, "/proc/%05d", (int)getpid());
    fd = open(path, O_RDWR);
    if (fd < 0) {
        printf("error open %d %s\n", errno, strerror(errno));
        return 2;
    }
    memset(&args, 0, sizeof args);
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_spec = (short)((0 << HWPERF_EVSHIFT) | HWPERF_CNTEN_U); /* cycles */
    if (argc > 1) {
        args.hwp_evctrargs.hwp_evctrl[0].hwperf_spec |= 0x10; /* interrupt on overflow */
        args.hwp_ovflw_freq[0] = atoi(argv[1]);
        args.hwp_ovflw_sig = SIGUSR2;
    }
    gen = ioctl(fd, PIOCENEVCTRS, &args);
    if (gen < 0) {
        printf("error PIOCENEVCTRS %d %s\n", errno, strerror(errno));
        return 2;
    }
    printf("counting %d\n", gen);
    spin_reading(1000);
    printf("ready %d\n", (int)signals);
    while (poll(&in, 1, 0) == 0) {
        if (argc > 2 && strcmp(argv[2], "quiet") == 0)
            for (volatile int k = 0; k < 1000000; k++)
                ;
        else
            spin_reading(50);
    }
    spin_reading(500);
    if (ioctl(fd, PIOCGETEVCTRS, &counts) != gen) {
        printf("error final read %d %s\n", errno, strerror(errno));
        return 2;
    }
    printf("final %d %llu %lld %d %lld\n", gen, (unsigned long long)counts.hwp_evctr[0], user_ns(), (int)signals,
           system_ns());
    return 0;
}
