/*
 * <machine/specialreg.h> for hwperfd: the CPUID feature bits pctr programs
 * test (OpenBSD amd64 names).
 */
#ifndef _MACHINE_SPECIALREG_H_
#define _MACHINE_SPECIALREG_H_

#define CPUID_TSC	0x00000010	/* time-stamp counter */
#define CPUID_MSR	0x00000020	/* model-specific registers */

#endif /* !_MACHINE_SPECIALREG_H_ */
