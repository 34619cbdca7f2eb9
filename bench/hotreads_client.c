/*
 * Time one personality's hot read of a program's own counters, as the
 * program makes it (bench/hotreads.py).
 *
 *     hotreads_client -k KIND [-n CALLS] [-w WARMUP] [-t THREADS] [-z SETTLE_US]   (HWPERFD_MOUNT names the mount)
 *
 * KIND:
 *   rdtsc           the host's own rdtsc instruction: what a read costs on bare hardware
 *   pctr-rdtsc      pctr's rdtsc() (libpctr)
 *   pctr-rdpmc      pctr's rdpmc(0), counter 0 programmed first (PCIOCS0, root)
 *   pctr-ioctl      PCIOCRD on <mount>/pctr, counter 0 programmed first: the round trip rdtsc()/rdpmc() avoid
 *   cpc-sample      cpc_set_sample on a set the thread bound on itself (libcpc)
 *   cpc-ioctl       HWPERFD_CPCIO_SAMPLE on <mount>/cpc: the round trip cpc_set_sample avoids
 *   vperfctr        vperfctr_read_ctrs on the thread's own vperfctr (libperfctr)
 *   vperfctr-ioctl  VPERFCTR_READ_STATE on the same vperfctr: the round trip vperfctr_read_ctrs avoids
 *
 * With -t, THREADS threads of the process each set up their own counters
 * (cpc, vperfctr: their own binding) and time their own reads at once; the
 * figures are over every thread's calls.  With -z the threads sleep
 * SETTLE_US microseconds once set up, before the first call
 * (bench/hotreads.py: where the scheduler places client and server).  Each call is timed with
 * clock_gettime(CLOCK_MONOTONIC) around it.  Output: one machine-readable line
 *
 *     RESULT kind=.. threads=.. calls=.. median_ns=.. p99_ns=.. bad=..
 *
 * where bad counts reads that failed.  Exit status 0 only if none did.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <libcpc.h>
#include <libperfctr.h>
#include <machine/pctr.h>

static const char *kind;
static long calls = 10000, warmup = 1000, settle_us = 0;
static int nthreads = 1;
static pthread_barrier_t together;
static char mount[4096];

struct worker {
    pthread_t thread;
    unsigned long long *times;
    long bad;
};

static unsigned long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

static inline unsigned long long host_rdtsc(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned int lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((unsigned long long)hi << 32) | lo;
#else
    return now_ns();
#endif
}

static int node(const char *name, int flags)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", mount, name);
    return open(path, flags | O_CLOEXEC);
}

/* One thread's set-up and timed reads. */
static void *work(void *arg)
{
    struct worker *w = arg;
    volatile unsigned long long sink = 0;
    cpc_t *cpc = NULL;
    cpc_set_t *set = NULL;
    cpc_buf_t *buf = NULL;
    struct vperfctr *vp = NULL;
    struct perfctr_sum_ctrs sum;
    struct hwperfd_cpc_io io;
    struct hwperfd_vperfctr_state state;
    struct pctrst st;
    int fd = -1;
    long i;

    if (strcmp(kind, "cpc-sample") == 0 || strcmp(kind, "cpc-ioctl") == 0) {
        if ((cpc = cpc_open(CPC_VER_CURRENT)) == NULL || (set = cpc_set_create(cpc)) == NULL
            || cpc_set_add_request(cpc, set, "PAPI_tot_cyc", 0, CPC_COUNT_USER | CPC_COUNT_SYSTEM, 0, NULL) < 0
            || cpc_set_add_request(cpc, set, "PAPI_tot_ins", 0, CPC_COUNT_USER, 0, NULL) < 0
            || (buf = cpc_buf_create(cpc, set)) == NULL || cpc_bind_curlwp(cpc, set, 0) < 0) {
            perror("libcpc set-up");
            exit(1);
        }
        fd = node("cpc", O_RDONLY);
    } else if (strcmp(kind, "vperfctr") == 0 || strcmp(kind, "vperfctr-ioctl") == 0) {
        struct vperfctr_control control;
        struct perfctr_info info;
        if ((vp = vperfctr_open()) == NULL || vperfctr_info(vp, &info) < 0) {
            perror("vperfctr_open");
            exit(1);
        }
        memset(&control, 0, sizeof control);
        control.cpu_control.tsc_on = 1;
        control.cpu_control.nractrs = 1;
        control.cpu_control.pmc_map[0] = 0;
        control.cpu_control.evntsel[0] = 0x3c | (1 << 16) | (1 << 17) | (1 << 22); /* cycles, user+kernel */
        if (vperfctr_control(vp, &control) < 0) {
            perror("vperfctr_control");
            exit(1);
        }
        if (strcmp(kind, "vperfctr-ioctl") == 0 && (fd = _vperfctr_open(0)) < 0) { /* the same vperfctr */
            perror("_vperfctr_open");
            exit(1);
        }
    } else if (strncmp(kind, "pctr", 4) == 0) {
        fd = node("pctr", O_RDONLY);
    }
    pthread_barrier_wait(&together);
    if (settle_us > 0)
        usleep((useconds_t)settle_us);
    for (i = -warmup; i < calls; i++) {
        unsigned long long t = now_ns();
        int bad = 0;
        if (strcmp(kind, "rdtsc") == 0) {
            sink += host_rdtsc();
        } else if (strcmp(kind, "pctr-rdtsc") == 0) {
            errno = 0;
            sink += rdtsc();
            bad = errno != 0;
        } else if (strcmp(kind, "pctr-rdpmc") == 0) {
            errno = 0;
            sink += rdpmc(0);
            bad = errno != 0;
        } else if (strcmp(kind, "pctr-ioctl") == 0) {
            bad = ioctl(fd, PCIOCRD, &st) < 0;
        } else if (strcmp(kind, "cpc-sample") == 0) {
            bad = cpc_set_sample(cpc, set, buf) < 0;
        } else if (strcmp(kind, "cpc-ioctl") == 0) {
            memset(&io, 0, sizeof io);
            io.ci_target = HWPERFD_CPC_LWP;
            bad = ioctl(fd, HWPERFD_CPCIO_SAMPLE, &io) < 0 || io.ci_error != 0;
        } else if (strcmp(kind, "vperfctr") == 0) {
            bad = vperfctr_read_ctrs(vp, &sum) < 0;
            sink += sum.tsc;
        } else if (strcmp(kind, "vperfctr-ioctl") == 0) {
            bad = ioctl(fd, VPERFCTR_READ_STATE, &state) < 0;
        }
        t = now_ns() - t;
        if (i >= 0)
            w->times[i] = t;
        if (bad && !w->bad)
            fprintf(stderr, "%s: call %ld failed: %s\n", kind, i, strerror(errno));
        w->bad += bad;
    }
    (void)sink;
    if (vp != NULL)
        vperfctr_close(vp);
    if (cpc != NULL)
        cpc_close(cpc);
    if (fd >= 0)
        close(fd);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *m = getenv("HWPERFD_MOUNT");
    struct worker *workers;
    unsigned long long *all;
    long bad = 0, n, i;
    int opt, t;

    while ((opt = getopt(argc, argv, "k:n:w:t:z:")) != -1) {
        if (opt == 'k')
            kind = optarg;
        else if (opt == 'n')
            calls = atol(optarg);
        else if (opt == 'w')
            warmup = atol(optarg);
        else if (opt == 't')
            nthreads = atoi(optarg);
        else if (opt == 'z')
            settle_us = atol(optarg);
        else
            return 2;
    }
    if (kind == NULL || calls < 1 || warmup < 0 || nthreads < 1 || settle_us < 0)
        return 2;
    snprintf(mount, sizeof mount, "%s", m != NULL && *m ? m : "/run/hwperfd");
    if (strcmp(kind, "pctr-rdpmc") == 0 || strcmp(kind, "pctr-ioctl") == 0) {
        unsigned int fn = 0x3c | PCTR_U | PCTR_K | PCTR_EN;
        int wfd = node("pctr", O_RDWR);
        if (wfd < 0 || ioctl(wfd, PCIOCS0, &fn) < 0) {
            perror("PCIOCS0");
            return 1;
        }
        close(wfd);
    }
    workers = calloc((size_t)nthreads, sizeof *workers);
    pthread_barrier_init(&together, NULL, (unsigned)nthreads);
    for (t = 0; t < nthreads; t++) {
        workers[t].times = calloc((size_t)calls, sizeof(unsigned long long));
        pthread_create(&workers[t].thread, NULL, work, &workers[t]);
    }
    n = calls * nthreads;
    all = calloc((size_t)n, sizeof *all);
    for (t = 0; t < nthreads; t++) {
        pthread_join(workers[t].thread, NULL);
        memcpy(all + (long)t * calls, workers[t].times, (size_t)calls * sizeof *all);
        bad += workers[t].bad;
    }
    if (strcmp(kind, "pctr-rdpmc") == 0 || strcmp(kind, "pctr-ioctl") == 0) { /* the counters go back */
        unsigned int fn = 0;
        int wfd = node("pctr", O_RDWR);
        if (wfd < 0 || ioctl(wfd, PCIOCS0, &fn) < 0)
            perror("PCIOCS0");
        if (wfd >= 0)
            close(wfd);
    }
    qsort(all, (size_t)n, sizeof *all, cmp_u64);
    i = (n * 99 + 99) / 100 - 1;
    printf("RESULT kind=%s threads=%d calls=%ld median_ns=%llu p99_ns=%llu bad=%ld\n", kind, nthreads, n, all[n / 2],
           all[i < 0 ? 0 : i], bad);
    return bad != 0;
}
