/*
 * Riding out a restart of hwperfd (docs/restart.md), for the libraries and
 * the hwperfd-run shim.
 *
 * When the daemon dies, every file open on its mount answers ENOTCONN (the
 * FUSE connection is gone); until a new daemon has mounted again, opening
 * "<mount>/NNNNN" answers ENOTCONN (the dead mount is still there) or
 * ENOENT (it is gone and the bare directory shows).  The new daemon puts
 * back what was set up, so a caller that opens the same path again and
 * repeats the call sees only a pause.  These helpers do that, waiting at
 * most $HWPERFD_RECONNECT_MS milliseconds (default 30000; 0: never wait,
 * the errno comes back as it was).
 */
#ifndef HWPERFD_RECONNECT_H
#define HWPERFD_RECONNECT_H

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define HWPERFD_FUSE_MAGIC 0x65735546
#define HWPERFD_RECONNECT_PAUSE_NS 20000000L /* between two tries: 20 ms */

typedef int (*hwperfd_open_fn)(const char *, int, ...);

/* The daemon behind this errno is gone, or going: the call is worth repeating. */
static __inline__ int hwperfd_lost_daemon(int err)
{
    return err == ENOTCONN || err == ECONNABORTED;
}

static __inline__ long long hwperfd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* When to give up waiting for a new daemon, from now (-1: do not wait). */
static __inline__ long long hwperfd_reconnect_deadline(void)
{
    const char *s = getenv("HWPERFD_RECONNECT_MS");
    long long ms = 30000;
    if (s != NULL && *s != '\0') {
        char *end;
        ms = strtoll(s, &end, 10);
        if (*end != '\0' || ms < 0)
            ms = 30000;
    }
    return ms == 0 ? -1 : hwperfd_now_ms() + ms;
}

/* Whether the folder `path` is in is not (yet) a FUSE mount: an ENOENT
 * there means the mount is being replaced, not that the file is absent. */
static __inline__ int hwperfd_remounting(const char *path)
{
    char dir[4096];
    struct statfs st;
    const char *slash = strrchr(path, '/');
    size_t n = slash == NULL ? 0 : (size_t)(slash - path);

    if (n == 0 || n >= sizeof dir)
        return 0;
    memcpy(dir, path, n);
    dir[n] = '\0';
    if (statfs(dir, &st) != 0)
        return errno == ENOTCONN || errno == ENOENT;
    return st.f_type != HWPERFD_FUSE_MAGIC;
}

static __inline__ void hwperfd_pause(void)
{
    struct timespec pause = {0, HWPERFD_RECONNECT_PAUSE_NS};
    nanosleep(&pause, NULL);
}

/* Open `path` again onto descriptor `fd` (its number and close-on-exec
 * kept), waiting until `deadline` while a new daemon mounts.  0, or -1 with
 * errno. */
static __inline__ int hwperfd_reopen(int fd, const char *path, int flags, long long deadline, hwperfd_open_fn open_fn)
{
    int cloexec = fcntl(fd, F_GETFD);

    for (;;) {
        int nfd = open_fn(path, (flags & ~(O_CREAT | O_TRUNC | O_EXCL)) | O_CLOEXEC);
        int err;
        if (nfd >= 0) {
            if (nfd != fd) {
                int rc = dup3(nfd, fd, cloexec > 0 && (cloexec & FD_CLOEXEC) ? O_CLOEXEC : 0);
                err = errno;
                close(nfd);
                if (rc < 0) {
                    errno = err;
                    return -1;
                }
            } else if (cloexec >= 0 && !(cloexec & FD_CLOEXEC)) {
                fcntl(fd, F_SETFD, 0);
            }
            return 0;
        }
        err = errno;
        if (deadline < 0 || hwperfd_now_ms() >= deadline
            || !(hwperfd_lost_daemon(err) || err == EINTR || (err == ENOENT && hwperfd_remounting(path)))) {
            errno = err;
            return -1;
        }
        hwperfd_pause();
    }
}

/* `rc` and errno came from a call on `fd`, a file of the mount opened as
 * `path` with `flags`: if the daemon was lost, wait for the next one, open
 * again and repeat the call (`again(fd, context)`) until it answers or the
 * deadline passes.  Returns the last answer, errno as it left it. */
static __inline__ int hwperfd_ride_out(int rc, int fd, const char *path, int flags, hwperfd_open_fn open_fn,
                                   int (*again)(int fd, void *context), void *context)
{
    long long deadline;

    if (rc >= 0 || path == NULL || !hwperfd_lost_daemon(errno))
        return rc;
    deadline = hwperfd_reconnect_deadline();
    while (rc < 0 && hwperfd_lost_daemon(errno)) {
        int err = errno;
        if (deadline < 0 || hwperfd_now_ms() >= deadline) {
            errno = err;
            return rc;
        }
        if (hwperfd_reopen(fd, path, flags, deadline, open_fn) != 0) {
            if (errno == ENOENT || hwperfd_lost_daemon(errno))
                errno = err; /* still no daemon: the call's own answer stands */
            return -1;
        }
        rc = again(fd, context);
    }
    return rc;
}

/* One ioctl, made again while it answers EINTR (an overflow signal came
 * first: its handler has run, and the daemon lets the repeat take effect). */
struct hwperfd_ioctl_call {
    unsigned long cmd;
    void *arg;
};

static __inline__ int hwperfd_ioctl_again(int fd, void *context)
{
    struct hwperfd_ioctl_call *c = (struct hwperfd_ioctl_call *)context;
    int rc;

    do
        rc = ioctl(fd, c->cmd, c->arg);
    while (rc < 0 && errno == EINTR);
    return rc;
}

/* An ioctl on `fd`, a file of the mount opened as `path` (NULL: unknown,
 * no riding out): repeated on EINTR, and across a restart of the daemon. */
static __inline__ int hwperfd_ioctl(int fd, const char *path, unsigned long cmd, void *arg)
{
    struct hwperfd_ioctl_call call;
    int rc;

    call.cmd = cmd;
    call.arg = arg;
    rc = hwperfd_ioctl_again(fd, &call);
    if (rc < 0 && path != NULL && hwperfd_lost_daemon(errno))
        rc = hwperfd_ride_out(rc, fd, path, O_RDONLY, open, hwperfd_ioctl_again, &call);
    return rc;
}

#endif
