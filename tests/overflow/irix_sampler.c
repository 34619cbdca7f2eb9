/* IRIX overflow thresholds as a sampling profiler uses them
 * (r10k_counters(5)): cycles (event 0, slot 0) in every mode, with the
 * interrupt enable bit, a threshold of PERIOD and SIGUSR1 as hwp_ovflw_sig
 * (user mode alone when not root: kernel mode needs root).
 * IRIX counters count on through an overflow: nothing is restarted.  Run
 * under hwperfd-run, which sends "/proc/<pid>" to the mount.
 *
 *   irix_sampler process PERIOD CPU_MS MHZ [THREADS]
 *	The process's counters; it burns CPU_MS of CPU time (THREADS threads
 *	at once, 1 if not given: the counters count them all, and any of
 *	them may take the signal).  Prints
 *	"signals=N counted=C cpu_ns=T", then per signal how far the count
 *	read in the handler was past the latest overflow it had crossed
 *	("past" counts) and how much of the process's CPU time went between
 *	that overflow and the handler ("late" ns).
 *
 *   irix_sampler threads CPU_MS MHZ PERIOD0 PERIOD1 PERIOD2 PERIOD3
 *	Four threads, each with counters of its own (a thread's own
 *	"/proc/<getpid()>", as each member of an IRIX share group had) and
 *	its own period, each burning CPU_MS of its own CPU time.  Prints
 *	"thread=I period=P signals=N sum=S foreign=F cpu_ns=T" a thread (F:
 *	signals that came before the thread's own count had reached them),
 *	then per signal "late=I NS", then "stray=M": signals taken by the
 *	main thread, which counts nothing.
 *
 *   irix_sampler hold PERIOD0 PERIOD1 PERIOD2 PERIOD3
 *	For the manual clock: the four threads set up as above and wait;
 *	prints "tid=I TID" a thread, then "ready"; each line read then
 *	prints "thread=I signals=N foreign=F" a thread and "stray=M", until
 *	the input ends.
 *
 *   irix_sampler release CYCLES PERIOD MHZ
 *	The process's counters, enabled and released CYCLES times: each
 *	time it burns between half a period and three periods of CPU time
 *	(its own pseudo-random draw), releases, and burns 2 ms more.  Prints
 *	"signals=N after=A crossed=C": A of the N signals came after a
 *	release had returned (IRIX sent each at its overflow's interrupt,
 *	before any later call took effect); C overflows the released counts
 *	had crossed.
 *
 *   irix_sampler sysrelease CYCLES PERIOD MHZ CPUS
 *	(root) The same with syssgi's system mode (HWPERF_ENSYSCNTRS, the
 *	counts read by HWPERF_GET_SYSCNTRS just before each
 *	HWPERF_RELSYSCNTRS); C is the fewest overflows the counters of the
 *	daemon's CPUS emulated CPUs together may have crossed.
 *
 *   irix_sampler reuse CPU_MS
 *	(root) A thread of a child process counts CPU_MS of its own CPU time
 *	on its own file and ends with the child; a thread of this process is
 *	then given its tid (ns_last_pid) and does the same.  Prints
 *	"reused=R sum=S cpu_ns=T" for the second. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <sys/procfs.h>
#include <sys/hwperftypes.h>
#include <sys/hwperfmacros.h>
#include <sys/syssgi.h>
#include <time.h>
#include <unistd.h>

#define NTHREADS 4
#define MAX_SIGNALS 100000

struct sampler {
    pthread_t thread;
    int fd, index, tid;
    clockid_t clock;		/* the CPU clock its counters count */
    long long period, begin_ns;
    long signals;		/* both taken atomically: a process's signal may come to two threads at once */
    long foreign;
    unsigned long long sum;
    unsigned long long reached;	/* the highest count a handler read: the
				   counters count on between the last read
				   and the release, whose overflow still
				   signals */
    long long cpu_ns;
    long long *past, *late;
};

static __thread struct sampler *self;
static struct sampler *process_sampler;	/* the process's counters: any thread's signal */
static struct sampler samplers[NTHREADS];
static volatile long stray;
static double ns_per_cycle;
static long long cpu_ms;

