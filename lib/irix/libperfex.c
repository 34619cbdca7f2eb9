/*
 * libperfex(3C) for hwperfd: start_counters, read_counters, print_counters,
 * print_costs, load_costs (see include/perfex.h).
 *
 * The library talks to hwperfd directly: it opens its own process file,
 * <mount>/%05d, and uses the PIOC* ioctls of r10k_counters(5).  It places
 * events in slots exactly as perfex does (hwperfd/perfex/plan.py), prints
 * exactly perfex's lines (hwperfd/perfex/report.py) and derives exactly
 * perfex -y's statistics (hwperfd/perfex/stats.py); the event names and the
 * built-in costs come from perfex_tables.h, generated from the Python
 * tables.  tests/perfex/test_libperfex.py checks that C and Python agree.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/procfs.h>
#include <sys/hwperftypes.h>
#include <sys/hwperfmacros.h>
#include <unistd.h>

#include "hwperfd/state.h"
#include "perfex.h"
#include "perfex_tables.h"
#include "../reconnect.h"

#define NAME_WIDTH 60
#define COUNT_WIDTH 15
#define TIME_WIDTH 12
#define EVENT_WIDTH (2 + 1 + NAME_WIDTH + 1 + COUNT_WIDTH)
#define COST_LINE (EVENT_WIDTH + 3 * (TIME_WIDTH + 1))
#define STAT_LINE (EVENT_WIDTH + 1 + TIME_WIDTH)
#define SYSTEM_COSTS "/etc/perfex.costs"

static int self_fd = -1;
static char self_path[4096]; /* what self_fd was opened as: a restart of the daemon opens it again */
static pid_t self_pid;
static struct hwperfd_state_reader self_state; /* our state page, once counting */

static int cpu_type = -1; /* index into the pfx_* tables */
static double cpu_mhz;

static int costs_ready = -1; /* the cpu type the table was built for */
static pfx_event_cost_t costs[PFX_NEVENTS];

/* The events of the last start_counters, and their slots. */
static int started_events[2] = {-1, -1};
static int started_slots[2] = {-1, -1};

static const char *mount_point(void)
{
    const char *m = getenv("HWPERFD_MOUNT");
    return (m && *m) ? m : "/run/hwperfd";
}

