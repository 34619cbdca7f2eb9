/*
 * libperfex(3C): a procedural interface to the R10000/R12000 event counters,
 * served by hwperfd on Linux.  Link with -lperfex (lib/, `make -C lib`).
 *
 * start_counters(e0, e1) zeroes and starts counting events e0 and e1 (0-31,
 * numbered as in perfex(1)) for the calling process; read_counters() reads
 * them into *c0 and *c1 and stops them.  Both return the generation number
 * of the counters (> 0); equal numbers mean nothing took the counters away
 * in between.  T5_EVENT0 / T5_EVENT1 in the environment override e0 / e1
 * (in every call, so the counts print under the events really counted).
 * Two events that need the same hardware counter are a "conflicting
 * counters" error.  print_counters() prints counts to stderr as perfex does;
 * print_costs() adds perfex -y's time estimates and statistics, from the
 * built-in cost table, /etc/perfex.costs, and files given to load_costs().
 * Every call returns -1 (and sets errno) on failure, after saying why on
 * stderr.
 *
 * The counters are found at $HWPERFD_MOUNT/<pid>, or /run/hwperfd/<pid>.
 */
#ifndef __PERFEX_H__
#define __PERFEX_H__

#ifdef __cplusplus
extern "C" {
#endif

int start_counters(int e0, int e1);
int read_counters(int e0, long long *c0, int e1, long long *c1);
int print_counters(int e0, long long c0, int e1, long long c1);
int print_costs(int e0, long long c0, int e1, long long c1);
int load_costs(char *CostFileName);

/* The FORTRAN interface: INTEGER*4 functions taking every argument by
 * reference (load_costs_ also gets the hidden length of CostFileName). */
int start_counters_(int *e0, int *e1);
int read_counters_(int *e0, long long *c0, int *e1, long long *c1);
int print_counters_(int *e0, long long *c0, int *e1, long long *c1);
int print_costs_(int *e0, long long *c0, int *e1, long long *c1);
int load_costs_(char *CostFileName, long length);

#ifdef __cplusplus
}
#endif

#endif /* __PERFEX_H__ */
