/* Event-counter profiling, as IRIX profilers did it (r10k_counters(5),
 * "Syssgi Commands": HWPERF_PROFENABLE, "sprofil-like profiling using the
 * performance counters rather than the clock"): every hwp_ovflw_freq[i]
 * events the PC is sampled into sprofil(2) histograms.  syssgi() comes from
 * libhwperf (lib/irix/syssgi.c).
 *
 * Three functions, hot_a, hot_b and hot_c, sit side by side.  The regions
 * passed are, in this order (not sorted, as sprofil allows): hot_b's text at
 * half scale (0x8000: one 16-bit bucket per 4 bytes), hot_a's text at full
 * scale (0x10000: one bucket per 2 bytes), and an overflow bin (pr_off 0,
 * pr_scale 2), which takes the ticks of hot_c and of everything else.
 *
 * Usage: evc_profile [-t THRESHOLD] STEP ...
 * Each step prints one line, "NAME: RESULT ERRNO ..." (ERRNO "-" on success):
 *   enable:MODES  HWPERF_PROFENABLE: slot 0 cycles in MODES (letters u k x)
 *                 every THRESHOLD (default 200000) events; hwp_ovflw_sig is
 *                 SIGUSR1, which profiling never sends
 *   badbase:MODES the same, but hot_a's buckets are on an unmapped page
 *   off           HWPERF_PROFENABLE with every pr_scale 0: profiling stops
 *   susp, cont    HWPERF_PROF_CTR_SUSP, HWPERF_PROF_CTR_CONT
 *   a:N, b:N, c:N loop in hot_X until the ticks recorded (all buckets and
 *                 the bin) add up to N, or SIGUSR2 comes; then "X: TOTAL".
 *                 A second thread, which takes no ticks, prints "spinning X
 *                 N" once hot_X runs, so that a tick sent then lands in it
 *   counts        "counts: A B BIN USR1": ticks in hot_a's and hot_b's buckets,
 *                 in the bin, and SIGUSR1 signals received
 *   buckets       "buckets: OK" if hot_a's and hot_b's ticks lie in buckets
 *                 that map inside the function (always, by construction)
 *   bad:WHAT      a refused call: profcnt0, profcnt101, binfirst, nullprof,
 *                 badprof, nullargs, badevent, negthresh, badsig, kmode
 *   wait          print "waiting", read a line from stdin
 *   exec          print "execing", then become "sleep 0.3" (exec(2) ends
 *                 profiling: the new image must get no tick)
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/hwperfmacros.h>
#include <sys/hwperftypes.h>
#include <sys/profil.h>
#include <sys/syssgi.h>
#include <unistd.h>

#define HOT __attribute__((noinline, section("evc_hot")))
#define BUCKETS 8192

extern char __start_evc_hot[], __stop_evc_hot[];

static unsigned short hist_a[BUCKETS], hist_b[BUCKETS], bin[1];
static volatile sig_atomic_t usr1, stop;
static volatile unsigned spin_no, entered_no, announced_no;	/* the announcer's handshake */
static volatile char spin_which;
static volatile unsigned long spin_n;
static unsigned threshold = 200000;
static struct prof regions[3];
static size_t len_a, len_b;

/* The ticks recorded so far; a macro so that the loops below stay in their
 * own function's text while they wait. */
#define TOTAL(sum)							\
	do {								\
		size_t i_;						\
		(sum) = ((volatile unsigned short *)bin)[0];		\
		for (i_ = 0; i_ < BUCKETS; i_++)			\
			(sum) += ((volatile unsigned short *)hist_a)[i_] \
			       + ((volatile unsigned short *)hist_b)[i_]; \
	} while (0)

HOT unsigned long hot_a(unsigned long n)
{
	unsigned long sum;
	/* Not a loop head at the entry: a PC equal to pr_off belongs to the region
	 * below (sprofil(2): the largest offset "less than" the PC). */
	__asm__ volatile("nop");
	entered_no = spin_no;
	do TOTAL(sum); while (sum < n && !stop);
	return sum;
}

HOT unsigned long hot_b(unsigned long n)
{
	unsigned long sum;
	/* Not a loop head at the entry: a PC equal to pr_off belongs to the region
	 * below (sprofil(2): the largest offset "less than" the PC). */
	__asm__ volatile("nop");
	entered_no = spin_no;
	do TOTAL(sum); while (sum < n && !stop);
	return sum;
}

HOT unsigned long hot_c(unsigned long n)
{
	unsigned long sum;
	/* Not a loop head at the entry: a PC equal to pr_off belongs to the region
	 * below (sprofil(2): the largest offset "less than" the PC). */
	__asm__ volatile("nop");
	entered_no = spin_no;
	do TOTAL(sum); while (sum < n && !stop);
	return sum;
}

