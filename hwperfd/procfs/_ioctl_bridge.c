/*
 * FUSE ioctl bridge for pyfuse3.
 *
 * pyfuse3 registers no .ioctl in its struct fuse_lowlevel_ops, so the kernel
 * gets ENOSYS for every ioctl and stops asking.  This module is loaded with
 * RTLD_GLOBAL before pyfuse3 (hwperfd/procfs/bridge.py does that) and defines
 * fuse_session_new@FUSE_3.0 (see _ioctl_bridge.map), the symbol pyfuse3
 * references, so pyfuse3's call lands here: we copy its ops, add our ioctl
 * handler and call libfuse's real fuse_session_new.  Each ioctl request is
 * handed synchronously to the Python callable set with install(); the
 * contract is documented in bridge.py.
 *
 * Follow-on ioctls.  Between two requests pyfuse3 goes back through trio's
 * scheduler (a lock, wait_readable, epoll), which costs more than answering
 * an ioctl.  So after replying to one, the bridge may wait a short window on
 * the FUSE fd itself and answer the ioctls that follow at once, up to a time
 * budget (set with linger(); off by default), or until one of the daemon's
 * own timers given as wakers rings.  The first request that is not
 * an ioctl is handed to pyfuse3's own handler and ends the burst: pyfuse3's
 * loop awaits the coroutine that handler leaves, exactly as if it had read
 * the request itself.  Only one such request is ever processed per burst.
 * It needs pyfuse3 run with a single reader task (hwperfd's main(1, 1)):
 * another reader, woken by epoll for a request the burst then took, would
 * block the whole loop in read(2).
 *
 * Reads answered in C.  A counter read on a file the daemon has marked with
 * fast_set() is answered from a state page - the snapshot and exact rates
 * the daemon keeps current for self-monitoring readers - with the page's
 * clock read here and the readers' own arithmetic (include/hwperfd/state.h).
 * A mark names the command it answers and the reply's form (FAST_*): IRIX's
 * PIOCGETEVCTRS on a process file (the process's CPU clock), perfctr's
 * VPERFCTR_READ_STATE and _READ_SUM and libcpc's sample of the caller's own
 * LWP set (the calling thread's run time, schedstat: it waits in this call,
 * so that is its CPU clock), pctr's PCIOCRD (wall time, the caller's CPU).
 * The daemon marks a file only for a caller it has just answered (root or
 * the counted process itself; a thread reading its own context) and clears
 * every mark whenever anything may have changed.  The read goes to Python
 * whenever the page says so (being written, dead, a fallback, past its
 * expiry), the process is gone, the daemon holds exit records back, or
 * either of its netlink streams has news: a fork, exec or exit must be
 * applied before the next count is answered.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <fuse_lowlevel.h>

#include "hwperfd/state.h" /* the page and its arithmetic, as lib/state.c reads it */

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fuse.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct fuse_session *(*session_new_fn)(struct fuse_args *,
                                               const struct fuse_lowlevel_ops *,
                                               size_t, void *);

static PyObject *handler;   /* guarded by the GIL */
static int sessions_hooked; /* FUSE sessions given bridge_ioctl */

/* Follow-on ioctls (all guarded by the GIL; the loop runs on pyfuse3's thread). */
static struct fuse_session *session; /* the last session hooked */
static long long linger_window_ns;   /* 0: off */
static long long linger_budget_ns;
#define LINGER_WAKERS 4
static int linger_wakers[LINGER_WAKERS]; /* readable: the daemon's own work is due, the burst ends */
static int linger_nwakers;
static int lingering;                /* inside a burst: no nesting */
static int interrupted;              /* a handler saw KeyboardInterrupt: end the burst */
static unsigned long long follow_on_count; /* ioctls answered in bursts */
static struct fuse_buf follow_buf;   /* reused; libfuse allocates mem */

/* Reads answered in C (all guarded by the GIL).  Marks are kept by file
 * handle, one per slot of a table indexed by fh (the daemon numbers handles
 * in turn): a mark lost to another handle's only sends that file's reads to
 * the daemon.  The used slots are listed, so clearing costs what is marked. */
