// A C++ program of the IRIX era that declares libperfex itself, as
// Charm++'s trace-counter module did, instead of including a header.
#include <cstdio>
#include <cstdlib>

extern "C" int start_counters(int e0, int e1);
extern "C" int read_counters(int e0, long long *c0, int e1, long long *c1);
extern "C" int print_counters(int e0, long long c0, int e1, long long c1);
extern "C" int start_counters_(int *e0, int *e1);  // the FORTRAN entry points
extern "C" int read_counters_(int *e0, long long *c0, int *e1, long long *c1);

int main()
{
    long long c0 = -1, c1 = -1;
    int e0 = 0, e1 = 26;
    int gen = start_counters(e0, e1);
    int gen2 = read_counters(e0, &c0, e1, &c1);
    if (gen <= 0 || gen2 != gen)
        return 1;
    std::printf("c: %lld %lld\n", c0, c1);
    gen = start_counters_(&e0, &e1);
    gen2 = read_counters_(&e0, &c0, &e1, &c1);
    if (gen <= 0 || gen2 != gen)
        return 2;
    std::printf("fortran: %lld %lld\n", c0, c1);
    return print_counters(e0, c0, e1, c1);
}
