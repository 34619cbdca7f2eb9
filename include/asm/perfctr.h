/*
 * <asm/perfctr.h> for hwperfd: the x86 part of Linux perfctr 2.6's user ABI
 * (perfctr's asm-x86/perfctr.h), for the emulated Intel (Core 2) and AMD (K8)
 * models.  Struct layouts, cpu_type values and the cstatus encoding are
 * perfctr's, so programs and libraries built for perfctr compile unchanged.
 */
#ifndef _ASM_X86_PERFCTR_H
#define _ASM_X86_PERFCTR_H

/* cpu_type values */
#define PERFCTR_X86_GENERIC	0	/* any x86 with rdtsc */
#define PERFCTR_X86_INTEL_P5	1	/* no rdpmc */
#define PERFCTR_X86_INTEL_P5MMX	2
#define PERFCTR_X86_INTEL_P6	3
#define PERFCTR_X86_INTEL_PII	4
#define PERFCTR_X86_INTEL_PIII	5
#define PERFCTR_X86_CYRIX_MII	6
#define PERFCTR_X86_WINCHIP_C6	7	/* no rdtsc */
#define PERFCTR_X86_WINCHIP_2	8	/* no rdtsc */
#define PERFCTR_X86_AMD_K7	9
#define PERFCTR_X86_VIA_C3	10	/* no pmc0 */
#define PERFCTR_X86_INTEL_P4	11	/* model 0 and 1 */
#define PERFCTR_X86_INTEL_P4M2	12	/* model 2 */
#define PERFCTR_X86_AMD_K8	13	/* hwperfd --cpu-type amd */
#define PERFCTR_X86_INTEL_PENTM	14	/* Pentium M */
#define PERFCTR_X86_AMD_K8C	15	/* Revision C */
#define PERFCTR_X86_INTEL_P4M3	16	/* model 3 and above */
#define PERFCTR_X86_INTEL_CORE	17	/* family 6 model 14 */
#define PERFCTR_X86_INTEL_CORE2	18	/* hwperfd --cpu-type intel */
#define PERFCTR_X86_AMD_FAM10H	19	/* family 10h, family 11h */
#define PERFCTR_X86_AMD_FAM10	PERFCTR_X86_AMD_FAM10H
#define PERFCTR_X86_INTEL_ATOM	20	/* family 6 model 28 */
#define PERFCTR_X86_INTEL_NHLM	21	/* Nehalem */
#define PERFCTR_X86_INTEL_COREI7 PERFCTR_X86_INTEL_NHLM
#define PERFCTR_X86_INTEL_WSTMR	22	/* Westmere */

/* Counter sums: the TSC and one per counter. */
struct perfctr_sum_ctrs {
	unsigned long long tsc;
	unsigned long long pmc[18];
};

/* Control data of a set of counters. */
struct perfctr_cpu_control {
	unsigned int tsc_on;		/* sample the TSC */
	unsigned int nractrs;		/* # of a-mode counters: indices 0..nractrs-1 */
	unsigned int nrictrs;		/* # of i-mode counters: the next nrictrs */
	unsigned int pmc_map[18];	/* counter index -> hardware counter */
	unsigned int evntsel[18];	/* event select of each counter */
	union {				/* anonymous, as perfctr has it */
		struct {
			unsigned int escr[18];
			unsigned int pebs_enable;
			unsigned int pebs_matrix_vert;
		} p4;
		unsigned int evntsel_high[18];
		struct {
			unsigned int _padding[18];
			unsigned int offcore_rsp[2];
		} nhlm;
	};
	int ireset[18];			/* i-mode (re)start values, < 0 */
	unsigned int _reserved1;
	unsigned int _reserved2;
	unsigned int _reserved3;
	unsigned int _reserved4;
};

/* Counter state (what perfctr's driver let a process map; the size of pmc[]
   is not part of the ABI). */
struct perfctr_cpu_state {
	unsigned int cstatus;
	struct {
		unsigned int id;
		int isuspend_cpu;
	} k1;
	unsigned int tsc_start;
	unsigned long long tsc_sum;
	struct {
		unsigned int map;
		unsigned int start;
		unsigned long long sum;
	} pmc[18];
};

/* cstatus: tsc_on in bit 31, i-mode counters in bits 16-22, all counters
   in bits 8-14, a-mode counters in bits 0-6. */
static __inline__ unsigned int
__perfctr_mk_cstatus(unsigned int tsc_on, unsigned int have_ictrs,
		     unsigned int nrictrs, unsigned int nractrs)
{
	return (tsc_on << 31) | (have_ictrs << 16) | ((nractrs + nrictrs) << 8) | nractrs;
}

static __inline__ unsigned int
perfctr_mk_cstatus(unsigned int tsc_on, unsigned int nractrs, unsigned int nrictrs)
{
	return __perfctr_mk_cstatus(tsc_on, nrictrs, nrictrs, nractrs);
}

static __inline__ unsigned int perfctr_cstatus_enabled(unsigned int cstatus)
{
	return cstatus;
}

static __inline__ int perfctr_cstatus_has_tsc(unsigned int cstatus)
{
	return (int)cstatus < 0;
}

static __inline__ unsigned int perfctr_cstatus_nractrs(unsigned int cstatus)
{
	return cstatus & 0x7F;
}

static __inline__ unsigned int perfctr_cstatus_nrctrs(unsigned int cstatus)
{
	return (cstatus >> 8) & 0x7F;
}

static __inline__ unsigned int perfctr_cstatus_has_ictrs(unsigned int cstatus)
{
	return cstatus & (0x7F << 16);
}

/* Overflow signals: si_code SI_PMC_OVF, the overflown counters (a bit per
   counter index) in si_pmc_ovf_mask.  libperfctr raises them in the
   process itself (hwperfd's daemon cannot queue this si_code to another
   process). */
#define SI_PMC_OVF	('P')
#define si_pmc_ovf_mask	_sifields._pad[0]

/* version of the CPU-specific part of the ABI */
#define PERFCTR_CPU_VERSION	0x0501	/* 5.1 */

#endif /* _ASM_X86_PERFCTR_H */
