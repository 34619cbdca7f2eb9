/*
 * Reading one's own counters from the hwperfd state page (include/hwperfd/state.h).
 * Linked into libperfex, libperfctr and the hwperfd-run shim; a personality
 * library that counts threads reads a thread's page the same way (hs_clock
 * names the clock).  It calls nothing the shim interposes (ioctl, open): the
 * shim calls it, so it must not call the shim back.  Finding and opening the
 * page is state_open.c's, for the libraries.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "hwperfd/state.h"

/* Forks seen in this process (a child's count is its parent's plus one): a
 * reader mapped before a fork is the parent's page, and it costs less to
 * compare than getpid(2), a system call on every read. */
static unsigned forks;

/* How long a reader that finds the page being written waits for the write
 * before it asks the daemon instead.  A write spans the daemon's catch-up
 * (tens of us); on a busy machine the daemon can be preempted halfway for a
 * scheduler slice (ms), and a reader spinning meanwhile burns its own CPU
 * time - counted, and seen as frozen counters by an overflow handler - and
 * on a shared CPU the writer's.  The ioctl waits asleep behind the write and
 * answers exactly; a daemon stopped or killed halfway leaves the counter odd
 * for good, and the ioctl rides that out too. */
#define WRITING_WAIT_NS 20000u
static pthread_once_t fork_hook = PTHREAD_ONCE_INIT;

/* Reads under way on this thread: more than one when a signal handler reads
 * (a library's overflow handler sampling its counters) while the thread it
 * interrupted was reading.  Only the outermost read may unmap a dead page: the
 * interrupted one is still reading it. */
static __thread unsigned reading;

static void forked(void)
{
    forks++;
}

static void hook_forks(void)
{
    pthread_atfork(NULL, NULL, forked);
}

static void children_times(struct timeval *user, struct timeval *system)
{
    struct rusage ru;
    if (getrusage(RUSAGE_CHILDREN, &ru) == 0) {
        *user = ru.ru_utime;
        *system = ru.ru_stime;
    }
}

int hwperfd_state_map_fd(int page_fd, struct hwperfd_state_reader *r)
{
    const struct hwperfd_state *page;
    void *map;
    int err;

    memset(r, 0, sizeof *r);
    map = mmap(NULL, HWPERFD_STATE_SIZE, PROT_READ, MAP_SHARED, page_fd, 0);
    err = errno;
    close(page_fd);
    if (map == MAP_FAILED) {
        errno = err;
        return -1;
    }
    page = map;
    if (page->hs_magic != HWPERFD_STATE_MAGIC || page->hs_version != HWPERFD_STATE_VERSION) {
        munmap(map, HWPERFD_STATE_SIZE);
        errno = EPROTO;
        return -1;
    }
    r->pid = getpid();
    pthread_once(&fork_hook, hook_forks);
    r->forks = __atomic_load_n(&forks, __ATOMIC_RELAXED);
    children_times(&r->children_user, &r->children_system);
    /* Published last: a signal handler that reads meanwhile finds no page,
     * and one that reads after may give a dead page up (the outermost read)
     * without this function touching it again. */
    __atomic_store_n(&r->page, page, __ATOMIC_SEQ_CST);
    return 0;
}

void hwperfd_state_close(struct hwperfd_state_reader *r)
{
    /* Emptied before the unmap: a signal handler that reads in between finds
     * no page, not an unmapped one; and taken in one step, so that a handler
     * that gives the page up between the load and the store (the outermost
     * read, when this close was not reading) leaves this close none to unmap. */
    const volatile struct hwperfd_state *page = __atomic_exchange_n(&r->page, NULL, __ATOMIC_SEQ_CST);

    memset(r, 0, sizeof *r);
    if (page != NULL)
        munmap((void *)page, HWPERFD_STATE_SIZE);
}

void hwperfd_state_before_ioctl(struct hwperfd_state_reader *r)
{
    if (r->page != NULL)
        children_times(&r->children_user, &r->children_system);
}

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t cpu_clock(uint32_t kind)
{
    if (kind == HWPERFD_STATE_CLOCK_MONOTONIC)
        return clock_ns(CLOCK_MONOTONIC);
    return clock_ns(kind == HWPERFD_STATE_CLOCK_THREAD ? CLOCK_THREAD_CPUTIME_ID : CLOCK_PROCESS_CPUTIME_ID);
}

void hwperfd_state_adopt(struct hwperfd_state_reader *r)
{
    r->forks = __atomic_load_n(&forks, __ATOMIC_RELAXED);
    r->pid = getpid();
}

/* The host CPU the caller runs on (the vDSO's getcpu: no system call). */
static unsigned host_cpu(void)
{
    int cpu = sched_getcpu();
    return cpu < 0 ? 0 : (unsigned)cpu;
}

int hwperfd_state_read(struct hwperfd_state_reader *r, int *generation, uint64_t *counts, unsigned n)
{
    return hwperfd_state_read_cpu(r, generation, counts, n, NULL, NULL);
}

static int read_cpu(struct hwperfd_state_reader *r, int *generation, uint64_t *counts, unsigned n, unsigned *cpu_out,
                    uint64_t *now_ns);

