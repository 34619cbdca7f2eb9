"""The client side of the hwperf ABI without construct: constants, spec words,
ioctl numbers and ``struct``-module codecs for the structs a client sends
and reads.

Importing construct and building its definitions takes tens of milliseconds,
which a short-lived tool such as perfex pays on every run.  The construct
definitions in ``structs.hwperftypes`` and ``structs.procfs`` stay the
declaration of the ABI: each ``Layout`` here lists the same fields in the
same order with their ``struct`` formats, and tests/abi/test_fast_codecs.py
derives that list from the construct definition and checks that the two
agree field by field, and that values packed by one decode alike in the other.
"""

from __future__ import annotations

import struct

HWPERF_EVENTMAX = 32
HWPERF_CNTEVENTMAX = 16
HWPERF_CNT1BASE = 16
# Largest hwp_ev *per hardware counter* on the R10000, as in IRIX's
# hwperfmacros.h (not 31): PAPI's IRIX substrate tests ``index >
# HWPERF_MAXEVENT`` to tell a counter-1 slot from a counter-0 slot.
HWPERF_MINEVENT = 0
HWPERF_MAXEVENT = 15

HWPERF_CNTEN_E = 0x1  # exception level (EXL)
HWPERF_CNTEN_K = 0x2  # kernel
HWPERF_CNTEN_S = 0x4  # supervisor: not supported, r10k_counters(5) CONTROL REGISTERS
HWPERF_CNTEN_U = 0x8  # user
HWPERF_CNTEN_A = 0xA  # user and kernel
HWPERF_CNTEN_IE = 0x10
HWPERF_MODEMASK = 0xF
HWPERF_EVSHIFT = 5
HWPERF_EVMASK = 0x1E0
HWPERF_OVERFLOW_THRESH = 0x80000000

# cpu_mon_t cm_flags
HWPERF_CM_ENABLED = 0x1  # counters acquired and counting
HWPERF_CM_SYSMODE = 0x2  # the counters are held in system mode
HWPERF_CM_LOST = 0x4  # displaced by system mode; must be restarted
HWPERF_CM_RELEASED = 0x8  # released; counts still readable
HWPERF_CM_VALID = 0x10  # counts have been set up at least once
HWPERF_CM_PROFILING = 0x20  # HWPERF_PROFENABLE: overflows are PC ticks (IRIX's kernel flag of that name)
HWPERF_CM_SUSPENDED = 0x40  # HWPERF_PROF_CTR_SUSP: stopped until HWPERF_PROF_CTR_CONT

# cpu_mon_t cm_mode
HWPERF_CM_MODE_NONE = 0
HWPERF_CM_MODE_USER = 1
HWPERF_CM_MODE_SYSTEM = 2


def spec_word(event: int, mode: int, ie: bool = False) -> int:
    """The 16-bit ``hwperf_spec`` value IRIX programs compute by hand."""
    return (event << HWPERF_EVSHIFT) | (HWPERF_CNTEN_IE if ie else 0) | mode


_MODE_LETTERS = ((HWPERF_CNTEN_U, "u"), (HWPERF_CNTEN_S, "s"), (HWPERF_CNTEN_K, "k"), (HWPERF_CNTEN_E, "x"))


def mode_text(mode: int) -> str:
    """The count-enable bits as letters: u, s (supervisor), k, x (exception level); "-" for none."""
    return "".join(letter for bit, letter in _MODE_LETTERS if mode & bit) or "-"


def spec_fields(word: int) -> tuple[int, bool, int]:
    """Split a ``hwperf_spec`` word into (event, ie, mode)."""
    word &= 0xFFFF
    return word >> HWPERF_EVSHIFT, bool(word & HWPERF_CNTEN_IE), word & HWPERF_MODEMASK


