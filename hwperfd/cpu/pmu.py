"""The R10000/R12000 performance-monitoring hardware, one CPU at a time.

Each CPU has two 32-bit counters and their control registers (event, IE and
the U/S/K/EXL count-enable bits, r10k_counters(5) THE CONTROL REGISTERS).  A
counter counts only the cycles spent in a mode its control register enables,
and signals an overflow interrupt when bit 31 becomes set.  Nothing here knows
about processes: the kernel model loads a control word and saved counter
state, runs a burst of cycles, and saves the state back.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

from hwperfd.cpu.core import PmuCpu
from hwperfd.cpu.events import CPU_EVENTS, CPU_TYPE_DATA, CpuEvents
from hwperfd.cpu.models import MODELS, CpuModel
from hwperfd.cpu.profiles import WorkloadProfile
from hwperfd.cpu.reservation import Reservation

COUNTERS_PER_CPU = 2
COUNTER_MODULUS = 1 << 32
OVERFLOW_BIT = 1 << 31

MODE_EXL = 0x1
MODE_K = 0x2
MODE_S = 0x4
MODE_U = 0x8


@dataclass(frozen=True)
class CpuType:
    name: str
    events: CpuEvents
    default_mhz: int
    # hwp_ev values a control register accepts on each counter
    events_per_counter: int


CPU_TYPES = {
    name: CpuType(name, CPU_EVENTS[name], default_mhz, events_per_counter)
    for name, (default_mhz, events_per_counter) in CPU_TYPE_DATA.items()
}


# The small value types below are NamedTuples: they are built on every
# counter read, and a frozen dataclass costs several times more to build.


class ModeWeights(NamedTuple):
    """How a burst's time divides among the modes, exactly: user / per, kernel / per, exl / per."""

    user: int
    kernel: int
    exl: int
    per: int

    def enabled(self, mode: int) -> int:
        return (
            (self.user if mode & MODE_U else 0)
            + (self.kernel if mode & MODE_K else 0)
            + (self.exl if mode & MODE_EXL else 0)
        )


class CounterState(NamedTuple):
    """What a context switch saves of a counter: the register and the part of
    an event the model has accumulated but not yet counted."""

    value: int = 0
    residue: Fraction = Fraction(0)


class ControlWord(NamedTuple):
    event: int = 0
    ie: bool = False
    mode: int = 0


class Burst(NamedTuple):
    events: int
    overflows: int  # times bit 31 became set during the burst


class HardwareCounter:
    """One 32-bit counter and its control register."""

    __slots__ = ("control", "value", "residue", "reload")

    def __init__(self) -> None:
        self.control = ControlWord()
        self.value = 0
        self.residue = Fraction(0)
        self.reload = 0

    def load(self, control: ControlWord, state: CounterState, reload: int = 0) -> None:
        """Program the counter; ``reload`` is what the overflow handler presets
        after an interrupt (perfctr's "i-mode": 2**31 - n interrupts every n events)."""
        self.control = control
        self.value = state.value % OVERFLOW_BIT
        self.residue = state.residue
        self.reload = reload

    def save(self) -> CounterState:
        return CounterState(self.value, self.residue)

    def advance(self, events: int) -> int:
        """Count ``events``; return how many times bit 31 became set.

        Counting continues after overflow (r10k_counters(5) THE COUNTERS).  The
        kernel always takes the interrupt, folds the count into its 64-bit
        virtual counter and re-presets the register to ``reload``.
        """
        if events <= 0:
            return 0
        end = self.value + events
        if end < OVERFLOW_BIT:
            self.value = end
            return 0
        period = OVERFLOW_BIT - self.reload
        past = end - OVERFLOW_BIT
        self.value = self.reload + past % period
        return 1 + past // period


class Cpu:
    """An emulated R10000 or R12000 with its two counters."""

    def __init__(self, index: int, cpu_type: CpuType, mhz: Fraction) -> None:
        self.index = index
        self.type = cpu_type
        self.mhz = mhz
        self.counters = tuple(HardwareCounter() for _ in range(COUNTERS_PER_CPU))

    def cycles(self, ns: Fraction | int) -> Fraction:
        return Fraction(ns) * self.mhz / 1000

    def run(self, counter: int, ns: int, weights: ModeWeights, profile: WorkloadProfile) -> Burst:
        """Run one counter through ``ns`` of CPU time split among the modes by
        ``weights``; only the modes its control register enables count.

        Exact: events = floor(residue + cycles(ns) * enabled share * rate), the
        fraction carried in the residue, in integer arithmetic (Fraction's is
        several times slower, and this runs on every counter read)."""
        hw = self.counters[counter]
        event = self.type.events.on_counter(counter, hw.control.event)
        weight = weights.enabled(hw.control.mode)
        if event is None or not weight or not ns:
            return Burst(0, 0)
        rate = profile.rate(event.kind)
        # exact = residue + ns * mhz / 1000 * weight / per * rate
        num = ns * self.mhz.numerator * weight * rate.numerator
        den = 1000 * self.mhz.denominator * weights.per * rate.denominator
        residue = hw.residue
        num = residue.numerator * den + num * residue.denominator
        den *= residue.denominator
        events = num // den
        hw.residue = Fraction(num - events * den, den)
        return Burst(events, hw.advance(events))


class CpuSet:
    """N CPUs of one type, as r10k_counters(5) requires (mixing types is undefined).

    ``model`` is the CPU model (``hwperfd.cpu.models``), ``pmus`` each CPU's
    counter hardware for the seed-002 core, and ``reservation`` who holds
    that hardware system-wide.  ``type`` and ``cpus`` are the IRIX view; on
    a model IRIX never ran on, its event table is empty, so every IRIX
    request names an event that does not exist (EINVAL)."""

    def __init__(self, count: int, cpu_type: str = "r10000", mhz: Fraction | int | str | None = None):
        if count < 1:
            raise ValueError("need at least one CPU")
        try:
            self.model: CpuModel = MODELS[cpu_type]
        except KeyError:
            raise ValueError(f"unknown CPU type {cpu_type!r}; known: {', '.join(MODELS)}") from None
        self.type = CPU_TYPES.get(cpu_type) or CpuType(cpu_type, CpuEvents(cpu_type, ()), self.model.default_mhz, 0)
        self.mhz = Fraction(mhz) if mhz is not None else Fraction(self.model.default_mhz)
        if self.mhz <= 0:
            raise ValueError("clock rate must be positive")
        self.cpus = tuple(Cpu(i, self.type, self.mhz) for i in range(count))
        self.pmus = tuple(PmuCpu(i, self.model, self.mhz) for i in range(count))
        self.reservation = Reservation()

    def __len__(self) -> int:
        return len(self.cpus)

    def __getitem__(self, index: int) -> Cpu:
        return self.cpus[index]

    def valid_event(self, counter: int, event: int) -> bool:
        return self.type.events.on_counter(counter, event) is not None
