/*
 * libperfctr: Linux perfctr 2.6's library on hwperfd.
 *
 * Every call speaks to <mount>/perfctr (HWPERFD_MOUNT, default /run/hwperfd),
 * hwperfd's /dev/perfctr.  A vperfctr is an open descriptor of that node
 * bound to a thread with VPERFCTR_ATTACH (perfctr's VPERFCTR_CREAT/OPEN
 * returned a new descriptor, which a FUSE server cannot); the descriptor may
 * be passed to another process like perfctr's.
 *
 * Overflow signals: the daemon queues si_signo to the owning thread with
 * SI_QUEUE and the overflown-counter mask in si_value (Linux lets no other
 * process queue SI_PMC_OVF).  When a vperfctr is given i-mode counters this
 * library puts its own handler in front of the program's for si_signo (with
 * the program's sa_mask, SA_ONSTACK and SA_NODEFER); it calls the program's
 * SA_SIGINFO handler with si_code SI_PMC_OVF and si_pmc_ovf_mask, as perfctr
 * sent it, or, for SA_RESETHAND or a handler without SA_SIGINFO, queues the
 * signal again to the same thread with that siginfo.  Any other si_signo delivery goes to the program's
 * handler unchanged.
 *
 * A thread's own vperfctr that counts its TSC alone stays in this library
 * until the thread asks more of it ("kept", below).
 *
 * Reads of a thread's own counters (vperfctr_read_ctrs, _read_tsc,
 * _read_pmc, _is_running) all go through read_own_state(): from the
 * thread's state page (<hwperfd/state.h>, VPERFCTR_STATEPAGE) when the
 * daemon keeps one and the page can serve, which is what perfctr's mmap()ed
 * state did, and through VPERFCTR_READ_STATE otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <libperfctr.h>
#include "hwperfd/state.h"
#include "../reconnect.h"

#define OVF_TAG 0x50435452ULL	/* hwperfd/perfctr/driver.py OVF_TAG */
#define OVF_SIGNAL 61		/* SIGRTMAX - 3: the overflow timer's (lib/overflow_timer.h) */
#include "../overflow_timer.h"

/* <mount>/perfctr, made once: a file of it is opened again by this path
   when the daemon restarts (reconnect.h); NULL if too long.  Made under a
   once: threads that open their vperfctrs together must not write it while
   another opens it (a path caught half rewritten is not found). */
static char node_path_buf[4096];
static pthread_once_t node_path_once = PTHREAD_ONCE_INIT;

static void node_path_init(void)
{
    const char *mount = getenv("HWPERFD_MOUNT");

    if (mount == NULL || *mount == '\0')
	mount = "/run/hwperfd";
    if (snprintf(node_path_buf, sizeof node_path_buf, "%s/perfctr", mount) >= (int)sizeof node_path_buf)
	node_path_buf[0] = '\0';
}

static const char *node_path(void)
{
    pthread_once(&node_path_once, node_path_init);
    return node_path_buf[0] ? node_path_buf : NULL;
}

static int node_open(void)
{
    const char *path = node_path();

    if (path == NULL) {
	errno = ENAMETOOLONG;
	return -1;
    }
    return open(path, O_RDONLY | O_CLOEXEC);
}

/* -- overflow signals ------------------------------------------------------- */

static struct sigaction program_action[_NSIG];
static volatile sig_atomic_t interposed[_NSIG];

static void overflow_trampoline(int sig, siginfo_t *si, void *uc)
{
    const struct sigaction *action = &program_action[sig];

    if (si != NULL && si->si_code == SI_QUEUE
	&& ((uint64_t)(uintptr_t)si->si_value.sival_ptr >> 32) == OVF_TAG) {
	siginfo_t info;
	int saved = errno;

	memset(&info, 0, sizeof info);
	info.si_signo = sig;
	info.si_code = SI_PMC_OVF;
	info.si_pmc_ovf_mask = (int)((uint64_t)(uintptr_t)si->si_value.sival_ptr & 0xFFFFFFFFu);
	errno = saved;
	if ((action->sa_flags & SA_SIGINFO) && action->sa_sigaction != NULL && !(action->sa_flags & SA_RESETHAND)) {
	    /* This handler runs as the program's would have: on the
	       program's context, with its sa_mask, stack and deferral.  The
	       overflow costs the thread no second delivery (CPU time its
	       frozen counters would not count). */
	    action->sa_sigaction(sig, &info, uc);
	    return;
	}
	syscall(SYS_rt_tgsigqueueinfo, getpid(), (pid_t)syscall(SYS_gettid), sig, &info);
	errno = saved;
	return;	/* blocked while we run: delivered again on return */
    }
    if (action->sa_flags & SA_SIGINFO) {
	if (action->sa_sigaction != NULL)
	    action->sa_sigaction(sig, si, uc);
    } else if (action->sa_handler == SIG_DFL) {
	sigaction(sig, action, NULL);
	interposed[sig] = 0;
	syscall(SYS_tgkill, getpid(), (pid_t)syscall(SYS_gettid), sig);
    } else if (action->sa_handler != SIG_IGN) {
	action->sa_handler(sig);
    }
}

