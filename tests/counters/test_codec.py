"""The set-up store's codec (hwperfd/counters/codec.py): forms read back as
the same objects, runs of one value are stored once, and a form that is not
one of ours is refused; the journal's packed forms read back as the values
they were packed from, by their fields' declared types or, where a value is
not of its declared type, by its own."""

from __future__ import annotations

import marshal
from fractions import Fraction

import pytest

from hwperfd.counters import codec
from hwperfd.counters.block import ControlBlock, _Multiplex
from hwperfd.counters.durable import PROCESS  # noqa: F401 - registers the counter layer's classes
from hwperfd.counters.kernel import State, _Credit, _ProcessRecord
from hwperfd.counters.request import CounterRequest
from hwperfd.cpu.pmu import CounterState
from hwperfd.cpu.profiles import WorkloadProfile


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


# -- packed forms: what the journal holds (codec.pack, codec.unpack) ----------


def _roundtrip(value, *, exact=False):
    return codec.unpack(marshal.loads(marshal.dumps(codec.pack(value, exact=exact), 4)))


def _a_counting_record() -> _ProcessRecord:
    """A process record as the kernel holds one mid-run: two slots counting,
    one with a threshold (its register state moved), children folded in."""
    request = CounterRequest.shared((8, 0, 0, 0) + (0,) * 28, (0, 0, 0, 0) + (0,) * 28, 0)
    block = ControlBlock(request)
    block.counts[0], block.active_ns[0], block.enabled_ns = 123_456_789, 50_000, 50_000
    block._saved[17] = CounterState(0x7FFF_0000, Fraction(3, 7))
    block._mux[1].position, block._mux[1].into_tick_ns = 1, 4_000_000
    return _ProcessRecord(
        pid=4242, block=block, generation=7, state=State.ENABLED, seen=(10, 20), cpu=1,
        save_children=frozenset({5, 6}), start=99, owner=(1000, 100), children_ns=(3, 4),
        credit=_Credit(1, 2, [0] * 32, [1] * 32), parent=1, comm="prog",
        descendants=[(5, "child", (1,) * 32)], threads=[(4243, 7, 8)], profiling=3,
    )  # fmt: skip


def test_a_packed_record_reads_back_as_the_record_through_marshal():
    record = _a_counting_record()
    back = _roundtrip(record)
    assert codec.encode(back) == codec.encode(record)
    assert back.block._saved[0] is back.block._saved[1]  # a run of one register state is one object again
    assert back.block._mux[0] is not back.block._mux[1]  # mutable values come back one each
    assert back.state is State.ENABLED and back.credit.user_counts == [0] * 32


def test_a_packed_form_is_a_snapshot_once_marshalled():
    record = _a_counting_record()
    payload = marshal.dumps(codec.pack(record), 4)
    record.block.counts[0] += 1
    assert codec.unpack(marshal.loads(payload)).block.counts[0] == 123_456_789


@pytest.mark.parametrize("value", [
    CounterRequest.shared((1,) * 32, (2,) * 32, 3), [CounterState(1, Fraction(1, 3))] * 5, State.LOST,
    {"a": (1, 2), "b": frozenset({3})}, WorkloadProfile("w", {"cycles": Fraction(1)}, Fraction(1, 2)),
    [(1, 2), (3, 4)], Fraction(-5, 3),
])  # fmt: skip
def test_values_of_every_kind_read_back_through_either_packing(value):
    for exact in (False, True):
        assert codec.encode(_roundtrip(value, exact=exact)) == codec.encode(value)


def test_a_value_not_of_its_fields_declared_type_packs_by_its_own_type():
    """A Fraction in a list declared of ints goes as it is, which marshal
    refuses (the store then packs the record again exactly); packed
    exactly, it reads back as it was."""
    record = _a_counting_record()
    record.block.counts[3] = Fraction(1, 2)
    with pytest.raises(ValueError):
        marshal.dumps(codec.pack(record), 4)
    back = _roundtrip(record, exact=True)
    assert back.block.counts[3] == Fraction(1, 2)
    assert codec.encode(back) == codec.encode(record)


def test_a_record_packed_by_a_daemon_with_other_fields_reads_back_by_name():
    """A successor's class lacks one field and has another: the stored one
    it lacks is ignored, the one it has takes its default (as ``decode``)."""
    form = codec.pack(_Multiplex(3, 4))
    _, name, names, values = form
    older = (form[0], name, names.replace("into_tick_ns", "gone"), values)
    back = codec.unpack(older)
    assert (back.position, back.into_tick_ns) == (3, 0)


@pytest.mark.parametrize("form", [
    (4, "NoSuchClass", "a", (1,)), (4, "_Multiplex", "position", (1, 2)), (4, "_Multiplex", ("position",), (1,)),
    (99, 1), (2, "x", "y"), (6, b"\x00garbage"), (1, [1, 2]), (),
])  # fmt: skip
def test_a_malformed_packed_form_is_refused(form):
    with pytest.raises(codec.CodecError):
        codec.unpack(form)
