/*
 * <libpctx.h> for hwperfd: the part of Solaris libpctx that libcpc's
 * cpc_bind_pctx() needs, a handle on another process.
 *
 * Solaris's pctx_capture() stopped the process and took control of it
 * through /proc, and pctx_run() then reported its forks, execs, exits and
 * LWP creations.  On Linux the handle only names the process: it is checked
 * to exist at capture, and cpc_bind_pctx()/cpc_set_sample()/cpc_unbind()
 * on it reach the target's LWPs (Linux thread ids; LWP id 1 is the first
 * thread) under the rules of hwperfd's process files (root, or every uid
 * and gid of the target the caller's).  The process keeps running.
 * cputrack(1) follows processes itself.
 */
#ifndef _LIBPCTX_H
#define _LIBPCTX_H

#include <stdarg.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct __pctx pctx_t;
typedef void (pctx_errfn_t)(const char *fn, const char *fmt, va_list ap);

/* A handle on process pid; NULL and errno (ESRCH) if there is none. */
extern pctx_t *pctx_capture(pid_t pid, void *arg, int verbose, pctx_errfn_t *errfn);
extern void pctx_release(pctx_t *pctx);

#ifdef __cplusplus
}
#endif

#endif /* _LIBPCTX_H */
