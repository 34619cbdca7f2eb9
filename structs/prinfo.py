"""Mirror of the informational part of ``include/sys/procfs.h``: IRIX proc(4)'s
``prpsinfo_t``, ``prusage_t``, ``prmap_t``, ``prcred_t`` and the process
timers, with their ioctl numbers.

Layouts are IRIX 6.5's 64-bit ABI (``long``, ``ulong_t`` and pointers are 8
bytes) with Linux's own ``uid_t``, ``gid_t``, ``pid_t`` (4 bytes) and
``dev_t`` (8 bytes, Linux's encoding), which a program compiled here uses.
"""

from construct import (
    Array,
    Int8sl,
    Int16sl,
    Int32sl,
    Int32ul,
    Int64sl,
    Int64ul,
    PaddedString,
    Padding,
    Struct,
)

from structs.hwperftypes import _PRUSAGE_FIELDS, timespec_t
from structs.procfs import _IOR

PRARGSZ = 80  # pr_psargs: first characters of the argument list
PRCOMSIZ = 32  # pr_fname: basename of the exec'd file
PRNODEV = 0xFFFFFFFFFFFFFFFF  # (dev_t)-1: no controlling terminal

# pr_state, IRIX <sys/proc.h>
SSLEEP, SRUN, SZOMB, SSTOP = 1, 2, 3, 4

prpsinfo_t = Struct(
    "pr_state" / Int8sl,
    "pr_sname" / Int8sl,
    "pr_zomb" / Int8sl,
    "pr_nice" / Int8sl,
    Padding(4),
    "pr_flag" / Int64ul,
    "pr_uid" / Int32ul,
    "pr_gid" / Int32ul,
    "pr_pid" / Int32sl,
    "pr_ppid" / Int32sl,
    "pr_pgrp" / Int32sl,
    "pr_sid" / Int32sl,
    "pr_addr" / Int64ul,
    "pr_size" / Int64sl,
    "pr_rssize" / Int64sl,
    "pr_wchan" / Int64ul,
    "pr_start" / timespec_t,
    "pr_time" / timespec_t,
    "pr_pri" / Int64sl,
    "pr_oldpri" / Int64sl,
    "pr_cpu" / Int8sl,
    Padding(7),
    "pr_ttydev" / Int64ul,
    "pr_clname" / PaddedString(8, "ascii"),
    "pr_fname" / PaddedString(PRCOMSIZ, "utf8"),
    "pr_psargs" / PaddedString(PRARGSZ, "utf8"),
    "pr_spare1" / Int32ul,
    "pr_sonproc" / Int16sl,
    Padding(2),
    "pr_ctime" / timespec_t,
    "pr_shareuid" / Int32ul,
    "pr_spid" / Int32ul,
    "pr_qtime" / timespec_t,
    "pr_wname" / PaddedString(16, "ascii"),
    "pr_thds" / Int32ul,
    Padding(4),
    "pr_fill" / Array(10, Int64sl),
)

# prusage_t: hwperf_prusage_t without the counter block (r10k_counters(5)
# lists the same fields, then cpu_mon_t).
prusage_t = Struct(*_PRUSAGE_FIELDS)

# pr_mflags
MA_READ = 0x0001
MA_WRITE = 0x0002
MA_EXEC = 0x0004
MA_SHARED = 0x0008
MA_BREAK = 0x0010
MA_STACK = 0x0020
MA_PHYS = 0x0040
MA_MAPZERO = 0x0080

prmap_t = Struct(
    "pr_vaddr" / Int64ul,
    "pr_size" / Int64ul,
    "pr_off" / Int64sl,
    "pr_mflags" / Int64ul,
    "pr_fill" / Array(4, Int64sl),
)

# A FUSE ioctl carries at most 16383 bytes: PIOCMAP answers at most this many
# entries, the last of them the all-zero one that ends the list.
PRMAPMAX = 0x3FFF // prmap_t.sizeof()

prcred_t = Struct(
    "pr_euid" / Int32ul,
    "pr_ruid" / Int32ul,
    "pr_suid" / Int32ul,
    "pr_egid" / Int32ul,
    "pr_rgid" / Int32ul,
    "pr_sgid" / Int32ul,
    "pr_ngroups" / Int32ul,
)

# PIOCGETPTIMER: one timespec_t per thread state, IRIX <sys/timers.h>.
AS_USR_RUN = 0
AS_SYS_RUN = 1
AS_INT_RUN = 2
AS_BIO_WAIT = 3
AS_MEM_WAIT = 4
AS_SELECT_WAIT = 5
AS_JCL_WAIT = 6
AS_RUNQ_WAIT = 7
AS_SLEEP_WAIT = 8
AS_STRMON_WAIT = 9
AS_PHYSIO_WAIT = 10
MAX_PROCTIMER = 11
prtimers_t = Array(MAX_PROCTIMER, timespec_t)

PIOCPSINFO = _IOR("q", 30, prpsinfo_t.sizeof())
PIOCNMAP = _IOR("q", 31, 4)
PIOCMAP = _IOR("q", 32, PRMAPMAX * prmap_t.sizeof())
PIOCCRED = _IOR("q", 34, prcred_t.sizeof())
PIOCUSAGE = _IOR("q", 43, prusage_t.sizeof())
PIOCGETPTIMER = _IOR("q", 250, prtimers_t.sizeof())

