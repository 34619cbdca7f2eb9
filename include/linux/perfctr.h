/*
 * <linux/perfctr.h> for hwperfd: Linux perfctr 2.6's user interface.
 *
 * Structs, constants and ioctl names are perfctr 2.6's (API 5.2).  perfctr's
 * driver passed most structs through a tagged "struct perfctr_struct_buf";
 * hwperfd's node <mount>/perfctr (hwperfd-run sends /dev/perfctr there) is
 * a FUSE file whose ioctls carry their size in the command number, so each
 * command here takes the struct itself.  Use libperfctr (-lperfctr): it
 * speaks these ioctls, and binds an open node to a thread's vperfctr where
 * perfctr's VPERFCTR_CREAT/OPEN returned a new descriptor.
 */
#ifndef _LINUX_PERFCTR_H
#define _LINUX_PERFCTR_H

#include <asm/perfctr.h>
#include <sys/ioctl.h>

struct perfctr_info {
	unsigned int abi_version;
	char driver_version[32];
	unsigned int cpu_type;
	unsigned int cpu_features;
	unsigned int cpu_khz;
	unsigned int tsc_to_cpu_mult;
	unsigned int _reserved2;
	unsigned int _reserved3;
	unsigned int _reserved4;
};

struct perfctr_cpu_mask {
	unsigned int nrwords;
	unsigned int mask[1];	/* actually 'nrwords' */
};

/* abi_version: API version in the upper 16 bits, CPU data version in the
   lower; each half is major (upper 8 bits) . minor (lower 8 bits). */
#define PERFCTR_API_VERSION	0x0502	/* 5.2 */
#define PERFCTR_ABI_VERSION	((PERFCTR_API_VERSION<<16)|PERFCTR_CPU_VERSION)

/* cpu_features bits */
#define PERFCTR_FEATURE_RDPMC	0x01
#define PERFCTR_FEATURE_RDTSC	0x02
#define PERFCTR_FEATURE_PCINT	0x04

/* a vperfctr's state as perfctr exposed it */
struct vperfctr_state {
	struct perfctr_cpu_state cpu_state;
};

/* VPERFCTR_CONTROL */
struct vperfctr_control {
	int si_signo;		/* overflow signal of i-mode counters */
	struct perfctr_cpu_control cpu_control;
	unsigned int preserve;	/* bit i set: keep counter i's sum */
	unsigned int flags;
	unsigned int _reserved2;
	unsigned int _reserved3;
	unsigned int _reserved4;
};

#define VPERFCTR_CONTROL_CLOEXEC	0x01	/* unlink the state at exec */

/* GPERFCTR_CONTROL */
struct gperfctr_cpu_control {
	unsigned int cpu;
	struct perfctr_cpu_control cpu_control;
	unsigned int _reserved1;
	unsigned int _reserved2;
	unsigned int _reserved3;
	unsigned int _reserved4;
};

/* GPERFCTR_READ */
struct gperfctr_cpu_state {
	unsigned int cpu;
	struct perfctr_cpu_control cpu_control;
	struct perfctr_sum_ctrs sum;
	unsigned int _reserved1;
	unsigned int _reserved2;
	unsigned int _reserved3;
	unsigned int _reserved4;
};

/* hwperfd: PERFCTR_CPUS answers with a fixed mask of 32 words */
struct hwperfd_perfctr_cpu_mask {
	unsigned int nrwords;
	unsigned int mask[32];
};

/* hwperfd: VPERFCTR_READ_STATE, what a thread's own reads need */
struct hwperfd_vperfctr_state {
	unsigned int cstatus;
	unsigned int _pad;
	struct perfctr_sum_ctrs sum;
};

/* hwperfd: VPERFCTR_ATTACH binds an open node to thread tid's vperfctr
   (0: the calling thread), creating it if creat */
struct hwperfd_vperfctr_attach {
	int tid;
	unsigned int creat;
};

/* hwperfd: VPERFCTR_STATEPAGE tells the vperfctr's own thread (or its
   process) the path of the page it maps to read its counters without a
   request (<hwperfd/state.h>); HWPERFD_STATE_PATH_MAX bytes */
struct hwperfd_vperfctr_statepage {
	char path[128];
};

