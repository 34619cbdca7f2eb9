"""Where CPU time comes from: the host (real) or the tests (manual).

The counter kernel asks a clock how much user and system time a process (or
an emulated CPU) has used in all; counts are computed lazily from that, so an
idle process costs nothing.  Under the manual clock time moves only when
told, so every count is predictable.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from hwperfd.host import processes

CpuTimes = tuple[int, int]


class ManualClock:
    """CPU time moves only through ``advance`` and ``advance_cpu``."""

    name = "manual"

    def __init__(self, cpus: int) -> None:
        self._processes: dict[int, CpuTimes] = {}
        self._threads: dict[int, CpuTimes] = {}  # tid -> times; a process's main thread has tid == pid
        self._cpus: list[CpuTimes] = [(0, 0)] * cpus

    def process_times(self, pid: int) -> CpuTimes | None:
        times = self._processes.get(pid)
        if times is not None:
            return times
        return (0, 0) if processes.exists(pid) else None

    def cpu_times(self, cpu: int) -> CpuTimes:
        return self._cpus[cpu]

    def thread_times(self, pid: int, tid: int) -> CpuTimes | None:
        times = self._threads.get(tid)
        if times is not None:
            return times
        return (0, 0) if processes.read_thread_start(pid, tid) is not None else None

    def advance(self, pid: int, user_ns: int, system_ns: int = 0) -> None:
        """``pid`` ran this long: its main thread did."""
        self.advance_thread(pid, pid, user_ns, system_ns)

    def advance_thread(self, pid: int, tid: int, user_ns: int, system_ns: int = 0) -> None:
        """Thread ``tid`` of ``pid`` ran this long: so did its process."""
        if user_ns < 0 or system_ns < 0:
            raise ValueError("time only moves forward")
        for table, key in ((self._processes, pid), (self._threads, tid)):
            user, system = table.get(key, (0, 0))
            table[key] = (user + user_ns, system + system_ns)

    def advance_cpu(self, cpu: int, user_ns: int, system_ns: int = 0) -> None:
        if user_ns < 0 or system_ns < 0:
            raise ValueError("time only moves forward")
        if not 0 <= cpu < len(self._cpus):
            raise ValueError(f"no CPU {cpu}")
        user, system = self._cpus[cpu]
        self._cpus[cpu] = (user + user_ns, system + system_ns)

    def forget(self, pid: int) -> None:
        self._processes.pop(pid, None)
        self._threads.pop(pid, None)

    def forget_thread(self, tid: int) -> None:
        self._threads.pop(tid, None)

    def thread_exited(self, pid: int, tid: int, user_ns: int, system_ns: int) -> None:
        """Manual time is exact already; the host's accounting is ignored."""

    def tsc_ns(self, cpu: int) -> int:
        """The TSC's time base: a manual CPU has no idle time, so its TSC
        moves exactly with ``advance_cpu`` (user + system)."""
        user, system = self._cpus[cpu]
        return user + system

    def exited(self, pid: int, user_ns: int, system_ns: int) -> None:
        """Manual time is exact already; the host's accounting is ignored."""


