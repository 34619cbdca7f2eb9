"""Per-thread counter contexts (hwperfd.counters.threads) on a fake host:
identity, time, inheritance, exec and exit, as events given as data."""

from __future__ import annotations

from fractions import Fraction
import time

import pytest

from hwperfd.counters.errors import CountersLimit
from hwperfd.counters.threads import (
    MIN_WAIT_NS,
    TIMED_GRACE_NS,
    TIMED_IDLE_GRID_NS,
    ProcessExeced,
    ProcessExited,
    ThreadContext,
    ThreadCreated,
    ThreadExited,
    ThreadTable,
    ALARMED_WAIT_NS,
    IDLE_NS,
    coalesce,
)
from hwperfd.cpu.core import X86_EN, X86_INT, X86_OS, X86_USR
from hwperfd.cpu.models import MODELS
from hwperfd.cpu.profiles import WorkloadProfile

MS = 1_000_000
CYCLES = 0x76 | X86_EN | X86_USR | X86_OS  # AMD: CPU clocks not halted, user and system
USER_CYCLES = 0x76 | X86_EN | X86_USR


class FakeHost:
    """Threads and their CPU times, moved by the test."""

    def __init__(self) -> None:
        self.starts: dict[tuple[int, int], int] = {}
        self.times: dict[int, tuple[int, int]] = {}
        self.finals: dict[int, tuple[int, int]] = {}  # what the kernel's exit accounting said
        self.forgotten: set[int] = set()  # threads the table told the clock to let go

    def spawn(self, pid: int, tid: int, start: int = 1) -> None:
        self.starts[(pid, tid)] = start
        self.times[tid] = (0, 0)

    def end(self, pid: int, tid: int) -> None:
        self.starts.pop((pid, tid), None)
        self.times.pop(tid, None)

    def run(self, tid: int, user: int, system: int = 0) -> None:
        u, s = self.times[tid]
        self.times[tid] = (u + user, s + system)

    def start_of(self, pid: int, tid: int) -> int | None:
        return self.starts.get((pid, tid))

    def thread_times(self, pid: int, tid: int) -> tuple[int, int] | None:
        return self.times.get(tid) if (pid, tid) in self.starts else self.finals.get(tid)

    def forget_thread(self, tid: int) -> None:
        self.forgotten.add(tid)

    def thread_born(self, tid: int, at_ns: int) -> None:
        pass


@pytest.fixture
def host() -> FakeHost:
    return FakeHost()


@pytest.fixture
def table(host: FakeHost) -> ThreadTable:
    unit = WorkloadProfile.named("unit")
    return ThreadTable(MODELS["amd"], Fraction(1000), host, lambda pid: unit, host.start_of, per_user=3)


def test_a_context_counts_only_its_own_threads_time_from_when_it_was_set_up(host, table):
    host.spawn(10, 10)
    host.spawn(10, 11)
    host.run(10, 5 * MS)
    ctx = table.attach("perfctr", 10, 10, owner=1000)
    ctx.cpu.program(0, CYCLES)
    host.run(10, 2 * MS, 1 * MS)
    host.run(11, 7 * MS)
    assert table.catch_up(ctx)
    assert ctx.cpu.rdpmc(0) == 3 * MS  # 1000 MHz: a cycle a nanosecond
    ctx.cpu.program(1, USER_CYCLES)
    host.run(10, MS, MS)
    table.catch_up(ctx)
    assert ctx.cpu.rdpmc(0) == 5 * MS and ctx.cpu.rdpmc(1) == MS


def test_stopped_time_passes_uncounted(host, table):
    host.spawn(10, 10)
    ctx = table.attach("perfctr", 10, 10, owner=0)
    ctx.cpu.program(0, CYCLES)
    table.set_running(ctx, False)
    host.run(10, 4 * MS)
    table.set_running(ctx, True)
    host.run(10, MS)
    table.catch_up(ctx)
    assert ctx.cpu.rdpmc(0) == MS and ctx.ran_ns == MS