static void interpose(int sig)
{
    struct sigaction now, ours;

    if (sig <= 0 || sig >= _NSIG || sigaction(sig, NULL, &now) < 0)
	return;
    if ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == overflow_trampoline)
	return;
    program_action[sig] = now;
    memset(&ours, 0, sizeof ours);
    ours.sa_sigaction = overflow_trampoline;
    ours.sa_mask = now.sa_mask;
    /* The program's handler is called from this one: it runs as the
       program's action asks (its mask, stack and deferral). */
    ours.sa_flags = SA_SIGINFO | (now.sa_flags & (SA_RESTART | SA_ONSTACK | SA_NODEFER));
    if (sigaction(sig, &ours, NULL) == 0)
	interposed[sig] = 1;
}

/* -- raw descriptors -------------------------------------------------------- */

/* A call on the thread's own vperfctr answers EINTR when an overflow signal
   it has not handled yet came first: the handler ran as the call returned,
   and the call is made again (the daemon lets the retry take effect).  A
   restart of the daemon is ridden out: the file is opened again, and the
   new daemon gives it the vperfctr it put back (reconnect.h). */
static int vioctl(int fd, unsigned long cmd, const void *arg)
{
    return hwperfd_ioctl(fd, node_path(), cmd, (void *)arg);
}

/* -- the overflow timer (lib/overflow_timer.h) ----------------------------- */

static __thread int ovf_sig;	/* si_signo of the thread's own i-mode control */

/* Ask the daemon how much CPU time is left before the nearest i-mode
   overflow of the calling thread's vperfctr on `fd`, and arm for it.  At the
   instant the same call finds the overflow, whose signal comes as it
   returns. */
static void ovf_look(int fd)
{
    unsigned long long left = HWPERFD_NO_OVERFLOW;
    unsigned gen = ovf_self.gen;

    if (ioctl(fd, VPERFCTR_OVERFLOW_NS, &left) < 0)
	left = HWPERFD_NO_OVERFLOW;
    ovf_answer(fd, ovf_sig, gen, left, left == HWPERFD_NO_OVERFLOW);
}

static int attach(int tid, int creat)
{
    struct hwperfd_vperfctr_attach request;
    int fd = node_open();

    if (fd < 0)
	return -1;
    request.tid = tid;
    request.creat = creat ? 1 : 0;
    if (ioctl(fd, VPERFCTR_ATTACH, &request) < 0) {
	int saved = errno;
	close(fd);
	errno = saved;
	return -1;
    }
    return fd;
}

int _vperfctr_open(int creat)
{
    return attach(0, creat);
}

static int control_fd(int fd, const struct vperfctr_control *control, int local)
{
    int r, imode = control->cpu_control.nrictrs && control->si_signo;

    if (local && imode)
	interpose(control->si_signo);
    if (local) {
	ovf_hold();
	ovf_sig = imode ? (int)control->si_signo : 0;
    }
    r = vioctl(fd, VPERFCTR_CONTROL, control);
    if (local && r == 0 && imode && ovf_ready(&ovf_self))
	ovf_look(fd);
    else if (local)
	ovf_disarm();
    return r;
}

int _vperfctr_control(int fd, const struct vperfctr_control *control)
{
    return control_fd(fd, control, 1);
}

int _vperfctr_read_control(int fd, struct vperfctr_control *control)
{
    return vioctl(fd, VPERFCTR_READ_CONTROL, control);
}

int _vperfctr_read_sum(int fd, struct perfctr_sum_ctrs *sum)
{
    return vioctl(fd, VPERFCTR_READ_SUM, sum);
}

/* -- library objects -------------------------------------------------------- */

struct vperfctr {
    int fd;				/* -1 while kept */
    pid_t tid;				/* the thread whose page is mapped */
    struct hwperfd_state_reader page;	/* page.page NULL: none, read through the ioctl */
    pid_t opener;			/* the thread whose own vperfctr this is, 0 for another's */
    int page_asked;			/* VPERFCTR_STATEPAGE asked (once: its answer stands) */
    /* kept: not given to the daemon yet (below) */
    int kept, controlled, unlinked, closed;
    unsigned long long since, until;	/* the opener's CPU clock at its control and its unlink */
    struct vperfctr_control control;	/* its last control, TSC at most */
};