static long long clock_ns(clockid_t clock)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static unsigned long long cycles(struct sampler *s)
{
    hwperf_cntr_t counts;

    if (ioctl(s->fd, PIOCGETEVCTRS, &counts) < 0) {
	perror("PIOCGETEVCTRS");
	abort();
    }
    return counts.hwp_evctr[0];
}

static void on_overflow(int sig, siginfo_t *si, void *uc)
{
    struct sampler *s = self != NULL ? self : process_sampler;
    long long now;
    unsigned long long count;
    long n;

    (void)sig; (void)si; (void)uc;
    if (s == NULL) {
	++stray;
	return;
    }
    now = clock_ns(s->clock);
    count = cycles(s);
    /* A process's signal may run this in two threads at once. */
    for (unsigned long long seen = s->reached; count > seen
	 && !__atomic_compare_exchange_n(&s->reached, &seen, count, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);)
	;
    n = __atomic_add_fetch(&s->signals, 1, __ATOMIC_RELAXED);
    if (count < (unsigned long long)(n * s->period))
	__atomic_add_fetch(&s->foreign, 1, __ATOMIC_RELAXED);
    if (n <= MAX_SIGNALS) {
	/* Against the latest overflow the count has crossed: a signal found
	   late may have absorbed the one before. */
	long long crossed = (long long)count / s->period * s->period;

	s->past[n - 1] = (long long)count - crossed;
	s->late[n - 1] = now - s->begin_ns - (long long)(crossed * ns_per_cycle);
    }
}

/* Every mode for root; user mode alone otherwise (kernel mode needs root). */
static int modes(void)
{
    return geteuid() == 0 ? HWPERF_CNTEN_U | HWPERF_CNTEN_K | HWPERF_CNTEN_E : HWPERF_CNTEN_U;
}

static void burn(clockid_t clock, long long until)
{
    volatile unsigned long spin = 0;

    while (clock_ns(clock) < until)
	for (int i = 0; i < 1000; ++i)
	    ++spin;
}

/* Opens the caller's own "/proc/<getpid()>" (a thread's own under
   hwperfd-run) and samples cycles on it at the sampler's period. */
static void enable(struct sampler *s)
{
    hwperf_profevctrarg_t args;
    char path[32];

    s->past = calloc(MAX_SIGNALS, sizeof *s->past);
    s->late = calloc(MAX_SIGNALS, sizeof *s->late);
    memset(&args, 0, sizeof args);
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_mode = modes();
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_ie = 1;
    args.hwp_ovflw_freq[0] = (int)s->period;
    args.hwp_ovflw_sig = SIGUSR1;
    sprintf(path, "/proc/%05d", (int)getpid());
    if (s->past == NULL || s->late == NULL || (s->fd = open(path, O_RDWR)) < 0) {
	perror(path);
	exit(1);
    }
    s->begin_ns = clock_ns(s->clock);
    self = s;
    if (ioctl(s->fd, PIOCENEVCTRS, &args) < 0) {
	perror("PIOCENEVCTRS");
	exit(1);
    }
}

static void *run(void *arg)
{
    struct sampler *s = arg;

    enable(s);
    burn(s->clock, s->begin_ns + cpu_ms * 1000000LL);
    s->sum = cycles(s);
    s->cpu_ns = clock_ns(s->clock) - s->begin_ns;
    if (ioctl(s->fd, PIOCRELEVCTRS) < 0)
	perror("PIOCRELEVCTRS");
    self = NULL;
    close(s->fd);
    return NULL;
}

static long long burn_until;

static void *burner(void *arg)
{
    (void)arg;
    burn(CLOCK_PROCESS_CPUTIME_ID, burn_until);
    return NULL;
}