def test_within_one_call_a_threads_identity_is_read_once_and_outside_at_every_look(host, table):
    host.spawn(10, 10)
    host.spawn(10, 11)
    reads: list[tuple[int, int]] = []
    table._start_of = lambda pid, tid: reads.append((pid, tid)) or host.start_of(pid, tid)
    ctx = table.attach("perfctr", 10, 11, owner=1000)
    reads.clear()
    table.begin_call()
    assert table.get("perfctr", 11) is ctx and table.get("perfctr", 11) is ctx and table.get("perfctr", 11) is ctx
    table.end_call()
    assert reads == [(10, 11)]
    table.get("perfctr", 11)
    table.get("perfctr", 11)
    assert len(reads) == 3
    host.end(10, 11)  # between calls a tid can go, and come again as another thread
    host.spawn(10, 11, start=2)
    table.begin_call()
    assert table.get("perfctr", 11) is None
    table.end_call()

def counted_10_ms_on_the_hosts_clock(host: FakeHost) -> tuple[ThreadTable, ThreadContext]:
    """A context on a real (host) clock that has counted 10 ms of cycles."""
    unit = WorkloadProfile.named("unit")
    table = ThreadTable(MODELS["amd"], Fraction(1000), host, lambda pid: unit, host.start_of, host_time=True)
    host.spawn(10, 10)
    ctx = table.attach("perfctr", 10, 10, owner=0)
    ctx.cpu.program(0, CYCLES)
    host.run(10, 10 * MS)
    table.catch_up(ctx)
    return table, ctx


def test_frozen_counters_restarted_at_the_threads_own_clock_count_the_rest_of_the_call(host):
    """A restart made at CPU time T (the thread's clock, told by the library)
    starts the counters at T, not where the daemon's catch-up finds the
    thread a round trip later: the frozen stretch ends at T."""
    table, ctx = counted_10_ms_on_the_hosts_clock(host)
    ctx.cpu.program(0, 0)  # stopped, as an overflow freezes them, at 10 ms
    host.run(10, 2 * MS)  # the handler: 2 ms until it calls the restart
    host.run(10, 0, 1 * MS)  # and the call's way into the daemon: 1 ms of system time
    table.catch_up(ctx, upto=12 * MS)
    assert ctx.cpu.rdpmc(0) == 10 * MS
    ctx.cpu.program(0, CYCLES)
    table.catch_up(ctx)
    assert ctx.cpu.rdpmc(0) == 11 * MS  # the call's 1 ms counted, the handler's 2 ms not


@pytest.mark.parametrize("upto", [0, 5 * MS, 10 * MS, 13 * MS, 10**18])
def test_a_restarts_clock_moves_nothing_outside_the_call(host, upto):
    """A false clock: before what was caught up it is ignored, past now it
    is now; the counters never count time twice or time the thread did not run."""
    table, ctx = counted_10_ms_on_the_hosts_clock(host)
    host.run(10, 2 * MS)
    table.catch_up(ctx, upto=upto)
    table.catch_up(ctx)
    assert ctx.cpu.rdpmc(0) == 12 * MS and sum(ctx.seen) == 12 * MS


def test_a_restarts_clock_is_ignored_on_the_manual_clock(host, table):
    host.spawn(10, 10)
    ctx = table.attach("perfctr", 10, 10, owner=0)
    host.run(10, 3 * MS)
    table.catch_up(ctx, upto=1 * MS)  # a real clock's reading means nothing here
    ctx.cpu.program(0, CYCLES)
    host.run(10, MS)
    table.catch_up(ctx)
    assert ctx.cpu.rdpmc(0) == MS


def test_a_set_up_stamped_before_the_daemon_saw_it_counts_from_its_stamp(host):
    """libperfctr's kept vperfctr: the thread stamped its control at 4 ms of
    its CPU clock, the daemon hears of it at 10 ms; rewound, the time since
    the stamp counts, never more than the thread ran (a stamp before 0 is 0)."""
    unit = WorkloadProfile.named("unit")
    table = ThreadTable(MODELS["amd"], Fraction(1000), host, lambda pid: unit, host.start_of, host_time=True)
    host.spawn(10, 10)
    host.run(10, 7 * MS, 3 * MS)
    ctx = table.attach("perfctr", 10, 10, owner=0)
    assert sum(ctx.seen) == 10 * MS
    table.rewind(ctx, 4 * MS)
    assert sum(ctx.seen) == 4 * MS and ctx.seen[0] <= 7 * MS and ctx.seen[1] <= 3 * MS
    ctx.cpu.program(0, CYCLES)
    table.catch_up(ctx)
    assert ctx.cpu.rdpmc(0) == 6 * MS
    table.rewind(ctx, 12 * MS)  # past the last look: nothing moves
    assert sum(ctx.seen) == 10 * MS
    table.rewind(ctx, -5)
    assert ctx.seen == (0, 0)


