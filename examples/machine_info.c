/* What counter tools ask the system about the machine besides the counters:
 * sysmp(MP_NPROCS / MP_NAPROCS), syssgi(SGI_GETNVRAM, "cpufreq") for the MHz
 * that turns cycles into time, the cycle counter's width and period
 * (SGI_CYCLECNTR_SIZE, SGI_QUERY_CYCLECNTR) and its value.  Link with
 * libhwperf.  Prints "name: value" lines; a refusal prints "name errno: N". */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syssgi.h>
#include <sys/sysmp.h>
#include <invent.h>

/* PAPI's way: the MHz from the board, the CPU type from the chip. */
static int show(inventory_t *item, void *count)
{
    printf("inv %d: %d %d %ld %ld %d\n", (*(int *)count)++, item->inv_class, item->inv_type,
           item->inv_controller, item->inv_unit, item->inv_state);
    return 0;
}

int main(void)
{
    char buf[64];
    unsigned cycleval = 0;
    unsigned long long c0, c1;
    struct timespec t0, t1;
    int r;

    printf("nprocs: %d\n", sysmp(MP_NPROCS));
    printf("naprocs: %d\n", sysmp(MP_NAPROCS));
    if (syssgi(SGI_GETNVRAM, "cpufreq", buf) < 0)
        printf("cpufreq errno: %d\n", errno);
    else
        printf("cpufreq: %s\n", buf);
    printf("nvram other: %d\n", syssgi(SGI_GETNVRAM, "netaddr", buf) < 0 ? errno : 0);
    printf("cyclecntr size: %d\n", syssgi(SGI_CYCLECNTR_SIZE));
    r = syssgi(SGI_QUERY_CYCLECNTR, &cycleval);
    printf("query cyclecntr: %d %d\n", r, r < 0 ? errno : 0);
    printf("cycleval: %u\n", cycleval);
    clock_gettime(CLOCK_SGI_CYCLE, &t0);
    c0 = hwperf_cyclecntr();
    usleep(200000);
    c1 = hwperf_cyclecntr();
    clock_gettime(CLOCK_SGI_CYCLE, &t1);
    printf("cycles: %llu\n", c1 - c0);
    printf("elapsed ns: %lld\n", (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
    {
        int count = 0, walked = 0;
        inventory_t *item;
        printf("scaninvent: %d\n", scaninvent(show, &count));
        while ((item = getinvent()) != NULL)
            walked++;
        endinvent();
        printf("getinvent items: %d\n", walked);
    }
    printf("unknown request: %d\n", syssgi(12345) < 0 ? errno : 0);
    printf("unknown sysmp: %d\n", sysmp(999) < 0 ? errno : 0);
    return 0;
}
