/*
 * hwperfd: IRIX hardware event counter constants for Linux.
 *
 * Values follow IRIX's <sys/hwperfmacros.h> and r10k_counters(5);
 * structs/hwperftypes.py mirrors them.  The event macros between the
 * GENERATED markers are written by include/gen_hwperfmacros.py from
 * hwperfd/cpu/events.py: edit that file and rerun the script.
 */
#ifndef __SYS_HWPERFMACROS_H__
#define __SYS_HWPERFMACROS_H__

#define HWPERF_EVENTMAX		32	/* slots (virtual counters) */
#define HWPERF_CNTEVENTMAX	16	/* slots per hardware counter */
#define HWPERF_CNT1BASE		16	/* first slot of hardware counter 1 */
#define HWPERF_MINEVENT		0	/* smallest hwp_ev on a counter */
#define HWPERF_MAXEVENT		15	/* largest hwp_ev on an R10000 counter;
					 * slot index > HWPERF_MAXEVENT means
					 * counter 1 */

/* Count modes (hwp_mode) and interrupt enable, as in the control register. */
#define HWPERF_CNTEN_U		0x8	/* user mode */
#define HWPERF_CNTEN_S		0x4	/* supervisor mode (not supported) */
#define HWPERF_CNTEN_K		0x2	/* kernel mode */
#define HWPERF_CNTEN_E		0x1	/* exception level (EXL) */
#define HWPERF_CNTEN_A		0xA	/* user and kernel */
#define HWPERF_CNTEN_IE		0x10	/* overflow interrupt enable */

/* Fields of hwperf_spec: (ev << HWPERF_EVSHIFT) | (ie << 4) | mode. */
#define HWPERF_MODEMASK		0xF
#define HWPERF_EVSHIFT		5
#define HWPERF_EVMASK		0x1E0	/* IRIX's value: events 0..15 */
#define HWPERF_EVENTSEL(spec)	(((spec) & HWPERF_EVMASK) >> HWPERF_EVSHIFT)

#define HWPERF_OVERFLOW_THRESH	0x80000000	/* bit 31 set: overflow */

/* syssgi(SGI_EVENTCTR, cmd, ...) sub-commands; see <sys/syssgi.h>. */
#define HWPERF_PROFENABLE	1	/* acquire counters for profiling */
#define HWPERF_ENSYSCNTRS	2	/* acquire counters in system mode */
#define HWPERF_GET_CPUCNTRS	4	/* read one CPU's counters */
#define HWPERF_PROF_CTR_SUSP	5	/* suspend caller's counters */
#define HWPERF_PROF_CTR_CONT	6	/* continue them */
#define HWPERF_RELSYSCNTRS	8	/* release system-mode counters */
#define HWPERF_GET_SYSCNTRS	16	/* read the global counts */
#define HWPERF_GET_SYSEVCTRL	32	/* read the global control words */
#define HWPERF_SET_SYSEVCTRL	64	/* change the global control words */

/* cpu_mon_t cm_flags (hwperfd) */
#define HWPERF_CM_ENABLED	0x1	/* counters acquired and counting */
#define HWPERF_CM_SYSMODE	0x2	/* counters held in system mode */
#define HWPERF_CM_LOST		0x4	/* displaced by system mode; restart */
#define HWPERF_CM_RELEASED	0x8	/* released; counts still readable */
#define HWPERF_CM_VALID		0x10	/* counts set up at least once */
#define HWPERF_CM_PROFILING	0x20	/* HWPERF_PROFENABLE: overflows are PC ticks */
#define HWPERF_CM_SUSPENDED	0x40	/* HWPERF_PROF_CTR_SUSP until _CONT */

/* cpu_mon_t cm_mode (hwperfd) */
#define HWPERF_CM_MODE_NONE	0
#define HWPERF_CM_MODE_USER	1
#define HWPERF_CM_MODE_SYSTEM	2

