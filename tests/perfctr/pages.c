/* A perfctr user reading its own counters as perfctr's examples do
   (vperfctr_read_ctrs, vperfctr_read_tsc, vperfctr_read_pmc), driven a step
   at a time from stdin so a test can move time and look between steps.

   usage: pages a|i   (a: the TSC and two a-mode counters; i: and one i-mode)

   Steps: "read" (the library's reads, the page alone, the ioctl alone),
   "sandwich N MS" (N times: page, ioctl, page around MS ms of work),
   "spin MS", "control" (other events), "stop", "unlink", "close",
   "fork-ask" / "thread-ask" (another process / thread asks for the page's
   name), "thread" / "join" (a second thread with its own vperfctr, which
   exits at "join"). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "libperfctr.h"

static struct vperfctr *self;
static int raw = -1;	/* a second descriptor on this thread's vperfctr */

static void setup(struct vperfctr_control *control, int imode, int other)
{
    memset(control, 0, sizeof *control);
    control->cpu_control.tsc_on = 1;
    control->cpu_control.nractrs = 2;
    control->cpu_control.pmc_map[0] = 0;
    control->cpu_control.evntsel[0] = 0xC0 | (1 << 16) | (1 << 22);	/* INST_RETIRED, USR, EN */
    control->cpu_control.pmc_map[1] = 1;
    control->cpu_control.evntsel[1] = 0x3C | (1 << 16) | (1 << 22);	/* CPU_CLK_UNHALTED, USR, EN */
    if (other)
	control->cpu_control.evntsel[1] |= 1 << 17;	/* and OS */
    if (imode) {
	control->cpu_control.nractrs = 1;
	control->cpu_control.nrictrs = 1;
	control->cpu_control.evntsel[1] |= 1 << 20;	/* INT */
	control->cpu_control.ireset[1] = -1000000000;
	control->si_signo = SIGIO;
    }
}

static const char *name(int err)
{
    switch (err) {
    case 0: return "ok";
    case EAGAIN: return "EAGAIN";
    case ESTALE: return "ESTALE";
    case ENOENT: return "ENOENT";
    case EPERM: return "EPERM";
    case EINVAL: return "EINVAL";
    case ESRCH: return "ESRCH";
    default: return strerror(err);
    }
}

static void ask(const char *who, int fd)
{
    struct hwperfd_vperfctr_statepage arg;

    memset(&arg, 0, sizeof arg);
    if (ioctl(fd, VPERFCTR_STATEPAGE, &arg) < 0)
	printf("%s refused=%s\n", who, name(errno));
    else
	printf("%s path=%s\n", who, arg.path);
    fflush(stdout);
}

static void spin(long ms)
{
    struct timespec t0, t;
    volatile unsigned long x = 0;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    do {
	for (int i = 0; i < 10000; i++)
	    x += i;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < ms * 1000000L);
}

static int ioctl_read(struct perfctr_sum_ctrs *sum)
{
    struct hwperfd_vperfctr_state state;

    if (ioctl(raw, VPERFCTR_READ_STATE, &state) < 0)
	return -1;
    *sum = state.sum;
    return 0;
}

static void *asker(void *arg)
{
    (void)arg;
    ask("thread", raw);
    return NULL;
}

static int gate[2];	/* "join": the second thread's cue to exit */

static void *second(void *arg)
{
    struct vperfctr_control control;
    struct vperfctr *mine = vperfctr_open();
    int fd = _vperfctr_open(0);
    char c;

    (void)arg;
    setup(&control, 0, 0);
    if (mine == NULL || fd < 0 || vperfctr_control(mine, &control) < 0) {
	printf("second failed=%s\n", name(errno));
	fflush(stdout);
	return NULL;
    }
    printf("second tid=%ld\n", (long)syscall(SYS_gettid));
    ask("second", fd);
    close(fd);
    if (read(gate[0], &c, 1) < 0)
	return NULL;
    return NULL;	/* exits with its vperfctr linked: exit_thread unlinks it */
}

