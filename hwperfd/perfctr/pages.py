"""Vperfctrs as state pages: what perfctr's mmap() of a vperfctr gave its
thread, so that vperfctr_read_ctrs and friends need no request (docs/perfctr.md,
reads of one's own counters).

A page is one thread's (keyed by its tid) and shows ``VPERFCTR_READ_STATE``
as slots: slot 0 the TSC sum, slots 1-18 pmc[0..17].sum, each as it moves
(sum + (current - start)), and the cstatus in ``hs_generation``.  What the
extrapolation cannot reproduce sets the fallback flag, and the library reads
through the ioctl: a stopped vperfctr, running i-mode counters (their
overflow suspends the counters and signals the thread, which only the daemon
can do), a number past 64 bits.  A vperfctr suspended on an overflow (until
``iresume``) reads from its page: its counters stand at the overflow and the
TSC runs on, which the page shows exactly - so an overflow handler's read,
which perfctr answered from the mapped state, costs no round trip while the
counters stand still.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

from hwperfd.counters.snapshot import SlotRate, Snapshot, register_rates, slot_rate
from hwperfd.cpu.core import live_sum
from hwperfd.perfctr.driver import Virtual, Vperfctr
from structs import perfctr as abi

SLOTS = 1 + abi.NR_CTRS  # the TSC, then every pmc sum


class VperfctrPages:
    """The ``PageSource`` of the vperfctrs: contexts are thread ids."""

    def __init__(self, virtual: Virtual) -> None:
        self.virtual = virtual

    def _linked(self, tid: int) -> Vperfctr | None:
        perfctr = self.virtual.get(tid)
        if perfctr is None or perfctr.ctx is None or not self.virtual.alive(perfctr):
            return None
        return perfctr

    def identity(self, tid: int) -> tuple[int, None] | None:
        perfctr = self._linked(tid)
        return None if perfctr is None or perfctr.ctx is None else (perfctr.ctx.start, None)

    def is_counting(self, tid: int) -> bool:
        """A page lives while the vperfctr is linked and a handle still refers
        to it (closed or unlinked, its reads have nothing to fall back on)."""
        perfctr = self._linked(tid)
        return perfctr is not None and perfctr.handles > 0

    def catch_up(self, pids: Iterable[int] | None = None) -> None:
        for tid in pids or ():
            perfctr = self._linked(tid)
            if perfctr is not None:
                self.virtual.catch_up(perfctr)

    def snapshot(self, tid: int) -> Snapshot | None:
        perfctr = self._linked(tid)
        if perfctr is None or perfctr.ctx is None:
            return None
        ctx, state, pmu = perfctr.ctx, perfctr.state, perfctr.pmu
        perfctr.sync()
        cstatus = state.cstatus
        fallback = not perfctr.running or bool(state.nrictrs) or not ctx.running
        running = perfctr.running and ctx.running
        # The TSC runs with the thread's CPU time (Virtual.tsc): cycles at mhz
        # over ran_ns, the fraction of a cycle carried.
        exact = ctx.ran_ns * pmu.mhz / 1000
        tsc_now = exact.numerator // exact.denominator
        tsc = state.tsc_sum + (tsc_now - state.tsc_start if state.has_tsc and running else 0)
        per_ns = pmu.mhz / 1000 if state.has_tsc and running else Fraction(0)
        slots: list[SlotRate | None] = [slot_rate(tsc, exact - tsc_now, per_ns, per_ns)]
        profile = self.virtual.profile(ctx.pid)
        for i in range(abi.NR_CTRS):
            if i < len(state.pmc) and i < state.nractrs and running:
                pmc = state.pmc[i]
                count = live_sum(pmc, pmu)
                user, system = register_rates(pmu, pmc.map, profile.rates, profile.exl_share)
                slots.append(slot_rate(count, pmu.residue(pmc.map), user, system))
            else:
                slots.append(slot_rate(perfctr.sums[i], Fraction(0), Fraction(0), Fraction(0)))
        if any(slot is None for slot in slots):
            fallback = True
            slots = [(0, 0, 0, 0, 0)] * SLOTS
        generation = cstatus - (1 << 32) if cstatus >= 1 << 31 else cstatus  # hs_generation is signed
        return Snapshot(generation, ctx.seen, tuple(s for s in slots if s is not None), fallback)