/* The calling thread's id, kept per thread: gettid(2) is a system call, and
   a forked child is told by the reader's own fork count. */
static __thread pid_t own_tid;

static pid_t current_tid(void)
{
    if (own_tid == 0)
	own_tid = (pid_t)syscall(SYS_gettid);
    return own_tid;
}

/* The calling thread's page of its own vperfctr, if the daemon keeps pages;
   without one, reads go through the ioctl.  Asked at the thread's first read
   of its own counters, not at vperfctr_open: a thread that registers and
   never reads (PAPI registers every thread it meets) costs the daemon no
   page.  gettid(2) itself, not the cached id: a forked child holds its
   parent's, and the page is the opening thread's alone. */
static void map_own_page(struct vperfctr *perfctr)
{
    struct hwperfd_vperfctr_statepage arg;

    perfctr->page_asked = 1;
    if (perfctr->opener == 0 || perfctr->opener != (pid_t)syscall(SYS_gettid))
	return;
    memset(&arg, 0, sizeof arg);
    if (ioctl(perfctr->fd, VPERFCTR_STATEPAGE, &arg) < 0)
	return;
    arg.path[sizeof arg.path - 1] = '\0';
    if (hwperfd_state_map(arg.path, &perfctr->page) == 0)
	perfctr->tid = current_tid();
}

struct rvperfctr {
    struct vperfctr vperfctr;	/* first, for the close() operation */
    int pid;
};

/* The driver's ABI, checked at a process's first vperfctr_open (perfctr
   checked it at each): one daemon answers every open of the process, and a
   new one (a restart) is the same program.  Whether the daemon takes a
   thread's CPU-clock stamps is asked then too. */
static int abi_checked;
static int thread_clocks;	/* PERFCTR_THREAD_CLOCKS: 1 where a vperfctr may be kept */

static int abi_check_once(int fd)
{
    const char *keep = getenv("HWPERFD_PERFCTR_KEEP");
    unsigned int clocks = 0;

    if (__atomic_load_n(&abi_checked, __ATOMIC_ACQUIRE))
	return 0;
    if (perfctr_abi_check_fd(fd) < 0)
	return -1;
    if (ioctl(fd, PERFCTR_THREAD_CLOCKS, &clocks) < 0 || (keep != NULL && strcmp(keep, "0") == 0))
	clocks = 0;
    __atomic_store_n(&thread_clocks, clocks == 1, __ATOMIC_RELAXED);
    __atomic_store_n(&abi_checked, 1, __ATOMIC_RELEASE);
    return 0;
}

/* -- a thread's own vperfctr, kept here until it is needed ----------------- */

/*
 * PAPI registers every thread it meets - vperfctr_open, a control that runs
 * the TSC alone, and at the thread's end vperfctr_unlink and vperfctr_close -
 * and its omptough does so at each of 100 000 OpenMP parallel regions.
 * perfctr made each a system call; here each would be a round trip to the
 * daemon.  So a thread's own new vperfctr is kept in this library, with the
 * thread's CPU clock at its control and at its unlink, for as long as its
 * controls run at most the TSC.  When the thread asks more of it (a read, a
 * control with counters, a second descriptor) the daemon is given the
 * vperfctr, its control as of the stamp (VPERFCTR_CONTROL_NS) and its unlink
 * as of its own (VPERFCTR_UNLINK_NS), and it counts as if it had had them
 * from the start.
 *
 * Kept only where the daemon takes the stamps (PERFCTR_THREAD_CLOCKS: the
 * real clock) and HWPERFD_PERFCTR_KEEP is not "0", and only for a thread
 * known to have no vperfctr in the daemon: a thread that is not its
 * process's main thread (only the main thread comes through an exec, with
 * its vperfctr), or one whose last vperfctr this library unlinked.  What nobody else sees of a kept vperfctr
 * is in docs/perfctr.md.
 */
static __thread struct {
    pid_t tid;			/* the thread this is about: a forked child's copy is not its */
    int none;			/* the daemon holds no vperfctr of the thread */
    struct vperfctr *kept;	/* the thread's own vperfctr, kept */
} own;

static pid_t gettid_now(void)
{
    return (pid_t)syscall(SYS_gettid);
}

/* The calling thread's entry, begun again in a thread it has not seen. */
static void own_for(pid_t tid)
{
    if (own.tid != tid) {
	own.tid = tid;
	own.none = tid != getpid();
	own.kept = NULL;
    }
}

