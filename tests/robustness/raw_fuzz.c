/*
 * raw_fuzz: random ioctls with raw bytes against hwperfd's files.
 *
 * Usage: raw_fuzz SEED ITERATIONS SECONDS [PATH...]
 * More paths are read from stdin, one per line, up to an empty line or EOF
 * (so that processes started together can fuzz each other's files); then it
 * runs ITERATIONS calls or SECONDS, whichever ends first.  A PATH whose name
 * is "control" is the control node, any other a process file.  Each iteration picks a file and one of:
 *   - a known command (PIOC* or HWIOC*, on either kind of file) with random
 *     bytes, or a random but plausible hwperf_profevctrarg_t (plus saved
 *     counts for HWPERFD_PIOCENEVCTRSEX); IRIX's pointer-carrying
 *     PIOCENEVCTRSEX/PIOCGETEVCTRLEX must be EFAULT;
 *   - a known command's type and number with another size or direction
 *     (what "truncated" or "oversized" means for FUSE, which copies
 *     _IOC_SIZE bytes): must be ENOTTY;
 *   - a random command number: must be ENOTTY (command numbers the VFS
 *     answers itself, before FUSE, are not drawn);
 *   - a monitored read (PIOCGETPREVCTRS, HWPERF_GET_SYSCNTRS,
 *     HWPERF_GET_CPUCNTRS): counts must not go backwards within one
 *     generation of one file and mode.
 * The buffer is always larger than the biggest _IOC_SIZE, so the kernel
 * never copies outside it.
 *
 * Prints "key value" lines: calls, ok, errno NAME N, broken NAME N, unexpected,
 * bad (EIO, ENOTCONN, ENOSYS, or EFAULT where the command does not allow it:
 * must be 0; "broken" splits it by errno), violations, reads, opened,
 * open-failed.  Catchable signals are ignored: hwperfd may send overflow
 * signals that a random request asked for (SIGKILL and SIGSTOP are never
 * asked for).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <sys/procfs.h>
#include <sys/syssgi.h>

#define MAXFILES 16
#define MAXKEYS 512
#define BUFSZ (16384 + 64)

enum node { PROC, CTL };
enum payload { P_NONE, P_ARG, P_REQ, P_OUT, P_CPU, P_REQEX };

struct command {
	const char *name;
	unsigned long cmd;
	enum node node;
	enum payload payload;
	int min_ok;		/* smallest successful result */
	int allowed[6];		/* errnos the page allows; 0 ends */
};

