"""Property tests: the closed-form tick split equals a tick-by-tick replay,
however CPU time arrives, and nothing is lost or counted twice."""

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from hwperfd.counters.block import TICK_NS, ControlBlock
from hwperfd.counters.request import CounterRequest
from hwperfd.cpu.pmu import MODE_U, CpuSet
from hwperfd.cpu.profiles import WorkloadProfile
from structs import spec_word

UNIT = WorkloadProfile.named("unit")


def replay(slots_on_counter0: int, steps: list[int], mhz: int) -> list[int]:
    """Reference model: walk every tick, give the whole tick to one slot."""
    counts = [Fraction(0)] * slots_on_counter0
    position, into = 0, 0
    for step in steps:
        while step:
            take = min(step, TICK_NS - into)
            counts[position] += Fraction(take * mhz, 1000)
            into += take
            step -= take
            if into == TICK_NS:
                position, into = (position + 1) % slots_on_counter0, 0
    return [int(c) for c in counts]


@settings(max_examples=300, deadline=None)
@given(
    slots=st.integers(1, 16),
    steps=st.lists(st.integers(0, 7 * TICK_NS + 123), min_size=1, max_size=30),
    mhz=st.sampled_from([195, 200, 300, 1]),
)
def test_closed_form_multiplexing_matches_tick_replay(slots, steps, mhz):
    cpus = CpuSet(1, "r10000", mhz)
    block = ControlBlock(CounterRequest.build({i: spec_word(0, MODE_U) for i in range(slots)}))
    for step in steps:
        block.advance(cpus[0], step, 0, UNIT)
    expected = replay(slots, steps, mhz)
    # The counter carries fractions of an event, so per-step floors lose nothing.
    assert block.counts[:slots] == expected
    assert sum(block.active_ns[:slots]) == sum(steps) == block.enabled_ns


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(st.tuples(st.integers(0, 10**8), st.integers(0, 10**8)), min_size=1, max_size=20),
    rate=st.fractions(min_value=0, max_value=3, max_denominator=1000),
)
def test_counts_are_exact_however_time_is_split(steps, rate):
    """One slot per counter: the count is floor(total cycles x rate), exactly."""
    cpus = CpuSet(1, "r10000", 200)
    profile = UNIT.with_rates(graduated_instructions=rate, exl_share=0)
    block = ControlBlock(CounterRequest.build({0: spec_word(15, MODE_U | 0x2)}))
    for user, system in steps:
        block.advance(cpus[0], user, system, profile)
    total = sum(u + s for u, s in steps)
    assert block.counts[0] == int(Fraction(total * 200, 1000) * rate)


@settings(max_examples=200, deadline=None)
@given(threshold=st.integers(1, 5_000_000), steps=st.lists(st.integers(0, 5 * 10**7), min_size=1, max_size=20))
def test_overflows_happen_every_threshold_events(threshold, steps):
    cpus = CpuSet(1, "r10000", 200)
    block = ControlBlock(CounterRequest.build({0: spec_word(0, MODE_U, ie=True)}, {0: threshold}))
    overflows = sum(block.advance(cpus[0], step, 0, UNIT) for step in steps)
    assert overflows == block.counts[0] // threshold