/*
 * Events.  The value is the hwp_ev to write in a slot.
 * R10000: HWPERF_C0PRFCNT0_* on counter 0 (slots 0-15, event = value),
 *         HWPERF_C0PRFCNT1_* on counter 1 (slots 16-31, event = 16 + value).
 * R12000: HWPERF_PRFCNT_* on counter 0 (slots 0-15, event = value, 0-31);
 *         counter 1 (slots 16-31) counts event (value + 16) mod 32, as IRIX
 *         loaded it, so slot i with hwp_ev = i % 16 counts event i on both
 *         CPU types (write HWPERF_PRFCNT_x - 16, mod 32, on counter 1).
 */
/* BEGIN GENERATED EVENT MACROS */
/* R10000 */
#define HWPERF_C0PRFCNT0_CYCLES      0  /*  0: Cycles (counter 0) */
#define HWPERF_C0PRFCNT0_IINSTR      1  /*  1: Issued instructions (counter 0) */
#define HWPERF_C0PRFCNT0_ILD         2  /*  2: Issued loads (counter 0) */
#define HWPERF_C0PRFCNT0_IST         3  /*  3: Issued stores (counter 0) */
#define HWPERF_C0PRFCNT0_ISC         4  /*  4: Issued store conditionals (counter 0) */
#define HWPERF_C0PRFCNT0_FAILSC      5  /*  5: Failed store conditionals (counter 0) */
#define HWPERF_C0PRFCNT0_DECBR       6  /*  6: Decoded branches (counter 0) */
#define HWPERF_C0PRFCNT0_QWWSC       7  /*  7: Quadwords written back from scache (counter 0) */
#define HWPERF_C0PRFCNT0_SCDAECC     8  /*  8: Correctable scache data array ECC errors (counter 0) */
#define HWPERF_C0PRFCNT0_PICMISS     9  /*  9: Primary instruction cache misses (counter 0) */
#define HWPERF_C0PRFCNT0_SICMISS     10 /* 10: Secondary instruction cache misses (counter 0) */
#define HWPERF_C0PRFCNT0_IMISPRED    11 /* 11: Instruction misprediction from scache way prediction table (counter 0) */
#define HWPERF_C0PRFCNT0_EXTINT      12 /* 12: External interventions (counter 0) */
#define HWPERF_C0PRFCNT0_EXTINV      13 /* 13: External invalidations (counter 0) */
#define HWPERF_C0PRFCNT0_VCOH        14 /* 14: Virtual coherency conditions (counter 0) */
#define HWPERF_C0PRFCNT0_GINSTR      15 /* 15: Graduated instructions (counter 0) */
#define HWPERF_C0PRFCNT1_CYCLES      0  /* 16: Cycles (counter 1) */
#define HWPERF_C0PRFCNT1_GINSTR      1  /* 17: Graduated instructions (counter 1) */
#define HWPERF_C0PRFCNT1_GLD         2  /* 18: Graduated loads (counter 1) */
#define HWPERF_C0PRFCNT1_GST         3  /* 19: Graduated stores (counter 1) */
#define HWPERF_C0PRFCNT1_GSC         4  /* 20: Graduated store conditionals (counter 1) */
#define HWPERF_C0PRFCNT1_GFINSTR     5  /* 21: Graduated floating point instructions (counter 1) */
#define HWPERF_C0PRFCNT1_QWWPC       6  /* 22: Quadwords written back from primary data cache (counter 1) */
#define HWPERF_C0PRFCNT1_TLBMISS     7  /* 23: TLB misses (counter 1) */
#define HWPERF_C0PRFCNT1_BRMISS      8  /* 24: Mispredicted branches (counter 1) */
#define HWPERF_C0PRFCNT1_PDCMISS     9  /* 25: Primary data cache misses (counter 1) */
#define HWPERF_C0PRFCNT1_SDCMISS     10 /* 26: Secondary data cache misses (counter 1) */
#define HWPERF_C0PRFCNT1_DMISPRED    11 /* 27: Data misprediction from scache way prediction table (counter 1) */
#define HWPERF_C0PRFCNT1_EXTINTHIT   12 /* 28: External intervention hits in scache (counter 1) */
#define HWPERF_C0PRFCNT1_EXTINVHIT   13 /* 29: External invalidation hits in scache (counter 1) */
#define HWPERF_C0PRFCNT1_SPEXCLEAN   14 /* 30: Store/prefetch exclusive to clean block in scache (counter 1) */
#define HWPERF_C0PRFCNT1_SPEXSHR     15 /* 31: Store/prefetch exclusive to shared block in scache (counter 1) */
/* R12000 */
#define HWPERF_PRFCNT_CYCLES         0  /*  0: Cycles (counter 0/1) */
#define HWPERF_PRFCNT_DINSTR         1  /*  1: Decoded instructions (counter 0/1) */
#define HWPERF_PRFCNT_DLD            2  /*  2: Decoded loads (counter 0/1) */
#define HWPERF_PRFCNT_DST            3  /*  3: Decoded stores (counter 0/1) */
#define HWPERF_PRFCNT_MTHO           4  /*  4: Miss handling table occupancy (counter 0/1) */
#define HWPERF_PRFCNT_FAILSC         5  /*  5: Failed store conditionals (counter 0/1) */
#define HWPERF_PRFCNT_RESCB          6  /*  6: Resolved conditional branches (counter 0/1) */
#define HWPERF_PRFCNT_QWWSC          7  /*  7: Quadwords written back from scache (counter 0/1) */
#define HWPERF_PRFCNT_SCDAECC        8  /*  8: Correctable scache data array ECC errors (counter 0/1) */
#define HWPERF_PRFCNT_PICMISS        9  /*  9: Primary instruction cache misses (counter 0/1) */
#define HWPERF_PRFCNT_SICMISS        10 /* 10: Secondary instruction cache misses (counter 0/1) */
#define HWPERF_PRFCNT_IMISPRED       11 /* 11: Instruction misprediction from scache way prediction table (counter 0/1) */
#define HWPERF_PRFCNT_EXTINT         12 /* 12: External interventions (counter 0/1) */
#define HWPERF_PRFCNT_EXTINV         13 /* 13: External invalidations (counter 0/1) */
#define HWPERF_PRFCNT_ALUFPUFP       14 /* 14: ALU/FPU progress cycles (counter 0/1) */
#define HWPERF_PRFCNT_GINSTR         15 /* 15: Graduated instructions (counter 0/1) */
#define HWPERF_PRFCNT_EXPREI         16 /* 16: Executed prefetch instructions (counter 0/1) */
#define HWPERF_PRFCNT_PDCMISSPI      17 /* 17: Prefetch primary data cache misses (counter 0/1) */
#define HWPERF_PRFCNT_GLD            18 /* 18: Graduated loads (counter 0/1) */
#define HWPERF_PRFCNT_GST            19 /* 19: Graduated stores (counter 0/1) */
#define HWPERF_PRFCNT_GSC            20 /* 20: Graduated store conditionals (counter 0/1) */
#define HWPERF_PRFCNT_GFINSTR        21 /* 21: Graduated floating point instructions (counter 0/1) */
#define HWPERF_PRFCNT_QWWPC          22 /* 22: Quadwords written back from primary data cache (counter 0/1) */
#define HWPERF_PRFCNT_TLBMISS        23 /* 23: TLB misses (counter 0/1) */
#define HWPERF_PRFCNT_BRMISS         24 /* 24: Mispredicted branches (counter 0/1) */
#define HWPERF_PRFCNT_PDCMISS        25 /* 25: Primary data cache misses (counter 0/1) */
#define HWPERF_PRFCNT_SDCMISS        26 /* 26: Secondary data cache misses (counter 0/1) */
#define HWPERF_PRFCNT_DMISPRED       27 /* 27: Data misprediction from scache way prediction table (counter 0/1) */
#define HWPERF_PRFCNT_EXTINTHIT      28 /* 28: State of external intervention hits in scache (counter 0/1) */
#define HWPERF_PRFCNT_EXTINVHIT      29 /* 29: State of external invalidation hits in scache (counter 0/1) */
#define HWPERF_PRFCNT_NHTAM          30 /* 30: Miss handling table entries accessing memory (counter 0/1) */
#define HWPERF_PRFCNT_SPEX           31 /* 31: Store/prefetch exclusive to shared block in scache (counter 0/1) */
/* END GENERATED EVENT MACROS */

#endif /* __SYS_HWPERFMACROS_H__ */
