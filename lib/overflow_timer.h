/*
 * The in-thread timer that lands an overflow interrupt on its instant
 * (docs/overflow.md), included by libperfctr and libcpc: each has its own
 * copy, its own signal and its own per-thread state.
 *
 * The daemon reads a thread's CPU time from the kernel's account, which for
 * a thread running on another CPU is up to a scheduler tick behind; the
 * thread reads its own clock exactly, and a call it makes blocks it, which
 * brings the account up to date.  So after each call that arms an
 * interrupting counter the library learns the CPU ns left before the
 * nearest overflow (ovf_arm) and arms a timer that signals the thread
 * itself (SIGEV_THREAD_ID):
 *
 *  - near the instant (OVF_NEAR_NS of CPU time or less), a CLOCK_MONOTONIC
 *    timer for the CPU time left: a thread runs at most one CPU ns per wall
 *    ns, so it never rings after the instant;
 *  - farther, or when the thread ran almost none of the wall time the last
 *    one waited (under 1/32) and blocked meanwhile (it sleeps, not merely
 *    waits for a CPU on a busy machine), a timer on the thread's CPU
 *    clock OVF_EARLY_NS before the instant: it rings up to a tick late, but
 *    costs nothing while the thread does not run.
 *
 * The monotonic timer is set OVF_LEAD_NS short, the usual lag of its
 * signal, but never sooner than OVF_MIN_NS: with a period shorter than the
 * handler's own run (perfctr's examples/signal, ireset -25) a look at once
 * would find the handler's own overflow, again and again, and the program
 * would never run.  The handler reads the thread's CPU clock; within twice that of
 * the instant (the thread ran all the while) it waits out the rest in the
 * handler, farther it arms again for what is left, and at the instant it
 * makes the library's look call (ovf_look), which finds the overflow, whose
 * signal the thread takes as the handler returns, in the program's own
 * context.  The daemon's own tick stays the fallback: a thread whose
 * timer cannot ring (its signal blocked, HWPERFD_OVERFLOW_TIMER=0, the
 * signal taken by the program) still gets every overflow, a tick late.
 *
 * The timer's signal interrupts what the thread is doing; the handler is
 * installed with SA_RESTART, but calls Linux never restarts (sleeps, waits
 * with a timeout; signal(7)) answer EINTR, as they do for the overflow
 * signal itself.  The monotonic timer rings only while the thread runs near
 * an instant.
 *
 * Before including: OVF_SIGNAL (the timer's signal) and
 * static void ovf_look(int fd) (the call at the instant, which ends by
 * calling ovf_arm with what is left, or ovf_disarm).
 */
#ifndef HWPERFD_OVERFLOW_TIMER_H
#define HWPERFD_OVERFLOW_TIMER_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define OVF_NEAR_NS 20000000LL	/* closer than this: the monotonic timer */
#define OVF_EARLY_NS 10000000LL	/* the CPU-clock timer rings this long before the instant */
#define OVF_LEAD_NS 60000LL	/* the monotonic timer rings this long before it (its signal's usual lag) */
#define OVF_MIN_NS 50000LL	/* and no sooner than this after it is armed: the program runs between looks */
#define OVF_WALL 1		/* sival_int of each timer's signal */
#define OVF_CPU 2

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

struct ovf_timer {
    pid_t pid;				/* the process that made the timers (a forked child has none) */
    timer_t wall, cpu;
    volatile sig_atomic_t fd;		/* what ovf_look calls on; -1: disarmed */
    int sig;				/* the overflow's signal, held back while the look runs */
    volatile long long instant;		/* the thread's CPU clock at the nearest overflow */
    volatile unsigned gen;		/* bumped by every arm, hold and disarm */
    long long armed_cpu, armed_wall;	/* when the monotonic timer was armed */
    long armed_nvcsw;			/* and the thread's voluntary switches by then */
    int cpu_armed;
};

static __thread struct ovf_timer ovf_self = { 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0 };
static pthread_once_t ovf_once = PTHREAD_ONCE_INIT;
static pthread_key_t ovf_key;
static int ovf_on;			/* 1 once the handler is ours */

