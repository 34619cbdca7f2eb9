"""An LWP's bound set as a state page: what cpc_set_sample(3CPC) reads on
the LWP's own binding without a request (docs/cpc.md, samples without a
round trip).

A page is one thread's (keyed by its tid), of the page kind every
personality publishes (``include/hwperfd/state.h``): slot 0 is the set's
virtual tick (the thread's CPU time since the bind at the model's clock,
what ``cpc_buf_tick`` returns), slots 1..n the requests' 64-bit values, each
as its counter moves over the thread's CPU time; ``hs_generation`` is the
binding's serial, so a set the library holds reads the page only while the
binding it made is the LWP's.  What the extrapolation cannot reproduce
sets the fallback flag and the library samples through the ioctl, which
answers as Solaris would: a set invalidated by a CPU bind or another
personality taking the counters (EAGAIN), a running set with a request with
CPC_OVF_NOTIFY_EMT (the daemon must see each overflow to send its SIGEMT),
and a set another process bound on the LWP (cputrack's).  A set frozen on
an overflow reads from its page: its values stand at the overflow until
cpc_set_restart, so the SIGEMT handler's sample costs no round trip while
the counters stand still.

A CPU binding (cpc_bind_cpu) has a page too, for the file that holds it
(context id ``-1 - cpu``): the tick moves with wall time (the CPU's TSC since
the bind, exact at any instant) and the values count the CPU's busy time,
which a process cannot read without a system call of its own, so they show
as the daemon took them, until ``hs_expires_ns`` (a scheduler tick), and a
sample answers the same until then (``CpcDevice.cpu_hold_ns``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from fractions import Fraction

from hwperfd.counters.snapshot import SlotRate, Snapshot, register_rates, slot_rate, tsc_slot
from hwperfd.counters.threads import ThreadContext
from hwperfd.cpc.device import SERVICE, CpcDevice, CpuBinding, LwpBinding
from hwperfd.cpu.profiles import WorkloadProfile

ZERO = Fraction(0)


class CpcPages:
    """The ``PageSource`` of libcpc's per-LWP sets: contexts are thread ids."""

    def __init__(self, device: CpcDevice, profile: Callable[[int], WorkloadProfile]) -> None:
        self.device = device
        self._profile = profile

    def _own(self, tid: int) -> ThreadContext | None:
        """The set the LWP bound on itself (cpc_bind_curlwp), if any."""
        threads = self.device.threads
        ctx = threads.get(SERVICE, tid) if threads is not None else None
        if ctx is None or not isinstance(ctx.data, LwpBinding) or ctx.data.pctx:
            return None
        return ctx

    def identity(self, tid: int) -> tuple[int, None] | None:
        ctx = self._own(tid)
        return None if ctx is None else (ctx.start, None)

    def is_counting(self, tid: int) -> bool:
        return self._own(tid) is not None

    def catch_up(self, tids: Iterable[int] | None = None) -> None:
        for tid in tids or ():
            ctx = self._own(tid)
            if ctx is not None:
                self.device.catch_up(ctx)

    def snapshot(self, tid: int) -> Snapshot | None:
        ctx = self._own(tid)
        if ctx is None:
            return None
        binding: LwpBinding = ctx.data
        bset, pmu = binding.set, ctx.cpu
        bset.sync(pmu)
        held = self.device.cpus.reservation.holder is not None
        fallback = (
            bset.invalid or held or bool(binding.deferred)
            or (not bset.frozen and any(r.notify for r in bset.requests))
        )  # fmt: skip
        running = ctx.running
        # The tick (CpcDevice._tick): cycles at mhz over the CPU time since the bind, the fraction carried.
        per_ns = self.device.cpus.mhz / 1000
        exact = (ctx.ran_ns - binding.seen0) * per_ns
        tick = exact.numerator // exact.denominator
        rate = per_ns if running else ZERO
        slots: list[SlotRate | None] = [slot_rate(tick, exact - tick, rate, rate)]
        profile = self._profile(ctx.pid)
        for i, request in enumerate(bset.requests):
            if running and bset.counting:
                user, system = register_rates(pmu, request.pic, profile.rates, profile.exl_share)
                slots.append(slot_rate(bset.values[i], pmu.residue(request.pic), user, system))
            else:
                slots.append(slot_rate(bset.values[i], ZERO, ZERO, ZERO))
        made = tuple(slot for slot in slots if slot is not None)
        if len(made) != len(slots):
            fallback, made = True, tuple((0, 0, 0, 0, 0) for _ in slots)
        return Snapshot(ctx.serial & 0x7FFFFFFF, ctx.seen, made, fallback, own=True)


def cpu_ident(cpu: int) -> int:
    """A CPU binding's page's context id: never a thread's."""
    return -1 - cpu


class CpcCpuPages:
    """The ``PageSource`` of libcpc's CPU bindings: contexts are ``cpu_ident(cpu)``."""

    def __init__(self, device: CpcDevice, real: bool, hold_ns: int) -> None:
        self.device = device
        self.real = real
        self.shown: dict[int, int] = {}  # cpu -> the take its page shows
        if real:
            device.cpu_hold_ns = hold_ns

    def _binding(self, ident: int) -> CpuBinding | None:
        return self.device.cpu_bindings.get(-1 - ident)

    def stale(self, cpu: int) -> bool:
        """The values were taken anew since the page was written."""
        return self.real and self.shown.get(cpu) != self.device.cpu_taken[cpu]

    def identity(self, ident: int) -> tuple[int, None] | None:
        return None if self._binding(ident) is None else (0, None)

    def is_counting(self, ident: int) -> bool:
        return self._binding(ident) is not None

    def catch_up(self, ids: Iterable[int] | None = None) -> None:
        """The CPUs' values taken anew, unless they still stand (a hold)."""
        for ident in ids or ():
            binding = self._binding(ident)
            if binding is not None:
                self.device.catch_up_cpu(binding.cpu, force=False)

    def snapshot(self, ident: int) -> Snapshot | None:
        binding = self._binding(ident)
        if binding is None:
            return None
        device, bset, cpu = self.device, binding.set, binding.cpu
        pmu = device.cpus.pmus[cpu]
        fallback = bset.invalid or bset.frozen or any(r.notify for r in bset.requests)
        # The tick (CpcDevice._sample): the CPU's TSC since the bind.
        if self.real:
            now = device.clock.tsc_ns(cpu)
            tick = tsc_slot(pmu.tsc.mhz, now, bset.tick_base)
        else:
            now = 0
            tick = (pmu.tsc.at(device.clock.tsc_ns(cpu)) - bset.tick_base, 0, 0, 0, 0)
        slots = (tick, *((value, 0, 0, 0, 0) for value in bset.values))
        self.shown[cpu] = device.cpu_taken[cpu]
        expires = device.cpu_taken[cpu] + device.cpu_hold_ns if self.real else 0
        return Snapshot(binding.serial, (now, 0), slots, fallback, own=True, expires=expires)