class RealClock:
    """The host's CPU time.  Emulated CPU i takes an equal share of host CPU
    ``i % host_cpus``, so N emulated CPUs together see the whole machine."""

    name = "real"

    FINALS_KEPT = 4096  # exit records of processes nobody has asked about yet

    def __init__(self, cpus: int) -> None:
        self._cpus = cpus
        self._final: OrderedDict[int, CpuTimes] = OrderedDict()
        self._ticks: dict[int, tuple[int, tuple[int, int]]] = {}  # pid -> (read at, (utime, stime))
        self._held: set[int] = set()  # pids with a state page: their ratio moves only in refresh_split
        self._thread_splits: dict[int, tuple[int, int]] = {}  # tid -> (utime, stime) a thread's page shows
        self._thread_final: OrderedDict[tuple[int, int], CpuTimes] = OrderedDict()  # (pid, tid) -> exit record

    def process_times(self, pid: int) -> CpuTimes | None:
        """Exact total now (one clock_gettime), split user/system in the ratio
        stat gave at most a tick ago: stat only changes a tick at a time, so
        reading it on every counter read would buy nothing.  Once a process
        has exited, the kernel's exit accounting is its last word."""
        if pid in self._final:
            return self._exited_times(pid)
        now = time.monotonic_ns()
        cached = self._ticks.get(pid)
        if cached is None or (now - cached[0] >= processes.TICK_NS and pid not in self._held):
            ticks = processes.read_cpu_ticks(pid)
            if ticks is None:
                return None
            self._ticks[pid] = (now, ticks)
            if len(self._ticks) > self.FINALS_KEPT:
                self._drop_stale_ticks(now)
        else:
            ticks = cached[1]
        times = processes.cpu_times_from_ticks(pid, *ticks)
        return None if times is None else (times.user_ns, times.system_ns)

    def _drop_stale_ticks(self, now: int) -> None:
        """The cache of stat's ratios holds any pid a caller named (a refused
        request too): past its bound, entries a tick old go - they would be
        read again anyway - except those a state page holds."""
        stale = [p for p, (at, _) in self._ticks.items() if now - at >= processes.TICK_NS and p not in self._held]
        for pid in stale:
            del self._ticks[pid]

    def _exited_times(self, pid: int) -> CpuTimes | None:
        final = self._final[pid]
        info = processes.read_process(pid)
        if info is None:
            return final
        if info.zombie:
            return self._zombie_times(pid, final)
        # A live process under that pid is a new one: the record was its predecessor's.
        del self._final[pid]
        return self.process_times(pid)

    def _zombie_times(self, pid: int, final: CpuTimes) -> CpuTimes:
        """A zombie's CPU clock is final and exact, the rest of its exit
        included, which its exit record (made earlier) is not: the total
        comes from the clock, divided as the record divides it.  Kept, so
        the process's time never moves back once its parent reaps it."""
        total = processes.read_cpu_total(pid)
        user, system = final
        if total is None or total <= user + system:
            return final
        if user + system == 0:
            times = (total, 0)
        else:
            part = total * system // (user + system)
            times = (total - part, part)
        self._final[pid] = times
        return times

    def exited(self, pid: int, user_ns: int, system_ns: int) -> None:
        """The kernel's exit accounting for ``pid``: its last word on CPU
        time, which outlives the /proc entry a parent may reap at once.
        Kept for every exit, as it may arrive before the fork that makes the
        process interesting is applied."""
        self._final[pid] = (user_ns, system_ns)
        self._final.move_to_end(pid)
        while len(self._final) > self.FINALS_KEPT:
            self._final.popitem(last=False)

    def cpu_times(self, cpu: int) -> CpuTimes:
        host = processes.read_system_cpu_times()
        index = cpu % len(host)
        sharing = len(range(index, self._cpus, len(host)))
        return host[index].user_ns // sharing, host[index].system_ns // sharing

    def tsc_ns(self, cpu: int) -> int:
        """The TSC's time base: wall time since the host booted (CLOCK_MONOTONIC),
        as a TSC starts at 0 at boot (pctr(4)); the same on every CPU."""
        return time.monotonic_ns()

    def thread_times(self, pid: int, tid: int) -> CpuTimes | None:
        """One thread's exact run time, split as its own stat splits it (as
        its state page shows, while it has one: ``hold_thread_split``)."""
        times = processes.read_thread_cpu_times(pid, tid, self._thread_splits.get(tid))
        if times is None:
            # Gone: its exit record, if taskstats has told us, is its last word.
            return self._thread_final.get((pid, tid))
        return times.user_ns, times.system_ns

    def thread_exited(self, pid: int, tid: int, user_ns: int, system_ns: int) -> None:
        """The kernel's exit accounting for thread ``tid`` of ``pid``: the
        time it ran after the daemon last looked would otherwise go with its
        /proc entry.  The last ``FINALS_KEPT`` are kept."""
        self._thread_final[(pid, tid)] = (user_ns, system_ns)
        self._thread_final.move_to_end((pid, tid))
        while len(self._thread_final) > self.FINALS_KEPT:
            self._thread_final.popitem(last=False)

    def thread_split(self, tid: int) -> tuple[int, int] | None:
        """The (utime, stime) ratio held for thread ``tid``, if any."""
        return self._thread_splits.get(tid)

    def hold_thread_split(self, tid: int, held: bool) -> tuple[int, int] | None:
        """Split thread ``tid``'s time in its stat's ratio as of now until
        this is called again, as a reader of its state page splits it (the
        reader cannot read stat without a system call's worth of parsing);
        returns the (utime, stime) held.  False: follow stat again."""
        self._thread_splits.pop(tid, None)
        if not held:
            return None
        ticks = processes.read_thread_cpu_ticks(tid)
        if ticks is not None:
            self._thread_splits[tid] = ticks
        return ticks

    def forget(self, pid: int) -> None:
        self._final.pop(pid, None)
        self._ticks.pop(pid, None)
        self._held.discard(pid)

    def forget_thread(self, tid: int) -> None:
        self._thread_splits.pop(tid, None)

    def hold_split(self, pid: int, held: bool) -> None:
        """A process that reads its own counts from a state page splits its
        CPU time in the ratio the page shows; the daemon must split in the
        same one until it writes the page again (``refresh_split``), or a read
        through it could fall below a read from the page a moment earlier."""
        if held:
            self._held.add(pid)
        else:
            self._held.discard(pid)

    def refresh_split(self, pid: int) -> tuple[int, int] | None:
        """Take stat's ratio anew, if the one held is a tick old (after
        counting the time so far in it); returns the (utime, stime) ticks
        now used for ``pid``."""
        if pid in self._final:
            return None
        now = time.monotonic_ns()
        cached = self._ticks.get(pid)
        if cached is None or now - cached[0] >= processes.TICK_NS:
            ticks = processes.read_cpu_ticks(pid)
            if ticks is not None:
                self._ticks[pid] = (now, ticks)
        return self.split_of(pid)

    def split_due(self, pid: int) -> bool:
        """The ratio held for ``pid`` is a tick old (or there is none yet)."""
        cached = self._ticks.get(pid)
        return cached is None or time.monotonic_ns() - cached[0] >= processes.TICK_NS

    def split_of(self, pid: int) -> tuple[int, int] | None:
        cached = self._ticks.get(pid)
        return None if cached is None else cached[1]
