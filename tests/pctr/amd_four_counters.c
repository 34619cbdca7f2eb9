/*
 * All four AMD counters: clocks not halted, retired instructions, data
 * cache misses (user and kernel), retired mispredicted branches (user
 * only); read back with PCIOCRD.
 */
#include <sys/types.h>
#include <sys/ioctl.h>
#include <machine/cpu.h>
#include <machine/pctr.h>
#include <err.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int
main(void)
{
	u_int fn[PCTR_NUM] = {
		0x76 | PCTR_U | PCTR_K | PCTR_EN,
		0xc0 | PCTR_U | PCTR_K | PCTR_EN,
		0x41 | PCTR_U | PCTR_K | PCTR_EN,
		0xc3 | PCTR_U | PCTR_EN,
	};
	struct pctrst st;
	char line[16];
	int fd, i;

	if ((fd = open(_PATH_PCTR, O_RDWR)) == -1)
		err(1, "%s", _PATH_PCTR);
	for (i = 0; i < PCTR_NUM; i++)
		if (ioctl(fd, PCIOCS0 + i, &fn[i]) == -1)
			err(1, "PCIOCS%d", i);
	printf("ready\n");
	fflush(stdout);
	if (fgets(line, sizeof line, stdin) == NULL)
		return 1;
	if (ioctl(fd, PCIOCRD, &st) == -1)
		err(1, "PCIOCRD");
	for (i = 0; i < PCTR_NUM; i++)
		printf("ctr%d %llu %llu\n", i, (unsigned long long)st.pctr_hwc[i],
		    (unsigned long long)rdpmc(i));
	return 0;
}