static const char *
errname(int result, int err)
{
	static char buf[16];

	if (result >= 0)
		return "-";
	switch (err) {
	case EINVAL: return "EINVAL";
	case EPERM: return "EPERM";
	case EBUSY: return "EBUSY";
	case EFAULT: return "EFAULT";
	case E2BIG: return "E2BIG";
	case ENOTSUP: return "ENOTSUP";
	case ESRCH: return "ESRCH";
	}
	snprintf(buf, sizeof buf, "E%d", err);
	return buf;
}

/* Where a function's text ends: at the next function of the section. */
static size_t
length_of(char *f)
{
	char *fns[3] = {(char *)hot_a, (char *)hot_b, (char *)hot_c}, *end = __stop_evc_hot;
	int i;

	for (i = 0; i < 3; i++)
		if (fns[i] > f && fns[i] < end)
			end = fns[i];
	return (size_t)(end - f);
}

static void
request(hwperf_profevctrarg_t *args, const char *modes)
{
	int mode = 0;

	for (; *modes; modes++)
		mode |= *modes == 'u' ? HWPERF_CNTEN_U : *modes == 'k' ? HWPERF_CNTEN_K
		      : *modes == 'x' ? HWPERF_CNTEN_E : 0;
	memset(args, 0, sizeof *args);
	args->hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_mode = mode;
	args->hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_ie = 1;
	args->hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_ev = 0;	/* cycles */
	args->hwp_ovflw_freq[0] = (int)threshold;
	args->hwp_ovflw_sig = SIGUSR1;
}

static void
set_regions(void *base_a)
{
	len_a = length_of((char *)hot_a);
	len_b = length_of((char *)hot_b);
	regions[0].pr_base = hist_b;
	regions[0].pr_off = (__psunsigned_t)hot_b;
	regions[0].pr_size = (unsigned)((len_b / 2 + 1) & ~1u);	/* scale 1/2 */
	regions[0].pr_scale = 0x8000;
	regions[1].pr_base = base_a;
	regions[1].pr_off = (__psunsigned_t)hot_a;
	regions[1].pr_size = (unsigned)((len_a + 1) & ~1u);		/* scale 1 */
	regions[1].pr_scale = 0x10000;
	regions[2].pr_base = bin;
	regions[2].pr_off = 0;
	regions[2].pr_size = sizeof bin;
	regions[2].pr_scale = 0x0002;					/* overflow bin */
}

static unsigned long
sum(const unsigned short *h)
{
	unsigned long s = 0;
	size_t i;

	for (i = 0; i < BUCKETS; i++)
		s += h[i];
	return s;
}

static void
on_usr1(int sig)
{
	(void)sig;
	usr1++;
}

static void
on_usr2(int sig)
{
	(void)sig;
	stop = 1;
}

static int
bad(const char *what)
{
	hwperf_profevctrarg_t args;
	struct prof r[101];
	int r_;

	request(&args, "u");
	set_regions(hist_a);
	memset(r, 0, sizeof r);
	memcpy(r, regions, sizeof regions);
	errno = 0;
	if (strcmp(what, "profcnt0") == 0)
		r_ = syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, &args, r, 0);
	else if (strcmp(what, "profcnt101") == 0)
		r_ = syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, &args, r, 101);
	else if (strcmp(what, "binfirst") == 0) {
		struct prof swapped[3] = {regions[2], regions[0], regions[1]};
		r_ = syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, &args, swapped, 3);
	} else if (strcmp(what, "nullprof") == 0)
		r_ = syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, &args, (struct prof *)0, 3);
	else if (strcmp(what, "badprof") == 0)
		r_ = syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, &args, (struct prof *)8, 3);
	else if (strcmp(what, "nullargs") == 0)
		r_ = syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, (hwperf_profevctrarg_t *)0, r, 3);
	else if (strcmp(what, "badevent") == 0) {
		args.hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_ev = 16;	/* no such event on counter 0 */
		r_ = syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, &args, r, 3);
	} else if (strcmp(what, "negthresh") == 0) {
		args.hwp_ovflw_freq[0] = -5;
		r_ = syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, &args, r, 3);
	} else if (strcmp(what, "badsig") == 0) {
		args.hwp_ovflw_sig = 99;
		r_ = syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, &args, r, 3);
	} else if (strcmp(what, "kmode") == 0) {
		request(&args, "k");
		r_ = syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, &args, r, 3);
	} else {
		fprintf(stderr, "evc_profile: unknown bad:%s\n", what);
		return 2;
	}
	printf("bad:%s: %d %s\n", what, r_, errname(r_, errno));
	return 0;
}

