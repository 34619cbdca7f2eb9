/*
 * Read the counters, set counter functions, read again; then wait for a
 * line on stdin and read once more.  Usage: read_set_read [CTR FN ...]
 * (FN in hex).  Written as an OpenBSD program would be.
 */
#include <sys/types.h>
#include <sys/ioctl.h>
#include <machine/cpu.h>
#include <machine/pctr.h>
#include <err.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void
show(int fd, const char *when)
{
	struct pctrst st;
	int i;

	if (ioctl(fd, PCIOCRD, &st) == -1)
		err(1, "PCIOCRD");
	printf("%s tsc=%llu", when, (unsigned long long)st.pctr_tsc);
	for (i = 0; i < PCTR_NUM; i++)
		printf(" fn%d=%x hwc%d=%llu", i, st.pctr_fn[i], i,
		    (unsigned long long)st.pctr_hwc[i]);
	printf("\n");
	fflush(stdout);
}

int
main(int argc, char *argv[])
{
	int fd, i, ctr;
	unsigned int fn;
	char line[16];

	fd = open(_PATH_PCTR, argc > 1 ? O_RDWR : O_RDONLY);
	if (fd == -1)
		err(1, "%s", _PATH_PCTR);
	show(fd, "before");
	for (i = 1; i + 1 < argc; i += 2) {
		ctr = atoi(argv[i]);
		fn = strtoul(argv[i + 1], NULL, 16);
		if (ioctl(fd, PCIOCS0 + ctr, &fn) == -1)
			err(1, "PCIOCS%d", ctr);
	}
	show(fd, "set");
	if (fgets(line, sizeof line, stdin) != NULL)
		show(fd, "after");
	close(fd);
	return 0;
}
