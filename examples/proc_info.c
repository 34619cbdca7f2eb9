/* The informational /proc ioctls counter tools call beside the counter ones,
 * as IRIX programs call them: PIOCPSINFO (PAPI's library init), PIOCUSAGE (a
 * tool's fallback when PIOCENEVCTRS says EPERM), PIOCGETPTIMER (a runtime's
 * CPU time), PIOCCRED, PIOCNMAP + PIOCMAP (the address-space map).
 * Prints "name: value" lines; a refused call prints "name errno: N".
 * Usage: proc_info [-i] [pid]   (-i: open /proc/pinfo/%05d, IRIX's file for
 * unprivileged tools; default pid: itself) */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/procfs.h>
#include <unistd.h>

static int refused(const char *name)
{
    printf("%s errno: %d\n", name, errno);
    return 0;
}

int main(int argc, char **argv)
{
    char pfile[64];
    prpsinfo_t psi;
    prusage_t pu;
    prcred_t cred;
    timespec_t timers[MAX_PROCTIMER];
    prmap_t *maps;
    int fd, n, i, argi = 1, pinfo = 0;
    pid_t pid = getpid();

    if (argi < argc && strcmp(argv[argi], "-i") == 0) { pinfo = 1; argi++; }
    if (argi < argc) pid = atoi(argv[argi]);
    sprintf(pfile, pinfo ? "/proc/pinfo/%05d" : "/proc/%05d", (int)pid);
    if ((fd = open(pfile, O_RDONLY)) < 0) { perror(pfile); return 2; }

    if (ioctl(fd, PIOCPSINFO, (void *)&psi) < 0)
        refused("psinfo");
    else {
        printf("pr_pid: %d\n", (int)psi.pr_pid);
        printf("pr_ppid: %d\n", (int)psi.pr_ppid);
        printf("pr_pgrp: %d\n", (int)psi.pr_pgrp);
        printf("pr_sid: %d\n", (int)psi.pr_sid);
        printf("pr_uid: %d\n", (int)psi.pr_uid);
        printf("pr_gid: %d\n", (int)psi.pr_gid);
        printf("pr_sname: %c\n", psi.pr_sname);
        printf("pr_state: %d\n", psi.pr_state);
        printf("pr_nice: %d\n", psi.pr_nice);
        printf("pr_size: %ld\n", psi.pr_size);
        printf("pr_rssize: %ld\n", psi.pr_rssize);
        printf("pr_start: %lld\n", (long long)psi.pr_start.tv_sec);
        printf("pr_time: %lld\n", (long long)psi.pr_time.tv_sec * 1000000000LL + psi.pr_time.tv_nsec);
        printf("pr_clname: %s\n", psi.pr_clname);
        printf("pr_fname: %s\n", psi.pr_fname);
        printf("pr_psargs: %s\n", psi.pr_psargs);
        printf("pr_ttydev: %lld\n", (long long)psi.pr_ttydev);
        printf("pr_thds: %u\n", psi.pr_thds);
        printf("pr_sonproc: %d\n", psi.pr_sonproc);
    }
    if (ioctl(fd, PIOCUSAGE, (void *)&pu) < 0)
        refused("usage");
    else {
        printf("pu_utime: %lld\n", (long long)pu.pu_utime.tv_sec * 1000000000LL + pu.pu_utime.tv_nsec);
        printf("pu_minf: %lu\n", pu.pu_minf);
        printf("pu_rss: %lu\n", pu.pu_rss);
        printf("pu_size: %lu\n", pu.pu_size);
        printf("pu_bwrit: %lu\n", pu.pu_bwrit);
        printf("pu_syscw: %lu\n", pu.pu_syscw);
        printf("pu_starttime: %lld\n", (long long)pu.pu_starttime.tv_sec);
    }
    if (ioctl(fd, PIOCGETPTIMER, (void *)timers) < 0)
        refused("ptimer");
    else {
        printf("usr_run: %lld\n", (long long)timers[AS_USR_RUN].tv_sec * 1000000000LL + timers[AS_USR_RUN].tv_nsec);
        printf("sys_run: %lld\n", (long long)timers[AS_SYS_RUN].tv_sec * 1000000000LL + timers[AS_SYS_RUN].tv_nsec);
        printf("runq_wait: %lld\n", (long long)timers[AS_RUNQ_WAIT].tv_sec * 1000000000LL + timers[AS_RUNQ_WAIT].tv_nsec);
    }
    if (ioctl(fd, PIOCCRED, (void *)&cred) < 0)
        refused("cred");
    else
        printf("cred: %u %u %u %u %u %u %u\n", cred.pr_ruid, cred.pr_euid, cred.pr_suid, cred.pr_rgid,
               cred.pr_egid, cred.pr_sgid, cred.pr_ngroups);
    if (ioctl(fd, PIOCNMAP, (void *)&n) < 0)
        refused("nmap");
    else {
        printf("nmap: %d\n", n);
        maps = calloc((size_t)n + 1, sizeof *maps);
        if (ioctl(fd, PIOCMAP, (void *)maps) < 0)
            refused("map");
        else
            for (i = 0; maps[i].pr_size; i++)
                printf("map %d: %lx %lu %lld %lu\n", i, (unsigned long)maps[i].pr_vaddr, maps[i].pr_size,
                       maps[i].pr_off, maps[i].pr_mflags);
        free(maps);
    }
    /* process control is not offered */
    printf("control: %d\n", ioctl(fd, _IO('q', 2)) < 0 ? errno : 0);
    return 0;
}
