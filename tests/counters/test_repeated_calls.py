"""A set-up call the old daemon wrote and died before answering, repeated on
the new one (lib/reconnect.h repeats it): answered as the old daemon would
have, once, and only for the caller that made it (docs/restart.md)."""

from __future__ import annotations

import pytest

from hwperfd.counters.durable import PROCESS, DurableSetup
from hwperfd.counters.errors import CountersBusy
from hwperfd.counters.kernel import Caller, CounterKernel
from hwperfd.counters.request import CounterRequest
from hwperfd.counters.store import SetupStore
from hwperfd.cpu.pmu import CpuSet
from structs import HWPERF_CNTEN_K, HWPERF_CNTEN_U, spec_word
from tests.counters.test_kernel import MS, Ledger, Proc, me, user

START = 777


class Started(Proc):
    start = START


def restarted(tmp_path, kernel: CounterKernel, ledger: Ledger, pids) -> CounterKernel:
    """``kernel``'s set-up written to a store, then put back into a new kernel."""
    store = SetupStore(str(tmp_path / "setup.sqlite"))
    DurableSetup(store, kernel, lambda pid: START, host_time=False).sync(pids)
    store.close()
    fresh = CounterKernel(CpuSet(2, "r10000", 200), ledger)
    store = SetupStore(str(tmp_path / "setup.sqlite"))
    found = DurableSetup(store, fresh, lambda pid: START, host_time=False).restore()
    assert found.refused == 0
    store.close()
    return fresh


class Table(Ledger):
    """The test's time source, which a restart resumes as the manual clock does."""

    def resume_line(self, pid, seen):
        pass


@pytest.fixture
def ledger():
    return Table()


def new_kernel(ledger):
    return CounterKernel(CpuSet(2, "r10000", 200), ledger)


def enabled(ledger) -> tuple[CounterKernel, Started, int]:
    """A kernel in which pid 10 enabled cycles on itself: (kernel, process, generation)."""
    kernel, p = new_kernel(ledger), Started(10)
    ledger.run(10, 0)
    return kernel, p, kernel.enable(me(p), p, user(0))


def test_an_enable_repeated_after_a_restart_gets_its_generation_once_then_ebusy(tmp_path, ledger):
    kernel, p, generation = enabled(ledger)
    ledger.run(10, 5 * MS)
    kernel = restarted(tmp_path, kernel, ledger, [10])
    assert kernel.enable(me(p), p, user(0)) == generation
    assert kernel.read(me(p), p) == (generation, (1_000_000,) + (0,) * 31)  # counting went on
    with pytest.raises(CountersBusy):
        kernel.enable(me(p), p, user(0))


def test_an_enable_after_a_restart_is_ebusy_when_not_the_same_call_by_the_same_caller(tmp_path, ledger):
    kernel, p, _ = enabled(ledger)
    kernel = restarted(tmp_path, kernel, ledger, [10])
    with pytest.raises(CountersBusy):
        kernel.enable(me(p), p, user(1))  # another request: not a repeat
    with pytest.raises(CountersBusy):
        kernel.enable(me(p), p, user(0))  # the chance went with the first call
    root_parent = Caller(11, 0, 0, 11)
    kernel = restarted(tmp_path, kernel, ledger, [10])
    with pytest.raises(CountersBusy):
        kernel.enable(root_parent, p, user(0))  # another caller
    assert kernel.enable(me(p), p, user(0)) > 0  # its maker's first call still is


def test_a_read_first_after_a_restart_ends_the_chance_of_a_repeat(tmp_path, ledger):
    kernel, p, _ = enabled(ledger)
    kernel = restarted(tmp_path, kernel, ledger, [10])
    kernel.read(me(p), p)
    with pytest.raises(CountersBusy):
        kernel.enable(me(p), p, user(0))


def test_a_control_change_repeated_after_a_restart_keeps_its_counts_and_generation(tmp_path, ledger):
    kernel, p, _ = enabled(ledger)
    ledger.run(10, 5 * MS)
    changed = kernel.set_control(me(p), p, user(0, 0))
    ledger.run(10, 2 * MS)
    kernel = restarted(tmp_path, kernel, ledger, [10])
    assert kernel.set_control(me(p), p, user(0, 0)) == changed
    generation, counts = kernel.read(me(p), p)
    assert (generation, counts[0], counts[16]) == (changed, 400_000, 400_000)  # not restarted at zero
    assert kernel.set_control(me(p), p, user(0, 0)) == changed + 2  # a second one is a new change


