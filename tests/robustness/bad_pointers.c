/* IRIX's pointer-form PIOCENEVCTRSEX / PIOCGETEVCTRLEX with bad pointers,
 * run under the hwperfd-run shim: each call must fail with EFAULT, the
 * program must live, and nothing may change (the counters stay unused).
 * Prints one line per case, "NAME errno-name", then "good N" for a valid
 * call at the end (N: its return value), and exits 0. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/procfs.h>
#include <sys/hwperftypes.h>
#include <unistd.h>

static const char *name(int rc)
{
    if (rc >= 0)
        return "ok";
    return errno == EFAULT ? "EFAULT" : errno == EINVAL ? "EINVAL" : strerror(errno);
}

int main(void)
{
    char path[64];
    long page = sysconf(_SC_PAGESIZE);
    /* An unmapped page, and a read-only one. */
    char *gone = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *ro = mmap(NULL, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    static hwperf_profevctrarg_t args;
    static hwperf_profevctraux_t aux;
    static hwperf_eventctrl_t ctrl;
    static hwperf_eventctrlaux_t ctrlaux;
    hwperf_profevctrargex_t ex;
    hwperf_getctrlex_arg_t gex;
    int fd, rc;

    if (gone == MAP_FAILED || ro == MAP_FAILED || munmap(gone, page) != 0)
        return 2;
    snprintf(path, sizeof path, "/proc/%05d", (int)getpid());
    if ((fd = open(path, O_RDWR)) < 0) {
        perror(path);
        return 2;
    }
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_spec = 0x8; /* cycles, user mode */

    printf("enable-top-unmapped %s\n", name(ioctl(fd, PIOCENEVCTRSEX, (void *)gone)));
    printf("enable-top-wild %s\n", name(ioctl(fd, PIOCENEVCTRSEX, (void *)16)));
    ex.hwp_args = (hwperf_profevctrarg_t *)gone;
    ex.hwp_aux = NULL;
    printf("enable-args-unmapped %s\n", name(ioctl(fd, PIOCENEVCTRSEX, &ex)));
    ex.hwp_args = (hwperf_profevctrarg_t *)(ro + page - 8); /* runs off the mapping */
    printf("enable-args-straddling %s\n", name(ioctl(fd, PIOCENEVCTRSEX, &ex)));
    ex.hwp_args = &args;
    ex.hwp_aux = (hwperf_profevctraux_t *)-4096L;
    printf("enable-aux-kernel %s\n", name(ioctl(fd, PIOCENEVCTRSEX, &ex)));

    printf("getctl-top-unmapped %s\n", name(ioctl(fd, PIOCGETEVCTRLEX, (void *)gone)));
    gex.hwp_evctrl = (hwperf_eventctrl_t *)ro; /* readable, not writable */
    gex.hwp_evctrlaux = &ctrlaux;
    printf("getctl-readonly %s\n", name(ioctl(fd, PIOCGETEVCTRLEX, &gex)));
    gex.hwp_evctrl = &ctrl;
    gex.hwp_evctrlaux = (hwperf_eventctrlaux_t *)gone;
    printf("getctl-aux-unmapped %s\n", name(ioctl(fd, PIOCGETEVCTRLEX, &gex)));

    /* Nothing was acquired: the counters are not in use. */
    gex.hwp_evctrlaux = &ctrlaux;
    printf("getctl-unused %s\n", name(ioctl(fd, PIOCGETEVCTRLEX, &gex)));
    ex.hwp_args = &args;
    ex.hwp_aux = &aux;
    aux.hwp_aux_gen = 0;
    rc = ioctl(fd, PIOCENEVCTRSEX, &ex);
    printf("good %d\n", rc);
    rc = ioctl(fd, PIOCGETEVCTRLEX, &gex);
    printf("getctl-good %s %d\n", name(rc), ctrl.hwp_evctrl[0].hwperf_spec);
    return 0;
}
