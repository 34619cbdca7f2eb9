"""The process life cycle on a fake host and a manual time source: forks
before exits, folding reaped children, identity (pid + start), privilege
gained, and recovery after lost events - all exact."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from hwperfd.counters.errors import InvalidRequest, NoSuchProcess, NotPermitted
from hwperfd.counters.kernel import ALARMED_WAIT_NS, IDLE_NS, INT_MAX, MAX_DESCENDANTS, Caller, CounterKernel, Restore, Signal
from hwperfd.counters.lifecycle import Execed, Exited, Forked, Lifecycle, Lost
from hwperfd.counters.request import CounterRequest
from hwperfd.cpu.pmu import CpuSet
from structs import HWPERF_CNTEN_U, spec_word
from tests.counters.test_threads import FakeAlarms

MS = 1_000_000
CYCLES_PER_MS = 200_000
USER = 1000


@dataclass
class Proc:
    pid: int
    ppid: int
    start: int
    uid: int = USER
    gid: int = USER
    euid: int = USER
    suid: int = USER
    egid: int = USER
    sgid: int = USER
    dumpable: bool = True
    comm: str = "proc"
    state: str = "S"
    waiting: bool = False
    processor: int = 0
    children_ns: tuple[int, int] = (0, 0)
    threads: int = 1  # tasks not yet released, a zombie main thread's too

    @property
    def pgid(self) -> int:
        return 1

    @property
    def zombie(self) -> bool:
        return self.state == "Z"

    @property
    def group_dead(self) -> bool:
        return self.zombie and self.threads <= 1

    in_exit: bool = False  # PF_EXITING: in do_exit, not yet a zombie

    @property
    def exiting(self) -> bool:
        return self.state in ("Z", "X") or self.in_exit


@dataclass
class FakeHost:
    """Linux as the life cycle sees it: a table of processes by pid."""

    procs: dict[int, Proc] = field(default_factory=dict)
    times: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    clock: float = 0.0
    next_start: int = 1
    stuck: set[int] = field(default_factory=set)  # pids whose /proc files wait on them (EAGAIN)

    def spawn(self, pid: int, ppid: int, **kw) -> Proc:
        proc = Proc(pid, ppid, self.next_start, **kw)
        self.next_start += 1
        self.procs[pid] = proc
        return proc

    def run(self, pid: int, user_ms: int) -> None:
        key = (pid, self.procs[pid].start)
        u, s = self.times.get(key, (0, 0))
        self.times[key] = (u + user_ms * MS, s)

    def die(self, pid: int) -> None:
        self.procs[pid].state = "Z"

    def reap(self, pid: int) -> None:
        """The parent waits for it: Linux adds its time (and its children's)."""
        child = self.procs.pop(pid)
        parent = self.procs.get(child.ppid)
        if parent is not None:
            u, s = self.times.get((pid, child.start), (0, 0))
            cu, cs = child.children_ns
            parent.children_ns = (parent.children_ns[0] + u + cu, parent.children_ns[1] + s + cs)

    # Host protocol
    def _answer(self, pid: int) -> Proc | None:
        if pid in self.stuck:
            raise BlockingIOError(11, f"process {pid} is stuck in the kernel")
        return self.procs.get(pid)

    def read_process(self, pid: int) -> Proc | None:
        return self._answer(pid)

    def read_start(self, pid: int) -> int | None:
        proc = self._answer(pid)
        return proc.start if proc else None

    def boot_ns(self, monotonic_ns: int) -> int:
        return monotonic_ns  # starts here are on the events' clock

    def waiting_for_child(self, pid: int) -> bool:
        proc = self.procs.get(pid)
        return bool(proc and proc.waiting)

    def read_children_ns(self, pid: int) -> tuple[int, int] | None:
        proc = self._answer(pid)
        return proc.children_ns if proc else None

    def children(self, pid: int) -> list[int]:
        return [p.pid for p in self.procs.values() if p.ppid == pid and not p.zombie]

    # TimeSource and Clock protocols
    def process_times(self, pid: int) -> tuple[int, int] | None:
        proc = self.procs.get(pid)
        if proc is None:
            return None
        return self.times.get((pid, proc.start), (0, 0))

    def cpu_times(self, cpu: int) -> tuple[int, int]:
        return (0, 0)

    def forget(self, pid: int) -> None:
        pass

    def born(self, pid: int, at_ns: int) -> None:
        pass

    def exited(self, pid: int, user_ns: int, system_ns: int) -> None:
        pass


@pytest.fixture
def host() -> FakeHost:
    return FakeHost()


@pytest.fixture
def signals() -> list[Signal]:
    return []


@pytest.fixture
def gone() -> list[int]:
    return []


@pytest.fixture
def kernel(host, signals, gone) -> CounterKernel:
    return CounterKernel(CpuSet(2, "r10000", 200), host, signal=signals.append, gone=gone.append)


@pytest.fixture
def life(kernel, host) -> Lifecycle:
    return Lifecycle(kernel, host, host, host_time=True)


def caller(proc: Proc, uid: int | None = None) -> Caller:
    return Caller(proc.pid, proc.uid if uid is None else uid, proc.gid, 1)


def cycles(threshold: int = 0, signal: int = 0) -> CounterRequest:
    return CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_U, ie=bool(threshold))}, {0: threshold} if threshold else None, signal)


