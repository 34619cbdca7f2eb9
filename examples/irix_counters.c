/* IRIX /proc event counters (r10k_counters(5)): count this program's cycles
 * and primary data cache misses in user mode.  Build with
 * `cc $(pkg-config --cflags --libs hwperfd) irix_counters.c` and run it under
 * hwperfd-run, which sends the open of "/proc/%05d" to the mount.
 * README: begin */
#include <fcntl.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/procfs.h>
#include <unistd.h>

int main(void)
{
    hwperf_profevctrarg_t args = {0};
    hwperf_cntr_t counts;
    char path[32];
    int fd, gen;
    volatile long i;

    args.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_mode = HWPERF_CNTEN_U;  /* slot 0: cycles */
    args.hwp_evctrargs.hwp_evctrl[25].hwperf_creg.hwp_mode = HWPERF_CNTEN_U; /* slot 25, event 9 of */
    args.hwp_evctrargs.hwp_evctrl[25].hwperf_creg.hwp_ev = 9;                /* counter 1: L1 D misses */
    sprintf(path, "/proc/%05d", (int)getpid());
    if ((fd = open(path, O_RDWR)) < 0 || (gen = ioctl(fd, PIOCENEVCTRS, &args)) < 0)
        return perror(path), 1;
    for (i = 0; i < 20000000; i++)
        ;
    if (ioctl(fd, PIOCGETEVCTRS, &counts) != gen)   /* another generation: counters lost */
        return perror("PIOCGETEVCTRS"), 1;
    printf("cycles %llu, L1 data cache misses %llu\n",
           (unsigned long long)counts.hwp_evctr[0], (unsigned long long)counts.hwp_evctr[25]);
    return ioctl(fd, PIOCRELEVCTRS) < 0;
}
/* README: end */
