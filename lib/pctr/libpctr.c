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
 * a program that checks errno can tell).  But rdpmc(n) for a counter the
 * model does not have (the node's "counters N" line) faults as the
 * instruction does: a general-protection fault, SIGSEGV (on x86 the real
 * instruction raises it, with an index no CPU has).
 */
#define _GNU_SOURCE /* dup3, for reconnect.h */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <machine/pctr.h>
#include "../reconnect.h"

static int pctr_fd = -1;
static int pctr_counters = -1;	/* the model's, from the node's text */

static char pctr_path[4096];	/* <mount>/pctr, opened again after a restart of the daemon */

static int pctr_open(void)
{
    char *path = pctr_path;
    const char *mount;
    int fd;

    if (pctr_fd >= 0)
        return pctr_fd;
    mount = getenv("HWPERFD_MOUNT");
    if (mount == NULL || *mount == '\0')
        mount = "/run/hwperfd";
    if (snprintf(path, sizeof pctr_path, "%s/pctr", mount) >= (int)sizeof pctr_path) {
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
    return hwperfd_ioctl(fd, pctr_path, PCIOCRD, st);	/* reconnect.h: rides out a restart */
}

pctrval pctr_rdtsc(void)
{
    struct pctrst st;

    return pctr_read(&st) < 0 ? 0 : st.pctr_tsc;
}

/* The model's counters: "counters N" in what reading the node shows. */
static int pctr_count(int fd)
{
    char text[4096], *line;
    ssize_t n;

    if (pctr_counters >= 0)
        return pctr_counters;
    n = pread(fd, text, sizeof text - 1, 0);
    if (n <= 0)
        return PCTR_NUM;
    text[n] = '\0';
    line = strstr(text, "\ncounters ");
    if (line == NULL)
        return PCTR_NUM;
    pctr_counters = atoi(line + strlen("\ncounters "));
    return pctr_counters;
}

/* What rdpmc does with a counter the CPU does not have: #GP, SIGSEGV. */
static void general_protection(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned int lo, hi;

    __asm__ volatile("rdpmc" : "=a"(lo), "=d"(hi) : "c"(0xffffu));
#endif
    for (;;) {
        /* Elsewhere as the kernel forces a fault: never blocked or ignored,
         * and the faulting instruction runs again if a handler returns. */
        sigset_t segv;

        signal(SIGSEGV, SIG_DFL);
        sigemptyset(&segv);
        sigaddset(&segv, SIGSEGV);
        sigprocmask(SIG_UNBLOCK, &segv, NULL);
        raise(SIGSEGV);
    }
}

pctrval pctr_rdpmc(int pmc)
{
    struct pctrst st;
    int fd = pctr_open();

    if (fd < 0)
        return 0;
    if (pmc < 0 || pmc >= PCTR_NUM || pmc >= pctr_count(fd))
        general_protection();
    return pctr_read(&st) < 0 ? 0 : st.pctr_hwc[pmc];
}
