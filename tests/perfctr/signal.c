/* Overflow signals with perfctr, written the way perfctr's examples/signal
   does it: a SIGIO handler (SA_SIGINFO) that checks si_code SI_PMC_OVF and
   the overflown-counter mask, then continues with vperfctr_iresume().  With
   SA_FLAGS=nodefer in the environment the handler is installed with
   SA_NODEFER; either way it checks that SIGIO is blocked in it exactly when
   the action says so, as the kernel's delivery does. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "libperfctr.h"

static struct vperfctr *vperfctr;
static struct perfctr_info info;
static volatile sig_atomic_t overflows;
static volatile unsigned int last_mask;
static int nodefer;

static void on_sigio(int sig, siginfo_t *si, void *puc)
{
    sigset_t now;

    (void)puc;
    if (sigprocmask(SIG_BLOCK, NULL, &now) == 0 && sigismember(&now, SIGIO) == nodefer)
	printf("%s: unexpected mask: SIGIO %sblocked\n", __func__, nodefer ? "" : "not ");
    if (sig != SIGIO) {
	printf("%s: unexpected signal %d\n", __func__, sig);
	return;
    }
    if (si->si_code != SI_PMC_OVF) {
	printf("%s: unexpected si_code #%x\n", __func__, si->si_code);
	return;
    }
    if ((last_mask = si->si_pmc_ovf_mask) == 0) {
	printf("%s: overflow PMCs not identified\n", __func__);
	return;
    }
    if (!vperfctr_is_running(vperfctr)) {
	printf("%s: unexpected overflow from PMC set %#x\n", __func__, last_mask);
	return;
    }
    ++overflows;
    if (vperfctr_iresume(vperfctr) < 0) {
	perror("vperfctr_iresume");
	abort();
    }
}

static void do_sigaction(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigio;
    nodefer = getenv("SA_FLAGS") != NULL && strcmp(getenv("SA_FLAGS"), "nodefer") == 0;
    sa.sa_flags = SA_SIGINFO | (nodefer ? SA_NODEFER : 0);
    if (sigaction(SIGIO, &sa, NULL) < 0) {
	perror("sigaction");
	exit(1);
    }
}

static void do_control(int period)
{
    struct vperfctr_control control;

    memset(&control, 0, sizeof control);
    control.si_signo = SIGIO;
    control.cpu_control.tsc_on = 1;
    control.cpu_control.nractrs = 1;
    control.cpu_control.nrictrs = 1;
    control.cpu_control.pmc_map[0] = 1;
    control.cpu_control.evntsel[0] = 0xC0 | (1 << 16) | (1 << 22);		/* instructions, USR, EN */
    control.cpu_control.pmc_map[1] = 0;
    control.cpu_control.evntsel[1] = (info.cpu_type == PERFCTR_X86_AMD_K8 ? 0x76 : 0x3C)
	| (1 << 16) | (1 << 22) | (1 << 20);				/* cycles, USR, EN, INT */
    control.cpu_control.ireset[1] = -period;
    printf("Control used:\n");
    perfctr_cpu_control_print(&control.cpu_control);
    if (vperfctr_control(vperfctr, &control) < 0) {
	perror("vperfctr_control");
	exit(1);
    }
}

int main(int argc, char **argv)
{
    char line[64];
    sigset_t block, old;

    setvbuf(stdout, NULL, _IOLBF, 0);	/* a handler's complaint reaches a test that kills us */
    vperfctr = vperfctr_open();
    if (!vperfctr || vperfctr_info(vperfctr, &info) < 0) {
	perror("vperfctr_open");
	return 1;
    }
    do_sigaction();
    do_control(argc > 1 ? atoi(argv[1]) : 1000000);
    if (vperfctr_iresume(vperfctr) == 0 || errno != EPERM)
	printf("iresume without an overflow: not EPERM\n");
    printf("ready pid=%d\n", (int)getpid());
    fflush(stdout);
    sigemptyset(&block);
    sigaddset(&block, SIGIO);
    for (;;) {
	int want;

	if (!fgets(line, sizeof line, stdin)) {
	    if (ferror(stdin) && errno == EINTR) {
		clearerr(stdin);
		continue;
	    }
	    break;
	}
	if (sscanf(line, "burn %d", &want) == 1) {	/* work until that many overflows */
	    volatile unsigned long spin = 0;
	    while (overflows < want)
		++spin;
	    printf("burnt overflows=%d mask=%#x\n", (int)overflows, last_mask);
	    fflush(stdout);
	    continue;
	}
	if (sscanf(line, "expect %d", &want) == 1) {
	    sigprocmask(SIG_BLOCK, &block, &old);
	    while (overflows < want)
		sigsuspend(&old);
	    sigprocmask(SIG_SETMASK, &old, NULL);
	    {
		struct perfctr_sum_ctrs sum;
		vperfctr_read_ctrs(vperfctr, &sum);
		printf("overflows=%d mask=%#x tsc=%llu pmc0=%llu pmc1=%llu\n", (int)overflows, last_mask,
		       sum.tsc, sum.pmc[0], sum.pmc[1]);
		fflush(stdout);
	    }
	}
    }
    vperfctr_stop(vperfctr);
    vperfctr_close(vperfctr);
    return 0;
}
