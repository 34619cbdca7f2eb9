/* How PAPI's IRIX substrate drove /proc: a read-only open, PIOCGETEVCTRL
 * expected to fail, acquire with every slot in user mode on event 0, then
 * PIOCSETEVCTRL with the real events and PIOCGETEVCTRS.
 * Usage: papi_style [-w] [pid]   (default: itself) */
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
    hwperf_profevctrarg_t args;
    hwperf_eventctrl_t ctl;
    hwperf_cntr_t cnts;
    char pfile[4096];
    int fd, i, gen, wait = 0, argi = 1;
    pid_t pid = getpid();

    if (argi < argc && strcmp(argv[argi], "-w") == 0) { wait = 1; argi++; }
    if (argi < argc) pid = atoi(argv[argi]);
    sprintf(pfile, "/proc/%05d", (int)pid);
    fd = open(pfile, O_RDONLY);
    if (fd < 0) { perror(pfile); return 2; }

    /* IRIX 6.5: ESRCH, the process has no counter structure yet. */
    if (ioctl(fd, PIOCGETEVCTRL, (void *)&ctl) >= 0 || errno != ESRCH) {
        fprintf(stderr, "PIOCGETEVCTRL should fail with ESRCH before acquiring\n");
        return 3;
    }
    memset(&args, 0, sizeof args);
    for (i = 0; i < HWPERF_EVENTMAX; i++)
        args.hwp_evctrargs.hwp_evctrl[i].hwperf_spec = HWPERF_CNTEN_U;
    gen = ioctl(fd, PIOCENEVCTRS, (void *)&args);
    if (gen < 0) { perror("PIOCENEVCTRS"); return 4; }

    /* the real events: cycles (slot 0) and graduated instructions (slot 17) */
    memset(&args, 0, sizeof args);
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_spec = HWPERF_CNTEN_U | (HWPERF_C0PRFCNT0_CYCLES << HWPERF_EVSHIFT);
    args.hwp_evctrargs.hwp_evctrl[17].hwperf_spec = HWPERF_CNTEN_U | (HWPERF_C0PRFCNT1_GINSTR << HWPERF_EVSHIFT);
    gen = ioctl(fd, PIOCSETEVCTRL, (void *)&args);
    if (gen < 0) { perror("PIOCSETEVCTRL"); return 5; }
    if (ioctl(fd, PIOCGETEVCTRL, (void *)&ctl) != gen) { perror("PIOCGETEVCTRL"); return 6; }

    hwperfd_example_body(wait);

    if (ioctl(fd, PIOCGETEVCTRS, (void *)&cnts) != gen) { perror("PIOCGETEVCTRS"); return 7; }
    printf("generation: %d\n", gen);
    printf("slot0 spec: %d\n", ctl.hwp_evctrl[0].hwperf_spec);
    printf("cycles: %llu\n", (unsigned long long)cnts.hwp_evctr[0]);
    printf("graduated instructions: %llu\n", (unsigned long long)cnts.hwp_evctr[17]);
    ioctl(fd, PIOCRELEVCTRS);
    return 0;
}