def test_a_stamp_means_nothing_on_the_manual_clock(host, table):
    host.spawn(10, 10)
    host.run(10, 5 * MS)
    ctx = table.attach("perfctr", 10, 10, owner=0)
    table.rewind(ctx, 1 * MS)
    assert sum(ctx.seen) == 5 * MS


def test_a_later_thread_with_the_same_tid_never_gets_the_context(host, table):
    host.spawn(10, 12, start=5)
    table.attach("cpc", 10, 12, owner=1000)
    host.end(10, 12)
    host.spawn(20, 12, start=9)  # the tid came round, in another process
    assert table.get("cpc", 12) is None
    assert table.owned_by(1000) == 0 and len(table) == 0


def test_attaching_to_a_thread_that_is_not_there_is_a_lookup_error(host, table):
    host.spawn(10, 10)
    with pytest.raises(LookupError):
        table.attach("cpc", 10, 11, owner=1000)
    with pytest.raises(LookupError):
        table.attach("cpc", 11, 10, owner=1000)  # tid 10 is not a thread of process 11


def test_one_user_holds_at_most_per_user_contexts_and_root_is_not_bound(host, table):
    for tid in range(10, 15):
        host.spawn(10, tid)
    for tid in range(10, 13):
        table.attach("cpc", 10, tid, owner=1000)
    with pytest.raises(CountersLimit):
        table.attach("perfctr", 10, 13, owner=1000)
    table.attach("cpc", 10, 10, owner=1000)  # replacing one's own context is not a new one
    table.attach("perfctr", 10, 13, owner=0)
    table.attach("perfctr", 10, 14, owner=0)
    table.detach("cpc", 11)
    table.attach("perfctr", 10, 11, owner=1000)
    assert table.owned_by(1000) == 3 and table.owned_by(0) == 2


def test_thread_exit_ends_its_contexts_after_the_service_saw_them(host, table):
    ended: list[ThreadContext] = []
    table.register("perfctr", on_exit=ended.append)
    host.spawn(10, 10)
    host.spawn(10, 11)
    table.attach("perfctr", 10, 10, owner=1000)
    ctx = table.attach("perfctr", 10, 11, owner=1000)
    assert table.apply([ThreadExited(10, 11)]) == 1
    assert ended == [ctx] and table.get("perfctr", 11) is None
    assert table.apply([ProcessExited(10)]) == 1 and len(table) == 0


def test_inheritance_copies_to_new_threads_only_when_the_service_says_so(host, table):
    table.register("cpc", inherit=lambda ctx: ("copy of", ctx.data) if ctx.data == "inherit" else None)
    host.spawn(10, 10)
    host.spawn(10, 11)
    host.spawn(10, 12)
    table.attach("cpc", 10, 10, owner=1000, data="inherit")
    table.attach("perfctr", 10, 10, owner=1000, data="no hook: no copy")
    assert table.apply([ThreadCreated(10, 11)]) == 1  # creator unknown: the process's inheriting context
    copy = table.get("cpc", 11)
    assert copy is not None and copy.data == ("copy of", "inherit") and copy.owner == 1000
    assert table.get("perfctr", 11) is None
    table.attach("cpc", 10, 10, owner=1000, data="plain")
    table.apply([ThreadCreated(10, 12, parent_tid=10)])  # the creator's own context does not inherit
    assert table.get("cpc", 12) is None


def test_inherited_copies_count_from_the_new_threads_start(host, table):
    table.register("cpc", inherit=lambda ctx: "copy")
    host.spawn(10, 10)
    table.attach("cpc", 10, 10, owner=1000)
    host.spawn(10, 11)
    host.run(11, 3 * MS)  # before the creation event is applied: still the new thread's own time
    table.apply([ThreadCreated(10, 11)])
    copy = table.get("cpc", 11)
    assert copy is not None
    copy.cpu.program(0, CYCLES)
    host.run(11, MS)
    table.catch_up(copy)
    assert copy.cpu.rdpmc(0) == MS