class Layout:
    """A little-endian C struct as a flat list of ``(name, format)`` fields.

    Names are construct's, joined with dots through nested structs
    (``pu_cpu_mon.cm_evctr``); an unnamed field is padding (``"4x"``).  A
    format with a count (``"32Q"``) is an array and decodes to a tuple;
    ``hwperf_ctrl_t`` words stay plain 16-bit spec words (``"H"``).
    """

    def __init__(self, name: str, *fields: tuple[str, str]) -> None:
        self.name = name
        self.fields = fields
        self.struct = struct.Struct("<" + "".join(fmt for _, fmt in fields))
        self.size = self.struct.size
        # name -> (first index in the unpacked tuple, count or 0 for a scalar)
        self._slices: dict[str, tuple[int, int]] = {}
        index = 0
        for field, fmt in fields:
            if fmt.endswith("x"):
                continue
            count = int(fmt[:-1]) if fmt[:-1] else 0
            if fmt.endswith("s"):
                count = 0  # one bytes value
            self._slices[field] = (index, count)
            index += count or 1

    def unpack(self, data: bytes | bytearray | memoryview) -> dict[str, int | bytes | tuple[int, ...]]:
        """Every named field of ``data`` (exactly ``size`` bytes)."""
        values = self.struct.unpack(data)
        return {
            field: (values[start : start + count] if count else values[start])
            for field, (start, count) in self._slices.items()
        }

    def pack(self, **values: int | bytes | tuple[int, ...] | list[int]) -> bytes:
        """``data`` from named fields (dots as ``__``); fields not given are zero."""
        given = {name.replace("__", "."): value for name, value in values.items()}
        unknown = set(given) - set(self._slices)
        if unknown:
            raise ValueError(f"{self.name} has no field {', '.join(sorted(unknown))}")
        flat: list[int | bytes] = []
        for field, (_, count) in self._slices.items():
            value = given.get(field)
            if count:
                items = list(value) if value is not None else []  # type: ignore[arg-type]
                if len(items) > count:
                    raise ValueError(f"{self.name}.{field} holds {count} values, not {len(items)}")
                flat.extend(items + [0] * (count - len(items)))
            else:
                flat.append(value if value is not None else (b"" if self._fmt(field).endswith("s") else 0))  # type: ignore[arg-type]
        return self.struct.pack(*flat)

    def _fmt(self, field: str) -> str:
        return dict(self.fields)[field]


_N = HWPERF_EVENTMAX
_PRUSAGE_SCALARS = (
    "pu_minf pu_majf pu_utlb pu_nswap pu_gbread pu_bread pu_gbwrit pu_bwrit "
    "pu_sigs pu_vctx pu_ictx pu_sysc pu_syscr pu_syscw pu_syscps pu_sysci "
    "pu_graphfifo"
).split()
_PRUSAGE_SCALARS_2 = "pu_size pu_rss pu_inblock pu_oublock pu_vfault pu_ktlb".split()
_TIMESPECS = ("pu_tstamp", "pu_starttime", "pu_utime", "pu_stime")


class fast:
    """The codecs, by the names of the construct definitions they mirror:
    ``structs.fast.hwperf_cntr_t.unpack(data)``."""

    hwperf_eventctrl_t = Layout("hwperf_eventctrl_t", ("hwp_evctrl", f"{_N}H"))
    hwperf_profevctrarg_t = Layout(
        "hwperf_profevctrarg_t",
        ("hwp_evctrargs.hwp_evctrl", f"{_N}H"),
        ("hwp_ovflw_freq", f"{_N}l"),
        ("hwp_ovflw_sig", "l"),
    )
    hwperf_cntr_t = Layout("hwperf_cntr_t", ("hwp_evctr", f"{_N}Q"))
    hwperfd_enevctrsex_t = Layout(
        "hwperfd_enevctrsex_t",
        ("hwp_args.hwp_evctrargs.hwp_evctrl", f"{_N}H"),
        ("hwp_args.hwp_ovflw_freq", f"{_N}l"),
        ("hwp_args.hwp_ovflw_sig", "l"),
        ("", "4x"),
        ("hwp_aux.hwp_aux_gen", "l"),
        ("", "4x"),
        ("hwp_aux.hwp_aux_cntr.hwp_evctr", f"{_N}Q"),
    )
    hwperfd_getevctrlex_t = Layout(
        "hwperfd_getevctrlex_t",
        ("hwp_evctrl.hwp_evctrl", f"{_N}H"),
        ("hwp_evctrlaux.hwp_aux_sig", "l"),
        ("hwp_evctrlaux.hwp_aux_freq", f"{_N}l"),
    )
    hwperf_profevctrargex_t = Layout("hwperf_profevctrargex_t", ("hwp_args", "Q"), ("hwp_aux", "Q"))
    hwperf_getctrlex_arg_t = Layout("hwperf_getctrlex_arg_t", ("hwp_evctrl", "Q"), ("hwp_evctrlaux", "Q"))
    hwperf_cpucntrs_arg_t = Layout("hwperf_cpucntrs_arg_t", ("cpuid", "l"), ("", "4x"), ("cntr.hwp_evctr", f"{_N}Q"))

    hwperf_prusage_t = Layout(
        "hwperf_prusage_t",
        *[(f"{t}.{part}", "q") for t in _TIMESPECS for part in ("tv_sec", "tv_nsec")],
        *[(name, "Q") for name in _PRUSAGE_SCALARS],
        ("pu_graph_req", "8Q"),
        ("pu_graph_wait", "8Q"),
        *[(name, "Q") for name in _PRUSAGE_SCALARS_2],
        ("pu_cpu_mon.cm_flags", "l"),
        ("pu_cpu_mon.cm_gen", "l"),
        ("pu_cpu_mon.cm_mode", "l"),
        ("pu_cpu_mon.cm_sig", "l"),
        ("pu_cpu_mon.cm_evctrl", f"{_N}H"),
        ("pu_cpu_mon.cm_ovflw_freq", f"{_N}l"),
        ("pu_cpu_mon.cm_enabled_ns", "Q"),
        ("pu_cpu_mon.cm_evctr", f"{_N}Q"),
        ("pu_cpu_mon.cm_active_ns", f"{_N}Q"),
    )


