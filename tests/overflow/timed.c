/* One thread sampling its own cycles (user and system mode) at one period,
 * as a sampling profiler does: perfctr, an i-mode counter and
 * vperfctr_iresume; cpc, a CPC_OVF_NOTIFY_EMT request and cpc_set_restart.
 * The handler only counts and restarts (a profiler takes the PC); with
 * TIMED_READ=1 in the environment it first reads the counter, as PAPI's
 * overflow dispatch does, which must stand at the overflow (whole periods).
 *
 *   timed perfctr|cpc PERIOD burn CPU_MS [IDLE_MS]
 *                                        burn CPU_MS of its own CPU time (after
 *                                        sleeping IDLE_MS once set up)
 *   timed perfctr|cpc PERIOD wait          for the manual clock: prints
 *        "ready pid=P", then per stdin line "expect N" waits until N signals
 *        came (10 s at most) and prints the state; exits at EOF
 *
 * Prints "signals=N counted=C cpu_ns=T restart_ns=R setup_ns=S longest_ns=L":
 * C is what the counter counted (its sum), T the thread's own CPU time from
 * before the set-up to the call that takes the count, R the part of T the
 * handler's restart calls took (a round trip to the daemon: what one costs
 * the thread on this machine), S the part the set-up took, before the
 * counting began, L the most CPU time from the counting's start or a
 * restart's return to the next handler (a period, and what that overflow
 * came late: which one a failure shows); "stalled_ns=D stalls=N": the
 * stretches of CPU time the burn loop did not run (STALL_NS);
 * with TIMED_READ, "misread=M" (handler reads not at the overflow) and, for
 * perfctr, "page_reads=P" (handler reads the vperfctr's state page served,
 * without a round trip). */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <libcpc.h>
#include "libperfctr.h"

static long long period;
/* A stretch of the thread's CPU time this long between two of the burn
   loop's reads of its clock kept the thread from its own code: a system
   call that stalled in the kernel (seen on a loaded 2-CPU VM: the clock's
   own call, ms with preemption off), where no signal reaches the thread, so
   an overflow that falls in one is signalled as the call returns; or a
   handler that spun, which the tests allow rarely. */
#define STALL_NS 500000LL
static long long stalled_ns;
static long stalls;
static volatile long signals, foreign;
static volatile long long restart_ns;	/* the thread's CPU time in the handler's restart calls */
static volatile long long resumed_ns, longest_ns;	/* the last restart's return; the most from one to a handler */
static struct vperfctr *vperfctr;
static cpc_t *cpc;
static cpc_set_t *set;
static cpc_buf_t *buf;
static int request, use_cpc, read_first;
static volatile long misread, page_reads;

static long long cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void on_signal(int sig, siginfo_t *si, void *uc)
{
    (void)sig; (void)uc;
    if (use_cpc) {
	if (si->si_code != EMT_CPCOVF) {
	    ++foreign;
	    return;
	}
	++signals;
	if (read_first) {
	    uint64_t value = 1;

	    if (cpc_set_sample(cpc, set, buf) != 0 || cpc_buf_get(cpc, buf, request, &value) != 0 || value != 0)
		++misread;	/* the preset wraps to 0 at the overflow, and the set stands there */
	}
	long long before = cpu_ns();
	if (before - resumed_ns > longest_ns)
	    longest_ns = before - resumed_ns;
	cpc_set_restart(cpc, set);
	resumed_ns = cpu_ns();
	restart_ns += resumed_ns - before;
    } else {
	if (si->si_code != SI_PMC_OVF || si->si_pmc_ovf_mask != 1) {
	    ++foreign;
	    return;
	}
	++signals;
	if (read_first) {
	    struct perfctr_sum_ctrs sum;

	    if (hwperfd_vperfctr_read_page(vperfctr, &sum) == 0)
		++page_reads;
	    else
		vperfctr_read_ctrs(vperfctr, &sum);
	    if ((long long)sum.pmc[0] != signals * period)
		++misread;
	}
	long long before = cpu_ns();
	if (before - resumed_ns > longest_ns)
	    longest_ns = before - resumed_ns;
	if (vperfctr_iresume(vperfctr) < 0) {
	    perror("vperfctr_iresume");
	    abort();
	}
	resumed_ns = cpu_ns();
	restart_ns += resumed_ns - before;
    }
}

