"""Between ioctl bytes and the counter kernel's plain values.

Formats come from ``structs``; the hot ones are compiled once by construct.
"""

from __future__ import annotations

import struct
import time

from construct import ConstructError

from hwperfd.counters.kernel import CounterView, Restore, State
from hwperfd.counters.request import CounterRequest
from hwperfd.host import processes
from hwperfd.irix.errno_map import BadArgument
import structs

CNTR = structs.hwperf_cntr_t.compile()
# hwperf_cntr_t is read on every PIOCGETEVCTRS: struct packs it ~30x faster than construct.
_CNTR_PACK = struct.Struct(f"<{structs.HWPERF_EVENTMAX}Q")
assert _CNTR_PACK.size == structs.hwperf_cntr_t.sizeof()
EVENTCTRL = structs.hwperf_eventctrl_t.compile()
_CTRL_PACK = struct.Struct(f"<{structs.HWPERF_EVENTMAX}H")
assert _CTRL_PACK.size == structs.hwperf_eventctrl_t.sizeof()
PROFEVCTRARG = structs.hwperf_profevctrarg_t
PRUSAGE = structs.hwperf_prusage_t
CPUCNTRS_ARG = structs.hwperf_cpucntrs_arg_t
ENEVCTRSEX = structs.hwperfd_enevctrsex_t
GETEVCTRLEX = structs.hwperfd_getevctrlex_t
PROFENABLE = structs.hwperfd_profenable_t


def parse_request(data: bytes) -> CounterRequest:
    if len(data) != PROFEVCTRARG.sizeof():
        raise BadArgument(f"hwperf_profevctrarg_t is {PROFEVCTRARG.sizeof()} bytes, got {len(data)}")
    try:
        arg = PROFEVCTRARG.parse(data)
    except ConstructError as exc:  # pragma: no cover - fixed-size fields always parse
        raise BadArgument(str(exc)) from None
    specs = tuple(
        structs.spec_word(c.hwp_ev, c.hwp_mode, c.hwp_ie) for c in arg.hwp_evctrargs.hwp_evctrl
    )
    return CounterRequest.shared(specs, tuple(arg.hwp_ovflw_freq), arg.hwp_ovflw_sig)


def parse_profenable(data: bytes) -> tuple[CounterRequest, int]:
    """hwperfd_profenable_t: the caller's request and the signal its PC ticks
    come on (0: profiling off)."""
    if len(data) != PROFENABLE.sizeof():
        raise BadArgument(f"hwperfd_profenable_t is {PROFENABLE.sizeof()} bytes, got {len(data)}")
    size = PROFEVCTRARG.sizeof()
    tail = PROFENABLE.parse(data)
    if tail.hp_pad:
        raise BadArgument("hwperfd_profenable_t: hp_pad must be 0")
    return parse_request(data[:size]), tail.hp_sig


def parse_request_ex(data: bytes) -> tuple[CounterRequest, Restore]:
    """hwperfd_enevctrsex_t: a request and the saved counters to start from."""
    if len(data) != ENEVCTRSEX.sizeof():
        raise BadArgument(f"hwperfd_enevctrsex_t is {ENEVCTRSEX.sizeof()} bytes, got {len(data)}")
    size = PROFEVCTRARG.sizeof()
    aux = ENEVCTRSEX.parse(data).hwp_aux
    return parse_request(data[:size]), Restore(aux.hwp_aux_gen, tuple(aux.hwp_aux_cntr.hwp_evctr))


def build_control_ex(request: CounterRequest) -> bytes:
    """hwperfd_getevctrlex_t: control words, then overflow signal and thresholds."""
    return GETEVCTRLEX.build(
        dict(
            hwp_evctrl=dict(hwp_evctrl=[_ctrl(s) for s in request.specs]),
            hwp_evctrlaux=dict(hwp_aux_sig=request.signal, hwp_aux_freq=list(request.thresholds)),
        )
    )


def build_request(request: CounterRequest) -> bytes:
    return PROFEVCTRARG.build(
        dict(
            hwp_evctrargs=dict(hwp_evctrl=[_ctrl(s) for s in request.specs]),
            hwp_ovflw_freq=list(request.thresholds),
            hwp_ovflw_sig=request.signal,
        )
    )


