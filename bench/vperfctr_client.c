/*
 * Time a perfctr program's reads of its own counters: vperfctr_read_ctrs
 * from the thread's state page (what perfctr's mmap()ed vperfctr gave it),
 * beside the same read through the daemon (VPERFCTR_READ_STATE, a FUSE
 * round trip).
 *
 *     vperfctr_client [-n CALLS] [-w WARMUP]      (HWPERFD_MOUNT names the mount)
 *     vperfctr_client -r REGISTRATIONS [-w WARMUP]
 *
 * Opens a vperfctr on itself (the TSC and two a-mode counters of a Core 2
 * or K8), then per kind WARMUP untimed and CALLS timed reads, each timed
 * with clock_gettime(CLOCK_MONOTONIC).  Output: one machine-readable line
 *
 *     RESULT page_ns=.. page_p99_ns=.. ioctl_ns=.. ioctl_p99_ns=..
 *
 * With -r, times instead what PAPI does for each thread it registers and
 * unregisters: vperfctr_open, a TSC-only vperfctr_control, vperfctr_unlink,
 * vperfctr_close, REGISTRATIONS times after WARMUP untimed ones:
 *
 *     RESULT reg_ns=.. reg_p99_ns=..
 *
 * Exit status 0 only if every read succeeded and every page read served.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "libperfctr.h"

static int cmp_u64(const void *a, const void *b)
{
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

static unsigned long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* One thread's registration and unregistration as PAPI's perfctr component
   makes them (_perfctr_init_thread, _perfctr_shutdown_thread). */
static int registration(void)
{
    struct vperfctr *perfctr = vperfctr_open();
    struct vperfctr_control control;

    if (perfctr == NULL)
	return -1;
    memset(&control, 0, sizeof control);
    control.cpu_control.tsc_on = 1;
    if (vperfctr_control(perfctr, &control) < 0 || vperfctr_unlink(perfctr) < 0) {
	vperfctr_close(perfctr);
	return -1;
    }
    vperfctr_close(perfctr);
    return 0;
}

static int registrations(long n, long warmup)
{
    unsigned long long *times = malloc(n * sizeof *times), t;
    long i;

    if (times == NULL)
	return 1;
    for (i = 0; i < warmup + n; i++) {
	t = now_ns();
	if (registration() < 0) {
	    perror("registration");
	    return 1;
	}
	if (i >= warmup)
	    times[i - warmup] = now_ns() - t;
    }
    qsort(times, n, sizeof *times, cmp_u64);
    printf("RESULT reg_ns=%llu reg_p99_ns=%llu\n", times[n / 2], times[n * 99 / 100]);
    return 0;
}

int main(int argc, char **argv)
{
    long calls = 10000, warmup = 1000, i;
    int opt, fd;
    struct vperfctr *self;
    struct vperfctr_control control;
    struct perfctr_info info;
    struct perfctr_sum_ctrs sum;
    struct hwperfd_vperfctr_state state;
    unsigned long long *page, *direct, t;

    long regs = 0;

    while ((opt = getopt(argc, argv, "n:w:r:")) != -1) {
	if (opt == 'n')
	    calls = atol(optarg);
	else if (opt == 'w')
	    warmup = atol(optarg);
	else if (opt == 'r')
	    regs = atol(optarg);
	else
	    return 2;
    }
    if (calls < 1 || warmup < 0 || regs < 0)
	return 2;
    if (regs > 0)
	return registrations(regs, warmup);
    self = vperfctr_open();
    fd = _vperfctr_open(0);	/* the same vperfctr, for reads through the daemon */
    if (self == NULL || fd < 0 || vperfctr_info(self, &info) < 0) {
	perror("vperfctr_open");
	return 1;
    }
    memset(&control, 0, sizeof control);
    control.cpu_control.tsc_on = 1;
    control.cpu_control.nractrs = 2;
    control.cpu_control.pmc_map[0] = 0;
    control.cpu_control.evntsel[0] = 0xC0 | (1 << 16) | (1 << 22);	/* instructions, USR */
    control.cpu_control.pmc_map[1] = 1;
    control.cpu_control.evntsel[1] = (info.cpu_type == PERFCTR_X86_AMD_K8 ? 0x76 : 0x3C) | (1 << 16) | (1 << 22);
    if (vperfctr_control(self, &control) < 0) {
	perror("vperfctr_control");
	return 1;
    }
    page = malloc(calls * sizeof *page);
    direct = malloc(calls * sizeof *direct);
    if (page == NULL || direct == NULL)
	return 1;
    for (i = 0; i < warmup + calls; i++) {
	t = now_ns();
	if (vperfctr_read_ctrs(self, &sum) < 0) {
	    perror("vperfctr_read_ctrs");
	    return 1;
	}
	if (i >= warmup)
	    page[i - warmup] = now_ns() - t;
    }
    if (hwperfd_vperfctr_read_page(self, &sum) < 0) {
	fprintf(stderr, "the state page did not serve: %s\n", strerror(errno));
	return 1;
    }
    for (i = 0; i < warmup + calls; i++) {
	t = now_ns();
	if (ioctl(fd, VPERFCTR_READ_STATE, &state) < 0) {
	    perror("VPERFCTR_READ_STATE");
	    return 1;
	}
	if (i >= warmup)
	    direct[i - warmup] = now_ns() - t;
    }
    qsort(page, calls, sizeof *page, cmp_u64);
    qsort(direct, calls, sizeof *direct, cmp_u64);
    printf("RESULT page_ns=%llu page_p99_ns=%llu ioctl_ns=%llu ioctl_p99_ns=%llu\n", page[calls / 2],
	   page[calls * 99 / 100], direct[calls / 2], direct[calls * 99 / 100]);
    printf("vperfctr_read_ctrs from the page: median %llu ns; through the daemon: median %.1f us\n", page[calls / 2],
	   direct[calls / 2] / 1000.0);
    vperfctr_unlink(self);
    vperfctr_close(self);
    close(fd);
    return 0;
}