static void start(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;	/* the wait's reads of stdin go on */
    sigaction(use_cpc ? SIGEMT : SIGIO, &sa, NULL);
    if (use_cpc) {
	if ((cpc = cpc_open(CPC_VER_CURRENT)) == NULL || (set = cpc_set_create(cpc)) == NULL
	    || (request = cpc_set_add_request(cpc, set, "PAPI_tot_cyc", UINT64_MAX - period + 1,
					      CPC_COUNT_USER | CPC_COUNT_SYSTEM | CPC_OVF_NOTIFY_EMT,
					      0, NULL)) < 0
	    || (buf = cpc_buf_create(cpc, set)) == NULL || cpc_bind_curlwp(cpc, set, 0) < 0) {
	    perror("cpc");
	    exit(1);
	}
    } else {
	struct vperfctr_control control;

	if ((vperfctr = vperfctr_open()) == NULL) {
	    perror("vperfctr_open");
	    exit(1);
	}
	memset(&control, 0, sizeof control);
	control.si_signo = SIGIO;
	control.cpu_control.tsc_on = 1;
	control.cpu_control.nrictrs = 1;
	control.cpu_control.evntsel[0] = 0x3C | (1 << 16) | (1 << 17) | (1 << 20) | (1 << 22);
	control.cpu_control.ireset[0] = (int)-period;
	if (vperfctr_control(vperfctr, &control) < 0) {
	    perror("vperfctr_control");
	    exit(1);
	}
    }
}

/* What the counter counted so far: whole periods and the partial one. */
static long long counted(void)
{
    if (use_cpc) {
	uint64_t value;

	cpc_set_sample(cpc, set, buf);
	cpc_buf_get(cpc, buf, request, &value);
	return signals * period + (long long)(value - (UINT64_MAX - period + 1));
    } else {
	struct perfctr_sum_ctrs sum;

	vperfctr_read_ctrs(vperfctr, &sum);
	return (long long)sum.pmc[0];
    }
}

int main(int argc, char **argv)
{
    long long begin, setup_ns;

    if (argc < 4)
	return 2;
    use_cpc = strcmp(argv[1], "cpc") == 0;
    read_first = getenv("TIMED_READ") != NULL && strcmp(getenv("TIMED_READ"), "1") == 0;
    period = atoll(argv[2]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(argv[3], "burn") == 0 && (argc == 5 || argc == 6)) {
	volatile unsigned long spin = 0;
	long long until, total, end;

	begin = cpu_ns();
	start();
	resumed_ns = cpu_ns();
	setup_ns = resumed_ns - begin;
	if (argc == 6) {
	    struct timespec idle = { atoll(argv[5]) / 1000, atoll(argv[5]) % 1000 * 1000000L };

	    while (nanosleep(&idle, &idle) < 0)
		;
	}
	until = begin + atoll(argv[4]) * 1000000LL;
	for (long long last = cpu_ns(), last_restart = restart_ns;;) {
	    long long now, restart, gap;

	    do {		/* a handler's restart and the clock, read together */
		restart = restart_ns;
		now = cpu_ns();
	    } while (restart != restart_ns);
	    if (now >= until)
		break;
	    /* Between two reads of the clock the loop ran 1 000 increments
	       and one system call, a few us; and any handlers (their restarts
	       counted apart). */
	    gap = now - last - (restart - last_restart);
	    if (gap > STALL_NS) {
		stalled_ns += gap;
		++stalls;
	    }
	    last = now;
	    last_restart = restart;
	    for (int i = 0; i < 1000; ++i)
		++spin;
	}
	/* The counting ends with the call that takes the count (libcpc's
	   sample, perfctr's stop): the CPU time after it is not the
	   counters' to count. */
	end = cpu_ns();
	if (use_cpc) {
	    total = counted();
	    cpc_unbind(cpc, set);
	} else {
	    vperfctr_stop(vperfctr);
	    total = counted();
	}
	printf("signals=%ld counted=%lld cpu_ns=%lld foreign=%ld restart_ns=%lld setup_ns=%lld longest_ns=%lld"
	       " misread=%ld page_reads=%ld stalled_ns=%lld stalls=%ld\n", (long)signals, total, end - begin,
	       (long)foreign, restart_ns, setup_ns, longest_ns, (long)misread, (long)page_reads, stalled_ns, stalls);
	return 0;
    }
    if (strcmp(argv[3], "wait") == 0) {
	char line[64];

	start();
	printf("ready pid=%d\n", (int)getpid());
	while (fgets(line, sizeof line, stdin) != NULL) {
	    long want = 0;
	    int tries;

	    if (sscanf(line, "expect %ld", &want) != 1)
		continue;
	    for (tries = 0; signals < want && tries < 10000; ++tries)
		usleep(1000);
	    printf("signals=%ld counted=%lld foreign=%ld\n", (long)signals, counted(), (long)foreign);
	}
	return 0;
    }
    return 2;
}
