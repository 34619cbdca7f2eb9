/*
 * hwperfd state pages: a counting context's counters, kept by the daemon in a
 * file the counted process maps read-only, so that the process reads its own
 * counters without a request to the daemon (docs/state-pages.md).
 *
 * The page holds a snapshot and the exact rates it moves at.  Under the real
 * clock a reader takes its own CPU time and extrapolates with the daemon's
 * arithmetic, so a read equals a read through the daemon at the same moment;
 * under the manual clock the daemon rewrites the page whenever time moves.
 * hs_seq is odd while the daemon writes: a reader takes the page again then.
 *
 * Mirrored by structs/state.py (tests compare the layouts).
 */
#ifndef __HWPERFD_STATE_H__
#define __HWPERFD_STATE_H__

#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/time.h>
#include <sys/types.h>

#define HWPERFD_STATE_MAGIC 0x53505748u /* "HWPS" */
#define HWPERFD_STATE_VERSION 2
#define HWPERFD_STATE_SIZE 4096
#define HWPERFD_STATE_SLOTS 64

/* hs_flags */
#define HWPERFD_STATE_FALLBACK 0x1 /* read through the ioctl: the snapshot cannot be extrapolated */
#define HWPERFD_STATE_DEAD 0x2     /* the page is no longer kept */
#define HWPERFD_STATE_OWN 0x4      /* the counts never take in reaped children's: no RUSAGE_CHILDREN check */

/* hs_clock: what moves the context's counts */
#define HWPERFD_STATE_CLOCK_MANUAL 0  /* only the daemon: the snapshot is the count */
#define HWPERFD_STATE_CLOCK_PROCESS 1 /* CLOCK_PROCESS_CPUTIME_ID */
#define HWPERFD_STATE_CLOCK_THREAD 2  /* CLOCK_THREAD_CPUTIME_ID */
#define HWPERFD_STATE_CLOCK_MONOTONIC 3 /* CLOCK_MONOTONIC: wall time (a TSC), all of it "user" time */

/*
 * One slot moves as
 *   count + (residue + du * per_user + ds * per_system) / den
 * (integer division; den 0: it does not move), where du and ds are the user
 * and system time since the snapshot, each at least 0.
 */
struct hwperfd_state_slot {
    uint64_t count;
    uint64_t residue;
    uint64_t per_user;
    uint64_t per_system;
    uint64_t den;
};

/*
 * The context's CPU time past the snapshot is divided as the daemon divides
 * it (hwperfd/host/attribution.py): of the time the clock shows beyond
 * user_ns + system_ns, split_system parts in split_user + split_system are
 * system time (with split_carry of a part carried in), at most
 * system_room ns of it; the rest is user time.  Time before the snapshot is
 * never divided again.
 */
struct hwperfd_state {
    uint32_t hs_magic;
    uint16_t hs_version;
    uint16_t hs_nslots;
    uint32_t hs_seq;
    uint32_t hs_flags;
    uint32_t hs_clock;
    int32_t hs_generation;
    uint64_t hs_user_ns; /* CPU times at the snapshot */
    uint64_t hs_system_ns;
    uint64_t hs_split_user;
    uint64_t hs_split_system;
    uint64_t hs_system_room;
    int32_t hs_pid; /* the process (or thread) counted */
    uint32_t hs_pad;
    uint64_t hs_split_carry;
    /* A page of per-CPU counters (hs_ncpus > 0) holds hs_cpu_slots slots per
     * CPU, CPU i's from slot i * hs_cpu_slots; a reader on host CPU c reads
     * CPU c % hs_ncpus, as the daemon answers a caller on that CPU. */
    uint32_t hs_ncpus;
    uint32_t hs_cpu_slots;
    /* CLOCK_MONOTONIC ns from which the snapshot no longer holds (0: never):
     * a reader past it reads through the ioctl, which writes the page anew. */
    uint64_t hs_expires_ns;
    unsigned char hs_reserved[32];
    struct hwperfd_state_slot hs_slots[HWPERFD_STATE_SLOTS];
};

typedef struct hwperfd_state_slot hwperfd_state_slot_t;
typedef struct hwperfd_state hwperfd_state_t;

/* 128-bit intermediates; __extension__ and __inline__ keep -std=c89 and
 * -pedantic builds quiet. */
__extension__ typedef unsigned __int128 hwperfd_state_u128_t;

