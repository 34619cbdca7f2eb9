/*
 * libhwperf: IRIX syssgi(SGI_EVENTCTR, cmd, ...) on Linux.
 *
 * Linux has no syssgi(2).  hwperfd serves the SGI_EVENTCTR sub-commands of
 * r10k_counters(5) ("Syssgi Commands") as HWIOC_* ioctls on the control
 * node of its mount, <mount>/control, where <mount> is
 * $HWPERFD_MOUNT or /run/hwperfd.  This file turns the variadic IRIX call
 * into one of those ioctls, so IRIX sources compile and run unchanged:
 *
 *   syssgi(SGI_EVENTCTR, HWPERF_ENSYSCNTRS, hwperf_profevctrarg_t *)
 *   syssgi(SGI_EVENTCTR, HWPERF_SET_SYSEVCTRL, hwperf_profevctrarg_t *)
 *   syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, hwperf_profevctrarg_t *, profp, profcnt)
 *   syssgi(SGI_EVENTCTR, HWPERF_GET_SYSCNTRS, hwperf_cntr_t *)
 *   syssgi(SGI_EVENTCTR, HWPERF_GET_CPUCNTRS, int cpuid, hwperf_cntr_t *)
 *   syssgi(SGI_EVENTCTR, HWPERF_GET_SYSEVCTRL, hwperf_eventctrl_t *)
 *   syssgi(SGI_EVENTCTR, HWPERF_RELSYSCNTRS)
 *   syssgi(SGI_EVENTCTR, HWPERF_PROF_CTR_SUSP / HWPERF_PROF_CTR_CONT)
 *
 * Results are those of the page: a positive generation number (0 from
 * HWPERF_GET_CPUCNTRS for an invalid cpuid, 0 from HWPERF_RELSYSCNTRS), or
 * -1 with errno set: EINVAL, EPERM, EBUSY as documented.
 *
 * HWPERF_PROFENABLE (event-counter profiling) is done here in part: IRIX's
 * kernel added one to a histogram bucket of the interrupted PC at each
 * threshold overflow; hwperfd can neither see a PC nor write the caller's
 * memory, so this library keeps the caller's struct prof regions, asks
 * hwperfd for a signal per overflow (HWPERFD_PROFENABLE), and its handler
 * adds the tick for the PC the signal interrupted, by IRIX's rules (see
 * profile_tick below).
 *
 * Differences from IRIX that a caller can see:
 *  - The control node is mode 0644 root: anyone may open it (read-only,
 *    as here) and read the system counters; the commands that change them
 *    (ENSYSCNTRS, SET_SYSEVCTRL, RELSYSCNTRS) answer EPERM unless the
 *    caller is root, as on IRIX.  EACCES at open (a node made private) is
 *    reported as EPERM.  Every other failure to open is reported as is:
 *    ENOENT means hwperfd is not mounted there, ENOTCONN that its daemon
 *    died.
 *  - Requests other than SGI_EVENTCTR, and unknown SGI_EVENTCTR commands,
 *    fail with EINVAL, as IRIX's syssgi did for requests it did not know.
 *  - HWPERF_GET_SYSEVCTRL copies exactly sizeof(hwperf_eventctrl_t) (64
 *    bytes) to the caller: SGI's own tools pass the address of a larger
 *    struct (an hwperf_profevctrarg_t) whose first member it is.
 *  - Bad addresses give EFAULT, as the kernel's copy would.
 *
 * The node is opened for each call (O_CLOEXEC) and closed before return, so
 * a restarted daemon is picked up and no descriptor leaks into children.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE		/* REG_RIP, process_vm_readv/writev, pipe2 */
#endif
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L	/* snprintf, O_CLOEXEC even under -std=c89 */
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <signal.h>
#include <ucontext.h>
#include <sys/uio.h>

#include <sys/syssgi.h>
#include <sys/profil.h>
#include <sys/sysmp.h>
#include <invent.h>
#include <time.h>

#include "../checked_copy.h" /* shared with the hwperfd-run shim */
#include "../reconnect.h"

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif

