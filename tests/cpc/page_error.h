/*
 * The error() routine cpc_bind_curlwp(3CPC)'s examples assume: "a
 * user-provided routine analogous to the familiar printf(3C) function ...
 * that also performs an exit(2) after printing the message".  The test
 * builds the page's code unchanged with -include page_error.h.
 */
#ifndef PAGE_ERROR_H
#define PAGE_ERROR_H
void error(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
#endif
