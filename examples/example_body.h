/* What the example programs share.  They open "/proc/%05d" exactly as on
 * IRIX; run them with hwperfd-run so that open reaches hwperfd's mount. */
#ifndef HWPERFD_EXAMPLE_H
#define HWPERFD_EXAMPLE_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The body of a program between acquiring and reading the counters: real work,
 * or (with -w, for tests under the manual clock) a line read from stdin. */
static inline unsigned long hwperfd_example_body(int wait_for_line)
{
    static volatile double sink;
    unsigned long i, n = 0;
    if (wait_for_line) {
        char line[64];
        printf("counting\n");
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin))
            return 0;
        return 1;
    }
    for (i = 0; i < 60000000UL; i++) {
        sink += (double)i * 0.5;
        n += i & 3;
    }
    return n;
}
#endif
