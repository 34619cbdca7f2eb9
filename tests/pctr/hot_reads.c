/*
 * rdtsc() and rdpmc() as a profiler makes them (tests/hot_client.h: m, f, q),
 * and:
 *
 *   r       "read tsc=T pmc0=A pmc1=B errno=E": rdtsc(), rdpmc(0), rdpmc(1)
 *   i       "ioctl tsc=T pmc0=A pmc1=B": PCIOCRD on <mount>/pctr (a round trip)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <machine/pctr.h>

#include "hot_client.h"

static char path[4096];

static void reads(const char *tag)
{
	pctrval t, a, b;

	errno = 0;
	t = rdtsc();
	a = rdpmc(0);
	b = rdpmc(1);
	printf("%s tsc=%llu pmc0=%llu pmc1=%llu errno=%d\n", tag, t, a, b, errno);
	fflush(stdout);
}

static void own(const char *line)
{
	struct pctrst st;
	int fd;

	switch (line[0]) {
	case 'r':
		reads("read");
		break;
	case 'i':
		memset(&st, 0, sizeof st);
		fd = open(path, O_RDONLY);
		if (fd < 0 || ioctl(fd, PCIOCRD, &st) < 0)
			printf("ioctl errno=%d\n", errno);
		else
			printf("ioctl tsc=%llu pmc0=%llu pmc1=%llu\n", st.pctr_tsc, st.pctr_hwc[0], st.pctr_hwc[1]);
		if (fd >= 0)
			close(fd);
		fflush(stdout);
		break;
	}
}

int
main(void)
{
	hot_node_path(path, sizeof path, "pctr");
	return hot_serve(own, reads);
}
