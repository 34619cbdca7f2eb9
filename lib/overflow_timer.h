/*
 * The in-thread timer that lands an overflow interrupt on its instant
 * (docs/overflow.md), included by libperfctr, libcpc and the hwperfd-run
 * shim (IRIX): each has its own copy, its own signal and its own per-thread
 * state.
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
 *    clock OVF_EARLY_NS before the instant, which costs nothing while the
 *    thread does not run.
 *
 * That CPU-clock timer is, where the kernel lets the thread open one, a
 * perf task-clock event on the thread itself (perf_event_open(2), a
 * software event: no hardware counter is taken), whose overflow signals
 * the thread through its file (F_SETSIG, F_SETOWN_EX): the kernel runs it
 * on a high-resolution timer while the thread is on a CPU, so it rings on
 * its instant.  A POSIX CPU-clock timer (timer_create on
 * CLOCK_THREAD_CPUTIME_ID) is only checked at the scheduler's tick when
 * the thread is the one running; on a busy machine a thread can run for
 * tens of ms between ticks and never be running at one (seen on a 2-CPU
 * VM beside two CPU-bound processes: 20-80 ms of CPU late), so it is the
 * fallback where perf is not allowed.  An event that may not count kernel
 * time (perf_event_paranoid 2, no CAP_PERFMON) drops a ring that lands in
 * the kernel and rings a period later (half the rings of a thread that
 * spends half its time in system calls), so it rings at half of what is
 * left and at least every OVF_STEP_NS: a dropped ring costs that much, and
 * the rings cost the thread a few us each.  Near the instant it is armed
 * only for a thread that slept (below), and its first ring says the thread
 * runs again, which the monotonic timer then times: it rings after
 * OVF_WAKE_NS, so that a ring or two dropped cost that much, not OVF_STEP_NS
 * each.
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
 *
 * With OVF_PROCESS defined, a second timer pair times counters that count
 * the whole process (IRIX's process counters, under hwperfd-run): ovf_proc,
 * on the process's CPU clock, its signal going to whichever thread can take
 * it (SIGEV_SIGNAL), armed with ovf_arm_on(&ovf_proc, ...).  A process runs
 * up to one CPU ns per wall ns on each host CPU, so its monotonic timer
 * waits what is left divided by the CPUs, and rings again for the rest.
 */
#ifndef HWPERFD_OVERFLOW_TIMER_H
#define HWPERFD_OVERFLOW_TIMER_H

#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define OVF_NEAR_NS 20000000LL	/* closer than this: the monotonic timer */
#define OVF_EARLY_NS 10000000LL	/* the CPU-clock timer rings this long before the instant */
#define OVF_LEAD_NS 60000LL	/* the monotonic timer rings this long before it (its signal's usual lag) */
#define OVF_MIN_NS 50000LL	/* and no sooner than this after it is armed: the program runs between looks */
#define OVF_STEP_NS 2000000LL	/* a task-clock event that drops rings in the kernel rings this often */
#define OVF_WAKE_NS 100000LL	/* and this often near the instant: its first ring after a sleep says the thread runs */
#define OVF_SLEEPS 3		/* waits it slept through in a row: the CPU clock's timer */
#define OVF_WALL 1		/* sival_int of each timer's signal: the thread's */
#define OVF_CPU 2
#define OVF_PROC_WALL 3		/* the process's (OVF_PROCESS) */
#define OVF_PROC_CPU 4

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

struct ovf_timer {
    pid_t pid;				/* the process that made the timers (a forked child has none) */
    timer_t wall, cpu;
    volatile sig_atomic_t fd;		/* what ovf_look calls on; -1: disarmed */
    int sig;				/* the overflow's signal, held back while the look runs */
    volatile long long instant;		/* the CPU clock at the nearest overflow */
    volatile unsigned gen;		/* bumped by every arm, hold and disarm */
    long long armed_cpu, armed_wall;	/* when the monotonic timer was armed */
    long long armed_nvcsw;		/* and the context switches by then (ovf_nvcsw) */
    int cpu_armed;
    int perf;				/* the thread's task-clock event (its CPU-clock timer), or -1 */
    int perf_halves;			/* it drops rings in the kernel: ring at halves, OVF_STEP_NS at most */
    int slept;				/* waits in a row it slept through */
    clockid_t clock;			/* the CPU clock: the thread's, or the process's */
    int who;				/* getrusage's RUSAGE_THREAD or RUSAGE_SELF */
    long long cpus;			/* CPU ns per wall ns at most: 1, or the host's CPUs */
};