/* The process's counters, with `threads` threads burning its CPU time. */
static void run_process(struct sampler *s, int threads)
{
    pthread_t helpers[16];
    int n = threads < 1 ? 1 : threads > 16 ? 16 : threads;

    enable(s);
    process_sampler = s;
    burn_until = s->begin_ns + cpu_ms * 1000000LL;
    for (int i = 1; i < n; ++i)
	if (pthread_create(&helpers[i], NULL, burner, NULL) != 0)
	    exit(1);
    burn(s->clock, burn_until);
    for (int i = 1; i < n; ++i)
	pthread_join(helpers[i], NULL);
    s->sum = cycles(s);
    s->cpu_ns = clock_ns(s->clock) - s->begin_ns;
    if (ioctl(s->fd, PIOCRELEVCTRS) < 0)
	perror("PIOCRELEVCTRS");
    self = NULL;
    process_sampler = NULL;
    close(s->fd);
}

static pthread_barrier_t enabled;
static pthread_mutex_t quit_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t quit_cond = PTHREAD_COND_INITIALIZER;
static int quit;

/* The four threads, on the periods `periods` names. */
static int start(char **periods, void *(*body)(void *))
{
    for (int i = 0; i < NTHREADS; ++i) {
	samplers[i].index = i;
	samplers[i].period = atoll(periods[i]);
	samplers[i].clock = CLOCK_THREAD_CPUTIME_ID;
	if (pthread_create(&samplers[i].thread, NULL, body, &samplers[i]) != 0)
	    return -1;
    }
    return 0;
}

static void *held(void *arg)
{
    struct sampler *s = arg;

    enable(s);
    printf("tid=%d %d\n", s->index, (int)gettid());
    fflush(stdout);
    pthread_barrier_wait(&enabled);
    pthread_mutex_lock(&quit_lock);
    while (!quit)
	pthread_cond_wait(&quit_cond, &quit_lock);
    pthread_mutex_unlock(&quit_lock);
    return NULL;
}

static int hold(int argc, char **argv)
{
    char line[64];

    if (argc != 2 + NTHREADS)
	return 2;
    pthread_barrier_init(&enabled, NULL, NTHREADS + 1);
    if (start(argv + 2, held) < 0)
	return 1;
    pthread_barrier_wait(&enabled);
    puts("ready");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
	for (int i = 0; i < NTHREADS; ++i)
	    printf("thread=%d signals=%ld foreign=%ld\n", i, samplers[i].signals, samplers[i].foreign);
	printf("stray=%ld\n", (long)stray);
	fflush(stdout);
    }
    pthread_mutex_lock(&quit_lock);
    quit = 1;
    pthread_cond_broadcast(&quit_cond);
    pthread_mutex_unlock(&quit_lock);
    for (int i = 0; i < NTHREADS; ++i)
	pthread_join(samplers[i].thread, NULL);
    return 0;
}

static void *count_and_end(void *arg)
{
    struct sampler *s = arg;

    s->tid = (int)gettid();
    if (s->period == 0)
	return NULL;	/* not the tid sought: ends at once */
    enable(s);
    burn(s->clock, s->begin_ns + cpu_ms * 1000000LL);
    s->sum = cycles(s);
    s->cpu_ns = clock_ns(s->clock) - s->begin_ns;
    ioctl(s->fd, PIOCRELEVCTRS);
    close(s->fd);
    return NULL;
}

