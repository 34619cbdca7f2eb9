/*
 * The classic two-counter setup of P6-class Intel CPUs: instructions
 * retired on counter 0, L2 data loads in every cache state on counter 1,
 * both in user and kernel mode; then time a stretch with rdtsc()/rdpmc().
 */
#include <sys/types.h>
#include <sys/ioctl.h>
#include <machine/cpu.h>
#include <machine/pctr.h>
#include <err.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#define INST_RETIRED	0xc0
#define L2_LD		0x29

int
main(void)
{
	u_int fn0, fn1;
	pctrval tsc, c0, c1;
	char line[16];
	int fd;

	if ((fd = open(_PATH_PCTR, O_WRONLY)) == -1)
		err(1, "%s", _PATH_PCTR);
	fn0 = INST_RETIRED | PCTR_U | PCTR_K | PCTR_EN;
	fn1 = L2_LD | (PCTR_UM_MESI) | PCTR_U | PCTR_K | PCTR_EN;
	if (ioctl(fd, PCIOCS0, &fn0) == -1)
		err(1, "PCIOCS0");
	if (ioctl(fd, PCIOCS1, &fn1) == -1)
		err(1, "PCIOCS1");
	close(fd);

	tsc = rdtsc();
	c0 = rdpmc(0);
	c1 = rdpmc(1);
	printf("ready\n");
	fflush(stdout);
	if (fgets(line, sizeof line, stdin) == NULL)
		return 1;
	tsc = rdtsc() - tsc;
	c0 = rdpmc(0) - c0;
	c1 = rdpmc(1) - c1;
	printf("cycles %llu instructions %llu l2_loads %llu\n",
	    (unsigned long long)tsc, (unsigned long long)c0, (unsigned long long)c1);
	return 0;
}
