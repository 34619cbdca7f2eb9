/* bench/overflow.py's sampler: burns CPU_MS of its own CPU time with one
 * overflow-interrupting cycles counter (user and system mode) of period
 * PERIOD, and restarts it from the signal handler as a sampling profiler
 * does.  perfctr: an i-mode counter, vperfctr_iresume.  cpc: a
 * CPC_OVF_NOTIFY_EMT request, preset and cpc_set_restart.
 *
 *   overflow_client perfctr|cpc PERIOD CPU_MS MHZ
 *
 * Prints "signals=N counted=C cpu_ns=T" and, per signal, how far the counter
 * read in the handler was past the overflow ("past" counts) and how much of
 * the thread's CPU time went between the overflow and the handler ("late"
 * ns: the counter counts every cycle, so the overflow came PERIOD cycles of
 * CPU time after the last restart). */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <libcpc.h>
#include "libperfctr.h"

#define MAX_SIGNALS 200000

static long long period;
static double ns_per_cycle;
static volatile long signals;
static long long past[MAX_SIGNALS], late[MAX_SIGNALS];
static long long restarted_ns;
static struct vperfctr *vperfctr;
static cpc_t *cpc;
static cpc_set_t *set;
static cpc_buf_t *buf;
static int request;

static long long cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void note(long long value_past)
{
    long long now = cpu_ns();

    if (signals < MAX_SIGNALS) {
	past[signals] = value_past;
	late[signals] = now - restarted_ns - (long long)(period * ns_per_cycle);
    }
    ++signals;
}

static void on_sigio(int sig, siginfo_t *si, void *uc)
{
    struct perfctr_sum_ctrs sum;

    (void)sig; (void)uc;
    if (si->si_code != SI_PMC_OVF)
	return;
    vperfctr_read_ctrs(vperfctr, &sum);
    note((long long)sum.pmc[0] - (signals + 1) * period);
    restarted_ns = cpu_ns();
    if (vperfctr_iresume(vperfctr) < 0) {
	perror("vperfctr_iresume");
	abort();
    }
}

static void on_emt(int sig, siginfo_t *si, void *uc)
{
    uint64_t value;

    (void)sig; (void)uc;
    if (si->si_code != EMT_CPCOVF)
	return;
    cpc_set_sample(cpc, set, buf);
    cpc_buf_get(cpc, buf, request, &value);
    note((long long)value);	/* the preset wraps to 0 at the overflow */
    restarted_ns = cpu_ns();
    cpc_set_restart(cpc, set);
}

static void burn(long long until)
{
    volatile unsigned long spin = 0;

    while (cpu_ns() < until)
	for (int i = 0; i < 1000; ++i)
	    ++spin;
}

int main(int argc, char **argv)
{
    struct sigaction sa;
    long long counted = 0, begin;
    int use_cpc;

    if (argc != 5)
	return 2;
    ns_per_cycle = 1000.0 / atof(argv[4]);
    use_cpc = strcmp(argv[1], "cpc") == 0;
    period = atoll(argv[2]);
    memset(&sa, 0, sizeof sa);
    sa.sa_flags = SA_SIGINFO;
    if (use_cpc) {
	uint64_t value;

	sa.sa_sigaction = on_emt;
	sigaction(SIGEMT, &sa, NULL);
	if ((cpc = cpc_open(CPC_VER_CURRENT)) == NULL || (set = cpc_set_create(cpc)) == NULL
	    || (request = cpc_set_add_request(cpc, set, "PAPI_tot_cyc", UINT64_MAX - period + 1,
					      CPC_COUNT_USER | CPC_COUNT_SYSTEM | CPC_OVF_NOTIFY_EMT,
					      0, NULL)) < 0
	    || (buf = cpc_buf_create(cpc, set)) == NULL) {
	    perror("cpc");
	    return 1;
	}
	begin = restarted_ns = cpu_ns();
	if (cpc_bind_curlwp(cpc, set, 0) < 0) {
	    perror("cpc_bind_curlwp");
	    return 1;
	}
	burn(begin + atoll(argv[3]) * 1000000LL);
	cpc_set_sample(cpc, set, buf);
	cpc_buf_get(cpc, buf, request, &value);
	counted = signals * period + (long long)(value - (UINT64_MAX - period + 1));
	cpc_unbind(cpc, set);
    } else {
	struct vperfctr_control control;
	struct perfctr_info info;
	struct perfctr_sum_ctrs sum;

	sa.sa_sigaction = on_sigio;
	sigaction(SIGIO, &sa, NULL);
	if ((vperfctr = vperfctr_open()) == NULL || vperfctr_info(vperfctr, &info) < 0) {
	    perror("vperfctr_open");
	    return 1;
	}
	memset(&control, 0, sizeof control);
	control.si_signo = SIGIO;
	control.cpu_control.tsc_on = 1;
	control.cpu_control.nrictrs = 1;
	control.cpu_control.evntsel[0] = (info.cpu_type == PERFCTR_X86_AMD_K8 ? 0x76 : 0x3C)
	    | (1 << 16) | (1 << 17) | (1 << 20) | (1 << 22);	/* cycles, USR, OS, INT, EN */
	control.cpu_control.ireset[0] = (int)-period;
	begin = restarted_ns = cpu_ns();
	if (vperfctr_control(vperfctr, &control) < 0) {
	    perror("vperfctr_control");
	    return 1;
	}
	burn(begin + atoll(argv[3]) * 1000000LL);
	vperfctr_stop(vperfctr);
	vperfctr_read_ctrs(vperfctr, &sum);
	counted = (long long)sum.pmc[0];
	vperfctr_close(vperfctr);
    }
    printf("signals=%ld counted=%lld cpu_ns=%lld\n", (long)signals, counted, cpu_ns() - begin);
    for (long i = 0; i < signals && i < MAX_SIGNALS; ++i)
	printf("%lld %lld\n", past[i], late[i]);
    return 0;
}