#define HWPERFD_DEFAULT_MOUNT "/run/hwperfd"

/* Open <mount>/control; -1 with errno on failure (EACCES mapped to EPERM). */
static int
open_control(void)
{
	const char *mount = getenv("HWPERFD_MOUNT");
	char path[4096];
	int fd, n;

	if (mount == NULL || *mount == '\0')
		mount = HWPERFD_DEFAULT_MOUNT;
	n = snprintf(path, sizeof path, "%s/control", mount);
	if (n < 0 || (size_t)n >= sizeof path) {
		errno = ENAMETOOLONG;
		return -1;
	}
	do {
		fd = open(path, O_RDONLY | O_CLOEXEC);
	} while (fd < 0 && errno == EINTR);
	if (fd < 0 && errno == EACCES)
		errno = EPERM;		/* IRIX: not root */
	return fd;
}

/* One ioctl on the control node; keeps the ioctl's errno across close().
 * A daemon found gone (ENOTCONN) is waited for, and the call repeated on
 * the next one's control node (reconnect.h): a restart is only a pause. */
static int
control_ioctl(unsigned long cmd, void *arg)
{
	int fd, result, saved;
	long long deadline = 0;

	for (;;) {
		fd = open_control();
		if (fd >= 0) {
			do {
				result = ioctl(fd, cmd, arg);
			} while (result < 0 && errno == EINTR);
			saved = errno;
			close(fd);
			errno = saved;
			if (result >= 0 || !hwperfd_lost_daemon(errno))
				return result;
		} else if (!hwperfd_lost_daemon(errno) && !(deadline && errno == ENOENT)) {
			return -1;	/* ENOENT before any lost daemon: not mounted */
		}
		saved = errno;
		if (deadline == 0)
			deadline = hwperfd_reconnect_deadline();
		if (deadline < 0 || hwperfd_now_ms() >= deadline) {
			errno = saved == ENOENT ? ENOTCONN : saved;
			return -1;
		}
		hwperfd_pause();
	}
}

static int
get_cpu_counters(int cpuid, hwperf_cntr_t *out)
{
	hwperf_cpucntrs_arg_t arg;
	int result;

	if (out == NULL) {
		errno = EFAULT;
		return -1;
	}
	memset(&arg, 0, sizeof arg);
	arg.cpuid = cpuid;
	result = control_ioctl(HWIOC_GET_CPUCNTRS, &arg);
	/* 0: an invalid cpuid; the caller's buffer is left alone. */
	if (result > 0)
		memcpy(out, &arg.cntr, sizeof *out);
	return result;
}

static int
get_system_control(void *out)
{
	hwperf_eventctrl_t ctl;
	int result;

	if (out == NULL) {
		errno = EFAULT;
		return -1;
	}
	result = control_ioctl(HWIOC_GET_SYSEVCTRL, &ctl);
	if (result >= 0)
		memcpy(out, &ctl, sizeof ctl);	/* 64 bytes, whatever the caller's type */
	return result;
}

/* -- event-counter profiling: HWPERF_PROFENABLE ----------------------------- */

/*
 * The regions of the last HWPERF_PROFENABLE, sorted by pr_off as IRIX's
 * evc_profil sorted its copy (an overflow bin, pr_off 0 and pr_scale 2, stays
 * last).  The handler reads them under prof_lock; a new call swaps them under
 * it with the tick signal blocked in its own thread.
 */
static struct prof *prof_regions;
static int prof_count;
static int prof_uint;			/* PROF_UINT: 32-bit buckets */
static volatile int prof_lock;
static int prof_installed;		/* the tick handler is in place */

int
hwperf_profsignal(void)
{
	return SIGRTMAX - 1;
}

/* Checked copies of the caller's memory (checked_copy.h): a bad pointer is
 * EFAULT, not SIGSEGV (IRIX's copyin, and its addupc's nofault handler). */

