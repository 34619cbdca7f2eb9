/*
 * Per-LWP counting in a multi-threaded program (cpc_bind_curlwp(3CPC)).
 *
 *   lwp_threads EVENT INHERIT NOTIFY
 *
 * The main thread binds a one-request set (flags CPC_BIND_LWP_INHERIT if
 * INHERIT is 1; the request has CPC_OVF_NOTIFY_EMT if NOTIFY is 1), then
 * starts two threads.  Every thread prints "lwp N tid T" and waits; on each
 * line of stdin ("sample") every thread in turn samples its own counters
 * and prints "lwp N value V" (or "lwp N error ERRNO").  A SIGEMT a thread
 * takes is printed as "tid T emt VALUE", the value its set read in the
 * handler, once the handler has restarted the set from its presets.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <libcpc.h>

#define NTHREADS 3

static cpc_t *cpc;
static cpc_set_t *set;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_cv = PTHREAD_COND_INITIALIZER;
static int round_no, turn;
static __thread int me;

static void say(const char *fmt, ...)
{
	va_list ap;
	char line[256];

	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	(void) write(STDOUT_FILENO, line, strlen(line));
}

static void emt(int sig, siginfo_t *si, void *uc)
{
	cpc_buf_t *buf = cpc_buf_create(cpc, set);
	uint64_t v = 0;

	(void) uc;
	if (sig != SIGEMT || si->si_code != EMT_CPCOVF)
		return;
	if (buf != NULL && cpc_set_sample(cpc, set, buf) == 0)
		cpc_buf_get(cpc, buf, 0, &v);
	(void) cpc_set_restart(cpc, set);
	/* by thread id: an inherited SIGEMT may come before the thread's first instruction */
	say("tid %d emt %" PRIu64 "\n", _lwp_self(), v);
	if (buf != NULL)
		cpc_buf_destroy(cpc, buf);
}

static void sample(void)
{
	cpc_buf_t *buf = cpc_buf_create(cpc, set);
	uint64_t v;

	if (cpc_set_sample(cpc, set, buf) == 0) {
		cpc_buf_get(cpc, buf, 0, &v);
		say("lwp %d value %" PRIu64 "\n", me, v);
	} else {
		say("lwp %d error %d\n", me, errno);
	}
	cpc_buf_destroy(cpc, buf);
}

static void *worker(void *arg)
{
	int seen = 0;

	me = (int)(long)arg;
	say("lwp %d tid %d\n", me, _lwp_self());
	pthread_mutex_lock(&lock);
	for (;;) {
		while (round_no == seen || turn != me)
			pthread_cond_wait(&turn_cv, &lock);
		if (round_no < 0)
			break;
		seen = round_no;
		pthread_mutex_unlock(&lock);
		sample();
		pthread_mutex_lock(&lock);
		turn++;
		pthread_cond_broadcast(&turn_cv);
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

int main(int argc, char *argv[])
{
	pthread_t t[NTHREADS];
	struct sigaction act;
	char line[64];
	uint_t flags;
	int i;

	if (argc != 4)
		return 2;
	setvbuf(stdout, NULL, _IONBF, 0);
	memset(&act, 0, sizeof act);
	act.sa_sigaction = emt;
	act.sa_flags = SA_SIGINFO | SA_RESTART;
	sigaction(SIGEMT, &act, NULL);
	if ((cpc = cpc_open(CPC_VER_CURRENT)) == NULL || (set = cpc_set_create(cpc)) == NULL)
		return 1;
	flags = CPC_COUNT_USER | (atoi(argv[3]) ? CPC_OVF_NOTIFY_EMT : 0);
	if (cpc_set_add_request(cpc, set, argv[1], atoi(argv[3]) ? UINT64_MAX - 999 : 0, flags, 0, NULL) != 0)
		return 1;
	if (cpc_bind_curlwp(cpc, set, atoi(argv[2]) ? CPC_BIND_LWP_INHERIT : 0) != 0) {
		say("bind error %d\n", errno);
		return 1;
	}
	me = 0;
	say("lwp 0 tid %d\n", _lwp_self());
	for (i = 1; i < NTHREADS; i++)
		pthread_create(&t[i], NULL, worker, (void *)(long)i);
	while (fgets(line, sizeof line, stdin) != NULL) {
		sample();
		pthread_mutex_lock(&lock);
		round_no++;
		turn = 1;
		pthread_cond_broadcast(&turn_cv);
		while (turn != NTHREADS)
			pthread_cond_wait(&turn_cv, &lock);
		pthread_mutex_unlock(&lock);
		say("done\n");
	}
	pthread_mutex_lock(&lock);
	round_no = -1;
	turn = 1;
	pthread_cond_broadcast(&turn_cv);
	pthread_mutex_unlock(&lock);
	for (i = 1; i < NTHREADS; i++) {
		pthread_mutex_lock(&lock);
		turn = i;
		pthread_cond_broadcast(&turn_cv);
		pthread_mutex_unlock(&lock);
		pthread_join(t[i], NULL);
	}
	cpc_close(cpc);
	return 0;
}
