/* How PAPI's IRIX substrate stops and starts counting on one descriptor:
 * PAPI_start is PIOCSETEVCTRL, PAPI_stop is PIOCRELEVCTRS (and may run
 * twice), PAPI_reset is a stop followed by a start, and a new thread or a
 * second library init probes PIOCGETEVCTRL and acquires with PIOCENEVCTRS
 * when it fails.  Prints what each step saw, one "name: value" per line.
 * Usage: papi_cycle [-w]   (-w: wait for a line instead of working, four times) */
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

static int fd;
static hwperf_profevctrarg_t events;

static int fail(const char *what, int code)
{
    fprintf(stderr, "%s: %s\n", what, strerror(errno));
    exit(code);
}

/* PAPI's init: acquire every slot in user mode on event 0 unless the
 * counters are already in use (then their generation is taken). */
static int papi_init(void)
{
    hwperf_profevctrarg_t args;
    hwperf_eventctrl_t ctl;
    int i, gen = ioctl(fd, PIOCGETEVCTRL, (void *)&ctl);

    if (gen >= 0)
        return gen;
    printf("probe errno: %d\n", errno);
    memset(&args, 0, sizeof args);
    for (i = 0; i < HWPERF_EVENTMAX; i++)
        args.hwp_evctrargs.hwp_evctrl[i].hwperf_creg.hwp_mode = HWPERF_CNTEN_U;
    if ((gen = ioctl(fd, PIOCENEVCTRS, (void *)&args)) < 0)
        fail("PIOCENEVCTRS", 3);
    return gen;
}

static int papi_start(void)
{
    int gen = ioctl(fd, PIOCSETEVCTRL, (void *)&events);
    if (gen <= 0)
        fail("PIOCSETEVCTRL", 4);
    return gen;
}

static void papi_stop(void)
{
    if (ioctl(fd, PIOCRELEVCTRS) < 0)
        fail("PIOCRELEVCTRS", 5);
}

static void papi_read(const char *step, int expected)
{
    hwperf_cntr_t cnts;
    int gen = ioctl(fd, PIOCGETEVCTRS, (void *)&cnts);
    if (gen < 0)
        fail("PIOCGETEVCTRS", 6);
    if (expected && gen != expected) {
        fprintf(stderr, "%s: program lost event counters (%d, not %d)\n", step, gen, expected);
        exit(7);
    }
    printf("%s generation: %d\n", step, gen);
    printf("%s cycles: %llu\n", step, (unsigned long long)cnts.hwp_evctr[0]);
    printf("%s graduated instructions: %llu\n", step, (unsigned long long)cnts.hwp_evctr[17]);
}

int main(int argc, char **argv)
{
    char pfile[64];
    hwperf_eventctrl_t ctl;
    int wait = argc > 1 && strcmp(argv[1], "-w") == 0;
    int gen, start1, start2, reset;

    sprintf(pfile, "/proc/%05d", (int)getpid());
    if ((fd = open(pfile, O_RDONLY)) < 0)
        fail(pfile, 2);
    gen = papi_init();
    printf("init generation: %d\n", gen);

    /* slot i, hwp_ev = i mod 16: cycles and graduated instructions */
    memset(&events, 0, sizeof events);
    events.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_mode = HWPERF_CNTEN_U;
    events.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_ev = 0;
    events.hwp_evctrargs.hwp_evctrl[17].hwperf_creg.hwp_mode = HWPERF_CNTEN_U;
    events.hwp_evctrargs.hwp_evctrl[17].hwperf_creg.hwp_ev = 17 % 16;

    start1 = papi_start();
    hwperfd_example_body(wait);
    papi_read("first", start1);
    papi_stop();
    papi_stop(); /* PAPI_stop twice: must succeed and change nothing */
    printf("control after stop: %d\n", ioctl(fd, PIOCGETEVCTRL, (void *)&ctl) < 0 ? errno : 0);
    hwperfd_example_body(wait); /* released: not counted */
    papi_read("stopped", start1);

    start2 = papi_start();
    printf("restart generation: %d\n", start2);
    hwperfd_example_body(wait);
    papi_read("second", start2);

    papi_stop(); /* PAPI_reset */
    reset = papi_start();
    papi_read("reset", reset);
    hwperfd_example_body(wait);
    papi_read("third", reset);
    papi_stop();
    papi_stop();

    /* PAPI_shutdown then PAPI_library_init again on the same process */
    close(fd);
    if ((fd = open(pfile, O_RDONLY)) < 0)
        fail(pfile, 2);
    printf("reinit generation: %d\n", papi_init());
    papi_stop();
    return 0;
}
