/*
 * cpc_bind_curlwp(3CPC) Example 2, put together as the page shows: its
 * signal handler, then Example 1's opening (cpc_open, a set), then the
 * setup code, the loop and cpc_unbind.  Where the page's fragments do not
 * compile as printed, the least change:
 *
 *   - the handler's "(cpc_request_preset(cpc, ind1, val1) != 0)" lacks its
 *     "if", and ind1/val1 are Example 1's names: they are declared here
 *     and set to the request's index and PRESET after the request is added;
 *   - "==> Computation to be measured goes here <==" is, here, waiting for a
 *     line on stdin (the test moves the manual clock meanwhile), or with
 *     EXAMPLE2_SPIN=ms burning that much CPU time per iteration.
 *
 * At the end it prints "overflows N", the SIGEMTs the handler took.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <unistd.h>
#include <libcpc.h>
#include <errno.h>
#include <time.h>

static int ind1;
static uint64_t val1;
static volatile int overflows;

cpc_t     *cpc;
cpc_set_t *set;
cpc_buf_t *buf;
int       index;

void
emt_handler(int sig, siginfo_t *sip, void *arg)
{
    ucontext_t *uap = arg;
    uint64_t val;

    if (sig != SIGEMT || sip->si_code != EMT_CPCOVF) {
        psignal(sig, "example");
        psiginfo(sip, "example");
        return;
    }

    overflows++;
    (void) printf("lwp%d - si_addr %p ucontext: %%pc %p %%sp %p\n",
        _lwp_self(), (void *)sip->si_addr,
        (void *)uap->uc_mcontext.gregs[PC],
        (void *)uap->uc_mcontext.gregs[SP]);

    if (cpc_set_sample(cpc, set, buf) != 0)
        error("cannot sample: %s", strerror(errno));

    cpc_buf_get(cpc, buf, index, &val);

    (void) printf("0x%" PRIx64"\n", val);
    (void) fflush(stdout);

    /*
    * Update a request's preset and restart the counters. Counters which
    * have not been preset with cpc_request_preset() will resume counting
    * from their current value.
    */
    if (cpc_request_preset(cpc, ind1, val1) != 0)
       error("cannot set preset for request %d: %s", ind1,
            strerror(errno));
       if (cpc_set_restart(cpc, set) != 0)
            error("cannot restart lwp%d: %s", _lwp_self(), strerror(errno));
}

static void
computation(void)
{
    const char *spin = getenv("EXAMPLE2_SPIN");
    char line[64];

    if (spin != NULL) {
        struct timespec t0, t;
        double ms = atof(spin);
        volatile unsigned long x = 0;

        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        do {
            for (int i = 0; i < 10000; i++)
                x += i;
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
        } while ((t.tv_sec - t0.tv_sec) * 1e3 + (t.tv_nsec - t0.tv_nsec) / 1e6 < ms);
        return;
    }
    (void) printf("compute\n");
    (void) fflush(stdout);
    if (fgets(line, sizeof line, stdin) == NULL)
        exit(1);
}

int
main(void)
{
    int iter;
    char *event;

    if ((cpc = cpc_open(CPC_VER_CURRENT)) == NULL)
        error("perf counters unavailable: %s", strerror(errno));
    if ((event = getenv("EVENT0")) == NULL)
        event = "EC_ref";
    if ((set = cpc_set_create(cpc)) == NULL)
        error("could not create set: %s", strerror(errno));

#define PRESET (UINT64_MAX - 999ull)

    struct sigaction act;

    act.sa_sigaction = emt_handler;
    bzero(&act.sa_mask, sizeof (act.sa_mask));
    act.sa_flags = SA_RESTART|SA_SIGINFO;
    if (sigaction(SIGEMT, &act, NULL) == -1)
        error("sigaction: %s", strerror(errno));

    if ((index = cpc_set_add_request(cpc, set, event, PRESET,
       CPC_COUNT_USER | CPC_OVF_NOTIFY_EMT, 0, NULL)) != 0)
       error("cannot add request to set: %s", strerror(errno));
    ind1 = index;
    val1 = PRESET;

    if ((buf = cpc_buf_create(cpc, set)) == NULL)
       error("cannot create buffer: %s", strerror(errno));

    if (cpc_bind_curlwp(cpc, set, 0) == -1)
        error("cannot bind lwp%d: %s", _lwp_self(), strerror(errno));

    for (iter = 1; iter <= 20; iter++) {
        computation();
    }

    cpc_unbind(cpc, set);      /* done */
    (void) printf("overflows %d\n", overflows);
    return (0);
}