static int reuse(char **argv)
{
    struct sampler *first = &samplers[0], *second = &samplers[1];
    int reused = 0, tid_pipe[2];

    cpu_ms = atoll(argv[2]);
    first->period = second->period = 0x7fffffff;	/* never overflows: counts alone */
    first->clock = second->clock = CLOCK_THREAD_CPUTIME_ID;
    /* The first thread is another process's: this one has no counters
       when its second thread is made (the daemon hears nothing of it). */
    if (pipe(tid_pipe) < 0)
	return 1;
    if (fork() == 0) {
	if (pthread_create(&first->thread, NULL, count_and_end, first) != 0)
	    _exit(1);
	pthread_join(first->thread, NULL);
	_exit(write(tid_pipe[1], &first->tid, sizeof first->tid) != sizeof first->tid);
    }
    if (read(tid_pipe[0], &first->tid, sizeof first->tid) != sizeof first->tid)
	return 1;
    wait(NULL);
    for (int tries = 0; tries < 200 && !reused; ++tries) {
	FILE *last = fopen("/proc/sys/kernel/ns_last_pid", "w");
	pthread_t probe;
	struct sampler other = *second;

	if (last == NULL)
	    return perror("ns_last_pid"), 1;
	fprintf(last, "%d", first->tid - 1);
	fclose(last);
	other.period = 0;
	if (pthread_create(&probe, NULL, count_and_end, &other) != 0)
	    return 1;
	pthread_join(probe, NULL);
	if (other.tid != first->tid)
	    continue;
	/* the tid is free again and the next clone takes it, as this one did */
	last = fopen("/proc/sys/kernel/ns_last_pid", "w");
	fprintf(last, "%d", first->tid - 1);
	fclose(last);
	if (pthread_create(&second->thread, NULL, count_and_end, second) != 0)
	    return 1;
	pthread_join(second->thread, NULL);
	reused = second->tid == first->tid;
    }
    printf("reused=%d sum=%llu cpu_ns=%lld\n", reused, second->sum, second->cpu_ns);
    return 0;
}

static volatile sig_atomic_t released;
static volatile long release_signals, after_release;

static void on_release_test(int sig)
{
    (void)sig;
    ++release_signals;
    if (released)
	++after_release;
}

static int release_cycles(char **argv)
{
    long cycles = atol(argv[2]);
    long long period = atoll(argv[3]);
    double ns_per = 1000.0 / atof(argv[4]);
    unsigned seed = 12345;
    struct sigaction sa;
    hwperf_profevctrarg_t args;
    hwperf_cntr_t counts;
    long long crossed = 0;
    char path[32];
    int fd;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_release_test;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    memset(&args, 0, sizeof args);
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_mode = modes();
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_ie = 1;
    args.hwp_ovflw_freq[0] = (int)period;
    args.hwp_ovflw_sig = SIGUSR1;
    sprintf(path, "/proc/%05d", (int)getpid());
    if ((fd = open(path, O_RDWR)) < 0)
	return perror(path), 1;
    for (long i = 0; i < cycles; ++i) {
	long long burn_ns = (long long)(period * ns_per) * (5 + (long long)(rand_r(&seed) % 26)) / 10;

	released = 0;
	if (ioctl(fd, PIOCENEVCTRS, &args) < 0)
	    return perror("PIOCENEVCTRS"), 1;
	burn(CLOCK_PROCESS_CPUTIME_ID, clock_ns(CLOCK_PROCESS_CPUTIME_ID) + burn_ns);
	if (ioctl(fd, PIOCRELEVCTRS) < 0)
	    return perror("PIOCRELEVCTRS"), 1;
	released = 1;
	/* Released counts stay readable: the overflows this round crossed. */
	if (ioctl(fd, PIOCGETEVCTRS, &counts) < 0)
	    return perror("PIOCGETEVCTRS"), 1;
	crossed += counts.hwp_evctr[0] / period;
	burn(CLOCK_PROCESS_CPUTIME_ID, clock_ns(CLOCK_PROCESS_CPUTIME_ID) + 2000000);
    }
    close(fd);
    printf("signals=%ld after=%ld crossed=%lld\n", (long)release_signals, (long)after_release, crossed);
    return 0;
}

/* (root) As release_cycles, with syssgi's system mode: cycles on every
   CPU, SIGUSR1 to this process at each CPU's threshold.  The counts are
   read just before each release; a CPU's counter crosses its own
   thresholds, so of the sum's crossings one a CPU may be short of one. */