static long long thread_clock(void)
{
    return ovf_clock(CLOCK_THREAD_CPUTIME_ID);
}

/* Give a kept vperfctr to the daemon: it is made, given its control as of
   its stamp and, if unlinked, unlinked as of its own.  Only its thread can:
   to any other the daemon would answer ESRCH (not stopped under its
   ptrace). */
static int give(struct vperfctr *perfctr)
{
    struct hwperfd_vperfctr_control_ns arg;
    pid_t tid;
    int fd, saved;

    if (!perfctr->kept)
	return 0;
    tid = gettid_now();
    if (tid != perfctr->opener) {
	errno = ESRCH;
	return -1;
    }
    fd = attach(0, 1);
    if (fd < 0)
	return -1;
    if (perfctr->controlled) {
	memset(&arg, 0, sizeof arg);
	arg.ns = perfctr->since;
	arg.control = perfctr->control;
	if (vioctl(fd, VPERFCTR_CONTROL_NS, &arg) < 0)
	    goto fail;
    }
    if (perfctr->unlinked && vioctl(fd, VPERFCTR_UNLINK_NS, &perfctr->until) < 0)
	goto fail;
    perfctr->fd = fd;
    perfctr->kept = 0;
    own_for(tid);
    if (own.kept == perfctr) {
	own.kept = NULL;
	own.none = 0;
    }
    return 0;
 fail:
    saved = errno;
    vioctl(fd, VPERFCTR_UNLINK, NULL);
    close(fd);
    errno = saved;
    return -1;
}

static int give_const(const struct vperfctr *perfctr)
{
    return give((struct vperfctr *)perfctr);
}

/* A control that runs the TSC alone (or nothing) is kept with its stamp. */
static int keep_control(struct vperfctr *perfctr, const struct vperfctr_control *control)
{
    if (gettid_now() != perfctr->opener || perfctr->unlinked) {
	errno = ESRCH;	/* another thread, not the tracer of a stopped one; or unlinked */
	return -1;
    }
    ovf_hold();
    ovf_sig = 0;
    ovf_disarm();
    perfctr->control = *control;
    perfctr->since = (unsigned long long)thread_clock();
    perfctr->controlled = 1;
    return 0;
}

static int keeps(const struct vperfctr_control *control)
{
    return control->cpu_control.nractrs == 0 && control->cpu_control.nrictrs == 0;
}

static int vperfctr_open_pid(int pid, struct vperfctr *perfctr, unsigned int mode)
{
    struct hwperfd_vperfctr_state state;
    int creat;

    if (mode == 0)
	creat = 0;
    else if (mode == VPERFCTR_OPEN_CREAT_EXCL)
	creat = 1;
    else {
	errno = EINVAL;
	return -1;
    }
    perfctr->fd = attach(pid, creat);
    if (perfctr->fd < 0)
	return -1;
    if (abi_check_once(perfctr->fd) < 0)
	goto out_fd;
    /* perfctr mapped the state page here, which failed (EPERM) for a
       thread without a vperfctr; VPERFCTR_ATTACH with creat has just made
       one (or failed) */
    if (!creat && vioctl(perfctr->fd, VPERFCTR_READ_STATE, &state) < 0) {
	errno = EPERM;
	goto out_fd;
    }
    memset(&perfctr->page, 0, sizeof perfctr->page);
    perfctr->tid = 0;
    perfctr->page_asked = 0;
    perfctr->opener = pid == 0 ? current_tid() : 0;
    perfctr->kept = perfctr->controlled = perfctr->unlinked = perfctr->closed = 0;
    if (pid == 0) {
	own_for(gettid_now());
	own.none = 0;
    }
    return 0;
 out_fd:
    {
	int saved = errno;
	if (creat)
	    vioctl(perfctr->fd, VPERFCTR_UNLINK, NULL);
	close(perfctr->fd);
	errno = saved;
    }
    return -1;
}

struct vperfctr *vperfctr_open_mode(unsigned int mode)
{
    pid_t tid = gettid_now();
    struct vperfctr *perfctr, *kept;

