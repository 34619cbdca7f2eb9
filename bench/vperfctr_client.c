/*
 * Time a perfctr program's reads of its own counters: vperfctr_read_ctrs
 * from the thread's state page (what perfctr's mmap()ed vperfctr gave it),
 * beside the same read through the daemon (VPERFCTR_READ_STATE, a FUSE
 * round trip).
 *
 *     vperfctr_client [-n CALLS] [-w WARMUP]      (HWPERFD_MOUNT names the mount)
 *     vperfctr_client -r REGISTRATIONS [-w WARMUP]
 *     vperfctr_client -p REGIONS [-s]
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
 * With -p, two threads register and unregister once in each of REGIONS
 * parallel regions, as PAPI's omptough does, and meet at a barrier after
 * each: one that sleeps (OMP_WAIT_POLICY=passive), or with -s one that spins
 * as libgomp's team does by default.  Each thread keeps its own place on the
 * CPUs the scheduler gives it.
 *
 *     RESULT region_ns=..   (wall time per region)
 *
 * Exit status 0 only if every read succeeded and every page read served.
 */
#include <errno.h>
#include <pthread.h>
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

/* The regions' barrier: pthread's sleeps, the spinning one busy-waits on a
   generation count. */
static pthread_barrier_t sleeping;
static int spin, arrived, generation;
static long regions_left;

static void meet(void)
{
    if (!spin) {
	pthread_barrier_wait(&sleeping);
	return;
    }
    int gen = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&arrived, 1, __ATOMIC_ACQ_REL) == 2) {
	__atomic_store_n(&arrived, 0, __ATOMIC_RELAXED);
	__atomic_add_fetch(&generation, 1, __ATOMIC_RELEASE);
	return;
    }
    while (__atomic_load_n(&generation, __ATOMIC_ACQUIRE) == gen)
	;
}

static void *region_thread(void *arg)
{
    long i, *failed = arg;

    for (i = 0; i < regions_left; i++) {
	if (registration() < 0)
	    *failed = errno;
	meet();
    }
    return NULL;
}

static int regions(long n)
{
    pthread_t other;
    long failed[2] = {0, 0};
    unsigned long long t;

    regions_left = n;
    pthread_barrier_init(&sleeping, NULL, 2);
    t = now_ns();
    if (pthread_create(&other, NULL, region_thread, &failed[1]) != 0)
	return 1;
    region_thread(&failed[0]);
    pthread_join(other, NULL);
    t = now_ns() - t;
    if (failed[0] || failed[1]) {
	fprintf(stderr, "registration: %s\n", strerror((int)(failed[0] ? failed[0] : failed[1])));
	return 1;
    }
    printf("RESULT region_ns=%llu\n", t / (unsigned long long)n);
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

    long regs = 0, nregions = 0;

    while ((opt = getopt(argc, argv, "n:w:r:p:s")) != -1) {
	if (opt == 'n')
	    calls = atol(optarg);
	else if (opt == 'w')
	    warmup = atol(optarg);
	else if (opt == 'r')
	    regs = atol(optarg);
	else if (opt == 'p')
	    nregions = atol(optarg);
	else if (opt == 's')
	    spin = 1;
	else
	    return 2;
    }
    if (calls < 1 || warmup < 0 || regs < 0 || nregions < 0)
	return 2;
    if (nregions > 0)
	return regions(nregions);
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
