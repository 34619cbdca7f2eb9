/*
 * hwperfd: IRIX sysmp(2) for Linux, the calls counter tools make: how many
 * processors.  libhwperf (lib/irix/syssgi.c) answers with the number of CPUs
 * hwperfd emulates (--cpus), so counts per CPU and the processor count
 * always agree.  Other commands: EINVAL.  Link with -lhwperf.
 */
#ifndef __HWPERFD_SYS_SYSMP_H__
#define __HWPERFD_SYS_SYSMP_H__

#ifdef __cplusplus
extern "C" {
#endif

#define MP_NPROCS	1	/* processors in the complex */
#define MP_NAPROCS	2	/* active processors */

int sysmp(int cmd, ...);

#ifdef __cplusplus
}
#endif

#endif /* __HWPERFD_SYS_SYSMP_H__ */
