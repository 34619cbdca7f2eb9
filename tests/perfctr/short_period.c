/* A period shorter than a round trip to the daemon: two i-mode counters
 * preset 25 events from overflow around a short loop, then vperfctr_stop.
 * The handler resumes only while the vperfctr runs; after the stop SIGIO
 * goes back to its default action, so a signal that came after the stop
 * would kill the program.  With "burn MS", the loop is MS of CPU time and
 * the counters count cycles (user and kernel) with ireset -PERIOD instead.
 * Prints "running=N unexpected=M sum0=S0 sum1=S1 masks=..." at the end. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "libperfctr.h"

static struct vperfctr *vperfctr;
static volatile int running, unexpected, per_counter[2];

static void on_sigio(int sig, siginfo_t *si, void *uc)
{
    (void)sig; (void)uc;
    if (si->si_code != SI_PMC_OVF)
	return;
    if (!vperfctr_is_running(vperfctr)) {
	++unexpected;
	return;
    }
    ++running;
    for (int i = 0; i < 2; ++i)
	if (si->si_pmc_ovf_mask & (1 << i))
	    ++per_counter[i];
    if (vperfctr_iresume(vperfctr) < 0) {
	perror("vperfctr_iresume");
	abort();
    }
}

static long long cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    struct vperfctr_control control;
    struct perfctr_info info;
    struct perfctr_sum_ctrs sum;
    struct sigaction sa;
    static double v[150], w[150];
    volatile double dot = 0.0;
    long long burn_ms = argc > 2 && strcmp(argv[1], "burn") == 0 ? atoll(argv[2]) : 0;
    int period[2] = {25, 25};

    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigio;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGIO, &sa, NULL);
    if ((vperfctr = vperfctr_open()) == NULL || vperfctr_info(vperfctr, &info) < 0) {
	perror("vperfctr_open");
	return 1;
    }
    memset(&control, 0, sizeof control);
    control.si_signo = SIGIO;
    control.cpu_control.tsc_on = 1;
    control.cpu_control.nrictrs = 2;
    control.cpu_control.pmc_map[0] = 0;
    control.cpu_control.pmc_map[1] = 1;
    if (burn_ms) {
	period[0] = atoi(argv[3]);
	period[1] = atoi(argv[4]);
	control.cpu_control.evntsel[0] = control.cpu_control.evntsel[1] = 0x3C | (3 << 16) | (1 << 20) | (1 << 22);
    } else {
	control.cpu_control.evntsel[0] = 0xC0 | (1 << 16) | (1 << 20) | (1 << 22);	/* instructions, USR */
	control.cpu_control.evntsel[1] = 0x3C | (1 << 16) | (1 << 20) | (1 << 22);	/* cycles, USR */
    }
    control.cpu_control.ireset[0] = -period[0];
    control.cpu_control.ireset[1] = -period[1];
    if (vperfctr_control(vperfctr, &control) < 0) {
	perror("vperfctr_control");
	return 1;
    }
    if (burn_ms) {
	long long until = cpu_ns() + burn_ms * 1000000LL;
	while (cpu_ns() < until)
	    for (int i = 0; i < 150; ++i)
		dot += v[i] * w[i];
    } else {
	for (int i = 0; i < 150; ++i)
	    dot += v[i] * w[i];
    }
    if (vperfctr_stop(vperfctr) < 0)
	perror("vperfctr_stop");
    sa.sa_handler = SIG_DFL;
    sa.sa_flags = 0;
    sigaction(SIGIO, &sa, NULL);
    vperfctr_read_ctrs(vperfctr, &sum);
    printf("running=%d unexpected=%d sum0=%llu sum1=%llu ovf0=%d ovf1=%d\n", running, unexpected,
	   sum.pmc[0], sum.pmc[1], per_counter[0], per_counter[1]);
    vperfctr_close(vperfctr);
    return 0;
}
