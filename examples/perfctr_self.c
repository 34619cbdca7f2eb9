/* Linux perfctr 2.6 (libperfctr(3)): a thread counts its own retired
 * instructions and TSC cycles, read from its state page without a request.
 * Needs a daemon with --cpu-type intel.  Build with
 * `cc $(pkg-config --cflags --libs libperfctr) perfctr_self.c`.
 * README: begin */
#include <libperfctr.h>
#include <stdio.h>

int main(void)
{
    struct vperfctr *self = vperfctr_open();
    struct vperfctr_control control = {0};
    struct perfctr_sum_ctrs sum;
    volatile long i;

    control.cpu_control.tsc_on = 1;
    control.cpu_control.nractrs = 1;
    control.cpu_control.pmc_map[0] = 0;
    control.cpu_control.evntsel[0] = 0xC0 | (1 << 16) | (1 << 22); /* INST_RETIRED, USR, EN */
    if (self == NULL || vperfctr_control(self, &control) < 0)
        return perror("vperfctr_control"), 1;
    for (i = 0; i < 20000000; i++)
        ;
    if (vperfctr_read_ctrs(self, &sum) < 0)   /* from the thread's state page: no request */
        return perror("vperfctr_read_ctrs"), 1;
    printf("tsc %llu, instructions %llu\n", (unsigned long long)sum.tsc, (unsigned long long)sum.pmc[0]);
    vperfctr_close(self);
    return 0;
}
/* README: end */