#define FAST_ENTRIES 1024
#define FAST_SLOTS 32
/* The forms of reply a mark answers (hwperfd/node.py names them alike: FAST_*). */
enum {
    FAST_IRIX = 0,      /* hwperf_cntr_t, returns the generation; the process's CPU clock */
    FAST_VPERFCTR = 1,  /* struct vperfctr_state (cstatus, tsc, pmc[18]); the thread's run time */
    FAST_VSUM = 2,      /* struct perfctr_sum_ctrs (tsc, pmc[18]); the same */
    FAST_CPC = 3,       /* hwperfd_cpc_io's head: tick, values; the same */
    FAST_PCTR = 4,      /* struct pctrst of the caller's CPU; wall time */
    FAST_KINDS
};
#define VPERFCTR_NR 18
#define PCTR_NUM 4
#define CPC_MAXREQS 8
#define CPC_IO_SIZE 3328 /* the whole hwperfd_cpc_io, which a sample may come with */
/* hwperfd_cpc_io's head, all that a sample carries (structs/cpc.py; include/sys/cpc_impl.h). */
struct cpc_io_head {
    int32_t ci_error, ci_subcode;
    uint32_t ci_target, ci_flags;
    int64_t ci_pid, ci_id;
    int32_t ci_index;
    uint32_t ci_nreqs;
    uint64_t ci_preset;
    int64_t ci_hrtime;
    uint64_t ci_tick;
    uint64_t ci_data[CPC_MAXREQS];
};
_Static_assert(sizeof(struct cpc_io_head) == 128, "HWPERFD_CPC_HEAD_SIZE");
struct fast_entry {
    int used;
    int listed;                     /* its place in fast_used */
    int kind;                       /* FAST_* */
    unsigned cmd;                   /* the command it answers */
    uint64_t fh, ino;
    int pid, pidfd;                 /* the counted process (-1: none, the caller's own thread) */
    int caller;                     /* the calling thread the daemon answered */
    int procfd;                     /* the caller's /proc schedstat (thread kinds) or stat (pctr); -1 */
    unsigned uid, gid;
    uint32_t fn[PCTR_NUM];          /* pctr: the functions the daemon answered */
    Py_buffer page;                 /* its state page (struct hwperfd_state) */
};
static struct fast_entry fast[FAST_ENTRIES];
static int fast_used[FAST_ENTRIES];
static int fast_nused;
static int fast_on;                  /* the daemon follows process events: marks may be answered */
static struct pollfd fast_watch_fds[2];
static int fast_nwatch;
static int fast_held;                /* the daemon holds records back: ask it */
static int fast_news_known;          /* the streams were polled with the FUSE fd, for the request just read */
static int fast_news;                /* ... and had news */
static unsigned long long fast_count;

/* Consume the pending exception and return the errno to answer with. */
static int
exception_errno(PyObject *fn)
{
    if (PyErr_ExceptionMatches(PyExc_OSError)) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        PyObject *eno = PyObject_GetAttrString(value, "errno");
        long err = (eno && PyLong_Check(eno)) ? PyLong_AsLong(eno) : -1;
        Py_XDECREF(eno);
        if (err > 0 && err <= INT_MAX) {
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
            /* ENOSYS would make the kernel disable ioctl on this mount. */
            return err == ENOSYS ? ENOTTY : (int)err;
        }
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
    }
    else if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
        /* Cannot propagate through libfuse: re-raise it as a fresh SIGINT. */
        PyErr_Clear();
        PyErr_SetInterrupt();
        interrupted = 1;
        return EINTR;
    }
    PyErr_WriteUnraisable(fn);
    return EIO;
}

/* Call the handler and reply; the GIL is held. */
static void
dispatch(fuse_req_t req, fuse_ino_t ino, uint64_t fh, unsigned int cmd,
         void *arg, unsigned flags, const void *in_buf, size_t in_bufsz,
         size_t out_bufsz)
{
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    PyObject *fn = handler, *res;
    Py_buffer out;
    int result;

    if (fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "no FUSE ioctl handler installed");
        PyErr_WriteUnraisable(Py_None);
        fuse_reply_err(req, EIO);
        return;
    }
    Py_INCREF(fn); /* the handler may call install() */
    res = PyObject_CallFunction(fn, "KKIKy#nIiII",
                                (unsigned long long)ino, (unsigned long long)fh,
                                cmd, (unsigned long long)(uintptr_t)arg,
                                in_buf ? (const char *)in_buf : "",
                                (Py_ssize_t)in_bufsz, (Py_ssize_t)out_bufsz,
                                flags, (int)ctx->pid, (unsigned)ctx->uid,
                                (unsigned)ctx->gid);
    if (res == NULL) {
        fuse_reply_err(req, exception_errno(fn));
        Py_DECREF(fn);
        return;
    }
    if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != 2
        || !PyLong_Check(PyTuple_GET_ITEM(res, 0))) {
        PyErr_Format(PyExc_TypeError,
                     "ioctl handler must return (int, bytes), not %.200R", res);
        goto malformed;
    }
    long value = PyLong_AsLong(PyTuple_GET_ITEM(res, 0));
    if ((value == -1 && PyErr_Occurred()) || value < 0 || value > INT_MAX) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError,
                     "ioctl handler result must be in 0..INT_MAX (raise OSError "
                     "for errors), not %.200R", PyTuple_GET_ITEM(res, 0));
        goto malformed;
    }
    result = (int)value;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(res, 1), &out, PyBUF_SIMPLE) < 0)
        goto malformed;
    size_t len = (size_t)out.len < out_bufsz ? (size_t)out.len : out_bufsz;
    fuse_reply_ioctl(req, result, len ? out.buf : NULL, len);
    PyBuffer_Release(&out);
    Py_DECREF(res);
    Py_DECREF(fn);
    return;

