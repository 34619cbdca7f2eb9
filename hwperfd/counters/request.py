"""A counter request, validated against the CPU type before anything changes.

This is ``hwperf_profevctrarg_t`` in plain terms.  Following Linux perf's
``validate_group``, a request is checked whole before the kernel model
touches any state, so a refused call changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from hwperfd.counters.errors import InvalidRequest, NotPermitted
from hwperfd.cpu.pmu import MODE_K, MODE_S, ControlWord, CpuSet

SLOTS = 32
SLOTS_PER_COUNTER = 16
MAX_SIGNAL = 32  # r10k_counters(5): "acceptable signals are between 1 and 32"
MAX_THRESHOLD = (1 << 31) - 1


SHARED_MAX = 1024  # distinct requests kept for sharing (then the table starts again)


@dataclass(frozen=True)
class CounterRequest:
    specs: tuple[int, ...]  # 32 hwperf_spec words
    thresholds: tuple[int, ...]  # hwp_ovflw_freq
    signal: int = 0

    @classmethod
    def build(
        cls,
        specs: dict[int, int] | list[int] | tuple[int, ...],
        thresholds: dict[int, int] | list[int] | tuple[int, ...] | None = None,
        signal: int = 0,
    ) -> "CounterRequest":
        return cls(_slots(specs), _slots(thresholds or ()), signal)

    @classmethod
    def shared(cls, specs: tuple[int, ...], thresholds: tuple[int, ...], signal: int = 0) -> "CounterRequest":
        """The one request object for these values: the many processes that
        enable the same events share it and its decoded controls (requests
        are immutable), instead of two 32-slot tuples each."""
        key = (specs, thresholds, signal)
        found = _SHARED.get(key)
        if found is None:
            if len(_SHARED) >= SHARED_MAX:
                _SHARED.clear()
            found = _SHARED[key] = cls(specs, thresholds, signal)
        return found

    @staticmethod
    def control(spec: int) -> ControlWord:
        spec &= 0xFFFF
        return ControlWord(event=spec >> 5, ie=bool(spec & 0x10), mode=spec & 0xF)

    @cached_property
    def in_use(self) -> tuple[int, ...]:
        """Slots with any mode bit set: only those count (abi.md, Event numbering)."""
        return tuple(i for i, spec in enumerate(self.specs) if spec & 0xF)

    def on_counter(self, counter: int) -> tuple[int, ...]:
        return self._by_counter[counter]

    @cached_property
    def _by_counter(self) -> tuple[tuple[int, ...], ...]:
        return tuple(
            tuple(i for i in self.in_use if c * SLOTS_PER_COUNTER <= i < (c + 1) * SLOTS_PER_COUNTER)
            for c in range(SLOTS // SLOTS_PER_COUNTER)
        )

    @cached_property
    def controls(self) -> tuple[ControlWord, ...]:
        """Each slot's control word, decoded once (read on every counter read)."""
        return tuple(self.control(spec) for spec in self.specs)

    @cached_property
    def modes(self) -> int:
        mode = 0
        for i in self.in_use:
            mode |= self.specs[i] & 0xF
        return mode

    @property
    def kernel_mode(self) -> bool:
        return bool(self.modes & MODE_K)

    def validate(self, cpus: CpuSet, *, root: bool) -> "CounterRequest":
        """Raise unless the request is well formed for these CPUs and this caller.

        EPERM is checked first: r10k_counters(5) PIOCENEVCTRS refuses kernel or
        supervisor mode to a non-root caller whatever else is wrong.
        """
        if len(self.specs) != SLOTS or len(self.thresholds) != SLOTS:
            raise InvalidRequest("a request has 32 slots")
        if not root and self.modes & (MODE_K | MODE_S):
            raise NotPermitted("kernel or supervisor mode needs root")
        if not self.in_use:
            raise InvalidRequest("no event is enabled in any mode")
        for i in self.in_use:
            control = self.control(self.specs[i])
            if control.mode & MODE_S:
                raise InvalidRequest(f"slot {i}: supervisor mode is not supported")
            counter = i // SLOTS_PER_COUNTER
            if not cpus.valid_event(counter, control.event):
                raise InvalidRequest(
                    f"slot {i}: event {control.event} does not exist on counter {counter} of the {cpus.type.name}"
                )
        for i, threshold in enumerate(self.thresholds):
            if threshold < 0:
                raise InvalidRequest(f"slot {i}: negative overflow threshold {threshold}")
            if threshold > MAX_THRESHOLD:
                raise InvalidRequest(f"slot {i}: overflow threshold {threshold} exceeds 2**31-1")
        if not 0 <= self.signal <= MAX_SIGNAL:
            raise InvalidRequest(f"signal {self.signal} is outside 0..{MAX_SIGNAL}")
        return self


def _slots(values: dict[int, int] | list[int] | tuple[int, ...]) -> tuple[int, ...]:
    if isinstance(values, dict):
        out = [0] * SLOTS
        for slot, value in values.items():
            if not 0 <= slot < SLOTS:
                raise InvalidRequest(f"slot {slot} is outside 0..31")
            out[slot] = value
        return tuple(out)
    values = tuple(values)
    return values + (0,) * (SLOTS - len(values)) if len(values) <= SLOTS else values


_SHARED: dict[tuple[tuple[int, ...], tuple[int, ...], int], CounterRequest] = {}
