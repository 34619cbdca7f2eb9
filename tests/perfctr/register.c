/* What PAPI does for each thread it registers (its perfctr component's
   init_thread and shutdown_thread): vperfctr_open, a TSC-only control,
   vperfctr_unlink, vperfctr_close.  Commands on stdin:
     "open"      open this thread's vperfctr and give it a TSC-only control
     "read"      read its TSC (the thread's first read of its own counters),
                 then print the name of its page (another descriptor asks)
     "loop N"    N registrations in a row, each opened, controlled, unlinked
                 and closed
     "threads N" N threads one after another, each registering once
   Each answers one line. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <libperfctr.h>

static int register_once(void)
{
    struct vperfctr *perfctr = vperfctr_open();
    struct vperfctr_control control;

    if (perfctr == NULL)
	return -1;
    memset(&control, 0, sizeof control);
    control.cpu_control.tsc_on = 1;
    if (vperfctr_control(perfctr, &control) < 0 || vperfctr_unlink(perfctr) < 0) {
	vperfctr_close(perfctr);
	return -1;
    }
    vperfctr_close(perfctr);
    return 0;
}

static void *registering(void *arg)
{
    *(int *)arg = register_once() < 0 ? errno : 0;
    return NULL;
}

int main(void)
{
    struct vperfctr *self = NULL;
    char line[128];
    long n;

    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
	if (strncmp(line, "open", 4) == 0) {
	    struct vperfctr_control control;

	    memset(&control, 0, sizeof control);
	    control.cpu_control.tsc_on = 1;
	    self = vperfctr_open();
	    if (self == NULL || vperfctr_control(self, &control) < 0)
		printf("open failed=%s\n", strerror(errno));
	    else
		printf("opened\n");
	} else if (strncmp(line, "read", 4) == 0 && self != NULL) {
	    struct hwperfd_vperfctr_statepage arg;
	    unsigned long long tsc = vperfctr_read_tsc(self);
	    int fd = _vperfctr_open(0);

	    memset(&arg, 0, sizeof arg);
	    if (fd < 0 || ioctl(fd, VPERFCTR_STATEPAGE, &arg) < 0)
		printf("read tsc=%llu refused=%s\n", tsc, strerror(errno));
	    else
		printf("read tsc=%llu path=%s\n", tsc, arg.path);
	    if (fd >= 0)
		close(fd);
	} else if (sscanf(line, "loop %ld", &n) == 1) {
	    long i;

	    for (i = 0; i < n && register_once() == 0; i++)
		;
	    printf("looped %ld\n", i);
	} else if (sscanf(line, "threads %ld", &n) == 1) {
	    long i;
	    int error = 0;

	    for (i = 0; i < n && error == 0; i++) {
		pthread_t thread;

		if (pthread_create(&thread, NULL, registering, &error) != 0)
		    break;
		pthread_join(thread, NULL);
	    }
	    printf("threaded %ld error=%d\n", i - (error != 0), error);
	} else {
	    printf("unknown %s", line);
	}
    }
    return 0;
}