def counting_parent(kernel: CounterKernel, host: FakeHost) -> Proc:
    """Process 100, counting cycles in user mode: the parent most tests fork from."""
    parent = host.spawn(100, 1)
    kernel.enable(caller(parent), parent, cycles())
    return parent

def test_a_child_forked_while_counting_folds_into_its_waiting_parent(kernel, life, host):
    parent = counting_parent(kernel, host)
    host.spawn(101, 100)
    life.apply([Forked(100, 101)])
    host.run(101, 3)
    host.die(101)
    parent.waiting = True
    life.apply([Exited(101, 100)])
    host.reap(101)
    assert kernel.read(caller(parent), parent)[1][0] == 3 * CYCLES_PER_MS
    assert [d[0] for d in kernel.descendants(100)] == [101]


def test_a_child_reaped_later_folds_when_its_parent_next_asks(kernel, life, host):
    parent = counting_parent(kernel, host)
    host.spawn(101, 100)
    life.apply([Forked(100, 101)])
    host.run(101, 2)
    host.die(101)
    life.apply([Exited(101, 100)])  # parent not waiting: a zombie
    assert kernel.read(caller(parent), parent)[1][0] == 0
    assert life.zombies() == 1
    host.reap(101)
    assert life.settle(100)
    assert kernel.read(caller(parent), parent)[1][0] == 2 * CYCLES_PER_MS
    assert life.zombies() == 0


def test_settling_one_parent_looks_only_at_its_own_zombies(kernel, life, host):
    a, b = host.spawn(100, 1), host.spawn(200, 1)
    for p in (a, b):
        kernel.enable(caller(p), p, cycles())
    for child, parent in ((101, 100), (201, 200)):
        host.spawn(child, parent)
        life.apply([Forked(parent, child)])
        host.die(child)
        life.apply([Exited(child, parent)])
        host.reap(child)
    life.settle(100)
    assert life.zombies() == 1  # 201 waits for a request on 200, or the periodic settle
    life.settle()
    assert life.zombies() == 0


def test_exit_heard_after_the_pid_was_reused_reaps_the_old_process_only(kernel, life, host):
    parent = counting_parent(kernel, host)
    host.spawn(101, 100)
    life.apply([Forked(100, 101)])
    host.run(101, 1)
    kernel.catch_up([101])
    host.die(101)
    host.reap(101)
    newcomer = host.spawn(101, 1, uid=0, euid=0, suid=0, gid=0, egid=0, sgid=0)
    life.apply([Exited(101, 100)])
    assert not kernel.is_tracked(101)
    assert kernel.read(caller(parent), parent)[1][0] == CYCLES_PER_MS
    with pytest.raises(NoSuchProcess):  # the newcomer never used the counters
        kernel.read(Caller(0, 0, 0, 0), newcomer)


def test_an_earlier_processs_exit_heard_after_its_pid_came_round_leaves_the_counting_process_alone(
    kernel, life, host
):
    """An uncounted process's exit queued behind a storm reaches the daemon
    after its pid was given to a process that counts: the one at the pid is
    alive and not exiting (no PF_EXITING), so the exit is not its own."""
    counting = host.spawn(400, 1)
    kernel.enable(caller(counting), counting, cycles())
    host.run(400, 2)
    life.apply([Exited(400, 377, "storm", (5 * MS, 0))])
    assert kernel.is_tracked(400) and not kernel.has_exited(400)
    host.run(400, 1)
    assert kernel.read(caller(counting), counting)[1][0] == 3 * CYCLES_PER_MS
    host.die(400)  # its own exit still ends it
    life.apply([Exited(400, 1)])
    assert kernel.has_exited(400)


def test_an_earlier_processs_fork_heard_after_its_pid_came_round_leaves_the_counting_process_alone(
    kernel, life, host
):
    """A storm child's fork queued behind the storm names the pid a counting
    process has since: what that process set up stays (it read ESRCH)."""
    counting = host.spawn(400, 1)
    kernel.enable(caller(counting), counting, cycles())
    host.run(400, 2)
    life.apply([Forked(377, 400)])
    host.run(400, 1)
    assert kernel.read(caller(counting), counting)[1][0] == 3 * CYCLES_PER_MS


def test_a_record_left_under_a_reused_pid_never_reaches_the_new_process(kernel, life, host, gone):
    """The old process's end was never heard (events lost): the first request
    naming the new process finds another start and lets the old record go."""
    victim_pid = 300
    old = host.spawn(victim_pid, 1)
    kernel.enable(caller(old), old, cycles(threshold=1, signal=10))
    host.reap(victim_pid)
    root = host.spawn(victim_pid, 1, uid=0, euid=0, suid=0, gid=0, egid=0, sgid=0)
    host.run(victim_pid, 5)
    with pytest.raises(NoSuchProcess):  # the new process never used the counters
        kernel.control(Caller(0, 0, 0, 0), root)
    assert gone == [victim_pid]
    assert kernel.enable(Caller(0, 0, 0, 0), root, cycles()) == 1  # a fresh first generation, not EBUSY


