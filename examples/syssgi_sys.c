/* System-wide counting with syssgi(SGI_EVENTCTR, ...), as IRIX's system tools
 * did it (r10k_counters(5), "Syssgi Commands"): acquire the counters in system
 * mode on every CPU, read the global and per-CPU counts, change the events,
 * release.  syssgi() comes from libhwperf (lib/irix/syssgi.c).
 *
 * Usage: syssgi_sys [STEP ...]
 * With no steps: enable:uk read cpus ctl release, with one second of work
 * between enable and read.  Steps, run in order, each printing one line
 * "NAME: RESULT ERRNO ..." (ERRNO is "-" on success):
 *   enable:MODES  HWPERF_ENSYSCNTRS: slot 0 cycles, slot 17 graduated
 *                 instructions, both counted in MODES (letters u k x)
 *   set:MODES     HWPERF_SET_SYSEVCTRL: slot 0 unchanged, slot 17 off,
 *                 slot 25 (primary data cache misses) in MODES
 *   read          HWPERF_GET_SYSCNTRS: "read: GEN - c0 c17 c25"
 *   cpu:N         HWPERF_GET_CPUCNTRS for cpu N: "cpu:N: GEN - c0 c17 c25"
 *   cpus          cpu:0, cpu:1 ... until the call returns 0 (no such CPU),
 *                 then "cpus: N"
 *   ctl           HWPERF_GET_SYSEVCTRL into an hwperf_profevctrarg_t (as SGI's
 *                 tools did; only its first 64 bytes are written), then
 *                 "ctl: GEN - spec0 spec17 spec25 canary-intact"
 *   release       HWPERF_RELSYSCNTRS
 *   prof          HWPERF_PROFENABLE with no region (profcnt 0): E2BIG;
 *                 evc_profile.c profiles for real
 *   badcmd        an unknown SGI_EVENTCTR command (EINVAL)
 *   badreq        a syssgi request other than SGI_EVENTCTR (EINVAL)
 *   wait          print "waiting" and read a line from stdin (tests move the
 *                 manual clock meanwhile)
 *   work          about a second of CPU work
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syssgi.h>
#include <sys/hwperftypes.h>
#include <sys/hwperfmacros.h>
#include <unistd.h>

static const char *
errname(int result, int err)
{
    static char buf[16];

    if (result >= 0)
        return "-";
    switch (err) {
    case EINVAL: return "EINVAL";
    case EPERM: return "EPERM";
    case EBUSY: return "EBUSY";
    case ENOTSUP: return "ENOTSUP";
    case E2BIG: return "E2BIG";
    case EFAULT: return "EFAULT";
    case EACCES: return "EACCES";
    case ENOENT: return "ENOENT";
    case ENOTTY: return "ENOTTY";
    case EIO: return "EIO";
    case ENOTCONN: return "ENOTCONN";
    }
    snprintf(buf, sizeof buf, "E%d", err);
    return buf;
}

static int
modes(const char *letters)
{
    int mode = 0;

    for (; *letters; letters++) {
        if (*letters == 'u') mode |= HWPERF_CNTEN_U;
        else if (*letters == 'k') mode |= HWPERF_CNTEN_K;
        else if (*letters == 'x') mode |= HWPERF_CNTEN_E;
        else if (*letters == 's') mode |= HWPERF_CNTEN_S;
    }
    return mode;
}

static void
request(hwperf_profevctrarg_t *args, int mode, int changed)
{
    memset(args, 0, sizeof *args);
    /* Slot 0: cycles, with the bit-fields as the r10k_counters(5) example. */
    args->hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_mode = mode;
    args->hwp_evctrargs.hwp_evctrl[0].hwperf_creg.hwp_ev = HWPERF_C0PRFCNT0_CYCLES;
    /* Counter 1: hwperf_spec written by hand, as SGI's daemons did. */
    if (!changed)
        args->hwp_evctrargs.hwp_evctrl[HWPERF_CNT1BASE + 1].hwperf_spec =
            mode | (HWPERF_C0PRFCNT1_GINSTR << HWPERF_EVSHIFT);
    else
        args->hwp_evctrargs.hwp_evctrl[HWPERF_CNT1BASE + 9].hwperf_spec =
            mode | (HWPERF_C0PRFCNT1_PDCMISS << HWPERF_EVSHIFT);
}

static void
print_counts(const char *name, int result, int err, const hwperf_cntr_t *c)
{
    printf("%s: %d %s %llu %llu %llu\n", name, result, errname(result, err),
           (unsigned long long)c->hwp_evctr[0], (unsigned long long)c->hwp_evctr[17],
           (unsigned long long)c->hwp_evctr[25]);
}

static void
work(void)
{
    static volatile double sink;
    unsigned long i;

    for (i = 0; i < 200000000UL; i++)
        sink += (double)i * 0.5;
}