def test_exec_keeps_only_what_the_service_keeps(host, table):
    table.register("perfctr", on_exec=lambda ctx: ctx.data != "cloexec")
    host.spawn(10, 10)
    host.spawn(20, 20)
    table.attach("perfctr", 10, 10, owner=1000, data="keep")
    table.attach("perfctr", 20, 20, owner=1000, data="cloexec")
    table.attach("cpc", 10, 10, owner=1000)  # no hook: an exec ends it
    assert table.apply([ProcessExeced(10), ProcessExeced(20)]) == 2
    assert table.get("perfctr", 10) is not None
    assert table.get("perfctr", 20) is None and table.get("cpc", 10) is None


def test_an_exec_reported_after_the_new_images_own_set_up_leaves_it(host, table):
    """The connector's report of an exec can come after the new image has
    set up its counters (a daemon behind other users' fork storms): the
    exec ends what was set up before it, never what came after."""
    table.register("perfctr", on_exec=lambda ctx: False)  # CLOEXEC: every exec ends it
    host.spawn(10, 10)
    host.spawn(20, 20)
    before = table.attach("perfctr", 10, 10, owner=1000)
    after = table.attach("perfctr", 20, 20, owner=1000)
    assert table.apply([ProcessExeced(10, at_ns=before.attached_ns + 1)]) == 1
    assert table.apply([ProcessExeced(20, at_ns=after.attached_ns - 1)]) == 0
    assert table.get("perfctr", 10) is None
    assert table.get("perfctr", 20) is after


def test_an_exit_reported_late_of_a_pid_or_tid_taken_again_leaves_the_new_threads_contexts(host):
    """A busy machine wraps pid_max in minutes, and the report of a thread's
    or process's exit can come after the pid or tid has gone to a new
    process that set up its counters: the report ends only contexts whose
    thread has gone or begun its exit."""
    unit = WorkloadProfile.named("unit")
    table = ThreadTable(MODELS["amd"], Fraction(1000), host, lambda pid: unit, host.start_of, per_user=3,
                        running_start=host.start_of)  # fmt: skip
    table.register("perfctr")
    host.spawn(10, 10, start=5)
    host.spawn(10, 11, start=5)
    main, second = table.attach("perfctr", 10, 10, owner=1000), table.attach("perfctr", 10, 11, owner=1000)
    assert table.apply([ProcessExited(10), ThreadExited(10, 11)]) == 0  # the predecessors' exits
    assert table.get("perfctr", 10) is main and table.get("perfctr", 11) is second
    host.end(10, 11)
    assert table.apply([ThreadExited(10, 11)]) == 1
    host.end(10, 10)
    assert table.apply([ProcessExited(10)]) == 1
    assert table.get("perfctr", 10) is None and table.get("perfctr", 11) is None


def test_overflow_reaches_the_service_with_the_mask(host, table):
    seen: list[tuple[int, int]] = []
    table.register("perfctr", on_overflow=lambda ctx, mask: seen.append((ctx.tid, mask)))
    host.spawn(10, 10)
    ctx = table.attach("perfctr", 10, 10, owner=1000)
    ctx.cpu.program(1, CYCLES | X86_INT)
    ctx.cpu.write(1, -1000, reload=-1000)
    assert table.interrupting() == [ctx]
    host.run(10, 999)
    table.catch_up(ctx)
    assert seen == []
    host.run(10, 1)
    table.catch_up(ctx)
    assert seen == [(10, 0b10)] and ctx.cpu.pending(1)


