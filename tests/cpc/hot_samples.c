/*
 * cpc_set_sample on a set the LWP bound on itself, as a profiler makes it
 * (tests/hot_client.h: m, f, q), and:
 *
 *   b       bind PAPI_tot_cyc (user+system) and PAPI_tot_ins (user): "bound tid=T"
 *   n       the same with CPC_OVF_NOTIFY_EMT on the first, far from overflow
 *   c N     the same (no notification) bound to CPU N (cpc_bind_cpu, root): "bound cpu=N"
 *   s       cpc_set_sample: "sample v0=A v1=B tick=T hrtime=H errno=E"
 *   i       HWPERFD_CPCIO_SAMPLE on <mount>/cpc (a round trip): "ioctl v0=A v1=B tick=T error=E"
 *   u       cpc_unbind: "unbound errno=E"
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <libcpc.h>

#include "hot_client.h"

static cpc_t *cpc;
static cpc_set_t *set;
static cpc_buf_t *buf;
static char path[4096];

static void sample(const char *tag)
{
	uint64_t a = 0, b = 0;
	int r;

	errno = 0;
	r = cpc_set_sample(cpc, set, buf);
	if (r == 0) {
		cpc_buf_get(cpc, buf, 0, &a);
		cpc_buf_get(cpc, buf, 1, &b);
		printf("%s v0=%llu v1=%llu tick=%llu hrtime=%lld errno=0\n", tag, (unsigned long long)a,
		    (unsigned long long)b, (unsigned long long)cpc_buf_tick(cpc, buf), (long long)cpc_buf_hrtime(cpc, buf));
	} else {
		printf("%s errno=%d\n", tag, errno);
	}
	fflush(stdout);
}

static void bind(uint_t notify, int cpu)
{
	if (set != NULL) {
		cpc_buf_destroy(cpc, buf);
		cpc_set_destroy(cpc, set);
	}
	set = cpc_set_create(cpc);
	if (set == NULL || cpc_set_add_request(cpc, set, "PAPI_tot_cyc", 0, CPC_COUNT_USER | CPC_COUNT_SYSTEM | notify, 0,
	    NULL) < 0 || cpc_set_add_request(cpc, set, "PAPI_tot_ins", 0, CPC_COUNT_USER, 0, NULL) < 0
	    || (buf = cpc_buf_create(cpc, set)) == NULL
	    || (cpu < 0 ? cpc_bind_curlwp(cpc, set, 0) : cpc_bind_cpu(cpc, cpu, set, 0)) < 0)
		printf("bound errno=%d\n", errno);
	else if (cpu >= 0)
		printf("bound cpu=%d\n", cpu);
	else
		printf("bound tid=%ld\n", (long)syscall(SYS_gettid));
	fflush(stdout);
}

static void own(const char *line)
{
	struct hwperfd_cpc_io io;
	int fd;

	switch (line[0]) {
	case 'b':
		bind(0, -1);
		break;
	case 'n':
		bind(CPC_OVF_NOTIFY_EMT, -1);
		break;
	case 'c':
		bind(0, atoi(line + 1));
		break;
	case 's':
		sample("sample");
		break;
	case 'i':
		memset(&io, 0, sizeof io);
		io.ci_target = HWPERFD_CPC_LWP;
		fd = open(path, O_RDONLY);
		if (fd < 0 || ioctl(fd, HWPERFD_CPCIO_SAMPLE, &io) < 0)
			printf("ioctl errno=%d\n", errno);
		else
			printf("ioctl v0=%llu v1=%llu tick=%llu error=%d\n", (unsigned long long)io.ci_data[0],
			    (unsigned long long)io.ci_data[1], (unsigned long long)io.ci_tick, (int)io.ci_error);
		if (fd >= 0)
			close(fd);
		fflush(stdout);
		break;
	case 'u':
		errno = 0;
		cpc_unbind(cpc, set);
		printf("unbound errno=%d\n", errno);
		fflush(stdout);
		break;
	}
}

int
main(void)
{
	signal(SIGEMT, SIG_IGN);
	hot_node_path(path, sizeof path, "cpc");
	if ((cpc = cpc_open(CPC_VER_CURRENT)) == NULL)
		return 1;
	return hot_serve(own, sample);
}
