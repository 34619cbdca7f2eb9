/*
 * cpc_bind_curlwp(3CPC) of a set preset a thousand events short of its
 * overflow, over and over: the overflow comes as the bind returns, and its
 * SIGEMT may come before cpc_bind_curlwp does.  The handler samples the set
 * (which must be bound by then) and stops; each round spins until its
 * SIGEMT or 200 ms of CPU time, then unbinds.
 *
 *   bind_overflow ROUNDS
 *
 * Prints "rounds N missed M sample-errors E": M rounds whose SIGEMT never
 * came, E handler samples that failed.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <libcpc.h>

static cpc_t *cpc;
static cpc_set_t *set;
static cpc_buf_t *buf;
static volatile sig_atomic_t took, sample_errors;

static void emt(int sig, siginfo_t *info, void *arg)
{
	(void)sig;
	(void)arg;
	if (info->si_code != EMT_CPCOVF)
		return;
	if (cpc_set_sample(cpc, set, buf) != 0)
		sample_errors++;
	took = 1; /* not restarted: the set stays frozen until the unbind */
}

static double cpu_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 100, missed = 0;
	struct sigaction act;

	memset(&act, 0, sizeof act);
	act.sa_sigaction = emt;
	act.sa_flags = SA_RESTART | SA_SIGINFO;
	if ((cpc = cpc_open(CPC_VER_CURRENT)) == NULL || (set = cpc_set_create(cpc)) == NULL ||
	    sigaction(SIGEMT, &act, NULL) != 0 ||
	    cpc_set_add_request(cpc, set, "INST_RET", UINT64_MAX - 999, CPC_COUNT_USER | CPC_OVF_NOTIFY_EMT, 0,
				NULL) != 0 ||
	    (buf = cpc_buf_create(cpc, set)) == NULL) {
		printf("error set-up %s\n", strerror(errno));
		return 2;
	}
	for (int i = 0; i < rounds; i++) {
		double until;
		took = 0;
		if (cpc_bind_curlwp(cpc, set, 0) != 0) {
			printf("error cpc_bind_curlwp %s\n", strerror(errno));
			return 2;
		}
		until = cpu_ms() + 200;
		while (!took && cpu_ms() < until)
			for (volatile int k = 0; k < 1000; k++)
				;
		missed += !took;
		if (cpc_unbind(cpc, set) != 0) {
			printf("error cpc_unbind %s\n", strerror(errno));
			return 2;
		}
	}
	printf("rounds %d missed %d sample-errors %d\n", rounds, missed, (int)sample_errors);
	return 0;
}
