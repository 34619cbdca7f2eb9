/*
 * libpctr: rdtsc() and rdpmc() of <machine/pctr.h> on hwperfd.
 *
 * OpenBSD programs read the TSC and the counters with the rdtsc and rdpmc
 * instructions.  Under hwperfd the counters are emulated, so the macros call
 * these functions instead, which return the values of the CPU the caller
 * runs on: from the daemon's state page of every CPU's TSC and counters
 * (<hwperfd/state.h>, read without a request: the TSC at this instant, the
 * counters as the daemon last took them, until the page says they no
 * longer hold), else from <mount>/pctr with PCIOCRD, which answers the
 * same.  The device is opened once, read-only (as anyone may), and kept
 * open close-on-exec; the page is mapped at the first read.
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
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <machine/pctr.h>
#include <hwperfd/state.h>
#include "../reconnect.h"

static int pctr_fd = -1;
static int pctr_counters = -1;	/* the model's, from the node's text */

/* The page, mapped at the first read (NULL: none yet, or none to be had).
 * Threads read it at once, so one the daemon let go (it stopped) is never
 * unmapped: the next read through the ioctl maps the new daemon's, and the
 * old stays mapped, read by nobody.  A forked child keeps it: it shows every
 * CPU, for anyone. */
static struct hwperfd_state_reader *page;
static int page_mapping;	/* a thread is mapping it, or there is none to be had (-1) */
#define PAGE_SLOTS	(1 + PCTR_NUM)	/* per CPU: the TSC, the counters */
static char pctr_path[4096];	/* <mount>/pctr, opened again after a restart of the daemon */
static int pctr_path_error;	/* ENAMETOOLONG: no such path */
static pthread_once_t pctr_path_once = PTHREAD_ONCE_INIT;

/* The path, written once: threads that make their first read together must
 * not write it while another opens it (a path caught half rewritten was not
 * found, ENOENT, from one of 8 threads' first rdpmc now and then). */
static void pctr_path_init(void)
{
    const char *mount = getenv("HWPERFD_MOUNT");

    if (mount == NULL || *mount == '\0')
        mount = "/run/hwperfd";
    if (snprintf(pctr_path, sizeof pctr_path, "%s/pctr", mount) >= (int)sizeof pctr_path)
        pctr_path_error = ENAMETOOLONG;
}

static int pctr_open(void)
{
    int fd;

    if (pctr_fd >= 0)
        return pctr_fd;
    pthread_once(&pctr_path_once, pctr_path_init);
    if (pctr_path_error) {
        errno = pctr_path_error;
        return -1;
    }
    fd = open(pctr_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    /* Another thread may have opened it meanwhile: keep one. */
    if (!__sync_bool_compare_and_swap(&pctr_fd, -1, fd))
        close(fd);
    return pctr_fd;
}

static void forked(void)
{
    struct hwperfd_state_reader *r = __atomic_load_n(&page, __ATOMIC_ACQUIRE);

    if (r != NULL)
        hwperfd_state_adopt(r);
}

static pthread_once_t fork_hook = PTHREAD_ONCE_INIT;

static void hook_forks(void)
{
    pthread_atfork(NULL, NULL, forked);
}

/* Map the page; a thread that finds another mapping it reads through the ioctl meanwhile. */
static void page_open(int fd)
{
    struct hwperfd_state_reader *r;
    int idle = 0;

    if (!__atomic_compare_exchange_n(&page_mapping, &idle, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    r = calloc(1, sizeof *r);
    if (r == NULL || hwperfd_state_open(fd, r) < 0) {
        free(r);
        __atomic_store_n(&page_mapping, -1, __ATOMIC_RELEASE);	/* none to be had: the ioctl it is */
        return;
    }
    r->shared = 1;
    pthread_once(&fork_hook, hook_forks);
    __atomic_store_n(&page, r, __ATOMIC_RELEASE);
    __atomic_store_n(&page_mapping, 0, __ATOMIC_RELEASE);
}

/* Slot `slot` of the caller's CPU from the page: 0, or -1 to ask the daemon. */
static int page_read(unsigned slot, pctrval *value)
{
    struct hwperfd_state_reader *r = __atomic_load_n(&page, __ATOMIC_ACQUIRE);
    uint64_t counts[PAGE_SLOTS];
    int generation, saved = errno;

    if (r == NULL)
        return -1;
    if (hwperfd_state_read_cpu(r, &generation, counts, slot + 1, NULL, NULL) < 0) {
        if (errno == ESTALE)	/* the daemon let it go: the next ioctl maps its successor's */
            __atomic_compare_exchange_n(&page, &r, NULL, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
        errno = saved;
        return -1;
    }
    *value = counts[slot];
    return 0;
}

static int pctr_read(struct pctrst *st)
{
    int fd = pctr_open();
    int r, saved = errno;

    if (fd < 0)
        return -1;
    memset(st, 0, sizeof *st);
    r = hwperfd_ioctl(fd, pctr_path, PCIOCRD, st);	/* reconnect.h: rides out a restart */
    if (r == 0 && __atomic_load_n(&page, __ATOMIC_ACQUIRE) == NULL)
        page_open(fd);
    if (r == 0)
        errno = saved; /* a read that succeeded leaves errno as it was */
    return r;
}

pctrval pctr_rdtsc(void)
{
    struct pctrst st;
    pctrval tsc;

    if (page_read(0, &tsc) == 0)
        return tsc;
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
    pctrval value;
    int fd = pctr_open();

    if (fd < 0)
        return 0;
    if (pmc < 0 || pmc >= PCTR_NUM || pmc >= pctr_count(fd))
        general_protection();
    if (page_read(1 + (unsigned)pmc, &value) == 0)
        return value;
    return pctr_read(&st) < 0 ? 0 : st.pctr_hwc[pmc];
}