/* The daemon's arithmetic, shared by every reader of a page (lib/state.c and
 * the daemon's own ioctl bridge): the user and system time since the
 * snapshot, for a context whose CPU clock reads `total` ns ... */
static __inline__ void hwperfd_state_elapsed(uint64_t total, uint64_t user_ns, uint64_t system_ns, uint64_t split_user,
                                         uint64_t split_system, uint64_t split_carry, uint64_t system_room,
                                         uint64_t *du, uint64_t *ds)
{
    uint64_t parts = split_user + split_system, base = user_ns + system_ns, dt, system = 0;
    dt = total > base ? total - base : 0;
    if (parts)
        system = (uint64_t)(((hwperfd_state_u128_t)split_carry + (hwperfd_state_u128_t)dt * split_system) / parts);
    if (system > system_room)
        system = system_room;
    if (system > dt)
        system = dt;
    *du = dt - system;
    *ds = system;
}

/* ... and one slot's count after du and ds more of them. */
static __inline__ uint64_t hwperfd_state_slot_count(uint64_t count, uint64_t residue, uint64_t per_user,
                                                uint64_t per_system, uint64_t den, uint64_t du, uint64_t ds)
{
    if (!den)
        return count;
    return count + (uint64_t)(((hwperfd_state_u128_t)residue + (hwperfd_state_u128_t)du * per_user
                               + (hwperfd_state_u128_t)ds * per_system)
                              / den);
}

#define HWPERFD_STATE_PATH_MAX 128
typedef struct hwperfd_statepage {
    char hp_path[HWPERFD_STATE_PATH_MAX];
} hwperfd_statepage_t;

/* On the caller's own process file (<mount>/%05d), by that process only. */
#define HWPERFD_PIOCSTATEPAGE _IOR('h', 129, hwperfd_statepage_t)

/* A process's handle on its own page. */
struct hwperfd_state_reader {
    const volatile struct hwperfd_state *page; /* NULL: none, read through the ioctl */
    pid_t pid;                                 /* the process that mapped it */
    unsigned forks;                            /* forks seen by then (a forked child reads through the ioctl) */
    struct timeval children_user, children_system; /* RUSAGE_CHILDREN at the last ioctl */
    int shared; /* threads read it at once: a dead page stays mapped (ESTALE each read), never unmapped under them */
};

/* Map the page of the process whose file `fd` is (the caller's own, after it
 * enabled counting): 0, or -1 with errno (the reader is then empty). */
int hwperfd_state_open(int fd, struct hwperfd_state_reader *r);

/* Map the page at `path` (what a personality's own ioctl told the process):
 * 0, or -1 with errno.  This and hwperfd_state_open are in lib/state_open.c. */
int hwperfd_state_map(const char *path, struct hwperfd_state_reader *r);

/* Map the page open on `page_fd`, which it closes: 0, or -1 with errno. */
int hwperfd_state_map_fd(int page_fd, struct hwperfd_state_reader *r);

/* Unmap; the reader is empty afterwards. */
void hwperfd_state_close(struct hwperfd_state_reader *r);

/* Read slots 0..n-1 (n at most HWPERFD_STATE_SLOTS) and the generation into
 * `counts` and `*generation`: 0 when the page served, -1 when the caller must
 * read through the ioctl (first calling hwperfd_state_before_ioctl).  A page
 * the daemon let go is unmapped by the thread's outermost read: one made in
 * a signal handler that interrupted another read leaves the page to it. */
int hwperfd_state_read(struct hwperfd_state_reader *r, int *generation, uint64_t *counts, unsigned n);

/* The same for a page of per-CPU counters: the n slots of the CPU the caller
 * runs on (`*cpu` says which, of the page's), and the CLOCK_MONOTONIC ns the
 * read was taken at in `*now_ns` (may be NULL).  Any page: `*now_ns` is the
 * monotonic time of the read; a page of one context reads as CPU 0. */
int hwperfd_state_read_cpu(struct hwperfd_state_reader *r, int *generation, uint64_t *counts, unsigned n,
                           unsigned *cpu, uint64_t *now_ns);

/* After a fork, in the child: a page of public, per-CPU counters (pctr's)
 * reads the same in the child, so it may keep serving there. */
void hwperfd_state_adopt(struct hwperfd_state_reader *r);

/* Call before reading through the ioctl: children reaped after this are
 * noticed, and the next read goes to the daemon, which folds their counts in. */
void hwperfd_state_before_ioctl(struct hwperfd_state_reader *r);

#endif /* __HWPERFD_STATE_H__ */
