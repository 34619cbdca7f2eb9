"""The IRIX counter virtualization under a manual time source: exact counts."""

from fractions import Fraction

import pytest

from hwperfd.counters.errors import CountersBusy, InvalidRequest, NoSuchProcess, NotInUse, NotPermitted
from hwperfd.counters.kernel import Caller, CounterKernel, Restore, State
from hwperfd.counters.request import CounterRequest
from hwperfd.cpu.pmu import CpuSet
from hwperfd.cpu.profiles import WorkloadProfile
from structs import HWPERF_CNTEN_K, HWPERF_CNTEN_U, spec_word

MS = 1_000_000


class Ledger:
    """A time source that is a plain table."""

    def __init__(self, cpus=2):
        self.procs = {}
        self.threads = {}  # (pid, tid) -> times
        self.cpus = [(0, 0)] * cpus

    def process_times(self, pid):
        return self.procs.get(pid)

    def thread_times(self, pid, tid):
        return self.threads.get((pid, tid))

    def run_thread(self, pid, tid, user_ns, system_ns=0):
        """Thread ``tid`` of ``pid`` ran: so did its process."""
        u, s = self.threads.get((pid, tid), (0, 0))
        self.threads[(pid, tid)] = (u + user_ns, s + system_ns)
        self.run(pid, user_ns, system_ns)

    def cpu_times(self, cpu):
        return self.cpus[cpu]

    def run(self, pid, user_ns, system_ns=0):
        u, s = self.procs.get(pid, (0, 0))
        self.procs[pid] = (u + user_ns, s + system_ns)


class Proc:
    def __init__(self, pid, uid=1000, pgid=None, thread_of=0):
        self.pid, self.uid, self.pgid, self.processor = pid, uid, pgid or pid, 0
        self.thread_of = thread_of


@pytest.fixture
def ledger():
    return Ledger()


@pytest.fixture
def kernel(ledger):
    # 200 MHz: 1 ms of CPU time is exactly 200_000 cycles.
    return CounterKernel(CpuSet(2, "r10000", 200), ledger)


def me(proc, uid=None):
    return Caller(proc.pid, proc.uid if uid is None else uid, 0, proc.pgid)


def user(event0, event1=None):
    specs = {0: spec_word(event0, HWPERF_CNTEN_U)}
    if event1 is not None:
        specs[16] = spec_word(event1, HWPERF_CNTEN_U)
    return CounterRequest.build(specs)


def test_cycles_follow_user_time_at_the_clock_rate(kernel, ledger):
    p = Proc(10)
    ledger.run(10, 0)
    gen = kernel.enable(me(p), p, user(0, 0))
    ledger.run(10, 5 * MS, 3 * MS)
    assert gen > 0
    generation, counts = kernel.read(me(p), p)
    assert generation == gen
    assert counts[0] == counts[16] == 1_000_000  # user time only


def test_a_threads_own_counters_count_its_time_and_go_with_it(kernel, ledger):
    """A thread's own record (its file opened by the thread itself) counts
    the thread's CPU time alone under generations of its own; the process's
    record counts every thread; the thread's end frees its record."""
    main, worker = Proc(40), Proc(41, pgid=40, thread_of=40)
    ledger.run(40, 0)
    ledger.run_thread(40, 41, 0)
    assert kernel.enable(me(main), main, user(0)) == 1
    assert kernel.enable(me(main), worker, user(0)) == 1
    assert kernel.thread_processes() == frozenset({40})
    ledger.run_thread(40, 41, 3 * MS)
    ledger.run(40, 2 * MS)  # the main thread
    assert kernel.read(me(main), worker) == (1, (600_000,) + (0,) * 31)
    assert kernel.read(me(main), main)[1][0] == 1_000_000
    assert kernel.set_control(me(main), worker, user(0)) == 3
    assert kernel.read(me(main), main)[0] == 1
    assert kernel.thread_gone(41) and not kernel.thread_gone(41)
    assert kernel.thread_processes() == frozenset()
    with pytest.raises(NoSuchProcess):
        kernel.read(me(main), worker)
    assert not kernel.thread_gone(40)  # a process's main thread is the process
    assert kernel.read(me(main), main)[1][0] == 1_000_000