def test_a_control_change_after_a_restart_that_the_old_daemon_never_wrote_is_made(tmp_path, ledger):
    kernel, p, generation = enabled(ledger)
    ledger.run(10, 5 * MS)
    kernel = restarted(tmp_path, kernel, ledger, [10])
    # The same request as the enable: the record says an enable made it, so
    # this control change is new, and restarts the counts two generations up.
    assert kernel.set_control(me(p), p, user(0)) == generation + 2
    assert kernel.read(me(p), p) == (generation + 2, (0,) * 32)


def test_a_later_process_at_the_pid_repeats_nothing_after_a_restart(tmp_path, ledger):
    kernel, p, _ = enabled(ledger)
    kernel.release(me(p), p)
    assert kernel.enable(me(p), p, user(0)) == 2
    kernel = restarted(tmp_path, kernel, ledger, [10])
    later = Proc(10)
    later.start = START + 1  # the pid came round to another process before its end was heard
    ledger.run(10, 3 * MS)
    assert kernel.enable(me(later), later, user(0)) == 1  # its own first enable, counting from now
    assert kernel.read(me(later), later) == (1, (0,) * 32)

def test_system_mode_repeated_by_its_holder_after_a_restart_gets_its_generation_once(tmp_path, ledger):
    kernel = new_kernel(ledger)
    holder = Caller(20, 0, 0, 20, START)
    request = CounterRequest.build({0: spec_word(0, HWPERF_CNTEN_K | HWPERF_CNTEN_U)})
    generation = kernel.enable_system(holder, request)
    kernel = restarted(tmp_path, kernel, ledger, [])
    with pytest.raises(CountersBusy):
        kernel.enable_system(Caller(21, 0, 0, 21, START), request)  # another caller's first call
    assert kernel.enable_system(holder, request) == generation  # the holder's first
    with pytest.raises(CountersBusy):
        kernel.enable_system(holder, request)
    kernel = restarted(tmp_path, kernel, ledger, [])
    with pytest.raises(CountersBusy):
        kernel.enable_system(holder, CounterRequest.build({0: spec_word(1, HWPERF_CNTEN_K)}))
    with pytest.raises(CountersBusy):
        kernel.enable_system(holder, request)  # the chance went with its first call
    kernel = restarted(tmp_path, kernel, ledger, [])
    kernel.release_system(Caller(21, 0, 0, 21, START))
    again = kernel.enable_system(holder, request)  # held anew: no longer the one put back
    assert again > generation
    with pytest.raises(CountersBusy):
        kernel.enable_system(holder, request)


def _stored_pids(store: SetupStore) -> set[int]:
    return {rec.pid for rec in store.load() if rec.kind == PROCESS}


def test_a_process_whose_start_cannot_be_read_now_is_written_later_and_the_rest_at_once(tmp_path, ledger):
    """A stuck /proc read (``BlockingIOError``) leaves that one process for
    the next write: the others are stored, and its record is not taken as
    written."""
    kernel = new_kernel(ledger)
    for pid in (10, 11):
        ledger.run(pid, 0)
        kernel.enable(me(Proc(pid)), Proc(pid), user(0))
    stuck = {10}

    def read_start(pid):
        if pid in stuck:
            raise BlockingIOError(pid)
        return START

    store = SetupStore(str(tmp_path / "setup.sqlite"))
    durable = DurableSetup(store, kernel, read_start, host_time=False)
    assert durable.sync({10, 11}) == {10}
    assert _stored_pids(store) == {11}
    stuck.clear()
    assert durable.sync({10}) == set()
    assert _stored_pids(store) == {10, 11}
    store.close()


def test_a_write_the_store_failed_is_made_again_by_the_next_sync(tmp_path, ledger):
    import sqlite3

    kernel, p, _ = enabled(ledger)
    store = SetupStore(str(tmp_path / "setup.sqlite"))
    durable = DurableSetup(store, kernel, lambda pid: START, host_time=False)
    real_write = store.write
    failing = [True]

    def write(records, drop=()):
        if failing.pop() if failing else False:
            raise sqlite3.OperationalError("disk I/O error")
        real_write(records, drop)

    store.write = write
    with pytest.raises(sqlite3.OperationalError):
        durable.sync({p.pid})
    assert _stored_pids(store) == set()
    durable.sync({p.pid})
    assert _stored_pids(store) == {p.pid}
    store.close()