/* Add one to the bucket at addr; -1 if it is not the caller's memory. */
static int
bump(void *addr, int wide)
{
	unsigned int word;
	unsigned short half;

	if (wide) {
		if (hwperfd_checked_copy(&word, addr, sizeof word, 0) < 0)
			return -1;
		word++;
		return hwperfd_checked_copy(addr, &word, sizeof word, 1);
	}
	if (hwperfd_checked_copy(&half, addr, sizeof half, 0) < 0)
		return -1;
	half++;					/* wraps, as IRIX's 16-bit add */
	return hwperfd_checked_copy(addr, &half, sizeof half, 1);
}

/*
 * IRIX's addupc for one region: the byte offset of the bucket is
 * ((pc - pr_off) * pr_scale) >> 16 (all of the region's ticks go to the
 * first bucket when pr_scale is 2), rounded down to the bucket size.  -1:
 * the PC is outside the region (below pr_off, or past pr_size); 0: counted,
 * or the buckets were not the caller's memory, which turns the region off
 * (pr_scale 0), as IRIX's fault handler did.
 */
static int
add_tick(struct prof *p, uintptr_t pc)
{
	unsigned long long byte;
	uintptr_t off;

	if (pc < p->pr_off)
		return -1;
	off = pc - p->pr_off;
	if (p->pr_scale == 2)
		byte = 0;
	else {
#ifdef __SIZEOF_INT128__
		unsigned __int128 wide = (unsigned __int128)off * p->pr_scale >> 16;
		if (wide > 0xffffffffULL)
			return -1;
		byte = (unsigned long long)wide;
#else
		if (off > 0xffffffffffffULL)
			return -1;
		byte = ((unsigned long long)off * p->pr_scale) >> 16;
#endif
	}
	byte &= prof_uint ? ~3ULL : ~1ULL;
	if (byte >= p->pr_size)
		return -1;
	if (bump((char *)p->pr_base + byte, prof_uint) < 0)
		p->pr_scale = 0;
	return 0;
}

/*
 * IRIX's profileregion: the region with the largest pr_off below the PC
 * (the first region when none is), and, when the PC is outside it, the
 * overflow bin if the array ends with one.  A region that is off (pr_scale
 * 0 or 1) takes the tick and counts nothing.
 */
static void
profile_tick(uintptr_t pc)
{
	struct prof *best = &prof_regions[0], *last = &prof_regions[prof_count - 1];
	int i;

	for (i = 1; i < prof_count; i++)
		if (prof_regions[i].pr_off < pc && prof_regions[i].pr_off > best->pr_off)
			best = &prof_regions[i];
	if ((best->pr_scale & ~1u) && add_tick(best, pc) < 0)
		if (prof_count > 1 && last != best && last->pr_scale == 2 && last->pr_off == 0)
			(void)add_tick(last, pc);
}

static uintptr_t
interrupted_pc(void *context)
{
	ucontext_t *uc = context;

#if defined(__x86_64__)
	return (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__i386__)
	return (uintptr_t)uc->uc_mcontext.gregs[REG_EIP];
#elif defined(__aarch64__)
	return (uintptr_t)uc->uc_mcontext.pc;
#else
	(void)uc;
	return 0;
#endif
}

static void
prof_lock_take(void)
{
	while (__atomic_test_and_set(&prof_lock, __ATOMIC_ACQUIRE))
		;
}

static void
prof_lock_give(void)
{
	__atomic_clear(&prof_lock, __ATOMIC_RELEASE);
}

static void
prof_handler(int sig, siginfo_t *info, void *context)
{
	int saved = errno;

	(void)sig;
	/* Only hwperfd's ticks (sent by root, by another process) count; a kill
	 * or raise of the same signal by the program itself does not. */
	if (info != NULL && info->si_code == SI_USER && info->si_uid == 0 && info->si_pid != getpid()) {
		prof_lock_take();
		if (prof_regions != NULL)
			profile_tick(interrupted_pc(context));
		prof_lock_give();
	}
	errno = saved;
}