    own_for(tid);
    kept = own.kept;
    if (kept != NULL) {
	/* the thread has one, here: perfctr's VPERFCTR_CREAT would find it */
	if (mode == VPERFCTR_OPEN_CREAT_EXCL) {
	    errno = EEXIST;
	    return NULL;
	}
	if (mode == 0 && give(kept) < 0)
	    return NULL;
	if (mode == 0 && kept->closed) {
	    close(kept->fd);
	    free(kept);
	}
    } else if (mode == VPERFCTR_OPEN_CREAT_EXCL && own.none
	       && __atomic_load_n(&thread_clocks, __ATOMIC_RELAXED)) {
	perfctr = calloc(1, sizeof *perfctr);
	if (perfctr == NULL)
	    return NULL;
	perfctr->fd = -1;
	perfctr->kept = 1;
	perfctr->opener = tid;
	own.kept = perfctr;
	return perfctr;
    }
    perfctr = malloc(sizeof *perfctr);
    if (perfctr != NULL) {
	if (vperfctr_open_pid(0, perfctr, mode) == 0)
	    return perfctr;
	free(perfctr);
    }
    return NULL;
}

struct vperfctr *vperfctr_open(void)
{
    return vperfctr_open_mode(VPERFCTR_OPEN_CREAT_EXCL);
}

int vperfctr_info(const struct vperfctr *vperfctr, struct perfctr_info *info)
{
    if (give_const(vperfctr) < 0)
	return -1;
    return perfctr_info(vperfctr->fd, info);
}

struct perfctr_cpus_info *vperfctr_cpus_info(const struct vperfctr *vperfctr)
{
    if (give_const(vperfctr) < 0)
	return NULL;
    return perfctr_cpus_info(vperfctr->fd);
}

/* From the page: slot 0 the TSC sum, slots 1-18 pmc[0..17], the cstatus in
   hs_generation (hwperfd/perfctr/pages.py).  -1 with errno when it cannot
   serve (EAGAIN: read through the ioctl; ESTALE: the page is gone; ENOENT:
   none, or another thread asks, whose CPU clock is not the page's). */
static int read_page(const struct vperfctr *self, struct hwperfd_vperfctr_state *state)
{
    struct vperfctr *perfctr = (struct vperfctr *)self;	/* a dead page is unmapped */
    uint64_t counts[1 + sizeof state->sum.pmc / sizeof state->sum.pmc[0]];
    unsigned i;
    int cstatus;

    if (!perfctr->page_asked)
	map_own_page(perfctr);
    if (perfctr->page.page == NULL || perfctr->tid != current_tid()) {
	errno = ENOENT;
	return -1;
    }
    if (hwperfd_state_read(&perfctr->page, &cstatus, counts, sizeof counts / sizeof counts[0]) < 0)
	return -1;
    state->cstatus = (unsigned int)cstatus;
    state->_pad = 0;
    state->sum.tsc = counts[0];
    for (i = 1; i < sizeof counts / sizeof counts[0]; i++)
	state->sum.pmc[i - 1] = counts[i];
    return 0;
}

int hwperfd_vperfctr_read_page(const struct vperfctr *self, struct perfctr_sum_ctrs *sum)
{
    struct hwperfd_vperfctr_state state;

    if (give_const(self) < 0 || read_page(self, &state) < 0)
	return -1;
    *sum = state.sum;
    return 0;
}

/* The one read of a thread's own counter state: cstatus and up-to-date sums. */
static int read_own_state(const struct vperfctr *self, struct hwperfd_vperfctr_state *state)
{
    if (give_const(self) < 0)
	return -1;
    if (read_page(self, state) == 0)
	return 0;
    if (self->page.page != NULL)
	hwperfd_state_before_ioctl((struct hwperfd_state_reader *)&self->page);
    return vioctl(self->fd, VPERFCTR_READ_STATE, state);
}

unsigned long long vperfctr_read_tsc(const struct vperfctr *self)
{
    struct hwperfd_vperfctr_state state;

    if (read_own_state(self, &state) < 0) {
	perror(__func__);
	return 0;
    }
    return state.sum.tsc;
}

unsigned long long vperfctr_read_pmc(const struct vperfctr *self, unsigned i)
{
    struct hwperfd_vperfctr_state state;

    if (i >= sizeof state.sum.pmc / sizeof state.sum.pmc[0]) {
	errno = EINVAL;
	return 0;
    }
    if (read_own_state(self, &state) < 0) {
	perror(__func__);
	return 0;
    }
    return state.sum.pmc[i];
}

int vperfctr_read_ctrs(const struct vperfctr *self, struct perfctr_sum_ctrs *sum)
{
    struct hwperfd_vperfctr_state state;

    if (read_own_state(self, &state) < 0)
	return -1;
    *sum = state.sum;
    return 0;
}

int vperfctr_read_state(const struct vperfctr *self, struct perfctr_sum_ctrs *sum,
			struct vperfctr_control *control)
{
    if (give_const(self) < 0)
	return -1;
    if (_vperfctr_read_sum(self->fd, sum) < 0)
	return -1;
    /* control may be NULL, as in perfctr */
    if (control != NULL && _vperfctr_read_control(self->fd, control) < 0)
	return -1;
    return 0;
}

