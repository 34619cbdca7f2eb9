"""The set-up store's codec (hwperfd/counters/codec.py): forms read back as
the same objects, runs of one value are stored once, and a form that is not
one of ours is refused."""

from __future__ import annotations

from fractions import Fraction

import pytest

from hwperfd.counters import codec
from hwperfd.counters.block import ControlBlock
from hwperfd.counters.durable import PROCESS  # noqa: F401 - registers the counter layer's classes
from hwperfd.counters.request import CounterRequest
from hwperfd.cpu.pmu import CounterState


def test_a_run_of_one_value_is_stored_once_and_reads_back_whole():
    states = [CounterState(0, Fraction(0))] * 32
    form = codec.encode(states)
    assert form == {"R": [32, codec.encode(states[0])]}
    assert codec.decode(form) == states


def test_a_run_of_mutable_values_reads_back_as_distinct_objects():
    form = codec.encode([[1, 2]] * 5)
    assert form == {"R": [5, [1, 2]]}
    back = codec.decode(form)
    back[0].append(3)
    assert back[1] == [1, 2]


def test_short_lists_and_lists_of_different_values_are_kept_as_they_are():
    assert codec.encode([(1,), (1,), (1,)]) == [{"T": [1]}] * 3
    assert codec.encode([(1,), (2,), (1,), (1,)]) == [{"T": [1]}, {"T": [2]}, {"T": [1]}, {"T": [1]}]


@pytest.mark.parametrize("form", [{"R": [0, 1]}, {"R": [1 << 20, 1]}, {"R": ["3", 1]}, {"R": [3]}])
def test_a_malformed_run_is_refused(form):
    with pytest.raises(codec.CodecError):
        codec.decode(form)


def test_a_control_block_reads_back_equal():
    block = ControlBlock(CounterRequest.shared(specs=(8,) + (0,) * 31, thresholds=(0,) * 32, signal=0))
    back = codec.decode(codec.encode(block))
    assert codec.encode(back) == codec.encode(block)
    assert len(str(codec.encode(block))) < 1200
