/*
 * hwperfd: IRIX hardware event counter types for Linux.
 *
 * The structs exchanged with hwperfd through the /proc/<pid> PIOC* ioctls
 * (see <sys/procfs.h>) and the control node's HWIOC_* ioctls (see
 * <sys/syssgi.h>).  Layouts are native x86-64; structs/hwperftypes.py mirrors
 * them and tests/abi/test_headers.py checks that both agree.
 */
#ifndef __SYS_HWPERFTYPES_H__
#define __SYS_HWPERFTYPES_H__

#include <stdint.h>
#include <time.h>
#include <sys/hwperfmacros.h>

/*
 * Strict ISO modes (-std=c89/c99) hide struct timespec in glibc's <time.h>;
 * hwperf_prusage_t needs it whatever the feature macros are.
 */
#if defined(__GLIBC__) && !defined(_STRUCT_TIMESPEC) && defined(__has_include)
# if __has_include(<bits/types/struct_timespec.h>)
#  include <bits/types/struct_timespec.h>
# endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*
 * IRIX sources use __uint64_t.  glibc declares it already (<bits/types.h>,
 * pulled in by <stdint.h>); elsewhere provide it.
 */
#if !defined(__GLIBC__)
typedef uint64_t __uint64_t;
typedef int64_t __int64_t;
typedef uint32_t __uint32_t;
typedef int32_t __int32_t;
#endif

/*
 * One event specifier.  IRIX (big-endian) declared hwp_ev:11, hwp_ie:1,
 * hwp_mode:4, so that hwperf_spec == (ev << 5) | (ie << 4) | mode; programs
 * build hwperf_spec by hand with HWPERF_EVSHIFT and friends.  Little-endian
 * compilers allocate bit-fields from the least significant bit, so the order
 * is reversed there to keep the same value.
 */
struct hwperf_ctrlreg {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	unsigned short	hwp_mode:4,	/* HWPERF_CNTEN_U/S/K/E count modes */
			hwp_ie	:1,	/* overflow interrupt enable */
			hwp_ev	:11;	/* event number on the slot's counter */
#else
	unsigned short	hwp_ev	:11,	/* event number on the slot's counter */
			hwp_ie	:1,	/* overflow interrupt enable */
			hwp_mode:4;	/* HWPERF_CNTEN_U/S/K/E count modes */
#endif
};

typedef union {
	short			hwperf_spec;	/* (ev << 5) | (ie << 4) | mode */
	struct hwperf_ctrlreg	hwperf_creg;
} hwperf_ctrl_t;

/* Slots 0-15: hardware counter 0; 16-31: counter 1 (HWPERF_CNT1BASE). */
typedef struct {
	hwperf_ctrl_t	hwp_evctrl[HWPERF_EVENTMAX];
} hwperf_eventctrl_t;					/* 64 bytes */

typedef struct hwperf_profevctrarg {
	hwperf_eventctrl_t hwp_evctrargs;		/* event specifiers */
	int		hwp_ovflw_freq[HWPERF_EVENTMAX];/* overflow thresholds, 0: none */
	int		hwp_ovflw_sig;			/* overflow signal 1..32, 0: none */
} hwperf_profevctrarg_t;				/* 196 bytes */

/* The 64-bit virtual counters, one per slot. */
typedef struct {
	uint64_t	hwp_evctr[HWPERF_EVENTMAX];
} hwperf_cntr_t;					/* 256 bytes */

/* For PIOCENEVCTRSEX and PIOCGETEVCTRLEX (below). */
typedef struct hwperf_profevctraux {
	int		hwp_aux_gen;			/* generation number */
	hwperf_cntr_t	hwp_aux_cntr;			/* counts */
} hwperf_profevctraux_t;				/* 264 bytes */

typedef struct hwperf_eventctrlaux {
	int		hwp_aux_sig;			/* overflow signal */
	int		hwp_aux_freq[HWPERF_EVENTMAX];	/* overflow thresholds */
} hwperf_eventctrlaux_t;				/* 132 bytes */

/*
 * IRIX's PIOCENEVCTRSEX and PIOCGETEVCTRLEX arguments: two pointers each.
 * PIOCENEVCTRSEX acquires the counters like PIOCENEVCTRS and, for
 * checkpoint/restart, starts them from hwp_aux's counts and generation
 * (hwp_aux may be NULL); PIOCGETEVCTRLEX returns the control words and the
 * overflow signal and thresholds.
 */
typedef struct hwperf_profevctrargex {
	hwperf_profevctrarg_t	*hwp_args;
	hwperf_profevctraux_t	*hwp_aux;
} hwperf_profevctrargex_t;