int
hwperf_profenable(hwperf_profevctrarg_t *args, struct prof *profp, int profcnt, unsigned int flags)
{
	hwperfd_profenable_t req;
	struct prof *copy, *old, tmp;
	struct sigaction action, previous;
	sigset_t tick, mask;
	int i, j, sortcnt, enable = 0, installed_now = 0, result, saved;

	memset(&req, 0, sizeof req);
	if (args == NULL || hwperfd_checked_copy(&req.hp_args, args, sizeof req.hp_args, 0) < 0) {
		errno = EFAULT;
		return -1;
	}
	if (profcnt <= 0 || profcnt > PROFIL_MAX) {
		errno = E2BIG;		/* evc_profil: profcnt <= 0 or > nprofile */
		return -1;
	}
#if !defined(__x86_64__) && !defined(__i386__) && !defined(__aarch64__)
	errno = ENOTSUP;		/* no way to read the interrupted PC here */
	return -1;
#endif
	copy = malloc((size_t)profcnt * sizeof *copy);
	if (copy == NULL) {
		errno = ENOMEM;
		return -1;
	}
	if (profp == NULL || hwperfd_checked_copy(copy, profp, (size_t)profcnt * sizeof *copy, 0) < 0) {
		free(copy);
		errno = EFAULT;
		return -1;
	}
	for (i = 0; i < profcnt; i++) {
		if (copy[i].pr_scale & ~1u)
			enable = 1;
		if (copy[i].pr_scale == 2 && copy[i].pr_off == 0 && i != profcnt - 1) {
			free(copy);	/* an overflow bin that is not last */
			errno = EINVAL;
			return -1;
		}
	}
	if (enable) {
		sortcnt = profcnt;
		if (copy[profcnt - 1].pr_off == 0 && copy[profcnt - 1].pr_scale == 2)
			sortcnt--;
		for (i = 1; i < sortcnt; i++) {
			tmp = copy[i];
			for (j = i - 1; j >= 0 && copy[j].pr_off > tmp.pr_off; j--)
				copy[j + 1] = copy[j];
			copy[j + 1] = tmp;
		}
		/* The handler first: hwperfd sends ticks only while they are caught. */
		if (!prof_installed) {
			memset(&action, 0, sizeof action);
			action.sa_sigaction = prof_handler;
			action.sa_flags = SA_SIGINFO | SA_RESTART;
			sigemptyset(&action.sa_mask);
			if (sigaction(hwperf_profsignal(), &action, &previous) < 0) {
				free(copy);
				return -1;
			}
			prof_installed = installed_now = 1;
		}
		req.hp_sig = hwperf_profsignal();
	}
	result = control_ioctl(HWPERFD_PROFENABLE, &req);
	if (result < 0) {
		saved = errno;
		if (installed_now) {
			sigaction(hwperf_profsignal(), &previous, NULL);
			prof_installed = 0;
		}
		free(copy);
		errno = saved;
		return -1;	/* refused: the regions in force stay as they were */
	}
	sigemptyset(&tick);
	sigaddset(&tick, hwperf_profsignal());
	sigprocmask(SIG_BLOCK, &tick, &mask);
	prof_lock_take();
	old = prof_regions;
	prof_regions = enable ? copy : NULL;
	prof_count = enable ? profcnt : 0;
	prof_uint = (flags & PROF_UINT) != 0;
	prof_lock_give();
	sigprocmask(SIG_SETMASK, &mask, NULL);
	free(old);
	if (!enable)
		free(copy);
	return result;
}