int main(int argc, char **argv)
{
    struct vperfctr_control control;
    struct perfctr_sum_ctrs sum, page, direct, before, after;
    char line[128];
    int imode = argc > 1 && argv[1][0] == 'i';
    pthread_t thread;

    self = vperfctr_open();
    raw = _vperfctr_open(0);
    if (self == NULL || raw < 0) {
	perror("vperfctr_open");
	return 1;
    }
    setup(&control, imode, 0);
    if (vperfctr_control(self, &control) < 0) {
	perror("vperfctr_control");
	return 1;
    }
    printf("ready pid=%d tid=%ld\n", (int)getpid(), (long)syscall(SYS_gettid));
    ask("self", raw);
    while (fgets(line, sizeof line, stdin)) {
	long n = 0, ms = 0;
	if (strncmp(line, "read", 4) == 0) {
	    int got = hwperfd_vperfctr_read_page(self, &page) == 0 ? 0 : errno;
	    if (vperfctr_read_ctrs(self, &sum) < 0 || ioctl_read(&direct) < 0) {
		printf("read failed=%s\n", name(errno));
	    } else {
		printf("read tsc=%llu pmc0=%llu pmc1=%llu page=%s", sum.tsc, sum.pmc[0], sum.pmc[1], name(got));
		if (got == 0)
		    printf(" ptsc=%llu ppmc0=%llu ppmc1=%llu", page.tsc, page.pmc[0], page.pmc[1]);
		printf(" dtsc=%llu dpmc0=%llu dpmc1=%llu single=%llu,%llu,%llu running=%d\n", direct.tsc,
		       direct.pmc[0], direct.pmc[1], vperfctr_read_tsc(self), vperfctr_read_pmc(self, 0),
		       vperfctr_read_pmc(self, 1), vperfctr_is_running(self));
	    }
	} else if (sscanf(line, "sandwich %ld %ld", &n, &ms) == 2) {
	    long bad = 0, served = 0, i;
	    unsigned long long spread = 0;
	    for (i = 0; i < n; i++) {
		spin(ms);
		if (hwperfd_vperfctr_read_page(self, &before) < 0 || ioctl_read(&direct) < 0
		    || hwperfd_vperfctr_read_page(self, &after) < 0)
		    continue;
		served++;
		if (before.tsc > direct.tsc || direct.tsc > after.tsc)
		    bad++;
		for (int k = 0; k < 2; k++)
		    if (before.pmc[k] > direct.pmc[k] || direct.pmc[k] > after.pmc[k])
			bad++;
		if (after.tsc - before.tsc > spread)
		    spread = after.tsc - before.tsc;
	    }
	    printf("sandwich served=%ld bad=%ld spread=%llu\n", served, bad, spread);
	} else if (sscanf(line, "spin %ld", &ms) == 1) {
	    spin(ms);
	    printf("spun\n");
	} else if (strncmp(line, "control", 7) == 0) {
	    setup(&control, imode, 1);
	    printf("control %s\n", vperfctr_control(self, &control) < 0 ? name(errno) : "ok");
	} else if (strncmp(line, "stop", 4) == 0) {
	    printf("stop %s\n", vperfctr_stop(self) < 0 ? name(errno) : "ok");
	} else if (strncmp(line, "unlink", 6) == 0) {
	    printf("unlink %s\n", vperfctr_unlink(self) < 0 ? name(errno) : "ok");
	} else if (strncmp(line, "close", 5) == 0) {
	    vperfctr_close(self);
	    close(raw);
	    printf("closed\n");
	} else if (strncmp(line, "fork-ask", 8) == 0) {
	    pid_t child = fork();
	    if (child == 0) {
		ask("child", raw);
		_exit(0);
	    }
	    waitpid(child, NULL, 0);
	} else if (strncmp(line, "thread-ask", 10) == 0) {
	    pthread_create(&thread, NULL, asker, NULL);
	    pthread_join(thread, NULL);
	} else if (strncmp(line, "thread", 6) == 0) {
	    if (pipe(gate) < 0)
		return 1;
	    pthread_create(&thread, NULL, second, NULL);
	} else if (strncmp(line, "join", 4) == 0) {
	    if (write(gate[1], "x", 1) < 0)
		return 1;
	    pthread_join(thread, NULL);
	    printf("joined\n");
	}
	fflush(stdout);
    }
    return 0;
}
