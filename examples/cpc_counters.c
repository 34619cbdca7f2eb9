/* Solaris libcpc(3LIB): count this LWP's cycles and instructions with the
 * generic events every model has.  Build with
 * `cc $(pkg-config --cflags --libs libcpc) cpc_counters.c`.
 * README: begin */
#include <libcpc.h>
#include <stdio.h>

int main(void)
{
    cpc_t *cpc;
    cpc_set_t *set;
    cpc_buf_t *buf;
    uint64_t cycles, insts;
    int ic, ii;
    volatile long i;

    if ((cpc = cpc_open(CPC_VER_CURRENT)) == NULL || (set = cpc_set_create(cpc)) == NULL)
        return perror("cpc_open"), 1;
    ic = cpc_set_add_request(cpc, set, "PAPI_tot_cyc", 0, CPC_COUNT_USER, 0, NULL);
    ii = cpc_set_add_request(cpc, set, "PAPI_tot_ins", 0, CPC_COUNT_USER, 0, NULL);
    if (ic < 0 || ii < 0 || (buf = cpc_buf_create(cpc, set)) == NULL || cpc_bind_curlwp(cpc, set, 0) != 0)
        return perror("cpc_bind_curlwp"), 1;
    for (i = 0; i < 20000000; i++)
        ;
    if (cpc_set_sample(cpc, set, buf) != 0)
        return perror("cpc_set_sample"), 1;
    cpc_buf_get(cpc, buf, ic, &cycles);
    cpc_buf_get(cpc, buf, ii, &insts);
    printf("cycles %llu, instructions %llu\n", (unsigned long long)cycles, (unsigned long long)insts);
    return cpc_close(cpc) != 0;
}
/* README: end */
