/* Four threads of one process, each sampling its own cycles with its own
 * period, as a sampling profiler does per thread: perfctr, an i-mode counter
 * resumed by vperfctr_iresume in the handler; cpc, a CPC_OVF_NOTIFY_EMT
 * request re-preset and restarted by cpc_set_restart.  Each thread burns
 * CPU_MS of its own CPU time, stops and reads its sum.
 *
 *   four_threads perfctr|cpc CPU_MS PERIOD0 PERIOD1 PERIOD2 PERIOD3
 *
 * Prints one line a thread, "thread=I period=P signals=N sum=S foreign=F",
 * where F counts signals whose mask or counter named no overflow of this
 * thread's own, then "stray=M": signals taken by the main thread, which
 * counts nothing. */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <libcpc.h>
#include "libperfctr.h"

#define NTHREADS 4

struct worker {
    pthread_t thread;
    int index;
    long long period;
    long signals, foreign;
    unsigned long long sum;
    struct vperfctr *vperfctr;
    cpc_set_t *set;
    cpc_buf_t *buf;
    int request;
};

static struct worker workers[NTHREADS];
static __thread struct worker *self;
static volatile long stray;
static long long cpu_ms;
static int use_cpc;
static cpc_t *cpc;

static long long cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void on_signal(int sig, siginfo_t *si, void *uc)
{
    (void)sig; (void)uc;
    if (!self) {
	++stray;
	return;
    }
    if (use_cpc) {
	uint64_t value;

	if (si->si_code != EMT_CPCOVF)
	    return;
	/* the preset wraps to 0 at the overflow: past it, the value is small */
	cpc_set_sample(cpc, self->set, self->buf);
	cpc_buf_get(cpc, self->buf, self->request, &value);
	if (value >= (uint64_t)self->period)
	    ++self->foreign;
	++self->signals;
	cpc_set_restart(cpc, self->set);
    } else {
	if (si->si_code != SI_PMC_OVF)
	    return;
	if (si->si_pmc_ovf_mask != 1)
	    ++self->foreign;
	++self->signals;
	if (vperfctr_iresume(self->vperfctr) < 0) {
	    perror("vperfctr_iresume");
	    abort();
	}
    }
}

static void burn(long long until)
{
    volatile unsigned long spin = 0;

    while (cpu_ns() < until)
	for (int i = 0; i < 1000; ++i)
	    ++spin;
}

static void *work(void *arg)
{
    struct worker *w = arg;
    long long begin;

    if (use_cpc) {
	uint64_t value;

	if ((w->set = cpc_set_create(cpc)) == NULL
	    || (w->request = cpc_set_add_request(cpc, w->set, "PAPI_tot_cyc", UINT64_MAX - w->period + 1,
						 CPC_COUNT_USER | CPC_COUNT_SYSTEM | CPC_OVF_NOTIFY_EMT,
						 0, NULL)) < 0
	    || (w->buf = cpc_buf_create(cpc, w->set)) == NULL) {
	    perror("cpc");
	    exit(1);
	}
	begin = cpu_ns();
	self = w;
	if (cpc_bind_curlwp(cpc, w->set, 0) < 0) {
	    perror("cpc_bind_curlwp");
	    exit(1);
	}
	burn(begin + cpu_ms * 1000000LL);
	cpc_set_sample(cpc, w->set, w->buf);
	cpc_buf_get(cpc, w->buf, w->request, &value);
	cpc_unbind(cpc, w->set);
	w->sum = w->signals * w->period + (value - (UINT64_MAX - w->period + 1));
    } else {
	struct vperfctr_control control;
	struct perfctr_info info;
	struct perfctr_sum_ctrs sum;

	if ((w->vperfctr = vperfctr_open()) == NULL || vperfctr_info(w->vperfctr, &info) < 0) {
	    perror("vperfctr_open");
	    exit(1);
	}
	memset(&control, 0, sizeof control);
	control.si_signo = SIGIO;
	control.cpu_control.tsc_on = 1;
	control.cpu_control.nrictrs = 1;
	control.cpu_control.evntsel[0] = (info.cpu_type == PERFCTR_X86_AMD_K8 ? 0x76 : 0x3C)
	    | (1 << 16) | (1 << 17) | (1 << 20) | (1 << 22);	/* cycles, USR, OS, INT, EN */
	control.cpu_control.ireset[0] = (int)-w->period;
	begin = cpu_ns();
	self = w;
	if (vperfctr_control(w->vperfctr, &control) < 0) {
	    perror("vperfctr_control");
	    exit(1);
	}
	burn(begin + cpu_ms * 1000000LL);
	if (vperfctr_stop(w->vperfctr) < 0)
	    perror("vperfctr_stop");
	vperfctr_read_ctrs(w->vperfctr, &sum);
	w->sum = sum.pmc[0];
	vperfctr_close(w->vperfctr);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    struct sigaction sa;

    if (argc != 3 + NTHREADS)
	return 2;
    use_cpc = strcmp(argv[1], "cpc") == 0;
    cpu_ms = atoll(argv[2]);
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO;
    sigaction(use_cpc ? SIGEMT : SIGIO, &sa, NULL);
    if (use_cpc && (cpc = cpc_open(CPC_VER_CURRENT)) == NULL) {
	perror("cpc_open");
	return 1;
    }
    for (int i = 0; i < NTHREADS; ++i) {
	workers[i].index = i;
	workers[i].period = atoll(argv[3 + i]);
	if (pthread_create(&workers[i].thread, NULL, work, &workers[i]) != 0)
	    return 1;
    }
    for (int i = 0; i < NTHREADS; ++i)
	pthread_join(workers[i].thread, NULL);
    for (int i = 0; i < NTHREADS; ++i)
	printf("thread=%d period=%lld signals=%ld sum=%llu foreign=%ld\n", i, workers[i].period,
	       workers[i].signals, workers[i].sum, workers[i].foreign);
    printf("stray=%ld\n", (long)stray);
    return 0;
}