malformed:
    PyErr_WriteUnraisable(fn);
    fuse_reply_err(req, EIO);
    Py_DECREF(res);
    Py_DECREF(fn);
}

static long long
monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int
any_revents(const struct pollfd *pfd, nfds_t from, nfds_t to)
{
    for (nfds_t i = from; i < to; i++)
        if (pfd[i].revents)
            return 1;
    return 0;
}

/* Whether a waker has rung, looked at without waiting.  A burst whose
 * requests come queued, one after another, never waits on the FUSE fd (see
 * follow_on), so it looks at the wakers at its start and every
 * WAKER_LOOK_NS: the daemon's own work is held back no longer than that. */
#define WAKER_LOOK_NS 100000
static int
wakers_rung(void)
{
    struct pollfd pfd[LINGER_WAKERS];
    for (int i = 0; i < linger_nwakers; i++)
        pfd[i] = (struct pollfd){.fd = linger_wakers[i], .events = POLLIN};
    return poll(pfd, (nfds_t)linger_nwakers, 0) > 0;
}

/* Wait up to window_ns for the FUSE fd; 1 readable, 0 not (timeout, signal,
 * error, a waker readable: all end the burst and leave the rest to pyfuse3's
 * loop).  The daemon's event streams are polled in the same call: what they
 * held when it returned for a request - queued after anything the caller did
 * before its call - stands in for the poll of them before that request's
 * answer in C (fast_news).  The wakers are the daemon's own timers (its
 * overflow tick, its CPU-clock alarms): a burst never holds back what falls
 * due meanwhile. */
static int
fuse_fd_ready(int fd, long long window_ns)
{
    struct pollfd pfd[3 + LINGER_WAKERS] = {{.fd = fd, .events = POLLIN}};
    struct timespec ts = {.tv_sec = window_ns / 1000000000LL,
                          .tv_nsec = window_ns % 1000000000LL};
    nfds_t nnews = 0, nfds;
    int n, ready;

    if (fast_on && fast_nwatch) {
        memcpy(pfd + 1, fast_watch_fds, (size_t)fast_nwatch * sizeof *pfd);
        nnews = (nfds_t)fast_nwatch;
    }
    nfds = 1 + nnews;
    for (int i = 0; i < linger_nwakers; i++)
        pfd[nfds++] = (struct pollfd){.fd = linger_wakers[i], .events = POLLIN};
    Py_BEGIN_ALLOW_THREADS
    n = ppoll(pfd, nfds, &ts, NULL);
    if (n > 0 && !pfd[0].revents && nnews && !any_revents(pfd, 1 + nnews, nfds)) {
        /* news alone: the FUSE fd (and the wakers) for a window more, the streams unwatched */
        memmove(pfd + 1, pfd + 1 + nnews, (size_t)(nfds - 1 - nnews) * sizeof *pfd);
        nfds -= nnews;
        nnews = 0;
        n = ppoll(pfd, nfds, &ts, NULL);
    }
    Py_END_ALLOW_THREADS
    if (n > 0 && any_revents(pfd, 1 + nnews, nfds))
        return 0; /* the daemon's own work is due */
    ready = n >= 1 && (pfd[0].revents & POLLIN) && !(pfd[0].revents & (POLLERR | POLLHUP | POLLNVAL));
    if (ready && nnews) {
        fast_news_known = 1;
        fast_news = pfd[1].revents || (nnews > 1 && pfd[2].revents);
    }
    return ready;
}

static int
is_ioctl_request(const struct fuse_buf *buf, int size)
{
    const struct fuse_in_header *in = buf->mem;
    return !(buf->flags & FUSE_BUF_IS_FD) && size >= (int)sizeof(*in)
           && in->opcode == FUSE_IOCTL;
}

