/*
 * hwperfd: IRIX's hardware inventory, <invent.h>, for Linux.
 *
 * getinvent() and scaninvent() (libhwperf, lib/irix/syssgi.c; link -lhwperf)
 * describe the machine hwperfd emulates - its --cpu-type, --cpus and --mhz,
 * asked with HWPERFD_GETMACHINE on the mount root, so any user may call
 * them - as IRIX did for an Origin (IP27) board:
 *   INV_PROCESSOR/INV_CPUBOARD	inv_controller = MHz, inv_unit = CPUs,
 *				inv_state = INV_IP27BOARD
 *   INV_PROCESSOR/INV_CPUCHIP	one per CPU, inv_unit = its number,
 *				inv_state = PRId: C0_IMP_R10000 rev 3.4 or
 *				C0_IMP_R12000 rev 3.5
 *   INV_PROCESSOR/INV_FPUCHIP	one per CPU, the same PRId
 *   INV_MEMORY/INV_ICACHE, INV_DCACHE	32 KiB each (inv_state, bytes)
 *   INV_MEMORY/INV_SIDCACHE	4 MiB (R10000) or 8 MiB (R12000)
 * Without a reachable hwperfd, getinvent() returns NULL and scaninvent() -1.
 */
#ifndef __HWPERFD_INVENT_H__
#define __HWPERFD_INVENT_H__

#ifdef __cplusplus
extern "C" {
#endif

typedef struct inventory_s {
	struct inventory_s *inv_next;	/* next record */
	int	inv_class;		/* INV_PROCESSOR, INV_MEMORY, ... */
	int	inv_type;		/* class sub-type */
	long	inv_controller;		/* major identifier */
	long	inv_unit;		/* minor identifier */
	int	inv_state;		/* class-specific */
} inventory_t;

/* classes */
#define INV_PROCESSOR	1
#define INV_MEMORY	3

/* types for class processor */
#define INV_CPUBOARD	1
#define INV_CPUCHIP	2
#define INV_FPUCHIP	3

/* cpu board states (IRIX 6.5 <sys/invent.h>; hwperfd reports INV_IP27BOARD,
   programs such as PAPI's IRIX substrate name every board in a switch) */
#define INV_IP20BOARD	10
#define INV_IP19BOARD	11
#define INV_IP22BOARD	12
#define INV_IP21BOARD	13
#define INV_IP26BOARD	14
#define INV_IP25BOARD	15
#define INV_IP30BOARD	16
#define INV_IP28BOARD	17
#define INV_IP32BOARD	18
#define INV_IP27BOARD	19
#define INV_IPMHSIMBOARD 20
#define INV_IP33BOARD	21
#define INV_IP35BOARD	22

/* types for class memory; states are sizes in bytes */
#define INV_DCACHE	3
#define INV_ICACHE	4
#define INV_SIDCACHE	8

/* PRId fields of INV_CPUCHIP / INV_FPUCHIP states (IRIX <sys/sbd.h>) */
#ifndef C0_IMPMASK
#define C0_IMPMASK	0xff00
#define C0_IMPSHIFT	8
#define C0_MAJREVMASK	0x00f0
#define C0_MAJREVSHIFT	4
#define C0_MINREVMASK	0x000f
#define C0_MINREVSHIFT	0
#endif
#ifndef C0_IMP_R10000
#define C0_IMP_R10000	0x09
#define C0_IMP_R12000	0x0e
#endif

int setinvent(void);
inventory_t *getinvent(void);
void endinvent(void);
int scaninvent(int (*fun)(inventory_t *, void *), void *arg);

#ifdef __cplusplus
}
#endif

#endif /* __HWPERFD_INVENT_H__ */
