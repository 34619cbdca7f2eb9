/* perfctr, libcpc and libpctr programs across restarts of the daemon
 * (docs/restart.md).  Each counts on itself, burns CPU time and reads its
 * counters all the time (so kills land mid-ioctl), checking that no call
 * fails and no count goes back, until a line on stdin; then it prints
 * "final ..." and exits 0.  Any failed call prints "error ..." and exits 2.
 *
 * Cycles are counted in user and system mode: CPU_NS is the thread's CPU
 * time from just before its counters were set up to the last read; N, the
 * overflow signals handled before the last read, A those handled after it
 * (shown, not checked: an overflow past the read may signal meanwhile).
 *
 *   x86_restart perfctr-a     a vperfctr: TSC and cycles (a-mode);
 *                             "final cycles CYCLES cpu CPU_NS"
 *   x86_restart perfctr-i P   a vperfctr: cycles in a-mode, and in i-mode
 *                             overflowing every P (SIGIO, vperfctr_iresume);
 *                             "final cycles CYCLES overflows N imode ISUM after A"
 *   x86_restart cpc           cpc_bind_curlwp, cycles;
 *                             "final cycles CYCLES cpu CPU_NS"
 *   x86_restart cpc-ovf P     cpc_bind_curlwp, cycles twice, the second with
 *                             CPC_OVF_NOTIFY_EMT every P: the SIGEMT handler
 *                             presets the first to its value and restarts;
 *                             "final cycles CYCLES overflows N after A"
 *   x86_restart pctr          pctr_rdpmc(0) (root programs the counter);
 *                             "final VALUE"
 * Each prints "ready" once it counts. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <libperfctr.h>
#include <libcpc.h>

uint64_t pctr_rdpmc(int pmc); /* <machine/pctr.h>'s, without its rdtsc() clash */

static long long cpu_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

static void spin(long us)
{
    long long end = cpu_ns() + us * 1000LL;
    while (cpu_ns() < end)
        for (volatile int k = 0; k < 10000; k++)
            ;
}

static long long began; /* the thread's CPU time as its counters were set up */

static void fail(const char *what)
{
    printf("error %s: %s\n", what, strerror(errno));
    exit(2);
}

