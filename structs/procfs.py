"""Mirror of ``include/sys/procfs.h`` and ``include/sys/syssgi.h``: ioctl numbers.

IRIX numbered the /proc ioctls ``('q' << 8) | n``.  FUSE delivers only
"restricted" ioctls whose number carries direction and size (the kernel
copies ``_IOC_SIZE`` bytes), so hwperfd keeps IRIX's type letter and numbers
and adds Linux's ``_IOC`` encoding.  The numbers are declared once, in the
construct-free ``structs.core`` (from the sizes of its codecs, which
tests/abi/test_fast_codecs.py checks against the definitions here and in
``structs.hwperftypes``).
"""

from construct import Int32sl, Int64ul, Padding, Struct

from structs.hwperftypes import hwperf_profevctrarg_t

from structs.core import (  # noqa: F401
    _IO,
    _IOC,
    _IOC_NONE,
    _IOC_READ,
    _IOC_WRITE,
    _IOR,
    _IOW,
    _IOWR,
    HWIOC_ENSYSCNTRS,
    HWIOC_GET_CPUCNTRS,
    HWIOC_GET_SYSCNTRS,
    HWIOC_GET_SYSEVCTRL,
    HWIOC_PROF_CTR_CONT,
    HWIOC_PROF_CTR_SUSP,
    HWIOC_PROFENABLE,
    HWIOC_RELSYSCNTRS,
    HWIOC_SET_SYSEVCTRL,
    HWPERF_ENSYSCNTRS,
    HWPERF_GET_CPUCNTRS,
    HWPERF_GET_SYSCNTRS,
    HWPERF_GET_SYSEVCTRL,
    HWPERF_PROF_CTR_CONT,
    HWPERF_PROF_CTR_SUSP,
    HWPERF_PROFENABLE,
    HWPERF_RELSYSCNTRS,
    HWPERF_SET_SYSEVCTRL,
    HWPERFD_PIOCENEVCTRSEX,
    HWPERFD_PIOCGETEVCTRLEX,
    PIOCENEVCTRS,
    PIOCENEVCTRSEX,
    PIOCGETEVCTRL,
    PIOCGETEVCTRLEX,
    PIOCGETEVCTRS,
    PIOCGETPREVCTRS,
    PIOCRELEVCTRS,
    PIOCSAVECCNTRS,
    PIOCSETEVCTRL,
    SGI_EVENTCTR,
    ioc_dir,
    ioc_size,
)
from structs.hwperftypes import hwperf_cntr_t

# HWPERF_GET_CPUCNTRS takes a cpuid and returns counts: one in/out struct.
hwperf_cpucntrs_arg_t = Struct("cpuid" / Int32sl, Padding(4), "cntr" / hwperf_cntr_t)

# HWPERF_PROFENABLE also takes the caller's sprofil buffers, which only the
# caller's own library can fill: libhwperf keeps them and sends hwperfd the
# counter request with the signal its PC ticks are to come on (0: profiling off).
hwperfd_profenable_t = Struct("hp_args" / hwperf_profevctrarg_t, "hp_sig" / Int32sl, "hp_pad" / Int32sl)
HWPERFD_PROFENABLE = _IOW("h", 130, hwperfd_profenable_t.sizeof())

# On a process's own file (or a thread's own, under hwperfd-run), by that
# process (thread) only: the CPU ns it may run before its counters' nearest
# overflow interrupt could come, caught up first, so that a call at that
# instant finds the overflow (docs/overflow.md).  hwperfd's own: IRIX's
# structs are not changed.  ho_left all ones: none can come (nothing
# interrupts, the clock is manual); ho_at the process's CPU clock
# (CLOCK_PROCESS_CPUTIME_ID, ns) they were caught up to, 0 for a thread's own
# (its account lags its clock); ho_clock the CPU clock the counters count
# (HWPERFD_STATE_CLOCK_PROCESS or _THREAD); ho_sig their signal.
hwperfd_ovflns_t = Struct("ho_left" / Int64ul, "ho_at" / Int64ul, "ho_clock" / Int32sl, "ho_sig" / Int32sl)
HWPERFD_PIOCOVFLNS = _IOR("h", 131, hwperfd_ovflns_t.sizeof())
HWPERFD_OVFL_NONE = (1 << 64) - 1
