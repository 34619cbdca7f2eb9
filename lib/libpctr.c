/*
 * libpctr: rdtsc() and rdpmc() of <machine/pctr.h> on hwperfd.
 *
 * OpenBSD programs read the TSC and the counters with the rdtsc and rdpmc
 * instructions.  Under hwperfd the counters are emulated, so the macros call
 * these functions instead, which read <mount>/pctr with PCIOCRD and return
 * the values of the CPU the caller runs on.  The device is opened once,
 * read-only (as anyone may), and kept open close-on-exec.
 *
 * Errors: a value of 0 and errno set (the instructions had no way to fail;
 * a program that checks errno can tell).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <machine/pctr.h>

static int pctr_fd = -1;

static int pctr_open(void)
{
    char path[4096];
    const char *mount;
    int fd;

    if (pctr_fd >= 0)
        return pctr_fd;
    mount = getenv("HWPERFD_MOUNT");
    if (mount == NULL || *mount == '\0')
        mount = "/run/hwperfd";
    if (snprintf(path, sizeof path, "%s/pctr", mount) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    /* Another thread may have opened it meanwhile: keep one. */
    if (!__sync_bool_compare_and_swap(&pctr_fd, -1, fd))
        close(fd);
    return pctr_fd;
}

static int pctr_read(struct pctrst *st)
{
    int fd = pctr_open();

    if (fd < 0)
        return -1;
    memset(st, 0, sizeof *st);
    return ioctl(fd, PCIOCRD, st);
}

pctrval pctr_rdtsc(void)
{
    struct pctrst st;

    return pctr_read(&st) < 0 ? 0 : st.pctr_tsc;
}

pctrval pctr_rdpmc(int pmc)
{
    struct pctrst st;

    if (pmc < 0 || pmc >= PCTR_NUM) {
        /* the instruction would raise #GP */
        errno = EINVAL;
        return 0;
    }
    return pctr_read(&st) < 0 ? 0 : st.pctr_hwc[pmc];
}
