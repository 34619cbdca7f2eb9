"""A counting context as a snapshot a reader can extrapolate exactly.

A slot on a hardware counter of its own counts, over a burst of ``u`` ns of
user and ``s`` ns of system time, floor(residue + u * per_user + s *
per_system) events, the fraction carried (``hwperfd.cpu.pmu.Cpu.run``): the
rates depend on the event, the profile, the clock rate and the modes the
control word enables, not on the burst.  So the count at any later CPU time
is the snapshot's count plus floor(residue + du * per_user + ds * per_system),
whatever bursts the daemon cuts the time into - which is what lets a process
compute its own counts without asking the daemon (docs/state-pages.md).

What the formula cannot reproduce is marked ``fallback``: multiplexed slots
(the rotation moves at tick boundaries), overflow signals (the daemon must
see the overflow to send them), counters not counting, and anything that
adds counts at a read (children folded in, time credited after lost events).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Mapping
from math import lcm

from hwperfd.counters.block import ControlBlock
from hwperfd.counters.request import SLOTS
from hwperfd.cpu.core import PmuCpu, per_cycle
from hwperfd.cpu.pmu import COUNTERS_PER_CPU, MODE_EXL, MODE_K, MODE_U, Cpu
from hwperfd.cpu.profiles import WorkloadProfile

U64 = 1 << 64


#: One slot: (count at the snapshot, residue, per_user, per_system, den), the
#: last four as numerators over ``den``; ``den`` 0: the slot does not move.
SlotRate = tuple[int, int, int, int, int]


def slot_at(slot: SlotRate, du: int, ds: int) -> int:
    count, residue, per_user, per_system, den = slot
    if not den:
        return count
    return count + (residue + du * per_user + ds * per_system) // den


@dataclass(frozen=True)
class Snapshot:
    generation: int
    seen: tuple[int, int]  # (user_ns, system_ns) the counts are as of; monotonic ns for a TSC's page
    slots: tuple[SlotRate, ...]
    fallback: bool
    own: bool = False  # the counts never take in reaped children's (hs_flags HWPERFD_STATE_OWN)
    cpus: int = 0  # per-CPU counters: CPU i's slots are slots[i * cpu_slots:][:cpu_slots]
    cpu_slots: int = 0
    expires: int = 0  # CLOCK_MONOTONIC ns from which the counts no longer hold (0: never)


@lru_cache(maxsize=1024)
def _per_ns(mhz: Fraction, rate: Fraction, exl_share: Fraction, mode: int) -> tuple[Fraction, Fraction]:
    """Events per ns of user and of system time (``Cpu.run``: events =
    residue + ns * mhz / 1000 * weight / per * rate, where weight / per =
    (u * b [U] + s * ((b - a) [K] + a [EXL])) / (total * b), a / b the EXL share)."""
    a, b = exl_share.numerator, exl_share.denominator
    base = mhz / 1000 * rate / b
    user = base * (b if mode & MODE_U else 0)
    system = base * ((b - a if mode & MODE_K else 0) + (a if mode & MODE_EXL else 0))
    return user, system


def rates(cpu: Cpu, block: ControlBlock, profile: WorkloadProfile) -> tuple[SlotRate, ...] | None:
    """Each slot's count and rates; None if a hardware counter multiplexes
    (the shares change at tick boundaries) or a number does not fit 64 bits."""
    request = block.request
    out: list[SlotRate] = [(count, 0, 0, 0, 0) for count in block.counts]
    for counter in range(COUNTERS_PER_CPU):
        slots = request.on_counter(counter)
        if len(slots) > 1:
            return None
        if not slots:
            continue
        slot = slots[0]
        control = request.controls[slot]
        event = cpu.type.events.on_counter(counter, control.event)
        if event is None:
            continue
        user, system = _per_ns(cpu.mhz, profile.rate(event.kind), profile.exl_share, control.mode)
        made = slot_rate(block.counts[slot], Fraction(block._saved[slot].residue), user, system)
        if made is None:
            return None
        out[slot] = made
    assert len(out) == SLOTS
    return tuple(out)


def slot_rate(count: int, residue: Fraction, per_user: Fraction, per_system: Fraction) -> SlotRate | None:
    """A page's slot: over one denominator; None if a number does not fit 64 bits."""
    if not per_user and not per_system:
        return (count, 0, 0, 0, 0)
    den = lcm(per_user.denominator, per_system.denominator, residue.denominator)
    numbers = (
        residue.numerator * (den // residue.denominator),
        per_user.numerator * (den // per_user.denominator),
        per_system.numerator * (den // per_system.denominator),
    )
    if den >= U64 or count >= U64 or any(not 0 <= n < U64 for n in numbers):
        return None
    return (count, *numbers, den)


def tsc_slot(mhz: Fraction, ns: int, base: int = 0) -> SlotRate:
    """A TSC at ``mhz`` as a slot of a page whose clock is wall time
    (``HWPERFD_STATE_CLOCK_MONOTONIC``): ``Tsc.at`` (ns * mhz / 1000, floored)
    less ``base``, exact at every later instant."""
    num, den = mhz.numerator, 1000 * mhz.denominator
    return (ns * num // den - base, ns * num % den, num, 0, den)


def register_rates(
    cpu: PmuCpu, counter: int, rates: Mapping[str, Fraction], exl_share: Fraction
) -> tuple[Fraction, Fraction]:
    """Events per ns of user and of system time of one seed-002 counter
    register as programmed (``PmuCpu.run``), for a per-thread personality's
    pages: with the register's carried ``residue`` and its count, ``slot_rate``."""
    selection = cpu.selection(counter)
    if not selection.counts:
        return Fraction(0), Fraction(0)
    base = cpu.mhz / 1000 * per_cycle(selection, rates)
    mips = cpu.model.control == "mips"
    kernel = (1 - exl_share if mips else Fraction(1)) if selection.kernel else Fraction(0)
    exl = exl_share if mips and selection.exl else Fraction(0)
    return (base if selection.user else Fraction(0)), base * (kernel + exl)


def extrapolate(snapshot: Snapshot, now: tuple[int, int]) -> tuple[int, ...]:
    """Every slot's count at CPU times ``now``, as the daemon's catch-up would give."""
    du = max(0, now[0] - snapshot.seen[0])
    ds = max(0, now[1] - snapshot.seen[1])
    return tuple(slot_at(slot, du, ds) for slot in snapshot.slots)
