/* Dyninst's request: cycles in slot 0 counted in user and kernel mode.
 * A non-root caller must get EPERM.  Prints "ok <generation>" or "errno <n>". */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/procfs.h>
#include <sys/hwperftypes.h>
#include <sys/hwperfmacros.h>
#include <unistd.h>
#include "example_body.h"

int main(void)
{
    hwperf_profevctrarg_t args;
    char pfile[4096];
    int fd, gen;

    sprintf(pfile, "/proc/%05d", (int)getpid());
    fd = open(pfile, O_RDWR);
    if (fd < 0) { perror(pfile); return 2; }
    memset(&args, 0, sizeof args);
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_mode = HWPERF_CNTEN_U | HWPERF_CNTEN_K;
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_ev = HWPERF_C0PRFCNT0_CYCLES;
    gen = ioctl(fd, PIOCENEVCTRS, (void *)&args);
    if (gen < 0) {
        printf("errno %d (%s)\n", errno, strerror(errno));
        return 0;
    }
    printf("ok %d\n", gen);
    ioctl(fd, PIOCRELEVCTRS);
    return 0;
}
