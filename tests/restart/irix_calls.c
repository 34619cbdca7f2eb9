/* IRIX counter calls on demand, through "/proc/%05d" (the hwperfd-run
 * shim sends it to the mount and repeats a call a dead daemon left
 * unanswered, lib/reconnect.h), for tests of calls across a restart.
 *
 *   irix_calls
 *
 * Reads one word a line from stdin - "enable" (PIOCENEVCTRS, cycles in
 * user mode), "control" (PIOCSETEVCTRL, cycles on both counters), "release"
 * (PIOCRELEVCTRS), "read" (PIOCGETEVCTRS) - makes that call on its own
 * process file, opened once, and prints "ok GEN" or "error ERRNO". */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/procfs.h>
#include <sys/hwperftypes.h>
#include <sys/hwperfmacros.h>
#include <unistd.h>

int main(void)
{
    hwperf_profevctrarg_t cycles, both;
    hwperf_cntr_t counts;
    char path[64], word[32];
    int fd;

    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(path, sizeof path, "/proc/%05d", (int)getpid());
    fd = open(path, O_RDWR);
    if (fd < 0) {
        printf("error %d\n", errno);
        return 2;
    }
    memset(&cycles, 0, sizeof cycles);
    cycles.hwp_evctrargs.hwp_evctrl[0].hwperf_spec = (short)((0 << HWPERF_EVSHIFT) | HWPERF_CNTEN_U);
    both = cycles;
    both.hwp_evctrargs.hwp_evctrl[16].hwperf_spec = (short)((0 << HWPERF_EVSHIFT) | HWPERF_CNTEN_U);
    printf("ready\n");
    while (scanf("%31s", word) == 1) {
        int got;
        if (strcmp(word, "enable") == 0)
            got = ioctl(fd, PIOCENEVCTRS, &cycles);
        else if (strcmp(word, "control") == 0)
            got = ioctl(fd, PIOCSETEVCTRL, &both);
        else if (strcmp(word, "release") == 0)
            got = ioctl(fd, PIOCRELEVCTRS, NULL);
        else if (strcmp(word, "read") == 0)
            got = ioctl(fd, PIOCGETEVCTRS, &counts);
        else
            got = -1, errno = EINVAL;
        if (got < 0)
            printf("error %d\n", errno);
        else
            printf("ok %d\n", got);
    }
    return 0;
}
