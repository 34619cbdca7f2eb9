"""How new CPU time is divided into user and system time (hwperfd.host.attribution)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hwperfd.host.attribution import SHARE_ONE, WINDOW_NS, Attribution, elapsed

TICK = 10_000_000
MS = 1_000_000

steps = st.lists(
    st.tuples(
        st.integers(0, 300 * MS),  # CPU time that passes
        st.integers(0, 30),  # user ticks stat adds
        st.integers(0, 30),  # system ticks stat adds
        st.sampled_from(["read", "look", "rebase"]),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(start=st.integers(0, 10**10), ustart=st.integers(0, 500), sstart=st.integers(0, 500), steps=steps)
def test_each_mode_only_grows_and_together_they_are_the_clock(start, ustart, sstart, steps):
    att = Attribution.start(start, (ustart, sstart), TICK)
    total, ticks = start, (ustart, sstart)
    before = att.at(total)
    assert sum(before) == start
    for passed, du, ds, action in steps:
        total += passed
        ticks = (ticks[0] + du, ticks[1] + ds)
        times = att.at(total)
        assert times[0] >= before[0] and times[1] >= before[1]
        assert sum(times) == total
        assert times[1] <= max(before[1], ticks[1] * TICK)  # never ahead of stat's system time
        if action == "look":
            att.look(ticks, TICK)
        elif action == "rebase":
            att.rebase()
        assert att.at(total) == times  # a new base changes nothing now
        before = times


@settings(max_examples=200, deadline=None)
@given(a=st.integers(0, 10**9), b=st.integers(0, 10**9), sstep=st.integers(1, 50))
def test_a_new_base_on_the_same_line_changes_no_later_reading(a, b, sstep):
    one = Attribution.start(0, (0, 0), TICK)
    one.at(3 * WINDOW_NS)
    one.look((300, sstep), TICK)
    two = Attribution(**{k: (list(v) if isinstance(v, list) else v) for k, v in vars(one).items()})
    base = sum(one.base)
    two.at(base + a)
    two.rebase()
    assert two.at(base + a + b) == one.at(base + a + b)


@given(total=st.integers(0, 10**13), share=st.integers(0, SHARE_ONE), room=st.integers(0, 10**12))
def test_the_page_arithmetic_is_the_attributions(total, share, room):
    att = Attribution(5 * MS, 2 * MS, (0, 0), share=share, room=room, last=(5 * MS, 2 * MS), marks=[(0, 0)])
    du, ds = elapsed(total, att.base, share, 0, room)
    assert att.at(total) == (5 * MS + du, 2 * MS + ds) or total < 7 * MS


def intervals(system_ticks_at, reads=20, interval=200 * MS):
    """A user-mode loop, older than a window, read every ``interval``: stat's
    stime steps a tick at the reads listed; returns each interval's (user,
    system) counted time."""
    total = 10 * WINDOW_NS
    att = Attribution.start(total, (total // TICK, 0), TICK)
    stime, out, before = 0, [], att.at(total)
    for i in range(reads):
        total += interval
        stime += system_ticks_at.count(i)
        att.at(total)
        att.look((total // TICK - stime, stime), TICK)  # (ticks as stat rounds them)
        now = att.at(total)
        out.append((now[0] - before[0], now[1] - before[1]))
        before = now
    return out


def test_a_lone_system_tick_costs_no_interval_more_than_one_percent():
    """A user-mode loop's few ms of system time show in stat as 10 ms steps
    seconds apart: each is spread, never taken out of one interval."""
    for at in ([10], [11], [15], [13, 28]):
        for user, system in intervals(at, reads=40):
            assert user >= 0.99 * 200 * MS, at
            assert user + system == 200 * MS


def test_a_process_in_the_kernel_half_the_time_is_split_at_its_rate():
    att = Attribution.start(0, (0, 0), TICK)
    total = 0
    for _ in range(100):  # 10 s, stat's ticks half system
        total += 100 * MS
        att.at(total)
        att.look((total // TICK // 2, total // TICK // 2), TICK)
    before = att.at(total)
    after = att.at(total + 100 * MS)
    assert abs((after[1] - before[1]) - 50 * MS) <= 5 * MS
    assert abs(before[1] - total // 2) <= 0.05 * total


def test_at_exit_the_kernels_split_is_reached():
    att = Attribution.start(0, (0, 0), TICK)
    att.at(50 * MS)
    att.look((5, 0), TICK)
    assert att.settle(80 * MS, (70 * MS, 10 * MS)) == (70 * MS, 10 * MS)
    assert att.settle(80 * MS, (40 * MS, 40 * MS)) == (70 * MS, 10 * MS)  # already settled


def test_an_exit_split_past_the_room_leaves_none_not_a_negative_room():
    """settle() may take more system time than stat had reported (the
    kernel's exit split); the room a state page shows after it is 0, which
    its unsigned field can hold (a negative one stopped the daemon)."""
    att = Attribution.start(0, (0, 0), TICK)
    att.at(30 * MS)
    att.look((3, 0), TICK)  # stat: no system time yet, no room
    att.settle(40 * MS, (30 * MS, 10 * MS))
    att.rebase()
    assert att.room == 0
    assert att.at(50 * MS) == (30 * MS + 10 * MS, 10 * MS)


def test_a_line_resumed_after_a_restart_reads_no_mode_below_what_was_counted():
    """The case a restart met under load (issue 28): the former daemon had
    counted as user time the system time stat had not yet reported
    (here 22 ms of it); stat's split of the whole history would put user
    time 22 ms below what a restored count rests on, and the count would
    stand still for those 22 ms.  Resumed, user time goes on from there."""
    former = Attribution.start(5 * MS, (0, 0), TICK)
    floor = former.at(100 * MS)  # what the former daemon counted to: all user
    assert floor == (100 * MS, 0)
    stat = (8, 2)  # now: stat reports 20 ms of system time (truncated to ticks)
    fresh = Attribution.start(110 * MS, stat, TICK)
    assert fresh.at(110 * MS)[0] < floor[0]  # what a line begun from stat alone gives
    resumed = Attribution.resume(110 * MS, stat, TICK, floor)
    times = resumed.at(110 * MS)
    assert times[0] >= floor[0] and times[1] >= floor[1] and sum(times) == 110 * MS
    resumed.look(stat, TICK)
    later = resumed.at(200 * MS)
    assert later[0] - times[0] >= 85 * MS  # the next 90 ms go on mostly to user time
    assert later[1] <= stat[1] * TICK  # never ahead of stat's system time


@settings(max_examples=300, deadline=None)
@given(
    user=st.integers(0, 10**10),
    system=st.integers(0, 10**10),
    since=st.integers(-(10**9), 10**10),
    sticks=st.integers(0, 3000),
    steps=steps,
)
def test_a_resumed_line_only_grows_from_the_floor_and_sums_to_the_clock(user, system, since, sticks, steps):
    total = max(0, user + system + since)
    ticks = (0, sticks)
    att = Attribution.resume(total, ticks, TICK, (user, system))
    before = att.at(total)
    assert before[0] >= user and before[1] >= system
    assert sum(before) == max(total, user + system)
    for passed, du, ds, action in steps:
        total += passed
        ticks = (ticks[0] + du, ticks[1] + ds)
        times = att.at(total)
        assert times[0] >= before[0] and times[1] >= before[1]
        assert sum(times) == max(total, user + system)
        if action == "look":
            att.look(ticks, TICK)
        elif action == "rebase":
            att.rebase()
        before = times