static int fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int err, const char *fmt, ...)
{
    va_list ap;
    fputs("libperfex: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    errno = err;
    return -1;
}

/* -- the process file and the machine ------------------------------------ */

static int open_self(void)
{
    char path[4096], control[4096];
    if (self_fd >= 0 && self_pid == getpid())
        return self_fd;
    if (self_fd >= 0)
        close(self_fd); /* we are a forked child: our file is another one */
    hwperfd_state_close(&self_state); /* and the page is our parent's */
    self_pid = getpid();
    snprintf(path, sizeof path, "%s/%05d", mount_point(), (int)self_pid);
    self_fd = open(path, O_RDWR | O_CLOEXEC);
    memcpy(self_path, path, sizeof self_path);
    if (self_fd < 0) {
        int err = errno;
        snprintf(control, sizeof control, "%s/control", mount_point());
        if (access(control, F_OK) != 0)
            return fail(ENOENT,
                        "hwperfd is not mounted at %s (start it with `hwperfd %s` as root, "
                        "or set HWPERFD_MOUNT to where it is mounted)",
                        mount_point(), mount_point());
        return fail(err, "cannot open %s: %s", path, strerror(err));
    }
    return self_fd;
}

struct self_call {
    unsigned long cmd;
    void *arg;
};

static int self_again(int fd, void *context)
{
    struct self_call *c = context;
    return ioctl(fd, c->cmd, c->arg);
}

/* An ioctl on our own file that rides out a restart of the daemon
 * (reconnect.h): it put back our counters, so the call is repeated. */
static int self_ioctl(int fd, unsigned long cmd, void *arg)
{
    struct self_call call = {cmd, arg};
    int rc = ioctl(fd, cmd, arg);
    if (rc < 0 && fd == self_fd && hwperfd_lost_daemon(errno)) {
        int err;
        rc = hwperfd_ride_out(rc, fd, self_path, O_RDWR, open, self_again, &call);
        err = errno;
        hwperfd_state_close(&self_state); /* the old daemon's page is dead */
        errno = err;
    }
    return rc;
}

/* Read a whole text file of the mount (they report no size). */
static char *read_text(int fd)
{
    size_t size = 0, cap = 8192;
    char *buf = malloc(cap + 1);
    ssize_t n;
    if (!buf)
        return NULL;
    while ((n = pread(fd, buf + size, cap - size, (off_t)size)) > 0) {
        size += (size_t)n;
        if (size == cap) {
            char *more = realloc(buf, 2 * cap + 1);
            if (!more) {
                free(buf);
                return NULL;
            }
            buf = more;
            cap *= 2;
        }
    }
    buf[size] = '\0';
    return buf;
}

/* "cpu r10000 x2 @ 200 MHz" at the start of a line. */
static int parse_cpu_line(const char *text)
{
    const char *p = text;
    while (p && *p) {
        char name[32];
        int n;
        double mhz;
        if (sscanf(p, "cpu %31s x%d @ %lf MHz", name, &n, &mhz) == 3) {
            int t;
            for (t = 0; t < PFX_NTYPES; t++)
                if (strcmp(name, pfx_type_names[t]) == 0) {
                    cpu_type = t;
                    cpu_mhz = mhz;
                    return 0;
                }
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return -1;
}

static int parse_file_cpu(int fd)
{
    char *text = read_text(fd);
    int rc = text ? parse_cpu_line(text) : -1;
    free(text);
    return rc;
}

/* What hwperfd emulates: the control node says (root only); otherwise our
 * own file does while our counters are in use, so count cycles a moment. */
static int detect_machine(void)
{
    char control[4096];
    int fd;
    hwperf_profevctrarg_t probe;

    if (cpu_type >= 0)
        return 0;
    snprintf(control, sizeof control, "%s/control", mount_point());
    fd = open(control, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        int rc = parse_file_cpu(fd);
        close(fd);
        if (rc == 0)
            return 0;
    }
    if ((fd = open_self()) < 0)
        return -1;
    if (parse_file_cpu(fd) == 0)
        return 0;
    memset(&probe, 0, sizeof probe);
    probe.hwp_evctrargs.hwp_evctrl[0].hwperf_spec = HWPERF_CNTEN_U; /* cycles */
    if (self_ioctl(fd, PIOCENEVCTRS, &probe) < 0)
        return fail(errno, "cannot use the counters: %s", strerror(errno));
    parse_file_cpu(fd);
    self_ioctl(fd, PIOCRELEVCTRS, NULL);
    if (cpu_type < 0)
        return fail(EIO, "hwperfd at %s did not report its CPU type", mount_point());
    return 0;
}

static const char *event_name(int e)
{
    return pfx_event_names[cpu_type < 0 ? 0 : cpu_type][e];
}

/* -- events and slots (hwperfd/perfex/plan.py: choose) --------------------- */

static int twin(int e) /* the same event on the other R10000 counter */
{
    switch (e) {
    case 0: return 16;
    case 16: return 0;
    case 15: return 17;
    case 17: return 15;
    default: return -1;
    }
}

/* Place e0 and e1: slots[] and hwp_ev[] per event; returns how many slots. */
static int place(int e[2], int slots[2], int hwp_ev[2])
{
    int n = (e[0] == e[1]) ? 1 : 2, i;
    if (pfx_per_counter[cpu_type]) {
        if (n == 2 && e[0] / 16 == e[1] / 16) {
            for (i = 0; i < 2; i++)
                if (twin(e[i]) >= 0 && twin(e[i]) != e[1 - i]) {
                    e[i] = twin(e[i]);
                    break;
                }
            if (i == 2)
                return fail(EINVAL,
                            "conflicting counters: events %d (%s) and %d (%s) must both be counted "
                            "on hardware counter %d of the %s",
                            e[0], event_name(e[0]), e[1], event_name(e[1]), e[0] / 16, "R10000");
        }
        for (i = 0; i < n; i++) {
            slots[i] = e[i];
            hwp_ev[i] = e[i] % 16;
        }
    } else {
        /* R12000: counter 1 counts event (hwp_ev + 16) mod 32, as IRIX loaded it */
        for (i = 0; i < n; i++) {
            slots[i] = 16 * i + e[i] % 16;
            hwp_ev[i] = (e[i] - 16 * i) & 31;
        }
    }
    return n;
}

static void normalize(const char *in, char *out, size_t size)
{
    size_t o = 0;
    int space = 1;
    for (; *in && o + 1 < size; in++) {
        char c = (char)tolower((unsigned char)*in);
        if (isalnum((unsigned char)c) || c == '/') {
            out[o++] = c;
            space = 0;
        } else if (!space) {
            out[o++] = ' ';
            space = 1;
        }
    }
    while (o > 0 && out[o - 1] == ' ')
        o--;
    out[o] = '\0';
}

/* T5_EVENT0 / T5_EVENT1: a number, or an event name as perfex prints it. */
static int env_event(const char *var, int fallback)
{
    const char *v = getenv(var);
    char want[128], have[128];
    char *end;
    long n;
    int e;
    if (!v || !*v)
        return fallback;
    n = strtol(v, &end, 10);
    if (end != v && *end == '\0')
        return (int)n;
    normalize(v, want, sizeof want);
    for (e = 0; e < PFX_NEVENTS; e++) {
        normalize(event_name(e), have, sizeof have);
        if (strcmp(want, have) == 0)
            return e;
    }
    fprintf(stderr, "libperfex: %s=%s is not an event; using %d\n", var, v, fallback);
    return fallback;
}

static int check_event(int e)
{
    if (e < 0 || e >= PFX_NEVENTS)
        return fail(EINVAL, "event %d is outside 0..31", e);
    return 0;
}

/* -- counting ----------------------------------------------------------------- */

int start_counters(int e0, int e1)
{
    hwperf_profevctrarg_t args;
    int fd, e[2], slots[2] = {0, 0}, hwp_ev[2] = {0, 0}, n, i, gen;

    if ((fd = open_self()) < 0 || detect_machine() < 0)
        return -1;
    e[0] = env_event("T5_EVENT0", e0);
    e[1] = env_event("T5_EVENT1", e1);
    if (check_event(e[0]) < 0 || check_event(e[1]) < 0)
        return -1;
    if ((n = place(e, slots, hwp_ev)) < 0)
        return -1;
    memset(&args, 0, sizeof args);
    for (i = 0; i < n; i++)
        args.hwp_evctrargs.hwp_evctrl[slots[i]].hwperf_spec =
            (short)((hwp_ev[i] << HWPERF_EVSHIFT) | HWPERF_CNTEN_U);
    gen = self_ioctl(fd, PIOCENEVCTRS, &args);
    if (gen < 0 && errno == EBUSY) {
        /* "Calls to start_counters implicitly zero out the internal software
         * counters before starting them": start afresh. */
        self_ioctl(fd, PIOCRELEVCTRS, NULL);
        gen = self_ioctl(fd, PIOCENEVCTRS, &args);
    }
    if (gen < 0)
        return fail(errno, "cannot start the counters: %s", strerror(errno));
    /* Our counts from the state page from now on, where the daemon keeps one. */
    hwperfd_state_close(&self_state);
    hwperfd_state_open(fd, &self_state);
    started_events[0] = env_event("T5_EVENT0", e0);
    started_events[1] = env_event("T5_EVENT1", e1);
    started_slots[0] = slots[0];
    started_slots[1] = n == 2 ? slots[1] : slots[0];
    return gen;
}

static int slot_of(int e)
{
    int i;
    for (i = 0; i < 2; i++)
        if (started_events[i] == e)
            return started_slots[i];
    return e; /* not started: the r10k_counters(5) convention */
}

int read_counters(int e0, long long *c0, int e1, long long *c1)
{
    hwperf_cntr_t counts;
    int fd, gen;
    uint64_t fast[HWPERF_EVENTMAX];

    if ((fd = open_self()) < 0)
        return -1;
    e0 = env_event("T5_EVENT0", e0);
    e1 = env_event("T5_EVENT1", e1);
    if (check_event(e0) < 0 || check_event(e1) < 0)
        return -1;
    if (hwperfd_state_read(&self_state, &gen, fast, HWPERF_EVENTMAX) == 0) {
        memcpy(counts.hwp_evctr, fast, sizeof counts.hwp_evctr);
    } else {
        hwperfd_state_before_ioctl(&self_state);
        gen = self_ioctl(fd, PIOCGETEVCTRS, &counts);
        if (gen < 0)
            return fail(errno, "cannot read the counters: %s", strerror(errno));
    }
    hwperfd_state_close(&self_state); /* the release below ends the page */
    self_ioctl(fd, PIOCRELEVCTRS, NULL); /* "read_counters implicitly stops the counters" */
    if (c0)
        *c0 = (long long)counts.hwp_evctr[slot_of(e0)];
    if (c1)
        *c1 = (long long)counts.hwp_evctr[slot_of(e1)];
    return gen;
}

/* -- printing (hwperfd/perfex/report.py) ---------------------------------------- */

static void event_line(int number, long long count)
{
    const char *name = event_name(number);
    int len = (int)strlen(name), i;
    fprintf(stderr, "%2d %s", number, name);
    for (i = len; i < NAME_WIDTH; i++)
        fputc('.', stderr);
    fprintf(stderr, " %*lld", COUNT_WIDTH, count);
}

static void machine_or_default(void)
{
    if (cpu_type < 0 && (open_self() < 0 || detect_machine() < 0)) {
        cpu_type = 0;
        cpu_mhz = pfx_default_mhz[0];
        fprintf(stderr, "libperfex: assuming an R10000 at %g MHz\n", cpu_mhz);
    }
}

int print_counters(int e0, long long c0, int e1, long long c1)
{
    machine_or_default();
    e0 = env_event("T5_EVENT0", e0);
    e1 = env_event("T5_EVENT1", e1);
    if (check_event(e0) < 0 || check_event(e1) < 0)
        return -1;
    if (e0 == e1) {
        event_line(e0, c0);
        fputc('\n', stderr);
    } else {
        int first = e0 < e1 ? 0 : 1;
        event_line(first ? e1 : e0, first ? c1 : c0);
        fputc('\n', stderr);
        event_line(first ? e0 : e1, first ? c0 : c1);
        fputc('\n', stderr);
    }
    fflush(stderr);
    return 0;
}

/* -- costs (hwperfd/perfex/costs.py) ---------------------------------------------- */

static double cost_seconds(pfx_cost_t c, double mhz)
{
    return c.nsec ? c.value * 1e-9 : c.value / (mhz * 1e6);
}

static double cost_clocks(pfx_cost_t c, double mhz)
{
    return c.nsec ? c.value * mhz / 1000.0 : c.value;
}

static int unit_of(const char *word, int *nsec)
{
    static const char *const clks[] = {"clks", "clk", "clocks", "cycles"};
    static const char *const ns[] = {"nsec", "ns"};
    size_t i;
    for (i = 0; i < sizeof clks / sizeof *clks; i++)
        if (strcasecmp(word, clks[i]) == 0) {
            *nsec = 0;
            return 0;
        }
    for (i = 0; i < sizeof ns / sizeof *ns; i++)
        if (strcasecmp(word, ns[i]) == 0) {
            *nsec = 1;
            return 0;
        }
    return -1;
}

#define MAX_WORDS 64

/* Parse a cost file in perfex -t format into table[] (see costs.parse). */
static int parse_costs(FILE *in, const char *file, pfx_event_cost_t table[PFX_NEVENTS])
{
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0;
    int rc = 0;

    while (rc == 0 && getline(&line, &cap, in) >= 0) {
        char *words[MAX_WORDS], *p, *hash, name[512], want[512], have[512];
        int nwords = 0, head, first = 0, number = -1, i, all_same;
        pfx_cost_t values[3];

        lineno++;
        if ((hash = strchr(line, '#')))
            *hash = '\0';
        for (p = strtok(line, " \t\r\n\v\f"); p && nwords < MAX_WORDS; p = strtok(NULL, " \t\r\n\v\f"))
            words[nwords++] = p;
        if (nwords == 0)
            continue;
        if (nwords == 1) {
            all_same = 1;
            for (p = words[0]; *p; p++)
                if (*p != words[0][0])
                    all_same = 0;
            if (all_same && (words[0][0] == '=' || words[0][0] == '-'))
                continue;
        }
#define BAD(...) do { fprintf(stderr, "libperfex: %s:%ld: ", file, lineno); \
                      fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); rc = -1; goto next; } while (0)
        if (nwords < 6)
            BAD("expected an event, then typical, minimum and maximum costs, each a number and a unit");
        head = nwords - 6;
        for (i = 0; i < 3; i++) {
            char *value = words[head + 2 * i], *unit = words[head + 2 * i + 1], *end;
            double v;
            v = strtod(value, &end);
            if (unit_of(unit, &values[i].nsec) < 0) {
                if (end == value || *end != '\0')
                    BAD("expected an event, then typical, minimum and maximum costs, each a number and a unit");
                BAD("unit '%s' is neither clks nor nsec", unit);
            }
            if (end == value || *end != '\0')
                BAD("cost '%s' is not a number", value);
            if (!isfinite(v) || v < 0)
                BAD("cost '%s' must be a non-negative number", value);
            values[i].value = v;
        }
        if (head > 0 && words[0][0] && strspn(words[0], "0123456789") == strlen(words[0])) {
            number = atoi(words[0]);
            first = 1;
            if (number < 0 || number >= PFX_NEVENTS)
                BAD("event %d is outside 0..%d", number, PFX_NEVENTS - 1);
        }
        name[0] = '\0';
        for (i = first; i < head; i++) {
            if (name[0])
                strncat(name, " ", sizeof name - strlen(name) - 1);
            strncat(name, words[i], sizeof name - strlen(name) - 1);
        }
        for (i = (int)strlen(name); i > 0 && name[i - 1] == '.'; i--)
            name[i - 1] = '\0';
        normalize(name, want, sizeof want);
        if (number < 0) {
            int match = -1, matches = 0, e;
            if (!want[0])
                BAD("no event number or name");
            for (e = 0; e < PFX_NEVENTS; e++) {
                normalize(pfx_event_names[cpu_type][e], have, sizeof have);
                if (strcmp(want, have) == 0) {
                    if (matches++ == 0)
                        match = e;
                }
            }
            if (matches == 0)
                BAD("'%s' is not an event of the MIPS %s CPU", name, cpu_type ? "R12000" : "R10000");
            if (matches > 1)
                BAD("'%s' names more than one event: give the event number", name);
            number = match;
        } else if (want[0]) {
            normalize(pfx_event_names[cpu_type][number], have, sizeof have);
            if (strcmp(want, have) != 0)
                BAD("event %d is '%s' on the MIPS %s CPU, not '%s'", number,
                    pfx_event_names[cpu_type][number], cpu_type ? "R12000" : "R10000", name);
        }
        table[number].typical = values[0];
        table[number].minimum = values[1];
        table[number].maximum = values[2];
    next:;
#undef BAD
    }
    free(line);
    return rc;
}

static int apply_cost_file(const char *file, int required)
{
    pfx_event_cost_t scratch[PFX_NEVENTS];
    FILE *in = fopen(file, "r");
    int rc;
    if (!in) {
        if (!required && errno == ENOENT)
            return 0;
        return fail(errno, "cannot read cost file %s: %s", file, strerror(errno));
    }
    memcpy(scratch, costs, sizeof scratch);
    rc = parse_costs(in, file, scratch);
    fclose(in);
    if (rc < 0) {
        errno = EINVAL;
        return -1;
    }
    memcpy(costs, scratch, sizeof costs);
    return 0;
}

/* The built-in table, then /etc/perfex.costs (or $PERFEX_COSTS). */
static int prepare_costs(void)
{
    const char *system = getenv("PERFEX_COSTS");
    machine_or_default();
    if (costs_ready == cpu_type)
        return 0;
    memcpy(costs, pfx_builtin_costs[cpu_type], sizeof costs);
    costs_ready = cpu_type;
    return apply_cost_file(system && *system ? system : SYSTEM_COSTS, 0);
}

int load_costs(char *CostFileName)
{
    if (!CostFileName)
        return fail(EINVAL, "load_costs: no file name");
    if (prepare_costs() < 0)
        return -1;
    return apply_cost_file(CostFileName, 1);
}

/* -- statistics (hwperfd/perfex/stats.py) -------------------------------------- */

struct counts {
    long long c[PFX_NEVENTS];
    int have[PFX_NEVENTS];
};

static void stat_line(const char *name, double value)
{
    int len = (int)strlen(name), i;
    fputs(name, stderr);
    for (i = len; i < EVENT_WIDTH; i++)
        fputc('.', stderr);
    fprintf(stderr, " %*.6f\n", TIME_WIDTH, value);
}

static int stat_count;

static void add(const char *name, int ok, double value)
{
    if (!ok)
        return;
    if (stat_count++ == 0) {
        int i;
        fputs("\nStatistics\n", stderr);
        for (i = 0; i < STAT_LINE; i++)
            fputc('=', stderr);
        fputc('\n', stderr);
    }
    stat_line(name, value);
}

/* max over the listed events that were counted; -1 if none */
static long long max_of(const struct counts *k, int a, int b)
{
    long long m = -1;
    if (a >= 0 && k->have[a])
        m = k->c[a];
    if (b >= 0 && k->have[b] && k->c[b] > m)
        m = k->c[b];
    return m;
}

static void print_statistics(const struct counts *k, double mhz)
{
    int r12k = cpu_type == 1, l1 = pfx_line_bytes[cpu_type][0], l2 = pfx_line_bytes[cpu_type][1];
    const long long *c = k->c;
    const int *h = k->have;
    long long cyc = max_of(k, 0, r12k ? -1 : 16), grad = max_of(k, 15, r12k ? -1 : 17);
    int have_cyc = cyc > 0;
    double seconds = have_cyc ? (double)cyc / (mhz * 1e6) : 0.0;
    long long ls = (h[18] ? c[18] : 0) + (h[19] ? c[19] : 0);
#define DIV(a, b) ((b) ? (double)(a) / (double)(b) : 0.0)

    stat_count = 0;
    add("Graduated instructions/cycle", grad >= 0 && have_cyc, DIV(grad, cyc));
    add("Graduated floating point instructions/cycle", h[21] && have_cyc, DIV(c[21], cyc));
    add("Graduated loads & stores/cycle", h[18] && h[19] && have_cyc, DIV(ls, cyc));
    add("Graduated loads & stores/floating point instruction", h[18] && h[19] && h[21] && c[21] > 0,
        DIV(ls, c[21]));
    add(r12k ? "Mispredicted branches/Resolved conditional branches" : "Mispredicted branches/Decoded branches",
        h[24] && h[6] && c[6] > 0, DIV(c[24], c[6]));
    add(r12k ? "Graduated loads/Decoded loads" : "Graduated loads/Issued loads", h[18] && h[2] && c[2] > 0,
        DIV(c[18], c[2]));
    add(r12k ? "Graduated stores/Decoded stores" : "Graduated stores/Issued stores", h[19] && h[3] && c[3] > 0,
        DIV(c[19], c[3]));
    add("Data mispredict/Data scache hits", h[27] && h[25] && h[26] && c[25] > c[26], DIV(c[27], c[25] - c[26]));
    add("Instruction mispredict/Instruction scache hits", h[11] && h[9] && h[10] && c[9] > c[10],
        DIV(c[11], c[9] - c[10]));
    add("L1 Cache Line Reuse", h[18] && h[19] && h[25] && c[25] > 0, DIV(ls - c[25], c[25]));
    add("L2 Cache Line Reuse", h[25] && h[26] && c[26] > 0, DIV(c[25] - c[26], c[26]));
    add("L1 Data Cache Hit Rate", h[18] && h[19] && h[25] && ls > 0, 1.0 - DIV(c[25], ls));
    add("L2 Data Cache Hit Rate", h[25] && h[26] && c[25] > 0, 1.0 - DIV(c[26], c[25]));
    if (h[18] && h[19] && h[25] && h[26] && h[23] && have_cyc) {
        static const int memory[] = {18, 19, 25, 26, 23};
        double sum = 0.0;
        size_t i;
        for (i = 0; i < sizeof memory / sizeof *memory; i++)
            sum += (double)c[memory[i]] * cost_clocks(costs[memory[i]].typical, mhz);
        add("Time accessing memory/Total time", 1, sum / (double)cyc);
    }
    add("L1--L2 bandwidth used (MB/s, average per process)", h[25] && h[22] && have_cyc,
        (double)(c[25] * l1 + c[22] * PFX_QUADWORD_BYTES) / seconds / 1e6);
    add("Memory bandwidth used (MB/s, average per process)", h[26] && h[7] && have_cyc,
        (double)(c[26] * l2 + c[7] * PFX_QUADWORD_BYTES) / seconds / 1e6);
    add("MFLOPS (average per process)", h[21] && have_cyc, (double)c[21] / seconds / 1e6);
    if (r12k) {
        add("Cache misses in flight per cycle (average)", h[4] && have_cyc, DIV(c[4], cyc));
        add("Prefetch cache miss rate", h[16] && h[17] && c[16] > 0, DIV(c[17], c[16]));
    }
#undef DIV
}

static int is_cycles(int e)
{
    return e == 0 || (cpu_type == 0 && e == 16);
}

int print_costs(int e0, long long c0, int e1, long long c1)
{
    struct counts k;
    int events[2], n, i, j;
    long long counts_of[2];
    char clock[128];
    double mhz;

    if (prepare_costs() < 0)
        return -1;
    e0 = env_event("T5_EVENT0", e0);
    e1 = env_event("T5_EVENT1", e1);
    if (check_event(e0) < 0 || check_event(e1) < 0)
        return -1;
    mhz = cpu_mhz;
    memset(&k, 0, sizeof k);
    events[0] = e0;
    counts_of[0] = c0;
    n = 1;
    if (e1 != e0) {
        events[1] = e1;
        counts_of[1] = c1;
        n = 2;
    }
    /* most costly first; cycles lead (report.cost_order) */
    if (n == 2) {
        double t0 = -(double)counts_of[0] * cost_seconds(costs[events[0]].typical, mhz);
        double t1 = -(double)counts_of[1] * cost_seconds(costs[events[1]].typical, mhz);
        int k0 = !is_cycles(events[0]), k1 = !is_cycles(events[1]);
        if (k1 < k0 || (k1 == k0 && (t1 < t0 || (t1 == t0 && events[1] < events[0])))) {
            int te = events[0];
            long long tc = counts_of[0];
            events[0] = events[1];
            counts_of[0] = counts_of[1];
            events[1] = te;
            counts_of[1] = tc;
        }
    }
    snprintf(clock, sizeof clock, "Based on %g MHz MIPS %s CPU", mhz, cpu_type ? "R12000" : "R10000");
    fprintf(stderr, "%*s\n", COST_LINE, clock);
    fprintf(stderr, "%*s", EVENT_WIDTH, "");
    fprintf(stderr, " %*s %*s %*s\n", TIME_WIDTH, "Typical", TIME_WIDTH, "Minimum", TIME_WIDTH, "Maximum");
    fprintf(stderr, "   %-*s %*s", NAME_WIDTH, "Event Counter Name", COUNT_WIDTH, "Counter Value");
    for (i = 0; i < 3; i++)
        fprintf(stderr, " %*s", TIME_WIDTH, "Time (sec)");
    fputc('\n', stderr);
    for (i = 0; i < COST_LINE; i++)
        fputc('=', stderr);
    fputc('\n', stderr);
    for (j = 0; j < n; j++) {
        const pfx_event_cost_t *cost = &costs[events[j]];
        double count = (double)counts_of[j];
        event_line(events[j], counts_of[j]);
        fprintf(stderr, " %*.6f", TIME_WIDTH, count * cost_seconds(cost->typical, mhz));
        fprintf(stderr, " %*.6f", TIME_WIDTH, count * cost_seconds(cost->minimum, mhz));
        fprintf(stderr, " %*.6f\n", TIME_WIDTH, count * cost_seconds(cost->maximum, mhz));
        k.c[events[j]] = counts_of[j];
        k.have[events[j]] = 1;
    }
    print_statistics(&k, mhz);
    fflush(stderr);
    return 0;
}

/* -- FORTRAN ------------------------------------------------------------------------ */

int start_counters_(int *e0, int *e1)
{
    return start_counters(*e0, *e1);
}

int read_counters_(int *e0, long long *c0, int *e1, long long *c1)
{
    return read_counters(*e0, c0, *e1, c1);
}

int print_counters_(int *e0, long long *c0, int *e1, long long *c1)
{
    return print_counters(*e0, *c0, *e1, *c1);
}

int print_costs_(int *e0, long long *c0, int *e1, long long *c1)
{
    return print_costs(*e0, *c0, *e1, *c1);
}

int load_costs_(char *CostFileName, long length)
{
    char path[4096];
    long n = length;
    while (n > 0 && CostFileName[n - 1] == ' ') /* FORTRAN pads with blanks */
        n--;
    if (n >= (long)sizeof path)
        return fail(ENAMETOOLONG, "load_costs: file name too long");
    memcpy(path, CostFileName, (size_t)n);
    path[n] = '\0';
    return load_costs(path);
}