static int
eventctr(int cmd, va_list ap)
{
	switch (cmd) {
	case HWPERF_PROFENABLE: {
		hwperf_profevctrarg_t *args = va_arg(ap, hwperf_profevctrarg_t *);
		struct prof *profp = va_arg(ap, struct prof *);
		/* IRIX's kernel also read sprofil's flags from a fifth argument the
		 * page does not give; programs pass none, so none is read here. */
		return hwperf_profenable(args, profp, va_arg(ap, int), PROF_USHORT);
	}
	case HWPERF_ENSYSCNTRS:
		return control_ioctl(HWIOC_ENSYSCNTRS, va_arg(ap, hwperf_profevctrarg_t *));
	case HWPERF_SET_SYSEVCTRL:
		return control_ioctl(HWIOC_SET_SYSEVCTRL, va_arg(ap, hwperf_profevctrarg_t *));
	case HWPERF_GET_SYSCNTRS:
		return control_ioctl(HWIOC_GET_SYSCNTRS, va_arg(ap, hwperf_cntr_t *));
	case HWPERF_GET_CPUCNTRS: {
		int cpuid = va_arg(ap, int);
		return get_cpu_counters(cpuid, va_arg(ap, hwperf_cntr_t *));
	}
	case HWPERF_GET_SYSEVCTRL:
		return get_system_control(va_arg(ap, void *));
	case HWPERF_RELSYSCNTRS:
		return control_ioctl(HWIOC_RELSYSCNTRS, NULL);
	case HWPERF_PROF_CTR_SUSP:
		return control_ioctl(HWIOC_PROF_CTR_SUSP, NULL);
	case HWPERF_PROF_CTR_CONT:
		return control_ioctl(HWIOC_PROF_CTR_CONT, NULL);
	default:
		errno = EINVAL;
		return -1;
	}
}

/* HWPERFD_GETMACHINE on the mount's root directory: any user may ask. */
int
hwperfd_machine(hwperfd_machine_t *out)
{
	const char *mount = getenv("HWPERFD_MOUNT");
	int fd, result, saved;

	if (out == NULL) {
		errno = EFAULT;
		return -1;
	}
	do {
		fd = open(mount && *mount ? mount : HWPERFD_DEFAULT_MOUNT, O_RDONLY | O_CLOEXEC);
	} while (fd < 0 && errno == EINTR);
	if (fd < 0)
		return -1;
	do {
		result = ioctl(fd, HWPERFD_GETMACHINE, out);
	} while (result < 0 && errno == EINTR);
	saved = errno;
	close(fd);
	errno = saved;
	return result < 0 ? -1 : 0;
}

/* The emulated clock in Hz, or 0 with errno. */
static unsigned long long
machine_hz(void)
{
	hwperfd_machine_t m;

	if (hwperfd_machine(&m) < 0)
		return 0;
	if (m.hm_hz == 0) {
		errno = EIO;
		return 0;
	}
	return m.hm_hz;
}

/* IRIX's free-running cycle counter: the host's raw monotonic clock in
 * cycles of the emulated clock (0 if hwperfd cannot be asked). */
unsigned long long
hwperf_cyclecntr(void)
{
	static unsigned long long hz;
	struct timespec ts;

	if (hz == 0 && (hz = machine_hz()) == 0)
		return 0;
	clock_gettime(CLOCK_SGI_CYCLE, &ts);
	/* ns * hz / 1e9 without overflow for centuries of uptime */
	return (unsigned long long)ts.tv_sec * hz
		+ (unsigned long long)ts.tv_nsec * (hz / 1000000ULL) / 1000ULL
		+ (unsigned long long)ts.tv_nsec * (hz % 1000000ULL) / 1000000000ULL;
}

static int
getnvram(const char *name, char *buf)
{
	unsigned long long hz;

	if (name == NULL || buf == NULL) {
		errno = EFAULT;
		return -1;
	}
	if (strcmp(name, "cpufreq") != 0) {
		errno = EINVAL;		/* the only NVRAM variable emulated */
		return -1;
	}
	if ((hz = machine_hz()) == 0)
		return -1;
	sprintf(buf, "%llu", (hz + 500000ULL) / 1000000ULL);
	return 0;
}

static int
query_cyclecntr(unsigned *cycleval)
{
	unsigned long long hz = machine_hz();

	if (hz == 0)
		return -1;
	if (cycleval == NULL) {
		errno = EFAULT;
		return -1;
	}
	*cycleval = (unsigned)((1000000000000ULL + hz / 2) / hz);
	errno = ENODEV;		/* no /dev/mmem: read it with hwperf_cyclecntr() */
	return -1;
}

