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

#define HWIOC_PROFENABLE	_IOW('h', HWPERF_PROFENABLE, hwperf_profevctrarg_t)
#define HWIOC_ENSYSCNTRS	_IOW('h', HWPERF_ENSYSCNTRS, hwperf_profevctrarg_t)
#define HWIOC_GET_CPUCNTRS	_IOWR('h', HWPERF_GET_CPUCNTRS, hwperf_cpucntrs_arg_t)
#define HWIOC_PROF_CTR_SUSP	_IO('h', HWPERF_PROF_CTR_SUSP)
#define HWIOC_PROF_CTR_CONT	_IO('h', HWPERF_PROF_CTR_CONT)
#define HWIOC_RELSYSCNTRS	_IO('h', HWPERF_RELSYSCNTRS)
#define HWIOC_GET_SYSCNTRS	_IOR('h', HWPERF_GET_SYSCNTRS, hwperf_cntr_t)
#define HWIOC_GET_SYSEVCTRL	_IOR('h', HWPERF_GET_SYSEVCTRL, hwperf_eventctrl_t)
#define HWIOC_SET_SYSEVCTRL	_IOW('h', HWPERF_SET_SYSEVCTRL, hwperf_profevctrarg_t)

/*
 * syssgi(SGI_EVENTCTR, cmd, ...): implemented in libhwperf (hwperfd's client
 * library, lib/syssgi.c) on top of the HWIOC_* ioctls, with IRIX's arguments:
 *   HWPERF_ENSYSCNTRS, HWPERF_SET_SYSEVCTRL, HWPERF_PROFENABLE:
 *						hwperf_profevctrarg_t *
 *   HWPERF_GET_SYSCNTRS:			hwperf_cntr_t *
 *   HWPERF_GET_CPUCNTRS:			int cpuid, hwperf_cntr_t *
 *   HWPERF_GET_SYSEVCTRL:			hwperf_eventctrl_t * (64 bytes
 *						written, whatever the type)
 *   HWPERF_RELSYSCNTRS:			none
 * Returns what r10k_counters(5) gives, or -1 with errno.  The control node
 * is root's (0600): a non-root caller gets EPERM, as on IRIX.  Requests
 * other than SGI_EVENTCTR and unknown commands: EINVAL.  HWPERF_PROFENABLE,
 * HWPERF_PROF_CTR_SUSP and HWPERF_PROF_CTR_CONT: ENOTSUP (not emulated).
 */
int syssgi(int request, ...);

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