def test_overflow_signals_name_the_process_and_who_armed_them(kernel, host, signals):
    proc = host.spawn(100, 1)
    kernel.enable(caller(proc), proc, cycles(threshold=1000, signal=10))
    host.run(100, 1)
    kernel.catch_up([100])
    assert signals and signals[0].pid == 100 and signals[0].start == proc.start
    assert signals[0].owner == (USER, USER) and signals[0].signal == 10
    assert sum(s.count for s in signals) == CYCLES_PER_MS // 1000


def test_a_setuid_exec_ends_what_the_user_set_up(kernel, life, host, gone):
    proc = host.spawn(100, 1)
    kernel.enable(caller(proc), proc, cycles(threshold=1, signal=9))
    proc.euid, proc.suid, proc.dumpable = 0, 0, False  # exec of a setuid-root program
    life.apply([Execed(100)])
    assert not kernel.is_tracked(100) and gone == [100]


def test_an_exec_that_keeps_the_users_credentials_keeps_the_counters(kernel, life, host):
    proc = host.spawn(100, 1)
    kernel.enable(caller(proc), proc, cycles())
    life.apply([Execed(100)])
    assert kernel.is_counting(100)


def test_what_root_set_up_survives_a_setuid_exec(kernel, life, host):
    proc = host.spawn(100, 1)
    kernel.enable(Caller(1, 0, 0, 0), proc, cycles())
    proc.euid, proc.suid, proc.dumpable = 0, 0, False
    life.apply([Execed(100)])
    assert kernel.is_counting(100)


def test_another_user_or_a_setuid_program_is_out_of_reach(kernel, host):
    me = host.spawn(100, 1)
    other = host.spawn(101, 1, uid=2000, euid=2000, suid=2000, gid=2000, egid=2000, sgid=2000)
    with pytest.raises(NotPermitted):
        kernel.enable(caller(me), other, cycles())
    # A setuid-root child that kept the user's real uid: /proc/<pid>/io refuses the user.
    setuid = host.spawn(102, 100, euid=0, suid=0, dumpable=False)
    with pytest.raises(NotPermitted):
        kernel.enable(caller(me), setuid, cycles())
    kernel.enable(Caller(102, USER, USER, 1), setuid, cycles())  # itself: allowed


def test_lost_events_rescan_takes_in_children_and_lets_go_of_the_dead(kernel, life, host):
    parent = counting_parent(kernel, host)
    host.spawn(101, 100)  # fork lost
    doomed = host.spawn(102, 100)
    life.apply([Forked(100, 102)])
    host.run(102, 1)
    kernel.catch_up([102])
    host.reap(102)  # exit lost too; its parent reaped it
    life.apply([Lost()])
    assert kernel.is_counting(101)
    assert not kernel.is_tracked(doomed.pid)
    assert kernel.read(caller(parent), parent)[1][0] == CYCLES_PER_MS
    assert life.rescans == 1


def test_a_release_answered_ahead_of_the_fork_leaves_the_child_its_inherited_counters(kernel, life, host):
    """perfex's order: enable, spawn, release.  The release answered while
    the fork (and a grandchild's) still waited behind another user's storm:
    taken in from Linux's children first, the command counts from its
    first instruction, and the forks heard later change nothing."""
    before = host.spawn(99, 1)
    parent = counting_parent(kernel, host)
    before.ppid = 100  # forked before its parent counted (a fork heard then): left as it was
    child = host.spawn(101, 100)
    host.spawn(102, 101)
    host.spawn(103, 1)  # not the parent's: left alone
    assert life.take_in_children([100], since_ns=child.start) == [101, 102]
    kernel.release(caller(parent), parent)
    host.run(101, 2)
    host.die(101)
    life.apply([Forked(100, 101), Forked(101, 102), Exited(101, 100)])
    assert kernel.read(caller(parent), child)[1][0] == 2 * CYCLES_PER_MS
    assert kernel.is_counting(102) and not kernel.is_tracked(103) and not kernel.is_tracked(99)
    assert life.take_in_children([100]) == []  # released: nothing to inherit


def test_after_a_loss_children_whose_ends_were_lost_still_count(kernel, life, host):
    """Both the fork and the exit of 103 were lost, and 102's exit too: what
    Linux says the parent's waited-for children used is counted for it."""
    parent = host.spawn(100, 1)
    host.spawn(99, 100)
    host.run(99, 7)
    host.reap(99)  # before counting began: part of the base, not counted
    kernel.enable(caller(parent), parent, cycles())
    host.spawn(102, 100)
    life.apply([Forked(100, 102)])
    host.run(102, 1)
    kernel.catch_up([102])  # counted up to 1 ms while we heard of it
    host.run(102, 2)
    host.reap(102)
    host.spawn(103, 100)
    host.run(103, 4)
    host.reap(103)
    life.apply([Lost()])
    assert kernel.read(caller(parent), parent)[1][0] == (1 + 2 + 4) * CYCLES_PER_MS
    assert life.credited_ns == 6 * MS
    life.apply([Exited(103, 100), Exited(102, 100), Lost()])  # late records, another loss: no double count
    assert kernel.read(caller(parent), parent)[1][0] == 7 * CYCLES_PER_MS


