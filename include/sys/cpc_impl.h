/*
 * <sys/cpc_impl.h> for hwperfd: Solaris libcpc's flags, capabilities and
 * error subcodes, and the transport between libcpc and <mount>/cpc.
 *
 * The public values are Solaris's.  Solaris's library reached the kernel
 * through the cpc system call and CPCIO_* ioctls that carried pointers; a
 * FUSE server follows no pointer, so hwperfd's libcpc sends a struct
 * hwperfd_cpc_io both ways (a bind all of it, every other call its head),
 * and the reply carries the errno and the error subcode.  The transport is private to libcpc: programs use
 * <libcpc.h>.  structs/cpc.py mirrors this file.
 */
#ifndef _SYS_CPC_IMPL_H
#define _SYS_CPC_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
	char		*ca_name;
	uint64_t	ca_val;
} cpc_attr_t;

/* Set flags (cpc_bind_curlwp(3CPC)). */
#define	CPC_BIND_LWP_INHERIT	(0x1)
#define	CPC_BIND_EMT_OVF	(0x2)

#define	CPC_MAX_IMPL_NAME	512
#define	CPC_MAX_CPUREF		1024

/* Request flags (cpc_set_add_request(3CPC)). */
#define	CPC_OVF_NOTIFY_EMT	0x1
#define	CPC_COUNT_USER		0x2
#define	CPC_COUNT_SYSTEM	0x4
#define	CPC_COUNT_HV		0x8

#define	KCPC_REQ_ALL_FLAGS	(CPC_OVF_NOTIFY_EMT | CPC_COUNT_USER | \
		CPC_COUNT_SYSTEM | CPC_COUNT_HV)
#define	KCPC_REQ_VALID_FLAGS(flags) \
		(((flags) | KCPC_REQ_ALL_FLAGS) == KCPC_REQ_ALL_FLAGS)

/* Capabilities (cpc_caps(3CPC)). */
#define	CPC_CAP_OVERFLOW_INTERRUPT	0x1
#define	CPC_CAP_OVERFLOW_PRECISE	0x2

#define	CPC_SET_ALL_FLAGS	0x1
#define	CPC_SET_VALID_FLAGS(flags) \
		(((flags) | CPC_SET_ALL_FLAGS) == CPC_SET_ALL_FLAGS)

#define	CPC_MAX_EVENT_LEN	512
#define	CPC_MAX_ATTR_LEN	32

/* Error subcodes, passed to the error handler (cpc_seterrhndlr(3CPC)). */
#define	CPC_INVALID_EVENT		1	/* Unknown event */
#define	CPC_INVALID_PICNUM		2	/* Requested PIC out of range */
#define	CPC_INVALID_ATTRIBUTE		3	/* Unknown attribute */
#define	CPC_ATTRIBUTE_OUT_OF_RANGE	4	/* Attribute val out of range */
#define	CPC_RESOURCE_UNAVAIL		5	/* Can't get needed resource */
#define	CPC_PIC_NOT_CAPABLE		6	/* PIC can't count this event */
#define	CPC_REQ_INVALID_FLAGS		7	/* Invalid flags in req(s) */
#define	CPC_CONFLICTING_REQS		8	/* Reqs in the set conflict */
#define	CPC_ATTR_REQUIRES_PRIVILEGE	9	/* Insufficient privs for atr */
#define	CPC_PBIND_FAILED		10	/* Couldn't bind to processor */
#define	CPC_HV_NO_ACCESS		11	/* No perm for HV events */

/* -- hwperfd's transport (private to libcpc) ---------------------------- */

#define	HWPERFD_CPC_MAXREQS	8	/* requests in one bound set */
#define	HWPERFD_CPC_EVLEN	64	/* bytes of an event name, with its NUL */
#define	HWPERFD_CPC_MAXATTRS	8	/* attributes of one request */

#define	HWPERFD_CPC_LWP		0	/* the calling thread */
#define	HWPERFD_CPC_PCTX	1	/* LWP ci_id of process ci_pid */
#define	HWPERFD_CPC_CPU		2	/* CPU ci_id, held by the open file */

/* sample ci_flags, pctx only (cputrack): answer the values at the LWP's
 * oldest exec(2) not yet told, flagged so in the answer's ci_flags */