static __thread struct ovf_timer ovf_self = { .fd = -1, .perf = -1, .clock = CLOCK_THREAD_CPUTIME_ID,
					      .who = RUSAGE_THREAD, .cpus = 1 };
#ifdef OVF_PROCESS
static struct ovf_timer ovf_proc = { .fd = -1, .perf = -1, .clock = CLOCK_PROCESS_CPUTIME_ID, .who = RUSAGE_SELF,
				     .cpus = 1 };
#endif
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

/* Context switches (the thread's, or the process's): voluntary in the low
   half, involuntary above.  It slept (blocked) when the voluntary ones
   grew; it waited for a CPU when the others did. */
static long long ovf_nvcsw(const struct ovf_timer *t)
{
    struct rusage ru;

    return getrusage(t->who, &ru) == 0 ? (long long)ru.ru_nvcsw | (long long)ru.ru_nivcsw << 32 : 0;
}

static void ovf_set(timer_t timer, long long ns, int flags)
{
    struct itimerspec it;

    memset(&it, 0, sizeof it);
    it.it_value.tv_sec = ns / 1000000000LL;
    it.it_value.tv_nsec = ns % 1000000000LL;
    timer_settime(timer, flags, &it, NULL);
}

/* Arm for the instant, from CPU time `now`; `idle`: it ran little of the
   last wait, so the CPU clock's timer, which costs nothing while it does
   not run. */
static void ovf_schedule(struct ovf_timer *t, long long now, int idle)
{
    long long left = t->instant - now;

    if (left > OVF_NEAR_NS || idle) {
	long long at = left > OVF_EARLY_NS ? t->instant - OVF_EARLY_NS : t->instant;

	if (t->perf >= 0) {
	    unsigned long long period = at - now > OVF_MIN_NS ? (unsigned long long)(at - now) : OVF_MIN_NS;

	    if (t->perf_halves && period / 2 >= OVF_MIN_NS) {
		unsigned long long step = left > OVF_NEAR_NS ? OVF_STEP_NS : OVF_WAKE_NS;

		period = period / 2 < step ? period / 2 : step;
	    }
	    ioctl(t->perf, PERF_EVENT_IOC_PERIOD, &period);
	    if (!t->cpu_armed)
		ioctl(t->perf, PERF_EVENT_IOC_ENABLE, 0);
	} else {
	    ovf_set(t->cpu, at, TIMER_ABSTIME);
	}
	t->cpu_armed = 1;
	return;
    }
    /* Near: the monotonic timer alone (a task-clock event would ring on
       every period of the rest). */
    if (t->perf >= 0 && t->cpu_armed) {
	ioctl(t->perf, PERF_EVENT_IOC_DISABLE, 0);
	t->cpu_armed = 0;
    }
    t->armed_cpu = now;
    t->armed_wall = ovf_clock(CLOCK_MONOTONIC);
    t->armed_nvcsw = ovf_nvcsw(t);
    left = (left - OVF_LEAD_NS) / t->cpus;
    ovf_set(t->wall, left > OVF_MIN_NS ? left : OVF_MIN_NS, 0);
}