def test_zombies_reaped_by_a_parent_that_went_before_we_looked_still_fold(kernel, life, host):
    """A worker's child exits while the worker is busy (a zombie), the worker
    reaps it and exits, and its own parent reaps the worker, all before the
    daemon looks again: the grandchild's counts still reach the top."""
    top = host.spawn(100, 1)
    kernel.enable(caller(top), top, cycles())
    host.spawn(101, 100)
    host.spawn(102, 101)
    life.apply([Forked(100, 101), Forked(101, 102)])
    host.run(102, 3)
    host.die(102)
    life.apply([Exited(102, 101)])  # its parent is not waiting: a zombie for now
    host.reap(102)
    host.run(101, 1)
    host.die(101)
    host.reap(101)
    life.apply([Exited(101, 100, "proc", (1 * MS, 0))])
    life.settle(100)
    assert kernel.read(caller(top), top)[1][0] == 4 * CYCLES_PER_MS


def test_a_child_linux_counted_before_its_exit_was_heard_is_counted_once(kernel, life, host):
    """After a loss the parent's reads take in Linux's totals; a child reaped
    before its exit record arrived is in them, and its record, when it comes,
    replaces the part of that credit it stands for rather than adding to it."""
    parent = counting_parent(kernel, host)
    life.apply([Lost()])
    host.spawn(102, 100)
    life.apply([Forked(100, 102)])
    host.run(102, 3)
    host.reap(102)  # reaped; its exit record still queued
    life.settle(100)
    assert kernel.read(caller(parent), parent)[1][0] == 3 * CYCLES_PER_MS
    life.apply([Exited(102, 100, "proc", (3 * MS, 0))])
    life.settle(100)
    assert kernel.read(caller(parent), parent)[1][0] == 3 * CYCLES_PER_MS
    assert kernel.descendants(100)[0][:2] == (0, "unseen") and kernel.descendants(100)[0][2][0] == 0


def test_a_fork_heard_after_linux_counted_the_child_adds_nothing_twice(kernel, life, host):
    parent = counting_parent(kernel, host)
    life.apply([Lost()])
    host.spawn(103, 100)
    host.run(103, 4)
    host.reap(103)
    life.settle(100)  # Linux's total: 4 ms
    host.spawn(104, 100)
    life.apply([Forked(100, 104)])
    host.run(104, 2)
    # The late fork and exit of 103, then 104's: only 104 is new.
    life.apply([Forked(100, 103), Exited(103, 100, "proc", (4 * MS, 0))])
    host.reap(104)
    life.apply([Exited(104, 100, "proc", (2 * MS, 0))])
    life.settle(100)
    assert kernel.read(caller(parent), parent)[1][0] == 6 * CYCLES_PER_MS


def test_a_fold_never_takes_a_parents_counts_backwards(kernel, life, host):
    """The credit counted 5 ms for a child whose record, late, brings 3 ms:
    the parent keeps what it showed."""
    parent = counting_parent(kernel, host)
    life.apply([Lost()])
    host.spawn(102, 100)
    life.apply([Forked(100, 102)])
    host.run(102, 5)
    host.reap(102)
    life.settle(100)
    shown = kernel.read(caller(parent), parent)[1][0]
    life.apply([Exited(102, 100, "proc", (3 * MS, 0))])
    assert kernel.read(caller(parent), parent)[1][0] == shown == 5 * CYCLES_PER_MS


def test_under_the_manual_clock_linux_totals_are_not_counted(kernel, host):
    life = Lifecycle(kernel, host, host, host_time=False)
    parent = counting_parent(kernel, host)
    host.spawn(103, 100)
    host.run(103, 4)
    host.reap(103)
    life.apply([Lost()])
    assert kernel.read(caller(parent), parent)[1][0] == 0


def test_exits_of_many_zombies_stay_linear(kernel, life, host):
    """Each exit looks at its own children only: 3 000 zombies of one
    parent take 3 000 steps, not 3 000 x 3 000."""
    counting_parent(kernel, host)
    looks = 0
    real_read_start = host.read_start

    def counting_read_start(pid: int) -> int | None:
        nonlocal looks
        looks += 1
        return real_read_start(pid)

    host.read_start = counting_read_start  # type: ignore[method-assign]
    for child in range(1000, 4000):
        host.spawn(child, 100)
        life.apply([Forked(100, child)])
        host.die(child)
        life.apply([Exited(child, 100)])
    assert life.zombies() == 3000
    assert looks < 10_000


def test_descendants_listed_are_bounded_and_still_add_up(kernel, life, host):
    parent = host.spawn(100, 1)
    parent.waiting = True
    kernel.enable(caller(parent), parent, cycles())
    total = MAX_DESCENDANTS + 50
    for child in range(1000, 1000 + total):
        host.spawn(child, 100)
        life.apply([Forked(100, child)])
        host.run(child, 1)
        host.die(child)
        life.apply([Exited(child, 100)])
        host.reap(child)
    listed = kernel.descendants(100)
    assert len(listed) == MAX_DESCENDANTS
    assert listed[-1][:2] == (0, "others")
    assert sum(counts[0] for _, _, counts in listed) == total * CYCLES_PER_MS
    assert kernel.read(caller(parent), parent)[1][0] == total * CYCLES_PER_MS


