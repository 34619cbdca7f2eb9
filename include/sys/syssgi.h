/*
 * hwperfd: IRIX syssgi(SGI_EVENTCTR, ...) for Linux.
 *
 * Linux has no syssgi system call.  hwperfd serves the SGI_EVENTCTR
 * sub-commands as ioctls on the root-only control node of its mount (type
 * letter 'h', number = the IRIX sub-command), and syssgi() below is
 * implemented in libhwperf, hwperfd's client library, so that IRIX sources
 * calling syssgi(SGI_EVENTCTR, HWPERF_..., ...) compile and link unchanged
 * (link with -lhwperf).  structs/procfs.py mirrors these values.
 */
#ifndef __HWPERFD_SYS_SYSSGI_H__
#define __HWPERFD_SYS_SYSSGI_H__

#include <sys/ioctl.h>
#include <sys/hwperftypes.h>
#include <sys/hwperfmacros.h>	/* HWPERF_PROFENABLE ... HWPERF_SET_SYSEVCTRL */

#ifdef __cplusplus
extern "C" {
#endif

#define SGI_EVENTCTR	174

/* HWPERF_GET_CPUCNTRS: cpuid in, that CPU's counts out. */
typedef struct hwperf_cpucntrs_arg {
	int		cpuid;		/* in: the CPU */
	int		cpu_pad;	/* zero */
	hwperf_cntr_t	cntr;		/* out: its counts */
} hwperf_cpucntrs_arg_t;				/* 264 bytes */

#define HWIOC_PROFENABLE	_IOW('h', HWPERF_PROFENABLE, hwperf_profevctrarg_t)	/* EFAULT: see below */
#define HWIOC_ENSYSCNTRS	_IOW('h', HWPERF_ENSYSCNTRS, hwperf_profevctrarg_t)
#define HWIOC_GET_CPUCNTRS	_IOWR('h', HWPERF_GET_CPUCNTRS, hwperf_cpucntrs_arg_t)
#define HWIOC_PROF_CTR_SUSP	_IO('h', HWPERF_PROF_CTR_SUSP)
#define HWIOC_PROF_CTR_CONT	_IO('h', HWPERF_PROF_CTR_CONT)
#define HWIOC_RELSYSCNTRS	_IO('h', HWPERF_RELSYSCNTRS)
#define HWIOC_GET_SYSCNTRS	_IOR('h', HWPERF_GET_SYSCNTRS, hwperf_cntr_t)
#define HWIOC_GET_SYSEVCTRL	_IOR('h', HWPERF_GET_SYSEVCTRL, hwperf_eventctrl_t)
#define HWIOC_SET_SYSEVCTRL	_IOW('h', HWPERF_SET_SYSEVCTRL, hwperf_profevctrarg_t)

/*
 * HWPERF_PROFENABLE profiles the calling process: at each threshold overflow
 * a PC tick goes into the sprofil(2)-style histograms (struct prof,
 * <sys/profil.h>) it passed.  Those are in the caller's memory, which hwperfd
 * cannot write, so libhwperf keeps them, records the ticks, and sends hwperfd
 * only the counter request with the signal the ticks are to come on
 * (HWPERFD_PROFENABLE; hp_sig 0: turn profiling off).  The bare
 * HWIOC_PROFENABLE answers EFAULT.  HWPERF_PROF_CTR_SUSP and _CONT act on
 * the caller too.
 */
typedef struct hwperfd_profenable {
	hwperf_profevctrarg_t	hp_args;	/* the caller's request */
	int			hp_sig;		/* signal of the PC ticks, 0: off */
	int			hp_pad;		/* zero */
} hwperfd_profenable_t;					/* 204 bytes */

#define HWPERFD_PROFENABLE	_IOW('h', 130, hwperfd_profenable_t)

/*
 * syssgi(SGI_EVENTCTR, cmd, ...): implemented in libhwperf (hwperfd's client
 * library, lib/irix/syssgi.c) on top of the HWIOC_* ioctls, with IRIX's arguments:
 *   HWPERF_ENSYSCNTRS, HWPERF_SET_SYSEVCTRL:	hwperf_profevctrarg_t *
 *   HWPERF_PROFENABLE:				hwperf_profevctrarg_t *,
 *						struct prof *profp, int profcnt
 *						(16-bit buckets, PROF_USHORT)
 *   HWPERF_PROF_CTR_SUSP, HWPERF_PROF_CTR_CONT: none
 *   HWPERF_GET_SYSCNTRS:			hwperf_cntr_t *
 *   HWPERF_GET_CPUCNTRS:			int cpuid, hwperf_cntr_t *
 *   HWPERF_GET_SYSEVCTRL:			hwperf_eventctrl_t * (64 bytes
 *						written, whatever the type)
 *   HWPERF_RELSYSCNTRS:			none
 * Returns what r10k_counters(5) gives, or -1 with errno.  The commands that
 * change system mode need root (EPERM).  Requests other than SGI_EVENTCTR
 * and unknown commands: EINVAL.
 */
int syssgi(int request, ...);

/*
 * HWPERF_PROFENABLE with sprofil's flags: PROF_UINT for 32-bit buckets
 * (IRIX's kernel read them from a fifth syssgi argument the page does not
 * list; syssgi() here reads no fifth argument and uses 16-bit buckets).
 */
struct prof;
int hwperf_profenable(hwperf_profevctrarg_t *args, struct prof *profp, int profcnt, unsigned int flags);

/* The signal libhwperf takes for its PC ticks while a process profiles. */
int hwperf_profsignal(void);

/*
 * The rest of syssgi that counter tools call (libhwperf answers them from the
 * machine hwperfd emulates - its --cpu-type, --cpus, --mhz - which any user
 * may ask for with HWPERFD_GETMACHINE on the mount's root directory):
 *   SGI_GETNVRAM, char *name, char *buf:	"cpufreq" -> the clock in MHz,
 *						as decimal text; other names EINVAL
 *   SGI_CYCLECNTR_SIZE:			64 (bits of the cycle counter)
 *   SGI_QUERY_CYCLECNTR, unsigned *cycleval:	*cycleval = picoseconds per
 *						count; returns -1, ENODEV: Linux has
 *						no /dev/mmem to map the counter from
 * The cycle counter itself: clock_gettime(CLOCK_SGI_CYCLE) as on IRIX (the
 * host's CLOCK_MONOTONIC_RAW), or hwperf_cyclecntr(), which returns it in
 * counts of cycleval picoseconds, i.e. cycles of the emulated clock.
 * Other requests keep answering EINVAL.
 */
#define SGI_GETNVRAM		9
#define SGI_QUERY_CYCLECNTR	13
#define SGI_CYCLECNTR_SIZE	165

#ifndef CLOCK_SGI_CYCLE
#define CLOCK_SGI_CYCLE		4	/* Linux's CLOCK_MONOTONIC_RAW */
#endif

unsigned long long hwperf_cyclecntr(void);

/* C0_IMP_* (PRId implementation numbers, IRIX <sys/sbd.h>) */
#ifndef C0_IMP_R10000
#define C0_IMP_R10000		0x09
#define C0_IMP_R12000		0x0e
#endif

/* HWPERFD_GETMACHINE, on the mount's root directory, any user: the machine. */
typedef struct hwperfd_machine {
	int			hm_imp;		/* C0_IMP_*, 0 for another type */
	int			hm_ncpus;	/* --cpus */
	unsigned long long	hm_hz;		/* --mhz, in Hz */
	char			hm_name[16];	/* "r10000", "r12000" */
} hwperfd_machine_t;					/* 32 bytes */

#define HWPERFD_GETMACHINE	_IOR('h', 128, hwperfd_machine_t)

/* libhwperf: the machine, or -1 with errno (ENOENT: no hwperfd mounted). */
int hwperfd_machine(hwperfd_machine_t *out);

#ifdef __cplusplus
}
#endif

#endif /* __HWPERFD_SYS_SYSSGI_H__ */