static int
step(const char *s)
{
    hwperf_profevctrarg_t args;
    hwperf_cntr_t cnts;
    int r;

    memset(&cnts, 0, sizeof cnts);
    if (strncmp(s, "enable:", 7) == 0) {
        request(&args, modes(s + 7), 0);
        r = syssgi(SGI_EVENTCTR, HWPERF_ENSYSCNTRS, &args);
        printf("enable: %d %s\n", r, errname(r, errno));
    } else if (strncmp(s, "set:", 4) == 0) {
        request(&args, modes(s + 4), 1);
        r = syssgi(SGI_EVENTCTR, HWPERF_SET_SYSEVCTRL, &args);
        printf("set: %d %s\n", r, errname(r, errno));
    } else if (strcmp(s, "read") == 0) {
        r = syssgi(SGI_EVENTCTR, HWPERF_GET_SYSCNTRS, &cnts);
        print_counts("read", r, errno, &cnts);
    } else if (strncmp(s, "cpu:", 4) == 0) {
        char name[32];
        int cpu = atoi(s + 4);
        r = syssgi(SGI_EVENTCTR, HWPERF_GET_CPUCNTRS, cpu, &cnts);
        snprintf(name, sizeof name, "cpu:%d", cpu);
        print_counts(name, r, errno, &cnts);
    } else if (strcmp(s, "cpus") == 0) {
        int cpu;
        for (cpu = 0; ; cpu++) {
            char name[32];
            memset(&cnts, 0, sizeof cnts);
            r = syssgi(SGI_EVENTCTR, HWPERF_GET_CPUCNTRS, cpu, &cnts);
            if (r <= 0)
                break;
            snprintf(name, sizeof name, "cpu:%d", cpu);
            print_counts(name, r, errno, &cnts);
        }
        printf("cpus: %d %s\n", cpu, errname(r, errno));
    } else if (strcmp(s, "ctl") == 0) {
        /* A bigger struct, as SGI's tools passed: only 64 bytes may change. */
        memset(&args, 0xA5, sizeof args);
        r = syssgi(SGI_EVENTCTR, HWPERF_GET_SYSEVCTRL, &args);
        {
            const unsigned char *tail = (const unsigned char *)&args + sizeof(hwperf_eventctrl_t);
            size_t i, intact = 1;
            for (i = 0; i < sizeof args - sizeof(hwperf_eventctrl_t); i++)
                if (tail[i] != 0xA5)
                    intact = 0;
            printf("ctl: %d %s %u %u %u %s\n", r, errname(r, errno),
                   (unsigned)(unsigned short)args.hwp_evctrargs.hwp_evctrl[0].hwperf_spec,
                   (unsigned)(unsigned short)args.hwp_evctrargs.hwp_evctrl[17].hwperf_spec,
                   (unsigned)(unsigned short)args.hwp_evctrargs.hwp_evctrl[25].hwperf_spec,
                   intact ? "canary-intact" : "canary-overwritten");
        }
    } else if (strcmp(s, "release") == 0) {
        r = syssgi(SGI_EVENTCTR, HWPERF_RELSYSCNTRS);
        printf("release: %d %s\n", r, errname(r, errno));
    } else if (strcmp(s, "prof") == 0) {
        request(&args, HWPERF_CNTEN_U, 0);
        r = syssgi(SGI_EVENTCTR, HWPERF_PROFENABLE, &args, (void *)0, 0);
        printf("prof: %d %s\n", r, errname(r, errno));
    } else if (strcmp(s, "badcmd") == 0) {
        r = syssgi(SGI_EVENTCTR, 3);
        printf("badcmd: %d %s\n", r, errname(r, errno));
    } else if (strcmp(s, "badreq") == 0) {
        r = syssgi(SGI_EVENTCTR + 1, HWPERF_GET_SYSCNTRS, &cnts);
        printf("badreq: %d %s\n", r, errname(r, errno));
    } else if (strcmp(s, "wait") == 0) {
        char line[64];
        printf("waiting\n");
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin))
            return 1;
    } else if (strcmp(s, "work") == 0) {
        work();
    } else {
        fprintf(stderr, "syssgi_sys: unknown step %s\n", s);
        return 2;
    }
    fflush(stdout);
    return 0;
}

int
main(int argc, char **argv)
{
    static const char *defaults[] = {"enable:uk", "work", "read", "cpus", "ctl", "release"};
    int i, rc;

    if (argc < 2) {
        for (i = 0; i < (int)(sizeof defaults / sizeof defaults[0]); i++)
            if ((rc = step(defaults[i])) != 0)
                return rc;
        return 0;
    }
    for (i = 1; i < argc; i++)
        if ((rc = step(argv[i])) != 0)
            return rc;
    return 0;
}
