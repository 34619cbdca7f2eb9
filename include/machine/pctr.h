/*
 * <machine/pctr.h> for hwperfd: OpenBSD's pctr(4) interface on Linux.
 *
 * The struct, bits and ioctl names are OpenBSD's; the ioctl numbers use
 * Linux's _IOR/_IOW encoding (direction and size in the number).  The device
 * is <mount>/pctr (default /run/hwperfd/pctr); hwperfd-run sends opens of
 * _PATH_PCTR there.
 *
 * rdtsc() and rdpmc(n) read the emulated TSC and counters of the CPU the
 * caller runs on, through libpctr (link with -lpctr): the real instructions
 * would read the host's own TSC, and rdpmc would fault.
 */
#ifndef _MACHINE_PCTR_H_
#define _MACHINE_PCTR_H_

#include <sys/types.h>
#include <sys/ioctl.h>
#include <stdint.h>

/* unsigned long long, as OpenBSD's u_int64_t: printf("%llu") takes it unchanged. */
typedef unsigned long long pctrval;

#define PCTR_NUM	4

struct pctrst {
	unsigned int pctr_fn[PCTR_NUM];	/* current settings of the counters */
	pctrval pctr_tsc;		/* free-running 64-bit cycle counter */
	pctrval pctr_hwc[PCTR_NUM];	/* values of the hardware counters */
};

/* Bits of a Pentium (P5) counter function, as i386 OpenBSD names them. */
#define P5CTR_K		0x40		/* count in kernel mode */
#define P5CTR_U		0x80		/* count in user mode */
#define P5CTR_C		0x100		/* count cycles rather than events */

/* Bits of a counter function (PCIOCSx argument). */
#define PCTR_U		0x010000	/* count in user mode */
#define PCTR_K		0x020000	/* count in kernel mode */
#define PCTR_E		0x040000	/* edge detect */
#define PCTR_EN		0x400000	/* enable the counter */
#define PCTR_I		0x800000	/* invert the counter mask */

/* Unit mask bits. */
#define PCTR_UM_M	0x0800		/* modified cache lines */
#define PCTR_UM_E	0x0400		/* exclusive cache lines */
#define PCTR_UM_S	0x0200		/* shared cache lines */
#define PCTR_UM_I	0x0100		/* invalid cache lines */
#define PCTR_UM_MESI	(PCTR_UM_M|PCTR_UM_E|PCTR_UM_S|PCTR_UM_I)
#define PCTR_UM_A	0x2000		/* any initiator */

#define PCTR_UM_SHIFT	8		/* left shift of the unit mask */
#define PCTR_CM_SHIFT	24		/* left shift of the counter mask */

#define PCIOCRD	_IOR('c', 1, struct pctrst)	/* read the counters */
#define PCIOCS0	_IOW('c', 8, unsigned int)	/* set counter 0's function */
#define PCIOCS1	_IOW('c', 9, unsigned int)	/* set counter 1's function */
#define PCIOCS2	_IOW('c', 10, unsigned int)	/* set counter 2's function */
#define PCIOCS3	_IOW('c', 11, unsigned int)	/* set counter 3's function */

#define _PATH_PCTR	"/dev/pctr"

#ifdef __cplusplus
extern "C" {
#endif
/* libpctr: the emulated TSC and counters, read through <mount>/pctr. */
pctrval pctr_rdtsc(void);
pctrval pctr_rdpmc(int);
#ifdef __cplusplus
}
#endif

#define rdtsc()		pctr_rdtsc()
#define rdpmc(pmc)	pctr_rdpmc(pmc)

#endif /* !_MACHINE_PCTR_H_ */
