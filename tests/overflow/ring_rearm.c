/* The overflow timer's handler (lib/overflow_timer.h) when a signal taken
 * while it waits out the last us before an instant arms the timer again:
 * what the overflow's own handler does when the daemon's look found the
 * overflow first and it restarts the counters on the same file.  The new
 * arming times itself; the handler must return to the program at once, not
 * spin until the new instant a period later.
 *
 * The header is used alone here, with a look that only counts: this pins
 * the handler's rule, the libraries' runs pin the rest.  Each try arms an
 * instant 100 us of CPU time ahead and enters the handler as the monotonic
 * timer's ring (OVF_SIGNAL blocked, as the kernel enters it); SIGALRM, 30
 * us later, arms again 200 ms ahead.  Prints "hits=H tries=T
 * longest_ns=L": the tries whose SIGALRM came inside the handler's wait,
 * and the most CPU time one of those spent in the handler. */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/time.h>

#define OVF_SIGNAL 50
#include "overflow_timer.h"

#define FD 7			/* what the look would call on: no file is used */
#define REARM_NS 200000000LL	/* the second arming: 200 ms of CPU time ahead */

static volatile int in_wait, hit, looks, looks_before;

static void ovf_look(int fd)
{
    (void)fd;
    ++looks;
    ovf_disarm();
}

static void on_alarm(int sig)
{
    (void)sig;
    if (in_wait && looks == looks_before) {	/* not after the wait: the look disarmed */
	hit = 1;
	ovf_arm(FD, SIGUSR1, REARM_NS, 0);
    }
}

int main(void)
{
    struct sigaction sa;
    struct itimerval it = { { 0, 0 }, { 0, 30 } };
    sigset_t ring;
    siginfo_t si;
    int hits = 0, tries;
    long long longest = 0;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    sigemptyset(&ring);
    sigaddset(&ring, OVF_SIGNAL);
    for (tries = 0; tries < 2000 && hits < 5; ++tries) {
	long long before;

	hit = 0;
	/* Blocked before arming: the timer's own ring, 50 us of wall time
	   later, would otherwise run the handler (its wait and its look)
	   whenever the program is preempted right after arming. */
	pthread_sigmask(SIG_BLOCK, &ring, NULL);
	ovf_arm(FD, SIGUSR1, 100000, 0);
	if (ovf_self.fd != FD) {
	    fprintf(stderr, "the timer could not be armed\n");
	    return 1;
	}
	memset(&si, 0, sizeof si);
	si.si_code = SI_TIMER;
	si.si_value.sival_int = OVF_WALL;
	setitimer(ITIMER_REAL, &it, NULL);
	before = ovf_clock(CLOCK_THREAD_CPUTIME_ID);
	looks_before = looks;
	in_wait = 1;
	ovf_ring(OVF_SIGNAL, &si, NULL);
	in_wait = 0;
	if (hit) {
	    long long spent = ovf_clock(CLOCK_THREAD_CPUTIME_ID) - before;

	    ++hits;
	    if (spent > longest)
		longest = spent;
	}
	ovf_disarm();
	pthread_sigmask(SIG_UNBLOCK, &ring, NULL);	/* a ring the timer sent meanwhile: nothing armed */
    }
    printf("hits=%d tries=%d longest_ns=%lld looks=%d\n", hits, tries, longest, looks);
    return 0;
}
