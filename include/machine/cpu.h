/*
 * <machine/cpu.h> for hwperfd: pctr(4) programs include it before
 * <machine/pctr.h>.  Only the sysctl names pctr(1) asks about live here
 * (answered by hwperfd's compat sysctl(), see compat/).
 */
#ifndef _MACHINE_CPU_H_
#define _MACHINE_CPU_H_

#define CPU_CPUVENDOR	6	/* CTL_MACHDEP: "GenuineIntel", "AuthenticAMD" */
#define CPU_CPUID	7	/* CTL_MACHDEP: CPUID leaf 1 EAX */
#define CPU_CPUFEATURE	8	/* CTL_MACHDEP: CPUID leaf 1 EDX */

#endif /* !_MACHINE_CPU_H_ */