static int told_to_stop(void)
{
    struct pollfd p = {0, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
}

static void catch(int sig, void (*handler)(int, siginfo_t *, void *))
{
    struct sigaction sa;

    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(sig, &sa, NULL);
}

static uint64_t last;

/* Counts never go back (user and system mode together: how a daemon
 * divides CPU time between them cannot move them). */
static void monotone(uint64_t now, const char *what)
{
    if (now < last) {
        printf("error %s went back: %" PRIu64 " after %" PRIu64 "\n", what, now, last);
        exit(2);
    }
    last = now;
}

/* -- perfctr ---------------------------------------------------------------- */

static struct vperfctr *vperfctr;
static volatile sig_atomic_t overflows;

static void on_sigio(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    if (si->si_code != SI_PMC_OVF)
        return;
    ++overflows;
    if (vperfctr_iresume(vperfctr) < 0) {
        printf("error vperfctr_iresume: %s\n", strerror(errno));
        _exit(2);
    }
}

static int perfctr(long period)
{
    struct vperfctr_control control;
    struct perfctr_info info;
    struct perfctr_sum_ctrs sum;
    int seen;

    if ((vperfctr = vperfctr_open()) == NULL || vperfctr_info(vperfctr, &info) < 0)
        fail("vperfctr_open");
    memset(&control, 0, sizeof control);
    control.cpu_control.tsc_on = 1;
    control.cpu_control.nractrs = 1;
    control.cpu_control.pmc_map[0] = 0;
    control.cpu_control.evntsel[0] = (info.cpu_type == PERFCTR_X86_AMD_K8 ? 0x76 : 0x3C) | (3 << 16) | (1 << 22);
    if (period > 0) {
        catch(SIGIO, on_sigio);
        control.si_signo = SIGIO;
        control.cpu_control.nrictrs = 1;
        control.cpu_control.pmc_map[1] = 1;
        control.cpu_control.evntsel[1] = control.cpu_control.evntsel[0] | (1 << 20);
        control.cpu_control.ireset[1] = -period;
    }
    began = cpu_ns();
    if (vperfctr_control(vperfctr, &control) < 0)
        fail("vperfctr_control");
    printf("ready\n");
    while (!told_to_stop()) {
        spin(2000);
        if (vperfctr_read_ctrs(vperfctr, &sum) < 0)
            fail("vperfctr_read_ctrs");
        monotone(sum.pmc[0], "cycles");
    }
    /* The overflows handled before the final read: the signal of one after
       it may come before the line is printed (the daemon's tick, or the
       library's timer, whose handler waits out the last us before an
       instant and looks), and its count is not in the read. */
    seen = overflows;
    if (vperfctr_read_ctrs(vperfctr, &sum) < 0)
        fail("vperfctr_read_ctrs");
    if (period > 0)
        printf("final cycles %llu overflows %d imode %llu after %d\n", (unsigned long long)sum.pmc[0], seen,
               (unsigned long long)sum.pmc[1], (int)overflows - seen);
    else
        printf("final cycles %llu cpu %lld\n", (unsigned long long)sum.pmc[0], cpu_ns() - began);
    if (vperfctr_stop(vperfctr) < 0)
        fail("vperfctr_stop");
    vperfctr_close(vperfctr);
    return 0;
}

/* -- libcpc ----------------------------------------------------------------- */

static cpc_t *cpc;
static cpc_set_t *set;
static cpc_buf_t *buf;

static void on_emt(int sig, siginfo_t *si, void *uc)
{
    uint64_t total;

    (void)sig;
    (void)uc;
    if (si->si_code != EMT_CPCOVF)
        return;
    ++overflows;
    if (cpc_set_sample(cpc, set, buf) != 0 || cpc_buf_get(cpc, buf, 0, &total) != 0
        || cpc_request_preset(cpc, 0, total) != 0 || cpc_set_restart(cpc, set) != 0) {
        printf("error in the SIGEMT handler: %s\n", strerror(errno));
        _exit(2);
    }
}

static int libcpc(long period)
{
    uint64_t cycles;
    int seen;

    if ((cpc = cpc_open(CPC_VER_CURRENT)) == NULL || (set = cpc_set_create(cpc)) == NULL)
        fail("cpc_open");
    if (cpc_set_add_request(cpc, set, "PAPI_tot_cyc", 0, CPC_COUNT_USER | CPC_COUNT_SYSTEM, 0, NULL) != 0)
        fail("cpc_set_add_request");
    if (period > 0) {
        catch(SIGEMT, on_emt);
        if (cpc_set_add_request(cpc, set, "PAPI_tot_cyc", (uint64_t)0 - (uint64_t)period,
                                CPC_COUNT_USER | CPC_COUNT_SYSTEM | CPC_OVF_NOTIFY_EMT, 0, NULL) != 1)
            fail("cpc_set_add_request (overflow)");
    }
    began = cpu_ns();
    if ((buf = cpc_buf_create(cpc, set)) == NULL || cpc_bind_curlwp(cpc, set, 0) != 0)
        fail("cpc_bind_curlwp");
    printf("ready\n");
    while (!told_to_stop()) {
        spin(2000);
        if (cpc_set_sample(cpc, set, buf) != 0 || cpc_buf_get(cpc, buf, 0, &cycles) != 0)
            fail("cpc_set_sample");
        monotone(cycles, "cycles");
    }
    seen = overflows; /* as for perfctr: those handled before the final read */
    if (cpc_set_sample(cpc, set, buf) != 0 || cpc_buf_get(cpc, buf, 0, &cycles) != 0)
        fail("cpc_set_sample");
    if (period > 0)
        printf("final cycles %" PRIu64 " overflows %d after %d\n", cycles, seen, (int)overflows - seen);
    else
        printf("final cycles %" PRIu64 " cpu %lld\n", cycles, cpu_ns() - began);
    if (cpc_unbind(cpc, set) != 0)
        fail("cpc_unbind");
    return 0;
}

/* -- libpctr ---------------------------------------------------------------- */

static int pctr(void)
{
    uint64_t value;

    printf("ready\n");
    while (!told_to_stop()) {
        spin(2000);
        errno = 0;
        value = pctr_rdpmc(0);
        /* EAGAIN: the daemon's read of our /proc entry passed its deadline
           (hwperfd/host/procread.py), which a starved daemon can meet
           without any restart; libpctr answers 0 for it.  Any other error
           is one. */
        if (errno != 0 && errno != EAGAIN && value == 0)
            fail("pctr_rdpmc");
    }
    printf("final %" PRIu64 "\n", pctr_rdpmc(0));
    return 0;
}

int main(int argc, char **argv)
{
    long period = argc > 2 ? atol(argv[2]) : 0;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2)
        return 1;
    if (strcmp(argv[1], "perfctr-a") == 0 || strcmp(argv[1], "perfctr-i") == 0)
        return perfctr(period);
    if (strcmp(argv[1], "cpc") == 0 || strcmp(argv[1], "cpc-ovf") == 0)
        return libcpc(period);
    if (strcmp(argv[1], "pctr") == 0)
        return pctr();
    return 1;
}
