/*
 * Checked copies of a program's own memory, for the C sides that take its
 * pointers: libhwperf's syssgi() (syssgi.c) and the hwperfd-run shim
 * (procredirect.c).  Each includes this file, so that each stays one source
 * file to compile.  Internal: not installed.
 *
 * The pointers come from the program and may be bad: IRIX's kernel answered
 * EFAULT for them (copyin, and addupc's nofault handler), so must we, not
 * SIGSEGV.  The copies go through the kernel, which checks them:
 * process_vm_readv/writev on ourselves, or, where that is refused (seccomp,
 * old kernels), a pipe.  Async-signal-safe (the profiling tick uses them).
 *
 * Needs _GNU_SOURCE (process_vm_readv/writev, pipe2) before the first
 * system header.
 */
#ifndef HWPERFD_CHECKED_COPY_H
#define HWPERFD_CHECKED_COPY_H

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <sys/uio.h>
#include <unistd.h>

static int hwperfd_copy_through_pipe(void *to, const void *from, size_t size)
{
    int fds[2], rc = -1;

    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    /* The structs are far smaller than a pipe's buffer: all or nothing. */
    if (write(fds[1], from, size) == (ssize_t)size && read(fds[0], to, size) == (ssize_t)size)
        rc = 0;
    close(fds[0]);
    close(fds[1]);
    if (rc != 0)
        errno = EFAULT;
    return rc;
}

/* Copy `size` bytes; `outward`: `to` is the program's pointer (else `from`).
 * -1 with errno EFAULT if either side is not ours to use. */
static int hwperfd_checked_copy(void *to, const void *from, size_t size, int outward)
{
    struct iovec local, remote;
    ssize_t n;

    /* Assigned, not initialized: syssgi.c builds as C89 too. */
    local.iov_base = outward ? (void *)from : to;
    remote.iov_base = outward ? to : (void *)from;
    local.iov_len = remote.iov_len = size;
    n = outward ? process_vm_writev(getpid(), &local, 1, &remote, 1, 0)
                : process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (n == (ssize_t)size)
        return 0;
    if (n >= 0 || errno == EFAULT) {
        errno = EFAULT;
        return -1;
    }
    return hwperfd_copy_through_pipe(to, from, size); /* ENOSYS, EPERM: no process_vm_* here */
}

#endif
