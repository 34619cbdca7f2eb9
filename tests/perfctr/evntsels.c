/* What a PAPI preset reads, with perfctr's own calls: one a-mode counter per
   event select given (hex: unit mask and event code; the program adds USR
   and EN), counters 0.. in order, started together, read after the work.
   PAPI's ctests compare presets built from such selects with each other
   (branches: PAPI_BR_NTK, PAPI_BR_INS, PAPI_BR_MSP ...).
   Usage: evntsels SELECT...; prints "ready pid=N", waits for a line on
   stdin (the work happens meanwhile), prints "counts pmc0=.. pmc1=..". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "libperfctr.h"

int main(int argc, char **argv)
{
    struct vperfctr *self;
    struct vperfctr_control control;
    struct perfctr_sum_ctrs sum;
    char line[64];
    int i, n = argc - 1;

    if (n < 1 || n > 4) {
	fprintf(stderr, "usage: evntsels SELECT... (1 to 4)\n");
	return 2;
    }
    self = vperfctr_open();
    if (!self) {
	perror("vperfctr_open");
	return 1;
    }
    memset(&control, 0, sizeof control);
    control.cpu_control.tsc_on = 1;
    control.cpu_control.nractrs = (unsigned int)n;
    for (i = 0; i < n; i++) {
	control.cpu_control.pmc_map[i] = (unsigned int)i;
	control.cpu_control.evntsel[i] = (unsigned int)strtoul(argv[i + 1], NULL, 16) | (1 << 16) | (1 << 22);
    }
    if (vperfctr_control(self, &control) < 0) {
	perror("vperfctr_control");
	return 1;
    }
    printf("ready pid=%d\n", (int)getpid());
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
	return 1;
    if (vperfctr_read_ctrs(self, &sum) < 0) {
	perror("vperfctr_read_ctrs");
	return 1;
    }
    printf("counts");
    for (i = 0; i < n; i++)
	printf(" pmc%d=%llu", i, sum.pmc[i]);
    printf("\n");
    vperfctr_unlink(self);
    vperfctr_close(self);
    return 0;
}
