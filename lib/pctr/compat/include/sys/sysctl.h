/*
 * <sys/sysctl.h> for building OpenBSD pctr tools on Linux with hwperfd:
 * the few sysctl(3) names they ask about, answered from <mount>/pctr by
 * libopenbsd-compat, and OpenBSD's strtonum(3), which they use too.
 * Link with -lopenbsd-compat -lpctr.
 */
#ifndef _HWPERFD_COMPAT_SYS_SYSCTL_H_
#define _HWPERFD_COMPAT_SYS_SYSCTL_H_

#include <stddef.h>
#include <sys/types.h>

#define CTL_HW		6	/* generic CPU/IO */
#define CTL_MACHDEP	7	/* machine dependent */
#define HW_MACHINE	1	/* string: "amd64" */
#define HW_MODEL	2	/* string: the CPU model */
#define HW_NCPU		3	/* int: number of CPUs */

#ifdef __cplusplus
extern "C" {
#endif
int sysctl(const int *, unsigned int, void *, size_t *, void *, size_t);
long long strtonum(const char *, long long, long long, const char **);
#ifdef __cplusplus
}
#endif

#endif /* !_HWPERFD_COMPAT_SYS_SYSCTL_H_ */