/* Answer the ioctls that follow the one just answered (see the top comment). */
static void
follow_on(struct fuse_session *se)
{
    long long deadline = monotonic_ns() + linger_budget_ns;
    int fd = fuse_session_fd(se);

    /* The next request is first read without waiting: on one CPU the caller
     * has run since the reply (its wake-up preempts the daemon) and queued
     * it, so a wait on the fd would only return at once.  The fd goes back to
     * blocking before pyfuse3 reads it again. */
    int flags = fcntl(fd, F_GETFL);
    int nonblocking = flags >= 0 && !(flags & O_NONBLOCK) && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;

    lingering = 1;
    long long looked = 0; /* when the wakers were last looked at: by a wait, or on their own */
    while (!fuse_session_exited(se) && !interrupted) {
        long long now = monotonic_ns(), left = deadline - now;
        if (left <= 0)
            break;
        if (linger_nwakers && now - looked >= WAKER_LOOK_NS) {
            if (wakers_rung())
                break; /* the daemon's own work is due: it goes first */
            looked = now;
        }
        int res = nonblocking ? fuse_session_receive_buf(se, &follow_buf) : -EAGAIN;
        if (res == -EAGAIN) {
            if (!fuse_fd_ready(fd, left < linger_window_ns ? left : linger_window_ns))
                break;
            looked = monotonic_ns(); /* the wait polled the wakers too, and none had rung */
            res = fuse_session_receive_buf(se, &follow_buf);
        }
        if (res <= 0) { /* EINTR/EAGAIN: pyfuse3's loop reads again; 0: exited */
            fast_news_known = 0;
            break;
        }
        int ioctl = is_ioctl_request(&follow_buf, res);
        fuse_session_process_buf(se, &follow_buf);
        fast_news_known = 0; /* that request's alone */
        if (!ioctl)
            break;      /* pyfuse3 awaits the coroutine its handler left */
        follow_on_count++;
    }
    fast_news_known = 0;
    lingering = 0;
    if (nonblocking)
        fcntl(fd, F_SETFL, flags);
}

static void
fast_release(struct fast_entry *e)
{
    if (!e->used)
        return;
    PyBuffer_Release(&e->page);
    if (e->procfd >= 0)
        close(e->procfd);
    int last = fast_used[--fast_nused];
    fast_used[e->listed] = last;
    fast[last].listed = e->listed;
    memset(e, 0, sizeof *e);
}

/* A /proc file of the caller's read again from its start into buf: its length, or -1. */
static ssize_t
proc_read(int fd, char *buf, size_t size)
{
    ssize_t n = pread(fd, buf, size - 1, 0);
    if (n <= 0)
        return -1; /* the thread is gone (ESRCH): the daemon answers */
    buf[n] = 0;
    return n;
}

/* The calling thread's run time (schedstat's first field): it waits in this
 * call, so that is its CPU clock (CLOCK_THREAD_CPUTIME_ID), which no other
 * process may read. */
static int
thread_run_ns(int fd, uint64_t *ns)
{
    char buf[128], *end;
    if (proc_read(fd, buf, sizeof buf) < 0)
        return 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (end == buf)
        return 0;
    *ns = v;
    return 1;
}

/* The host CPU the calling thread ran on (stat's 39th field, "processor"),
 * as the daemon's PCIOCRD takes it. */
static int
thread_cpu(int fd, unsigned *cpu)
{
    char buf[1024];
    if (proc_read(fd, buf, sizeof buf) < 0)
        return 0;
    char *p = strrchr(buf, ')'); /* after the command's name, which may hold anything */
    if (p == NULL)
        return 0;
    for (int field = 2; field < 39; field++) {
        p = strchr(p + 1, ' ');
        if (p == NULL)
            return 0;
    }
    char *end;
    unsigned long v = strtoul(p + 1, &end, 10);
    if (end == p + 1)
        return 0;
    *cpu = (unsigned)v;
    return 1;
}

/* The host CPU pctr's answer to the caller is of, as its daemon's PCIOCRD
 * takes it (stat's "processor"), but without reading stat where that cannot
 * change the answer: one CPU, or every CPU's slots alike (no function set,
 * the same counts); or read from the caller's affinity when it allows one
 * CPU only (it runs there, as a pinned caller does). */
static int
caller_cpu(const struct fast_entry *e, const struct hwperfd_state *p, unsigned ncpus, unsigned stride, unsigned *cpu)
{
    size_t group = stride * sizeof p->hs_slots[0];
    unsigned c;
    cpu_set_t allowed;

    for (c = 1; c < ncpus; c++)
        if (memcmp(&p->hs_slots[0], &p->hs_slots[c * stride], group) != 0)
            break;
    if (c == ncpus) {
        *cpu = 0;
        return 1;
    }
    if (sched_getaffinity(e->caller, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) == 1) {
        for (c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &allowed)) {
                *cpu = c;
                return 1;
            }
    }
    return thread_cpu(e->procfd, cpu);
}

