/* The EXAMPLE of r10k_counters(5): count primary instruction and data cache
 * misses (event 9 on both counters) in user mode for this program.  It opens
 * "/proc/%05d" as on IRIX: run it with hwperfd-run, whose preloaded shim sends
 * that open to hwperfd's mount. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/procfs.h>
#include <sys/hwperftypes.h>
#include <sys/hwperfmacros.h>
#include <unistd.h>
#include "example_body.h"

int main(int argc, char **argv)
{
    hwperf_profevctrarg_t evctr_args;
    hwperf_cntr_t cnts;
    char pfile[4096];
    int fd, i, generation1, generation2;
    int wait = argc > 1 && strcmp(argv[1], "-w") == 0;
    pid_t pid;

    pid = getpid();
    sprintf(pfile, "/proc/%05d", pid);
    fd = open(pfile, O_RDWR);
    if (fd < 0) {
        perror(pfile);
        exit(errno);
    }
    for (i = 0; i < HWPERF_CNTEVENTMAX; i++) {
        if (i == 9) {
            evctr_args.hwp_evctrargs.hwp_evctrl[i].hwperf_creg.hwp_mode = HWPERF_CNTEN_U;
            evctr_args.hwp_evctrargs.hwp_evctrl[i].hwperf_creg.hwp_ie = 1;
            evctr_args.hwp_evctrargs.hwp_evctrl[i].hwperf_creg.hwp_ev = i;
            evctr_args.hwp_ovflw_freq[i] = 0;
        } else {
            evctr_args.hwp_evctrargs.hwp_evctrl[i].hwperf_spec = 0;
            evctr_args.hwp_ovflw_freq[i] = 0;
        }
    }
    for (i = HWPERF_CNT1BASE; i < HWPERF_EVENTMAX; i++) {
        if (i == 25) { /* the page tests i == 9 here, which never holds; 25 is event 9 of counter 1 */
            evctr_args.hwp_evctrargs.hwp_evctrl[i].hwperf_creg.hwp_mode = HWPERF_CNTEN_U;
            evctr_args.hwp_evctrargs.hwp_evctrl[i].hwperf_creg.hwp_ie = 1;
            evctr_args.hwp_evctrargs.hwp_evctrl[i].hwperf_creg.hwp_ev = i - HWPERF_CNT1BASE;
            evctr_args.hwp_ovflw_freq[i] = 0;
        } else {
            evctr_args.hwp_evctrargs.hwp_evctrl[i].hwperf_spec = 0;
            evctr_args.hwp_ovflw_freq[i] = 0;
        }
    }
    evctr_args.hwp_ovflw_sig = 0;
    generation1 = ioctl(fd, PIOCENEVCTRS, (void *)&evctr_args);
    if (generation1 < 0) {
        perror("failed to acquire counters");
        exit(errno);
    }

    hwperfd_example_body(wait);

    /* now read the counter values */
    if ((generation2 = ioctl(fd, PIOCGETEVCTRS, (void *)&cnts)) < 0) {
        perror("PIOCGETEVCTRS returns error");
        exit(errno);
    }
    /* generation number should be the same */
    if (generation1 != generation2) {
        printf("program lost event counters\n");
        exit(0);
    }
    /* release the counters */
    if ((ioctl(fd, PIOCRELEVCTRS)) < 0) {
        perror("prioctl PIOCRELEVCTRS returns error");
        exit(errno);
    }
    printf("generation: %d\n", generation1);
    printf("instruction cache misses: %llu\n", (unsigned long long)cnts.hwp_evctr[9]);
    printf("data cache misses: %llu\n", (unsigned long long)cnts.hwp_evctr[25]);
    exit(0);
}
