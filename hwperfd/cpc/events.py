"""What libcpc calls each model's events, and how a request becomes a
counter's control word.

* Names per PIC come from the model's event table (``hwperfd.cpu.models``).
  The UltraSPARC's are Solaris's own (us234_pcbe.c).  Other models' names
  may hold spaces (pctr(1)'s AMD list, perfex's MIPS names), which a
  cputrack ``-c`` spec cannot carry: libcpc sees each run of characters
  other than letters, digits and ``_`` as one ``_``
  ("Dispatched FPU operations" is ``Dispatched_FPU_operations``).  A name
  that comes out twice on one model keeps its first event; later ones get
  ``_0xCODE`` appended.
* Generic events (``PAPI_*``, cpc_walk_generic_events_pic(3CPC)) name what a
  workload-profile kind counts: a generic event exists on a PIC when the
  model has an event there that counts exactly that kind.
* Raw codes: a string libcpc reads as a nonzero number (strtol base 0) is a
  raw event-select value; one that fits the model's select field is taken,
  and counts 0 if the model defines no event for it on that PIC.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hwperfd.cpu.core import MIPS_EVENT_SHIFT, MIPS_IE, MIPS_K, MIPS_U, SPARC_SELECT_SHIFT, SPARC_ST, SPARC_UT
from hwperfd.cpu.core import X86_EDGE, X86_EN, X86_INT, X86_INV, X86_OS, X86_USR
from hwperfd.cpu.models import MESI, CpuModel, ModelEvent

# illumos's generic event names (PAPI presets) and the profile kind each counts.
GENERIC: Mapping[str, str] = {
    "PAPI_tot_cyc": "cycles",
    "PAPI_tot_ins": "graduated_instructions",
    "PAPI_ld_ins": "graduated_loads",
    "PAPI_sr_ins": "graduated_stores",
    "PAPI_br_ins": "resolved_branches",
    "PAPI_br_msp": "mispredicted_branches",
    "PAPI_fp_ops": "graduated_fp_instructions",
    "PAPI_l1_dcm": "dcache_misses",
    "PAPI_l1_icm": "icache_misses",
    "PAPI_l2_dcm": "scache_dcache_misses",
    "PAPI_l2_icm": "scache_icache_misses",
    "PAPI_tlb_dm": "tlb_misses",
}

# Width of the event-select field per control layout (raw codes must fit).
SELECT_BITS = {"x86": 8, "sparc": 6, "mips": 5}
# Attributes per control layout; "picnum" is the kernel's, the others the
# x86 PCBEs' (illumos core/opteron: edge, inv, umask, cmask).
ATTRS: Mapping[str, tuple[str, ...]] = {
    "x86": ("picnum", "edge", "inv", "umask", "cmask"),
    "sparc": ("picnum",),
    "mips": ("picnum",),
}
ATTR_LIMITS = {"edge": 1, "inv": 1, "umask": 0xFF, "cmask": 0xFF}

_NOT_NAME = re.compile(r"[^A-Za-z0-9_]+")


def cpc_name(name: str) -> str:
    return _NOT_NAME.sub("_", name).strip("_")


# What strtol(text, &end, 0) reads with *end == '\0': leading space, a sign,
# then hex, octal or decimal digits to the end (no Python-only "1_000" or
# trailing space, which int() would take).
_STRTOL0 = re.compile(r"[ \t\n\v\f\r]*([+-]?)(?:0[xX]([0-9a-fA-F]+)|(0[0-7]*)|([1-9][0-9]*))")


def raw_code(text: str) -> int | None:
    """strtol(text, NULL, 0) over the whole string, as a nonzero code; else None."""
    match = _STRTOL0.fullmatch(text)
    if match is None:
        return None
    sign, hexa, octal, decimal = match.groups()
    value = int(hexa, 16) if hexa else int(octal, 8) if octal else int(decimal, 10)
    return (-value if sign == "-" else value) or None


@dataclass(frozen=True)
class Resolved:
    """What a request's event means on one PIC."""

    code: int
    event: ModelEvent | None  # None: a raw code the model has no event for


class EventNames:
    """One model's libcpc view: names and generic names per PIC."""

    def __init__(self, model: CpuModel) -> None:
        self.model = model
        self.npic = model.counters
        self.attrs = ATTRS[model.control]
        self._by_pic: list[dict[str, ModelEvent]] = []
        for pic in range(self.npic):
            names: dict[str, ModelEvent] = {}
            for event in model.events:
                if not event.on(pic):
                    continue
                name = cpc_name(event.name)
                if name in names:
                    name = f"{name}_{event.code:#x}"
                names.setdefault(name, event)
            self._by_pic.append(names)
        self._generic: list[dict[str, ModelEvent]] = []
        for pic in range(self.npic):
            found: dict[str, ModelEvent] = {}
            for generic, kind in GENERIC.items():
                match = next((e for e in self._by_pic[pic].values() if e.counts == ((kind, 1),)), None)
                if match is not None:
                    found[generic] = match
            self._generic.append(found)

    def names(self, pic: int) -> Sequence[str]:
        return tuple(self._by_pic[pic])

    def generic(self, pic: int) -> Sequence[str]:
        return tuple(self._generic[pic])

    def resolve(self, name: str, pic: int) -> Resolved | None:
        """The event ``name`` selects on ``pic``, or None if it cannot count there."""
        event: ModelEvent | None = self._by_pic[pic].get(name) or self._generic[pic].get(name)
        if event is not None:
            return Resolved(event.code, event)
        code = raw_code(name)
        if code is None or not 0 < code < 1 << SELECT_BITS[self.model.control]:
            return None
        return Resolved(code, self.model.event(code, pic))

    def known(self, name: str) -> bool:
        return any(self.resolve(name, pic) is not None for pic in range(self.npic))


def control_word(model: CpuModel, resolved: Resolved, user: bool, system: bool, interrupt: bool,
                 attrs: Mapping[str, int]) -> int:  # fmt: skip
    """The event-select value that makes a counter count ``resolved``."""
    if model.control == "x86":
        umask = attrs.get("umask")
        if umask is None:
            # Default: every cache-line state of a MESI event (docs/cpc.md).
            umask = 0xF if resolved.event is not None and MESI in resolved.event.flags else 0
        word = resolved.code | umask << 8 | attrs.get("cmask", 0) << 24 | X86_EN
        word |= (X86_USR if user else 0) | (X86_OS if system else 0) | (X86_INT if interrupt else 0)
        word |= (X86_EDGE if attrs.get("edge") else 0) | (X86_INV if attrs.get("inv") else 0)
        return word
    if model.control == "sparc":
        return resolved.code << SPARC_SELECT_SHIFT | (SPARC_UT if user else 0) | (SPARC_ST if system else 0)
    return resolved.code << MIPS_EVENT_SHIFT | (MIPS_U if user else 0) | (MIPS_K if system else 0) | (
        MIPS_IE if interrupt else 0)


def describe(names: EventNames, cciname: str, cpuref: str, caps: int, ncpus: int) -> str:
    """What reading ``<mount>/cpc`` shows; libcpc's cpc_open parses it."""
    lines = [
        "version 1",
        f"model {names.model.name}",
        f"npic {names.npic}",
        f"caps {caps}",
        f"ncpus {ncpus}",
        f"cciname {cciname}",
        f"cpuref {cpuref}",
        f"attrs {','.join(names.attrs)}",
    ]
    for pic in range(names.npic):
        lines.append(f"pic{pic} {','.join(names.names(pic))}")
        lines.append(f"generic{pic} {','.join(names.generic(pic))}")
    return "\n".join(lines) + "\n"
