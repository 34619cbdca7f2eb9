/* pctr(4)'s example: time a subroutine with rdtsc(). */
#include <sys/types.h>
#include <machine/cpu.h>
#include <machine/pctr.h>
#include <stdio.h>
#include <unistd.h>

static void
functionx(void)
{
	usleep(20000);
}

void
time_functionx(void)
{
	pctrval tsc;

	tsc = rdtsc();
	functionx();
	tsc = rdtsc() - tsc;
	printf("Functionx took %llu cycles.\n", tsc);
}

int
main(void)
{
	time_functionx();
	return 0;
}