static void ovf_ring(int sig, siginfo_t *si, void *uc)
{
    int saved = errno, fd, which;
    unsigned gen;
    struct ovf_timer *t = &ovf_self;
    long long now;

    (void)sig; (void)uc;
    if (si == NULL)
	goto out;
    if (si->si_code == POLL_IN && t->perf >= 0 && si->si_fd == t->perf)
	which = OVF_CPU;	/* the task-clock event's (F_SETSIG) */
    else if (si->si_code == SI_TIMER)
	which = si->si_value.sival_int;
    else
	goto out;
#ifdef OVF_PROCESS
    if (which == OVF_PROC_WALL || which == OVF_PROC_CPU) {
	t = &ovf_proc;
	which -= OVF_PROC_WALL - OVF_WALL;
    }
#endif
    if (t->pid != getpid())
	goto out;
    if (which == OVF_CPU) {
	/* Spent; the task-clock event would ring again each period: off
	   until armed again, even while a call holds the timer. */
	if (t->perf >= 0)
	    ioctl(t->perf, PERF_EVENT_IOC_DISABLE, 0);
	t->cpu_armed = 0;
    }
    fd = t->fd;
    if (fd < 0)
	goto out;
    gen = t->gen;
    now = ovf_clock(t->clock);
    if (which == OVF_WALL && now < t->instant) {
	long long ran = now - t->armed_cpu, waited = ovf_clock(CLOCK_MONOTONIC) - t->armed_wall;
	/* It slept most of the wait, not merely waited for a CPU (a busy
	   machine gives it a small share, and the CPU clock's timer would be
	   a tick late every time then): it blocked, and was never preempted;
	   and so OVF_SLEEPS waits in a row (one call that waited long for a
	   busy daemon - the program's overflow handler reading the counters
	   - is not a sleep). */
	long long switches = ran * 32 < waited ? ovf_nvcsw(t) : t->armed_nvcsw;
	int slept = (switches & 0xffffffffLL) != (t->armed_nvcsw & 0xffffffffLL) && switches >> 32 == t->armed_nvcsw >> 32;
	int idle;

	t->slept = slept ? t->slept + 1 : 0;
	idle = t->slept >= OVF_SLEEPS;

	if (idle || t->instant - now > 2 * OVF_LEAD_NS) {
	    ovf_schedule(t, now, idle);
	    goto out;
	}
	/* Rung the lead early, as meant, while it runs: its own CPU time up
	   to the instant is what the program would have run.  A signal
	   taken meanwhile may arm again (the overflow's own handler, when
	   the daemon's look found it first, restarts the counters on the
	   same file): that arming times itself, and waiting here for its
	   instant would keep the program from running a whole period. */
	while (now < t->instant && t->gen == gen)
	    now = ovf_clock(t->clock);
	if (t->gen != gen)
	    goto out;
    }
    if (now >= t->instant) {
	sigset_t hold;

	/* One look an instant: the process's two timers may ring in two
	   threads at once. */
	if (!__atomic_compare_exchange_n(&t->fd, &fd, -1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
	    goto out;
	/* The overflow's signal waits until this handler returns, so that
	   the program's handler sees the program's own context (a sampler
	   takes the interrupted PC from it), not this one's. */
	if (t->sig > 0) {
	    sigemptyset(&hold);
	    sigaddset(&hold, t->sig);
	    pthread_sigmask(SIG_BLOCK, &hold, NULL);
	}
	ovf_look(fd);
    } else if (!t->cpu_armed) {
	ovf_schedule(t, now, 0);
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
	if (ovf_self.perf >= 0)
	    close(ovf_self.perf);
	ovf_self.perf = -1;
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

/* The thread's task-clock event, off, signalling the thread itself; -1
   where perf_event_open is not allowed (then the POSIX CPU-clock timer).
   `halves`: it may not count kernel time, so it drops rings there. */
static int ovf_perf_open(int *halves)
{
    struct perf_event_attr attr;
    struct f_owner_ex owner = { F_OWNER_TID, (pid_t)syscall(SYS_gettid) };
    int fd = -1, fl;
    const char *env = getenv("HWPERFD_OVERFLOW_PERF");

    if (env != NULL && strcmp(env, "0") == 0)
	return -1;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.sample_period = 1000000000ULL;
    attr.disabled = 1;
    attr.exclude_hv = 1;
    for (*halves = 0; *halves < 2 && fd < 0; ++*halves) {
	attr.exclude_kernel = (unsigned)*halves;
	fd = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    }
    --*halves;
    if (fd < 0)
	return -1;
    if (fcntl(fd, F_SETOWN_EX, &owner) < 0 || fcntl(fd, F_SETSIG, OVF_SIGNAL) < 0
	|| (fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl | O_ASYNC) < 0) {
	close(fd);
	return -1;
    }
    return fd;
}

/* A timer pair, made on first use (again in a forked child): the thread's
   signal that thread; the process's, any of its threads. */
static int ovf_ready(struct ovf_timer *t)
{
    struct sigevent ev;
    pid_t pid;
    int base = OVF_WALL;

    pthread_once(&ovf_once, ovf_install);
    if (!ovf_on)
	return 0;
    pid = getpid();
    if (t->pid == pid)
	return 1;
    memset(&ev, 0, sizeof ev);
    ev.sigev_signo = OVF_SIGNAL;
    if (t->clock == CLOCK_THREAD_CPUTIME_ID) {
	ev.sigev_notify = SIGEV_THREAD_ID;
	ev.sigev_notify_thread_id = (pid_t)syscall(SYS_gettid);
    } else {
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	ev.sigev_notify = SIGEV_SIGNAL;
	base = OVF_WALL + 2;
	t->cpus = n > 1 ? n : 1;
    }
    ev.sigev_value.sival_int = base;
    if (timer_create(CLOCK_MONOTONIC, &ev, &t->wall) < 0)
	return 0;
    ev.sigev_value.sival_int = base + 1;
    if (timer_create(t->clock, &ev, &t->cpu) < 0) {
	timer_delete(t->wall);
	return 0;
    }
    if (t->perf >= 0)
	close(t->perf);	/* a forked child's copy of its parent's */
    t->perf = t->clock == CLOCK_THREAD_CPUTIME_ID ? ovf_perf_open(&t->perf_halves) : -1;
    t->pid = pid;
    t->cpu_armed = 0;
    if (t == &ovf_self)
	pthread_setspecific(ovf_key, t);	/* any non-NULL value: the destructor runs */
    return 1;
}

/* A call that changes what overflows is on its way: a ring meanwhile looks
   at nothing, and a look's answer from before it is not taken. */
static void ovf_hold_on(struct ovf_timer *t)
{
    t->fd = -1;
    t->gen++;
}

/* Nothing to time: both timers off. */
static void ovf_disarm_on(struct ovf_timer *t)
{
    ovf_hold_on(t);
    if (t->pid == getpid()) {
	ovf_set(t->wall, 0, 0);
	if (t->cpu_armed && t->perf >= 0)
	    ioctl(t->perf, PERF_EVENT_IOC_DISABLE, 0);
	else if (t->cpu_armed)
	    ovf_set(t->cpu, 0, 0);
	t->cpu_armed = 0;
    }
}

/* The daemon said `left` CPU ns remain before the nearest overflow of what
   `fd` counts, signalled with `sig`; `none`: nothing can overflow.  The
   instant is counted from the CPU clock after the call returned: a few us
   late (the return), where from before the call it would be as early (the
   way in), and a look there would find nothing and look again. */
static void ovf_arm_from(struct ovf_timer *t, int fd, int sig, unsigned long long left, int none, long long from)
{
    if (none || left > (1ULL << 62)) {
	if (t->fd == fd || t->fd < 0)
	    ovf_disarm_on(t);
	return;
    }
    if (!ovf_ready(t))
	return;
    long long now = ovf_clock(t->clock);

    ovf_hold_on(t);
    t->slept = 0;
    t->sig = sig;
    t->instant = (from > 0 ? from : now) + (long long)left;
    t->fd = fd;
    ovf_schedule(t, now, 0);
}

static void ovf_arm_on(struct ovf_timer *t, int fd, int sig, unsigned long long left, int none)
{
    ovf_arm_from(t, fd, sig, left, none, 0);
}

/* A look's answer (`gen`: t->gen before its call): taken unless a call made
   meanwhile - the overflow's handler, run as the look returned, resumed the
   counters - armed or disarmed since.  `from`: the CPU clock the answer
   counts from (0: now, after the call). */
static void ovf_answer_on(struct ovf_timer *t, int fd, int sig, unsigned gen, unsigned long long left, int none,
			  long long from)
{
    if (gen == t->gen)
	ovf_arm_from(t, fd, sig, left, none, from);
}

/* The thread's own counters (libperfctr, libcpc). */
static __attribute__((unused)) void ovf_hold(void)
{
    ovf_hold_on(&ovf_self);
}

static __attribute__((unused)) void ovf_disarm(void)
{
    ovf_disarm_on(&ovf_self);
}

static __attribute__((unused)) void ovf_arm(int fd, int sig, unsigned long long left, int none)
{
    ovf_arm_on(&ovf_self, fd, sig, left, none);
}

static __attribute__((unused)) void ovf_answer(int fd, int sig, unsigned gen, unsigned long long left, int none)
{
    ovf_answer_on(&ovf_self, fd, sig, gen, left, none, 0);
}

#endif
