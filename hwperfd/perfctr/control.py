"""perfctr's x86 control checks (drivers/perfctr/x86.c, ``perfctr_cpu_update_control``
and ``p6_like_check_control``), in the driver's order, for the emulated models.

Both models take the P6-like path: the Intel model is a Core 2 (separate
ENable bits in every event select, two general counters and three
fixed-function ones), the AMD model a K8 (``is_k7``: four counters, every
event select enabled).  perfctr does not look at the event code: an event
the model does not know counts 0, as unknown codes did.

A Core 2's fixed-function counter n is ``pmc_map`` ``0x40000000 + n`` (what
RDPMC takes); its event select is checked like any other, and only its CPL
and INT bits reach the counter, as its FIXED_CTR_CTRL field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hwperfd.cpu.core import FIXED_OS, FIXED_PMI, FIXED_USR, CpuControl, CpuState, PmcState, ireload, mk_cstatus
from hwperfd.cpu.models import CpuModel

P6_EVNTSEL_ENABLE = 0x00400000
P6_EVNTSEL_INT = 0x00100000
P6_EVNTSEL_CPL = 0x00030000
P6_EVNTSEL_RESERVED = 0x00280000
P6_EVNTSEL_OS = 0x00020000
P6_EVNTSEL_USR = 0x00010000
CORE2_PMC_FIXED_FLAG = 0x40000000


class ControlRefused(Exception):
    """Control data the driver refuses; ``errno_name`` says in which words."""

    errno_name = "EINVAL"


class Invalid(ControlRefused):
    """-EINVAL: counter counts, pmc_map, EN/CPL/INT rules, ireset."""


class Forbidden(ControlRefused):
    """-EPERM: reserved event-select bits; i-mode where none is allowed."""

    errno_name = "EPERM"


@dataclass(frozen=True)
class PerfctrControl:
    """``struct perfctr_cpu_control`` as the caller gave it (read back as is)."""

    tsc_on: int
    nractrs: int
    nrictrs: int
    pmc_map: tuple[int, ...]
    evntsel: tuple[int, ...]
    evntsel_high: tuple[int, ...]
    ireset: tuple[int, ...]

    @classmethod
    def parse(cls, c: Any) -> "PerfctrControl":
        return cls(c.tsc_on, c.nractrs, c.nrictrs, tuple(c.pmc_map), tuple(c.evntsel),
                   tuple(c.evntsel_high), tuple(c.ireset))  # fmt: skip

    def build(self) -> dict[str, object]:
        return {
            "tsc_on": self.tsc_on, "nractrs": self.nractrs, "nrictrs": self.nrictrs,
            "pmc_map": list(self.pmc_map), "evntsel": list(self.evntsel),
            "evntsel_high": list(self.evntsel_high), "ireset": list(self.ireset), "_reserved": [0] * 4,
        }  # fmt: skip


EMPTY = PerfctrControl(0, 0, 0, (0,) * 18, (0,) * 18, (0,) * 20, (0,) * 18)


def x86_cstatus(tsc_on: bool, nractrs: int, nrictrs: int) -> int:
    """asm-x86/perfctr.h's encoding: tsc_on bit 31, nrictrs bits 16-22,
    nractrs + nrictrs bits 8-14, nractrs bits 0-6.  The PMU core reads the
    same bits (tsc, nractrs, nrictrs) and ignores 8-14."""
    return mk_cstatus(tsc_on, nractrs, nrictrs) | ((nractrs + nrictrs) << 8)


def register(model: CpuModel, pmc: int) -> int | None:
    """The ``PmuCpu`` register ``pmc_map`` value ``pmc`` names, or None
    (p6_like_check_control: FIXED_CTR n is counter p6_nr_pmcs + n)."""
    if not model.fixed:
        return pmc if pmc < model.counters else None
    if pmc & CORE2_PMC_FIXED_FLAG:
        index = model.counters + (pmc & ~CORE2_PMC_FIXED_FLAG)
        return index if index < model.registers else None
    return pmc if pmc < model.counters else None


def fixed_ctrl(evntsel: int) -> int:
    """A fixed-function counter's FIXED_CTR_CTRL field from its event select
    (x86.c: CPL.OS to bit 0, CPL.USR to bit 1, INT to the PMI bit 3)."""
    return ((FIXED_OS if evntsel & P6_EVNTSEL_OS else 0) | (FIXED_USR if evntsel & P6_EVNTSEL_USR else 0)
            | (FIXED_PMI if evntsel & P6_EVNTSEL_INT else 0))  # fmt: skip


def check(model: CpuModel, control: PerfctrControl, *, pcint: bool = True) -> None:
    """Raise what perfctr_cpu_update_control would return for ``control``."""
    if control.nrictrs and not pcint:
        raise Forbidden("i-mode counters need overflow interrupts")
    nractrs = control.nractrs
    nrctrs = (nractrs + control.nrictrs) & 0xFFFFFFFF
    if nrctrs < nractrs or nrctrs > model.registers:
        raise Invalid(f"{nractrs}+{control.nrictrs} counters asked, the {model.name} has {model.registers}")
    separate_enables = True  # Core 2 and K8: every evntsel has its ENable bit
    used = 0
    for i in range(nrctrs):
        pmc = control.pmc_map[i]
        index = register(model, pmc)
        if index is None or used & (1 << index):
            raise Invalid(f"pmc_map[{i}] = {pmc:#x}: no such counter, or used twice")
        used |= 1 << index
        evntsel = control.evntsel[i]
        if evntsel & P6_EVNTSEL_RESERVED:
            raise Forbidden(f"evntsel[{i}] = {evntsel:#x} sets reserved bits {evntsel & P6_EVNTSEL_RESERVED:#x}")
        if separate_enables and not evntsel & P6_EVNTSEL_ENABLE:
            raise Invalid(f"evntsel[{i}] = {evntsel:#x} lacks the ENable bit")
        if not evntsel & P6_EVNTSEL_CPL:
            raise Invalid(f"evntsel[{i}] = {evntsel:#x} counts in neither user nor kernel mode")
        if evntsel & P6_EVNTSEL_INT and i < nractrs:
            raise Invalid(f"evntsel[{i}] = {evntsel:#x}: an a-mode counter with the INT bit")
        if not evntsel & P6_EVNTSEL_INT and i >= nractrs:
            raise Invalid(f"evntsel[{i}] = {evntsel:#x}: an i-mode counter without the INT bit")
    for i in range(nractrs, nrctrs):
        if control.ireset[i] >= 0:
            raise Invalid(f"ireset[{i}] = {control.ireset[i]} must be negative")


def take(model: CpuModel, state: CpuState, control: PerfctrControl, sums: list[int] | None = None) -> None:
    """Install checked control data: each counter on the register its
    ``pmc_map`` names, a fixed-function one programmed with its FIXED_CTR_CTRL
    field; per-counter sums carry on by index from ``sums`` (the caller
    resets those not preserved), i-mode counters are preset on resume."""
    n = control.nractrs + control.nrictrs
    old = sums or []
    registers: list[int] = []
    words: list[int] = []
    for pmc, evntsel in zip(control.pmc_map[:n], control.evntsel[:n]):
        index = register(model, pmc)
        assert index is not None, "take() after check()"
        registers.append(index)
        words.append(fixed_ctrl(evntsel) if index >= model.counters else evntsel & 0xFFFFFFFF)
    state.control = CpuControl(
        bool(control.tsc_on), control.nractrs, control.nrictrs, tuple(registers), tuple(words), control.ireset[:n],
    )  # fmt: skip
    state.cstatus = x86_cstatus(bool(control.tsc_on), control.nractrs, control.nrictrs)
    state.pmc = [PmcState(registers[i], sum=old[i] if i < len(old) else 0) for i in range(n)]
    ireload(state)
