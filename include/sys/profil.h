/*
 * hwperfd: IRIX <sys/profil.h> for Linux: the sprofil(2) region descriptor
 * that syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, ...) takes.
 *
 * These are IRIX's definitions.  glibc ships a <sys/profil.h> of its own,
 * modelled on IRIX's, whose PROF_* values differ (PROF_UINT is 1 there, 2
 * here): this header replaces it on hwperfd's include path, so it declares
 * neither profil() nor sprofil(), which are glibc's and take glibc's values.
 * struct prof has the same layout in both on 64-bit Linux when the padding
 * is zero.
 */
#ifndef __HWPERFD_SYS_PROFIL_H__
#define __HWPERFD_SYS_PROFIL_H__

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef __psunsigned_t_defined
#define __psunsigned_t_defined
typedef uintptr_t __psunsigned_t;	/* IRIX: an unsigned integer as wide as a pointer */
#endif

struct prof {
	void		*pr_base;	/* buffer base: the histogram's buckets */
	unsigned	pr_size;	/* buffer size in bytes */
	__psunsigned_t	pr_off;		/* pc offset: the region's start address */
	unsigned	pr_scale;	/* pc scaling, 16.16 fixed point; 0 or 1: off,
					 * 2 with pr_off 0 (last entry): the overflow bin */
};

#define PROF_USHORT	0x0001	/* buckets are unsigned short */
#define PROF_UINT	0x0002	/* buckets are unsigned int */
#define PROF_FAST	0x0004	/* clock-based profiling only; no effect on counter ticks */

#define PROF_FAST_CNT	10

/* nprofile: the most regions one call may pass (IRIX's default) */
#define PROFIL_MAX	100

#ifdef __cplusplus
}
#endif

#endif /* __HWPERFD_SYS_PROFIL_H__ */