def test_a_generation_that_would_overflow_is_einval_and_changes_nothing(kernel, host):
    proc = host.spawn(100, 1)
    kernel.enable(caller(proc), proc, cycles(), Restore(INT_MAX, (0,) * 32))
    with pytest.raises(InvalidRequest):
        kernel.set_control(caller(proc), proc, cycles(threshold=5))
    assert kernel.control(caller(proc), proc)[0] == INT_MAX
    with pytest.raises(InvalidRequest):
        kernel.enable(caller(proc), host.spawn(101, 1), cycles(), Restore(INT_MAX + 1, (0,) * 32))
    assert not kernel.is_tracked(101)


def test_a_profile_goes_with_its_process(kernel, life, host):
    from hwperfd.cpu.profiles import WorkloadProfile

    host.spawn(100, 1)
    kernel.set_profile(100, WorkloadProfile.parse("memory"))
    life.apply([Exited(100, 1)])
    assert not kernel.has_profile(100)


def test_children_named_for_saving_that_never_counted_leave_the_set_when_they_exit(kernel, life, host):
    parent = host.spawn(100, 1)
    for child in range(200, 300):
        host.spawn(child, 100)
        kernel.save_child_counts(caller(parent), parent, child)
    assert len(kernel.saving(100)) == 100
    for child in range(200, 300):
        host.die(child)
        life.apply([Exited(child, 100)])
        host.reap(child)
    assert kernel.saving(100) == frozenset()


def test_a_bounded_sweep_takes_up_where_the_last_stopped_and_lets_go_of_every_unheard_end(kernel, life, host):
    procs = [host.spawn(pid, 1) for pid in (100, 101, 102, 103, 104)]
    for proc in procs:
        kernel.enable(caller(proc), proc, cycles())
    for pid in (101, 103, 104):
        host.procs.pop(pid)  # ended, and no event said so
    assert life.sweep(limit=2)[0] == 2  # 100, 101
    assert not kernel.is_tracked(101) and kernel.is_tracked(103)
    assert life.sweep(limit=2)[0] == 2  # 102, 103
    assert not kernel.is_tracked(103) and kernel.is_tracked(104)
    life.sweep(limit=2)  # 104, then round again
    assert [pid for pid in (100, 101, 102, 103, 104) if kernel.is_tracked(pid)] == [100, 102]
    checked, let_go = life.sweep()  # unbounded: everything kept
    assert checked == len(kernel.known()) and let_go == 0


def test_the_clock_looks_at_a_signalling_process_when_its_nearest_overflow_can_come(kernel, host, signals):
    """200 MHz, one cycle a cycle, threshold 1 000 000 cycles = 5 ms of CPU
    time: the next look is due 5 ms / host CPUs after one; an overflow moves
    the due instant a whole period on; a slot without hwp_ie is never due."""
    kernel.host_cpus = 2
    proc = host.spawn(100, 1)
    kernel.enable(caller(proc), proc, cycles(threshold=1_000_000, signal=10))
    assert kernel.signalling(now=0) == [100]  # a new request is due at once
    kernel.tick([100], now=0)
    assert kernel.next_due(0) == 5 * MS // 2 and kernel.signalling(now=5 * MS // 2 - 1) == []
    host.run(100, 6)  # past the overflow: 1 ms into the next period
    kernel.tick(kernel.signalling(now=5 * MS // 2), now=5 * MS // 2)
    assert sum(s.count for s in signals) == 1
    assert kernel.next_due(0) == 5 * MS // 2 + 4 * MS // 2
    quiet = host.spawn(101, 1)
    kernel.enable(caller(quiet), quiet, CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_U)}, {0: 1000}, 10))
    kernel.tick([101], now=0)
    assert kernel.signalling(now=1 << 60) == [100]  # 101 counts, but raises nothing: no look


def test_a_process_that_times_its_own_overflows_is_looked_at_past_its_instant_and_less_while_idle(
    kernel, host, signals
):
    """HWPERFD_PIOCOVFLNS (overflow_left): 5 ms of CPU time left, told in
    the process's clock; the tick then waits 1 ms past the instant, and
    while the process does not run each look doubles the wait up to 10 s; once
    it runs again the tick looks as for any process.  On the manual clock
    no instant is told."""
    kernel.host_cpus = 2
    proc = host.spawn(100, 1)
    kernel.enable(caller(proc), proc, cycles(threshold=1_000_000, signal=10))
    assert kernel.overflow_left(proc, now=0)[0] is None  # not the host's clock
    kernel.host_time = True
    host.run(100, 1)
    left, sig, thread, at = kernel.overflow_left(proc, now=0)
    assert (left, sig, thread, at) == (4 * MS, 10, False, 1 * MS)
    assert kernel.next_due(0) == 5 * MS and kernel.signalling(now=5 * MS - 1) == []
    waits = []
    for _ in range(14):
        due = kernel.next_due(0)
        assert kernel.signalling(now=due) == [100]
        kernel.tick([100], now=due)
        waits.append(kernel.next_due(0) - due)
    assert waits[:3] == [5 * MS, 10 * MS, 20 * MS] and waits[-1] == 10_000 * MS, waits
    due = kernel.next_due(0)
    host.run(100, 1)  # it ran: looked at as any process
    kernel.tick([100], now=due)
    assert kernel.next_due(0) == due + 3 * MS // 2 and not signals