int
syssgi(int request, ...)
{
	va_list ap;
	int result;

	va_start(ap, request);
	switch (request) {
	case SGI_EVENTCTR:
		result = eventctr(va_arg(ap, int), ap);
		break;
	case SGI_GETNVRAM: {
		const char *name = va_arg(ap, const char *);
		result = getnvram(name, va_arg(ap, char *));
		break;
	}
	case SGI_CYCLECNTR_SIZE:
		result = 64;
		break;
	case SGI_QUERY_CYCLECNTR:
		result = query_cyclecntr(va_arg(ap, unsigned *));
		break;
	default:
		errno = EINVAL;		/* as IRIX's syssgi for requests it did not know */
		result = -1;
	}
	va_end(ap);
	return result;
}

int
sysmp(int cmd, ...)
{
	hwperfd_machine_t m;

	if (cmd != MP_NPROCS && cmd != MP_NAPROCS) {
		errno = EINVAL;
		return -1;
	}
	if (hwperfd_machine(&m) < 0)
		return -1;
	return m.hm_ncpus;
}

/* -- the hardware inventory, <invent.h> ------------------------------------ */

#define INV_MAX_CPUS 512

static inventory_t *inventory;		/* the list getinvent() walks */
static inventory_t *inventory_next;
static int inventory_ready;

static void
inventory_add(inventory_t **tail, int class, int type, long controller, long unit, int state)
{
	inventory_t *item = calloc(1, sizeof *item);

	if (item == NULL)
		return;
	item->inv_class = class;
	item->inv_type = type;
	item->inv_controller = controller;
	item->inv_unit = unit;
	item->inv_state = state;
	*tail = item;
}

int
setinvent(void)
{
	hwperfd_machine_t m;
	inventory_t **tail;
	int cpu, ncpus, prid, r12k;

	endinvent();
	if (hwperfd_machine(&m) < 0)
		return -1;
	r12k = m.hm_imp == C0_IMP_R12000;
	prid = r12k ? (C0_IMP_R12000 << C0_IMPSHIFT) | 0x35 : (C0_IMP_R10000 << C0_IMPSHIFT) | 0x34;
	ncpus = m.hm_ncpus < INV_MAX_CPUS ? m.hm_ncpus : INV_MAX_CPUS;
	tail = &inventory;
	inventory_add(tail, INV_PROCESSOR, INV_CPUBOARD, (long)((m.hm_hz + 500000ULL) / 1000000ULL), ncpus,
		      INV_IP27BOARD);
	for (cpu = 0; cpu < ncpus && *tail; cpu++) {
		tail = &(*tail)->inv_next;
		inventory_add(tail, INV_PROCESSOR, INV_CPUCHIP, 0, cpu, prid);
		if (*tail) {
			tail = &(*tail)->inv_next;
			inventory_add(tail, INV_PROCESSOR, INV_FPUCHIP, 0, cpu, prid);
		}
	}
	if (*tail) {
		tail = &(*tail)->inv_next;
		inventory_add(tail, INV_MEMORY, INV_ICACHE, 0, 0, 32 * 1024);
	}
	if (*tail) {
		tail = &(*tail)->inv_next;
		inventory_add(tail, INV_MEMORY, INV_DCACHE, 0, 0, 32 * 1024);
	}
	if (*tail) {
		tail = &(*tail)->inv_next;
		inventory_add(tail, INV_MEMORY, INV_SIDCACHE, 0, 0, (r12k ? 8 : 4) * 1024 * 1024);
	}
	inventory_next = inventory;
	inventory_ready = 1;
	return 0;
}

inventory_t *
getinvent(void)
{
	inventory_t *item;

	if (!inventory_ready && setinvent() < 0)
		return NULL;
	item = inventory_next;
	if (item)
		inventory_next = item->inv_next;
	return item;
}

void
endinvent(void)
{
	while (inventory) {
		inventory_t *next = inventory->inv_next;
		free(inventory);
		inventory = next;
	}
	inventory_next = NULL;
	inventory_ready = 0;
}

int
scaninvent(int (*fun)(inventory_t *, void *), void *arg)
{
	inventory_t *item;
	int result = 0;

	if (fun == NULL || setinvent() < 0)
		return -1;
	for (item = getinvent(); item; item = getinvent())
		if ((result = fun(item, arg)) != 0)
			break;
	endinvent();
	return result;
}