/* The announcer: prints "spinning X N" once hot_X has started.  It blocks the
 * tick signal, so every tick interrupts the spinning thread. */
static void *
announcer(void *unused)
{
	unsigned seen = 0;
	sigset_t mask;

	(void)unused;
	sigemptyset(&mask);
	sigaddset(&mask, hwperf_profsignal());
	sigaddset(&mask, SIGUSR1);
	sigaddset(&mask, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	for (;;) {
		while (entered_no == seen)
			usleep(100);
		seen = entered_no;
		printf("spinning %c %lu\n", spin_which, spin_n);
		fflush(stdout);
		announced_no = seen;
	}
	return NULL;
}

static int
spin(char which, unsigned long n)
{
	unsigned long total;

	spin_which = which;
	spin_n = n;
	stop = 0;
	spin_no++;
	total = which == 'a' ? hot_a(n) : which == 'b' ? hot_b(n) : hot_c(n);
	while (announced_no != spin_no)
		usleep(100);
	printf("%c: %lu\n", which, total);
	return 0;
}

/* Every bucket with a tick maps back inside its function's text. */
static int
buckets_inside(void)
{
	size_t i;

	for (i = 0; i < BUCKETS; i++) {
		if (hist_a[i] && i * 2 >= len_a)
			return 0;
		if (hist_b[i] && i * 4 >= len_b + 2)
			return 0;
	}
	return 1;
}

static int
step(const char *s)
{
	hwperf_profevctrarg_t args;
	int r;

	if (strncmp(s, "enable:", 7) == 0 || strncmp(s, "badbase:", 8) == 0) {
		void *base = hist_a;
		if (s[0] == 'b') {
			long page = sysconf(_SC_PAGESIZE);
			base = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			munmap(base, (size_t)page);	/* gone: not the program's memory */
		}
		request(&args, strchr(s, ':') + 1);
		set_regions(base);
		errno = 0;
		r = syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, &args, regions, 3);
		printf("%.*s: %d %s\n", (int)(strchr(s, ':') - s), s, r, errname(r, errno));
	} else if (strcmp(s, "off") == 0) {
		struct prof none[1];
		memset(none, 0, sizeof none);
		request(&args, "u");
		r = syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, &args, none, 1);
		printf("off: %d %s\n", r, errname(r, errno));
	} else if (strcmp(s, "susp") == 0) {
		r = syssgi(SGI_EVENTCTR, HWPERF_PROF_CTR_SUSP);
		printf("susp: %d %s\n", r, errname(r, errno));
	} else if (strcmp(s, "cont") == 0) {
		r = syssgi(SGI_EVENTCTR, HWPERF_PROF_CTR_CONT);
		printf("cont: %d %s\n", r, errname(r, errno));
	} else if ((s[0] == 'a' || s[0] == 'b' || s[0] == 'c') && s[1] == ':') {
		return spin(s[0], strtoul(s + 2, NULL, 10));
	} else if (strcmp(s, "counts") == 0) {
		printf("counts: %lu %lu %u %d\n", sum(hist_a), sum(hist_b), bin[0], (int)usr1);
	} else if (strcmp(s, "buckets") == 0) {
		printf("buckets: %s\n", buckets_inside() ? "OK" : "OUTSIDE");
	} else if (strncmp(s, "bad:", 4) == 0) {
		return bad(s + 4);
	} else if (strcmp(s, "exec") == 0) {
		printf("execing\n");
		fflush(stdout);
		execlp("sleep", "sleep", "0.3", (char *)NULL);
		perror("exec sleep");
		return 4;
	} else if (strcmp(s, "wait") == 0) {
		char line[64];
		printf("waiting\n");
		fflush(stdout);
		if (!fgets(line, sizeof line, stdin))
			return 1;
	} else {
		fprintf(stderr, "evc_profile: unknown step %s\n", s);
		return 2;
	}
	fflush(stdout);
	return 0;
}

int
main(int argc, char **argv)
{
	pthread_t thread;
	int i = 1, rc;

	if (pthread_create(&thread, NULL, announcer, NULL) != 0)
		return 3;
	signal(SIGUSR1, on_usr1);
	signal(SIGUSR2, on_usr2);
	if (argc > 2 && strcmp(argv[1], "-t") == 0) {
		threshold = (unsigned)strtoul(argv[2], NULL, 10);
		i = 3;
	}
	for (; i < argc; i++)
		if ((rc = step(argv[i])) != 0)
			return rc;
	return 0;
}
