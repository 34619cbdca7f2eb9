/* spin_cpu MS: run MS ms of CPU time (user mode mostly: the CPU clock, a
 * system call, is asked every few microseconds' work), then exit. */
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    struct timespec ts;
    long long end = (long long)(atof(argc > 1 ? argv[1] : "1") * 1e6);
    volatile unsigned long x = 0;
    for (;;) {
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        if (ts.tv_sec * 1000000000LL + ts.tv_nsec >= end)
            return 0;
        for (int i = 0; i < 20000; i++)
            x += i;
    }
}
