/* Overflow right after exec, as PAPI's fork_overflow and child_overflow
   count it: the new image opens its perfctr with VPERFCTR_CONTROL_CLOEXEC
   (PAPI's perfctr component always sets it), takes cycle overflows with a
   SIGIO handler that calls vperfctr_iresume, and counts the overflows of
   each slice of its CPU time; PAPI fails a slice with fewer than a tenth of
   the one before.

   exec_overflow STORM PERIOD SLICES SLICE_MS: first fork STORM children
   that exit at once (their fork and exit reports queue ahead of the exec's
   at the daemon), then exec itself to count.  Prints "slices a b c ..." and
   "iresume_failed N errno E". */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "libperfctr.h"

static struct vperfctr *vperfctr;
static volatile sig_atomic_t overflows, failed, failed_errno;

static void on_sigio(int sig, siginfo_t *si, void *puc)
{
    (void)sig; (void)puc;
    if (si->si_code != SI_PMC_OVF)
	return;
    ++overflows;
    if (vperfctr_iresume(vperfctr) < 0) {
	++failed;
	failed_errno = errno;
    }
}

static long long cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int count(int period, int slices, int slice_ms)
{
    struct perfctr_info info;
    struct vperfctr_control control;
    struct sigaction sa;
    int i;

    vperfctr = vperfctr_open();
    if (!vperfctr || vperfctr_info(vperfctr, &info) < 0) {
	perror("vperfctr_open");
	return 1;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigio;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGIO, &sa, NULL);
    memset(&control, 0, sizeof control);
    control.si_signo = SIGIO;
    control.flags = VPERFCTR_CONTROL_CLOEXEC;
    control.cpu_control.tsc_on = 1;
    control.cpu_control.nrictrs = 1;
    control.cpu_control.pmc_map[0] = 0;
    control.cpu_control.evntsel[0] = (info.cpu_type == PERFCTR_X86_AMD_K8 ? 0x76 : 0x3C)
	| (1 << 16) | (1 << 22) | (1 << 20);				/* cycles, USR, EN, INT */
    control.cpu_control.ireset[0] = -period;
    if (vperfctr_control(vperfctr, &control) < 0) {
	perror("vperfctr_control");
	return 1;
    }
    printf("slices");
    for (i = 0; i < slices; i++) {
	long long end = cpu_ns() + slice_ms * 1000000LL;
	int before = overflows;
	volatile unsigned long spin = 0;

	while (cpu_ns() < end)
	    ++spin;
	printf(" %d", overflows - before);
    }
    printf("\niresume_failed %d errno %d\n", (int)failed, (int)failed_errno);
    if (vperfctr_stop(vperfctr) < 0)
	printf("stop_failed errno %d\n", errno);
    vperfctr_close(vperfctr);
    return 0;
}

int main(int argc, char **argv)
{
    int storm, i;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 6 && strcmp(argv[1], "count") == 0)
	return count(atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
    if (argc != 5) {
	fprintf(stderr, "usage: exec_overflow STORM PERIOD SLICES SLICE_MS\n");
	return 2;
    }
    storm = atoi(argv[1]);
    for (i = 0; i < storm; i++) {
	pid_t pid = fork();

	if (pid == 0)
	    _exit(0);
	if (pid < 0)
	    break;
    }
    while (wait(NULL) > 0)
	;
    execl("/proc/self/exe", argv[0], "count", argv[1], argv[2], argv[3], argv[4], (char *)NULL);
    perror("exec");
    return 1;
}
