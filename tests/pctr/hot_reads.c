/*
 * rdtsc() and rdpmc() as a profiler makes them, one command per line on
 * stdin, each answered with one line:
 *
 *   r       "read tsc=T pmc0=A pmc1=B errno=E": rdtsc(), rdpmc(0), rdpmc(1)
 *   i       "ioctl tsc=T pmc0=A pmc1=B": PCIOCRD on <mount>/pctr (a round trip)
 *   m       "maps N PATH": the live state pages mapped (/proc/self/maps), the last one's path
 *   f       fork; the child does "r" and exits; "child tsc=... errno=E"
 *   q       exit
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <machine/pctr.h>

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

int
main(void)
{
	char line[64], path[4096], maps[512], last[512] = "-";
	const char *mount = getenv("HWPERFD_MOUNT");
	struct pctrst st;
	FILE *f;
	int fd, n;
	pid_t child;

	snprintf(path, sizeof path, "%s/pctr", mount ? mount : "/run/hwperfd");
	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof line, stdin) != NULL) {
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
				printf("ioctl tsc=%llu pmc0=%llu pmc1=%llu\n", st.pctr_tsc, st.pctr_hwc[0],
				    st.pctr_hwc[1]);
			if (fd >= 0)
				close(fd);
			fflush(stdout);
			break;
		case 'm':
			n = 0;
			if ((f = fopen("/proc/self/maps", "r")) != NULL) {
				while (fgets(maps, sizeof maps, f) != NULL)
					if (strstr(maps, "hwperfd-state") != NULL && strstr(maps, "(deleted)") == NULL) {
						n++;
						maps[strcspn(maps, "\n")] = '\0';
						snprintf(last, sizeof last, "%s", strchr(maps, '/'));
					}
				fclose(f);
			}
			printf("maps %d %s\n", n, last);
			fflush(stdout);
			break;
		case 'f':
			child = fork();
			if (child == 0) {
				reads("child");
				_exit(0);
			}
			waitpid(child, NULL, 0);
			break;
		case 'q':
			return 0;
		}
	}
	return 0;
}