def test_the_tick_waits_out_a_contexts_headroom_and_a_register_write_ends_the_wait(host, table):
    """1 000 MHz and one cycle a cycle: a counter 10^9 events from its
    overflow needs no look for a second of wall time; one 1 000 away needs
    one after a microsecond; writing the register makes the old wait void."""
    host.spawn(10, 10)
    far = table.attach("perfctr", 10, 10, owner=1000)
    far.cpu.program(0, CYCLES | X86_INT)
    far.cpu.write(0, -(10**9))
    assert table.interrupting(now=0) == [far]
    table.tick(far, now=0)
    assert table.interrupting(now=10_000_000) == []  # 10 ms later: still far
    assert table.interrupting(now=10**9) == [far]
    far.cpu.write(0, -1000)
    assert table.interrupting(now=10_000_000) == [far]
    table.tick(far, now=10_000_000)
    assert table.interrupting(now=10_000_000) == []
    # 1 us of headroom: looked at again after the shortest wait, not at once.
    assert table.next_due() == 10_000_000 + MIN_WAIT_NS
    assert table.interrupting(now=10_000_000 + MIN_WAIT_NS) == [far]
    far.cpu.program(0, CYCLES)  # no interrupt left: nothing is ever due
    assert table.next_due() is None and table.interrupting(now=1 << 62) == []