def test_profile_rates_derive_other_events(kernel, ledger):
    p = Proc(11)
    ledger.run(11, 0)
    kernel.enable(me(p), p, user(15, 9))  # graduated instructions, dcache misses (counter 1 ev 9 = event 25)
    ledger.run(11, 10 * MS)
    _, counts = kernel.read(me(p), p)
    assert counts[0] == 2_000_000 * Fraction("0.8")
    assert counts[16] == 2_000_000 * Fraction("0.01")


def test_multiplexed_slots_take_turns_by_tick(kernel, ledger):
    p = Proc(12)
    ledger.run(12, 0)
    request = CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_U), 1: spec_word(0, HWPERF_CNTEN_U)})
    kernel.enable(me(p), p, request)
    ledger.run(12, 35 * MS)  # ticks: slot0, slot1, slot0, half of slot1
    _, counts = kernel.read(me(p), p)
    assert counts[0] == 20 * 200_000 and counts[1] == 15 * 200_000
    ledger.run(12, 5 * MS)
    ledger.run(12, 20 * MS)
    _, counts = kernel.read(me(p), p)
    assert counts[0] + counts[1] == 60 * 200_000
    assert counts[0] == counts[1]


def test_fractional_events_are_never_lost_across_reads(kernel, ledger):
    p = Proc(13)
    ledger.run(13, 0)
    kernel.enable(me(p), p, user(0, 9))  # event 25 at 0.01/cycle
    for _ in range(1000):
        ledger.run(13, 1234)  # 246.8 cycles each: never a whole dcache miss per step
        kernel.read(me(p), p)
    _, counts = kernel.read(me(p), p)
    assert counts[0] == 246_800
    assert counts[16] == 2468


def test_non_root_kernel_mode_is_eperm_and_changes_nothing(kernel, ledger):
    p = Proc(14)
    ledger.run(14, 0)
    with pytest.raises(NotPermitted):
        kernel.enable(me(p), p, CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_U | HWPERF_CNTEN_K)}))
    with pytest.raises(NoSuchProcess):  # still never used
        kernel.control(me(p), p)


def test_a_process_that_never_used_its_counters_is_esrch_to_reads_and_changes(kernel, ledger):
    """IRIX 6.5's piocgetevctrs, piocgetevctrl and piocsetevctrl answer ESRCH
    while the process has no counter structure; EINVAL is for released ones."""
    p = Proc(18)
    ledger.run(18, 0)
    for call in (kernel.read, kernel.control):
        with pytest.raises(NoSuchProcess):
            call(me(p), p)
    with pytest.raises(NoSuchProcess):
        kernel.set_control(me(p), p, user(0))
    assert kernel.view(18) is None


@pytest.mark.parametrize(
    "request_",
    [
        CounterRequest.build({0: spec_word(16, HWPERF_CNTEN_U)}),  # R10000 counter 0 has events 0-15
        CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_U)}, {0: -1}),
        CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_U)}, signal=33),
        CounterRequest.build({}),
    ],
)
def test_improper_requests_are_einval(kernel, ledger, request_):
    p = Proc(15)
    ledger.run(15, 0)
    with pytest.raises(InvalidRequest):
        kernel.enable(me(p), p, request_)


def test_setevctrl_restarts_every_slot_at_zero_two_generations_up(kernel, ledger):
    """IRIX's hwperf_change_control disables (generation + 1) and enables
    again (+ 1): every slot restarts, the unchanged one too."""
    p = Proc(16)
    ledger.run(16, 0)
    gen = kernel.enable(me(p), p, user(0, 0))
    ledger.run(16, MS)
    new = kernel.set_control(me(p), p, user(0, 1))
    assert new == gen + 2
    assert kernel.read(me(p), p) == (new, (0,) * 32)
    ledger.run(16, MS)
    generation, counts = kernel.read(me(p), p)
    assert generation == new
    assert counts[0] == 200_000  # slot 0 kept its control word and still started again
    assert counts[16] == 160_000  # event 17, graduated instructions at 0.8 per cycle, since the change

def test_release_stops_counting_but_counts_stay_readable(kernel, ledger):
    p = Proc(17)
    ledger.run(17, 0)
    kernel.enable(me(p), p, user(0))
    ledger.run(17, MS)
    kernel.release(me(p), p)
    ledger.run(17, MS)
    _, counts = kernel.read(me(p), p)
    assert counts[0] == 200_000
    with pytest.raises(NotInUse):
        kernel.control(me(p), p)


def test_other_process_group_is_eperm(kernel, ledger):
    a, b = Proc(20, pgid=1), Proc(21, pgid=2)
    ledger.run(21, 0)
    with pytest.raises(NotPermitted):
        kernel.enable(me(a), b, user(0))