static uint64_t
clock_read_ns(clockid_t id, int *ok)
{
    struct timespec ts;
    *ok = clock_gettime(id, &ts) == 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Slots first..first+n-1 of the entry's page now, with its generation and
 * the wall time read: 1, or 0 when the daemon must answer.  The GIL is held,
 * so the daemon is not writing the page. */
static int
fast_counts(struct fast_entry *e, unsigned first, unsigned n, int *generation, uint64_t *counts, uint64_t *mono)
{
    const struct hwperfd_state *p = e->page.buf;
    uint64_t du = 0, ds = 0, now = 0;
    int ok = 1;

    if ((size_t)e->page.len < sizeof *p || (p->hs_seq & 1)
        || (p->hs_flags & (HWPERFD_STATE_FALLBACK | HWPERFD_STATE_DEAD)) || n > HWPERFD_STATE_SLOTS
        || first > HWPERFD_STATE_SLOTS - n || p->hs_nslots < first + n)
        return 0;
    *mono = clock_read_ns(CLOCK_MONOTONIC, &ok);
    if (!ok || (p->hs_expires_ns && *mono >= p->hs_expires_ns))
        return 0; /* the snapshot no longer holds: the daemon takes the counts anew */
    switch (p->hs_clock) {
    case HWPERFD_STATE_CLOCK_MANUAL:
        break;
    case HWPERFD_STATE_CLOCK_PROCESS:
        /* The process's CPU clock (MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)). */
        if (e->pid <= 0)
            return 0;
        now = clock_read_ns((clockid_t)((~(unsigned)e->pid) << 3 | 2), &ok);
        break;
    case HWPERFD_STATE_CLOCK_THREAD:
        ok = e->procfd >= 0 && thread_run_ns(e->procfd, &now);
        break;
    case HWPERFD_STATE_CLOCK_MONOTONIC:
        now = *mono;
        break;
    default:
        return 0;
    }
    if (!ok)
        return 0;
    if (p->hs_clock != HWPERFD_STATE_CLOCK_MANUAL)
        hwperfd_state_elapsed(now, p->hs_user_ns, p->hs_system_ns, p->hs_split_user, p->hs_split_system,
                              p->hs_split_carry, p->hs_system_room, &du, &ds);
    for (unsigned i = 0; i < n; i++) {
        const struct hwperfd_state_slot *slot = &p->hs_slots[first + i];
        counts[i] = hwperfd_state_slot_count(slot->count, slot->residue, slot->per_user, slot->per_system,
                                             slot->den, du, ds);
    }
    *generation = p->hs_generation;
    return 1;
}

/* Answer a counter read in C if the daemon has said it may be: 1 answered. */
static int
fast_answer(fuse_req_t req, fuse_ino_t ino, uint64_t fh, unsigned cmd, const void *in_buf, size_t in_bufsz,
            size_t out_bufsz)
{
    const struct fuse_ctx *ctx;
    struct fast_entry *e;
    uint64_t counts[HWPERFD_STATE_SLOTS], mono;
    int generation;

    if (!fast_on || fast_held)
        return 0;
    e = &fast[fh % FAST_ENTRIES];
    if (!e->used || e->fh != fh || e->ino != ino || e->cmd != cmd)
        return 0;
    ctx = fuse_req_ctx(req);
    if (e->caller != (int)ctx->pid || e->uid != (unsigned)ctx->uid || e->gid != (unsigned)ctx->gid)
        return 0;
    if (fast_nwatch && (fast_news_known ? fast_news : poll(fast_watch_fds, (nfds_t)fast_nwatch, 0) != 0))
        return 0; /* news (or an error) for the daemon first */
    if (e->pidfd >= 0 && syscall(SYS_pidfd_send_signal, e->pidfd, 0, NULL, 0) != 0 && errno != EPERM)
        return 0; /* gone: the daemon answers ESRCH */
    switch (e->kind) {
    case FAST_IRIX:
        if (in_bufsz || out_bufsz != FAST_SLOTS * sizeof(uint64_t)
            || !fast_counts(e, 0, FAST_SLOTS, &generation, counts, &mono) || generation < 0)
            return 0;
        fast_count++;
        fuse_reply_ioctl(req, generation, counts, FAST_SLOTS * sizeof(uint64_t));
        return 1;
    case FAST_VPERFCTR:
    case FAST_VSUM: {
        /* Slot 0 the TSC sum, then every pmc sum; the generation is cstatus. */
        struct { uint32_t cstatus, pad; uint64_t sums[1 + VPERFCTR_NR]; } state;
        int sum = e->kind == FAST_VSUM;
        size_t size = sum ? sizeof state.sums : sizeof state;
        if (in_bufsz || out_bufsz != size || !fast_counts(e, 0, 1 + VPERFCTR_NR, &generation, state.sums, &mono))
            return 0;
        state.cstatus = (uint32_t)generation;
        state.pad = 0;
        fast_count++;
        fuse_reply_ioctl(req, 0, sum ? (const void *)state.sums : (const void *)&state, size);
        return 1;
    }
    case FAST_CPC: {
        /* cpc_set_sample on the caller's own LWP set: the head as the daemon's
         * sample fills it (hwperfd/cpc/device.py), and only the head - FUSE
         * copies back what the answer holds, the requests stay the caller's. */
        struct cpc_io_head head;
        if ((in_bufsz != sizeof head && in_bufsz != CPC_IO_SIZE) || out_bufsz != in_bufsz)
            return 0;
        memcpy(&head, in_buf, sizeof head);
        if (head.ci_target != 0 || head.ci_flags != 0 || head.ci_preset != 0)
            return 0; /* another LWP's, a CPU's, cputrack's exec flag, an overflow timer's look */
        const struct hwperfd_state *p = e->page.buf;
        unsigned n = (size_t)e->page.len >= sizeof *p ? p->hs_nslots : 0;
        if (n < 1 || n > 1 + CPC_MAXREQS || !fast_counts(e, 0, n, &generation, counts, &mono))
            return 0;
        head.ci_error = 0;
        head.ci_subcode = -1;
        head.ci_nreqs = n - 1;
        head.ci_hrtime = (int64_t)mono;
        head.ci_tick = counts[0];
        for (unsigned i = 0; i < CPC_MAXREQS; i++)
            head.ci_data[i] = i + 1 < n ? counts[i + 1] : 0;
        fast_count++;
        fuse_reply_ioctl(req, 0, &head, sizeof head);
        return 1;
    }
    case FAST_PCTR: {
        /* The caller's CPU's TSC and counters (hwperfd/pctr/pages.py). */
        struct { uint32_t fn[PCTR_NUM]; uint64_t tsc; uint64_t hwc[PCTR_NUM]; } __attribute__((packed)) st;
        const struct hwperfd_state *p = e->page.buf;
        unsigned cpu, ncpus = (size_t)e->page.len >= sizeof *p ? p->hs_ncpus : 0;
        unsigned stride = ncpus ? p->hs_cpu_slots : 0;
        if (in_bufsz || out_bufsz != sizeof st || !ncpus || stride != 1 + PCTR_NUM || e->procfd < 0
            || (size_t)ncpus * stride > HWPERFD_STATE_SLOTS || !caller_cpu(e, p, ncpus, stride, &cpu))
            return 0;
        if (!fast_counts(e, (cpu % ncpus) * stride, stride, &generation, counts, &mono))
            return 0;
        memcpy(st.fn, e->fn, sizeof st.fn);
        st.tsc = counts[0];
        memcpy(st.hwc, counts + 1, sizeof st.hwc);
        fast_count++;
        fuse_reply_ioctl(req, 0, &st, sizeof st);
        return 1;
    }
    }
    return 0;
}

/* FUSE_USE_VERSION 32 (as pyfuse3) declares cmd as int; it is the 32-bit command. */
static void
bridge_ioctl(fuse_req_t req, fuse_ino_t ino, int cmd, void *arg,
             struct fuse_file_info *fi, unsigned flags, const void *in_buf,
             size_t in_bufsz, size_t out_bufsz)
{
    if (flags & FUSE_IOCTL_UNRESTRICTED) {
        fuse_reply_err(req, ENOTTY);
        return;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    if (!fast_answer(req, ino, fi ? fi->fh : 0, (unsigned int)cmd, in_buf, in_bufsz, out_bufsz))
        dispatch(req, ino, fi ? fi->fh : 0, (unsigned int)cmd, arg, flags, in_buf,
                 in_bufsz, out_bufsz);
    if (!lingering) {
        if (!interrupted && linger_window_ns > 0 && session != NULL)
            follow_on(session);
        interrupted = 0;
    }
    PyGILState_Release(gil);
}

struct fuse_session *
fuse_session_new(struct fuse_args *args, const struct fuse_lowlevel_ops *op,
                 size_t op_size, void *userdata)
{
    static session_new_fn real;
    struct fuse_session *se;

    if (real == NULL) {
        real = (session_new_fn)dlvsym(RTLD_NEXT, "fuse_session_new", "FUSE_3.0");
        if (real == NULL) {
            fprintf(stderr, "hwperfd ioctl bridge: no fuse_session_new@FUSE_3.0: %s\n",
                    dlerror());
            return NULL;
        }
    }
    /* libfuse copies the ops, so a temporary copy is enough. */
    size_t size = op_size > sizeof(struct fuse_lowlevel_ops)
                      ? op_size : sizeof(struct fuse_lowlevel_ops);
    struct fuse_lowlevel_ops *ops = calloc(1, size);
    if (ops == NULL) {
        fprintf(stderr, "hwperfd ioctl bridge: out of memory\n");
        return NULL;
    }
    memcpy(ops, op, op_size);
    ops->ioctl = bridge_ioctl;
    se = real(args, ops, size, userdata);
    free(ops);
    if (se != NULL) {
        sessions_hooked++;
        session = se;
    }
    return se;
}

static PyObject *
bridge_install(PyObject *self, PyObject *fn)
{
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "handler must be callable or None, not %.200R", fn);
        return NULL;
    }
    Py_XSETREF(handler, fn == Py_None ? NULL : Py_NewRef(fn));
    Py_RETURN_NONE;
}