def test_a_chain_of_zombies_deeper_than_the_stack_is_reaped(kernel, life, host):
    """A fork chain whose links each exit unwaited leaves zombies of zombies;
    once all are gone, reaping them walks the chain without recursion (3 000
    deep ended the daemon with RecursionError)."""
    top = host.spawn(100, 1)
    kernel.enable(caller(top), top, cycles())
    chain = range(101, 3101)
    for pid in chain:
        host.spawn(pid, pid - 1)
        life.apply([Forked(pid - 1, pid)])
    for pid in chain:  # each exits before its child: a zombie whose child becomes one too
        host.run(pid, 1)
        host.die(pid)
        life.apply([Exited(pid, pid - 1)])
    for pid in chain:
        host.procs.pop(pid)  # init reaped them all
    life.settle()
    assert life.zombies() == 0


def test_a_process_stuck_where_its_proc_files_wait_is_kept_and_the_sweep_goes_on(kernel, life, host):
    """A read of a process stuck in execve() answers EAGAIN (host.procread):
    the sweep keeps that process and checks the rest, where it once failed
    whole (and was restarted, to fail again, while the process stayed stuck)."""
    procs = [host.spawn(pid, 1) for pid in (100, 101, 102)]
    for proc in procs:
        kernel.enable(caller(proc), proc, cycles())
    host.procs.pop(102)  # ended, and no event said so
    reads = host.read_start

    def stuck(pid: int) -> int | None:
        if pid == 101:
            raise BlockingIOError(11, "process 101 is stuck in the kernel")
        return reads(pid)

    host.read_start = stuck
    assert life.sweep() == (3, 1)
    assert kernel.is_tracked(101) and not kernel.is_tracked(102)


def test_an_exit_record_that_comes_before_the_rest_of_the_exit_stops_the_counts_at_the_zombie(kernel, life, host):
    """taskstats' record is made before do_exit frees the memory and closes
    the files, which wait4 counts: a child read as a zombie has all of it."""
    parent = counting_parent(kernel, host)
    child = host.spawn(101, 100)
    life.apply([Forked(100, 101)])
    host.run(101, 5)
    child.in_exit = True
    life.apply([Exited(101, 100, "proc", (5 * MS, 0))])  # the record, while it still runs its exit
    assert not kernel.has_exited(101)
    assert life.has_zombies(100)  # the parent's next request looks
    host.run(101, 1)  # the rest of its exit
    host.die(101)
    life.apply([Exited(101, 100)])  # the connector's exit event, sent once it is a zombie
    assert kernel.has_exited(101)
    assert kernel.read(caller(child), child)[1][0] == 6 * CYCLES_PER_MS
    host.reap(101)
    assert life.settle(100)
    assert kernel.read(caller(parent), parent)[1][0] == 6 * CYCLES_PER_MS


def test_a_main_thread_that_exits_first_leaves_its_process_counting_until_the_last_thread_has_gone(
    kernel, life, host
):
    """pthread_exit in main, or the first thread out of an exit_group: the
    main thread is a zombie and the connector reports its exit while another
    thread runs on; the process ends, and its counts stop, with the last."""
    parent = counting_parent(kernel, host)
    child = host.spawn(101, 100)
    life.apply([Forked(100, 101)])
    host.run(101, 5)
    child.state, child.threads = "Z", 2
    life.apply([Exited(101, 100)])  # the connector's exit event of the main thread
    assert not kernel.has_exited(101) and kernel.is_counting(101)
    assert life.unsettled() == 1  # the periodic settle looks at it again
    host.run(101, 3)  # the other thread's time
    child.threads = 1  # it has gone too
    assert life.settle(100)
    assert kernel.has_exited(101)
    assert kernel.read(caller(child), child)[1][0] == 8 * CYCLES_PER_MS


def test_a_child_reaped_before_its_exit_was_applied_folds_with_its_record(kernel, life, host):
    """The parent returned from wait(2) before the connector told the end:
    its request folds the child with the record's times."""
    parent = counting_parent(kernel, host)
    host.spawn(101, 100).in_exit = True
    life.apply([Forked(100, 101)])
    host.run(101, 5)
    life.apply([Exited(101, 100, "proc", (5 * MS, 0))])
    host.die(101)
    host.reap(101)
    host.spawn(101, 1)  # the pid is another process's already
    assert life.settle(100)
    assert kernel.read(caller(parent), parent)[1][0] == 5 * CYCLES_PER_MS
    assert not life.has_zombies(100)


def test_a_child_reaped_before_it_was_seen_a_zombie_is_counted_to_wait4s_total(kernel, life, host):
    """Its record comes before the rest of its exit (freeing its memory,
    closing its files), which wait4 counts: folded from the record, the
    parent's count would miss it (600 children of a counted fork storm came
    5-11% short of getrusage), so the parent's read reconciles with Linux's
    total of its waited-for children."""
    parent = counting_parent(kernel, host)
    host.spawn(101, 100).in_exit = True
    life.apply([Forked(100, 101)])
    host.run(101, 5)
    life.apply([Exited(101, 100, "proc", (5 * MS, 0))])
    host.run(101, 1)  # the exit path after the record
    host.die(101)
    host.reap(101)
    assert life.settle(100)
    assert kernel.read(caller(parent), parent)[1][0] == 6 * CYCLES_PER_MS
    life.settle(100)  # a second look credits nothing more
    assert kernel.read(caller(parent), parent)[1][0] == 6 * CYCLES_PER_MS