# -- ioctl numbers (include/sys/procfs.h, include/sys/syssgi.h) --------------------
#
# IRIX numbered the /proc ioctls ``('q' << 8) | n``.  FUSE delivers only
# "restricted" ioctls whose number carries direction and size (the kernel
# copies ``_IOC_SIZE`` bytes), so hwperfd keeps IRIX's type letter and numbers
# and adds Linux's ``_IOC`` encoding.

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


PIOCENEVCTRS = _IOW("q", 233, fast.hwperf_profevctrarg_t.size)
PIOCRELEVCTRS = _IO("q", 234)
PIOCGETEVCTRS = _IOR("q", 235, fast.hwperf_cntr_t.size)
PIOCGETPREVCTRS = _IOR("q", 236, fast.hwperf_prusage_t.size)
PIOCGETEVCTRL = _IOR("q", 237, fast.hwperf_eventctrl_t.size)
PIOCSETEVCTRL = _IOW("q", 238, fast.hwperf_profevctrarg_t.size)
PIOCSAVECCNTRS = _IO("q", 239)
# IRIX's pointer-carrying forms (what IRIX sources pass) and the flattened
# forms hwperfd serves; the preload library turns the first into the second.
PIOCENEVCTRSEX = _IOW("q", 240, fast.hwperf_profevctrargex_t.size)
PIOCGETEVCTRLEX = _IOW("q", 241, fast.hwperf_getctrlex_arg_t.size)
HWPERFD_PIOCENEVCTRSEX = _IOW("q", 240, fast.hwperfd_enevctrsex_t.size)
HWPERFD_PIOCGETEVCTRLEX = _IOR("q", 241, fast.hwperfd_getevctrlex_t.size)

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

HWIOC_PROFENABLE = _IOW("h", HWPERF_PROFENABLE, fast.hwperf_profevctrarg_t.size)
HWIOC_ENSYSCNTRS = _IOW("h", HWPERF_ENSYSCNTRS, fast.hwperf_profevctrarg_t.size)
HWIOC_GET_CPUCNTRS = _IOWR("h", HWPERF_GET_CPUCNTRS, fast.hwperf_cpucntrs_arg_t.size)
HWIOC_PROF_CTR_SUSP = _IO("h", HWPERF_PROF_CTR_SUSP)
HWIOC_PROF_CTR_CONT = _IO("h", HWPERF_PROF_CTR_CONT)
HWIOC_RELSYSCNTRS = _IO("h", HWPERF_RELSYSCNTRS)
HWIOC_GET_SYSCNTRS = _IOR("h", HWPERF_GET_SYSCNTRS, fast.hwperf_cntr_t.size)
HWIOC_GET_SYSEVCTRL = _IOR("h", HWPERF_GET_SYSEVCTRL, fast.hwperf_eventctrl_t.size)
HWIOC_SET_SYSEVCTRL = _IOW("h", HWPERF_SET_SYSEVCTRL, fast.hwperf_profevctrarg_t.size)

# The codecs by the construct name they mirror (the test walks this).
LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in vars(fast).values() if isinstance(layout, Layout)
}


# -- the state page (structs/state.py, include/hwperfd/state.h): a process's own counts without a round trip

HWPERFD_STATE_MAGIC = 0x53505748  # "HWPS"
HWPERFD_STATE_VERSION = 2
HWPERFD_STATE_SIZE = 4096  # one page, whatever the host's page size is at least
HWPERFD_STATE_SLOTS = 64  # room for IRIX's 32 slots, and perfctr's TSC + PMCs

# hs_flags
HWPERFD_STATE_FALLBACK = 0x1  # this read needs the ioctl: the snapshot cannot be extrapolated
HWPERFD_STATE_DEAD = 0x2  # the page is no longer kept: unmap it, read through the ioctl
HWPERFD_STATE_OWN = 0x4  # the counts never take in reaped children's (no RUSAGE_CHILDREN check)

# hs_clock: what moves the context's counts
HWPERFD_STATE_CLOCK_MANUAL = 0  # only the daemon: the snapshot is the count
HWPERFD_STATE_CLOCK_PROCESS = 1  # the process's CPU clock (CLOCK_PROCESS_CPUTIME_ID)
HWPERFD_STATE_CLOCK_THREAD = 2  # the thread's CPU clock (CLOCK_THREAD_CPUTIME_ID)
HWPERFD_STATE_CLOCK_MONOTONIC = 3  # wall time (CLOCK_MONOTONIC), all of it counted as user time: a TSC

HWPERFD_STATE_PATH_MAX = 128
# On a process's own file (mount/%05d), by that process only: its page's path (hwperfd_statepage_t).
HWPERFD_PIOCSTATEPAGE = _IOR("h", 129, HWPERFD_STATE_PATH_MAX)
