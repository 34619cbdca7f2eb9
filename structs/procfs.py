"""Mirror of ``include/sys/procfs.h`` and ``include/sys/syssgi.h``: ioctl numbers.

IRIX numbered the /proc ioctls ``('q' << 8) | n``.  FUSE delivers only
"restricted" ioctls whose number carries direction and size (the kernel
copies ``_IOC_SIZE`` bytes), so hwperfd keeps IRIX's type letter and numbers
and adds Linux's ``_IOC`` encoding.
"""

from structs.hwperftypes import (
    hwperf_cntr_t,
    hwperf_eventctrl_t,
    hwperf_getctrlex_arg_t,
    hwperf_profevctrarg_t,
    hwperf_profevctrargex_t,
    hwperf_prusage_t,
    hwperfd_enevctrsex_t,
    hwperfd_getevctrlex_t,
)
from construct import Int32sl, Padding, Struct

_IOC_NONE, _IOC_WRITE, _IOC_READ = 0, 1, 2


def _IOC(direction: int, kind: str, nr: int, size: int) -> int:
    return (direction << 30) | (size << 16) | (ord(kind) << 8) | nr


def _IO(kind: str, nr: int) -> int:
    return _IOC(_IOC_NONE, kind, nr, 0)


def _IOR(kind: str, nr: int, size: int) -> int:
    return _IOC(_IOC_READ, kind, nr, size)


def _IOW(kind: str, nr: int, size: int) -> int:
    return _IOC(_IOC_WRITE, kind, nr, size)


def _IOWR(kind: str, nr: int, size: int) -> int:
    return _IOC(_IOC_READ | _IOC_WRITE, kind, nr, size)


def ioc_size(cmd: int) -> int:
    return (cmd >> 16) & 0x3FFF


def ioc_dir(cmd: int) -> int:
    return (cmd >> 30) & 0x3


PIOCENEVCTRS = _IOW("q", 233, hwperf_profevctrarg_t.sizeof())
PIOCRELEVCTRS = _IO("q", 234)
PIOCGETEVCTRS = _IOR("q", 235, hwperf_cntr_t.sizeof())
PIOCGETPREVCTRS = _IOR("q", 236, hwperf_prusage_t.sizeof())
PIOCGETEVCTRL = _IOR("q", 237, hwperf_eventctrl_t.sizeof())
PIOCSETEVCTRL = _IOW("q", 238, hwperf_profevctrarg_t.sizeof())
PIOCSAVECCNTRS = _IO("q", 239)
# IRIX's pointer-carrying forms (what IRIX sources pass) and the flattened
# forms hwperfd serves; the preload library turns the first into the second.
PIOCENEVCTRSEX = _IOW("q", 240, hwperf_profevctrargex_t.sizeof())
PIOCGETEVCTRLEX = _IOW("q", 241, hwperf_getctrlex_arg_t.sizeof())
HWPERFD_PIOCENEVCTRSEX = _IOW("q", 240, hwperfd_enevctrsex_t.sizeof())
HWPERFD_PIOCGETEVCTRLEX = _IOR("q", 241, hwperfd_getevctrlex_t.sizeof())

# syssgi(SGI_EVENTCTR, cmd, ...) has no Linux system call; hwperfd serves the
# same sub-commands as ioctls on the root-only control node, type letter 'h',
# number = the IRIX sub-command value.
SGI_EVENTCTR = 174
HWPERF_PROFENABLE = 1
HWPERF_ENSYSCNTRS = 2
HWPERF_GET_CPUCNTRS = 4
HWPERF_PROF_CTR_SUSP = 5
HWPERF_PROF_CTR_CONT = 6
HWPERF_RELSYSCNTRS = 8
HWPERF_GET_SYSCNTRS = 16
HWPERF_GET_SYSEVCTRL = 32
HWPERF_SET_SYSEVCTRL = 64

# HWPERF_GET_CPUCNTRS takes a cpuid and returns counts: one in/out struct.
hwperf_cpucntrs_arg_t = Struct("cpuid" / Int32sl, Padding(4), "cntr" / hwperf_cntr_t)

HWIOC_PROFENABLE = _IOW("h", HWPERF_PROFENABLE, hwperf_profevctrarg_t.sizeof())
# HWPERF_PROFENABLE also takes the caller's sprofil buffers, which only the
# caller's own library can fill: libhwperf keeps them and sends hwperfd the
# counter request with the signal its PC ticks are to come on (0: profiling off).
hwperfd_profenable_t = Struct("hp_args" / hwperf_profevctrarg_t, "hp_sig" / Int32sl, "hp_pad" / Int32sl)
HWPERFD_PROFENABLE = _IOW("h", 129, hwperfd_profenable_t.sizeof())
HWIOC_ENSYSCNTRS = _IOW("h", HWPERF_ENSYSCNTRS, hwperf_profevctrarg_t.sizeof())
HWIOC_GET_CPUCNTRS = _IOWR("h", HWPERF_GET_CPUCNTRS, hwperf_cpucntrs_arg_t.sizeof())
HWIOC_PROF_CTR_SUSP = _IO("h", HWPERF_PROF_CTR_SUSP)
HWIOC_PROF_CTR_CONT = _IO("h", HWPERF_PROF_CTR_CONT)
HWIOC_RELSYSCNTRS = _IO("h", HWPERF_RELSYSCNTRS)
HWIOC_GET_SYSCNTRS = _IOR("h", HWPERF_GET_SYSCNTRS, hwperf_cntr_t.sizeof())
HWIOC_GET_SYSEVCTRL = _IOR("h", HWPERF_GET_SYSEVCTRL, hwperf_eventctrl_t.sizeof())
HWIOC_SET_SYSEVCTRL = _IOW("h", HWPERF_SET_SYSEVCTRL, hwperf_profevctrarg_t.sizeof())
