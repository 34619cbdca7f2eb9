/* A program monitoring itself with perfctr's virtual counters, written the
   way perfctr's examples/self does it: open, print the driver's info, set
   two a-mode counters and the TSC, work, read, stop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "libperfctr.h"

static struct vperfctr *self;
static struct perfctr_info info;
static struct vperfctr_control control;

static void do_init(void)
{
    struct perfctr_cpus_info *cpus_info;

    self = vperfctr_open();
    if (!self) {
	perror("vperfctr_open");
	exit(1);
    }
    if (vperfctr_info(self, &info) < 0) {
	perror("vperfctr_info");
	exit(1);
    }
    cpus_info = vperfctr_cpus_info(self);
    printf("\nPerfCtr Info:\n");
    perfctr_info_print(&info);
    if (cpus_info) {
	perfctr_cpus_info_print(cpus_info);
	free(cpus_info);
    }
}

static void do_setup(void)
{
    unsigned int evntsel0, evntsel1;

    memset(&control, 0, sizeof control);
    switch (info.cpu_type) {
    case PERFCTR_X86_INTEL_CORE2:
	evntsel0 = 0xC0 | (1 << 16) | (1 << 22);		/* INST_RETIRED, USR, EN */
	evntsel1 = 0x3C | (1 << 16) | (1 << 17) | (1 << 22);	/* CPU_CLK_UNHALTED, USR+OS, EN */
	break;
    case PERFCTR_X86_AMD_K8:
	evntsel0 = 0xC0 | (1 << 16) | (1 << 22);		/* RETIRED_INSTRUCTIONS */
	evntsel1 = 0x76 | (1 << 16) | (1 << 17) | (1 << 22);	/* CYCLES_NOT_HALTED */
	break;
    default:
	fprintf(stderr, "cpu type %u (%s) not supported\n", info.cpu_type, perfctr_info_cpu_name(&info));
	exit(1);
    }
    control.cpu_control.tsc_on = 1;
    control.cpu_control.nractrs = 2;
    control.cpu_control.pmc_map[0] = 0;
    control.cpu_control.evntsel[0] = evntsel0;
    control.cpu_control.pmc_map[1] = 1;
    control.cpu_control.evntsel[1] = evntsel1;
}

int main(void)
{
    struct perfctr_sum_ctrs sum, state_sum;
    struct vperfctr_control readback;
    char line[64];

    do_init();
    do_setup();
    printf("\nControl used:\n");
    perfctr_cpu_control_print(&control.cpu_control);
    if (vperfctr_control(self, &control) < 0) {
	perror("vperfctr_control");
	exit(1);
    }
    printf("ready pid=%d\n", (int)getpid());
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))	/* the work happens meanwhile */
	return 1;
    if (vperfctr_read_ctrs(self, &sum) < 0) {
	perror("vperfctr_read_ctrs");
	exit(1);
    }
    printf("ctrs tsc=%llu pmc0=%llu pmc1=%llu\n", sum.tsc, sum.pmc[0], sum.pmc[1]);
    printf("single tsc=%llu pmc0=%llu pmc1=%llu running=%d\n", vperfctr_read_tsc(self),
	   vperfctr_read_pmc(self, 0), vperfctr_read_pmc(self, 1), vperfctr_is_running(self));
    if (vperfctr_read_state(self, &state_sum, &readback) < 0) {
	perror("vperfctr_read_state");
	exit(1);
    }
    printf("state pmc1=%llu evntsel1=0x%08X nractrs=%u\n", state_sum.pmc[1],
	   readback.cpu_control.evntsel[1], readback.cpu_control.nractrs);
    if (vperfctr_stop(self) < 0)
	perror("vperfctr_stop");
    vperfctr_read_ctrs(self, &sum);
    printf("stopped running=%d pmc1=%llu\n", vperfctr_is_running(self), sum.pmc[1]);
    vperfctr_unlink(self);
    vperfctr_close(self);
    return 0;
}
