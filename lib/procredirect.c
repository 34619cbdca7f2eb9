/*
 * libhwperfd-preload: run IRIX programs that open "/proc/%05d" unchanged.
 *
 * On Linux /proc/<pid> is a directory of the real procfs; IRIX programs open
 * it as a file and call PIOC* ioctls on it.  With LD_PRELOAD set to this
 * library, an open of exactly "/proc/<digits>" (no further component) goes
 * to "$HWPERFD_MOUNT/<digits>" (default /run/hwperfd) instead.  Every other
 * path, including /proc/<pid>/stat and /proc/self, is untouched.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

static const char *mount_point(void)
{
    const char *m = getenv("HWPERFD_MOUNT");
    return (m && *m) ? m : "/run/hwperfd";
}

/* "/proc/123" or "/proc/00123/" -> "<mount>/123"; NULL for anything else,
 * and for O_DIRECTORY opens: opendir("/proc/123") still lists the real one. */
static const char *redirect(const char *path, int flags, char *buf, size_t size)
{
    const char *p;
    size_t digits;

    if (path == NULL || (flags & O_DIRECTORY) || strncmp(path, "/proc/", 6) != 0)
        return NULL;
    p = path + 6;
    digits = strspn(p, "0123456789");
    if (digits == 0 || digits > 10 || !(p[digits] == '\0' || (p[digits] == '/' && p[digits + 1] == '\0')))
        return NULL;
    if (snprintf(buf, size, "%s/%.*s", mount_point(), (int)digits, p) >= (int)size)
        return NULL;
    return buf;
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
        const char *to = redirect(path, flags, buf, sizeof buf);                      \
        mode_t mode = 0;                                                       \
        MODE_ARG(flags, mode);                                                 \
        if (!real)                                                             \
            real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #name);   \
        return real(to ? to : path, flags, mode);                              \
    }

WRAP_OPEN(open)
WRAP_OPEN(open64)

#define WRAP_OPENAT(name)                                                      \
    int name(int dirfd, const char *path, int flags, ...)                      \
    {                                                                          \
        static int (*real)(int, const char *, int, ...);                       \
        char buf[4096];                                                        \
        const char *to = redirect(path, flags, buf, sizeof buf);                      \
        mode_t mode = 0;                                                       \
        MODE_ARG(flags, mode);                                                 \
        if (!real)                                                             \
            real = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, #name); \
        return real(dirfd, to ? to : path, flags, mode);                       \
    }

WRAP_OPENAT(openat)
WRAP_OPENAT(openat64)

/* _FORTIFY_SOURCE builds call these instead of open(). */
#define WRAP_OPEN_2(name)                                                      \
    int name(const char *path, int flags)                                      \
    {                                                                          \
        static int (*real)(const char *, int);                                 \
        char buf[4096];                                                        \
        const char *to = redirect(path, flags, buf, sizeof buf);                      \
        if (!real)                                                             \
            real = (int (*)(const char *, int))dlsym(RTLD_NEXT, #name);        \
        return real(to ? to : path, flags);                                    \
    }

WRAP_OPEN_2(__open_2)
WRAP_OPEN_2(__open64_2)
