/*
 * hwperfd: IRIX /proc(4) for Linux - the hardware event counter ioctls and
 * the informational ones counter tools call beside them.
 *
 * This is IRIX's <sys/procfs.h>, not glibc's: prpsinfo_t and prusage_t are
 * IRIX's (glibc's prpsinfo_t is the ELF core-dump note, without pr_rssize),
 * so glibc's header - which only <thread_db.h> and <proc_service.h> need -
 * is not included.  hwperfd serves these ioctls on the <pid> files of its
 * FUSE mount (and the informational ones on pinfo/<pid>).  IRIX numbered
 * them ('q' << 8) | n; FUSE needs Linux's _IOC encoding (direction and size),
 * so the type letter and numbers are kept and the encoding added.
 * structs/procfs.py and structs/prinfo.py mirror these values.
 */
#ifndef __HWPERFD_SYS_PROCFS_H__
#define __HWPERFD_SYS_PROCFS_H__

#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/hwperftypes.h>
#include <sys/hwperfmacros.h>

/* Acquire the counters; returns the generation number (> 0). */
#define PIOCENEVCTRS	_IOW('q', 233, hwperf_profevctrarg_t)
/* Release the counters; the counts stay readable. */
#define PIOCRELEVCTRS	_IO('q', 234)
/* Read the 32 virtual counters; returns the generation number. */
#define PIOCGETEVCTRS	_IOR('q', 235, hwperf_cntr_t)
/* Read the counters and the resource usage; returns the generation. */
#define PIOCGETPREVCTRS	_IOR('q', 236, hwperf_prusage_t)
/* Read the 32 control words; EINVAL if the counters are not in use. */
#define PIOCGETEVCTRL	_IOR('q', 237, hwperf_eventctrl_t)
/* Change events/thresholds/signal; returns the new generation. */
#define PIOCSETEVCTRL	_IOW('q', 238, hwperf_profevctrarg_t)
/* Have a child's counts added to the parent's at exit; the ioctl's raw
 * argument may carry the child's pid. */
#define PIOCSAVECCNTRS	_IO('q', 239)

/*
 * IRIX's pointer-carrying calls (see <sys/hwperftypes.h>).  hwperfd answers
 * these numbers with EFAULT - it cannot follow the pointers - unless the
 * program runs under hwperfd-run, whose preload library passes the structs
 * inline as the HWPERFD_ forms below.
 */
/* Acquire, optionally starting from saved counts and generation. */
#define PIOCENEVCTRSEX	_IOW('q', 240, hwperf_profevctrargex_t)
/* Control words plus overflow signal and thresholds. */
#define PIOCGETEVCTRLEX	_IOW('q', 241, hwperf_getctrlex_arg_t)
#define HWPERFD_PIOCENEVCTRSEX	_IOW('q', 240, hwperfd_enevctrsex_t)
#define HWPERFD_PIOCGETEVCTRLEX	_IOR('q', 241, hwperfd_getevctrlex_t)

/*
 * hwperfd's own, on a process's own file (or a thread's own, under
 * hwperfd-run), by that process (thread) only: the CPU ns it may run before
 * its counters' nearest overflow interrupt could come, caught up first, so
 * that the same call at that instant finds the overflow and its signal comes
 * as it returns.  The hwperfd-run shim arms a timer on it (docs/overflow.md).
 * ho_left HWPERFD_OVFL_NONE: none can come (nothing interrupts, the clock is
 * manual); ho_at the process's CPU clock (CLOCK_PROCESS_CPUTIME_ID, ns) they
 * were caught up to, for the instant ho_at + ho_left: its other threads run
 * on while the call is on its way (0 for a thread's own counters, whose
 * thread is blocked in the call); ho_clock the CPU clock the counters count
 * (HWPERFD_STATE_CLOCK_PROCESS: the process's, _THREAD: the thread's own);
 * ho_sig their signal.
 */
typedef struct hwperfd_ovflns {
	unsigned long long	ho_left;
	unsigned long long	ho_at;
	int			ho_clock;
	int			ho_sig;
} hwperfd_ovflns_t;
#define HWPERFD_PIOCOVFLNS	_IOR('h', 131, hwperfd_ovflns_t)
#define HWPERFD_OVFL_NONE	(~0ULL)

/*
 * Informational ioctls (IRIX proc(4)), filled from what Linux reports.
 * Layouts are IRIX's 64-bit ABI with Linux's uid_t, gid_t, pid_t, dev_t.
 * Process control (stop, run, registers, memory) is not offered: ENOTTY.
 */
#ifndef _CPUID_T
#define _CPUID_T
typedef short cpuid_t;		/* IRIX's processor number type */
#endif
#ifndef _ULONG_T
#define _ULONG_T
typedef unsigned long ulong_t;
typedef unsigned int uint_t;
#endif

#define PRARGSZ		80	/* pr_psargs */
#define PRCOMSIZ	32	/* pr_fname */
#define PRNODEV		((dev_t)-1)	/* no controlling terminal */

/* pr_state */
#define SSLEEP		1	/* waiting (Linux S, D, I) */
#define SRUN		2	/* running or runnable (R) */
#define SZOMB		3	/* exited, not waited for (Z, X) */
#define SSTOP		4	/* stopped (T, t) */

