"""The tick's schedule of looks: what is due is found without going through
everything armed, and a look that does not re-arm a pid finds it again."""

from __future__ import annotations

from hwperfd.counters.dues import DueTimes


def test_what_is_due_comes_out_in_order_and_stays_until_armed_again():
    dues = DueTimes()
    for pid, due in ((1, 30), (2, 10), (3, 20)):
        dues.set(pid, due)
    assert dues.ready(5) == []
    assert dues.ready(20) == [2, 3]
    assert dues.ready(25) == [2, 3]  # not re-armed: still due
    dues.set(2, 40)
    assert dues.ready(30) == [3, 1]
    assert dues.soonest(lambda pid: False) == 20


def test_a_pid_armed_anew_or_gone_leaves_no_stale_look_behind():
    dues = DueTimes()
    dues.set(1, 10)
    dues.set(1, 50)  # re-armed later before its look
    dues.set(2, 20)
    dues.discard(2)
    assert dues.ready(30) == []
    assert dues.soonest(lambda pid: False) == 50 and 2 not in dues and len(dues) == 1


def test_a_skipped_pid_is_parked_until_unparked_with_the_due_it_had():
    dues = DueTimes()
    dues.set(1, 10)
    dues.set(2, 20)
    assert dues.soonest(lambda pid: pid == 1) == 20  # 1 suspended
    assert dues.ready(30) == [2] and dues.soonest(lambda pid: False) == 20  # parked: no wake looks at it
    dues.unpark(1)  # continued
    assert dues.soonest(lambda pid: False) == 10
    assert dues.ready(30) == [2, 1]


def test_a_due_candidate_found_skipped_is_parked_too():
    dues = DueTimes()
    dues.set(1, 10)
    assert dues.ready(10) == [1]
    assert dues.soonest(lambda pid: True) is None
    assert dues.ready(10) == [] and 1 in dues
    dues.set(1, 5)  # armed anew
    assert dues.ready(10) == [1]


def test_rearming_one_pid_forever_keeps_the_heap_bounded():
    dues = DueTimes()
    for step in range(100_000):
        dues.set(7, step)
    assert len(dues._heap) <= 2 * len(dues) + 64
    assert dues.ready(99_999) == [7]
