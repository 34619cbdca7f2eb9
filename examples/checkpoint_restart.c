/* How IRIX checkpoint/restart carried a process's counters across a restart.
 * At checkpoint, PIOCGETEVCTRS saves the counts and generation and
 * PIOCGETEVCTRLEX the events, overflow thresholds and signal; the restarted
 * process acquires the counters with PIOCENEVCTRSEX, which continues from
 * the saved counts under the saved generation.  Both EX calls pass structs
 * of pointers, as on IRIX: run under hwperfd-run, which carries them.
 * Here the restarted process is a child of the checkpointed one.
 * Usage: checkpoint_restart [-w]   (-w: each process prints "counting PID"
 * and waits for a line instead of working) */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/procfs.h>
#include <sys/hwperftypes.h>
#include <sys/hwperfmacros.h>
#include <sys/wait.h>
#include <unistd.h>
#include "example_body.h"

static int open_self(void)
{
    char pfile[64];
    int fd;

    sprintf(pfile, "/proc/%05d", (int)getpid());
    if ((fd = open(pfile, O_RDWR)) < 0) {
        perror(pfile);
        exit(2);
    }
    return fd;
}

/* Work, or with -w say which process to advance and wait for a line. */
static void body(int wait)
{
    char line[64];

    if (!wait) {
        hwperfd_example_body(0);
        return;
    }
    printf("counting %d\n", (int)getpid());
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        exit(13);
}

int main(int argc, char **argv)
{
    hwperf_profevctrarg_t args;
    hwperf_profevctraux_t aux;      /* saved counts and generation */
    hwperf_eventctrl_t ctl;         /* saved events */
    hwperf_eventctrlaux_t ctlaux;   /* saved thresholds and signal */
    hwperf_getctrlex_arg_t getex;
    hwperf_profevctrargex_t enex;
    hwperf_cntr_t cnts;
    int fd, gen, status, wait = argc > 1 && strcmp(argv[1], "-w") == 0;
    pid_t child;

    /* -- the checkpointed process: count, then save everything ------------ */
    fd = open_self();
    memset(&args, 0, sizeof args);
    args.hwp_evctrargs.hwp_evctrl[0].hwperf_spec = HWPERF_CNTEN_U | (HWPERF_C0PRFCNT0_CYCLES << HWPERF_EVSHIFT);
    args.hwp_evctrargs.hwp_evctrl[17].hwperf_spec = HWPERF_CNTEN_U | (HWPERF_C0PRFCNT1_GINSTR << HWPERF_EVSHIFT);
    args.hwp_ovflw_freq[17] = 1000000;  /* no signal (0): kept, never sent */
    if ((gen = ioctl(fd, PIOCENEVCTRS, (void *)&args)) < 0) { perror("PIOCENEVCTRS"); return 3; }
    body(wait);
    if ((aux.hwp_aux_gen = ioctl(fd, PIOCGETEVCTRS, (void *)&aux.hwp_aux_cntr)) != gen) {
        perror("PIOCGETEVCTRS");
        return 4;
    }
    getex.hwp_evctrl = &ctl;
    getex.hwp_evctrlaux = &ctlaux;
    if (ioctl(fd, PIOCGETEVCTRLEX, (void *)&getex) != gen) { perror("PIOCGETEVCTRLEX"); return 5; }
    if (ioctl(fd, PIOCRELEVCTRS) < 0) { perror("PIOCRELEVCTRS"); return 6; }
    close(fd);
    printf("checkpoint generation: %d\n", aux.hwp_aux_gen);
    printf("checkpoint cycles: %llu\n", (unsigned long long)aux.hwp_aux_cntr.hwp_evctr[0]);
    printf("checkpoint graduated instructions: %llu\n", (unsigned long long)aux.hwp_aux_cntr.hwp_evctr[17]);
    fflush(stdout);

    /* -- the restarted process: acquire from the saved state -------------- */
    if ((child = fork()) < 0) { perror("fork"); return 7; }
    if (child == 0) {
        fd = open_self();
        memset(&args, 0, sizeof args);
        args.hwp_evctrargs = ctl;
        memcpy(args.hwp_ovflw_freq, ctlaux.hwp_aux_freq, sizeof args.hwp_ovflw_freq);
        args.hwp_ovflw_sig = ctlaux.hwp_aux_sig;
        enex.hwp_args = &args;
        enex.hwp_aux = &aux;
        if ((gen = ioctl(fd, PIOCENEVCTRSEX, (void *)&enex)) < 0) { perror("PIOCENEVCTRSEX"); _exit(8); }
        body(wait);
        if (ioctl(fd, PIOCGETEVCTRS, (void *)&cnts) != gen) { perror("PIOCGETEVCTRS"); _exit(9); }
        memset(&ctlaux, 0, sizeof ctlaux);
        if (ioctl(fd, PIOCGETEVCTRLEX, (void *)&getex) != gen) { perror("PIOCGETEVCTRLEX"); _exit(10); }
        printf("restart generation: %d\n", gen);
        printf("restart cycles: %llu\n", (unsigned long long)cnts.hwp_evctr[0]);
        printf("restart graduated instructions: %llu\n", (unsigned long long)cnts.hwp_evctr[17]);
        printf("restart threshold 17: %d\n", ctlaux.hwp_aux_freq[17]);
        printf("restart slot 17 spec: %d\n", ctl.hwp_evctrl[17].hwperf_spec);
        fflush(stdout);
        _exit(0);
    }
    if (waitpid(child, &status, 0) < 0) { perror("waitpid"); return 11; }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 12;
}