int vperfctr_control(const struct vperfctr *perfctr, struct vperfctr_control *control)
{
    struct vperfctr *self = (struct vperfctr *)perfctr;

    if (self->kept && keeps(control))
	return keep_control(self, control);
    if (give(self) < 0)
	return -1;
    return control_fd(perfctr->fd, control, 1);
}

int vperfctr_stop(const struct vperfctr *perfctr)
{
    struct vperfctr_control control;

    memset(&control, 0, sizeof control);
    if (perfctr->kept)
	return keep_control((struct vperfctr *)perfctr, &control);
    ovf_disarm();
    return vioctl(perfctr->fd, VPERFCTR_CONTROL, &control);
}

int vperfctr_is_running(const struct vperfctr *perfctr)
{
    struct hwperfd_vperfctr_state state;

    if (read_own_state(perfctr, &state) < 0)
	return 0;
    return state.cstatus != 0;
}

int vperfctr_iresume(const struct vperfctr *perfctr)
{
    unsigned long long left = HWPERFD_NO_OVERFLOW;
    unsigned gen;
    int r;

    if (give_const(perfctr) < 0)
	return -1;
    ovf_hold();
    gen = ovf_self.gen;
    if (!ovf_ready(&ovf_self))	/* no timer: the daemon's tick is not told the thread times itself */
	return vioctl(perfctr->fd, VPERFCTR_IRESUME, NULL);
    /* The counters start again where the thread's clock stands as it calls,
       not a round trip of its CPU time later, where the daemon looks. */
    left = (unsigned long long)ovf_clock(CLOCK_THREAD_CPUTIME_ID);
    r = vioctl(perfctr->fd, VPERFCTR_IRESUME_NS, &left);
    if (r == 0)
	ovf_answer(perfctr->fd, ovf_sig, gen, left, left == HWPERFD_NO_OVERFLOW);
    return r;
}

int vperfctr_unlink(const struct vperfctr *perfctr)
{
    struct vperfctr *self = (struct vperfctr *)perfctr;
    pid_t tid = gettid_now();
    int r;

    if (self->kept) {
	if (tid != self->opener) {
	    errno = ESRCH;
	    return -1;
	}
	ovf_disarm();
	if (!self->unlinked) {
	    self->until = (unsigned long long)thread_clock();
	    self->unlinked = 1;
	    own_for(tid);
	    own.kept = NULL;
	    own.none = 1;
	}
	return 0;
    }
    ovf_disarm();
    r = vioctl(perfctr->fd, VPERFCTR_UNLINK, NULL);
    if (r == 0 && perfctr->opener == tid) {
	own_for(tid);
	own.none = 1;	/* the thread's own is gone from the daemon */
    }
    return r;
}

void vperfctr_close(struct vperfctr *perfctr)
{
    if (perfctr->kept) {
	/* Closing does not unlink: its thread still has it (and only that
	   thread's entry names it, so it stays until the thread opens it
	   again). */
	if (!perfctr->unlinked)
	    perfctr->closed = 1;
	else
	    free(perfctr);
	return;
    }
    if (ovf_self.fd == perfctr->fd)
	ovf_disarm();
    hwperfd_state_close(&perfctr->page);
    close(perfctr->fd);
    free(perfctr);
}

/* -- another thread's --------------------------------------------------------- */

struct rvperfctr *rvperfctr_open(int pid)
{
    struct rvperfctr *rvperfctr = malloc(sizeof *rvperfctr);

    if (rvperfctr != NULL) {
	if (vperfctr_open_pid(pid, &rvperfctr->vperfctr, VPERFCTR_OPEN_CREAT_EXCL) == 0) {
	    rvperfctr->pid = pid;
	    return rvperfctr;
	}
	free(rvperfctr);
    }
    return NULL;
}

int rvperfctr_pid(const struct rvperfctr *rvperfctr)
{
    return rvperfctr->pid;
}

int rvperfctr_info(const struct rvperfctr *rvperfctr, struct perfctr_info *info)
{
    return vperfctr_info(&rvperfctr->vperfctr, info);
}

int rvperfctr_read_ctrs(const struct rvperfctr *rvperfctr, struct perfctr_sum_ctrs *sum)
{
    return _vperfctr_read_sum(rvperfctr->vperfctr.fd, sum);
}

