"""pctr's counters as one state page: what rdtsc and rdpmc read without a
request (docs/pctr.md, reads without a round trip).

OpenBSD's rdtsc() and rdpmc(n) are single instructions that read the CPU the
caller runs on.  The page (``include/hwperfd/state.h``, the same kind every
personality publishes) holds every CPU's TSC and counters: CPU i's slots are
``i * CPU_SLOTS`` (the TSC) and the PCTR_NUM counters after it.  Anyone may
read /dev/pctr, so there is one page for everyone (``grant(public=True)``).

The TSC moves with wall time (``HWPERFD_STATE_CLOCK_MONOTONIC``): a slot
with the model's cycles per ns, exact at any instant.  The counters count
each CPU's busy time, which a process cannot read without a system call of
its own (/proc/stat), so the page shows them as taken at one moment and
says until when they hold (``hs_expires_ns``, one scheduler tick later);
PCIOCRD answers the same counts until then (``GlobalCounters.hold_ns``), and
a reader past it reads through the ioctl, which takes them anew and writes
the page again.  Under the manual clock time moves only by ``advance-cpu``,
after which the daemon writes every page: the page is the count.

Counters another personality holds (IRIX system mode, a cpc CPU bind,
perfctr's global mode) are that personality's: while it holds them the page
says "ask the daemon".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hwperfd.counters.percpu import SERVICE, GlobalCounters
from hwperfd.counters.snapshot import SlotRate, Snapshot, tsc_slot
from structs import HWPERFD_STATE_SLOTS
from structs.pctr import PCTR_NUM

CPU_SLOTS = 1 + PCTR_NUM  # the TSC, then the counters
PAGE = 0  # the page's context id: one page for the whole machine


class PctrPages:
    """The ``PageSource`` of pctr's one page."""

    def __init__(self, counters: GlobalCounters, real: bool, hold_ns: int, has_counters: bool) -> None:
        self.counters = counters
        self.real = real
        self.has_counters = has_counters
        self.shown = -1  # the expiry the page was last written with
        if real:
            counters.hold_ns = hold_ns

    @property
    def stale(self) -> bool:
        """The counts were taken anew since the page was written."""
        return self.real and self.shown != self.counters.expires

    def identity(self, ident: int) -> tuple[int, Any] | None:
        return (0, None) if ident == PAGE else None

    def is_counting(self, ident: int) -> bool:
        return ident == PAGE

    def catch_up(self, ids: Iterable[int] | None = None) -> None:
        self.counters.catch_up()

    def snapshot(self, ident: int) -> Snapshot | None:
        if ident != PAGE:
            return None
        counters, cpus = self.counters, self.counters.cpus
        ncpus = len(cpus)
        holder = cpus.reservation.holder
        fallback = holder not in (None, SERVICE) or ncpus * CPU_SLOTS > HWPERFD_STATE_SLOTS
        now = counters.clock.tsc_ns(0) if self.real else 0
        slots: list[SlotRate] = []
        for cpu in range(min(ncpus, HWPERFD_STATE_SLOTS // CPU_SLOTS)):
            pmu = cpus.pmus[cpu]
            if self.real:
                slots.append(tsc_slot(pmu.tsc.mhz, now))  # cycles at the model's clock since boot
            else:
                slots.append((counters.tsc(cpu), 0, 0, 0, 0))
            values = [pmu.rdpmc(i) for i in range(counters.count)] if self.has_counters else []
            values += [0] * (PCTR_NUM - len(values))
            slots.extend((value, 0, 0, 0, 0) for value in values[:PCTR_NUM])
        self.shown = counters.expires if self.real else 0
        return Snapshot(0, (now, 0), tuple(slots), fallback, own=True, cpus=ncpus, cpu_slots=CPU_SLOTS,
                        expires=self.shown)  # fmt: skip