static const struct command commands[] = {
	{"PIOCENEVCTRS", PIOCENEVCTRS, PROC, P_REQ, 1, {EINVAL, EPERM, EBUSY, ESRCH}},
	{"PIOCRELEVCTRS", PIOCRELEVCTRS, PROC, P_NONE, 0, {EINVAL, EPERM, ESRCH}},
	{"PIOCGETEVCTRS", PIOCGETEVCTRS, PROC, P_OUT, 1, {EINVAL, EPERM, ESRCH}},
	{"PIOCGETPREVCTRS", PIOCGETPREVCTRS, PROC, P_OUT, 1, {EINVAL, EPERM, ESRCH}},
	{"PIOCGETEVCTRL", PIOCGETEVCTRL, PROC, P_OUT, 1, {EINVAL, EPERM, ESRCH}},
	{"PIOCSETEVCTRL", PIOCSETEVCTRL, PROC, P_REQ, 1, {EINVAL, EPERM, ESRCH, EBUSY}},
	{"PIOCSAVECCNTRS", PIOCSAVECCNTRS, PROC, P_ARG, 0, {EPERM, ESRCH, EINVAL}},
	{"HWPERFD_PIOCENEVCTRSEX", HWPERFD_PIOCENEVCTRSEX, PROC, P_REQEX, 1, {EINVAL, EPERM, EBUSY, ESRCH}},
	{"HWPERFD_PIOCGETEVCTRLEX", HWPERFD_PIOCGETEVCTRLEX, PROC, P_OUT, 1, {EINVAL, EPERM, ESRCH}},
	/* IRIX's pointer forms: hwperfd cannot follow the pointers (EFAULT);
	 * on a sibling fuzzer that has exited, ESRCH as every known call */
	{"PIOCENEVCTRSEX", PIOCENEVCTRSEX, PROC, P_OUT, 1, {EFAULT, ESRCH}},
	{"PIOCGETEVCTRLEX", PIOCGETEVCTRLEX, PROC, P_OUT, 1, {EFAULT, ESRCH}},
	{"HWIOC_PROFENABLE", HWIOC_PROFENABLE, CTL, P_REQ, 1, {EFAULT}},
	{"HWIOC_ENSYSCNTRS", HWIOC_ENSYSCNTRS, CTL, P_REQ, 1, {EINVAL, EBUSY, EPERM}},
	{"HWIOC_GET_CPUCNTRS", HWIOC_GET_CPUCNTRS, CTL, P_CPU, 0, {0}},
	{"HWIOC_PROF_CTR_SUSP", HWIOC_PROF_CTR_SUSP, CTL, P_ARG, 0, {0}},
	{"HWIOC_PROF_CTR_CONT", HWIOC_PROF_CTR_CONT, CTL, P_ARG, 0, {0}},
	{"HWIOC_RELSYSCNTRS", HWIOC_RELSYSCNTRS, CTL, P_ARG, 0, {EINVAL, EPERM}},
	{"HWIOC_GET_SYSCNTRS", HWIOC_GET_SYSCNTRS, CTL, P_OUT, 1, {EINVAL}},
	{"HWIOC_GET_SYSEVCTRL", HWIOC_GET_SYSEVCTRL, CTL, P_OUT, 1, {EINVAL}},
	{"HWIOC_SET_SYSEVCTRL", HWIOC_SET_SYSEVCTRL, CTL, P_REQ, 1, {EINVAL, EPERM}},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

struct file {
	const char *path;
	int fd;
	enum node node;
};

struct key {
	int where, mode, gen;
	uint64_t counts[HWPERF_EVENTMAX];
};

static struct file files[MAXFILES];
static int nfiles;
static struct key keys[MAXKEYS];
static int nkeys;
static unsigned char buf[BUFSZ];
static unsigned long calls, ok, unexpected, bad, violations, reads, open_failed;
static unsigned long by_errno[256], by_open_errno[256], broken_by_errno[256];

static uint64_t rng;

static uint32_t
rnd(void)
{
	/* xorshift64* */
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (uint32_t)((rng * 2685821657736338717ULL) >> 32);
}

static const struct command *
command_for(unsigned long cmd)
{
	size_t i;

	for (i = 0; i < NCOMMANDS; i++)
		if (commands[i].cmd == cmd)
			return &commands[i];
	return NULL;
}

static int
known(unsigned long cmd)
{
	return command_for(cmd) != NULL;
}

/* Command numbers do_vfs_ioctl() (or the tty/FS layers) answer before FUSE. */
static int
vfs_handled(unsigned long cmd)
{
	unsigned type = _IOC_TYPE(cmd);

	return type == 0x00 || type == 0x15 || type == 'T' || type == 'X' || type == 'f' || type == 0x94;
}

static void
random_bytes(size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		buf[i] = (unsigned char)rnd();
}

/* Never ask for a signal that cannot be ignored. */
static void
safe_signal(hwperf_profevctrarg_t *a)
{
	if (a->hwp_ovflw_sig == SIGKILL || a->hwp_ovflw_sig == SIGSTOP)
		a->hwp_ovflw_sig = 0;
}

static void
random_request(void)
{
	hwperf_profevctrarg_t *a = (hwperf_profevctrarg_t *)buf;
	int i;

	if (rnd() % 2) {
		random_bytes(sizeof *a);	/* raw bytes */
	} else {
		memset(a, 0, sizeof *a);	/* plausible: mostly valid, sometimes not */
		for (i = 0; i < HWPERF_EVENTMAX; i++) {
			if (rnd() % 4)
				continue;
			a->hwp_evctrargs.hwp_evctrl[i].hwperf_creg.hwp_mode = rnd() % 3 ? 0x8 | (rnd() % 2 ? 0x2 : 0) : rnd() % 16;
			a->hwp_evctrargs.hwp_evctrl[i].hwperf_creg.hwp_ev = rnd() % 10 ? rnd() % 16 : rnd() % 2048;
			a->hwp_evctrargs.hwp_evctrl[i].hwperf_creg.hwp_ie = rnd() % 2;
			if (rnd() % 8 == 0)
				a->hwp_ovflw_freq[i] = rnd() % 4 ? (int)(rnd() % 1000000) + 1 : -(int)(rnd() % 100);
		}
		a->hwp_ovflw_sig = rnd() % 4 ? 0 : (int)(rnd() % 40) - 2;
	}
	safe_signal(a);
}

/* Saved counts to restart from: generation often 0 (a fresh one), counts
 * small enough that a 64-bit sum cannot wrap during the run. */
static void
random_request_ex(void)
{
	hwperfd_enevctrsex_t *a = (hwperfd_enevctrsex_t *)buf;
	int i;

	random_request();
	memset(&a->hwp_aux, 0, sizeof a->hwp_aux);
	if (rnd() % 2)
		return;
	a->hwp_aux.hwp_aux_gen = rnd() % 3 ? 0 : (int)(rnd() % 200) - 5;
	for (i = 0; i < HWPERF_EVENTMAX; i++)
		a->hwp_aux.hwp_aux_cntr.hwp_evctr[i] = rnd() % 1000000;
}

static int
find_key(int where, int mode, int gen)
{
	int i;

	for (i = 0; i < nkeys; i++)
		if (keys[i].where == where && keys[i].mode == mode && keys[i].gen == gen)
			return i;
	if (nkeys == MAXKEYS)
		nkeys = 0;	/* forget everything: still sound, just less checked */
	keys[nkeys].where = where;
	keys[nkeys].mode = mode;
	keys[nkeys].gen = gen;
	memset(keys[nkeys].counts, 0, sizeof keys[nkeys].counts);
	return nkeys++;
}

static void
check_monotonic(int where, int mode, int gen, const uint64_t *counts)
{
	struct key *k = &keys[find_key(where, mode, gen)];
	int i;

	reads++;
	for (i = 0; i < HWPERF_EVENTMAX; i++) {
		if (counts[i] < k->counts[i]) {
			violations++;
			fprintf(stderr, "raw_fuzz: counts went backwards: file %d mode %d gen %d slot %d: %llu -> %llu\n",
			        where, mode, gen, i, (unsigned long long)k->counts[i], (unsigned long long)counts[i]);
		}
		k->counts[i] = counts[i];
	}
}

static void
outcome(const char *what, const struct command *c, const struct file *f, unsigned long cmd, int r, int err)
{
	int expected = 0, i;

	calls++;
	if (r >= 0) {
		ok++;
		expected = c != NULL && c->node == f->node && r >= c->min_ok && c->allowed[0] != ENOTSUP;
	} else {
		by_errno[err & 0xff]++;
		if (c == NULL || c->node != f->node) {
			expected = err == ENOTTY;
		} else {
			for (i = 0; i < 6 && c->allowed[i]; i++)
				if (c->allowed[i] == err)
					expected = 1;
		}
		if (err == EIO || err == ENOTCONN || err == ENOSYS || (err == EFAULT && !expected)) {
			bad++;
			broken_by_errno[err & 0xff]++;
		}
	}
	if (!expected) {
		unexpected++;
		if (unexpected <= 20)
			fprintf(stderr, "raw_fuzz: unexpected: %s %s cmd 0x%08lx on %s -> %d errno %d (%s)\n",
			        what, c ? c->name : "-", cmd, f->path, r, r < 0 ? err : 0, r < 0 ? strerror(err) : "ok");
	}
}

static void
one_call(void)
{
	struct file *f = &files[rnd() % nfiles];
	int r, err, pick = rnd() % 100;
	const struct command *c;
	unsigned long cmd;
	void *arg;

	if (pick < 45) {
		c = &commands[rnd() % NCOMMANDS];
		cmd = c->cmd;
		arg = buf;
		switch (c->payload) {
		case P_REQ:
			random_request();
			break;
		case P_REQEX:
			random_request_ex();
			break;
		case P_CPU:
			random_bytes(sizeof(hwperf_cpucntrs_arg_t));
			if (rnd() % 2)
				((hwperf_cpucntrs_arg_t *)buf)->cpuid = (int)(rnd() % 5) - 1;
			break;
		case P_ARG:
			arg = (void *)(uintptr_t)(rnd() % 3 ? rnd() % 65536 : rnd());
			break;
		case P_NONE:
			arg = NULL;
			break;
		case P_OUT:
			random_bytes(_IOC_SIZE(cmd));
			break;
		}
		errno = 0;
		r = ioctl(f->fd, cmd, arg);
		err = errno;
		outcome("exact", c, f, cmd, r, err);
	} else if (pick < 75) {
		c = &commands[rnd() % NCOMMANDS];
		do {
			unsigned dir = rnd() % 4, size = rnd() % 3 ? rnd() % 1024 : rnd() % 16384;
			if (rnd() % 3 == 0)
				dir = _IOC_DIR(c->cmd);
			else if (rnd() % 2 == 0)
				size = _IOC_SIZE(c->cmd) + (rnd() % 2 ? 1 : -1) * (1 + rnd() % 8);
			cmd = _IOC(dir, _IOC_TYPE(c->cmd), _IOC_NR(c->cmd), size & 0x3fff);
		} while (known(cmd));
		random_bytes(_IOC_SIZE(cmd));
		errno = 0;
		r = ioctl(f->fd, cmd, _IOC_DIR(cmd) == _IOC_NONE ? (void *)(uintptr_t)rnd() : (void *)buf);
		err = errno;
		outcome("mangled", NULL, f, cmd, r, err);
	} else if (pick < 90) {
		do {
			cmd = rnd();
		} while (known(cmd) || vfs_handled(cmd));
		random_bytes(_IOC_SIZE(cmd));
		errno = 0;
		r = ioctl(f->fd, cmd, _IOC_DIR(cmd) == _IOC_NONE ? (void *)(uintptr_t)rnd() : (void *)buf);
		err = errno;
		outcome("random", NULL, f, cmd, r, err);
	} else if (f->node == PROC) {
		hwperf_prusage_t *u = (hwperf_prusage_t *)buf;
		errno = 0;
		r = ioctl(f->fd, PIOCGETPREVCTRS, buf);
		err = errno;
		outcome("read", command_for(PIOCGETPREVCTRS), f, PIOCGETPREVCTRS, r, err);
		if (r > 0)
			check_monotonic((int)(f - files), u->pu_cpu_mon.cm_flags & HWPERF_CM_SYSMODE, r,
			                u->pu_cpu_mon.cm_evctr);
	} else if (rnd() % 2) {
		errno = 0;
		r = ioctl(f->fd, HWIOC_GET_SYSCNTRS, buf);
		err = errno;
		outcome("read", command_for(HWIOC_GET_SYSCNTRS), f, HWIOC_GET_SYSCNTRS, r, err);
		if (r > 0)
			check_monotonic(100, 0, r, ((hwperf_cntr_t *)buf)->hwp_evctr);
	} else {
		hwperf_cpucntrs_arg_t *a = (hwperf_cpucntrs_arg_t *)buf;
		int cpu = (int)(rnd() % 2);
		memset(a, 0, sizeof *a);
		a->cpuid = cpu;
		errno = 0;
		r = ioctl(f->fd, HWIOC_GET_CPUCNTRS, a);
		err = errno;
		outcome("read", command_for(HWIOC_GET_CPUCNTRS), f, HWIOC_GET_CPUCNTRS, r, err);
		if (r > 0)
			check_monotonic(200 + cpu, 0, r, a->cntr.hwp_evctr);
	}
}

static const char *
errname(int e)
{
	switch (e) {
	case EINVAL: return "EINVAL";
	case EPERM: return "EPERM";
	case EBUSY: return "EBUSY";
	case ESRCH: return "ESRCH";
	case ENOENT: return "ENOENT";
	case ENOTTY: return "ENOTTY";
	case ENOTSUP: return "ENOTSUP";
	case EIO: return "EIO";
	case ENOTCONN: return "ENOTCONN";
	case ENOSYS: return "ENOSYS";
	case EFAULT: return "EFAULT";
	case EACCES: return "EACCES";
	}
	return NULL;
}

static void
add_file(const char *path)
{
	const char *base = strrchr(path, '/');
	int fd;

	if (nfiles == MAXFILES)
		return;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		open_failed++;
		by_open_errno[errno & 0xff]++;
		return;
	}
	files[nfiles].path = path;
	files[nfiles].fd = fd;
	files[nfiles].node = strcmp(base ? base + 1 : path, "control") == 0 ? CTL : PROC;
	nfiles++;
}