def test_a_thread_that_times_itself_is_told_its_cpu_time_left_and_the_tick_falls_back_a_grace_later(host):
    """The thread's own call (its library arms a timer on the answer): the
    CPU ns left before the nearest interrupting overflow at the fullest
    rate; the tick's look, the fallback, comes TIMED_GRACE_NS after the
    instant.  Pending, or nothing interrupting: None, and no wait."""
    unit = WorkloadProfile.named("unit")
    table = ThreadTable(MODELS["amd"], Fraction(1000), host, lambda pid: unit, host.start_of, host_time=True)
    host.spawn(10, 10)
    ctx = table.attach("perfctr", 10, 10, owner=1000)
    ctx.cpu.program(0, CYCLES | X86_INT)
    ctx.cpu.write(0, -2 * MS)  # 2 ms of CPU time at 1000 MHz
    host.run(10, MS // 2, MS // 2)
    table.catch_up(ctx)
    before = table.next_due()
    assert before is not None and before <= 0  # never looked at: due at once
    asked = time.monotonic_ns()
    assert table.left_ns(ctx) == MS and ctx.timed
    due = table.next_due()
    assert due is not None and asked <= due - MS - TIMED_GRACE_NS <= time.monotonic_ns()
    # The thread sleeps: each look that finds it has not run waits twice as long.
    # Its looks fall on a grid, to share the tick's wake-ups with other idle threads'.
    dues = []
    for look in range(3):
        table.tick(ctx, now=look)
        dues.append(table.next_due())
    grid = TIMED_IDLE_GRID_NS
    assert dues == [-(-(look + (MS + TIMED_GRACE_NS) * 2**look) // grid) * grid for look in range(3)]
    host.run(10, MS // 2)
    table.tick(ctx, now=0)
    assert table.next_due() == MS // 2 + TIMED_GRACE_NS  # it ran: back to the instant and the grace
    host.run(10, MS // 2)
    table.catch_up(ctx)
    assert ctx.cpu.pending(0) and table.left_ns(ctx) is None
    ctx.cpu.program(0, CYCLES)
    assert table.left_ns(ctx) is None and table.next_due() is None


def test_under_the_manual_clock_no_thread_is_told_to_time_itself(host, table):
    host.spawn(10, 10)
    ctx = table.attach("perfctr", 10, 10, owner=1000)
    ctx.cpu.program(0, CYCLES | X86_INT)
    ctx.cpu.write(0, -2 * MS)
    assert table.left_ns(ctx) is None and not ctx.timed


def test_a_gone_thread_is_swept_and_catch_up_says_so(host, table):
    host.spawn(10, 10)
    ctx = table.attach("cpc", 10, 10, owner=1000)
    host.end(10, 10)
    assert table.catch_up(ctx) is False
    assert table.sweep() == 1 and len(table) == 0


def test_a_threads_last_run_is_counted_at_its_exit_from_the_clocks_last_word(host, table):
    host.spawn(10, 11)
    ctx = table.attach("perfctr", 10, 11, owner=1000)
    ctx.cpu.program(0, CYCLES)
    host.run(11, 4 * MS)
    host.finals[11] = host.times[11]  # the exit record outlives the thread
    host.end(10, 11)
    table.apply([ThreadExited(10, 11)])
    assert ctx.cpu.rdpmc(0) == 4 * MS and len(table) == 0


def test_a_threads_last_run_counts_when_its_whole_process_ends_first(host, table):
    """The process's exit record may come before the thread's own exit event."""
    host.spawn(10, 11)
    ctx = table.attach("perfctr", 10, 11, owner=1000)
    ctx.cpu.program(0, CYCLES)
    host.run(11, 3 * MS)
    host.finals[11] = host.times[11]
    host.end(10, 11)
    table.apply([ProcessExited(10)])
    assert ctx.cpu.rdpmc(0) == 3 * MS and len(table) == 0
    assert host.forgotten == {11}  # and the clock lets the thread go


def test_a_refused_attach_leaves_the_threads_earlier_context_in_place(host, table):
    for tid in range(10, 14):
        host.spawn(10, tid)
    for tid in range(10, 13):
        table.attach("cpc", 10, tid, owner=1000)
    root = table.attach("cpc", 10, 13, owner=0)
    with pytest.raises(CountersLimit):
        table.attach("cpc", 10, 13, owner=1000)  # uid 1000 is at its limit: root's context stays
    assert table.get("cpc", 13) is root and table.owned_by(0) == 1 and table.owned_by(1000) == 3


def test_a_thread_created_and_ended_in_one_batch_costs_no_look(host, table):
    """A storm of short-lived threads in an inheriting process: their
    creations drop out of the batch, so no look finds a later thread with
    the tid; their ends stay, and still end what an earlier thread with
    that tid left."""
    table.register("cpc", inherit=lambda ctx: "copy")
    host.spawn(10, 10)
    table.attach("cpc", 10, 10, owner=1000)
    host.spawn(10, 12)
    table.attach("cpc", 10, 12, owner=1000)  # its exit was lost; tid 12 is another thread's now
    looks = []
    table._start_of = lambda pid, tid: looks.append(tid) or host.start_of(pid, tid)
    host.spawn(10, 11)  # a thread reusing tid 11 lives on: its creation is applied
    batch = [ThreadCreated(10, 11), ThreadExited(10, 11), ThreadCreated(10, 11), ThreadCreated(10, 12),
             ThreadExited(10, 12), ProcessExeced(99)]  # fmt: skip
    assert coalesce(batch) == [ThreadExited(10, 11), ThreadCreated(10, 11), ThreadExited(10, 12), ProcessExeced(99)]
    table.apply(coalesce(batch))
    assert looks == [11]  # the live thread's creation only
    assert table.get("cpc", 11) is not None and table.get("cpc", 12) is None
    assert table.get("cpc", 10) is not None


def test_the_tick_meets_only_the_contexts_due_among_many_and_a_write_to_one_brings_it_forward(host):
    """2 000 contexts, each a different headroom away: a look at time t finds
    exactly those whose headroom has passed, in no pass over the rest; a
    register write makes its context due at once; ended, stopped and
    no-longer-interrupting contexts are never due; looks again and again
    at one context leave the schedule no longer than a few entries a context."""
    unit = WorkloadProfile.named("unit")
    table = ThreadTable(MODELS["amd"], Fraction(1000), host, lambda pid: unit, host.start_of)
    contexts = []
    for tid in range(1, 2001):
        host.spawn(tid, tid)
        ctx = table.attach("perfctr", tid, tid, owner=0)
        ctx.cpu.program(0, CYCLES | X86_INT)
        ctx.cpu.write(0, -tid * MS)  # tid ms of CPU time at 1000 MHz and one cycle a cycle
        contexts.append(ctx)
    assert table.interrupting(now=0) == contexts  # never looked at: all due at once
    for ctx in contexts:
        table.tick(ctx, now=0)
    assert table.next_due() == MS and table.interrupting(now=MS - 1) == []
    assert table.interrupting(now=10 * MS) == contexts[:10]
    for ctx in contexts[:10]:
        table.tick(ctx, now=10 * MS)
    assert table.next_due() == 11 * MS
    contexts[1500].cpu.write(0, -MS)
    assert table.next_due() == 0 and table.interrupting(now=10 * MS) == [contexts[1500]]
    table.tick(contexts[1500], now=10 * MS)
    table.set_running(contexts[10], False)  # tid 11
    contexts[11].cpu.program(0, CYCLES)  # tid 12: no interrupt left
    table.detach("perfctr", 13)

    def due_at(now: int) -> set[int]:
        return {ctx.tid for ctx in table.interrupting(now=now)}

    # Due by 14 ms: tids 1-4 (looked at 10 ms), 1501 (at 10 ms, 1 ms left), 14; not 11, 12, 13.
    assert due_at(14 * MS) == {1, 2, 3, 4, 14, 1501}
    table.set_running(contexts[10], True)  # counting again: looked at at once
    assert due_at(14 * MS) == {1, 2, 3, 4, 11, 14, 1501}
    for _ in range(10_000):
        table.tick(contexts[1999], now=0)
    assert len(table._heap) <= 4 * len(table) + 64


def test_the_ticks_look_reads_no_thread_time_while_its_process_has_not_run(host):
    """With the process's CPU time at hand (one system call), a look at a
    context whose process has not run since the last look leaves the
    thread's /proc reads out, and still waits longer each time it is idle;
    once the process runs, the look counts the thread's time again."""
    unit = WorkloadProfile.named("unit")
    totals = {10: 0}
    reads: list[int] = []
    times = host.thread_times
    host.thread_times = lambda pid, tid: reads.append(tid) or times(pid, tid)  # type: ignore[method-assign]
    table = ThreadTable(MODELS["amd"], Fraction(1000), host, lambda pid: unit, host.start_of, host_time=True,
                        process_cpu_ns=totals.get)  # fmt: skip
    host.spawn(10, 10)
    ctx = table.attach("perfctr", 10, 10, owner=1000)
    ctx.cpu.program(0, CYCLES | X86_INT)
    ctx.cpu.write(0, -2 * MS)
    table.left_ns(ctx)
    table.tick(ctx, now=0)
    reads.clear()
    waits = []
    for _ in range(3):
        table.tick(ctx, now=0)
        waits.append(ctx.idle_wait)
    assert reads == [] and waits[0] < waits[1] < waits[2]
    host.run(10, MS)
    totals[10] = MS
    table.tick(ctx, now=0)
    assert reads == [10] and ctx.cpu.raw(0) == (-MS) % MODELS["amd"].modulus and ctx.idle_wait == 0


class FakeAlarms:
    """The host's CPU-clock alarms: what was armed, per pid, and per tid
    where threads can be timed (``precise``)."""

    def __init__(self, precise: bool = False) -> None:
        self.precise = precise
        self.armed: dict[int, int] = {}
        self.threads: dict[int, int] = {}

    def arm(self, pid: int, cpu_ns: int) -> bool:
        self.armed[pid] = cpu_ns
        return True

    def arm_thread(self, pid: int, tid: int, start: int, after_ns: int) -> bool:
        assert self.precise
        self.threads[tid] = after_ns
        return True


def interrupting_10_ms_away(
    host: FakeHost, process_cpu_ns, precise: bool = False
) -> tuple[ThreadTable, FakeAlarms, ThreadContext]:
    """A host-clock table with fake alarms, and thread 10's context 10 ms of
    CPU time from an interrupting overflow."""
    unit = WorkloadProfile.named("unit")
    table = ThreadTable(MODELS["amd"], Fraction(1000), host, lambda pid: unit, host.start_of, host_time=True,
                        process_cpu_ns=process_cpu_ns)  # fmt: skip
    alarms = FakeAlarms(precise)
    table.alarms = alarms
    host.spawn(10, 10)
    ctx = table.attach("perfctr", 10, 10, owner=1000)
    ctx.cpu.program(0, CYCLES | X86_INT)
    ctx.cpu.write(0, -10 * MS)
    return table, alarms, ctx


def test_an_idle_context_that_times_itself_waits_on_its_processs_cpu_clock_not_the_wall(host):
    """A context whose thread times itself (its library asked ``left_ns``),
    10 ms of CPU time from its overflow, whose thread has not run over
    looks IDLE_NS apart: its process's CPU-clock alarm is armed 10 ms of
    process CPU time on, and the wall clock looks only as a fallback
    (2 000 idle processes cost no looks); the alarm brings a look at once."""
    cpu = {10: 50 * MS}
    table, alarms, ctx = interrupting_10_ms_away(host, cpu.get)
    ctx.timed = True
    table.tick(ctx, now=0)  # it ran (its first look): the wall clock's headroom, a grace past
    assert alarms.armed == {} and table.next_due() == 10 * MS + TIMED_GRACE_NS
    table.tick(ctx, now=10 * MS)  # it did not run since: but only a moment (blocked in a call?)
    assert alarms.armed == {}
    table.tick(ctx, now=IDLE_NS)  # not run for IDLE_NS
    assert alarms.armed == {10: 60 * MS}
    assert table.next_due() == IDLE_NS + ALARMED_WAIT_NS
    assert table.interrupting(now=IDLE_NS + MS) == []
    assert table.alarmed([10]) == 1 and table.interrupting(now=IDLE_NS + MS) == [ctx]
    host.run(10, 4 * MS)
    cpu[10] += 4 * MS
    table.tick(ctx, now=IDLE_NS + MS)  # it ran: the wall clock again, 6 ms of headroom left
    assert table.next_due() == IDLE_NS + 7 * MS + TIMED_GRACE_NS and alarms.armed == {10: 60 * MS}
    assert not table.alarm_wanted(10)  # nothing waits on the alarm that rang


@pytest.mark.parametrize("timed", [False, True], ids=["daemon-only", "self-timed"])
def test_an_idle_context_waits_on_its_threads_cpu_clock_where_threads_can_be_timed(host, timed):
    """Where the host times a thread's own CPU clock on its instant (a
    task-clock event), every idle context waits on its thread's alarm, set
    at its headroom, whoever finds its overflows; the ring brings a look,
    and once it runs the wall clock looks again."""
    cpu = {10: 50 * MS}
    table, alarms, ctx = interrupting_10_ms_away(host, cpu.get, precise=True)
    ctx.timed = timed
    table.tick(ctx, now=0)
    table.tick(ctx, now=10 * MS)
    assert alarms.threads == {}
    table.tick(ctx, now=IDLE_NS)
    assert alarms.threads == {10: 10 * MS} and alarms.armed == {}
    assert table.next_due() == IDLE_NS + ALARMED_WAIT_NS and table.alarm_wanted(10)
    assert table.alarmed([10]) == 1 and table.interrupting(now=IDLE_NS + MS) == [ctx]
    host.run(10, 4 * MS)
    cpu[10] += 4 * MS
    table.tick(ctx, now=IDLE_NS + MS)
    assert table.next_due() == IDLE_NS + 7 * MS + (TIMED_GRACE_NS if timed else 0)
    assert not table.alarm_wanted(10)


def test_an_idle_context_that_does_not_time_itself_keeps_the_wall_clock_where_only_processes_can_be_timed(host):
    """A CPU-clock timer on another process can ring tens of ms of CPU late:
    where only that can be armed, a thread whose overflows only the daemon
    finds is looked at by the wall clock, idle or not."""
    table, alarms, ctx = interrupting_10_ms_away(host, {10: 0}.get)
    table.tick(ctx, now=0)
    table.tick(ctx, now=IDLE_NS)
    assert alarms.armed == {} and table.next_due() == IDLE_NS + 10 * MS


def test_without_a_process_cpu_reading_an_idle_context_keeps_the_wall_clock(host):
    table, alarms, ctx = interrupting_10_ms_away(host, None)
    ctx.timed = True
    table.tick(ctx, now=0)
    table.tick(ctx, now=IDLE_NS)
    assert alarms.armed == {}


def test_a_restarts_own_call_counts_only_where_no_overflow_can_fall_in_it(host):
    """After a restart, the call's own time counts (it is under the
    headroom), but a period shorter than that time is passed over uncounted:
    it would overflow inside every restart, and the program never run."""
    table, ctx = counted_10_ms_on_the_hosts_clock(host)
    ctx.cpu.program(1, CYCLES | X86_INT)
    ctx.cpu.write(1, -5 * MS)
    host.run(10, 0, 1 * MS)  # the restart call's way in
    table.catch_up_within(ctx)
    assert ctx.cpu.rdpmc(0) == 11 * MS and not ctx.cpu.pending(1)
    ctx.cpu.write(1, -25)  # perfctr's examples/signal: 25 events
    host.run(10, 0, 1 * MS)
    table.catch_up_within(ctx)
    assert ctx.cpu.rdpmc(0) == 11 * MS and not ctx.cpu.pending(1) and sum(ctx.seen) == 12 * MS
