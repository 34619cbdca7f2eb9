/* Calls libperfex's printing functions on given counts (no counting):
 *
 *   print_costs E0 C0 E1 C1 [COSTFILE]
 *
 * prints print_counters, a "--" line, then print_costs, all on stderr, so a
 * test can compare them with the Python library's output.  Exit status 3 if
 * load_costs refused COSTFILE. */
#include <stdio.h>
#include <stdlib.h>
#include <perfex.h>

int main(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    if (argc > 5 && load_costs(argv[5]) < 0)
        return 3;
    if (print_counters(atoi(argv[1]), atoll(argv[2]), atoi(argv[3]), atoll(argv[4])) < 0)
        return 4;
    fprintf(stderr, "--\n");
    if (print_costs(atoi(argv[1]), atoll(argv[2]), atoi(argv[3]), atoll(argv[4])) < 0)
        return 5;
    return 0;
}
