/*
 * libhwperf: IRIX syssgi(SGI_EVENTCTR, cmd, ...) on Linux.
 *
 * Linux has no syssgi(2).  hwperfd serves the SGI_EVENTCTR sub-commands of
 * r10k_counters(5) ("Syssgi Commands") as HWIOC_* ioctls on the control
 * node of its mount, <mount>/control, where <mount> is
 * $HWPERFD_MOUNT or /run/hwperfd.  This file turns the variadic IRIX call
 * into one of those ioctls, so IRIX sources compile and run unchanged:
 *
 *   syssgi(SGI_EVENTCTR, HWPERF_ENSYSCNTRS, hwperf_profevctrarg_t *)
 *   syssgi(SGI_EVENTCTR, HWPERF_SET_SYSEVCTRL, hwperf_profevctrarg_t *)
 *   syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, hwperf_profevctrarg_t *, profp, profcnt)
 *   syssgi(SGI_EVENTCTR, HWPERF_GET_SYSCNTRS, hwperf_cntr_t *)
 *   syssgi(SGI_EVENTCTR, HWPERF_GET_CPUCNTRS, int cpuid, hwperf_cntr_t *)
 *   syssgi(SGI_EVENTCTR, HWPERF_GET_SYSEVCTRL, hwperf_eventctrl_t *)
 *   syssgi(SGI_EVENTCTR, HWPERF_RELSYSCNTRS)
 *   syssgi(SGI_EVENTCTR, HWPERF_PROF_CTR_SUSP / HWPERF_PROF_CTR_CONT)
 *
 * Results are those of the page: a positive generation number (0 from
 * HWPERF_GET_CPUCNTRS for an invalid cpuid, 0 from HWPERF_RELSYSCNTRS), or
 * -1 with errno set: EINVAL, EPERM, EBUSY as documented; ENOTSUP for the
 * sprofil-style profiling commands, which hwperfd does not emulate.
 *
 * Differences from IRIX that a caller can see:
 *  - The control node is mode 0644 root: anyone may open it (read-only,
 *    as here) and read the system counters; the commands that change them
 *    (ENSYSCNTRS, SET_SYSEVCTRL, RELSYSCNTRS) answer EPERM unless the
 *    caller is root, as on IRIX.  EACCES at open (a node made private) is
 *    reported as EPERM.  Every other failure to open is reported as is:
 *    ENOENT means hwperfd is not mounted there, ENOTCONN that its daemon
 *    died.
 *  - Requests other than SGI_EVENTCTR, and unknown SGI_EVENTCTR commands,
 *    fail with EINVAL, as IRIX's syssgi did for requests it did not know.
 *  - HWPERF_GET_SYSEVCTRL copies exactly sizeof(hwperf_eventctrl_t) (64
 *    bytes) to the caller: SGI's own tools pass the address of a larger
 *    struct (an hwperf_profevctrarg_t) whose first member it is.
 *  - Bad addresses give EFAULT, as the kernel's copy would.
 *
 * The node is opened for each call (O_CLOEXEC) and closed before return, so
 * a restarted daemon is picked up and no descriptor leaks into children.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L	/* snprintf, O_CLOEXEC even under -std=c89 */
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <sys/syssgi.h>

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif

#define HWPERFD_DEFAULT_MOUNT "/run/hwperfd"

/* Open <mount>/control; -1 with errno on failure (EACCES mapped to EPERM). */
static int
open_control(void)
{
	const char *mount = getenv("HWPERFD_MOUNT");
	char path[4096];
	int fd, n;

	if (mount == NULL || *mount == '\0')
		mount = HWPERFD_DEFAULT_MOUNT;
	n = snprintf(path, sizeof path, "%s/control", mount);
	if (n < 0 || (size_t)n >= sizeof path) {
		errno = ENAMETOOLONG;
		return -1;
	}
	do {
		fd = open(path, O_RDONLY | O_CLOEXEC);
	} while (fd < 0 && errno == EINTR);
	if (fd < 0 && errno == EACCES)
		errno = EPERM;		/* IRIX: not root */
	return fd;
}

/* One ioctl on the control node; keeps the ioctl's errno across close(). */
static int
control_ioctl(unsigned long cmd, void *arg)
{
	int fd, result, saved;

	fd = open_control();
	if (fd < 0)
		return -1;
	do {
		result = ioctl(fd, cmd, arg);
	} while (result < 0 && errno == EINTR);
	saved = errno;
	close(fd);
	errno = saved;
	return result;
}

static int
get_cpu_counters(int cpuid, hwperf_cntr_t *out)
{
	hwperf_cpucntrs_arg_t arg;
	int result;

	if (out == NULL) {
		errno = EFAULT;
		return -1;
	}
	memset(&arg, 0, sizeof arg);
	arg.cpuid = cpuid;
	result = control_ioctl(HWIOC_GET_CPUCNTRS, &arg);
	/* 0: an invalid cpuid; the caller's buffer is left alone. */
	if (result > 0)
		memcpy(out, &arg.cntr, sizeof *out);
	return result;
}

static int
get_system_control(void *out)
{
	hwperf_eventctrl_t ctl;
	int result;

	if (out == NULL) {
		errno = EFAULT;
		return -1;
	}
	result = control_ioctl(HWIOC_GET_SYSEVCTRL, &ctl);
	if (result >= 0)
		memcpy(out, &ctl, sizeof ctl);	/* 64 bytes, whatever the caller's type */
	return result;
}

static int
eventctr(int cmd, va_list ap)
{
	switch (cmd) {
	case HWPERF_PROFENABLE:
		/* profp and profcnt follow; hwperfd refuses with ENOTSUP anyway. */
		return control_ioctl(HWIOC_PROFENABLE, va_arg(ap, hwperf_profevctrarg_t *));
	case HWPERF_ENSYSCNTRS:
		return control_ioctl(HWIOC_ENSYSCNTRS, va_arg(ap, hwperf_profevctrarg_t *));
	case HWPERF_SET_SYSEVCTRL:
		return control_ioctl(HWIOC_SET_SYSEVCTRL, va_arg(ap, hwperf_profevctrarg_t *));
	case HWPERF_GET_SYSCNTRS:
		return control_ioctl(HWIOC_GET_SYSCNTRS, va_arg(ap, hwperf_cntr_t *));
	case HWPERF_GET_CPUCNTRS: {
		int cpuid = va_arg(ap, int);
		return get_cpu_counters(cpuid, va_arg(ap, hwperf_cntr_t *));
	}
	case HWPERF_GET_SYSEVCTRL:
		return get_system_control(va_arg(ap, void *));
	case HWPERF_RELSYSCNTRS:
		return control_ioctl(HWIOC_RELSYSCNTRS, NULL);
	case HWPERF_PROF_CTR_SUSP:
		return control_ioctl(HWIOC_PROF_CTR_SUSP, NULL);
	case HWPERF_PROF_CTR_CONT:
		return control_ioctl(HWIOC_PROF_CTR_CONT, NULL);
	default:
		errno = EINVAL;
		return -1;
	}
}

int
syssgi(int request, ...)
{
	va_list ap;
	int result;

	if (request != SGI_EVENTCTR) {
		errno = EINVAL;		/* the only syssgi request hwperfd serves */
		return -1;
	}
	va_start(ap, request);
	result = eventctr(va_arg(ap, int), ap);
	va_end(ap);
	return result;
}