int rvperfctr_read_state(const struct rvperfctr *rvperfctr, struct perfctr_sum_ctrs *sum,
			 struct vperfctr_control *control)
{
    return vperfctr_read_state(&rvperfctr->vperfctr, sum, control);
}

int rvperfctr_control(const struct rvperfctr *rvperfctr, struct vperfctr_control *control)
{
    return control_fd(rvperfctr->vperfctr.fd, control, 0);
}

int rvperfctr_stop(const struct rvperfctr *rvperfctr)
{
    return vperfctr_stop(&rvperfctr->vperfctr);
}

int rvperfctr_unlink(const struct rvperfctr *rvperfctr)
{
    return vperfctr_unlink(&rvperfctr->vperfctr);
}

void rvperfctr_close(struct rvperfctr *rvperfctr)
{
    vperfctr_close(&rvperfctr->vperfctr);
}

/* -- global mode ---------------------------------------------------------------- */

struct gperfctr {
    int fd;
};

struct gperfctr *gperfctr_open(void)
{
    struct gperfctr *gperfctr = malloc(sizeof *gperfctr);

    if (gperfctr != NULL) {
	gperfctr->fd = node_open();
	if (gperfctr->fd >= 0) {
	    if (perfctr_abi_check_fd(gperfctr->fd) >= 0)
		return gperfctr;
	    close(gperfctr->fd);
	}
	free(gperfctr);
    }
    return NULL;
}

void gperfctr_close(struct gperfctr *gperfctr)
{
    close(gperfctr->fd);
    free(gperfctr);
}

int gperfctr_control(const struct gperfctr *gperfctr, struct gperfctr_cpu_control *arg)
{
    return vioctl(gperfctr->fd, GPERFCTR_CONTROL, arg);
}

int gperfctr_read(const struct gperfctr *gperfctr, struct gperfctr_cpu_state *arg)
{
    return vioctl(gperfctr->fd, GPERFCTR_READ, arg);
}

int gperfctr_stop(const struct gperfctr *gperfctr)
{
    return vioctl(gperfctr->fd, GPERFCTR_STOP, 0);
}

int gperfctr_start(const struct gperfctr *gperfctr, unsigned int interval_usec)
{
    return hwperfd_ioctl(gperfctr->fd, node_path(), GPERFCTR_START, (void *)(unsigned long)interval_usec);
}

int gperfctr_info(const struct gperfctr *gperfctr, struct perfctr_info *info)
{
    return perfctr_info(gperfctr->fd, info);
}

struct perfctr_cpus_info *gperfctr_cpus_info(const struct gperfctr *gperfctr)
{
    return perfctr_cpus_info(gperfctr->fd);
}

/* -- information ------------------------------------------------------------------- */

int _perfctr_abi_check_fd(int fd, unsigned int user_abi_version)
{
    unsigned int driver_abi_version;

    if (ioctl(fd, PERFCTR_ABI, &driver_abi_version) < 0) {
	perror("perfctr_abi_check");
	return -1;
    }
    if ((driver_abi_version ^ user_abi_version) & 0xFF00FF00) {
	fprintf(stderr, "Error: perfctr ABI major version mismatch: "
		"driver ABI 0x%08X, user ABI 0x%08X\n",
		driver_abi_version, user_abi_version);
	errno = EPROTO;
	return -1;
    }
    return 0;
}

int perfctr_info(int fd, struct perfctr_info *info)
{
    return ioctl(fd, PERFCTR_INFO, info) < 0 ? -1 : 0;
}

int perfctr_get_info(struct perfctr_info *info)
{
    int fd = node_open(), ret;

    if (fd < 0)
	return -1;
    ret = perfctr_info(fd, info);
    close(fd);
    return ret;
}

struct perfctr_cpus_info *perfctr_cpus_info(int fd)
{
    struct hwperfd_perfctr_cpu_mask cpus, forbidden;
    struct perfctr_cpus_info *info;
    size_t bytes;

    if (ioctl(fd, PERFCTR_CPUS, &cpus) < 0 || ioctl(fd, PERFCTR_CPUS_FORBIDDEN, &forbidden) < 0) {
	perror("PERFCTR_CPUS");
	return NULL;
    }
    if (cpus.nrwords == 0 || cpus.nrwords > 32) {
	errno = EPROTO;
	perror("PERFCTR_CPUS");
	return NULL;
    }
    bytes = offsetof(struct perfctr_cpu_mask, mask) + cpus.nrwords * sizeof(unsigned int);
    info = malloc(sizeof *info + 2 * bytes);
    if (info == NULL) {
	perror("malloc");
	return NULL;
    }
    info->cpus = (struct perfctr_cpu_mask *)(info + 1);
    info->cpus_forbidden = (struct perfctr_cpu_mask *)((char *)(info + 1) + bytes);
    info->cpus->nrwords = info->cpus_forbidden->nrwords = cpus.nrwords;
    memcpy(info->cpus->mask, cpus.mask, cpus.nrwords * sizeof(unsigned int));
    memcpy(info->cpus_forbidden->mask, forbidden.mask, cpus.nrwords * sizeof(unsigned int));
    return info;
}