static void
hang(int sig)
{
	static const char msg[] = "raw_fuzz: a call did not return\n";
	(void)sig;
	if (write(2, msg, sizeof msg - 1) < 0) {
		/* nothing more to do */
	}
	_exit(3);
}

int
main(int argc, char **argv)
{
	unsigned long iterations, i;
	double seconds;
	struct timespec start, now;
	int s, e;

	if (argc < 4) {
		fprintf(stderr, "usage: raw_fuzz SEED ITERATIONS SECONDS [PATH...]\n");
		return 2;
	}
	rng = strtoull(argv[1], NULL, 0) * 0x9E3779B97F4A7C15ULL + 1;
	iterations = strtoul(argv[2], NULL, 0);
	seconds = strtod(argv[3], NULL);
	for (s = 1; s < 65; s++)
		if (s != SIGKILL && s != SIGSTOP && s != SIGALRM && s != SIGSEGV && s != SIGBUS)
			signal(s, SIG_IGN);
	signal(SIGALRM, hang);
	alarm((unsigned)seconds + 60);

	for (s = 4; s < argc; s++)
		add_file(argv[s]);
	{
		char line[4096];
		while (fgets(line, sizeof line, stdin) != NULL) {
			line[strcspn(line, "\n")] = '\0';
			if (line[0] == '\0')
				break;
			add_file(strdup(line));
		}
	}
	if (nfiles == 0) {
		fprintf(stderr, "raw_fuzz: no file could be opened\n");
		return 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (i = 0; i < iterations; i++) {
		one_call();
		if ((i & 63) == 0) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			if ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 > seconds)
				break;
		}
	}
	printf("calls %lu\nok %lu\n", calls, ok);
	for (e = 1; e < 256; e++)
		if (by_errno[e]) {
			if (errname(e))
				printf("errno %s %lu\n", errname(e), by_errno[e]);
			else
				printf("errno E%d %lu\n", e, by_errno[e]);
		}
	for (e = 1; e < 256; e++)
		if (broken_by_errno[e])
			printf("broken %s %lu\n", errname(e) ? errname(e) : "other", broken_by_errno[e]);
	for (e = 1; e < 256; e++)
		if (by_open_errno[e])
			printf("open-%s %lu\n", errname(e) ? errname(e) : "other", by_open_errno[e]);
	printf("unexpected %lu\nbad %lu\nviolations %lu\nreads %lu\nopened %d\nopen-failed %lu\n",
	       unexpected, bad, violations, reads, nfiles, open_failed);
	return 0;
}
