#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include "page_error.h"

void error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	(void) vfprintf(stderr, fmt, ap);
	va_end(ap);
	(void) fputc('\n', stderr);
	exit(1);
}
