/*
 * libhwperfd-preload: run IRIX programs that open "/proc/%05d" unchanged.
 *
 * On Linux /proc/<pid> is a directory of the real procfs; IRIX programs open
 * it as a file and call PIOC* ioctls on it.  With LD_PRELOAD set to this
 * library, an open of exactly "/proc/<digits>" (no further component) goes
 * to "$HWPERFD_MOUNT/<digits>" (default /run/hwperfd) instead, and IRIX's
 * "/proc/pinfo/<digits>" to "$HWPERFD_MOUNT/pinfo/<digits>".  Every other
 * path, including /proc/<pid>/stat and /proc/self, is untouched.  Opens of
 * exactly "/dev/pctr" (OpenBSD's pctr(4) device) go to "<mount>/pctr", and
 * of "/dev/perfctr" (Linux perfctr's) to "<mount>/perfctr".
 *
 * It also carries IRIX's two pointer-carrying counter calls, PIOCENEVCTRSEX
 * and PIOCGETEVCTRLEX, on files of a FUSE mount: a FUSE server sees only the
 * argument's bytes, so the structs they point to are copied inline into
 * hwperfd's HWPERFD_ forms (and back out) here, in the caller's process.
 *
 * And a process's PIOCGETEVCTRS on its own file is answered from its state
 * page (include/hwperfd/state.h, lib/state.c), without a request to the
 * daemon, once an enable on that file has mapped the page.
 *
 * And a thread's open of its own process file is a duplicate of the
 * descriptor its first one gave, kept until the thread exits (below).
 *
 * And a restart of the daemon passes unnoticed but for a pause: a call on a
 * file of the mount that finds the daemon gone waits for the next one,
 * opens the same path again onto the same descriptor and repeats the call
 * (reconnect.h; the new daemon has put back what was set up).
 * And it lands IRIX overflow interrupts on their instant, as libperfctr and
 * libcpc do theirs (lib/overflow_timer.h, docs/overflow.md): after a call
 * that sets counters up on a file of the mount, it asks the daemon
 * (HWPERFD_PIOCOVFLNS) for the CPU ns left before their nearest overflow,
 * and arms a timer on the clock they count - the process's
 * (CLOCK_PROCESS_CPUTIME_ID) for a process's counters, which count every
 * thread, the thread's for a thread's own - whose look at the instant finds
 * the overflow and answers the next.
 *
 * Built with -I include: <sys/procfs.h> is hwperfd's.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/procfs.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "checked_copy.h"
#include "hwperfd/state.h"
#include "reconnect.h"

#define OVF_SIGNAL 59		/* SIGRTMAX - 5: the overflow timer's (lib/overflow_timer.h) */
#define OVF_PROCESS		/* and the process's counters' timer */
#include "overflow_timer.h"

#define FUSE_SUPER_MAGIC 0x65735546

static const char *mount_point(void)
{
    const char *m = getenv("HWPERFD_MOUNT");
    return (m && *m) ? m : "/run/hwperfd";
}

/* "/proc/123" or "/proc/00123/" -> "<mount>/123"; NULL for anything else,
 * and for O_DIRECTORY opens: opendir("/proc/123") still lists the real one. */
static const char *redirect(const char *path, int flags, char *buf, size_t size, int *own)
{
    const char *p;
    size_t digits;

    const char *sub = "";

    *own = 0;

    if (path != NULL && strcmp(path, "/dev/pctr") == 0) {
        /* OpenBSD's pctr(4) device (<machine/pctr.h> _PATH_PCTR). */
        if (snprintf(buf, size, "%s/pctr", mount_point()) >= (int)size)
            return NULL;
        return buf;
    }
    if (path != NULL && strcmp(path, "/dev/perfctr") == 0) {
        /* Linux perfctr's device: libperfctr builds find the mount themselves,
           programs that open it by name reach it here. */
        if (snprintf(buf, size, "%s/perfctr", mount_point()) >= (int)size)
            return NULL;
        return buf;
    }
    if (path == NULL || (flags & O_DIRECTORY) || strncmp(path, "/proc/", 6) != 0)
        return NULL;
    p = path + 6;
    if (strncmp(p, "pinfo/", 6) == 0) { /* IRIX's /proc/pinfo/nnnnn (Linux has none) */
        sub = "pinfo/";
        p += 6;
    }
    digits = strspn(p, "0123456789");
    if (digits == 0 || digits > 10 || !(p[digits] == '\0' || (p[digits] == '/' && p[digits + 1] == '\0')))
        return NULL;
    *own = *sub == '\0' && strtol(p, NULL, 10) == (long)getpid();
    if (*own && gettid() != getpid()) {
        /* A thread's own "/proc/<getpid()>": on IRIX each thread of an -mp
         * or sproc(2) program is a process of the share group, with its own
         * pid and counters (sproc(2)); here the thread's file is its own. */
        if (snprintf(buf, size, "%s/%d", mount_point(), (int)gettid()) >= (int)size)
            return NULL;
        return buf;
    }
    if (snprintf(buf, size, "%s/%s%.*s", mount_point(), sub, (int)digits, p) >= (int)size)
        return NULL;
    return buf;
}

