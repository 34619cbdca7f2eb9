"""The recorder on the counter layer's own objects, with a hand-moved clock:
what each hook records, the ring's bound, and the export."""

from __future__ import annotations

import inspect
from fractions import Fraction

import pytest

from hwperfd.counters.kernel import CounterKernel
from hwperfd.counters.request import CounterRequest
from hwperfd.counters.block import TICK_NS
from hwperfd.counters.threads import ThreadTable
from hwperfd.cpu.models import MODELS
from hwperfd.cpu.pmu import CpuSet
from hwperfd.cpu.profiles import WorkloadProfile
from hwperfd.trace import export, recorder
from hwperfd.trace.recorder import MUX_TICK_NS, NullRecorder, Recorder
from structs import HWPERF_CNTEN_U, spec_word
from tests.counters.test_kernel import Ledger, Proc, me
from tests.counters.test_threads import CYCLES, FakeHost

MS = 1_000_000


class Now:
    """The emulated clock, moved by hand."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


@pytest.fixture
def now():
    return Now()


@pytest.fixture
def rec(now):
    r = Recorder(1000, now, "manual")
    recorder.install(r)
    yield r
    recorder.uninstall()


def kinds(r: Recorder, kind: str) -> list[tuple]:
    return [(ts, f) for ts, _, k, f in r.events if k == kind]


def test_the_null_recorder_has_every_hook_and_does_nothing():
    hooks = {n for n, v in vars(Recorder).items() if inspect.isfunction(v) and not n.startswith("_")}
    assert hooks - {"record", "dropped"} <= set(vars(NullRecorder))
    assert recorder.active is recorder.NULL and not recorder.active.recording


def test_the_multiplexing_tick_is_the_blocks():
    assert MUX_TICK_NS == TICK_NS


def multiplexed(kernel, ledger, pid=42):
    """pid counts cycles and issued instructions on counter 0, cycles on counter 1."""
    proc = Proc(pid)
    ledger.run(pid, 0)
    request = CounterRequest.build(
        {0: spec_word(0, HWPERF_CNTEN_U), 1: spec_word(1, HWPERF_CNTEN_U), 16: spec_word(0, HWPERF_CNTEN_U)}
    )
    kernel.enable(me(proc), proc, request)
    return proc


@pytest.mark.parametrize("bursts", [[25 * MS], [3 * MS, 14 * MS, 9 * MS], [7 * MS] * 4, [1000 * MS, 3 * MS]])
def test_occupancy_adds_up_to_each_slots_time_on_its_counter(rec, now, bursts):
    ledger = Ledger()
    kernel = CounterKernel(CpuSet(2, "r10000", 200), ledger)
    proc = multiplexed(kernel, ledger)
    for ns in bursts:
        ledger.run(proc.pid, ns)
        now.ns += ns
        kernel.read(me(proc), proc)
    time_on = {0: 0, 1: 0, 16: 0}
    for _, f in kinds(rec, "occupy"):
        if f["shares"]:  # a long burst: one slice, each slot's share in its arguments
            for slot, ns in f["shares"].items():
                time_on[slot] += ns
        else:
            time_on[f["slot"]] += f["dur"]
    active = kernel.view(proc.pid).active_ns
    assert time_on == {slot: active[slot] for slot in (0, 1, 16)}
    # Stretches of one counter follow each other without gap or overlap.
    spans = sorted((ts, ts + f["dur"]) for ts, f in kinds(rec, "occupy") if f["counter"] == 0)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])) and spans[-1][1] == now.ns


def test_bursts_are_drawn_tick_by_tick_and_joined_where_they_go_on(rec, now):
    ledger = Ledger()
    kernel = CounterKernel(CpuSet(2, "r10000", 200), ledger)
    proc = multiplexed(kernel, ledger)
    for ns in (4 * MS, 21 * MS):
        ledger.run(proc.pid, ns)
        now.ns += ns
        kernel.read(me(proc), proc)
    counter0 = [(ts, f["slot"], f["dur"], f["event"]) for ts, f in kinds(rec, "occupy") if f["counter"] == 0]
    # The second burst goes on where the first ended, on the same slot: one stretch.
    assert counter0 == [
        (0, 0, 10 * MS, "Cycles"),
        (10 * MS, 1, 10 * MS, "Issued instructions"),
        (20 * MS, 0, 5 * MS, "Cycles"),
    ]
    assert kinds(rec, "counts")[-1] == (
        25 * MS, {"ctx": "irix 42", "counts": {"0 Cycles": 15 * 200_000, "1 Issued instructions": 1_800_000,
                                               "16 Cycles": 25 * 200_000}},
    )  # fmt: skip


def test_the_ring_keeps_the_newest_and_counts_the_rest(now):
    r = Recorder(3, now, "manual")
    for pid in range(5):
        now.ns = pid
        r.execed(pid)
    assert [f["pid"] for _, f in kinds(r, "exec")] == [2, 3, 4]
    assert (r.recorded, r.dropped) == (5, 2)
    trace = export.chrome_trace(r)
    assert trace["metadata"]["dropped"] == 2
    assert any(e["name"] == "2 events dropped" and e["ts"] == 0.002 for e in trace["traceEvents"])


def test_a_signal_answers_one_overflow_and_a_merge_the_ones_it_absorbed(rec, now):
    """Each overflow owes a signal of its own, standard or real-time: a send
    answers the oldest owed; a merge (a standard signal pending and blocked
    at the target) answers as many as it absorbed."""
    rec.signal_owed(7, 0, 40, 2)  # two overflows at one look, a signal each
    rec.signal_owed(7, 8, 10, 1)  # a thread's standard signal, owed three times
    rec.signal_owed(7, 8, 10, 2)
    for sig, tid in ((40, 0), (40, 0), (10, 8), (40, 0)):
        rec.signal_sent(7, tid, sig)
    rec.signal_merged(7, 8, 10, 2)  # the other two, with the one the thread blocks
    sent = [(f["tid"], f["signal"], f["flows"], f["lateness_ns"] is not None) for _, f in kinds(rec, "signal")]
    assert sent == [(0, 40, [1], True), (0, 40, [1], True), (8, 10, [2], True), (0, 40, [], False)]
    assert [(f["tid"], f["count"], f["flows"]) for _, f in kinds(rec, "merge")] == [(8, 2, [3])]
    trace = export.chrome_trace(rec)
    flows = [e for e in trace["traceEvents"] if e["ph"] in "sf"]
    assert [(e["ph"], e["id"], e["tid"]) for e in flows] == [
        ("s", 1, 7),
        ("s", 2, 8),
        ("s", 3, 8),
        ("f", 1, 7),
        ("f", 1, 7),
        ("f", 2, 8),
        ("f", 3, 8),
    ]
    (merged,) = [e for e in trace["traceEvents"] if e["name"] == "signal 10 merged"]
    assert merged["args"]["merged"] == 2


def test_a_thread_context_is_drawn_on_its_own_tracks(rec, now):
    host = FakeHost()
    unit = WorkloadProfile.named("unit")
    table = ThreadTable(MODELS["amd"], Fraction(1000), host, lambda pid: unit, host.start_of)
    host.spawn(10, 11)
    ctx = table.attach("perfctr", 10, 11, owner=1000)
    ctx.cpu.program(0, CYCLES)
    host.run(11, 2 * MS, 1 * MS)
    now.ns = 3 * MS
    table.catch_up(ctx)
    now.ns = 4 * MS
    table.detach("perfctr", 11)
    trace = export.chrome_trace(rec)
    rows = [(e["ph"], e["name"], e["tid"], e["ts"], e.get("dur")) for e in trace["traceEvents"] if e["ph"] != "M"]
    assert rows == [
        ("X", "CPU clocks not halted", 11 + 10_000_000, 0.0, 3000.0),
        ("C", "perfctr 10/11 counts", 11, 3000.0, None),
        ("X", "perfctr context", 11, 0.0, 4000.0),
    ]
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names == {11: "perfctr tid 11", 11 + 10_000_000: "perfctr tid 11 pmc0"}


def test_refusals_keep_only_the_busy_answers(rec):
    rec.refused("cpc", 5, 1000, 0x1234, 22)  # EINVAL: not about who holds the counters
    rec.refused("cpc", 5, 1000, 0x1234, 11)  # EAGAIN
    assert [f["errno"] for _, f in kinds(rec, "refused")] == [11]


def test_the_reservation_records_changes_of_holder_and_refusals(rec, now):
    cpus = CpuSet(1, "intel")
    assert cpus.reservation.reserve("pctr") is None
    assert cpus.reservation.reserve("pctr") is None  # the holder again: nothing moves
    assert cpus.reservation.reserve("cpc") == "pctr"
    cpus.reservation.release("cpc")  # not the holder: ignored
    now.ns = 5
    cpus.reservation.release("pctr")
    assert [(k, f) for _, _, k, f in rec.events] == [
        ("reserve", {"service": "pctr", "holder": None}),
        ("refuse", {"service": "cpc", "holder": "pctr"}),
        ("unreserve", {"service": "pctr"}),
    ]
    slices = [e for e in export.chrome_trace(rec)["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["ts"], e["dur"]) for e in slices] == [("pctr", 0.0, 0.005)]


def test_stretches_that_overlap_on_one_cpu_counter_take_a_second_lane(rec, now):
    """On the real clock two processes given one emulated CPU run at once."""
    ledger = Ledger()
    kernel = CounterKernel(CpuSet(1, "r10000", 200), ledger)
    a, b = multiplexed(kernel, ledger, 42), multiplexed(kernel, ledger, 43)
    for proc, at in ((a, 10 * MS), (b, 12 * MS)):
        ledger.run(proc.pid, 10 * MS)
        now.ns = at
        kernel.read(me(proc), proc)
    trace = export.chrome_trace(rec)
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    counter1 = [(names[e["tid"]], e["ts"], e["args"]["context"]) for e in trace["traceEvents"]
                if e["ph"] == "X" and e["args"].get("counter") == 1]  # fmt: skip
    assert counter1 == [("cpu0 counter1", 0.0, "irix 42"), ("cpu0 counter1 #2", 2000.0, "irix 43")]