/* PIOCPSINFO: what ps(1) shows. */
typedef struct prpsinfo {
	char	pr_state;	/* SSLEEP, SRUN, SZOMB, SSTOP */
	char	pr_sname;	/* 'S', 'R', 'Z', 'T' */
	char	pr_zomb;	/* != 0: exited, not waited for */
	char	pr_nice;	/* nice value + 20 (IRIX: 0..39, 20 normal) */
	ulong_t	pr_flag;	/* 0 */
	uid_t	pr_uid;		/* real user id */
	gid_t	pr_gid;		/* real group id */
	pid_t	pr_pid;		/* process id */
	pid_t	pr_ppid;	/* parent process id */
	pid_t	pr_pgrp;	/* process group */
	pid_t	pr_sid;		/* session id */
	char	*pr_addr;	/* 0: Linux does not tell */
	long	pr_size;	/* image size in pages (getpagesize()) */
	long	pr_rssize;	/* resident set size in pages */
	char	*pr_wchan;	/* 0: Linux does not tell */
	timespec_t pr_start;	/* start time, since the epoch */
	timespec_t pr_time;	/* user + system CPU time */
	long	pr_pri;		/* priority (Linux's, stat field 18) */
	long	pr_oldpri;	/* the same */
	char	pr_cpu;		/* 0 */
	dev_t	pr_ttydev;	/* controlling terminal, PRNODEV if none */
	char	pr_clname[8];	/* scheduling class: "TS" or "RT" */
	char	pr_fname[PRCOMSIZ];	/* command name (Linux comm) */
	char	pr_psargs[PRARGSZ];	/* first characters of the arguments */
	uint_t	pr_spare1;
	cpuid_t	pr_sonproc;	/* emulated CPU it runs on, -1 if not running */
	timespec_t pr_ctime;	/* user + system CPU time of waited-for children */
	uid_t	pr_shareuid;	/* 0 */
	uint_t	pr_spid;	/* 0 */
	timespec_t pr_qtime;	/* 0 */
	char	pr_wname[16];	/* "" */
	uint_t	pr_thds;	/* threads */
	int64_t	pr_fill[10];
} prpsinfo_t;						/* 408 bytes */

/* PIOCUSAGE: the fields of hwperf_prusage_t before pu_cpu_mon. */
typedef struct prusage {
	timespec_t	pu_tstamp;
	timespec_t	pu_starttime;
	timespec_t	pu_utime;
	timespec_t	pu_stime;
	ulong_t	pu_minf;
	ulong_t	pu_majf;
	ulong_t	pu_utlb;
	ulong_t	pu_nswap;
	ulong_t	pu_gbread;
	ulong_t	pu_bread;
	ulong_t	pu_gbwrit;
	ulong_t	pu_bwrit;
	ulong_t	pu_sigs;
	ulong_t	pu_vctx;
	ulong_t	pu_ictx;
	ulong_t	pu_sysc;
	ulong_t	pu_syscr;
	ulong_t	pu_syscw;
	ulong_t	pu_syscps;
	ulong_t	pu_sysci;
	ulong_t	pu_graphfifo;
	ulong_t	pu_graph_req[8];
	ulong_t	pu_graph_wait[8];
	ulong_t	pu_size;
	ulong_t	pu_rss;
	ulong_t	pu_inblock;
	ulong_t	pu_oublock;
	ulong_t	pu_vfault;
	ulong_t	pu_ktlb;
} prusage_t;						/* 376 bytes */

/* PIOCMAP: one per mapping, then an all-zero entry. */
typedef struct prmap {
	char	*pr_vaddr;	/* start address */
	ulong_t	pr_size;	/* bytes */
	long long pr_off;	/* offset into the mapped file */
	ulong_t	pr_mflags;	/* MA_* */
	long	pr_fill[4];
} prmap_t;						/* 64 bytes */

#define MA_READ		0x0001
#define MA_WRITE	0x0002
#define MA_EXEC		0x0004
#define MA_SHARED	0x0008	/* shared mapping */
#define MA_BREAK	0x0010	/* the brk(2) heap */
#define MA_STACK	0x0020	/* the main stack */
#define MA_PHYS		0x0040
#define MA_MAPZERO	0x0080

/*
 * A FUSE ioctl moves at most 16383 bytes, so PIOCMAP answers at most
 * PRMAPMAX entries, the last the all-zero one; PIOCNMAP still counts them
 * all.  Only the entries answered are written: a buffer of PIOCNMAP + 1
 * entries, as IRIX programs allocate, is enough.
 */
#define PRMAPMAX	255

/* PIOCCRED */
typedef struct prcred {
	uid_t	pr_euid;
	uid_t	pr_ruid;
	uid_t	pr_suid;
	gid_t	pr_egid;
	gid_t	pr_rgid;
	gid_t	pr_sgid;
	uint_t	pr_ngroups;
} prcred_t;						/* 28 bytes */

/* PIOCGETPTIMER: a timespec_t[MAX_PROCTIMER], one per thread state. */
#define AS_USR_RUN	0	/* user mode */
#define AS_SYS_RUN	1	/* system mode */
#define AS_INT_RUN	2
#define AS_BIO_WAIT	3	/* block I/O (Linux delay accounting) */
#define AS_MEM_WAIT	4
#define AS_SELECT_WAIT	5
#define AS_JCL_WAIT	6
#define AS_RUNQ_WAIT	7	/* runnable, waiting for a CPU */
#define AS_SLEEP_WAIT	8
#define AS_STRMON_WAIT	9
#define AS_PHYSIO_WAIT	10
#define MAX_PROCTIMER	11

#define PIOCPSINFO	_IOR('q', 30, prpsinfo_t)
#define PIOCNMAP	_IOR('q', 31, int)
#define PIOCMAP		_IOR('q', 32, prmap_t[PRMAPMAX])
#define PIOCCRED	_IOR('q', 34, prcred_t)
#define PIOCUSAGE	_IOR('q', 43, prusage_t)
#define PIOCGETPTIMER	_IOR('q', 250, timespec_t[MAX_PROCTIMER])

#endif /* __HWPERFD_SYS_PROCFS_H__ */
