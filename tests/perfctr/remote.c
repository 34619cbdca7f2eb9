/* Controlling another process's counters with rvperfctr, the way a
   debugger-like monitor does it: the target is stopped under ptrace. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>
#include "libperfctr.h"

int main(void)
{
    struct rvperfctr *rv;
    struct vperfctr_control control;
    struct perfctr_sum_ctrs sum;
    struct perfctr_info info;
    char line[16];
    int status;
    pid_t child;

    if (rvperfctr_open(1) != NULL || errno != ESRCH)
	printf("rvperfctr_open of an untraced process: not ESRCH\n");
    child = fork();
    if (child == 0) {
	ptrace(PTRACE_TRACEME, 0, NULL, NULL);
	raise(SIGSTOP);
	_exit(0);
    }
    if (waitpid(child, &status, WUNTRACED) < 0 || !WIFSTOPPED(status)) {
	perror("waitpid");
	return 1;
    }
    rv = rvperfctr_open(child);
    if (!rv) {
	perror("rvperfctr_open");
	return 1;
    }
    if (rvperfctr_info(rv, &info) < 0) {
	perror("rvperfctr_info");
	return 1;
    }
    memset(&control, 0, sizeof control);
    control.cpu_control.tsc_on = 1;
    control.cpu_control.nractrs = 1;
    control.cpu_control.pmc_map[0] = 0;
    control.cpu_control.evntsel[0] = (info.cpu_type == PERFCTR_X86_AMD_K8 ? 0x76 : 0x3C)
	| (1 << 16) | (1 << 17) | (1 << 22);
    if (rvperfctr_control(rv, &control) < 0) {
	perror("rvperfctr_control");
	return 1;
    }
    printf("attached pid=%d\n", (int)rvperfctr_pid(rv));
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
	return 1;
    if (rvperfctr_read_ctrs(rv, &sum) < 0) {
	perror("rvperfctr_read_ctrs");
	return 1;
    }
    printf("remote tsc=%llu pmc0=%llu\n", sum.tsc, sum.pmc[0]);
    if (rvperfctr_stop(rv) < 0 || rvperfctr_unlink(rv) < 0)
	perror("rvperfctr_stop");
    rvperfctr_close(rv);
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    return 0;
}