def test_system_mode_displaces_user_mode_and_bumps_generation(kernel, ledger):
    p, root = Proc(30), Proc(1, uid=0)
    ledger.run(30, 0)
    ledger.run(1, 0)
    gen = kernel.enable(me(p), p, user(0))
    kernel.enable_system(me(root), CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_K)}))
    generation, _ = kernel.read(me(p), p)
    assert generation == gen + 1
    with pytest.raises(CountersBusy):
        kernel.enable(me(p), p, user(0))
    ledger.cpus = [(0, 2 * MS), (0, 3 * MS)]
    _, counts = kernel.read_system()
    # kernel (non-EXL) share of system time: 90%
    assert counts[0] == 5 * 200_000 * 9 // 10
    assert kernel.read_cpu(5) is None


def test_root_kernel_mode_counts_the_processes_own_kernel_time(kernel, ledger):
    """IRIX 6.5's PIOCENEVCTRS and PIOCSETEVCTRL enable the process's own
    counters (HWPERF_PROC): K counts its kernel time, not the machine's, and
    other processes keep counting beside it."""
    root, p = Proc(1, uid=0), Proc(31)
    ledger.run(1, 0)
    ledger.run(31, 0)
    other = kernel.enable(me(p), p, user(0))
    gen = kernel.enable(me(root), root, CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_K)}))
    assert not kernel.system_mode
    ledger.cpus = [(0, 10 * MS), (0, 10 * MS)]  # the machine's time: not this process's business
    ledger.run(1, 3 * MS, 10 * MS)
    ledger.run(31, MS)
    assert kernel.read(me(root), root) == (gen, (10 * 200_000 * 9 // 10,) + (0,) * 31)  # EXL takes 1/10
    assert kernel.read(me(p), p) == (other, (200_000,) + (0,) * 31)
    new = kernel.set_control(me(root), root, CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_K | HWPERF_CNTEN_U)}))
    assert new == gen + 2 and not kernel.system_mode
    ledger.run(1, 2 * MS, 10 * MS)
    assert kernel.read(me(root), root) == (new, ((2 + 9) * 200_000,) + (0,) * 31)
    with pytest.raises(NotPermitted):  # the same change by an unprivileged caller
        kernel.set_control(me(p), p, CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_K)}))
    assert kernel.read(me(p), p)[0] == other


def test_enable_ex_continues_from_saved_counts_and_generation(kernel, ledger):
    p = Proc(40)
    ledger.run(40, 0)
    saved = tuple(range(100, 132))
    assert kernel.enable(me(p), p, user(0), Restore(7, saved)) == 7
    ledger.run(40, MS)
    generation, counts = kernel.read(me(p), p)
    assert generation == 7
    assert counts[0] == saved[0] + 200_000  # 1 ms at 200 MHz, on top of the saved count
    assert counts[1:] == saved[1:]
    assert kernel.set_control(me(p), p, user(0)) == 9


def test_enable_ex_with_nothing_saved_is_plain_enable(kernel, ledger):
    p = Proc(41)
    ledger.run(41, 0)
    assert kernel.enable(me(p), p, user(0), Restore(0, (0,) * 32)) == 1
    assert kernel.read(me(p), p) == (1, (0,) * 32)


@pytest.mark.parametrize(
    "restore, request_",
    [
        (Restore(-1, (0,) * 32), user(0)),
        (Restore(0, (0,) * 31), user(0)),
        (Restore(0, (0,) * 31), CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_K)})),
    ],
)
def test_enable_ex_refuses_bad_saved_state_and_changes_nothing(kernel, ledger, restore, request_):
    root = Proc(42, uid=0)
    ledger.run(42, 0)
    with pytest.raises(InvalidRequest):
        kernel.enable(me(root), root, request_, restore)
    assert not kernel.system_mode
    assert kernel.view(42) is None


def test_enable_ex_may_not_reuse_a_generation(kernel, ledger):
    p = Proc(43)
    ledger.run(43, 0)
    assert kernel.enable(me(p), p, user(0), Restore(5, (0,) * 32)) == 5
    kernel.release(me(p), p)
    with pytest.raises(InvalidRequest):
        kernel.enable(me(p), p, user(0), Restore(5, (9,) * 32))
    assert kernel.read(me(p), p)[0] == 5
    assert kernel.enable(me(p), p, user(0), Restore(6, (9,) * 32)) == 6


