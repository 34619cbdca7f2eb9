"""Global per-CPU counters: what OpenBSD's pctr(4) driver gives programs.

No virtualization: one function per counter, the same on every CPU (the
driver keeps ``pctr_fn[]`` and sends an IPI so each CPU reloads it), and
each CPU's counter registers count everything that runs on that CPU, in the
modes the function enables.  A counter is zeroed only when its function
changes (``pctr_reload``: "only update the ones that don't match").  Reads
return the registers of one CPU, the one the caller runs on.

Counts come lazily from each emulated CPU's user and system time (the
clock's ``cpu_times``), through the default workload profile, so idle
costs nothing; under the manual clock ``advance-cpu`` moves them exactly.
While any function is set, the counters are a system-wide user of the
hardware and hold the shared reservation.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from hwperfd.counters.errors import CountersBusy
from hwperfd.cpu.pmu import CpuSet
from hwperfd.cpu.profiles import WorkloadProfile
from hwperfd.trace import recorder as trace

CpuTimes = tuple[int, int]
SERVICE = "pctr"  # the name these counters reserve the hardware under


class CpuClock(Protocol):
    def cpu_times(self, cpu: int) -> CpuTimes: ...

    def tsc_ns(self, cpu: int) -> int: ...


class CpuTimeSeen:
    """Each CPU's busy time as last taken: what ran since is the next stretch
    to run through that CPU's counters (a clock reading that steps back
    gives nothing, and is not counted twice when it steps forward again)."""

    def __init__(self, clock: CpuClock, cpus: int) -> None:
        self._clock = clock
        self._seen = [clock.cpu_times(i) for i in range(cpus)]

    def take(self, cpu: int) -> CpuTimes:
        """The (user, system) ns ``cpu`` was busy since last taken."""
        now = self._clock.cpu_times(cpu)
        before = self._seen[cpu]
        self._seen[cpu] = (max(now[0], before[0]), max(now[1], before[1]))
        return max(0, now[0] - before[0]), max(0, now[1] - before[1])

    def restart(self, cpu: int) -> None:
        """Count ``cpu`` from now on."""
        self._seen[cpu] = self._clock.cpu_times(cpu)

    def saved(self) -> list[list[int]]:
        return [list(times) for times in self._seen]

    def load(self, saved: Any) -> None:
        """Times ``saved`` gave: the next take counts from them (a restart's
        downtime included).  ValueError for a form of another machine."""
        if not isinstance(saved, list) or len(saved) != len(self._seen):
            raise ValueError("CPU times of another machine")
        for cpu, times in enumerate(saved):
            if not isinstance(times, list) or len(times) != 2 or not all(type(v) is int for v in times):
                raise ValueError("not CPU times")
            self._seen[cpu] = (times[0], times[1])


def save_pmus(cpus: CpuSet) -> list[list[list[int]]]:
    """The shared CPUs' registers, for the set-up store."""
    return [pmu.saved() for pmu in cpus.pmus]


def load_pmus(cpus: CpuSet, saved: Any) -> None:
    if not isinstance(saved, list) or len(saved) != len(cpus.pmus):
        raise ValueError("registers of another machine")
    for pmu, registers in zip(cpus.pmus, saved):
        pmu.load(registers)


class CpuReading(NamedTuple):
    """One CPU's counters as PCIOCRD returns them."""

    functions: tuple[int, ...]
    tsc: int
    values: tuple[int, ...]