static int sysrelease_cycles(char **argv)
{
    long cycles = atol(argv[2]);
    long long period = atoll(argv[3]);
    double ns_per = 1000.0 / atof(argv[4]);
    long ncpus = atol(argv[5]); /* the emulated CPUs (hwperfd --cpus), not the host's */
    unsigned seed = 54321;
    struct sigaction sa;
    hwperf_profevctrarg_t args;
    hwperf_cntr_t counts;
    long long crossed = 0;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_release_test;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    memset(&args, 0, sizeof args);
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_mode = HWPERF_CNTEN_U | HWPERF_CNTEN_K;
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_ie = 1;
    args.hwp_ovflw_freq[0] = (int)period;
    args.hwp_ovflw_sig = SIGUSR1;
    for (long i = 0; i < cycles; ++i) {
	long long burn_ns = (long long)(period * ns_per) * (5 + (long long)(rand_r(&seed) % 26)) / 10;
	long long whole;

	released = 0;
	if (syssgi(SGI_EVENTCTR, HWPERF_ENSYSCNTRS, &args) < 0)
	    return perror("HWPERF_ENSYSCNTRS"), 1;
	burn(CLOCK_PROCESS_CPUTIME_ID, clock_ns(CLOCK_PROCESS_CPUTIME_ID) + burn_ns);
	if (syssgi(SGI_EVENTCTR, HWPERF_GET_SYSCNTRS, &counts) < 0)
	    return perror("HWPERF_GET_SYSCNTRS"), 1;
	if (syssgi(SGI_EVENTCTR, HWPERF_RELSYSCNTRS) < 0)
	    return perror("HWPERF_RELSYSCNTRS"), 1;
	released = 1;
	whole = (long long)(counts.hwp_evctr[0] / period);
	crossed += whole > ncpus - 1 ? whole - (ncpus - 1) : 0;
	burn(CLOCK_PROCESS_CPUTIME_ID, clock_ns(CLOCK_PROCESS_CPUTIME_ID) + 2000000);
    }
    printf("signals=%ld after=%ld crossed=%lld\n", (long)release_signals, (long)after_release, crossed);
    return 0;
}

int main(int argc, char **argv)
{
    struct sigaction sa;
    int threads;

    if (argc < 2)
	return 2;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_overflow;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    if (strcmp(argv[1], "hold") == 0)
	return hold(argc, argv);
    if (strcmp(argv[1], "reuse") == 0 && argc == 3)
	return reuse(argv);
    if (strcmp(argv[1], "release") == 0 && argc == 5)
	return release_cycles(argv);
    if (strcmp(argv[1], "sysrelease") == 0 && argc == 6 && atol(argv[5]) > 0)
	return sysrelease_cycles(argv);
    threads = strcmp(argv[1], "threads") == 0;
    if (threads ? argc != 4 + NTHREADS : argc != 5 && argc != 6)
	return 2;
    if (!threads) {
	struct sampler *s = &samplers[0];

	s->period = atoll(argv[2]);
	cpu_ms = atoll(argv[3]);
	ns_per_cycle = 1000.0 / atof(argv[4]);
	s->clock = CLOCK_PROCESS_CPUTIME_ID;
	run_process(s, argc == 6 ? atoi(argv[5]) : 1);
	printf("signals=%ld counted=%llu cpu_ns=%lld reached=%llu\n", s->signals, s->sum, s->cpu_ns,
	       s->sum > s->reached ? s->sum : s->reached);
	for (long i = 0; i < s->signals && i < MAX_SIGNALS; ++i)
	    printf("%lld %lld\n", s->past[i], s->late[i]);
	return 0;
    }
    cpu_ms = atoll(argv[2]);
    ns_per_cycle = 1000.0 / atof(argv[3]);
    if (start(argv + 4, run) < 0)
	return 1;
    for (int i = 0; i < NTHREADS; ++i)
	pthread_join(samplers[i].thread, NULL);
    for (int i = 0; i < NTHREADS; ++i) {
	struct sampler *s = &samplers[i];

	printf("thread=%d period=%lld signals=%ld sum=%llu foreign=%ld cpu_ns=%lld reached=%llu\n", i, s->period,
	       s->signals, s->sum, s->foreign, s->cpu_ns, s->sum > s->reached ? s->sum : s->reached);
    }
    for (int i = 0; i < NTHREADS; ++i)
	for (long j = 0; j < samplers[i].signals && j < MAX_SIGNALS; ++j)
	    printf("late=%d %lld\n", i, samplers[i].late[j]);
    printf("stray=%ld\n", (long)stray);
    return 0;
}