int hwperfd_state_read_cpu(struct hwperfd_state_reader *r, int *generation, uint64_t *counts, unsigned n,
                           unsigned *cpu_out, uint64_t *now_ns)
{
    int rc;

    reading++;
    rc = read_cpu(r, generation, counts, n, cpu_out, now_ns);
    reading--;
    return rc;
}

static int read_cpu(struct hwperfd_state_reader *r, int *generation, uint64_t *counts, unsigned n, unsigned *cpu_out,
                    uint64_t *now_ns)
{
    const volatile struct hwperfd_state *p = __atomic_load_n(&r->page, __ATOMIC_SEQ_CST);
    struct hwperfd_state_slot slots[HWPERFD_STATE_SLOTS];
    uint64_t user_ns, system_ns, split_user, split_system, split_carry, system_room, now = 0, du, ds;
    uint64_t expires, mono = 0;
    uint32_t seq, flags, kind, ncpus, stride;
    struct timeval cu = {0, 0}, cs = {0, 0};
    int gen;
    unsigned i, nslots, first, cpu = 0, spins = 0;
    uint64_t writing_since = 0;

    if (p == NULL || r->forks != __atomic_load_n(&forks, __ATOMIC_RELAXED) || n > HWPERFD_STATE_SLOTS) {
        errno = EAGAIN;
        return -1;
    }
    for (;;) {
        seq = __atomic_load_n(&p->hs_seq, __ATOMIC_ACQUIRE);
        if (seq & 1) { /* the daemon is writing */
            if (spins++ == 0) {
                writing_since = clock_ns(CLOCK_MONOTONIC);
            } else if (spins % 64 == 0 && clock_ns(CLOCK_MONOTONIC) - writing_since >= WRITING_WAIT_NS) {
                errno = EAGAIN;
                return -1;
            }
            continue;
        }
        flags = p->hs_flags;
        kind = p->hs_clock;
        gen = p->hs_generation;
        nslots = p->hs_nslots;
        user_ns = p->hs_user_ns;
        system_ns = p->hs_system_ns;
        split_user = p->hs_split_user;
        split_system = p->hs_split_system;
        split_carry = p->hs_split_carry;
        system_room = p->hs_system_room;
        ncpus = p->hs_ncpus;
        stride = p->hs_cpu_slots;
        expires = p->hs_expires_ns;
        if (nslots > HWPERFD_STATE_SLOTS)
            nslots = HWPERFD_STATE_SLOTS;
        first = 0;
        if (ncpus) {
            cpu = host_cpu() % ncpus;
            first = cpu * stride;
        }
        for (i = 0; i < n && first + i < nslots; i++) {
            slots[i].count = p->hs_slots[first + i].count;
            slots[i].residue = p->hs_slots[first + i].residue;
            slots[i].per_user = p->hs_slots[first + i].per_user;
            slots[i].per_system = p->hs_slots[first + i].per_system;
            slots[i].den = p->hs_slots[first + i].den;
        }
        /* The clock after the snapshot: never earlier than the daemon's. */
        if (kind != HWPERFD_STATE_CLOCK_MANUAL)
            now = cpu_clock(kind);
        if (now_ns != NULL || expires)
            mono = kind == HWPERFD_STATE_CLOCK_MONOTONIC ? now : clock_ns(CLOCK_MONOTONIC);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&p->hs_seq, __ATOMIC_RELAXED) == seq)
            break;
    }
    if (flags & HWPERFD_STATE_DEAD) {
        if (!r->shared && reading == 1 && r->page == p)
            hwperfd_state_close(r);
        errno = ESTALE;
        return -1;
    }
    /* Past its expiry the snapshot no longer holds: the ioctl at this moment
     * would take the counts anew (and write the page again). */
    if (flags & HWPERFD_STATE_FALLBACK || first + n > nslots || (expires && mono >= expires)) {
        errno = EAGAIN;
        return -1;
    }
    /* A child reaped since the daemon last answered brings counts it has not
     * folded in yet (r10k_counters(5): a waiting parent gets its child's). */
    if (!(flags & HWPERFD_STATE_OWN)) {
        children_times(&cu, &cs);
        if (cu.tv_sec != r->children_user.tv_sec || cu.tv_usec != r->children_user.tv_usec
            || cs.tv_sec != r->children_system.tv_sec || cs.tv_usec != r->children_system.tv_usec) {
            errno = EAGAIN;
            return -1;
        }
    }
    du = ds = 0;
    if (kind != HWPERFD_STATE_CLOCK_MANUAL)
        hwperfd_state_elapsed(now, user_ns, system_ns, split_user, split_system, split_carry, system_room, &du, &ds);
    for (i = 0; i < n; i++)
        counts[i] = hwperfd_state_slot_count(slots[i].count, slots[i].residue, slots[i].per_user,
                                             slots[i].per_system, slots[i].den, du, ds);
    *generation = gen;
    if (cpu_out != NULL)
        *cpu_out = cpu;
    if (now_ns != NULL)
        *now_ns = mono;
    return 0;
}