#define	HWPERFD_CPC_SAMPLE_EXECS	1

/*
 * Linux has no SIGEMT.  The daemon signals an overflow with this real-time
 * signal; libcpc catches it and raises SIGEMT in the same thread with
 * si_code EMT_CPCOVF and si_addr the interrupted program counter.
 */
#define	HWPERFD_CPC_SIGCARRIER	62	/* SIGRTMAX - 2 */

/*
 * ci_preset of a bind, restart or sample of the calling LWP's own set
 * (HWPERFD_CPC_LWP): HWPERFD_CPC_TIMED asks the daemon to answer in it the
 * CPU ns the LWP may run before the set's nearest overflow interrupt
 * (HWPERFD_CPC_NO_OVERFLOW: none can come); libcpc arms a timer on it
 * that lands the overflow on its instant (docs/overflow.md).
 * HWPERFD_CPC_LOOK: the same, from that timer's look at the instant (a
 * sample), which libcpc never makes again: answered EINTR for an overflow
 * whose SIGEMT comes first, it leaves no call owed its retry.
 */
#define	HWPERFD_CPC_TIMED	1
#define	HWPERFD_CPC_LOOK	2
#define	HWPERFD_CPC_NO_OVERFLOW	(~(uint64_t)0)

struct hwperfd_cpc_attr {
	char		ka_name[CPC_MAX_ATTR_LEN];
	uint64_t	ka_val;
};

struct hwperfd_cpc_req {
	char		cr_event[HWPERFD_CPC_EVLEN];
	uint64_t	cr_preset;
	uint32_t	cr_flags;
	uint32_t	cr_nattrs;
	struct hwperfd_cpc_attr cr_attr[HWPERFD_CPC_MAXATTRS];
};

struct hwperfd_cpc_io {
	int32_t		ci_error;	/* out: 0 or an errno */
	int32_t		ci_subcode;	/* out: error subcode, -1 for none */
	uint32_t	ci_target;	/* HWPERFD_CPC_LWP, _PCTX, _CPU */
	uint32_t	ci_flags;	/* bind: the set's flags */
	int64_t		ci_pid;		/* pctx: the process */
	int64_t		ci_id;		/* pctx: the LWP; cpu: the CPU */
	int32_t		ci_index;	/* preset: the request */
	uint32_t	ci_nreqs;	/* bind: requests; sample: values */
	uint64_t	ci_preset;	/* preset */
	int64_t		ci_hrtime;	/* sample: when; restart: the LWP's CPU clock (ns) as it called */
	uint64_t	ci_tick;	/* sample: cycles the set counted over */
	uint64_t	ci_data[HWPERFD_CPC_MAXREQS];	/* sample: the values */
	struct hwperfd_cpc_req ci_req[HWPERFD_CPC_MAXREQS];	/* bind */
};

/*
 * A bind carries the whole struct; every other call only its head, what
 * precedes ci_req (the daemon answers every call with the head alone, and
 * takes any of them with the whole struct too).
 */
#define	HWPERFD_CPC_HEAD_SIZE	offsetof(struct hwperfd_cpc_io, ci_req)
#define	HWPERFD_CPC_HEAD_IOWR(nr) \
	_IOC(_IOC_READ | _IOC_WRITE, 'C', (nr), HWPERFD_CPC_HEAD_SIZE)

#define	HWPERFD_CPCIO_BIND	_IOWR('C', 1, struct hwperfd_cpc_io)
#define	HWPERFD_CPCIO_SAMPLE	HWPERFD_CPC_HEAD_IOWR(2)
#define	HWPERFD_CPCIO_RELE	HWPERFD_CPC_HEAD_IOWR(3)
#define	HWPERFD_CPCIO_PRESET	HWPERFD_CPC_HEAD_IOWR(4)
#define	HWPERFD_CPCIO_RESTART	HWPERFD_CPC_HEAD_IOWR(5)
#define	HWPERFD_CPCIO_ENABLE	HWPERFD_CPC_HEAD_IOWR(6)
#define	HWPERFD_CPCIO_DISABLE	HWPERFD_CPC_HEAD_IOWR(7)

#ifdef __cplusplus
}
#endif

#endif /* _SYS_CPC_IMPL_H */
