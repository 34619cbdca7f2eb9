/*
 * The error() routine cpc_bind_curlwp(3CPC)'s examples assume: "a
 * user-provided routine analogous to the familiar printf(3C) function ...
 * that also performs an exit(2) after printing the message".  The test
 * builds the page's code unchanged with -include page_error.h.
 */
#ifndef PAGE_ERROR_H
#define PAGE_ERROR_H
void error(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* The examples call strerror(3C) and bzero(3C) with no <string.h> or
 * <strings.h> of their own (which would declare index(3), a name Example 2
 * gives a global). */
#include <stddef.h>
char *strerror(int errnum);
void bzero(void *s, size_t n);
#endif