static PyObject *
bridge_hooked(PyObject *self, PyObject *unused)
{
    return PyLong_FromLong(sessions_hooked);
}

static PyObject *
bridge_linger(PyObject *self, PyObject *args)
{
    long long window_ns, budget_ns;

    PyObject *wakers = NULL, *seq;
    int fds[LINGER_WAKERS];
    Py_ssize_t n = 0;

    if (!PyArg_ParseTuple(args, "LL|O:linger", &window_ns, &budget_ns, &wakers))
        return NULL;
    if (window_ns < 0 || budget_ns < 0 || window_ns > 1000000000LL || budget_ns > 1000000000LL) {
        PyErr_SetString(PyExc_ValueError, "linger window and budget must be in 0..1 s");
        return NULL;
    }
    if (wakers != NULL) {
        if ((seq = PySequence_Fast(wakers, "wakers must be a sequence of descriptors")) == NULL)
            return NULL;
        n = PySequence_Fast_GET_SIZE(seq);
        for (Py_ssize_t i = 0; i < n && i < LINGER_WAKERS; i++) {
            long fd = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
            if (fd == -1 && PyErr_Occurred()) {
                Py_DECREF(seq);
                return NULL;
            }
            fds[i] = (int)fd;
        }
        Py_DECREF(seq);
        if (n > LINGER_WAKERS) {
            PyErr_Format(PyExc_ValueError, "at most %d wakers", LINGER_WAKERS);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < n; i++)
            if (fds[i] < 0) {
                PyErr_SetString(PyExc_ValueError, "a waker must be an open descriptor");
                return NULL;
            }
        memcpy(linger_wakers, fds, (size_t)n * sizeof fds[0]);
        linger_nwakers = (int)n;
    }
    linger_window_ns = budget_ns ? window_ns : 0;
    linger_budget_ns = budget_ns;
    Py_RETURN_NONE;
}