/* hwperfd: VPERFCTR_CONTROL as of the calling thread's CPU clock (ns) when
   it made it: libperfctr keeps a vperfctr that counts only its TSC to itself
   until the thread first asks more of it, and then gives the daemon the
   control it had (docs/perfctr.md) */
struct hwperfd_vperfctr_control_ns {
	unsigned long long ns;
	struct vperfctr_control control;
};

#define _PERFCTR_IOCTL	0xD0	/* 'P'+128 */

#define PERFCTR_ABI		 _IOR(_PERFCTR_IOCTL,0,unsigned int)
#define PERFCTR_INFO		 _IOR(_PERFCTR_IOCTL,1,struct perfctr_info)
#define PERFCTR_CPUS		_IOWR(_PERFCTR_IOCTL,2,struct hwperfd_perfctr_cpu_mask)
#define PERFCTR_CPUS_FORBIDDEN	_IOWR(_PERFCTR_IOCTL,3,struct hwperfd_perfctr_cpu_mask)
#define VPERFCTR_CREAT		  _IO(_PERFCTR_IOCTL,6)	/* not served: see VPERFCTR_ATTACH */
#define VPERFCTR_OPEN		  _IO(_PERFCTR_IOCTL,7)	/* not served: see VPERFCTR_ATTACH */
#define VPERFCTR_READ_SUM	 _IOR(_PERFCTR_IOCTL,8,struct perfctr_sum_ctrs)
#define VPERFCTR_UNLINK		  _IO(_PERFCTR_IOCTL,9)
#define VPERFCTR_CONTROL	 _IOW(_PERFCTR_IOCTL,10,struct vperfctr_control)
#define VPERFCTR_IRESUME	  _IO(_PERFCTR_IOCTL,11)
#define VPERFCTR_READ_CONTROL	 _IOR(_PERFCTR_IOCTL,12,struct vperfctr_control)
#define VPERFCTR_READ_STATE	 _IOR(_PERFCTR_IOCTL,13,struct hwperfd_vperfctr_state)
#define VPERFCTR_ATTACH		 _IOW(_PERFCTR_IOCTL,14,struct hwperfd_vperfctr_attach)
#define VPERFCTR_STATEPAGE	 _IOR(_PERFCTR_IOCTL,15,struct hwperfd_vperfctr_statepage)
/* hwperfd: the CPU ns the calling thread may run before its vperfctr's
   nearest i-mode overflow (HWPERFD_NO_OVERFLOW: none can come); the call
   catches the counters up, so one made at that instant finds the overflow.
   libperfctr arms a timer on it (docs/overflow.md). */
#define VPERFCTR_OVERFLOW_NS	 _IOR(_PERFCTR_IOCTL,20,unsigned long long)
/* hwperfd: VPERFCTR_IRESUME told the calling thread's CPU clock (ns) as it
   called, where the counters start again (0: not told), answering what
   VPERFCTR_OVERFLOW_NS would after it */
#define VPERFCTR_IRESUME_NS	 _IOWR(_PERFCTR_IOCTL,21,unsigned long long)
#define HWPERFD_NO_OVERFLOW	 (~0ULL)
/* hwperfd: a control and an unlink the calling thread made earlier on its own
   vperfctr, as of its CPU clock then; and whether the daemon takes such
   stamps (1: it counts threads by their own CPU clocks, the real clock) */
#define VPERFCTR_CONTROL_NS	 _IOW(_PERFCTR_IOCTL,22,struct hwperfd_vperfctr_control_ns)
#define VPERFCTR_UNLINK_NS	 _IOW(_PERFCTR_IOCTL,23,unsigned long long)
#define PERFCTR_THREAD_CLOCKS	 _IOR(_PERFCTR_IOCTL,24,unsigned int)

#define GPERFCTR_CONTROL	_IOWR(_PERFCTR_IOCTL,16,struct gperfctr_cpu_control)
#define GPERFCTR_READ		_IOWR(_PERFCTR_IOCTL,17,struct gperfctr_cpu_state)
#define GPERFCTR_STOP		  _IO(_PERFCTR_IOCTL,18)
#define GPERFCTR_START		  _IO(_PERFCTR_IOCTL,19)	/* arg: interval in us */

#endif /* _LINUX_PERFCTR_H */
