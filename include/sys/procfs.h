/*
 * hwperfd: IRIX /proc hardware event counter ioctls for Linux.
 *
 * Wraps the system's own <sys/procfs.h> and adds IRIX's PIOC* counter
 * ioctls, served by hwperfd on /proc/<pid> nodes of its FUSE mount.  IRIX
 * numbered them ('q' << 8) | n; FUSE needs Linux's _IOC encoding (direction
 * and size), so the type letter and numbers are kept and the encoding added.
 * structs/procfs.py mirrors these values.
 */
#ifndef __HWPERFD_SYS_PROCFS_H__
#define __HWPERFD_SYS_PROCFS_H__

#include_next <sys/procfs.h>
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

#endif /* __HWPERFD_SYS_PROCFS_H__ */