static PyObject *
bridge_follow_ons(PyObject *self, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(follow_on_count);
}

static PyObject *
bridge_fast_set(PyObject *self, PyObject *args)
{
    unsigned long long fh, ino;
    int kind, pid, pidfd, caller;
    unsigned cmd, uid, gid;
    PyObject *page;
    const char *fn = NULL;
    Py_ssize_t fn_len = 0;
    struct fast_entry *e = NULL;
    char path[64];
    int procfd = -1;

    if (!PyArg_ParseTuple(args, "KKiIiiiIIO|y#:fast_set", &fh, &ino, &kind, &cmd, &pid, &pidfd, &caller, &uid,
                          &gid, &page, &fn, &fn_len))
        return NULL;
    if (kind < 0 || kind >= FAST_KINDS || (fn_len && fn_len != sizeof e->fn) || caller <= 0) {
        PyErr_SetString(PyExc_ValueError, "fast_set: a kind of reply, functions or caller it does not know");
        return NULL;
    }
    if (kind != FAST_IRIX) {
        /* The caller's own /proc file, kept open: it names that thread alone
         * (a later thread given its id has other files), and reads fail once it is gone. */
        snprintf(path, sizeof path, "/proc/%d/%s", caller, kind == FAST_PCTR ? "stat" : "schedstat");
        procfd = open(path, O_RDONLY | O_CLOEXEC);
        if (procfd < 0)
            return PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
    }
    e = &fast[fh % FAST_ENTRIES];
    fast_release(e);
    if (PyObject_GetBuffer(page, &e->page, PyBUF_SIMPLE) < 0) {
        if (procfd >= 0)
            close(procfd);
        return NULL;
    }
    e->listed = fast_nused;
    fast_used[fast_nused++] = (int)(e - fast);
    e->used = 1;
    e->kind = kind;
    e->cmd = cmd;
    e->fh = fh;
    e->ino = ino;
    e->pid = pid;
    e->pidfd = pidfd;
    e->caller = caller;
    e->procfd = procfd;
    e->uid = uid;
    e->gid = gid;
    if (fn_len)
        memcpy(e->fn, fn, sizeof e->fn);
    Py_RETURN_NONE;
}