/* -- files of the mount, by descriptor: what a reconnect opens again ------- */

#define TRACKED_FDS 4096

static struct tracked {
    char *path;
    int flags;
} tracked[TRACKED_FDS];

static int real_open_any(const char *path, int flags, ...);

/* After an open: remember the path of a file of the mount (a redirected
 * one, or one named under the mount), forget whatever `fd` was before.
 * errno is the open's own answer: kept. */
static void track(int fd, const char *path, int flags, int redirected)
{
    const char *m = mount_point();
    size_t n = strlen(m);
    char *copy = NULL, *old;
    int saved = errno;

    if (fd < 0 || fd >= TRACKED_FDS)
        return;
    if (path != NULL && (redirected || (strncmp(path, m, n) == 0 && path[n] == '/')))
        copy = strdup(path);
    old = __atomic_exchange_n(&tracked[fd].path, copy, __ATOMIC_ACQ_REL);
    tracked[fd].flags = flags;
    free(old);
    errno = saved;
}

/* -- a thread's own process file, opened once ------------------------------ */

/*
 * PAPI's IRIX substrate opens the calling thread's "/proc/<getpid()>" at
 * every thread it registers and closes it when the thread unregisters; its
 * omptough does so at each of 100 000 OpenMP parallel regions.  On IRIX each
 * was a system call; here the open and the close are three requests to the
 * daemon (LOOKUP, OPEN, RELEASE) that take ten times the ioctl between them.
 * So a thread's open of its own file, with the flags of its first one, is
 * answered with a duplicate of a descriptor the thread opened before and
 * keeps until it exits: the same file of the daemon.  What an open checks -
 * that the file is there and the caller may read it - cannot change for a
 * thread's own process, and closing a process file ends nothing of its
 * counters on IRIX (PIOCRELEVCTRS does).  HWPERFD_PROC_KEEP=0 opens anew.
 */
static __thread struct {
    pid_t pid, tid;	/* the thread that opened it: a forked child's copy is not its */
    int flags;		/* the open's O_ACCMODE and O_CLOEXEC */
    int fd;		/* kept, close-on-exec; 0: none (a thread's entry starts zeroed) */
    dev_t dev;
    ino_t ino;
} own_file;
static pthread_key_t own_file_key;
static pthread_once_t own_file_once = PTHREAD_ONCE_INIT;
static int own_file_off;

/* Whether the descriptor kept is still the file kept: the program may have
   closed its number, and after a restart of the daemon it is the old
   mount's (a dead connection, whose attributes the kernel may still give:
   the mount in its place is another device). */
static int own_file_valid(void)
{
    struct stat st, mount;

    return own_file.fd > 0 && own_file.pid == getpid() && own_file.tid == gettid()
           && fstat(own_file.fd, &st) == 0 && st.st_dev == own_file.dev && st.st_ino == own_file.ino
           && stat(mount_point(), &mount) == 0 && mount.st_dev == own_file.dev;
}

/* At the thread's exit. */
static void own_file_drop(void *unused)
{
    int saved = errno;

    (void)unused;
    if (own_file_valid())
        close(own_file.fd);
    own_file.fd = 0;
    errno = saved;
}