typedef struct hwperf_getctrlex_arg {
	hwperf_eventctrl_t	*hwp_evctrl;
	hwperf_eventctrlaux_t	*hwp_evctrlaux;
} hwperf_getctrlex_arg_t;

/*
 * A FUSE server cannot follow pointers: hwperfd serves the same calls with
 * the pointed-to structs inline (HWPERFD_PIOCENEVCTRSEX and
 * HWPERFD_PIOCGETEVCTRLEX in <sys/procfs.h>).  Programs run under
 * hwperfd-run may keep using IRIX's pointer forms.
 */
typedef struct hwperfd_enevctrsex {
	hwperf_profevctrarg_t	hwp_args;
	hwperf_profevctraux_t	hwp_aux;
} hwperfd_enevctrsex_t;					/* 464 bytes */

typedef struct hwperfd_getevctrlex {
	hwperf_eventctrl_t	hwp_evctrl;
	hwperf_eventctrlaux_t	hwp_evctrlaux;
} hwperfd_getevctrlex_t;				/* 196 bytes */

typedef struct timespec timespec_t;

/*
 * cpu_mon_t: IRIX's was a private kernel struct.  This is hwperfd's own: a
 * snapshot of the target's counter control block, returned inside
 * hwperf_prusage_t by PIOCGETPREVCTRS.
 */
typedef struct cpu_mon {
	int		cm_flags;	/* HWPERF_CM_* bits: ENABLED, SYSMODE,
					 * LOST, RELEASED, VALID, PROFILING,
					 * SUSPENDED */
	int		cm_gen;		/* generation number of the counts; the
					 * value PIOC* calls return */
	int		cm_mode;	/* HWPERF_CM_MODE_NONE/USER/SYSTEM: who
					 * holds the counters */
	int		cm_sig;		/* signal sent on overflow, 0: none */
	hwperf_ctrl_t	cm_evctrl[HWPERF_EVENTMAX];	/* the control words
					 * in force, one per slot */
	int		cm_ovflw_freq[HWPERF_EVENTMAX];	/* overflow thresholds
					 * per slot, 0: none */
	uint64_t	cm_enabled_ns;	/* CPU time (ns) of the target while its
					 * counters were enabled */
	uint64_t	cm_evctr[HWPERF_EVENTMAX];	/* the 64-bit counts, as
					 * PIOCGETEVCTRS returns them */
	uint64_t	cm_active_ns[HWPERF_EVENTMAX];	/* CPU time (ns) each
					 * slot was actually on its hardware
					 * counter; with several events on a
					 * counter (multiplexing) the ratio to
					 * cm_enabled_ns is the share */
} cpu_mon_t;						/* 728 bytes */

/* PIOCGETPREVCTRS: counters plus the process's resource usage. */
typedef struct hwperf_prusage {
	timespec_t	pu_tstamp;	/* time stamp */
	timespec_t	pu_starttime;	/* time the process started */
	timespec_t	pu_utime;	/* user CPU time */
	timespec_t	pu_stime;	/* system CPU time */
	uint64_t	pu_minf;	/* minor page faults */
	uint64_t	pu_majf;	/* major page faults */
	uint64_t	pu_utlb;	/* user TLB misses */
	uint64_t	pu_nswap;	/* swaps */
	uint64_t	pu_gbread;	/* gigabytes read ... */
	uint64_t	pu_bread;	/* ... and remaining bytes */
	uint64_t	pu_gbwrit;	/* gigabytes written ... */
	uint64_t	pu_bwrit;	/* ... and remaining bytes */
	uint64_t	pu_sigs;	/* signals received */
	uint64_t	pu_vctx;	/* voluntary context switches */
	uint64_t	pu_ictx;	/* involuntary context switches */
	uint64_t	pu_sysc;	/* system calls */
	uint64_t	pu_syscr;	/* read() calls */
	uint64_t	pu_syscw;	/* write() calls */
	uint64_t	pu_syscps;	/* poll() / select() calls */
	uint64_t	pu_sysci;	/* ioctl() calls */
	uint64_t	pu_graphfifo;	/* graphics pipeline stalls */
	uint64_t	pu_graph_req[8];	/* graphics resource requests */
	uint64_t	pu_graph_wait[8];	/* graphics resource waits */
	uint64_t	pu_size;	/* image size in pages */
	uint64_t	pu_rss;		/* resident set size in pages */
	uint64_t	pu_inblock;	/* block input operations */
	uint64_t	pu_oublock;	/* block output operations */
	uint64_t	pu_vfault;	/* total vfaults */
	uint64_t	pu_ktlb;	/* kernel TLB misses */
	cpu_mon_t	pu_cpu_mon;	/* counter state, see above */
} hwperf_prusage_t;					/* 1104 bytes */

#ifdef __cplusplus
}
#endif

#endif /* __SYS_HWPERFTYPES_H__ */
