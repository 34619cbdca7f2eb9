/* OpenBSD pctr(4): time a loop with rdtsc() and read the global counters
 * with PCIOCRD (any user may; root sets them with pctr(1)).  Needs a daemon
 * with --cpu-type intel or amd.  Build with
 * `cc $(pkg-config --cflags --libs libpctr) pctr_read.c` and run it under
 * hwperfd-run, which sends the open of /dev/pctr to the mount.
 * README: begin */
#include <sys/types.h>
#include <sys/ioctl.h>
#include <machine/pctr.h>
#include <fcntl.h>
#include <stdio.h>

int main(void)
{
    struct pctrst st;
    pctrval start;
    int fd, n;
    volatile long i;

    start = rdtsc();
    for (i = 0; i < 20000000; i++)
        ;
    printf("loop: %llu cycles\n", (unsigned long long)(rdtsc() - start));
    if ((fd = open(_PATH_PCTR, O_RDONLY)) < 0 || ioctl(fd, PCIOCRD, &st) < 0)
        return perror(_PATH_PCTR), 1;
    for (n = 0; n < PCTR_NUM; n++)
        printf("ctr%d: function %#x, count %llu\n", n, st.pctr_fn[n], (unsigned long long)st.pctr_hwc[n]);
    return 0;
}
/* README: end */
