/*
 * rdpmc(N) once and print the value.  Usage: rdpmc_one N.  Written as an
 * OpenBSD program would be: P5CTR_* are there for i386 code that names them.
 */
#include <sys/types.h>
#include <machine/pctr.h>
#include <stdio.h>
#include <stdlib.h>

#if P5CTR_K != 0x40 || P5CTR_U != 0x80 || P5CTR_C != 0x100
#error "P5CTR_* are not i386 OpenBSD's"
#endif

int
main(int argc, char *argv[])
{
	if (argc != 2)
		return 2;
	printf("%llu\n", (unsigned long long)rdpmc(atoi(argv[1])));
	return 0;
}
