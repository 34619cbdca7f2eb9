"""Mirror of ``include/sys/hwperftypes.h`` and ``hwperfmacros.h`` constants.

IRIX was big-endian: its ``hwperf_ctrlreg`` declares ``hwp_ev:11, hwp_ie:1,
hwp_mode:4`` so that ``hwperf_spec == (ev << 5) | (ie << 4) | mode``.  Programs
write ``hwperf_spec`` directly, so on this little-endian machine the 16-bit
word keeps IRIX's *value* layout (the C header reverses the bit-field order to
match), and construct decodes it the same way.
"""

from construct import (
    Adapter,
    Array,
    Container,
    Int16ul,
    Int32sl,
    Int64sl,
    Int64ul,
    Struct,
    Padding,
)

# The constants and spec-word helpers are declared once, in the construct-free core.
from structs.core import (  # noqa: F401
    HWPERF_EVENTMAX,
    HWPERF_CNTEVENTMAX,
    HWPERF_CNT1BASE,
    HWPERF_MINEVENT,
    HWPERF_MAXEVENT,
    HWPERF_CNTEN_E,
    HWPERF_CNTEN_K,
    HWPERF_CNTEN_S,
    HWPERF_CNTEN_U,
    HWPERF_CNTEN_A,
    HWPERF_CNTEN_IE,
    HWPERF_MODEMASK,
    HWPERF_EVSHIFT,
    HWPERF_EVMASK,
    HWPERF_OVERFLOW_THRESH,
    HWPERF_CM_ENABLED,
    HWPERF_CM_SYSMODE,
    HWPERF_CM_LOST,
    HWPERF_CM_RELEASED,
    HWPERF_CM_VALID,
    HWPERF_CM_MODE_NONE,
    HWPERF_CM_MODE_USER,
    HWPERF_CM_MODE_SYSTEM,
    mode_text,
    spec_fields,
    spec_word,
)


class _ControlWord(Adapter):
    """``hwperf_ctrl_t`` seen through its bit-fields, IRIX's value layout:
    ``hwp_ev`` bits 15-5, ``hwp_ie`` bit 4, ``hwp_mode`` bits 3-0."""

    def _decode(self, obj: int, context: object, path: str) -> Container:
        return Container(
            hwp_ev=obj >> HWPERF_EVSHIFT, hwp_ie=bool(obj & HWPERF_CNTEN_IE), hwp_mode=obj & HWPERF_MODEMASK
        )

    def _encode(self, obj: dict[str, int], context: object, path: str) -> int:
        ev, mode = obj["hwp_ev"], obj["hwp_mode"]
        if not (0 <= ev < 1 << 11 and 0 <= mode <= HWPERF_MODEMASK):
            raise ValueError(f"hwp_ev {ev} or hwp_mode {mode} does not fit its bit-field")
        return spec_word(ev, mode, bool(obj["hwp_ie"]))


hwperf_ctrl_t = _ControlWord(Int16ul)

hwperf_eventctrl_t = Struct("hwp_evctrl" / Array(HWPERF_EVENTMAX, hwperf_ctrl_t))

hwperf_profevctrarg_t = Struct(
    "hwp_evctrargs" / hwperf_eventctrl_t,
    "hwp_ovflw_freq" / Array(HWPERF_EVENTMAX, Int32sl),
    "hwp_ovflw_sig" / Int32sl,
)

hwperf_cntr_t = Struct("hwp_evctr" / Array(HWPERF_EVENTMAX, Int64ul))

hwperf_profevctraux_t = Struct(
    "hwp_aux_gen" / Int32sl,
    Padding(4),
    "hwp_aux_cntr" / hwperf_cntr_t,
)

hwperf_eventctrlaux_t = Struct(
    "hwp_aux_sig" / Int32sl,
    "hwp_aux_freq" / Array(HWPERF_EVENTMAX, Int32sl),
)

# IRIX's PIOCENEVCTRSEX and PIOCGETEVCTRLEX took structs of two pointers,
# which a FUSE server cannot follow.  hwperfd serves these flattened forms
# (the pointed-to structs inline, C alignment); hwperfd-run's preload
# library turns IRIX's pointer form into them (include/sys/procfs.h).
hwperfd_enevctrsex_t = Struct(
    "hwp_args" / hwperf_profevctrarg_t,
    Padding(4),
    "hwp_aux" / hwperf_profevctraux_t,
)

hwperfd_getevctrlex_t = Struct(
    "hwp_evctrl" / hwperf_eventctrl_t,
    "hwp_evctrlaux" / hwperf_eventctrlaux_t,
)

# The IRIX pointer forms, for their sizes (two pointers each on LP64).
hwperf_profevctrargex_t = Struct("hwp_args" / Int64ul, "hwp_aux" / Int64ul)
hwperf_getctrlex_arg_t = Struct("hwp_evctrl" / Int64ul, "hwp_evctrlaux" / Int64ul)

timespec_t = Struct("tv_sec" / Int64sl, "tv_nsec" / Int64sl)

# IRIX's cpu_mon_t was a kernel struct; this is hwperfd's own, documented in
# include/sys/hwperftypes.h: the state of the target's counter control block.
cpu_mon_t = Struct(
    "cm_flags" / Int32sl,
    "cm_gen" / Int32sl,
    "cm_mode" / Int32sl,
    "cm_sig" / Int32sl,
    "cm_evctrl" / Array(HWPERF_EVENTMAX, hwperf_ctrl_t),
    "cm_ovflw_freq" / Array(HWPERF_EVENTMAX, Int32sl),
    "cm_enabled_ns" / Int64ul,
    "cm_evctr" / Array(HWPERF_EVENTMAX, Int64ul),
    "cm_active_ns" / Array(HWPERF_EVENTMAX, Int64ul),
)

_PRUSAGE_SCALARS_1 = (
    "pu_minf pu_majf pu_utlb pu_nswap pu_gbread pu_bread pu_gbwrit pu_bwrit "
    "pu_sigs pu_vctx pu_ictx pu_sysc pu_syscr pu_syscw pu_syscps pu_sysci "
    "pu_graphfifo"
).split()
_PRUSAGE_SCALARS_2 = "pu_size pu_rss pu_inblock pu_oublock pu_vfault pu_ktlb".split()

# IRIX's prusage_t (structs.prinfo) is these fields; hwperf_prusage_t adds the counters.
_PRUSAGE_FIELDS = (
    "pu_tstamp" / timespec_t,
    "pu_starttime" / timespec_t,
    "pu_utime" / timespec_t,
    "pu_stime" / timespec_t,
    *[name / Int64ul for name in _PRUSAGE_SCALARS_1],
    "pu_graph_req" / Array(8, Int64ul),
    "pu_graph_wait" / Array(8, Int64ul),
    *[name / Int64ul for name in _PRUSAGE_SCALARS_2],
)

hwperf_prusage_t = Struct(
    *_PRUSAGE_FIELDS,
    "pu_cpu_mon" / cpu_mon_t,
)

PRUSAGE_COUNTER_FIELDS = tuple(_PRUSAGE_SCALARS_1 + _PRUSAGE_SCALARS_2)
