/* The slot rule PAPI's IRIX substrate and the r10k_counters(5) example rely
 * on, on every CPU type: slot i written with hwp_ev = i mod 16 counts event
 * i, read back from hwp_evctr[i].  Each argument is a slot, or slot:hwp_ev
 * to write another value.  Prints "slot N: count" per slot.
 * Usage: slot_rule [-w] SLOT[:EV] ... */
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
    hwperf_cntr_t cnts;
    char pfile[64];
    int slots[HWPERF_EVENTMAX], n = 0, i, fd, gen, argi = 1, wait = 0;

    if (argi < argc && strcmp(argv[argi], "-w") == 0) { wait = 1; argi++; }
    memset(&args, 0, sizeof args);
    for (; argi < argc && n < HWPERF_EVENTMAX; argi++) {
        char *colon;
        int slot = atoi(argv[argi]);
        int ev = (colon = strchr(argv[argi], ':')) ? atoi(colon + 1) : slot % HWPERF_CNTEVENTMAX;
        if (slot < 0 || slot >= HWPERF_EVENTMAX) { fprintf(stderr, "bad slot %s\n", argv[argi]); return 2; }
        args.hwp_evctrargs.hwp_evctrl[slot].hwperf_creg.hwp_mode = HWPERF_CNTEN_U;
        args.hwp_evctrargs.hwp_evctrl[slot].hwperf_creg.hwp_ev = ev;
        slots[n++] = slot;
    }
    sprintf(pfile, "/proc/%05d", (int)getpid());
    if ((fd = open(pfile, O_RDONLY)) < 0) { perror(pfile); return 2; }
    if ((gen = ioctl(fd, PIOCENEVCTRS, (void *)&args)) < 0) {
        printf("errno: %d\n", errno);
        return 0;
    }
    hwperfd_example_body(wait);
    if (ioctl(fd, PIOCGETEVCTRS, (void *)&cnts) != gen) { perror("PIOCGETEVCTRS"); return 3; }
    for (i = 0; i < n; i++)
        printf("slot %d: %llu\n", slots[i], (unsigned long long)cnts.hwp_evctr[slots[i]]);
    ioctl(fd, PIOCRELEVCTRS);
    return 0;
}