static void ovf_look(int fd);

static long long ovf_clock(clockid_t clock)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The thread's voluntary context switches: it slept (blocked) when they grew. */
static long ovf_nvcsw(void)
{
    struct rusage ru;

    return getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_nvcsw : 0;
}

static void ovf_set(clockid_t clock, timer_t timer, long long ns, int flags)
{
    struct itimerspec it;

    memset(&it, 0, sizeof it);
    it.it_value.tv_sec = ns / 1000000000LL;
    it.it_value.tv_nsec = ns % 1000000000LL;
    (void)clock;
    timer_settime(timer, flags, &it, NULL);
}

/* Arm for the instant, from CPU time `now`; `idle`: the thread ran little of
   the last wait, so the CPU clock's timer, which costs nothing while it
   does not run. */
static void ovf_schedule(long long now, int idle)
{
    long long left = ovf_self.instant - now;

    if (left > OVF_NEAR_NS || idle) {
	long long at = left > OVF_EARLY_NS ? ovf_self.instant - OVF_EARLY_NS : ovf_self.instant;
	ovf_set(CLOCK_THREAD_CPUTIME_ID, ovf_self.cpu, at, TIMER_ABSTIME);
	ovf_self.cpu_armed = 1;
	return;
    }
    ovf_self.armed_cpu = now;
    ovf_self.armed_wall = ovf_clock(CLOCK_MONOTONIC);
    ovf_self.armed_nvcsw = ovf_nvcsw();
    left -= OVF_LEAD_NS;
    ovf_set(CLOCK_MONOTONIC, ovf_self.wall, left > OVF_MIN_NS ? left : OVF_MIN_NS, 0);
}

static void ovf_ring(int sig, siginfo_t *si, void *uc)
{
    int saved = errno, fd = ovf_self.fd, which;
    long long now;

    (void)sig; (void)uc;
    if (si == NULL || si->si_code != SI_TIMER || fd < 0 || ovf_self.pid != getpid())
	goto out;
    which = si->si_value.sival_int;
    now = ovf_clock(CLOCK_THREAD_CPUTIME_ID);
    if (which == OVF_CPU)
	ovf_self.cpu_armed = 0;
    if (which == OVF_WALL && now < ovf_self.instant) {
	long long ran = now - ovf_self.armed_cpu, waited = ovf_clock(CLOCK_MONOTONIC) - ovf_self.armed_wall;
	/* It slept most of the wait, not merely waited for a CPU (a busy
	   machine gives it a small share, and the CPU clock's timer would be
	   a tick late every time then). */
	int idle = ran * 32 < waited && ovf_nvcsw() != ovf_self.armed_nvcsw;

	if (idle || ovf_self.instant - now > 2 * OVF_LEAD_NS) {
	    ovf_schedule(now, idle);
	    goto out;
	}
	/* Rung the lead early, as meant, while the thread runs: its own CPU
	   time up to the instant is what the program would have run. */
	while (now < ovf_self.instant)
	    now = ovf_clock(CLOCK_THREAD_CPUTIME_ID);
    }
    if (now >= ovf_self.instant) {
	sigset_t hold;

	/* The overflow's signal waits until this handler returns, so that
	   the program's handler sees the program's own context (a sampler
	   takes the interrupted PC from it), not this one's. */
	if (ovf_self.sig > 0) {
	    sigemptyset(&hold);
	    sigaddset(&hold, ovf_self.sig);
	    pthread_sigmask(SIG_BLOCK, &hold, NULL);
	}
	ovf_self.fd = -1;
	ovf_look(fd);
    } else if (!ovf_self.cpu_armed) {
	ovf_schedule(now, 0);
    }
 out:
    errno = saved;
}

static void ovf_thread_gone(void *arg)
{
    (void)arg;
    if (ovf_self.pid == getpid()) {
	timer_delete(ovf_self.wall);
	timer_delete(ovf_self.cpu);
    }
    ovf_self.pid = 0;
    ovf_self.fd = -1;
}