def test_a_child_still_in_its_exit_at_its_record_folds_before_its_parent_exits(kernel, life, host):
    grandparent = host.spawn(100, 1)
    kernel.enable(caller(grandparent), grandparent, cycles())
    host.spawn(101, 100)
    life.apply([Forked(100, 101)])
    host.spawn(102, 101).in_exit = True
    life.apply([Forked(101, 102)])
    host.run(102, 4)
    life.apply([Exited(102, 101, "proc", (4 * MS, 0))])  # still in its exit
    host.die(102)
    host.reap(102)  # its parent waited for it, then exited itself
    host.run(101, 1)
    host.die(101)
    life.apply([Exited(101, 100, "proc", (1 * MS, 0))])
    host.reap(101)
    life.settle(100)
    assert kernel.read(caller(grandparent), grandparent)[1][0] == 5 * CYCLES_PER_MS


def test_a_child_reaped_before_its_exec_was_heard_is_listed_by_the_name_its_exit_record_gives(kernel, life, host):
    """``sh -c 'seq | sort'``: the fork is heard while the child is still
    the shell, its exec only once it is gone; perfex -mp lists it by what
    it ran (the exit record's name), not as a second "sh"."""
    parent = host.spawn(100, 1)
    parent.waiting = True
    kernel.enable(caller(parent), parent, cycles())
    host.spawn(101, 100, comm="sh")
    life.apply([Forked(100, 101)])
    host.run(101, 3)
    host.die(101)
    host.reap(101)
    life.apply([Execed(101), Exited(101, 100, "seq", (3 * MS, 0))])
    assert [(pid, comm) for pid, comm, _ in kernel.descendants(100)] == [(101, "seq")]
    assert kernel.descendants(100)[0][2][0] == 3 * CYCLES_PER_MS


def test_a_process_the_pid_came_round_to_before_the_childs_end_was_applied_gets_counters_of_its_own(kernel, life, host):
    """A fork heard once the child had gone: the record made for it keeps
    the child's counts for its exit, and a later process at the pid (it
    started after the fork) neither finds the counters busy nor counts on
    from the child's counts; the child itself, had it still been there,
    would have been taken for the record's."""
    counting_parent(kernel, host)
    fork_ns = 1_000_000_000
    life.apply([Forked(100, 101, at_ns=fork_ns)])  # 101 gone already: nothing to read
    host.next_start = fork_ns + 5_000_000_000  # seconds later, the pid comes round
    newcomer = host.spawn(101, 1)
    host.run(101, 7)
    assert kernel.enable(caller(newcomer), newcomer, cycles()) == 1
    host.run(101, 3)
    assert kernel.read(caller(newcomer), newcomer) == (1, (3 * CYCLES_PER_MS,) + (0,) * 31)


def test_a_child_whose_fork_was_heard_after_its_parent_went_is_still_taken_for_its_record(kernel, life, host):
    counting_parent(kernel, host)
    host.next_start = 1_000_000_000
    child = host.spawn(101, 1)  # reparented: its parent is init now
    life.apply([Forked(100, 101, at_ns=1_000_000_000)])
    host.run(101, 4)
    assert kernel.read(caller(child), child)[1][0] == 4 * CYCLES_PER_MS


def test_proc_files_that_stall_under_load_hold_the_events_up_not_the_daemon(kernel, life, host):
    """A /proc read of a process in its exit may wait on a lock the exit
    holds (EAGAIN from hwperfd.host.procread): the event that needed it is
    taken up again once the process answers, and nothing raises into the
    event loop (a parent's stall there restarted it, losing events)."""
    parent = counting_parent(kernel, host)
    host.spawn(101, 100)
    life.apply([Forked(100, 101)])
    host.run(101, 5)
    host.die(101)
    host.stuck = {101}
    assert not life.apply([Exited(101, 100, "proc", (5 * MS, 0))])  # held: its files do not answer
    host.stuck = set()
    life.apply([])
    assert life.settle(100) or life.has_zombies(100)
    host.reap(101)
    host.stuck = {100}  # the parent, asked whether it is alive as its child is folded
    life.settle()
    host.stuck = set()
    life.settle(100)
    assert kernel.read(caller(parent), parent)[1][0] == 5 * CYCLES_PER_MS


def test_an_exit_whose_last_clock_read_stalls_is_taken_up_again(kernel, life, host, monkeypatch):
    """The clock's last look at a zombie reads its stat, which may wait on
    its exit's lock under load: the exit waits for the next look instead of
    raising into the event loop."""
    parent = counting_parent(kernel, host)
    host.spawn(101, 100)
    life.apply([Forked(100, 101)])
    host.run(101, 5)
    host.die(101)
    real_exit = kernel.exit

    def stalled(*args, **kwargs):
        raise BlockingIOError(11, "process 101 is stuck in the kernel")

    monkeypatch.setattr(kernel, "exit", stalled)
    assert not life.apply([Exited(101, 100, "proc", (5 * MS, 0))])
    monkeypatch.setattr(kernel, "exit", real_exit)
    host.reap(101)
    life.settle(100)
    assert kernel.read(caller(parent), parent)[1][0] == 5 * CYCLES_PER_MS


