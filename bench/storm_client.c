/* A storm of thread or process events, as fast as one process can make them.
 *
 *   storm_client threads|forks|inherit SECONDS
 *
 * threads: create and join threads in batches of 32; forks: fork children
 * that _exit at once, 32 at a time, and wait for them; inherit: bind a
 * one-request libcpc set (PAPI_tot_cyc, on every model) to the calling LWP with CPC_BIND_LWP_INHERIT first
 * (every new thread then gets a context of its own in the daemon), then
 * storm threads.  Prints how many threads or processes it made. */
#include <libcpc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BATCH 32

static void *nothing(void *arg)
{
	return arg;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	pthread_t t[BATCH];
	pid_t kids[BATCH];
	unsigned long made = 0;
	double end;
	int forks, i;

	if (argc != 3)
		return 2;
	forks = strcmp(argv[1], "forks") == 0;
	if (strcmp(argv[1], "inherit") == 0) {
		cpc_t *cpc = cpc_open(CPC_VER_CURRENT);
		cpc_set_t *set = cpc != NULL ? cpc_set_create(cpc) : NULL;

		if (set == NULL ||
		    cpc_set_add_request(cpc, set, "PAPI_tot_cyc", 0, CPC_COUNT_USER, 0, NULL) != 0 ||
		    cpc_bind_curlwp(cpc, set, CPC_BIND_LWP_INHERIT) != 0) {
			perror("storm_client: libcpc bind");
			return 1;
		}
	}
	end = now() + atof(argv[2]);
	while (now() < end) {
		for (i = 0; i < BATCH; i++) {
			if (forks) {
				kids[i] = fork();
				if (kids[i] == 0)
					_exit(0);
			} else if (pthread_create(&t[i], NULL, nothing, NULL) != 0) {
				t[i] = 0;
			}
		}
		for (i = 0; i < BATCH; i++) {
			if (forks) {
				if (kids[i] > 0 && waitpid(kids[i], NULL, 0) > 0)
					made++;
			} else if (t[i] && pthread_join(t[i], NULL) == 0) {
				made++;
			}
		}
	}
	printf("%lu\n", made);
	return 0;
}
