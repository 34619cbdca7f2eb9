"""A counter control block: the 32 virtual 64-bit counters of one context.

IRIX kept one per process in the u-area, one per CPU and one global for
system mode (r10k_counters(5), Operation Modes).  A block is advanced lazily:
it is told how much CPU time its context spent in user and system mode since
it was last advanced, and replays that time on an emulated CPU, switching
between the events of a hardware counter at every 10 ms tick of that time
(r10k_counters(5), THE COUNTERS: "multiplex the events across clock tick
boundaries").  Counts are exact integers; nothing is ever scaled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hwperfd.counters.request import SLOTS, CounterRequest
from hwperfd.cpu.pmu import COUNTERS_PER_CPU, OVERFLOW_BIT, CounterState, Cpu, ModeWeights
from hwperfd.cpu.profiles import WorkloadProfile

TICK_NS = 10_000_000  # the IRIX clock tick: 100 Hz
_UNARMED = CounterState()  # a slot without a threshold; immutable, so every block shares it


@dataclass(slots=True)
class _Multiplex:
    """Where a hardware counter is in its rotation through the slots."""

    position: int = 0  # index into the counter's active slots
    into_tick_ns: int = 0  # CPU time already spent in the current tick


# Slotted: a daemon holds one block per counting process (docs/speed.md, Idle load).
@dataclass(slots=True)
class ControlBlock:
    request: CounterRequest
    counts: list[int] = field(default_factory=lambda: [0] * SLOTS)
    active_ns: list[int] = field(default_factory=lambda: [0] * SLOTS)
    enabled_ns: int = 0
    _saved: list[CounterState] = field(default_factory=lambda: [_UNARMED] * SLOTS)
    _mux: list[_Multiplex] = field(default_factory=lambda: [_Multiplex() for _ in range(COUNTERS_PER_CPU)])

    def __post_init__(self) -> None:
        for slot in range(SLOTS):
            self.preset(slot)

    def start_from(self, counts: tuple[int, ...]) -> None:
        """Continue from saved virtual counts (checkpoint/restart): the
        registers keep their threshold presets, only the 64-bit sums move."""
        self.counts = list(counts)

    def reprogram(self, request: CounterRequest) -> None:
        """Take a new request without releasing (HWPERF_SET_SYSEVCTRL; a
        process's PIOCSETEVCTRL starts a fresh block instead).

        Slots whose control word and threshold are unchanged keep counting
        where they were; changed slots start again from zero.
        """
        old, self.request = self.request, request
        for i in range(SLOTS):
            if old.specs[i] != request.specs[i] or old.thresholds[i] != request.thresholds[i]:
                self.counts[i] = 0
                self.active_ns[i] = 0
                self.preset(i)
        for counter in range(COUNTERS_PER_CPU):
            if old.on_counter(counter) != request.on_counter(counter):
                self._mux[counter] = _Multiplex()

    def advance(self, cpu: Cpu, user_ns: int, system_ns: int, profile: WorkloadProfile, every: bool = False) -> int:
        """Replay CPU time on ``cpu``; return the number of threshold
        overflows of slots whose interrupt enable bit is set (``every``: of
        every slot with a threshold, as profiling counts them)."""
        total = user_ns + system_ns
        if total <= 0:
            return 0
        self.enabled_ns += total
        exl_num, exl_den = profile.exl_share.numerator, profile.exl_share.denominator
        weights = ModeWeights(user_ns * exl_den, system_ns * (exl_den - exl_num), system_ns * exl_num, total * exl_den)
        signalled = 0
        for counter in range(COUNTERS_PER_CPU):
            slots = self.request.on_counter(counter)
            if not slots:
                continue
            hw = cpu.counters[counter]
            for slot, ns in self._shares(counter, slots, total):
                threshold = self.request.thresholds[slot]
                reload = OVERFLOW_BIT - threshold if threshold else 0
                hw.load(self.request.controls[slot], self._saved[slot], reload)
                burst = cpu.run(counter, ns, weights, profile)
                self._saved[slot] = hw.save()
                self.counts[slot] += burst.events
                self.active_ns[slot] += ns
                if threshold and (every or self.request.controls[slot].ie):
                    # Bit 4 "specifies whether overflows for the specified
                    # event will generate interrupts or not" (r10k_counters(5)).
                    signalled += burst.overflows
        return signalled

    def headroom_ns(self, cpu: Cpu, profile: WorkloadProfile, every: bool = False) -> int | None:
        """The least CPU time (ns) before a slot whose overflow interrupts can
        overflow, each counting at its event's rate on every cycle (as if it
        had its counter to itself, in every mode); None if none can."""
        least: int | None = None
        for counter in range(COUNTERS_PER_CPU):
            for slot in self.request.on_counter(counter):
                control = self.request.controls[slot]
                if not self.request.thresholds[slot] or not (every or control.ie):
                    continue
                event = cpu.type.events.on_counter(counter, control.event)
                rate = profile.rate(event.kind) if event is not None else 0
                if not rate:
                    continue
                saved = self._saved[slot]
                left = (OVERFLOW_BIT - saved.value - saved.residue) / (cpu.mhz / 1000 * rate)
                ns = max(0, left.numerator // left.denominator)
                least = ns if least is None else min(least, ns)
        return least

    def preset(self, slot: int) -> None:
        """Arm a slot's register so its first overflow comes after ``threshold`` events."""
        threshold = self.request.thresholds[slot]
        self._saved[slot] = CounterState(OVERFLOW_BIT - threshold) if threshold else _UNARMED

    def _shares(self, counter: int, slots: tuple[int, ...], total: int) -> list[tuple[int, int]]:
        """Split ``total`` ns of CPU time among the slots of one hardware
        counter, tick by tick, in closed form (no loop over ticks)."""
        if len(slots) == 1:
            return [(slots[0], total)]
        mux = self._mux[counter]
        m = len(slots)
        mux.position %= m
        shares = [0] * m
        first = min(total, TICK_NS - mux.into_tick_ns)
        shares[mux.position] += first
        rest = total - first
        if rest == 0:
            mux.into_tick_ns += first
            if mux.into_tick_ns == TICK_NS:
                mux.position, mux.into_tick_ns = (mux.position + 1) % m, 0
        else:
            start = (mux.position + 1) % m
            full, tail = divmod(rest, TICK_NS)
            for k in range(m):
                shares[(start + k) % m] += TICK_NS * (full // m + (1 if k < full % m else 0))
            mux.position = (start + full) % m
            shares[mux.position] += tail
            mux.into_tick_ns = tail
        return [(slot, ns) for slot, ns in zip(slots, shares) if ns]

    def add(self, other: "ControlBlock") -> None:
        """Fold another block in (a reaped child): counts, and the times that
        let a reader scale multiplexed counts honestly."""
        self.enabled_ns += other.enabled_ns
        for i in range(SLOTS):
            self.counts[i] += other.counts[i]
            self.active_ns[i] += other.active_ns[i]
