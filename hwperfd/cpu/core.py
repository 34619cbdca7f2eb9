"""The PMU core: seed 002's low-level model (perfctr's low-level API) over
the CPU models of ``hwperfd.cpu.models``.

Two parts:

* ``PmuCpu``: one emulated CPU's counter hardware - a TSC, and per counter
  an event-select register and a counter register of the model's width.
  ``run`` plays a burst of CPU time (user and system nanoseconds) through
  it: each counter counts what its event select chooses, in the modes it
  enables, at the rates of a workload profile, exactly (the fraction of an
  event is carried).  Nothing here knows about processes.
* The perfctr state machine on top: ``CpuControl`` (tsc_on, nractrs,
  nrictrs, pmc_map, evntsel, ireset), ``CpuState`` (cstatus, tsc_start,
  tsc_sum, and per counter map / start / sum), ``update_control``,
  ``resume``, ``suspend``, ``sample``, ``identify_overflow``, ``ireload``.
  a-mode counters keep ``sum`` + ``start``; i-mode counters are preset from
  ``ireset`` and reloaded on overflow.

Seed 002 computes a period's count as (end - start) of the register, which
is ambiguous once a period holds more than 2**width events.  Counting here is
lazy (an idle process is only caught up when read), so periods can be long:
the hardware also keeps an unbounded event total, and ``suspend`` adds the
exact number of events since ``start`` was taken.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import NamedTuple

from hwperfd.cpu.models import MESI, CpuModel, ModelEvent

# x86 event-select bits (pctr(4); Intel SDM "IA32_PERFEVTSELx").
X86_USR = 1 << 16
X86_OS = 1 << 17
X86_EDGE = 1 << 18
X86_INT = 1 << 20
X86_EN = 1 << 22
X86_INV = 1 << 23
# A fixed-function counter's 4-bit field of IA32_FIXED_CTR_CTRL (Intel SDM
# vol. 3B 18.4.1): a register of a fixed counter holds its own field.
FIXED_OS = 0x1
FIXED_USR = 0x2
FIXED_PMI = 0x8
# MIPS R10000 performance control register (r10k_counters(5)).
MIPS_EXL, MIPS_K, MIPS_S, MIPS_U, MIPS_IE = 0x1, 0x2, 0x4, 0x8, 0x10
MIPS_EVENT_SHIFT = 5
# UltraSPARC PCR, one PIC's view: PRIV, ST (system trace), UT (user trace), select.
SPARC_ST, SPARC_UT = 0x2, 0x4
SPARC_SELECT_SHIFT = 4


class ControlError(ValueError):
    """Control data the hardware cannot take (perfctr's -EINVAL)."""


class Selection(NamedTuple):
    """What an event-select word makes a counter do."""

    event: ModelEvent | None
    user: bool
    kernel: bool  # system time (x86 OS, SPARC ST, MIPS K)
    exl: bool  # MIPS only: exception level
    interrupt: bool
    unit_share: Fraction  # part of the event the unit mask selects
    cmask: int = 0
    invert: bool = False
    edge: bool = False

    @property
    def counts(self) -> bool:
        return self.event is not None and (self.user or self.kernel or self.exl)


def decode(model: CpuModel, counter: int, evntsel: int) -> Selection:
    """Decode one counter's control word in the model's layout (a
    fixed-function counter's: its FIXED_CTR_CTRL field)."""
    if counter >= model.counters:
        ctrl = evntsel & 0xF
        counting = bool(ctrl & (FIXED_OS | FIXED_USR))
        event = model.fixed[counter - model.counters] if counting else None
        return Selection(event, bool(ctrl & FIXED_USR), bool(ctrl & FIXED_OS), False, bool(ctrl & FIXED_PMI),
                         Fraction(1))  # fmt: skip
    if model.control == "x86":
        if not evntsel & X86_EN:
            return Selection(None, False, False, False, False, Fraction(0))
        event = model.event(evntsel & 0xFF, counter)
        if event is not None:
            event = event.part((evntsel >> 8) & 0xFF)
        share = Fraction(1)
        if event is not None and MESI in event.flags:
            # The profile gives one rate per event; the four cache-line
            # states share it evenly (docs/design.md, CPU models).
            share = Fraction(((evntsel >> 8) & 0xF).bit_count(), 4)
        return Selection(
            event,
            bool(evntsel & X86_USR),
            bool(evntsel & X86_OS),
            False,
            bool(evntsel & X86_INT),
            share,
            (evntsel >> 24) & 0xFF,
            bool(evntsel & X86_INV),
            bool(evntsel & X86_EDGE),
        )
    if model.control == "sparc":
        event = model.event((evntsel >> SPARC_SELECT_SHIFT) & 0x3F, counter)
        return Selection(event, bool(evntsel & SPARC_UT), bool(evntsel & SPARC_ST), False, True, Fraction(1))
    event = model.event((evntsel >> MIPS_EVENT_SHIFT) & 0x1F, counter)
    return Selection(
        event, bool(evntsel & MIPS_U), bool(evntsel & MIPS_K), bool(evntsel & MIPS_EXL),
        bool(evntsel & MIPS_IE), Fraction(1),
    )  # fmt: skip


def per_cycle(selection: Selection, rates: Mapping[str, Fraction]) -> Fraction:
    """Events per cycle.  The emulated workload is uniform in time, so a
    counter-mask condition (pctr(4): count the cycles with at least cm
    events; with I, the cycles with no more than cm) holds on every cycle or
    on none, and edge detect on such a steady condition counts nothing."""
    if selection.event is None:
        return Fraction(0)
    rate = selection.event.rate(rates) * selection.unit_share
    if not selection.cmask:
        return rate
    if selection.edge:
        return Fraction(0)
    holds = rate <= selection.cmask if selection.invert else rate >= selection.cmask
    return Fraction(1 if holds else 0)


class Tsc:
    """The time-stamp counter: cycles at the model's clock since the time
    base's zero.  The time base is the caller's (wall time, or the manual
    clock's busy time of that CPU)."""

    def __init__(self, mhz: Fraction) -> None:
        self.mhz = mhz

    def at(self, ns: int) -> int:
        return ns * self.mhz.numerator // (1000 * self.mhz.denominator)


@dataclass
class _Register:
    evntsel: int = 0
    value: int = 0
    total: int = 0  # events counted since power-on, unbounded
    residue: Fraction = Fraction(0)
    reload: int | None = None  # i-mode: the preset the overflow handler restores
    overflowed: bool = False  # an overflow interrupt is pending
    selection: Selection | None = None  # what evntsel makes it do, decoded once when programmed


class PmuCpu:
    """One emulated CPU's counter hardware.

    With ``freeze``, an overflow whose interrupt is enabled stops every
    programmable counter at the overflowing event, as the interrupt handler
    of a per-thread driver does (seed 002: ``perfctr_cpu_suspend`` then
    ``identify_overflow``): ``run`` plays the burst only up to that event and
    counts nothing more until the overflow is acknowledged or the counter is
    written.  Without it the counters count on through the overflow (the
    shared CPUs' hardware, whose overflow nobody handles)."""

    def __init__(self, index: int, model: CpuModel, mhz: Fraction, *, freeze: bool = False) -> None:
        self.index = index
        self.freeze = freeze and model.overflow_interrupt
        self.model = model
        self.mhz = mhz
        self.tsc = Tsc(mhz)
        self._regs = [_Register(selection=decode(model, i, 0)) for i in range(model.registers)]
        self.version = 0  # bumped by every register write: what was derived from them is stale
        # Told of every such write (the thread table's due times hang on the registers).
        self.on_change: Callable[[], None] | None = None

    # -- registers (wrmsr / rdmsr / rdpmc) --

    def evntsel(self, counter: int) -> int:
        return self._regs[self._check(counter)].evntsel

    def program(self, counter: int, evntsel: int) -> None:
        reg = self._regs[self._check(counter)]
        reg.evntsel = evntsel & 0xFFFFFFFF
        reg.selection = decode(self.model, counter, reg.evntsel)
        self._changed()

    def selection(self, counter: int) -> Selection:
        """What the counter's event select makes it count (decoded when programmed)."""
        selection = self._regs[self._check(counter)].selection
        assert selection is not None
        return selection

    @property
    def interrupts(self) -> bool:
        """Whether any counter raises an interrupt on overflow."""
        return any(reg.selection is not None and reg.selection.interrupt for reg in self._regs)

    def write(self, counter: int, value: int, *, reload: int | None = None) -> None:
        """Set the counter register; ``reload`` arms the i-mode preset."""
        reg = self._regs[self._check(counter)]
        reg.value = value % self.model.modulus
        reg.residue = Fraction(0)
        reg.reload = None if reload is None else reload % self.model.modulus
        reg.overflowed = False
        self._changed()

    def rdpmc(self, counter: int) -> int:
        """The counter as a read returns it (AMD's 48 bits read as 40)."""
        return self._regs[self._check(counter)].value & self.model.read_mask

    def total(self, counter: int) -> int:
        return self._regs[self._check(counter)].total

    def raw(self, counter: int) -> int:
        """The whole register (a read may return fewer bits)."""
        return self._regs[self._check(counter)].value

    def residue(self, counter: int) -> Fraction:
        """The carried fraction of an event (what a state page extrapolates from)."""
        return self._regs[self._check(counter)].residue

    def pending(self, counter: int) -> bool:
        return self._regs[self._check(counter)].overflowed

    def acknowledge(self, counter: int) -> None:
        self._regs[self._check(counter)].overflowed = False
        self._changed()

    @property
    def frozen(self) -> bool:
        """An interrupting overflow is pending and has stopped the counters."""
        return self.freeze and any(
            reg.overflowed and reg.selection is not None and reg.selection.interrupt for reg in self._regs
        )

    def headroom_ns(self, rates: Mapping[str, Fraction]) -> int | None:
        """The least CPU time (ns) before a counter whose overflow interrupts
        can overflow, at these rates (every mode it counts at its fullest);
        0 if one is pending, None if none can.  The tick need not look at a
        thread sooner: it runs at most one CPU ns per wall ns."""
        least: int | None = None
        for reg in self._regs:
            selection = reg.selection
            if selection is None or not selection.interrupt:
                continue
            if reg.overflowed:
                return 0
            per_ns = self.mhz / 1000 * per_cycle(selection, rates) if selection.counts else Fraction(0)
            if not per_ns:
                continue
            left = (self.model.modulus - reg.value - reg.residue) / per_ns
            ns = max(0, left.numerator // left.denominator)
            least = ns if least is None else min(least, ns)
        return least

    # -- time --

    def run(
        self, user_ns: int, system_ns: int, rates: Mapping[str, Fraction], exl_share: Fraction = Fraction(0)
    ) -> int:
        """Count a burst of CPU time; returns the mask of counters that
        overflowed.  Frozen (see the class), the burst counts up to the first
        interrupting overflow only; the user and system parts of a burst are
        taken as evenly interleaved, so the cut takes the same share of each."""
        if self.freeze and self.frozen:
            return 0
        kernel_ns = Fraction(system_ns) * (1 - exl_share) if self.model.control == "mips" else Fraction(system_ns)
        exl_ns = Fraction(system_ns) * exl_share if self.model.control == "mips" else Fraction(0)
        plan: list[tuple[int, _Register, Fraction]] = []
        share = Fraction(1)
        for i, reg in enumerate(self._regs):
            selection = reg.selection
            if selection is None or not selection.counts:
                continue
            ns = (user_ns if selection.user else 0) + (kernel_ns if selection.kernel else 0) + (
                exl_ns if selection.exl else 0)
            rate = per_cycle(selection, rates)
            if not ns or not rate:
                continue
            events = ns * self.mhz / 1000 * rate
            plan.append((i, reg, events))
            if self.freeze and selection.interrupt:
                need = self.model.modulus - reg.value - reg.residue  # events to the wrap
                if need <= events * share:
                    share = need / events
        mask = 0
        for i, reg, events in plan:
            exact = reg.residue + events * share
            whole = exact.numerator // exact.denominator
            reg.residue = exact - whole
            if self._advance(reg, whole):
                mask |= 1 << i
        return mask

    def _advance(self, reg: _Register, events: int) -> int:
        reg.total += events
        modulus = self.model.modulus
        end = reg.value + events
        if end < modulus:
            reg.value = end
            return 0
        past = end - modulus
        if reg.reload is None:
            reg.value = past % modulus
            overflows = 1 + past // modulus
        else:
            period = modulus - reg.reload
            reg.value = reg.reload + past % period
            overflows = 1 + past // period
        reg.overflowed = True
        return overflows

    # -- kept across a restart of the daemon (docs/restart.md) --

    def saved(self) -> list[list[int]]:
        """The registers as plain integers: per register its event select,
        value, unbounded total, carried fraction (numerator, denominator),
        i-mode reload (-1: none) and pending overflow."""
        return [
            [r.evntsel, r.value, r.total, r.residue.numerator, r.residue.denominator,
             -1 if r.reload is None else r.reload, int(r.overflowed)]
            for r in self._regs
        ]  # fmt: skip

    def load(self, saved: Sequence[Sequence[int]]) -> None:
        """Registers as ``saved`` gave them; ValueError for a form of another model."""
        if len(saved) != len(self._regs) or any(len(r) != 7 or not all(type(v) is int for v in r) for r in saved):
            raise ValueError(f"registers of another model than the {self.model.name}")
        for i, (evntsel, value, total, num, den, reload, overflowed) in enumerate(saved):
            if den <= 0 or not 0 <= value < self.model.modulus or total < 0:
                raise ValueError("register values out of range")
            self.program(i, evntsel)
            reg = self._regs[i]
            reg.value, reg.total, reg.residue = value, total, Fraction(num, den)
            reg.reload = None if reload < 0 else reload % self.model.modulus
            reg.overflowed = bool(overflowed)
        self._changed()

    def _changed(self) -> None:
        self.version += 1
        if self.on_change is not None:
            self.on_change()

    def _check(self, counter: int) -> int:
        if not 0 <= counter < self.model.registers:
            raise ControlError(f"no counter {counter} on the {self.model.name}")
        return counter


# -- seed 002: the perfctr low-level state machine ----------------------------------


@dataclass(frozen=True)
class CpuControl:
    tsc_on: bool = False
    nractrs: int = 0
    nrictrs: int = 0
    pmc_map: tuple[int, ...] = ()
    evntsel: tuple[int, ...] = ()
    ireset: tuple[int, ...] = ()  # indices nractrs.. are used

    @property
    def nrctrs(self) -> int:
        return self.nractrs + self.nrictrs


@dataclass
class PmcState:
    map: int
    start: int = 0  # the register at the start of the period
    sum: int = 0
    _start_total: int = 0  # the hardware's unbounded total at ``start``
    _resume: int | None = None  # i-mode: the whole register value resume restores


def mk_cstatus(tsc_on: bool, nractrs: int, nrictrs: int) -> int:
    """perfctr_mk_cstatus: tsc_on in bit 31, nractrs bits 0-6, nrictrs bits 16-22."""
    return (int(tsc_on) << 31) | (nrictrs << 16) | nractrs


@dataclass
class CpuState:
    control: CpuControl = field(default_factory=CpuControl)
    cstatus: int = 0
    tsc_start: int = 0
    tsc_sum: int = 0
    pmc: list[PmcState] = field(default_factory=list)
    _reload: bool = False  # ireload(): force the i-mode presets on resume
    _running: bool = False

    @property
    def has_tsc(self) -> bool:
        return bool(self.cstatus >> 31)

    @property
    def nractrs(self) -> int:
        return self.cstatus & 0x7F

    @property
    def nrictrs(self) -> int:
        return (self.cstatus >> 16) & 0x7F


def update_control(state: CpuState, model: CpuModel, control: CpuControl, *, is_global: bool = False) -> None:
    """perfctr_cpu_update_control: check control data and take it; the
    state must have no running i-mode counters.  Sums restart at 0."""
    if state._running and state.nrictrs:
        raise ControlError("i-mode counters are running")
    n = control.nrctrs
    if control.nractrs < 0 or control.nrictrs < 0 or n > model.counters:
        raise ControlError(f"{n} counters asked, the {model.name} has {model.counters}")
    if len(control.pmc_map) < n or len(control.evntsel) < n or len(control.ireset) < n and control.nrictrs:
        raise ControlError("pmc_map, evntsel and ireset need one entry per counter")
    if control.nrictrs and not model.overflow_interrupt:
        raise ControlError(f"the {model.name} has no overflow interrupt")
    if is_global and control.nrictrs:
        raise ControlError("global-mode counters cannot be i-mode")  # perfctr's global mode
    used: set[int] = set()
    for i in range(n):
        pmc = control.pmc_map[i]
        if not 0 <= pmc < model.counters or pmc in used:
            raise ControlError(f"pmc_map[{i}] = {pmc}: no such counter, or used twice")
        used.add(pmc)
        if decode(model, pmc, control.evntsel[i]).event is None:
            raise ControlError(f"evntsel[{i}] = {control.evntsel[i]:#x} selects no event on counter {pmc}")
        if i >= control.nractrs and control.ireset[i] >= 0:
            raise ControlError(f"ireset[{i}] must be negative (the count to overflow)")
    state.control = control
    state.cstatus = mk_cstatus(control.tsc_on, control.nractrs, control.nrictrs)
    state.pmc = [PmcState(control.pmc_map[i]) for i in range(n)]
    state.tsc_sum = 0
    state._reload = True


def resume(state: CpuState, cpu: PmuCpu, tsc_now: int) -> None:
    """perfctr_cpu_resume: write control registers, restore the i-mode
    counters' start values (when asked to, or on first use: x86.c's
    perfctr_cpu_iresume writes ``pmc[i].start``), take the a-mode start
    values.  An i-mode counter's start is ireset after it overflowed
    (``identify_overflow``) and where it was suspended otherwise, so a
    counter that did not overflow continues its period."""
    control = state.control
    for i, pmc in enumerate(state.pmc):
        cpu.program(pmc.map, control.evntsel[i])
        if i >= control.nractrs and state._reload:
            value = control.ireset[i] % cpu.model.modulus if pmc._resume is None else pmc._resume
            if cpu.raw(pmc.map) != value or cpu.pending(pmc.map):
                cpu.write(pmc.map, value, reload=control.ireset[i])
        pmc.start = cpu.rdpmc(pmc.map)
        pmc._start_total = cpu.total(pmc.map)
    state._reload = False
    state.tsc_start = tsc_now
    state._running = True


def suspend(state: CpuState, cpu: PmuCpu, tsc_now: int) -> None:
    """perfctr_cpu_suspend: stop the counters and add the period to the sums."""
    _accumulate(state, cpu, tsc_now)
    for pmc in state.pmc:
        cpu.program(pmc.map, 0)
    state._running = False


def sample(state: CpuState, cpu: PmuCpu, tsc_now: int) -> None:
    """perfctr_cpu_sample: the sums brought up to date, counters left running."""
    _accumulate(state, cpu, tsc_now)
    state.tsc_start = tsc_now


def live_sum(pmc: PmcState, cpu: PmuCpu) -> int:
    """A counter's sum as a sample now would make it, leaving the state as it is."""
    return pmc.sum + cpu.total(pmc.map) - pmc._start_total


def identify_overflow(state: CpuState, cpu: PmuCpu) -> int:
    """perfctr_cpu_identify_overflow: the mask (by state index) of the i-mode
    counters that overflowed; their start values are reset from ireset and
    the next resume reloads them."""
    mask = 0
    control = state.control
    for i in range(control.nractrs, control.nrctrs):
        pmc = state.pmc[i]
        if cpu.pending(pmc.map):
            cpu.acknowledge(pmc.map)
            mask |= 1 << i
            pmc.start = pmc._resume = control.ireset[i] % cpu.model.modulus
            state._reload = True
    return mask


def ireload(state: CpuState) -> None:
    """perfctr_cpu_ireload: the next resume presets the i-mode counters."""
    state._reload = True


def _accumulate(state: CpuState, cpu: PmuCpu, tsc_now: int) -> None:
    if state.has_tsc:
        state.tsc_sum += tsc_now - state.tsc_start
    for i, pmc in enumerate(state.pmc):
        total = cpu.total(pmc.map)
        pmc.sum += total - pmc._start_total
        pmc._start_total = total
        pmc.start = cpu.rdpmc(pmc.map)
        if i >= state.control.nractrs:
            pmc._resume = cpu.raw(pmc.map)  # where an i-mode counter that did not overflow continues


def read_sums(state: CpuState) -> tuple[int, Sequence[int]]:
    """perfctr_sum_ctrs: (tsc, pmc[...]) as of the last suspend or sample."""
    return state.tsc_sum, [pmc.sum for pmc in state.pmc]