def test_an_idle_process_that_times_itself_waits_on_its_cpu_clocks_alarm_not_the_wall(kernel, host, signals):
    """Its library times its overflows (overflow_left), it is 5 ms of CPU
    time from one and has not run over looks IDLE_NS apart: its CPU-clock
    alarm is armed 5 ms of its CPU time on, and the wall clock looks only
    as a fallback; the ring brings a look at once, and once it runs the
    wall clock looks again.  A process that does not time itself keeps the
    wall clock (a CPU-clock timer on another process can ring late)."""
    kernel.host_cpus = 2
    kernel.host_time = True
    alarms = kernel.alarms = FakeAlarms()
    untimed, proc = host.spawn(101, 1), host.spawn(100, 1)
    host.run(100, 3)
    for p in (untimed, proc):
        kernel.enable(caller(p), p, cycles(threshold=1_000_000, signal=10))
    assert kernel.overflow_left(proc, now=0)[0] == 5 * MS
    kernel.tick([100, 101], now=0)
    assert alarms.armed == {}
    kernel.tick([100, 101], now=IDLE_NS)  # neither ran
    assert alarms.armed == {100: 3 * MS + 5 * MS}
    assert kernel.signalling(now=IDLE_NS + 5 * MS) == [101]  # the other still by the wall clock
    assert kernel.alarmed([100]) == 1 and 100 in kernel.signalling(now=IDLE_NS)
    host.run(100, 1)
    kernel.tick([100], now=IDLE_NS)
    assert kernel.next_due(0) == IDLE_NS + 4 * MS // 2 and not signals
    assert not kernel.alarm_wanted(100)  # it rang, and none is armed since


def test_where_cpu_clocks_ring_on_time_an_idle_process_the_daemon_alone_looks_at_waits_on_its_alarm(
    kernel, host, signals
):
    """Where the host's alarms ring on their instant (task-clock events on
    the process's threads), a process that does not time itself waits on
    its alarm too once idle, not on the wall clock (2 000 such idle
    processes would cost most of a core)."""
    kernel.host_cpus = 2
    kernel.host_time = True
    alarms = kernel.alarms = FakeAlarms(precise=True)
    untimed = host.spawn(101, 1)
    host.run(101, 3)
    kernel.enable(caller(untimed), untimed, cycles(threshold=1_000_000, signal=10))
    kernel.tick([101], now=0)
    assert alarms.armed == {}
    kernel.tick([101], now=IDLE_NS)
    assert alarms.armed == {101: 3 * MS + 5 * MS}
    assert kernel.signalling(now=IDLE_NS + 5 * MS) == []
    assert kernel.alarmed([101]) == 1 and kernel.signalling(now=IDLE_NS) == [101]


class _CountingRecords(dict):
    """The kernel's records, counting the lookups a wake makes."""

    looks = 0

    def get(self, key, default=None):
        self.looks += 1
        return super().get(key, default)


def test_a_wake_of_the_tick_looks_at_what_is_due_not_at_every_armed_process(kernel, host, signals):
    """A thousand processes armed and idle, each waiting out a long headroom,
    and one with a 1 ms period: each of the busy one's wakes (signalling, the
    look, the next due) reads a handful of records, not a thousand."""
    kernel.host_cpus = 2
    for pid in range(1000, 2000):
        proc = host.spawn(pid, 1)
        kernel.enable(caller(proc), proc, cycles(threshold=1_000_000_000, signal=10))  # 5 s of CPU time
    busy = host.spawn(100, 1)
    kernel.enable(caller(busy), busy, cycles(threshold=200_000, signal=10))  # 1 ms
    kernel.tick(kernel.signalling(now=0), now=0)
    records = kernel._procs = _CountingRecords(kernel._procs)
    for wake in range(1, 21):
        now = kernel.next_due(0)
        assert now is not None and now < wake * MS
        host.run(100, 1)
        before = records.looks
        kernel.tick(kernel.signalling(now=now), now=now)
        kernel.next_due(now)
        assert records.looks - before < 10, records.looks - before
    assert sum(s.count for s in signals) >= 10  # the busy one's overflows came
    assert len(kernel.signalling(now=10**12)) == 1001  # every one is still armed


def test_suspended_signalling_processes_cost_a_wake_nothing_until_continued(kernel, host, signals):
    """HWPERF_PROF_CTR_SUSP on a thousand processes armed for signals: the
    tick's wakes for a busy one read a handful of records, not a thousand
    suspended ones; HWPERF_PROF_CTR_CONT makes one due again at once."""
    kernel.host_cpus = 2
    procs = [host.spawn(pid, 1) for pid in range(1000, 2000)]
    for proc in procs:
        kernel.enable(caller(proc), proc, cycles(threshold=200_000, signal=10))
        kernel.suspend(caller(proc), proc, True)
    busy = host.spawn(100, 1)
    kernel.enable(caller(busy), busy, cycles(threshold=200_000, signal=10))
    kernel.tick(kernel.signalling(now=0), now=0)
    assert kernel.next_due(0) is not None
    records = kernel._procs = _CountingRecords(kernel._procs)
    for _ in range(5):
        now = kernel.next_due(0)
        host.run(100, 1)
        before = records.looks
        assert kernel.signalling(now=now) == [100]
        kernel.tick([100], now=now)
        kernel.next_due(now)
        assert records.looks - before < 10, records.looks - before
    kernel.suspend(caller(procs[0]), procs[0], False)
    assert 1000 in kernel.signalling(now=now)
