"""A bound request set: libcpc's 64-bit virtual counters over one PMU.

The same set logic serves a thread's private PMU (cpc_bind_curlwp,
cpc_bind_pctx) and a CPU's real one (cpc_bind_cpu).  Each request counts on
the counter (PIC) the bind assigned it; its 64-bit value is its preset plus
the events the hardware counted since (the PMU keeps an exact total, so the
hardware width never shows).

Overflow (cpc_bind_curlwp(3CPC), NOTES): a value passing UINT64_MAX
overflows.  When that request has CPC_OVF_NOTIFY_EMT - or, on a model that
cannot tell which counter overflowed (no CPC_CAP_OVERFLOW_PRECISE), when any
request of the set has it - the set freezes (its counters stop; samples
return the frozen values) and the LWP is owed a SIGEMT.  cpc_set_restart
starts every request again from its preset, the one cpc_request_preset gave
if any (DESCRIPTION: "Counting begins from each request's original preset
... or from the preset specified in a prior call to cpc_request_preset()").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hwperfd.cpu.core import PmuCpu

U64 = 1 << 64
CPC_OVF_NOTIFY_EMT = 0x1


@dataclass
class Request:
    index: int
    event: str
    pic: int
    evntsel: int
    preset: int
    flags: int

    @property
    def notify(self) -> bool:
        return bool(self.flags & CPC_OVF_NOTIFY_EMT)


@dataclass
class BoundSet:
    requests: list[Request]
    precise: bool  # the model knows which counter overflowed
    flags: int = 0  # set flags (CPC_BIND_LWP_INHERIT)
    values: list[int] = field(default_factory=list)
    base: list[int] = field(default_factory=list)  # the PMU's totals at the last sync
    frozen: bool = False
    invalid: bool = False  # taken by a CPU bind or another personality: samples EAGAIN
    enabled: bool = True
    overflows: int = 0
    tick_base: int = 0  # what the tick counted from (the binder's unit)
    epoch: int = 0  # counts ``start``s: what the counters count from was set anew (the set-up store writes)

    def __post_init__(self) -> None:
        if not self.values:
            self.values = [r.preset % U64 for r in self.requests]

    @property
    def counting(self) -> bool:
        return self.enabled and not self.frozen and not self.invalid

    def start(self, cpu: PmuCpu) -> None:
        """Program the counters for the requests (or stop them if the set
        does not count now) and take the totals to count from."""
        self.epoch += 1
        for i, r in enumerate(self.requests):
            # The register holds the value's low bits, so the hardware wraps
            # (and interrupts) where the 64-bit value passes UINT64_MAX.
            cpu.write(r.pic, self.values[i] % cpu.model.modulus)
            cpu.program(r.pic, r.evntsel if self.counting else 0)
        self.base = [cpu.total(r.pic) for r in self.requests]

    def stop(self, cpu: PmuCpu) -> None:
        self.sync(cpu)
        for r in self.requests:
            cpu.program(r.pic, 0)

    def sync(self, cpu: PmuCpu) -> bool:
        """Fold what the counters counted into the values; True when this
        froze the set on an overflow that owes a signal."""
        if len(self.base) != len(self.requests):
            self.base = [cpu.total(r.pic) for r in self.requests]
        wrapped = []
        for i, r in enumerate(self.requests):
            total = cpu.total(r.pic)
            delta, self.base[i] = total - self.base[i], total
            if delta <= 0 or not self.counting:
                continue
            if self.values[i] + delta >= U64:
                wrapped.append(r)
            self.values[i] = (self.values[i] + delta) % U64
        for r in self.requests:
            if cpu.pending(r.pic):
                cpu.acknowledge(r.pic)  # folded here: a thread's PMU counts again once restarted
        if not wrapped or self.frozen:
            return False
        if self.precise:
            due = any(r.notify for r in wrapped)
        else:
            due = any(r.notify for r in self.requests)
        if not due:
            return False
        self.frozen = True
        self.overflows += 1
        for r in self.requests:
            cpu.program(r.pic, 0)
        return True

    def restart(self, cpu: PmuCpu) -> None:
        """cpc_set_restart: every request from its preset, counting again."""
        self.sync(cpu)
        self.values = [r.preset % U64 for r in self.requests]
        self.frozen = False
        self.start(cpu)

    def set_preset(self, index: int, preset: int) -> None:
        """cpc_request_preset: the preset (and the value) the next restart uses."""
        self.requests[index].preset = preset % U64

    def set_enabled(self, cpu: PmuCpu, enabled: bool) -> None:
        self.sync(cpu)
        self.enabled = enabled
        self.start(cpu)

    def invalidate(self, cpu: PmuCpu | None) -> None:
        if cpu is not None:
            self.sync(cpu)
        self.invalid = True
        if cpu is not None:
            for r in self.requests:
                cpu.program(r.pic, 0)

    def inherited(self, cpu: PmuCpu, emt: bool) -> "BoundSet":
        """The copy a new LWP gets (CPC_BIND_LWP_INHERIT): counters from the
        presets; with a CPC_OVF_NOTIFY_EMT request they read UINT64_MAX and
        the set waits, frozen, for the LWP's SIGEMT handler to preset them
        (cpc_bind_curlwp(3CPC))."""
        requests = [Request(r.index, r.event, r.pic, r.evntsel, r.preset, r.flags) for r in self.requests]
        child = BoundSet(requests, self.precise, self.flags)
        if emt:
            child.values = [U64 - 1 if r.notify else r.preset % U64 for r in requests]
            child.frozen = True
        child.start(cpu)
        return child