def test_lose_displaces_one_process_like_system_mode(kernel, ledger):
    p, q = Proc(50), Proc(51)
    ledger.run(50, 0)
    ledger.run(51, 0)
    gen = kernel.enable(me(p), p, user(0))
    kernel.enable(me(q), q, user(0))
    ledger.run(50, MS)
    assert kernel.lose(50) == gen + 1
    ledger.run(50, MS)
    ledger.run(51, MS)
    assert kernel.read(me(p), p) == (gen + 1, (200_000,) + (0,) * 31)  # frozen when lost
    assert kernel.read(me(q), q)[1][0] == 200_000  # the other one counts on
    assert kernel.view(50).state is State.LOST
    with pytest.raises(NotInUse):
        kernel.lose(50)
    assert kernel.enable(me(p), p, user(0)) == gen + 2


def test_setevctrl_after_release_counts_again_from_zero_under_a_new_generation(kernel, ledger):
    """PAPI's IRIX substrate: PAPI_stop is PIOCRELEVCTRS, PAPI_start (and the
    second half of PAPI_reset) is PIOCSETEVCTRL on the same descriptor."""
    p = Proc(60)
    ledger.run(60, 0)
    gen = kernel.enable(me(p), p, user(0, 0))
    ledger.run(60, MS)
    kernel.release(me(p), p)
    ledger.run(60, 5 * MS)  # not counted: released
    restarted = kernel.set_control(me(p), p, user(0, 1))
    assert restarted == gen + 1
    assert kernel.control(me(p), p) == (restarted, user(0, 1))
    ledger.run(60, MS)
    generation, counts = kernel.read(me(p), p)
    assert generation == restarted
    assert counts[0] == 200_000  # 1 ms since the restart, nothing from before the release
    assert counts[16] == 160_000  # event 17 at 0.8 per cycle
    assert kernel.view(60).state is State.ENABLED


def test_restart_generation_is_above_every_earlier_one(kernel, ledger):
    p = Proc(61)
    ledger.run(61, 0)
    seen = [kernel.enable(me(p), p, user(0), Restore(9, (0,) * 32))]
    for _ in range(3):
        seen.append(kernel.set_control(me(p), p, user(1)))
        kernel.release(me(p), p)
        seen.append(kernel.set_control(me(p), p, user(0)))
        kernel.release(me(p), p)
    assert seen == sorted(set(seen)) and seen[0] == 9


def test_second_release_succeeds_and_changes_nothing(kernel, ledger):
    p = Proc(62)
    ledger.run(62, 0)
    gen = kernel.enable(me(p), p, user(0))
    ledger.run(62, MS)
    kernel.release(me(p), p)
    before = kernel.view(62)
    ledger.run(62, MS)
    kernel.release(me(p), p)
    kernel.release(me(p), p)
    assert kernel.read(me(p), p) == (gen, (200_000,) + (0,) * 31)
    assert kernel.view(62).state is State.RELEASED
    assert kernel.view(62).generation == before.generation


def test_getevctrl_after_release_is_einval_so_papi_reacquires(kernel, ledger):
    """IRIX answered PIOCGETEVCTRL only while counters were enabled; PAPI's
    init probes it and acquires with PIOCENEVCTRS when it fails."""
    p = Proc(63)
    ledger.run(63, 0)
    gen = kernel.enable(me(p), p, user(0))
    kernel.release(me(p), p)
    with pytest.raises(NotInUse):
        kernel.control(me(p), p)
    assert kernel.enable(me(p), p, user(0)) == gen + 1


def test_restart_refusals_change_nothing(kernel, ledger):
    p, root = Proc(64), Proc(1, uid=0)
    ledger.run(64, 0)
    ledger.run(1, 0)
    gen = kernel.enable(me(p), p, user(0))
    ledger.run(64, MS)
    kernel.release(me(p), p)
    with pytest.raises(InvalidRequest):
        kernel.set_control(me(p), p, user(99))
    with pytest.raises(NotPermitted):
        kernel.set_control(me(p), p, CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_K)}))
    kernel.enable_system(me(root), CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_K)}))
    with pytest.raises(CountersBusy):
        kernel.set_control(me(p), p, user(0))
    kernel.release_system(me(root))
    assert kernel.read(me(p), p) == (gen, (200_000,) + (0,) * 31)
    assert kernel.view(64).state is State.RELEASED
    assert kernel.set_control(me(p), p, user(0)) == gen + 1


