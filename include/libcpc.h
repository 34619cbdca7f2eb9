/*
 * <libcpc.h> for hwperfd: Solaris libcpc(3LIB), version 2 (SUNW_1.2 and
 * SUNW_1.3: the 33 functions of the cpc_*(3CPC) pages), on Linux.
 *
 * Link with -lcpc.  The library finds the daemon at $HWPERFD_MOUNT, else
 * /run/hwperfd, and speaks to <mount>/cpc.  What Linux lacks:
 *
 *   SIGEMT      Linux has no SIGEMT; here it is SIGSTKFLT, a signal Linux
 *               never sends.  An overflow of a CPC_OVF_NOTIFY_EMT request
 *               raises it in the LWP that owns the set, with si_code
 *               EMT_CPCOVF and si_addr the interrupted program counter.
 *   LWPs        are Linux threads; _lwp_self() is the thread id.
 *   processorid_t, hrtime_t, uint_t are defined here.
 */
#ifndef _LIBCPC_H
#define _LIBCPC_H

#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/types.h>
#include <ucontext.h>

#include <sys/cpc_impl.h>
#include <libpctx.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef _HWPERFD_SOLARIS_TYPES
#define _HWPERFD_SOLARIS_TYPES
typedef unsigned int uint_t;
typedef int processorid_t;
typedef long long hrtime_t;
#endif

#ifndef SIGEMT
#define	SIGEMT		SIGSTKFLT
#endif
#ifndef EMT_CPCOVF
#define	EMT_CPCOVF	1	/* CPU performance counter overflow */
#endif

/*
 * Solaris's <ucontext.h> brought <sys/regset.h>, whose PC and SP index
 * uc_mcontext.gregs (the pages' Example 2 prints them).  Linux x86-64
 * calls them REG_RIP and REG_RSP.
 */
#if defined(__x86_64__) && !defined(PC) && !defined(_HWPERFD_NO_REGSET)
#define	PC	16	/* REG_RIP */
#define	SP	15	/* REG_RSP */
#endif

/* The calling LWP's id (Solaris <sys/lwp.h>): the Linux thread id. */
extern int _lwp_self(void);

typedef struct __cpc cpc_t;
typedef struct __cpc_set cpc_set_t;
typedef struct __cpc_buf cpc_buf_t;

#define	CPC_VER_CURRENT		2
#define	CPC_VER_NONE		0

extern cpc_t *cpc_open(int ver);
extern int cpc_close(cpc_t *cpc);

extern uint_t cpc_npic(cpc_t *cpc);
extern uint_t cpc_caps(cpc_t *cpc);
extern const char *cpc_cciname(cpc_t *cpc);
extern const char *cpc_cpuref(cpc_t *cpc);

typedef void (cpc_errhndlr_t)(const char *fn, int subcode, const char *fmt,
    va_list ap);
extern int cpc_seterrhndlr(cpc_t *cpc, cpc_errhndlr_t *fn);

extern cpc_set_t *cpc_set_create(cpc_t *cpc);
extern int cpc_set_destroy(cpc_t *cpc, cpc_set_t *set);
extern int cpc_set_add_request(cpc_t *cpc, cpc_set_t *set, const char *event,
    uint64_t preset, uint_t flags, uint_t nattrs, const cpc_attr_t *attrs);

extern cpc_buf_t *cpc_buf_create(cpc_t *cpc, cpc_set_t *set);
extern int cpc_buf_destroy(cpc_t *cpc, cpc_buf_t *buf);

extern int cpc_bind_curlwp(cpc_t *cpc, cpc_set_t *set, uint_t flags);
extern int cpc_bind_pctx(cpc_t *cpc, pctx_t *pctx, id_t id, cpc_set_t *set,
    uint_t flags);
extern int cpc_bind_cpu(cpc_t *cpc, processorid_t id, cpc_set_t *set,
    uint_t flags);
extern int cpc_request_preset(cpc_t *cpc, int index, uint64_t preset);
extern int cpc_set_restart(cpc_t *cpc, cpc_set_t *set);
extern int cpc_unbind(cpc_t *cpc, cpc_set_t *set);
extern int cpc_set_sample(cpc_t *cpc, cpc_set_t *set, cpc_buf_t *buf);

extern void cpc_buf_sub(cpc_t *cpc, cpc_buf_t *ds, cpc_buf_t *a, cpc_buf_t *b);
extern void cpc_buf_add(cpc_t *cpc, cpc_buf_t *ds, cpc_buf_t *a, cpc_buf_t *b);
extern void cpc_buf_copy(cpc_t *cpc, cpc_buf_t *ds, cpc_buf_t *src);
extern void cpc_buf_zero(cpc_t *cpc, cpc_buf_t *buf);
extern int cpc_buf_get(cpc_t *cpc, cpc_buf_t *buf, int index, uint64_t *val);
extern int cpc_buf_set(cpc_t *cpc, cpc_buf_t *buf, int index, uint64_t val);
extern hrtime_t cpc_buf_hrtime(cpc_t *cpc, cpc_buf_t *buf);
extern uint64_t cpc_buf_tick(cpc_t *cpc, cpc_buf_t *buf);

extern void cpc_walk_requests(cpc_t *cpc, cpc_set_t *set, void *arg,
    void (*action)(void *arg, int index, const char *event, uint64_t preset,
    uint_t flags, int nattrs, const cpc_attr_t *attrs));
extern void cpc_walk_events_all(cpc_t *cpc, void *arg,
    void (*action)(void *arg, const char *event));
extern void cpc_walk_generic_events_all(cpc_t *cpc, void *arg,
    void (*action)(void *arg, const char *event));
extern void cpc_walk_events_pic(cpc_t *cpc, uint_t picno, void *arg,
    void (*action)(void *arg, uint_t picno, const char *event));
extern void cpc_walk_generic_events_pic(cpc_t *cpc, uint_t picno, void *arg,
    void (*action)(void *arg, uint_t picno, const char *event));
extern void cpc_walk_attrs(cpc_t *cpc, void *arg,
    void (*action)(void *arg, const char *attr));

extern int cpc_enable(cpc_t *cpc);
extern int cpc_disable(cpc_t *cpc);

#ifdef __cplusplus
}
#endif

#endif /* _LIBCPC_H */