class GlobalCounters:
    def __init__(
        self,
        cpus: CpuSet,
        clock: CpuClock,
        profile: Callable[[], WorkloadProfile] = WorkloadProfile,
        service: str = SERVICE,
    ) -> None:
        self.cpus = cpus
        self.clock = clock
        self._profile = profile
        self.service = service
        self.functions = [0] * cpus.model.counters
        self._seen = CpuTimeSeen(clock, len(cpus))
        self.hold_ns = 0  # > 0: counts taken at one moment hold this long (a state page shows them)
        self.taken_at = 0  # when every CPU's counts were last taken (monotonic ns), while holding
        self._now = time.monotonic_ns

    @property
    def count(self) -> int:
        return len(self.functions)

    def set_function(self, counter: int, function: int) -> bool:
        """Program ``counter`` with ``function`` on every CPU; returns whether
        it changed.  A function that does not change leaves the counts alone.

        Raises CountersBusy when another service holds the hardware."""
        if not 0 <= counter < self.count:
            raise IndexError(counter)
        function &= 0xFFFFFFFF
        if function == self.functions[counter]:
            return False
        if function:
            holder = self.cpus.reservation.reserve(self.service)
            if holder is not None:
                raise CountersBusy(f"hardware taken by '{holder}'")
        self.catch_up(force=True)  # the old function counts up to now
        self.functions[counter] = function
        for pmu in self.cpus.pmus:
            pmu.write(counter, 0)
            pmu.program(counter, function)
            pmu.write(counter, 0)
        trace.active.cpu_programmed(self.service, self.cpus.pmus)
        if not any(self.functions):
            self.cpus.reservation.release(self.service)
        return True

    def read(self, cpu: int) -> CpuReading:
        """The functions, the TSC and the counters of ``cpu``."""
        self.catch_up(cpu)
        pmu = self.cpus.pmus[cpu]
        return CpuReading(
            tuple(pmu.evntsel(i) for i in range(self.count)),
            self.tsc(cpu),
            tuple(pmu.rdpmc(i) for i in range(self.count)),
        )

    def tsc(self, cpu: int) -> int:
        return self.cpus.pmus[cpu].tsc.at(self.clock.tsc_ns(cpu))

    def saved(self) -> dict[str, Any]:
        """The functions, the registers and the CPU times counted to: with
        the CPUs' busy time since, a restarted daemon counts on exactly."""
        return {"functions": list(self.functions), "pmus": save_pmus(self.cpus), "seen": self._seen.saved()}

    def load(self, saved: Any) -> bool:
        """Put back what ``saved`` gave; False if another service holds the
        hardware.  ValueError for a form of another machine."""
        functions = saved.get("functions") if isinstance(saved, dict) else None
        if not isinstance(functions, list) or len(functions) != self.count:
            raise ValueError("not pctr's functions")
        if not all(type(f) is int and 0 <= f <= 0xFFFFFFFF for f in functions):
            raise ValueError("not pctr's functions")
        if any(functions) and self.cpus.reservation.reserve(self.service) is not None:
            return False
        try:
            load_pmus(self.cpus, saved.get("pmus"))
            self._seen.load(saved.get("seen"))
        except ValueError:
            if any(functions):
                self.cpus.reservation.release(self.service)
            raise
        self.functions = list(functions)
        return True

    @property
    def expires(self) -> int:
        """While holding: when the counts last taken stop holding (monotonic ns)."""
        return self.taken_at + self.hold_ns if self.hold_ns else 0

    def catch_up(self, cpu: int | None = None, force: bool = False) -> None:
        """Run each CPU's new busy time through its counters.

        While holding (``hold_ns``), every CPU's counts are taken at one
        moment and stand for ``hold_ns``: a reader of the state page that
        shows them, and a PCIOCRD, get the same counts until then.  A CPU's
        busy time moves in scheduler ticks anyway (/proc/stat), so a hold
        of one tick adds at most a tick to what a read lags."""
        if self.hold_ns:
            now = self._now()
            if now < self.taken_at + self.hold_ns and not force:
                return
            self.taken_at, cpu = now, None
        profile = self._profile()
        for i in range(len(self.cpus)) if cpu is None else (cpu,):
            user, system = self._seen.take(i)
            if (user or system) and any(self.functions):
                self.cpus.pmus[i].run(user, system, profile.rates, profile.exl_share)
