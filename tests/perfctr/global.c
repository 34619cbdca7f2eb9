/* Global-mode sampling, the way perfctr's examples/global does it: program
   every CPU, start, and print each CPU's counts at every sample. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "libperfctr.h"

int main(void)
{
    struct gperfctr *gperfctr;
    struct perfctr_info info;
    struct perfctr_cpus_info *cpus_info;
    struct gperfctr_cpu_control cpu_control;
    struct gperfctr_cpu_state state;
    unsigned int cpu, nrcpus;
    char line[64];
    int active;

    gperfctr = gperfctr_open();
    if (!gperfctr) {
	perror("gperfctr_open");
	return 1;
    }
    if (gperfctr_info(gperfctr, &info) < 0) {
	perror("gperfctr_info");
	return 1;
    }
    perfctr_info_print(&info);
    cpus_info = gperfctr_cpus_info(gperfctr);
    if (!cpus_info)
	return 1;
    perfctr_cpus_info_print(cpus_info);
    nrcpus = 0;
    for (cpu = 0; cpu < 32 * cpus_info->cpus->nrwords; ++cpu)
	if (cpus_info->cpus->mask[cpu / 32] & (1u << (cpu % 32)))
	    nrcpus = cpu + 1;
    free(cpus_info);
    for (cpu = 0; cpu < nrcpus; ++cpu) {
	memset(&cpu_control, 0, sizeof cpu_control);
	cpu_control.cpu = cpu;
	cpu_control.cpu_control.tsc_on = 1;
	cpu_control.cpu_control.nractrs = 1;
	cpu_control.cpu_control.pmc_map[0] = 0;
	cpu_control.cpu_control.evntsel[0] = (info.cpu_type == PERFCTR_X86_AMD_K8 ? 0x76 : 0x3C)
	    | (1 << 16) | (1 << 17) | (1 << 22);
	if (gperfctr_control(gperfctr, &cpu_control) < 0) {
	    perror("gperfctr_control");
	    return 1;
	}
    }
    active = gperfctr_start(gperfctr, 0);
    if (active < 0) {
	perror("gperfctr_start");
	return 1;
    }
    printf("started %d\n", active);
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
	for (cpu = 0; cpu < nrcpus; ++cpu) {
	    memset(&state, 0, sizeof state);
	    state.cpu = cpu;
	    if (gperfctr_read(gperfctr, &state) < 0) {
		perror("gperfctr_read");
		return 1;
	    }
	    printf("cpu=%u tsc=%llu pmc0=%llu\n", cpu, state.sum.tsc, state.sum.pmc[0]);
	}
	fflush(stdout);
    }
    gperfctr_stop(gperfctr);
    gperfctr_close(gperfctr);
    return 0;
}