static PyObject *
bridge_fast_drop(PyObject *self, PyObject *args)
{
    unsigned long long fh;
    PyObject *page = Py_None;

    if (!PyArg_ParseTuple(args, "K|O:fast_drop", &fh, &page))
        return NULL;
    if (page == Py_None) {
        struct fast_entry *e = &fast[fh % FAST_ENTRIES];
        if (e->used && e->fh == fh)
            fast_release(e);
    }
    else
        for (int i = fast_nused - 1; i >= 0; i--)
            if (fast[fast_used[i]].page.obj == page)
                fast_release(&fast[fast_used[i]]);
    Py_RETURN_NONE;
}

static PyObject *
bridge_fast_clear(PyObject *self, PyObject *unused)
{
    while (fast_nused)
        fast_release(&fast[fast_used[fast_nused - 1]]);
    Py_RETURN_NONE;
}

static PyObject *
bridge_fast_config(PyObject *self, PyObject *args)
{
    int on;
    PyObject *fds;

    if (!PyArg_ParseTuple(args, "pO:fast_config", &on, &fds))
        return NULL;
    PyObject *seq = PySequence_Fast(fds, "fds must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > 2) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "at most 2 descriptors to watch");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int fd = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (fd < 0) {
            Py_DECREF(seq);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "descriptors must be >= 0");
            return NULL;
        }
        fast_watch_fds[i].fd = fd;
        fast_watch_fds[i].events = POLLIN;
    }
    Py_DECREF(seq);
    fast_nwatch = (int)n;
    fast_on = on;
    Py_RETURN_NONE;
}

static PyObject *
bridge_fast_hold(PyObject *self, PyObject *held)
{
    int v = PyObject_IsTrue(held);
    if (v < 0)
        return NULL;
    fast_held = v;
    Py_RETURN_NONE;
}

static PyObject *
bridge_fast_answers(PyObject *self, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(fast_count);
}

static PyMethodDef bridge_methods[] = {
    {"fast_set", bridge_fast_set, METH_VARARGS,
     "fast_set(fh, ino, kind, cmd, pid, pidfd, caller, uid, gid, page[, fn]): answer cmd on fh in C."},
    {"fast_drop", bridge_fast_drop, METH_VARARGS,
     "fast_drop(fh[, page]): forget fh's mark (or every mark on page)."},
    {"fast_clear", bridge_fast_clear, METH_NOARGS, "fast_clear(): forget every mark."},
    {"fast_config", bridge_fast_config, METH_VARARGS,
     "fast_config(on, fds): reads answered in C or not, and the descriptors whose news the daemon must see first."},
    {"fast_hold", bridge_fast_hold, METH_O, "fast_hold(held): the daemon holds records back (reads go to it)."},
    {"fast_answers", bridge_fast_answers, METH_NOARGS, "fast_answers() -> reads answered in C."},
    {"install", bridge_install, METH_O,
     "install(handler): set the ioctl handler (None removes it)."},
    {"linger", bridge_linger, METH_VARARGS,
     "linger(window_ns, budget_ns[, wakers]): answer follow-on ioctls inline (0 turns it off);\n"
     "a readable waker descriptor ends a burst."},
    {"follow_ons", bridge_follow_ons, METH_NOARGS,
     "follow_ons() -> number of ioctls answered inside a burst."},
    {"hooked", bridge_hooked, METH_NOARGS,
     "hooked() -> number of FUSE sessions created with the ioctl handler."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef bridge_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "hwperfd.procfs._ioctl_bridge",
    .m_doc = "FUSE ioctl handler for pyfuse3 (see hwperfd.procfs.bridge).",
    .m_size = -1,
    .m_methods = bridge_methods,
};

PyMODINIT_FUNC
PyInit__ioctl_bridge(void)
{
    return PyModule_Create(&bridge_module);
}