def test_setevctrl_stays_einval_when_counters_were_lost_or_never_acquired(kernel, ledger):
    p, parent = Proc(65), Proc(66)
    ledger.run(65, 0)
    ledger.run(66, 0)
    kernel.enable(me(p), p, user(0))
    kernel.lose(65)
    with pytest.raises(NotInUse):
        kernel.set_control(me(p), p, user(0))
    with pytest.raises(NoSuchProcess):  # never acquired: no counter structure
        kernel.set_control(me(parent), parent, user(0))
    kernel.save_child_counts(me(parent), parent, 67)  # a record that never counted
    with pytest.raises(NotInUse):
        kernel.set_control(me(parent), parent, user(0))
    with pytest.raises(NotInUse):
        kernel.release(me(parent), parent)


def test_ended_threads_are_listed_with_their_time_and_the_main_thread_takes_the_rest(kernel, ledger):
    p = Proc(70)
    ledger.run(70, 0)
    kernel.enable(me(p), p, user(0))
    assert kernel.threads(70) == []  # one thread: nothing to share out
    ledger.run(70, 9 * MS, 2 * MS)
    kernel.thread_exited(70, 71, (3 * MS, MS))
    kernel.thread_exited(70, 70, (9 * MS, 2 * MS))  # the main thread's end is the process's
    kernel.catch_up([70])
    assert kernel.threads(70) == [(71, 3 * MS, MS), (70, 6 * MS, MS)]
    kernel.release(me(p), p)
    kernel.thread_exited(70, 72, (MS, 0))  # no longer counting: not listed
    assert [tid for tid, _, _ in kernel.threads(70)] == [71, 70]


def test_a_processes_thread_list_is_bounded(kernel, ledger):
    from hwperfd.counters.kernel import MAX_DESCENDANTS

    p = Proc(80)
    ledger.run(80, 0)
    kernel.enable(me(p), p, user(0))
    for tid in range(1000, 1000 + 3 * MAX_DESCENDANTS):
        kernel.thread_exited(80, tid, (2, 1))
    listed = kernel.threads(80)
    assert len(listed) == MAX_DESCENDANTS + 1  # the bound, then the main thread
    assert listed[-2] == (0, 2 * (2 * MAX_DESCENDANTS + 1), 2 * MAX_DESCENDANTS + 1)  # the rest, as tid 0


def ordered_kernel(ledger, events):
    """A kernel whose raised signals and ended signals land in one list, in order."""
    return CounterKernel(
        CpuSet(2, "r10000", 200), ledger,
        signal=lambda owed: events.append(("raise", owed.pid, owed.signal, owed.count)),
        cancel=lambda pid, sig, tid: events.append(("end", pid, sig, tid)),
    )  # fmt: skip


def test_a_release_raises_what_its_catch_up_finds_before_it_ends_the_signal(ledger):
    """IRIX sent each overflow's signal at its interrupt, so all of them came
    before a later release returned: the release catches up first, and only
    then ends the signal (what is owed goes before the answer, none after)."""
    events = []
    kernel = ordered_kernel(ledger, events)
    p = Proc(70)
    ledger.run(70, 0)
    kernel.enable(me(p), p, CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_U, True)}, {0: 200_000}, signal=10))
    ledger.run(70, 5 * MS // 2)
    kernel.release(me(p), p)
    assert events == [("raise", 70, 10, 2), ("end", 70, 10, 0)]


def test_a_control_with_another_signal_raises_the_old_ones_found_before_ending_it(ledger):
    events = []
    kernel = ordered_kernel(ledger, events)
    p = Proc(71)
    ledger.run(71, 0)
    kernel.enable(me(p), p, CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_U, True)}, {0: 200_000}, signal=10))
    ledger.run(71, 3 * MS)
    kernel.set_control(me(p), p, CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_U, True)}, {0: 200_000}, signal=12))
    assert events == [("raise", 71, 10, 3), ("end", 71, 10, 0)]


def test_releasing_system_mode_raises_what_its_catch_up_finds_before_ending_the_holders_signal(ledger):
    events = []
    kernel = ordered_kernel(ledger, events)
    root = Proc(72, uid=0)
    kernel.enable_system(me(root), CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_K, True)}, {0: 200_000}, signal=10))
    ledger.cpus[0] = (0, 2 * MS)
    kernel.release_system(me(root))
    assert [e[0] for e in events] == ["raise", "end"] and events[-1] == ("end", 72, 10, 0)