/* Counters of the emulated CPUs, as perfctr 2.6's usr.lib/x86.c counts them:
   a Core 2's two general and three fixed-function counters, a K8's four. */
unsigned int perfctr_info_nrctrs(const struct perfctr_info *info)
{
    switch (info->cpu_type) {
    case PERFCTR_X86_INTEL_CORE2:
	return 5;
    case PERFCTR_X86_AMD_K8:
	return 4;
    default:
	return 0;
    }
}

const char *perfctr_info_cpu_name(const struct perfctr_info *info)
{
    switch (info->cpu_type) {
    case PERFCTR_X86_GENERIC:
	return "Generic x86 with TSC";
    case PERFCTR_X86_INTEL_CORE2:
	return "Intel Core 2";
    case PERFCTR_X86_AMD_K8:
	return "AMD K8";
    default:
	return "?";
    }
}

void perfctr_info_print(const struct perfctr_info *info)
{
    static const char *const features[] = { "rdpmc", "rdtsc", "pcint" };
    unsigned int i;
    int comma = 0;

    printf("abi_version\t\t0x%08X\n", info->abi_version);
    printf("driver_version\t\t%s\n", info->driver_version);
    printf("cpu_type\t\t%u (%s)\n", info->cpu_type, perfctr_info_cpu_name(info));
    printf("cpu_features\t\t%#x (", info->cpu_features);
    for (i = 0; i < sizeof features / sizeof features[0]; ++i)
	if (info->cpu_features & (1u << i)) {
	    printf("%s%s", comma ? "," : "", features[i]);
	    comma = 1;
	}
    printf(")\n");
    printf("cpu_khz\t\t\t%u\n", info->cpu_khz);
    printf("tsc_to_cpu_mult\t\t%u%s\n", info->tsc_to_cpu_mult,
	   info->tsc_to_cpu_mult ? "" : " (unspecified, assume 1)");
    printf("cpu_nrctrs\t\t%u\n", perfctr_info_nrctrs(info));
}

static void print_cpus(const struct perfctr_cpu_mask *cpus)
{
    unsigned int word, bit, count = 0;

    printf("[");
    for (word = 0; word < cpus->nrwords; ++word)
	for (bit = 0; bit < 32; ++bit)
	    if (cpus->mask[word] & (1u << bit))
		printf("%s%u", count++ ? "," : "", word * 32 + bit);
    printf("], total: %u\n", count);
}

void perfctr_cpus_info_print(const struct perfctr_cpus_info *info)
{
    printf("cpus\t\t\t");
    print_cpus(info->cpus);
    printf("cpus_forbidden\t\t");
    print_cpus(info->cpus_forbidden);
}

void perfctr_cpu_control_print(const struct perfctr_cpu_control *control)
{
    unsigned int i, nractrs = control->nractrs, nrictrs = control->nrictrs;

    printf("tsc_on\t\t\t%u\n", control->tsc_on);
    printf("nractrs\t\t\t%u\n", nractrs);
    if (nrictrs)
	printf("nrictrs\t\t\t%u\n", nrictrs);
    for (i = 0; i < nractrs + nrictrs && i < 18; ++i) {
	if (control->pmc_map[i] >= 18)
	    printf("pmc_map[%u]\t\t0x%08X\n", i, control->pmc_map[i]);
	else
	    printf("pmc_map[%u]\t\t%u\n", i, control->pmc_map[i]);
	printf("evntsel[%u]\t\t0x%08X\n", i, control->evntsel[i]);
	if (control->p4.escr[i])
	    printf("escr[%u]\t\t\t0x%08X\n", i, control->p4.escr[i]);
	if (i >= nractrs)
	    printf("ireset[%u]\t\t%d\n", i, control->ireset[i]);
    }
}

/* -- event descriptions ----------------------------------------------------------------- */

#include "perfctr_events.h"

const struct perfctr_event_set *perfctr_cpu_event_set(unsigned int cpu_type)
{
    unsigned int i;

    for (i = 0; i < sizeof event_sets / sizeof event_sets[0]; ++i)
	if (event_sets[i].cpu_type == cpu_type)
	    return &event_sets[i];
    return NULL;
}