def build_counts(counts: tuple[int, ...]) -> bytes:
    # 64-bit virtual counters wrap like IRIX's __uint64_t would.
    return _CNTR_PACK.pack(*[c & 0xFFFFFFFFFFFFFFFF for c in counts])


def build_eventctrl(request: CounterRequest) -> bytes:
    # A spec is the hwperf_ctrl_t word itself (bit-fields hwp_ev 15-5,
    # hwp_ie 4, hwp_mode 3-0 fill its 16 bits): packed as they are, as
    # PIOCGETEVCTRL answers once per PAPI thread registration.
    return _CTRL_PACK.pack(*[s & 0xFFFF for s in request.specs])


def _ctrl(spec: int) -> dict:
    ev, ie, mode = structs.spec_fields(spec)
    return dict(hwp_ev=ev, hwp_ie=ie, hwp_mode=mode)


def cpu_mon(view: CounterView | None) -> dict:
    if view is None:
        return dict(
            cm_flags=0, cm_gen=0, cm_mode=structs.HWPERF_CM_MODE_NONE, cm_sig=0,
            cm_evctrl=[_ctrl(0)] * 32, cm_ovflw_freq=[0] * 32, cm_enabled_ns=0,
            cm_evctr=[0] * 32, cm_active_ns=[0] * 32,
        )  # fmt: skip
    flags = structs.HWPERF_CM_VALID | {
        State.ENABLED: structs.HWPERF_CM_ENABLED,
        State.RELEASED: structs.HWPERF_CM_RELEASED,
        State.LOST: structs.HWPERF_CM_LOST,
    }[view.state]
    if view.profiling:
        flags |= structs.HWPERF_CM_PROFILING
    if view.suspended:
        flags |= structs.HWPERF_CM_SUSPENDED
    return dict(
        cm_flags=flags,
        cm_gen=view.generation,
        cm_mode=structs.HWPERF_CM_MODE_USER,
        cm_sig=view.request.signal,
        cm_evctrl=[_ctrl(s) for s in view.request.specs],
        cm_ovflw_freq=list(view.request.thresholds),
        cm_enabled_ns=view.enabled_ns,
        cm_evctr=[c & 0xFFFFFFFFFFFFFFFF for c in view.counts],
        cm_active_ns=list(view.active_ns),
    )


def _timespec(ns: int) -> dict:
    return dict(tv_sec=ns // 1_000_000_000, tv_nsec=ns % 1_000_000_000)


def build_prusage(usage: processes.Usage | None, view: CounterView | None, tlb: tuple[int, int]) -> bytes:
    """``usage`` is a host ``Usage`` (or None when Linux no longer tells)."""
    fields = prusage_fields(usage, tlb)
    fields["pu_cpu_mon"] = cpu_mon(view)
    return PRUSAGE.build(fields)


def prusage_fields(usage: processes.Usage | None, tlb: tuple[int, int]) -> dict:
    """The usage fields shared by hwperf_prusage_t and IRIX's prusage_t."""
    u = usage
    get = (lambda name: getattr(u, name)) if u is not None else (lambda name: 0)
    gib = 1 << 30
    fields = dict(
        pu_tstamp=_timespec(time.time_ns()),
        pu_starttime=_timespec(get("start_time_ns_epoch")),
        pu_utime=_timespec(get("user_ns")),
        pu_stime=_timespec(get("system_ns")),
        pu_minf=get("minflt"),
        pu_majf=get("majflt"),
        pu_utlb=tlb[0],
        pu_nswap=get("nswap"),
        pu_gbread=get("read_bytes") // gib,
        pu_bread=get("read_bytes") % gib,
        pu_gbwrit=get("write_bytes") // gib,
        pu_bwrit=get("write_bytes") % gib,
        pu_sigs=get("signals"),
        pu_vctx=get("voluntary_ctxt_switches"),
        pu_ictx=get("nonvoluntary_ctxt_switches"),
        pu_sysc=get("syscalls"),
        pu_syscr=get("syscr"),
        pu_syscw=get("syscw"),
        pu_syscps=0,
        pu_sysci=0,
        pu_graphfifo=0,
        pu_graph_req=[0] * 8,
        pu_graph_wait=[0] * 8,
        pu_size=get("size_pages"),
        pu_rss=get("rss_pages"),
        pu_inblock=get("inblock"),
        pu_oublock=get("oublock"),
        pu_vfault=get("minflt") + get("majflt"),
        pu_ktlb=tlb[1],
    )
    return fields