static void own_file_init(void)
{
    const char *keep = getenv("HWPERFD_PROC_KEEP");

    own_file_off = (keep != NULL && strcmp(keep, "0") == 0) || pthread_key_create(&own_file_key, own_file_drop) != 0;
}

/* An open of the thread's own file: a duplicate of the one kept, or -1. */
static int own_file_again(int flags)
{
    int saved = errno, fd = -1;

    pthread_once(&own_file_once, own_file_init);
    if (!own_file_off && (flags & ~(O_ACCMODE | O_CLOEXEC | O_LARGEFILE)) == 0
        && own_file.flags == (flags & (O_ACCMODE | O_CLOEXEC)) && own_file_valid())
        fd = fcntl(own_file.fd, (flags & O_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD, 0);
    errno = saved;
    return fd;
}

/* After an open of the thread's own file: keep a duplicate, if none is kept
   (one that is no longer ours is forgotten, a dead one closed). */
static void own_file_keep(int fd, int flags)
{
    int saved = errno, kept;
    struct stat st;

    if (own_file_off || (flags & ~(O_ACCMODE | O_CLOEXEC | O_LARGEFILE)) != 0 || fd == own_file.fd)
        return;
    if (own_file.fd > 0 && own_file.pid == getpid() && own_file.tid == gettid()) {
        if (own_file_valid())
            goto out;	/* kept, with other flags */
        if (fstat(own_file.fd, &st) != 0 ? errno != EBADF : st.st_dev == own_file.dev && st.st_ino == own_file.ino)
            close(own_file.fd);	/* still ours: its daemon is gone */
    }
    own_file.fd = 0;
    kept = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (kept < 0)
        goto out;
    if (fstat(kept, &st) != 0 || pthread_setspecific(own_file_key, &own_file) != 0) {
        close(kept);
        goto out;
    }
    own_file.pid = getpid();
    own_file.tid = gettid();
    own_file.flags = flags & (O_ACCMODE | O_CLOEXEC);
    own_file.dev = st.st_dev;
    own_file.ino = st.st_ino;
    own_file.fd = kept;
 out:
    errno = saved;
}

#define MODE_ARG(flags, mode)                                                  \
    do {                                                                       \
        if ((flags) & (O_CREAT | O_TMPFILE)) {                                 \
            va_list ap;                                                        \
            va_start(ap, flags);                                               \
            mode = va_arg(ap, mode_t);                                         \
            va_end(ap);                                                        \
        }                                                                      \
    } while (0)

#define WRAP_OPEN(name)                                                        \
    int name(const char *path, int flags, ...)                                 \
    {                                                                          \
        static int (*real)(const char *, int, ...);                            \
        char buf[4096];                                                        \
        int own;                                                               \
        const char *to = redirect(path, flags, buf, sizeof buf, &own);         \
        mode_t mode = 0;                                                       \
        MODE_ARG(flags, mode);                                                 \
        int fd = -1;                                                           \
        if (!real)                                                             \
            real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #name);   \
        if (to != NULL && own && (fd = own_file_again(flags)) >= 0)            \
            own = 0; /* a duplicate of the one kept */                         \
        if (fd < 0)                                                            \
            fd = real(to ? to : path, flags, mode);                            \
        if (fd >= 0)                                                           \
            track(fd, to ? to : path, flags, to != NULL);                      \
        if (fd >= 0 && to != NULL && own)                                      \
            own_file_keep(fd, flags);                                          \
        return fd;                                                             \
    }

WRAP_OPEN(open)
WRAP_OPEN(open64)

#define WRAP_OPENAT(name)                                                      \
    int name(int dirfd, const char *path, int flags, ...)                      \
    {                                                                          \
        static int (*real)(int, const char *, int, ...);                       \
        char buf[4096];                                                        \
        int own;                                                               \
        const char *to = redirect(path, flags, buf, sizeof buf, &own);         \
        mode_t mode = 0;                                                       \
        MODE_ARG(flags, mode);                                                 \
        int fd = -1;                                                           \
        if (!real)                                                             \
            real = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, #name); \
        if (to != NULL && own && (fd = own_file_again(flags)) >= 0)            \
            own = 0; /* a duplicate of the one kept */                         \
        if (fd < 0)                                                            \
            fd = real(dirfd, to ? to : path, flags, mode);                     \
        if (fd >= 0 && (to != NULL || path[0] == '/'))                         \
            track(fd, to ? to : path, flags, to != NULL);                      \
        if (fd >= 0 && to != NULL && own)                                      \
            own_file_keep(fd, flags);                                          \
        return fd;                                                             \
    }

WRAP_OPENAT(openat)
WRAP_OPENAT(openat64)

/* _FORTIFY_SOURCE builds call these instead of open(). */
#define WRAP_OPEN_2(name)                                                      \
    int name(const char *path, int flags)                                      \
    {                                                                          \
        static int (*real)(const char *, int);                                 \
        char buf[4096];                                                        \
        int own;                                                               \
        const char *to = redirect(path, flags, buf, sizeof buf, &own);         \
        int fd = -1;                                                           \
        if (!real)                                                             \
            real = (int (*)(const char *, int))dlsym(RTLD_NEXT, #name);        \
        if (to != NULL && own && (fd = own_file_again(flags)) >= 0)            \
            own = 0; /* a duplicate of the one kept */                         \
        if (fd < 0)                                                            \
            fd = real(to ? to : path, flags);                                  \
        if (fd >= 0)                                                           \
            track(fd, to ? to : path, flags, to != NULL);                      \
        if (fd >= 0 && to != NULL && own)                                      \
            own_file_keep(fd, flags);                                          \
        return fd;                                                             \
    }

WRAP_OPEN_2(__open_2)
WRAP_OPEN_2(__open64_2)

/* The next open(2) in line, for opening a file of the mount again. */
static int real_open_any(const char *path, int flags, ...)
{
    static int (*real)(const char *, int, ...);
    if (!real)
        real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
    return real(path, flags, 0);
}

/* -- PIOCENEVCTRSEX / PIOCGETEVCTRLEX ------------------------------------- */

typedef int (*ioctl_fn)(int, unsigned long, ...);

/* -- the overflow timer (lib/overflow_timer.h) ----------------------------- */

static ioctl_fn ovf_ioctl;	/* the C library's: set before any timer is armed */

/* Ask how much CPU time is left before the nearest overflow of the counters
   on `fd`, and arm the timer of the clock they count for it.  At the
   instant the same call finds the overflow, whose signal comes as the
   timer's handler returns. */
static void ovf_look(int fd)
{
    unsigned thread_gen = ovf_self.gen, process_gen = ovf_proc.gen;
    long long before = ovf_clock(CLOCK_PROCESS_CPUTIME_ID), after, from = 0;
    hwperfd_ovflns_t answer;

    memset(&answer, 0, sizeof answer);
    if (ovf_ioctl(fd, HWPERFD_PIOCOVFLNS, &answer) < 0) {
        /* Gone (closed, released, the process's file of another): the
           timer that rang for it stops; the daemon's tick is the fallback. */
        if (ovf_self.fd < 0 && thread_gen == ovf_self.gen)
            ovf_disarm_on(&ovf_self);
        if (ovf_proc.fd < 0 && process_gen == ovf_proc.gen)
            ovf_disarm_on(&ovf_proc);
        return;
    }
    if (answer.ho_clock == HWPERFD_STATE_CLOCK_THREAD) {
        ovf_answer_on(&ovf_self, fd, answer.ho_sig, thread_gen, answer.ho_left, answer.ho_left == HWPERFD_OVFL_NONE, 0);
        return;
    }
    /* The process's other threads ran on while the call was on its way:
       the instant counts from the CPU time the daemon caught up to, when
       that lies within the call (it is the same clock, read there). */
    after = ovf_clock(CLOCK_PROCESS_CPUTIME_ID);
    if ((long long)answer.ho_at >= before && (long long)answer.ho_at <= after)
        from = (long long)answer.ho_at;
    ovf_answer_on(&ovf_proc, fd, answer.ho_sig, process_gen, answer.ho_left, answer.ho_left == HWPERFD_OVFL_NONE,
                  from);
}

/* A call on `fd` that may change what overflows is on its way: the timers
   timing it look at nothing meanwhile. */
static void ovf_hold_fd(int fd)
{
    if (ovf_self.fd == fd)
        ovf_hold_on(&ovf_self);
    if (ovf_proc.fd == fd)
        ovf_hold_on(&ovf_proc);
}

/* Its counters are released: nothing to time on `fd`. */
static void ovf_disarm_fd(int fd)
{
    if (ovf_self.fd == fd)
        ovf_disarm_on(&ovf_self);
    if (ovf_proc.fd == fd)
        ovf_disarm_on(&ovf_proc);
}

static int on_fuse(int fd)
{
    struct statfs st;
    return fstatfs(fd, &st) == 0 && st.f_type == FUSE_SUPER_MAGIC;
}

/* The program's pointers may be bad: EFAULT, not SIGSEGV (checked_copy.h). */
#define COPY_IN(to, from) hwperfd_checked_copy((to), (from), sizeof *(to), 0)
#define COPY_OUT(to, from) hwperfd_checked_copy((to), (from), sizeof *(from), 1)

/* hwp_aux may be NULL: a fresh generation and counts from zero. */
static int enevctrsex(ioctl_fn real, int fd, const hwperf_profevctrargex_t *user)
{
    hwperf_profevctrargex_t ex;
    hwperfd_enevctrsex_t flat;

    memset(&flat, 0, sizeof flat);
    if (user == NULL || COPY_IN(&ex, user) != 0 || ex.hwp_args == NULL
        || COPY_IN(&flat.hwp_args, ex.hwp_args) != 0
        || (ex.hwp_aux != NULL && COPY_IN(&flat.hwp_aux, ex.hwp_aux) != 0)) {
        errno = EFAULT;
        return -1;
    }
    return real(fd, HWPERFD_PIOCENEVCTRSEX, &flat);
}

static int getevctrlex(ioctl_fn real, int fd, const hwperf_getctrlex_arg_t *user)
{
    hwperf_getctrlex_arg_t ex;
    hwperfd_getevctrlex_t flat;
    int rc;

    /* Both destinations are checked before the call: a fault after it would
     * leave the caller with half an answer. */
    if (user == NULL || COPY_IN(&ex, user) != 0 || ex.hwp_evctrl == NULL || ex.hwp_evctrlaux == NULL
        || COPY_IN(&flat.hwp_evctrl, ex.hwp_evctrl) != 0 || COPY_OUT(ex.hwp_evctrl, &flat.hwp_evctrl) != 0
        || COPY_IN(&flat.hwp_evctrlaux, ex.hwp_evctrlaux) != 0
        || COPY_OUT(ex.hwp_evctrlaux, &flat.hwp_evctrlaux) != 0) {
        errno = EFAULT;
        return -1;
    }
    memset(&flat, 0, sizeof flat);
    rc = real(fd, HWPERFD_PIOCGETEVCTRLEX, &flat);
    if (rc >= 0 && (COPY_OUT(ex.hwp_evctrl, &flat.hwp_evctrl) != 0
                    || COPY_OUT(ex.hwp_evctrlaux, &flat.hwp_evctrlaux) != 0)) {
        errno = EFAULT; /* unmapped meanwhile by another thread */
        return -1;
    }
    return rc;
}

/* -- PIOCGETEVCTRS from the state page ------------------------------------- */

/* The process's own file, as of the enable that mapped its page (one: a
 * process counts itself through one file). */
static struct {
    int fd;
    dev_t dev;
    ino_t ino;
    struct hwperfd_state_reader reader;
} own = {-1, 0, 0, {NULL, 0, 0, {0, 0}, {0, 0}}};

static void forget_page(void)
{
    hwperfd_state_close(&own.reader);
    own.fd = -1;
}

/* After counting started on `fd`: map the page if the file is our own (the
 * daemon answers HWPERFD_PIOCSTATEPAGE to the process itself only).  The
 * C library's ioctl and open, not ours: the reader never comes back here. */
static void map_page(ioctl_fn real, int fd)
{
    static int (*real_open)(const char *, int, ...);
    hwperfd_statepage_t arg;
    struct stat st;
    int page_fd;

    if (fd == own.fd)
        forget_page();
    if (!real_open)
        real_open = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
    memset(&arg, 0, sizeof arg);
    /* A thread's own file has no page (the daemon answers the process's
     * main file only): the process's page, if mapped, stays. */
    if (fstat(fd, &st) != 0 || real(fd, HWPERFD_PIOCSTATEPAGE, &arg) < 0)
        return;
    forget_page();
    arg.hp_path[sizeof arg.hp_path - 1] = '\0';
    page_fd = real_open(arg.hp_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (page_fd < 0 || hwperfd_state_map_fd(page_fd, &own.reader) != 0)
        return;
    own.fd = fd;
    own.dev = st.st_dev;
    own.ino = st.st_ino;
}

static int read_from_page(ioctl_fn real, int fd, hwperf_cntr_t *user)
{
    hwperf_cntr_t counts;
    struct stat st;
    int gen;

    /* The descriptor may have been closed and its number taken by another file. */
    if (fstat(fd, &st) != 0 || st.st_dev != own.dev || st.st_ino != own.ino) {
        forget_page();
        return real(fd, PIOCGETEVCTRS, user);
    }
    if (hwperfd_state_read(&own.reader, &gen, counts.hwp_evctr, HWPERF_EVENTMAX) != 0) {
        hwperfd_state_before_ioctl(&own.reader);
        return real(fd, PIOCGETEVCTRS, user);
    }
    if (user == NULL || COPY_OUT(user, &counts) != 0) {
        errno = EFAULT;
        return -1;
    }
    return gen;
}

struct call {
    ioctl_fn real;
    unsigned long request;
    void *arg;
};

static int dispatch(int fd, void *context)
{
    struct call *c = context;
    if (c->request == (unsigned long)PIOCENEVCTRSEX && on_fuse(fd))
        return enevctrsex(c->real, fd, c->arg);
    if (c->request == (unsigned long)PIOCGETEVCTRLEX && on_fuse(fd))
        return getevctrlex(c->real, fd, c->arg);
    return c->real(fd, c->request, c->arg);
}

int ioctl(int fd, unsigned long request, ...)
{
    static ioctl_fn real;
    struct call call;
    va_list ap;
    void *arg;
    int rc;

    /* Like glibc's own wrapper: the one argument, whatever its type. */
    va_start(ap, request);
    arg = va_arg(ap, void *);
    va_end(ap);
    if (!real)
        real = (ioctl_fn)dlsym(RTLD_NEXT, "ioctl");
    call.real = real;
    call.request = request;
    call.arg = arg;
    int sets = request == (unsigned long)PIOCENEVCTRS || request == (unsigned long)PIOCSETEVCTRL
               || request == (unsigned long)PIOCENEVCTRSEX || request == (unsigned long)HWPERFD_PIOCENEVCTRSEX;
    if (sets || request == (unsigned long)PIOCRELEVCTRS)
        ovf_hold_fd(fd);
    if (request == (unsigned long)PIOCGETEVCTRS && fd == own.fd && own.reader.page != NULL)
        rc = read_from_page(real, fd, arg);
    else
        rc = dispatch(fd, &call);
    if (rc < 0 && hwperfd_lost_daemon(errno) && fd >= 0 && fd < TRACKED_FDS) {
        char *path = __atomic_load_n(&tracked[fd].path, __ATOMIC_ACQUIRE);
        rc = hwperfd_ride_out(rc, fd, path, tracked[fd].flags, real_open_any, dispatch, &call);
        if (rc >= 0 && fd == own.fd) {
            int saved = errno;
            map_page(real, fd); /* the old daemon's page is dead */
            errno = saved;
        }
    }
    if (request == (unsigned long)PIOCGETEVCTRS || request == (unsigned long)PIOCGETEVCTRLEX)
        return rc;
    if (rc >= 0 && sets && on_fuse(fd)) {
        int saved = errno;
        map_page(real, fd);
        ovf_ioctl = real;
        /* Only where the timer can ring: asking tells the daemon the process
           times itself, and its tick then looks later. */
        pthread_once(&ovf_once, ovf_install);
        if (ovf_on)
            ovf_look(fd);
        errno = saved;
    } else if (request == (unsigned long)PIOCRELEVCTRS) {
        ovf_disarm_fd(fd);
        if (fd == own.fd)
            forget_page();
    }
    return rc;
}