/* The handler, once per process: only where the program left the signal
   alone, and not with HWPERFD_OVERFLOW_TIMER=0. */
static void ovf_install(void)
{
    const char *env = getenv("HWPERFD_OVERFLOW_TIMER");
    struct sigaction now, ours;

    if (env != NULL && strcmp(env, "0") == 0)
	return;
    if (sigaction(OVF_SIGNAL, NULL, &now) < 0 || (!(now.sa_flags & SA_SIGINFO) && now.sa_handler != SIG_DFL))
	return;
    if (pthread_key_create(&ovf_key, ovf_thread_gone) != 0)
	return;
    memset(&ours, 0, sizeof ours);
    ours.sa_sigaction = ovf_ring;
    ours.sa_flags = SA_SIGINFO | SA_RESTART;
    if (sigaction(OVF_SIGNAL, &ours, NULL) == 0)
	ovf_on = 1;
}

/* This thread's two timers, made on first use (again in a forked child). */
static int ovf_ready(void)
{
    struct sigevent ev;
    pid_t pid;

    pthread_once(&ovf_once, ovf_install);
    if (!ovf_on)
	return 0;
    pid = getpid();
    if (ovf_self.pid == pid)
	return 1;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = OVF_SIGNAL;
    ev.sigev_notify_thread_id = (pid_t)syscall(SYS_gettid);
    ev.sigev_value.sival_int = OVF_WALL;
    if (timer_create(CLOCK_MONOTONIC, &ev, &ovf_self.wall) < 0)
	return 0;
    ev.sigev_value.sival_int = OVF_CPU;
    if (timer_create(CLOCK_THREAD_CPUTIME_ID, &ev, &ovf_self.cpu) < 0) {
	timer_delete(ovf_self.wall);
	return 0;
    }
    ovf_self.pid = pid;
    ovf_self.cpu_armed = 0;
    pthread_setspecific(ovf_key, &ovf_self);	/* any non-NULL value: the destructor runs */
    return 1;
}

/* A call that changes what overflows is on its way: a ring meanwhile looks
   at nothing, and a look's answer from before it is not taken. */
static void ovf_hold(void)
{
    ovf_self.fd = -1;
    ovf_self.gen++;
}

/* Nothing to time on this thread: both timers off. */
static void ovf_disarm(void)
{
    ovf_hold();
    if (ovf_self.pid == getpid()) {
	ovf_set(CLOCK_MONOTONIC, ovf_self.wall, 0, 0);
	if (ovf_self.cpu_armed)
	    ovf_set(CLOCK_THREAD_CPUTIME_ID, ovf_self.cpu, 0, 0);
	ovf_self.cpu_armed = 0;
    }
}

/* The daemon said `left` CPU ns remain before the nearest overflow of what
   `fd` counts, signalled with `sig`; `none`: nothing can overflow.  The
   instant is counted from this thread's CPU clock after the call returned:
   a few us late (the return), where from before the call it would be as
   early (the way in), and a look there would find nothing and look again. */
static void ovf_arm(int fd, int sig, unsigned long long left, int none)
{
    if (none || left > (1ULL << 62)) {
	if (ovf_self.fd == fd || ovf_self.fd < 0)
	    ovf_disarm();
	return;
    }
    if (!ovf_ready())
	return;
    long long now = ovf_clock(CLOCK_THREAD_CPUTIME_ID);

    ovf_hold();
    ovf_self.sig = sig;
    ovf_self.instant = now + (long long)left;
    ovf_self.fd = fd;
    ovf_schedule(now, 0);
}

/* A look's answer (`gen`: ovf_self.gen before its call): taken unless a
   call made meanwhile - the overflow's handler, run as the look returned,
   resumed the counters - armed or disarmed since. */
static void ovf_answer(int fd, int sig, unsigned gen, unsigned long long left, int none)
{
    if (gen == ovf_self.gen)
	ovf_arm(fd, sig, left, none);
}

#endif
